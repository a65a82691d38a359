//! Abuse while a recovery runs: an unprivileged local user floods both sockets with every
//! kind of bad connection while a real recovery waits for its consumer. The recovery must
//! complete in about its normal time, repochd's memory must stay bounded, every abusive
//! connection must be closed within its deadline, and the log must stay readable.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use repoch_tests_native::*;

/// Connections of each kind the abuser opens on each socket.
const FLOOD_CONNECTIONS: usize = 1000;
/// Resident memory repochd may reach under the flood.
const DAEMON_RSS_KIB_MAX: u64 = 64 * 1024;
/// How long after the real consumer starts the grant must be dispatched, flood or not
/// (an unflooded recovery takes about 0.2 s).
const GRANT_SECONDS_MAX: u64 = 5;
/// How long repochd may keep any abusive connection open: the handshake deadline
/// (HANDSHAKE_SECONDS_MAX, 5 s) plus scheduling margin under load.
const ABUSE_CLOSE_SECONDS_MAX: f64 = 8.0;
/// Log lines the whole flood may produce: warnings are rate-limited.
const LOG_LINES_MAX: usize = 300;

/// The abuser: opens, on each socket, `n` idle connections, `n/10` drip-feeders (a byte a
/// second of a frame that declares 64 KiB), and `n/10` each of an oversized length, a zero
/// length, garbage, and a truncated frame; says "flooding"; then waits for repochd to close
/// each one. Prints one JSON object per socket: how many connected, how many the kernel
/// refused (a full backlog), the slowest close in seconds, and how many were still open.
const ABUSER: &str = r#"
import json, os, resource, selectors, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
paths, n, limit = sys.argv[1:3], int(sys.argv[3]), float(sys.argv[4])
kinds = [("idle", n, b""), ("drip", n // 10, b"\x00\x01\x00\x00"),
         ("oversized", n // 10, b"\xff\xff\xff\xff"), ("zero", n // 10, b"\x00\x00\x00\x00"),
         ("garbage", n // 10, os.urandom(64)), ("truncated", n // 10, b"\x00\x00\x00\x64\x81\x01")]
sel, opened, stats, start = selectors.DefaultSelector(), {}, {}, time.monotonic()
for path in paths:
    stats[path] = {"socket": path, "phase": "done", "opened": 0, "refused": 0,
                   "slowest_close_s": 0.0, "still_open": 0}
    for kind, count, first in kinds:
        for _ in range(count):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(path)
            except OSError:
                stats[path]["refused"] += 1
                s.close()
                continue
            try:
                if first:
                    s.send(first[:1] if kind == "drip" else first)
            except OSError:
                pass
            stats[path]["opened"] += 1
            opened[s.fileno()] = (s, kind, time.monotonic(), path)
            sel.register(s, selectors.EVENT_READ)
print(json.dumps({"phase": "flooding", "opened": len(opened)}), flush=True)
last_drip = time.monotonic()
while opened and time.monotonic() - start < limit:
    for key, _ in sel.select(timeout=0.2):
        s, kind, t0, path = opened[key.fd]
        try:
            data = s.recv(65536)
        except OSError:
            data = b""
        if not data:
            st = stats[path]
            st["slowest_close_s"] = max(st["slowest_close_s"], round(time.monotonic() - t0, 3))
            sel.unregister(s)
            del opened[key.fd]
            s.close()
    if time.monotonic() - last_drip >= 1.0:
        last_drip = time.monotonic()
        for s, kind, _, _ in list(opened.values()):
            if kind == "drip":
                try:
                    s.send(b"\x00")
                except OSError:
                    pass
for s, kind, t0, path in opened.values():
    stats[path]["still_open"] += 1
for st in stats.values():
    print(json.dumps(st), flush=True)
"#;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

pub(crate) fn a_flood_of_hostile_connections_from_another_user_neither_delays_nor_touches_a_real_recovery(
) {
    // A recovery waits for its consumer. As uid 65534, 1,000 idle connections and 100 each
    // of drip-feeders, oversized and zero lengths, garbage and truncated frames hit the
    // admin socket (its mode opened for the test: repochd itself must refuse) and the grant
    // socket. Then the real consumer connects. Oracles: the grant within GRANT_SECONDS_MAX,
    // the log exactly genesis/intent/consume/receipt, every abusive connection closed within
    // ABUSE_CLOSE_SECONDS_MAX, repochd's RSS under DAEMON_RSS_KIB_MAX, its log bounded.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = s.daemon();
    open_to_all(&s);
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(admin_socket(&s), std::fs::Permissions::from_mode(0o666)).unwrap();
    let rec = recover_bg(&s, &id[..6], 60);
    d.wait_log("waiting for the consumer");
    let script = s.path("abuser.py");
    std::fs::write(&script, ABUSER).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut abuser = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
        ])
        .arg(&script)
        .arg(admin_socket(&s))
        .arg(s.grant_socket())
        .arg(FLOOD_CONNECTIONS.to_string())
        .arg((ABUSE_CLOSE_SECONDS_MAX * 2.0).to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let abuser_pid = abuser.id();
    let _reap = scopeguard(abuser_pid);
    // Wait until both sockets are being flooded.
    let mut out = std::io::BufReader::new(abuser.stdout.take().unwrap());
    let mut lines = Vec::new();
    let mut l = String::new();
    assert!(
        std::io::BufRead::read_line(&mut out, &mut l).unwrap() > 0 && l.contains("flooding"),
        "the abuser did not start: {l}"
    );
    lines.push(l);
    let rss_flooded = rss_kib(d.child.id());
    let started = Instant::now();
    let c = run_consumer(&s, &id);
    let granted_after = started.elapsed();
    let r = finish(rec);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    assert_eq!(c.code, Outcome::Success, "{}", c.stdout);
    assert!(
        granted_after < Duration::from_secs(GRANT_SECONDS_MAX),
        "the flood delayed the recovery: {granted_after:?}"
    );
    for l in std::io::BufRead::lines(out) {
        lines.push(l.unwrap());
    }
    let _ = abuser.wait();
    let done: Vec<serde_json::Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|j| j["phase"] == "done")
        .collect();
    assert_eq!(done.len(), 2, "{lines:?}");
    for j in &done {
        assert_eq!(j["still_open"], 0, "repochd kept abusive connections: {j}");
        assert!(
            j["slowest_close_s"].as_f64().unwrap() <= ABUSE_CLOSE_SECONDS_MAX,
            "an abusive connection outlived its deadline: {j}"
        );
    }
    let rss = rss_kib(d.child.id()).max(rss_flooded);
    assert!(rss < DAEMON_RSS_KIB_MAX, "repochd grew to {rss} KiB");
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
    let log = d.wait_log("issuance ended");
    assert!(
        log.lines().count() <= LOG_LINES_MAX,
        "{} log lines: warnings must be rate-limited; the first: {:?}",
        log.lines().count(),
        log.lines().take(12).collect::<Vec<_>>()
    );
    eprintln!("abuse: {lines:?}; granted {granted_after:?} after the consumer started; repochd RSS {rss} KiB; {} log lines", log.lines().count());
}

/// Kills the abuser if the test fails before it ends.
struct Reap(u32);
impl Drop for Reap {
    fn drop(&mut self) {
        kill_pid(self.0);
    }
}
fn scopeguard(pid: u32) -> Reap {
    Reap(pid)
}

fn run_consumer(s: &Sandbox, id: &str) -> Run {
    s.consumer(&id[..6], "consumer.key", "grant.cbor", &[])
        .stdin(Stdio::null())
        .output()
        .unwrap()
        .into()
}

fn admin_socket(s: &Sandbox) -> std::path::PathBuf {
    s.grant_socket().with_file_name("admin.sock")
}

/// Holds `n` descriptors (dups of /dev/null) and sleeps; prints its pid when ready.
const FD_HOARDER: &str = r#"
import os, resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
fd = os.open("/dev/null", os.O_RDONLY)
held = [os.dup(fd) for _ in range(int(sys.argv[1]))]
print(os.getpid(), flush=True)
while True:
    time.sleep(1)
"#;

/// Descriptors the hoarder holds: past the old per-process scan bound (16,384), within the
/// hard limit these machines give (20,000).
const HOARDED_FDS: u64 = 17_000;

pub(crate) fn another_user_holding_many_descriptors_cannot_deny_a_recovery() {
    // The consumer's sole-holder check and the lock and socket holder searches walk every
    // process's descriptors. As uid 65534, one process holds 17,000 (past the old bound of
    // 16,384 per process: the walk then failed, and the real consumer was rejected
    // "more than 16384 descriptors"). The recovery must be granted. The bound is now the
    // kernel's own (fs.nr_open), which no process exceeds.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let c = python_as_nobody(&s, "hoarder.py", FD_HOARDER, HOARDED_FDS);
    let _hoarder = spawn_ready(c);
    a_recovery_is_granted(&s, &id, 20);
}

/// Parks N zombies (children that exited and are never waited for: a pid and a `/proc`
/// entry each, almost no memory), raising its own soft process limit to the hard one;
/// prints its pid; on SIGTERM waits for them all and exits.
const ZOMBIE_PARKER: &str = r#"
import os, resource, signal, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
resource.setrlimit(resource.RLIMIT_NPROC, (hard, hard))
def reap(*_):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        while True:
            os.waitpid(-1, 0)
    except ChildProcessError:
        os._exit(0)
signal.signal(signal.SIGTERM, reap)
for _ in range(int(sys.argv[1])):
    if os.fork() == 0:
        os._exit(0)
print(os.getpid(), flush=True)
while True:
    time.sleep(1)
"#;

/// Processes the parker leaves: past the old bound of one walk of `/proc` (65,536 pids).
const PARKED_PROCESSES: u64 = 66_000;
/// `kernel.pid_max` during that test: systemd's default on 64-bit hosts (4,194,304,
/// `/usr/lib/sysctl.d/50-pid-max.conf`), where any user may hold that many processes.
const PID_MAX_SYSTEMD: u64 = 1 << 22;

/// `kernel.pid_max` raised for one test, restored on drop.
struct PidMax(String);

impl PidMax {
    fn at_least(n: u64) -> PidMax {
        const P: &str = "/proc/sys/kernel/pid_max";
        let old = std::fs::read_to_string(P).unwrap().trim().to_owned();
        if old.parse::<u64>().unwrap() < n {
            std::fs::write(P, n.to_string()).unwrap();
        }
        PidMax(old)
    }
}

impl Drop for PidMax {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/kernel/pid_max", &self.0);
    }
}

/// The parker: asked to reap its zombies on drop (SIGTERM), killed if it has not within
/// a minute (init then reaps them).
struct Parker(std::process::Child);

impl Drop for Parker {
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_child(&self.0);
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn another_user_parking_more_processes_than_a_walk_once_allowed_cannot_deny_a_recovery()
{
    // The consumer's sole-holder check and the executable scan walk every pid in /proc.
    // As uid 65534, one process parks 66,000 zombies (systemd raises kernel.pid_max to
    // 4,194,304, and a user's process limit is in the tens of thousands): past the walk's
    // old bound of 65,536 pids the walk failed, and the real consumer was rejected
    // ("/proc: more than 65536 processes"). The recovery must be granted.
    require_root!();
    let _pid_max = PidMax::at_least(PID_MAX_SYSTEMD);
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let mut c = python_as_nobody(&s, "parker.py", ZOMBIE_PARKER, PARKED_PROCESSES);
    let mut parker = Parker(c.stdout(Stdio::piped()).spawn().unwrap());
    let mut line = String::new();
    use std::io::BufRead as _;
    std::io::BufReader::new(parker.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid = line.trim().to_owned();
    assert!(!pid.is_empty(), "the parker exited before it was ready");
    // Its zombies: /proc entries whose parent (stat field 4) is the parker.
    let parked = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("stat")).is_ok_and(|st| {
                st.rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().nth(1))
                    == Some(&pid)
            })
        })
        .count();
    assert!(parked as u64 >= PARKED_PROCESSES, "only {parked} parked");
    a_recovery_is_granted(&s, &id, 60);
}

/// One process: as many descriptors as its hard limit allows (less 32), shared by N
/// threads; prints its pid and task count; sleeps until killed.
const THREADED_HOARDER: &str = r#"
import os, resource, sys, threading, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
base = os.open("/dev/null", os.O_RDONLY)
held = [os.dup(base) for _ in range(hard - 32)]
threading.stack_size(64 * 1024)
stop = threading.Event()
for _ in range(int(sys.argv[1])):
    threading.Thread(target=stop.wait, daemon=True).start()
print(os.getpid(), len(os.listdir("/proc/self/task")), flush=True)
while True:
    time.sleep(1)
"#;

/// Threads of the hoarder, each listing the same descriptor table in `/proc`.
const HOARDER_THREADS: u64 = 1000;

pub(crate) fn another_user_with_a_thousand_threads_sharing_many_descriptors_cannot_deny_a_recovery()
{
    // The consumer's sole-holder walk read every task's descriptor table, threads sharing
    // one table included: as uid 65534, one process with ~20,000 descriptors and 1,000
    // threads made each walk read 20 million links, and the real consumer was never
    // authenticated ("consumer-absent"). A process of another user can hold no copy of
    // the consumer's connection (docs/THREAT-MODEL.md), so its tables are not read.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let c = python_as_nobody(&s, "threads.py", THREADED_HOARDER, HOARDER_THREADS);
    let hoarder = spawn_ready(c);
    let tasks: u64 = hoarder.line.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(tasks > HOARDER_THREADS, "{}", hoarder.line);
    a_recovery_is_granted(&s, &id, 20);
}

/// `python3 SCRIPT ARG` as uid 65534, the script written to the sandbox as `name` and the
/// sandbox opened to that user.
fn python_as_nobody(s: &Sandbox, name: &str, script: &str, arg: u64) -> Command {
    use std::os::unix::fs::PermissionsExt as _;
    let path = s.path(name);
    std::fs::write(&path, script).unwrap();
    open_to_all(s);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "/usr/bin/python3",
    ])
    .arg(&path)
    .arg(arg.to_string());
    c
}

/// A real consumer and `repoch recover` of deployment `id` (by a 6-character prefix,
/// waiting `wait` seconds for the consumer): both exit 0, the recovery granted.
fn a_recovery_is_granted(s: &Sandbox, id: &str, wait: u64) {
    let consumer = s
        .consumer(&id[..6], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let r = run(s.recover(&id[..6], wait, &[]));
    let c = finish(consumer);
    assert_eq!(c.code, Outcome::Success, "the consumer: {}", c.stdout);
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
}

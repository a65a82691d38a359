//! Processes a test starts and always reaps: the helper, stand-in old roots, fork chains.

use std::path::Path;
use std::process::Command;

use crate::*;

/// A real process started from the helper, killed on drop.
#[derive(Debug)]
pub struct Proc {
    pub child: std::process::Child,
    /// The first line it printed (usually its pid).
    pub line: String,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.line
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {:?}", self.line))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `cmd` and waits for its first stdout line (the barrier: it is ready).
pub fn spawn_ready(mut cmd: Command) -> Proc {
    use std::io::BufRead as _;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(!line.is_empty(), "the process exited before it was ready");
    Proc {
        child,
        line: line.trim().to_owned(),
    }
}

/// How long [`exec_held`] waits for the exec to wait in the kernel.
pub const EXEC_HELD_WAIT_MS: u64 = 5_000;

/// `exe args…` started by root through `sh` (which prints its pid, then execs it), once
/// its exec waits in the kernel for repochd's exec hold to answer (its `wchan` is
/// fanotify's): repochd stopped at a barrier cannot answer, so a plain spawn would wait
/// for it. Denied, `sh` then exits with 126 (or the exec's failure).
pub fn exec_held(exe: &std::path::Path, args: &[&str]) -> Proc {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg("echo $$; exec \"$0\" \"$@\"")
        .arg(exe)
        .args(args);
    let p = spawn_ready(c);
    let pid = p.pid();
    let start = std::time::Instant::now();
    loop {
        let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        if wchan.contains("fanotify") {
            return p;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_millis(EXEC_HELD_WAIT_MS),
            "pid {pid}'s exec of {} never waited for the exec hold (wchan {wchan:?})",
            exe.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// A command run by the helper's `reaped` in a cgroup (`cgroup.procs` of `cg`), every
/// process orphaned below it reaped there: on drop, the reaper kills that cgroup, reaps
/// what it held, and exits (bounded wait; then it is killed).
#[derive(Debug)]
pub struct Reaped(Proc);

impl Drop for Reaped {
    fn drop(&mut self) {
        drop(self.0.child.stdin.take());
        for _ in 0..2000 {
            if !matches!(self.0.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// Starts `bin args` under a reaper in `cg`, ready once it printed its first line.
pub fn reaped(cg: &Cgroup, bin: &Path, args: &[&str]) -> Reaped {
    let mut c = helper(&["reaped", cg.path().join("cgroup.procs").to_str().unwrap()]);
    c.arg(bin).args(args).stdin(std::process::Stdio::piped());
    Reaped(spawn_ready(c))
}

/// `exe fork-chain` (a copy of the helper) run under a reaper in `cg`, as uid 65534 when
/// `nobody`: a chain of short-lived processes, one alive at a time.
pub fn fork_chain(cg: &Cgroup, exe: &Path, nobody: bool) -> Reaped {
    let exe = exe.to_str().expect("a UTF-8 path");
    if nobody {
        let args = [
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            exe,
            "fork-chain",
        ];
        reaped(cg, Path::new("setpriv"), &args)
    } else {
        reaped(cg, Path::new(exe), &["fork-chain"])
    }
}

pub fn helper(args: &[&str]) -> Command {
    let mut c = Command::new(bin("repoch-test-helper"));
    c.args(args);
    c
}

pub fn kill_pid(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// A TCP or UDP port free now on every address (bound on the IPv6 wildcard, then closed).
/// The ports [`free_port`] hands out: below the kernel's ephemeral range (32768–60999 by
/// default), which every outgoing connection draws its source port from. A port taken from
/// that range and released (bind to 0) was once given to a client's connection before the
/// test's server bound it: an etcd member found its peer port taken and the cluster never
/// became healthy.
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A port no listener of this machine holds (for a TCP or a UDP bind), never the same twice
/// in one test process and outside the ephemeral range: a server a test starts binds it.
pub fn free_port(udp: bool) -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let span = TEST_PORTS.end - TEST_PORTS.start;
    let _ = NEXT.compare_exchange(
        0,
        u16::try_from(crate::etcd::fastrand_u64() % u64::from(span)).unwrap(),
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span {
        let port = TEST_PORTS.start + NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let free = if udp {
            std::net::UdpSocket::bind(("::", port)).is_ok()
        } else {
            std::net::TcpListener::bind(("::", port)).is_ok()
        };
        if free {
            return port;
        }
    }
    panic!("no free port in {TEST_PORTS:?}");
}

/// Whether `pid` is stopped (state T in /proc/PID/stat).
/// Waits until the process `pid` logged `barrier NAME reached` to `log` and stopped
/// itself there (`who` names it in the failure): repochd's barriers and the consumer's.
pub fn stopped_at(log: &Path, pid: u32, barrier: &str, who: &str) {
    let line = format!("barrier {barrier} reached");
    let start = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(&line) && stopped(pid) {
            return;
        }
        assert!(
            start.elapsed().as_secs() < DAEMON_WAIT_SECONDS_MAX,
            "{who} did not stop at {barrier} (built without barriers? run `cargo test --workspace`):\n{text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

pub fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('T'))
    })
}

/// `child`'s exit status once it exits, at most `limit` from now; `None` if it still runs.
pub fn exit_within(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}

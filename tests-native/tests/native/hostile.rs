//! Hostile peers on the grant socket, as the process next door would be: a process that
//! connects and lets another speak for it, a consumer that execs something else once
//! accepted, a prefix two deployments share, and an unprivileged user who fills and holds
//! everything it can while a real recovery runs. Each burns nothing and denies nothing.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use repoch_tests_native::*;

/// Longest a hostile peer's refusal or a test's wait for a log line may take.
const REFUSAL_SECONDS_MAX: u64 = 10;
/// A recovery next to a flood must finish within this (a quiet one takes about a second).
const RECOVERY_UNDER_FLOOD_SECONDS_MAX: u64 = 10;
/// WARN lines repochd may log during a whole flood test (warnings are rate-limited).
const FLOOD_WARN_LINES_MAX: usize = 100;

fn run(mut c: Command) -> Run {
    c.stdin(Stdio::null()).output().expect("spawn").into()
}

fn finish(c: std::process::Child) -> Run {
    c.wait_with_output().unwrap().into()
}

fn records(s: &Sandbox, id: &str) -> Vec<String> {
    s.status(id).json()["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_owned())
        .collect()
}

fn recover_bg(s: &Sandbox, prefix: &str, wait: u64) -> std::process::Child {
    s.recover(prefix, wait, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A child process killed (and reaped) on drop.
struct Killed(Option<std::process::Child>);

impl Killed {
    fn take(mut self) -> std::process::Child {
        self.0.take().unwrap()
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(crate) fn wait_until(what: &str, ok: impl Fn() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed().as_secs() < REFUSAL_SECONDS_MAX,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[ignore = "needs root"]
fn a_peer_that_lets_a_child_without_the_secret_key_speak_is_rejected_and_burns_nothing() {
    // The fork/exec attack: a process connects, hands the connection to a child, and execs
    // the real repoch-consume (so SO_PEERCRED's pid shows the enrolled executable, uid and
    // cgroup). The child sends `hello` with the enrolled PUBLIC key. It cannot sign the
    // daemon's key-proof nonce: refused consumer-rejected at once, nothing written; then the
    // real consumer recovers.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = s.daemon();
    // The exec'd consumer talks to a decoy that never answers, so it only lends its pid.
    let decoy = s.path("decoy.sock");
    let _decoy = spawn_ready(helper(&["listen-unix", decoy.to_str().unwrap()]));
    let out = s.path("attacker.txt");
    let consume = bin("repoch-consume");
    let attacker = Killed(Some(
        helper(&[
            "fork-hello",
            s.grant_socket().to_str().unwrap(),
            &id[..8],
            s.path("consumer.key.pub").to_str().unwrap(),
            out.to_str().unwrap(),
            consume.to_str().unwrap(),
        ])
        .args(["receive", "--deployment", &id, "--key"])
        .arg(s.path("consumer.key"))
        .arg("--issuer-key")
        .arg(s.issuer_pub())
        .arg("--out")
        .arg(s.path("decoy.cbor"))
        .arg("--socket")
        .arg(&decoy)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap(),
    ));
    let pid = attacker.0.as_ref().unwrap().id();
    // Either repochd queued the attacker's connection or the attacker was refused.
    wait_until("the attacker's hello to be handled", || {
        std::fs::read_to_string(&out).is_ok_and(|t| t.contains("refused"))
            || std::fs::read_to_string(&d.log).is_ok_and(|l| {
                l.contains(&format!("pid={pid} ")) && l.contains("waiting for a recovery")
            })
    });
    assert_eq!(records(&s, &id), ["genesis"]);
    assert_eq!(s.status(&id).json()["epoch"], "enrolled");
    let real = s
        .consumer(&id[..8], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let r = run(s.recover(&id, 20, &[]));
    let said = std::fs::read_to_string(&out).unwrap_or_default();
    assert!(
        said.contains("refused consumer-rejected") && said.contains("key proof"),
        "the attacker was not refused consumer-rejected: {said}\nrecover: {}",
        r.stdout
    );
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
    let real = finish(real);
    assert_eq!(real.code, Outcome::Success, "{}", real.stdout);
    drop(attacker);
}

#[test]
#[ignore = "needs root"]
fn a_connection_another_process_also_holds_is_rejected_even_with_the_key() {
    // The enrolled consumer (here the helper binary, with the real secret key) connects,
    // lets a child inherit the connection, then proves its key. Right before the intent the
    // pinned peer must be the connection's only holder (its peer socket found with
    // NETLINK_SOCK_DIAG, every /proc/*/task/*/fd of its uid's and root's tasks scanned):
    // refused consumer-rejected naming the other holder; nothing is written.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll_with_helper_consumer();
    let _d = s.daemon();
    let out = s.path("shared.txt");
    let _peer = spawn_ready(helper(&[
        "hello-then-share",
        s.grant_socket().to_str().unwrap(),
        &id[..6],
        s.path("consumer.key").to_str().unwrap(),
        out.to_str().unwrap(),
    ]));
    let r = run(s.recover(&id, 3, &[]));
    // The consumer writes what it was told as the recovery ends.
    wait_until("the consumer to log its refusal", || {
        std::fs::read_to_string(&out).is_ok_and(|t| t.contains("refused"))
    });
    let said = std::fs::read_to_string(&out).unwrap_or_default();
    let child = kill_the_sharer(&said);
    assert_eq!(
        records(&s, &id),
        ["genesis"],
        "a shared connection got an intent written: {said}\n{}",
        r.stdout
    );
    assert!(
        said.contains("refused consumer-rejected")
            && said.contains(&format!("its holders are pids [{}, {child}]", _peer.pid())),
        "{said}"
    );
    assert_eq!(r.reasons(), ["consumer-rejected"], "{}", r.stdout);
    assert_eq!(s.status(&id).json()["epoch"], "enrolled");
}

/// Kills the child that shares a consumer's connection (named in the helper's log as
/// `sharing with pid N`) and returns its pid.
fn kill_the_sharer(said: &str) -> u32 {
    let child = said
        .lines()
        .find_map(|l| l.strip_prefix("sharing with pid "))
        .and_then(|p| p.trim().parse::<u32>().ok())
        .unwrap_or_else(|| panic!("no sharer named: {said}"));
    kill_pid(child);
    child
}

#[test]
#[ignore = "needs root"]
fn a_connection_shared_after_its_one_walk_is_withheld_before_the_dispatch() {
    // The consumer's connection is walked once, right before the intent; after that the
    // kernel's process events say whether a process could have come to hold a copy. Here
    // the enrolled consumer (the helper, with the real key) lets a child inherit its
    // connection while repochd stands at `before-intent`, after that walk: the fork event
    // makes the check before the dispatch walk again, which finds the child. Withheld
    // consumer-rejected; neither the grant nor the fences are sent.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll_with_helper_consumer();
    let d = AtBarrier::start(&s, "before-intent");
    let (out, cue) = (s.path("shared.txt"), s.path("cue"));
    let peer = spawn_ready(helper(&[
        "share-on-cue",
        s.grant_socket().to_str().unwrap(),
        &id[..6],
        s.path("consumer.key").to_str().unwrap(),
        out.to_str().unwrap(),
        cue.to_str().unwrap(),
    ]));
    let rec = recover_bg(&s, &id[..6], 10);
    d.reached("before-intent");
    std::fs::write(&cue, "").unwrap();
    wait_until("the consumer's child to hold its connection", || {
        std::fs::read_to_string(&out).is_ok_and(|t| t.contains("sharing with pid"))
    });
    d.cont();
    let r = finish(rec);
    let said = std::fs::read_to_string(&out).unwrap_or_default();
    let child = kill_the_sharer(&said);
    assert_eq!(r.reasons(), ["consumer-rejected"], "{}\n{said}", r.stdout);
    assert!(
        r.stdout
            .contains(&format!("its holders are pids [{}, {child}]", peer.pid())),
        "{}",
        r.stdout
    );
    assert!(
        !said.lines().any(|l| l == "grant"),
        "the grant went to a shared connection: {said}"
    );
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt", "withheld"]
    );
    // Asked for by the fork's event (or, on a loaded host, by events lost meanwhile).
    assert!(
        d.text()
            .contains("the consumer's connection walked again: "),
        "the check before the dispatch did not walk again:\n{}",
        d.text()
    );
}

#[test]
#[ignore = "needs root"]
fn a_recovery_walks_the_consumers_descriptors_once() {
    // Nothing forks near the consumer: its connection is walked once, right before the
    // intent, and the process events vouch for it before the dispatch and the last word.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = s.daemon();
    // Its parent a shell that makes no other process (the test binary, its parent
    // otherwise, makes the other tests' processes: each one is a reason to walk again).
    let direct = s.consumer(&id[..8], "consumer.key", "grant.cbor", &[]);
    let mut via_shell = Command::new("sh");
    via_shell
        .args(["-c", "\"$0\" \"$@\"; exit $?"])
        .arg(direct.get_program())
        .args(direct.get_args());
    for (k, v) in direct.get_envs() {
        match v {
            Some(v) => via_shell.env(k, v),
            None => via_shell.env_remove(k),
        };
    }
    if let Some(dir) = direct.get_current_dir() {
        via_shell.current_dir(dir);
    }
    let consumer = via_shell.stdout(Stdio::piped()).spawn().unwrap();
    let r = run(s.recover(&id, 20, &[]));
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert_eq!(finish(consumer).code, Outcome::Success);
    let log = std::fs::read_to_string(&d.log).unwrap();
    assert!(
        log.contains("walks=1 ") || log.contains("walks=1\n"),
        "not one walk:\n{log}"
    );
}

/// repochd started with `REPOCH_BARRIER`: it stops itself right after the named step.
struct AtBarrier {
    daemon: std::process::Child,
    log: std::path::PathBuf,
}

impl AtBarrier {
    fn start(s: &Sandbox, barrier: &str) -> AtBarrier {
        let log = s.path("repochd.log");
        let daemon = s
            .cmd("repochd")
            .env("REPOCH_BARRIER", barrier)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let d = AtBarrier { daemon, log };
        wait_until("repochd ready", || d.text().contains("repochd ready"));
        assert!(
            d.text().contains("barriers=true"),
            "repochd without barriers"
        );
        d
    }
    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    fn reached(&self, barrier: &str) {
        let line = format!("barrier {barrier} reached");
        let pid = self.daemon.id();
        wait_until(&line, || {
            self.text().contains(&line)
                && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('T'))
                })
        });
    }
    fn cont(&self) {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.daemon.id() as i32).unwrap(),
            rustix::process::Signal::CONT,
        )
        .unwrap();
    }
}

impl Drop for AtBarrier {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

#[test]
#[ignore = "needs root"]
fn a_consumer_that_execs_another_binary_after_connecting_is_refused_before_the_intent() {
    // The enrolled consumer (here the helper binary) proves its key and is accepted; repochd
    // stops right after `connect`; the peer execs /bin/sleep keeping the connection. The
    // peer is described again through its pidfd before the intent: another executable,
    // consumer-rejected, nothing written.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll_with_helper_consumer();
    let d = AtBarrier::start(&s, "after-connect");
    let peer = spawn_ready(helper(&[
        "exec-after-hello",
        s.grant_socket().to_str().unwrap(),
        &id[..6],
        s.path("consumer.key").to_str().unwrap(),
    ]));
    let rec = recover_bg(&s, &id[..6], 10);
    d.reached("after-connect");
    let pid = peer.pid();
    wait_until("the consumer to exec /bin/sleep", || {
        std::fs::read_link(format!("/proc/{pid}/exe"))
            .is_ok_and(|p| p.to_string_lossy().ends_with("sleep"))
    });
    d.cont();
    let r = finish(rec);
    assert_eq!(
        records(&s, &id),
        ["genesis"],
        "an intent was written for a peer running another binary: {}",
        r.stdout
    );
    assert_eq!(r.code, Outcome::Refused, "{}", r.stdout);
    assert_eq!(r.reasons(), ["consumer-rejected"], "{}", r.stdout);
    assert!(r.stdout.contains("executable"), "{}", r.stdout);
    assert_eq!(s.status(&id).json()["epoch"], "enrolled");
}

#[test]
#[ignore = "needs root"]
fn a_consumer_gone_before_the_dispatch_is_withheld_and_never_granted() {
    // The enrolled consumer (the helper binary) answers the challenge and exits. Right
    // before the consume and again before the dispatch its pinned pidfd and connection are
    // polled: gone, so the epoch is withheld (consumer-lost) rather than consumed for or
    // granted into a dead connection; the epoch stays used. (Whether the exit is seen
    // before the consume or only before the dispatch is a race with the helper's exit;
    // matrix_types.rs pins each point with a barrier.)
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll_with_helper_consumer();
    let d = s.daemon();
    let rogue = spawn_ready(helper(&[
        "rogue-consumer",
        s.grant_socket().to_str().unwrap(),
        &id[..4],
        s.path("consumer.key").to_str().unwrap(),
        "exit",
    ]));
    d.wait_log(&format!("pid={}", rogue.pid()));
    let r = run(s.recover(&id, 10, &[]));
    assert_eq!(r.code, Outcome::Refused, "{}", r.stdout);
    assert_eq!(r.reasons(), ["consumer-lost"], "{}", r.stdout);
    let kinds = records(&s, &id);
    assert!(
        kinds == ["genesis", "intent", "withheld"]
            || kinds == ["genesis", "intent", "consume", "receipt", "withheld"],
        "{kinds:?}"
    );
    let again = run(s.recover(&id, 1, &[]));
    assert_eq!(again.reasons(), ["epoch-consumed"]);
}

#[test]
#[ignore = "needs root"]
fn a_prefix_two_deployments_share_is_refused_at_hello_and_an_unknown_one_at_once() {
    // Two deployments with the same consumer identity whose ids share a first digit. A
    // consumer asking for that digit is refused deployment-ambiguous (both ids listed) at
    // hello, never handed to whichever recovery runs first; an unknown prefix is refused
    // deployment-unknown at once. A consumer with a unique prefix gets its own deployment's
    // grant, checked against the full id.
    require_root!();
    let s = Sandbox::new();
    let mut ids: Vec<String> = Vec::new();
    let (a, b) = loop {
        clear_append_only(&s.srv);
        let _ = std::fs::remove_file(s.srv.join("journal"));
        let id = s.enroll();
        if let Some(other) = ids.iter().find(|o| o[..1] == id[..1]) {
            break (other.clone(), id);
        }
        ids.push(id);
        assert!(ids.len() <= 17, "pigeonhole");
    };
    // `a` was enrolled first; its journal was replaced since: recover `b` (the live one).
    let _d = s.daemon();
    let amb = Killed(Some(
        s.consumer(&b[..1], "consumer.key", "amb.cbor", &[])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let unknown_id: String = b
        .chars()
        .map(|c| if c == 'f' { 'e' } else { 'f' })
        .collect();
    let unk = Killed(Some(
        s.consumer(&unknown_id, "consumer.key", "unk.cbor", &[])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let rec = recover_bg(&s, &b, 3);
    let r = finish(rec);
    let start = Instant::now();
    let mut amb = amb.take();
    let mut unk = unk.take();
    while amb.try_wait().unwrap().is_none() || unk.try_wait().unwrap().is_none() {
        if start.elapsed().as_secs() > REFUSAL_SECONDS_MAX {
            let _ = amb.kill();
            let _ = unk.kill();
            panic!("a consumer with an ambiguous or unknown prefix was left waiting");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let amb = finish(amb);
    assert_eq!(amb.code, Outcome::Refused, "{}", amb.stdout);
    assert!(
        amb.stdout.contains("deployment-ambiguous")
            && amb.stdout.contains(&a)
            && amb.stdout.contains(&b),
        "{}",
        amb.stdout
    );
    let unk = finish(unk);
    assert_eq!(unk.code, Outcome::Refused, "{}", unk.stdout);
    assert!(unk.stdout.contains("deployment-unknown"), "{}", unk.stdout);
    assert!(!s.path("amb.cbor").exists());
    assert_eq!(r.reasons(), ["consumer-absent"], "{}", r.stdout);
    assert_eq!(records(&s, &b), ["genesis"]);
    assert_eq!(records(&s, &a), ["genesis"]);
    // The unique prefix: the grant is `b`'s, and the consumer says so by its full id.
    let c = s
        .consumer(&b[..12], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let r = run(s.recover(&b, 20, &[]));
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    let c = finish(c);
    assert_eq!(c.code, Outcome::Success, "{}", c.stdout);
    assert_eq!(c.json()["grant"]["deployment"], b.as_str());
    assert_eq!(records(&s, &a), ["genesis"]);
}

fn open_to_all(s: &Sandbox) {
    // Let an unprivileged process reach the sandbox's grant socket.
    for p in ["", "root", "root/run", "root/run/repoch"] {
        std::fs::set_permissions(s.dir.path().join(p), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
}

#[test]
#[ignore = "needs root"]
fn an_unprivileged_user_filling_every_slot_cannot_deny_a_recovery() {
    // As uid 65534 (no deployment's consumer): 16 processes send `hello` with a prefix no
    // deployment has and exit, 16 more hold such hellos, 40 connections stay silent, and
    // every connection repochd closes is re-opened (and more hellos hang up at once) for the
    // whole test. Meanwhile the real consumer and a real recovery run: granted, within a
    // normal time, and repochd's warnings stay rate-limited.
    require_root!();
    flood_during_a_recovery(false);
}

#[test]
#[ignore = "needs root"]
fn the_consumer_of_another_deployment_filling_every_slot_cannot_deny_a_recovery() {
    // The same flood from uid 65534 when another deployment names 65534 as its consumer:
    // admitted by uid, it is held to its per-uid handshake and waiting bounds, its bogus
    // prefixes are refused at hello, and the real consumer (uid 0) still recovers.
    require_root!();
    flood_during_a_recovery(true);
}

fn flood_during_a_recovery(flooder_is_a_consumer: bool) {
    let s = Sandbox::new();
    if flooder_is_a_consumer {
        let m = s
            .manifest("")
            .replace("uid = 0\ngid = 0", "uid = 65534\ngid = 65534");
        s.enroll_with(&m);
        clear_append_only(&s.srv);
        std::fs::remove_file(s.srv.join("journal")).unwrap();
    }
    let id = s.enroll();
    let d = s.daemon();
    open_to_all(&s);
    let mut flood = helper(&[
        "flood",
        s.grant_socket().to_str().unwrap(),
        "40",
        "16",
        "16",
    ]);
    flood.uid(65534).gid(65534);
    let _flood = spawn_ready(flood);
    // Let the flood settle into every slot it can get.
    std::thread::sleep(Duration::from_secs(1));
    let start = Instant::now();
    let consumer = s
        .consumer(&id[..8], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let r = run(s.recover(&id, 20, &[]));
    let took = start.elapsed();
    let c = finish(consumer);
    assert_eq!(
        c.code,
        Outcome::Success,
        "the consumer: {}{}",
        c.stdout,
        c.stderr
    );
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert_eq!(r.outcome()["outcome"], "granted");
    assert!(
        took.as_secs() < RECOVERY_UNDER_FLOOD_SECONDS_MAX,
        "the recovery took {took:?} under the flood"
    );
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
    let log = std::fs::read_to_string(&d.log).unwrap();
    // The flood met the refusal its uid deserves: admitted (then bounded) or turned away.
    let admitted = log.contains("deployment-unknown") || log.contains("handshakes in progress");
    let turned_away = log.contains("is no enrolled deployment's consumer");
    assert_eq!(
        (admitted, turned_away),
        (flooder_is_a_consumer, !flooder_is_a_consumer),
        "{log}"
    );
    let warns = log.lines().filter(|l| l.contains("WARN")).count();
    assert!(
        warns <= FLOOD_WARN_LINES_MAX,
        "{warns} WARN lines under the flood"
    );
}

#[test]
#[ignore = "needs root"]
fn a_process_of_the_consumers_uid_cannot_take_a_copy_of_its_connection() {
    // A process of the consumer's uid may copy the descriptors of a dumpable process of
    // that uid (`pidfd_getfd`, or `ptrace`). It took the consumer's connection, and kept in
    // a chain of forks (each exits as soon as its child is made) the copy was never seen by
    // a sole-holder walk and could read the grant. The consumer makes itself non-dumpable
    // before it connects: no copy is given.
    require_root!();
    let s = Sandbox::new();
    let m = s
        .manifest("")
        .replace("uid = 0\ngid = 0", "uid = 65534\ngid = 65534");
    let id = s.enroll_with(&m);
    let d = s.daemon();
    open_to_all(&s);
    let nobody = Some(rustix::fs::Uid::from_raw(65534));
    rustix::fs::chown(s.path("consumer.key"), nobody, None).unwrap();
    std::fs::create_dir(s.path("out")).unwrap();
    rustix::fs::chown(s.path("out"), nobody, None).unwrap();
    let mut c = s.consumer(&id[..8], "consumer.key", "out/grant.cbor", &[]);
    c.uid(65534).gid(65534);
    let mut c = crate::granted::Guard::spawn(c);
    d.wait_log(&format!("pid={}", c.pid()));
    let mut thief = helper(&["steal-fds", &c.pid().to_string()]);
    thief.uid(65534).gid(65534);
    let t = run(thief);
    assert_eq!(t.code, Outcome::Success, "{}{}", t.stdout, t.stderr);
    let stolen = &t.json()["stolen"];
    assert_eq!(stolen, &serde_json::json!([]), "{}", t.stdout);
    assert_eq!(
        t.json()["errors"],
        serde_json::json!([libc::EPERM]),
        "{}",
        t.stdout
    );
    let r = run(s.recover(&id, 20, &[]));
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    let out = c.finish();
    assert_eq!(out.code, Outcome::Success, "{}{}", out.stdout, out.stderr);
}

/// Peers a consumer wait names one by one in the operator's stream (the daemon's
/// `PEER_EVENTS_SHOWN_MAX`, docs/OPERATOR.md, "Recovering (once)").
const PEER_EVENTS_SHOWN: usize = 16;

#[test]
#[ignore = "needs root"]
fn a_suspended_recover_reads_the_outcome_its_consumer_got_however_many_peers_were_turned_away() {
    // The operator's `repoch recover` is suspended (Ctrl-Z, a paused terminal) while it
    // waits; 60 peers of the consumer's uid, running another copy of the consumer
    // executable, are turned away (consumer-rejected); the consumer is granted. Resumed,
    // `recover` reads granted, as its consumer did: repochd never drops an operator for
    // reading slowly, and the peers turned away are named up to a bound, then counted.
    // Found by attacking the release binaries: every rejected peer added an event, the
    // suspended operator was dropped once its buffer filled, the consumer started the new
    // root, and `recover`, resumed, read uncertain (exit 3).
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let copy = s.path("consume-copy");
    std::fs::copy(bin("repoch-consume"), &copy).unwrap();
    let mut rec = s
        .recover(&id, 60, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(rec.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut out, &mut first).unwrap();
    assert!(first.contains("\"start\""), "{first}");
    let pid = rustix::process::Pid::from_raw(rec.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    let turned_away = 60;
    for _ in 0..turned_away {
        let r = run(s.consumer_from(&copy, &id[..8], "consumer.key", "other.cbor", &[]));
        assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    }
    let c = run(s.consumer(&id[..8], "consumer.key", "grant.cbor", &[]));
    assert_eq!(c.code, Outcome::Success, "{}{}", c.stdout, c.stderr);
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let status = rec.wait().unwrap();
    assert!(status.success(), "recover: {status}: {rest}");
    assert!(
        rest.lines().last().unwrap_or("").contains("\"granted\""),
        "{rest}"
    );
    let named = rest
        .lines()
        .filter(|l| l.contains("rejected a peer"))
        .count();
    assert_eq!(named, PEER_EVENTS_SHOWN, "{rest}");
    assert!(
        rest.contains(&format!(
            "and {} more peers turned away",
            turned_away - PEER_EVENTS_SHOWN
        )),
        "{rest}"
    );
}

//! Deadlines on every wait for a peer, the issuer lock taken before the epoch is
//! classified, refusal texts clipped at the sender, observed paths opened without blocking,
//! and connections past a bound told so.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use repoch_protocol::cbor::Canonical as _;
use repoch_tests_native::*;

/// repochd's `CUSTODY_SECONDS_MAX`: the consumer's whole custody answer must arrive within it.
const CUSTODY_SECONDS: u64 = 10;
/// repochd's `HANDSHAKE_SECONDS_MAX`: a peer's whole first frame must arrive within it.
const HANDSHAKE_SECONDS: u64 = 5;
/// repochd's `ADMIN_CONNECTIONS_MAX`.
const ADMIN_CONNECTIONS: usize = 8;
/// `HANDSHAKES_PER_UID_MAX` in daemon/src/limits.rs.
const HANDSHAKES_PER_UID: usize = 4;
/// Slack over a deadline for scheduling on a loaded 2-core machine.
const MARGIN_SECONDS: u64 = 8;
/// Longest wait for an observation that must not block.
const OBSERVE_SECONDS_MAX: u64 = 15;

fn run(mut c: Command) -> Run {
    c.stdin(Stdio::null()).output().expect("spawn").into()
}

/// A child process killed on drop (so a red run never leaves one behind).
struct Child(Option<std::process::Child>);

impl Child {
    fn spawn(mut c: Command) -> Child {
        Child(Some(
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn"),
        ))
    }
    fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }
    /// Waits until the child exits, at most `limit`; `None` if it is still running.
    fn finish_within(&mut self, limit: Duration) -> Option<Run> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(_)) = self.0.as_mut().unwrap().try_wait() {
                return Some(self.0.take().unwrap().wait_with_output().unwrap().into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn records(s: &Sandbox, id: &str) -> Vec<String> {
    s.status(id).json()["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_owned())
        .collect()
}

fn wait_until(what: &str, ok: impl Fn() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed().as_secs() < DAEMON_WAIT_SECONDS_MAX,
            "{what} did not happen"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Declares a 64 KiB frame, then sends one byte a second from a thread; returns when the
/// peer answers or closes, with what it read.
fn drip_and_listen(mut s: UnixStream, limit: Duration) -> (Duration, Vec<u8>) {
    let start = Instant::now();
    let mut w = s.try_clone().unwrap();
    std::thread::spawn(move || {
        if w.write_all(&(64u32 * 1024).to_be_bytes()).is_err() {
            return;
        }
        for _ in 0..64 * 1024 {
            std::thread::sleep(Duration::from_secs(1));
            if w.write_all(&[0xa0]).is_err() {
                return;
            }
        }
    });
    s.set_read_timeout(Some(limit)).unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    (start.elapsed(), got)
}

#[test]
#[ignore = "needs root"]
fn a_custody_answer_drip_fed_after_the_intent_is_withheld_consumer_lost_within_the_deadline() {
    // An enrolled consumer (the helper binary, with the enrolled key) passes authentication,
    // then sends its custody frame one byte every 2 s: every read makes progress, the whole
    // answer would take minutes. The issuance must give up at CUSTODY_SECONDS_MAX for the
    // whole message: withheld consumer-lost, the client told within deadline + margin.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll_with_helper_consumer();
    let d = s.daemon();
    let drip = spawn_ready(helper(&[
        "drip-consumer",
        s.grant_socket().to_str().unwrap(),
        &id[..4],
        s.path("consumer.key").to_str().unwrap(),
        "2000",
    ]));
    d.wait_log(&format!("pid={}", drip.pid()));
    let mut rec = Child::spawn(s.recover(&id, 10, &[]));
    d.wait_log("challenge sent");
    let limit = Duration::from_secs(CUSTODY_SECONDS + MARGIN_SECONDS);
    let r = rec.finish_within(limit).unwrap_or_else(|| {
        panic!("the drip-fed custody answer still holds the issuance after {limit:?}")
    });
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.reasons(), ["consumer-lost"], "{}", r.stdout);
    assert_eq!(records(&s, &id), ["genesis", "intent", "withheld"]);
}

#[test]
#[ignore = "needs root"]
fn a_request_drip_fed_on_the_admin_socket_is_refused_within_the_handshake_deadline() {
    // root connects to the admin socket, declares a 64 KiB request and sends a byte a
    // second: repochd answers protocol-error and closes within HANDSHAKE_SECONDS_MAX for the
    // whole frame, not per byte.
    require_root!();
    let s = Sandbox::new();
    let _d = s.daemon();
    let c = UnixStream::connect(s.root.join("run/repoch/admin.sock")).unwrap();
    let limit = Duration::from_secs(HANDSHAKE_SECONDS + MARGIN_SECONDS);
    let (took, got) = drip_and_listen(c, limit);
    assert!(took < limit, "still connected after {took:?}");
    let e = repoch_protocol::wire::AdminEvent::from_bytes(&got[4..]).expect("an outcome frame");
    let repoch_protocol::wire::AdminEvent::Outcome { reasons, .. } = e else {
        panic!("not an outcome: {e:?}")
    };
    assert_eq!(reasons, [repoch_protocol::Reason::ProtocolError]);
}

#[test]
#[ignore = "needs root"]
fn a_hello_drip_fed_on_the_grant_socket_is_refused_within_the_handshake_deadline() {
    // A consumer's uid (admitted: a deployment names it) sends a hello declared as 64 KiB,
    // a byte a second: refused (protocol-error) within HANDSHAKE_SECONDS_MAX.
    require_root!();
    let s = Sandbox::new();
    s.enroll();
    let _d = s.daemon();
    let c = UnixStream::connect(s.grant_socket()).unwrap();
    let limit = Duration::from_secs(HANDSHAKE_SECONDS + MARGIN_SECONDS);
    let (took, got) = drip_and_listen(c, limit);
    assert!(took < limit, "still connected after {took:?}");
    let m = repoch_protocol::wire::GrantMsg::from_bytes(&got[4..]).expect("a refusal frame");
    assert!(
        matches!(
            m,
            repoch_protocol::wire::GrantMsg::Refused {
                reason: repoch_protocol::Reason::ProtocolError,
                ..
            }
        ),
        "{m:?}"
    );
}

#[test]
#[ignore = "needs root"]
fn a_contender_paused_between_open_and_lock_is_refused_epoch_consumed_after_another_recovery() {
    // repochd A (socket-activated on its own run directory, same state root) stops at the
    // `after-open` barrier: it opened the deployment but has not taken the issuer lock.
    // repochd B, on the usual sockets, runs a whole recovery (granted, receipted). A is
    // continued: it must read the epoch under the lock and refuse epoch-consumed, leaving
    // the log byte for byte as B left it (no intent appended onto a receipted log).
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    // A's view: its own run directory; the deployments and keys are the sandbox's (the CLI
    // lists them through the symlinks; repochd A itself runs on the sandbox root).
    let other = s.path("other");
    std::fs::create_dir_all(other.join("run/repoch")).unwrap();
    std::fs::create_dir_all(other.join("var/lib")).unwrap();
    std::os::unix::fs::symlink(s.root.join("var/lib/repoch"), other.join("var/lib/repoch"))
        .unwrap();
    std::os::unix::fs::symlink(s.root.join("etc"), other.join("etc")).unwrap();
    let a_log = s.path("repochd-a.log");
    let mut act = Command::new("systemd-socket-activate");
    act.arg("-l")
        .arg(other.join("run/repoch/admin.sock"))
        .arg("-l")
        .arg(other.join("run/repoch/grant.sock"))
        .arg("--fdname=admin:grant")
        .arg("-E")
        .arg(format!("REPOCH_ROOT={}", s.root.display()))
        .arg("-E")
        .arg("REPOCH_BARRIER=after-open")
        .arg(bin("repochd"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&a_log).unwrap());
    let a = Child(Some(act.spawn().expect("systemd-socket-activate")));
    wait_until("A listening", || {
        other.join("run/repoch/grant.sock").exists()
    });
    let mut a_consumer = Command::new(bin("repoch-consume"));
    a_consumer
        .args(["--json", "receive", "--deployment", &id[..6], "--key"])
        .arg(s.path("consumer.key"))
        .arg("--issuer-key")
        .arg(s.issuer_pub())
        .arg("--out")
        .arg(s.path("a.cbor"))
        .arg("--socket")
        .arg(other.join("run/repoch/grant.sock"))
        .args(["--wait", "60"]);
    let _a_consumer = Child::spawn(a_consumer);
    let mut a_recover = s.recover(&id, 30, &[]);
    a_recover.env("REPOCH_ROOT", &other);
    let mut a_rec = Child::spawn(a_recover);
    wait_until("A stopped at after-open", || {
        std::fs::read_to_string(&a_log)
            .unwrap_or_default()
            .contains("barrier after-open reached")
            && stopped(a.pid())
    });
    // B recovers the same deployment to the end.
    let b = s.daemon();
    let b_consumer = Child::spawn(s.consumer(&id[..6], "consumer.key", "b.cbor", &[]));
    b.wait_log("consumer connected");
    let r = run(s.recover(&id, 20, &[]));
    assert_eq!(
        r.code,
        Outcome::Success,
        "B must grant: {}{}",
        r.stdout,
        r.stderr
    );
    let mut b_consumer = b_consumer;
    let bc = b_consumer
        .finish_within(Duration::from_secs(DAEMON_WAIT_SECONDS_MAX))
        .unwrap();
    assert_eq!(bc.code, Outcome::Success, "{}{}", bc.stdout, bc.stderr);
    let before = std::fs::read(s.log(&id)).unwrap();
    // A goes on.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(a.pid() as i32).unwrap(),
        rustix::process::Signal::CONT,
    )
    .unwrap();
    let r = a_rec
        .finish_within(Duration::from_secs(40))
        .expect("A's client never ended");
    let after = std::fs::read(s.log(&id)).unwrap();
    assert_eq!(
        r.code,
        Outcome::Refused,
        "A must be refused: {}{}\n{}",
        r.stdout,
        r.stderr,
        std::fs::read_to_string(&a_log).unwrap_or_default()
    );
    assert_eq!(r.reasons(), ["epoch-consumed"], "{}", r.stdout);
    assert!(before == after, "A changed the receipted log");
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
}

#[test]
#[ignore = "needs root"]
fn a_consumer_rejected_for_a_long_cgroup_path_gets_a_clean_refusal() {
    // The enrolled consumer must run in a short cgroup; a peer runs the real consumer from a
    // cgroup whose path is over 1 KiB. The consumer-rejected detail naming that path must be
    // clipped by repochd: the peer exits 2 (refused, consumer-rejected), not 3 (uncertain),
    // and the operator's client ends cleanly (consumer-absent, exit 2), not 70.
    require_root!();
    let s = Sandbox::new();
    let good = Cgroup::new(&format!("repoch-ok-{}", s.tag));
    // Each level is kept (a dropped Cgroup removes its directory).
    let mut chain = vec![Cgroup::new(&format!("repoch-long-{}", s.tag))];
    for i in 0..6 {
        let next = chain
            .last()
            .unwrap()
            .child(&format!("{i}{}", "x".repeat(200)));
        chain.push(next);
    }
    let deep = chain.last().unwrap();
    let m = s.manifest("").replace(
        "[consumer]\n",
        &format!("[consumer]\ncgroup = \"{}\"\n", good.rel),
    );
    let id = s.enroll_with(&m);
    let d = s.daemon();
    let mut rec = Child::spawn(s.recover(&id, 6, &[]));
    d.wait_log("waiting for the consumer");
    let procs = deep.path().join("cgroup.procs");
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("echo $$ > '{}' && exec \"$@\"", procs.display()))
        .arg("sh")
        .arg(bin("repoch-consume"))
        .args(["--json", "receive", "--deployment", &id[..6], "--key"])
        .arg(s.path("consumer.key"))
        .arg("--issuer-key")
        .arg(s.issuer_pub())
        .arg("--out")
        .arg(s.path("grant.cbor"))
        .arg("--socket")
        .arg(s.grant_socket())
        .args(["--wait", "20"]);
    let mut peer = Child::spawn(c);
    let p = peer
        .finish_within(Duration::from_secs(DAEMON_WAIT_SECONDS_MAX))
        .expect("the peer never ended");
    assert_eq!(
        p.code,
        Outcome::Refused,
        "the peer must be refused: {}{}",
        p.stdout,
        p.stderr
    );
    assert!(
        p.stdout.contains("consumer-rejected"),
        "{}{}",
        p.stdout,
        p.stderr
    );
    let r = rec
        .finish_within(Duration::from_secs(DAEMON_WAIT_SECONDS_MAX))
        .expect("recover never ended");
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.reasons(), ["consumer-absent"], "{}", r.stdout);
    assert_eq!(records(&s, &id), ["genesis"]);
    // Innermost first: a parent cgroup is removed only once its children are.
    while chain.pop().is_some() {}
}

/// `repoch observe` must end promptly; returns its failed facts.
fn observe_promptly(s: &Sandbox, id: &str) -> (Run, Vec<(String, String)>) {
    let mut o = Child::spawn(s.observe_cmd(id, &[]));
    let r = o
        .finish_within(Duration::from_secs(OBSERVE_SECONDS_MAX))
        .unwrap_or_else(|| panic!("observe blocked for {OBSERVE_SECONDS_MAX}s"));
    let f = failed(&r);
    (r, f)
}

fn mkfifo(p: &std::path::Path) {
    rustix::fs::mkfifoat(rustix::fs::CWD, p, rustix::fs::Mode::from_raw_mode(0o644)).unwrap();
}

#[test]
#[ignore = "needs root"]
fn a_fifo_at_the_journal_path_is_refused_promptly_as_a_fifo() {
    // The journal is replaced by a FIFO nobody writes: opening it for reading would block
    // forever. Observation must return at once: lineage-replaced, observed "a fifo".
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let j = s.srv.join("journal");
    unset_append_only(&j);
    std::fs::remove_file(&j).unwrap();
    mkfifo(&j);
    let (r, f) = observe_promptly(&s, &id);
    assert!(
        f.contains(&("lineage".into(), "lineage-replaced".into())),
        "{f:?}"
    );
    assert_eq!(observed(&r, "lineage"), "a fifo");
}

#[test]
#[ignore = "needs root"]
fn a_fifo_at_the_consumer_executable_path_is_refused_promptly_as_a_fifo() {
    // The consumer executable (a copy enrolled at a sandbox path) is replaced by a FIFO:
    // observation returns at once, consumer-exe-unprotected, observed "a fifo".
    require_root!();
    let s = Sandbox::new();
    let exe = s.path("consume-copy");
    std::fs::copy(bin("repoch-consume"), &exe).unwrap();
    let m = s.manifest("").replace(
        &bin("repoch-consume").display().to_string(),
        &exe.display().to_string(),
    );
    let id = s.enroll_with(&m);
    std::fs::remove_file(&exe).unwrap();
    mkfifo(&exe);
    let (r, f) = observe_promptly(&s, &id);
    assert!(
        f.contains(&("consumer-exe".into(), "consumer-exe-unprotected".into())),
        "{f:?}"
    );
    assert_eq!(observed(&r, "consumer-exe"), "a fifo");
}

#[test]
#[ignore = "needs root"]
fn a_fifo_as_ready_is_refused_promptly_as_a_fifo() {
    // READY is replaced by a FIFO: ready-unprotected, observed "a fifo", without blocking.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let ready = s.srv.join("READY");
    std::fs::remove_file(&ready).unwrap();
    mkfifo(&ready);
    let (r, f) = observe_promptly(&s, &id);
    assert!(
        f.contains(&("ready".into(), "ready-unprotected".into())),
        "{f:?}"
    );
    assert_eq!(observed(&r, "ready"), "a fifo");
}

#[test]
#[ignore = "needs root"]
fn an_admin_connection_past_the_bound_is_told_busy_naming_the_bound() {
    // One recovery waits for its consumer and seven idle root clients hold the other admin
    // slots (within the handshake deadline): the ninth `repoch recover` must get a refusal
    // frame, busy (exit 4) naming ADMIN_CONNECTIONS_MAX, not a reset read as "uncertain".
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = s.daemon();
    let _waiting = Child::spawn(s.recover(&id, 30, &[]));
    d.wait_log("waiting for the consumer");
    let admin = s.root.join("run/repoch/admin.sock");
    let idle: Vec<UnixStream> = (1..ADMIN_CONNECTIONS)
        .map(|_| UnixStream::connect(&admin).unwrap())
        .collect();
    let start = Instant::now();
    let r = run(s.recover(&id, 1, &[]));
    assert!(
        start.elapsed().as_secs() < HANDSHAKE_SECONDS,
        "the idle clients may have timed out; the test proves nothing"
    );
    assert_eq!(r.code, Outcome::Busy, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.outcome()["outcome"], "busy");
    let detail = r.outcome()["detail"].as_str().unwrap().to_owned();
    assert!(
        detail.contains(&format!("{ADMIN_CONNECTIONS} admin connections")),
        "{detail}"
    );
    drop(idle);
}

/// `repoch-consume receive` against a fake repochd at `socket`, waiting `wait` seconds.
fn consume_from_fake(s: &Sandbox, socket: &std::path::Path, wait: u64) -> Command {
    consume_from_fake_as(s, socket, "ab12", &s.path("producer.key.pub"), wait)
}

/// `repoch-consume --json receive` from a fake repochd at `socket`, for deployment
/// `prefix`, pinning `issuer`, persisting to the sandbox's `grant.cbor`.
fn consume_from_fake_as(
    s: &Sandbox,
    socket: &std::path::Path,
    prefix: &str,
    issuer: &std::path::Path,
    wait: u64,
) -> Command {
    let mut c = Command::new(bin("repoch-consume"));
    c.args(["--json", "receive", "--deployment", prefix, "--key"])
        .arg(s.path("consumer.key"))
        .arg("--issuer-key")
        .arg(issuer)
        .arg("--out")
        .arg(s.path("grant.cbor"))
        .arg("--socket")
        .arg(socket)
        .args(["--wait", &wait.to_string()]);
    c
}

#[test]
fn the_consumer_reads_the_reason_of_an_over_long_refusal_and_exits_refused() {
    // A sender that does not clip (an older repochd) refuses with a 2 KiB detail: the
    // consumer still reads the reason and exits 2 (refused), never 3 (uncertain).
    let s = Sandbox::new();
    let socket = s.path("fake.sock");
    let _fake = spawn_ready(helper(&["serve-long-refusal", socket.to_str().unwrap()]));
    let mut c = Child::spawn(consume_from_fake(&s, &socket, 10));
    let r = c
        .finish_within(Duration::from_secs(DAEMON_WAIT_SECONDS_MAX))
        .expect("the consumer never ended");
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("consumer-rejected"), "{}", r.stdout);
}

#[test]
fn a_frame_drip_fed_to_the_consumer_fails_at_its_wait_for_the_whole_message() {
    // A fake repochd declares a 64 KiB frame and sends a byte a second: each read makes
    // progress, so only a deadline for the whole message ends the wait. With --wait 3 the
    // consumer must give up within 3 s + margin: before any challenge no grant can exist, so
    // it is exit 2 (docs/EXIT-CODES.md), naming the deadline.
    let s = Sandbox::new();
    let socket = s.path("fake.sock");
    let _fake = spawn_ready(helper(&["serve-drip", socket.to_str().unwrap()]));
    let mut c = Child::spawn(consume_from_fake(&s, &socket, 3));
    let limit = Duration::from_secs(3 + MARGIN_SECONDS);
    let r = c
        .finish_within(limit)
        .unwrap_or_else(|| panic!("the consumer still waits after {limit:?}"));
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("deadline"), "{}", r.stdout);
}

#[test]
#[ignore = "needs root"]
fn a_grant_connection_past_the_bound_is_refused_naming_the_bound() {
    // A consumer's uid holds HANDSHAKES_PER_UID_MAX idle handshakes (the bound one uid can
    // reach; GRANT_CONNECTIONS_MAX bounds all uids together). Its next connection must read
    // a refusal naming the bound before the close, not a bare reset.
    require_root!();
    let s = Sandbox::new();
    s.enroll();
    let d = s.daemon();
    let idle: Vec<UnixStream> = (0..HANDSHAKES_PER_UID)
        .map(|_| UnixStream::connect(s.grant_socket()).unwrap())
        .collect();
    let start = Instant::now();
    let mut c = UnixStream::connect(s.grant_socket()).unwrap();
    d.wait_log("refused at once");
    c.set_read_timeout(Some(Duration::from_secs(HANDSHAKE_SECONDS)))
        .unwrap();
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    assert!(
        start.elapsed().as_secs() < HANDSHAKE_SECONDS,
        "the idle peers may have timed out; the test proves nothing"
    );
    assert!(got.len() > 4, "reset without a word");
    let m = repoch_protocol::wire::GrantMsg::from_bytes(&got[4..]).expect("a refusal frame");
    let repoch_protocol::wire::GrantMsg::Refused { detail, .. } = m else {
        panic!("not a refusal: {m:?}")
    };
    assert!(
        detail.contains(&format!("{HANDSHAKES_PER_UID} handshakes in progress")),
        "{detail}"
    );
    drop(idle);
}

#[test]
#[ignore = "needs root"]
fn a_repochd_that_drips_its_answer_cannot_hold_repoch_recover_past_its_deadline() {
    // A fake repochd on the admin socket reads the request, declares a 64 KiB frame and
    // sends a byte a second: every read makes progress. `repoch recover` has one deadline for
    // the whole session (the consumer wait plus a margin, shortened to 2 s in this test
    // build): it must end then, uncertain (exit 3: it cannot know what repochd did), naming
    // the deadline. Before, each read had its own timeout and the drip held it for days.
    // (Enrollment needs root.)
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let admin = s.grant_socket().with_file_name("admin.sock");
    std::fs::create_dir_all(admin.parent().unwrap()).unwrap();
    let _fake = spawn_ready(helper(&["serve-drip", admin.to_str().unwrap()]));
    let mut c = s.recover(&id[..6], 1, &[]);
    c.env("REPOCH_TEST_MARGIN_SECONDS", "2");
    let mut c = Child::spawn(c);
    let limit = Duration::from_secs(3 + MARGIN_SECONDS);
    let r = c
        .finish_within(limit)
        .unwrap_or_else(|| panic!("repoch recover still waits after {limit:?}"));
    assert_eq!(r.code, Outcome::Uncertain, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("deadline"), "{}", r.stdout);
}

#[test]
#[ignore = "needs root"]
fn the_consumer_refuses_a_grant_whose_fence_fd_is_not_the_fence_it_names() {
    // A repochd (here a faithful fake holding the sandbox's issuer key) dispatches a
    // correctly signed grant naming the deployment's fence, but passes the fd of another
    // file with it. The consumer checks every received fd against the fence identity the
    // grant names: it refuses (exit 2) and persists nothing. The control, the same fake
    // passing the right fd, is accepted: the fd is the only difference.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let socket = s.path("fake.sock");
    let other = s.path("other");
    std::fs::write(&other, b"").unwrap();
    let fence = s.srv.join("lock");
    for (sent, code) in [(&other, Outcome::Refused), (&fence, Outcome::Success)] {
        let _fake = spawn_ready(helper(&[
            "serve-grant",
            socket.to_str().unwrap(),
            s.root.to_str().unwrap(),
            &id,
            fence.to_str().unwrap(),
            sent.to_str().unwrap(),
        ]));
        let out = s.path("grant.cbor");
        let _ = std::fs::remove_file(&out);
        let mut c = Child::spawn(consume_from_fake_as(
            &s,
            &socket,
            &id[..6],
            &s.issuer_pub(),
            10,
        ));
        let r = c
            .finish_within(Duration::from_secs(DAEMON_WAIT_SECONDS_MAX))
            .expect("the consumer never ended");
        assert_eq!(
            r.code,
            code,
            "fd of {}: {}{}",
            sent.display(),
            r.stdout,
            r.stderr
        );
        assert_eq!(
            out.exists(),
            code == Outcome::Success,
            "fd of {}: grant file",
            sent.display()
        );
        if code == Outcome::Refused {
            assert!(r.stdout.contains("the grant names"), "{}", r.stdout);
        }
    }
}

#[test]
#[ignore = "needs root"]
fn the_consumer_refuses_a_fence_fd_on_the_named_inode_number_born_at_another_time() {
    // The fd is the fence's device and inode number, but the grant names another birth
    // time: what a fence deleted and recreated on a reused inode number looks like. The
    // consumer compares the object (device, inode, birth), not the number: refused, exit 2,
    // nothing persisted.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let socket = s.path("fake.sock");
    let fence = s.srv.join("lock");
    let _fake = spawn_ready(helper(&[
        "serve-grant",
        socket.to_str().unwrap(),
        s.root.to_str().unwrap(),
        &id,
        fence.to_str().unwrap(),
        fence.to_str().unwrap(),
        "fence-born-another-time",
    ]));
    let out = s.path("grant.cbor");
    let r = Child::spawn(consume_from_fake_as(
        &s,
        &socket,
        &id[..6],
        &s.issuer_pub(),
        10,
    ))
    .finish_within(Duration::from_secs(DAEMON_WAIT_SECONDS_MAX))
    .expect("the consumer never ended");
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("born"), "{}", r.stdout);
    assert!(!out.exists());
}

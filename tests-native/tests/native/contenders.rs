//! Contenders at the publication barriers: repochd A is stopped right after one step of an
//! issuance (docs/ARCHITECTURE.md, "Testing at barriers") while a contender B asks to
//! recover the same deployment; then A is continued (SIGCONT) or crashed (SIGKILL).
//!
//! B is a second real repochd on the same state root, socket-activated on its own run
//! directory (`systemd-socket-activate`; a second repochd on A's sockets refuses to start:
//! `e2e::a_second_repochd_on_the_same_root_refuses_to_start`), asked by the real `repoch
//! recover` and served by the real `repoch-consume`. A request to A itself cannot contend:
//! A is stopped whole, every thread. So B's issuance reaches the real issuer lock on the
//! real file, and "busy" names a real holder.
//!
//! Oracles: B's answer and the epoch log when B asks (B never appends while A holds the
//! lock); A's client and consumer; after A's end, B refused `epoch-consumed` once anything
//! was written, else B recovers; never two grants: at most one receipt in the log and at
//! most one consumer holding a grant file, exactly one unless A was killed after its
//! intent (then none: the epoch is used, never reissued).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use repoch_tests_native::*;

use crate::e2e::{finish, records, recover_bg, run, AtBarrier};

/// How A's issuance is ended after B asked.
#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    /// SIGCONT: A carries on (overlap with the contender).
    Continue,
    /// SIGKILL: a crash at that boundary.
    Kill,
}

/// A child killed and reaped on drop.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// repochd B: the same state root, its own sockets under `other/run/repoch`; `other` also
/// holds symlinks to the sandbox's keys and deployments, so B's clients resolve them.
struct B {
    other: PathBuf,
    log: PathBuf,
    _daemon: Killed,
}

impl B {
    fn start(s: &Sandbox) -> B {
        let other = s.path("other");
        std::fs::create_dir_all(other.join("run/repoch")).unwrap();
        std::fs::create_dir_all(other.join("var/lib")).unwrap();
        std::os::unix::fs::symlink(s.root.join("var/lib/repoch"), other.join("var/lib/repoch"))
            .unwrap();
        std::os::unix::fs::symlink(s.root.join("etc"), other.join("etc")).unwrap();
        let log = s.path("repochd-b.log");
        let daemon = Command::new("systemd-socket-activate")
            .arg("-l")
            .arg(other.join("run/repoch/admin.sock"))
            .arg("-l")
            .arg(other.join("run/repoch/grant.sock"))
            .arg("--fdname=admin:grant")
            .arg("-E")
            .arg(format!("REPOCH_ROOT={}", s.root.display()))
            .arg(bin("repochd"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("systemd-socket-activate (apt-get install systemd)");
        let b = B {
            other,
            log,
            _daemon: Killed(daemon),
        };
        let start = std::time::Instant::now();
        while !b.other.join("run/repoch/grant.sock").exists() {
            assert!(
                start.elapsed().as_secs() < DAEMON_WAIT_SECONDS_MAX,
                "repochd B did not listen: {}",
                std::fs::read_to_string(&b.log).unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        b
    }

    /// `repoch recover` through B.
    fn recover(&self, s: &Sandbox, id: &str, wait: u64) -> Run {
        let mut c = s.recover(&id[..6], wait, &[]);
        c.env("REPOCH_ROOT", &self.other);
        run(c)
    }

    /// The real consumer on B's grant socket.
    fn consumer(&self, s: &Sandbox, id: &str, out: &str) -> std::process::Child {
        Command::new(bin("repoch-consume"))
            .env_remove("JOURNAL_STREAM")
            .args(["--json", "receive", "--deployment", &id[..6], "--key"])
            .arg(s.path("consumer.key"))
            .arg("--issuer-key")
            .arg(s.issuer_pub())
            .arg("--out")
            .arg(s.path(out))
            .arg("--socket")
            .arg(self.other.join("run/repoch/grant.sock"))
            .args(["--wait", "30"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// What A has durably written when stopped at `barrier`.
fn written_at(barrier: &str) -> &'static [&'static str] {
    match barrier {
        "after-open" | "after-reserve" | "after-observe" => &["genesis"],
        "after-intent" => &["genesis", "intent"],
        "after-receipt" => &["genesis", "intent", "consume", "receipt"],
        _ => unreachable!("{barrier}"),
    }
}

const GRANTED: &[&str] = &["genesis", "intent", "consume", "receipt"];

fn contender_at(barrier: &str, end: End) {
    let s = Sandbox::new();
    let id = s.enroll();
    let a = AtBarrier::start(&s, barrier);
    let consumer_a = s
        .consumer(&id[..6], "consumer.key", "grant-a.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rec_a = recover_bg(&s, &id[..6], 20);
    a.reached();
    let kept = written_at(barrier);
    assert_eq!(records(&s, &id), kept, "{barrier}: A stopped");
    let b = B::start(&s);

    // B asks while A is stopped.
    let mut b_granted = false;
    if barrier == "after-open" {
        // A opened the deployment but has not taken the issuer lock: B takes it, reads the
        // epoch `enrolled` and recovers to the end. A, continued, must then read the epoch
        // under the lock (never act on anything read before it) and append nothing.
        let c = b.consumer(&s, &id, "grant-b.cbor");
        let r = b.recover(&s, &id, 20);
        assert_eq!(
            r.code,
            Outcome::Success,
            "{barrier}: B: {}{}",
            r.stdout,
            r.stderr
        );
        assert_eq!(finish(c).code, Outcome::Success, "{barrier}: B's consumer");
        assert_eq!(records(&s, &id), GRANTED, "{barrier}");
        b_granted = true;
    } else {
        let r = b.recover(&s, &id, 1);
        assert_eq!(
            r.code,
            Outcome::Busy,
            "{barrier}: B must be busy: {}{}",
            r.stdout,
            r.stderr
        );
        assert_eq!(r.outcome()["outcome"], "busy", "{barrier}");
        assert_eq!(r.reasons(), ["issuer-busy"], "{barrier}");
        let detail = r.outcome()["detail"].as_str().unwrap().to_owned();
        assert!(
            detail.contains(&format!("pid {} (repochd)", a.pid())),
            "{barrier}: busy must name A (pid {}): {detail}",
            a.pid()
        );
        assert_eq!(records(&s, &id), kept, "{barrier}: B appended");
    }
    let log_before_a = std::fs::read(s.log(&id)).unwrap();

    // A's end.
    let mut a_granted = false;
    match end {
        End::Continue => {
            a.signal(rustix::process::Signal::CONT);
            let r = finish(rec_a);
            if b_granted {
                assert_eq!(
                    r.code,
                    Outcome::Refused,
                    "{barrier}: A must be refused: {}",
                    r.stdout
                );
                assert_eq!(r.reasons(), ["epoch-consumed"], "{barrier}");
                let after = std::fs::read(s.log(&id)).unwrap();
                assert!(after == log_before_a, "{barrier}: A changed the log");
            } else {
                assert_eq!(r.code, Outcome::Success, "{barrier}: A: {}", r.stdout);
                assert_eq!(r.outcome()["outcome"], "granted");
                a_granted = true;
            }
        }
        End::Kill => {
            drop(a); // SIGKILL, then reaped
            let r = finish(rec_a);
            assert_eq!(
                r.code,
                Outcome::Uncertain,
                "{barrier}: uncertain: {}",
                r.stdout
            );
            let after = std::fs::read(s.log(&id)).unwrap();
            assert!(
                after == log_before_a,
                "{barrier}: the log changed at A's crash"
            );
        }
    }
    let c = finish(consumer_a);
    if a_granted {
        assert_eq!(
            c.code,
            Outcome::Success,
            "{barrier}: A's consumer: {}",
            c.stdout
        );
    } else if end == End::Kill {
        assert_ne!(
            c.code,
            Outcome::Success,
            "{barrier}: A's consumer: {}",
            c.stdout
        );
    }
    assert_eq!(s.path("grant-a.cbor").exists(), a_granted, "{barrier}");
    let after_a = records(&s, &id);

    // B after A's end: the epoch's state decides.
    let c = b.consumer(&s, &id, "grant-b2.cbor");
    let fresh = after_a.len() == 1;
    let r = b.recover(&s, &id, if fresh { 20 } else { 1 });
    if fresh {
        assert_eq!(
            r.code,
            Outcome::Success,
            "{barrier}: B recovers: {}{}",
            r.stdout,
            r.stderr
        );
        assert_eq!(finish(c).code, Outcome::Success, "{barrier}: B's consumer");
        assert_eq!(records(&s, &id), GRANTED, "{barrier}");
    } else {
        assert_eq!(
            r.code,
            Outcome::Refused,
            "{barrier}: B: {}{}",
            r.stdout,
            r.stderr
        );
        assert_eq!(r.reasons(), ["epoch-consumed"], "{barrier}");
        assert_eq!(records(&s, &id), after_a, "{barrier}: B appended");
        drop(Killed(c));
    }

    // Never two grants.
    let all = records(&s, &id);
    let receipts = all.iter().filter(|k| *k == "receipt").count();
    let grants = ["grant-a.cbor", "grant-b.cbor", "grant-b2.cbor"]
        .iter()
        .filter(|g| s.path(g).exists())
        .count();
    assert!(receipts <= 1, "{barrier}: {all:?}");
    let used_by_a = end == End::Kill && kept.len() > 1;
    assert_eq!(grants, usize::from(!used_by_a), "{barrier}: {all:?}");
}

#[test]
#[ignore = "needs root"]
fn a_contender_at_after_open_recovers_and_the_continued_issuer_is_refused_epoch_consumed() {
    require_root!();
    contender_at("after-open", End::Continue);
}

#[test]
#[ignore = "needs root"]
fn a_contender_at_after_open_recovers_and_the_killed_issuer_wrote_nothing() {
    require_root!();
    contender_at("after-open", End::Kill);
}

#[test]
#[ignore = "needs root"]
fn a_contender_at_after_reserve_is_busy_then_the_continued_issuer_grants_once() {
    require_root!();
    contender_at("after-reserve", End::Continue);
}

#[test]
#[ignore = "needs root"]
fn a_contender_at_after_reserve_is_busy_then_after_the_killed_issuer_recovers_once() {
    require_root!();
    contender_at("after-reserve", End::Kill);
}

#[test]
#[ignore = "needs root"]
fn a_contender_at_after_observe_is_busy_then_the_continued_issuer_grants_once() {
    require_root!();
    contender_at("after-observe", End::Continue);
}

#[test]
#[ignore = "needs root"]
fn a_contender_at_after_observe_is_busy_then_after_the_killed_issuer_recovers_once() {
    require_root!();
    contender_at("after-observe", End::Kill);
}

#[test]
#[ignore = "needs root"]
fn a_contender_at_after_intent_is_busy_then_the_continued_issuer_grants_once() {
    require_root!();
    contender_at("after-intent", End::Continue);
}

#[test]
#[ignore = "needs root"]
fn a_contender_at_after_intent_is_busy_then_after_the_killed_issuer_is_refused_epoch_consumed() {
    require_root!();
    contender_at("after-intent", End::Kill);
}

#[test]
#[ignore = "needs root"]
fn a_contender_at_after_receipt_is_busy_then_the_continued_issuer_grants_once() {
    require_root!();
    contender_at("after-receipt", End::Continue);
}

#[test]
#[ignore = "needs root"]
fn a_contender_at_after_receipt_is_busy_then_after_the_killed_issuer_is_refused_epoch_consumed() {
    require_root!();
    contender_at("after-receipt", End::Kill);
}

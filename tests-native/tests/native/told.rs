//! What a consumer hears when its epoch is used (docs/PROTOCOL.md, "The grant socket"): a
//! consumer that says `hello` for a deployment whose epoch is already used (or whose log does
//! not verify) is refused at once with the epoch's reason, naming its state; consumers still
//! waiting for a deployment when a recovery of it ends with the epoch used (granted,
//! withheld, uncertain) are told `epoch-consumed` at its end. Neither waits out its own
//! `--wait` (30 s here), and a refusal writes nothing.

use std::time::{Duration, Instant};

use repoch_tests_native::*;

use crate::e2e::{records, AtBarrier};
use crate::granted::{waiting, AtConsumerBarrier, Guard};

/// How soon a refused consumer must have ended: a bound on a refusal (its `--wait` is 30 s),
/// not a speed claim.
const TOLD_SECONDS_MAX: u64 = 5;

/// The consumer ends within `TOLD_SECONDS_MAX`: exit 2, refused `reason`, its message naming
/// `state`.
fn told(c: &mut Guard, reason: &str, state: &str, what: &str) {
    let out = c
        .finish_within(Duration::from_secs(TOLD_SECONDS_MAX))
        .unwrap_or_else(|| {
            panic!(
                "{what}: the consumer was not told within {TOLD_SECONDS_MAX}s (its --wait is 30 s)"
            )
        });
    assert_eq!(
        out.code,
        Outcome::Refused,
        "{what}: {}{}",
        out.stdout,
        out.stderr
    );
    let j = out.json();
    assert_eq!(j["outcome"], "refused", "{what}: {}", out.stdout);
    assert_eq!(j["reason"], reason, "{what}: {}", out.stdout);
    let message = j["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(state),
        "{what}: the refusal does not name the epoch's state {state:?}: {message}"
    );
    assert_eq!(
        message.matches(reason).count(),
        1,
        "{what}: the message names the reason more than once: {message}"
    );
}

/// A new consumer for `id` is refused at once (`reason`, naming `state`); the log is byte
/// for byte as it was and no grant file appears.
fn newcomer_refused(s: &Sandbox, id: &str, reason: &str, state: &str) {
    let before = std::fs::read(s.log(id)).unwrap();
    let mut c = Guard::spawn(s.consumer(&id[..6], "consumer.key", "late.cbor", &[]));
    told(&mut c, reason, state, "a consumer connecting after");
    assert!(
        std::fs::read(s.log(id)).unwrap() == before,
        "a refused hello changed the log"
    );
    assert!(!s.path("late.cbor").exists());
}

#[test]
#[ignore = "needs root"]
fn a_consumer_connecting_after_a_granted_recovery_is_refused_at_once_naming_the_state() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let mut c = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant.cbor", &[]));
    waiting(&s, c.pid());
    let r = Guard::spawn(s.recover(&id[..6], 20, &[])).finish();
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert_eq!(c.finish().code, Outcome::Success);
    newcomer_refused(&s, &id, "epoch-consumed", "receipted");
    // Asked again (the verdict now cached): the same refusal.
    newcomer_refused(&s, &id, "epoch-consumed", "receipted");
}

#[test]
#[ignore = "needs root"]
fn a_consumer_waiting_during_a_granted_recovery_is_told_at_its_end() {
    // Two consumers wait; the recovery takes the first and grants; the second is told
    // epoch-consumed (naming receipted) when the recovery ends, not at its own --wait.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let mut first = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant.cbor", &[]));
    waiting(&s, first.pid());
    let mut second = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant2.cbor", &[]));
    waiting(&s, second.pid());
    let r = Guard::spawn(s.recover(&id[..6], 20, &[])).finish();
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert_eq!(first.finish().code, Outcome::Success);
    told(
        &mut second,
        "epoch-consumed",
        "receipted",
        "the second consumer",
    );
    assert!(!s.path("grant2.cbor").exists());
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
}

#[test]
#[ignore = "needs root"]
fn a_consumer_waiting_during_a_withheld_recovery_is_told_at_its_end_and_a_new_one_at_once() {
    // repochd stops after reading the first consumer's custody answer; that consumer is
    // killed; repochd withholds consumer-lost. The second consumer, waiting all along, is
    // told epoch-consumed (naming withheld) at the recovery's end; a third, connecting
    // after, at once.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = AtBarrier::start(&s, "after-custody");
    let mut first = AtConsumerBarrier::start(&s, &id, "after-custody", "grant.cbor");
    waiting(&s, first.pid());
    let mut second = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant2.cbor", &[]));
    waiting(&s, second.pid());
    let mut rec = Guard::spawn(s.recover(&id[..6], 20, &[]));
    first.reached();
    d.reached();
    first.kill();
    d.signal(rustix::process::Signal::CONT);
    let r = rec.finish();
    assert_eq!(r.code, Outcome::Refused, "{}", r.stdout);
    assert_eq!(r.reasons(), ["consumer-lost"]);
    assert_eq!(records(&s, &id), ["genesis", "intent", "withheld"]);
    told(
        &mut second,
        "epoch-consumed",
        "withheld",
        "the second consumer",
    );
    assert!(!s.path("grant2.cbor").exists());
    newcomer_refused(&s, &id, "epoch-consumed", "withheld");
}

#[test]
#[ignore = "needs root"]
fn a_consumer_past_its_hello_check_when_a_recovery_ends_used_is_refused_instead_of_waiting() {
    // The window between the check at hello and the wait: the second consumer said hello
    // while the epoch was enrolled and stops before its key proof (at its after-hello
    // barrier); a recovery grants the first consumer; then the second goes on. It must not
    // wait out its --wait: as it would start waiting it is refused epoch-consumed, naming
    // receipted. Its key proof must still arrive within HANDSHAKE_SECONDS_MAX (5 s) of its
    // hello, so the recovery (about 0.2 s) must end well within that.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let mut first = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant.cbor", &[]));
    waiting(&s, first.pid());
    let second = AtConsumerBarrier::start(&s, &id, "after-hello", "grant2.cbor");
    second.reached();
    let start = Instant::now();
    let r = Guard::spawn(s.recover(&id[..6], 20, &[])).finish();
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert_eq!(first.finish().code, Outcome::Success);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "precondition: the recovery took {:?}, too close to the key proof's deadline (5 s)",
        start.elapsed()
    );
    let mut second = second.go_on();
    told(
        &mut second,
        "epoch-consumed",
        "receipted",
        "the second consumer",
    );
    assert!(!s.path("grant2.cbor").exists());
}

#[test]
#[ignore = "needs root"]
fn a_consumer_of_a_torn_epoch_is_refused_at_once_with_the_logs_reason() {
    // A log with a zero-filled tail (what a crash can leave) is torn: a consumer connecting
    // is refused epoch-torn at once, and the log is left as it is.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let log = s.log(&id);
    unset_append_only(&log);
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut f, &[0u8; 512]).unwrap();
    drop(f);
    let _d = s.daemon();
    newcomer_refused(&s, &id, "epoch-torn", "torn");
}

/// Opens of `path` (inotify `IN_OPEN`) while `f(i)` runs, for each `i` in `0..n`, summed.
/// The queue is drained after each call: inotify merges an event identical to the last one
/// still unread, so opens counted only at the end would read as one.
fn opens_during(path: &std::path::Path, n: usize, mut f: impl FnMut(usize)) -> usize {
    use rustix::fs::inotify;
    let flags = inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC;
    let fd = inotify::init(flags).unwrap();
    inotify::add_watch(&fd, path, inotify::WatchFlags::OPEN).unwrap();
    let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
    let mut opens = 0;
    for i in 0..n {
        f(i);
        let mut events = inotify::Reader::new(&fd, &mut buf);
        loop {
            match events.next() {
                Ok(e) => {
                    assert!(!e.events().contains(inotify::ReadFlags::QUEUE_OVERFLOW));
                    opens += usize::from(e.events().contains(inotify::ReadFlags::OPEN));
                }
                Err(rustix::io::Errno::WOULDBLOCK) => break,
                Err(e) => panic!("inotify: {e}"),
            }
        }
    }
    opens
}

/// Hellos the bound is measured over.
const HELLOS: usize = 8;

#[test]
#[ignore = "needs root"]
fn hellos_read_the_epoch_log_once_per_change_of_it_and_never_once_it_is_used() {
    // The check at hello must not let consumers make repochd read a log per connection:
    // HELLOS consumers in turn for an enrolled epoch (each waits, then is killed) open the
    // log once between them; after a granted recovery, HELLOS more are refused without
    // opening it at all (the recovery recorded the epoch used).
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let log = s.log(&id);
    let enrolled = opens_during(&log, HELLOS, |i| {
        let c = Guard::spawn(s.consumer(&id[..6], "consumer.key", &format!("g{i}"), &[]));
        waiting(&s, c.pid());
        drop(c); // killed and reaped
    });
    assert_eq!(
        enrolled, 1,
        "{HELLOS} hellos for an unchanged enrolled epoch opened its log {enrolled} times"
    );
    let mut c = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant.cbor", &[]));
    waiting(&s, c.pid());
    let r = Guard::spawn(s.recover(&id[..6], 20, &[])).finish();
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert_eq!(c.finish().code, Outcome::Success);
    let used = opens_during(&log, HELLOS, |i| {
        let mut c = Guard::spawn(s.consumer(&id[..6], "consumer.key", &format!("u{i}"), &[]));
        told(
            &mut c,
            "epoch-consumed",
            "receipted",
            "a consumer of a used epoch",
        );
    });
    assert_eq!(
        used, 0,
        "{HELLOS} hellos for a used epoch opened its log {used} times"
    );
}

#[test]
#[ignore = "needs root"]
fn a_consumer_of_an_enrolled_epoch_still_waits_and_is_granted() {
    // The check at hello refuses only a used epoch: a consumer of an enrolled one waits (its
    // verdict is not cached as final) and the recovery grants it.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let mut c = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant.cbor", &[]));
    waiting(&s, c.pid());
    assert!(
        c.finish_within(Duration::from_secs(1)).is_none(),
        "a consumer of an enrolled epoch did not wait"
    );
    let r = Guard::spawn(s.recover(&id[..6], 20, &[])).finish();
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert_eq!(c.finish().code, Outcome::Success);
}

//! An interrupted `repoch recover` (Ctrl-C, a terminal closed, the operator's shell killed)
//! is cancelled where nothing is written yet (docs/OPERATOR.md, "Recovering"): repochd asks
//! whether the operator's admin connection is still open right before the intent, as it
//! asks its own stop, and again right before the fleet claim and `consume`. Gone before the
//! intent: refused `recover-cancelled`, nothing written, the consumer told the same, and
//! the epoch still recoverable; gone after it: withheld `recover-cancelled`, nothing
//! claimed, never a grant nobody asked to read. Once an interrupted recover still wrote its
//! intent when its consumer connected a second later: the epoch was used for no one.

use std::time::Duration;

use repoch_tests_native::*;

use crate::e2e::records;
use crate::granted::Guard;
use crate::stopping::{recovery_stopped_at, StoppedRecovery};

/// How long repochd may take to end the recovery once it runs again.
const END_SECONDS_MAX: u64 = 20;

/// repochd stopped at `barrier` in a recovery with its consumer connected; the operator's
/// `repoch recover` interrupted (SIGINT, as Ctrl-C); then repochd runs on. Returns what the
/// consumer was told and the records written.
fn interrupted_at(barrier: &str) -> (Sandbox, String, Run, Vec<String>) {
    let StoppedRecovery {
        s,
        id,
        mut d,
        consumer: mut c,
        recover: mut rec,
    } = recovery_stopped_at(barrier);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(rec.pid() as i32).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let r = rec.finish();
    assert!(
        r.code.interrupted(),
        "{barrier}: {:?} {}{}",
        r.code,
        r.stdout,
        r.stderr
    );
    d.signal(rustix::process::Signal::CONT);
    let consumer = c
        .finish_within(Duration::from_secs(END_SECONDS_MAX))
        .unwrap_or_else(|| panic!("{barrier}: the consumer was never told:\n{}", d.text()));
    assert_eq!(
        d.exit_within(Duration::from_millis(100)),
        None,
        "{barrier}: repochd exited"
    );
    let written = records(&s, &id);
    (s, id, consumer, written)
}

#[test]
#[ignore = "needs root"]
fn a_recover_interrupted_before_the_intent_writes_nothing_and_the_epoch_stays_recoverable() {
    require_root!();
    for barrier in ["after-connect", "before-intent"] {
        let (s, id, consumer, written) = interrupted_at(barrier);
        assert_eq!(written, ["genesis"], "{barrier}: nothing written");
        assert_eq!(
            consumer.code,
            Outcome::Refused,
            "{barrier}: {}",
            consumer.stdout
        );
        assert_eq!(
            consumer.json()["reason"],
            "recover-cancelled",
            "{barrier}: {}",
            consumer.stdout
        );
        assert_eq!(s.status(&id).json()["epoch"], "enrolled", "{barrier}");
        // Recoverable at once: the next recover and consumer are granted.
        let _d = s.daemon();
        let mut c = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant2.cbor", &[]));
        let r = Guard::spawn(s.recover(&id[..6], 20, &[])).finish();
        assert_eq!(r.code, Outcome::Success, "{barrier}: {}", r.stdout);
        assert_eq!(c.finish().code, Outcome::Success, "{barrier}");
    }
}

#[test]
#[ignore = "needs root"]
fn a_recover_interrupted_after_the_intent_is_withheld_before_consume_never_granted() {
    require_root!();
    let (s, id, consumer, written) = interrupted_at("after-final-1");
    assert_eq!(written, ["genesis", "intent", "withheld"]);
    assert_eq!(consumer.code, Outcome::Refused, "{}", consumer.stdout);
    assert_eq!(
        consumer.json()["reason"],
        "recover-cancelled",
        "{}",
        consumer.stdout
    );
    let st = s.status(&id);
    assert_eq!(st.json()["epoch"], "withheld", "{}", st.stdout);
}

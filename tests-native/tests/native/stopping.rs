//! Stopping repochd mid-recovery (docs/ARCHITECTURE.md, "Stopping"): SIGTERM, as
//! `systemctl stop`, `systemctl restart` and a package upgrade send it. A recovery that has
//! not written its intent ends refused `daemon-stopping` (exit 2), nothing written, and
//! its consumer is told the same; one past its intent runs to its own end and the operator
//! reads the real outcome; then repochd exits 0. The operator's outcome always equals what
//! `repoch status` says afterwards, and a repochd started right after the old one exited
//! is never `issuer-busy`.

use std::time::Duration;

use repoch_tests_native::*;

use crate::e2e::{records, AtBarrier};
use crate::granted::{waiting, Guard};

/// How long a stopped repochd may take to end a recovery and exit (well under its own
/// bound, `custody_seconds + persisted_ack_seconds + 30`).
const EXIT_SECONDS_MAX: u64 = 15;

/// Whether `barrier` comes before `other` in the issuance.
fn before(barrier: &str, other: &str) -> bool {
    let at = |b: &str| {
        repoch_issuer::barrier::BARRIERS
            .iter()
            .position(|x| *x == b)
            .unwrap()
    };
    at(barrier) < at(other)
}

/// Nothing was written and the epoch stays recoverable: a repochd started at once (what a
/// restart does) takes a new recovery, and it is granted, never busy.
fn recoverable_at_once(s: &Sandbox, id: &str, what: &str) {
    let _d = s.daemon();
    let mut c = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant2.cbor", &[]));
    let r = Guard::spawn(s.recover(&id[..6], 20, &[])).finish();
    assert_eq!(
        r.code,
        Outcome::Success,
        "{what}: the recovery after the restart: {}",
        r.stdout
    );
    assert_eq!(r.outcome()["outcome"], "granted", "{what}");
    assert_eq!(c.finish().code, Outcome::Success, "{what}");
}

/// A recovery in progress with repochd stopped at a barrier: a fresh sandbox and
/// deployment, its consumer registered as waiting, `repoch recover` running.
pub(crate) struct StoppedRecovery {
    pub(crate) s: Sandbox,
    pub(crate) id: String,
    pub(crate) d: AtBarrier,
    pub(crate) consumer: Guard,
    pub(crate) recover: Guard,
}

/// Starts repochd stopping at `barrier`, its consumer (`grant.cbor`) and `repoch recover`,
/// and returns once repochd stopped there. Bind the fields in declaration order: the
/// processes are then killed before the sandbox is removed.
pub(crate) fn recovery_stopped_at(barrier: &str) -> StoppedRecovery {
    let s = Sandbox::new();
    let id = s.enroll();
    let d = AtBarrier::start(&s, barrier);
    let consumer = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant.cbor", &[]));
    waiting(&s, consumer.pid());
    let recover = Guard::spawn(s.recover(&id[..6], 20, &[]));
    d.reached();
    StoppedRecovery {
        s,
        id,
        d,
        consumer,
        recover,
    }
}

/// repochd stopped at `barrier` with a consumer waiting and a recovery in progress, then
/// sent SIGTERM and SIGCONT.
fn stop_at(barrier: &str) {
    let StoppedRecovery {
        s,
        id,
        mut d,
        consumer: mut c,
        recover: mut rec,
    } = recovery_stopped_at(barrier);
    d.stop_as_systemd_does();
    let r = rec
        .finish_within(Duration::from_secs(EXIT_SECONDS_MAX))
        .unwrap_or_else(|| panic!("{barrier}: repoch recover did not end after the stop"));
    let exit = d.exit_within(Duration::from_secs(EXIT_SECONDS_MAX));
    assert_eq!(
        exit.and_then(|e| e.code()),
        Some(0),
        "{barrier}: repochd did not exit 0 after its recovery ended:\n{}",
        d.text()
    );
    let consumer = c.finish();
    let written = records(&s, &id);
    let epoch = s.status(&id).json()["epoch"].as_str().unwrap().to_owned();
    if written == ["genesis"] {
        // Before the intent: refused daemon-stopping, the consumer told the same.
        assert!(
            !before("before-intent", barrier),
            "{barrier}: nothing written past the intent"
        );
        assert_eq!(r.code, Outcome::Refused, "{barrier}: {}", r.stdout);
        assert_eq!(r.outcome()["outcome"], "refused", "{barrier}");
        assert_eq!(r.reasons(), ["daemon-stopping"], "{barrier}: {}", r.stdout);
        assert_eq!(epoch, "enrolled", "{barrier}");
        assert_eq!(
            consumer.code,
            Outcome::Refused,
            "{barrier}: {}",
            consumer.stdout
        );
        assert_eq!(consumer.json()["reason"], "daemon-stopping", "{barrier}");
        recoverable_at_once(&s, &id, barrier);
    } else {
        // From the intent on: the real outcome, which the log says too.
        assert!(
            !before(barrier, "before-intent"),
            "{barrier}: the intent was written although repochd was stopping before it: {written:?}"
        );
        assert_eq!(
            r.code,
            Outcome::Success,
            "{barrier}: {}\n{}",
            r.stdout,
            d.text()
        );
        assert_eq!(r.outcome()["outcome"], "granted", "{barrier}");
        assert_eq!(written, ["genesis", "intent", "consume", "receipt"]);
        assert_eq!(epoch, "receipted", "{barrier}");
        assert_eq!(
            consumer.code,
            Outcome::Success,
            "{barrier}: {}",
            consumer.stdout
        );
    }
}

#[test]
#[ignore = "needs root"]
fn stopped_after_open_the_recovery_is_refused_daemon_stopping_and_recoverable() {
    require_root!();
    stop_at("after-open");
}

#[test]
#[ignore = "needs root"]
fn stopped_after_reserve_the_recovery_is_refused_daemon_stopping_and_recoverable() {
    require_root!();
    stop_at("after-reserve");
}

#[test]
#[ignore = "needs root"]
fn stopped_after_observe_the_recovery_is_refused_daemon_stopping_and_recoverable() {
    require_root!();
    stop_at("after-observe");
}

#[test]
#[ignore = "needs root"]
fn stopped_after_connect_the_recovery_is_refused_daemon_stopping_and_recoverable() {
    require_root!();
    stop_at("after-connect");
}

#[test]
#[ignore = "needs root"]
fn stopped_right_before_the_intent_the_outcome_equals_the_log() {
    require_root!();
    stop_at("before-intent");
}

#[test]
#[ignore = "needs root"]
fn stopped_after_intent_the_recovery_runs_to_its_grant() {
    require_root!();
    stop_at("after-intent");
}

#[test]
#[ignore = "needs root"]
fn stopped_after_custody_the_recovery_runs_to_its_grant() {
    require_root!();
    stop_at("after-custody");
}

#[test]
#[ignore = "needs root"]
fn stopped_after_the_first_final_verification_the_recovery_runs_to_its_grant() {
    require_root!();
    stop_at("after-final-1");
}

#[test]
#[ignore = "needs root"]
fn stopped_after_the_claim_the_recovery_runs_to_its_grant() {
    // A deployment without a registry reaches after-claim with no claim to make.
    require_root!();
    stop_at("after-claim");
}

#[test]
#[ignore = "needs root"]
fn stopped_after_consume_the_recovery_runs_to_its_grant() {
    require_root!();
    stop_at("after-consume");
}

#[test]
#[ignore = "needs root"]
fn stopped_after_receipt_the_recovery_runs_to_its_grant() {
    require_root!();
    stop_at("after-receipt");
}

#[test]
#[ignore = "needs root"]
fn stopped_after_the_second_final_verification_the_recovery_runs_to_its_grant() {
    require_root!();
    stop_at("after-final-2");
}

#[test]
#[ignore = "needs root"]
fn stopped_after_dispatch_the_recovery_runs_to_its_grant() {
    require_root!();
    stop_at("after-dispatch");
}

#[test]
#[ignore = "needs root"]
fn stopped_after_the_acknowledgement_the_recovery_runs_to_its_grant() {
    require_root!();
    stop_at("after-acknowledgement");
}

#[test]
fn every_issuance_barrier_has_a_stop_case() {
    let issuance: Vec<&str> = repoch_issuer::barrier::BARRIERS
        .iter()
        .copied()
        .take_while(|b| *b != "enroll-after-successor-check")
        .collect();
    let src = include_str!("stopping.rs");
    for b in issuance {
        assert!(
            src.contains(&format!("stop_at(\"{b}\")")),
            "no stop case for barrier {b}"
        );
    }
}

/// The measured case: a recovery waiting for its consumer (none comes) and SIGTERM. Before,
/// `repoch recover` read "uncertain: repochd stopped answering" (exit 3) and the stopping
/// repochd held the issuer lock until `--consumer-wait` ended.
#[test]
#[ignore = "needs root"]
fn a_stop_while_a_recovery_waits_for_its_consumer_refuses_it_at_once_and_exits() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let mut d = s.daemon();
    let mut rec = Guard::spawn(s.recover(&id[..6], 600, &[]));
    d.wait_log("waiting for the consumer");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(d.child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let r = rec
        .finish_within(Duration::from_secs(EXIT_SECONDS_MAX))
        .expect("repoch recover still waits after the stop");
    assert_eq!(r.code, Outcome::Refused, "{}", r.stdout);
    assert_eq!(r.reasons(), ["daemon-stopping"], "{}", r.stdout);
    let exit = exit_within(&mut d.child, Duration::from_secs(EXIT_SECONDS_MAX));
    assert_eq!(
        exit.and_then(|e| e.code()),
        Some(0),
        "{}",
        std::fs::read_to_string(&d.log).unwrap_or_default()
    );
    assert_eq!(s.status(&id).json()["epoch"], "enrolled");
    assert_eq!(records(&s, &id), ["genesis"]);
    recoverable_at_once(&s, &id, "after the stop");
}

/// Consumers waiting with no recovery in progress are told `daemon-stopping` (exit 2), not
/// cut off.
#[test]
#[ignore = "needs root"]
fn a_stop_tells_every_waiting_consumer_daemon_stopping() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let mut d = s.daemon();
    let mut c = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant.cbor", &[]));
    waiting(&s, c.pid());
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(d.child.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let r = c
        .finish_within(Duration::from_secs(EXIT_SECONDS_MAX))
        .expect("the consumer still waits after the stop");
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.json()["reason"], "daemon-stopping", "{}", r.stdout);
    let exit = exit_within(&mut d.child, Duration::from_secs(EXIT_SECONDS_MAX));
    assert_eq!(
        exit.and_then(|e| e.code()).map(Exit),
        Some(Exit::of(Outcome::Success))
    );
}

//! Signals whose default action ends a process (docs/OPERATOR.md, "Signals"): repochd never
//! dies of one in the middle of a recovery. SIGTERM, SIGINT and SIGQUIT stop it (a
//! recovery past its intent runs to its own end; docs/ARCHITECTURE.md, "Stopping"); every
//! other such signal a process can catch (a terminal's hangup, a "reload" habit's SIGHUP,
//! SIGUSR1/2, a UPS daemon's SIGPWR, the real-time signals) is ignored and logged. Sent to
//! repochd stopped at a barrier, then SIGCONT, as a signal arrives while it works.

use std::process::Command;
use std::time::Duration;

use repoch_tests_native::*;

use crate::e2e::{records, AtBarrier};
use crate::granted::Guard;
use crate::stopping::{recovery_stopped_at, StoppedRecovery};

/// The signals repochd ignores, each as `kill -s` takes it and as repochd logs it: each ends
/// a process by default. procps's `kill` names no SIGRTMAX: 64 on Linux.
const IGNORED: &[(&str, &str)] = &[
    ("HUP", "SIGHUP"),
    ("USR1", "SIGUSR1"),
    ("USR2", "SIGUSR2"),
    ("ALRM", "SIGALRM"),
    ("PIPE", "SIGPIPE"),
    ("IO", "SIGIO"),
    ("PWR", "SIGPWR"),
    ("PROF", "SIGPROF"),
    ("VTALRM", "SIGVTALRM"),
    ("XCPU", "SIGXCPU"),
    ("XFSZ", "SIGXFSZ"),
    ("STKFLT", "SIGSTKFLT"),
    ("RTMIN", "SIGRTMIN"),
    ("RTMIN+5", "SIGRTMIN+5"),
    ("64", "SIGRTMAX"),
];

/// How long repochd may take to end a recovery once it runs again.
const END_SECONDS_MAX: u64 = 20;

/// Sends `sig` (a name `kill -s` takes) to `pid`.
fn send(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success(), "kill -s {sig} {pid}");
}

/// repochd stopped at `barrier` in a recovery with its consumer waiting, sent `sig`, then
/// SIGCONT: the recovery ends granted, the log receipted. Returns repochd, still running or
/// not, and its log.
fn signalled_at(barrier: &str, sig: &str) -> (AtBarrier, Sandbox, String) {
    let StoppedRecovery {
        s,
        id,
        d,
        consumer: mut c,
        recover: mut rec,
    } = recovery_stopped_at(barrier);
    send(d.pid(), sig);
    d.signal(rustix::process::Signal::CONT);
    let r = rec
        .finish_within(Duration::from_secs(END_SECONDS_MAX))
        .unwrap_or_else(|| panic!("SIG{sig} at {barrier}: repoch recover did not end"));
    assert_eq!(
        r.code,
        Outcome::Success,
        "SIG{sig} at {barrier}: {}\n{}",
        r.stdout,
        d.text()
    );
    assert_eq!(r.outcome()["outcome"], "granted", "SIG{sig} at {barrier}");
    assert_eq!(c.finish().code, Outcome::Success, "SIG{sig} at {barrier}");
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"],
        "SIG{sig} at {barrier}"
    );
    (d, s, id)
}

#[test]
#[ignore = "needs root"]
fn a_signal_that_ends_a_process_by_default_is_ignored_past_the_intent_and_repochd_serves_on() {
    require_root!();
    for &(sig, logged) in IGNORED {
        let (mut d, s, id) = signalled_at("after-intent", sig);
        assert_eq!(
            d.exit_within(Duration::from_millis(200)),
            None,
            "SIG{sig}: repochd exited"
        );
        assert!(
            d.text().contains(&format!("{logged} ignored")),
            "SIG{sig} not logged as ignored:\n{}",
            d.text()
        );
        // Still serving: a second recovery of the deployment is answered (its epoch used).
        let r = Guard::spawn(s.recover(&id[..6], 20, &[])).finish();
        assert_eq!(
            r.reasons(),
            ["epoch-consumed"],
            "after SIG{sig}: {}",
            r.stdout
        );
    }
}

#[test]
#[ignore = "needs root"]
fn sighup_before_the_intent_stops_nothing() {
    require_root!();
    let (mut d, _s, _) = signalled_at("after-observe", "HUP");
    assert_eq!(d.exit_within(Duration::from_millis(200)), None);
}

#[test]
#[ignore = "needs root"]
fn sigquit_past_the_intent_stops_repochd_as_sigterm_does() {
    require_root!();
    let (mut d, _s, _) = signalled_at("after-intent", "QUIT");
    let exit = d.exit_within(Duration::from_secs(END_SECONDS_MAX));
    assert_eq!(
        exit.and_then(|e| e.code()),
        Some(0),
        "repochd did not stop after SIGQUIT:\n{}",
        d.text()
    );
}

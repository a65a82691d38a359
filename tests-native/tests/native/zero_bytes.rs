//! No grant byte on any refusal after the intent: the consumer side proves it. The peek
//! consumer (`repoch-test-helper peek-consumer`, enrolled as the consumer executable, with
//! the real key) peeks what repochd queued before reading it (a `refused` frame, never a
//! `grant`), then reads to EOF with `recvmsg` (no other frame, no fd). The real
//! `repoch-consume ... -- touch MARKER` never starts its command. The late mutations
//! (withheld at the first and second final verification) run both consumers in
//! `e2e::*_is_withheld*`; here: the refusals the consumer itself causes.

use repoch_tests_native::*;

use crate::e2e::{finish, records, recover_bg, run, AtBarrier, Consumer, Side};

/// repochd's `CUSTODY_SECONDS_MAX` (daemon/src/limits.rs).
const CUSTODY_SECONDS: u64 = 10;

/// The peek consumer answers the challenge in `mode`; repochd withholds with `reason`.
fn refused_by_the_peek_consumer(mode: &str, reason: &str) {
    let s = Sandbox::new();
    let id = Side::Peek.enroll(&s, "");
    let d = s.daemon();
    let c = Consumer::start_mode(&s, &id, Side::Peek, &Side::Peek.exe(), mode);
    if let Consumer::Peek(p) = &c {
        d.wait_log(&format!("pid={}", p.pid()));
    }
    let r = run(s.recover(&id[..6], 20, &[]));
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.reasons(), [reason], "{}", r.stdout);
    c.refused_without_a_grant_byte(&s, reason);
    assert_eq!(records(&s, &id), ["genesis", "intent", "withheld"]);
}

#[test]
#[ignore = "needs root"]
fn a_custody_answer_signed_by_another_key_is_withheld_custody_invalid_without_a_grant_byte() {
    // (The real consumer signs with the key it proved at connect: only a consumer built to
    // sign with another key reaches custody-invalid.)
    require_root!();
    refused_by_the_peek_consumer("wrong-key", "custody-invalid");
}

#[test]
#[ignore = "needs root"]
fn a_consumer_that_shuts_its_sending_side_at_the_challenge_is_withheld_consumer_lost_without_a_grant_byte(
) {
    require_root!();
    refused_by_the_peek_consumer("half-close", "consumer-lost");
}

#[test]
#[ignore = "needs root"]
fn a_real_consumer_stopped_past_the_custody_deadline_is_withheld_and_never_starts_its_command() {
    // repochd stops after the intent; the real consumer (`-- touch MARKER`) is stopped;
    // repochd goes on, challenges it and gives up at the custody deadline: withheld
    // consumer-lost. The consumer, continued, reads the challenge and what follows: it must
    // exit refused or uncertain, persist no grant and never start its command.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = AtBarrier::start(&s, "after-intent");
    let c = Consumer::start(&s, &id, Side::Real, &Side::Real.exe());
    let Consumer::Real(child) = &c else {
        unreachable!()
    };
    let consumer_pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let rec = recover_bg(&s, &id[..6], 20);
    d.reached();
    rustix::process::kill_process(consumer_pid, rustix::process::Signal::STOP).unwrap();
    d.signal(rustix::process::Signal::CONT);
    let start = std::time::Instant::now();
    let r = finish(rec);
    assert!(
        start.elapsed().as_secs() >= CUSTODY_SECONDS,
        "withheld before the custody deadline: {}",
        r.stdout
    );
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.reasons(), ["consumer-lost"], "{}", r.stdout);
    assert_eq!(records(&s, &id), ["genesis", "intent", "withheld"]);
    rustix::process::kill_process(consumer_pid, rustix::process::Signal::CONT).unwrap();
    let out = c.refused_without_a_grant_byte(&s, "consumer-lost").unwrap();
    assert!(
        out.code == Outcome::Refused || out.code == Outcome::Uncertain,
        "{}{}",
        out.stdout,
        out.stderr
    );
}

//! Signals whose default action ends a process (docs/OPERATOR.md, "Signals"): repochd never
//! dies of one in the middle of a recovery. SIGTERM, SIGINT and SIGQUIT stop it (a
//! recovery past its intent runs to its own end; docs/ARCHITECTURE.md, "Stopping"); every
//! other such signal a process can catch (a terminal's hangup, a "reload" habit's SIGHUP,
//! SIGUSR1/2, a UPS daemon's SIGPWR) is ignored and logged. Sent to repochd stopped at a
//! barrier, then SIGCONT, as a signal arrives while it works. The job-control signals, which
//! stop a process, and the real-time ones, which queue, are set to `SIG_IGN`: the kernel
//! discards them.

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
];

/// The signals repochd sets to `SIG_IGN`, as `kill -s` takes them, with their numbers: the
/// job-control ones and real-time ones (procps's `kill` names no SIGRTMAX: 64 on Linux).
const DISCARDED: &[(&str, i32)] = &[
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("RTMIN", 34),
    ("RTMIN+5", 39),
    ("64", 64),
];

/// How many real-time signals the flood sends: far more than repochd could handle in
/// [`END_SECONDS_MAX`] one by one, fewer than root's pending-signal limit.
const FLOOD_SIGNALS: usize = 30_000;

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

/// Whether the signal mask `field` of /proc/PID/status (`SigIgn:`, `ShdPnd:`) holds `n`.
fn mask_has(pid: u32, field: &str, n: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap_or_else(|| panic!("{field} in /proc/PID/status"));
    let mask = u64::from_str_radix(mask.trim(), 16).unwrap();
    mask & (1 << (n - 1)) != 0
}

/// Whether `pid` is stopped (state `T` in /proc/PID/stat).
fn stopped(pid: u32) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_name = &stat[stat.rfind(')').unwrap() + 1..];
    after_name.trim_start().starts_with('T')
}

/// When the signal reaches repochd, stopped at its barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum When {
    /// Sent while it is stopped, then SIGCONT: as a signal that arrives while it works.
    Stopped,
    /// SIGCONT first, then the signal: a job-control signal sent to a stopped process is
    /// dropped by the SIGCONT that follows, so it must come once repochd runs.
    Running,
}

/// repochd stopped at `barrier` in a recovery with its consumer waiting, sent `sig` as
/// `when` says: the recovery ends granted, the log receipted. Returns repochd, still running
/// or not, and its log.
fn signalled_at(barrier: &str, sig: &str, when: When) -> (AtBarrier, Sandbox, String) {
    let StoppedRecovery {
        s,
        id,
        d,
        consumer: mut c,
        recover: mut rec,
    } = recovery_stopped_at(barrier);
    if when == When::Stopped {
        send(d.pid(), sig);
    }
    d.signal(rustix::process::Signal::CONT);
    if when == When::Running {
        send(d.pid(), sig);
    }
    finish_granted(
        s,
        id,
        d,
        &mut c,
        &mut rec,
        &format!("SIG{sig} at {barrier}"),
    )
}

/// The recovery `rec` of `id` ends granted within [`END_SECONDS_MAX`], its consumer `c` too,
/// the log receipted.
fn finish_granted(
    s: Sandbox,
    id: String,
    d: AtBarrier,
    c: &mut Guard,
    rec: &mut Guard,
    what: &str,
) -> (AtBarrier, Sandbox, String) {
    let r = rec
        .finish_within(Duration::from_secs(END_SECONDS_MAX))
        .unwrap_or_else(|| panic!("{what}: repoch recover did not end\n{}", d.text()));
    assert_eq!(
        r.code,
        Outcome::Success,
        "{what}: {}\n{}",
        r.stdout,
        d.text()
    );
    assert_eq!(r.outcome()["outcome"], "granted", "{what}");
    assert_eq!(c.finish().code, Outcome::Success, "{what}");
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"],
        "{what}"
    );
    (d, s, id)
}

/// repochd, sent `sig` during the recovery of `id`, has not exited and still serves: a
/// second recovery of the deployment is answered (its epoch used).
fn serves_on(d: &mut AtBarrier, s: &Sandbox, id: &str, sig: &str) {
    assert_eq!(
        d.exit_within(Duration::from_millis(200)),
        None,
        "SIG{sig}: repochd exited"
    );
    let r = Guard::spawn(s.recover(&id[..6], 20, &[])).finish();
    assert_eq!(
        r.reasons(),
        ["epoch-consumed"],
        "after SIG{sig}: {}",
        r.stdout
    );
}

#[test]
#[ignore = "needs root"]
fn a_signal_that_ends_a_process_by_default_is_ignored_past_the_intent_and_repochd_serves_on() {
    require_root!();
    for &(sig, logged) in IGNORED {
        let (mut d, s, id) = signalled_at("after-intent", sig, When::Stopped);
        assert!(
            d.text().contains(&format!("{logged} ignored")),
            "SIG{sig} not logged as ignored:\n{}",
            d.text()
        );
        serves_on(&mut d, &s, &id, sig);
    }
}

#[test]
#[ignore = "needs root"]
fn sighup_before_the_intent_stops_nothing() {
    require_root!();
    let (mut d, _s, _) = signalled_at("after-observe", "HUP", When::Stopped);
    assert_eq!(d.exit_within(Duration::from_millis(200)), None);
}

#[test]
#[ignore = "needs root"]
fn sigquit_past_the_intent_stops_repochd_as_sigterm_does() {
    require_root!();
    let (mut d, _s, _) = signalled_at("after-intent", "QUIT", When::Stopped);
    let exit = d.exit_within(Duration::from_secs(END_SECONDS_MAX));
    assert_eq!(
        exit.and_then(|e| e.code()),
        Some(0),
        "repochd did not stop after SIGQUIT:\n{}",
        d.text()
    );
}

/// A job-control signal (Ctrl-Z in repochd's terminal, a background repochd touching it) or
/// a real-time one, sent to repochd as it runs on past its intent: the kernel discards it
/// (repochd's `SigIgn` holds it), repochd is never stopped, the recovery is granted and
/// repochd serves on.
#[test]
#[ignore = "needs root"]
fn a_job_control_or_real_time_signal_past_the_intent_is_discarded_and_stops_nothing() {
    require_root!();
    for &(sig, n) in DISCARDED {
        let (mut d, s, id) = signalled_at("after-intent", sig, When::Running);
        assert!(
            mask_has(d.pid(), "SigIgn:", n),
            "SIG{sig} is not ignored by repochd"
        );
        assert!(!stopped(d.pid()), "SIG{sig} stopped repochd");
        serves_on(&mut d, &s, &id, sig);
    }
}

/// A flood of queued real-time signals of every number, sent to repochd stopped right after
/// its intent: none is queued, and the recovery ends granted as soon as repochd runs again.
#[test]
#[ignore = "needs root"]
fn a_flood_of_real_time_signals_past_the_intent_queues_nothing_and_the_recovery_is_granted() {
    require_root!();
    let StoppedRecovery {
        s,
        id,
        d,
        consumer: mut c,
        recover: mut rec,
    } = recovery_stopped_at("after-intent");
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    for i in 0..FLOOD_SIGNALS {
        let n = min + (i as i32) % (max - min + 1);
        repoch_tests_native::sys::send_signal_number(d.pid(), n).unwrap();
    }
    let pending = (min..=max)
        .filter(|&n| mask_has(d.pid(), "ShdPnd:", n))
        .collect::<Vec<_>>();
    assert!(
        pending.is_empty(),
        "{FLOOD_SIGNALS} real-time signals sent, pending: {pending:?}"
    );
    d.signal(rustix::process::Signal::CONT);
    finish_granted(
        s,
        id,
        d,
        &mut c,
        &mut rec,
        "a real-time flood at after-intent",
    );
}

/// repochd's log written to a pipe nobody reads (a terminal paused with Ctrl-S, a stalled
/// SSH session, `repochd 2>&1 | less` left paused), full before the recovery starts: the
/// lines that do not fit are dropped, nothing waits for the reader, and the recovery is
/// granted.
#[test]
#[ignore = "needs root"]
fn a_log_nobody_reads_stalls_nothing_and_the_recovery_is_granted() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let (r, w) = rustix::pipe::pipe().unwrap();
    rustix::pipe::fcntl_setpipe_size(&w, 4096).unwrap();
    // The pipe opened again (a description of its own, so that making it non-blocking
    // leaves repochd's blocking): how the test fills it.
    let filler = std::fs::OpenOptions::new()
        .write(true)
        .open(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&w)
        ))
        .unwrap();
    let _d = Daemon {
        child: s
            .cmd("repochd")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::from(w))
            .spawn()
            .unwrap(),
        log: s.path("repochd.log"),
    };
    // Read until repochd is ready, then never again.
    let mut log = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&log).contains("repochd ready") {
        let n = rustix::io::read(&r, &mut buf).unwrap();
        assert!(n > 0, "repochd's log ended before it was ready");
        log.extend_from_slice(&buf[..n]);
    }
    rustix::io::ioctl_fionbio(&filler, true).unwrap();
    while rustix::io::write(&filler, b"x").is_ok() {}
    let mut c = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant.cbor", &[]));
    std::thread::sleep(Duration::from_millis(500));
    let mut rec = Guard::spawn(s.recover(&id[..6], 20, &[]));
    let r2 = rec
        .finish_within(Duration::from_secs(END_SECONDS_MAX))
        .expect("a log nobody reads: repoch recover did not end");
    assert_eq!(r2.code, Outcome::Success, "{}", r2.stdout);
    assert_eq!(r2.outcome()["outcome"], "granted");
    assert_eq!(c.finish().code, Outcome::Success);
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
    drop(r);
}

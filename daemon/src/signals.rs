//! What repochd does on each signal whose default action ends a process
//! (docs/OPERATOR.md, "Signals"). A process killed in the middle of a recovery leaves its
//! epoch interrupted for good (never repaired, never reissued), so no signal that someone
//! may send without meaning "stop" is left at its default:
//!
//! - [`STOP`] (SIGTERM, SIGINT, SIGQUIT): the stop (docs/ARCHITECTURE.md, "Stopping"): a
//!   recovery before its intent ends refused `daemon-stopping`, one past it runs to its end;
//! - [`IGNORED`]: ignored, and logged (a terminal's hangup, a "reload" habit's SIGHUP —
//!   repochd reads its configuration at start only —, a UPS daemon's SIGPWR, a stray
//!   SIGUSR1);
//! - [`DISCARDED`] and the real-time signals: set to `SIG_IGN`, so the kernel discards them
//!   as they are sent. A job-control signal (Ctrl-Z in the terminal that runs repochd, a
//!   background repochd reading or writing its terminal) would stop the process, a stall
//!   that burns a recovery past its intent; a handler would not do: a background process
//!   that catches SIGTTOU has its terminal write restarted after the handler, again and
//!   again. A flood of queued real-time signals would keep the async thread busy for a
//!   minute; ignored, none is queued. Signals 32 and 33, below SIGRTMIN, are glibc's own
//!   (thread cancellation, and the set*id calls across threads) and it refuses to change
//!   them: they keep their default;
//! - the fault signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS, SIGTRAP) keep
//!   their default: they mean the process is broken, as `panic = "abort"` does, and whoever
//!   can send one to root's process can send SIGKILL; either leaves the epoch as a crash
//!   does. SIGKILL and SIGSTOP cannot be caught.
//!
//! Handled through tokio's signal driver (a handler installed for each, no `unsafe`).

use tokio::signal::unix::{signal, Signal, SignalKind};

/// The signals that stop repochd, with their names.
pub const STOP: [(i32, &str); 3] = [
    (nix::libc::SIGTERM, "SIGTERM"),
    (nix::libc::SIGINT, "SIGINT"),
    (nix::libc::SIGQUIT, "SIGQUIT"),
];

/// The signals repochd ignores (besides the real-time ones), with their names: each ends a
/// process by default.
pub const IGNORED: &[(i32, &str)] = &[
    (nix::libc::SIGHUP, "SIGHUP"),
    (nix::libc::SIGUSR1, "SIGUSR1"),
    (nix::libc::SIGUSR2, "SIGUSR2"),
    (nix::libc::SIGALRM, "SIGALRM"),
    (nix::libc::SIGPIPE, "SIGPIPE"),
    (nix::libc::SIGIO, "SIGIO"),
    (nix::libc::SIGPWR, "SIGPWR"),
    (nix::libc::SIGPROF, "SIGPROF"),
    (nix::libc::SIGVTALRM, "SIGVTALRM"),
    (nix::libc::SIGXCPU, "SIGXCPU"),
    (nix::libc::SIGXFSZ, "SIGXFSZ"),
    (nix::libc::SIGSTKFLT, "SIGSTKFLT"),
];

/// The job-control signals, set to `SIG_IGN` with the real-time ones: each stops a process
/// by default, and a caught one is no answer (the module's comment).
pub const DISCARDED: &[(i32, &str)] = &[
    (nix::libc::SIGTSTP, "SIGTSTP"),
    (nix::libc::SIGTTIN, "SIGTTIN"),
    (nix::libc::SIGTTOU, "SIGTTOU"),
];

/// The real-time signals, SIGRTMIN to SIGRTMAX, as this C library numbers them, each with
/// the name `kill -l` gives it.
fn realtime() -> Vec<(i32, String)> {
    let (min, max) = (nix::libc::SIGRTMIN(), nix::libc::SIGRTMAX());
    (min..=max)
        .map(|n| {
            let name = match n {
                _ if n == min => "SIGRTMIN".to_owned(),
                _ if n == max => "SIGRTMAX".to_owned(),
                _ if n - min <= max - n => format!("SIGRTMIN+{}", n - min),
                _ => format!("SIGRTMAX-{}", max - n),
            };
            (n, name)
        })
        .collect()
}

/// The installed handlers: [`Signals::stop`] resolves at the first stopping signal; every
/// ignored one is logged as it comes, by a task of its own. The discarded ones have none.
#[derive(Debug)]
pub struct Signals {
    term: Signal,
    int: Signal,
    quit: Signal,
    ignoring: Vec<tokio::task::JoinHandle<()>>,
}

impl Signals {
    /// Sets every discarded signal to `SIG_IGN` and installs a handler for every stopping and
    /// ignored one. From here on none of them ends or stops the process by its default action.
    pub fn install() -> Result<Signals, String> {
        let mut discarded: Vec<(i32, String)> =
            DISCARDED.iter().map(|&(n, s)| (n, s.to_owned())).collect();
        discarded.extend(realtime());
        repoch_sys::kernel::ignore_signals(&discarded)?;
        let listen = |n: i32, name: &str| {
            signal(SignalKind::from_raw(n)).map_err(|e| format!("a handler for {name}: {e}"))
        };
        let [(t, term), (i, int), (q, quit)] = STOP;
        let (term, int, quit) = (listen(t, term)?, listen(i, int)?, listen(q, quit)?);
        let mut ignoring = Vec::with_capacity(IGNORED.len());
        for &(n, name) in IGNORED {
            let mut s = listen(n, name)?;
            ignoring.push(tokio::spawn(async move {
                while s.recv().await.is_some() {
                    tracing::warn!(
                        signal = %name,
                        "{name} ignored: repochd stops on SIGTERM, SIGINT or SIGQUIT only, and reads its configuration at start"
                    );
                }
            }));
        }
        Ok(Signals {
            term,
            int,
            quit,
            ignoring,
        })
    }

    /// The first stopping signal to arrive: its name.
    pub async fn stop(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => STOP[0].1,
            _ = self.int.recv() => STOP[1].1,
            _ = self.quit.recv() => STOP[2].1,
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for t in &self.ignoring {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every real-time signal, named as `kill -l` names it (SIGRTMIN+N up to the middle,
    /// SIGRTMAX-N after).
    #[test]
    fn the_realtime_signals_are_every_one_from_min_to_max_named_as_kill_names_them() {
        let rt = realtime();
        let (min, max) = (nix::libc::SIGRTMIN(), nix::libc::SIGRTMAX());
        assert_eq!(rt.len() as i32, max - min + 1);
        assert_eq!(rt[0], (min, "SIGRTMIN".to_owned()));
        assert_eq!(rt[1], (min + 1, "SIGRTMIN+1".to_owned()));
        assert_eq!(rt[rt.len() - 2], (max - 1, "SIGRTMAX-1".to_owned()));
        assert_eq!(rt[rt.len() - 1], (max, "SIGRTMAX".to_owned()));
    }

    /// No signal is in two of the lists, and none of the fault signals is in any.
    #[test]
    fn the_stopping_and_ignored_signals_are_disjoint_and_leave_the_faults_alone() {
        for (n, name) in &STOP {
            assert!(!IGNORED.iter().any(|(m, _)| m == n), "{name}");
            assert!(!DISCARDED.iter().any(|(m, _)| m == n), "{name}");
        }
        for (n, name) in IGNORED {
            assert!(!DISCARDED.iter().any(|(m, _)| m == n), "{name}");
        }
        for fault in [
            nix::libc::SIGSEGV,
            nix::libc::SIGBUS,
            nix::libc::SIGILL,
            nix::libc::SIGFPE,
            nix::libc::SIGABRT,
            nix::libc::SIGSYS,
            nix::libc::SIGTRAP,
        ] {
            assert!(!STOP
                .iter()
                .chain(IGNORED)
                .chain(DISCARDED)
                .any(|(n, _)| *n == fault));
        }
    }
}

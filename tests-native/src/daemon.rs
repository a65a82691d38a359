//! repochd started by a test: ready, at a named barrier, stopped on drop.

use std::path::PathBuf;

use crate::*;

/// A running `repochd` for one sandbox; stopped (SIGTERM) on drop. Its log is kept in the
/// sandbox so tests can wait for named lines (barriers).
#[derive(Debug)]
pub struct Daemon {
    pub child: std::process::Child,
    pub log: PathBuf,
}

/// Longest wait for a daemon to listen, log a line or stop at a barrier. The tests share
/// one host: while another test floods it with processes (`abuse`, `burn`), every
/// observation walks them all and takes seconds, so a recovery can need two or three
/// observations' worth (a burn trial at `after-receipt` missed 20 s so, once in a full run).
pub const DAEMON_WAIT_SECONDS_MAX: u64 = 60;

impl Daemon {
    /// Waits until the daemon's log contains `needle`.
    pub fn wait_log(&self, needle: &str) -> String {
        let start = std::time::Instant::now();
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains(needle) {
                return log;
            }
            assert!(
                start.elapsed().as_secs() < DAEMON_WAIT_SECONDS_MAX,
                "repochd never logged {needle:?}:\n{log}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        for _ in 0..200 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// repochd started with `REPOCH_BARRIER`: it stops itself right after the named step.
#[derive(Debug)]
pub struct AtBarrier {
    daemon: std::process::Child,
    log: std::path::PathBuf,
    barrier: String,
}

impl AtBarrier {
    pub fn start(s: &Sandbox, barrier: &str) -> AtBarrier {
        AtBarrier::start_with(s, barrier, &[])
    }
    /// The same, with more arguments for repochd (e.g. `--config FILE`).
    pub fn start_with(s: &Sandbox, barrier: &str, args: &[&str]) -> AtBarrier {
        AtBarrier::start_env(s, barrier, args, &[])
    }
    /// The same, with more variables in repochd's environment (`NAME`, `VALUE`).
    pub fn start_env(s: &Sandbox, barrier: &str, args: &[&str], env: &[(&str, &str)]) -> AtBarrier {
        let log = s.path("repochd.log");
        let daemon = s
            .cmd("repochd")
            .args(args)
            .envs(env.iter().copied())
            .env("REPOCH_BARRIER", barrier)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let d = AtBarrier {
            daemon,
            log,
            barrier: barrier.to_owned(),
        };
        d.wait_for(|t| t.contains("repochd ready"), "start");
        assert!(d.text().contains("barriers=true"), "this repochd was built without barriers: build it with `cargo test --workspace` (a plain `cargo build` leaves one without)");
        d
    }
    pub fn pid(&self) -> u32 {
        self.daemon.id()
    }
    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    fn wait_for(&self, ok: impl Fn(&str) -> bool, what: &str) {
        let start = std::time::Instant::now();
        while !ok(&self.text()) {
            assert!(
                start.elapsed().as_secs() < DAEMON_WAIT_SECONDS_MAX,
                "repochd did not {what}:\n{}",
                self.text()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    /// The barrier: logged, and the process stopped there.
    pub fn reached(&self) {
        stopped_at(&self.log, self.daemon.id(), &self.barrier, "repochd");
    }
    pub fn signal(&self, sig: rustix::process::Signal) {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.daemon.id() as i32).unwrap(),
            sig,
        )
        .unwrap();
    }
    /// What `systemctl stop` does to it, stopped at its barrier: SIGTERM, then SIGCONT.
    pub fn stop_as_systemd_does(&self) {
        self.signal(rustix::process::Signal::TERM);
        self.signal(rustix::process::Signal::CONT);
    }
    /// Its exit status once it exits, at most `limit` from now; `None` if it still runs.
    pub fn exit_within(&mut self, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
        exit_within(&mut self.daemon, limit)
    }
}

impl Drop for AtBarrier {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

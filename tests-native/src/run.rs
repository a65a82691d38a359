//! Running a binary and reading what it said: its status as an `Exit` compared with an
//! `Outcome`, its stdout as JSON, its facts and reasons.

use std::process::{Command, Output, Stdio};

use crate::*;

/// A process's exit status, compared with the [`Outcome`] it documents
/// (docs/EXIT-CODES.md): tests name outcomes, not numbers, and a mismatch prints both.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Exit(pub i32);

impl Exit {
    /// The status of a process ended by a signal (it has no exit code).
    pub const SIGNALED: Exit = Exit(-1);
    /// The status a command ending in `o` exits with.
    pub fn of(o: Outcome) -> Exit {
        Exit(i32::from(o.code()))
    }
    /// The outcome this status is, if it is one.
    pub fn outcome(self) -> Option<Outcome> {
        Outcome::from_exit(self.0)
    }
    /// Whether this is a command interrupted by the operator (Ctrl-C): ended by the signal,
    /// or 130, a shell's way of saying so. Not an outcome.
    pub fn interrupted(self) -> bool {
        self == Exit::SIGNALED || self.0 == 130
    }
}

impl PartialEq<Outcome> for Exit {
    fn eq(&self, o: &Outcome) -> bool {
        self.0 == i32::from(o.code())
    }
}

impl std::fmt::Debug for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.outcome() {
            Some(o) => write!(f, "{} ({})", self.0, o.name()),
            None if *self == Exit::SIGNALED => f.write_str("killed by a signal"),
            None => write!(f, "{} (no documented outcome)", self.0),
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// The result of running a binary.
#[derive(Debug)]
pub struct Run {
    pub code: Exit,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        let line = self
            .stdout
            .lines()
            .last()
            .unwrap_or_else(|| panic!("no stdout; stderr: {}", self.stderr));
        serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\nstderr: {}", self.stderr))
    }
    /// Every JSON line of stdout.
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
    /// The final `outcome` line of `repoch --json recover`.
    pub fn outcome(&self) -> serde_json::Value {
        self.json_lines()
            .into_iter()
            .rev()
            .find(|j| j["event"] == "outcome")
            .unwrap_or_else(|| panic!("no outcome:\n{}\n{}", self.stdout, self.stderr))
    }
    pub fn reasons(&self) -> Vec<String> {
        self.outcome()["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_owned())
            .collect()
    }
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: Exit(o.status.code().unwrap_or(-1)),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// The failed facts of an observation, as `(kind, reason)`.
pub fn failed(r: &Run) -> Vec<(String, String)> {
    let j = r.json();
    j["facts"]
        .as_array()
        .unwrap_or_else(|| panic!("no facts: {j}"))
        .iter()
        .filter(|f| f["holds"] == false)
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_owned(),
                f["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The observed text of the first failed fact of `kind`.
pub fn observed(r: &Run, kind: &str) -> String {
    r.json()["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind && f["holds"] == false)
        .map(|f| f["observed"].as_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// The observed text of the first fact of `kind`, whether it holds or not.
pub fn observed_any(r: &Run, kind: &str) -> String {
    r.json()["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind)
        .map(|f| f["observed"].as_str().unwrap().to_owned())
        .unwrap_or_default()
}

pub fn sh(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

pub fn run(mut c: Command) -> Run {
    c.stdin(Stdio::null()).output().expect("spawn").into()
}

/// Runs `c` to its end: what it printed, and its peak resident set (KiB) as the kernel
/// counted it at exit. `c` is run by the test helper's `peak`: a child's `ru_maxrss` holds
/// the peak of the address space it was forked from (exec records it), and a test process
/// running trials beside each other can be hundreds of MiB.
pub fn run_with_peak(c: Command) -> (Run, u64) {
    let file = tempfile::NamedTempFile::new().expect("a file for the peak");
    let mut wrapped = crate::process::helper(&["peak", file.path().to_str().unwrap()]);
    wrapped.arg(c.get_program()).args(c.get_args());
    for (k, v) in c.get_envs() {
        match v {
            Some(v) => wrapped.env(k, v),
            None => wrapped.env_remove(k),
        };
    }
    if let Some(dir) = c.get_current_dir() {
        wrapped.current_dir(dir);
    }
    let r = run(wrapped);
    let peak = std::fs::read_to_string(file.path())
        .expect("the helper wrote the peak")
        .trim()
        .parse()
        .expect("a number of KiB");
    (r, peak)
}

pub fn finish(c: std::process::Child) -> Run {
    c.wait_with_output().unwrap().into()
}

/// The reasons of the facts that failed, in order.
pub fn failed_reasons(r: &Run) -> Vec<String> {
    failed(r).into_iter().map(|(_, reason)| reason).collect()
}

/// Every fact held: success.
pub fn assert_holds(r: &Run) {
    assert_eq!(
        r.code,
        Outcome::Success,
        "expected every fact to hold: {:?}\n{}{}",
        failed(r),
        r.stdout,
        r.stderr
    );
}

/// A command other than a recovery or an observation (enroll, an admin request) refused,
/// its first refusal for `reason`.
pub fn assert_first_refusal(r: &Run, reason: &str) {
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.json()["refusals"][0]["reason"], reason, "{}", r.stdout);
}

/// Refused for `reason` alone.
pub fn assert_refused(r: &Run, reason: &str) {
    assert_eq!(
        r.code,
        Outcome::Refused,
        "expected {reason}: {}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(failed_reasons(r), [reason], "{}", r.stdout);
}

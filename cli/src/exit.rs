//! A command's failures, each with its [`Outcome`] (docs/EXIT-CODES.md), and how they are
//! reported.

use repoch_issuer::Refusal;
use repoch_protocol::{Outcome, Reason};

/// Everything a command can end with besides success.
#[derive(Debug)]
pub enum Failure {
    /// A prerequisite failed, or the epoch is terminal (exit 2).
    Refused(Vec<Refusal>),
    /// The epoch was consumed or partially published; its outcome cannot be known (exit 3).
    Uncertain(String),
    /// Another issuer holds the epoch now (exit 4).
    Busy(Refusal),
    /// The epoch log does not extend a checkpoint its issuer signed earlier: rolled back,
    /// forked or truncated, with the evidence pair (exit 5).
    Inconsistent(Refusal),
    /// Bad arguments (exit 64).
    Usage(String),
    /// A manifest the host cannot enroll as written, with its reason (exit 64).
    Manifest(Refusal),
    /// A bug (exit 70).
    Internal(String),
}

impl Failure {
    pub fn refused(r: Refusal) -> Failure {
        if r.reason == Reason::IssuerBusy {
            return Failure::Busy(r);
        }
        Failure::Refused(vec![r])
    }
    pub fn outcome(&self) -> Outcome {
        match self {
            Failure::Refused(_) => Outcome::Refused,
            Failure::Uncertain(_) => Outcome::Uncertain,
            Failure::Busy(_) => Outcome::Busy,
            Failure::Inconsistent(_) => Outcome::Inconsistent,
            Failure::Usage(_) | Failure::Manifest(_) => Outcome::Usage,
            Failure::Internal(_) => Outcome::Internal,
        }
    }
    pub fn refusals(&self) -> Vec<&Refusal> {
        match self {
            Failure::Refused(v) => v.iter().collect(),
            Failure::Busy(r) | Failure::Manifest(r) | Failure::Inconsistent(r) => vec![r],
            _ => vec![],
        }
    }
    pub fn message(&self) -> String {
        match self {
            Failure::Refused(v) => v
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
            Failure::Busy(r) | Failure::Manifest(r) | Failure::Inconsistent(r) => r.to_string(),
            Failure::Uncertain(s) | Failure::Usage(s) | Failure::Internal(s) => s.clone(),
        }
    }
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "outcome": self.outcome().name(),
            "exit": self.outcome().code(),
            "message": self.message(),
            "refusals": self.refusals().iter().map(|r| refusal_json(r)).collect::<Vec<_>>(),
        })
    }
    /// Prints the failure (to stderr, or as JSON on stdout) and returns its outcome.
    pub fn report(&self, json: bool) -> Outcome {
        if json {
            crate::out::say(&self.to_json().to_string());
        } else {
            crate::out::warn(&format!("repoch: {}: {}", self.outcome(), self.message()));
        }
        self.outcome()
    }
}

pub fn refusal_json(r: &Refusal) -> serde_json::Value {
    serde_json::json!({"reason": r.reason.as_str(), "subject": r.subject, "expected": r.expected, "observed": r.observed})
}

impl From<Refusal> for Failure {
    fn from(r: Refusal) -> Self {
        Failure::refused(r)
    }
}

/// clap's errors: help and version print and exit 0; every usage error exits 64 (not
/// clap's default 2, which would read as a refusal).
pub fn clap_exit(e: clap::Error) -> Outcome {
    use clap::error::ErrorKind;
    let _ = e.print();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Outcome::Success,
        _ => Outcome::Usage,
    }
}

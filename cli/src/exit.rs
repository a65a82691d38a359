//! A command's failures, each with its [`Outcome`] (docs/EXIT-CODES.md), and how they are
//! reported.

use repoch_issuer::Refusal;
use repoch_protocol::{Outcome, Reason};

/// A failure's explanation: what went wrong and, when an error caused it, that error, kept
/// as the source (`std::error::Error::source`) rather than flattened into the text. Printed
/// as `what: error`.
#[derive(Debug)]
pub struct Why {
    what: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Why {
    /// `what` failed because of `e`.
    pub fn of(
        what: impl std::fmt::Display,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> Why {
        Why {
            what: what.to_string(),
            source: Some(Box::new(e)),
        }
    }
    /// An error that says all there is to say itself.
    pub fn error(e: impl std::error::Error + Send + Sync + 'static) -> Why {
        Why {
            what: String::new(),
            source: Some(Box::new(e)),
        }
    }
    /// The error below, if any.
    pub fn source(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.what[..], &self.source) {
            ("", Some(e)) => write!(f, "{e}"),
            (w, Some(e)) => write!(f, "{w}: {e}"),
            (w, None) => f.write_str(w),
        }
    }
}

impl From<String> for Why {
    fn from(what: String) -> Why {
        Why { what, source: None }
    }
}

impl From<&str> for Why {
    fn from(what: &str) -> Why {
        Why::from(what.to_owned())
    }
}

/// Everything a command can end with besides success.
#[derive(Debug)]
pub enum Failure {
    /// A prerequisite failed, or the epoch is terminal (exit 2).
    Refused(Vec<Refusal>),
    /// The epoch was consumed or partially published; its outcome cannot be known (exit 3).
    Uncertain(Why),
    /// Another issuer holds the epoch now (exit 4).
    Busy(Refusal),
    /// The epoch log does not extend a checkpoint its issuer signed earlier: rolled back,
    /// forked or truncated, with the evidence pair (exit 5).
    Inconsistent(Refusal),
    /// Bad arguments (exit 64).
    Usage(Why),
    /// A manifest the host cannot enroll as written, with its reason (exit 64).
    Manifest(Refusal),
    /// A bug (exit 70).
    Internal(Why),
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
            // A path or a system's text given back (a manifest path holding U+202E, an
            // engine's answer) is shown escaped, as a refusal's texts are (docs/PROTOCOL.md,
            // "Text"); no message here has a line of its own to keep.
            Failure::Uncertain(w) | Failure::Usage(w) | Failure::Internal(w) => {
                repoch_protocol::text::escape(&w.to_string()).into_owned()
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure caused by an error keeps it as the source and reads `what: error`; the
    /// outcome is the variant's.
    #[test]
    fn a_failure_keeps_the_error_below_it() {
        let e = std::fs::File::open("/nonexistent/repoch").unwrap_err();
        let f = Failure::Internal(Why::of("reading the journal", e));
        assert_eq!(
            f.message(),
            "reading the journal: No such file or directory (os error 2)"
        );
        assert_eq!(f.outcome(), Outcome::Internal);
        let Failure::Internal(why) = &f else {
            unreachable!()
        };
        let below = why.source().unwrap();
        assert_eq!(
            below
                .downcast_ref::<std::io::Error>()
                .map(std::io::Error::kind),
            Some(std::io::ErrorKind::NotFound)
        );
        assert_eq!(Failure::Usage("bad".into()).message(), "bad");
    }
}

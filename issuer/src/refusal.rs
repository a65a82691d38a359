//! Refusals are data: a stable reason code, the subject, what was expected and observed.

use std::fmt;

use repoch_protocol::{Fact, Reason};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub subject: String,
    pub expected: String,
    pub observed: String,
}

impl Refusal {
    /// A refusal; its texts, which may come from outside (a peer's executable or cgroup,
    /// an errno's text about a path), escaped by the one text rule
    /// (`repoch_protocol::text`, docs/PROTOCOL.md "Text") before anything prints, logs,
    /// sends or signs them.
    pub fn new(
        reason: Reason,
        subject: impl Into<String>,
        expected: impl Into<String>,
        observed: impl Into<String>,
    ) -> Self {
        let esc = |s: String| repoch_protocol::text::escape(&s).into_owned();
        Refusal {
            reason,
            subject: esc(subject.into()),
            expected: esc(expected.into()),
            observed: esc(observed.into()),
        }
    }
    /// A refusal of texts each escaped by the one text rule where it was read (an audit's
    /// evidence pair, which its report prints as well): escaped again, a backslash would
    /// read doubled.
    pub fn of_escaped(reason: Reason, subject: String, expected: String, observed: String) -> Self {
        Refusal {
            reason,
            subject,
            expected,
            observed,
        }
    }
    /// Everything but the reason: what a wire `refused` message, which carries the reason
    /// apart, says as its detail.
    /// A peer that is not the enrolled consumer: `what` (uid/gid, executable, cgroup, key)
    /// is not what was enrolled. The one wording, at `hello` (repochd turns the peer away
    /// before it waits) and at `connect` (the issuance's own check).
    pub fn consumer_rejected(
        subject: &str,
        what: &str,
        enrolled: impl fmt::Display,
        observed: impl fmt::Display,
    ) -> Refusal {
        Refusal::new(
            Reason::ConsumerRejected,
            subject,
            format!("{what} {enrolled}"),
            format!("{what} {observed}"),
        )
    }
    pub fn detail(&self) -> String {
        format!(
            "{}: expected {}, observed {}",
            self.subject, self.expected, self.observed
        )
    }
    /// The refusal a failed fact makes (its texts were escaped when it was made).
    pub fn from_fact(f: &Fact) -> Option<Refusal> {
        f.reason.map(|reason| Refusal {
            reason,
            subject: f.subject.clone(),
            expected: f.expected.clone(),
            observed: f.observed.clone(),
        })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.detail())
    }
}

impl std::error::Error for Refusal {}

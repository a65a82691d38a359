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
    pub fn new(
        reason: Reason,
        subject: impl Into<String>,
        expected: impl Into<String>,
        observed: impl Into<String>,
    ) -> Self {
        Refusal {
            reason,
            subject: subject.into(),
            expected: expected.into(),
            observed: observed.into(),
        }
    }
    /// Everything but the reason: what a wire `refused` message, which carries the reason
    /// apart, says as its detail.
    pub fn detail(&self) -> String {
        format!(
            "{}: expected {}, observed {}",
            self.subject, self.expected, self.observed
        )
    }
    pub fn from_fact(f: &Fact) -> Option<Refusal> {
        f.reason
            .map(|r| Refusal::new(r, &f.subject, &f.expected, &f.observed))
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.detail())
    }
}

impl std::error::Error for Refusal {}

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
    pub fn from_fact(f: &Fact) -> Option<Refusal> {
        f.reason
            .map(|r| Refusal::new(r, &f.subject, &f.expected, &f.observed))
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: expected {}, observed {}",
            self.reason, self.subject, self.expected, self.observed
        )
    }
}

impl std::error::Error for Refusal {}

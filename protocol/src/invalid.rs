//! The error of a value that breaks a documented rule.

/// A value that breaks a documented rule (a name, a path, a prefix, a record): the fault of
/// the input that carried it (a manifest, a record, an argument, a registry's answer),
/// never of the host or of repoch. Its text names the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl From<String> for Invalid {
    fn from(s: String) -> Invalid {
        Invalid(s)
    }
}

impl From<&str> for Invalid {
    fn from(s: &str) -> Invalid {
        Invalid(s.to_owned())
    }
}

impl From<Invalid> for String {
    fn from(e: Invalid) -> String {
        e.0
    }
}

/// Its text, as a message (`e.contains(..)` in a test, `&e[..]` in a format).
impl std::ops::Deref for Invalid {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

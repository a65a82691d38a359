//! Why a view of the kernel could not be had: what was being done, and the error below it,
//! kept as the source (`std::error::Error::source`), never flattened into text.

use std::fmt::Display;

/// A `repoch-sys` error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `what` failed because of `source` (a system call's errno, or a deeper error of ours).
    #[error("{what}: {source}")]
    Context {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// What the kernel (or a file) gave is not what this code reads: malformed, truncated,
    /// inconsistent, or over a named bound. The text says which.
    #[error("{0}")]
    Found(String),
}

/// A `repoch-sys` result.
pub type Result<T> = std::result::Result<T, Error>;

/// Adds what was being done to an error, keeping the error as the source.
pub trait Context<T> {
    fn context(self, what: impl Display) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Display) -> Result<T> {
        self.map_err(|e| Error::Context {
            what: what.to_string(),
            source: Box::new(e),
        })
    }
}

/// The text of an error, for a fact's `observed` or a refusal's detail (callers above this
/// crate still carry text there).
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}

/// A message with no error below it: what was found ([`Error::Found`]).
impl From<String> for Error {
    fn from(s: String) -> Error {
        Error::Found(s)
    }
}

impl From<&str> for Error {
    fn from(s: &str) -> Error {
        Error::Found(s.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The context is added in front, the error below is kept as the source, and its text
    /// is what the caller would have formatted by hand.
    #[test]
    fn context_keeps_the_source() {
        let e = std::fs::File::open("/nonexistent/repoch").context("/nonexistent/repoch");
        let e = e.context("opening the journal").unwrap_err();
        assert_eq!(
            e.to_string(),
            "opening the journal: /nonexistent/repoch: No such file or directory (os error 2)"
        );
        let below = std::error::Error::source(&e).unwrap();
        let io = std::error::Error::source(below).unwrap();
        assert_eq!(
            io.downcast_ref::<std::io::Error>()
                .map(std::io::Error::kind),
            Some(std::io::ErrorKind::NotFound)
        );
    }
}

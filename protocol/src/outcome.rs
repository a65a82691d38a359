//! What a command's run came to, and its process exit code: the one table of
//! docs/EXIT-CODES.md, shared by every binary (`repoch`, `repochd`, `repoch-consume`).
//! Each binary's `main` turns an [`Outcome`] into its exit code, once; nothing else
//! names an exit number.

/// The outcome of a command, one per row of docs/EXIT-CODES.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The command did what was asked, and everything it verified holds (exit 0).
    Success,
    /// Something it verified does not hold, or a precondition failed (exit 2).
    Refused,
    /// An epoch may have been used and the outcome cannot be known (exit 3).
    Uncertain,
    /// Another issuer holds the epoch now (exit 4).
    Busy,
    /// An epoch log does not extend a checkpoint its issuer signed earlier (exit 5).
    Inconsistent,
    /// Bad arguments, a manifest the host cannot enroll, an unreadable key file (exit 64).
    Usage,
    /// A bug, or a peer speaking a malformed protocol (exit 70).
    Internal,
}

impl Outcome {
    /// The outcome a process's exit status documents, if it is one (docs/EXIT-CODES.md): a
    /// supervisor reading `repoch` or `repoch-consume` maps the status back with this.
    pub fn from_exit(status: i32) -> Option<Outcome> {
        Outcome::ALL
            .into_iter()
            .find(|o| i32::from(o.code()) == status)
    }
    /// Every outcome, in the order of docs/EXIT-CODES.md.
    pub const ALL: [Outcome; 7] = [
        Outcome::Success,
        Outcome::Refused,
        Outcome::Uncertain,
        Outcome::Busy,
        Outcome::Inconsistent,
        Outcome::Usage,
        Outcome::Internal,
    ];

    /// The process exit code (docs/EXIT-CODES.md).
    pub const fn code(self) -> u8 {
        match self {
            Outcome::Success => 0,
            Outcome::Refused => 2,
            Outcome::Uncertain => 3,
            Outcome::Busy => 4,
            Outcome::Inconsistent => 5,
            Outcome::Usage => 64,
            Outcome::Internal => 70,
        }
    }

    /// The table's name for the code: `--json`'s `outcome` of a failure. (A success
    /// names what succeeded, `granted`, `verified`, …, not `success`.)
    pub const fn name(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Refused => "refused",
            Outcome::Uncertain => "uncertain",
            Outcome::Busy => "busy",
            Outcome::Inconsistent => "inconsistent",
            Outcome::Usage => "usage",
            Outcome::Internal => "internal",
        }
    }

    pub const fn is_success(self) -> bool {
        matches!(self, Outcome::Success)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

//! `repochd`: the recovery-epoch daemon. See `repochd --help` and docs/OPERATOR.md.
#![forbid(unsafe_code)]

use std::process::ExitCode;

/// The one place `repochd`'s outcome becomes its exit code (docs/EXIT-CODES.md).
fn main() -> ExitCode {
    ExitCode::from(repoch_daemon::repochd::main().code())
}

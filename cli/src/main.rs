//! `repoch`: the operator and auditor CLI. See `repoch --help` and docs/OPERATOR.md.
#![forbid(unsafe_code)]

use std::process::ExitCode;

/// The one place `repoch`'s outcome becomes its exit code (docs/EXIT-CODES.md).
fn main() -> ExitCode {
    ExitCode::from(repoch_cli::cmd::main().code())
}

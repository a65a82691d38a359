//! `repoch-consume`: the worker supervisor's CLI. See `repoch-consume --help`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

/// The one place `repoch-consume`'s outcome becomes its exit code (docs/EXIT-CODES.md).
fn main() -> ExitCode {
    ExitCode::from(repoch_consumer::cli::main().code())
}

//! `repoch`, the operator and auditor CLI (docs/OPERATOR.md, docs/AUDITOR.md): one module
//! per command under `cmd/`, each ending in an `Outcome` or a [`exit::Failure`]; `out`
//! prints; `audit` verifies logs offline with `repoch-protocol` and `repoch-sys`'s bounded
//! reader alone. Synchronous: no async runtime (docs/ARCHITECTURE.md, "Invariants").
#![forbid(unsafe_code)]

pub mod audit;
pub mod cmd;
pub mod exit;
pub mod out;

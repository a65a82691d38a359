//! `repochd`, the recovery-epoch daemon, and `repoch`, the operator and auditor CLI.
//! Only this crate knows about sockets, socket activation and `sd_notify`.
#![forbid(unsafe_code)]

pub mod audit;
pub mod cli;
pub mod exit;

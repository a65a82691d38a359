//! `repochd`, the recovery-epoch daemon, and `repoch`, the operator and auditor CLI.
//! Only this crate knows about sockets, socket activation and `sd_notify`.
#![deny(unsafe_code)]

pub mod admission;
pub mod audit;
pub mod cmd;
pub mod conn;
pub mod epochs;
pub mod exit;
pub mod limits;
pub mod link;
pub mod notify;
pub mod repochd;
pub mod server;
pub mod sys;

//! `repochd`, the recovery-epoch daemon: its sockets (the one server of the admin and grant
//! sockets), admission, the consumer link, the stop, socket activation and `sd_notify`.
//! The only crate with an async runtime (docs/ARCHITECTURE.md, "Invariants").
#![deny(unsafe_code)]

pub mod admin;
pub mod admission;
pub mod conn;
pub mod epochs;
pub mod frames;
pub mod handshake;
pub mod limits;
pub mod link;
pub mod logwriter;
pub mod notify;
pub mod repochd;
pub mod server;
pub mod signals;

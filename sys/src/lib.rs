//! The only crate that reads procfs, cgroupfs or `/proc/locks`, opens a netlink socket,
//! takes a pidfd, asks systemd, or sets an inode flag (docs/ARCHITECTURE.md, "Invariants";
//! `tests-native/tests/native/architecture.rs` keeps it). Everything else receives facts.
#![deny(unsafe_code)]

pub mod cgroup;
pub mod digest;
pub mod error;
pub mod fs;
pub mod held_by;
pub mod hold;
pub mod kernel;
mod ne;
pub mod net;
pub mod peer;
pub mod proc;
pub mod procevents;
pub mod procfs;
pub mod sockdiag;
pub mod systemd;
pub mod time;

//! The only module that reads procfs, cgroupfs, `/proc/locks`, or asks systemd.
//! Everything else receives facts.

pub mod cgroup;
pub mod hold;
pub mod net;
pub mod peer;
pub mod proc;
pub mod procfs;
pub mod sockdiag;
pub mod systemd;

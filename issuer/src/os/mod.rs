//! The only module that reads procfs, cgroupfs, `/proc/locks`, or asks systemd.
//! Everything else receives facts.

pub mod procfs;

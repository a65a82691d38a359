//! Native tests: the real binaries as real processes against real files, locks, sockets,
//! cgroups and file systems. One binary, one module per area; a fresh sandbox per test.

mod abuse;
mod acceptance;
mod bounded;
mod checkpoint;
mod containment;
mod contenders;
mod cross;
mod daemon_config;
mod deadlines;
mod disks;
mod e2e;
mod granted;
mod hostile;
mod hygiene;
mod identity;
mod inputs;
mod matrix_types;
mod observers;
mod powerloss;
mod powerloss_real;
mod store;
mod systemd_recovery;
mod told;
mod units;
mod zero_bytes;

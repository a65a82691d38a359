//! Native tests: the real binaries as real processes against real files, locks, sockets,
//! cgroups and file systems. One binary, one module per area; a fresh sandbox per test.

mod acceptance;
mod architecture;
mod bounded;
mod cancelled;
mod checkpoint;
mod containment;
mod contenders;
mod cross;
mod daemon_config;
mod deadlines;
mod discover;
mod e2e;
mod granted;
mod handoff;
mod held;
mod hostile;
mod hygiene;
mod identity;
mod idle;
mod inputs;
mod matrix_types;
mod observers;
mod principals;
mod signals;
mod stopping;
mod store;
mod texts;
mod told;
mod zero_bytes;

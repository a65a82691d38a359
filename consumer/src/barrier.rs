//! Named barriers on the consumer's side, for the native acceptance tests only
//! (docs/ARCHITECTURE.md, "Testing at barriers").
//!
//! Built with the `barriers` feature (enabled by `tests-native` as a dev-dependency, so
//! `cargo build --release` never includes it): when `REPOCH_CONSUMER_BARRIER` names a
//! barrier (comma separated), `repoch-consume` writes `barrier NAME reached` to stderr and
//! stops itself with SIGSTOP, so a test can observe it stopped at exactly that point and
//! kill it there. Without the feature, [`reach`] does nothing. (The consumer never links
//! the issuer, whose barriers are `REPOCH_BARRIER`'s.)

// A build with barriers stops at REPOCH_BARRIER: never let one be optimized for release.
// `cargo build --release --workspace --all-targets` would otherwise give release binaries
// with the barriers of the test crates' dev-dependencies (cargo unifies features).
#[cfg(all(feature = "barriers", not(debug_assertions)))]
compile_error!(
    "the `barriers` feature is for test builds only (debug assertions on); build release \
     binaries with `cargo build --release -p repoch-daemon -p repoch-cli -p repoch-consumer`"
);

/// Every consumer barrier, in protocol order: each is reached right after the named step.
pub const BARRIERS: &[&str] = &[
    // `hello` sent; the key proof not yet asked or answered.
    "after-hello",
    // The key-proof signature sent: repochd may now register this consumer as waiting.
    "after-key-proof",
    // The custody signature sent; no grant received.
    "after-custody",
    // The grant received and verified (signature, key, epoch, fence fds); nothing written.
    "after-receive",
    // The grant written to its temporary name and fsynced; not yet linked at `--out`.
    "persist-after-write",
    // The grant durable at `--out` (linked, directory fsynced); not yet acknowledged.
    "after-persist",
    // The `persisted` acknowledgement sent; repochd's last word (`granted`) not yet read.
    "after-acknowledge",
    // repochd's `granted` read: the outcome is granted; the new root not yet exec'd.
    "after-last-word",
];

/// Whether this build stops at barriers (the `barriers` feature).
pub const ENABLED: bool = cfg!(feature = "barriers");

#[cfg(feature = "barriers")]
pub fn reach(name: &str) {
    use std::io::Write as _;
    debug_assert!(BARRIERS.contains(&name), "unknown barrier {name}");
    let Ok(list) = std::env::var("REPOCH_CONSUMER_BARRIER") else {
        return;
    };
    if list.split(',').any(|b| b.trim() == name) {
        let _ = writeln!(
            std::io::stderr().lock(),
            "repoch-consume: barrier {name} reached; stopping until SIGCONT"
        );
        // The consumer is single-threaded: raise(3) stops it before it runs one more step.
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    }
}

#[cfg(not(feature = "barriers"))]
#[inline(always)]
pub fn reach(_name: &str) {}

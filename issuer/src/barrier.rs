//! Named publication barriers, for the native acceptance tests only.
//!
//! Built with the `barriers` feature (enabled by `tests-native` as a dev-dependency, so
//! `cargo build --release` never includes it): when `REPOCH_BARRIER` names a barrier
//! (comma separated), the issuing process logs `barrier NAME reached` and stops itself
//! with SIGSTOP, so a test can observe it stopped at exactly that point, then kill it
//! (`kill -9`: a crash at that boundary) or continue it (SIGCONT: overlap with a contender).
//! Without the feature, [`reach`] does nothing.

// A build with barriers stops at REPOCH_BARRIER: never let one be optimized for release.
// `cargo build --release --workspace --all-targets` would otherwise give release binaries
// with the barriers of the test crates' dev-dependencies (cargo unifies features).
#[cfg(all(feature = "barriers", not(debug_assertions)))]
compile_error!(
    "the `barriers` feature is for test builds only (debug assertions on); build release \
     binaries with `cargo build --release -p repoch-daemon -p repoch-cli -p repoch-consumer`"
);

/// Every barrier, in issuance order: each is reached right after the named step.
pub const BARRIERS: &[&str] = &[
    "after-open",
    "after-reserve",
    "after-observe",
    "after-connect",
    // The observation right before the intent done (it held), the intent not yet appended.
    "before-intent",
    "after-intent",
    "after-custody",
    "after-final-1",
    // The fleet registry's claim answered (with a `[registry]`; without one, no claim to
    // make), consume not yet appended.
    "after-claim",
    "after-consume",
    "after-receipt",
    "after-final-2",
    "after-dispatch",
    // The consumer's acknowledgement read (or its wait ended); the last word not yet sent.
    "after-acknowledgement",
    // Enrollment (repoch enroll): right after the one-successor check passed.
    "enroll-after-successor-check",
    // repoch journal append: the journal read and verified, the record about to be written.
    "journal-before-write",
];

/// Whether this build stops at barriers (the `barriers` feature).
pub const ENABLED: bool = cfg!(feature = "barriers");

#[cfg(feature = "barriers")]
pub fn reach(name: &str) {
    debug_assert!(BARRIERS.contains(&name), "unknown barrier {name}");
    let Ok(list) = std::env::var("REPOCH_BARRIER") else {
        return;
    };
    if list.split(',').any(|b| b.trim() == name) {
        tracing::warn!(
            barrier = name,
            "barrier {name} reached; stopping until SIGCONT"
        );
        // raise(3) is thread-directed (tgkill): this very thread has the stop pending when
        // the call returns, so it cannot run one more step. kill(2) on the process lets the
        // kernel pick another thread and this one may race ahead.
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    }
}

#[cfg(not(feature = "barriers"))]
#[inline(always)]
pub fn reach(_name: &str) {}

/// In test builds, `REPOCH_TEST_MARGIN_SECONDS` shortens a safety margin so a test can reach
/// the deadline it bounds in seconds rather than minutes. Release builds return `default`.
#[cfg(feature = "barriers")]
pub fn margin_seconds(default: u64) -> u64 {
    std::env::var("REPOCH_TEST_MARGIN_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[cfg(not(feature = "barriers"))]
#[inline(always)]
pub fn margin_seconds(default: u64) -> u64 {
    default
}

//! The wall clock, as repoch records it.

/// Seconds since the Unix epoch; 0 for a clock set before it (a record's time is what the
/// host said, never a verified fact).
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

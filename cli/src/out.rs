//! What the CLI prints: one line at a time, never failing the command.

/// Writes one line to stdout. An output error never aborts (`println!` panics, and a
/// panic aborts) and never changes the outcome: a reader that went away (EPIPE; Rust
/// leaves SIGPIPE ignored) or a full disk only loses the text. The command goes on to its
/// end (a recovery still reads repochd's outcome) and exits with its documented code.
pub fn say(line: &str) {
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}").and_then(|()| o.flush());
}

/// [`say`] for stderr: diagnostics, with the same guarantee.
pub fn warn(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

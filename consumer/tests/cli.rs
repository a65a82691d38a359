//! repoch-consume's CLI surface: help, keygen, offline verify. (Its presence also makes
//! `cargo test --workspace` build the binary the native tests run.)

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;

use repoch_protocol::Outcome;

fn consume(args: &[&str]) -> (Option<Outcome>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_repoch-consume"))
        .args(args)
        .output()
        .unwrap();
    (
        Outcome::from_exit(o.status.code().unwrap_or(-1)),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn help_names_the_commands_and_exit_codes() {
    let (code, out) = consume(&["--help"]);
    assert_eq!(code, Some(Outcome::Success));
    for w in ["keygen", "receive", "verify", "REPOCH_FENCE_FDS", "64"] {
        assert!(out.contains(w), "--help lacks {w}");
    }
    // Each outcome repoch-consume ends with (docs/EXIT-CODES.md), as its own line of EXIT
    // CODES: its code, then its name (a success names what succeeded).
    use repoch_protocol::Outcome;
    for o in [
        Outcome::Refused,
        Outcome::Uncertain,
        Outcome::Inconsistent,
        Outcome::Usage,
    ] {
        let line = format!("\n    {:<4}{}", o.code(), o.name());
        assert!(out.contains(&line), "--help lacks {line:?}");
    }
    assert!(
        out.contains("\n    0   granted"),
        "--help lacks the success line"
    );
    assert_eq!(consume(&["receive"]).0, Some(Outcome::Usage));
}

#[test]
fn keygen_writes_a_private_key_once() {
    let d = tempfile::tempdir().unwrap();
    let k = d.path().join("c.key");
    let (code, out) = consume(&["keygen", k.to_str().unwrap()]);
    assert_eq!(code, Some(Outcome::Success));
    assert_eq!(out.trim().len(), 64);
    assert_eq!(
        std::fs::metadata(&k).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("c.key.pub"))
            .unwrap()
            .trim(),
        out.trim()
    );
    // Never over an existing key.
    assert_eq!(
        consume(&["keygen", k.to_str().unwrap()]).0,
        Some(Outcome::Usage)
    );
}

#[test]
fn verify_refuses_a_malformed_grant() {
    let d = tempfile::tempdir().unwrap();
    let k = d.path().join("i.key");
    let (_, public) = consume(&["keygen", k.to_str().unwrap()]);
    let g = d.path().join("grant.cbor");
    std::fs::write(&g, b"\x82\x01\x02").unwrap();
    let pubf = d.path().join("i.key.pub");
    let (code, out) = consume(&[
        "--json",
        "verify",
        "--issuer-key",
        pubf.to_str().unwrap(),
        g.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(Outcome::Refused), "{out}");
    assert!(!public.is_empty());
}

/// repoch-consume run with a deadline: (exit code, stderr), or None if it was still
/// running after `VERIFY_SECONDS_MAX` (then killed).
fn consume_within(args: &[&str]) -> Option<(Option<Outcome>, String)> {
    const VERIFY_SECONDS_MAX: u64 = 10;
    let mut c = Command::new(env!("CARGO_BIN_EXE_repoch-consume"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut c.stderr.take().unwrap(), &mut err).unwrap();
            return Some((Outcome::from_exit(st.code().unwrap_or(-1)), err));
        }
        if start.elapsed().as_secs() >= VERIFY_SECONDS_MAX {
            let _ = c.kill();
            let _ = c.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn verify_reads_its_files_bounded_and_never_waits_on_a_fifo() {
    let d = tempfile::tempdir().unwrap();
    let k = d.path().join("i.key");
    consume(&["keygen", k.to_str().unwrap()]);
    let pubf = d.path().join("i.key.pub");
    let grant = d.path().join("grant.cbor");
    std::fs::write(&grant, b"\x82\x01\x02").unwrap();
    let fifo = d.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let big = d.path().join("big");
    std::fs::write(
        &big,
        vec![b'0'; repoch_protocol::limits::FRAME_BYTES_MAX + 1],
    )
    .unwrap();
    let (p, g, f, b) = (
        pubf.to_str().unwrap(),
        grant.to_str().unwrap(),
        fifo.to_str().unwrap(),
        big.to_str().unwrap(),
    );
    for (args, says) in [
        (["verify", "--issuer-key", f, g], "not a regular file"),
        (["verify", "--issuer-key", p, f], "not a regular file"),
        (["verify", "--issuer-key", b, g], "over its bound"),
        (["verify", "--issuer-key", p, b], "over its bound"),
    ] {
        let (code, err) = consume_within(&args)
            .unwrap_or_else(|| panic!("repoch-consume {args:?} still running after its bound"));
        assert_eq!(code, Some(Outcome::Usage), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn receive_refuses_a_deployment_that_is_no_id_prefix_before_connecting() {
    // Proves: `--deployment` must be 1 to 32 hex digits (an id or a unique prefix of one,
    // as `repoch list` prints it), checked before anything is read or connected: 33
    // digits, a non-hex digit or nothing at all is a usage error (64) naming the rule, and
    // repochd's socket never sees a connection. Found by an outsider: 33 digits were sent
    // and answered protocol-error.
    let d = tempfile::tempdir().unwrap();
    let key = d.path().join("c.key");
    assert_eq!(
        consume(&["keygen", key.to_str().unwrap()]).0,
        Some(Outcome::Success)
    );
    let sock = d.path().join("grant.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    for bad in [&"a".repeat(33)[..], "12g4", ""] {
        let out = d.path().join("grant.cbor");
        let (code, stdout) = consume(&[
            "--json",
            "receive",
            "--deployment",
            bad,
            "--key",
            key.to_str().unwrap(),
            "--issuer-key",
            d.path().join("c.key.pub").to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--socket",
            sock.to_str().unwrap(),
            "--wait",
            "1",
        ]);
        assert_eq!(code, Some(Outcome::Usage), "{bad:?}: {stdout}");
        assert!(stdout.contains("1 to 32 hex digits"), "{bad:?}: {stdout}");
        assert!(listener.accept().is_err(), "{bad:?}: a connection was made");
    }
}

//! The CLI surface itself: help text, exit codes for usage errors. (Its presence also makes
//! `cargo test --workspace` build the `repoch` and `repochd` binaries the native tests run.)

use std::process::Command;

fn repoch(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_repoch"))
        .args(args)
        .env_remove("REPOCH_ROOT")
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

#[test]
fn help_documents_every_command_and_the_exit_codes() {
    let (code, out, _) = repoch(&["--help"]);
    assert_eq!(code, 0);
    for cmd in [
        "enroll", "recover", "status", "list", "audit", "journal", "demo",
    ] {
        assert!(out.contains(cmd), "--help lacks {cmd}");
    }
    for code in ["64", "70", "uncertain", "busy"] {
        assert!(out.contains(code), "--help lacks exit code {code}");
    }
}

#[test]
fn unknown_arguments_exit_64_not_2() {
    // clap's own usage errors must not look like a refusal (exit 2).
    let (code, _, err) = repoch(&["status"]);
    assert_eq!(code, 64, "{err}");
    let (code, _, _) = repoch(&["frobnicate"]);
    assert_eq!(code, 64);
}

#[test]
fn audit_of_a_missing_file_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("k.pub"),
        format!(
            "{}\n",
            "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29"
        ),
    )
    .unwrap();
    let (code, out, _) = repoch(&[
        "--json",
        "audit",
        "--issuer-key",
        dir.path().join("k.pub").to_str().unwrap(),
        "/nonexistent/epoch.log",
    ]);
    assert_eq!(code, 64, "{out}");
}

//! repochd's command line: its help, and the outcome of bad arguments. (Its presence also
//! makes `cargo test --workspace` build the `repochd` binary the native tests run, with the
//! features of the whole test build: the barriers.)

use std::process::Command;

use repoch_protocol::Outcome;

fn repochd(args: &[&str]) -> (Option<Outcome>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_repochd"))
        .args(args)
        .env_remove("REPOCH_ROOT")
        .env_remove("LISTEN_FDS")
        .output()
        .unwrap();
    (
        Outcome::from_exit(o.status.code().unwrap_or(-1)),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

#[test]
fn help_says_what_repochd_does_and_its_exit_codes() {
    let (outcome, out, _) = repochd(&["--help"]);
    assert_eq!(outcome, Some(Outcome::Success));
    for (o, meaning) in [
        (Outcome::Success, "clean stop"),
        (Outcome::Usage, "usage"),
        (Outcome::Internal, "internal (could not start)"),
    ] {
        let said = format!("{} {meaning}", o.code());
        assert!(out.contains(&said), "{said}: {out}");
    }
    for option in ["--root", "--log", "--config"] {
        assert!(out.contains(option), "{option}: {out}");
    }
}

#[test]
fn a_bad_argument_is_a_usage_error_never_a_refusal() {
    let (outcome, _, err) = repochd(&["--bogus"]);
    assert_eq!(outcome, Some(Outcome::Usage), "{err}");
    assert!(err.contains("--bogus"), "{err}");
    let (outcome, _, err) = repochd(&["--config"]);
    assert_eq!(outcome, Some(Outcome::Usage), "{err}");
}

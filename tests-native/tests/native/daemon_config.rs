//! `repochd --config FILE`: limits and waits from a TOML file (docs/OPERATOR.md,
//! "Configuring repochd"), each validated, an invalid file refused at start (exit 64)
//! naming the key; and a value given there is the one repochd enforces.

use std::process::Stdio;

use repoch_tests_native::*;

/// repochd started with `--config` and this file content: its exit (if it exited within
/// a few seconds) and stderr.
fn start_with(s: &Sandbox, config: &str) -> (Option<i32>, String, std::process::Child) {
    let p = s.path("repochd.toml");
    std::fs::write(&p, config).unwrap();
    let log = s.path("repochd.log");
    let mut child = s
        .cmd("repochd")
        .arg("--config")
        .arg(&p)
        .stderr(std::fs::File::create(&log).unwrap())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("repochd ready")
            || start.elapsed().as_secs() >= DAEMON_WAIT_SECONDS_MAX
        {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    (code, std::fs::read_to_string(&log).unwrap(), child)
}

fn refused(config: &str, key: &str) {
    let s = Sandbox::new();
    let (code, err, mut child) = start_with(&s, config);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        code.map(Exit),
        Some(Exit::of(Outcome::Usage)),
        "{config:?}: {err}"
    );
    assert!(err.contains(key), "{config:?} must name {key}: {err}");
}

#[test]
#[ignore = "needs root"]
fn an_invalid_config_is_refused_at_start_naming_the_key() {
    require_root!();
    refused(
        "[limits]\nadmin_connections = 0\n",
        "limits.admin_connections",
    );
    refused(
        "[limits]\nadmin_connections = \"8\"\n",
        "limits.admin_connections",
    );
    refused(
        "[limits]\ngrant_connections = 100000\n",
        "limits.grant_connections",
    );
    refused("[waits]\ncustody_seconds = -1\n", "waits.custody_seconds");
    refused(
        "[waits]\npersisted_ack_secs = 30\n",
        "waits.persisted_ack_secs",
    );
    refused("[limit]\nadmin_connections = 8\n", "limit");
    refused(
        "[limits]\nadmin_connections = 8\nadmin_connections = 9\n",
        "admin_connections",
    );
    refused("not toml at all", "line 1");
    // Relations between keys: both named.
    refused(
        "[limits]\npending_consumers = 40\ngrant_connections = 32\n",
        "limits.pending_consumers",
    );
    refused(
        "[limits]\npending_per_uid = 16\npending_consumers = 16\n",
        "limits.pending_per_uid",
    );
    // A file that cannot be read.
    let s = Sandbox::new();
    let r = s.run(
        "repochd",
        &["--config", s.path("absent.toml").to_str().unwrap()],
    );
    assert_eq!(r.code, Outcome::Usage, "{}", r.stderr);
    assert!(r.stderr.contains("absent.toml"), "{}", r.stderr);
}

#[test]
#[ignore = "needs root"]
fn a_configured_limit_is_the_one_enforced() {
    // admin_connections = 1: one silent admin connection holds the only slot, so a recovery
    // is turned away busy (4) naming the configured bound; with the defaults (8) the same
    // recovery is served (here: refused consumer-absent).
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let (code, err, child) = start_with(&s, "[limits]\nadmin_connections = 1\n");
    assert_eq!(code, None, "{err}");
    let d = Daemon {
        child,
        log: s.path("repochd.log"),
    };
    d.wait_log("repochd ready");
    let admin = s.root.join("run/repoch/admin.sock");
    let _silent = std::os::unix::net::UnixStream::connect(&admin).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let r: Run = s.recover(&id, 1, &[]).output().unwrap().into();
    assert_eq!(r.code, Outcome::Busy, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("1 admin connections open"),
        "{}",
        r.stdout
    );
    drop(_silent);
    drop(d);

    let _d = s.daemon();
    let _silent = std::os::unix::net::UnixStream::connect(&admin).unwrap();
    let r: Run = s.recover(&id, 1, &[]).output().unwrap().into();
    assert_eq!(r.code, Outcome::Refused, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.reasons(), ["consumer-absent"]);
}

#[test]
#[ignore = "needs root"]
fn the_documented_defaults_are_a_valid_config() {
    // docs/OPERATOR.md shows every key with its default: that block, as a file, starts.
    require_root!();
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/OPERATOR.md"))
        .unwrap();
    let block = doc
        .split("```toml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains("[limits]"))
        .expect("docs/OPERATOR.md has a ```toml block of repochd's defaults");
    assert!(
        block.contains("[limits]") && block.contains("[waits]"),
        "{block}"
    );
    let s = Sandbox::new();
    let (code, err, child) = start_with(&s, block);
    let _d = Daemon {
        child,
        log: s.path("repochd.log"),
    };
    assert_eq!(code, None, "{err}");
    assert!(err.contains("repochd ready"), "{err}");
}

//! The CLI surface itself: help text, exit codes for usage errors. (Its presence also makes
//! `cargo test --workspace` build the `repoch` and `repochd` binaries the native tests run.)

use std::process::Command;

use repoch_protocol::Outcome;

fn repoch(args: &[&str]) -> (Option<Outcome>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_repoch"))
        .args(args)
        .env_remove("REPOCH_ROOT")
        .output()
        .unwrap();
    (
        Outcome::from_exit(o.status.code().unwrap_or(-1)),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

#[test]
fn help_documents_every_command_and_the_exit_codes() {
    let (code, out, _) = repoch(&["--help"]);
    assert_eq!(code, Some(Outcome::Success));
    for cmd in [
        "enroll",
        "recover",
        "status",
        "list",
        "audit",
        "checkpoint",
        "journal",
    ] {
        assert!(out.contains(cmd), "--help lacks {cmd}");
    }
    // Every outcome of docs/EXIT-CODES.md (protocol/tests: that table is Outcome::ALL),
    // as its own line of EXIT CODES: its code, then its name.
    let exit_codes = out
        .split_once("EXIT CODES")
        .map(|(_, t)| t)
        .expect("--help has EXIT CODES");
    for o in repoch_protocol::Outcome::ALL {
        let line = format!("\n    {:<4}{}: ", o.code(), o.name());
        assert!(
            exit_codes.contains(&line),
            "--help's EXIT CODES lacks {line:?}:\n{exit_codes}"
        );
    }
}

#[test]
fn unknown_arguments_exit_64_not_2() {
    // clap's own usage errors must not look like a refusal (exit 2).
    let (code, _, err) = repoch(&["status"]);
    assert_eq!(code, Some(Outcome::Usage), "{err}");
    let (code, _, _) = repoch(&["frobnicate"]);
    assert_eq!(code, Some(Outcome::Usage));
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
    assert_eq!(code, Some(Outcome::Usage), "{out}");
}

#[test]
fn audit_never_prints_a_path_it_was_given_raw() {
    // A file name that colours the terminal and sets its title, in a directory an auditor
    // globs: every sink (the usage error, human or --json) carries it escaped.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("k.pub"),
        "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29\n",
    )
    .unwrap();
    let evil = dir.path().join("\u{1b}]0;owned\u{7}\u{1b}[31mepoch.log");
    let key = dir.path().join("k.pub");
    for json in [true, false] {
        let mut args = vec!["audit", "--issuer-key", key.to_str().unwrap()];
        if json {
            args.insert(0, "--json");
        }
        args.push(evil.to_str().unwrap());
        let (code, out, err) = repoch(&args);
        assert_eq!(code, Some(Outcome::Usage), "{out}{err}");
        assert!(
            !out.contains('\u{1b}') && !err.contains('\u{1b}'),
            "raw ESC: {out:?} {err:?}"
        );
        assert!(
            format!("{out}{err}").contains("\\u{001b}"),
            "{out:?} {err:?}"
        );
    }
}

// ---- audit: forks and duplicate ids (offline, no root) ----

use repoch_protocol::cbor::Canonical as _;
use repoch_protocol::epoch::{EpochBody, EpochRecord, SignedEpochRecord};
use repoch_protocol::manifest::Predecessor;
use repoch_protocol::{DeploymentId, Hash, PublicKey};

/// A one-record log (genesis) of deployment `dep` signed by `key`, naming `pred`.
fn genesis_log(
    key: &ed25519_dalek::SigningKey,
    dep: DeploymentId,
    pred: Option<Predecessor>,
) -> Vec<u8> {
    SignedEpochRecord::sign(
        EpochRecord {
            deployment: dep,
            seq: 0,
            prev: Hash::ZERO,
            body: EpochBody::Genesis {
                manifest: Hash([1; 32]),
                issuer_key: PublicKey::from(&key.verifying_key()),
                predecessor: pred,
            },
        },
        key,
    )
    .to_frame()
}

/// Writes the issuer public key and the given logs into a temp dir; returns it and the
/// audit arguments.
fn audit_dir(
    key: &ed25519_dalek::SigningKey,
    logs: &[(&str, &[u8])],
) -> (tempfile::TempDir, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let pubf = dir.path().join("issuer.pub");
    std::fs::write(
        &pubf,
        format!("{}\n", hex::encode(key.verifying_key().to_bytes())),
    )
    .unwrap();
    let mut args = vec![
        "--json".to_owned(),
        "audit".into(),
        "--issuer-key".into(),
        pubf.display().to_string(),
    ];
    for (name, bytes) in logs {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        args.push(p.display().to_string());
    }
    (dir, args)
}

fn audit_reason(args: &[String]) -> (Option<Outcome>, String, String) {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = repoch(&a);
    let j: serde_json::Value = serde_json::from_str(out.lines().last().unwrap_or("{}"))
        .unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let reason = j["refusals"][0]["reason"].as_str().unwrap_or("").to_owned();
    (code, reason, out)
}

#[test]
fn audit_reports_two_successors_of_one_predecessor_as_a_fork() {
    // Proves: two logs whose geneses both name A (at its final hash) as predecessor are a
    // fork: audit exits 2 with chain-fork naming A, instead of keeping one of them.
    let key = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
    let (a, b, c) = (
        DeploymentId([0xa; 16]),
        DeploymentId([0xb; 16]),
        DeploymentId([0xc; 16]),
    );
    let log_a = genesis_log(&key, a, None);
    let link = Predecessor {
        deployment: a,
        final_hash: Hash::of(&log_a[4..]),
    };
    let (_d, args) = audit_dir(
        &key,
        &[
            ("a.log", &log_a),
            ("b.log", &genesis_log(&key, b, Some(link))),
            ("c.log", &genesis_log(&key, c, Some(link))),
        ],
    );
    let (code, reason, out) = audit_reason(&args);
    assert_eq!(
        (code, reason.as_str()),
        (Some(Outcome::Refused), "chain-fork"),
        "{out}"
    );
    assert!(out.contains(&a.to_hex()), "{out}");
}

#[test]
fn audit_reports_two_logs_with_one_deployment_id_as_a_duplicate() {
    // Proves: two different logs claiming the same deployment id are not silently
    // collapsed to the last one: audit exits 2 with chain-duplicate naming the id.
    let key = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
    let a = DeploymentId([0xa; 16]);
    let one = genesis_log(&key, a, None);
    let mut other_rec = SignedEpochRecord::from_bytes(&one[4..]).unwrap().record;
    if let EpochBody::Genesis { manifest, .. } = &mut other_rec.body {
        *manifest = Hash([2; 32]);
    }
    let two = SignedEpochRecord::sign(other_rec, &key).to_frame();
    let (_d, args) = audit_dir(&key, &[("one.log", &one), ("two.log", &two)]);
    let (code, reason, out) = audit_reason(&args);
    assert_eq!(
        (code, reason.as_str()),
        (Some(Outcome::Refused), "chain-duplicate"),
        "{out}"
    );
    assert!(out.contains(&a.to_hex()), "{out}");
}

#[test]
fn a_consumer_wait_beyond_its_bound_is_a_usage_error() {
    // Proves: --consumer-wait is range-checked by the parser (1..=3600), exit 64 naming
    // the bound, before any deployment or daemon is touched.
    for v in ["0", "3601", "18446744073709551615"] {
        let (code, _, err) = repoch(&["recover", "00", "--consumer-wait", v]);
        assert_eq!(code, Some(Outcome::Usage), "{v}: {err}");
        assert!(err.contains("3600"), "{v}: {err}");
    }
}

#[test]
fn audit_of_a_torn_log_exits_2_with_epoch_torn_and_a_log_given_twice_counts_once() {
    // Proves: a log cut inside its last record audits as epoch-torn (exit 2); the same
    // valid log given twice is one log, not a duplicate (exit 0).
    let key = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
    let log = genesis_log(&key, DeploymentId([0xa; 16]), None);
    let (_d, args) = audit_dir(&key, &[("torn.log", &log[..log.len() - 5])]);
    let (code, reason, out) = audit_reason(&args);
    assert_eq!(
        (code, reason.as_str()),
        (Some(Outcome::Refused), "epoch-torn"),
        "{out}"
    );
    let (_d, args) = audit_dir(&key, &[("one.log", &log), ("same.log", &log)]);
    let (code, _, out) = audit_reason(&args);
    assert_eq!(code, Some(Outcome::Success), "{out}");
}

#[test]
fn audit_of_a_link_to_another_final_hash_is_predecessor_mismatch() {
    // Proves: a successor whose link names a hash its predecessor does not end in audits
    // as predecessor-mismatch (exit 2).
    let key = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
    let a = DeploymentId([0xa; 16]);
    let link = Predecessor {
        deployment: a,
        final_hash: Hash([9; 32]),
    };
    let (_d, args) = audit_dir(
        &key,
        &[
            ("a.log", &genesis_log(&key, a, None)),
            (
                "b.log",
                &genesis_log(&key, DeploymentId([0xb; 16]), Some(link)),
            ),
        ],
    );
    let (code, reason, out) = audit_reason(&args);
    assert_eq!(
        (code, reason.as_str()),
        (Some(Outcome::Refused), "predecessor-mismatch"),
        "{out}"
    );
}

// ---- audit --checkpoint: extension, rollback, fork, truncation (offline, no root) ----

use repoch_protocol::checkpoint::{origin, Checkpoint, KEY_NAME};

/// Writes `note` beside the audit arguments and runs `audit --checkpoint NOTE`; returns the
/// exit code, the refusal's reason and the audit object (its first JSON line).
fn audit_checkpoint(
    key: &ed25519_dalek::SigningKey,
    log: &[u8],
    note: &str,
) -> (Option<Outcome>, String, serde_json::Value) {
    let (d, mut args) = audit_dir(key, &[("epoch.log", log)]);
    let n = d.path().join("old.note");
    std::fs::write(&n, note).unwrap();
    args.insert(4, "--checkpoint".into());
    args.insert(5, n.display().to_string());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, err) = repoch(&a);
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap_or("{}"))
        .unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap_or("{}")).unwrap();
    let reason = last["refusals"][0]["reason"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    (code, reason, first)
}

fn head_of(log: &[u8], key: &ed25519_dalek::SigningKey) -> Hash {
    repoch_protocol::epoch::verify_log(log, &PublicKey::from(&key.verifying_key()), None)
        .last_hash()
        .unwrap()
}

#[test]
fn audit_with_a_checkpoint_proves_extension_and_reports_rollback_fork_and_truncation() {
    // Proves: a log extending a signed checkpoint audits 0; a log with fewer records is
    // checkpoint-rollback, one whose record at the checkpoint's size has another hash is
    // checkpoint-fork, one whose verified records end below it with bytes after them is
    // checkpoint-truncated — each exit 5 with the evidence pair (checkpoint size/head, log
    // size/head) in the audit object.
    let key = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
    let dep = DeploymentId([0xc; 16]);
    let log = genesis_log(&key, dep, None);
    let head = head_of(&log, &key);
    let note = |size: u64, head: Hash| {
        Checkpoint {
            origin: origin(&dep),
            size,
            head,
        }
        .sign(KEY_NAME, &key)
    };
    // Extension: the log's own checkpoint (size 1).
    let (code, _, j) = audit_checkpoint(&key, &log, &note(1, head));
    assert_eq!(code, Some(Outcome::Success), "{j}");
    assert_eq!(j["checkpoint"]["extends"], true, "{j}");
    // Rollback: a checkpoint of 2 records, a verified log of 1.
    let (code, reason, j) = audit_checkpoint(&key, &log, &note(2, Hash([7; 32])));
    assert_eq!(
        (code, reason.as_str()),
        (Some(Outcome::Inconsistent), "checkpoint-rollback"),
        "{j}"
    );
    assert_eq!(j["checkpoint"]["size"], 2);
    assert_eq!(j["checkpoint"]["head"], Hash([7; 32]).to_hex());
    assert_eq!(j["checkpoint"]["log"]["size"], 1);
    assert_eq!(j["checkpoint"]["log"]["head"], head.to_hex());
    // Fork: the same size, another head (another genesis of the same deployment).
    let other = SignedEpochRecord::sign(
        EpochRecord {
            deployment: dep,
            seq: 0,
            prev: Hash::ZERO,
            body: EpochBody::Genesis {
                manifest: Hash([2; 32]),
                issuer_key: PublicKey::from(&key.verifying_key()),
                predecessor: None,
            },
        },
        &key,
    )
    .to_frame();
    let (code, reason, j) = audit_checkpoint(&key, &other, &note(1, head));
    assert_eq!(
        (code, reason.as_str()),
        (Some(Outcome::Inconsistent), "checkpoint-fork"),
        "{j}"
    );
    assert_eq!(
        j["checkpoint"]["log"]["head"],
        head_of(&other, &key).to_hex()
    );
    // Truncation: 2 records checkpointed, the log cut inside its second.
    let mut cut = log.clone();
    cut.extend_from_slice(&other[..other.len() - 5]);
    let (code, reason, j) = audit_checkpoint(&key, &cut, &note(2, Hash([7; 32])));
    assert_eq!(
        (code, reason.as_str()),
        (Some(Outcome::Inconsistent), "checkpoint-truncated"),
        "{j}"
    );
    assert_eq!(j["checkpoint"]["log"]["size"], 1);
}

#[test]
fn audit_with_a_checkpoint_that_does_not_verify_is_checkpoint_invalid() {
    // Proves: a note signed by another key, a tampered note, and a note about a log not
    // given are refused as checkpoint-invalid (exit 2); an unreadable note is usage (64).
    let key = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
    let stranger = ed25519_dalek::SigningKey::from_bytes(&[4; 32]);
    let dep = DeploymentId([0xc; 16]);
    let log = genesis_log(&key, dep, None);
    let c = Checkpoint {
        origin: origin(&dep),
        size: 1,
        head: head_of(&log, &key),
    };
    let (code, reason, j) = audit_checkpoint(&key, &log, &c.sign(KEY_NAME, &stranger));
    assert_eq!(
        (code, reason.as_str()),
        (Some(Outcome::Refused), "checkpoint-invalid"),
        "{j}"
    );
    // The report is still printed, each log's row with it, and the note's verdict in it.
    assert_eq!(j["logs"][0]["epoch"], "enrolled", "{j}");
    assert_eq!(j["verified"], false, "{j}");
    assert_eq!(j["checkpoint"]["reason"], "checkpoint-invalid", "{j}");
    let tampered = c.sign(KEY_NAME, &key).replacen("\n1\n", "\n0\n", 1);
    let (code, reason, j) = audit_checkpoint(&key, &log, &tampered);
    assert_eq!(
        (code, reason.as_str()),
        (Some(Outcome::Refused), "checkpoint-invalid"),
        "{j}"
    );
    let elsewhere = Checkpoint {
        origin: origin(&DeploymentId([0xd; 16])),
        ..c
    };
    let (code, reason, j) = audit_checkpoint(&key, &log, &elsewhere.sign(KEY_NAME, &key));
    assert_eq!(
        (code, reason.as_str()),
        (Some(Outcome::Refused), "checkpoint-invalid"),
        "{j}"
    );
    // One bound for every reader (docs/AUDITOR.md, "Checkpoints"): a note one byte over
    // CHECKPOINT_BYTES_MAX, or far over it, is an invalid checkpoint (its size is judged
    // before its signature), not a usage error; at the bound it is read.
    let signed = c.sign(KEY_NAME, &key);
    let (text, sigs) = signed.split_once("\n\n").unwrap();
    for over in [1025, 20_000] {
        let pad = over - signed.len() - "x\n".len();
        let note = format!("{text}\nx{}\n\n{sigs}", "d".repeat(pad));
        assert_eq!(note.len(), over);
        let (code, reason, j) = audit_checkpoint(&key, &log, &note);
        assert_eq!(
            (code, reason.as_str()),
            (Some(Outcome::Refused), "checkpoint-invalid"),
            "{over}: {j}"
        );
    }
    let (_d, mut args) = audit_dir(&key, &[("epoch.log", &log)]);
    args.insert(4, "--checkpoint".into());
    args.insert(5, "/nonexistent/old.note".into());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    assert_eq!(repoch(&a).0, Some(Outcome::Usage));
}

#[test]
fn audit_with_batch_prints_what_audit_prints() {
    // Proves: --batch changes nothing an auditor reads (docs/AUDITOR.md, "Batch
    // verification"): the same output and exit code on valid logs and with one forged
    // signature among them, which both name.
    let key = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
    let logs: Vec<Vec<u8>> = (0..5u8)
        .map(|i| genesis_log(&key, DeploymentId([i; 16]), None))
        .collect();
    let mut forged = logs.clone();
    let last = forged[3].len() - 1;
    forged[3][last] ^= 1;
    for set in [&logs, &forged] {
        let named: Vec<(String, &[u8])> = set
            .iter()
            .enumerate()
            .map(|(i, b)| (format!("{i}.log"), b.as_slice()))
            .collect();
        let refs: Vec<(&str, &[u8])> = named.iter().map(|(n, b)| (n.as_str(), *b)).collect();
        let (_d, args) = audit_dir(&key, &refs);
        let mut batched = args.clone();
        batched.insert(2, "--batch".into());
        let strict = audit_reason(&args);
        assert_eq!(audit_reason(&batched), strict);
        if std::ptr::eq(set, &forged) {
            assert_eq!(
                (strict.0, strict.1.as_str()),
                (Some(Outcome::Refused), "epoch-forged"),
                "{}",
                strict.2
            );
            assert!(strict.2.contains("3.log"), "{}", strict.2);
        } else {
            assert_eq!(strict.0, Some(Outcome::Success), "{}", strict.2);
        }
    }
    let (code, out, _) = repoch(&["audit", "--help"]);
    assert_eq!(code, Some(Outcome::Success));
    assert!(out.contains("--batch"), "{out}");
}

/// The audit's `--json` report (its first line: the logs, the chain, `chain_error`).
fn audit_report(args: &[String]) -> serde_json::Value {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_, out, err) = repoch(&a);
    serde_json::from_str(out.lines().next().unwrap_or("{}"))
        .unwrap_or_else(|e| panic!("{e}: {out}{err}"))
}

#[test]
fn chain_error_carries_the_first_bad_logs_own_reason() {
    // docs/AUDITOR.md: `chain_error` carries the first problem's reason: a torn log says
    // epoch-torn and a forged one epoch-forged, not a generic epoch-corrupt.
    let key = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
    let other = ed25519_dalek::SigningKey::from_bytes(&[4; 32]);
    let log = genesis_log(&key, DeploymentId([0xa; 16]), None);
    let mut two = log.clone();
    two.extend_from_slice(&genesis_log(&other, DeploymentId([0xa; 16]), None)[..]);
    for (name, bytes, want) in [
        ("torn.log", log[..log.len() - 5].to_vec(), "epoch-torn"),
        (
            "forged.log",
            genesis_log(&other, DeploymentId([0xa; 16]), None),
            "epoch-forged",
        ),
    ] {
        let (_d, args) = audit_dir(&key, &[("good.log", &log), (name, &bytes)]);
        let j = audit_report(&args);
        assert_eq!(j["verified"], false, "{name}: {j}");
        assert_eq!(j["chain_error"]["reason"], want, "{name}: {j}");
        let (code, reason, _) = audit_reason(&args);
        assert_eq!(
            (code, reason.as_str()),
            (Some(Outcome::Refused), want),
            "{name}"
        );
    }
}

#[test]
fn a_state_directory_holding_another_deployments_log_is_foreign() {
    // A deployment's state directory (named by its id) with a whole, valid log of another
    // deployment of the same issuer in it: foreign, not verified.
    let key = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
    let (a, b) = (DeploymentId([0xa; 16]), DeploymentId([0xb; 16]));
    let (d, mut args) = audit_dir(&key, &[]);
    let dir = d.path().join(a.to_hex());
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("epoch.log"), genesis_log(&key, b, None)).unwrap();
    args.push(dir.display().to_string());
    let (code, reason, out) = audit_reason(&args);
    assert_eq!(
        (code, reason.as_str()),
        (Some(Outcome::Refused), "epoch-foreign"),
        "{out}"
    );
    // The same directory by another spelling: `x/..`, a trailing `/`, `.` from inside it.
    std::fs::create_dir(dir.join("sub")).unwrap();
    for spelling in [
        format!("{}/sub/..", dir.display()),
        format!("{}/", dir.display()),
    ] {
        let mut again = args.clone();
        *again.last_mut().unwrap() = spelling.clone();
        let (code, reason, out) = audit_reason(&again);
        assert_eq!(
            (code, reason.as_str()),
            (Some(Outcome::Refused), "epoch-foreign"),
            "{spelling}: {out}"
        );
    }
    let mut dot = args.clone();
    *dot.last_mut().unwrap() = ".".into();
    let o = Command::new(env!("CARGO_BIN_EXE_repoch"))
        .current_dir(&dir)
        .args(&dot)
        .output()
        .unwrap();
    assert_eq!(
        Outcome::from_exit(o.status.code().unwrap_or(-1)),
        Some(Outcome::Refused),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("epoch-foreign"));
    // Its own log there verifies.
    std::fs::write(dir.join("epoch.log"), genesis_log(&key, a, None)).unwrap();
    let (code, _, out) = audit_reason(&args);
    assert_eq!(code, Some(Outcome::Success), "{out}");
}

#[test]
fn audit_with_a_checkpoint_judges_an_emptied_log_and_names_of_any_bytes() {
    // Proves: (1) a log emptied (or zeroed, or replaced) after its checkpoint names no
    // deployment of its own; the one log given is the note's, and it lost the note's
    // records: checkpoint-rollback, exit 5 with the evidence pair (as `repoch-consume
    // verify --log` says), never checkpoint-invalid "no such log given". (2) A log whose
    // file name is not UTF-8 is audited against a note with no crash, its path escaped in
    // the checkpoint's row. (3) An invalid note beside a torn log: the refusals name both.
    // Found by attacking the release binaries: (1) read exit 2 blaming the note, (2)
    // aborted (exit 134), (3) named the note alone.
    use std::os::unix::ffi::OsStrExt as _;
    let key = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
    let dep = DeploymentId([0xc; 16]);
    let log = genesis_log(&key, dep, None);
    let c = Checkpoint {
        origin: origin(&dep),
        size: 1,
        head: head_of(&log, &key),
    };
    let note = c.sign(KEY_NAME, &key);
    let (code, reason, j) = audit_checkpoint(&key, b"", &note);
    assert_eq!(
        (code, reason.as_str()),
        (Some(Outcome::Inconsistent), "checkpoint-rollback"),
        "{j}"
    );
    assert_eq!(j["checkpoint"]["log"]["size"], 0, "{j}");

    let (d, mut args) = audit_dir(&key, &[]);
    let odd = d
        .path()
        .join(std::ffi::OsStr::from_bytes(b"x\xff\xe2\x80\xaelog"));
    std::fs::write(&odd, &log).unwrap();
    let n = d.path().join("note");
    std::fs::write(&n, &note).unwrap();
    args.insert(4, "--checkpoint".into());
    args.insert(5, n.display().to_string());
    let mut c = Command::new(env!("CARGO_BIN_EXE_repoch"));
    c.args(&args).arg(&odd).env_remove("REPOCH_ROOT");
    let o = c.output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        Outcome::from_exit(o.status.code().unwrap_or(-1)),
        Some(Outcome::Success),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let path = first["checkpoint"]["path"].as_str().unwrap();
    assert!(path.ends_with("x\u{fffd}\\u{202e}log"), "{path}");

    let torn = [&log[..], &[0, 0, 1][..]].concat();
    let (d, mut args) = audit_dir(&key, &[("epoch.log", &torn)]);
    let n = d.path().join("bad.note");
    std::fs::write(&n, note.replacen("\n1\n", "\n0\n", 1)).unwrap();
    args.insert(4, "--checkpoint".into());
    args.insert(5, n.display().to_string());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, out, _) = repoch(&a);
    assert_eq!(code, Some(Outcome::Refused), "{out}");
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let reasons: Vec<&str> = last["refusals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["checkpoint-invalid", "epoch-torn"], "{last}");
}

#[test]
fn audit_with_a_checkpoint_finds_the_notes_log_among_several_whatever_their_order() {
    // Proves: the note is judged against every log given that names its deployment (the
    // finding, a fork, wins whatever the order), and, when none names it, against the one
    // log that names no deployment at all (an emptied log beside another log). Found by
    // attacking the release binaries: `note good.log fork.log` exited 2 (the fork never
    // judged) where `fork.log good.log` exited 5; `note empty.log other.log` blamed the note.
    let key = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
    let dep = DeploymentId([0xc; 16]);
    let good = genesis_log(&key, dep, None);
    let fork = genesis_log(
        &key,
        dep,
        Some(Predecessor {
            deployment: DeploymentId([0xd; 16]),
            final_hash: Hash([1; 32]),
        }),
    );
    let other = genesis_log(&key, DeploymentId([0xe; 16]), None);
    let note = Checkpoint {
        origin: origin(&dep),
        size: 1,
        head: head_of(&good, &key),
    }
    .sign(KEY_NAME, &key);
    let run = |logs: &[(&str, &[u8])]| {
        let (d, mut args) = audit_dir(&key, logs);
        let n = d.path().join("old.note");
        std::fs::write(&n, &note).unwrap();
        args.insert(4, "--checkpoint".into());
        args.insert(5, n.display().to_string());
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, _) = repoch(&a);
        let first: serde_json::Value =
            serde_json::from_str(out.lines().next().unwrap_or("{}")).unwrap_or_default();
        (code, first["checkpoint"]["reason"].clone(), out)
    };
    for logs in [
        [("good.log", &good[..]), ("fork.log", &fork[..])],
        [("fork.log", &fork[..]), ("good.log", &good[..])],
    ] {
        let (code, reason, out) = run(&logs);
        assert_eq!(
            (code, reason.as_str()),
            (Some(Outcome::Inconsistent), Some("checkpoint-fork")),
            "{out}"
        );
    }
    for logs in [
        [("empty.log", &b""[..]), ("other.log", &other[..])],
        [("other.log", &other[..]), ("empty.log", &b""[..])],
    ] {
        let (code, reason, out) = run(&logs);
        assert_eq!(
            (code, reason.as_str()),
            (Some(Outcome::Inconsistent), Some("checkpoint-rollback")),
            "{out}"
        );
    }
}

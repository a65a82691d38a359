//! Bounded inputs and one exit-code rule (issue 9): adversarial records, closed output
//! streams, out-of-range arguments, crash tails, duplicate successors, and the exit code of
//! every command for each situation (docs/EXIT-CODES.md), through the real binaries.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};

use repoch_tests_native::*;

fn run(mut c: Command) -> Run {
    c.stdin(Stdio::null()).output().expect("spawn").into()
}

/// Runs `c` with its stdout a pipe whose read end is already closed (`cmd | (exec 0<&-)`):
/// every write to stdout fails with EPIPE. Returns the exit code and stderr.
fn run_with_closed_stdout(mut c: Command) -> (i32, String) {
    let (r, w) = rustix::pipe::pipe().unwrap();
    drop(r);
    let out = c
        .stdin(Stdio::null())
        .stdout(Stdio::from(w))
        .stderr(Stdio::piped())
        .output()
        .expect("spawn");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn issuer_key(s: &Sandbox) -> ed25519_dalek::SigningKey {
    repoch_issuer::enroll::issuer_key(&repoch_issuer::Layout::new(Some(&s.root)), false).unwrap()
}

/// Appends raw bytes to deployment `id`'s epoch log (clearing its append-only flag first).
fn append_to_log(s: &Sandbox, id: &str, tail: &[u8]) {
    let log = s.log(id);
    unset_append_only(&log);
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut f, tail).unwrap();
}

/// A manifest for a second deployment in the same sandbox (its own journal).
fn manifest_with_journal(s: &Sandbox, extra: &str, journal: &str) -> String {
    s.manifest(extra).replace(
        &format!("{}/journal", s.srv.display()),
        &format!("{}/{journal}", s.srv.display()),
    )
}

fn refusal_reason(r: &Run) -> String {
    r.json()["refusals"][0]["reason"]
        .as_str()
        .unwrap_or_else(|| panic!("no refusal: {}{}", r.stdout, r.stderr))
        .to_owned()
}

// ---- 1. a signed journal record at the edge of u64 ----

#[test]
#[ignore = "needs root"]
fn observe_reports_a_signed_op_begin_with_the_largest_op_id_as_lineage_mutated() {
    // Proves: the old root (holding the enrolled producer key) appends a validly signed
    // op-begin with op = u64::MAX. `repoch observe` must report lineage-mutated (exit 2),
    // not abort on the verifier's next-op overflow (exit 134).
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let journal = s.srv.join("journal");
    let producer = repoch_issuer::keys::read_secret(&s.path("producer.key")).unwrap();
    let layout = repoch_issuer::Layout::new(Some(&s.root));
    let issuer = repoch_issuer::store::issuer_public(&layout).unwrap();
    let dep = repoch_protocol::DeploymentId::from_hex(&id).unwrap();
    let bytes = std::fs::read(&journal).unwrap();
    let pk = repoch_protocol::PublicKey::from(&producer.verifying_key());
    let f = repoch_protocol::journal::verify_journal(
        &bytes,
        repoch_protocol::journal::JournalPins {
            deployment: dep,
            issuer: &issuer,
            producer: &pk,
            genesis: None,
        },
    )
    .unwrap();
    let (frame, _) = repoch_protocol::journal::next_frame(
        dep,
        Some((f.last_seq, f.last_hash)),
        repoch_protocol::journal::JournalBody::OpBegin {
            op: u64::MAX,
            name: "overflow".into(),
        },
        &producer,
    );
    // The journal is append-only: an O_APPEND write is what its producer may do.
    let mut w = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal)
        .unwrap();
    std::io::Write::write_all(&mut w, &frame).unwrap();
    let r = s.observe(&id);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    let lineage: Vec<_> = failed(&r)
        .into_iter()
        .filter(|(_, reason)| reason.starts_with("lineage"))
        .collect();
    assert_eq!(lineage.len(), 1, "{lineage:?}");
    assert_eq!(lineage[0].1, "lineage-mutated");
}

// ---- 4. a closed stdout ends quietly with the outcome's exit code ----

#[test]
#[ignore = "needs root"]
fn status_with_a_closed_stdout_ends_quietly_with_its_exit_code() {
    // Proves: `repoch status ID | (exec 0<&-; ...)` does not abort (134) on EPIPE; it exits
    // with the code status documents for the epoch (0: the log verifies), human or JSON.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    for json in [false, true] {
        let mut c = s.cmd("repoch");
        if json {
            c.arg("--json");
        }
        c.args(["status", &id]);
        let (code, err) = run_with_closed_stdout(c);
        assert_eq!(code, 0, "json {json}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
#[ignore = "needs root"]
fn recover_with_a_closed_stdout_still_exits_granted_when_the_daemon_granted() {
    // Proves: a recovery whose operator stdout is closed still reads the daemon's outcome
    // to the end and exits with it (0, granted), never 134 while the daemon granted; the
    // epoch log (the independent oracle) shows the receipt.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let consumer = s
        .consumer(&id, "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut c = s.cmd("repoch");
    c.args(["recover", &id, "--consumer-wait", "20"]);
    let (code, err) = run_with_closed_stdout(c);
    let got: Run = consumer.wait_with_output().unwrap().into();
    assert_eq!(
        got.code,
        Outcome::Success,
        "consumer: {}{}",
        got.stdout,
        got.stderr
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(s.status(&id).json()["epoch"], "receipted");
}

// ---- 5. numeric arguments are bounded ----

#[test]
#[ignore = "needs root"]
fn a_consumer_wait_of_u64_max_is_a_usage_error_not_an_abort() {
    // Proves: `--consumer-wait 18446744073709551615` against a live repochd exits 64 naming
    // the bound (it overflowed `wait + margin` and aborted), and uses nothing.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let r = run(s.recover(&id, u64::MAX, &[]));
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("3600"), "{}", r.stderr);
    assert_eq!(s.status(&id).json()["epoch"], "enrolled");
}

#[test]
fn every_numeric_argument_out_of_range_exits_64() {
    // Proves: each numeric argument of repoch and repoch-consume has a range naming its
    // limit; a value outside it is a usage error (64) before anything is touched.
    let s = Sandbox::new();
    for args in [
        &["recover", "00", "--consumer-wait", "0"][..],
        &["recover", "00", "--consumer-wait", "3601"],
        &[
            "journal",
            "append",
            "--journal",
            "/x",
            "--key",
            "/x",
            "--deployment",
            "00",
            "root-start",
            "--pid",
            "0",
        ],
        &[
            "journal",
            "append",
            "--journal",
            "/x",
            "--key",
            "/x",
            "--deployment",
            "00",
            "op-end",
            "18446744073709551615",
            "failed",
        ],
    ] {
        let r = s.repoch(args);
        assert_eq!(r.code, Outcome::Usage, "{args:?}: {}{}", r.stdout, r.stderr);
    }
    for wait in ["0", "86401", "18446744073709551615"] {
        let r = s.run(
            "repoch-consume",
            &[
                "receive",
                "--deployment",
                "00",
                "--key",
                "/x",
                "--issuer-key",
                "/x",
                "--out",
                "/x",
                "--wait",
                wait,
            ],
        );
        assert_eq!(
            r.code,
            Outcome::Usage,
            "--wait {wait}: {}{}",
            r.stdout,
            r.stderr
        );
    }
}

// ---- 8. crash tails are torn; forged and foreign logs have their own reasons ----

#[test]
#[ignore = "needs root"]
fn a_zero_filled_tail_after_the_last_record_reads_as_torn() {
    // Proves: a crash that extends the log with zeros (delayed allocation, lost data
    // blocks) classifies as torn (epoch-torn), not as corrupt ("investigate tampering");
    // status exits 2 with the reason.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    append_to_log(&s, &id, &[0u8; 4096]);
    let r = s.status(&id);
    assert_eq!(r.json()["epoch"], "torn", "{}", r.stdout);
    assert_eq!(r.json()["refusal"], "epoch-torn");
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
}

/// A log over its bound (`LOG_BYTES_MAX`) is `corrupt` everywhere (docs/PROTOCOL.md, "The
/// epoch log"): no append writes one and no crash leaves one. `status` and `list` say
/// `epoch-corrupt` (exit 2), as they once said `observe-failed`, a reason EXIT-CODES.md's
/// rows for them do not list; `audit` refuses to read it (exit 64, naming the bound). One
/// byte over, and far over.
#[test]
#[ignore = "needs root"]
fn a_log_over_its_bound_reads_as_corrupt_in_status_and_list() {
    require_root!();
    use repoch_protocol::limits::LOG_BYTES_MAX;
    for over in [1, 4 << 20] {
        let s = Sandbox::new();
        let id = s.enroll();
        let len = std::fs::metadata(s.log(&id)).unwrap().len() as usize;
        append_to_log(&s, &id, &vec![0u8; LOG_BYTES_MAX + over - len]);
        let r = s.status(&id);
        assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
        assert_eq!(r.json()["epoch"], "corrupt", "{over}: {}", r.stdout);
        assert_eq!(r.json()["refusal"], "epoch-corrupt", "{over}: {}", r.stdout);
        let l = s.repoch(&["--json", "list"]);
        assert_eq!(l.code, Outcome::Refused, "{}", l.stdout);
        assert!(
            l.stdout.contains("\"epoch-corrupt\""),
            "{over}: {}",
            l.stdout
        );
        let a = s.repoch(&["audit", s.log(&id).to_str().unwrap()]);
        assert_eq!(a.code, Outcome::Usage, "{over}: {}{}", a.stdout, a.stderr);
        assert!(
            format!("{}{}", a.stdout, a.stderr)
                .contains(&format!("over its bound of {LOG_BYTES_MAX} bytes")),
            "{over}: {}{}",
            a.stdout,
            a.stderr
        );
    }
}

#[test]
#[ignore = "needs root"]
fn a_log_copied_from_another_deployment_reads_as_foreign() {
    // Proves: deployment B's valid log copied over A's (same host issuer key) is
    // epoch-foreign, distinct from corrupt and forged.
    require_root!();
    let s = Sandbox::new();
    let a = s.enroll();
    let b = s.enroll_with(&manifest_with_journal(&s, "", "journal2"));
    let bytes = std::fs::read(s.log(&b)).unwrap();
    unset_append_only(&s.log(&a));
    // Same inode (written in place), so only the content differs.
    std::fs::write(s.log(&a), &bytes).unwrap();
    let r = s.status(&a);
    assert_eq!(r.json()["refusal"], "epoch-foreign", "{}", r.stdout);
    assert_eq!(r.code, Outcome::Refused);
}

#[test]
#[ignore = "needs root"]
fn a_record_signed_by_another_key_reads_as_forged() {
    // Proves: a well-formed next record signed by a key that is not the host issuer key is
    // epoch-forged (its own reason), not corrupt or torn.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = s.deployment(&id);
    let other = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
    let rec = repoch_protocol::epoch::SignedEpochRecord::sign(
        repoch_protocol::epoch::EpochRecord {
            deployment: d.id,
            seq: d.log.next_seq(),
            prev: d.log.last_hash(),
            body: repoch_protocol::epoch::EpochBody::Withheld {
                reason: repoch_protocol::Reason::ConsumerLost,
                detail: "forged".into(),
            },
        },
        &other,
    );
    drop(d);
    append_to_log(&s, &id, &rec.to_frame());
    let r = s.status(&id);
    assert_eq!(r.json()["refusal"], "epoch-forged", "{}", r.stdout);
    assert_eq!(r.code, Outcome::Refused);
}

// ---- 9. one exit-code rule ----

#[test]
#[ignore = "needs root"]
fn observe_on_a_used_or_torn_epoch_exits_2_with_the_epoch_reason() {
    // Proves: `observe` is the preflight of a recovery: on a used epoch it exits 2 with
    // epoch-consumed, on a torn one 2 with epoch-torn (it exited 0: every OS fact held).
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    assert_eq!(s.observe(&id).code, Outcome::Success);
    s.use_epoch(&id);
    let r = s.observe(&id);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert!(
        r.json()["refusals"].to_string().contains("epoch-consumed"),
        "{}",
        r.stdout
    );
    let t = s.enroll_with(&manifest_with_journal(&s, "", "journal2"));
    append_to_log(&s, &t, &[0, 0, 1]);
    let r = s.observe(&t);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert!(
        r.json()["refusals"].to_string().contains("epoch-torn"),
        "{}",
        r.stdout
    );
}

#[test]
#[ignore = "needs root"]
fn status_exits_0_for_a_verified_log_and_2_when_the_state_does_not_verify() {
    // Proves: status and list follow one rule: 0 when the log verifies (enrolled or used),
    // 2 with the reason when it does not (corrupt here) or the state is replaced.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    assert_eq!(s.status(&id).code, Outcome::Success);
    s.use_epoch(&id);
    let r = s.status(&id);
    assert_eq!(
        (r.code, r.json()["epoch"].clone()),
        (Exit::of(Outcome::Success), "withheld".into())
    );
    assert_eq!(s.repoch(&["--json", "list"]).code, Outcome::Success);
    // A validly signed record that may not follow the terminal withheld: corrupt.
    let key = issuer_key(&s);
    let d = s.deployment(&id);
    let rec = repoch_protocol::epoch::SignedEpochRecord::sign(
        repoch_protocol::epoch::EpochRecord {
            deployment: d.id,
            seq: d.log.next_seq(),
            prev: d.log.last_hash(),
            body: repoch_protocol::epoch::EpochBody::Withheld {
                reason: repoch_protocol::Reason::ConsumerLost,
                detail: "again".into(),
            },
        },
        &key,
    );
    drop(d);
    append_to_log(&s, &id, &rec.to_frame());
    let r = s.status(&id);
    assert_eq!(r.json()["epoch"], "corrupt", "{}", r.stdout);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(s.repoch(&["--json", "list"]).code, Outcome::Refused);
    let log = s.log(&id);
    let bytes = std::fs::read(&log).unwrap();
    // The log replaced by another inode: state-replaced, 2.
    rename_over(&log, &bytes);
    let r = s.status(&id);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(refusal_reason(&r), "state-replaced");
}

#[test]
#[ignore = "needs root"]
fn enrolling_over_an_existing_journal_is_a_manifest_error_exit_64() {
    // Proves: a manifest naming a journal path that exists is refused as manifest-invalid
    // with exit 64 (docs/OPERATOR.md: manifest errors are 64), not 2.
    require_root!();
    let s = Sandbox::new();
    s.enroll();
    let p = s.path("again.toml");
    std::fs::write(&p, s.manifest("")).unwrap();
    let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("journal"), "{}", r.stdout);
}

#[test]
#[ignore = "needs root"]
fn a_non_root_recover_is_admin_denied_not_daemon_unreachable() {
    // Proves: a non-root operator whose connect is refused by the socket's mode is told
    // admin-denied (exit 2); daemon-unreachable is kept for a daemon that is not there.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for p in ["root", "root/run", "root/run/repoch"] {
        std::fs::set_permissions(s.dir.path().join(p), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
    let mut c = s.recover(&id, 1, &[]);
    c.uid(65534).gid(65534);
    let r = run(c);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(refusal_reason(&r), "admin-denied", "{}", r.stdout);
}

#[test]
#[ignore = "needs root"]
fn recover_without_a_daemon_is_daemon_unreachable_exit_2() {
    // Proves: with no repochd listening, recover refuses daemon-unreachable (2): nothing
    // was written.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let r = run(s.recover(&id, 1, &[]));
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(refusal_reason(&r), "daemon-unreachable");
}

#[test]
fn the_consumer_exits_2_when_repochd_is_not_there() {
    // Proves: `repoch-consume receive` against a socket nobody listens on has consumed
    // nothing: exit 2 (refused), not 3 (uncertain).
    let s = Sandbox::new();
    let mut c = Command::new(bin("repoch-consume"));
    c.args(["receive", "--deployment", "00", "--key"])
        .arg(s.path("consumer.key"))
        .arg("--issuer-key")
        .arg(s.path("producer.key.pub"))
        .arg("--out")
        .arg(s.path("grant.cbor"))
        .arg("--socket")
        .arg(s.path("nobody.sock"))
        .args(["--wait", "1"]);
    let r = run(c);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
}

#[test]
fn the_consumer_exits_2_when_its_wait_ends_before_any_challenge() {
    // Proves: a consumer whose wait ends while repochd (here: a listener that never
    // answers) has not challenged it used nothing: exit 2, not 3.
    let s = Sandbox::new();
    let sock = s.path("silent.sock");
    let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let mut c = Command::new(bin("repoch-consume"));
    c.args(["receive", "--deployment", "00", "--key"])
        .arg(s.path("consumer.key"))
        .arg("--issuer-key")
        .arg(s.path("producer.key.pub"))
        .arg("--out")
        .arg(s.path("grant.cbor"))
        .arg("--socket")
        .arg(&sock)
        .args(["--wait", "1"]);
    let r = run(c);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
}

// ---- 10. one successor per predecessor ----

#[test]
#[ignore = "needs root"]
fn a_second_successor_of_one_predecessor_is_refused_at_enrollment() {
    // Proves: after B succeeds A, enrolling C as another successor of A is refused (exit
    // 64, naming B), so A's lineage cannot recover twice through two successors.
    require_root!();
    let s = Sandbox::new();
    let a = s.enroll();
    s.use_epoch(&a);
    let pred = format!("predecessor = \"{a}\"");
    let b = s.enroll_with(&manifest_with_journal(&s, &pred, "journal2"));
    let p = s.path("c.toml");
    std::fs::write(&p, manifest_with_journal(&s, &pred, "journal3")).unwrap();
    let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(&b), "{}", r.stdout);
    assert!(
        !s.srv.join("journal3").exists(),
        "a refused enrollment keeps nothing"
    );
}

#[test]
#[ignore = "needs root"]
fn enroll_as_non_root_is_admin_denied() {
    // Proves: a non-root enroll is refused admin-denied (exit 2) and creates nothing.
    require_root!();
    let s = Sandbox::new();
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = s.path("m.toml");
    std::fs::write(&p, s.manifest("")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut c = s.cmd("repoch");
    c.args(["--json", "enroll", p.to_str().unwrap()])
        .uid(65534)
        .gid(65534);
    let r = run(c);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(refusal_reason(&r), "admin-denied");
    assert!(!s.srv.join("journal").exists());
}

#[test]
#[ignore = "needs root"]
fn enroll_that_cannot_write_its_files_is_enroll_failed_exit_2() {
    // Proves: when the host cannot create the deployments directory (a file is in the
    // way), enroll refuses enroll-failed (exit 2), not manifest-invalid, and keeps nothing.
    require_root!();
    let s = Sandbox::new();
    std::fs::create_dir_all(s.root.join("var/lib")).unwrap();
    std::fs::write(s.root.join("var/lib/repoch"), b"in the way").unwrap();
    let p = s.path("m.toml");
    std::fs::write(&p, s.manifest("")).unwrap();
    let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(refusal_reason(&r), "enroll-failed");
    assert!(!s.srv.join("journal").exists());
}

#[test]
#[ignore = "needs root"]
fn journal_append_exits_0_and_on_a_mutated_journal_2_with_its_lineage_reason() {
    // Proves: `repoch journal append` appends (0); on a journal whose record was altered
    // it refuses with the lineage reason (2) and appends nothing.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let journal = s.srv.join("journal");
    let key = s.path("producer.key");
    let append = |rec: &[&str]| {
        let mut a = vec!["--json", "journal", "append", "--journal"];
        a.push(journal.to_str().unwrap());
        a.extend(["--key", key.to_str().unwrap(), "--deployment", &id]);
        a.extend(rec);
        s.repoch(&a)
    };
    let r = append(&["root-start", "--pid", "1"]);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    unset_append_only(&journal);
    let mut bytes = std::fs::read(&journal).unwrap();
    let n = bytes.len() - 70; // inside the last record's signed body or signature
    bytes[n] ^= 1;
    std::fs::write(&journal, &bytes).unwrap();
    let r = append(&["root-stop"]);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert!(refusal_reason(&r).starts_with("lineage-"), "{}", r.stdout);
    assert_eq!(std::fs::read(&journal).unwrap(), bytes);
    // A journal over its bound is bad input, refused as a mutated lineage (as the
    // journal verifier says of such bytes), not "internal: a bug" (exit 70); nothing is
    // appended.
    let over = repoch_protocol::limits::JOURNAL_BYTES_MAX as u64 + 1;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap()
        .set_len(over)
        .unwrap();
    let r = append(&["root-stop"]);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(refusal_reason(&r), "lineage-mutated", "{}", r.stdout);
    assert_eq!(std::fs::metadata(&journal).unwrap().len(), over);
}

#[test]
fn consumer_verify_exits_2_for_a_grant_that_does_not_verify_and_64_for_a_missing_file() {
    // Proves: `repoch-consume verify` follows the rule: bytes that are no grant signed by
    // the pinned key are refused (2); a grant file that cannot be read is usage (64).
    let s = Sandbox::new();
    let bad = s.path("bad.grant");
    std::fs::write(&bad, b"not a grant").unwrap();
    let key = s.path("producer.key.pub");
    let r = s.run(
        "repoch-consume",
        &[
            "verify",
            "--issuer-key",
            key.to_str().unwrap(),
            bad.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    let r = s.run(
        "repoch-consume",
        &[
            "verify",
            "--issuer-key",
            key.to_str().unwrap(),
            "/nonexistent/grant",
        ],
    );
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
}

/// A child process killed (and reaped) on drop unless it was waited for.
struct Child(Option<std::process::Child>);

impl Child {
    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, std::process::Child::id)
    }
    fn finish(mut self) -> Run {
        self.0.take().unwrap().wait_with_output().unwrap().into()
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
#[ignore = "needs root"]
fn two_concurrent_enrollments_of_successors_of_one_predecessor_admit_one() {
    // Proves: the one-successor check and the creation of the successor are atomic with
    // respect to another enrollment. B stops (barrier) right after its check passed; C,
    // another successor of A, is enrolled meanwhile; B continues. Exactly one succeeds
    // (0), the other is refused (64): never two successors of A.
    require_root!();
    let s = Sandbox::new();
    let a = s.enroll();
    s.use_epoch(&a);
    let pred = format!("predecessor = \"{a}\"");
    let (pb, pc) = (s.path("b.toml"), s.path("c.toml"));
    std::fs::write(&pb, manifest_with_journal(&s, &pred, "journal2")).unwrap();
    std::fs::write(&pc, manifest_with_journal(&s, &pred, "journal3")).unwrap();
    let b = Child(Some(
        s.cmd("repoch")
            .args(["--json", "enroll", pb.to_str().unwrap()])
            .env("REPOCH_BARRIER", "enroll-after-successor-check")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let start = std::time::Instant::now();
    while !stopped(b.pid()) {
        assert!(
            start.elapsed().as_secs() < DAEMON_WAIT_SECONDS_MAX,
            "enroll never reached its barrier (built without barriers? run `cargo test --workspace`)"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let c = Child(Some(
        s.cmd("repoch")
            .args(["--json", "enroll", pc.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    // C either finishes now (no serialization) or waits for B.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let pid = rustix::process::Pid::from_raw(b.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    let (rb, rc) = (b.finish(), c.finish());
    let mut codes = [rb.code.0, rc.code.0];
    codes.sort();
    assert_eq!(
        codes.map(Exit),
        [Exit::of(Outcome::Success), Exit::of(Outcome::Usage)],
        "B: {}{}\nC: {}{}",
        rb.stdout,
        rb.stderr,
        rc.stdout,
        rc.stderr
    );
}

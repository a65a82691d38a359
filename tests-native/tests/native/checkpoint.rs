//! Checkpoints for auditors (docs/AUDITOR.md, "Checkpoints"): `repoch checkpoint` prints
//! the log's head as a C2SP signed note that an independent implementation (Go's
//! golang.org/x/mod/sumdb/note, Debian's golang-golang-x-mod-dev) verifies; the consumer
//! keeps the checkpoint taken at its grant, and a root who truncates a granted log and
//! recovers again is caught by `repoch audit --checkpoint` and `repoch-consume verify`.

use std::path::Path;
use std::process::{Command, Stdio};

use repoch_tests_native::*;

use crate::e2e::{records, run};

/// Runs a consumer to `out` and a recovery; returns the recovery's run.
fn recover_to(s: &Sandbox, id: &str, out: &str) -> (Run, Run) {
    let c = s
        .consumer(&id[..8], "consumer.key", out, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let r = run(s.recover(id, 20, &[]));
    (r, crate::e2e::finish(c))
}

fn audit_checkpoint(s: &Sandbox, id: &str, note: &Path) -> Run {
    s.repoch(&[
        "--json",
        "audit",
        "--checkpoint",
        note.to_str().unwrap(),
        s.state_dir(id).to_str().unwrap(),
    ])
}

/// Three bytes after the log's last record, as root past its append-only flag: less than
/// a length prefix, a torn tail.
fn append_torn_tail(log: &Path) {
    use std::io::Write as _;
    unset_append_only(log);
    std::fs::OpenOptions::new()
        .append(true)
        .open(log)
        .unwrap()
        .write_all(&[0x00, 0x00, 0x01])
        .unwrap();
}

/// A fake repochd (`repoch-test-helper serve-grant`) at `socket` dispatching a grant of
/// `id` signed with the sandbox's issuer key and its fence; `variant` ("" for none) names
/// how its checkpoint is wrong.
fn fake_repochd(s: &Sandbox, id: &str, socket: &Path, variant: &str) -> Proc {
    let fence = s.srv.join("lock");
    let mut args = vec![
        "serve-grant",
        socket.to_str().unwrap(),
        s.root.to_str().unwrap(),
        id,
        fence.to_str().unwrap(),
        fence.to_str().unwrap(),
    ];
    if !variant.is_empty() {
        args.push(variant);
    }
    spawn_ready(helper(&args))
}

/// `repoch-consume --json receive` of `id` from the repochd at `socket` into `out`, with
/// the sandbox's consumer key and issuer key.
fn receive_from(s: &Sandbox, id: &str, socket: &Path, out: &Path) -> Command {
    let mut cmd = Command::new(bin("repoch-consume"));
    cmd.args(["--json", "receive", "--deployment", &id[..6], "--key"])
        .arg(s.path("consumer.key"))
        .arg("--issuer-key")
        .arg(s.issuer_pub())
        .arg("--out")
        .arg(out)
        .arg("--socket")
        .arg(socket)
        .args(["--wait", "10"]);
    cmd
}

fn consume_verify(s: &Sandbox, id: &str, grant: &Path) -> Run {
    s.run(
        "repoch-consume",
        &[
            "--json",
            "verify",
            "--issuer-key",
            s.issuer_pub().to_str().unwrap(),
            "--log",
            s.log(id).to_str().unwrap(),
            grant.to_str().unwrap(),
        ],
    )
}

#[test]
#[ignore = "needs root"]
fn a_root_rollback_of_a_granted_log_is_caught_by_audit_and_by_the_consumer() {
    // Proves: the consumer keeps the checkpoint taken at its grant beside the grant
    // (GRANT.checkpoint, size 4, the receipt's hash); audit --checkpoint proves the log
    // extends it (and a genesis checkpoint taken before). Then root clears the append-only
    // flag and truncates the log back to its genesis: `audit --checkpoint` with the kept
    // note and `repoch-consume verify --log` both exit 5 naming the rollback with the
    // evidence pair; after a restarted repochd grants
    // again (4 records, another head), the fork, and the consumer names record #1 as the
    // first that is not its grant's.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let genesis_note = s.path("genesis.note");
    let r = s.repoch(&["checkpoint", &id]);
    assert_eq!(r.code, Outcome::Success, "{}", r.stderr);
    std::fs::write(&genesis_note, format!("{}\n", r.stdout.trim_end())).unwrap();
    let d = s.daemon();
    let (r, c) = recover_to(&s, &id, "grant.cbor");
    assert_eq!(
        r.code,
        Outcome::Success,
        "{}\n{}\n{}",
        r.stdout,
        r.stderr,
        c.stdout
    );
    assert_eq!(c.code, Outcome::Success, "{}\n{}", c.stdout, c.stderr);
    let grant = s.path("grant.cbor");
    let kept = s.path("grant.cbor.checkpoint");
    let note = std::fs::read_to_string(&kept).expect("the consumer kept no checkpoint");
    let st = s.status(&id).json();
    let recs = st["records"].as_array().unwrap().clone();
    assert_eq!(recs.len(), 4);
    let receipt_head = recs[3]["hash"].as_str().unwrap().to_owned();
    let genesis_len = recs[1]["offset"].as_u64().unwrap();
    assert!(
        note.starts_with(&format!("repoch/epoch-log/{id}\n4\n")),
        "{note}"
    );
    // Before the rollback: both checkpoints extended, the consumer's too.
    let a = audit_checkpoint(&s, &id, &kept);
    assert_eq!(a.code, Outcome::Success, "{}\n{}", a.stdout, a.stderr);
    let a = audit_checkpoint(&s, &id, &genesis_note);
    assert_eq!(a.code, Outcome::Success, "{}\n{}", a.stdout, a.stderr);
    let first: serde_json::Value = serde_json::from_str(a.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(first["checkpoint"]["log"]["size"], 4, "{first}");
    let v = consume_verify(&s, &id, &grant);
    assert_eq!(v.code, Outcome::Success, "{}\n{}", v.stdout, v.stderr);
    assert_eq!(v.json()["grant"]["checkpoint"]["size"], 4);
    // The rollback, as root: the log back to its genesis; then recover again.
    let log = s.log(&id);
    unset_append_only(&log);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(genesis_len)
        .unwrap();
    assert_eq!(records(&s, &id), ["genesis"]);
    // Rolled back: the kept note (size 4) against a log of 1 record.
    let genesis_head = recs[0]["hash"].as_str().unwrap();
    caught(
        &s,
        &id,
        &kept,
        &grant,
        "checkpoint-rollback",
        &receipt_head,
        (1, genesis_head),
        None,
    );
    // A running repochd remembers the epoch used (daemon/src/epochs.rs) and refuses the
    // consumer at hello; a restarted one has nothing to tell a truncated log from an
    // enrolled one and grants again: a second grant for one epoch, which the kept
    // checkpoint exposes.
    drop(d);
    let d = s.daemon();
    let (again, c2) = recover_to(&s, &id, "grant2.cbor");
    assert_eq!(
        (again.code, c2.code),
        (Exit::of(Outcome::Success), Exit::of(Outcome::Success)),
        "{}\nconsumer: {}{}",
        again.stdout.lines().last().unwrap_or(""),
        c2.stdout,
        c2.stderr
    );
    drop(d);
    let st = s.status(&id).json();
    let recs2 = st["records"].as_array().unwrap().clone();
    assert_eq!(recs2.len(), 4);
    let new_head = recs2[3]["hash"].as_str().unwrap();
    // Re-extended to the same size: another head at size 4, a fork; the consumer, which
    // holds the grant, names record #1 as the first rewritten: rolled back to its genesis.
    caught(
        &s,
        &id,
        &kept,
        &grant,
        "checkpoint-fork",
        &receipt_head,
        (4, new_head),
        Some(1),
    );
    // The first grant kept beside the second issuance's checkpoint: the log extends that
    // checkpoint, but its receipt carries another grant. `verify --log` compares the log
    // with the grant itself, not only with the checkpoint beside it: a fork, naming the
    // grant and record #1 as the first rewritten (before, it printed "verified", exit 0).
    std::fs::copy(s.path("grant2.cbor.checkpoint"), &kept).unwrap();
    let a = audit_checkpoint(&s, &id, &kept);
    assert_eq!(a.code, Outcome::Success, "{}\n{}", a.stdout, a.stderr);
    let v = consume_verify(&s, &id, &grant);
    assert_eq!(v.code, Outcome::Inconsistent, "{}\n{}", v.stdout, v.stderr);
    let j = v.json();
    assert_eq!(
        (&j["outcome"], &j["reason"]),
        (&"inconsistent".into(), &"checkpoint-fork".into()),
        "{j}"
    );
    let sha = repoch_protocol::Hash::of(&std::fs::read(&grant).unwrap()).to_hex();
    assert_eq!(j["evidence"]["grant"]["sha256"], sha, "{j}");
    assert_eq!(
        (&j["evidence"]["log"]["size"], &j["evidence"]["log"]["head"]),
        (&4.into(), &new_head.into()),
        "{j}"
    );
    assert_eq!(j["evidence"]["rewritten_from_record"], 1, "{j}");
    // The second grant with its own checkpoint verifies against the same log.
    let v = consume_verify(&s, &id, &s.path("grant2.cbor"));
    assert_eq!(v.code, Outcome::Success, "{}\n{}", v.stdout, v.stderr);
}

/// `audit --checkpoint NOTE` and `repoch-consume verify --log` both exit 5 with `reason`
/// and the evidence pair: the note's (4, `old_head`) and the log's `now`.
#[allow(clippy::too_many_arguments)]
fn caught(
    s: &Sandbox,
    id: &str,
    note: &Path,
    grant: &Path,
    reason: &str,
    old_head: &str,
    now: (u64, &str),
    rewritten_from: Option<u64>,
) {
    let a = audit_checkpoint(s, id, note);
    assert_eq!(a.code, Outcome::Inconsistent, "{}\n{}", a.stdout, a.stderr);
    let first: serde_json::Value = serde_json::from_str(a.stdout.lines().next().unwrap()).unwrap();
    let cp = &first["checkpoint"];
    assert_eq!(cp["reason"], reason, "{first}");
    assert_eq!(
        (&cp["size"], &cp["head"]),
        (&4.into(), &old_head.into()),
        "{first}"
    );
    assert_eq!(
        (&cp["log"]["size"], &cp["log"]["head"]),
        (&now.0.into(), &now.1.into()),
        "{first}"
    );
    assert_eq!(a.json()["outcome"], "inconsistent");
    assert_eq!(a.json()["refusals"][0]["reason"], reason);
    let v = consume_verify(s, id, grant);
    assert_eq!(v.code, Outcome::Inconsistent, "{}\n{}", v.stdout, v.stderr);
    let j = v.json();
    assert_eq!(
        (&j["outcome"], &j["reason"]),
        (&"inconsistent".into(), &reason.into()),
        "{j}"
    );
    let e = &j["evidence"];
    assert_eq!(
        (&e["checkpoint"]["size"], &e["checkpoint"]["head"]),
        (&4.into(), &old_head.into()),
        "{j}"
    );
    assert_eq!(
        (&e["log"]["size"], &e["log"]["head"]),
        (&now.0.into(), &now.1.into()),
        "{j}"
    );
    assert_eq!(
        e["rewritten_from_record"],
        serde_json::json!(rewritten_from),
        "{j}"
    );
}

#[test]
#[ignore = "needs root"]
fn checkpoint_refuses_a_non_root_caller_and_a_log_that_does_not_verify() {
    // Proves: `repoch checkpoint` signs only as root (admin-denied, exit 2), never signs a
    // log that does not verify (a torn tail: epoch-torn, exit 2), and without a readable
    // issuer key is a usage error (64).
    require_root!();
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::process::CommandExt as _;
    let s = Sandbox::new();
    let id = s.enroll();
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = s.cmd("repoch");
    c.args(["--json", "checkpoint", &id]).uid(65534).gid(65534);
    let r = run(c);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.json()["refusals"][0]["reason"], "admin-denied");
    append_torn_tail(&s.log(&id));
    let r = s.repoch(&["--json", "checkpoint", &id]);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.json()["refusals"][0]["reason"], "epoch-torn");
    // Without a readable issuer key: usage (64).
    let s = Sandbox::new();
    let id = s.enroll();
    std::fs::remove_file(s.root.join("etc/repoch/issuer.key")).unwrap();
    let r = s.repoch(&["--json", "checkpoint", &id]);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
}

#[test]
#[ignore = "needs root"]
fn the_consumer_refuses_a_grant_whose_checkpoint_does_not_verify() {
    // A faithful fake repochd (the sandbox's issuer key, the right fence fd) sends a valid
    // grant with a checkpoint signed by another key, about another deployment's log, or
    // of 3 records (before the receipt). The consumer refuses each (exit 2) and keeps
    // neither a grant nor a checkpoint; the control, a valid checkpoint, is granted and
    // both files are kept.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    for (n, (variant, code)) in [
        ("checkpoint-by-another-key", Outcome::Refused),
        ("checkpoint-of-another-log", Outcome::Refused),
        ("checkpoint-before-the-receipt", Outcome::Refused),
        ("", Outcome::Success),
    ]
    .into_iter()
    .enumerate()
    {
        let socket = s.path(&format!("fake{n}.sock"));
        let _fake = fake_repochd(&s, &id, &socket, variant);
        let out = s.path(&format!("grant{n}.cbor"));
        let r = run(receive_from(&s, &id, &socket, &out));
        assert_eq!(r.code, code, "{variant}: {}{}", r.stdout, r.stderr);
        let kept = out.with_file_name(format!("grant{n}.cbor.checkpoint"));
        assert_eq!(
            (out.exists(), kept.exists()),
            (code == Outcome::Success, code == Outcome::Success),
            "{variant}: grant and checkpoint files"
        );
        if code == Outcome::Refused {
            assert!(r.stdout.contains("checkpoint"), "{variant}: {}", r.stdout);
        }
    }
}

#[test]
#[ignore = "needs root"]
fn verify_log_and_audit_judge_a_kept_note_and_its_log_alike() {
    // Proves: `repoch-consume verify --log` and `repoch audit --checkpoint` read a kept
    // checkpoint note and the log the same way: a note over its bound of 1,024 bytes is an
    // invalid checkpoint (exit 2) to both, a note reached through a symlink is not opened
    // (exit 64) by either, and bytes after the receipt make the log torn (exit 2,
    // epoch-torn) to both, though it still extends the note and holds the grant. Found by
    // attacking the release binaries: verify --log said 64, 0 and 0.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let (r, c) = recover_to(&s, &id, "grant.cbor");
    assert_eq!(
        (r.code, c.code),
        (Exit::of(Outcome::Success), Exit::of(Outcome::Success))
    );
    let grant = s.path("grant.cbor");
    let kept = s.path("grant.cbor.checkpoint");
    let mut big = std::fs::read(&kept).unwrap();
    big.resize(repoch_protocol::limits::CHECKPOINT_BYTES_MAX + 1, b'\n');
    let (symlinked, oversized) = (s.path("link.cbor"), s.path("big.cbor"));
    for g in [&symlinked, &oversized] {
        std::fs::copy(&grant, g).unwrap();
    }
    std::fs::write(s.path("big.cbor.checkpoint"), &big).unwrap();
    std::os::unix::fs::symlink(&kept, s.path("link.cbor.checkpoint")).unwrap();
    for (g, code) in [(&oversized, Outcome::Refused), (&symlinked, Outcome::Usage)] {
        let note = g.with_extension("cbor.checkpoint");
        let a = audit_checkpoint(&s, &id, &note);
        let v = consume_verify(&s, &id, g);
        assert_eq!(
            (a.code, v.code),
            (Exit::of(code), Exit::of(code)),
            "{}: audit {}{}, verify {}{}",
            note.display(),
            a.stdout,
            a.stderr,
            v.stdout,
            v.stderr
        );
    }
    append_torn_tail(&s.log(&id));
    let a = audit_checkpoint(&s, &id, &kept);
    let v = consume_verify(&s, &id, &grant);
    assert_eq!(
        (a.code, v.code),
        (Exit::of(Outcome::Refused), Exit::of(Outcome::Refused)),
        "audit {}{}, verify {}{}",
        a.stdout,
        a.stderr,
        v.stdout,
        v.stderr
    );
    assert!(v.stdout.contains("epoch-torn"), "{}", v.stdout);
}

#[test]
#[ignore = "needs root"]
fn an_out_of_any_bytes_gets_its_grant_and_the_new_root_runs_and_an_unusable_one_is_refused_first() {
    // Proves: a grant received into an --out whose name is not UTF-8 is reported (`--json`,
    // its name escaped) and the new root is run with it; an --out longer than a path can be
    // (PATH_MAX) is refused before connecting (64), since the new root could not open
    // REPOCH_GRANT. Found by attacking the release binaries: the first panicked after the
    // acknowledgement (exit 134, the new root never ran, the epoch spent); the second was
    // granted and the new root failed ENAMETOOLONG.
    require_root!();
    use std::os::unix::ffi::OsStrExt as _;
    let s = Sandbox::new();
    let id = s.enroll();
    let socket = s.path("fake.sock");
    let consume = |out: &Path, marker: &Path| {
        let mut cmd = receive_from(&s, &id, &socket, out);
        cmd.args(["--", "/usr/bin/touch"]).arg(marker);
        run(cmd)
    };
    let marker = s.path("new-root-ran");
    {
        let _fake = fake_repochd(&s, &id, &socket, "");
        let odd = s.dir.path().join(std::ffi::OsStr::from_bytes(b"gr\xffant"));
        let r = consume(&odd, &marker);
        assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
        assert!(marker.exists(), "the new root did not run: {}", r.stdout);
        assert!(r.stdout.contains("gr\u{fffd}ant"), "{}", r.stdout);
    }
    let deep = (0..17).fold(s.dir.path().to_path_buf(), |p, n| {
        p.join(format!("{n}{}", "d".repeat(240)))
    });
    // Refused on its length alone, before its directory is opened.
    let r = consume(&deep.join("grant.cbor"), &s.path("never"));
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("PATH_MAX"), "{}", r.stdout);
}

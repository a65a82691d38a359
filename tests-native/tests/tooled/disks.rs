//! Failing disks under a real issuance: the deployment's state lives on a loop-mounted
//! ext4; repochd is stopped at the barrier right before an append, the file system is
//! filled (`ENOSPC`) or shut down (`EIO`), and repochd continues. Oracles: the client's
//! outcome and reason, the consumer's answer, the epoch log's bytes (left exactly as they
//! were: no partial record), the daemon refusing every later recovery until restarted, and
//! after a restart the exact state the log holds.

use std::io::Write as _;
use std::process::Stdio;

use repoch_tests_native::*;

/// Bytes written per call while filling a file system.
const FILL_CHUNK_BYTES: usize = 64 * 1024;
/// Name length of the extra fences that make every record larger than a block.
const FENCE_NAME_BYTES: usize = 200;
/// Calls made while filling (a 32 MiB image fills in far fewer).
const FILL_CALLS_MAX: usize = 1 << 16;

/// Fills the file system holding `dir` until the kernel answers `ENOSPC`, in large then
/// small writes, synced between rounds (ext4 releases reservations at sync).
fn fill(dir: &std::path::Path) {
    let mut f = std::fs::File::create(dir.join("filler")).unwrap();
    for chunk in [FILL_CHUNK_BYTES, 1024, 1] {
        for _ in 0..2 {
            let buf = vec![0xa5u8; chunk];
            let mut calls = 0;
            loop {
                calls += 1;
                assert!(calls < FILL_CALLS_MAX, "the file system never filled");
                match f.write(&buf) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                    Err(e) => panic!("filling: {e}"),
                }
            }
            let _ = f.sync_all();
        }
    }
}

/// How the disk fails while repochd is stopped at the barrier.
#[derive(Clone, Copy, Debug)]
enum Failure {
    /// The file system is full.
    NoSpace,
    /// The file system is shut down (`EXT4_IOC_SHUTDOWN`): every write and sync is `EIO`.
    Dead,
}

/// repochd stopped at `barrier` (right before the append of `kind`), the disk fails, repochd
/// continues: the outcome is uncertain naming the cause, the consumer gets nothing, the log
/// is byte-for-byte as it was, and repochd refuses every later recovery until restarted.
fn disk_fails_before(barrier: &str, kind: &str, failure: Failure, kept: &[&str]) {
    let _no_namespaces = no_mount_namespaces_guard();
    let fs = Ext4::new();
    // The intent and the receipt are larger than a block (the image has 1 KiB blocks): they
    // need a new block whatever the last block's slack, so a full disk fails them. (The
    // consume record, at most about 600 bytes, may fit in that slack: a full disk cannot be
    // made to fail it; a dead disk does, below.)
    let s = Sandbox::within(Some(&fs.mnt));
    let mut fences = vec![format!("{}/lock", s.srv.display())];
    for c in ["f", "g", "h", "i"] {
        let p = s.srv.join(c.repeat(FENCE_NAME_BYTES));
        std::fs::write(&p, b"").unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        fences.push(p.display().to_string());
    }
    let manifest = s.manifest("").replacen(
        &format!("fences = [\"{}/lock\"]", s.srv.display()),
        &format!("fences = {fences:?}"),
        1,
    );
    let id = s.enroll_with(&manifest);
    // The consumer's pinned issuer key must not live on the failing file system.
    let outside = Sandbox::new();
    std::fs::copy(s.issuer_pub(), outside.path("issuer.pub")).unwrap();
    let d = AtBarrier::start(&s, barrier);
    let mut c = s.cmd("repoch-consume");
    c.args(["--json", "receive", "--deployment", &id[..6], "--key"])
        .arg(s.path("consumer.key"))
        .arg("--issuer-key")
        .arg(outside.path("issuer.pub"))
        .arg("--out")
        .arg(s.path("grant.cbor"))
        .arg("--socket")
        .arg(s.grant_socket())
        .args(["--wait", "30"]);
    let consumer = c.stdout(Stdio::piped()).spawn().unwrap();
    let rec = recover_bg(&s, &id[..6], 20);
    d.reached();
    let before = std::fs::read(s.log(&id)).unwrap();
    match failure {
        Failure::NoSpace => fill(&fs.mnt),
        Failure::Dead => fs.cut_power(),
    }
    d.signal(rustix::process::Signal::CONT);
    let r = finish(rec);
    let what = format!("{failure:?} before the {kind} append ({barrier})");
    assert_eq!(
        r.code,
        Outcome::Uncertain,
        "{what}: {}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(r.outcome()["outcome"], "uncertain", "{what}");
    assert_eq!(r.reasons(), ["store-poisoned"], "{what}");
    let detail = r.outcome()["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let cause = match failure {
        Failure::NoSpace => "No space left on device",
        Failure::Dead => "Input/output error",
    };
    assert!(
        detail.contains(kind) && detail.contains(cause),
        "{what}: the detail must name the record and the cause: {detail}"
    );
    let c = finish(consumer);
    assert_eq!(c.code, Outcome::Refused, "{what}: consumer: {}", c.stdout);
    assert!(c.stdout.contains("store-poisoned"), "{what}: {}", c.stdout);
    assert!(
        !s.path("grant.cbor").exists(),
        "{what}: a grant was persisted"
    );
    // The daemon stops issuing until restarted, whatever the client asks.
    let again = run(s.recover(&id[..6], 1, &[]));
    assert_eq!(again.code, Outcome::Refused, "{what}: {}", again.stdout);
    assert_eq!(again.reasons(), ["store-poisoned"], "{what}");
    drop(d);
    // The disk comes back (space freed, or remounted after the shutdown). Never retried,
    // nothing partial: the log's bytes are exactly those before the failure, and a
    // restarted repochd acts on that state.
    match failure {
        Failure::NoSpace => std::fs::remove_file(fs.mnt.join("filler")).unwrap(),
        Failure::Dead => fs.remount_after_power_loss(),
    }
    assert!(
        std::fs::read(s.log(&id)).unwrap() == before,
        "{what}: the log changed: {} bytes before, {} after",
        before.len(),
        std::fs::metadata(s.log(&id)).unwrap().len()
    );
    assert_eq!(records(&s, &id), kept, "{what}");
    let _d = s.daemon();
    let again = run(s.recover(&id[..6], 1, &[]));
    if kept.len() == 1 {
        // Nothing was written: the epoch is still enrolled and only waits for a consumer.
        assert_eq!(
            again.reasons(),
            ["consumer-absent"],
            "{what}: {}",
            again.stdout
        );
    } else {
        assert_eq!(
            again.reasons(),
            ["epoch-consumed"],
            "{what}: {}",
            again.stdout
        );
    }
    assert_eq!(
        records(&s, &id),
        kept,
        "{what}: a refused recovery appended"
    );
}

pub(crate) fn a_full_disk_at_each_append_is_uncertain_leaves_the_log_as_it_was_and_stops_issuing() {
    require_root!();
    disk_fails_before("before-intent", "intent", Failure::NoSpace, &["genesis"]);
    disk_fails_before(
        "after-consume",
        "receipt",
        Failure::NoSpace,
        &["genesis", "intent", "consume"],
    );
}

pub(crate) fn a_dead_disk_at_each_append_is_uncertain_leaves_the_log_as_it_was_and_stops_issuing() {
    require_root!();
    disk_fails_before("before-intent", "intent", Failure::Dead, &["genesis"]);
    disk_fails_before(
        "after-final-1",
        "consume",
        Failure::Dead,
        &["genesis", "intent"],
    );
    disk_fails_before(
        "after-consume",
        "receipt",
        Failure::Dead,
        &["genesis", "intent", "consume"],
    );
}

pub(crate) fn an_enrollment_whose_journal_cannot_be_written_leaves_no_journal() {
    // Proves: the journal an enrollment created (O_EXCL) and could not write, on a full
    // disk, is removed with everything else the enrollment made: the refusal names the
    // step and the cause, and the same manifest enrolls once the disk has room (found by
    // attacking the release binaries: the empty journal was left, and the retry refused
    // "File exists").
    require_root!();
    let _no_namespaces = no_mount_namespaces_guard();
    let fs = Ext4::new();
    let s = Sandbox::new();
    let journal = fs.mnt.join("journal");
    let m = s.manifest("").replace(
        &format!("path = \"{}/journal\"", s.srv.display()),
        &format!("path = \"{}\"", journal.display()),
    );
    let p = s.path("manifest.toml");
    std::fs::write(&p, &m).unwrap();
    fill(&fs.mnt);
    let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
    assert_first_refusal(&r, "enroll-failed");
    assert!(
        !journal.exists(),
        "the journal it created is left: {}",
        r.stdout
    );
    assert!(
        r.stdout.contains("write its genesis") && r.stdout.contains("No space left on device"),
        "the step and the cause: {}",
        r.stdout
    );
    std::fs::remove_file(fs.mnt.join("filler")).unwrap();
    let again = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
    assert_eq!(
        again.code,
        Outcome::Success,
        "{}{}",
        again.stdout,
        again.stderr
    );
}

/// Page size the partial-write case is built around (x86-64, and every Linux test host here).
const PAGE_BYTES: usize = 4096;
/// Facts tried while padding the intent so the log ends where the case needs it.
const PAD_FACTS_MAX: usize = 64;

pub(crate) fn a_full_disk_never_leaves_a_partial_record() {
    // The page-cache write path fills page by page: on a full ext4 with 1 KiB blocks, an
    // append that starts in the last, already allocated block of a page and runs into the
    // next page writes the first part and then fails, leaving a partial record (seen: 596
    // of 1,000 bytes). The log's append must reserve the whole record's blocks first, so a
    // full disk fails it before any byte is written. Built through the real store on a
    // loop-mounted ext4: genesis, an intent padded with facts so that after `consume` the
    // log ends late in a page, the disk filled, then a receipt larger than what is left of
    // that page. Oracle: the append fails, and the file's bytes are those before it.
    require_root!();
    use repoch_issuer::log::EpochLog;
    use repoch_issuer::storage::Real;
    use repoch_protocol::cbor::Canonical as _;
    use repoch_protocol::epoch::{Contender, EpochBody, EpochRecord, SignedEpochRecord};
    use repoch_protocol::grant::{Challenge, ConsumerPeer};
    use repoch_protocol::{DeploymentId, Fact, Hash, Identity};

    let _no_namespaces = no_mount_namespaces_guard();
    let fs = Ext4::new();
    let s = Sandbox::within(Some(&fs.mnt));
    let id = s.enroll();
    let layout = repoch_issuer::Layout::new(Some(&s.root));
    let key = repoch_issuer::enroll::issuer_key(&layout, false).unwrap();
    let issuer = repoch_issuer::store::issuer_public(&layout).unwrap();
    let dep = DeploymentId::from_hex(&id).unwrap();
    let mut d = repoch_issuer::store::Deployment::open(&layout, &issuer, dep).unwrap();
    let peer = ConsumerPeer {
        pid: 1,
        uid: 0,
        gid: 0,
        exe: Identity {
            dev: 1,
            ino: 1,
            uid: 0,
            gid: 0,
            mode: 0o100755,
            birth: None,
        },
        exe_sha256: Hash([1; 32]),
        cgroup: "/".into(),
    };
    let sign = |log: &EpochLog<std::os::fd::OwnedFd>, body: EpochBody| {
        SignedEpochRecord::sign(
            EpochRecord {
                deployment: dep,
                seq: log.next_seq(),
                prev: log.last_hash(),
                body,
            },
            &key,
        )
    };
    let intent = |facts: usize| EpochBody::Intent {
        evidence: Hash([2; 32]),
        facts: (0..facts)
            .map(|i| {
                Fact::ok(
                    "pad",
                    &format!("/pad/{i:03}/{}", "x".repeat(100)),
                    "held",
                    "held",
                )
            })
            .collect(),
        contender: Contender {
            pid: 1,
            start_ticks: 1,
            boot_id: "b".into(),
        },
        consumer: peer.clone(),
    };
    // Its challenge names the intent record it follows (its length does not depend on it).
    let consume_for = |intent: Hash| EpochBody::Consume {
        consumer: peer.clone(),
        challenge: Challenge {
            deployment: dep,
            intent,
            nonce: [4; 32],
        },
        custody: [5; 64],
        fencing: None,
    };
    let consume = consume_for(Hash::ZERO);
    // Pad the intent until genesis + intent + consume end in the last quarter of a page.
    let genesis = std::fs::metadata(s.log(&id)).unwrap().len() as usize;
    let framed = |b: EpochBody| sign(&d.log, b).to_bytes().len() + 4;
    let consume_len = framed(consume.clone());
    let facts = (0..PAD_FACTS_MAX)
        .find(|&k| {
            let end = genesis + framed(intent(k)) + consume_len;
            (PAGE_BYTES * 3 / 4 + 64..PAGE_BYTES - 64).contains(&(end % PAGE_BYTES))
        })
        .expect("no padding puts the log's end late in a page");
    let r = sign(&d.log, intent(facts));
    d.log.append(&mut Real, &r).unwrap();
    let r = sign(&d.log, consume_for(d.log.last_hash()));
    d.log.append(&mut Real, &r).unwrap();
    let before = std::fs::read(s.log(&id)).unwrap();
    // The receipt runs past the end of the page.
    let grant = vec![6u8; PAGE_BYTES / 2];
    let r = sign(&d.log, EpochBody::Receipt { grant });
    fill(&fs.mnt);
    let err = d.log.append(&mut Real, &r).unwrap_err();
    assert!(d.log.poisoned(), "{err}");
    assert!(
        err.to_string().contains("No space left on device"),
        "the error must name the cause: {err}"
    );
    drop(d);
    let after = std::fs::read(s.log(&id)).unwrap();
    assert!(
        after == before,
        "a full disk left a partial record: {} bytes before, {} after",
        before.len(),
        after.len()
    );
    std::fs::remove_file(fs.mnt.join("filler")).unwrap();
    let j = s.status(&id).json();
    assert_eq!(j["epoch"], "consumed", "{j}");
}

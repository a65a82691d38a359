//! Real power loss (docs/ARCHITECTURE.md, "Testing"): the state root lives on a loop-mounted ext4 image; records
//! are appended through the real store, and power is cut with `EXT4_IOC_SHUTDOWN`
//! (`NOLOGFLUSH`) right after an append's fdatasync, or right before it. After unmount and
//! remount, `repoch status` (the real binary) must show every fsynced record and exactly
//! the classification the invariant implies.

use std::path::Path;

use repoch_issuer::log::EpochLog;
use repoch_issuer::storage::{Real, Storage};
use repoch_issuer::store::Deployment;
use repoch_protocol::epoch::{Contender, EpochBody, EpochRecord, SignedEpochRecord};
use repoch_protocol::grant::{Challenge, ConsumerPeer};
use repoch_protocol::{DeploymentId, Hash, Identity};
use repoch_tests_native::{no_mount_namespaces_guard, require_root, Ext4, Outcome, Sandbox};

/// Real storage whose `sync_data` cuts the power instead of syncing, at a chosen call.
struct CutBeforeSync<'a> {
    fs: &'a Ext4,
}

impl Storage for CutBeforeSync<'_> {
    type Dir = std::os::fd::OwnedFd;
    type File = std::os::fd::OwnedFd;
    fn mkdir_at(&mut self, p: &Self::Dir, n: &str, m: u32) -> std::io::Result<()> {
        Real.mkdir_at(p, n, m)
    }
    fn open_dir_at(&mut self, p: &Self::Dir, n: &str) -> std::io::Result<Self::Dir> {
        Real.open_dir_at(p, n)
    }
    fn create_at(&mut self, d: &Self::Dir, n: &str, m: u32) -> std::io::Result<Self::File> {
        Real.create_at(d, n, m)
    }
    fn write(&mut self, f: &Self::File, b: &[u8]) -> std::io::Result<usize> {
        Real.write(f, b)
    }
    fn sync_data(&mut self, _f: &Self::File) -> std::io::Result<()> {
        self.fs.cut_power();
        Err(std::io::Error::other("power cut before fdatasync"))
    }
    fn sync_dir(&mut self, d: &Self::Dir) -> std::io::Result<()> {
        Real.sync_dir(d)
    }
    fn read_all(&mut self, f: &Self::File, max: usize) -> std::io::Result<Vec<u8>> {
        Real.read_all(f, max)
    }
    fn rename_at(&mut self, d: &Self::Dir, a: &str, b: &str) -> std::io::Result<()> {
        Real.rename_at(d, a, b)
    }
}

fn peer() -> ConsumerPeer {
    ConsumerPeer {
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
    }
}

fn consumer_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[8; 32])
}

/// The receipt of a recovery whose intent and consume are `hashes[1]` and `hashes[2]`: its
/// grant bound to them, as every receipt must be (docs/PROTOCOL.md, "The epoch log").
fn receipt(dep: DeploymentId, hashes: &[Hash], key: &ed25519_dalek::SigningKey) -> EpochBody {
    use repoch_protocol::cbor::Canonical as _;
    use repoch_protocol::grant::{Grant, SignedGrant};
    let g = Grant {
        deployment: dep,
        intent: hashes[1],
        consume: hashes[2],
        evidence: Hash([2; 32]),
        consumer_key: repoch_protocol::PublicKey::from(&consumer_key().verifying_key()),
        ready_path: "/srv/READY".into(),
        ready_sha256: Hash([6; 32]),
        fences: vec![],
        frontier_seq: 0,
        frontier_hash: Hash([7; 32]),
        unknown_ops: vec![],
        issued_at: 1,
        listeners: vec![],
        fencing: None,
    };
    EpochBody::Receipt {
        grant: SignedGrant::sign(g, key).to_bytes(),
    }
}

/// The consume answering the custody challenge for the intent record `intent`, as every
/// consume must (docs/PROTOCOL.md, "The epoch log").
fn consume(dep: DeploymentId, intent: Hash) -> EpochBody {
    let challenge = Challenge {
        deployment: dep,
        intent,
        nonce: [4; 32],
    };
    EpochBody::Consume {
        consumer: peer(),
        custody: challenge.answer(&consumer_key()),
        challenge,
        fencing: None,
    }
}

fn body(phase: usize) -> EpochBody {
    match phase {
        1 => EpochBody::Intent {
            evidence: Hash([2; 32]),
            facts: vec![],
            contender: Contender {
                pid: 1,
                start_ticks: 1,
                boot_id: "b".into(),
            },
            consumer: peer(),
        },
        _ => unreachable!("the consume and the receipt are made from the hashes before them"),
    }
}

const PHASES: [&str; 4] = ["enrolled", "intended", "consumed", "receipted"];

/// The record of `phase` after those whose hashes are `hashes` (genesis first).
fn record(
    log: &EpochLog<std::os::fd::OwnedFd>,
    phase: usize,
    hashes: &[Hash],
    key: &ed25519_dalek::SigningKey,
) -> SignedEpochRecord {
    let dep = log.deployment;
    let body = match phase {
        2 => consume(dep, hashes[1]),
        3 => receipt(dep, hashes, key),
        p => body(p),
    };
    SignedEpochRecord::sign(
        EpochRecord {
            deployment: dep,
            seq: log.next_seq(),
            prev: log.last_hash(),
            body,
        },
        key,
    )
}

fn power_loss_at(phase: usize, before_sync: bool) {
    let _no_namespaces = no_mount_namespaces_guard();
    let fs = Ext4::new();
    let s = Sandbox::within(Some(&fs.mnt));
    let id = s.enroll();
    let layout = repoch_issuer::Layout::new(Some(&s.root));
    let key = repoch_issuer::enroll::issuer_key(&layout, false).unwrap();
    let issuer = repoch_issuer::store::issuer_public(&layout).unwrap();
    let dep = DeploymentId::from_hex(&id).unwrap();
    let mut d = Deployment::open(&layout, &issuer, dep).unwrap();
    let mut hashes = vec![d.log.last_hash()];
    for p in 1..phase {
        let r = record(&d.log, p, &hashes, &key);
        d.log.append(&mut Real, &r).unwrap();
        hashes.push(d.log.last_hash());
    }
    let r = record(&d.log, phase, &hashes, &key);
    if before_sync {
        let err = d
            .log
            .append(&mut CutBeforeSync { fs: &fs }, &r)
            .unwrap_err();
        assert!(d.log.poisoned(), "{err}");
    } else {
        d.log.append(&mut Real, &r).unwrap();
        fs.cut_power();
    }
    drop(d);
    fs.remount_after_power_loss();
    let st = s.status(&id);
    assert_eq!(st.code, Outcome::Success, "{}{}", st.stdout, st.stderr);
    let j = st.json();
    let want = if before_sync {
        PHASES[phase - 1]
    } else {
        PHASES[phase]
    };
    assert_eq!(
        j["epoch"],
        want,
        "power cut {} the fdatasync of phase {phase}: {j}",
        if before_sync { "before" } else { "after" }
    );
    drop(s);
    let _ = Path::new(&fs.mnt);
}

pub(crate) fn power_loss_right_after_each_fsynced_append_keeps_it() {
    require_root!();
    for phase in 1..=3 {
        power_loss_at(phase, false);
    }
}

pub(crate) fn power_loss_right_before_each_fsync_loses_only_the_unsynced_record() {
    require_root!();
    for phase in 1..=3 {
        power_loss_at(phase, true);
    }
}

pub(crate) fn power_loss_right_after_enrollment_keeps_the_deployment() {
    // enroll returns only after every file and directory is fsynced.
    require_root!();
    let _no_namespaces = no_mount_namespaces_guard();
    let fs = Ext4::new();
    let s = Sandbox::within(Some(&fs.mnt));
    let id = s.enroll();
    fs.cut_power();
    fs.remount_after_power_loss();
    let j = s.status(&id).json();
    assert_eq!(j["epoch"], "enrolled");
    assert!(s.srv.join("journal").exists());
}

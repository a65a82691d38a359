//! `verify --log` (`verify_log_against`) on real files: a grant, the checkpoint kept beside
//! it, and an epoch log, each made and signed here as repochd makes them. The log must
//! extend the checkpoint and its receipt must carry this very grant (docs/AUDITOR.md,
//! "Checkpoints"): a grant kept beside another issuance's checkpoint is caught.

use std::path::Path;

use ed25519_dalek::SigningKey;
use repoch_consumer::{checkpoint_path, verify_log_against, Error};
use repoch_protocol::cbor::Canonical as _;
use repoch_protocol::checkpoint::{self, Checkpoint};
use repoch_protocol::epoch::{Contender, EpochBody, EpochRecord, SignedEpochRecord};
use repoch_protocol::grant::{Challenge, ConsumerPeer, Grant, SignedGrant};
use repoch_protocol::{DeploymentId, Hash, Identity, PublicKey};

const DEP: DeploymentId = DeploymentId([0x4d; 16]);

fn issuer() -> SigningKey {
    SigningKey::from_bytes(&[1; 32])
}

fn consumer() -> SigningKey {
    SigningKey::from_bytes(&[3; 32])
}

fn peer() -> ConsumerPeer {
    ConsumerPeer {
        pid: 7,
        uid: 990,
        gid: 990,
        exe: Identity {
            dev: 1,
            ino: 2,
            uid: 0,
            gid: 0,
            mode: 0o100755,
            birth: None,
        },
        exe_sha256: Hash([5; 32]),
        cgroup: "/system.slice/billing.service".into(),
    }
}

/// One issuance of `DEP`'s epoch: the log (genesis, intent, consume, receipt), the signed
/// grant its receipt carries, and the checkpoint taken with the receipt. `nonce` tells two
/// issuances of the one epoch apart (the second after a rollback to the genesis).
fn issuance(nonce: u8) -> (Vec<u8>, Vec<u8>, String) {
    let key = issuer();
    let mut log = Vec::new();
    let mut hashes: Vec<Hash> = Vec::new();
    let mut append = |body: EpochBody, hashes: &mut Vec<Hash>| {
        let r = SignedEpochRecord::sign(
            EpochRecord {
                deployment: DEP,
                seq: hashes.len() as u64,
                prev: hashes.last().copied().unwrap_or(Hash::ZERO),
                body,
            },
            &key,
        );
        hashes.push(Hash::of(&r.to_bytes()));
        log.extend_from_slice(&r.to_frame());
    };
    append(
        EpochBody::Genesis {
            manifest: Hash([9; 32]),
            issuer_key: PublicKey::from(&key.verifying_key()),
            predecessor: None,
        },
        &mut hashes,
    );
    let evidence = Hash([12; 32]);
    append(
        EpochBody::Intent {
            evidence,
            facts: vec![],
            contender: Contender {
                pid: 1,
                start_ticks: u64::from(nonce),
                boot_id: "b0a7".into(),
            },
            consumer: peer(),
        },
        &mut hashes,
    );
    let challenge = Challenge {
        deployment: DEP,
        intent: hashes[1],
        nonce: [nonce; 32],
    };
    append(
        EpochBody::Consume {
            consumer: peer(),
            custody: challenge.answer(&consumer()),
            challenge,
            fencing: None,
        },
        &mut hashes,
    );
    let grant = SignedGrant::sign(
        Grant {
            deployment: DEP,
            intent: hashes[1],
            consume: hashes[2],
            evidence,
            consumer_key: PublicKey::from(&consumer().verifying_key()),
            ready_path: "/srv/billing/READY".into(),
            ready_sha256: Hash([13; 32]),
            fences: vec![],
            frontier_seq: 0,
            frontier_hash: Hash([14; 32]),
            unknown_ops: vec![],
            issued_at: 1_790_000_000,
            listeners: vec![],
            fencing: None,
        },
        &key,
    )
    .to_bytes();
    append(
        EpochBody::Receipt {
            grant: grant.clone(),
        },
        &mut hashes,
    );
    let note = Checkpoint {
        origin: checkpoint::origin(&DEP),
        size: 4,
        head: hashes[3],
    }
    .sign(checkpoint::KEY_NAME, &key);
    (log, grant, note)
}

/// Writes the grant, the note beside it and the log; runs `verify --log`.
fn verify(dir: &Path, grant: &[u8], note: &str, log: &[u8]) -> Result<(), Error> {
    let g = dir.join("grant.cbor");
    std::fs::write(&g, grant).unwrap();
    std::fs::write(checkpoint_path(&g), note).unwrap();
    let l = dir.join("epoch.log");
    std::fs::write(&l, log).unwrap();
    let issuer = PublicKey::from(&issuer().verifying_key());
    let parsed = repoch_consumer::verify(grant, &issuer, None)?;
    verify_log_against(&parsed, grant, &g, &l, &issuer).map(|_| ())
}

#[test]
fn a_grant_verifies_against_its_own_log_and_not_beside_another_issuances_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (log_a, grant_a, note_a) = issuance(1);
    let (log_b, grant_b, note_b) = issuance(2);
    verify(dir.path(), &grant_a, &note_a, &log_a).unwrap();
    verify(dir.path(), &grant_b, &note_b, &log_b).unwrap();
    // Grant A kept beside B's checkpoint, against B's log (the epoch rolled back to its
    // genesis and issued again): the log extends the note but holds another grant.
    match verify(dir.path(), &grant_a, &note_b, &log_b) {
        Err(Error::NotThisGrant {
            grant_sha256,
            log,
            from,
        }) => {
            assert_eq!(grant_sha256, Hash::of(&grant_a));
            assert_eq!(log.0, 4);
            assert_eq!(from, Some(1), "rewritten from the intent");
        }
        other => panic!("{other:?}"),
    }
    // With its own note against B's log, A is a fork of the checkpoint, as before.
    assert!(matches!(
        verify(dir.path(), &grant_a, &note_a, &log_b),
        Err(Error::Inconsistent(_, Some(1)))
    ));
}

#[test]
fn a_note_over_its_bound_a_symlinked_note_and_bytes_after_the_receipt_are_refused_as_audit_refuses_them(
) {
    // Proves (docs/AUDITOR.md, "Checkpoints"): verify --log reads the kept note and the log
    // as `repoch audit --checkpoint` does. A note one byte over CHECKPOINT_BYTES_MAX is an
    // invalid checkpoint (BadGrant, exit 2), a note reached through a symlink is not opened
    // (Usage, 64), and a log that extends the note but holds bytes after its receipt does
    // not verify (LogInvalid epoch-torn, exit 2).
    let dir = tempfile::tempdir().unwrap();
    let (log, grant, note) = issuance(1);
    let big = format!(
        "{note}{}",
        "\n".repeat(repoch_protocol::limits::CHECKPOINT_BYTES_MAX + 1 - note.len())
    );
    assert!(matches!(
        verify(dir.path(), &grant, &big, &log),
        Err(Error::BadGrant(m)) if m.contains("over its bound")
    ));
    let g = dir.path().join("grant.cbor");
    let real = dir.path().join("real.note");
    std::fs::write(&real, &note).unwrap();
    std::fs::remove_file(checkpoint_path(&g)).unwrap();
    std::os::unix::fs::symlink(&real, checkpoint_path(&g)).unwrap();
    let l = dir.path().join("epoch.log");
    let issuer = PublicKey::from(&issuer().verifying_key());
    let parsed = repoch_consumer::verify(&grant, &issuer, None).unwrap();
    assert!(matches!(
        verify_log_against(&parsed, &grant, &g, &l, &issuer),
        Err(Error::Usage(_))
    ));
    std::fs::remove_file(checkpoint_path(&g)).unwrap();
    // The log reached through a symlink: not opened, as `repoch audit` refuses it.
    std::fs::write(checkpoint_path(&g), &note).unwrap();
    let real_log = dir.path().join("real.log");
    std::fs::write(&real_log, &log).unwrap();
    let linked = dir.path().join("linked.log");
    std::os::unix::fs::symlink(&real_log, &linked).unwrap();
    assert!(matches!(
        verify_log_against(&parsed, &grant, &g, &linked, &issuer),
        Err(Error::Usage(_))
    ));
    std::fs::remove_file(checkpoint_path(&g)).unwrap();
    let torn = [&log[..], &[0, 0, 1][..]].concat();
    match verify(dir.path(), &grant, &note, &torn) {
        Err(Error::LogInvalid { reason, .. }) => {
            assert_eq!(reason, repoch_protocol::Reason::EpochTorn)
        }
        other => panic!("{other:?}"),
    }
    assert!(verify(dir.path(), &grant, &note, &log).is_ok());
}

//! Log classification, journal verification and predecessor links.

use repoch_protocol::cbor::Canonical;
use repoch_protocol::epoch::{
    verify_chain, verify_log, Classification, EpochBody, EpochRecord, SignedEpochRecord,
};
use repoch_protocol::journal::{
    verify_journal, JournalBody, JournalPins, JournalRecord, SignedJournalRecord,
};
use repoch_protocol::manifest::Predecessor;
use repoch_protocol::{DeploymentId, Hash, Reason};

use crate::common::*;

fn classify(bytes: &[u8]) -> Classification {
    verify_log(bytes, &pk(&issuer()), Some(DEP)).classification
}

#[test]
fn each_phase_classifies_by_its_last_record() {
    let recs = epoch_records();
    let want = [
        Classification::Enrolled,
        Classification::Intended,
        Classification::Consumed,
        Classification::Receipted,
    ];
    for (n, w) in want.iter().enumerate() {
        assert_eq!(classify(&log_bytes(&recs[..=n])), *w);
    }
    assert_eq!(classify(&[]), Classification::Empty);
    let mut bodies: Vec<EpochBody> = recs.iter().take(2).map(|r| r.record.body.clone()).collect();
    bodies.push(withheld());
    assert_eq!(
        classify(&log_bytes(&chain(bodies))),
        Classification::Withheld
    );
}

#[test]
fn only_enrolled_may_start_an_issuance() {
    for c in [
        Classification::Intended,
        Classification::Consumed,
        Classification::Receipted,
        Classification::Withheld,
    ] {
        assert_eq!(c.refusal(), Some(Reason::EpochConsumed));
    }
    assert_eq!(Classification::Enrolled.refusal(), None);
    assert_eq!(Classification::Torn.refusal(), Some(Reason::EpochTorn));
    assert_eq!(
        Classification::Corrupt.refusal(),
        Some(Reason::EpochCorrupt)
    );
}

#[test]
fn every_truncation_is_torn_and_keeps_the_valid_prefix() {
    let recs = epoch_records();
    let full = log_bytes(&recs);
    let ends: Vec<usize> = recs
        .iter()
        .scan(0, |o, r| {
            *o += r.to_frame().len();
            Some(*o)
        })
        .collect();
    for cut in 1..full.len() {
        let rep = verify_log(&full[..cut], &pk(&issuer()), Some(DEP));
        let whole = ends.iter().filter(|e| **e <= cut).count();
        assert_eq!(rep.records.len(), whole, "cut at {cut}");
        if ends.contains(&cut) {
            assert!(rep.problem.is_none());
        } else {
            assert_eq!(rep.classification, Classification::Torn, "cut at {cut}");
            assert_eq!(
                rep.problem.unwrap().0,
                ends.get(whole.wrapping_sub(1)).copied().unwrap_or(0) as u64
            );
        }
    }
}

#[test]
fn a_flipped_byte_anywhere_is_refused_never_valid() {
    // A flipped bit is no crash's zero fill: the log is corrupt, forged (a signature no
    // longer verifies), or torn (the tail no longer frames or decodes), never valid.
    let full = log_bytes(&epoch_records());
    for i in 0..full.len() {
        let mut b = full.clone();
        b[i] ^= 0x01;
        let c = classify(&b);
        assert!(
            matches!(
                c,
                Classification::Corrupt | Classification::Torn | Classification::Forged
            ),
            "flip at {i} gave {c:?}"
        );
    }
}

#[test]
fn out_of_order_records_are_corrupt_foreign_ones_foreign_forged_ones_forged() {
    let recs = epoch_records();
    // consume directly after genesis
    let skipped = chain(vec![
        recs[0].record.body.clone(),
        recs[2].record.body.clone(),
    ]);
    let rep = verify_log(&log_bytes(&skipped), &pk(&issuer()), Some(DEP));
    assert_eq!(rep.classification, Classification::Corrupt);
    assert!(rep.problem.unwrap().1.contains("may not follow"));
    // a whole log of another deployment
    let rep = verify_log(
        &log_bytes(&recs),
        &pk(&issuer()),
        Some(DeploymentId([1; 16])),
    );
    assert_eq!(rep.classification, Classification::Foreign);
    // signed by another key
    let rep = verify_log(&log_bytes(&recs), &pk(&producer()), Some(DEP));
    assert_eq!(rep.classification, Classification::Forged);
    // anything after withheld
    let mut bodies: Vec<EpochBody> = recs.iter().take(2).map(|r| r.record.body.clone()).collect();
    bodies.push(withheld());
    bodies.push(withheld());
    assert_eq!(
        classify(&log_bytes(&chain(bodies))),
        Classification::Corrupt
    );
    // a replayed record (same seq twice)
    let mut b = log_bytes(&recs[..2]);
    b.extend(recs[1].to_frame());
    assert_eq!(classify(&b), Classification::Corrupt);
}

fn pins() -> (repoch_protocol::PublicKey, repoch_protocol::PublicKey) {
    (pk(&issuer()), pk(&producer()))
}

#[test]
fn journal_frontier_carries_unknown_and_unended_operations() {
    let recs = journal_records();
    let (i, p) = pins();
    let f = verify_journal(
        &journal_bytes(&recs),
        JournalPins {
            deployment: DEP,
            issuer: &i,
            producer: &p,
            genesis: None,
        },
    )
    .unwrap();
    assert_eq!(f.records, 7);
    assert_eq!(f.last_seq, 6);
    assert_eq!(f.last_hash, Hash::of(&recs[6].to_bytes()));
    let unknown: Vec<(u64, &str)> = f
        .unknown_ops
        .iter()
        .map(|u| (u.op, u.name.as_str()))
        .collect();
    assert_eq!(unknown, vec![(1, "charge"), (2, "refund")]);
}

#[test]
fn journal_refusals_name_the_right_reason() {
    let recs = journal_records();
    let (i, p) = pins();
    let good = JournalPins {
        deployment: DEP,
        issuer: &i,
        producer: &p,
        genesis: Some(Hash::of(&recs[0].to_bytes())),
    };
    let bytes = journal_bytes(&recs);
    assert!(verify_journal(&bytes, good).is_ok());
    let reason = |b: &[u8], pins| verify_journal(b, pins).unwrap_err().reason;
    assert_eq!(reason(&[], good), Reason::LineageTorn);
    assert_eq!(reason(&bytes[..bytes.len() - 3], good), Reason::LineageTorn);
    let mut flipped = bytes.clone();
    let n = flipped.windows(6).rposition(|w| w == b"refund").unwrap(); // the last record's body
    flipped[n] ^= 1;
    assert_eq!(reason(&flipped, good), Reason::LineageMutated);
    // another deployment's journal
    assert_eq!(
        reason(
            &bytes,
            JournalPins {
                deployment: DeploymentId([9; 16]),
                ..good
            }
        ),
        Reason::LineageForeign
    );
    // the enrolled genesis is another one
    assert_eq!(
        reason(
            &bytes,
            JournalPins {
                genesis: Some(Hash([0; 32])),
                ..good
            }
        ),
        Reason::LineageForeign
    );
    // a record re-signed by a foreign key
    let mut forged = recs.clone();
    let r = forged[3].record.clone();
    forged[3] = SignedJournalRecord::sign(r, &consumer());
    assert_eq!(reason(&journal_bytes(&forged), good), Reason::LineageForged);
    // a record with a broken chain (valid signature, wrong prev)
    let mut broken = recs.clone();
    let r = JournalRecord {
        prev: Hash([1; 32]),
        ..recs[3].record.clone()
    };
    broken[3] = SignedJournalRecord::sign(r, &producer());
    assert_eq!(
        reason(&journal_bytes(&broken), good),
        Reason::LineageMutated
    );
    // op-end without op-begin
    let mut stray = recs[..2].to_vec();
    let r = JournalRecord {
        deployment: DEP,
        seq: 2,
        prev: Hash::of(&recs[1].to_bytes()),
        body: JournalBody::OpEnd {
            op: 9,
            outcome: repoch_protocol::journal::OpOutcome::Failed,
        },
    };
    stray.push(SignedJournalRecord::sign(r, &producer()));
    assert_eq!(reason(&journal_bytes(&stray), good), Reason::LineageMutated);
}

fn log_for(dep: DeploymentId, pred: Option<Predecessor>) -> Vec<u8> {
    let r = EpochRecord {
        deployment: dep,
        seq: 0,
        prev: Hash::ZERO,
        body: EpochBody::Genesis {
            manifest: Hash([1; 32]),
            issuer_key: pk(&issuer()),
            predecessor: pred,
        },
    };
    SignedEpochRecord::sign(r, &issuer()).to_frame()
}

#[test]
fn predecessor_links_are_verified() {
    let a = DeploymentId([0xa; 16]);
    let b = DeploymentId([0xb; 16]);
    let log_a = log_bytes(&epoch_records());
    let rep_a = verify_log(&log_a, &pk(&issuer()), None);
    let link = Predecessor {
        deployment: DEP,
        final_hash: rep_a.last_hash().unwrap(),
    };
    let rep_b = verify_log(&log_for(b, Some(link)), &pk(&issuer()), None);
    assert_eq!(
        verify_chain(&[rep_b.clone(), rep_a.clone()]).unwrap(),
        vec![DEP, b]
    );
    // a link to a hash the predecessor does not end in
    let bad = Predecessor {
        deployment: DEP,
        final_hash: Hash([3; 32]),
    };
    let rep_bad = verify_log(&log_for(b, Some(bad)), &pk(&issuer()), None);
    assert!(verify_chain(&[rep_a.clone(), rep_bad]).is_err());
    // a missing predecessor
    assert!(verify_chain(std::slice::from_ref(&rep_b)).is_err());
    // two successors of one deployment
    let rep_c = verify_log(&log_for(a, Some(link)), &pk(&issuer()), None);
    assert!(verify_chain(&[rep_a, rep_b, rep_c]).is_err());
}

#[test]
fn checkpoint_round_trips_and_refuses_other_keys() {
    use repoch_protocol::checkpoint::Checkpoint;
    let cp = Checkpoint {
        origin: format!("repoch/{DEP}"),
        size: 4,
        head: Hash([7; 32]),
    };
    let note = cp.sign("repoch-issuer", &issuer());
    assert_eq!(
        Checkpoint::verify(&note, "repoch-issuer", &pk(&issuer())).unwrap(),
        cp
    );
    assert!(Checkpoint::verify(&note, "repoch-issuer", &pk(&producer())).is_err());
    assert!(Checkpoint::verify(
        &note.replace("\n4\n", "\n5\n"),
        "repoch-issuer",
        &pk(&issuer())
    )
    .is_err());
}

/// The C2SP key hash of an Ed25519 verifier key: SHA-256(name || "\n" || 0x01 || key)[..4].
fn c2sp_key_id(name: &str, key: &repoch_protocol::PublicKey) -> [u8; 4] {
    let mut m = name.as_bytes().to_vec();
    m.push(b'\n');
    m.push(0x01);
    m.extend_from_slice(&key.0);
    let h = Hash::of(&m).0;
    [h[0], h[1], h[2], h[3]]
}

fn signature_blob(note: &str) -> Vec<u8> {
    use base64::Engine as _;
    let line = note.lines().last().unwrap();
    let b = line.rsplit(' ').next().unwrap();
    base64::engine::general_purpose::STANDARD.decode(b).unwrap()
}

#[test]
fn a_checkpoint_signature_carries_the_c2sp_key_hash_and_a_line_is_judged_by_name_length_and_id() {
    use base64::Engine as _;
    use repoch_protocol::checkpoint::{origin, Checkpoint, CheckpointError, KEY_NAME};
    let b64 = base64::engine::general_purpose::STANDARD;
    assert_eq!(origin(&DEP), format!("repoch/epoch-log/{}", DEP.to_hex()));
    let cp = Checkpoint {
        origin: origin(&DEP),
        size: 4,
        head: Hash([7; 32]),
    };
    let note = cp.sign(KEY_NAME, &issuer());
    let blob = signature_blob(&note);
    assert_eq!(blob.len(), 68);
    assert_eq!(blob[..4], c2sp_key_id(KEY_NAME, &pk(&issuer())));
    let (body, _) = note.split_once("\n\n").unwrap();
    // A valid signature under another name on its line: not the key asked for.
    let renamed = format!("{body}\n\n\u{2014} someone-else {}\n", b64.encode(&blob));
    assert_eq!(
        Checkpoint::verify(&renamed, KEY_NAME, &pk(&issuer())),
        Err(CheckpointError::Unverified(KEY_NAME.into()))
    );
    // The right name and key hash with a blob of the wrong length: that key's line does
    // not verify, so the note is refused (as Go's note.Open refuses it).
    let short = format!(
        "{body}\n\n\u{2014} {KEY_NAME} {}\n",
        b64.encode(&blob[..14])
    );
    assert_eq!(
        Checkpoint::verify(&short, KEY_NAME, &pk(&issuer())),
        Err(CheckpointError::Unverified(KEY_NAME.into()))
    );
}

#[test]
fn a_log_extends_its_own_checkpoint_and_a_fork_or_rollback_is_named_with_its_evidence() {
    use repoch_protocol::checkpoint::Checkpoint;
    let records = epoch_records();
    let rep = verify_log(&log_bytes(&records), &pk(&issuer()), Some(DEP));
    let cp = Checkpoint::of_log(&rep).expect("a log with a genesis has a checkpoint");
    assert_eq!(cp.size, records.len() as u64);
    assert_eq!(cp.head, rep.last_hash().unwrap());
    assert_eq!(cp.origin, repoch_protocol::checkpoint::origin(&DEP));
    let ext = cp
        .extended_by(&rep)
        .expect("a log extends its own checkpoint");
    assert_eq!(ext.old, ext.current);
    // The same size with another head: a fork, the evidence pair at the checkpoint's size.
    let forked = Checkpoint {
        head: Hash([9; 32]),
        ..cp.clone()
    };
    let e = forked.extended_by(&rep).unwrap_err();
    assert_eq!(e.reason, Reason::CheckpointFork);
    assert_eq!(e.current, (cp.size, cp.head));
    let text = e.to_string();
    assert!(
        text.contains(&format!("checkpoint size {}", cp.size)),
        "{text}"
    );
    assert!(text.contains(&cp.head.to_string()), "{text}");
    // A longer checkpoint than the log: a rollback.
    let longer = Checkpoint {
        size: cp.size + 1,
        ..cp.clone()
    };
    assert_eq!(
        longer.extended_by(&rep).unwrap_err().reason,
        Reason::CheckpointRollback
    );
}

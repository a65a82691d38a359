//! Decoded values at their extremes: adversarial (even validly signed) input is refused
//! with its stable reason, never a panic (release builds abort on overflow).

use repoch_protocol::cbor::Canonical;
use repoch_protocol::journal::{
    verify_journal, JournalBody, JournalPins, JournalRecord, SignedJournalRecord,
};
use repoch_protocol::{Hash, Reason};

use crate::common::*;

/// The journal fixture's first `n` records, then one more record with `body`, signed by the
/// enrolled producer key (valid signature, valid chain).
fn journal_then(n: usize, body: JournalBody) -> Vec<u8> {
    let mut recs = journal_records()[..n].to_vec();
    let r = JournalRecord {
        deployment: DEP,
        seq: n as u64,
        prev: Hash::of(&recs[n - 1].to_bytes()),
        body,
    };
    recs.push(SignedJournalRecord::sign(r, &producer()));
    journal_bytes(&recs)
}

#[test]
fn a_signed_op_begin_with_the_largest_op_id_is_lineage_mutated_not_a_panic() {
    // Proves: the old root signs `op-begin` with op = u64::MAX; the verifier's next-op
    // arithmetic would overflow (abort in release). It must refuse as lineage-mutated.
    let (i, p) = (pk(&issuer()), pk(&producer()));
    let pins = JournalPins {
        deployment: DEP,
        issuer: &i,
        producer: &p,
        genesis: None,
    };
    let bytes = journal_then(
        2,
        JournalBody::OpBegin {
            op: u64::MAX,
            name: "overflow".into(),
        },
    );
    let e = verify_journal(&bytes, pins).unwrap_err();
    assert_eq!(e.reason, Reason::LineageMutated, "{e:?}");
    assert!(e.detail.contains("op"), "{e:?}");
}

#[test]
fn a_signed_op_begin_whose_name_forges_a_line_is_lineage_mutated() {
    // The producer signs an op-begin whose name holds ESC, CR or U+202E: the verifier
    // applies the one text rule (docs/PROTOCOL.md, "Text") and refuses it, so the name
    // is never carried into a grant nor printed.
    let (i, p) = (pk(&issuer()), pk(&producer()));
    for name in [
        "\u{1b}]0;owned\u{7}",
        "ok\r\u{1b}[2K  ok",
        "evil\u{202e}txt.sh",
    ] {
        let pins = JournalPins {
            deployment: DEP,
            issuer: &i,
            producer: &p,
            genesis: None,
        };
        let bytes = journal_then(
            2,
            JournalBody::OpBegin {
                op: 9,
                name: name.into(),
            },
        );
        let e = verify_journal(&bytes, pins).unwrap_err();
        assert_eq!(e.reason, Reason::LineageMutated, "{name:?}: {e:?}");
        assert!(e.detail.contains("changes how the text reads"), "{e:?}");
    }
}

// ---- crash tails, forged and foreign logs (each its own reason) ----

use repoch_protocol::epoch::{verify_log, EpochBody, EpochRecord, SignedEpochRecord};

/// (classification, refusal reason) as their stable strings.
fn class(bytes: &[u8]) -> (&'static str, Option<&'static str>) {
    let c = verify_log(bytes, &pk(&issuer()), Some(DEP)).classification;
    (c.as_str(), c.refusal().map(Reason::as_str))
}

const TORN: (&str, Option<&str>) = ("torn", Some("epoch-torn"));

#[test]
fn what_a_crash_can_leave_after_the_last_record_is_torn() {
    // Proves: every tail a crash can produce after the last valid record reads as torn
    // (epoch-torn: uncertain, preserve), not corrupt (investigate tampering).
    let recs = epoch_records();
    let good = log_bytes(&recs[..2]);
    let next = recs[2].to_frame();
    // A record cut short.
    let cut = [&good[..], &next[..next.len() / 2]].concat();
    assert_eq!(class(&cut), TORN);
    // A zero-filled tail (the file grew, its data blocks never reached the disk).
    for n in [1, 4, 5, 4096] {
        let z = [&good[..], &vec![0u8; n][..]].concat();
        assert_eq!(class(&z), TORN, "{n} zero bytes");
    }
    // Out-of-order sector loss: the whole next frame's length is there, but from a
    // 512-byte sector boundary of the file on, zeros (here inside the signature or body).
    for last in 1..recs.len() {
        let good = log_bytes(&recs[..last]);
        let next = recs[last].to_frame();
        let aligned = (good.len() / 512 + 1) * 512;
        if aligned >= good.len() + next.len() {
            continue;
        }
        let mut lost = [&good[..], &next[..]].concat();
        lost[aligned..].fill(0);
        assert_eq!(class(&lost), TORN, "sector lost in record {last}");
    }
    // A sector lost out of order inside the last record: one whole zero sector, the
    // sectors after it written (found by the storage simulation: it read as forged).
    // Here the lost sector falls inside the receipt's grant bytes: the record still decodes
    // and only its signature fails.
    let mut bodies: Vec<EpochBody> = recs.iter().map(|r| r.record.body.clone()).collect();
    bodies[3] = EpochBody::Receipt {
        grant: vec![7u8; 2000],
    };
    let big = chain(bodies);
    let good = log_bytes(&big[..3]);
    let next = big[3].to_frame();
    let aligned = (good.len() / 512 + 1) * 512;
    assert!(
        aligned + 512 + 128 < good.len() + next.len(),
        "the receipt must span a whole sector and more"
    );
    let mut lost = [&good[..], &next[..]].concat();
    lost[aligned..aligned + 512].fill(0);
    assert_eq!(class(&lost), TORN, "a middle sector of the receipt lost");
    // Garbage after the last record: stale bytes, impossible lengths.
    let garbage: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8).collect();
    assert_eq!(class(&[&good[..], &garbage[..]].concat()), TORN);
    assert_eq!(class(&[&good[..], &[0xff; 8][..]].concat()), TORN);
}

#[test]
fn a_whole_last_frame_that_is_no_signed_record_is_corrupt_not_torn() {
    // Proves: a whole last frame, length-consistent, with no zero sector, that is not even
    // a signed-record envelope reads corrupt (epoch-corrupt: investigate), never torn: an
    // append a crash interrupts leaves a record cut short or zeros, never other bytes in a
    // whole frame. Every byte of the receipt's payload flipped in turn (12 of its positions
    // broke the encoding and read torn), and the receipt re-encoded non-canonically (its
    // envelope's array header in the one-byte-length form) with its length prefix to match.
    let recs = epoch_records();
    let good = log_bytes(&recs[..3]);
    let last = recs[3].to_frame();
    for i in 4..last.len() {
        let mut flipped = last.clone();
        flipped[i] ^= 0x01;
        let bytes = [&good[..], &flipped[..]].concat();
        assert_ne!(class(&bytes), TORN, "payload byte {} flipped", i - 4);
    }
    // Zeros after such a frame excuse nothing: the frame was whole and synced before any
    // later append began, so a sector lost after it cannot have damaged it (found by
    // attacking the release binaries: 512 zero bytes, or zeros to a sector boundary and
    // one more, appended after a flipped receipt made it torn again).
    let mut flipped = last.clone();
    flipped[4] ^= 0x01;
    let whole = [&good[..], &flipped[..]].concat();
    let to_boundary = whole.len().div_ceil(512) * 512 + 1 - whole.len();
    for zeros in [512, to_boundary] {
        let bytes = [&whole[..], &vec![0u8; zeros][..]].concat();
        assert_eq!(
            class(&bytes),
            ("corrupt", Some("epoch-corrupt")),
            "{zeros} zeros after it"
        );
    }
    let payload = &last[4..];
    assert_eq!(payload[0], 0x82, "the premise: an array of two");
    let mut re = vec![0x98, 0x02];
    re.extend_from_slice(&payload[1..]);
    let mut frame = (re.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&re);
    let bytes = [&good[..], &frame[..]].concat();
    assert_eq!(class(&bytes), ("corrupt", Some("epoch-corrupt")));
}

#[test]
fn a_frame_shortened_to_end_on_one_zero_byte_of_a_sector_is_no_lost_sector() {
    // Proves: a lost sector is a whole aligned sector of the file read as zeros (or the
    // file's last, partial one): a record's length prefix lowered so that its frame ends
    // one byte into a sector, that byte set to zero, the bytes after it in that sector
    // (and the signed records after it) untouched, is no crash's: corrupt, not torn. Found
    // by attacking the release binaries: status, audit and verify --log all read torn.
    let recs = epoch_records();
    let bytes = log_bytes(&recs);
    let at = recs[0].to_frame().len() + recs[1].to_frame().len(); // the consume's frame
    let boundary = (at + 4).div_ceil(512) * 512;
    assert!(
        boundary + 1 < bytes.len(),
        "the premise: bytes after the sector's first"
    );
    let mut t = bytes.clone();
    let len = (boundary + 1 - at - 4) as u32;
    t[at..at + 4].copy_from_slice(&len.to_be_bytes());
    t[boundary] = 0;
    assert!(t[boundary + 1..].iter().any(|b| *b != 0));
    assert_ne!(class(&t), TORN);
}

#[test]
fn a_negative_integer_makes_no_envelope_and_no_item_at_all() {
    // Proves: encoding rule 3 forbids negative integers, so no strict decoder takes one
    // (DecodeError::Forbidden), and a last frame `[record, signature]` whose record holds
    // one is no signed-record envelope: corrupt (undecodable), not forged (a signature
    // judged over an item the rules forbid). Found by an outsider implementing the
    // auditor from docs/ alone: repoch read such an envelope as signed.
    use ciborium::Value;
    use repoch_protocol::cbor::{decode_strict, encode, DecodeError};
    let neg = encode(&Value::Array(vec![Value::Integer((-1).into())]));
    assert!(matches!(
        decode_strict(&neg, 64),
        Err(DecodeError::Forbidden(_))
    ));
    let recs = epoch_records();
    let good = log_bytes(&recs[..3]);
    let Value::Array(mut items) = recs[3].to_value() else {
        unreachable!()
    };
    let Value::Array(mut record) = items.remove(0) else {
        unreachable!()
    };
    record[2] = Value::Integer((-3).into()); // seq
    let envelope = Value::Array(vec![Value::Array(record), items.remove(0)]);
    let bytes = [
        &good[..],
        &repoch_protocol::wire::frame(&encode(&envelope))[..],
    ]
    .concat();
    assert_eq!(class(&bytes), ("corrupt", Some("epoch-corrupt")));
}

#[test]
fn a_consume_answering_another_challenge_than_its_intents_is_corrupt() {
    // Proves: a consume record is bound to its log (docs/PROTOCOL.md, "The epoch log"): its
    // challenge names this deployment and the hash of the intent record before it. A
    // consume answering a challenge for another intent, or another deployment, signed by
    // the issuer key all the same, is corrupt, with the receipt after it whose grant names
    // it; the log with its own challenge is receipted. Found by an outsider implementing
    // the auditor from docs/ alone: such a log read receipted.
    let bodies = bodies_before_the_receipt();
    let EpochBody::Consume { challenge: own, .. } = bodies[2].clone() else {
        unreachable!()
    };
    let receipted = |consume: EpochBody| {
        let mut b = bodies.clone();
        b[2] = consume;
        let before = chain(b.clone());
        let g = repoch_protocol::grant::Grant {
            intent: Hash::of(&before[1].to_bytes()),
            consume: Hash::of(&before[2].to_bytes()),
            ..grant()
        };
        b.push(EpochBody::Receipt {
            grant: repoch_protocol::grant::SignedGrant::sign(g, &issuer()).to_bytes(),
        });
        log_bytes(&chain(b))
    };
    assert_eq!(
        class(&receipted(bodies[2].clone())),
        ("receipted", Some("epoch-consumed"))
    );
    for other in [
        repoch_protocol::grant::Challenge {
            intent: Hash([6; 32]),
            ..own
        },
        repoch_protocol::grant::Challenge {
            deployment: repoch_protocol::DeploymentId([0xee; 16]),
            ..own
        },
    ] {
        let bytes = receipted(consume_answering(other));
        assert_eq!(class(&bytes), ("corrupt", Some("epoch-corrupt")));
    }
}

#[test]
fn damage_before_a_valid_record_is_corrupt_not_torn() {
    // Proves: a record that fails decoding while valid records follow is no crash tail:
    // corrupt. So is a validly signed record out of order.
    let recs = epoch_records();
    let mut bytes = log_bytes(&recs[..3]);
    let second = recs[0].to_frame().len();
    // Zero the start of record 1's payload (record 2 still follows, intact).
    bytes[second + 4..second + 12].fill(0);
    assert_eq!(class(&bytes).0, "corrupt");
    assert_eq!(class(&bytes).1, Some("epoch-corrupt"));
    // A validly signed record with a wrong sequence number.
    let mut r = recs[1].record.clone();
    r.seq = 7;
    let bad = [
        recs[0].to_frame(),
        SignedEpochRecord::sign(r, &issuer()).to_frame(),
    ]
    .concat();
    assert_eq!(class(&bad), ("corrupt", Some("epoch-corrupt")));
}

#[test]
fn a_record_signed_by_another_key_is_forged() {
    // Proves: a well-formed record whose signature is another key's reads as forged
    // (epoch-forged), with its own reason.
    let recs = epoch_records();
    let forged = SignedEpochRecord::sign(recs[1].record.clone(), &producer());
    let bytes = [recs[0].to_frame(), forged.to_frame()].concat();
    assert_eq!(class(&bytes), ("forged", Some("epoch-forged")));
    // A genesis naming another issuer key, signed by it.
    let g = SignedEpochRecord::sign(
        EpochRecord {
            deployment: DEP,
            seq: 0,
            prev: Hash::ZERO,
            body: EpochBody::Genesis {
                manifest: Hash([1; 32]),
                issuer_key: pk(&producer()),
                predecessor: None,
            },
        },
        &producer(),
    );
    assert_eq!(class(&g.to_frame()), ("forged", Some("epoch-forged")));
}

#[test]
fn a_log_of_another_deployment_is_foreign() {
    // Proves: a log validly signed by the host issuer for another deployment, read where
    // DEP's log is expected, reads as foreign (epoch-foreign).
    let other = repoch_protocol::DeploymentId([0x77; 16]);
    let recs: Vec<SignedEpochRecord> = epoch_records()
        .into_iter()
        .map(|s| {
            let mut r = s.record;
            r.deployment = other;
            r
        })
        .scan(Hash::ZERO, |prev, mut r| {
            r.prev = *prev;
            let s = SignedEpochRecord::sign(r, &issuer());
            *prev = Hash::of(&s.to_bytes());
            Some(s)
        })
        .collect();
    assert_eq!(class(&log_bytes(&recs)), ("foreign", Some("epoch-foreign")));
}

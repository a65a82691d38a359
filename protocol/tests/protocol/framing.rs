//! The epoch log's framing at its bounds, its report's accessors, and which damage reads as
//! a crash tail (docs/REASONS.md: `epoch-torn` versus `epoch-corrupt` and `epoch-forged`).

use repoch_protocol::cbor::Canonical;
use repoch_protocol::epoch::{
    verify_chain, verify_log, ChainError, Classification, Kind, LogReport,
};
use repoch_protocol::limits::{LOG_BYTES_MAX, RECORD_BYTES_MAX};
use repoch_protocol::Hash;

use crate::common::*;

fn report(bytes: &[u8]) -> LogReport {
    verify_log(bytes, &pk(&issuer()), Some(DEP))
}

/// The first problem's offset and text, and the classification.
fn problem(bytes: &[u8]) -> (u64, String, Classification) {
    let r = report(bytes);
    let (at, why) = r.problem.expect("a problem");
    (at, why, r.classification)
}

/// The enrolled log (a genesis) followed by `tail`.
fn after_genesis(tail: &[u8]) -> (u64, Vec<u8>) {
    let mut b = log_bytes(&epoch_records()[..1]);
    let at = b.len() as u64;
    b.extend_from_slice(tail);
    (at, b)
}

#[test]
fn a_bare_length_prefix_is_a_record_cut_short() {
    let (at, b) = after_genesis(&10u32.to_be_bytes());
    assert_eq!(
        problem(&b),
        (
            at,
            "record of 10 bytes, only 0 present".into(),
            Classification::Torn
        )
    );
    let (at, b) = after_genesis(&[0, 0, 1]);
    assert_eq!(
        problem(&b),
        (
            at,
            "3 bytes, less than a length prefix".into(),
            Classification::Torn
        )
    );
}

#[test]
fn a_record_length_of_zero_or_over_the_bound_loses_the_framing() {
    for len in [0, RECORD_BYTES_MAX + 1] {
        let mut tail = (len as u32).to_be_bytes().to_vec();
        tail.resize(4 + RECORD_BYTES_MAX + 1, 0xff);
        let (at, b) = after_genesis(&tail);
        assert_eq!(
            problem(&b),
            (
                at,
                format!("record length {len} outside 1..={RECORD_BYTES_MAX}"),
                Classification::Torn
            ),
            "length {len}"
        );
    }
}

#[test]
fn a_record_of_exactly_the_bound_is_framed_and_decoded() {
    // A whole frame of the largest length: framed, then refused by the decoder (its bytes
    // are no record), not by the framing.
    let mut tail = (RECORD_BYTES_MAX as u32).to_be_bytes().to_vec();
    tail.resize(4 + RECORD_BYTES_MAX, 0xff);
    let (at, b) = after_genesis(&tail);
    let (got_at, why, c) = problem(&b);
    assert_eq!(got_at, at);
    assert!(why.starts_with("record 1: "), "{why}");
    assert!(!why.contains("outside"), "{why}");
    // A whole frame of bytes that form no signed record, no sector of it zeros: no crash
    // leaves one.
    assert_eq!(c, Classification::Corrupt);
}

#[test]
fn a_log_over_its_bound_is_corrupt_at_once() {
    let mut b = log_bytes(&epoch_records());
    let whole = b.len();
    b.resize(LOG_BYTES_MAX, 0);
    // At the bound: the records are read (the zeros after them are a crash tail).
    let r = report(&b);
    assert_eq!(r.records.len(), epoch_records().len());
    assert_eq!(r.classification, Classification::Torn);
    assert_eq!(r.problem.unwrap().0, whole as u64);
    b.push(0);
    let r = report(&b);
    assert!(r.records.is_empty());
    assert_eq!(r.classification, Classification::Corrupt);
    assert_eq!(
        r.problem,
        Some((
            0,
            format!("log is {} bytes, over {LOG_BYTES_MAX}", LOG_BYTES_MAX + 1)
        ))
    );
}

#[test]
fn a_report_names_its_deployment_genesis_head_and_records_by_kind() {
    let recs = epoch_records();
    let r = report(&log_bytes(&recs));
    assert_eq!(r.deployment(), Some(DEP));
    assert_eq!(r.last_hash(), Some(Hash::of(&recs[3].to_bytes())));
    let (manifest, pred) = r.genesis().unwrap();
    assert_eq!((*manifest, pred), (Hash([15; 32]), None));
    for (n, kind) in [Kind::Genesis, Kind::Intent, Kind::Consume, Kind::Receipt]
        .into_iter()
        .enumerate()
    {
        let v = r.record(kind).unwrap();
        assert_eq!(v.record, recs[n], "{kind:?}");
        assert_eq!(v.hash, Hash::of(&recs[n].to_bytes()));
    }
    assert!(r.record(Kind::Withheld).is_none());
    let empty = report(&[]);
    assert_eq!((empty.deployment(), empty.last_hash()), (None, None));
    assert!(empty.genesis().is_none());
}

#[test]
fn the_same_log_twice_is_one_log_and_two_logs_of_one_deployment_are_a_duplicate() {
    let recs = epoch_records();
    let whole = report(&log_bytes(&recs));
    assert_eq!(
        verify_chain(&[whole.clone(), whole.clone()]).unwrap(),
        vec![DEP]
    );
    let prefix = report(&log_bytes(&recs[..2]));
    assert_eq!(
        verify_chain(&[whole, prefix]).unwrap_err(),
        ChainError::Duplicate(DEP)
    );
}

/// The granted log with its intent (record 1) damaged by `damage`, then `zeros` zero bytes:
/// a crash never damages a record that a valid one follows, whatever zeros end the file.
fn damaged_intent(damage: impl Fn(&mut [u8]), zeros: usize) -> (u64, Vec<u8>) {
    let recs = epoch_records();
    let at = recs[0].to_frame().len();
    let mut b = log_bytes(&recs);
    let end = at + recs[1].to_frame().len();
    damage(&mut b[at + 4..end]);
    b.resize(b.len() + zeros, 0);
    (at as u64, b)
}

/// Flips the first byte of the run of 32 `byte`s in `b` (a hash inside the record).
fn flip_in_hash(b: &mut [u8], byte: u8) {
    let n = b
        .windows(32)
        .position(|w| w.iter().all(|x| *x == byte))
        .unwrap();
    b[n] ^= 1;
}

#[test]
fn a_damaged_record_followed_by_a_valid_one_is_never_a_crash_tail_even_before_zeros() {
    for zeros in [0, 100, 1024, 4096] {
        // Undecodable (its array header says one more field): corrupt.
        let (at, b) = damaged_intent(|p| p[0] += 1, zeros);
        let (got_at, why, c) = problem(&b);
        assert_eq!(
            (got_at, c),
            (at, Classification::Corrupt),
            "{zeros} zeros: {why}"
        );
        // Decodes, but its signature fails (a hash inside it altered): forged.
        let (at, b) = damaged_intent(|p| flip_in_hash(p, 12), zeros);
        let (got_at, why, c) = problem(&b);
        assert_eq!(
            (got_at, c),
            (at, Classification::Forged),
            "{zeros} zeros: {why}"
        );
    }
}

//! The producer journal at its bounds: op ids never reused, at most OPEN_OPS_MAX open,
//! UNKNOWN_OPS_MAX unknown outcomes carried, JOURNAL_BYTES_MAX read; and `next_frame`, the
//! writer, producing what `verify_journal` accepts.

use repoch_protocol::cbor::Canonical;
use repoch_protocol::journal::{
    next_frame, verify_journal, Frontier, JournalBody, JournalPins, LineageError, OpOutcome,
    SignedJournalRecord,
};
use repoch_protocol::limits::{JOURNAL_BYTES_MAX, OPEN_OPS_MAX, UNKNOWN_OPS_MAX};
use repoch_protocol::{Hash, Reason};

use crate::common::*;

/// A journal written with `next_frame`: the issuer-signed genesis, then `bodies` signed by
/// the producer. Returns the bytes and each record's hash.
fn written(bodies: impl IntoIterator<Item = JournalBody>) -> (Vec<u8>, Vec<Hash>) {
    let genesis = JournalBody::Genesis {
        producer_key: pk(&producer()),
    };
    let (mut bytes, h) = next_frame(DEP, None, genesis, &issuer());
    let mut hashes = vec![h];
    for body in bodies {
        let last = (hashes.len() as u64 - 1, *hashes.last().unwrap());
        let (f, h) = next_frame(DEP, Some(last), body, &producer());
        bytes.extend(f);
        hashes.push(h);
    }
    (bytes, hashes)
}

fn verify(bytes: &[u8]) -> Result<Frontier, LineageError> {
    let (i, p) = (pk(&issuer()), pk(&producer()));
    verify_journal(
        bytes,
        JournalPins {
            deployment: DEP,
            issuer: &i,
            producer: &p,
            genesis: None,
        },
    )
}

fn begin(op: u64) -> JournalBody {
    JournalBody::OpBegin {
        op,
        name: format!("op{op}"),
    }
}
fn end(op: u64, outcome: OpOutcome) -> JournalBody {
    JournalBody::OpEnd { op, outcome }
}

#[test]
fn next_frame_writes_the_chain_verify_journal_reads() {
    let (bytes, hashes) = written([
        JournalBody::RootStart { pid: 7 },
        begin(0),
        end(0, OpOutcome::Failed),
        JournalBody::RootStop,
    ]);
    let f = verify(&bytes).unwrap();
    assert_eq!((f.records, f.last_seq), (5, 4));
    assert_eq!(f.genesis, hashes[0]);
    assert_eq!(f.last_hash, hashes[4]);
    assert_eq!(f.next_op, 1);
    assert!(f.unknown_ops.is_empty(), "a failed op is no unknown one");
    // Each returned hash is the hash of the framed record's bytes.
    let first = SignedJournalRecord::from_bytes(&bytes[4..][..first_len(&bytes)]).unwrap();
    assert_eq!(Hash::of(&first.to_bytes()), hashes[0]);
}

/// The length of the first frame's payload.
fn first_len(bytes: &[u8]) -> usize {
    u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize
}

#[test]
fn every_outcome_reads_back_as_itself() {
    for o in [OpOutcome::Succeeded, OpOutcome::Failed, OpOutcome::Unknown] {
        assert_eq!(OpOutcome::parse(o.as_str()), Some(o));
    }
    assert_eq!(OpOutcome::parse("lost"), None);
}

#[test]
fn op_ids_only_increase_and_may_skip() {
    // 0, then 5: ids may skip; the next is 6.
    let (bytes, _) = written([begin(0), begin(5), end(0, OpOutcome::Succeeded)]);
    assert_eq!(verify(&bytes).unwrap().next_op, 6);
    // An id below the next one is a reuse, ended or not.
    for reused in [
        vec![begin(0), end(0, OpOutcome::Succeeded), begin(0)],
        vec![begin(3), begin(2)],
        vec![begin(3), begin(3)],
    ] {
        let (bytes, _) = written(reused.clone());
        let e = verify(&bytes).unwrap_err();
        assert_eq!(e.reason, Reason::LineageMutated, "{reused:?}");
        assert!(e.detail.contains("reuses an id"), "{}", e.detail);
    }
}

#[test]
fn at_most_open_ops_max_operations_are_open_at_once() {
    // OPEN_OPS_MAX begun before any ends: accepted; one more begun while they are open:
    // refused.
    let opens: Vec<JournalBody> = (0..OPEN_OPS_MAX as u64).map(begin).collect();
    let ends: Vec<JournalBody> = (0..OPEN_OPS_MAX as u64)
        .map(|op| end(op, OpOutcome::Succeeded))
        .collect();
    let (bytes, _) = written(opens.iter().cloned().chain(ends.iter().cloned()));
    assert!(verify(&bytes).is_ok());
    let over = opens
        .iter()
        .cloned()
        .chain([begin(OPEN_OPS_MAX as u64)])
        .chain(ends.iter().cloned());
    let (bytes, _) = written(over);
    let e = verify(&bytes).unwrap_err();
    assert_eq!(e.reason, Reason::LineageMutated);
    assert!(
        e.detail.contains(&format!("exceeds {OPEN_OPS_MAX} open")),
        "{}",
        e.detail
    );
}

#[test]
fn up_to_unknown_ops_max_unknown_operations_are_carried() {
    let unknown = |n: u64| written((0..n).flat_map(|op| [begin(op), end(op, OpOutcome::Unknown)]));
    let f = verify(&unknown(UNKNOWN_OPS_MAX as u64).0).unwrap();
    assert_eq!(f.unknown_ops.len(), UNKNOWN_OPS_MAX);
    let e = verify(&unknown(UNKNOWN_OPS_MAX as u64 + 1).0).unwrap_err();
    assert_eq!(e.reason, Reason::LineageUnknownOverflow);
    assert_eq!(
        e.detail,
        format!(
            "{} unknown operations > {UNKNOWN_OPS_MAX}",
            UNKNOWN_OPS_MAX + 1
        )
    );
}

#[test]
fn a_journal_over_its_byte_bound_is_refused_before_it_is_read() {
    // Zeroed pages: allocated lazily, never touched beyond the first frame.
    let at_bound = vec![0u8; JOURNAL_BYTES_MAX];
    let e = verify(&at_bound).unwrap_err();
    assert!(!e.detail.contains("over"), "{}", e.detail);
    drop(at_bound);
    let over = vec![0u8; JOURNAL_BYTES_MAX + 1];
    let e = verify(&over).unwrap_err();
    assert_eq!(e.reason, Reason::LineageMutated);
    assert_eq!(
        e.detail,
        format!(
            "journal is {} bytes, over {JOURNAL_BYTES_MAX}",
            JOURNAL_BYTES_MAX + 1
        )
    );
}

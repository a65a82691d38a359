//! Entry points shared by the fuzz targets (`protocol/fuzz`) and by the corpus replay test,
//! so every committed corpus input also runs through the decoders in `cargo test`.
//! Each must never panic, whatever the bytes; each checks that what decodes re-encodes to
//! exactly the input (strictness) and that verification agrees with decoding.

use crate::cbor::Canonical;
use crate::types::{DeploymentId, PublicKey};

fn key() -> PublicKey {
    // The fixed test issuer key of the golden vectors (secret [1; 32]).
    PublicKey::from(&ed25519_dalek::SigningKey::from_bytes(&[1; 32]).verifying_key())
}

fn roundtrip<T: Canonical>(data: &[u8]) {
    if let Ok(v) = T::from_bytes(data) {
        assert_eq!(v.to_bytes(), data, "a decoded value re-encoded differently");
    }
}

pub fn epoch_log(data: &[u8]) {
    let rep = crate::epoch::verify_log(data, &key(), None);
    assert!(rep.records.iter().all(|r| (r.offset as usize) < data.len()));
    let _ = crate::epoch::verify_chain(&[rep]);
    roundtrip::<crate::epoch::SignedEpochRecord>(data);
}

pub fn journal(data: &[u8]) {
    let k = key();
    let producer =
        PublicKey::from(&ed25519_dalek::SigningKey::from_bytes(&[2; 32]).verifying_key());
    let pins = crate::journal::JournalPins {
        deployment: DeploymentId([0xd5; 16]),
        issuer: &k,
        producer: &producer,
        genesis: None,
    };
    if let Ok(f) = crate::journal::verify_journal(data, pins) {
        assert!(f.unknown_ops.len() <= crate::limits::UNKNOWN_OPS_MAX);
    }
    roundtrip::<crate::journal::SignedJournalRecord>(data);
}

pub fn grant(data: &[u8]) {
    roundtrip::<crate::grant::SignedGrant>(data);
    roundtrip::<crate::grant::Challenge>(data);
    roundtrip::<crate::manifest::SignedManifest>(data);
    if let Ok(g) = crate::grant::SignedGrant::from_bytes(data) {
        let _ = g.verify(&key());
    }
}

pub fn wire(data: &[u8]) {
    if data.len() >= 4 {
        let _ = crate::wire::frame_len([data[0], data[1], data[2], data[3]]);
    }
    roundtrip::<crate::wire::GrantMsg>(data);
    roundtrip::<crate::wire::AdminRequest>(data);
    roundtrip::<crate::wire::AdminEvent>(data);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = crate::checkpoint::Checkpoint::verify(s, "repoch-issuer", &key());
    }
}

// ---- Signed fuzzing: verifier logic past the signature ----
//
// Input: one flags byte, then frames (4-byte big-endian length, payload). Each payload is a
// record, signed or not; it is re-signed with the fixed test key of its role, so the
// verifier's checks after the signature (sequence, chain, phase order, op ids, outcomes,
// bounds) see fuzzed values. Flag bit 0 rewrites the sequence number and previous hash to
// the correct ones, bit 1 the deployment id, so the body logic is reached most of the time.

/// Fuzzed records one signed input may carry.
pub const SIGNED_FUZZ_RECORDS_MAX: usize = 64;

fn signing(secret: u8) -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[secret; 32])
}

/// The record payloads of a signed-fuzz input, and its flags.
fn payloads(data: &[u8]) -> (u8, Vec<&[u8]>) {
    let Some((&flags, rest)) = data.split_first() else {
        return (0, Vec::new());
    };
    let v = crate::epoch::frames(rest, crate::limits::RECORD_BYTES_MAX)
        .map_while(|(_, f)| f.ok())
        .take(SIGNED_FUZZ_RECORDS_MAX)
        .collect();
    (flags, v)
}

const FUZZ_DEPLOYMENT: DeploymentId = DeploymentId([0xd5; 16]);

/// Journal records with fuzzed bodies, validly signed (genesis by the issuer key, the rest
/// by the producer key), through `verify_journal`.
pub fn signed_journal(data: &[u8]) {
    use crate::journal::{JournalRecord, SignedJournalRecord};
    let (flags, items) = payloads(data);
    let (issuer, producer) = (signing(1), signing(2));
    let mut out = Vec::new();
    let mut prev = crate::types::Hash::ZERO;
    for (seq, p) in items.iter().enumerate() {
        let Some(mut r) = SignedJournalRecord::from_bytes(p)
            .map(|s| s.record)
            .ok()
            .or_else(|| JournalRecord::from_bytes(p).ok())
        else {
            continue;
        };
        if flags & 1 != 0 {
            r.seq = seq as u64;
            r.prev = prev;
        }
        if flags & 2 != 0 {
            r.deployment = FUZZ_DEPLOYMENT;
        }
        let key = if r.seq == 0 { &issuer } else { &producer };
        let bytes = SignedJournalRecord::sign(r, key).to_bytes();
        prev = crate::types::Hash::of(&bytes);
        out.extend_from_slice(&crate::wire::frame(&bytes));
    }
    journal(&out);
}

/// Epoch records with fuzzed bodies, validly signed by the issuer key, through
/// `verify_log` and `verify_chain`.
pub fn signed_epoch(data: &[u8]) {
    use crate::epoch::{EpochRecord, SignedEpochRecord};
    let (flags, items) = payloads(data);
    let issuer = signing(1);
    let mut out = Vec::new();
    let mut prev = crate::types::Hash::ZERO;
    for (seq, p) in items.iter().enumerate() {
        let Some(mut r) = SignedEpochRecord::from_bytes(p)
            .map(|s| s.record)
            .ok()
            .or_else(|| EpochRecord::from_bytes(p).ok())
        else {
            continue;
        };
        if flags & 1 != 0 {
            r.seq = seq as u64;
            r.prev = prev;
        }
        if flags & 2 != 0 {
            r.deployment = FUZZ_DEPLOYMENT;
        }
        let s = SignedEpochRecord::sign(r, &issuer);
        prev = crate::types::Hash::of(&s.to_bytes());
        out.extend_from_slice(&s.to_frame());
    }
    let rep = crate::epoch::verify_log(&out, &key(), None);
    assert!(rep.records.iter().all(|r| (r.offset as usize) < out.len()));
    let _ = rep.classification.refusal();
    let _ = crate::epoch::verify_chain(&[rep.clone(), rep]);
    epoch_log(&out);
}

/// A grant with fuzzed fields, validly signed by the issuer key: it must verify, and
/// re-encode to the same bytes.
pub fn signed_grant(data: &[u8]) {
    use crate::grant::{Grant, SignedGrant};
    let Some(g) = SignedGrant::from_bytes(data)
        .map(|s| s.grant)
        .ok()
        .or_else(|| Grant::from_bytes(data).ok())
    else {
        return;
    };
    let s = SignedGrant::sign(g, &signing(1));
    let bytes = s.to_bytes();
    let back = SignedGrant::from_bytes(&bytes).expect("a signed grant decodes");
    assert!(
        back.verify(&key()),
        "a grant signed by the issuer must verify"
    );
    assert_eq!(back, s);
    grant(&bytes);
}

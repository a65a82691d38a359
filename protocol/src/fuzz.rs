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

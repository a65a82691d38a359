//! Golden vectors: committed canonical bytes made with fixed test keys.
//! Regenerate only after a deliberate format change:
//! `REPOCH_REGENERATE_VECTORS=1 cargo test -p repoch-protocol --test protocol golden`.

use repoch_protocol::cbor::Canonical;
use repoch_protocol::epoch::SignedEpochRecord;
use repoch_protocol::grant::SignedGrant;
use repoch_protocol::journal::SignedJournalRecord;
use repoch_protocol::manifest::SignedManifest;
use repoch_protocol::Hash;

use crate::common::*;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/vectors");

/// Decodes, re-encodes byte-identically and verifies the signature where there is one.
fn check(rule: &str, bytes: &[u8]) {
    let again = match rule {
        "signed-manifest" => {
            let v = SignedManifest::from_bytes(bytes).unwrap();
            assert!(v.verify(&pk(&issuer())));
            v.to_bytes()
        }
        "signed-grant" => {
            let v = SignedGrant::from_bytes(bytes).unwrap();
            assert!(v.verify(&pk(&issuer())));
            v.to_bytes()
        }
        "signed-epoch-record" => {
            let v = SignedEpochRecord::from_bytes(bytes).unwrap();
            assert!(v.verify(&pk(&issuer())));
            v.to_bytes()
        }
        "signed-journal-record" => SignedJournalRecord::from_bytes(bytes).unwrap().to_bytes(),
        "challenge" => repoch_protocol::grant::Challenge::from_bytes(bytes)
            .unwrap()
            .to_bytes(),
        "admin-request" => repoch_protocol::wire::AdminRequest::from_bytes(bytes)
            .unwrap()
            .to_bytes(),
        "admin-event" => repoch_protocol::wire::AdminEvent::from_bytes(bytes)
            .unwrap()
            .to_bytes(),
        "grant-msg" => repoch_protocol::wire::GrantMsg::from_bytes(bytes)
            .unwrap()
            .to_bytes(),
        other => panic!("no checker for {other}"),
    };
    assert_eq!(again, bytes, "{rule} does not re-encode byte-identically");
}

#[test]
fn golden_vectors_decode_reencode_and_verify() {
    let samples = samples();
    if std::env::var_os("REPOCH_REGENERATE_VECTORS").is_some() {
        let mut out = String::new();
        for (rule, bytes) in &samples {
            out.push_str(&format!(
                "{rule} {} {}\n",
                Hash::of(bytes),
                hex::encode(bytes)
            ));
        }
        std::fs::write(format!("{DIR}/samples.txt"), out).unwrap();
    }
    let text = std::fs::read_to_string(format!("{DIR}/samples.txt")).expect("vectors/samples.txt");
    let mut n = 0;
    for line in text.lines() {
        let mut parts = line.split(' ');
        let (rule, hash, hexbytes) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        let bytes = hex::decode(hexbytes).unwrap();
        assert_eq!(Hash::of(&bytes).to_hex(), hash, "{rule}: hash");
        check(rule, &bytes);
        n += 1;
    }
    assert_eq!(n, samples.len(), "vector count");
    // The code still produces exactly the committed bytes (ed25519 is deterministic).
    let committed: Vec<String> = text
        .lines()
        .map(|l| l.split(' ').nth(2).unwrap().to_owned())
        .collect();
    let produced: Vec<String> = samples.iter().map(|(_, b)| hex::encode(b)).collect();
    assert_eq!(
        committed, produced,
        "encoding changed: regenerate deliberately or fix the regression"
    );
}

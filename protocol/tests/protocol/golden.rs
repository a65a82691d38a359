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
        "fleet-claim" => repoch_protocol::fleet::FleetClaim::from_bytes(bytes)
            .unwrap()
            .to_bytes(),
        "fleet-host" => repoch_protocol::fleet::FleetHost::from_bytes(bytes)
            .unwrap()
            .to_bytes(),
        "fleet-record" => repoch_protocol::fleet::FleetRecord::from_bytes(bytes)
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

/// Logs that test an implementation's reading of docs/PROTOCOL.md ("The epoch log"), each
/// with the classification `verify_log` gives it as deployment `DEP` under the fixed
/// issuer key. Committed in `vectors/logs.txt` as `name classification hex`.
fn golden_logs() -> Vec<(&'static str, Vec<u8>)> {
    use repoch_protocol::epoch::{EpochBody, EpochRecord, SignedEpochRecord};
    use repoch_protocol::DeploymentId;
    let recs = epoch_records();
    let full = log_bytes(&recs);
    let first = recs[0].to_frame().len();
    let other = ed25519_dalek::SigningKey::from_bytes(&[0x77; 32]);
    let resign = |mut r: EpochRecord, key: &ed25519_dalek::SigningKey| {
        if r.seq == 0 {
            if let EpochBody::Genesis { issuer_key, .. } = &mut r.body {
                *issuer_key = pk(key);
            }
        }
        SignedEpochRecord::sign(r, key).to_frame()
    };
    let mut zero_sector = full.clone();
    let at = first.div_ceil(512) * 512;
    zero_sector[at..at + 512].fill(0);
    let mut undecodable_then_signed = log_bytes(&recs[..3]);
    undecodable_then_signed[first + 4..first + 12].fill(0);
    let mut forged_then_signed = log_bytes(&recs[..3]);
    let last = forged_then_signed.len() - recs[2].to_frame().len();
    forged_then_signed[last - 3] ^= 1;
    let mut bad_length = log_bytes(&recs[..2]);
    bad_length.extend_from_slice(&[0, 0, 0, 0]);
    bad_length.extend_from_slice(&recs[2].to_frame());
    let mut another_key_named = recs[0].record.clone();
    if let EpochBody::Genesis { issuer_key, .. } = &mut another_key_named.body {
        *issuer_key = pk(&other);
    }
    let mut foreign = recs[0].record.clone();
    foreign.deployment = DeploymentId([0x0f; 16]);
    let mut wrong_seq = recs[1].record.clone();
    wrong_seq.seq = 7;
    vec![
        ("granted", full.clone()),
        ("genesis-only", log_bytes(&recs[..1])),
        ("empty", vec![]),
        ("cut-in-the-last-record", full[..full.len() - 9].to_vec()),
        (
            "zeros-after-the-last-record",
            [&full[..], &[0u8; 700][..]].concat(),
        ),
        ("a-zero-sector-inside", zero_sector),
        ("undecodable-then-signed", undecodable_then_signed),
        ("forged-then-signed", forged_then_signed),
        ("a-zero-length-then-signed", bad_length),
        (
            "signed-by-another-key",
            resign(recs[0].record.clone(), &other),
        ),
        (
            "genesis-naming-another-key",
            SignedEpochRecord::sign(another_key_named, &issuer()).to_frame(),
        ),
        (
            "another-deployments-genesis",
            SignedEpochRecord::sign(foreign, &issuer()).to_frame(),
        ),
        (
            "a-signed-record-out-of-sequence",
            [
                recs[0].to_frame(),
                SignedEpochRecord::sign(wrong_seq, &issuer()).to_frame(),
            ]
            .concat(),
        ),
    ]
    .into_iter()
    .chain(altered_logs())
    .collect()
}

/// A log's records, each frame whole, with `f` applied to the last one's payload.
fn with_last_payload(recs: &[SignedEpochRecord], f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let (last, before) = recs.split_last().unwrap();
    let mut payload = last.to_bytes();
    f(&mut payload);
    [log_bytes(before), repoch_protocol::wire::frame(&payload)].concat()
}

/// `payload` with the first `from` replaced by `to`, a text of the same length.
fn replace_in(payload: &mut [u8], from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let at = payload
        .windows(from.len())
        .position(|w| w == from)
        .unwrap_or_else(|| panic!("{:?} not in the record", String::from_utf8_lossy(from)));
    payload[at..at + to.len()].copy_from_slice(to);
}

/// The grant a receipt carries.
fn bound_grant(
    receipt: &repoch_protocol::epoch::SignedEpochRecord,
) -> repoch_protocol::grant::Grant {
    let repoch_protocol::epoch::EpochBody::Receipt { grant } = &receipt.record.body else {
        panic!("not a receipt");
    };
    repoch_protocol::grant::SignedGrant::from_bytes(grant)
        .unwrap()
        .grant
}

/// A record value signed by the issuer key as it stands: what no valid record is.
fn signed_value(record: ciborium::value::Value) -> Vec<u8> {
    use repoch_protocol::cbor::encode;
    use repoch_protocol::sign::{sign, Context};
    let sig = sign(&issuer(), Context::EpochRecord, &encode(&record));
    let signed =
        ciborium::value::Value::Array(vec![record, ciborium::value::Value::Bytes(sig.to_vec())]);
    repoch_protocol::wire::frame(&encode(&signed))
}

/// Complete, length-consistent last records altered after signing, or signed by the issuer
/// key though invalid (docs/PROTOCOL.md, "The epoch log": a frame that is a signed-record
/// envelope is judged by its signature, never as a crash tail). Added after the first
/// thirteen vectors, whose lines stay as they were.
fn altered_logs() -> Vec<(&'static str, Vec<u8>)> {
    use ciborium::value::Value;
    use repoch_protocol::epoch::{EpochBody, SignedEpochRecord};
    let recs = epoch_records();
    let withheld_log = chain(vec![
        recs[0].record.body.clone(),
        recs[1].record.body.clone(),
        withheld(),
    ]);
    let flip = |at_end: usize| {
        move |p: &mut Vec<u8>| {
            let n = p.len();
            p[n - at_end] ^= 0x01;
        }
    };
    // The withheld record's value with its reason code replaced by `code`.
    let withheld_value = |code: &str| {
        let mut v = withheld_log[2].record.to_value();
        if let Value::Array(items) = &mut v {
            if let Some(Value::Array(body)) = items.last_mut() {
                body[1] = Value::Text(code.into());
            }
        }
        v
    };
    let mut forging_fact = recs[1].record.clone();
    if let EpochBody::Intent { facts, .. } = &mut forging_fact.body {
        facts[0].observed = "held\u{1b}[8m".into();
    }
    let stranger = ed25519_dalek::SigningKey::from_bytes(&[0x77; 32]);
    let receipting = |grant: Vec<u8>| log_bytes(&epoch_records_receipting(grant));
    vec![
        (
            "a-withheld-reason-altered-to-no-reason",
            with_last_payload(&withheld_log, |p| {
                replace_in(p, b"evidence-changed", b"evidence-chang3d")
            }),
        ),
        (
            "a-withheld-reason-altered-to-another-reason",
            with_last_payload(&withheld_log, |p| {
                replace_in(p, b"evidence-changed", b"registry-foreign")
            }),
        ),
        (
            "a-withheld-detail-altered",
            with_last_payload(&withheld_log, |p| replace_in(p, b"fence", b"fancy")),
        ),
        ("a-genesis-altered", with_last_payload(&recs[..1], flip(70))),
        ("an-intent-altered", with_last_payload(&recs[..2], flip(70))),
        ("a-consume-altered", with_last_payload(&recs[..3], flip(70))),
        ("a-receipt-altered", with_last_payload(&recs, flip(70))),
        (
            "a-record-kind-altered",
            with_last_payload(&recs[..3], |p| replace_in(p, b"consume", b"consumf")),
        ),
        (
            "a-record-signed-with-an-unknown-reason",
            [
                log_bytes(&withheld_log[..2]),
                signed_value(withheld_value("no-such-reason")),
            ]
            .concat(),
        ),
        (
            "a-record-signed-with-a-forging-character",
            [
                log_bytes(&recs[..1]),
                SignedEpochRecord::sign(forging_fact, &issuer()).to_frame(),
            ]
            .concat(),
        ),
        (
            "a-receipt-whose-grant-names-no-record-of-the-log",
            receipting(repoch_protocol::grant::SignedGrant::sign(grant(), &issuer()).to_bytes()),
        ),
        (
            "a-receipt-whose-grant-another-key-signed",
            receipting(
                repoch_protocol::grant::SignedGrant::sign(bound_grant(&recs[3]), &stranger)
                    .to_bytes(),
            ),
        ),
        (
            "a-receipt-holding-no-grant",
            receipting(b"not a grant".to_vec()),
        ),
        // Not an envelope (an item before the record and its signature): an undecodable
        // whole last frame, no sector of it lost, which no crash leaves: corrupt.
        (
            "a-signed-record-after-a-leading-item",
            [log_bytes(&recs[..2]), {
                let signed = recs[2].to_value();
                let Value::Array(items) = signed else {
                    unreachable!()
                };
                let three = Value::Array([vec![Value::Integer(0.into())], items].concat());
                repoch_protocol::wire::frame(&repoch_protocol::cbor::encode(&three))
            }]
            .concat(),
        ),
    ]
}

#[test]
fn golden_logs_classify_as_committed() {
    use repoch_protocol::epoch::verify_log;
    let logs = golden_logs();
    let path = format!("{DIR}/logs.txt");
    if std::env::var_os("REPOCH_REGENERATE_VECTORS").is_some() {
        let mut out = String::new();
        for (name, bytes) in &logs {
            let c = verify_log(bytes, &pk(&issuer()), Some(DEP)).classification;
            out.push_str(&format!("{name} {} {}\n", c.as_str(), hex::encode(bytes)));
        }
        std::fs::write(&path, out).unwrap();
    }
    let text = std::fs::read_to_string(&path).expect("vectors/logs.txt");
    let committed: Vec<(&str, &str, &str)> = text
        .lines()
        .map(|l| {
            let mut p = l.split(' ');
            (p.next().unwrap(), p.next().unwrap(), p.next().unwrap_or(""))
        })
        .collect();
    assert_eq!(committed.len(), logs.len(), "vector count");
    for ((name, class, hexbytes), (made, bytes)) in committed.iter().zip(&logs) {
        assert_eq!(name, made);
        assert_eq!(*hexbytes, hex::encode(bytes), "{name}: the bytes changed");
        let c = verify_log(bytes, &pk(&issuer()), Some(DEP)).classification;
        assert_eq!(c.as_str(), *class, "{name}");
    }
    // The altered records: each forged, or corrupt where the issuer key signed it.
    for (name, class, _) in &committed[13..committed.len() - 1] {
        let signed_by_the_issuer = name.starts_with("a-record-signed")
            || (name.starts_with("a-receipt-") && *name != "a-receipt-altered");
        let want = if signed_by_the_issuer {
            "corrupt"
        } else {
            "forged"
        };
        assert_eq!(*class, want, "{name}");
    }
    // The classes the vectors cover, each at least once.
    for class in [
        "receipted",
        "enrolled",
        "empty",
        "torn",
        "corrupt",
        "forged",
        "foreign",
    ] {
        assert!(
            committed.iter().any(|(_, c, _)| *c == class),
            "no vector is {class}"
        );
    }
}

#[test]
fn golden_checkpoint_notes_verify_as_committed() {
    // Each note of notes.rs under the fixed issuer key, with repoch's verdict and Go's
    // note-layer verdict: `vectors/notes.txt` as `repoch go hex(note)`.
    use repoch_protocol::checkpoint::{Checkpoint, KEY_NAME};
    let cases = crate::notes::note_cases(&issuer());
    let path = format!("{DIR}/notes.txt");
    let verdict = |ok: bool| if ok { "accept" } else { "refuse" };
    if std::env::var_os("REPOCH_REGENERATE_VECTORS").is_some() {
        let mut out = String::new();
        for c in &cases {
            out.push_str(&format!(
                "{} {} {}\n",
                verdict(c.repoch),
                verdict(c.go),
                hex::encode(c.note.as_bytes())
            ));
        }
        std::fs::write(&path, out).unwrap();
    }
    let text = std::fs::read_to_string(&path).expect("vectors/notes.txt");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), cases.len(), "vector count");
    for (line, c) in lines.iter().zip(&cases) {
        let mut p = line.split(' ');
        let (ours, go, note) = (p.next().unwrap(), p.next().unwrap(), p.next().unwrap());
        assert_eq!(
            note,
            hex::encode(c.note.as_bytes()),
            "{}: the note changed",
            c.what
        );
        assert_eq!((ours, go), (verdict(c.repoch), verdict(c.go)), "{}", c.what);
        let note = String::from_utf8(hex::decode(note).unwrap()).unwrap();
        let got = Checkpoint::verify(&note, KEY_NAME, &pk(&issuer())).is_ok();
        assert_eq!(verdict(got), ours, "{}", c.what);
    }
}

//! Property tests: round trip, unique canonical bytes, tamper detection, and refusal of
//! every non-canonical variant of a valid encoding.

use ciborium::value::Value;
use proptest::prelude::*;
use repoch_protocol::cbor::{decode_strict, Canonical};
use repoch_protocol::epoch::SignedEpochRecord;
use repoch_protocol::grant::{Grant, GrantFence, SignedGrant, UnknownOp};
use repoch_protocol::limits::FRAME_BYTES_MAX;
use repoch_protocol::{DeploymentId, Hash, Identity};

use crate::common::*;

fn arb_identity() -> impl Strategy<Value = Identity> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        proptest::option::of((any::<u64>(), 0..=repoch_protocol::types::BIRTH_NSEC_MAX)),
    )
        .prop_map(|(dev, ino, uid, gid, mode, birth)| Identity {
            dev,
            ino,
            uid,
            gid,
            mode,
            birth: birth.map(|(sec, nsec)| repoch_protocol::Birth { sec, nsec }),
        })
}

prop_compose! {
    fn arb_grant()(
        dep in any::<[u8; 16]>(),
        h in any::<[u8; 32]>(),
        // Canonical: no component is "." or ".." (a component starts with no dot).
        path in "/[a-z]{1,20}(/[a-z0-9_-][a-z0-9._-]{0,11}){0,4}",
        fences in proptest::collection::vec(("/[a-z]{1,30}", arb_identity()), 0..4),
        ops in proptest::collection::vec((any::<u64>(), "[ -~]{0,40}"), 0..5),
        seq in any::<u64>(),
        at in any::<u64>(),
        fencing in proptest::option::of((any::<u64>(), 1..u64::MAX)),
    ) -> Grant {
        Grant {
            deployment: DeploymentId(dep),
            intent: Hash(h),
            consume: Hash::of(&h),
            evidence: Hash([h[0]; 32]),
            consumer_key: pk(&consumer()),
            ready_path: path,
            ready_sha256: Hash(h),
            fences: fences.into_iter().map(|(path, identity)| GrantFence { path, identity }).collect(),
            frontier_seq: seq,
            frontier_hash: Hash(h),
            unknown_ops: ops.into_iter().map(|(op, name)| UnknownOp { op, name }).collect(),
            issued_at: at,
            listeners: vec![],
            fencing: fencing.map(|(cluster, revision)| repoch_protocol::fleet::FencingToken { cluster, revision }),
        }
    }
}

/// Writes a CBOR head with argument `n` on `bytes` extra bytes (0 = inline).
fn head(out: &mut Vec<u8>, major: u8, n: u64, width: u8) {
    let m = major << 5;
    match width {
        0 => out.push(m | n as u8),
        1 => {
            out.push(m | 24);
            out.push(n as u8)
        }
        2 => {
            out.push(m | 25);
            out.extend_from_slice(&(n as u16).to_be_bytes())
        }
        4 => {
            out.push(m | 26);
            out.extend_from_slice(&(n as u32).to_be_bytes())
        }
        _ => {
            out.push(m | 27);
            out.extend_from_slice(&n.to_be_bytes())
        }
    }
}

fn min_width(n: u64) -> u8 {
    match n {
        0..=23 => 0,
        24..=0xff => 1,
        0x100..=0xffff => 2,
        0x1_0000..=0xffff_ffff => 4,
        _ => 8,
    }
}

fn wider(w: u8) -> Option<u8> {
    match w {
        0 => Some(1),
        1 => Some(2),
        2 => Some(4),
        4 => Some(8),
        _ => None,
    }
}

#[derive(Clone, Copy)]
enum Variant {
    Wide,
    Indefinite,
}

/// Re-emits `v`, applying `variant` to the item numbered `target` in pre-order.
/// Returns whether the mutation was applicable.
fn emit(
    v: &Value,
    target: usize,
    variant: Variant,
    counter: &mut usize,
    out: &mut Vec<u8>,
) -> bool {
    let here = *counter == target;
    *counter += 1;
    let mut applied = false;
    let mut put = |out: &mut Vec<u8>, major: u8, n: u64| {
        let w = min_width(n);
        match (here, variant, wider(w)) {
            (true, Variant::Wide, Some(w2)) => {
                applied = true;
                head(out, major, n, w2)
            }
            _ => head(out, major, n, w),
        }
    };
    match v {
        Value::Integer(i) => put(out, 0, u64::try_from(*i).expect("unsigned only")),
        Value::Bytes(_) | Value::Text(_) if here && matches!(variant, Variant::Indefinite) => {
            let (major, data) = match v {
                Value::Bytes(b) => (2u8, b.clone()),
                Value::Text(t) => (3, t.clone().into_bytes()),
                _ => unreachable!(),
            };
            out.push(major << 5 | 31);
            head(out, major, data.len() as u64, min_width(data.len() as u64));
            out.extend_from_slice(&data);
            out.push(0xff);
            return true;
        }
        Value::Bytes(b) => {
            put(out, 2, b.len() as u64);
            out.extend_from_slice(b)
        }
        Value::Text(t) => {
            put(out, 3, t.len() as u64);
            out.extend_from_slice(t.as_bytes())
        }
        Value::Array(items) => {
            let indefinite = here && matches!(variant, Variant::Indefinite);
            if indefinite {
                out.push(0x9f);
                applied = true
            } else {
                put(out, 4, items.len() as u64)
            }
            for it in items {
                applied |= emit(it, target, variant, counter, out);
            }
            if indefinite {
                out.push(0xff)
            }
            return applied;
        }
        Value::Bool(b) => out.push(if *b { 0xf5 } else { 0xf4 }),
        Value::Null => out.push(0xf6),
        _ => panic!("not a repoch item"),
    }
    applied
}

fn items(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(items).sum::<usize>(),
        _ => 1,
    }
}

/// Every non-canonical variant of `bytes` (one item widened, or made indefinite) is refused.
fn all_variants_refused(bytes: &[u8]) {
    let v = decode_strict(bytes, FRAME_BYTES_MAX).unwrap();
    // Our emitter reproduces the canonical bytes with no mutation applied.
    let mut same = Vec::new();
    emit(&v, usize::MAX, Variant::Wide, &mut 0, &mut same);
    assert_eq!(
        same, bytes,
        "test emitter disagrees with the canonical encoder"
    );
    for target in 0..items(&v) {
        for variant in [Variant::Wide, Variant::Indefinite] {
            let mut out = Vec::new();
            if emit(&v, target, variant, &mut 0, &mut out) {
                assert_ne!(out, bytes);
                assert!(
                    decode_strict(&out, FRAME_BYTES_MAX).is_err(),
                    "accepted a non-canonical variant at item {target}"
                );
            }
        }
    }
}

#[test]
fn every_sample_has_only_canonical_encodings_accepted() {
    for (_, b) in samples() {
        all_variants_refused(&b);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn grant_round_trips(g in arb_grant()) {
        let b = g.to_bytes();
        prop_assert_eq!(Grant::from_bytes(&b).unwrap(), g.clone());
        // Unique canonical bytes: re-encoding the decoded value gives the same bytes.
        prop_assert_eq!(Grant::from_bytes(&b).unwrap().to_bytes(), b);
    }

    #[test]
    fn distinct_grants_have_distinct_bytes(a in arb_grant(), b in arb_grant()) {
        prop_assert_eq!(a == b, a.to_bytes() == b.to_bytes());
    }

    #[test]
    fn flipping_any_byte_of_a_signed_grant_fails_verification(g in arb_grant(), pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let signed = SignedGrant::sign(g, &issuer());
        let mut b = signed.to_bytes();
        let i = pos.index(b.len());
        b[i] ^= 1 << bit;
        let ok = SignedGrant::from_bytes(&b).map(|s| s.verify(&pk(&issuer()))).unwrap_or(false);
        prop_assert!(!ok, "flipped byte {} still verifies", i);
    }

    #[test]
    fn flipping_any_byte_of_a_signed_record_fails_verification(which in 0usize..4, pos in any::<prop::sample::Index>(), bit in 0u8..8) {
        let rec = &epoch_records()[which];
        let mut b = rec.to_bytes();
        let i = pos.index(b.len());
        b[i] ^= 1 << bit;
        let ok = SignedEpochRecord::from_bytes(&b).map(|s| s.verify(&pk(&issuer()))).unwrap_or(false);
        prop_assert!(!ok, "flipped byte {} still verifies", i);
    }

    #[test]
    fn non_canonical_variants_of_any_grant_are_refused(g in arb_grant()) {
        all_variants_refused(&SignedGrant::sign(g, &issuer()).to_bytes());
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(b in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = SignedGrant::from_bytes(&b);
        let _ = SignedEpochRecord::from_bytes(&b);
        let _ = repoch_protocol::wire::GrantMsg::from_bytes(&b);
        let _ = repoch_protocol::wire::AdminEvent::from_bytes(&b);
        let _ = repoch_protocol::epoch::verify_log(&b, &pk(&issuer()), None);
    }
}

#[test]
fn signature_contexts_are_separated() {
    use repoch_protocol::sign::{sign, verify, Context};
    let all = [
        Context::EpochRecord,
        Context::JournalGenesis,
        Context::JournalRecord,
        Context::Manifest,
        Context::Grant,
        Context::Custody,
        Context::KeyProof,
    ];
    let msg = challenge().to_bytes();
    for a in all {
        let s = sign(&issuer(), a, &msg);
        for b in all {
            assert_eq!(
                verify(&pk(&issuer()), b, &msg, &s),
                a == b,
                "{a:?} signature under {b:?}"
            );
        }
    }
    // A grant signature does not verify as a custody answer over the same bytes, and a
    // custody answer is checked against the consumer key only.
    let c = challenge();
    let answer = c.answer(&consumer());
    assert!(c.check(&pk(&consumer()), &answer));
    assert!(!c.check(&pk(&issuer()), &answer));
    let mut other = c.clone();
    other.nonce[0] ^= 1;
    assert!(
        !other.check(&pk(&consumer()), &answer),
        "a replayed answer to another nonce verified"
    );
    // A key proof is bound to its connection's peer and is never a custody answer.
    let kp = repoch_protocol::grant::KeyProof {
        deployment: c.deployment,
        nonce: c.nonce,
        pid: 7,
        start_ticks: 9,
    };
    let proof = kp.answer(&consumer());
    assert!(kp.check(&pk(&consumer()), &proof));
    assert!(!kp.check(&pk(&issuer()), &proof));
    let mut forked = kp.clone();
    forked.pid = 8;
    assert!(
        !forked.check(&pk(&consumer()), &proof),
        "a proof for another peer verified"
    );
    assert!(!c.check(&pk(&consumer()), &proof));
}

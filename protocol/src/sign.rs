//! ed25519 signatures with domain separation.
//!
//! Every signed message is `context || 0x00 || canonical bytes`, with a distinct context per
//! message kind, so a signature made for one kind never verifies as another. Verification
//! uses `verify_strict` (rejects small-order keys and non-canonical `R`/`s`).

use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::IsIdentity as _;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};

use crate::limits::SIGNATURE_BYTES;
use crate::types::PublicKey;

/// The signature contexts. Never reuse one for another message kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// Epoch-log records, signed by the host issuer key.
    EpochRecord,
    /// The producer journal's genesis, signed by the host issuer key.
    JournalGenesis,
    /// Producer journal records, signed by the producer key.
    JournalRecord,
    /// The enrolled manifest, signed by the host issuer key.
    Manifest,
    /// The grant, signed by the host issuer key.
    Grant,
    /// The consumer's custody answer to a challenge, signed by the consumer key.
    Custody,
    /// The consumer's proof of its key at `hello`, before anything is written: it signs a
    /// daemon-chosen nonce bound to its connection, with the consumer key.
    KeyProof,
    /// C2SP checkpoints are signed over their note text (their own format, no prefix).
    Checkpoint,
    /// A fleet registry claim, signed by the claiming host's issuer key.
    FleetClaim,
    /// A fleet record, signed by the issuer key of the host that established the fleet.
    FleetRecord,
}

impl Context {
    pub fn as_str(self) -> &'static str {
        match self {
            Context::EpochRecord => "repoch/v1/epoch-record",
            Context::JournalGenesis => "repoch/v1/journal-genesis",
            Context::JournalRecord => "repoch/v1/journal-record",
            Context::Manifest => "repoch/v1/manifest",
            Context::Grant => "repoch/v1/grant",
            Context::Custody => "repoch/v1/custody",
            Context::KeyProof => "repoch/v1/key-proof",
            Context::Checkpoint => "repoch/v1/checkpoint",
            Context::FleetClaim => "repoch/v1/fleet-claim",
            Context::FleetRecord => "repoch/v1/fleet-record",
        }
    }
}

fn message(ctx: Context, bytes: &[u8]) -> Vec<u8> {
    let c = ctx.as_str().as_bytes();
    let mut m = Vec::with_capacity(c.len().saturating_add(1).saturating_add(bytes.len()));
    m.extend_from_slice(c);
    m.push(0);
    m.extend_from_slice(bytes);
    m
}

/// Signs `bytes` under `ctx`.
pub fn sign(key: &SigningKey, ctx: Context, bytes: &[u8]) -> [u8; SIGNATURE_BYTES] {
    key.sign(&message(ctx, bytes)).to_bytes()
}

/// Strictly verifies a signature made by `sign`.
pub fn verify(key: &PublicKey, ctx: Context, bytes: &[u8], sig: &[u8; SIGNATURE_BYTES]) -> bool {
    let Some(vk) = key.verifying_key() else {
        return false;
    };
    verify_with(&vk, ctx, bytes, sig)
}

pub fn verify_with(
    vk: &VerifyingKey,
    ctx: Context,
    bytes: &[u8],
    sig: &[u8; SIGNATURE_BYTES],
) -> bool {
    vk.verify_strict(&message(ctx, bytes), &Signature::from_bytes(sig))
        .is_ok()
}

/// Signatures verified together by one call of `ed25519_dalek::verify_batch` in
/// [`proven_by_batch`].
pub const BATCH_SIGNATURES_MAX: usize = 256;

/// Which of `items` (signed bytes, signature), all under `key` and `ctx`, are proven valid
/// by batch verification together with the checks that make it decide as [`verify`]
/// (strict) does (docs/AUDITOR.md, "Batch verification"). `true` is what [`verify`] would
/// answer; `false` says only "not proven here": verify that one strictly.
///
/// `verify_strict` holds exactly when `s` is canonical, `R` decompresses, neither `R` nor
/// `A` is of small order, and the encoding of `[s]B - [k]A` is `R`'s bytes. The batch checks
/// `sum z_i ([s_i]B - [k_i]A - R_i) = 0` with 128-bit `z_i` derived from the inputs:
/// without a torsion component it fails for any nonzero term but with probability about
/// 2^-128, yet a term that is a point of small order (an `R` with a torsion component,
/// which only the key's holder can make valid in the cofactored sense) vanishes whenever
/// `z_i` is a multiple of its order, one time in two to eight, and `z_i` is a function of
/// the inputs, so it can be ground. Hence a signature is batched only when `A` and `R` are
/// torsion-free (so every term lies in the prime-order subgroup), `R` is canonically
/// encoded and not of small order and `s` is canonical; the others are left to strict
/// verification, as is every signature of a batch that fails.
pub fn proven_by_batch(
    key: &PublicKey,
    ctx: Context,
    items: &[(&[u8], &[u8; SIGNATURE_BYTES])],
) -> Vec<bool> {
    let mut proven = vec![false; items.len()];
    let Some(vk) = key.verifying_key() else {
        return proven;
    };
    if vk.is_weak() || !torsion_free(&vk.to_edwards()) {
        return proven;
    }
    let eligible: Vec<usize> = (0..items.len())
        .filter(|&i| batchable(items[i].1))
        .collect();
    for chunk in eligible.chunks(BATCH_SIGNATURES_MAX) {
        let messages: Vec<Vec<u8>> = chunk.iter().map(|&i| message(ctx, items[i].0)).collect();
        let refs: Vec<&[u8]> = messages.iter().map(Vec::as_slice).collect();
        let sigs: Vec<Signature> = chunk
            .iter()
            .map(|&i| Signature::from_bytes(items[i].1))
            .collect();
        let keys = vec![vk; chunk.len()];
        if ed25519_dalek::verify_batch(&refs, &sigs, &keys).is_ok() {
            for &i in chunk {
                proven[i] = true;
            }
        }
    }
    proven
}

/// The checks that, with a batch that holds, make a signature valid under `verify_strict`:
/// `s` canonical; `R` canonically encoded, not of small order, torsion-free.
fn batchable(sig: &[u8; SIGNATURE_BYTES]) -> bool {
    let mut r = [0u8; 32];
    let mut s = [0u8; 32];
    r.copy_from_slice(&sig[..32]);
    s.copy_from_slice(&sig[32..]);
    if Option::<Scalar>::from(Scalar::from_canonical_bytes(s)).is_none() {
        return false;
    }
    let Some(point) = CompressedEdwardsY(r).decompress() else {
        return false;
    };
    point.compress().0 == r && !point.is_small_order() && torsion_free(&point)
}

/// `[l]P` is the identity: `[l - 1]P + P`, variable time (public points only). `l - 1` is a
/// canonical scalar (`-1`); `EdwardsPoint::is_torsion_free` computes the same in constant
/// time. (Point addition and scalar negation are group operations: nothing overflows.)
#[allow(clippy::arithmetic_side_effects)]
fn torsion_free(p: &EdwardsPoint) -> bool {
    let l_minus_1 = -Scalar::ONE;
    (EdwardsPoint::vartime_double_scalar_mul_basepoint(&l_minus_1, p, &Scalar::ZERO) + p)
        .is_identity()
}

/// A signing key from 32 secret bytes (the on-disk form is 64 hex digits).
pub fn signing_key_from_hex(s: &str) -> Option<SigningKey> {
    let mut b = [0u8; 32];
    hex::decode_to_slice(s.trim(), &mut b).ok()?;
    Some(SigningKey::from_bytes(&b))
}

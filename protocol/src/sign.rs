//! ed25519 signatures with domain separation.
//!
//! Every signed message is `context || 0x00 || canonical bytes`, with a distinct context per
//! message kind, so a signature made for one kind never verifies as another. Verification
//! uses `verify_strict` (rejects small-order keys and non-canonical `R`/`s`).

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

/// A signing key from 32 secret bytes (the on-disk form is 64 hex digits).
pub fn signing_key_from_hex(s: &str) -> Option<SigningKey> {
    let mut b = [0u8; 32];
    hex::decode_to_slice(s.trim(), &mut b).ok()?;
    Some(SigningKey::from_bytes(&b))
}

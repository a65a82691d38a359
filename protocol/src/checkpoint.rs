//! Checkpoints in C2SP signed-note form (<https://c2sp.org/tlog-checkpoint>, signed-note).
//!
//! ```text
//! <origin>\n<size>\n<base64 head hash>\n\n— <key name> <base64(key id || signature)>\n
//! ```
//! The key id is the first 4 bytes of `sha256(name || 0x0A || 0x01 || public key)` (0x01 is
//! the ed25519 signature type); the signature covers the note text, the first three lines
//! with their newlines. An auditor can check a checkpoint with any signed-note verifier.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer as _};

use crate::limits::CHECKPOINT_BYTES_MAX;
use crate::types::{Hash, PublicKey};

const DASH: &str = "\u{2014}";

/// Standard base64 with padding, as Go's `base64.StdEncoding` decodes a signature line:
/// bits past the last byte need not be zero.
const B64_SIGNATURE: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub origin: String,
    pub size: u64,
    pub head: Hash,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("malformed note: {0}")]
    Malformed(&'static str),
    #[error("no signature line verifies with key {0:?}")]
    Unverified(String),
}

fn key_id(name: &str, key: &PublicKey) -> [u8; 4] {
    let mut m = Vec::with_capacity(name.len().saturating_add(2 + 32));
    m.extend_from_slice(name.as_bytes());
    m.push(b'\n');
    m.push(0x01);
    m.extend_from_slice(&key.0);
    let h = Hash::of(&m).0;
    [h[0], h[1], h[2], h[3]]
}

impl Checkpoint {
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            B64.encode(self.head.0)
        )
    }

    /// The signed note text.
    pub fn sign(&self, name: &str, key: &ed25519_dalek::SigningKey) -> String {
        let body = self.body();
        let sig = key.sign(body.as_bytes()).to_bytes();
        let mut blob = key_id(name, &PublicKey::from(&key.verifying_key())).to_vec();
        blob.extend_from_slice(&sig);
        format!("{body}\n{DASH} {name} {}\n", B64.encode(blob))
    }

    /// Parses a note and verifies that one signature line is by `name`/`key`, exactly as
    /// C2SP signed-note and tlog-checkpoint say (Go's `golang.org/x/mod/sumdb/note` is the
    /// oracle for the note layer: `tests-native/tests/tooled/checkpoint.rs`):
    ///
    /// - the note is UTF-8 without ASCII control characters but newline, and ends in one;
    /// - the text is everything up to the **last** blank line; it is lines that are not
    ///   empty: the origin, the size in decimal without a sign or a leading zero (but `0`
    ///   itself), the head in standard base64 (32 bytes), then any extension lines (kept
    ///   out of [`Checkpoint`], which has no use for them);
    /// - every signature line is `— NAME BASE64`: a name without spaces or `+`, and at
    ///   least 5 bytes (a 4-byte key id, then the signature); anything else is malformed;
    /// - a line by this `name` and key id whose signature does not verify rejects the note
    ///   (a known signer never signed it); lines by other keys are ignored; at least one by
    ///   this key must verify.
    ///
    /// Two rules are repoch's own, stricter than Go's note layer (docs/AUDITOR.md,
    /// "Checkpoints"): a note is at most [`CHECKPOINT_BYTES_MAX`] bytes, the bound of every
    /// reader (the wire, the consumer's files, `repoch audit --checkpoint`), which also keeps
    /// it under Go's 100 signature lines; and it holds no forging character of the text
    /// rule (docs/PROTOCOL.md, "Text") but newline: DEL, C1 controls, bidi and other format
    /// characters too, where Go refuses only the C0 controls.
    pub fn verify(note: &str, name: &str, key: &PublicKey) -> Result<Checkpoint, CheckpointError> {
        let (text, sigs) = note_parts(note)?;
        let checkpoint = note_text(text)?;
        signed_by(text, sigs, name, key)?;
        Ok(checkpoint)
    }
}

/// Splits a signed note into its text (with its last newline, which the signatures
/// cover) and its signature lines, after the note-wide rules of [`Checkpoint::verify`]:
/// the bound, no forging character but newline, a final newline, a last blank line with
/// at least one signature line after it.
fn note_parts(note: &str) -> Result<(&str, &str), CheckpointError> {
    if note.len() > CHECKPOINT_BYTES_MAX {
        return Err(CheckpointError::Malformed(
            "over CHECKPOINT_BYTES_MAX (1024) bytes",
        ));
    }
    if note.chars().any(|c| crate::text::forges(c) && c != '\n') {
        return Err(CheckpointError::Malformed("a forging character"));
    }
    if !note.ends_with('\n') {
        return Err(CheckpointError::Malformed("no final newline"));
    }
    let (before, sigs) = note
        .rsplit_once("\n\n")
        .ok_or(CheckpointError::Malformed("no blank line"))?;
    // The text keeps its last newline (the signatures cover it).
    let text = &note[..=before.len()];
    if sigs.is_empty() {
        return Err(CheckpointError::Malformed("no signature line"));
    }
    Ok((text, sigs))
}

/// Parses a note's text as a checkpoint: no empty line, then the origin, the size in
/// decimal without a sign or a leading zero (but `0` itself), the head in standard base64
/// (32 bytes); any extension lines after them are not kept.
fn note_text(text: &str) -> Result<Checkpoint, CheckpointError> {
    let mut lines = text.split_terminator('\n');
    if text.split_terminator('\n').any(str::is_empty) {
        return Err(CheckpointError::Malformed("an empty line in the text"));
    }
    let origin = lines.next().ok_or(CheckpointError::Malformed("origin"))?;
    let size = lines
        .next()
        .filter(|l| l.bytes().all(|b| b.is_ascii_digit()) && (*l == "0" || !l.starts_with('0')))
        .and_then(|l| l.parse::<u64>().ok())
        .ok_or(CheckpointError::Malformed("size"))?;
    let head = lines
        .next()
        .and_then(|l| B64.decode(l).ok())
        .and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok())
        .ok_or(CheckpointError::Malformed("head"))?;
    // Extension lines (tlog-checkpoint allows them; none is ours): not empty, checked
    // above, and signed with the rest of the text.
    Ok(Checkpoint {
        origin: origin.into(),
        size,
        head: Hash(head),
    })
}

/// Checks a note's signature lines: each one well formed (`— NAME BASE64`, a name
/// without spaces or `+`, at least a key id and a byte), the first line by `name` and its
/// key id verifying over `text`, lines by other keys ignored; at least one by this key.
fn signed_by(text: &str, sigs: &str, name: &str, key: &PublicKey) -> Result<(), CheckpointError> {
    let vk = key
        .verifying_key()
        .ok_or(CheckpointError::Unverified(name.into()))?;
    let want = key_id(name, key);
    let mut verified = false;
    for line in sigs.split_terminator('\n') {
        let rest = line
            .strip_prefix(DASH)
            .and_then(|r| r.strip_prefix(' '))
            .ok_or(CheckpointError::Malformed("signature line"))?;
        let (who, b) = rest
            .split_once(' ')
            .ok_or(CheckpointError::Malformed("signature line"))?;
        if who.is_empty() || who.contains(char::is_whitespace) || who.contains('+') {
            return Err(CheckpointError::Malformed("signature name"));
        }
        let blob = B64_SIGNATURE
            .decode(b)
            .ok()
            .filter(|blob| blob.len() >= 5)
            .ok_or(CheckpointError::Malformed("signature base64"))?;
        // Another key's line, or a repeated line of this key (the first one decides,
        // as Go's note.Open does): not looked at.
        if who != name || blob[..4] != want || verified {
            continue;
        }
        let ok = <[u8; 64]>::try_from(&blob[4..])
            .map(|sig| vk.verify_strict(text.as_bytes(), &Signature::from_bytes(&sig)))
            .is_ok_and(|r| r.is_ok());
        if !ok {
            return Err(CheckpointError::Unverified(name.into()));
        }
        verified = true;
    }
    if !verified {
        return Err(CheckpointError::Unverified(name.into()));
    }
    Ok(())
}

/// The key name on every repoch checkpoint's signature line (the host issuer key).
pub const KEY_NAME: &str = "repoch-issuer";

/// A checkpoint's origin names the one log it is about: the deployment's epoch log.
pub fn origin(deployment: &crate::types::DeploymentId) -> String {
    format!("repoch/epoch-log/{}", deployment.to_hex())
}

/// Checkpoints of an epoch log, which is a hash chain, not a Merkle tree
/// (docs/AUDITOR.md, "Checkpoints"): the size is the number of verified records and the
/// head is the last one's hash. Proving that a log extends a checkpoint needs the records
/// in between, which whoever holds the log has.
impl Checkpoint {
    /// The checkpoint of a log's verified records; `None` without a genesis.
    pub fn of_log(report: &crate::epoch::LogReport) -> Option<Checkpoint> {
        Some(Checkpoint {
            origin: origin(&report.deployment()?),
            size: report.records.len() as u64,
            head: report.last_hash()?,
        })
    }

    /// Whether `report` (the current log, its deployment the checkpoint's origin) extends
    /// this checkpoint: its record number `size` (counting from 1) has the checkpoint's head.
    pub fn extended_by(
        &self,
        report: &crate::epoch::LogReport,
    ) -> Result<Extension, Inconsistency> {
        let have = report.records.len() as u64;
        let current = (have, report.last_hash().unwrap_or(crate::types::Hash::ZERO));
        let old = (self.size, self.head);
        // A checkpoint of no record is extended by every log.
        let Some(last) = self.size.checked_sub(1) else {
            return Ok(Extension { old, current });
        };
        match usize::try_from(last)
            .ok()
            .and_then(|i| report.records.get(i))
        {
            Some(r) if r.hash == self.head => Ok(Extension { old, current }),
            Some(r) => Err(Inconsistency {
                reason: crate::Reason::CheckpointFork,
                old,
                current: (self.size, r.hash),
            }),
            None => Err(Inconsistency {
                reason: if report.problem.is_some() {
                    crate::Reason::CheckpointTruncated
                } else {
                    crate::Reason::CheckpointRollback
                },
                old,
                current,
            }),
        }
    }
}

/// The current log extends the checkpoint: (size, head) then and now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extension {
    pub old: (u64, Hash),
    pub current: (u64, Hash),
}

/// The current log does not extend the checkpoint. The evidence pair: the checkpoint's
/// (size, head) and the log's (size, hash) — at the checkpoint's size for a fork, the
/// log's own verified size and head for a rollback or a truncation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inconsistency {
    pub reason: crate::Reason,
    pub old: (u64, Hash),
    pub current: (u64, Hash),
}

impl std::fmt::Display for Inconsistency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "checkpoint size {} head {}; log size {} head {}",
            self.old.0, self.old.1, self.current.0, self.current.1
        )
    }
}

//! Small value types: ids, digests, keys, file identities, facts.

use std::fmt;

use ciborium::value::Value;
use sha2::{Digest as _, Sha256};

use crate::cbor::{self, Canonical, DecodeError, Fields};
use crate::limits::{
    DEPLOYMENT_ID_BYTES, FACT_TEXT_BYTES_MAX, HASH_BYTES, KEY_BYTES, PATH_BYTES_MAX, TEXT_BYTES_MAX,
};
use crate::reason::Reason;

/// A deployment's random 128-bit id, shown as 32 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeploymentId(pub [u8; DEPLOYMENT_ID_BYTES]);

impl DeploymentId {
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut out = [0u8; DEPLOYMENT_ID_BYTES];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(DeploymentId(out))
    }
}
impl fmt::Display for DeploymentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}
impl fmt::Debug for DeploymentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeploymentId({})", self.to_hex())
    }
}

/// A sha256 digest.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Hash(pub [u8; HASH_BYTES]);

impl Hash {
    pub const ZERO: Hash = Hash([0; HASH_BYTES]);
    pub fn of(bytes: &[u8]) -> Hash {
        Hash(Sha256::digest(bytes).into())
    }
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut out = [0u8; HASH_BYTES];
        hex::decode_to_slice(s, &mut out).ok()?;
        Some(Hash(out))
    }
}
impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}
impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", self.to_hex())
    }
}

/// An ed25519 public key as enrolled (32 bytes). Validity is checked when verifying.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(pub [u8; KEY_BYTES]);

impl PublicKey {
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut out = [0u8; KEY_BYTES];
        hex::decode_to_slice(s.trim(), &mut out).ok()?;
        Some(PublicKey(out))
    }
    pub fn verifying_key(&self) -> Option<ed25519_dalek::VerifyingKey> {
        ed25519_dalek::VerifyingKey::from_bytes(&self.0).ok()
    }
}
impl From<&ed25519_dalek::VerifyingKey> for PublicKey {
    fn from(k: &ed25519_dalek::VerifyingKey) -> Self {
        PublicKey(k.to_bytes())
    }
}
impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_hex())
    }
}
impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// When a file system object was created (statx `STATX_BTIME`): what tells an inode number
/// handed out again apart from the object first seen with that number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Birth {
    /// Seconds since the epoch (a birth time before 1970 is read as none).
    pub sec: u64,
    /// Nanoseconds, below 1 000 000 000.
    pub nsec: u32,
}

/// Largest `Birth::nsec`.
pub const BIRTH_NSEC_MAX: u32 = 999_999_999;

impl fmt::Display for Birth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}", self.sec, self.nsec)
    }
}

/// The identity of a file system object: what makes "the same file" (docs/OPERATOR.md, "The manifest, field by field"). The
/// device and inode number name an object only while it exists: ext4 hands a freed number
/// to the next file, so the birth time is part of the identity (docs/THREAT-MODEL.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
    pub uid: u32,
    pub gid: u32,
    /// Full `st_mode`, file type bits included.
    pub mode: u32,
    /// The birth time, when the file system reports one (`None` otherwise).
    pub birth: Option<Birth>,
}

impl Identity {
    /// Same object: device, inode number and birth time. An object whose birth time is
    /// unknown on either side is the same only if it is unknown on both (enrollment
    /// refuses objects without one, so for enrolled objects this never passes by default).
    pub fn same_object(&self, other: &Identity) -> bool {
        self.dev == other.dev && self.ino == other.ino && self.birth == other.birth
    }

    /// "ino N born S.NNNNNNNNN": what `same_object` compares, for expected/observed text.
    pub fn object(&self) -> String {
        match self.birth {
            Some(b) => format!("ino {} born {b}", self.ino),
            None => format!("ino {} born unknown", self.ino),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dev={} ino={} uid={} gid={} mode={:o} born={}",
            self.dev,
            self.ino,
            self.uid,
            self.gid,
            self.mode,
            self.birth.map_or("unknown".into(), |b| b.to_string())
        )
    }
}

impl Canonical for Birth {
    fn to_value(&self) -> Value {
        cbor::array(vec![cbor::uint(self.sec), cbor::uint(self.nsec.into())])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "birth", 2)?;
        let sec = f.uint()?;
        let nsec = f.uint()?;
        let nsec = u32::try_from(nsec)
            .ok()
            .filter(|n| *n <= BIRTH_NSEC_MAX)
            .ok_or_else(|| DecodeError::schema("birth", "nanoseconds over 999999999"))?;
        Ok(Birth { sec, nsec })
    }
}

impl Canonical for Identity {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::uint(self.dev),
            cbor::uint(self.ino),
            cbor::uint(self.uid.into()),
            cbor::uint(self.gid.into()),
            cbor::uint(self.mode.into()),
            cbor::opt(&self.birth, Canonical::to_value),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "identity", 6)?;
        let u32f = |f: &mut Fields| -> Result<u32, DecodeError> {
            u32::try_from(f.uint()?).map_err(|_| DecodeError::schema("identity", "over 32 bits"))
        };
        Ok(Identity {
            dev: f.uint()?,
            ino: f.uint()?,
            uid: u32f(&mut f)?,
            gid: u32f(&mut f)?,
            mode: u32f(&mut f)?,
            birth: f.opt(Birth::from_value)?,
        })
    }
}

/// One observed fact (docs/ARCHITECTURE.md, "Issuance", step 2): what was looked at, what was expected, what was
/// seen, whether it holds, and if not, the stable reason code of the refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fact {
    /// The observer family: `lineage`, `store`, `unit`, `cgroup`, `listener`, `process`,
    /// `fence`, `ready`, `consumer-exe`, `predecessor`.
    pub kind: String,
    /// The object observed (usually a path or a unit name).
    pub subject: String,
    pub expected: String,
    pub observed: String,
    /// `None` when the fact holds.
    pub reason: Option<Reason>,
}

impl Fact {
    pub fn ok(kind: &str, subject: &str, expected: &str, observed: &str) -> Fact {
        Fact::new(kind, subject, expected, observed, None)
    }
    pub fn failed(
        kind: &str,
        subject: &str,
        expected: &str,
        observed: &str,
        reason: Reason,
    ) -> Fact {
        Fact::new(kind, subject, expected, observed, Some(reason))
    }
    fn new(
        kind: &str,
        subject: &str,
        expected: &str,
        observed: &str,
        reason: Option<Reason>,
    ) -> Fact {
        Fact {
            kind: clip(kind, 32),
            subject: clip(&crate::text::escape(subject), PATH_BYTES_MAX),
            expected: clip(&crate::text::escape(expected), FACT_TEXT_BYTES_MAX),
            observed: clip(&crate::text::escape(observed), FACT_TEXT_BYTES_MAX),
            reason,
        }
    }
    pub fn holds(&self) -> bool {
        self.reason.is_none()
    }
}

/// Cuts text to at most `max` bytes at a character boundary, marking the cut. Deterministic.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    const MARK: &str = "...";
    // The largest character boundary at or below the budget: 0 always is one, so the
    // search ends within the budget's bytes (a character is at most 4).
    let end = (0..=max.saturating_sub(MARK.len()))
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}{MARK}", &s[..end])
}

impl Canonical for Fact {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::text(&self.kind),
            cbor::text(&self.subject),
            cbor::text(&self.expected),
            cbor::text(&self.observed),
            cbor::opt(&self.reason, |r| cbor::text(r.as_str())),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "fact", 5)?;
        Ok(Fact {
            kind: f.plain_text(32)?,
            subject: f.plain_text(PATH_BYTES_MAX)?,
            expected: f.plain_text(FACT_TEXT_BYTES_MAX)?,
            observed: f.plain_text(FACT_TEXT_BYTES_MAX)?,
            reason: f.opt(Reason::from_value)?,
        })
    }
}

/// The evidence digest: sha256 of the canonical encoding of the facts, in the order given
/// (observers emit them in a fixed order), so an unchanged world gives the same digest.
pub fn evidence_digest(facts: &[Fact]) -> Hash {
    Hash::of(&cbor::encode(&cbor::list(facts)))
}

pub use crate::path::check_abs_path;

pub fn check_text(s: &str) -> Result<(), crate::Invalid> {
    if s.len() > TEXT_BYTES_MAX {
        return Err(format!(
            "text is {} bytes, over the bound of {TEXT_BYTES_MAX}",
            s.len()
        )
        .into());
    }
    if s.chars().any(char::is_control) {
        return Err("text contains control characters".into());
    }
    crate::text::check(s)
}

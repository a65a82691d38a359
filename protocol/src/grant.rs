//! The grant, the custody challenge, and the consumer's authenticated identity.

use ciborium::value::Value;

use crate::cbor::{self, Canonical, DecodeError, Fields};
use crate::limits::*;
use crate::manifest::Listener;
use crate::sign::{self, Context};
use crate::types::{DeploymentId, Hash, Identity, PublicKey};

/// The consumer as authenticated on the grant socket (recorded in intent and consume).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerPeer {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
    /// Identity and sha256 of `/proc/<pid>/exe` as seen through the pinned pidfd.
    pub exe: Identity,
    pub exe_sha256: Hash,
    /// The peer's cgroup v2 path.
    pub cgroup: String,
}

impl Canonical for ConsumerPeer {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::uint(self.pid.into()),
            cbor::uint(self.uid.into()),
            cbor::uint(self.gid.into()),
            self.exe.to_value(),
            cbor::bytes(&self.exe_sha256.0),
            cbor::text(&self.cgroup),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "consumer-peer", 6)?;
        let n = |f: &mut Fields| {
            u32::try_from(f.uint()?)
                .map_err(|_| DecodeError::schema("consumer-peer", "over 32 bits"))
        };
        Ok(ConsumerPeer {
            pid: n(&mut f)?,
            uid: n(&mut f)?,
            gid: n(&mut f)?,
            exe: Identity::from_value(f.field()?)?,
            exe_sha256: Hash(f.bytes()?),
            cgroup: f.plain_text(PATH_BYTES_MAX)?,
        })
    }
}

/// The custody challenge: binds the deployment, the intent and a fresh nonce, so an answer
/// can never be replayed into another epoch or another attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub deployment: DeploymentId,
    pub intent: Hash,
    pub nonce: [u8; NONCE_BYTES],
}

impl Canonical for Challenge {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::bytes(&self.deployment.0),
            cbor::bytes(&self.intent.0),
            cbor::bytes(&self.nonce),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "challenge", 3)?;
        Ok(Challenge {
            deployment: DeploymentId(f.bytes()?),
            intent: Hash(f.bytes()?),
            nonce: f.bytes()?,
        })
    }
}

impl Challenge {
    /// The consumer's answer: its enrolled key signs the challenge under the custody context.
    pub fn answer(&self, key: &ed25519_dalek::SigningKey) -> [u8; SIGNATURE_BYTES] {
        sign::sign(key, Context::Custody, &self.to_bytes())
    }
    pub fn check(&self, key: &PublicKey, sig: &[u8; SIGNATURE_BYTES]) -> bool {
        sign::verify(key, Context::Custody, &self.to_bytes(), sig)
    }
}

/// The key proof a consumer gives at `hello`, before anything is written: a daemon-chosen
/// nonce bound to the resolved deployment and to the connection's peer (its pid and start
/// time), so a proof is never valid for another connection, process or deployment. It is
/// signed under its own context: a custody answer never verifies as a key proof, nor back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyProof {
    /// The full id the consumer's prefix resolved to.
    pub deployment: DeploymentId,
    pub nonce: [u8; NONCE_BYTES],
    /// The peer as SO_PEERCRED and its pidfd name it: pid and start time in clock ticks.
    pub pid: u32,
    pub start_ticks: u64,
}

impl Canonical for KeyProof {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::bytes(&self.deployment.0),
            cbor::bytes(&self.nonce),
            cbor::uint(self.pid.into()),
            cbor::uint(self.start_ticks),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "key-proof", 4)?;
        Ok(KeyProof {
            deployment: DeploymentId(f.bytes()?),
            nonce: f.bytes()?,
            pid: u32::try_from(f.uint()?)
                .map_err(|_| DecodeError::schema("key-proof", "pid over 32 bits"))?,
            start_ticks: f.uint()?,
        })
    }
}

impl KeyProof {
    /// The consumer's answer: its key signs the proof under the key-proof context.
    pub fn answer(&self, key: &ed25519_dalek::SigningKey) -> [u8; SIGNATURE_BYTES] {
        sign::sign(key, Context::KeyProof, &self.to_bytes())
    }
    /// Strict verification against `key`.
    pub fn check(&self, key: &PublicKey, sig: &[u8; SIGNATURE_BYTES]) -> bool {
        sign::verify(key, Context::KeyProof, &self.to_bytes(), sig)
    }
}

/// A lock fence handed over with the grant (its fd travels with `SCM_RIGHTS`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantFence {
    pub path: String,
    pub identity: Identity,
}

impl Canonical for GrantFence {
    fn to_value(&self) -> Value {
        cbor::array(vec![cbor::text(&self.path), self.identity.to_value()])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "fence", 2)?;
        Ok(GrantFence {
            path: f.path()?,
            identity: Identity::from_value(f.field()?)?,
        })
    }
}

/// An operation of the old root without a definite outcome: recovery never decides it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownOp {
    pub op: u64,
    pub name: String,
}

impl Canonical for UnknownOp {
    fn to_value(&self) -> Value {
        cbor::array(vec![cbor::uint(self.op), cbor::text(&self.name)])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "unknown-op", 2)?;
        Ok(UnknownOp {
            op: f.uint()?,
            name: f.text(OP_NAME_BYTES_MAX)?,
        })
    }
}

/// The grant: the single-use authorization the consumer receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    pub deployment: DeploymentId,
    /// Hash of the intent record and of the consume record this grant follows.
    pub intent: Hash,
    pub consume: Hash,
    pub evidence: Hash,
    pub consumer_key: PublicKey,
    pub ready_path: String,
    pub ready_sha256: Hash,
    pub fences: Vec<GrantFence>,
    /// The producer journal's frontier: last sequence number and record hash.
    pub frontier_seq: u64,
    pub frontier_hash: Hash,
    pub unknown_ops: Vec<UnknownOp>,
    /// Seconds since the Unix epoch (informational).
    pub issued_at: u64,
    /// The listener endpoints repochd held and hands over, in manifest order: their fds
    /// follow the fences' in the grant message (docs/PROTOCOL.md, "Grant socket").
    /// Encoded only when not empty (a thirteen-field grant has none).
    pub listeners: Vec<Listener>,
    /// The fleet registry's fencing token (a deployment with a `[registry]`): the
    /// fifteenth field, after the listeners (then an empty list when none).
    pub fencing: Option<crate::fleet::FencingToken>,
}

pub const GRANT_VERSION: u64 = 1;

impl Canonical for Grant {
    fn to_value(&self) -> Value {
        let mut fields = vec![
            cbor::uint(GRANT_VERSION),
            cbor::bytes(&self.deployment.0),
            cbor::bytes(&self.intent.0),
            cbor::bytes(&self.consume.0),
            cbor::bytes(&self.evidence.0),
            cbor::bytes(&self.consumer_key.0),
            cbor::text(&self.ready_path),
            cbor::bytes(&self.ready_sha256.0),
            cbor::list(&self.fences),
            cbor::uint(self.frontier_seq),
            cbor::bytes(&self.frontier_hash.0),
            cbor::list(&self.unknown_ops),
            cbor::uint(self.issued_at),
        ];
        if !self.listeners.is_empty() || self.fencing.is_some() {
            fields.push(cbor::list(&self.listeners));
        }
        if let Some(t) = &self.fencing {
            fields.push(t.to_value());
        }
        cbor::array(fields)
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let arity = match &v {
            Value::Array(items) => items.len(),
            _ => 0,
        };
        let mut f = Fields::open_between(v, "grant", 13, 15)?;
        if f.uint()? != GRANT_VERSION {
            return Err(DecodeError::schema("grant", "unsupported version"));
        }
        let mut g = Grant {
            deployment: DeploymentId(f.bytes()?),
            intent: Hash(f.bytes()?),
            consume: Hash(f.bytes()?),
            evidence: Hash(f.bytes()?),
            consumer_key: PublicKey(f.bytes()?),
            ready_path: f.path()?,
            ready_sha256: Hash(f.bytes()?),
            fences: f.list(FENCES_MAX, GrantFence::from_value)?,
            frontier_seq: f.uint()?,
            frontier_hash: Hash(f.bytes()?),
            unknown_ops: f.list(UNKNOWN_OPS_MAX, UnknownOp::from_value)?,
            issued_at: f.uint()?,
            listeners: Vec::new(),
            fencing: None,
        };
        if f.more() {
            g.listeners = f.list(LISTENERS_MAX, Listener::from_value)?;
        }
        if f.more() {
            g.fencing = Some(crate::fleet::FencingToken::from_value(f.field()?)?);
        }
        if arity == 14 && g.listeners.is_empty() {
            // One encoding per value: no listeners and no token is the thirteen-field form.
            return Err(DecodeError::schema(
                "grant",
                "a listener list is present only when not empty or followed by a fencing token",
            ));
        }
        Ok(g)
    }
}

/// A grant with the issuer's signature; its bytes are what the receipt record carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedGrant {
    pub grant: Grant,
    pub signature: [u8; SIGNATURE_BYTES],
}

impl Canonical for SignedGrant {
    fn to_value(&self) -> Value {
        cbor::array(vec![self.grant.to_value(), cbor::bytes(&self.signature)])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "signed-grant", 2)?;
        Ok(SignedGrant {
            grant: Grant::from_value(f.field()?)?,
            signature: f.bytes()?,
        })
    }
}

impl SignedGrant {
    pub fn sign(grant: Grant, key: &ed25519_dalek::SigningKey) -> Self {
        let signature = sign::sign(key, Context::Grant, &grant.to_bytes());
        SignedGrant { grant, signature }
    }
    pub fn verify(&self, issuer: &PublicKey) -> bool {
        sign::verify(
            issuer,
            Context::Grant,
            &self.grant.to_bytes(),
            &self.signature,
        )
    }
}

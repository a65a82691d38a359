//! The epoch log (docs/PROTOCOL.md, "The epoch log"): signed, hash-chained records and their classification.

use std::collections::HashSet;

use ciborium::value::Value;

use crate::cbor::{self, Canonical, DecodeError, Fields};
use crate::fleet::FencingToken;
use crate::grant::{Challenge, ConsumerPeer};
use crate::limits::*;
use crate::manifest::Predecessor;
use crate::reason::Reason;
use crate::sign::{self, Context};
use crate::types::{DeploymentId, Fact, Hash, PublicKey};

mod chain;
mod verify;

pub use chain::*;
pub use verify::*;

pub const RECORD_VERSION: u64 = 1;

/// The epoch log's file name in a deployment's state directory (docs/PROTOCOL.md): what an
/// auditor given a state directory reads.
pub const LOG_FILE: &str = "epoch.log";

/// Who started the issuance (the contender), for the intent record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Contender {
    pub pid: u32,
    /// Process start time in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_ticks: u64,
    /// The kernel boot id, so a pid is unambiguous.
    pub boot_id: String,
}

impl Canonical for Contender {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::uint(self.pid.into()),
            cbor::uint(self.start_ticks),
            cbor::text(&self.boot_id),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "contender", 3)?;
        Ok(Contender {
            pid: u32::try_from(f.uint()?)
                .map_err(|_| DecodeError::schema("contender", "pid over 32 bits"))?,
            start_ticks: f.uint()?,
            boot_id: f.plain_text(64)?,
        })
    }
}

/// The payload of an epoch-log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EpochBody {
    Genesis {
        manifest: Hash,
        issuer_key: PublicKey,
        predecessor: Option<Predecessor>,
    },
    Intent {
        evidence: Hash,
        facts: Vec<Fact>,
        contender: Contender,
        consumer: ConsumerPeer,
    },
    Consume {
        consumer: ConsumerPeer,
        challenge: Challenge,
        custody: [u8; SIGNATURE_BYTES],
        /// The fleet registry's claim this consume follows (a deployment with a
        /// `[registry]`); encoded only when present.
        fencing: Option<FencingToken>,
    },
    Receipt {
        grant: Vec<u8>,
    },
    Withheld {
        reason: Reason,
        detail: String,
    },
}

/// The kind of a record, and the phase it opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Genesis,
    Intent,
    Consume,
    Receipt,
    Withheld,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Genesis => "genesis",
            Kind::Intent => "intent",
            Kind::Consume => "consume",
            Kind::Receipt => "receipt",
            Kind::Withheld => "withheld",
        }
    }
    /// The record kinds that may follow this one.
    pub fn may_follow(prev: Option<Kind>, next: Kind) -> bool {
        matches!(
            (prev, next),
            (None, Kind::Genesis)
                | (Some(Kind::Genesis), Kind::Intent)
                | (Some(Kind::Intent), Kind::Consume | Kind::Withheld)
                | (Some(Kind::Consume), Kind::Receipt | Kind::Withheld)
                | (Some(Kind::Receipt), Kind::Withheld)
        )
    }
}

impl EpochBody {
    pub fn kind(&self) -> Kind {
        match self {
            EpochBody::Genesis { .. } => Kind::Genesis,
            EpochBody::Intent { .. } => Kind::Intent,
            EpochBody::Consume { .. } => Kind::Consume,
            EpochBody::Receipt { .. } => Kind::Receipt,
            EpochBody::Withheld { .. } => Kind::Withheld,
        }
    }

    fn to_value(&self) -> Value {
        let k = cbor::text(self.kind().as_str());
        match self {
            EpochBody::Genesis {
                manifest,
                issuer_key,
                predecessor,
            } => cbor::array(vec![
                k,
                cbor::bytes(&manifest.0),
                cbor::bytes(&issuer_key.0),
                cbor::opt(predecessor, Predecessor::to_value),
            ]),
            EpochBody::Intent {
                evidence,
                facts,
                contender,
                consumer,
            } => cbor::array(vec![
                k,
                cbor::bytes(&evidence.0),
                cbor::list(facts),
                contender.to_value(),
                consumer.to_value(),
            ]),
            EpochBody::Consume {
                consumer,
                challenge,
                custody,
                fencing,
            } => {
                let mut fields = vec![
                    k,
                    consumer.to_value(),
                    challenge.to_value(),
                    cbor::bytes(custody),
                ];
                if let Some(t) = fencing {
                    fields.push(t.to_value());
                }
                cbor::array(fields)
            }
            EpochBody::Receipt { grant } => cbor::array(vec![k, cbor::bytes(grant)]),
            EpochBody::Withheld { reason, detail } => {
                cbor::array(vec![k, reason.to_value(), cbor::text(detail)])
            }
        }
    }

    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let Value::Array(items) = &v else {
            return Err(DecodeError::schema("epoch-body", "expected an array"));
        };
        let Some(Value::Text(kind)) = items.first() else {
            return Err(DecodeError::schema("epoch-body", "expected a kind"));
        };
        Ok(match kind.as_str() {
            "genesis" => {
                let mut f = Fields::open(v, "genesis", 4)?;
                f.expect_text("genesis")?;
                EpochBody::Genesis {
                    manifest: Hash(f.bytes()?),
                    issuer_key: PublicKey(f.bytes()?),
                    predecessor: f.opt(Predecessor::from_value)?,
                }
            }
            "intent" => {
                let mut f = Fields::open(v, "intent", 5)?;
                f.expect_text("intent")?;
                EpochBody::Intent {
                    evidence: Hash(f.bytes()?),
                    facts: f.list(FACTS_MAX, Fact::from_value)?,
                    contender: Contender::from_value(f.field()?)?,
                    consumer: ConsumerPeer::from_value(f.field()?)?,
                }
            }
            "consume" => {
                let mut f = Fields::open_between(v, "consume", 4, 5)?;
                f.expect_text("consume")?;
                EpochBody::Consume {
                    consumer: ConsumerPeer::from_value(f.field()?)?,
                    challenge: Challenge::from_value(f.field()?)?,
                    custody: f.bytes()?,
                    fencing: match f.more() {
                        true => Some(FencingToken::from_value(f.field()?)?),
                        false => None,
                    },
                }
            }
            "receipt" => {
                let mut f = Fields::open(v, "receipt", 2)?;
                f.expect_text("receipt")?;
                EpochBody::Receipt {
                    grant: f.bstr(RECORD_BYTES_MAX)?,
                }
            }
            "withheld" => {
                let mut f = Fields::open(v, "withheld", 3)?;
                f.expect_text("withheld")?;
                EpochBody::Withheld {
                    reason: Reason::from_value(f.field()?)?,
                    detail: f.plain_text(TEXT_BYTES_MAX)?,
                }
            }
            k => {
                return Err(DecodeError::schema(
                    "epoch-body",
                    format!("unknown kind {k:?}"),
                ))
            }
        })
    }
}

/// An unsigned epoch-log record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochRecord {
    pub deployment: DeploymentId,
    pub seq: u64,
    /// Hash of the previous signed record; zero for the genesis.
    pub prev: Hash,
    pub body: EpochBody,
}

impl Canonical for EpochRecord {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::uint(RECORD_VERSION),
            cbor::bytes(&self.deployment.0),
            cbor::uint(self.seq),
            cbor::bytes(&self.prev.0),
            self.body.to_value(),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "epoch-record", 5)?;
        if f.uint()? != RECORD_VERSION {
            return Err(DecodeError::schema("epoch-record", "unsupported version"));
        }
        Ok(EpochRecord {
            deployment: DeploymentId(f.bytes()?),
            seq: f.uint()?,
            prev: Hash(f.bytes()?),
            body: EpochBody::from_value(f.field()?)?,
        })
    }
}

/// A record with the issuer's signature: the unit stored in the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedEpochRecord {
    pub record: EpochRecord,
    pub signature: [u8; SIGNATURE_BYTES],
}

impl Canonical for SignedEpochRecord {
    fn to_value(&self) -> Value {
        cbor::array(vec![self.record.to_value(), cbor::bytes(&self.signature)])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "signed-epoch-record", 2)?;
        Ok(SignedEpochRecord {
            record: EpochRecord::from_value(f.field()?)?,
            signature: f.bytes()?,
        })
    }
}

impl SignedEpochRecord {
    pub fn sign(record: EpochRecord, key: &ed25519_dalek::SigningKey) -> Self {
        let signature = sign::sign(key, Context::EpochRecord, &record.to_bytes());
        SignedEpochRecord { record, signature }
    }
    pub fn verify(&self, issuer: &PublicKey) -> bool {
        sign::verify(
            issuer,
            Context::EpochRecord,
            &self.record.to_bytes(),
            &self.signature,
        )
    }
    /// The record as it is appended to the log: a 4-byte big-endian length, then the bytes.
    pub fn to_frame(&self) -> Vec<u8> {
        crate::wire::frame(&self.to_bytes())
    }
}

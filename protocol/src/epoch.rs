//! The epoch log (DESIGN §4): signed, hash-chained records and their classification.

use ciborium::value::Value;

use crate::cbor::{self, Canonical, DecodeError, Fields};
use crate::grant::{Challenge, ConsumerPeer};
use crate::limits::*;
use crate::manifest::Predecessor;
use crate::reason::Reason;
use crate::sign::{self, Context};
use crate::types::{DeploymentId, Fact, Hash, PublicKey};

pub const RECORD_VERSION: u64 = 1;

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
            boot_id: f.text(64)?,
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
            } => cbor::array(vec![
                k,
                consumer.to_value(),
                challenge.to_value(),
                cbor::bytes(custody),
            ]),
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
                let mut f = Fields::open(v, "consume", 4)?;
                f.expect_text("consume")?;
                EpochBody::Consume {
                    consumer: ConsumerPeer::from_value(f.field()?)?,
                    challenge: Challenge::from_value(f.field()?)?,
                    custody: f.bytes()?,
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
                    detail: f.text(TEXT_BYTES_MAX)?,
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

/// What reading a log concluded about its epoch (DESIGN §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classification {
    Enrolled,
    Intended,
    Consumed,
    /// Grant dispatched or lost: uncertain.
    Receipted,
    Withheld,
    /// Bytes after the last valid record that do not form a whole record.
    Torn,
    Corrupt,
    /// No record at all.
    Empty,
}

impl Classification {
    pub fn as_str(self) -> &'static str {
        match self {
            Classification::Enrolled => "enrolled",
            Classification::Intended => "intended",
            Classification::Consumed => "consumed",
            Classification::Receipted => "receipted",
            Classification::Withheld => "withheld",
            Classification::Torn => "torn",
            Classification::Corrupt => "corrupt",
            Classification::Empty => "empty",
        }
    }
    fn of(kind: Kind) -> Self {
        match kind {
            Kind::Genesis => Classification::Enrolled,
            Kind::Intent => Classification::Intended,
            Kind::Consume => Classification::Consumed,
            Kind::Receipt => Classification::Receipted,
            Kind::Withheld => Classification::Withheld,
        }
    }
    /// The reason a recovery is refused in this state; `None` only for `enrolled`.
    pub fn refusal(self) -> Option<Reason> {
        match self {
            Classification::Enrolled => None,
            Classification::Intended
            | Classification::Consumed
            | Classification::Receipted
            | Classification::Withheld => Some(Reason::EpochConsumed),
            Classification::Torn => Some(Reason::EpochTorn),
            Classification::Corrupt => Some(Reason::EpochCorrupt),
            Classification::Empty => Some(Reason::EpochMissing),
        }
    }
}

/// One verified record of a log, with where it starts and its hash.
#[derive(Clone, Debug)]
pub struct VerifiedRecord {
    pub offset: u64,
    pub hash: Hash,
    pub record: SignedEpochRecord,
}

/// The result of reading a log: the valid prefix and the first problem, if any.
#[derive(Clone, Debug)]
pub struct LogReport {
    pub classification: Classification,
    pub records: Vec<VerifiedRecord>,
    /// Offset and description of the first problem (torn or corrupt).
    pub problem: Option<(u64, String)>,
}

impl LogReport {
    pub fn deployment(&self) -> Option<DeploymentId> {
        self.records.first().map(|r| r.record.record.deployment)
    }
    pub fn last_hash(&self) -> Option<Hash> {
        self.records.last().map(|r| r.hash)
    }
    pub fn genesis(&self) -> Option<(&Hash, Option<&Predecessor>)> {
        match &self.records.first()?.record.record.body {
            EpochBody::Genesis {
                manifest,
                predecessor,
                ..
            } => Some((manifest, predecessor.as_ref())),
            _ => None,
        }
    }
    pub fn record(&self, kind: Kind) -> Option<&VerifiedRecord> {
        self.records
            .iter()
            .find(|r| r.record.record.body.kind() == kind)
    }
}

/// Splits framed records. Yields `(offset, Ok(payload))`, or a final `(offset, Err(torn?, why))`.
pub(crate) fn frames(
    bytes: &[u8],
    max_record: usize,
) -> impl Iterator<Item = (u64, Result<&[u8], (bool, String)>)> {
    let mut off = 0usize;
    let mut done = false;
    std::iter::from_fn(move || {
        if done || off == bytes.len() {
            return None;
        }
        let at = off as u64;
        let rest = &bytes[off..];
        if rest.len() < 4 {
            done = true;
            return Some((
                at,
                Err((
                    true,
                    format!("{} bytes, less than a length prefix", rest.len()),
                )),
            ));
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len > max_record || len == 0 {
            done = true;
            return Some((
                at,
                Err((
                    false,
                    format!("record length {len} outside 1..={max_record}"),
                )),
            ));
        }
        if rest.len() < 4 + len {
            done = true;
            return Some((
                at,
                Err((
                    true,
                    format!("record of {len} bytes, only {} present", rest.len() - 4),
                )),
            ));
        }
        off += 4 + len;
        Some((at, Ok(&rest[4..4 + len])))
    })
}

/// Reads and verifies an epoch log. Never panics, whatever the bytes.
///
/// `expected` pins the deployment id when known. Every record must decode strictly, carry a
/// valid issuer signature, the genesis's deployment id, the next sequence number, the hash of
/// the previous record, and follow the phase order.
pub fn verify_log(bytes: &[u8], issuer: &PublicKey, expected: Option<DeploymentId>) -> LogReport {
    let mut records: Vec<VerifiedRecord> = Vec::new();
    let mut problem = None;
    if bytes.len() > LOG_BYTES_MAX {
        problem = Some((
            0,
            false,
            format!("log is {} bytes, over {LOG_BYTES_MAX}", bytes.len()),
        ));
    } else {
        for (at, frame) in frames(bytes, RECORD_BYTES_MAX) {
            match frame.and_then(|payload| check_record(&records, at, payload, issuer, expected)) {
                Ok(r) => records.push(r),
                Err((torn, why)) => {
                    problem = Some((at, torn, why));
                    break;
                }
            }
        }
    }
    let classification = match (&problem, records.last()) {
        (Some((_, true, _)), _) => Classification::Torn,
        (Some((_, false, _)), _) => Classification::Corrupt,
        (None, None) => Classification::Empty,
        (None, Some(r)) => Classification::of(r.record.record.body.kind()),
    };
    LogReport {
        classification,
        records,
        problem: problem.map(|(at, _, why)| (at, why)),
    }
}

/// Checks one record against the verified prefix. `Err((torn, why))`; records are never torn.
fn check_record(
    records: &[VerifiedRecord],
    at: u64,
    payload: &[u8],
    issuer: &PublicKey,
    expected: Option<DeploymentId>,
) -> Result<VerifiedRecord, (bool, String)> {
    let n = records.len();
    let corrupt = |why: String| Err((false, format!("record {n}: {why}")));
    if n == LOG_RECORDS_MAX {
        return corrupt(format!("more than {LOG_RECORDS_MAX} records"));
    }
    let rec = match SignedEpochRecord::from_bytes(payload) {
        Ok(r) => r,
        Err(e) => return corrupt(e.to_string()),
    };
    if !rec.verify(issuer) {
        return corrupt("bad issuer signature".into());
    }
    let r = &rec.record;
    let prev = records.last();
    if let Some(d) = prev.map(|p| p.record.record.deployment).or(expected) {
        if r.deployment != d {
            return corrupt(format!(
                "belongs to deployment {}, expected {d}",
                r.deployment
            ));
        }
    }
    if r.seq != n as u64 {
        return corrupt(format!("sequence number {}", r.seq));
    }
    if r.prev != prev.map_or(Hash::ZERO, |p| p.hash) {
        return corrupt("broken hash chain".into());
    }
    let prev_kind = prev.map(|p| p.record.record.body.kind());
    if !Kind::may_follow(prev_kind, r.body.kind()) {
        return corrupt(format!(
            "{} may not follow {}",
            r.body.kind().as_str(),
            prev_kind.map_or("nothing", Kind::as_str)
        ));
    }
    if let EpochBody::Genesis { issuer_key, .. } = &r.body {
        if issuer_key != issuer {
            return corrupt("genesis names another issuer key".into());
        }
    }
    Ok(VerifiedRecord {
        offset: at,
        hash: Hash::of(payload),
        record: rec,
    })
}

/// A problem in the chain between deployments.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("deployment {0}: log is not valid ({1})")]
    Invalid(DeploymentId, String),
    #[error("deployment {successor} names predecessor {predecessor}, which is not among the logs")]
    MissingPredecessor {
        successor: DeploymentId,
        predecessor: DeploymentId,
    },
    #[error("deployment {successor}: predecessor {predecessor} ends in {observed}, the link says {expected}")]
    Mismatch {
        successor: DeploymentId,
        predecessor: DeploymentId,
        expected: Hash,
        observed: Hash,
    },
    #[error("deployment {0} has more than one successor")]
    Fork(DeploymentId),
    #[error("log without a genesis")]
    NoGenesis,
}

/// Verifies predecessor links between already-verified logs: every named predecessor is
/// present and ends in the recorded final hash, and no deployment has two successors.
/// Returns the deployments in chain order (roots first).
pub fn verify_chain(reports: &[LogReport]) -> Result<Vec<DeploymentId>, ChainError> {
    use std::collections::BTreeMap;
    let mut by_id = BTreeMap::new();
    for r in reports {
        let d = r.deployment().ok_or(ChainError::NoGenesis)?;
        if let Some((at, why)) = &r.problem {
            return Err(ChainError::Invalid(d, format!("at offset {at}: {why}")));
        }
        by_id.insert(d, r);
    }
    let mut successor_of: BTreeMap<DeploymentId, DeploymentId> = BTreeMap::new();
    for (d, r) in &by_id {
        if let Some((_, Some(p))) = r.genesis() {
            let pred = by_id
                .get(&p.deployment)
                .ok_or(ChainError::MissingPredecessor {
                    successor: *d,
                    predecessor: p.deployment,
                })?;
            let observed = pred.last_hash().ok_or(ChainError::NoGenesis)?;
            if observed != p.final_hash {
                return Err(ChainError::Mismatch {
                    successor: *d,
                    predecessor: p.deployment,
                    expected: p.final_hash,
                    observed,
                });
            }
            if successor_of.insert(p.deployment, *d).is_some() {
                return Err(ChainError::Fork(p.deployment));
            }
        }
    }
    // Order: roots (no predecessor among the logs) first, then follow successors.
    let mut order = Vec::new();
    for (d, r) in &by_id {
        if r.genesis().and_then(|(_, p)| p).is_none() {
            let mut cur = *d;
            order.push(cur);
            while let Some(next) = successor_of.get(&cur) {
                if order.len() > by_id.len() {
                    break;
                }
                order.push(*next);
                cur = *next;
            }
        }
    }
    Ok(order)
}

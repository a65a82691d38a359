//! The original producer's journal (docs/PROTOCOL.md, "The producer journal"): lineage evidence.
//!
//! An append-only file of framed, signed, hash-chained records. The genesis is written at
//! enrollment and signed by the host issuer key; every later record is signed by the
//! producer's enrolled key. Each signed record names its signer, so a record signed by any
//! other key is *forged*, and a record whose signature fails under the enrolled key is
//! *mutated*.

use std::collections::BTreeMap;

use ciborium::value::Value;

use crate::cbor::{self, Canonical, DecodeError, Fields};
use crate::grant::UnknownOp;
use crate::limits::*;
use crate::reason::Reason;
use crate::sign::{self, Context};
use crate::types::{DeploymentId, Hash, PublicKey};

/// The outcome of an operation as the producer recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpOutcome {
    Succeeded,
    Failed,
    Unknown,
}

impl OpOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            OpOutcome::Succeeded => "succeeded",
            OpOutcome::Failed => "failed",
            OpOutcome::Unknown => "unknown",
        }
    }
    pub fn parse(s: &str) -> Option<OpOutcome> {
        Some(match s {
            "succeeded" => OpOutcome::Succeeded,
            "failed" => OpOutcome::Failed,
            "unknown" => OpOutcome::Unknown,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JournalBody {
    Genesis { producer_key: PublicKey },
    RootStart { pid: u32 },
    OpBegin { op: u64, name: String },
    OpEnd { op: u64, outcome: OpOutcome },
    RootStop,
}

impl JournalBody {
    pub fn kind(&self) -> &'static str {
        match self {
            JournalBody::Genesis { .. } => "genesis",
            JournalBody::RootStart { .. } => "root-start",
            JournalBody::OpBegin { .. } => "op-begin",
            JournalBody::OpEnd { .. } => "op-end",
            JournalBody::RootStop => "root-stop",
        }
    }
    fn to_value(&self) -> Value {
        let k = cbor::text(self.kind());
        match self {
            JournalBody::Genesis { producer_key } => {
                cbor::array(vec![k, cbor::bytes(&producer_key.0)])
            }
            JournalBody::RootStart { pid } => cbor::array(vec![k, cbor::uint((*pid).into())]),
            JournalBody::OpBegin { op, name } => {
                cbor::array(vec![k, cbor::uint(*op), cbor::text(name)])
            }
            JournalBody::OpEnd { op, outcome } => {
                cbor::array(vec![k, cbor::uint(*op), cbor::text(outcome.as_str())])
            }
            JournalBody::RootStop => cbor::array(vec![k]),
        }
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let Value::Array(items) = &v else {
            return Err(DecodeError::schema("journal-body", "expected an array"));
        };
        let Some(Value::Text(kind)) = items.first() else {
            return Err(DecodeError::schema("journal-body", "expected a kind"));
        };
        let kind = kind.clone();
        Ok(match kind.as_str() {
            "genesis" => {
                let mut f = Fields::open(v, "journal-genesis", 2)?;
                f.expect_text("genesis")?;
                JournalBody::Genesis {
                    producer_key: PublicKey(f.bytes()?),
                }
            }
            "root-start" => {
                let mut f = Fields::open(v, "root-start", 2)?;
                f.expect_text("root-start")?;
                JournalBody::RootStart {
                    pid: u32::try_from(f.uint()?)
                        .map_err(|_| DecodeError::schema("root-start", "pid over 32 bits"))?,
                }
            }
            "op-begin" => {
                let mut f = Fields::open(v, "op-begin", 3)?;
                f.expect_text("op-begin")?;
                JournalBody::OpBegin {
                    op: f.uint()?,
                    name: f.text(OP_NAME_BYTES_MAX)?,
                }
            }
            "op-end" => {
                let mut f = Fields::open(v, "op-end", 3)?;
                f.expect_text("op-end")?;
                let op = f.uint()?;
                let o = f.text(16)?;
                let outcome = OpOutcome::parse(&o).ok_or_else(|| {
                    DecodeError::schema("op-end", format!("unknown outcome {o:?}"))
                })?;
                JournalBody::OpEnd { op, outcome }
            }
            "root-stop" => {
                let mut f = Fields::open(v, "root-stop", 1)?;
                f.expect_text("root-stop")?;
                JournalBody::RootStop
            }
            k => {
                return Err(DecodeError::schema(
                    "journal-body",
                    format!("unknown kind {k:?}"),
                ))
            }
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalRecord {
    pub deployment: DeploymentId,
    pub seq: u64,
    pub prev: Hash,
    pub body: JournalBody,
}

impl Canonical for JournalRecord {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::uint(crate::epoch::RECORD_VERSION),
            cbor::bytes(&self.deployment.0),
            cbor::uint(self.seq),
            cbor::bytes(&self.prev.0),
            self.body.to_value(),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "journal-record", 5)?;
        if f.uint()? != crate::epoch::RECORD_VERSION {
            return Err(DecodeError::schema("journal-record", "unsupported version"));
        }
        Ok(JournalRecord {
            deployment: DeploymentId(f.bytes()?),
            seq: f.uint()?,
            prev: Hash(f.bytes()?),
            body: JournalBody::from_value(f.field()?)?,
        })
    }
}

/// A journal record with its signer and signature.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedJournalRecord {
    pub record: JournalRecord,
    pub signer: PublicKey,
    pub signature: [u8; SIGNATURE_BYTES],
}

impl Canonical for SignedJournalRecord {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            self.record.to_value(),
            cbor::bytes(&self.signer.0),
            cbor::bytes(&self.signature),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "signed-journal-record", 3)?;
        Ok(SignedJournalRecord {
            record: JournalRecord::from_value(f.field()?)?,
            signer: PublicKey(f.bytes()?),
            signature: f.bytes()?,
        })
    }
}

fn context_of(body: &JournalBody) -> Context {
    match body {
        JournalBody::Genesis { .. } => Context::JournalGenesis,
        _ => Context::JournalRecord,
    }
}

impl SignedJournalRecord {
    pub fn sign(record: JournalRecord, key: &ed25519_dalek::SigningKey) -> Self {
        let signature = sign::sign(key, context_of(&record.body), &record.to_bytes());
        SignedJournalRecord {
            record,
            signer: PublicKey::from(&key.verifying_key()),
            signature,
        }
    }
    fn verify(&self) -> bool {
        sign::verify(
            &self.signer,
            context_of(&self.record.body),
            &self.record.to_bytes(),
            &self.signature,
        )
    }
}

/// A refusal of the journal as lineage evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineageError {
    pub reason: Reason,
    pub offset: u64,
    pub detail: String,
}

/// What a verified journal says: its frontier and the operations without a definite outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frontier {
    pub records: u64,
    pub last_seq: u64,
    pub last_hash: Hash,
    pub genesis: Hash,
    pub unknown_ops: Vec<UnknownOp>,
    /// Next op id a writer should use.
    pub next_op: u64,
}

/// What the journal is expected to be: from the enrolled manifest.
#[derive(Clone, Copy, Debug)]
pub struct JournalPins<'a> {
    pub deployment: DeploymentId,
    pub issuer: &'a PublicKey,
    pub producer: &'a PublicKey,
    /// The enrolled genesis hash; `None` while enrolling.
    pub genesis: Option<Hash>,
}

/// Verifies a whole journal. Never panics, whatever the bytes.
pub fn verify_journal(bytes: &[u8], pins: JournalPins<'_>) -> Result<Frontier, LineageError> {
    let err = |reason, offset, detail: String| {
        Err(LineageError {
            reason,
            offset,
            detail,
        })
    };
    if bytes.len() > JOURNAL_BYTES_MAX {
        return err(
            Reason::LineageMutated,
            0,
            format!("journal is {} bytes, over {JOURNAL_BYTES_MAX}", bytes.len()),
        );
    }
    if bytes.is_empty() {
        return err(
            Reason::LineageTorn,
            0,
            "journal is empty: no genesis".into(),
        );
    }
    let mut prev: Option<Hash> = None;
    let mut genesis = Hash::ZERO;
    let mut seq = 0u64;
    let mut open: BTreeMap<u64, String> = BTreeMap::new();
    let mut unknown: Vec<UnknownOp> = Vec::new();
    let mut next_op = 0u64;
    for (at, frame) in crate::epoch::frames(bytes, JOURNAL_RECORD_BYTES_MAX) {
        let payload = match frame {
            Ok(p) => p,
            Err((true, why)) => return err(Reason::LineageTorn, at, why),
            Err((false, why)) => return err(Reason::LineageMutated, at, why),
        };
        if seq as usize >= JOURNAL_RECORDS_MAX {
            return err(
                Reason::LineageMutated,
                at,
                format!("more than {JOURNAL_RECORDS_MAX} records"),
            );
        }
        let rec = match SignedJournalRecord::from_bytes(payload) {
            Ok(r) => r,
            Err(e) => return err(Reason::LineageMutated, at, format!("record {seq}: {e}")),
        };
        let r = &rec.record;
        let is_genesis = matches!(r.body, JournalBody::Genesis { .. });
        if r.deployment != pins.deployment {
            let reason = if seq == 0 {
                Reason::LineageForeign
            } else {
                Reason::LineageMutated
            };
            return err(
                reason,
                at,
                format!("record {seq} belongs to deployment {}", r.deployment),
            );
        }
        let want_signer = if seq == 0 { pins.issuer } else { pins.producer };
        if &rec.signer != want_signer {
            return err(
                Reason::LineageForged,
                at,
                format!(
                    "record {seq} signed by {}, enrolled {want_signer}",
                    rec.signer
                ),
            );
        }
        if !rec.verify() {
            return err(
                Reason::LineageMutated,
                at,
                format!("record {seq}: signature does not verify"),
            );
        }
        if r.seq != seq || r.prev != prev.unwrap_or(Hash::ZERO) || is_genesis != (seq == 0) {
            return err(
                Reason::LineageMutated,
                at,
                format!("record {seq}: broken sequence or hash chain"),
            );
        }
        let hash = Hash::of(payload);
        match &r.body {
            JournalBody::Genesis { producer_key } => {
                if producer_key != pins.producer {
                    return err(
                        Reason::LineageForeign,
                        at,
                        "genesis names another producer key".into(),
                    );
                }
                if pins.genesis.is_some_and(|g| g != hash) {
                    return err(
                        Reason::LineageForeign,
                        at,
                        "genesis is not the enrolled one".into(),
                    );
                }
                genesis = hash;
            }
            JournalBody::OpBegin { op, name } => {
                // Carried into the grant and printed: the one text rule holds for it.
                if let Err(why) = crate::text::check(name) {
                    return err(
                        Reason::LineageMutated,
                        at,
                        format!("op-begin {op}'s name {why}"),
                    );
                }
                if *op < next_op || open.len() >= OPEN_OPS_MAX {
                    return err(
                        Reason::LineageMutated,
                        at,
                        format!("op-begin {op} reuses an id or exceeds {OPEN_OPS_MAX} open"),
                    );
                }
                // The largest op id leaves no next one: a writer could never continue.
                let Some(next) = op.checked_add(1) else {
                    return err(
                        Reason::LineageMutated,
                        at,
                        format!(
                            "op-begin {op} leaves no next op id (the largest is {})",
                            u64::MAX - 1
                        ),
                    );
                };
                next_op = next;
                open.insert(*op, name.clone());
            }
            JournalBody::OpEnd { op, outcome } => {
                let Some(name) = open.remove(op) else {
                    return err(
                        Reason::LineageMutated,
                        at,
                        format!("op-end {op} without an open op-begin"),
                    );
                };
                if *outcome == OpOutcome::Unknown {
                    unknown.push(UnknownOp { op: *op, name });
                }
            }
            JournalBody::RootStart { .. } | JournalBody::RootStop => {}
        }
        prev = Some(hash);
        // Bounded by JOURNAL_RECORDS_MAX above.
        seq = seq.saturating_add(1);
    }
    // Operations never ended are unknown too: recovery never decides them.
    unknown.extend(open.into_iter().map(|(op, name)| UnknownOp { op, name }));
    unknown.sort_by_key(|u| u.op);
    if unknown.len() > UNKNOWN_OPS_MAX {
        return err(
            Reason::LineageUnknownOverflow,
            bytes.len() as u64,
            format!("{} unknown operations > {UNKNOWN_OPS_MAX}", unknown.len()),
        );
    }
    Ok(Frontier {
        records: seq,
        // The journal is not empty and its first frame verified, so `seq >= 1`; checked.
        last_seq: seq.saturating_sub(1),
        last_hash: prev.unwrap_or(Hash::ZERO),
        genesis,
        unknown_ops: unknown,
        next_op,
    })
}

/// Builds the next record's frame for a journal whose verified frontier is known.
/// Pure: the caller appends the bytes durably, then continues from the returned frontier.
pub fn next_frame(
    deployment: DeploymentId,
    frontier: Option<(u64, Hash)>,
    body: JournalBody,
    key: &ed25519_dalek::SigningKey,
) -> (Vec<u8>, Hash) {
    let (seq, prev) = match frontier {
        None => (0, Hash::ZERO),
        // A verified frontier has at most JOURNAL_RECORDS_MAX records: never u64::MAX.
        Some((last, h)) => (last.saturating_add(1), h),
    };
    let signed = SignedJournalRecord::sign(
        JournalRecord {
            deployment,
            seq,
            prev,
            body,
        },
        key,
    );
    let bytes = signed.to_bytes();
    (crate::wire::frame(&bytes), Hash::of(&bytes))
}

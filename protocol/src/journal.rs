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

fn refuse<T>(reason: Reason, offset: u64, detail: String) -> Result<T, LineageError> {
    Err(LineageError {
        reason,
        offset,
        detail,
    })
}

/// Verifies a whole journal. Never panics, whatever the bytes.
pub fn verify_journal(bytes: &[u8], pins: JournalPins<'_>) -> Result<Frontier, LineageError> {
    if bytes.len() > JOURNAL_BYTES_MAX {
        return refuse(
            Reason::LineageMutated,
            0,
            format!("journal is {} bytes, over {JOURNAL_BYTES_MAX}", bytes.len()),
        );
    }
    if bytes.is_empty() {
        return refuse(
            Reason::LineageTorn,
            0,
            "journal is empty: no genesis".into(),
        );
    }
    let mut walk = Walk::new(pins);
    for (at, frame) in crate::epoch::frames(bytes, JOURNAL_RECORD_BYTES_MAX) {
        let payload = match frame {
            Ok(p) => p,
            Err((true, why)) => return refuse(Reason::LineageTorn, at, why),
            Err((false, why)) => return refuse(Reason::LineageMutated, at, why),
        };
        walk.record(at, payload)?;
    }
    walk.frontier(bytes.len() as u64)
}

/// A journal read record by record: where its chain is, and its operations' state.
struct Walk<'a> {
    pins: JournalPins<'a>,
    prev: Option<Hash>,
    genesis: Hash,
    seq: u64,
    open: BTreeMap<u64, String>,
    unknown: Vec<UnknownOp>,
    next_op: u64,
}

impl<'a> Walk<'a> {
    fn new(pins: JournalPins<'a>) -> Walk<'a> {
        Walk {
            pins,
            prev: None,
            genesis: Hash::ZERO,
            seq: 0,
            open: BTreeMap::new(),
            unknown: Vec::new(),
            next_op: 0,
        }
    }

    /// The record at `at`: its deployment, signer, signature and place in the chain, then
    /// what its body does.
    fn record(&mut self, at: u64, payload: &[u8]) -> Result<(), LineageError> {
        let seq = self.seq;
        if seq as usize >= JOURNAL_RECORDS_MAX {
            return refuse(
                Reason::LineageMutated,
                at,
                format!("more than {JOURNAL_RECORDS_MAX} records"),
            );
        }
        let rec = match SignedJournalRecord::from_bytes(payload) {
            Ok(r) => r,
            Err(e) => return refuse(Reason::LineageMutated, at, format!("record {seq}: {e}")),
        };
        let r = &rec.record;
        let is_genesis = matches!(r.body, JournalBody::Genesis { .. });
        if r.deployment != self.pins.deployment {
            let reason = if seq == 0 {
                Reason::LineageForeign
            } else {
                Reason::LineageMutated
            };
            return refuse(
                reason,
                at,
                format!("record {seq} belongs to deployment {}", r.deployment),
            );
        }
        let want_signer = if seq == 0 {
            self.pins.issuer
        } else {
            self.pins.producer
        };
        if &rec.signer != want_signer {
            return refuse(
                Reason::LineageForged,
                at,
                format!(
                    "record {seq} signed by {}, enrolled {want_signer}",
                    rec.signer
                ),
            );
        }
        if !rec.verify() {
            return refuse(
                Reason::LineageMutated,
                at,
                format!("record {seq}: signature does not verify"),
            );
        }
        if r.seq != seq || r.prev != self.prev.unwrap_or(Hash::ZERO) || is_genesis != (seq == 0) {
            return refuse(
                Reason::LineageMutated,
                at,
                format!("record {seq}: broken sequence or hash chain"),
            );
        }
        let hash = Hash::of(payload);
        self.body(at, &r.body, hash)?;
        self.prev = Some(hash);
        // Bounded by JOURNAL_RECORDS_MAX above.
        self.seq = seq.saturating_add(1);
        Ok(())
    }

    /// What a record's body does: the genesis pinned, an operation opened or ended.
    fn body(&mut self, at: u64, body: &JournalBody, hash: Hash) -> Result<(), LineageError> {
        match body {
            JournalBody::Genesis { producer_key } => {
                if producer_key != self.pins.producer {
                    return refuse(
                        Reason::LineageForeign,
                        at,
                        "genesis names another producer key".into(),
                    );
                }
                if self.pins.genesis.is_some_and(|g| g != hash) {
                    return refuse(
                        Reason::LineageForeign,
                        at,
                        "genesis is not the enrolled one".into(),
                    );
                }
                self.genesis = hash;
            }
            JournalBody::OpBegin { op, name } => self.begin(at, *op, name)?,
            JournalBody::OpEnd { op, outcome } => {
                let Some(name) = self.open.remove(op) else {
                    return refuse(
                        Reason::LineageMutated,
                        at,
                        format!("op-end {op} without an open op-begin"),
                    );
                };
                if *outcome == OpOutcome::Unknown {
                    self.unknown.push(UnknownOp { op: *op, name });
                }
            }
            JournalBody::RootStart { .. } | JournalBody::RootStop => {}
        }
        Ok(())
    }

    /// An operation opened: a printable name, a new id, within the bound of open ones.
    fn begin(&mut self, at: u64, op: u64, name: &str) -> Result<(), LineageError> {
        // Carried into the grant and printed: the one text rule holds for it.
        if let Err(why) = crate::text::check(name) {
            return refuse(
                Reason::LineageMutated,
                at,
                format!("op-begin {op}'s name {why}"),
            );
        }
        if op < self.next_op || self.open.len() >= OPEN_OPS_MAX {
            return refuse(
                Reason::LineageMutated,
                at,
                format!("op-begin {op} reuses an id or exceeds {OPEN_OPS_MAX} open"),
            );
        }
        // The largest op id leaves no next one: a writer could never continue.
        let Some(next) = op.checked_add(1) else {
            return refuse(
                Reason::LineageMutated,
                at,
                format!(
                    "op-begin {op} leaves no next op id (the largest is {})",
                    u64::MAX - 1
                ),
            );
        };
        self.next_op = next;
        self.open.insert(op, name.to_owned());
        Ok(())
    }

    /// The journal read whole (`len` bytes): its frontier, operations never ended counted
    /// as unknown too (recovery never decides them).
    fn frontier(mut self, len: u64) -> Result<Frontier, LineageError> {
        let open = std::mem::take(&mut self.open);
        self.unknown
            .extend(open.into_iter().map(|(op, name)| UnknownOp { op, name }));
        self.unknown.sort_by_key(|u| u.op);
        if self.unknown.len() > UNKNOWN_OPS_MAX {
            return refuse(
                Reason::LineageUnknownOverflow,
                len,
                format!(
                    "{} unknown operations > {UNKNOWN_OPS_MAX}",
                    self.unknown.len()
                ),
            );
        }
        Ok(Frontier {
            records: self.seq,
            // The journal is not empty and its first frame verified, so `seq >= 1`; checked.
            last_seq: self.seq.saturating_sub(1),
            last_hash: self.prev.unwrap_or(Hash::ZERO),
            genesis: self.genesis,
            unknown_ops: self.unknown,
            next_op: self.next_op,
        })
    }
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

//! Socket frames and messages (admin socket and grant socket).
//!
//! A frame is a 4-byte big-endian length, then that many bytes of one canonical CBOR
//! message. The length is checked against [`FRAME_BYTES_MAX`] *before* any allocation.

use ciborium::value::Value;

use crate::cbor::{self, Canonical, DecodeError, Fields};
use crate::grant::{Challenge, KeyProof};
use crate::limits::*;
use crate::reason::Reason;
use crate::types::{DeploymentId, Fact, Hash, PublicKey};

/// Prefixes `payload` with its length. Callers never build payloads over the frame bound.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    assert!(
        payload.len() <= FRAME_BYTES_MAX,
        "frame payload over FRAME_BYTES_MAX"
    );
    let mut out = Vec::with_capacity(payload.len().saturating_add(4));
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Reads a frame header: the payload length, refused if zero or over the bound.
pub fn frame_len(header: [u8; 4]) -> Result<usize, DecodeError> {
    let len = u32::from_be_bytes(header) as usize;
    if len == 0 {
        return Err(DecodeError::EmptyFrame);
    }
    if len > FRAME_BYTES_MAX {
        return Err(DecodeError::TooLarge {
            len,
            max: FRAME_BYTES_MAX,
        });
    }
    Ok(len)
}

/// Reads one frame's payload from a blocking reader (the caller sets its timeouts). The
/// length is checked before the buffer is allocated.
pub fn read_frame(r: &mut impl std::io::Read) -> std::io::Result<Vec<u8>> {
    let mut h = [0u8; 4];
    r.read_exact(&mut h)?;
    let len = frame_len(h).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    Ok(buf)
}

/// Reads and strictly decodes one message.
pub fn read_msg<T: Canonical>(r: &mut impl std::io::Read) -> std::io::Result<T> {
    let b = read_frame(r)?;
    T::from_bytes(&b).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Writes one message as a frame.
pub fn write_msg<T: Canonical>(w: &mut impl std::io::Write, m: &T) -> std::io::Result<()> {
    w.write_all(&frame(&m.to_bytes()))?;
    w.flush()
}

/// Arms the stream's next wait (read or write) to end within the given time, e.g. with
/// `set_read_timeout`: the caller's I/O, so this crate stays free of it.
pub type Arm<'a, S> = &'a mut dyn FnMut(&S, std::time::Duration) -> std::io::Result<()>;

fn timed_out(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("the whole {what} did not arrive within its deadline"),
    )
}

/// Fills `buf` before `deadline`: the remaining time is armed before every read, so a peer
/// that sends a byte at a time cannot stretch the wait beyond the deadline.
pub fn read_exact_by<S: std::io::Read>(
    s: &mut S,
    buf: &mut [u8],
    deadline: std::time::Instant,
    arm: Arm<'_, S>,
) -> std::io::Result<()> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(timed_out("message"));
        }
        arm(s, left)?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got = got.saturating_add(n),
            // An armed wait that ran out: the loop checks the deadline.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::Interrupted
                        | std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads one frame's payload, the whole of it before `deadline` (length checked before the
/// buffer is allocated).
pub fn read_frame_by<S: std::io::Read>(
    s: &mut S,
    deadline: std::time::Instant,
    arm: Arm<'_, S>,
) -> std::io::Result<Vec<u8>> {
    let mut h = [0u8; 4];
    read_exact_by(s, &mut h, deadline, arm)?;
    let len = frame_len(h).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
    let mut buf = vec![0u8; len];
    read_exact_by(s, &mut buf, deadline, arm)?;
    Ok(buf)
}

/// Reads and strictly decodes one message, the whole of it before `deadline`.
pub fn read_msg_by<T: Canonical, S: std::io::Read>(
    s: &mut S,
    deadline: std::time::Instant,
    arm: Arm<'_, S>,
) -> std::io::Result<T> {
    let b = read_frame_by(s, deadline, arm)?;
    T::from_bytes(&b).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Writes all of `bytes` before `deadline` (armed before every write): a peer that reads a
/// byte at a time cannot hold the writer beyond it.
pub fn write_all_by<S: std::io::Write>(
    s: &mut S,
    bytes: &[u8],
    deadline: std::time::Instant,
    arm: Arm<'_, S>,
) -> std::io::Result<()> {
    let mut sent = 0;
    while sent < bytes.len() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the peer did not take the whole message within its deadline",
            ));
        }
        arm(s, left)?;
        match s.write(&bytes[sent..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => sent = sent.saturating_add(n),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::Interrupted
                        | std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
        }
    }
    s.flush()
}

/// Longest refusal, progress or outcome text a receiver accepts (the decoders' bound).
/// Senders clip to it with [`refused`] and [`bounded`], so a long observation (a deep
/// cgroup path) never turns a clean refusal into a malformed frame.
pub const WIRE_TEXT_BYTES_MAX: usize = 4 * TEXT_BYTES_MAX;

/// Longest progress step name a receiver accepts.
pub const STEP_BYTES_MAX: usize = 64;

/// A deployment as `hello` names it: its id or a unique prefix of it, 1 to 32 lowercase hex
/// digits. The consumer checks its `--deployment` with this before it connects.
pub fn check_deployment_prefix(s: &str) -> Result<(), &'static str> {
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    match !s.is_empty() && s.len() <= 2 * DEPLOYMENT_ID_BYTES && s.bytes().all(hex) {
        true => Ok(()),
        false => Err("deployment must be 1 to 32 lowercase hex digits"),
    }
}

/// The one way to build a grant-socket refusal: the detail clipped to the receiver's bound.
pub fn refused(reason: Reason, detail: &str) -> GrantMsg {
    GrantMsg::Refused {
        reason,
        detail: crate::types::clip(detail, WIRE_TEXT_BYTES_MAX),
    }
}

/// An admin event with every free text clipped to the receiver's bounds; applied to every
/// event before it is sent.
pub fn bounded(e: AdminEvent) -> AdminEvent {
    use crate::types::clip;
    match e {
        AdminEvent::Progress { step, detail } => AdminEvent::Progress {
            step: clip(&step, STEP_BYTES_MAX),
            detail: clip(&detail, WIRE_TEXT_BYTES_MAX),
        },
        AdminEvent::Outcome {
            outcome,
            reasons,
            detail,
            grant,
        } => AdminEvent::Outcome {
            outcome,
            reasons,
            detail: clip(&detail, WIRE_TEXT_BYTES_MAX),
            grant,
        },
        other => other,
    }
}

/// An issuance's verdict as the admin socket carries it; [`Verdict::outcome`] is the
/// command outcome it maps to (docs/EXIT-CODES.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Granted,
    Refused,
    Uncertain,
    Busy,
    Internal,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Granted => "granted",
            Verdict::Refused => "refused",
            Verdict::Uncertain => "uncertain",
            Verdict::Busy => "busy",
            Verdict::Internal => "internal",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "granted" => Verdict::Granted,
            "refused" => Verdict::Refused,
            "uncertain" => Verdict::Uncertain,
            "busy" => Verdict::Busy,
            "internal" => Verdict::Internal,
            _ => return None,
        })
    }
    /// The command outcome (and so the exit code) of docs/EXIT-CODES.md.
    pub fn outcome(self) -> crate::Outcome {
        match self {
            Verdict::Granted => crate::Outcome::Success,
            Verdict::Refused => crate::Outcome::Refused,
            Verdict::Uncertain => crate::Outcome::Uncertain,
            Verdict::Busy => crate::Outcome::Busy,
            Verdict::Internal => crate::Outcome::Internal,
        }
    }
}

/// Admin socket, client to daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminRequest {
    Recover {
        deployment: DeploymentId,
        approve_ready: Option<Hash>,
        consumer_wait_seconds: u64,
    },
}

impl Canonical for AdminRequest {
    fn to_value(&self) -> Value {
        match self {
            AdminRequest::Recover {
                deployment,
                approve_ready,
                consumer_wait_seconds,
            } => cbor::array(vec![
                cbor::text("recover"),
                cbor::bytes(&deployment.0),
                cbor::opt(approve_ready, |h| cbor::bytes(&h.0)),
                cbor::uint(*consumer_wait_seconds),
            ]),
        }
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "admin-request", 4)?;
        f.expect_text("recover")?;
        Ok(AdminRequest::Recover {
            deployment: DeploymentId(f.bytes()?),
            approve_ready: f.opt(|v| cbor::as_bytes(v, "approve-ready").map(Hash))?,
            consumer_wait_seconds: f.uint()?,
        })
    }
}

/// Admin socket, daemon to client: a stream of events ending with one `Outcome` event (its
/// `Verdict`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminEvent {
    /// A step started or finished: `step` is a stable name, `detail` free text.
    Progress { step: String, detail: String },
    /// One observed fact.
    Fact(Fact),
    /// A durable record was appended: its kind, sequence number and hash.
    Record { kind: String, seq: u64, hash: Hash },
    /// The end: the outcome, every reason code, a detail line, and the signed grant bytes
    /// when granted.
    Outcome {
        outcome: Verdict,
        reasons: Vec<Reason>,
        detail: String,
        grant: Option<Vec<u8>>,
    },
}

const REASONS_MAX: usize = FACTS_MAX + 4;

impl Canonical for AdminEvent {
    fn to_value(&self) -> Value {
        match self {
            AdminEvent::Progress { step, detail } => cbor::array(vec![
                cbor::text("progress"),
                cbor::text(step),
                cbor::text(detail),
            ]),
            AdminEvent::Fact(fact) => cbor::array(vec![cbor::text("fact"), fact.to_value()]),
            AdminEvent::Record { kind, seq, hash } => cbor::array(vec![
                cbor::text("record"),
                cbor::text(kind),
                cbor::uint(*seq),
                cbor::bytes(&hash.0),
            ]),
            AdminEvent::Outcome {
                outcome,
                reasons,
                detail,
                grant,
            } => cbor::array(vec![
                cbor::text("outcome"),
                cbor::text(outcome.as_str()),
                cbor::array(reasons.iter().map(|r| r.to_value()).collect()),
                cbor::text(detail),
                cbor::opt(grant, |g| cbor::bytes(g)),
            ]),
        }
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let kind = kind_of(&v, "admin-event")?;
        Ok(match kind.as_str() {
            "progress" => {
                let mut f = Fields::open(v, "progress", 3)?;
                f.expect_text("progress")?;
                AdminEvent::Progress {
                    step: f.text(STEP_BYTES_MAX)?,
                    detail: f.text(WIRE_TEXT_BYTES_MAX)?,
                }
            }
            "fact" => {
                let mut f = Fields::open(v, "fact-event", 2)?;
                f.expect_text("fact")?;
                AdminEvent::Fact(Fact::from_value(f.field()?)?)
            }
            "record" => {
                let mut f = Fields::open(v, "record-event", 4)?;
                f.expect_text("record")?;
                AdminEvent::Record {
                    kind: f.text(16)?,
                    seq: f.uint()?,
                    hash: Hash(f.bytes()?),
                }
            }
            "outcome" => {
                let mut f = Fields::open(v, "outcome", 5)?;
                f.expect_text("outcome")?;
                let o = f.text(16)?;
                let outcome = Verdict::parse(&o).ok_or_else(|| {
                    DecodeError::schema("outcome", format!("unknown outcome {o:?}"))
                })?;
                AdminEvent::Outcome {
                    outcome,
                    reasons: f.list(REASONS_MAX, Reason::from_value)?,
                    detail: f.text(WIRE_TEXT_BYTES_MAX)?,
                    grant: f.opt(|v| match v {
                        Value::Bytes(b) if b.len() <= RECORD_BYTES_MAX => Ok(b),
                        _ => Err(DecodeError::schema(
                            "outcome",
                            "grant must be bytes within bounds",
                        )),
                    })?,
                }
            }
            k => {
                return Err(DecodeError::schema(
                    "admin-event",
                    format!("unknown kind {k:?}"),
                ))
            }
        })
    }
}

/// Grant socket messages, both directions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrantMsg {
    /// Consumer to daemon, first: which deployment, and the key it will answer with.
    /// (`deployment` is the id or a unique prefix of it, 1 to 32 lowercase hex digits.)
    Hello { deployment: String, key: PublicKey },
    /// Daemon to consumer, right after `hello`: the prefix resolved to this deployment;
    /// prove your key by signing this (bound to this connection).
    Prove(KeyProof),
    /// Consumer to daemon: the key-proof signature.
    Proof([u8; SIGNATURE_BYTES]),
    /// Daemon to consumer: authenticated at transport level, waiting for the operator.
    Accepted,
    /// Daemon to consumer: sign this.
    Challenge(Challenge),
    /// Consumer to daemon: the custody signature.
    Custody([u8; SIGNATURE_BYTES]),
    /// Daemon to consumer: the signed grant bytes and the checkpoint of the epoch log with
    /// its receipt (a C2SP signed note, docs/AUDITOR.md "Checkpoints"); the fence fds ride
    /// on this frame.
    Grant { grant: Vec<u8>, checkpoint: String },
    /// Daemon to consumer: refused, nothing granted. (A waiting consumer whose epoch a
    /// recovery found used is told `epoch-consumed`.)
    Refused { reason: Reason, detail: String },
    /// Consumer to daemon, after the grant: its file is durable (written to a temporary
    /// name, fsynced, linked into place without replacing anything, the directory fsynced)
    /// and is exactly the bytes whose sha256 this is. repochd reports `granted` only on
    /// this acknowledgement (docs/PROTOCOL.md, "The grant socket").
    Persisted { grant_sha256: Hash },
    /// Daemon to consumer, the handoff's last word: the acknowledgement of the grant whose
    /// sha256 this is was taken from the authenticated consumer, still alive and alone on
    /// its connection, and repochd reports `granted`. The consumer starts the new root only
    /// on it; without it (a refusal, the connection closed, or nothing within twice
    /// `LAST_WORD_SECONDS_MAX`) the outcome is uncertain on both sides.
    Granted { grant_sha256: Hash },
}

impl Canonical for GrantMsg {
    fn to_value(&self) -> Value {
        match self {
            GrantMsg::Hello { deployment, key } => cbor::array(vec![
                cbor::text("hello"),
                cbor::text(deployment),
                cbor::bytes(&key.0),
            ]),
            GrantMsg::Prove(p) => cbor::array(vec![cbor::text("prove"), p.to_value()]),
            GrantMsg::Proof(s) => cbor::array(vec![cbor::text("proof"), cbor::bytes(s)]),
            GrantMsg::Accepted => cbor::array(vec![cbor::text("accepted")]),
            GrantMsg::Challenge(c) => cbor::array(vec![cbor::text("challenge"), c.to_value()]),
            GrantMsg::Custody(s) => cbor::array(vec![cbor::text("custody"), cbor::bytes(s)]),
            GrantMsg::Grant { grant, checkpoint } => cbor::array(vec![
                cbor::text("grant"),
                cbor::bytes(grant),
                cbor::text(checkpoint),
            ]),
            GrantMsg::Refused { reason, detail } => cbor::array(vec![
                cbor::text("refused"),
                reason.to_value(),
                cbor::text(detail),
            ]),
            GrantMsg::Persisted { grant_sha256 } => {
                cbor::array(vec![cbor::text("persisted"), cbor::bytes(&grant_sha256.0)])
            }
            GrantMsg::Granted { grant_sha256 } => {
                cbor::array(vec![cbor::text("granted"), cbor::bytes(&grant_sha256.0)])
            }
        }
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let kind = kind_of(&v, "grant-msg")?;
        match kind.as_str() {
            "hello" | "prove" | "proof" | "accepted" | "challenge" | "custody" => {
                GrantMsg::handshake_from_value(&kind, v)
            }
            "grant" | "refused" | "persisted" | "granted" => GrantMsg::handoff_from_value(&kind, v),
            k => Err(unknown_kind("grant-msg", k)),
        }
    }
}

impl GrantMsg {
    /// Decodes a message of the handshake, before any grant (`hello`, `prove`, `proof`,
    /// `accepted`, `challenge`, `custody`), `kind` being its first field.
    fn handshake_from_value(kind: &str, v: Value) -> Result<Self, DecodeError> {
        Ok(match kind {
            "hello" => {
                let mut f = Fields::open(v, "hello", 3)?;
                f.expect_text("hello")?;
                let deployment = f.text(2 * DEPLOYMENT_ID_BYTES)?;
                check_deployment_prefix(&deployment)
                    .map_err(|why| DecodeError::schema("hello", why))?;
                GrantMsg::Hello {
                    deployment,
                    key: PublicKey(f.bytes()?),
                }
            }
            "prove" => {
                let mut f = Fields::open(v, "prove", 2)?;
                f.expect_text("prove")?;
                GrantMsg::Prove(KeyProof::from_value(f.field()?)?)
            }
            "proof" => {
                let mut f = Fields::open(v, "proof", 2)?;
                f.expect_text("proof")?;
                GrantMsg::Proof(f.bytes()?)
            }
            "accepted" => {
                let mut f = Fields::open(v, "accepted", 1)?;
                f.expect_text("accepted")?;
                GrantMsg::Accepted
            }
            "challenge" => {
                let mut f = Fields::open(v, "challenge-msg", 2)?;
                f.expect_text("challenge")?;
                GrantMsg::Challenge(Challenge::from_value(f.field()?)?)
            }
            "custody" => {
                let mut f = Fields::open(v, "custody", 2)?;
                f.expect_text("custody")?;
                GrantMsg::Custody(f.bytes()?)
            }
            k => return Err(unknown_kind("grant-msg", k)),
        })
    }

    /// Decodes a message of the grant's handoff and its outcome (`grant`, `refused`,
    /// `persisted`, `granted`), `kind` being its first field.
    fn handoff_from_value(kind: &str, v: Value) -> Result<Self, DecodeError> {
        Ok(match kind {
            "grant" => {
                let mut f = Fields::open(v, "grant-msg", 3)?;
                f.expect_text("grant")?;
                GrantMsg::Grant {
                    grant: f.bstr(RECORD_BYTES_MAX)?,
                    checkpoint: f.text(CHECKPOINT_BYTES_MAX)?,
                }
            }
            "refused" => {
                let mut f = Fields::open(v, "refused", 3)?;
                f.expect_text("refused")?;
                GrantMsg::Refused {
                    reason: Reason::from_value(f.field()?)?,
                    detail: f.text(WIRE_TEXT_BYTES_MAX)?,
                }
            }
            "persisted" => {
                let mut f = Fields::open(v, "persisted", 2)?;
                f.expect_text("persisted")?;
                GrantMsg::Persisted {
                    grant_sha256: Hash(f.bytes()?),
                }
            }
            "granted" => {
                let mut f = Fields::open(v, "granted", 2)?;
                f.expect_text("granted")?;
                GrantMsg::Granted {
                    grant_sha256: Hash(f.bytes()?),
                }
            }
            k => return Err(unknown_kind("grant-msg", k)),
        })
    }
}

/// The kind of a tagged message (`what`: `admin-event`, `grant-msg`): the text its array
/// opens with, or a schema error naming `what`.
fn kind_of(v: &Value, what: &'static str) -> Result<String, DecodeError> {
    match v {
        Value::Array(items) => match items.first() {
            Some(Value::Text(t)) => Ok(t.clone()),
            _ => Err(DecodeError::schema(what, "expected a kind")),
        },
        _ => Err(DecodeError::schema(what, "expected an array")),
    }
}

/// The schema error for a tagged message (`what`) of a kind it does not know.
fn unknown_kind(what: &'static str, kind: &str) -> DecodeError {
    DecodeError::schema(what, format!("unknown kind {kind:?}"))
}

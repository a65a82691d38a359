//! A log verified (docs/PROTOCOL.md, "The epoch log"): its frames read, each record
//! checked against the issuer key, the chain and the grammar of the epoch, and the log
//! classified; a torn tail told apart from a corrupt record.

use super::*;
/// What reading a log concluded about its epoch (docs/PROTOCOL.md, "The epoch log").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Classification {
    Enrolled,
    Intended,
    Consumed,
    /// Grant dispatched or lost: uncertain.
    Receipted,
    Withheld,
    /// After the last valid record, what a crash can leave: a record cut short, zeros, or
    /// bytes that form no valid record (see [`verify_log`]).
    Torn,
    /// A record no crash explains: undecodable with a valid record after it, or signed by
    /// the issuer but out of sequence, chain or order.
    Corrupt,
    /// A well-formed record whose signature does not verify under the issuer key.
    Forged,
    /// A record validly signed by the issuer for another deployment.
    Foreign,
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
            Classification::Forged => "forged",
            Classification::Foreign => "foreign",
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
            Classification::Forged => Some(Reason::EpochForged),
            Classification::Foreign => Some(Reason::EpochForeign),
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
        let rest = bytes.get(off..).unwrap_or_default();
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
        // `len <= max_record`, far below usize::MAX: the sum cannot overflow; checked anyway.
        let end = len.saturating_add(4);
        let Some(payload) = rest.get(4..end) else {
            done = true;
            return Some((
                at,
                Err((
                    true,
                    format!(
                        "record of {len} bytes, only {} present",
                        rest.len().saturating_sub(4)
                    ),
                )),
            ));
        };
        off = off.saturating_add(end);
        Some((at, Ok(payload)))
    })
}

/// Sector size assumed for out-of-order loss: a crash may zero the file from any
/// multiple of it to the end.
pub const SECTOR_BYTES: usize = 512;

/// What is wrong with the first record that fails, before crash tails are told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    /// The frame is cut short or its length is impossible: framing is lost here.
    Torn,
    /// The frame is whole but its payload is not a strictly encoded signed record.
    Undecodable,
    /// Decodes, but the issuer signature does not verify.
    Forged,
    /// Validly signed by the issuer, for another deployment.
    Foreign,
    /// Validly signed by the issuer, but out of sequence, chain or phase order.
    Corrupt,
}

/// Whether a sector of the whole frame at `at` was lost: an aligned sector of the file,
/// from the first boundary at or after `at` and starting inside the frame, that reads as
/// zeros to its own end (or to the end of the file, for its last, partial sector). A
/// sector of the last, unsynced append that never reached the disk, while a later one of
/// it did (out-of-order sector loss) or to its end (delayed allocation): the record then
/// decodes with zeros inside and fails its signature or its decoding, a crash tail unless a
/// valid record follows it. A sector is lost whole: zeros ending where the frame's length
/// says, other bytes after them in the sector, are none; and zeros after the frame excuse
/// nothing, as it was whole and synced before any later append began. (Zeros from the
/// record's own start fail its framing.)
pub(crate) fn lost_sector(bytes: &[u8], at: usize) -> bool {
    let len = bytes
        .get(at..at.saturating_add(4))
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map_or(0, |b| u32::from_be_bytes(b) as usize);
    let end = at.saturating_add(4).saturating_add(len).min(bytes.len());
    let first = at.div_ceil(SECTOR_BYTES).saturating_mul(SECTOR_BYTES);
    bytes
        .get(first..)
        .unwrap_or_default()
        .chunks(SECTOR_BYTES)
        .take(end.saturating_sub(first).div_ceil(SECTOR_BYTES))
        .any(|c| c.iter().all(|b| *b == 0))
}

/// Whether any whole frame after the one at `at` is a record signed by the issuer: then an
/// undecodable record at `at` is damage inside the log, not a crash tail. Bounded by
/// `LOG_RECORDS_MAX` frames.
pub(crate) fn valid_record_after(bytes: &[u8], at: usize, issuer: &PublicKey) -> bool {
    let rest = bytes.get(at..).unwrap_or_default();
    frames(rest, RECORD_BYTES_MAX)
        .skip(1)
        .take(LOG_RECORDS_MAX)
        .map_while(|(_, f)| f.ok())
        .any(|p| SignedEpochRecord::from_bytes(p).is_ok_and(|r| r.verify(issuer)))
}

/// Reads and verifies an epoch log. Never panics, whatever the bytes.
///
/// `expected` pins the deployment id when known. Every record must decode strictly, carry a
/// valid issuer signature, the genesis's deployment id, the next sequence number, the hash of
/// the previous record, and follow the phase order.
///
/// The first failing record is classified so that what a crash can produce is never read
/// as tampering (docs/REASONS.md): `torn` for a record cut short, an impossible length
/// (framing lost), or, with no valid record after it, zeros from a sector boundary to the
/// end or a whole zero sector inside the record (a sector lost out of order); `forged` for
/// a well-formed record whose signature fails; `foreign` for an issuer-signed record of
/// another deployment; `corrupt` for everything else (a whole frame that is no signed
/// record with no sector of it lost, damage followed by valid records, issuer-signed
/// records out of order, a log over its bound).
pub fn verify_log(bytes: &[u8], issuer: &PublicKey, expected: Option<DeploymentId>) -> LogReport {
    verify_log_proven(bytes, issuer, expected, &HashSet::new())
}

/// [`verify_log`], with the records whose payload hash is in `proven` taken as carrying a
/// valid issuer signature (what [`batch_proven`] returns: each one's strict verification
/// would hold); every other record is verified strictly, as by `verify_log`, so the report
/// is the same.
pub fn verify_log_proven(
    bytes: &[u8],
    issuer: &PublicKey,
    expected: Option<DeploymentId>,
    proven: &HashSet<Hash>,
) -> LogReport {
    let mut records: Vec<VerifiedRecord> = Vec::new();
    let mut problem = None;
    if bytes.len() > LOG_BYTES_MAX {
        problem = Some((
            0,
            Problem::Corrupt,
            format!("log is {} bytes, over {LOG_BYTES_MAX}", bytes.len()),
        ));
    } else {
        for (at, frame) in frames(bytes, RECORD_BYTES_MAX) {
            let checked = frame
                .map_err(|(_, why)| (Problem::Torn, why))
                .and_then(|payload| check_record(&records, at, payload, issuer, expected, proven));
            match checked {
                Ok(r) => records.push(r),
                Err((kind, why)) => {
                    problem = Some((at, kind, why));
                    break;
                }
            }
        }
    }
    let classification = match (&problem, records.last()) {
        (Some((at, kind, _)), _) => {
            // `at` is an offset into `bytes`, so it fits in usize.
            let at = usize::try_from(*at).unwrap_or(usize::MAX);
            match kind {
                Problem::Torn => Classification::Torn,
                Problem::Undecodable | Problem::Forged
                    if lost_sector(bytes, at) && !valid_record_after(bytes, at, issuer) =>
                {
                    Classification::Torn
                }
                // A whole frame of other bytes, no sector of it lost: no crash leaves one
                // (an interrupted append leaves a record cut short, or zeros).
                Problem::Undecodable => Classification::Corrupt,
                Problem::Forged => Classification::Forged,
                Problem::Foreign => Classification::Foreign,
                Problem::Corrupt => Classification::Corrupt,
            }
        }
        (None, None) => Classification::Empty,
        (None, Some(r)) => Classification::of(r.record.record.body.kind()),
    };
    LogReport {
        classification,
        records,
        problem: problem.map(|(at, _, why)| (at, why)),
    }
}

/// Checks one record against the verified prefix; on failure, what kind of problem it is.
pub(crate) fn check_record(
    records: &[VerifiedRecord],
    at: u64,
    payload: &[u8],
    issuer: &PublicKey,
    expected: Option<DeploymentId>,
    proven: &HashSet<Hash>,
) -> Result<VerifiedRecord, (Problem, String)> {
    let n = records.len();
    let fail = |kind: Problem, why: String| Err((kind, format!("record {n}: {why}")));
    if n == LOG_RECORDS_MAX {
        return fail(
            Problem::Corrupt,
            format!("more than {LOG_RECORDS_MAX} records"),
        );
    }
    let rec = match SignedEpochRecord::from_bytes(payload) {
        Ok(r) => r,
        Err(e) => {
            let (kind, why) = judge_undecodable(payload, issuer, e);
            return fail(kind, why);
        }
    };
    let hash = Hash::of(payload);
    if !proven.contains(&hash) && !rec.verify(issuer) {
        return fail(Problem::Forged, "bad issuer signature".into());
    }
    let checked = check_chained(records, &rec.record, expected)
        .and_then(|()| check_body(records, &rec.record, issuer));
    if let Err((kind, why)) = checked {
        return fail(kind, why);
    }
    Ok(VerifiedRecord {
        offset: at,
        hash,
        record: rec,
    })
}

/// Checks a signed record's place in the chain after the verified prefix `records`: the
/// deployment of the records before it (or `expected`), the next sequence number, the
/// hash of the previous record, and the phase order.
fn check_chained(
    records: &[VerifiedRecord],
    r: &EpochRecord,
    expected: Option<DeploymentId>,
) -> Result<(), (Problem, String)> {
    let prev = records.last();
    if let Some(d) = prev.map(|p| p.record.record.deployment).or(expected) {
        if r.deployment != d {
            return Err((
                Problem::Foreign,
                format!("belongs to deployment {}, expected {d}", r.deployment),
            ));
        }
    }
    if r.seq != records.len() as u64 {
        return Err((Problem::Corrupt, format!("sequence number {}", r.seq)));
    }
    if r.prev != prev.map_or(Hash::ZERO, |p| p.hash) {
        return Err((Problem::Corrupt, "broken hash chain".into()));
    }
    let prev_kind = prev.map(|p| p.record.record.body.kind());
    if !Kind::may_follow(prev_kind, r.body.kind()) {
        return Err((
            Problem::Corrupt,
            format!(
                "{} may not follow {}",
                r.body.kind().as_str(),
                prev_kind.map_or("nothing", Kind::as_str)
            ),
        ));
    }
    Ok(())
}

/// Checks what a chained record's body binds: a genesis names this issuer key, a consume
/// answers a challenge for this deployment's intent, a receipt carries a grant for this
/// epoch.
fn check_body(
    records: &[VerifiedRecord],
    r: &EpochRecord,
    issuer: &PublicKey,
) -> Result<(), (Problem, String)> {
    if let EpochBody::Genesis { issuer_key, .. } = &r.body {
        if issuer_key != issuer {
            return Err((Problem::Corrupt, "genesis names another issuer key".into()));
        }
    }
    if let EpochBody::Consume { challenge, .. } = &r.body {
        // The custody challenge it answers names this deployment and the intent before it.
        let intent = records.last().map_or(Hash::ZERO, |p| p.hash);
        if challenge.deployment != r.deployment || challenge.intent != intent {
            return Err((
                Problem::Corrupt,
                format!(
                    "the consume answers a challenge for deployment {} and intent {}, not this deployment's intent {intent}",
                    challenge.deployment, challenge.intent
                ),
            ));
        }
    }
    if let EpochBody::Receipt { grant } = &r.body {
        if let Err(why) = receipt_binds(records, grant, issuer) {
            return Err((Problem::Corrupt, format!("the receipt's grant {why}")));
        }
    }
    Ok(())
}

/// A whole frame whose payload is not a strictly encoded signed record: is it at least a
/// signed-record envelope, `[record, signature]` in strict CBOR with a 64-byte signature?
/// Then its signature decides, as for a record that decodes: one that does not verify
/// under the issuer key is `forged` (a record altered after signing, a reason code changed
/// among them); one that verifies is `corrupt` (the issuer key signed what no valid record
/// is). Only a payload that is not even an envelope is judged by the crash rules
/// (undecodable).
pub(crate) fn judge_undecodable(
    payload: &[u8],
    issuer: &PublicKey,
    e: DecodeError,
) -> (Problem, String) {
    let envelope = cbor::decode_strict(payload, RECORD_BYTES_MAX)
        .ok()
        .and_then(|v| match v {
            Value::Array(mut items) if items.len() == 2 => {
                let signature = match items.pop() {
                    Some(Value::Bytes(b)) => <[u8; SIGNATURE_BYTES]>::try_from(b).ok(),
                    _ => None,
                }?;
                Some((cbor::encode(&items.pop()?), signature))
            }
            _ => None,
        });
    match envelope {
        None => (Problem::Undecodable, e.to_string()),
        Some((record, sig)) if sign::verify(issuer, Context::EpochRecord, &record, &sig) => (
            Problem::Corrupt,
            format!("signed by the issuer key, but not a valid record: {e}"),
        ),
        Some(_) => (
            Problem::Forged,
            format!("bad issuer signature over a record that does not decode: {e}"),
        ),
    }
}

/// A receipt's grant, checked against the records it follows (docs/PROTOCOL.md, "The epoch
/// log"): a grant strictly encoded and signed by the issuer key, for this deployment, naming
/// the intent and consume records before it by hash, the intent's evidence, the key that
/// answered the consume's custody challenge, and the consume's fencing token.
pub(crate) fn receipt_binds(
    records: &[VerifiedRecord],
    bytes: &[u8],
    issuer: &PublicKey,
) -> Result<(), crate::Invalid> {
    let g = crate::grant::SignedGrant::from_bytes(bytes)
        .map_err(|e| format!("does not decode: {e}"))?;
    if !g.verify(issuer) {
        return Err("is not signed by the issuer key".into());
    }
    let g = g.grant;
    let at = |i: usize| records.get(i).map(|r| (r.hash, &r.record.record));
    let (Some((intent, i)), Some((consume, c))) = (at(1), at(2)) else {
        return Err("follows no intent and consume".into());
    };
    let mut wrong = Vec::new();
    if g.deployment != i.deployment {
        wrong.push("deployment");
    }
    if g.intent != intent {
        wrong.push("intent");
    }
    if g.consume != consume {
        wrong.push("consume");
    }
    if !matches!(&i.body, EpochBody::Intent { evidence, .. } if *evidence == g.evidence) {
        wrong.push("evidence");
    }
    match &c.body {
        EpochBody::Consume {
            challenge,
            custody,
            fencing,
            ..
        } => {
            if !challenge.check(&g.consumer_key, custody) {
                wrong.push("consumer key (not the one that answered the custody challenge)");
            }
            if *fencing != g.fencing {
                wrong.push("fencing token");
            }
        }
        _ => wrong.push("consume"),
    }
    match wrong.is_empty() {
        true => Ok(()),
        false => Err(format!("names another {}", wrong.join(", ")).into()),
    }
}

/// The payload hashes of the records in `logs` whose issuer signature a batch verification
/// proves (`sign::proven_by_batch`: exactly those whose strict verification holds, or
/// fewer), for [`verify_log_proven`]. Reads each log as `verify_log` does, as far as its
/// frames decode, bounded by `LOG_RECORDS_MAX` frames per log; a log over `LOG_BYTES_MAX`
/// contributes nothing.
pub fn batch_proven(logs: &[&[u8]], issuer: &PublicKey) -> HashSet<Hash> {
    let mut hashes = Vec::new();
    let mut records = Vec::new();
    for bytes in logs.iter().filter(|b| b.len() <= LOG_BYTES_MAX) {
        for payload in frames(bytes, RECORD_BYTES_MAX)
            .take(LOG_RECORDS_MAX)
            .map_while(|(_, f)| f.ok())
        {
            if let Ok(r) = SignedEpochRecord::from_bytes(payload) {
                hashes.push(Hash::of(payload));
                records.push((r.record.to_bytes(), r.signature));
            }
        }
    }
    let items: Vec<(&[u8], &[u8; SIGNATURE_BYTES])> =
        records.iter().map(|(m, s)| (m.as_slice(), s)).collect();
    sign::proven_by_batch(issuer, Context::EpochRecord, &items)
        .into_iter()
        .zip(hashes)
        .filter_map(|(ok, h)| ok.then_some(h))
        .collect()
}

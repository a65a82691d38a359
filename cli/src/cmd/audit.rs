//! `repoch audit`: epoch logs and the chain between deployments, verified offline; with
//! `--checkpoint`, whether a log extends a checkpoint signed earlier.

use std::path::Path;

use repoch_issuer::store;
use repoch_issuer::Refusal;
use repoch_protocol::{Outcome, Reason};
use serde_json::json;

use super::common::Ctx;
use super::CmdResult;
use crate::exit::{Failure, Why};

/// `audit --checkpoint`: the note verified under the issuer key, and whether the log it
/// names (by origin) among `logs` extends it.
fn audit_checkpoint(
    note: &Path,
    issuer: &repoch_protocol::PublicKey,
    logs: &[crate::audit::Audited],
) -> Result<(serde_json::Value, Option<Refusal>), Failure> {
    use repoch_protocol::checkpoint::{Checkpoint, KEY_NAME};
    let invalid = |observed: String| {
        Failure::refused(Refusal::new(
            Reason::CheckpointInvalid,
            note.display().to_string(),
            format!("a note signed by {KEY_NAME} under the issuer key, about a log given"),
            observed,
        ))
    };
    // A note over the bound is an invalid checkpoint, as every reader judges it
    // (`Checkpoint::verify`); a path that cannot be read is a usage error.
    let max = repoch_protocol::limits::CHECKPOINT_BYTES_MAX;
    let bytes = repoch_sys::fs::read_regular(note, max, repoch_sys::fs::Links::Refuse).map_err(
        |e| match e.kind() {
            std::io::ErrorKind::FileTooLarge => invalid(format!("{e}")),
            _ => Failure::Usage(format!("{}: {e}", crate::audit::shown(note)).into()),
        },
    )?;
    let text = String::from_utf8(bytes).map_err(|_| invalid("not UTF-8".into()))?;
    let c = Checkpoint::verify(&text, KEY_NAME, issuer).map_err(|e| invalid(e.to_string()))?;
    let Some(a) = notes_log(&c, logs) else {
        return Err(invalid(format!("origin {:?}: no such log given", c.origin)));
    };
    let (extends, reason, now) = match c.extended_by(&a.report) {
        Ok(x) => (true, None, x.current),
        Err(i) => (false, Some(i.reason), i.current),
    };
    let j = json!({"origin": c.origin, "path": crate::audit::shown(&a.path), "size": c.size, "head": c.head.to_hex(),
                   "log": {"size": now.0, "head": now.1.to_hex()}, "extends": extends,
                   "reason": reason.map(|r| r.as_str())});
    let refusal = reason.map(|r| {
        Refusal::new(
            r,
            a.path.to_string_lossy(),
            format!(
                "a log extending the checkpoint: size {} head {}",
                c.size, c.head
            ),
            format!("size {} head {}", now.0, now.1),
        )
    });
    Ok((j, refusal))
}

/// The log the note `c` is about: among those whose records, or whose state directory's
/// name, say its deployment, the first that does not extend it (the finding, whatever the
/// order the logs were given in), else the first; when none says it, the one log given that
/// names no deployment at all (a log emptied or zeroed is what the note's rollback is
/// about).
fn notes_log<'a>(
    c: &repoch_protocol::checkpoint::Checkpoint,
    logs: &'a [crate::audit::Audited],
) -> Option<&'a crate::audit::Audited> {
    use repoch_protocol::checkpoint::origin;
    let deployment = |a: &crate::audit::Audited| {
        a.report
            .deployment()
            .or_else(|| crate::audit::expected_deployment(&a.path))
    };
    let named: Vec<&crate::audit::Audited> = logs
        .iter()
        .filter(|a| deployment(a).map(|d| origin(&d)).as_deref() == Some(&c.origin))
        .collect();
    let nameless: Vec<&crate::audit::Audited> =
        logs.iter().filter(|a| deployment(a).is_none()).collect();
    match (named.first(), nameless.as_slice()) {
        (Some(first), _) => Some(
            named
                .iter()
                .find(|a| c.extended_by(&a.report).is_err())
                .unwrap_or(first),
        ),
        (None, [one]) => Some(one),
        (None, _) => None,
    }
}

/// `audit --registry`: every fleet deployment and host record under the registry's
/// prefix, and each log compared with the claim naming it (crate::audit::compare_fleet).
fn audit_registry(
    file: &Path,
    logs: &[crate::audit::Audited],
    issuer: &repoch_protocol::PublicKey,
) -> Result<(Registered, Option<Refusal>), Failure> {
    let bytes = crate::audit::read_bounded(file, repoch_protocol::limits::MANIFEST_TOML_BYTES_MAX)
        .map_err(|e| Failure::Usage(e.into()))?;
    let text = String::from_utf8(bytes).map_err(|_| {
        Failure::Usage(format!("{}: not UTF-8 text", crate::audit::shown(file)).into())
    })?;
    let r = repoch_issuer::enroll::registry_of(&text)
        .map_err(|e| Failure::Usage(format!("{}: {e}", crate::audit::shown(file)).into()))?;
    let mut named = crate::audit::Naming::new(logs, issuer, &r.prefix);
    let mut read = read_registry(&r, &mut named)?;
    let (rows, finding) = log_rows(logs, &crate::audit::compare_fleet(&named, logs));
    read.logs = rows;
    Ok((read, finding))
}

/// What `audit --registry` read under a prefix, as it reports it: the fleet deployments
/// and the host records are spooled, a row a line, so that memory holds a page of keys
/// however many an etcd writer planted (docs/AUDITOR.md, "The fleet registry").
#[derive(Debug, serde::Serialize)]
struct Registered {
    prefix: String,
    cluster: String,
    revision: i64,
    fleets: Spool,
    hosts: Spool,
    logs: Vec<serde_json::Value>,
}

/// Rows written to an unnamed temporary file, one JSON value a line, read back once to
/// be printed: as many as the registry holds, in bounded memory.
#[derive(Debug)]
struct Spool {
    file: std::cell::RefCell<std::io::BufWriter<std::fs::File>>,
    rows: u64,
}

impl Spool {
    fn new() -> Result<Spool, Failure> {
        let file = tempfile::tempfile().map_err(|e| {
            Failure::Usage(format!("a temporary file for the registry's rows: {e}").into())
        })?;
        Ok(Spool {
            file: std::io::BufWriter::new(file).into(),
            rows: 0,
        })
    }

    fn push(&mut self, row: &serde_json::Value) -> Result<(), Failure> {
        use std::io::Write as _;
        let f = self.file.get_mut();
        serde_json::to_writer(&mut *f, row)
            .map_err(std::io::Error::from)
            .and_then(|()| f.write_all(b"\n"))
            .map_err(|e| {
                Failure::Usage(format!("the registry's rows: a temporary file: {e}").into())
            })?;
        self.rows += 1;
        Ok(())
    }

    /// Each row, in the order pushed.
    fn each(&self, mut f: impl FnMut(serde_json::Value)) -> std::io::Result<()> {
        use std::io::{BufRead as _, Seek as _, Write as _};
        let mut w = self.file.borrow_mut();
        w.flush()?;
        let file = w.get_mut();
        file.rewind()?;
        for line in std::io::BufReader::new(&*file).lines() {
            f(serde_json::from_str(&line?)?);
        }
        file.seek(std::io::SeekFrom::End(0))?;
        Ok(())
    }
}

impl serde::Serialize for Spool {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeSeq as _};
        let mut seq = s.serialize_seq(usize::try_from(self.rows).ok())?;
        let mut failed = None;
        self.each(|row| {
            if failed.is_none() {
                failed = seq.serialize_element(&row).err();
            }
        })
        .map_err(S::Error::custom)?;
        match failed {
            Some(e) => Err(e),
            None => seq.end(),
        }
    }
}

/// Every key under `r`'s prefix, page by page at the first page's revision (one
/// snapshot), each key read once: each claim with its fleet record and the host record
/// its host would have (read beside it, at that revision), spooled as a row, and offered
/// to `named`; each host record spooled as a row. A key that is no record is a row that
/// says so, beside the others.
fn read_registry(
    r: &repoch_protocol::fleet::Registry,
    named: &mut crate::audit::Naming<'_>,
) -> Result<Registered, Failure> {
    // The auditor's own credentials: readable regular files (a usage error otherwise).
    // A credential's refusal names it (`registry.ca PATH`): the auditor's file to fix.
    let mut client = repoch_issuer::fleet::connect(r, false).map_err(|e| {
        match e.subject.starts_with("registry.") {
            true => Failure::Usage(e.to_string().into()),
            false => Failure::refused(e),
        }
    })?;
    let unavailable = |e: &dyn std::fmt::Display| {
        Failure::refused(Refusal::new(
            Reason::RegistryUnavailable,
            format!("registry {}", r.prefix),
            "an answer",
            e.to_string(),
        ))
    };
    let dir = |d: &str| format!("{}/{d}/", r.prefix).into_bytes();
    let mut fleets = Spool::new()?;
    let mut pages = repoch_issuer::fleet::Pages::new(&dir("epochs"));
    while let Some(page) = client.next_page(&mut pages).map_err(|e| unavailable(&e))? {
        let header = pages.header.expect("a page read");
        for (e, row) in epoch_rows(&mut client, r, header, page).map_err(|e| unavailable(&e))? {
            fleets.push(&row)?;
            named.offer(&e);
        }
    }
    let header = pages.header.expect("a page read");
    let mut hosts = Spool::new()?;
    let mut pages = repoch_issuer::fleet::Pages::new(&dir("hosts"));
    pages.header = Some(header);
    while let Some(page) = client.next_page(&mut pages).map_err(|e| unavailable(&e))? {
        for e in page {
            hosts.push(&host_row(&e))?;
        }
    }
    Ok(Registered {
        prefix: r.prefix.clone(),
        cluster: format!("{:016x}", header.cluster),
        revision: header.revision,
        fleets,
        hosts,
        logs: Vec::new(),
    })
}

/// The longest key an audit row gives whole (escaped and in hex); a longer one is no key
/// repoch writes, listed by its length and first bytes, so that no planted key multiplies
/// the memory or the report.
pub const KEY_SHOWN_BYTES_MAX: usize = 1024;

/// A key's text, escaped once here for every sink (a terminal, a log line, the refusal;
/// keys are anyone's with write access to etcd), and its bytes in hex: exact, or, past
/// [`KEY_SHOWN_BYTES_MAX`], the first of them and why the row is no record.
fn key_texts(key: &[u8]) -> (String, String, Option<String>) {
    let shown = &key[..key.len().min(KEY_SHOWN_BYTES_MAX)];
    let long = (key.len() > shown.len()).then(|| {
        format!(
            "a key of {} bytes, over {KEY_SHOWN_BYTES_MAX}: no key repoch writes (its first bytes shown)",
            key.len()
        )
    });
    (
        repoch_protocol::text::escape(&String::from_utf8_lossy(shown)).into_owned(),
        shown.iter().map(|b| format!("{b:02x}")).collect(),
        long,
    )
}

/// What a value holds, decoded as `T`, or why it holds none (a value over the client's
/// bound is named by its size, not by what its cut bytes fail to decode as).
fn decoded<T: repoch_protocol::cbor::Canonical>(
    e: &repoch_issuer::fleet::Entry,
) -> Result<T, String> {
    if e.value_bytes != e.value.len() {
        return Err(format!(
            "a value of {} bytes, over {}",
            e.value_bytes,
            repoch_issuer::fleet::VALUE_BYTES_MAX
        ));
    }
    T::from_bytes(&e.value).map_err(|e| e.to_string())
}

/// A page of `PREFIX/epochs/` as fleet epochs and their rows: each claim's token floor is
/// the one its host signed into it, and whether the host record naming its host and
/// deployment (read at the page's revision) signed it.
fn epoch_rows(
    client: &mut repoch_issuer::fleet::Client,
    r: &repoch_protocol::fleet::Registry,
    header: repoch_issuer::fleet::Header,
    page: Vec<repoch_issuer::fleet::Entry>,
) -> Result<Vec<(crate::audit::FleetEpoch, serde_json::Value)>, repoch_issuer::fleet::Error> {
    use repoch_protocol::fleet::{FleetClaim, FleetHost};
    let epochs: Vec<crate::audit::FleetEpoch> = page
        .iter()
        .map(|e| {
            let (key, key_hex, long) = key_texts(&e.key);
            crate::audit::FleetEpoch {
                key,
                key_hex,
                claim: long.map_or_else(|| decoded::<FleetClaim>(e), Err),
                cluster: header.cluster,
                create_revision: e.create_revision,
                mod_revision: e.mod_revision,
                floor: 0,
            }
        })
        .collect();
    let keys: Vec<Vec<u8>> = epochs
        .iter()
        .filter_map(|e| e.claim.as_ref().ok())
        .map(|c| format!("{}/hosts/{}/{}", r.prefix, c.fleet, c.host).into_bytes())
        .collect();
    let mut hosts = client.get_at(&keys, header.revision)?.into_iter();
    let mut rows = Vec::with_capacity(epochs.len());
    for mut e in epochs {
        let Ok(c) = &e.claim else {
            let row = json!({"key": e.key, "key_hex": e.key_hex, "revision": e.create_revision,
                             "error": repoch_protocol::text::escape(e.claim.as_ref().err().map_or("", String::as_str))});
            rows.push((e, row));
            continue;
        };
        e.floor = c.floor;
        let signed = hosts
            .next()
            .flatten()
            .and_then(|h| decoded::<FleetHost>(&h).ok())
            .filter(|h| (&h.fleet, &h.host, h.deployment) == (&c.fleet, &c.host, c.deployment))
            .map(|h| c.signed_by(&h.issuer_key));
        let row = json!({"key": e.key, "key_hex": e.key_hex, "fleet": c.fleet, "signed": signed,
                         "host": c.host, "deployment": c.deployment.to_hex(), "intent": c.intent.to_hex(),
                         "revision": e.create_revision, "modified": e.mod_revision, "floor": e.floor});
        rows.push((e, row));
    }
    Ok(rows)
}

/// A host record as `--json` lists it (`registry.hosts`), or why its key holds none.
fn host_row(e: &repoch_issuer::fleet::Entry) -> serde_json::Value {
    let (key, key_hex, long) = key_texts(&e.key);
    let host = long.map_or_else(|| decoded::<repoch_protocol::fleet::FleetHost>(e), Err);
    match host {
        Ok(h) => json!({"key": key, "key_hex": key_hex, "fleet": h.fleet, "host": h.host,
                        "deployment": h.deployment.to_hex(), "label": repoch_protocol::text::escape(&h.label),
                        "revision": e.create_revision}),
        Err(why) => json!({"key": key, "key_hex": key_hex, "revision": e.create_revision,
                           "error": repoch_protocol::text::escape(&why)}),
    }
}

/// Each log's verdict as `--json` lists it, and the first finding (a rollback, an
/// unregistered token, a forged claim) as the refusal the audit ends with.
fn log_rows(
    logs: &[crate::audit::Audited],
    verdicts: &[crate::audit::FleetVerdict],
) -> (Vec<serde_json::Value>, Option<Refusal>) {
    use crate::audit::FleetVerdict as V;
    let mut finding = None;
    let rows = logs
        .iter()
        .zip(verdicts)
        .map(|(a, v)| {
            let (verdict, evidence) = match v {
                V::Consistent { key } => ("consistent", json!({"key": key})),
                V::Unclaimed => ("unclaimed", json!(null)),
                V::Rollback { registry, log } | V::Unregistered { registry, log } | V::Forged { registry, log } | V::Planted { registry, log } => {
                    let (name, reason) = match v {
                        V::Rollback { .. } => ("rollback", Reason::RegistryRollback),
                        V::Unregistered { .. } => ("unregistered", Reason::RegistryRollback),
                        V::Planted { .. } => ("planted", Reason::RegistryForged),
                        _ => ("forged", Reason::RegistryForged),
                    };
                    finding.get_or_insert_with(|| {
                        let path = crate::audit::shown(&a.path);
                        Refusal::of_escaped(reason, path, registry.clone(), log.clone())
                    });
                    (name, json!({"registry": registry, "log": log}))
                }
            };
            json!({"path": crate::audit::shown(&a.path), "deployment": a.report.deployment().map(|d| d.to_hex()), "verdict": verdict, "evidence": evidence})
        })
        .collect();
    (rows, finding)
}

/// A log's row (`--json`: `logs[]`).
fn log_row(a: &crate::audit::Audited) -> serde_json::Value {
    let r = &a.report;
    // The fencing token it consumed with (a fleet's): what a fleet established after a
    // rebuild takes as its floor (docs/OPERATOR.md, "Fencing tokens").
    let fencing = r.records.iter().find_map(|v| match &v.record.record.body {
        repoch_protocol::epoch::EpochBody::Consume { fencing, .. } => *fencing,
        _ => None,
    });
    json!({"path": crate::audit::shown(&a.path), "deployment": r.deployment().map(|d| d.to_hex()), "epoch": r.classification.as_str(),
           "fencing": fencing.map(|t| json!({"cluster": format!("{:016x}", t.cluster), "revision": t.revision})),
           "records": r.records.len(), "head": r.last_hash().map(|h| h.to_hex()),
           "predecessor": r.genesis().and_then(|(_, p)| p).map(|p| p.deployment.to_hex()),
           "problem": r.problem.as_ref().map(|(at, why)| json!({"offset": at, "reason": why}))})
}

/// The first log that does not verify, with its own reason (epoch-torn, -forged, …).
fn first_bad(logs: &[crate::audit::Audited]) -> Option<Refusal> {
    let a = logs
        .iter()
        .find(|a| a.report.problem.is_some() || a.report.records.is_empty())?;
    let reason = a
        .report
        .classification
        .refusal()
        .unwrap_or(Reason::EpochMissing);
    Some(Refusal::new(
        reason,
        a.path.display().to_string(),
        "a valid log",
        a.report
            .problem
            .as_ref()
            .map_or("no record".into(), |(at, w)| format!("offset {at}: {w}")),
    ))
}

/// Everything the audit found, as it is printed.
#[derive(serde::Serialize)]
struct Report<'a> {
    verified: bool,
    logs: Vec<serde_json::Value>,
    chain: Option<&'a Vec<String>>,
    chain_error: Option<serde_json::Value>,
    checkpoint: Option<&'a serde_json::Value>,
    registry: Option<&'a Registered>,
}

pub fn run(
    ctx: &Ctx,
    issuer_key: Option<&Path>,
    checkpoint: Option<&Path>,
    registry: Option<&Path>,
    paths: &[std::path::PathBuf],
    batch: bool,
    jobs: usize,
) -> CmdResult {
    let issuer = match issuer_key {
        Some(p) => {
            repoch_issuer::keys::read_public(p).map_err(|e| Failure::Usage(Why::error(e)))?
        }
        None => store::issuer_public(&ctx.layout)?,
    };
    let (logs, chain) =
        crate::audit::audit(paths, &issuer, batch, jobs).map_err(|e| Failure::Usage(e.into()))?;
    let (cp, cp_invalid) = checked_note(checkpoint, &issuer, &logs)?;
    let fleet = match registry {
        Some(f) => Some(audit_registry(f, &logs, &issuer)?),
        None => None,
    };
    let inconsistent = cp
        .as_ref()
        .and_then(|(_, r)| r.clone())
        .or_else(|| fleet.as_ref().and_then(|(_, r)| r.clone()));
    // The first log that does not verify: the chain cannot be checked past it, so it is
    // also what `chain_error` carries.
    let first = first_bad(&logs);
    let verified =
        first.is_none() && chain.is_ok() && inconsistent.is_none() && cp_invalid.is_none();
    let chain_error = match (&first, &chain) {
        (Some(r), _) => Some(json!({"reason": r.reason.as_str(), "detail": r.detail()})),
        (None, Err((r, e))) => Some(json!({"reason": r.as_str(), "detail": e})),
        (None, Ok(_)) => None,
    };
    let report = Report {
        verified,
        logs: logs.iter().map(log_row).collect(),
        chain: chain.as_ref().ok(),
        chain_error,
        checkpoint: cp.as_ref().map(|(j, _)| j),
        registry: fleet.as_ref().map(|(j, _)| j),
    };
    match ctx.json {
        true => print_json(&report),
        false => print_text(&report, &logs, cp.as_ref().map(|(_, r)| r)),
    }
    // A log that does not extend a signed checkpoint is the finding, even when it is also
    // torn: the evidence pair says what was lost.
    if let Some(r) = inconsistent {
        return Err(Failure::Inconsistent(r));
    }
    if let Some(r) = cp_invalid {
        // The note's refusal, and the first log's that does not verify, if any.
        return Err(Failure::Refused(
            [Some(r), first].into_iter().flatten().collect(),
        ));
    }
    if verified {
        return Ok(Outcome::Success);
    }
    let r = first.unwrap_or_else(|| {
        let (reason, why) = chain
            .err()
            .unwrap_or((Reason::Internal, "no chain error".into()));
        Refusal::new(reason, "chain", "verified links", why)
    });
    Err(Failure::Refused(vec![r]))
}

/// A checkpoint note and its verdict ([`audit_checkpoint`]); a note that is opened but
/// invalid (`checkpoint-invalid`) is reported in its row, beside every log's, and returned
/// as the refusal the audit ends with. A note that cannot be opened is a usage error.
fn checked_note(
    note: Option<&Path>,
    issuer: &repoch_protocol::PublicKey,
    logs: &[crate::audit::Audited],
) -> Result<(Option<CheckedNote>, Option<Refusal>), Failure> {
    let Some(n) = note else {
        return Ok((None, None));
    };
    match audit_checkpoint(n, issuer, logs) {
        Ok(c) => Ok((Some(c), None)),
        Err(Failure::Refused(mut rs)) if rs.len() == 1 => {
            let r = rs.remove(0);
            let j = json!({"path": crate::audit::shown(n), "reason": r.reason.as_str(),
                           "detail": r.detail()});
            Ok((Some((j, None)), Some(r)))
        }
        Err(e) => Err(e),
    }
}

/// A checkpoint's row in the report, and the refusal when the log does not extend it.
type CheckedNote = (serde_json::Value, Option<Refusal>);

/// The report as one JSON document on stdout, its spooled rows streamed into it. As with
/// every output, an error writing it loses the text, never the outcome.
fn print_json(report: &Report<'_>) {
    use std::io::Write as _;
    let mut o = std::io::BufWriter::new(std::io::stdout().lock());
    let _ = serde_json::to_writer(&mut o, report)
        .map_err(std::io::Error::from)
        .and_then(|()| o.write_all(b"\n"))
        .and_then(|()| o.flush());
}

/// The report as text: the logs' table, the chain, the checkpoint, the registry's rows
/// and each log's verdict against it, then the verdict.
fn print_text(report: &Report<'_>, logs: &[crate::audit::Audited], cp: Option<&Option<Refusal>>) {
    let mut s = format!(
        "{:<32}  {:<10}  {:>7}  {:<16}  PREDECESSOR\n",
        "DEPLOYMENT", "EPOCH", "RECORDS", "HEAD"
    );
    for a in logs {
        let r = &a.report;
        s.push_str(&format!(
            "{:<32}  {:<10}  {:>7}  {:<16}  {}\n",
            r.deployment().map_or("-".into(), |d| d.to_hex()),
            r.classification.as_str(),
            r.records.len(),
            r.last_hash()
                .map_or("-".into(), |h| h.to_hex()[..16].to_owned()),
            r.genesis()
                .and_then(|(_, p)| p)
                .map_or("-".into(), |p| p.deployment.to_hex()),
        ));
        if let Some((at, why)) = &r.problem {
            s.push_str(&format!(
                "  {}: problem at offset {at}: {why}\n",
                crate::audit::shown(&a.path)
            ));
        }
    }
    match (report.chain, &report.chain_error) {
        (_, Some(e)) => s.push_str(&format!(
            "chain: NOT verified: {}: {}",
            e["reason"].as_str().unwrap_or(""),
            e["detail"].as_str().unwrap_or("")
        )),
        (Some(order), None) => s.push_str(&format!(
            "chain: verified ({} deployment{})",
            order.len(),
            if order.len() == 1 { "" } else { "s" }
        )),
        (None, None) => s.push_str("chain: NOT verified"),
    }
    if let (Some(j), Some(r)) = (report.checkpoint, cp) {
        match r {
            None if j["reason"].is_string() => s.push_str(&format!(
                "\ncheckpoint: INVALID: {}",
                j["detail"].as_str().unwrap_or_default()
            )),
            None => s.push_str(&format!(
                "\ncheckpoint: the log extends it (size {} -> {})",
                j["size"], j["log"]["size"]
            )),
            Some(r) => s.push_str(&format!("\ncheckpoint: NOT extended: {r}")),
        }
    }
    super::common::say(&s);
    if let Some(reg) = report.registry {
        print_registry_text(reg);
    }
    super::common::say(if report.verified {
        "audit: verified"
    } else {
        "audit: FAILED"
    });
}

/// The registry's rows as text, a line each as they are read back from the spool, then
/// each log's verdict. Every text here was escaped where it was read (keys, errors).
fn print_registry_text(reg: &Registered) {
    let printed = reg.fleets.each(|f| {
        let key = f["key"].as_str().unwrap_or("");
        super::common::say(&match f["error"].as_str() {
            Some(why) => format!(
                "registry: {key} holds no fleet claim ({why}) at revision {}",
                f["revision"]
            ),
            None => format!(
                "registry: {key} used by host {} (deployment {}) at revision {}",
                f["host"].as_str().unwrap_or("?"),
                f["deployment"].as_str().unwrap_or("?"),
                f["revision"]
            ),
        });
    });
    if let Err(e) = printed {
        super::common::say(&format!("registry: the rows could not be read back: {e}"));
    }
    super::common::say(&format!(
        "registry: {} host record(s) under {}/hosts/ (--json: registry.hosts)",
        reg.hosts.rows, reg.prefix
    ));
    for l in &reg.logs {
        super::common::say(&format!(
            "registry: {}: {}{}",
            l["path"].as_str().unwrap_or(""),
            l["verdict"].as_str().unwrap_or(""),
            match l["evidence"]["registry"].as_str() {
                Some(reg) => format!(
                    " (registry: {reg}; log: {})",
                    l["evidence"]["log"].as_str().unwrap_or("")
                ),
                None => String::new(),
            }
        ));
    }
}

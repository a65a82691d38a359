//! The `repoch` subcommands. Each returns an exit code or a [`Failure`]; `main` maps
//! failures to exit codes in one place.

use std::path::Path;
use std::process::ExitCode;

use repoch_issuer::store::{self, Deployment};
use repoch_issuer::{Layout, Refusal};
use repoch_protocol::epoch::EpochBody;
use repoch_protocol::journal::{next_frame, verify_journal, JournalBody, JournalPins, Outcome};
use repoch_protocol::wire::AdminEvent;
use repoch_protocol::Reason;
use rustix::fs::OFlags;
use serde_json::json;

use crate::exit::Failure;

/// Default wait for the consumer on the grant socket.
pub const CONSUMER_WAIT_SECONDS_DEFAULT: u64 = 30;

pub type CmdResult = Result<ExitCode, Failure>;

#[derive(Debug)]
pub struct Ctx {
    pub layout: Layout,
    pub root: Option<std::path::PathBuf>,
    pub json: bool,
}

impl Ctx {
    pub fn new(root: Option<&Path>, json: bool) -> Ctx {
        Ctx {
            layout: Layout::new(root),
            root: root.map(Path::to_path_buf),
            json,
        }
    }
    /// Prints a JSON value (with --json) or the human text, through [`say`].
    pub fn out(&self, v: serde_json::Value, human: impl FnOnce() -> String) {
        if self.json {
            say(&v.to_string());
        } else {
            say(&human());
        }
    }
}

/// Writes one line to stdout. An output error never aborts (`println!` panics, and a
/// panic aborts) and never changes the outcome: a reader that went away (EPIPE; Rust
/// leaves SIGPIPE ignored) or a full disk only loses the text. The command goes on to its
/// end (a recovery still reads repochd's outcome) and exits with its documented code.
pub fn say(line: &str) {
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}").and_then(|()| o.flush());
}

/// [`say`] for stderr: diagnostics, with the same guarantee.
pub fn warn(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn require_root(what: &str) -> Result<(), Failure> {
    if !rustix::process::geteuid().is_root() {
        return Err(Failure::refused(Refusal::new(
            Reason::AdminDenied,
            what,
            "uid 0",
            format!("uid {}", rustix::process::geteuid().as_raw()),
        )));
    }
    Ok(())
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Reads a manifest: a regular file (a FIFO or device would block or never end: opened
/// non-blocking, its type checked), at most `MANIFEST_TOML_BYTES_MAX` bytes, UTF-8.
fn read_manifest(path: &Path) -> Result<String, String> {
    use repoch_protocol::limits::MANIFEST_TOML_BYTES_MAX;
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| std::io::Error::from(e).to_string())?;
    let st = rustix::fs::fstat(&fd).map_err(|e| std::io::Error::from(e).to_string())?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err("not a regular file".into());
    }
    if st.st_size as u64 > MANIFEST_TOML_BYTES_MAX as u64 {
        return Err(format!(
            "{} bytes, over the bound of {MANIFEST_TOML_BYTES_MAX}",
            st.st_size
        ));
    }
    let bytes = repoch_issuer::storage::read_all_fd(&fd, MANIFEST_TOML_BYTES_MAX)
        .map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".into())
}

pub fn enroll(ctx: &Ctx, manifest: &Path) -> CmdResult {
    require_root("enroll")?;
    let text = read_manifest(manifest)
        .map_err(|e| Failure::Usage(format!("{}: {e}", manifest.display())))?;
    let invalid = |e: &repoch_issuer::enroll::EnrollError| {
        Failure::Manifest(Refusal::new(
            Reason::ManifestInvalid,
            manifest.display().to_string(),
            "an enrollable manifest",
            e.to_string(),
        ))
    };
    let v = repoch_issuer::enroll::validate(&text).map_err(|e| invalid(&e))?;
    // docs/EXIT-CODES.md: a manifest the host cannot enroll as written (a field, an object
    // that exists or is missing, a predecessor that already has a successor) is 64; the
    // host failing to write its files is a refusal (2) that kept nothing.
    let e = repoch_issuer::enroll::enroll(&ctx.layout, &v, now()).map_err(|e| match e {
        repoch_issuer::enroll::EnrollError::Manifest { .. }
        | repoch_issuer::enroll::EnrollError::Refused { .. } => invalid(&e),
        repoch_issuer::enroll::EnrollError::Io(_) => Failure::Refused(vec![Refusal::new(
            Reason::EnrollFailed,
            manifest.display().to_string(),
            "enrolled",
            e.to_string(),
        )]),
    })?;
    let journal_err = e.journal_append_only.clone().err();
    let log_err = e.log_append_only.clone().err();
    // stdout is the id alone (`ID=$(repoch enroll m.toml)`); warnings go to stderr.
    ctx.out(
        json!({"outcome": "enrolled", "deployment": e.id.to_hex(), "state_dir": e.state_dir, "manifest_sha256": e.manifest_hash.to_hex(),
               "journal_append_only": journal_err.is_none(), "journal_append_only_error": journal_err,
               "log_append_only": log_err.is_none(), "log_append_only_error": log_err}),
        || e.id.to_hex(),
    );
    if !ctx.json {
        if let Some(w) = &journal_err {
            warn(&format!("repoch: warning: the producer journal is not append-only ({w}); lineage verification will refuse it (lineage-unprotected)"));
        }
        if let Some(w) = &log_err {
            warn(&format!("repoch: warning: the epoch log is not append-only ({w}); only its owner and mode protect it"));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens a deployment named by id or unique prefix.
pub fn open(ctx: &Ctx, prefix: &str) -> Result<Deployment, Failure> {
    let id = store::resolve(&ctx.layout, prefix)?;
    let issuer = store::issuer_public(&ctx.layout)?;
    Ok(Deployment::open(&ctx.layout, &issuer, id)?)
}

fn status_json(d: &Deployment) -> serde_json::Value {
    let rep = d.report();
    json!({
        "deployment": d.id.to_hex(),
        "label": d.manifest.label,
        "epoch": rep.classification.as_str(),
        "records": rep.records.iter().map(|r| json!({
            "seq": r.record.record.seq, "kind": r.record.record.body.kind().as_str(), "hash": r.hash.to_hex(), "offset": r.offset,
            "reason": match &r.record.record.body { EpochBody::Withheld { reason, .. } => Some(reason.as_str()), _ => None },
        })).collect::<Vec<_>>(),
        "problem": rep.problem.as_ref().map(|(at, why)| json!({"offset": at, "reason": why})),
        "refusal": rep.classification.refusal().map(|r| r.as_str()),
        "predecessor": d.predecessor().map(|p| json!({"deployment": p.deployment.to_hex(), "final_hash": p.final_hash.to_hex()})),
    })
}

pub fn status(ctx: &Ctx, prefix: &str) -> CmdResult {
    let d = open(ctx, prefix)?;
    let rep = d.report();
    ctx.out(status_json(&d), || {
        let mut s = format!(
            "deployment {}  ({})\nepoch      {}\n",
            d.id,
            d.manifest.label,
            rep.classification.as_str()
        );
        for r in &rep.records {
            let rec = &r.record.record;
            s.push_str(&format!(
                "  #{} {:<9} {}",
                rec.seq,
                rec.body.kind().as_str(),
                r.hash
            ));
            if let EpochBody::Withheld { reason, detail } = &rec.body {
                s.push_str(&format!("  {reason}: {detail}"));
            }
            s.push('\n');
        }
        if let Some((at, why)) = &rep.problem {
            s.push_str(&format!("problem at offset {at}: {why}\n"));
        }
        if let Some(p) = d.predecessor() {
            s.push_str(&format!(
                "predecessor {} (final {})\n",
                p.deployment, p.final_hash
            ));
        }
        s.trim_end().to_owned()
    });
    Ok(epoch_exit(&d))
}

/// docs/EXIT-CODES.md: a log that verifies (enrolled or used, whatever its phase) is 0; one
/// that does not (torn, corrupt, forged, foreign, empty) is 2 with its reason on stderr.
fn epoch_exit(d: &Deployment) -> ExitCode {
    match integrity_refusal(d) {
        None => ExitCode::SUCCESS,
        Some(r) => {
            warn(&format!("repoch: refused: {r}"));
            ExitCode::from(2)
        }
    }
}

/// The refusal of a deployment whose log does not verify; `None` for a verified log.
fn integrity_refusal(d: &Deployment) -> Option<Refusal> {
    let rep = d.report();
    match rep.classification.refusal() {
        None | Some(Reason::EpochConsumed) => None,
        Some(reason) => Some(Refusal::new(
            reason,
            d.id.to_hex(),
            "a verified epoch log",
            rep.problem.as_ref().map_or_else(
                || rep.classification.as_str().to_owned(),
                |(at, why)| format!("{} at offset {at}: {why}", rep.classification.as_str()),
            ),
        )),
    }
}

pub fn list(ctx: &Ctx) -> CmdResult {
    let ids = store::list(&ctx.layout)
        .map_err(|e| Failure::Internal(format!("{}: {e}", ctx.layout.deployments().display())))?;
    let issuer = if ids.is_empty() {
        None
    } else {
        Some(store::issuer_public(&ctx.layout)?)
    };
    let mut rows = Vec::new();
    let mut unverified = 0usize;
    for id in ids {
        let row = match Deployment::open(
            &ctx.layout,
            issuer.as_ref().expect("deployments imply an issuer key"),
            id,
        ) {
            Ok(d) => {
                let refusal = integrity_refusal(&d);
                unverified = unverified.saturating_add(usize::from(refusal.is_some()));
                json!({"deployment": id.to_hex(), "label": d.manifest.label, "epoch": d.classification().as_str(),
                       "refusal": refusal.as_ref().map(crate::exit::refusal_json)})
            }
            Err(r) => {
                unverified = unverified.saturating_add(1);
                json!({"deployment": id.to_hex(), "label": null, "epoch": "unreadable", "refusal": crate::exit::refusal_json(&r)})
            }
        };
        rows.push(row);
    }
    if ctx.json {
        say(&json!({"deployments": rows}).to_string());
    } else if rows.is_empty() {
        say(&format!(
            "no deployments enrolled under {}",
            ctx.layout.deployments().display()
        ));
    } else {
        say(&format!("{:<32}  {:<10}  LABEL", "DEPLOYMENT", "EPOCH"));
        for r in rows {
            say(&format!(
                "{:<32}  {:<10}  {}",
                r["deployment"].as_str().unwrap_or(""),
                r["epoch"].as_str().unwrap_or(""),
                r["label"].as_str().unwrap_or("-")
            ));
        }
    }
    // docs/EXIT-CODES.md: 2 when a deployment's state or log does not verify.
    if unverified > 0 {
        warn(&format!(
            "repoch: refused: {unverified} deployment(s) do not verify (see their refusal)"
        ));
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

/// `repoch checkpoint`: the log's head as a signed note (docs/AUDITOR.md, "Checkpoints").
pub fn checkpoint(ctx: &Ctx, prefix: &str) -> CmdResult {
    use repoch_protocol::checkpoint::{Checkpoint, KEY_NAME};
    require_root("repoch checkpoint")?;
    let d = open(ctx, prefix)?;
    if let Some(r) = integrity_refusal(&d) {
        return Err(Failure::refused(r));
    }
    let key = repoch_issuer::keys::read_secret(&ctx.layout.issuer_key())
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let c = Checkpoint::of_log(d.report())
        .ok_or_else(|| Failure::Internal("a verified log without a genesis".into()))?;
    let note = c.sign(KEY_NAME, &key);
    ctx.out(
        json!({"deployment": d.id.to_hex(), "origin": c.origin, "size": c.size,
               "head": c.head.to_hex(), "key_name": KEY_NAME, "note": note}),
        || note.trim_end().to_owned(),
    );
    Ok(ExitCode::SUCCESS)
}

/// `audit --checkpoint`: the note verified under the issuer key, and whether the log it
/// names (by origin) among `logs` extends it.
fn audit_checkpoint(
    note: &Path,
    issuer: &repoch_protocol::PublicKey,
    logs: &[crate::audit::Audited],
) -> Result<(serde_json::Value, Option<Refusal>), Failure> {
    use repoch_protocol::checkpoint::{origin, Checkpoint, KEY_NAME};
    let bytes = crate::audit::read_bounded(note, repoch_protocol::limits::CHECKPOINT_BYTES_MAX)
        .map_err(Failure::Usage)?;
    let invalid = |observed: String| {
        Failure::refused(Refusal::new(
            Reason::CheckpointInvalid,
            note.display().to_string(),
            format!("a note signed by {KEY_NAME} under the issuer key, about a log given"),
            observed,
        ))
    };
    let text = String::from_utf8(bytes).map_err(|_| invalid("not UTF-8".into()))?;
    let c = Checkpoint::verify(&text, KEY_NAME, issuer).map_err(|e| invalid(e.to_string()))?;
    let Some(a) = logs
        .iter()
        .find(|a| a.report.deployment().map(|d| origin(&d)).as_deref() == Some(&c.origin))
    else {
        return Err(invalid(format!("origin {:?}: no such log given", c.origin)));
    };
    let (extends, reason, now) = match c.extended_by(&a.report) {
        Ok(x) => (true, None, x.current),
        Err(i) => (false, Some(i.reason), i.current),
    };
    let j = json!({"origin": c.origin, "path": a.path, "size": c.size, "head": c.head.to_hex(),
                   "log": {"size": now.0, "head": now.1.to_hex()}, "extends": extends,
                   "reason": reason.map(|r| r.as_str())});
    let refusal = reason.map(|r| {
        Refusal::new(
            r,
            a.path.display().to_string(),
            format!(
                "a log extending the checkpoint: size {} head {}",
                c.size, c.head
            ),
            format!("size {} head {}", now.0, now.1),
        )
    });
    Ok((j, refusal))
}

pub fn audit(
    ctx: &Ctx,
    issuer_key: Option<&Path>,
    checkpoint: Option<&Path>,
    paths: &[std::path::PathBuf],
) -> CmdResult {
    let issuer = match issuer_key {
        Some(p) => {
            repoch_issuer::keys::read_public(p).map_err(|e| Failure::Usage(e.to_string()))?
        }
        None => store::issuer_public(&ctx.layout)?,
    };
    let (logs, chain) = crate::audit::audit(paths, &issuer).map_err(Failure::Usage)?;
    let bad: Vec<&crate::audit::Audited> = logs
        .iter()
        .filter(|a| a.report.problem.is_some() || a.report.records.is_empty())
        .collect();
    let rows: Vec<serde_json::Value> = logs
        .iter()
        .map(|a| {
            let r = &a.report;
            json!({"path": a.path, "deployment": r.deployment().map(|d| d.to_hex()), "epoch": r.classification.as_str(),
                   "records": r.records.len(), "head": r.last_hash().map(|h| h.to_hex()),
                   "predecessor": r.genesis().and_then(|(_, p)| p).map(|p| p.deployment.to_hex()),
                   "problem": r.problem.as_ref().map(|(at, why)| json!({"offset": at, "reason": why}))})
        })
        .collect();
    let cp = match checkpoint {
        Some(n) => Some(audit_checkpoint(n, &issuer, &logs)?),
        None => None,
    };
    let inconsistent = cp.as_ref().and_then(|(_, r)| r.clone());
    let verified = bad.is_empty() && chain.is_ok() && inconsistent.is_none();
    ctx.out(json!({"verified": verified, "logs": rows, "chain": chain.as_ref().ok(), "chain_error": chain.as_ref().err().map(|(r, e)| json!({"reason": r.as_str(), "detail": e})),
                   "checkpoint": cp.as_ref().map(|(j, _)| j)}), || {
        let mut s = format!("{:<32}  {:<10}  {:>7}  {:<16}  PREDECESSOR\n", "DEPLOYMENT", "EPOCH", "RECORDS", "HEAD");
        for a in &logs {
            let r = &a.report;
            s.push_str(&format!(
                "{:<32}  {:<10}  {:>7}  {:<16}  {}\n",
                r.deployment().map_or("-".into(), |d| d.to_hex()),
                r.classification.as_str(),
                r.records.len(),
                r.last_hash().map_or("-".into(), |h| h.to_hex()[..16].to_owned()),
                r.genesis().and_then(|(_, p)| p).map_or("-".into(), |p| p.deployment.to_hex()),
            ));
            if let Some((at, why)) = &r.problem {
                s.push_str(&format!("  {}: problem at offset {at}: {why}\n", a.path.display()));
            }
        }
        match &chain {
            Ok(order) => s.push_str(&format!("chain: verified ({} deployment{})", order.len(), if order.len() == 1 { "" } else { "s" })),
            Err((r, e)) => s.push_str(&format!("chain: NOT verified: {r}: {e}")),
        }
        if let Some((j, r)) = &cp {
            match r {
                None => s.push_str(&format!("\ncheckpoint: the log extends it (size {} -> {})", j["size"], j["log"]["size"])),
                Some(r) => s.push_str(&format!("\ncheckpoint: NOT extended: {r}")),
            }
        }
        if verified {
            s.push_str("\naudit: verified");
        } else {
            s.push_str("\naudit: FAILED");
        }
        s
    });
    // A log that does not extend a signed checkpoint is the finding, even when it is also
    // torn: the evidence pair says what was lost.
    if let Some(r) = inconsistent {
        return Err(Failure::Inconsistent(r));
    }
    if verified {
        Ok(ExitCode::SUCCESS)
    } else {
        let first = bad.first().map(|a| {
            let reason = a
                .report
                .classification
                .refusal()
                .unwrap_or(Reason::EpochMissing);
            Refusal::new(
                reason,
                a.path.display().to_string(),
                "a valid log",
                a.report
                    .problem
                    .as_ref()
                    .map_or("no record".into(), |(at, w)| format!("offset {at}: {w}")),
            )
        });
        let r = first.unwrap_or_else(|| {
            let (reason, why) = chain
                .err()
                .unwrap_or((Reason::Internal, "no chain error".into()));
            Refusal::new(reason, "chain", "verified links", why)
        });
        Err(Failure::Refused(vec![r]))
    }
}

/// A producer journal record, as typed on the command line.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum JournalRecordArg {
    /// The root started (records this process's parent pid unless --pid).
    RootStart {
        /// 1..=4194304 (the kernel's PID_MAX_LIMIT).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=crate::limits::PID_MAX))]
        pid: Option<u32>,
    },
    /// An operation begins; prints its op id (use it with op-end).
    OpBegin { name: String },
    /// An operation ended: succeeded, failed or unknown.
    OpEnd {
        /// The op id op-begin printed (below 18446744073709551615: the largest id leaves
        /// no next one).
        #[arg(value_parser = clap::value_parser!(u64).range(..=crate::limits::OP_ID_MAX))]
        op: u64,
        outcome: String,
    },
    /// The root stopped cleanly.
    RootStop,
}

pub fn journal_keygen(ctx: &Ctx, keyfile: &Path) -> CmdResult {
    let key = repoch_issuer::keys::generate()
        .map_err(|e| Failure::Internal(format!("getrandom: {e}")))?;
    let pub_path = std::path::PathBuf::from(format!("{}.pub", keyfile.display()));
    repoch_issuer::keys::write_pair(keyfile, &pub_path, &key)
        .map_err(|e| Failure::Usage(e.to_string()))?;
    let pk = hex::encode(key.verifying_key().to_bytes());
    ctx.out(
        json!({"key": keyfile, "public": pub_path, "public_key": pk}),
        || pk.clone(),
    );
    Ok(ExitCode::SUCCESS)
}

pub fn journal_append(
    ctx: &Ctx,
    journal: &Path,
    key: &Path,
    deployment: &str,
    rec: JournalRecordArg,
) -> CmdResult {
    let key = repoch_issuer::keys::read_secret(key).map_err(|e| Failure::Usage(e.to_string()))?;
    let id = store::resolve(&ctx.layout, deployment)?;
    let issuer = store::issuer_public(&ctx.layout)?;
    let producer = repoch_protocol::PublicKey::from(&key.verifying_key());
    let fd = repoch_issuer::storage::open_path(
        journal,
        OFlags::RDWR | OFlags::APPEND | OFlags::NONBLOCK,
        0,
    )
    .map_err(|e| {
        Failure::refused(Refusal::new(
            Reason::LineageMissing,
            journal.display().to_string(),
            "present",
            e.to_string(),
        ))
    })?;
    // A FIFO or device at the journal path is no journal (and would block or never end).
    let st = rustix::fs::fstat(&fd).map_err(|e| Failure::Internal(format!("fstat: {e}")))?;
    if let Some(kind) = repoch_issuer::storage::not_regular(st.st_mode) {
        return Err(Failure::refused(Refusal::new(
            Reason::LineageReplaced,
            journal.display().to_string(),
            "the journal, a regular file",
            kind,
        )));
    }
    // One writer at a time: an exclusive flock on the journal while appending.
    rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| Failure::Internal(format!("flock: {e}")))?;
    let bytes =
        repoch_issuer::storage::read_all_fd(&fd, repoch_protocol::limits::JOURNAL_BYTES_MAX)
            .map_err(|e| Failure::Internal(e.to_string()))?;
    let f = verify_journal(
        &bytes,
        JournalPins {
            deployment: id,
            issuer: &issuer,
            producer: &producer,
            genesis: None,
        },
    )
    .map_err(|e| {
        Failure::refused(Refusal::new(
            e.reason,
            journal.display().to_string(),
            "a valid journal",
            format!("offset {}: {}", e.offset, e.detail),
        ))
    })?;
    let body = match rec {
        JournalRecordArg::RootStart { pid } => JournalBody::RootStart {
            pid: pid.unwrap_or_else(|| {
                rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32)
            }),
        },
        JournalRecordArg::OpBegin { name } => {
            repoch_protocol::types::check_text(&name).map_err(Failure::Usage)?;
            if name.len() > repoch_protocol::limits::OP_NAME_BYTES_MAX {
                return Err(Failure::Usage(format!(
                    "op name over {} bytes",
                    repoch_protocol::limits::OP_NAME_BYTES_MAX
                )));
            }
            JournalBody::OpBegin {
                op: f.next_op,
                name,
            }
        }
        JournalRecordArg::OpEnd { op, outcome } => JournalBody::OpEnd {
            op,
            outcome: Outcome::parse(&outcome).ok_or_else(|| {
                Failure::Usage(format!(
                    "outcome {outcome:?}: expected succeeded, failed or unknown"
                ))
            })?,
        },
        JournalRecordArg::RootStop => JournalBody::RootStop,
    };
    let op = if let JournalBody::OpBegin { op, .. } = &body {
        Some(*op)
    } else {
        None
    };
    let kind = body.kind();
    let (frame, hash) = next_frame(id, Some((f.last_seq, f.last_hash)), body, &key);
    // Validate the result before writing: the new journal must verify.
    let mut after = bytes.clone();
    after.extend_from_slice(&frame);
    verify_journal(
        &after,
        JournalPins {
            deployment: id,
            issuer: &issuer,
            producer: &producer,
            genesis: None,
        },
    )
    .map_err(|e| Failure::Usage(format!("this record would break the journal: {}", e.detail)))?;
    repoch_issuer::barrier::reach("journal-before-write");
    // A failed write may have reached the disk in part: as uncertain as a failed fdatasync.
    let n = rustix::io::write(&fd, &frame)
        .map_err(|e| Failure::Uncertain(format!("write failed (not retried): {e}")))?;
    if n != frame.len() {
        return Err(Failure::Uncertain(format!(
            "short write ({n} of {} bytes): the journal is torn",
            frame.len()
        )));
    }
    rustix::fs::fdatasync(&fd)
        .map_err(|e| Failure::Uncertain(format!("fdatasync failed (not retried): {e}")))?;
    // A verified journal has at most JOURNAL_RECORDS_MAX records: never u64::MAX.
    let seq = f.last_seq.saturating_add(1);
    ctx.out(
        json!({"seq": seq, "kind": kind, "hash": hash.to_hex(), "op": op}),
        || match op {
            Some(op) => op.to_string(),
            None => format!("appended {kind} as record {seq}"),
        },
    );
    Ok(ExitCode::SUCCESS)
}

pub fn parse_sha256(s: &str) -> Result<repoch_protocol::Hash, Failure> {
    repoch_protocol::Hash::from_hex(s.trim())
        .ok_or_else(|| Failure::Usage(format!("{s:?} is not a sha256 (64 hex digits)")))
}

pub fn fact_json(f: &repoch_protocol::Fact) -> serde_json::Value {
    json!({"kind": f.kind, "subject": f.subject, "expected": f.expected, "observed": f.observed, "holds": f.holds(), "reason": f.reason.map(|r| r.as_str())})
}

pub fn fact_line(f: &repoch_protocol::Fact) -> String {
    match f.reason {
        None => format!("  ok    {:<16} {}  ({})", f.kind, f.subject, f.observed),
        Some(r) => format!(
            "  FAIL  {:<16} {}  {r}: expected {}, observed {}",
            f.kind, f.subject, f.expected, f.observed
        ),
    }
}

pub fn observe(ctx: &Ctx, prefix: &str, approve: Option<&str>) -> CmdResult {
    require_root("observe")?;
    let approve = approve.map(parse_sha256).transpose()?;
    let d = open(ctx, prefix)?;
    let mut obs =
        repoch_issuer::observe::Observer::new(d.manifest.clone(), ctx.layout.clone(), approve);
    let mut fences = repoch_issuer::observe::Fences::default();
    let o = obs.observe(&mut fences);
    let rep = d.report();
    let epoch = rep.classification.refusal().map(|reason| {
        Refusal::new(
            reason,
            d.id.to_hex(),
            "an unused epoch (enrolled)",
            rep.classification.as_str(),
        )
    });
    let refusals: Vec<Refusal> = epoch
        .iter()
        .cloned()
        .chain(o.failed().filter_map(Refusal::from_fact))
        .collect();
    ctx.out(
        json!({"deployment": d.id.to_hex(), "digest": o.digest.to_hex(), "holds": o.holds(), "ready_sha256": o.ready_sha256.to_hex(),
               "epoch": rep.classification.as_str(),
               "refusals": refusals.iter().map(crate::exit::refusal_json).collect::<Vec<_>>(),
               "frontier": {"seq": o.frontier_seq, "hash": o.frontier_hash.to_hex()},
               "unknown_ops": o.unknown_ops.iter().map(|u| json!({"op": u.op, "name": u.name})).collect::<Vec<_>>(),
               "facts": o.facts.iter().map(fact_json).collect::<Vec<_>>()}),
        || {
            let mut s = format!("deployment {}
", d.id);
            for f in &o.facts {
                s.push_str(&fact_line(f));
                s.push('\n');
            }
            s.push_str(&format!("evidence digest {}", o.digest));
            s
        },
    );
    // docs/EXIT-CODES.md: observe is a recovery's preflight: 0 only if a recovery now
    // would be admitted (every fact holds and the epoch is unused), else 2 with each reason.
    if o.holds() && epoch.is_none() {
        Ok(ExitCode::SUCCESS)
    } else {
        if !ctx.json {
            for r in &refusals {
                warn(&format!("repoch: refused: {r}"));
            }
        }
        Ok(ExitCode::from(2))
    }
}

/// Prints one admin event as a human line (or its JSON with --json).
fn print_event(ctx: &Ctx, e: &AdminEvent) {
    match e {
        AdminEvent::Progress { step, detail } => ctx.out(
            json!({"event": "progress", "step": step, "detail": detail}),
            || format!("{step:<22} {detail}"),
        ),
        AdminEvent::Fact(f) => ctx.out(json!({"event": "fact", "fact": fact_json(f)}), || {
            fact_line(f)
        }),
        AdminEvent::Record { kind, seq, hash } => ctx.out(
            json!({"event": "record", "kind": kind, "seq": seq, "hash": hash.to_hex()}),
            || format!("{:<22} #{seq} {kind} {hash} (fsynced)", "record"),
        ),
        AdminEvent::Outcome { .. } => {}
    }
}

pub fn grant_json(bytes: &[u8]) -> serde_json::Value {
    use repoch_protocol::cbor::Canonical as _;
    match repoch_protocol::grant::SignedGrant::from_bytes(bytes) {
        Ok(g) => {
            let g = g.grant;
            json!({"deployment": g.deployment.to_hex(), "intent": g.intent.to_hex(), "consume": g.consume.to_hex(), "evidence": g.evidence.to_hex(),
                   "ready": g.ready_path, "ready_sha256": g.ready_sha256.to_hex(),
                   "fences": g.fences.iter().map(|f| json!({"path": f.path, "ino": f.identity.ino})).collect::<Vec<_>>(),
                   "frontier": {"seq": g.frontier_seq, "hash": g.frontier_hash.to_hex()},
                   "unknown_ops": g.unknown_ops.iter().map(|u| json!({"op": u.op, "name": u.name})).collect::<Vec<_>>(),
                   "sha256": repoch_protocol::Hash::of(bytes).to_hex()})
        }
        Err(e) => json!({"error": e.to_string()}),
    }
}

pub fn recover(ctx: &Ctx, prefix: &str, approve: Option<&str>, wait: u64) -> CmdResult {
    use repoch_protocol::wire::{read_msg_by, write_msg, AdminRequest};
    let approve_ready = approve.map(parse_sha256).transpose()?;
    let id = store::resolve(&ctx.layout, prefix)?;
    let sock = ctx.layout.admin_socket();
    let mut s = std::os::unix::net::UnixStream::connect(&sock).map_err(|e| {
        // The socket's mode keeps non-root peers out: that is a denial, not an absence.
        let reason = match e.kind() {
            std::io::ErrorKind::PermissionDenied => Reason::AdminDenied,
            _ => Reason::DaemonUnreachable,
        };
        Failure::refused(Refusal::new(
            reason,
            sock.display().to_string(),
            "repochd listening, and a root peer",
            e.to_string(),
        ))
    })?;
    // Every message whole within the consumer wait (at most CONSUMER_WAIT_SECONDS_MAX, by
    // the parser) plus a margin for an observation, re-armed before every read: a repochd
    // that drips bytes cannot hold us past it. Per message, not per session: observations
    // that a crowded host makes slow (each one streams its facts when done) must not make
    // the client give up, and say "uncertain", while repochd goes on and grants.
    let margin = repoch_issuer::barrier::margin_seconds(RECOVER_MARGIN_SECONDS);
    let per_message = std::time::Duration::from_secs(wait.saturating_add(margin));
    let _ = s.set_write_timeout(Some(std::time::Duration::from_secs(RECOVER_MARGIN_SECONDS)));
    // repochd may refuse before reading (a non-root peer): a failed write is reported only
    // if no answer can be read either.
    let sent = write_msg(
        &mut s,
        &AdminRequest::Recover {
            deployment: id,
            approve_ready,
            consumer_wait_seconds: wait,
        },
    );
    ctx.out(json!({"event": "start", "deployment": id.to_hex()}), || {
        format!("recover {id}")
    });
    loop {
        let deadline = std::time::Instant::now() + per_message;
        let e: AdminEvent = match read_msg_by(&mut s, deadline, &mut |s, left| {
            s.set_read_timeout(Some(left))
        }) {
            Ok(e) => e,
            Err(_) if sent.is_err() => {
                let e = sent.err().map(|e| e.to_string()).unwrap_or_default();
                return Err(Failure::refused(Refusal::new(
                    Reason::DaemonUnreachable,
                    sock.display().to_string(),
                    "a request sent",
                    e,
                )));
            }
            // A peer that speaks something else is a bug on one side.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(Failure::Internal(format!(
                    "repochd sent a malformed message: {e}"
                )))
            }
            // Lost mid-issuance: the epoch may have been used; only its log can tell.
            Err(e) => {
                return Err(Failure::Uncertain(format!(
                "repochd stopped answering ({e}); the outcome is unknown: read `repoch status {}`",
                &id.to_hex()[..8]
            )))
            }
        };
        let AdminEvent::Outcome {
            outcome,
            reasons,
            detail,
            grant,
        } = &e
        else {
            print_event(ctx, &e);
            continue;
        };
        let code = outcome.outcome().code();
        let g = grant.as_deref().map(grant_json);
        ctx.out(
            json!({"event": "outcome", "outcome": outcome.as_str(), "exit": code, "reasons": reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>(), "detail": detail, "grant": g}),
            || {
                let mut t = format!("{:<22} {}", "outcome", outcome.as_str());
                if let Some(g) = &g {
                    t.push_str(&format!("\ngrant sha256 {}\n  READY {} sha256 {}\n  fences {}\n  journal frontier seq {} \n  unknown operations {}",
                        g["sha256"].as_str().unwrap_or(""), g["ready"].as_str().unwrap_or(""), g["ready_sha256"].as_str().unwrap_or(""),
                        g["fences"].as_array().map_or(0, Vec::len), g["frontier"]["seq"], g["unknown_ops"]));
                } else {
                    t.push_str(&format!(" ({})\n{detail}", reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ")));
                }
                t
            },
        );
        if code != 0 && !ctx.json {
            warn(&format!(
                "repoch: {}: {}",
                outcome.as_str(),
                reasons
                    .iter()
                    .map(|r| r.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        return Ok(ExitCode::from(code));
    }
}

/// Margin over the consumer wait for a recovery's observations and appends.
pub const RECOVER_MARGIN_SECONDS: u64 = 120;

pub fn demo(ctx: &Ctx, keep: bool) -> CmdResult {
    crate::demo::demo(ctx, keep)
}

//! `repoch journal`: producer journal records, for roots not written in Rust.

use std::path::Path;

use repoch_issuer::store;
use repoch_issuer::Refusal;
use repoch_protocol::journal::{next_frame, verify_journal, JournalBody, JournalPins, OpOutcome};
use repoch_protocol::text::escape;
use repoch_protocol::{Outcome, Reason};
use rustix::fs::OFlags;
use serde_json::json;

use super::common::Ctx;
use super::CmdResult;
use crate::exit::{Failure, Why};

/// A producer journal record, as typed on the command line.
#[derive(clap::Subcommand, Debug, Clone)]
pub enum JournalRecordArg {
    /// The root started (records this process's parent pid unless --pid).
    RootStart {
        /// 1..=4194304 (the kernel's PID_MAX_LIMIT).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=repoch_protocol::limits::PID_MAX))]
        pid: Option<u32>,
    },
    /// An operation begins; prints its op id (use it with op-end).
    OpBegin { name: String },
    /// An operation ended: succeeded, failed or unknown.
    OpEnd {
        /// The op id op-begin printed (below 18446744073709551615: the largest id leaves
        /// no next one).
        #[arg(value_parser = clap::value_parser!(u64).range(..=repoch_protocol::limits::OP_ID_MAX))]
        op: u64,
        outcome: String,
    },
    /// The root stopped cleanly.
    RootStop,
}

pub fn keygen(ctx: &Ctx, keyfile: &Path) -> CmdResult {
    let key =
        repoch_issuer::keys::generate().map_err(|e| Failure::Internal(Why::of("getrandom", e)))?;
    let pub_path = std::path::PathBuf::from(format!("{}.pub", keyfile.display()));
    repoch_issuer::keys::write_pair(keyfile, &pub_path, &key)
        .map_err(|e| Failure::Usage(Why::error(e)))?;
    let pk = hex::encode(key.verifying_key().to_bytes());
    ctx.out(
        json!({"key": escape(&keyfile.display().to_string()), "public": escape(&pub_path.display().to_string()), "public_key": pk}),
        || pk.clone(),
    );
    Ok(Outcome::Success)
}

pub fn append(
    ctx: &Ctx,
    journal: &Path,
    key: &Path,
    deployment: &str,
    rec: JournalRecordArg,
) -> CmdResult {
    let key = repoch_issuer::keys::read_secret(key).map_err(|e| Failure::Usage(Why::error(e)))?;
    let id = store::resolve(&ctx.layout, deployment)?;
    let issuer = store::issuer_public(&ctx.layout)?;
    let producer = repoch_protocol::PublicKey::from(&key.verifying_key());
    let (fd, bytes) = open_locked(journal)?;
    // What the journal must be, before and after the record: one set of pins for both.
    let pins = JournalPins {
        deployment: id,
        issuer: &issuer,
        producer: &producer,
        genesis: None,
    };
    let f = verify_journal(&bytes, pins).map_err(|e| {
        Failure::refused(Refusal::new(
            e.reason,
            journal.display().to_string(),
            "a valid journal",
            format!("offset {}: {}", e.offset, e.detail),
        ))
    })?;
    let body = body_of(rec, f.next_op)?;
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
    verify_journal(&after, pins).map_err(|e| {
        Failure::Usage(format!("this record would break the journal: {}", e.detail).into())
    })?;
    repoch_issuer::barrier::reach("journal-before-write");
    write_durably(&fd, &frame)?;
    // A verified journal has at most JOURNAL_RECORDS_MAX records: never u64::MAX.
    let seq = f.last_seq.saturating_add(1);
    ctx.out(
        json!({"seq": seq, "kind": kind, "hash": hash.to_hex(), "op": op}),
        || match op {
            Some(op) => op.to_string(),
            None => format!("appended {kind} as record {seq}"),
        },
    );
    Ok(Outcome::Success)
}

/// The journal opened for appending (no symlink; a regular file), locked for this one
/// writer (an exclusive `flock`), and read whole within its bound.
fn open_locked(journal: &Path) -> Result<(std::os::fd::OwnedFd, Vec<u8>), Failure> {
    let fd =
        repoch_sys::fs::open_path(journal, OFlags::RDWR | OFlags::APPEND | OFlags::NONBLOCK, 0)
            .map_err(|e| {
                Failure::refused(Refusal::new(
                    Reason::LineageMissing,
                    journal.display().to_string(),
                    "present",
                    e.to_string(),
                ))
            })?;
    // A FIFO or device at the journal path is no journal (and would block or never end).
    let st = rustix::fs::fstat(&fd).map_err(|e| Failure::Internal(Why::of("fstat", e)))?;
    if let Some(kind) = repoch_sys::fs::not_regular(st.st_mode) {
        return Err(Failure::refused(Refusal::new(
            Reason::LineageReplaced,
            journal.display().to_string(),
            "the journal, a regular file",
            kind,
        )));
    }
    // One writer at a time: an exclusive flock on the journal while appending.
    rustix::fs::flock(&fd, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| Failure::Internal(Why::of("flock", e)))?;
    // Over its bound, the journal is bad input: lineage-mutated, as `verify_journal` says of
    // journal bytes over `JOURNAL_BYTES_MAX`.
    let bytes = repoch_sys::fs::read_bounded(&fd, repoch_protocol::limits::JOURNAL_BYTES_MAX)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::FileTooLarge => Failure::refused(Refusal::new(
                Reason::LineageMutated,
                journal.display().to_string(),
                "a valid journal",
                e.to_string(),
            )),
            _ => Failure::Internal(Why::error(e)),
        })?;
    Ok((fd, bytes))
}

/// The record asked for on the command line; an op-begin takes the journal's next op id.
fn body_of(rec: JournalRecordArg, next_op: u64) -> Result<JournalBody, Failure> {
    Ok(match rec {
        JournalRecordArg::RootStart { pid } => JournalBody::RootStart {
            pid: pid.unwrap_or_else(|| {
                rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32)
            }),
        },
        JournalRecordArg::OpBegin { name } => {
            repoch_protocol::types::check_text(&name)
                .map_err(|e| Failure::Usage(String::from(e).into()))?;
            if name.len() > repoch_protocol::limits::OP_NAME_BYTES_MAX {
                return Err(Failure::Usage(
                    format!(
                        "op name over {} bytes",
                        repoch_protocol::limits::OP_NAME_BYTES_MAX
                    )
                    .into(),
                ));
            }
            JournalBody::OpBegin { op: next_op, name }
        }
        JournalRecordArg::OpEnd { op, outcome } => JournalBody::OpEnd {
            op,
            outcome: OpOutcome::parse(&outcome).ok_or_else(|| {
                Failure::Usage(
                    format!("outcome {outcome:?}: expected succeeded, failed or unknown").into(),
                )
            })?,
        },
        JournalRecordArg::RootStop => JournalBody::RootStop,
    })
}

/// One frame written and made durable; a failure is uncertain (never retried): a failed
/// write may have reached the disk in part, as a failed fdatasync may have.
fn write_durably(fd: &std::os::fd::OwnedFd, frame: &[u8]) -> Result<(), Failure> {
    let n = rustix::io::write(fd, frame)
        .map_err(|e| Failure::Uncertain(Why::of("write failed (not retried)", e)))?;
    if n != frame.len() {
        return Err(Failure::Uncertain(
            format!(
                "short write ({n} of {} bytes): the journal is torn",
                frame.len()
            )
            .into(),
        ));
    }
    rustix::fs::fdatasync(fd)
        .map_err(|e| Failure::Uncertain(Why::of("fdatasync failed (not retried)", e)))
}

//! `repoch enroll`: a deployment from its manifest, once.

use std::path::Path;

use repoch_issuer::Refusal;
use repoch_protocol::{Outcome, Reason};
use rustix::fs::OFlags;
use serde_json::json;

use super::common::{now, require_root, warn, Ctx};
use super::CmdResult;
use crate::exit::Failure;

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

pub fn run(ctx: &Ctx, manifest: &Path) -> CmdResult {
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
    Ok(Outcome::Success)
}

//! The journal an enrollment creates (docs/OPERATOR.md, "Enrolling a deployment (once)"):
//! created where no file is (never over one), its owner and mode set, its genesis written
//! durably, made append-only where the file system allows it, and removed if the
//! enrollment fails.

use super::*;

/// Creates the journal with its genesis; returns its identity, genesis hash and whether the
/// append-only flag could be set.
pub(super) fn create_journal(
    v: &Validated,
    id: DeploymentId,
    key: &SigningKey,
) -> Result<(repoch_protocol::Identity, Hash, AppendOnly), EnrollError> {
    let path = Path::new(&v.journal_path);
    let parent = path.parent().expect("absolute path has a parent");
    let pfd = open_path(parent, OFlags::RDONLY | OFlags::DIRECTORY, 0).map_err(|e| {
        EnrollError::Refused {
            what: format!("journal directory {}", parent.display()),
            why: e.to_string(),
        }
    })?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .expect("validated path");
    let fd = repoch_sys::fs::open_at(
        &pfd,
        name,
        OFlags::RDWR | OFlags::APPEND | OFlags::CREATE | OFlags::EXCL,
        0o600,
    )
    .map_err(|e| EnrollError::Refused {
        what: format!("journal {}", v.journal_path),
        why: format!("{e} (enrollment never writes over an existing file)"),
    })?;
    let (frame, genesis) = next_frame(
        id,
        None,
        JournalBody::Genesis {
            producer_key: v.producer_key,
        },
        key,
    );
    // The file is this enrollment's from here: whatever fails removes it, or the next
    // enrollment of the same manifest would be refused for the file this one left.
    match write_journal(v, (&pfd, &fd), &frame) {
        Ok((ident, append_only)) => Ok((ident, genesis, append_only)),
        Err(e) => {
            remove_journal(&v.journal_path);
            Err(e)
        }
    }
}

/// The new journal `fd` (in the directory `pfd`) given its owner and mode, then its genesis
/// `frame`, durably, then made append-only where the file system allows it: its identity,
/// and whether it is append-only. Each failure names its step.
fn write_journal(
    v: &Validated,
    (pfd, fd): (&std::os::fd::OwnedFd, &std::os::fd::OwnedFd),
    frame: &[u8],
) -> Result<(repoch_protocol::Identity, AppendOnly), EnrollError> {
    let io = |step: &str, e: std::io::Error| {
        EnrollError::Io(format!("journal {}: {step}: {e}", v.journal_path))
    };
    // Owner and mode before the append-only flag: afterwards even chown fails.
    let owner = format!("chown to uid {} gid {}", v.journal_uid, v.journal_gid);
    rustix::fs::fchown(
        fd,
        Some(rustix::process::Uid::from_raw(v.journal_uid)),
        Some(rustix::process::Gid::from_raw(v.journal_gid)),
    )
    .map_err(|e| io(&owner, e.into()))?;
    rustix::fs::fchmod(fd, rustix::fs::Mode::from_raw_mode(0o600))
        .map_err(|e| io("chmod 0600", e.into()))?;
    let n = rustix::io::write(fd, frame).map_err(|e| io("write its genesis", e.into()))?;
    if n != frame.len() {
        return Err(io(
            "write its genesis",
            std::io::Error::other("short write"),
        ));
    }
    rustix::fs::fdatasync(fd).map_err(|e| io("fdatasync", e.into()))?;
    rustix::fs::fsync(pfd).map_err(|e| io("fsync its directory", e.into()))?;
    let append_only = repoch_sys::fs::set_append_only(fd);
    let ident = fstat_identity(fd).map_err(|e| io("fstat", e))?;
    if ident.birth.is_none() {
        return Err(EnrollError::Refused {
            what: format!("journal {}", v.journal_path),
            why: NO_BIRTH_TIME.into(),
        });
    }
    Ok((ident, append_only))
}

/// Removes a journal created by a failed enrollment (clearing the append-only flag first).
pub(super) fn remove_journal(path: &str) {
    if let Ok(fd) = open_path(Path::new(path), OFlags::RDONLY, 0) {
        repoch_sys::fs::clear_append_only(&fd);
    }
    let _ = std::fs::remove_file(path);
}

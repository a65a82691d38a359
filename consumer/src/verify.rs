//! What the consumer checks of what it received: the grant against the pinned issuer key,
//! the fds against the grant (each fence the enrolled object, each listener its endpoint),
//! the checkpoint and the epoch log against the grant.

use std::os::fd::OwnedFd;
use std::path::Path;

use repoch_protocol::cbor::Canonical;
use repoch_protocol::checkpoint;
use repoch_protocol::epoch::EpochBody;
use repoch_protocol::grant::{Grant, SignedGrant};
use repoch_protocol::PublicKey;

use crate::*;

/// Verifies a grant's issuer signature (strictly) and, when given, that it names our key.
pub fn verify(bytes: &[u8], issuer: &PublicKey, ours: Option<&PublicKey>) -> Result<Grant, Error> {
    let g = SignedGrant::from_bytes(bytes).map_err(|e| Error::BadGrant(e.to_string()))?;
    if !g.verify(issuer) {
        return Err(Error::BadGrant(format!(
            "not signed by the pinned issuer key {issuer}"
        )));
    }
    if let Some(k) = ours {
        if &g.grant.consumer_key != k {
            return Err(Error::BadGrant(
                "the grant names another consumer key".into(),
            ));
        }
    }
    Ok(g.grant)
}

/// Every received fd is the fence the grant names, by device, inode and birth time, in order.
/// `; rewritten from record #N ...` when the first rewritten record is known.
pub(crate) fn rewritten(from: &Option<u64>) -> String {
    from.map_or(String::new(), |i| {
        format!("; rewritten from record #{i}, which is not the one the grant names")
    })
}

/// Records a log has once its receipt is appended: genesis, intent, consume, receipt.
pub(crate) const RECEIPTED_RECORDS: u64 = 4;

/// The checkpoint sent with the grant: signed by the issuer key under
/// [`checkpoint::KEY_NAME`], about this deployment's log, and taken with the receipt.
pub fn check_checkpoint(
    note: &str,
    g: &Grant,
    issuer: &PublicKey,
) -> Result<checkpoint::Checkpoint, Error> {
    let c = checkpoint::Checkpoint::verify(note, checkpoint::KEY_NAME, issuer)
        .map_err(|e| Error::BadGrant(format!("its checkpoint: {e}")))?;
    let want = checkpoint::origin(&g.deployment);
    if c.origin != want {
        return Err(Error::BadGrant(format!(
            "its checkpoint is of {:?}, not {want:?}",
            c.origin
        )));
    }
    if c.size < RECEIPTED_RECORDS {
        return Err(Error::BadGrant(format!(
            "its checkpoint has {} records, a receipted log at least {RECEIPTED_RECORDS}",
            c.size
        )));
    }
    Ok(c)
}

/// `verify --log`: the checkpoint kept beside the grant, whether the epoch log at `log`
/// extends it (docs/AUDITOR.md, "Checkpoints"), and whether the log's receipt carries this
/// very grant (`grant_bytes`, as read from the grant file). A log that does not extend the
/// checkpoint is [`Error::Inconsistent`] with the evidence pair; one whose receipt carries
/// another grant is [`Error::NotThisGrant`], so a grant kept beside another issuance's
/// checkpoint never verifies against that issuance's log.
pub fn verify_log_against(
    g: &Grant,
    grant_bytes: &[u8],
    grant_path: &Path,
    log: &Path,
    issuer: &PublicKey,
) -> Result<(checkpoint::Checkpoint, checkpoint::Extension), Error> {
    let c = check_checkpoint(&read_note(&checkpoint_path(grant_path))?, g, issuer)?;
    // Through no symlink, as `repoch audit` reads a log.
    let max = repoch_protocol::limits::LOG_BYTES_MAX;
    let bytes = repoch_sys::fs::read_regular(log, max, repoch_sys::fs::Links::Refuse)
        .map_err(|e| Error::Usage(format!("{}: {e}", log.display())))?;
    let report = repoch_protocol::epoch::verify_log(&bytes, issuer, Some(g.deployment));
    let x = c
        .extended_by(&report)
        .map_err(|i| Error::Inconsistent(i, rewritten_from(g, &report)))?;
    // Extending the note, the log must verify as a whole, as `repoch audit` reads it:
    // bytes after the receipt make it torn (or corrupt), whatever the records before hold.
    if let (Some((at, why)), Some(reason)) =
        (report.problem.clone(), report.classification.refusal())
    {
        return Err(Error::LogInvalid {
            reason,
            detail: format!("{}: at offset {at}: {why}", log.display()),
        });
    }
    let receipt = usize::try_from(RECEIPTED_RECORDS - 1).unwrap_or(usize::MAX);
    let holds = report.records.get(receipt).is_some_and(
        |r| matches!(&r.record.record.body, EpochBody::Receipt { grant } if grant == grant_bytes),
    );
    if !holds {
        return Err(Error::NotThisGrant {
            grant_sha256: repoch_protocol::Hash::of(grant_bytes),
            log: x.current,
            from: rewritten_from(g, &report),
        });
    }
    Ok((c, x))
}

/// A kept checkpoint note, read as `repoch audit --checkpoint` reads one: a path that
/// cannot be opened (missing, not permitted, a symlink) is a usage error; a note over its
/// bound of `CHECKPOINT_BYTES_MAX` bytes, or not UTF-8, is an invalid checkpoint.
fn read_note(cp: &Path) -> Result<String, Error> {
    let max = repoch_protocol::limits::CHECKPOINT_BYTES_MAX;
    let note = repoch_sys::fs::read_regular(cp, max, repoch_sys::fs::Links::Refuse).map_err(
        |e| match e.kind() {
            std::io::ErrorKind::FileTooLarge => {
                Error::BadGrant(format!("its checkpoint {}: {e}", cp.display()))
            }
            _ => Error::Usage(format!("{}: {e}", cp.display())),
        },
    )?;
    String::from_utf8(note).map_err(|_| Error::BadGrant(format!("{}: not UTF-8", cp.display())))
}

/// The first record of the log that is not the one the grant names (its intent is record
/// #1, its consume #2): with a fork, where the log was rewritten from. Record #1 means it
/// was rolled back to its genesis and appended again: a second issuance of the epoch.
pub(crate) fn rewritten_from(g: &Grant, report: &repoch_protocol::epoch::LogReport) -> Option<u64> {
    [(1, g.intent), (2, g.consume)]
        .into_iter()
        .find(|(i, h)| report.records.get(*i).is_some_and(|r| r.hash != *h))
        .map(|(i, _)| i as u64)
}

/// Splits the received fds into the fences (left in `fds`, each checked against its
/// grant entry) and the listeners (returned, each checked against its listener).
pub(crate) fn check_fds(g: &Grant, fds: &mut Vec<OwnedFd>) -> Result<Vec<OwnedFd>, Error> {
    if fds.len() != g.fences.len() + g.listeners.len() {
        return Err(Error::BadGrant(format!(
            "{} fds received, the grant names {} fences and {} listeners",
            fds.len(),
            g.fences.len(),
            g.listeners.len()
        )));
    }
    let listeners = fds.split_off(g.fences.len());
    check_fences(g, fds)?;
    for (fd, l) in listeners.iter().zip(&g.listeners) {
        check_listener(fd, l).map_err(|why| Error::BadGrant(format!("fd for {l}: {why}")))?;
    }
    Ok(listeners)
}

/// Whether `fd` is the endpoint `l`: a socket of its kind bound to its port on its
/// address (on a wildcard for `*`) or to its path, listening unless it is UDP.
pub(crate) fn check_listener(
    fd: &OwnedFd,
    l: &repoch_protocol::manifest::Listener,
) -> Result<(), String> {
    use repoch_protocol::manifest::Listener;
    use rustix::net::{sockopt, SocketType};
    let kind = sockopt::socket_type(fd).map_err(|e| format!("not a socket ({e})"))?;
    let name = rustix::net::getsockname(fd).map_err(|e| format!("getsockname: {e}"))?;
    let (want_kind, listens) = match l {
        Listener::Tcp(_) | Listener::Unix(_) => (SocketType::STREAM, true),
        Listener::Udp(_) => (SocketType::DGRAM, false),
    };
    if kind != want_kind {
        return Err(format!("a socket of type {kind:?}, not {want_kind:?}"));
    }
    let bound = match l {
        // On its enrolled address, or on the IPv6 wildcard for every address (`*`).
        Listener::Tcp(i) | Listener::Udp(i) => std::net::SocketAddr::try_from(name.clone())
            .ok()
            .filter(|a| {
                a.port() == i.port
                    && match i.addr {
                        Some(want) => a.ip() == want,
                        None => a.ip().is_unspecified(),
                    }
            })
            .is_some(),
        // repochd binds the name relative to the path's directory (docs/PROTOCOL.md,
        // "Grant socket"): the socket's address is that name.
        Listener::Unix(p) => rustix::net::SocketAddrUnix::try_from(name.clone())
            .ok()
            .and_then(|u| {
                let bound = u.path()?.to_bytes().to_vec();
                let file = std::path::Path::new(p)
                    .file_name()?
                    .as_encoded_bytes()
                    .to_vec();
                Some(bound == p.as_bytes() || bound == file)
            })
            .unwrap_or(false),
    };
    if !bound {
        return Err(format!("bound to {name:?}"));
    }
    if listens && !sockopt::socket_acceptconn(fd).unwrap_or(false) {
        return Err("not listening".into());
    }
    Ok(())
}

pub(crate) fn check_fences(g: &Grant, fds: &[OwnedFd]) -> Result<(), Error> {
    if fds.len() != g.fences.len() {
        return Err(Error::BadGrant(format!(
            "{} fence fds received, the grant names {}",
            fds.len(),
            g.fences.len()
        )));
    }
    for (fd, f) in fds.iter().zip(&g.fences) {
        let got = object_of(fd).map_err(|e| Error::BadGrant(e.to_string()))?;
        let want = &f.identity;
        if got.0 != want.dev || got.1 != want.ino || got.2 != want.birth {
            let born = |b: Option<repoch_protocol::types::Birth>| {
                b.map_or("unknown".to_owned(), |b| b.to_string())
            };
            return Err(Error::BadGrant(format!(
                "fd for {} is inode {} born {}, the grant names inode {} born {}",
                f.path,
                got.1,
                born(got.2),
                want.ino,
                born(want.birth)
            )));
        }
    }
    Ok(())
}

/// A received fd's object: device, inode number and birth time (`statx` `STATX_BTIME`,
/// `None` where the file system gives none), compared the way the issuer compares enrolled
/// objects (`Identity::same_object`): an inode number reused by a recreated file is another
/// object.
pub(crate) fn object_of(
    fd: &OwnedFd,
) -> std::io::Result<(u64, u64, Option<repoch_protocol::types::Birth>)> {
    let id = repoch_sys::fs::fstat_identity(fd)?;
    Ok((id.dev, id.ino, id.birth))
}

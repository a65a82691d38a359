//! The protected state store on the real file system: opening an enrolled deployment with
//! every identity checked against the manifest, the issuer lock, and listing.

use std::os::fd::OwnedFd;
use std::path::Path;

use repoch_protocol::cbor::Canonical;
use repoch_protocol::epoch::{Classification, EpochBody, LogReport};
use repoch_protocol::manifest::{Manifest, Role, SignedManifest};
use repoch_protocol::{DeploymentId, Hash, Identity, PublicKey, Reason};
use rustix::fs::{FlockOperation, OFlags};

use crate::layout::{Layout, LOCK_FILE, LOG_FILE, MANIFEST_FILE};
use crate::log::EpochLog;
use crate::refusal::Refusal;
use crate::storage::{Real, Storage};
use repoch_sys::fs::{open_at, open_path, read_bounded};
use repoch_sys::procfs;

/// Largest manifest file read.
pub const MANIFEST_BYTES_MAX: usize = repoch_protocol::limits::FRAME_BYTES_MAX;
/// Deployments listed in one state root.
pub const DEPLOYMENTS_MAX: usize = 4096;

pub use repoch_sys::fs::{fstat_identity, has_access_acl};

/// Checks an opened state object against its enrolled identity: another inode is
/// `state-replaced`; another owner, or any group/other permission bit, is `state-unprotected`.
pub fn check_state_identity(
    subject: &str,
    enrolled: &Identity,
    observed: &Identity,
) -> Result<(), Refusal> {
    if !enrolled.same_object(observed) {
        return Err(Refusal::new(
            Reason::StateReplaced,
            subject,
            enrolled.object(),
            observed.object(),
        ));
    }
    if observed.uid != enrolled.uid || observed.mode & 0o077 != 0 || observed.mode != enrolled.mode
    {
        return Err(Refusal::new(
            Reason::StateUnprotected,
            subject,
            format!("uid {} mode {:o}", enrolled.uid, enrolled.mode & 0o7777),
            format!("uid {} mode {:o}", observed.uid, observed.mode & 0o7777),
        ));
    }
    Ok(())
}

fn open_failed(subject: &str, e: std::io::Error) -> Refusal {
    match e.raw_os_error() {
        // O_NOFOLLOW gives ELOOP on a symlinked file and ENOTDIR on a symlinked directory.
        Some(n)
            if n == rustix::io::Errno::LOOP.raw_os_error()
                || n == rustix::io::Errno::NOTDIR.raw_os_error() =>
        {
            Refusal::new(
                Reason::StateUnprotected,
                subject,
                "no symlink",
                "a symlink or another file type",
            )
        }
        Some(enoent) if enoent == rustix::io::Errno::NOENT.raw_os_error() => {
            Refusal::new(Reason::StateReplaced, subject, "present", "missing")
        }
        _ => Refusal::new(Reason::ObserveFailed, subject, "readable", e.to_string()),
    }
}

/// An enrolled deployment, opened and checked.
#[derive(Debug)]
pub struct Deployment {
    pub id: DeploymentId,
    pub manifest: Manifest,
    pub manifest_hash: Hash,
    pub dir: OwnedFd,
    pub lock: OwnedFd,
    pub log: EpochLog<OwnedFd>,
    /// The state is on a read-only file system: readable, never issued from.
    pub read_only: bool,
}

/// A deployment's objects opened and checked, its log not yet read.
#[derive(Debug)]
pub struct Opened {
    pub id: DeploymentId,
    pub manifest: Manifest,
    /// The manifest file's bytes, as read (their sha256 is the genesis' manifest hash).
    pub bytes: Vec<u8>,
    pub dir: OwnedFd,
    pub lock: OwnedFd,
    pub log_fd: OwnedFd,
    pub read_only: bool,
}

/// The epoch log in a deployment's state directory `dir`, opened for appending, or for
/// reading alone on a read-only file system (then `true`).
fn open_log(dir: &OwnedFd) -> Result<(OwnedFd, bool), Refusal> {
    match open_at(dir, LOG_FILE, OFlags::RDWR | OFlags::APPEND, 0) {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::ROFS.raw_os_error()) => Ok((
            open_at(dir, LOG_FILE, OFlags::RDONLY, 0).map_err(|e| open_failed(LOG_FILE, e))?,
            true,
        )),
        r => Ok((r.map_err(|e| open_failed(LOG_FILE, e))?, false)),
    }
}

/// The signed manifest in a deployment's state directory `dir`: opened without blocking (a
/// FIFO in its place), read within its bound, signed by the host issuer key and naming
/// deployment `id`. Its descriptor, its bytes and the manifest.
fn read_manifest(
    dir: &OwnedFd,
    issuer: &PublicKey,
    id: DeploymentId,
) -> Result<(OwnedFd, Vec<u8>, Manifest), Refusal> {
    // O_NONBLOCK: a FIFO put in its place must not block the open.
    let mf = open_at(dir, MANIFEST_FILE, OFlags::RDONLY | OFlags::NONBLOCK, 0)
        .map_err(|e| open_failed(MANIFEST_FILE, e))?;
    let bytes = read_bounded(&mf, MANIFEST_BYTES_MAX).map_err(|e| open_failed(MANIFEST_FILE, e))?;
    let signed = SignedManifest::from_bytes(&bytes).map_err(|e| {
        Refusal::new(
            Reason::ManifestForged,
            MANIFEST_FILE,
            "a canonical signed manifest",
            e.to_string(),
        )
    })?;
    if !signed.verify(issuer) {
        return Err(Refusal::new(
            Reason::ManifestForged,
            MANIFEST_FILE,
            "signed by the host issuer key",
            "another signature",
        ));
    }
    let manifest = signed.manifest;
    if manifest.deployment != id {
        return Err(Refusal::new(
            Reason::StateReplaced,
            MANIFEST_FILE,
            format!("deployment {id}"),
            format!("deployment {}", manifest.deployment),
        ));
    }
    Ok((mf, bytes, manifest))
}

impl Deployment {
    /// Opens deployment `id`: every object through the state directory's fd without
    /// following symlinks, each identity checked against the signed manifest, the log
    /// read and verified. Takes no lock: for reading (status, audit, a predecessor).
    pub fn open(
        layout: &Layout,
        issuer: &PublicKey,
        id: DeploymentId,
    ) -> Result<Deployment, Refusal> {
        Deployment::read_log(Deployment::open_objects(layout, issuer, id)?, issuer)
    }

    /// Opens deployment `id`'s objects, each identity checked against the signed manifest;
    /// takes no lock and reads no log (an issuance locks first: `issuance::Reserved::reserve`).
    pub fn open_objects(
        layout: &Layout,
        issuer: &PublicKey,
        id: DeploymentId,
    ) -> Result<Opened, Refusal> {
        let state = layout.state_dir(&id);
        let subject = state.display().to_string();
        let deps = open_path(&layout.deployments(), OFlags::RDONLY | OFlags::DIRECTORY, 0)
            .map_err(|e| open_failed(&layout.deployments().display().to_string(), e))?;
        let dir = open_at(&deps, &id.to_hex(), OFlags::RDONLY | OFlags::DIRECTORY, 0).map_err(
            |e| match e.kind() {
                std::io::ErrorKind::NotFound => {
                    Refusal::new(Reason::DeploymentUnknown, &subject, "enrolled", "missing")
                }
                _ => open_failed(&subject, e),
            },
        )?;
        let (mf, bytes, manifest) = read_manifest(&dir, issuer, id)?;
        let enrolled = |role: Role| {
            manifest.entry(role).map(|e| e.identity).ok_or_else(|| {
                Refusal::new(
                    Reason::ManifestForged,
                    MANIFEST_FILE,
                    format!("a {} entry", role.as_str()),
                    "none",
                )
            })
        };
        let dir_id = fstat_identity(&dir).map_err(|e| open_failed(&subject, e))?;
        check_state_identity(&subject, &enrolled(Role::StateDir)?, &dir_id)?;
        let mf_id = fstat_identity(&mf).map_err(|e| open_failed(MANIFEST_FILE, e))?;
        if mf_id.uid != dir_id.uid || mf_id.mode & 0o077 != 0 {
            return Err(Refusal::new(
                Reason::StateUnprotected,
                MANIFEST_FILE,
                "root-owned, mode 0600",
                format!("uid {} mode {:o}", mf_id.uid, mf_id.mode & 0o7777),
            ));
        }
        // A read-only file system (a forensic copy, a disk remounted read-only after errors)
        // still reads: `status` and `observe` change nothing. Issuance is refused at the
        // issuer lock (`state-read-only`), before anything is observed or written.
        let (log_fd, read_only) = open_log(&dir)?;
        check_state_identity(
            LOG_FILE,
            &enrolled(Role::EpochLog)?,
            &fstat_identity(&log_fd).map_err(|e| open_failed(LOG_FILE, e))?,
        )?;
        // flock needs no write access.
        let lock =
            open_at(&dir, LOCK_FILE, OFlags::RDONLY, 0).map_err(|e| open_failed(LOCK_FILE, e))?;
        check_state_identity(
            LOCK_FILE,
            &enrolled(Role::IssuerLock)?,
            &fstat_identity(&lock).map_err(|e| open_failed(LOCK_FILE, e))?,
        )?;
        Ok(Opened {
            id,
            manifest,
            bytes,
            dir,
            lock,
            log_fd,
            read_only,
        })
    }

    /// Reads and verifies the epoch log of opened objects.
    fn read_log(o: Opened, issuer: &PublicKey) -> Result<Deployment, Refusal> {
        let Opened {
            id,
            manifest,
            bytes,
            dir,
            lock,
            log_fd,
            read_only,
        } = o;
        let manifest_hash = Hash::of(&bytes);
        let log = read_epoch_log(&mut Real, log_fd, issuer, id, &manifest_hash)?;
        Ok(Deployment {
            id,
            manifest,
            manifest_hash,
            dir,
            lock,
            log,
            read_only,
        })
    }

    pub fn report(&self) -> &LogReport {
        self.log.report()
    }

    pub fn classification(&self) -> Classification {
        self.log.report().classification
    }

    /// Takes the issuer lock (`flock` EX, non-blocking). Busy names the holder(s).
    /// An issuance locks before it reads the log (`issuance::Reserved::reserve`).
    pub fn lock_issuer(&self) -> Result<(), Refusal> {
        if self.read_only {
            return Err(read_only_refusal());
        }
        lock_issuer(&self.lock)
    }

    /// The predecessor link of this deployment's genesis, if any.
    pub fn predecessor(&self) -> Option<repoch_protocol::manifest::Predecessor> {
        match &self.report().records.first()?.record.record.body {
            EpochBody::Genesis { predecessor, .. } => *predecessor,
            _ => None,
        }
    }
}

/// Reads and verifies a deployment's epoch log through any [`Storage`]; its genesis must
/// name the manifest whose sha256 is `manifest_hash`. The same code runs on the real file
/// system and in the simulation (`issuer/tests/checker.rs`).
pub fn read_epoch_log<S: Storage>(
    s: &mut S,
    log: S::File,
    issuer: &PublicKey,
    id: DeploymentId,
    manifest_hash: &Hash,
) -> Result<EpochLog<S::File>, Refusal> {
    let log = EpochLog::open(s, log, *issuer, id).map_err(|e| open_failed(LOG_FILE, e))?;
    if let Some((m, _)) = log.report().genesis() {
        if m != manifest_hash {
            return Err(Refusal::new(
                Reason::ManifestForged,
                MANIFEST_FILE,
                format!("sha256 {m}"),
                format!("sha256 {manifest_hash}"),
            ));
        }
    }
    Ok(log)
}

/// The state is on a read-only file system: it reads, it is never issued from.
pub fn read_only_refusal() -> Refusal {
    Refusal::new(
        Reason::StateReadOnly,
        LOG_FILE,
        "writable",
        "on a read-only file system (Read-only file system)",
    )
}

/// Takes the issuer lock on an open lock file (`flock` EX, non-blocking); released when
/// the fd (and every dup of it) is closed. Busy names the holder(s).
pub fn lock_issuer(lock: &OwnedFd) -> Result<(), Refusal> {
    match rustix::fs::flock(lock, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(Refusal::new(
            Reason::IssuerBusy,
            LOCK_FILE,
            "unlocked",
            describe_holders("FLOCK", lock),
        )),
        Err(e) => Err(Refusal::new(
            Reason::ObserveFailed,
            LOCK_FILE,
            "lockable",
            e.to_string(),
        )),
    }
}

/// "held by pid N (comm) started at tick T" for every real holder of a lock of `kind` on
/// the file open as `fd`, else what `/proc/locks` says. The file is found by its `stat`
/// identity in other processes' descriptors, its locks by the device the kernel names
/// them by (`procfs::lock_device`: another one on btrfs).
pub fn describe_holders(kind: &str, fd: &OwnedFd) -> String {
    let id = match fstat_identity(fd) {
        Ok(id) => id,
        Err(e) => return format!("locked (holder unknown: {e})"),
    };
    let lock_dev = procfs::lock_device(fd).unwrap_or(id.dev);
    let holders = procfs::lock_holders(kind, (id.dev, id.ino), lock_dev);
    if holders.is_empty() {
        let pids = procfs::locks_list(kind, lock_dev, id.ino).unwrap_or_default();
        return format!("locked (holder not found; /proc/locks names pid {pids:?})");
    }
    let list: Vec<String> = holders.iter().map(ToString::to_string).collect();
    format!("held by {}", list.join(", "))
}

/// The enrolled deployment ids under a state root (entries starting with '.' are staging
/// directories of unfinished enrollments and are never deployments).
pub fn list(layout: &Layout) -> std::io::Result<Vec<DeploymentId>> {
    let dir = layout.deployments();
    let mut out = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for e in entries {
        let e = e?;
        if let Some(id) = e.file_name().to_str().and_then(DeploymentId::from_hex) {
            if out.len() == DEPLOYMENTS_MAX {
                return Err(std::io::Error::other(format!(
                    "more than {DEPLOYMENTS_MAX} deployments"
                )));
            }
            out.push(id);
        }
    }
    out.sort();
    Ok(out)
}

/// Resolves a unique prefix of a deployment id.
pub fn resolve(layout: &Layout, prefix: &str) -> Result<DeploymentId, Refusal> {
    let p = prefix.trim().to_ascii_lowercase();
    let not_an_id = if p.is_empty() {
        Some("empty".to_owned())
    } else if !p.chars().all(|c| c.is_ascii_hexdigit()) {
        Some("not hex".to_owned())
    } else if p.len() > 32 {
        Some(format!("{} characters, over the 32 of an id", p.len()))
    } else {
        None
    };
    if let Some(observed) = not_an_id {
        return Err(Refusal::new(
            Reason::DeploymentUnknown,
            prefix,
            "a hex id or unique prefix",
            observed,
        ));
    }
    let all = list(layout).map_err(|e| {
        Refusal::new(
            Reason::ObserveFailed,
            layout.deployments().display().to_string(),
            "listable",
            e.to_string(),
        )
    })?;
    let hits: Vec<DeploymentId> = all
        .into_iter()
        .filter(|d| d.to_hex().starts_with(&p))
        .collect();
    match hits.as_slice() {
        [one] => Ok(*one),
        [] => Err(Refusal::new(
            Reason::DeploymentUnknown,
            prefix,
            "an enrolled deployment",
            "no match",
        )),
        many => Err(Refusal::new(
            Reason::DeploymentAmbiguous,
            prefix,
            "a unique prefix",
            many.iter()
                .map(|d| d.to_hex())
                .collect::<Vec<_>>()
                .join(" "),
        )),
    }
}

/// Reads the host issuer public key.
pub fn issuer_public(layout: &Layout) -> Result<PublicKey, Refusal> {
    crate::keys::read_public(&layout.issuer_pub()).map_err(|e| {
        Refusal::new(
            Reason::ObserveFailed,
            layout.issuer_pub().display().to_string(),
            "the host issuer public key",
            e.to_string(),
        )
    })
}

/// Whether a path exists (without following a final symlink).
pub fn exists_nofollow(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

#[cfg(test)]
mod tests {
    use super::resolve;
    use crate::Layout;

    #[test]
    fn an_id_argument_that_is_no_id_is_refused_saying_what_it_is() {
        let d = tempfile::tempdir().unwrap();
        let layout = Layout::new(Some(d.path()));
        let observed = |arg: &str| resolve(&layout, arg).unwrap_err().observed;
        assert_eq!(
            observed(&"a".repeat(33)),
            "33 characters, over the 32 of an id"
        );
        assert_eq!(observed("0x12"), "not hex");
        assert_eq!(observed(""), "empty");
        assert_eq!(observed("  "), "empty");
    }
}

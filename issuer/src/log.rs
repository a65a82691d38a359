//! The storage-generic parts of the state store: the append protocol and the enrollment
//! sequence. They run unchanged on the real file system and in the crash simulation.

use std::io;

use repoch_protocol::cbor::Canonical;
use repoch_protocol::epoch::{verify_log, Classification, LogReport, SignedEpochRecord};
use repoch_protocol::limits::{LOG_BYTES_MAX, RECORD_BYTES_MAX};
use repoch_protocol::{DeploymentId, Hash, PublicKey};

use crate::layout::{LOCK_FILE, LOG_FILE, MANIFEST_FILE};
use crate::storage::Storage;

/// Why an append did not complete. `TooLarge` and `Undecodable` are found before anything
/// is written and leave the log as it was; every other one poisons it (`Poisoned` from then
/// on): a failed append is never retried.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("the epoch log is poisoned by an earlier write or sync error; the epoch is uncertain")]
    Poisoned,
    #[error("record of {0} bytes exceeds RECORD_BYTES_MAX")]
    TooLarge(usize),
    #[error("the record would not read back ({0}); nothing was written")]
    Undecodable(String),
    #[error("reserving the record's blocks failed (nothing was written): {0}")]
    Reserve(io::Error),
    #[error("write of the record failed: {0}")]
    Write(io::Error),
    #[error("short write: {written} of {len} bytes")]
    ShortWrite { written: usize, len: usize },
    #[error("fdatasync failed (never retried: fsyncgate): {0}")]
    Sync(io::Error),
    #[error("read-back of the appended record failed: {0}")]
    Readback(String),
}

/// Why an enrollment's sequence stopped: a step on the host's file system (what was being
/// done, and the system's error), or the caller's description of the deployment (`E`).
/// Nothing of a stopped sequence is a deployment: its staging directory has another name.
#[derive(Debug, thiserror::Error)]
pub enum EnrollSequenceError<E> {
    #[error("{step}: {source}")]
    Storage {
        step: String,
        #[source]
        source: io::Error,
    },
    #[error("short write of {0}")]
    ShortWrite(&'static str),
    #[error("append genesis: {0}")]
    Genesis(#[source] AppendError),
    #[error(transparent)]
    Describe(E),
}

/// An open epoch log: the verified content, and a poison flag set by any failed append.
#[derive(Debug)]
pub struct EpochLog<F> {
    pub file: F,
    pub issuer: PublicKey,
    pub deployment: DeploymentId,
    report: LogReport,
    len: usize,
    poisoned: bool,
}

impl<F> EpochLog<F> {
    /// Reads and verifies the whole log.
    pub fn open<S: Storage<File = F>>(
        s: &mut S,
        file: F,
        issuer: PublicKey,
        deployment: DeploymentId,
    ) -> io::Result<Self> {
        let (report, len, poisoned) = match s.read_all(&file, LOG_BYTES_MAX) {
            Ok(bytes) => (
                verify_log(&bytes, &issuer, Some(deployment)),
                bytes.len(),
                false,
            ),
            // Over its bound: corrupt, as docs/PROTOCOL.md classifies it (no append writes
            // one, no crash leaves one), never a failure to read. Not read further, and never
            // appended to.
            Err(e) if e.kind() == io::ErrorKind::FileTooLarge => (
                LogReport {
                    classification: Classification::Corrupt,
                    records: Vec::new(),
                    problem: Some((0, format!("the log is {e}"))),
                },
                LOG_BYTES_MAX + 1,
                true,
            ),
            Err(e) => return Err(e),
        };
        Ok(EpochLog {
            file,
            issuer,
            deployment,
            report,
            len,
            poisoned,
        })
    }

    pub fn report(&self) -> &LogReport {
        &self.report
    }
    pub fn poisoned(&self) -> bool {
        self.poisoned
    }
    pub fn next_seq(&self) -> u64 {
        self.report.records.len() as u64
    }
    pub fn last_hash(&self) -> Hash {
        self.report.last_hash().unwrap_or(Hash::ZERO)
    }

    /// Appends one signed record: one write of the whole frame, `fdatasync`, then read the
    /// log back and verify it ends in exactly this record. Any failure poisons the log.
    pub fn append<S: Storage<File = F>>(
        &mut self,
        s: &mut S,
        rec: &SignedEpochRecord,
    ) -> Result<Hash, AppendError> {
        if self.poisoned {
            return Err(AppendError::Poisoned);
        }
        let payload = rec.to_bytes();
        if payload.len() > RECORD_BYTES_MAX {
            return Err(AppendError::TooLarge(payload.len()));
        }
        // What is written must read back: a field over a decoder bound (a peer's cgroup path,
        // say) would otherwise become an unreadable, fsynced record.
        if let Err(e) = SignedEpochRecord::from_bytes(&payload) {
            return Err(AppendError::Undecodable(e.to_string()));
        }
        // Crossing the disk boundary: the record is what we think it is, right before writing.
        assert_eq!(rec.record.seq, self.next_seq(), "appending out of sequence");
        assert_eq!(rec.record.prev, self.last_hash(), "appending off the chain");
        assert!(
            rec.verify(&self.issuer),
            "appending a record that does not verify"
        );
        let hash = Hash::of(&payload);
        let frame = repoch_protocol::wire::frame(&payload);
        self.poisoned = true;
        s.reserve(&self.file, self.len as u64, frame.len() as u64)
            .map_err(AppendError::Reserve)?;
        let written = s.write(&self.file, &frame).map_err(AppendError::Write)?;
        if written != frame.len() {
            return Err(AppendError::ShortWrite {
                written,
                len: frame.len(),
            });
        }
        s.sync_data(&self.file).map_err(AppendError::Sync)?;
        let bytes = s
            .read_all(&self.file, LOG_BYTES_MAX)
            .map_err(|e| AppendError::Readback(e.to_string()))?;
        let report = verify_log(&bytes, &self.issuer, Some(self.deployment));
        let ok = bytes.len() == self.len + frame.len()
            && report.problem.is_none()
            && report.records.len() as u64 == self.next_seq() + 1
            && report.last_hash() == Some(hash);
        if !ok {
            return Err(AppendError::Readback(format!(
                "log reads back as {} with {} records",
                report.classification.as_str(),
                report.records.len()
            )));
        }
        self.report = report;
        self.len = bytes.len();
        self.poisoned = false;
        Ok(hash)
    }
}

/// Name of the directory an enrollment builds before it is renamed into place. Listing
/// ignores names starting with '.', so a crashed enrollment is never taken for a deployment.
pub fn staging_name(id: &DeploymentId) -> String {
    format!(".enroll-{}", id.to_hex())
}

/// Handles created by the first half of the enrollment sequence.
#[derive(Debug)]
pub struct Staged<D, F> {
    pub dir: D,
    pub log: F,
    pub lock: F,
}

/// The enrollment sequence, generic over storage:
///
/// 1. `mkdir .enroll-<id>` (0700) in the deployments directory;
/// 2. create `issuer.lock` and `epoch.log` (`O_EXCL`);
/// 3. `describe` captures identities and returns the signed manifest and genesis record;
/// 4. create `manifest.cbor`, write it, `fdatasync`;
/// 5. append the genesis to the log (write, `fdatasync`, read back);
/// 6. `fsync` the staging directory;
/// 7. rename it to `<id>` and `fsync` the deployments directory.
///
/// A deployment therefore exists under its name only once all its content is durable.
pub fn enroll_sequence<S: Storage, E>(
    s: &mut S,
    deployments: &S::Dir,
    id: &DeploymentId,
    issuer: PublicKey,
    describe: impl FnOnce(&mut S, &Staged<S::Dir, S::File>) -> Result<(Vec<u8>, SignedEpochRecord), E>,
) -> Result<(), EnrollSequenceError<E>> {
    let step = |what: String| move |source| EnrollSequenceError::Storage { step: what, source };
    let staging = staging_name(id);
    s.mkdir_at(deployments, &staging, crate::layout::STATE_DIR_MODE)
        .map_err(step(format!("create {staging}")))?;
    let dir = s
        .open_dir_at(deployments, &staging)
        .map_err(step(format!("open {staging}")))?;
    let lock = s
        .create_at(&dir, LOCK_FILE, 0o600)
        .map_err(step(format!("create {LOCK_FILE}")))?;
    let log = s
        .create_at(&dir, LOG_FILE, 0o600)
        .map_err(step(format!("create {LOG_FILE}")))?;
    let staged = Staged { dir, log, lock };
    let (manifest, genesis) = describe(s, &staged).map_err(EnrollSequenceError::Describe)?;
    let mf = s
        .create_at(&staged.dir, MANIFEST_FILE, 0o600)
        .map_err(step(format!("create {MANIFEST_FILE}")))?;
    let n = s
        .write(&mf, &manifest)
        .map_err(step(format!("write {MANIFEST_FILE}")))?;
    if n != manifest.len() {
        return Err(EnrollSequenceError::ShortWrite(MANIFEST_FILE));
    }
    s.sync_data(&mf)
        .map_err(step(format!("fdatasync {MANIFEST_FILE}")))?;
    let Staged { dir, log, .. } = staged;
    let mut elog = EpochLog::open(s, log, issuer, *id).map_err(step(format!("read {LOG_FILE}")))?;
    elog.append(s, &genesis)
        .map_err(EnrollSequenceError::Genesis)?;
    s.sync_dir(&dir)
        .map_err(step("fsync state directory".into()))?;
    s.rename_at(deployments, &staging, &id.to_hex())
        .map_err(step("rename into place".into()))?;
    s.sync_dir(deployments)
        .map_err(step("fsync deployments directory".into()))?;
    Ok(())
}

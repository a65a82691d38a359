//! Targets (docs/ARCHITECTURE.md, "Issuance", step 2): READY and the consumer executable,
//! each compared at every later observation with the [`Baseline`] the first one fixed.

use std::os::fd::OwnedFd;

use repoch_protocol::manifest::Manifest;
use repoch_protocol::{Fact, Hash, Identity, Reason};
use sha2::{Digest as _, Sha256};

use super::{open_enrolled, Enrolled};

/// Largest READY file hashed.
pub const READY_BYTES_MAX: u64 = 1024 * 1024;
/// Largest consumer executable hashed.
pub const EXE_BYTES_MAX: u64 = 512 * 1024 * 1024;

/// What the first observation of one issuance fixes for the later ones: the READY digest
/// (the operator's approval, else the first seen) and the consumer executable's identity
/// and digest.
#[derive(Clone, Debug, Default)]
pub struct Baseline {
    ready: Option<Hash>,
    operator_approved: bool,
    consumer_exe: Option<(Identity, Hash)>,
}

impl Baseline {
    /// A baseline with the operator's approved READY digest, if any.
    pub fn new(approved_ready: Option<Hash>) -> Baseline {
        Baseline {
            ready: approved_ready,
            operator_approved: approved_ready.is_some(),
            consumer_exe: None,
        }
    }
    /// The READY digest every observation must find (none before the first, unapproved).
    pub fn ready(&self) -> Option<Hash> {
        self.ready
    }
    /// The consumer executable's identity and digest as first observed.
    pub fn consumer_exe(&self) -> Option<(Identity, Hash)> {
        self.consumer_exe
    }
}

/// READY: its fact, and its digest (zero when it fails).
pub(super) fn ready(m: &Manifest, b: &mut Baseline, facts: &mut Vec<Fact>) -> Hash {
    let (digest, fact) = match ready_fact(m, b) {
        Ok((d, f)) => (d, f),
        Err(f) => (Hash::ZERO, f),
    };
    facts.push(fact);
    digest
}

/// READY: present, no symlink, a root-owned regular file not writable by group or
/// others, its digest the approved one (or, without approval, the first observation's).
fn ready_fact(m: &Manifest, b: &mut Baseline) -> Result<(Hash, Fact), Fact> {
    let path = m.target.ready_path.clone();
    let fail = |expected: &str, observed: &str, reason| {
        Fact::failed("ready", &path, expected, observed, reason)
    };
    let (fd, st) = open_enrolled(&Enrolled {
        kind: "ready",
        path: &path,
        missing: ("present", Reason::ReadyMissing),
        want: None,
        symlink: Reason::ReadyUnprotected,
        regular: Some(("a regular file", Reason::ReadyUnprotected)),
        identity: None,
    })?;
    if st.uid != 0 || st.mode & 0o022 != 0 {
        let observed = format!("uid {} mode {:o}", st.uid, st.mode);
        return Err(fail(
            "a regular file, uid 0, not group/other writable",
            &observed,
            Reason::ReadyUnprotected,
        ));
    }
    let digest =
        sha256_fd(&fd, READY_BYTES_MAX).map_err(|e| fail("readable", &e, Reason::ObserveFailed))?;
    let observed = format!("sha256 {digest}");
    let approved = *b.ready.get_or_insert(digest);
    if approved != digest {
        let reason = if b.operator_approved {
            Reason::ReadyUnapproved
        } else {
            Reason::ReadyChanged
        };
        return Err(fail(&format!("sha256 {approved}"), &observed, reason));
    }
    Ok((
        digest,
        Fact::ok("ready", &path, &format!("sha256 {approved}"), &observed),
    ))
}

/// The consumer executable: its fact.
pub(super) fn consumer_exe(m: &Manifest, b: &mut Baseline, facts: &mut Vec<Fact>) {
    facts.push(consumer_exe_fact(m, b).unwrap_or_else(|f| f));
}

/// The consumer executable: present, a root-owned regular file not writable by group or
/// others, matching its pin, with the same identity and digest at every observation.
fn consumer_exe_fact(m: &Manifest, b: &mut Baseline) -> Result<Fact, Fact> {
    const WANT: &str = "root-owned, not writable by others, unchanged";
    let c = &m.consumer;
    let path = c.executable.clone();
    let fail = |expected: &str, observed: &str, reason| {
        Fact::failed("consumer-exe", &path, expected, observed, reason)
    };
    let (fd, id) = open_enrolled(&Enrolled {
        kind: "consumer-exe",
        path: &path,
        missing: ("present", Reason::ConsumerExeMissing),
        want: Some(WANT),
        symlink: Reason::ConsumerExeUnprotected,
        regular: Some((WANT, Reason::ConsumerExeUnprotected)),
        identity: None,
    })?;
    if id.uid != 0 || id.mode & 0o022 != 0 {
        return Err(fail(
            WANT,
            &format!("uid {} mode {:o}", id.uid, id.mode),
            Reason::ConsumerExeUnprotected,
        ));
    }
    let digest =
        sha256_fd(&fd, EXE_BYTES_MAX).map_err(|e| fail(WANT, &e, Reason::ObserveFailed))?;
    if let Some(pin) = c.executable_sha256 {
        if pin != digest {
            return Err(fail(
                &format!("sha256 {pin}"),
                &format!("sha256 {digest}"),
                Reason::ConsumerExeMismatch,
            ));
        }
    }
    let (i0, d0) = *b.consumer_exe.get_or_insert((id, digest));
    if i0 != id || d0 != digest {
        return Err(fail(
            &format!("ino {} sha256 {d0}", i0.ino),
            &format!("ino {} sha256 {digest}", id.ino),
            Reason::ConsumerExeChanged,
        ));
    }
    Ok(Fact::ok(
        "consumer-exe",
        &path,
        WANT,
        &format!("sha256 {digest}"),
    ))
}

fn sha256_fd(fd: &OwnedFd, max: u64) -> Result<Hash, String> {
    use std::io::Read as _;
    let mut f = std::fs::File::from(fd.try_clone().map_err(|e| e.to_string())?);
    use std::io::Seek as _;
    f.seek(std::io::SeekFrom::Start(0))
        .map_err(|e| e.to_string())?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(Hash(h.finalize().into()));
        }
        total += n as u64;
        if total > max {
            return Err(format!("larger than {max} bytes"));
        }
        h.update(&buf[..n]);
    }
}

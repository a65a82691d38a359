//! Targets (docs/ARCHITECTURE.md, "Issuance", step 2): READY and the consumer executable,
//! each compared at every later observation with the [`Baseline`] the first one fixed.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use repoch_protocol::manifest::Manifest;
use repoch_protocol::{Fact, Hash, Identity, Reason};

use super::{open_enrolled, Enrolled};
use repoch_sys::digest::{Proof, Stamp};

/// Largest READY file hashed.
pub const READY_BYTES_MAX: u64 = 1024 * 1024;
pub use repoch_sys::digest::EXE_BYTES_MAX;

/// What the first observation of one issuance fixes for the later ones: the READY digest
/// (the operator's approval, else the first seen) and the consumer executable's identity
/// and digest.
#[derive(Clone, Debug, Default)]
pub struct Baseline {
    ready: Option<Hash>,
    operator_approved: bool,
    consumer_exe: Option<(Identity, Hash)>,
    /// The consumer executable as hashed at the first observation: held open (its inode
    /// cannot be freed and handed out again meanwhile) and, when its stamp can prove it
    /// unchanged later, that proof (`repoch_sys::digest`).
    consumer_exe_held: Option<(Arc<OwnedFd>, Option<Proof>)>,
}

impl Baseline {
    /// A baseline with the operator's approved READY digest, if any.
    pub fn new(approved_ready: Option<Hash>) -> Baseline {
        Baseline {
            ready: approved_ready,
            operator_approved: approved_ready.is_some(),
            consumer_exe: None,
            consumer_exe_held: None,
        }
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
    let digest = repoch_sys::digest::hash(&fd, READY_BYTES_MAX)
        .map(|(d, _)| d)
        .map_err(|e| fail("readable", &e.to_string(), Reason::ObserveFailed))?;
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
        exe_digest(fd, b).map_err(|e| fail(WANT, &e.to_string(), Reason::ObserveFailed))?;
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

/// The consumer executable's digest. Read whole once per issuance, at the first
/// observation, with the file then held open and its proof remembered for the peer's
/// `/proc/PID/exe` (`repoch_sys::peer::describe`); at later observations taken from that
/// read when the file's stamp now proves it the same file unchanged (docs/THREAT-MODEL.md,
/// "The consumer executable, hashed once per issuance"), else read whole again.
fn exe_digest(fd: OwnedFd, b: &mut Baseline) -> Result<Hash, repoch_sys::error::Error> {
    match &b.consumer_exe_held {
        None => {
            let (digest, proof) = repoch_sys::digest::hash(&fd, EXE_BYTES_MAX)?;
            if let Some(p) = proof {
                repoch_sys::digest::remember(p);
            }
            b.consumer_exe_held = Some((Arc::new(fd), proof));
            Ok(digest)
        }
        Some((_, Some(p))) if Stamp::of(&fd).is_ok_and(|now| p.proves(&now)) => Ok(p.digest),
        Some(_) => repoch_sys::digest::hash(&fd, EXE_BYTES_MAX).map(|(d, _)| d),
    }
}

//! Fences (docs/ARCHITECTURE.md, "Issuance", step 2): each enrolled fence acquired once,
//! read-only, and held from the first successful observation on; re-verified by its own
//! manifest entry (path and enrolled identity) at every later observation. The held fences
//! are private: only [`Fences`]' methods reach them (`issuer/tests/compile-fail/`).

use std::os::fd::OwnedFd;
use std::path::Path;

use repoch_protocol::grant::GrantFence;
use repoch_protocol::manifest::{InventoryEntry, Listener, Manifest, Role};
use repoch_protocol::{Fact, Identity, Reason};
use rustix::fs::{FlockOperation, OFlags};

use super::{open_enrolled, Enrolled};
use crate::os::hold::Held;
use crate::os::procfs;
use crate::storage::open_path;
use crate::store::fstat_identity;

/// A fence acquired and held by this process: never opened twice (closing any fd of a
/// file drops its POSIX locks), handed to the consumer with `SCM_RIGHTS`. Keyed by its
/// manifest entry (path and enrolled identity), never by its position.
#[derive(Debug)]
pub struct HeldFence {
    /// The manifest entry's path.
    path: String,
    /// The manifest entry's enrolled identity.
    enrolled: Identity,
    /// The identity observed through `fd` at acquisition (the same object as `enrolled`).
    identity: Identity,
    fd: OwnedFd,
}

impl HeldFence {
    fn is_for(&self, e: &InventoryEntry) -> bool {
        self.path == e.path && self.enrolled == e.identity
    }
}

/// The fences, held from the first successful observation on: all of the manifest's, in
/// manifest order, or none (a partial set is released, never kept); and the listener
/// endpoints repochd holds the same way (`os::hold`), handed over with them.
#[derive(Debug, Default)]
pub struct Fences {
    held: Vec<HeldFence>,
    listeners: Vec<(Listener, Held)>,
}

impl Fences {
    /// How many fences are held (all of the manifest's, or none).
    pub fn len(&self) -> usize {
        self.held.len()
    }
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
    /// The held fence for a manifest entry, matched by path and enrolled identity.
    fn of(&self, e: &InventoryEntry) -> Option<&HeldFence> {
        self.held.iter().find(|h| h.is_for(e))
    }
    /// The grant's fence list: path and identity of each held fence, in manifest order.
    pub fn grant_fences(&self) -> Vec<GrantFence> {
        self.held
            .iter()
            .map(|h| GrantFence {
                path: h.path.clone(),
                identity: h.identity,
            })
            .collect()
    }
    /// The fds to dispatch: the fences' in the order of `grant_fences`, then the held
    /// listeners' in the order of `grant_listeners`.
    pub fn fds(&self) -> Vec<&OwnedFd> {
        self.held
            .iter()
            .map(|h| &h.fd)
            .chain(self.listeners.iter().map(|(_, h)| &h.fd))
            .collect()
    }
    /// The grant's listener list: each held endpoint, in manifest order.
    pub fn grant_listeners(&self) -> Vec<Listener> {
        self.listeners.iter().map(|(l, _)| l.clone()).collect()
    }
    /// How many listener endpoints are held (all of the manifest's, or none).
    pub fn listeners_len(&self) -> usize {
        self.listeners.len()
    }
    /// The held endpoint of an enrolled listener.
    pub(super) fn listener(&self, l: &Listener) -> Option<&Held> {
        self.listeners.iter().find(|(m, _)| m == l).map(|(_, h)| h)
    }
    /// Keeps the endpoints taken at the first observation (all of the manifest's).
    pub(super) fn hold_listeners(&mut self, taken: Vec<(Listener, Held)>) {
        self.listeners = taken;
    }
    /// The fences and endpoints were sent to the consumer: drops them here, leaving the
    /// socket files of unix endpoints in place (they are the new root's now).
    pub fn hand_over(mut self) {
        for (_, h) in &mut self.listeners {
            h.hand_over();
        }
    }
}

/// The fences: on first use each is acquired; afterwards each manifest entry's own held
/// fence (matched by path and enrolled identity) is re-verified. One fact per entry, in
/// manifest order, each naming only its own entry.
pub(super) fn observe(m: &Manifest, fences: &mut Fences, facts: &mut Vec<Fact>) {
    const WANT: &str = "the enrolled inode, locked by us";
    let entries: Vec<&InventoryEntry> = m.entries(Role::Fence).collect();
    if fences.is_empty() {
        let mut acquired = Vec::with_capacity(entries.len());
        for e in &entries {
            match acquire(&e.path, &e.identity) {
                Ok(h) => {
                    facts.push(check_held(&h).unwrap_or_else(|f| f));
                    acquired.push(h);
                }
                Err(f) => facts.push(f),
            }
        }
        // A fence set is all or nothing: a partial set is released (dropped), never kept.
        if acquired.len() == entries.len() {
            fences.held = acquired;
        }
        return;
    }
    for e in &entries {
        facts.push(match fences.of(e) {
            Some(h) => check_held(h).unwrap_or_else(|f| f),
            None => Fact::failed("fence", &e.path, WANT, "not held", Reason::FenceCustody),
        });
    }
}

/// Whether a fence still keeps others out: no mode bit for others, no owner, group or
/// permission bit that the enrollment did not have, and no access ACL (read through `fd`,
/// an fd of the same object). Anyone who can open a fence can hold it shared (`flock -s`
/// needs only read access) and so make it busy.
fn fence_protection(
    path: &str,
    enrolled: &Identity,
    id: &Identity,
    fd: &OwnedFd,
) -> Result<(), Fact> {
    let perms = |m: u32| m & 0o7777;
    let expected = format!(
        "uid {} gid {} mode {:o}, no access for others, no ACL",
        enrolled.uid,
        enrolled.gid,
        perms(enrolled.mode)
    );
    let acl = crate::store::has_access_acl(fd).map_err(|e| {
        Fact::failed(
            "fence",
            path,
            &expected,
            &format!("reading its ACL: {e}"),
            Reason::ObserveFailed,
        )
    })?;
    let widened = perms(id.mode) & !perms(enrolled.mode);
    if acl
        || id.mode & 0o007 != 0
        || widened != 0
        || id.uid != enrolled.uid
        || id.gid != enrolled.gid
    {
        let observed = format!(
            "uid {} gid {} mode {:o}{}",
            id.uid,
            id.gid,
            perms(id.mode),
            if acl { ", an access ACL" } else { "" }
        );
        return Err(Fact::failed(
            "fence",
            path,
            &expected,
            &observed,
            Reason::FenceUnprotected,
        ));
    }
    Ok(())
}

/// Acquires one fence: open once, read-only (flock needs no write access, and a read-only
/// mount must not break observation), without following symlinks; fstat against the
/// enrolled identity (birth time included) and protection; `flock` EX non-blocking;
/// re-stat the path to catch a replacement during acquisition, then confirm kernel custody.
fn acquire(path: &str, enrolled: &Identity) -> Result<HeldFence, Fact> {
    const WANT: &str = "the enrolled inode, locked by us";
    let (fd, id) = open_enrolled(&Enrolled {
        kind: "fence",
        path,
        missing: (WANT, Reason::FenceMissing),
        want: Some(WANT),
        symlink: Reason::FenceReplaced,
        regular: None,
        identity: Some((enrolled, Reason::FenceReplaced)),
    })?;
    // Before locking: a fence others can open may be held shared by anyone, and a busy
    // answer would then blame whoever that is.
    fence_protection(path, enrolled, &id, &fd)?;
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
            return Err(Fact::failed(
                "fence",
                path,
                WANT,
                &crate::store::describe_holders("FLOCK", &id),
                Reason::FenceBusy,
            ));
        }
        Err(e) => {
            return Err(Fact::failed(
                "fence",
                path,
                WANT,
                &e.to_string(),
                Reason::ObserveFailed,
            ))
        }
    }
    let h = HeldFence {
        path: path.to_owned(),
        enrolled: *enrolled,
        identity: id,
        fd,
    };
    check_held(&h)?;
    Ok(h)
}

/// Re-verifies a held fence: the path still names our object (birth time included), its
/// owner and mode still keep others out, and the kernel shows our exclusive lock on the
/// device and inode in our descriptor's fdinfo `lock:` line. Not `/proc/locks`: it is no
/// snapshot (read a page at a time, a lock released between two reads makes it skip
/// another), and a held fence read as free there would refuse a sound recovery.
fn check_held(h: &HeldFence) -> Result<Fact, Fact> {
    const WANT: &str = "the enrolled inode, locked by us";
    let now = open_path(Path::new(&h.path), OFlags::PATH, 0).and_then(fstat_identity);
    match now {
        Ok(id) if id.same_object(&h.identity) => {
            fence_protection(&h.path, &h.enrolled, &id, &h.fd)?
        }
        Ok(id) => {
            return Err(Fact::failed(
                "fence",
                &h.path,
                &h.identity.object(),
                &format!("path now names {}", id.object()),
                Reason::FenceReplaced,
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Fact::failed(
                "fence",
                &h.path,
                WANT,
                "path removed",
                Reason::FenceReplaced,
            ))
        }
        Err(e) => {
            return Err(Fact::failed(
                "fence",
                &h.path,
                WANT,
                &e.to_string(),
                Reason::ObserveFailed,
            ))
        }
    }
    use std::os::fd::AsRawFd as _;
    let own = procfs::fdinfo_lock(
        std::process::id(),
        h.fd.as_raw_fd() as u32,
        "FLOCK",
        h.identity.dev,
        h.identity.ino,
    );
    let observed = match own {
        Some(l) if l.exclusive => None,
        Some(_) => Some("our descriptor holds it shared, not exclusive"),
        None => Some("our descriptor holds no lock on it"),
    };
    if let Some(observed) = observed {
        return Err(Fact::failed(
            "fence",
            &h.path,
            WANT,
            observed,
            Reason::FenceCustody,
        ));
    }
    Ok(Fact::ok("fence", &h.path, WANT, "held"))
}

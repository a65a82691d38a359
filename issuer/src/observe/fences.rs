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
use crate::store::fstat_identity;
use repoch_sys::fs::open_path;
use repoch_sys::hold::Held;
use repoch_sys::procfs;

/// What every fence fact expects.
const WANT: &str = "the enrolled inode, locked by us";

/// A fence fact that fails what every fence fact expects ([`WANT`]).
fn failed(path: &str, observed: &str, reason: Reason) -> Fact {
    Fact::failed("fence", path, WANT, observed, reason)
}

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
    /// The device the kernel names its locks by (`procfs::lock_device`: another one than
    /// `stat`'s on btrfs).
    lock_dev: u64,
    fd: OwnedFd,
}

impl HeldFence {
    fn is_for(&self, e: &InventoryEntry) -> bool {
        self.path == e.path && self.enrolled == e.identity
    }
}

/// The fences, held from the first successful observation on: all of the manifest's, in
/// manifest order, or none (a partial set is released, never kept); and the listener
/// endpoints repochd holds the same way (`repoch_sys::hold`), handed over with them.
/// Anyone may make an empty one (`Default`: it holds nothing) for an observation to fill;
/// what it holds is reached only through its methods ([`Fences::fds`] lends the fds, for
/// the dispatch), and no field can be read or built from outside
/// (`issuer/tests/compile-fail/fences_private.rs`).
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
            .chain(self.listeners.iter().map(|(_, h)| h.socket()))
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
            None => failed(&e.path, "not held", Reason::FenceCustody),
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
/// enrolled identity (birth time included) and protection; `flock` EX non-blocking; no
/// record lock of another; our OFD read lock; re-stat the path to catch a replacement
/// during acquisition, then confirm kernel custody.
fn acquire(path: &str, enrolled: &Identity) -> Result<HeldFence, Fact> {
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
    let lock_dev = match procfs::lock_device(&fd) {
        Ok(dev) => dev,
        Err(e) => {
            return Err(failed(
                path,
                &format!("the device its locks are named by: {e}"),
                Reason::ObserveFailed,
            ))
        }
    };
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
            return Err(failed(
                path,
                &crate::store::describe_holders("FLOCK", &fd),
                Reason::FenceBusy,
            ));
        }
        Err(e) => return Err(failed(path, &e.to_string(), Reason::ObserveFailed)),
    }
    ofd_read_lock(path, &fd)?;
    let h = HeldFence {
        path: path.to_owned(),
        enrolled: *enrolled,
        identity: id,
        lock_dev,
        fd,
    };
    check_held(&h)?;
    Ok(h)
}

/// No record lock of another on the fence, then our own OFD read lock on the whole file.
fn ofd_read_lock(path: &str, fd: &OwnedFd) -> Result<(), Fact> {
    // Every other advisory lock kind: a POSIX record lock (fcntl, lockf, SQLite) or an OFD
    // lock of another is fence-busy; then our own OFD read lock on the whole file, on the
    // same open file as the flock (both travel with it to the new root), keeps every
    // writer's record lock out. A read lock, not a write lock: the fence is open read-only
    // (a write lock needs write access, and a read-only mount must not break observation).
    // Anyone who could take a read lock beside it can open the fence: a principal
    // (`fence_protection`), and check_held then finds that lock.
    busy_record_lock(path, fd)?;
    // nix, not rustix's fcntl_lock: that one takes a POSIX lock (owned by this process,
    // dropped when any of its descriptors of the file closes), not an OFD lock.
    match nix::fcntl::fcntl(
        fd,
        nix::fcntl::FcntlArg::F_OFD_SETLK(&whole_file(nix::libc::F_RDLCK)),
    ) {
        Ok(_) => {}
        Err(e) if e == nix::errno::Errno::EAGAIN || e == nix::errno::Errno::EACCES => {
            busy_record_lock(path, fd)?;
            return Err(failed(
                path,
                "a record lock appeared while the fence was being locked",
                Reason::FenceBusy,
            ));
        }
        Err(e) => {
            return Err(failed(
                path,
                &format!("OFD lock: {e}"),
                Reason::ObserveFailed,
            ))
        }
    }
    Ok(())
}

/// A record lock of type `l_type` (`F_RDLCK`, `F_WRLCK`) on the whole file, as OFD locks
/// are asked for (`l_pid` 0).
fn whole_file(l_type: i32) -> nix::libc::flock {
    nix::libc::flock {
        l_type: l_type as nix::libc::c_short,
        l_whence: nix::libc::SEEK_SET as nix::libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    }
}

/// The first record lock (POSIX or OFD) of another owner on the fence open as `fd` that a
/// write lock on the whole file would conflict with: `fence-busy` naming its holders. Our
/// own OFD lock and our flock are not such a lock (`F_OFD_GETLK` skips the locks of the
/// asking open file; flocks are another kind).
fn busy_record_lock(path: &str, fd: &OwnedFd) -> Result<(), Fact> {
    use nix::libc;
    let mut want = whole_file(libc::F_WRLCK);
    if let Err(e) = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_OFD_GETLK(&mut want)) {
        return Err(failed(
            path,
            &format!("asking for record locks (F_OFD_GETLK): {e}"),
            Reason::ObserveFailed,
        ));
    }
    if want.l_type == libc::F_UNLCK as libc::c_short {
        return Ok(());
    }
    // An OFD lock has no owning process (pid -1); a POSIX lock names the one that took it.
    let kind = if want.l_pid == -1 { "OFDLCK" } else { "POSIX" };
    Err(failed(
        path,
        &format!("{kind} lock {}", crate::store::describe_holders(kind, fd)),
        Reason::FenceBusy,
    ))
}

/// Re-verifies a held fence: the path still names our object (birth time included), its
/// owner and mode still keep others out, the kernel shows our exclusive flock and our OFD
/// lock on the device and inode in our descriptor's fdinfo `lock:` lines, and no other
/// record lock has been taken beside ours. Not `/proc/locks`: it is no
/// snapshot (read a page at a time, a lock released between two reads makes it skip
/// another), and a held fence read as free there would refuse a sound recovery.
fn check_held(h: &HeldFence) -> Result<Fact, Fact> {
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
            return Err(failed(&h.path, "path removed", Reason::FenceReplaced))
        }
        Err(e) => return Err(failed(&h.path, &e.to_string(), Reason::ObserveFailed)),
    }
    use std::os::fd::AsRawFd as _;
    let own = procfs::fdinfo_lock(
        std::process::id(),
        h.fd.as_raw_fd() as u32,
        "FLOCK",
        h.lock_dev,
        h.identity.ino,
    );
    let observed = match own {
        Some(l) if l.exclusive => None,
        Some(_) => Some("our descriptor holds it shared, not exclusive"),
        None => Some("our descriptor holds no lock on it"),
    };
    let ofd = procfs::fdinfo_lock(
        std::process::id(),
        h.fd.as_raw_fd() as u32,
        "OFDLCK",
        h.lock_dev,
        h.identity.ino,
    );
    let observed = observed.or(match ofd {
        Some(_) => None,
        None => Some("our descriptor holds no OFD lock on it"),
    });
    if let Some(observed) = observed {
        return Err(failed(&h.path, observed, Reason::FenceCustody));
    }
    busy_record_lock(&h.path, &h.fd)?;
    Ok(Fact::ok("fence", &h.path, WANT, "held"))
}

//! The one place `unsafe` is written (`tests-native/tests/native/architecture.rs` keeps it):
//! the calls neither rustix nor nix offer safely. Adopting the listening sockets systemd
//! passes by socket activation (`LISTEN_FDS`, bare fd numbers), setting signals to `SIG_IGN`
//! (nix and rustix offer it only as `unsafe`, for any handler), asking a user namespace
//! who owns it and which is its parent (the `nsfs` ioctls), and whether two tasks share one
//! descriptor table (`kcmp`, which neither wraps).
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

use crate::error::{Context as _, Error, Result};

/// First fd passed by socket activation (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;
/// Sockets accepted from systemd: admin and grant.
pub const LISTEN_FDS_MAX: usize = 2;

/// Takes ownership of the `n` inherited fds starting at 3, after checking each is open.
/// The caller has checked `LISTEN_PID` is this process, so the fds are ours and unowned.
pub fn adopt_listen_fds(n: usize) -> Result<Vec<OwnedFd>> {
    if n > LISTEN_FDS_MAX {
        return Err(Error::Found(format!(
            "LISTEN_FDS={n}, at most {LISTEN_FDS_MAX} sockets are expected"
        )));
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let fd = LISTEN_FDS_START + i as RawFd;
        // SAFETY: systemd passed fds 3..3+n to this process (LISTEN_PID checked by the
        // caller) and nothing in this process has taken ownership of them yet; this runs once
        // at start-up, before any other fd is opened in that range.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        rustix::io::fcntl_getfd(&owned).context(format!("inherited fd {fd}"))?;
        rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)
            .context(format!("inherited fd {fd}"))?;
        out.push(owned);
    }
    Ok(out)
}

/// Sets each of `signals` to `SIG_IGN`: the kernel then discards it when it is sent (none is
/// queued, no handler runs, no job-control stop happens). An ignored disposition survives
/// `execve`, so the children repochd starts (`systemctl`) begin with these ignored too; none
/// of them relies on their default.
pub fn ignore_signals(signals: &[(i32, String)]) -> Result<()> {
    for (n, name) in signals {
        // SAFETY: SIG_IGN installs no handler, so no code of this process runs on a signal
        // and nothing it shares can be observed half-written; `signal` only replaces the
        // disposition of signal `n` for the whole process, which nothing else here sets.
        let previous = unsafe { nix::libc::signal(*n, nix::libc::SIG_IGN) };
        if previous == nix::libc::SIG_ERR {
            return Err(std::io::Error::last_os_error()).context(format!("ignoring {name}"));
        }
    }
    Ok(())
}

/// `NSIO`, the `nsfs` ioctls' type (linux/nsfs.h).
const NSIO: u32 = 0xb7;
/// `_IO(NSIO, 0x2)`: a new descriptor of the namespace's parent.
const NS_GET_PARENT: u32 = NSIO << 8 | 0x2;
/// `_IO(NSIO, 0x4)`: the uid (in the caller's user namespace) that created a user namespace.
const NS_GET_OWNER_UID: u32 = NSIO << 8 | 0x4;

/// The uid, as this process's user namespace sees it, of the process that created the user
/// namespace `ns` (an open `/proc/PID/ns/user`); the overflow uid (65534) when it has no
/// mapping here.
pub fn userns_owner(ns: impl AsFd) -> Result<u32> {
    let mut uid: nix::libc::uid_t = 0;
    // SAFETY: NS_GET_OWNER_UID writes one uid_t through its argument, which points at a
    // live, aligned uid_t; the kernel reads nothing else of this process's memory.
    let r = unsafe {
        nix::libc::ioctl(
            ns.as_fd().as_raw_fd(),
            NS_GET_OWNER_UID as _,
            &mut uid as *mut nix::libc::uid_t,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error()).context("NS_GET_OWNER_UID");
    }
    Ok(uid)
}

/// The parent of the user namespace `ns`; `None` when it has none this process may see
/// (the initial namespace, or one above this process's own: the kernel answers EPERM).
pub fn userns_parent(ns: impl AsFd) -> Result<Option<OwnedFd>> {
    // SAFETY: NS_GET_PARENT takes no argument and returns a new descriptor, which nothing
    // else owns; it is owned here at once.
    let r = unsafe { nix::libc::ioctl(ns.as_fd().as_raw_fd(), NS_GET_PARENT as _) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(nix::libc::EPERM) {
            return Ok(None);
        }
        return Err(e).context("NS_GET_PARENT");
    }
    // SAFETY: `r` is the descriptor the kernel just opened for this call.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(r) }))
}

/// `KCMP_FILES` (`include/uapi/linux/kcmp.h`): the two tasks' descriptor tables.
const KCMP_FILES: nix::libc::c_int = 2;

/// Whether tasks `a` and `b` (thread ids, as `/proc/PID/task` lists them) share one
/// descriptor table (`kcmp(KCMP_FILES)`: a thread made without `CLONE_FILES`, or one that
/// called `unshare(CLONE_FILES)`, has its own). `Err` when either is gone or may not be
/// compared (the caller needs `PTRACE_MODE_READ` over both): the caller then reads both.
pub fn same_descriptor_table(a: u32, b: u32) -> Result<bool> {
    let (Ok(a), Ok(b)) = (nix::libc::pid_t::try_from(a), nix::libc::pid_t::try_from(b)) else {
        return Err(Error::Found(format!("task {a} or {b}: not a pid")));
    };
    // SAFETY: kcmp takes two pids, a type and two indexes (unused for KCMP_FILES) by value
    // and reads or writes none of this process's memory.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_kcmp,
            a,
            b,
            KCMP_FILES,
            0 as nix::libc::c_ulong,
            0 as nix::libc::c_ulong,
        )
    };
    match r {
        0 => Ok(true),
        1..=3 => Ok(false),
        _ => {
            Err(std::io::Error::last_os_error()).context(format_args!("kcmp({a}, {b}, KCMP_FILES)"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The initial user namespace has no parent to see, and root created none of ours:
    /// asked of our own namespace, the owner is whoever the kernel says (the initial one is
    /// owned by uid 0), and its parent is refused, not an error.
    #[test]
    fn our_own_user_namespace_has_an_owner_and_no_visible_parent() {
        let ns = std::fs::File::open("/proc/self/ns/user").unwrap();
        assert_eq!(userns_owner(&ns).unwrap(), 0);
        assert!(userns_parent(&ns).unwrap().is_none());
        // Not a user namespace: the owner ioctl is refused (EINVAL), an error, not a uid.
        let net = std::fs::File::open("/proc/self/ns/net").unwrap();
        assert!(userns_owner(&net).is_err());
    }
}

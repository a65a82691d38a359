//! The daemon's uses of `unsafe`: adopting the listening sockets systemd passes by
//! socket activation (`LISTEN_FDS`), which arrive as bare fd numbers, and setting signals
//! to `SIG_IGN` (nix and rustix offer it only as `unsafe`, for any handler).
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd as _, OwnedFd, RawFd};

/// First fd passed by socket activation (`SD_LISTEN_FDS_START`).
pub const LISTEN_FDS_START: RawFd = 3;
/// Sockets accepted from systemd: admin and grant.
pub const LISTEN_FDS_MAX: usize = 2;

/// Takes ownership of the `n` inherited fds starting at 3, after checking each is open.
/// The caller has checked `LISTEN_PID` is this process, so the fds are ours and unowned.
pub fn adopt_listen_fds(n: usize) -> Result<Vec<OwnedFd>, String> {
    if n > LISTEN_FDS_MAX {
        return Err(format!(
            "LISTEN_FDS={n}, at most {LISTEN_FDS_MAX} sockets are expected"
        ));
    }
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let fd = LISTEN_FDS_START + i as RawFd;
        // SAFETY: systemd passed fds 3..3+n to this process (LISTEN_PID checked by the
        // caller) and nothing in this process has taken ownership of them yet; this runs once
        // at start-up, before any other fd is opened in that range.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        rustix::io::fcntl_getfd(&owned).map_err(|e| format!("inherited fd {fd}: {e}"))?;
        rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)
            .map_err(|e| format!("inherited fd {fd}: {e}"))?;
        out.push(owned);
    }
    Ok(out)
}

/// Sets each of `signals` to `SIG_IGN`: the kernel then discards it when it is sent (none is
/// queued, no handler runs, no job-control stop happens). An ignored disposition survives
/// `execve`, so the children repochd starts (`systemctl`) begin with these ignored too; none
/// of them relies on their default.
pub fn ignore_signals(signals: &[(i32, String)]) -> Result<(), String> {
    for (n, name) in signals {
        // SAFETY: SIG_IGN installs no handler, so no code of this process runs on a signal
        // and nothing it shares can be observed half-written; `signal` only replaces the
        // disposition of signal `n` for the whole process, which nothing else here sets.
        let previous = unsafe { nix::libc::signal(*n, nix::libc::SIG_IGN) };
        if previous == nix::libc::SIG_ERR {
            return Err(format!(
                "ignoring {name}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

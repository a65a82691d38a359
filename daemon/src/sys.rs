//! The daemon's one use of `unsafe`: adopting the listening sockets systemd passes by
//! socket activation (`LISTEN_FDS`), which arrive as bare fd numbers.
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

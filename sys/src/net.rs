//! Listeners: a unix path judged by the socket bound to its inode in any network namespace
//! (sock_diag) and by whether it accepts a connection; TCP and UDP ports by the sockets
//! `inet_diag` reports on them in the observer's network namespace and in the host's (where
//! repochd's sockets are); the processes holding a socket inode.

use super::procfs::{pids, PROC_FDS_MAX};
use super::sockdiag::{self, NetnsId, UnixSocket};
use crate::error::{Context as _, Error};

/// A bound socket: its inode, and for unix sockets the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    pub inode: u64,
    pub what: String,
}

/// What is at an enrolled unix path, judged by the object: the sockets bound to the
/// path's inode in any network namespace, and whether a `connect()` there is accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnixAt {
    /// Nothing is bound there: why (no file, not a socket, a stale socket file).
    Nothing(&'static str),
    /// A symlink: clients' `connect()` follows it, so it is refused whatever it points to.
    Symlink(String),
    /// A socket file. The sockets bound to its inode (with their namespace), why they could
    /// not all be looked for (too many namespaces or sockets to ask about), and the socket
    /// type a `connect()` through the path was accepted for, if any. Always refused: a
    /// socket may be bound to the file, not listening yet, in a network namespace no task
    /// is in (kept alive by the socket itself), where no observer can see it; only a file
    /// that is gone can have nothing bound to it.
    Bound {
        sockets: Vec<(NetnsId, UnixSocket)>,
        unsearched: Option<String>,
        accepts: Option<&'static str>,
    },
}

/// What is at the unix path `path`. The final component is not followed (a symlink is
/// reported as such); the file's identity is taken once, from an `O_PATH` fd, and both
/// the sock_diag match and the `connect()` probe go through that same inode.
pub fn unix_at(path: &str) -> Result<UnixAt, Error> {
    use rustix::fs::{FileType, Mode, OFlags};
    use rustix::io::Errno;
    let fd = match rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR) => return Ok(UnixAt::Nothing("no file")),
        Err(e) => return Err(Error::Found(format!("{path}: {e}"))),
    };
    let st = rustix::fs::fstat(&fd).context(format_args!("{path}"))?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Symlink => {
            let target = std::fs::read_link(path)
                .map_or_else(|e| format!("? ({e})"), |t| t.display().to_string());
            return Ok(UnixAt::Symlink(target));
        }
        FileType::Socket => {}
        _ => return Ok(UnixAt::Nothing("not a socket")),
    }
    let accepts = accepts_connection(&fd).context(format_args!("{path}"))?;
    // The search only names holders: the file is refused whatever it finds, so a search
    // an unprivileged user can make fail (thousands of namespaces or sockets) fails only
    // the naming, never the refusal.
    let (sockets, unsearched) = match sockdiag::bound_to(st.st_dev, st.st_ino) {
        Ok(s) => (s, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    Ok(UnixAt::Bound {
        sockets,
        unsearched,
        accepts,
    })
}

/// Ground truth: a non-blocking `connect()` to the socket file `fd` (through
/// `/proc/self/fd/N`, so the same inode whatever the path length), as a stream, then
/// seqpacket, then datagram client. Connected, `EAGAIN` (backlog full) or `EINPROGRESS`
/// mean something accepts there; `ECONNREFUSED` means nothing listens. Anything else is
/// an error (unknown is never fine).
pub fn accepts_connection(fd: &std::os::fd::OwnedFd) -> Result<Option<&'static str>, Error> {
    use nix::errno::Errno;
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    use std::os::fd::AsRawFd as _;
    let via = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let addr = UnixAddr::new(via.as_str()).context(format_args!("{via}"))?;
    for (kind, name) in [
        (SockType::Stream, "stream"),
        (SockType::SeqPacket, "seqpacket"),
        (SockType::Datagram, "dgram"),
    ] {
        let s = socket(
            AddressFamily::Unix,
            kind,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        )
        .context("socket")?;
        match connect(s.as_raw_fd(), &addr) {
            Ok(()) | Err(Errno::EAGAIN | Errno::EINPROGRESS) => return Ok(Some(name)),
            // A datagram socket connected to another peer: bound and alive all the same.
            Err(Errno::EPERM) if kind == SockType::Datagram => return Ok(Some(name)),
            Err(Errno::EPROTOTYPE) => continue,
            Err(Errno::ECONNREFUSED) => return Ok(None),
            Err(e) => return Err(Error::Found(format!("connect as {name}: {e}"))),
        }
    }
    Err("connect: no socket type fits the socket file".into())
}

/// For each enrolled port, `(udp, port)`, in order: the TCP sockets listening on it, or
/// the UDP sockets bound to it (IPv4 and IPv6), in the observer's network namespace and in
/// the host's, where repochd's sockets are ([`sockdiag::adopt_host_netns`]: repochd runs
/// in its own, empty one, `PrivateNetwork=yes` in `systemd/repochd.service`). The host's
/// namespace is entered once for all ports. A port the kernel could not be asked about, or
/// a host namespace that cannot be entered, is an error for each port it concerns, never
/// skipped; a port keeps the first error it met (its own namespace's before the host's).
pub fn inet_bound_all(ports: &[(bool, u16)]) -> Vec<Result<Vec<Bound>, Error>> {
    if ports.is_empty() {
        return Vec::new();
    }
    let mut out = inet_bound_here(ports);
    match sockdiag::in_host_netns(|| Ok(inet_bound_here(ports))) {
        Ok(None) => {}
        Ok(Some((_, there))) => {
            for (o, t) in out.iter_mut().zip(there) {
                if let Ok(b) = o {
                    match t {
                        Ok(t) => b.extend(t),
                        Err(e) => {
                            *o = Err(Error::Found(format!("the host's network namespace: {e}")))
                        }
                    }
                }
            }
        }
        Err(e) => {
            for o in out.iter_mut().filter(|o| o.is_ok()) {
                *o = Err(Error::Found(format!("the host's network namespace: {e}")));
            }
        }
    }
    out
}

/// [`inet_bound_all`] in this thread's network namespace, from `NETLINK_SOCK_DIAG`
/// (`inet_diag`, [`sockdiag::inet_sockets`]): for each port, its IPv4 and IPv6 TCP
/// listeners or UDP sockets, the kernel comparing the port. Not `/proc/net/tcp` and `udp`:
/// those list every socket of the namespace (a flood of unrelated sockets pushed a table
/// past any bound a reader can set) and walk the whole established-connection hash.
fn inet_bound_here(ports: &[(bool, u16)]) -> Vec<Result<Vec<Bound>, Error>> {
    ports
        .iter()
        .map(|&(udp, port)| {
            let proto = if udp { "udp" } else { "tcp" };
            // Enrollment refuses it; a request for port 0 would list every socket.
            if port == 0 {
                return Err(Error::Found(format!("{proto} port 0 names no port")));
            }
            let mut b = Vec::new();
            for v6 in [false, true] {
                let family = if v6 { "IPv6" } else { "IPv4" };
                let got = sockdiag::inet_sockets(udp, v6, port)
                    .context(format_args!("{family} {proto} sockets on port {port}"))?;
                b.extend(got.into_iter().map(|s| Bound {
                    inode: s.inode,
                    what: format!("{proto}:{port}"),
                }));
            }
            Ok(b)
        })
        .collect()
}

/// Pids with an fd on `socket:[inode]`.
pub fn socket_holders(inode: u64) -> Vec<u32> {
    socket_holders_of(&[inode])
        .into_iter()
        .next()
        .map(|(_, p)| p)
        .unwrap_or_default()
}

/// For each socket inode, the pids with an fd on `socket:[inode]`: one bounded walk of
/// `/proc/*/fd` for all of them.
pub fn socket_holders_of(inodes: &[u64]) -> Vec<(u64, Vec<u32>)> {
    let want: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    let mut out: Vec<(u64, Vec<u32>)> = inodes.iter().map(|i| (*i, Vec::new())).collect();
    if inodes.is_empty() {
        return out;
    }
    for pid in pids().unwrap_or_default() {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for e in fds.take(PROC_FDS_MAX).flatten() {
            let Ok(l) = std::fs::read_link(e.path()) else {
                continue;
            };
            if let Some(i) = want.iter().position(|w| l.as_os_str() == w.as_str()) {
                if !out[i].1.contains(&pid) {
                    out[i].1.push(pid);
                }
            }
        }
    }
    out
}

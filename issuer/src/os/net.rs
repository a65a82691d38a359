//! Listeners: a unix path judged by the socket bound to its inode in any network namespace
//! (sock_diag) and by whether it accepts a connection; the `net/tcp`, `tcp6`, `udp`, `udp6`
//! tables of the observer's network namespace and of the host's (where repochd's sockets
//! are); the processes holding a socket inode.

use std::path::Path;

use super::procfs::{pids, read_small, PROC_FDS_MAX};
use super::sockdiag::{self, NetnsId, UnixSocket};

/// Bytes read from one `/proc/net` table.
pub const NET_TABLE_BYTES_MAX: u64 = 16 * 1024 * 1024;

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
pub fn unix_at(path: &str) -> Result<UnixAt, String> {
    use rustix::fs::{FileType, Mode, OFlags};
    use rustix::io::Errno;
    let fd = match rustix::fs::open(
        path,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT | Errno::NOTDIR) => return Ok(UnixAt::Nothing("no file")),
        Err(e) => return Err(format!("{path}: {e}")),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("{path}: {e}"))?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Symlink => {
            let target = std::fs::read_link(path)
                .map_or_else(|e| format!("? ({e})"), |t| t.display().to_string());
            return Ok(UnixAt::Symlink(target));
        }
        FileType::Socket => {}
        _ => return Ok(UnixAt::Nothing("not a socket")),
    }
    let accepts = accepts_connection(&fd).map_err(|e| format!("{path}: {e}"))?;
    // The search only names holders: the file is refused whatever it finds, so a search
    // an unprivileged user can make fail (thousands of namespaces or sockets) fails only
    // the naming, never the refusal.
    let (sockets, unsearched) = match sockdiag::bound_to(st.st_dev, st.st_ino) {
        Ok(s) => (s, None),
        Err(e) => (Vec::new(), Some(e)),
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
pub fn accepts_connection(fd: &std::os::fd::OwnedFd) -> Result<Option<&'static str>, String> {
    use nix::errno::Errno;
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    use std::os::fd::AsRawFd as _;
    let via = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let addr = UnixAddr::new(via.as_str()).map_err(|e| format!("{via}: {e}"))?;
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
        .map_err(|e| format!("socket: {e}"))?;
        match connect(s.as_raw_fd(), &addr) {
            Ok(()) | Err(Errno::EAGAIN | Errno::EINPROGRESS) => return Ok(Some(name)),
            // A datagram socket connected to another peer: bound and alive all the same.
            Err(Errno::EPERM) if kind == SockType::Datagram => return Ok(Some(name)),
            Err(Errno::EPROTOTYPE) => continue,
            Err(Errno::ECONNREFUSED) => return Ok(None),
            Err(e) => return Err(format!("connect as {name}: {e}")),
        }
    }
    Err("connect: no socket type fits the socket file".into())
}

/// For each enrolled port, `(udp, port)`, in order: the TCP sockets listening on it, or
/// the UDP sockets bound to it (IPv4 and IPv6), in the observer's network namespace and in
/// the host's, where repochd's sockets are ([`sockdiag::adopt_host_netns`]: repochd runs
/// in its own, empty one, `PrivateNetwork=yes` in `systemd/repochd.service`). Each table a
/// port needs is read once per namespace for all of them, and the host's namespace is
/// entered once for TCP and UDP together. A table that cannot be read or is in an unknown
/// format, or a host namespace that cannot be entered, is an error for each port it
/// concerns, never skipped; a port keeps the first error it met (its own namespace's
/// before the host's).
pub fn inet_bound_all(ports: &[(bool, u16)]) -> Vec<Result<Vec<Bound>, String>> {
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
                        Err(e) => *o = Err(format!("the host's network namespace: {e}")),
                    }
                }
            }
        }
        Err(e) => {
            for o in out.iter_mut().filter(|o| o.is_ok()) {
                *o = Err(format!("the host's network namespace: {e}"));
            }
        }
    }
    out
}

/// [`inet_bound_all`] in this thread's network namespace (`/proc/thread-self/net`:
/// `/proc/net` is the thread group leader's): `tcp` and `tcp6` if a TCP port is asked for,
/// `udp` and `udp6` if a UDP one is, each read once.
fn inet_bound_here(ports: &[(bool, u16)]) -> Vec<Result<Vec<Bound>, String>> {
    let mut out: Vec<Result<Vec<Bound>, String>> = ports.iter().map(|_| Ok(Vec::new())).collect();
    for udp in [false, true] {
        if !ports.iter().any(|(u, _)| *u == udp) {
            continue;
        }
        let tables: [&str; 2] = if udp {
            ["/proc/thread-self/net/udp", "/proc/thread-self/net/udp6"]
        } else {
            ["/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"]
        };
        // The indices in `ports` (and `out`) of this protocol's ports.
        let mine: Vec<usize> = (0..ports.len()).filter(|i| ports[*i].0 == udp).collect();
        for t in tables {
            if let Err(e) = scan_table(t, udp, ports, &mine, &mut out) {
                for i in &mine {
                    if out[*i].is_ok() {
                        out[*i] = Err(e.clone());
                    }
                }
            }
        }
    }
    out
}

/// Reads the table `t` once and adds each socket of interest to the ports at `mine` still
/// without an error. An error of the whole table is returned; a bad inode on a port's line
/// is that port's error alone.
fn scan_table(
    t: &str,
    udp: bool,
    ports: &[(bool, u16)],
    mine: &[usize],
    out: &mut [Result<Vec<Bound>, String>],
) -> Result<(), String> {
    let s = match read_small(Path::new(t), NET_TABLE_BYTES_MAX) {
        Ok(s) => s,
        // No IPv6 in this kernel: nothing can be bound there.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && t.ends_with('6') => return Ok(()),
        Err(e) => return Err(format!("{t}: {e}")),
    };
    let mut lines = s.lines();
    if !lines
        .next()
        .unwrap_or_default()
        .trim_start()
        .starts_with("sl")
    {
        return Err(format!("{t}: unknown format"));
    }
    for l in lines {
        // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 10 {
            return Err(format!("{t}: short line"));
        }
        let lport = f[1]
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok())
            .ok_or_else(|| format!("{t}: bad address {:?}", f[1]))?;
        let state = u8::from_str_radix(f[3], 16).map_err(|_| format!("{t}: bad state"))?;
        // TCP: 0A is LISTEN. UDP: any socket with the local port is bound.
        if !(udp || state == 0x0a) {
            continue;
        }
        for i in mine.iter().copied().filter(|i| ports[*i].1 == lport) {
            let Ok(b) = &mut out[i] else { continue };
            match f[9].parse() {
                Ok(inode) => b.push(Bound {
                    inode,
                    what: format!("{}:{lport}", if udp { "udp" } else { "tcp" }),
                }),
                Err(_) => out[i] = Err(format!("{t}: bad inode")),
            }
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::{scan_table, Bound};

    const HEADER: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";

    fn line(port: u16, state: u8, inode: &str) -> String {
        format!(
            "   0: 0100007F:{port:04X} 00000000:0000 {state:02X} 00000000:00000000 00:00000000 00000000     0        0 {inode} 1 0000000000000000 100 0 0 10 0\n"
        )
    }

    type PerPort = Vec<Result<Vec<Bound>, String>>;

    /// Scans `table` for the TCP ports `ports`, each starting without an error.
    fn scan(table: &str, ports: &[u16]) -> (Result<(), String>, PerPort) {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("tcp");
        std::fs::write(&t, table).unwrap();
        let ports: Vec<(bool, u16)> = ports.iter().map(|p| (false, *p)).collect();
        let mine: Vec<usize> = (0..ports.len()).collect();
        let mut out = ports.iter().map(|_| Ok(Vec::new())).collect::<Vec<_>>();
        let r = scan_table(t.to_str().unwrap(), false, &ports, &mine, &mut out);
        (r, out)
    }

    #[test]
    fn each_port_gets_its_own_listening_sockets_and_a_bad_inode_fails_its_port_alone() {
        let table = format!(
            "{HEADER}{}{}{}{}",
            line(7070, 0x0a, "111"),
            line(7071, 0x01, "222"), // established, not listening
            line(7072, 0x0a, "x"),
            line(7071, 0x0a, "333"),
        );
        let (r, out) = scan(&table, &[7071, 7070, 7072, 7073]);
        assert_eq!(r, Ok(()));
        let tcp = |inode, port| Bound {
            inode,
            what: format!("tcp:{port}"),
        };
        assert_eq!(out[0], Ok(vec![tcp(333, 7071)]));
        assert_eq!(out[1], Ok(vec![tcp(111, 7070)]));
        assert!(
            out[2]
                .as_ref()
                .is_err_and(|e| e.ends_with("tcp: bad inode")),
            "{:?}",
            out[2]
        );
        assert_eq!(out[3], Ok(vec![]));
    }

    #[test]
    fn a_table_in_an_unknown_format_or_with_a_short_line_is_an_error_of_the_whole_table() {
        let (r, _) = scan("garbage\n", &[7070]);
        assert!(r.is_err_and(|e| e.ends_with("tcp: unknown format")));
        let (r, _) = scan(
            &format!("{HEADER}{}   1: short\n", line(7070, 0x0a, "1")),
            &[7070],
        );
        assert!(r.is_err_and(|e| e.ends_with("tcp: short line")));
    }
}

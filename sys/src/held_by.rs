//! What one process holds and how it was started, read from `/proc` for `repoch discover`
//! (docs/OPERATOR.md, "Discovering the old root"): the sockets it listens on (spelled as a
//! manifest names listeners), the files it holds locks on, its uids and the owner of its
//! user namespace, its parent chain and its terminal. Nothing here judges: a caller says
//! what each finding means. What cannot be read is an error naming the file, never an
//! empty answer.

use std::path::Path;

use crate::error::{Context as _, Error};
use crate::procfs::{read_small_lossy, PROC_FDS_MAX, PROC_FILE_BYTES_MAX};

/// Lines of one `/proc/PID/net/*` table read; past it the table is an error.
pub const NET_TABLE_LINES_MAX: usize = 1 << 16;
/// Bytes of one `/proc/PID/net/*` table read.
pub const NET_TABLE_BYTES_MAX: u64 = 16 << 20;
/// Ancestors followed from one process up to pid 1.
pub const PARENT_CHAIN_MAX: usize = 64;

/// `TCP_LISTEN` in `/proc/net/tcp`'s `st` column.
const TCP_LISTEN: &str = "0A";
/// An unconnected UDP socket's `st` (`TCP_CLOSE`): bound to receive from anyone. A
/// connected one (a client's) is no listener.
const UDP_UNCONNECTED: &str = "07";
/// `__SO_ACCEPTCON` in `/proc/net/unix`'s `Flags` column: a listening socket.
const SO_ACCEPTCON: u32 = 0x0001_0000;

/// A socket a process listens on (TCP), is bound to (UDP), or listens on or is bound to
/// by path (unix), spelled as a manifest's `containment.listeners` spells it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listening {
    /// `tcp:127.0.0.1:7070`, `udp:[::1]:53`, `tcp:*:80`, `unix:/run/x.sock`.
    pub spelled: String,
    /// The socket's inode (`socket:[inode]` among the process's descriptors).
    pub inode: u64,
}

/// The socket inodes among `pid`'s descriptors (its thread-group leader's table).
pub fn socket_inodes(pid: u32) -> Result<Vec<u64>, Error> {
    let dir = format!("/proc/{pid}/fd");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir)
        .context(format_args!("{dir}"))?
        .take(PROC_FDS_MAX)
    {
        let Ok(e) = e else { continue };
        let Ok(link) = std::fs::read_link(e.path()) else {
            continue; // closed meanwhile
        };
        let link = link.to_string_lossy();
        if let Some(ino) = link
            .strip_prefix("socket:[")
            .and_then(|r| r.strip_suffix(']'))
            .and_then(|i| i.parse().ok())
        {
            out.push(ino);
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The listening or bound sockets among `inodes`, as `pid`'s network namespace lists them
/// (`/proc/PID/net/{tcp,tcp6,udp,udp6,unix}`).
pub fn listening(pid: u32, inodes: &[u64]) -> Result<Vec<Listening>, Error> {
    let mut out = Vec::new();
    for (table, udp) in [
        ("tcp", false),
        ("tcp6", false),
        ("udp", true),
        ("udp6", true),
    ] {
        let path = format!("/proc/{pid}/net/{table}");
        let text = read_small_lossy(Path::new(&path), NET_TABLE_BYTES_MAX)
            .context(format_args!("{path}"))?;
        for line in table_lines(&path, &text)? {
            if let Some(l) = inet_line(line, udp).filter(|l| inodes.contains(&l.inode)) {
                out.push(l);
            }
        }
    }
    let path = format!("/proc/{pid}/net/unix");
    let text =
        read_small_lossy(Path::new(&path), NET_TABLE_BYTES_MAX).context(format_args!("{path}"))?;
    let ours = other_netns(pid).is_none();
    for line in table_lines(&path, &text)? {
        if let Some(l) = unix_line(line).filter(|l| inodes.contains(&l.inode)) {
            // The table prints each name raw: a name holding a newline ends its line and
            // forges the next (another path for any inode). In our network namespace the
            // kernel names each socket exactly (sock_diag).
            match ours {
                true => out.extend(named_by_the_kernel(l.inode)?),
                false => out.push(l),
            }
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The unix socket `inode` as sock_diag names it in our network namespace: its bound name
/// (an abstract one spelled with `@`, as `/proc/net/unix` does), read lossily; `None` when
/// it is gone or bound to no name. Its listening is the table's word: a forged line only
/// adds a socket to hold, never hides one.
fn named_by_the_kernel(inode: u64) -> Result<Option<Listening>, Error> {
    let Some(s) = crate::sockdiag::unix_socket(inode, None)? else {
        return Ok(None);
    };
    Ok(s.name.filter(|n| !n.is_empty()).map(|n| {
        let name = match n.split_first() {
            Some((0, abstract_name)) => format!("@{}", String::from_utf8_lossy(abstract_name)),
            _ => String::from_utf8_lossy(&n).into_owned(),
        };
        Listening {
            spelled: format!("unix:{name}"),
            inode,
        }
    }))
}

/// The lines of table `text` (read from `path`) after its header; more than
/// [`NET_TABLE_LINES_MAX`] is an error, never a cut table (what came after the cut would
/// be unseen).
fn table_lines<'t>(path: &str, text: &'t str) -> Result<std::str::Lines<'t>, Error> {
    if text.lines().count() > NET_TABLE_LINES_MAX + 1 {
        return Err(Error::Found(format!(
            "{path}: more than {NET_TABLE_LINES_MAX} sockets (NET_TABLE_LINES_MAX)"
        )));
    }
    let mut lines = text.lines();
    lines.next();
    Ok(lines)
}

/// One line of `/proc/net/{tcp,udp}{,6}`: a TCP socket listening, or a UDP socket bound to
/// a port; anything else is `None`.
fn inet_line(line: &str, udp: bool) -> Option<Listening> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let (local, st, inode) = (f.get(1)?, f.get(3)?, f.get(9)?);
    let (addr, port) = local.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    if *st != if udp { UDP_UNCONNECTED } else { TCP_LISTEN } || port == 0 {
        return None;
    }
    let inode = inode.parse().ok()?;
    let proto = if udp { "udp" } else { "tcp" };
    Some(Listening {
        spelled: format!("{proto}:{}:{port}", address(addr)?),
        inode,
    })
}

/// `/proc/net/tcp`'s hex address (each 32-bit word in the host's byte order) as a manifest
/// spells it: dotted IPv4, bracketed IPv6, `*` for every address.
fn address(hex: &str) -> Option<String> {
    let words: Vec<u32> = (0..hex.len() / 8)
        .map(|i| u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let ip: std::net::IpAddr = match bytes.len() {
        4 => std::net::Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).into(),
        16 => std::net::Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?).into(),
        _ => return None,
    };
    Some(match ip {
        ip if ip.is_unspecified() => "*".into(),
        std::net::IpAddr::V4(v4) => v4.to_string(),
        // An IPv4-mapped address is that IPv4 address, as a manifest must spell it.
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => format!("[{v6}]"),
        },
    })
}

/// One line of `/proc/net/unix`: a socket bound to a name that listens (stream,
/// seqpacket) or receives (datagram); unbound sockets are `None`. The path is the rest of
/// the line (it may hold spaces); an abstract name is spelled `unix:@NAME`, which no
/// manifest can name (the caller says so).
fn unix_line(line: &str) -> Option<Listening> {
    let (f, path) = fields_and_rest(line, 7)?;
    let (flags, kind, inode) = (f[3], f[4], f[6]);
    let flags = u32::from_str_radix(flags, 16).ok()?;
    let datagram = kind == "0002";
    if path.is_empty() || !(datagram || flags & SO_ACCEPTCON != 0) {
        return None;
    }
    Some(Listening {
        spelled: format!("unix:{path}"),
        inode: inode.parse().ok()?,
    })
}

/// The first `n` whitespace-separated fields of `line`, and what follows them (its
/// leading blanks cut): a last field that may hold spaces.
fn fields_and_rest(line: &str, n: usize) -> Option<(Vec<&str>, &str)> {
    let mut fields = Vec::with_capacity(n);
    let mut rest = line;
    for _ in 0..n {
        rest = rest.trim_start_matches([' ', '\t']);
        let end = rest.find([' ', '\t']).unwrap_or(rest.len());
        if end == 0 {
            return None;
        }
        fields.push(&rest[..end]);
        rest = &rest[end..];
    }
    Some((fields, rest.trim_start_matches([' ', '\t'])))
}

/// A lock a process holds on one of its open files.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LockHeld {
    /// The file's path as its descriptor names it.
    pub path: String,
    /// `FLOCK`, `POSIX`, `OFDLCK`, `LEASE`, and `WRITE` (exclusive) or `READ`.
    pub kind: String,
}

/// The locks `pid` holds through its descriptors (each descriptor's `fdinfo` `lock:`
/// lines), with each file's path.
pub fn locks_held(pid: u32) -> Result<Vec<LockHeld>, Error> {
    let dir = format!("/proc/{pid}/fdinfo");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir)
        .context(format_args!("{dir}"))?
        .take(PROC_FDS_MAX)
    {
        let Ok(e) = e else { continue };
        let Ok(info) = read_small_lossy(&e.path(), PROC_FILE_BYTES_MAX) else {
            continue; // closed meanwhile
        };
        let locks: Vec<_> = info
            .lines()
            .filter(|l| l.starts_with("lock:"))
            .filter_map(crate::procfs::parse_lock_line)
            .collect();
        if locks.is_empty() {
            continue;
        }
        let fd = format!("/proc/{pid}/fd/{}", e.file_name().to_string_lossy());
        let Ok(path) = std::fs::read_link(&fd) else {
            continue;
        };
        for l in locks {
            let mode = if l.exclusive { "WRITE" } else { "READ" };
            out.push(LockHeld {
                path: path.to_string_lossy().into_owned(),
                kind: format!("{} {mode}", l.kind),
            });
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Who a process runs as: its real and effective uid, and, when it runs in a user
/// namespace other than ours, the uid that namespace's creator has here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunsAs {
    pub ruid: u32,
    pub euid: u32,
    pub userns_owner: Option<u32>,
}

/// `pid`'s uids (`Uid:` in its status) and its user namespace's owner when it is not ours.
pub fn runs_as(pid: u32) -> Result<RunsAs, Error> {
    let path = format!("/proc/{pid}/status");
    let s =
        read_small_lossy(Path::new(&path), PROC_FILE_BYTES_MAX).context(format_args!("{path}"))?;
    let mut uids = s
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .ok_or_else(|| Error::Found(format!("{path}: no Uid: line")))?
        .split_whitespace()
        .map(str::parse::<u32>);
    let (Some(Ok(ruid)), Some(Ok(euid))) = (uids.next(), uids.next()) else {
        return Err(Error::Found(format!("{path}: an unreadable Uid: line")));
    };
    let ns = |p: &str| rustix::fs::stat(p).map(|st| st.st_ino);
    let theirs = format!("/proc/{pid}/ns/user");
    let userns_owner = match (ns(&theirs), ns("/proc/self/ns/user")) {
        (Ok(a), Ok(b)) if a == b => None,
        (Ok(_), Ok(_)) => {
            let f = std::fs::File::open(&theirs).context(format_args!("{theirs}"))?;
            Some(crate::kernel::userns_owner(&f)?)
        }
        (Err(e), _) | (_, Err(e)) => return Err(Error::Found(format!("{theirs}: {e}"))),
    };
    Ok(RunsAs {
        ruid,
        euid,
        userns_owner,
    })
}

/// Every process now (the pids `/proc` lists).
pub fn all_pids() -> Result<Vec<u32>, Error> {
    crate::procfs::pids().context("/proc")
}

/// The path of `pid`'s executable, as its `exe` link reads; `None` when unreadable (a
/// kernel thread, or gone).
pub fn exe(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// `pid`'s network namespace (`net:[N]`) when it is not ours; `None` when it is ours or
/// cannot be read.
pub fn other_netns(pid: u32) -> Option<String> {
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
    let ours = std::fs::read_link("/proc/self/ns/net").ok()?;
    (theirs != ours).then(|| theirs.to_string_lossy().into_owned())
}

/// The arguments `pid` was started with (`/proc/PID/cmdline`, at most
/// `PROC_FILE_BYTES_MAX` bytes, each argument read lossily); `None` once it has exited or
/// when unreadable.
pub fn arguments(pid: u32) -> Option<Vec<String>> {
    let s = read_small_lossy(
        Path::new(&format!("/proc/{pid}/cmdline")),
        PROC_FILE_BYTES_MAX,
    )
    .ok()?;
    Some(
        s.trim_end_matches('\0')
            .split('\0')
            .map(str::to_owned)
            .collect(),
    )
}

/// Whether `pid` runs under another root directory than ours (a container's, a chroot's):
/// the paths it sees, its executable's among them, are not the host's. `None` when it
/// cannot be told (gone, or unreadable).
pub fn other_root(pid: u32) -> Option<bool> {
    let theirs = rustix::fs::stat(format!("/proc/{pid}/root/")).ok()?;
    let ours = rustix::fs::stat("/").ok()?;
    Some((theirs.st_dev, theirs.st_ino) != (ours.st_dev, ours.st_ino))
}

/// One process of a parent chain: its pid, its name (`comm`), its executable's path (empty
/// when unreadable: a kernel thread, or gone), its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ancestor {
    pub pid: u32,
    pub comm: String,
    pub exe: String,
    /// The terminal it runs on (`tty_nr` of its stat), 0 for none.
    pub tty: u32,
    pub ppid: u32,
    /// Exited, not yet reaped by its parent, and no thread of it left: it runs nothing and
    /// holds nothing. (A leader that exited while other threads run is no zombie.)
    pub zombie: bool,
    /// Its leader exited while other threads run: its `/proc/PID` files read empty.
    pub exited_leader: bool,
}

/// `pid` as an [`Ancestor`]; `None` once it has exited.
pub fn ancestor(pid: u32) -> Option<Ancestor> {
    let s = read_small_lossy(Path::new(&format!("/proc/{pid}/stat")), PROC_FILE_BYTES_MAX).ok()?;
    let mut a = from_stat(pid, &s)?;
    a.exe = exe(pid).unwrap_or_default();
    Some(a)
}

/// `pid`'s stat line read (its executable not yet).
fn from_stat(pid: u32, s: &str) -> Option<Ancestor> {
    let st = crate::procfs::parse_stat(s)?;
    Some(Ancestor {
        pid,
        comm: st.comm,
        exe: String::new(),
        tty: u32::try_from(st.tty).unwrap_or(0),
        ppid: st.ppid,
        // A leader that exited while other threads run is `Z` and still holds everything
        // they hold (found by attacking the release binaries: such a process was left out
        // as a zombie).
        zombie: st.state == "Z" && st.threads <= 1,
        exited_leader: st.state == "Z" && st.threads > 1,
    })
}

/// The parent chain of `pid`, its parent first, up to pid 1 (included) or a process gone
/// meanwhile; at most [`PARENT_CHAIN_MAX`].
pub fn parents(pid: u32) -> Vec<Ancestor> {
    let mut out = Vec::new();
    let mut at = ancestor(pid).map(|a| a.ppid);
    while let Some(p) = at.filter(|p| *p != 0) {
        if out.len() == PARENT_CHAIN_MAX {
            break;
        }
        let Some(a) = ancestor(p) else { break };
        at = (a.pid != 1).then_some(a.ppid);
        out.push(a);
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_zombie_leader_whose_threads_run_is_no_zombie() {
        let stat = |state: &str, threads: u32| {
            format!(
                "42 (old root) {state} 7 42 42 34816 42 4194560 0 0 0 0 0 0 0 0 20 0 {threads} 0 99"
            )
        };
        let a = from_stat(42, &stat("S", 1)).unwrap();
        assert_eq!(
            (a.ppid, a.tty, a.comm.as_str(), a.zombie),
            (7, 34816, "old root", false)
        );
        assert!(from_stat(42, &stat("Z", 1)).unwrap().zombie);
        assert!(!from_stat(42, &stat("Z", 2)).unwrap().zombie);
        assert!(from_stat(42, &stat("Z", 2)).unwrap().exited_leader);
        assert!(!from_stat(42, &stat("S", 2)).unwrap().exited_leader);
    }
    use super::*;

    #[test]
    fn inet_lines_are_spelled_as_a_manifest_spells_listeners() {
        let tcp = "   0: 0100007F:1BA6 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0";
        assert_eq!(
            inet_line(tcp, false),
            Some(Listening {
                spelled: "tcp:127.0.0.1:7078".into(),
                inode: 4242
            })
        );
        // Established, not listening.
        assert_eq!(inet_line(&tcp.replace(" 0A ", " 01 "), false), None);
        let any = "   1: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7 1";
        assert_eq!(inet_line(any, false).unwrap().spelled, "tcp:*:80");
        let v6 = "   0: 00000000000000000000000001000000:0035 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 9 2";
        assert_eq!(inet_line(v6, true).unwrap().spelled, "udp:[::1]:53");
        // ::ffff:127.0.0.1, as the kernel prints it: the IPv4 address.
        let mapped = "   0: 0000000000000000FFFF00000100007F:4311 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 10 1";
        assert_eq!(
            inet_line(mapped, false).unwrap().spelled,
            "tcp:127.0.0.1:17169"
        );
    }

    #[test]
    fn unix_lines_are_listening_or_datagram_sockets_bound_to_a_path() {
        let listening = "0000000000000000: 00000002 00000000 00010000 0001 01 31337 /run/x.sock";
        assert_eq!(
            unix_line(listening),
            Some(Listening {
                spelled: "unix:/run/x.sock".into(),
                inode: 31337
            })
        );
        // Connected stream, unbound: no listener; an abstract name is spelled with `@`; a
        // path with spaces is whole.
        assert_eq!(
            unix_line(&listening.replace(" 00010000 ", " 00000000 ")),
            None
        );
        assert_eq!(
            unix_line(&listening.replace("/run/x.sock", "@abstract"))
                .unwrap()
                .spelled,
            "unix:@abstract"
        );
        assert_eq!(
            unix_line(&listening.replace("/run/x.sock", "/run/with space.sock"))
                .unwrap()
                .spelled,
            "unix:/run/with space.sock"
        );
        assert_eq!(
            unix_line("0000000000000000: 00000002 00000000 00000000 0002 01 5"),
            None
        );
        let dgram = "0000000000000000: 00000002 00000000 00000000 0002 01 6 /run/log.sock";
        assert_eq!(unix_line(dgram).unwrap().spelled, "unix:/run/log.sock");
    }

    #[test]
    fn our_own_listener_lock_and_parent_chain_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("l.sock");
        let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let me = std::process::id();
        let found = listening(me, &socket_inodes(me).unwrap()).unwrap();
        let spelled: Vec<&str> = found.iter().map(|l| l.spelled.as_str()).collect();
        assert!(
            spelled.contains(&format!("unix:{}", sock.display()).as_str()),
            "{spelled:?}"
        );
        let port = tcp.local_addr().unwrap().port();
        assert!(
            spelled.contains(&format!("tcp:127.0.0.1:{port}").as_str()),
            "{spelled:?}"
        );
        drop(l);
        let lockfile = dir.path().join("lock");
        let f = std::fs::File::create(&lockfile).unwrap();
        rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
        let locks = locks_held(me).unwrap();
        assert!(
            locks.contains(&LockHeld {
                path: lockfile.display().to_string(),
                kind: "FLOCK WRITE".into()
            }),
            "{locks:?}"
        );
        let chain = parents(me);
        assert!(chain.last().is_some_and(|a| a.pid == 1), "{chain:?}");
        assert_eq!(runs_as(me).unwrap().userns_owner, None);
    }
}

//! Unix sockets as the kernel knows them: `NETLINK_SOCK_DIAG` (`unix_diag`), in this
//! thread's network namespace or in every network namespace of the host.
//!
//! What it gives, per socket: its socket inode (the `socket:[N]` of `/proc/PID/fd`), its
//! cookie, type, state, the file it is bound to (`UNIX_DIAG_VFS`: device and inode, the
//! identity `stat()` gives for the path, whatever name it was bound by), its bound name
//! and its peer's socket inode.
//!
//! - [`unix_sockets`]: every unix socket of this thread's network namespace.
//! - [`unix_socket`]: one socket by inode (and cookie), in this namespace; [`peer_of`]: a
//!   socket's peer, wherever the socket is.
//! - [`network_namespaces`], [`in_netns`]: the namespaces processes are in, and running a
//!   closure in one of them (a short-lived thread that `setns()`es; other threads keep
//!   theirs).
//! - [`bound_to`]: every socket, in every namespace, bound to a given file.
//! - [`inet_sockets`]: the TCP sockets listening on a port, or the UDP sockets bound to it
//!   (`inet_diag`), in this thread's network namespace.
//!
//! The request is built and the reply parsed by hand, bounded and checked (no unsafe):
//! `include/uapi/linux/{netlink,sock_diag,unix_diag,inet_diag}.h`.
//!
//! Why by hand, not `netlink-packet-sock-diag` and `netlink-sys` (checked against
//! netlink-packet-sock-diag 0.4.2, its latest release, 2023-07, built on
//! netlink-packet-core 0.7 while that crate is at 0.9; netlink-sys 0.8.8): the crate
//! cannot ask for unix sockets in every state (its bitflags-1 `StateFlags` holds only
//! ESTABLISHED and LISTEN, and any other bit needs `unsafe`), so bound but unconnected
//! datagram sockets would be missed; its `UNIX_DIAG_VFS` value has private fields and no
//! getters; it parses `UNIX_DIAG_NAME` as a UTF-8 `String`, so one non-UTF-8 name fails the
//! whole message. With it, the datagram loop, the sequence and `NLM_F_DUMP_INTR` checks,
//! the errno in `NLMSG_DONE`, and the size and time bounds would still be ours, and
//! netlink-sys does nothing `nix` does not already do here. It would replace about 140
//! lines of layout code and add a second `bitflags`.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::PathBuf;

use nix::sys::socket::{
    recvfrom, sendto, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};

use super::proc::TASKS_PER_PROC_MAX;
use super::procfs::pids;

/// Bytes of one netlink datagram received (the kernel's dump skbs are at most 32 KiB).
pub const DIAG_DATAGRAM_BYTES_MAX: usize = 64 * 1024;
/// Bytes of one whole dump, over all its datagrams.
pub const DIAG_DUMP_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Sockets listed in one dump.
pub const DIAG_SOCKETS_MAX: usize = 1 << 20;
/// Longest wait for one datagram of a reply.
pub const DIAG_RECV_SECONDS_MAX: i64 = 5;
/// Distinct network namespaces examined.
pub const NETNS_MAX: usize = 4096;
/// Tasks whose network namespace is looked at, over all processes.
pub const NETNS_TASKS_MAX: usize = 1 << 20;
/// Handles (`/proc/PID/task/TID/ns/net` paths) kept per namespace, tried in turn when the
/// task behind one has exited.
pub const NETNS_HANDLES_MAX: usize = 4;
/// Bytes of a bound name (`sun_path`).
pub const NAME_BYTES_MAX: usize = 108;

/// `TCP_LISTEN`: the state of a listening unix stream or seqpacket socket.
pub const TCP_LISTEN: u8 = 10;
/// `TCP_ESTABLISHED`: a connected socket.
pub const TCP_ESTABLISHED: u8 = 1;

const NLMSG_HDR_BYTES: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_DUMP_INTR: u16 = 0x10;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const AF_UNIX: u8 = 1;
const UDIAG_SHOW_NAME: u32 = 0x1;
const UDIAG_SHOW_VFS: u32 = 0x2;
const UDIAG_SHOW_PEER: u32 = 0x4;
const UNIX_DIAG_NAME: u16 = 0;
const UNIX_DIAG_VFS: u16 = 1;
const UNIX_DIAG_PEER: u16 = 2;
/// `unix_diag_msg`: family, type, state, pad, inode, cookie[2].
const UNIX_DIAG_MSG_BYTES: usize = 16;
/// `INET_DIAG_NOCOOKIE`: match any cookie.
const NO_COOKIE: u64 = u64::MAX;

/// The file a socket is bound to, as `stat()` would identify it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vfs {
    /// Device, in `stat()`'s `st_dev` encoding (converted from the kernel's internal one).
    pub dev: u64,
    /// Inode number. The kernel reports only its low 32 bits: compare with
    /// `st_ino & 0xffff_ffff` (see [`Vfs::is`]).
    pub ino: u64,
}

impl Vfs {
    /// Whether this is the file with `stat()` identity `dev`/`ino`.
    pub fn is(&self, dev: u64, ino: u64) -> bool {
        self.dev == dev && self.ino == ino & 0xffff_ffff
    }
}

/// One unix socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixSocket {
    /// Socket inode: `socket:[inode]` in `/proc/PID/fd`.
    pub inode: u64,
    /// The kernel's cookie for this socket (with the inode, names it uniquely).
    pub cookie: u64,
    /// `SOCK_STREAM` (1), `SOCK_DGRAM` (2) or `SOCK_SEQPACKET` (5).
    pub kind: u8,
    /// `TCP_LISTEN` (10) when listening, `TCP_ESTABLISHED` (1) when connected, 7 otherwise.
    pub state: u8,
    /// The file it is bound to, if bound to a path.
    pub vfs: Option<Vfs>,
    /// The bound name as given to `bind()`, without trailing NULs (abstract names start
    /// with a NUL). Only what was bound: a rename or another spelling is not reflected.
    pub name: Option<Vec<u8>>,
    /// The peer's socket inode, if connected.
    pub peer: Option<u64>,
}

impl UnixSocket {
    /// `stream`, `dgram`, `seqpacket` or the number.
    pub fn kind_name(&self) -> String {
        match self.kind {
            1 => "stream".into(),
            2 => "dgram".into(),
            5 => "seqpacket".into(),
            k => format!("type {k}"),
        }
    }
    /// `listening`, `connected` or `unconnected`.
    pub fn state_name(&self) -> &'static str {
        match self.state {
            TCP_LISTEN => "listening",
            TCP_ESTABLISHED => "connected",
            _ => "unconnected",
        }
    }
}

/// The kernel's internal `dev_t` (`MAJOR << 20 | MINOR`, as `unix_diag_vfs` carries it)
/// in `stat()`'s encoding.
pub fn dev_from_kernel(kdev: u32) -> u64 {
    rustix::fs::makedev(kdev >> 20, kdev & 0xf_ffff)
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn align4(n: usize) -> usize {
    n.saturating_add(3) & !3
}

/// A `SOCK_DIAG_BY_FAMILY` request for unix sockets: a dump (`ino` None) or one socket.
fn request(seq: u32, ino: Option<(u32, u64)>) -> Vec<u8> {
    let flags = NLM_F_REQUEST | if ino.is_none() { NLM_F_DUMP } else { 0 };
    let (ino, cookie) = ino.unwrap_or((0, NO_COOKIE));
    let mut b = Vec::with_capacity(40);
    b.extend_from_slice(&40u32.to_ne_bytes());
    b.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b.extend_from_slice(&flags.to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    // unix_diag_req
    b.push(AF_UNIX);
    b.push(0);
    b.extend_from_slice(&0u16.to_ne_bytes());
    b.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    b.extend_from_slice(&ino.to_ne_bytes());
    b.extend_from_slice(&(UDIAG_SHOW_NAME | UDIAG_SHOW_VFS | UDIAG_SHOW_PEER).to_ne_bytes());
    b.extend_from_slice(&(cookie as u32).to_ne_bytes());
    b.extend_from_slice(&((cookie >> 32) as u32).to_ne_bytes());
    b
}

/// Parses one `unix_diag_msg` and its attributes.
fn parse_socket(p: &[u8]) -> Result<UnixSocket, String> {
    if p.len() < UNIX_DIAG_MSG_BYTES {
        return Err(format!("unix_diag_msg of {} bytes", p.len()));
    }
    if p[0] != AF_UNIX {
        return Err(format!("unix_diag_msg of family {}", p[0]));
    }
    let lo = u64::from(u32_at(p, 8).unwrap_or_default());
    let hi = u64::from(u32_at(p, 12).unwrap_or_default());
    let mut s = UnixSocket {
        inode: u64::from(u32_at(p, 4).unwrap_or_default()),
        cookie: lo | hi << 32,
        kind: p[1],
        state: p[2],
        vfs: None,
        name: None,
        peer: None,
    };
    let mut at = UNIX_DIAG_MSG_BYTES;
    while at + 4 <= p.len() {
        let len = usize::from(u16_at(p, at).unwrap_or_default());
        let kind = u16_at(p, at + 2).unwrap_or_default() & 0x3fff;
        if len < 4 || at + len > p.len() {
            return Err(format!("attribute of {len} bytes at {at} of {}", p.len()));
        }
        let data = &p[at + 4..at + len];
        match kind {
            UNIX_DIAG_NAME => {
                if data.len() > NAME_BYTES_MAX {
                    return Err(format!("name of {} bytes", data.len()));
                }
                // A path name may carry the terminating NUL its binder counted; an
                // abstract name starts with NUL and is kept whole.
                let mut name = data;
                if name.first() != Some(&0) {
                    while let [rest @ .., 0] = name {
                        name = rest;
                    }
                }
                s.name = Some(name.to_vec());
            }
            UNIX_DIAG_VFS => {
                let (Some(ino), Some(dev), 8) = (u32_at(data, 0), u32_at(data, 4), data.len())
                else {
                    return Err(format!("vfs attribute of {} bytes", data.len()));
                };
                s.vfs = Some(Vfs {
                    dev: dev_from_kernel(dev),
                    ino: u64::from(ino),
                });
            }
            UNIX_DIAG_PEER => {
                let (Some(peer), 4) = (u32_at(data, 0), data.len()) else {
                    return Err(format!("peer attribute of {} bytes", data.len()));
                };
                s.peer = Some(u64::from(peer));
            }
            _ => {}
        }
        at += align4(len);
    }
    Ok(s)
}

/// What one datagram of a reply said.
#[derive(Debug, PartialEq, Eq)]
enum Batch {
    More,
    Done,
    /// `NLMSG_ERROR` with this (positive) errno.
    Errno(i32),
}

/// Parses one datagram of a reply to request `seq`, appending its sockets to `out`.
fn parse_datagram<T>(
    b: &[u8],
    seq: u32,
    out: &mut Vec<T>,
    parse: fn(&[u8]) -> Result<T, String>,
) -> Result<Batch, String> {
    let mut at = 0;
    while at < b.len() {
        let (Some(len), Some(kind), Some(flags), Some(mseq)) = (
            u32_at(b, at),
            u16_at(b, at + 4),
            u16_at(b, at + 6),
            u32_at(b, at + 8),
        ) else {
            return Err(format!("netlink header cut at {at} of {}", b.len()));
        };
        let len = len as usize;
        if len < NLMSG_HDR_BYTES || at + len > b.len() {
            return Err(format!(
                "netlink message of {len} bytes at {at} of {}",
                b.len()
            ));
        }
        if mseq != seq {
            return Err(format!("netlink reply to request {mseq}, not {seq}"));
        }
        if flags & NLM_F_DUMP_INTR != 0 {
            return Err("the dump was interrupted (sockets changed meanwhile)".into());
        }
        let payload = &b[at + NLMSG_HDR_BYTES..at + len];
        match kind {
            // A dump that failed says so in its DONE: a negative errno where a finished
            // one has 0 (netlink_dump's `dump_done_errno`). Never read as "no sockets".
            NLMSG_DONE => {
                let code = u32_at(payload, 0).ok_or("netlink DONE message cut short")? as i32;
                return Ok(if code < 0 {
                    Batch::Errno(-code)
                } else {
                    Batch::Done
                });
            }
            NLMSG_ERROR => {
                let code = u32_at(payload, 0).ok_or("netlink error message cut short")? as i32;
                return Ok(Batch::Errno(-code));
            }
            SOCK_DIAG_BY_FAMILY => {
                if out.len() == DIAG_SOCKETS_MAX {
                    return Err(format!("more than {DIAG_SOCKETS_MAX} sockets"));
                }
                out.push(parse(payload)?);
            }
            k => return Err(format!("netlink message of type {k}")),
        }
        at += align4(len);
    }
    Ok(Batch::More)
}

fn diag_socket() -> Result<OwnedFd, String> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )
    .map_err(|e| format!("sock_diag socket: {e}"))?;
    let t = nix::sys::time::TimeVal::new(DIAG_RECV_SECONDS_MAX, 0);
    setsockopt(&fd, sockopt::ReceiveTimeout, &t).map_err(|e| format!("sock_diag: {e}"))?;
    Ok(fd)
}

/// Sends one request for unix sockets and collects its reply.
fn ask(one: Option<(u32, u64)>) -> Result<Vec<UnixSocket>, String> {
    exchange(&request(1, one), one.is_some(), parse_socket)
}

/// Sends request `req` (sequence number 1) and collects its reply, each message parsed by
/// `parse`; `one` for a lookup of one socket: one message, no DONE, and `ENOENT` for no such
/// socket. For a dump, `ENOENT` (no handler for the family or protocol) is an error.
fn exchange<T>(
    req: &[u8],
    one: bool,
    parse: fn(&[u8]) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let fd = diag_socket()?;
    let seq = 1;
    sendto(
        fd.as_raw_fd(),
        req,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .map_err(|e| format!("sock_diag send: {e}"))?;
    let mut buf = vec![0u8; DIAG_DATAGRAM_BYTES_MAX];
    let mut out = Vec::new();
    let mut total = 0usize;
    loop {
        let (n, from) = recvfrom::<NetlinkAddr>(fd.as_raw_fd(), &mut buf)
            .map_err(|e| format!("sock_diag receive: {e}"))?;
        if from.is_none_or(|a| a.pid() != 0) {
            return Err(format!("sock_diag reply not from the kernel: {from:?}"));
        }
        if n >= buf.len() {
            return Err(format!(
                "sock_diag datagram over {DIAG_DATAGRAM_BYTES_MAX} bytes"
            ));
        }
        total += n;
        if total > DIAG_DUMP_BYTES_MAX {
            return Err(format!("sock_diag dump over {DIAG_DUMP_BYTES_MAX} bytes"));
        }
        match parse_datagram(&buf[..n], seq, &mut out, parse)? {
            Batch::Done => return Ok(out),
            // A lookup of one socket answers with one message and no DONE.
            Batch::More if one => return Ok(out),
            Batch::More => {}
            Batch::Errno(0) => return Ok(out),
            Batch::Errno(e) if one && e == nix::errno::Errno::ENOENT as i32 => return Ok(out),
            Batch::Errno(e) => {
                return Err(format!(
                    "sock_diag: {}",
                    std::io::Error::from_raw_os_error(e)
                ))
            }
        }
    }
}

/// `inet_diag_req_v2`: family, protocol, ext, pad, states, `inet_diag_sockid`.
const INET_DIAG_REQ_BYTES: usize = 56;
/// `inet_diag_msg`: family, state, timer, retrans, `inet_diag_sockid` (48 bytes: sport and
/// dport big-endian, src[4], dst[4], if, cookie[2]), expires, rqueue, wqueue, uid, inode.
const INET_DIAG_MSG_BYTES: usize = 72;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
/// The states a TCP listener is in (`1 << TCP_LISTEN`): the kernel walks its listening
/// hash only, never the established one.
const TCPF_LISTEN: u32 = 1 << TCP_LISTEN;

/// One TCP or UDP socket, as `inet_diag` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InetSocket {
    /// Socket inode: `socket:[inode]` in `/proc/PID/fd`.
    pub inode: u64,
    /// The local port.
    pub port: u16,
    /// The state, in TCP's numbering (`TCP_LISTEN` is 10; an unconnected UDP socket 7).
    pub state: u8,
    /// IPv6 (`AF_INET6`, which also serves IPv4 unless `IPV6_V6ONLY`), or IPv4.
    pub v6: bool,
}

/// A dump request for the TCP sockets listening on, or the UDP sockets bound to, local
/// port `port` of one address family: the kernel compares the port itself (`id.sport`).
fn inet_request(seq: u32, udp: bool, v6: bool, port: u16) -> Vec<u8> {
    let len = NLMSG_HDR_BYTES + INET_DIAG_REQ_BYTES;
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(&(len as u32).to_ne_bytes());
    b.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.push(if v6 { AF_INET6 } else { AF_INET });
    b.push(if udp { IPPROTO_UDP } else { IPPROTO_TCP });
    b.extend_from_slice(&[0, 0]);
    // UDP: bound in any state (connected or not); TCP: listening.
    b.extend_from_slice(&(if udp { u32::MAX } else { TCPF_LISTEN }).to_ne_bytes());
    b.extend_from_slice(&port.to_be_bytes());
    b.resize(len, 0);
    b
}

/// Parses one `inet_diag_msg` (its attributes, none asked for, are ignored).
fn parse_inet(p: &[u8]) -> Result<InetSocket, String> {
    if p.len() < INET_DIAG_MSG_BYTES {
        return Err(format!("inet_diag_msg of {} bytes", p.len()));
    }
    let v6 = match p[0] {
        AF_INET => false,
        AF_INET6 => true,
        f => return Err(format!("inet_diag_msg of family {f}")),
    };
    Ok(InetSocket {
        inode: u64::from(u32_at(p, 68).unwrap_or_default()),
        port: u16::from_be_bytes([p[4], p[5]]),
        state: p[1],
        v6,
    })
}

/// The TCP sockets listening on local port `port` (`udp` false), or the UDP sockets bound
/// to it (`udp` true), of one address family, in this thread's network namespace. Only
/// sockets on `port` are returned, however the kernel filtered: the others of the
/// namespace cost no bytes of the reply.
pub fn inet_sockets(udp: bool, v6: bool, port: u16) -> Result<Vec<InetSocket>, String> {
    // ENOENT (no `tcp_diag` or `udp_diag` handler) is an error: a kernel that cannot
    // answer has not said "nothing bound". Without IPv6 the dump of `v6` is empty.
    let mut got = exchange(&inet_request(1, udp, v6, port), false, parse_inet)?;
    got.retain(|s| asked(s, udp, v6, port));
    Ok(got)
}

/// Whether `s` is what [`inet_sockets`] asked the kernel for: on `port`, of the family, and
/// for TCP listening (the kernel filtered already; this keeps a reply it did not filter,
/// an older kernel's, from naming other sockets).
fn asked(s: &InetSocket, udp: bool, v6: bool, port: u16) -> bool {
    s.port == port && s.v6 == v6 && (udp || s.state == TCP_LISTEN)
}

/// Every unix socket of this thread's network namespace.
pub fn unix_sockets() -> Result<Vec<UnixSocket>, String> {
    ask(None)
}

/// The unix socket with socket inode `inode` in this thread's network namespace (and,
/// when given, cookie `cookie`), or `None` if there is none.
pub fn unix_socket(inode: u64, cookie: Option<u64>) -> Result<Option<UnixSocket>, String> {
    let ino = u32::try_from(inode).map_err(|_| format!("socket inode {inode} over 32 bits"))?;
    let got = ask(Some((ino, cookie.unwrap_or(NO_COOKIE))))?;
    Ok(got.into_iter().find(|s| s.inode == inode))
}

/// The socket inode of the peer of socket `inode` (e.g. one's own connected socket, from
/// `fstat`); `None` if unconnected or no such socket. The socket is looked for in this
/// thread's network namespace, then in the host's ([`adopt_host_netns`]), then in every
/// other a task is in: an accepted connection lives in its listening socket's namespace,
/// which for a socket systemd passed is systemd's, not repochd's own (`PrivateNetwork=yes`).
pub fn peer_of(inode: u64) -> Result<Option<u64>, String> {
    if let Some(s) = unix_socket(inode, None)? {
        return Ok(s.peer);
    }
    let host = match in_host_netns(|| unix_socket(inode, None))? {
        Some((_, Some(s))) => return Ok(s.peer),
        Some((id, None)) => Some(id),
        None => None,
    };
    let own = own_netns()?;
    for ns in network_namespaces()? {
        if ns.id == own || Some(ns.id) == host {
            continue;
        }
        let got = in_netns(&ns, || unix_socket(inode, None))
            .map_err(|e| format!("network namespace {}: {e}", ns.id))?;
        if let Some(Some(s)) = got {
            return Ok(s.peer);
        }
    }
    Ok(None)
}

/// The inode of a socket fd (the `N` of `socket:[N]`), as [`peer_of`] and
/// [`unix_socket`] take it.
pub fn inode_of(fd: impl std::os::fd::AsFd) -> Result<u64, String> {
    rustix::fs::fstat(fd)
        .map(|st| st.st_ino)
        .map_err(|e| format!("fstat socket: {e}"))
}

/// A network namespace: its nsfs identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NetnsId {
    pub dev: u64,
    pub ino: u64,
}

impl std::fmt::Display for NetnsId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "net:[{}]", self.ino)
    }
}

/// A network namespace and a few paths that open it.
#[derive(Debug, Clone)]
pub struct Netns {
    pub id: NetnsId,
    pub handles: Vec<PathBuf>,
}

fn ns_identity(p: &std::path::Path) -> Option<NetnsId> {
    let st = rustix::fs::stat(p).ok()?;
    Some(NetnsId {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// This thread's network namespace.
pub fn own_netns() -> Result<NetnsId, String> {
    ns_identity(std::path::Path::new("/proc/thread-self/ns/net"))
        .ok_or_else(|| "/proc/thread-self/ns/net: cannot stat".into())
}

/// The distinct network namespaces any task is in (`/proc/PID/task/TID/ns/net`; a thread
/// may be in another one than its leader) or that `ip netns` names (`/run/netns/*`).
/// A namespace kept alive only by a socket or an fd is not found here.
pub fn network_namespaces() -> Result<Vec<Netns>, String> {
    // Every namespace lives on the one nsfs: its device is our own namespace's. Anything
    // else (an `ip netns` name being added or deleted is a plain file for a moment) is
    // not a namespace.
    let nsfs = own_netns()?.dev;
    let mut found: BTreeMap<NetnsId, Vec<PathBuf>> = BTreeMap::new();
    let mut add = |p: PathBuf| -> Result<(), String> {
        let Some(id) = ns_identity(&p).filter(|id| id.dev == nsfs) else {
            return Ok(()); // the task exited meanwhile, or not a namespace
        };
        if !found.contains_key(&id) && found.len() == NETNS_MAX {
            return Err(format!("more than {NETNS_MAX} network namespaces"));
        }
        let h = found.entry(id).or_default();
        if h.len() < NETNS_HANDLES_MAX {
            h.push(p);
        }
        Ok(())
    };
    let mut tasks_seen = 0usize;
    for pid in pids().map_err(|e| format!("/proc: {e}"))? {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue; // exited
        };
        for t in tasks.take(TASKS_PER_PROC_MAX).flatten() {
            tasks_seen += 1;
            if tasks_seen > NETNS_TASKS_MAX {
                return Err(format!("more than {NETNS_TASKS_MAX} tasks"));
            }
            add(t.path().join("ns/net"))?;
        }
    }
    match std::fs::read_dir("/run/netns") {
        Ok(named) => {
            for e in named.take(NETNS_MAX) {
                add(e.map_err(|e| format!("/run/netns: {e}"))?.path())?;
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("/run/netns: {e}")),
    }
    Ok(found
        .into_iter()
        .map(|(id, handles)| Netns { id, handles })
        .collect())
}

/// Runs `f` in network namespace `ns`, on a short-lived thread that `setns()`es into it
/// (the caller's threads keep their namespace). `Ok(None)` when every handle has vanished
/// (its tasks exited); an error when the namespace cannot be entered.
pub fn in_netns<T: Send>(
    ns: &Netns,
    f: impl FnOnce() -> Result<T, String> + Send,
) -> Result<Option<T>, String> {
    let mut fd = None;
    for h in &ns.handles {
        match rustix::fs::open(
            h,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        ) {
            Ok(f) => {
                // The handle must still be the namespace enumerated (pids are reused).
                let st = rustix::fs::fstat(&f).map_err(|e| format!("{}: {e}", h.display()))?;
                if st.st_dev == ns.id.dev && st.st_ino == ns.id.ino {
                    fd = Some(f);
                    break;
                }
            }
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::SRCH) => {}
            Err(e) => return Err(format!("{}: {e}", h.display())),
        }
    }
    let Some(fd) = fd else { return Ok(None) };
    in_netns_fd(&fd, ns.id, f).map(Some)
}

/// Runs `f` on a short-lived thread that `setns()`es into the namespace open at `fd`.
fn in_netns_fd<T: Send>(
    fd: &std::os::fd::OwnedFd,
    id: NetnsId,
    f: impl FnOnce() -> Result<T, String> + Send,
) -> Result<T, String> {
    std::thread::scope(|s| {
        s.spawn(move || {
            nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("setns into {id}: {e}"))?;
            f()
        })
        .join()
        .map_err(|_| format!("the thread observing {id} panicked"))?
    })
}

/// The host's network namespace, kept open for the process's life: see
/// [`adopt_host_netns`].
static HOST_NETNS: std::sync::OnceLock<(NetnsId, std::os::fd::OwnedFd)> =
    std::sync::OnceLock::new();

/// Records the network namespace that the listening socket `listener` lives in as the
/// host's: TCP and UDP ports are looked for there besides the observer's own namespace,
/// and a connection's peer is looked for there first. repochd calls it with its admin
/// socket at start: socket-activated and in its own, empty namespace (`PrivateNetwork=yes`
/// in `systemd/repochd.service`), that socket is in systemd's. Not recorded (an error)
/// when the socket is in no namespace a task is in.
pub fn adopt_host_netns(listener: impl std::os::fd::AsFd) -> Result<NetnsId, String> {
    let inode = inode_of(listener)?;
    let own = own_netns()?;
    let open_own = || {
        rustix::fs::open(
            "/proc/thread-self/ns/net",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| format!("/proc/thread-self/ns/net: {e}"))
    };
    let (id, fd) = if unix_socket(inode, None)?.is_some() {
        (own, open_own()?)
    } else {
        let mut found = None;
        for ns in network_namespaces()? {
            if ns.id == own {
                continue;
            }
            // Entered, the thread opens its namespace for us: the handle is then this very
            // namespace whatever became of the task it was found through.
            let got = in_netns(&ns, || {
                Ok(match unix_socket(inode, None)? {
                    Some(_) => Some(open_own()?),
                    None => None,
                })
            })
            .map_err(|e| format!("network namespace {}: {e}", ns.id))?;
            if let Some(Some(fd)) = got {
                found = Some((ns.id, fd));
                break;
            }
        }
        found.ok_or_else(|| format!("socket {inode}: in no network namespace a task is in"))?
    };
    let _ = HOST_NETNS.set((id, fd));
    Ok(id)
}

/// Runs `f` in the host's network namespace ([`adopt_host_netns`]): `Ok(None)` when none
/// was recorded or it is this thread's own.
pub fn in_host_netns<T: Send>(
    f: impl FnOnce() -> Result<T, String> + Send,
) -> Result<Option<(NetnsId, T)>, String> {
    let Some((id, fd)) = HOST_NETNS.get() else {
        return Ok(None);
    };
    if *id == own_netns()? {
        return Ok(None);
    }
    in_netns_fd(fd, *id, f).map(|t| Some((*id, t)))
}

/// Every unix socket bound to the file with `stat()` identity `dev`/`ino`, in every
/// network namespace a task is in; with the namespace it lives in. A namespace that cannot
/// be entered or asked is an error (never skipped).
pub fn bound_to(dev: u64, ino: u64) -> Result<Vec<(NetnsId, UnixSocket)>, String> {
    let pick = |all: Vec<UnixSocket>| -> Vec<UnixSocket> {
        all.into_iter()
            .filter(|s| s.vfs.is_some_and(|v| v.is(dev, ino)))
            .collect()
    };
    let own = own_netns()?;
    let mut out: Vec<(NetnsId, UnixSocket)> = pick(unix_sockets()?)
        .into_iter()
        .map(|s| (own, s))
        .collect();
    for ns in network_namespaces()? {
        if ns.id == own {
            continue;
        }
        let got = in_netns(&ns, || unix_sockets().map(pick))
            .map_err(|e| format!("network namespace {}: {e}", ns.id))?;
        out.extend(got.unwrap_or_default().into_iter().map(|s| (ns.id, s)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((NLMSG_HDR_BYTES + payload.len()) as u32).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&0u16.to_ne_bytes());
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(payload);
        while b.len() % 4 != 0 {
            b.push(0);
        }
        b
    }

    fn attr(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(data);
        while b.len() % 4 != 0 {
            b.push(0);
        }
        b
    }

    fn diag_msg(ino: u32, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut p = vec![AF_UNIX, 1, TCP_LISTEN, 0];
        p.extend_from_slice(&ino.to_ne_bytes());
        p.extend_from_slice(&7u32.to_ne_bytes());
        p.extend_from_slice(&0u32.to_ne_bytes());
        for a in attrs {
            p.extend_from_slice(a);
        }
        p
    }

    #[test]
    fn the_request_is_a_40_byte_unix_dump() {
        let r = request(9, None);
        assert_eq!(r.len(), 40);
        assert_eq!(u32_at(&r, 0), Some(40));
        assert_eq!(u16_at(&r, 4), Some(SOCK_DIAG_BY_FAMILY));
        assert_eq!(u16_at(&r, 6), Some(NLM_F_REQUEST | NLM_F_DUMP));
        assert_eq!(r[16], AF_UNIX);
        let one = request(9, Some((77, NO_COOKIE)));
        assert_eq!(u16_at(&one, 6), Some(NLM_F_REQUEST));
        assert_eq!(u32_at(&one, 24), Some(77));
        assert_eq!(u32_at(&one, 32), Some(u32::MAX));
    }

    #[test]
    fn a_reply_parses_name_vfs_and_peer_and_converts_the_device() {
        // 254:0 is 0x0fe00000 inside the kernel and 0xfe00 in stat().
        let mut vfs = 4242u32.to_ne_bytes().to_vec();
        vfs.extend_from_slice(&(254u32 << 20).to_ne_bytes());
        let p = diag_msg(
            1234,
            &[
                attr(UNIX_DIAG_NAME, b"old.sock"),
                attr(UNIX_DIAG_VFS, &vfs),
                attr(UNIX_DIAG_PEER, &99u32.to_ne_bytes()),
            ],
        );
        let mut b = message(SOCK_DIAG_BY_FAMILY, 5, &p);
        b.extend(message(NLMSG_DONE, 5, &0u32.to_ne_bytes()));
        let mut out = Vec::new();
        assert_eq!(
            parse_datagram(&b, 5, &mut out, parse_socket),
            Ok(Batch::Done)
        );
        let s = &out[0];
        assert_eq!((s.inode, s.cookie, s.state), (1234, 7, TCP_LISTEN));
        assert_eq!(s.name.as_deref(), Some(&b"old.sock"[..]));
        assert_eq!(
            s.vfs,
            Some(Vfs {
                dev: 0xfe00,
                ino: 4242
            })
        );
        assert!(s.vfs.unwrap().is(0xfe00, (1 << 32) | 4242));
        assert_eq!(s.peer, Some(99));
        // Minors over 255 and majors over 255 land where stat() puts them.
        let kdev = (259u32 << 20) | 300;
        let d = dev_from_kernel(kdev);
        assert_eq!((rustix::fs::major(d), rustix::fs::minor(d)), (259, 300));
    }

    #[test]
    fn cut_or_foreign_replies_are_errors_never_panics() {
        let p = diag_msg(1, &[attr(UNIX_DIAG_PEER, &1u32.to_ne_bytes())]);
        let whole = message(SOCK_DIAG_BY_FAMILY, 1, &p);
        for cut in 1..whole.len() {
            let mut out = Vec::new();
            let _ = parse_datagram(&whole[..cut], 1, &mut out, parse_socket);
        }
        let mut out = Vec::new();
        assert!(
            parse_datagram(&whole, 2, &mut out, parse_socket).is_err(),
            "another seq"
        );
        assert!(
            parse_datagram(&whole[..20], 1, &mut out, parse_socket).is_err(),
            "cut"
        );
        // An attribute longer than its message.
        let mut bad = diag_msg(1, &[]);
        bad.extend_from_slice(&200u16.to_ne_bytes());
        bad.extend_from_slice(&UNIX_DIAG_VFS.to_ne_bytes());
        assert!(parse_datagram(
            &message(SOCK_DIAG_BY_FAMILY, 1, &bad),
            1,
            &mut out,
            parse_socket
        )
        .is_err());
        // A short vfs attribute.
        let short = diag_msg(1, &[attr(UNIX_DIAG_VFS, &[1, 2, 3, 4])]);
        assert!(parse_datagram(
            &message(SOCK_DIAG_BY_FAMILY, 1, &short),
            1,
            &mut out,
            parse_socket
        )
        .is_err());
        // A dump's DONE carries its errno when the dump failed, and 0 when it finished.
        let failed = message(NLMSG_DONE, 1, &(-2i32).to_ne_bytes());
        assert_eq!(
            parse_datagram(&failed, 1, &mut out, parse_socket),
            Ok(Batch::Errno(2))
        );
        let done = message(NLMSG_DONE, 1, &0i32.to_ne_bytes());
        assert_eq!(
            parse_datagram(&done, 1, &mut out, parse_socket),
            Ok(Batch::Done)
        );
        let cut = message(NLMSG_DONE, 1, &[]);
        assert!(parse_datagram(&cut, 1, &mut out, parse_socket).is_err());
        // An error reply carries its errno.
        let err = message(NLMSG_ERROR, 1, &(-2i32).to_ne_bytes());
        assert_eq!(
            parse_datagram(&err, 1, &mut out, parse_socket),
            Ok(Batch::Errno(2))
        );
    }

    fn inet_msg(family: u8, state: u8, port: u16, inode: u32) -> Vec<u8> {
        let mut p = vec![0u8; INET_DIAG_MSG_BYTES];
        p[0] = family;
        p[1] = state;
        p[4..6].copy_from_slice(&port.to_be_bytes());
        p[68..72].copy_from_slice(&inode.to_ne_bytes());
        p
    }

    #[test]
    fn an_inet_request_asks_for_one_port_of_one_family_and_protocol() {
        let r = inet_request(9, false, true, 0x1f90);
        assert_eq!(r.len(), NLMSG_HDR_BYTES + INET_DIAG_REQ_BYTES);
        assert_eq!(u32_at(&r, 0), Some(72), "nlmsg_len");
        assert_eq!(u16_at(&r, 4), Some(SOCK_DIAG_BY_FAMILY));
        assert_eq!(u16_at(&r, 6), Some(NLM_F_REQUEST | NLM_F_DUMP));
        assert_eq!(u32_at(&r, 8), Some(9), "seq");
        assert_eq!(&r[16..18], &[AF_INET6, IPPROTO_TCP]);
        assert_eq!(u32_at(&r, 20), Some(1 << 10), "TCP: listening only");
        assert_eq!(&r[24..26], &[0x1f, 0x90], "sport, big-endian");
        assert!(r[26..].iter().all(|b| *b == 0), "dport, addresses, cookie");
        let r = inet_request(1, true, false, 53);
        assert_eq!(&r[16..18], &[AF_INET, IPPROTO_UDP]);
        assert_eq!(u32_at(&r, 20), Some(u32::MAX), "UDP: bound in any state");
        assert_eq!(&r[24..26], &[0, 53]);
    }

    #[test]
    fn an_inet_reply_gives_each_socket_s_family_state_port_and_inode() {
        let mut b = message(
            SOCK_DIAG_BY_FAMILY,
            3,
            &inet_msg(AF_INET, TCP_LISTEN, 8080, 77),
        );
        b.extend(message(
            SOCK_DIAG_BY_FAMILY,
            3,
            &inet_msg(AF_INET6, 7, 53, 78),
        ));
        b.extend(message(NLMSG_DONE, 3, &0u32.to_ne_bytes()));
        let mut out = Vec::new();
        assert_eq!(parse_datagram(&b, 3, &mut out, parse_inet), Ok(Batch::Done));
        assert_eq!(
            out,
            [
                InetSocket {
                    inode: 77,
                    port: 8080,
                    state: TCP_LISTEN,
                    v6: false
                },
                InetSocket {
                    inode: 78,
                    port: 53,
                    state: 7,
                    v6: true
                }
            ]
        );
        let short = inet_msg(AF_INET, TCP_LISTEN, 1, 1);
        assert!(parse_inet(&short[..INET_DIAG_MSG_BYTES - 1]).is_err());
        assert!(parse_inet(&inet_msg(AF_UNIX, TCP_LISTEN, 1, 1)).is_err());
    }

    /// The kernel's own answer: a listener on a port of this namespace, and not one on
    /// another port (a port nothing listens on, or only a UDP socket is bound to).
    #[test]
    fn the_kernel_names_a_listener_by_port_and_family() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (lp, up) = (
            l.local_addr().unwrap().port(),
            u.local_addr().unwrap().port(),
        );
        let ino = inode_of(&l).unwrap();
        let got = inet_sockets(false, false, lp).unwrap();
        assert_eq!(got.iter().map(|s| s.inode).collect::<Vec<_>>(), [ino]);
        assert!(
            inet_sockets(false, true, lp).unwrap().is_empty(),
            "not IPv6"
        );
        assert!(inet_sockets(true, false, lp).unwrap().is_empty(), "not UDP");
        let got = inet_sockets(true, false, up).unwrap();
        assert_eq!(
            got.iter().map(|s| s.inode).collect::<Vec<_>>(),
            [inode_of(&u).unwrap()]
        );
        assert!(
            inet_sockets(false, false, up).unwrap().is_empty(),
            "not TCP"
        );
    }

    /// An error the kernel answers is an error, unless the caller said ENOENT means none.
    #[test]
    fn an_error_reply_is_an_error_unless_enoent_means_none() {
        // No handler for protocol 254: ENOENT.
        let mut r = inet_request(1, false, false, 1);
        r[17] = 254;
        let e = exchange(&r, false, parse_inet).unwrap_err();
        assert!(e.contains("No such file or directory"), "{e}");
        assert_eq!(exchange(&r, true, parse_inet), Ok(vec![]));
        // Another error is one even then: a family past AF_MAX (EINVAL).
        let mut r = inet_request(1, false, false, 1);
        r[16] = 255;
        assert!(exchange(&r, true, parse_inet).is_err());
    }

    /// A dump spans many datagrams and is read to its end; a lookup of one socket ends with
    /// its one message.
    #[test]
    fn a_dump_is_read_to_its_end_and_a_lookup_to_its_one_answer() {
        let pairs: Vec<_> = (0..1500)
            .map(|_| std::os::unix::net::UnixStream::pair().unwrap())
            .collect();
        let want: Vec<u64> = pairs.iter().map(|(a, _)| inode_of(a).unwrap()).collect();
        let all = unix_sockets().unwrap();
        for w in &want {
            assert!(all.iter().any(|s| s.inode == *w), "socket {w} missing");
        }
        let (a, b) = &pairs[700];
        let t = std::time::Instant::now();
        let got = unix_socket(inode_of(a).unwrap(), None).unwrap().unwrap();
        assert_eq!(got.peer, Some(inode_of(b).unwrap()));
        assert!(
            t.elapsed().as_secs() < 3,
            "waited for a DONE that a lookup never gets"
        );
    }

    #[test]
    fn only_the_asked_port_family_and_listening_state_are_kept() {
        let s = |port, v6, state| InetSocket {
            inode: 1,
            port,
            state,
            v6,
        };
        // TCP: listening, on the port, of the family.
        assert!(asked(&s(80, false, TCP_LISTEN), false, false, 80));
        assert!(!asked(&s(81, false, TCP_LISTEN), false, false, 80), "port");
        assert!(!asked(&s(80, true, TCP_LISTEN), false, false, 80), "family");
        assert!(
            !asked(&s(80, false, TCP_ESTABLISHED), false, false, 80),
            "state"
        );
        // UDP: bound in any state.
        assert!(asked(&s(53, true, 7), true, true, 53));
        assert!(asked(&s(53, true, TCP_ESTABLISHED), true, true, 53));
        assert!(!asked(&s(53, false, 7), true, true, 53), "family");
        assert!(!asked(&s(54, true, 7), true, true, 53), "port");
    }
}

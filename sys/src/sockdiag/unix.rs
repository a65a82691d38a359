//! `unix_diag`: the unix sockets of this thread's network namespace, all of them or one by
//! inode, with what each is bound to and its peer.

use super::*;
use crate::error::Error;

/// Bytes of a bound name (`sun_path`).
pub const NAME_BYTES_MAX: usize = 108;

pub(super) const AF_UNIX: u8 = 1;
pub(super) const UDIAG_SHOW_NAME: u32 = 0x1;
pub(super) const UDIAG_SHOW_VFS: u32 = 0x2;
pub(super) const UDIAG_SHOW_PEER: u32 = 0x4;
pub(super) const UNIX_DIAG_NAME: u16 = 0;
pub(super) const UNIX_DIAG_VFS: u16 = 1;
pub(super) const UNIX_DIAG_PEER: u16 = 2;
/// `unix_diag_msg`: family, type, state, pad, inode, cookie[2].
pub(super) const UNIX_DIAG_MSG_BYTES: usize = 16;
/// `INET_DIAG_NOCOOKIE`: match any cookie.
pub(super) const NO_COOKIE: u64 = u64::MAX;

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

/// A `SOCK_DIAG_BY_FAMILY` request for unix sockets: a dump (`ino` None) or one socket.
pub(super) fn request(seq: u32, ino: Option<(u32, u64)>) -> Vec<u8> {
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
pub(super) fn parse_socket(p: &[u8]) -> Result<UnixSocket, Error> {
    if p.len() < UNIX_DIAG_MSG_BYTES {
        return Err(Error::Found(format!("unix_diag_msg of {} bytes", p.len())));
    }
    if p[0] != AF_UNIX {
        return Err(Error::Found(format!("unix_diag_msg of family {}", p[0])));
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
            return Err(Error::Found(format!(
                "attribute of {len} bytes at {at} of {}",
                p.len()
            )));
        }
        take_attribute(&mut s, kind, &p[at + 4..at + len])?;
        at += align4(len);
    }
    Ok(s)
}

/// Reads one attribute of a `unix_diag_msg` (its type `kind`, its payload `data`) into
/// `s`: the bound name, the bound file or the peer; other attributes are skipped.
fn take_attribute(s: &mut UnixSocket, kind: u16, data: &[u8]) -> Result<(), Error> {
    match kind {
        UNIX_DIAG_NAME => {
            if data.len() > NAME_BYTES_MAX {
                return Err(Error::Found(format!("name of {} bytes", data.len())));
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
            let (Some(ino), Some(dev), 8) = (u32_at(data, 0), u32_at(data, 4), data.len()) else {
                return Err(Error::Found(format!(
                    "vfs attribute of {} bytes",
                    data.len()
                )));
            };
            s.vfs = Some(Vfs {
                dev: dev_from_kernel(dev),
                ino: u64::from(ino),
            });
        }
        UNIX_DIAG_PEER => {
            let (Some(peer), 4) = (u32_at(data, 0), data.len()) else {
                return Err(Error::Found(format!(
                    "peer attribute of {} bytes",
                    data.len()
                )));
            };
            s.peer = Some(u64::from(peer));
        }
        _ => {}
    }
    Ok(())
}

/// Sends one request for unix sockets and collects its reply.
pub(super) fn ask(one: Option<(u32, u64)>) -> Result<Vec<UnixSocket>, Error> {
    exchange(&request(1, one), one.is_some(), parse_socket)
}

/// Every unix socket of this thread's network namespace.
pub fn unix_sockets() -> Result<Vec<UnixSocket>, Error> {
    ask(None)
}

/// The unix socket with socket inode `inode` in this thread's network namespace (and,
/// when given, cookie `cookie`), or `None` if there is none.
pub fn unix_socket(inode: u64, cookie: Option<u64>) -> Result<Option<UnixSocket>, Error> {
    let ino = u32::try_from(inode).map_err(|_| format!("socket inode {inode} over 32 bits"))?;
    let got = ask(Some((ino, cookie.unwrap_or(NO_COOKIE))))?;
    Ok(got.into_iter().find(|s| s.inode == inode))
}

/// The inode of a socket fd (the `N` of `socket:[N]`), as [`peer_of`] and
/// [`unix_socket`] take it.
pub fn inode_of(fd: impl std::os::fd::AsFd) -> Result<u64, Error> {
    rustix::fs::fstat(fd)
        .map(|st| st.st_ino)
        .context("fstat socket")
}

//! Sockets as the kernel knows them: `NETLINK_SOCK_DIAG` (`unix_diag`), in this
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
//! This file: the netlink exchange (framing, the datagram loop, its checks and bounds);
//! `unix.rs` `unix_diag`, `inet.rs` `inet_diag`, `netns.rs` the network namespaces.
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

use crate::error::{Context as _, Error};
use std::os::fd::{AsRawFd as _, OwnedFd};

use nix::sys::socket::{
    recvfrom, sendto, setsockopt, socket, sockopt, AddressFamily, MsgFlags, NetlinkAddr, SockFlag,
    SockProtocol, SockType,
};

use crate::ne::{u16_at, u32_at};

mod inet;
mod netns;
mod unix;

pub use self::inet::*;
pub use self::netns::*;
pub use self::unix::*;

/// Bytes of one netlink datagram received (the kernel's dump skbs are at most 32 KiB).
pub const DIAG_DATAGRAM_BYTES_MAX: usize = 64 * 1024;
/// Bytes of one whole dump, over all its datagrams.
pub const DIAG_DUMP_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Sockets listed in one dump.
pub const DIAG_SOCKETS_MAX: usize = 1 << 20;
/// Longest wait for one datagram of a reply.
pub const DIAG_RECV_SECONDS_MAX: i64 = 5;
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
fn align4(n: usize) -> usize {
    n.saturating_add(3) & !3
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
    parse: fn(&[u8]) -> Result<T, Error>,
) -> Result<Batch, Error> {
    let mut at = 0;
    while at < b.len() {
        let (Some(len), Some(kind), Some(flags), Some(mseq)) = (
            u32_at(b, at),
            u16_at(b, at + 4),
            u16_at(b, at + 6),
            u32_at(b, at + 8),
        ) else {
            return Err(Error::Found(format!(
                "netlink header cut at {at} of {}",
                b.len()
            )));
        };
        let len = len as usize;
        if len < NLMSG_HDR_BYTES || at + len > b.len() {
            return Err(Error::Found(format!(
                "netlink message of {len} bytes at {at} of {}",
                b.len()
            )));
        }
        if mseq != seq {
            return Err(Error::Found(format!(
                "netlink reply to request {mseq}, not {seq}"
            )));
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
                    return Err(Error::Found(format!(
                        "more than {DIAG_SOCKETS_MAX} sockets"
                    )));
                }
                out.push(parse(payload)?);
            }
            k => return Err(Error::Found(format!("netlink message of type {k}"))),
        }
        at += align4(len);
    }
    Ok(Batch::More)
}

fn diag_socket() -> Result<OwnedFd, Error> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )
    .context("sock_diag socket")?;
    let t = nix::sys::time::TimeVal::new(DIAG_RECV_SECONDS_MAX, 0);
    setsockopt(&fd, sockopt::ReceiveTimeout, &t).context("sock_diag")?;
    Ok(fd)
}

/// Sends request `req` (sequence number 1) and collects its reply, each message parsed by
/// `parse`; `one` for a lookup of one socket: one message, no DONE, and `ENOENT` for no such
/// socket. For a dump, `ENOENT` (no handler for the family or protocol) is an error.
fn exchange<T>(
    req: &[u8],
    one: bool,
    parse: fn(&[u8]) -> Result<T, Error>,
) -> Result<Vec<T>, Error> {
    let fd = diag_socket()?;
    let seq = 1;
    sendto(
        fd.as_raw_fd(),
        req,
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )
    .context("sock_diag send")?;
    let mut buf = vec![0u8; DIAG_DATAGRAM_BYTES_MAX];
    let mut out = Vec::new();
    let mut total = 0usize;
    loop {
        let (n, from) =
            recvfrom::<NetlinkAddr>(fd.as_raw_fd(), &mut buf).context("sock_diag receive")?;
        if from.is_none_or(|a| a.pid() != 0) {
            return Err(Error::Found(format!(
                "sock_diag reply not from the kernel: {from:?}"
            )));
        }
        if n >= buf.len() {
            return Err(Error::Found(format!(
                "sock_diag datagram over {DIAG_DATAGRAM_BYTES_MAX} bytes"
            )));
        }
        total += n;
        if total > DIAG_DUMP_BYTES_MAX {
            return Err(Error::Found(format!(
                "sock_diag dump over {DIAG_DUMP_BYTES_MAX} bytes"
            )));
        }
        match parse_datagram(&buf[..n], seq, &mut out, parse)? {
            Batch::Done => return Ok(out),
            // A lookup of one socket answers with one message and no DONE.
            Batch::More if one => return Ok(out),
            Batch::More => {}
            Batch::Errno(0) => return Ok(out),
            Batch::Errno(e) if one && e == nix::errno::Errno::ENOENT as i32 => return Ok(out),
            Batch::Errno(e) => {
                return Err(Error::Found(format!(
                    "sock_diag: {}",
                    std::io::Error::from_raw_os_error(e)
                )))
            }
        }
    }
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
            parse_datagram(&b, 5, &mut out, parse_socket).map_err(String::from),
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
            parse_datagram(&failed, 1, &mut out, parse_socket).map_err(String::from),
            Ok(Batch::Errno(2))
        );
        let done = message(NLMSG_DONE, 1, &0i32.to_ne_bytes());
        assert_eq!(
            parse_datagram(&done, 1, &mut out, parse_socket).map_err(String::from),
            Ok(Batch::Done)
        );
        let cut = message(NLMSG_DONE, 1, &[]);
        assert!(parse_datagram(&cut, 1, &mut out, parse_socket).is_err());
        // An error reply carries its errno.
        let err = message(NLMSG_ERROR, 1, &(-2i32).to_ne_bytes());
        assert_eq!(
            parse_datagram(&err, 1, &mut out, parse_socket).map_err(String::from),
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
        assert_eq!(
            parse_datagram(&b, 3, &mut out, parse_inet).map_err(String::from),
            Ok(Batch::Done)
        );
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
        let e = exchange(&r, false, parse_inet).unwrap_err().to_string();
        assert!(e.contains("No such file or directory"), "{e}");
        assert_eq!(
            exchange(&r, true, parse_inet).map_err(String::from),
            Ok(vec![])
        );
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

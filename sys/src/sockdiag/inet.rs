//! `inet_diag`: the TCP sockets listening on a port and the UDP sockets bound to it, in
//! this thread's network namespace.

use super::*;
use crate::error::Error;

/// `inet_diag_req_v2`: family, protocol, ext, pad, states, `inet_diag_sockid`.
pub(super) const INET_DIAG_REQ_BYTES: usize = 56;
/// `inet_diag_msg`: family, state, timer, retrans, `inet_diag_sockid` (48 bytes: sport and
/// dport big-endian, src[4], dst[4], if, cookie[2]), expires, rqueue, wqueue, uid, inode.
pub(super) const INET_DIAG_MSG_BYTES: usize = 72;
pub(super) const AF_INET: u8 = 2;
pub(super) const AF_INET6: u8 = 10;
pub(super) const IPPROTO_TCP: u8 = 6;
pub(super) const IPPROTO_UDP: u8 = 17;
/// The states a TCP listener is in (`1 << TCP_LISTEN`): the kernel walks its listening
/// hash only, never the established one.
pub(super) const TCPF_LISTEN: u32 = 1 << TCP_LISTEN;

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
pub(super) fn inet_request(seq: u32, udp: bool, v6: bool, port: u16) -> Vec<u8> {
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
pub(super) fn parse_inet(p: &[u8]) -> Result<InetSocket, Error> {
    if p.len() < INET_DIAG_MSG_BYTES {
        return Err(Error::Found(format!("inet_diag_msg of {} bytes", p.len())));
    }
    let v6 = match p[0] {
        AF_INET => false,
        AF_INET6 => true,
        f => return Err(Error::Found(format!("inet_diag_msg of family {f}"))),
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
pub fn inet_sockets(udp: bool, v6: bool, port: u16) -> Result<Vec<InetSocket>, Error> {
    // ENOENT (no `tcp_diag` or `udp_diag` handler) is an error: a kernel that cannot
    // answer has not said "nothing bound". Without IPv6 the dump of `v6` is empty.
    let mut got = exchange(&inet_request(1, udp, v6, port), false, parse_inet)?;
    got.retain(|s| asked(s, udp, v6, port));
    Ok(got)
}

/// Whether `s` is what [`inet_sockets`] asked the kernel for: on `port`, of the family, and
/// for TCP listening (the kernel filtered already; this keeps a reply it did not filter,
/// an older kernel's, from naming other sockets).
pub(super) fn asked(s: &InetSocket, udp: bool, v6: bool, port: u16) -> bool {
    s.port == port && s.v6 == v6 && (udp || s.state == TCP_LISTEN)
}

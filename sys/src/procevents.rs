//! The kernel's process events (the process connector): `NETLINK_CONNECTOR`, group
//! `CN_IDX_PROC`, `PROC_CN_MCAST_LISTEN`. Every fork, exec, exit and uid/gid change of every
//! process of the host, as it happens, in the initial pid namespace's numbering.
//!
//! Since Linux 6.6 any process may subscribe (before, `CAP_NET_ADMIN` was needed); the
//! kernel ignores a subscription from outside the initial user or pid namespace without a
//! word, so [`Subscription::open`] checks both first and then waits for the kernel's
//! acknowledgement, which it sends synchronously, before the socket counts as subscribed.
//!
//! Lost events are detected, never assumed away: the socket's `ENOBUFS` (its receive buffer
//! overflowed: the kernel dropped events) and a gap in a CPU's sequence numbers (each CPU
//! numbers the events it sends, in order). [`Next::Lost`] says which.
//!
//! The messages are decoded by hand, bounded and checked (no unsafe), from
//! `include/uapi/linux/{netlink,connector,cn_proc}.h`; the layout is checked against the
//! installed headers by a test. No crate fits: `cnproc` (0.2) and `proc-connector` hide
//! `ENOBUFS` and the sequence numbers, which are how a loss is known.

use crate::error::{Context as _, Error};
use crate::ne::{u16_at, u32_at};
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::netlink::{SocketAddrNetlink, CONNECTOR};
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

/// The connector's index and value of the process events.
pub const CN_IDX_PROC: u32 = 1;
pub const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const PROC_CN_MCAST_IGNORE: u32 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_HDR_BYTES: usize = 16;
const CN_MSG_BYTES: usize = 20;
/// `struct proc_event` up to its union (`what`, `cpu`, `timestamp_ns`).
const EVENT_HEAD_BYTES: usize = 16;
/// `sizeof(struct proc_event)`: the kernel sends every event at this size.
pub const EVENT_BYTES: usize = 40;

const WHAT_NONE: u32 = 0;
const WHAT_FORK: u32 = 0x1;
const WHAT_EXEC: u32 = 0x2;
const WHAT_UID: u32 = 0x4;
const WHAT_GID: u32 = 0x40;
const WHAT_PTRACE: u32 = 0x100;
const WHAT_EXIT: u32 = 0x8000_0000;

/// Receive buffer asked of the kernel for the subscription (it grants at most
/// `net.core.rmem_max`; a flood past it is `ENOBUFS`, a loss, never a wait).
pub const RCVBUF_BYTES: usize = 4_194_304;
/// Bytes of one datagram received: an event is 76 (header, connector message, event); a
/// longer datagram is refused as malformed, never read in part.
pub const DATAGRAM_BYTES_MAX: usize = 256;
/// CPUs whose sequence numbers are followed (the kernel's `NR_CPUS` at most 8192).
pub const CPUS_MAX: u32 = 8192;
/// Longest wait for the kernel's acknowledgement of the subscription (sent synchronously,
/// so it is normally queued before `sendto` returns).
pub const ACK_WAIT_MS: i32 = 200;
/// Datagrams read while waiting for the acknowledgement (other listeners' events may come
/// first).
pub const ACK_DATAGRAMS_MAX: usize = 65_536;

/// One process event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The kernel's answer to a subscription (`PROC_EVENT_NONE`): 0, or an errno.
    Ack { err: u32 },
    /// A task was made: a process when `child_pid == child_tgid`, else a thread.
    Fork {
        parent_tgid: u32,
        child_pid: u32,
        child_tgid: u32,
    },
    /// A process replaced its program.
    Exec { tgid: u32 },
    /// A task's real and effective uid were set.
    Uid { tgid: u32, ruid: u32, euid: u32 },
    /// A task's real and effective gid were set.
    Gid { tgid: u32 },
    /// A task exited: a process when `pid == tgid`.
    Exit { pid: u32, tgid: u32 },
    /// Process `tgid` was attached to by a tracer (`tracer_tgid`), or detached from
    /// (`tracer_tgid` 0): a tracer can copy any of its descriptors.
    Ptrace { tgid: u32, tracer_tgid: u32 },
    /// Another kind (sid, comm, coredump, or one added later): carries nothing the judge
    /// needs.
    Other { what: u32 },
}

/// Why the process events cannot be taken as they came, and whose the fault is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventsError {
    /// A datagram that is no process event of the kernel's connector: its sender's.
    #[error("{0}")]
    Datagram(String),
    /// One CPU's sequence numbers jumped: events were lost (the host's load).
    #[error("{0}")]
    Lost(String),
    /// Not in the initial user and pid namespaces, the only ones the kernel answers: the
    /// host's setup.
    #[error("{0}")]
    Namespace(String),
}

/// One decoded message: the CPU that sent it, its sequence number there, when (the
/// kernel's `ktime_get_ns`: `CLOCK_MONOTONIC`), the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message {
    pub cpu: u32,
    pub seq: u32,
    pub at_ns: u64,
    pub event: Event,
}

/// Decodes one datagram of the process connector: one netlink message (`NLMSG_DONE`, as
/// the connector frames it) holding one connector message of `CN_IDX_PROC`/`CN_VAL_PROC`
/// holding one `struct proc_event`. Anything else is refused, saying what it was.
pub fn decode(d: &[u8]) -> Result<Message, EventsError> {
    let (seq, ev) = frame(d)?;
    let at = |k: usize| u32_at(ev, EVENT_HEAD_BYTES + 4 * k).unwrap_or(0);
    let (Some(what), Some(cpu)) = (u32_at(ev, 0), u32_at(ev, 4)) else {
        return Err(EventsError::Datagram("process event cut short".into()));
    };
    let at_ns = u64::from_ne_bytes(
        ev[8..16]
            .try_into()
            .map_err(|_| EventsError::Datagram("process event cut short".into()))?,
    );
    if cpu >= CPUS_MAX {
        return Err(EventsError::Datagram(format!(
            "process event from cpu {cpu}, not below {CPUS_MAX}"
        )));
    }
    let event = match what {
        WHAT_NONE => Event::Ack { err: at(0) },
        WHAT_FORK => Event::Fork {
            parent_tgid: at(1),
            child_pid: at(2),
            child_tgid: at(3),
        },
        WHAT_EXEC => Event::Exec { tgid: at(1) },
        WHAT_UID => Event::Uid {
            tgid: at(1),
            ruid: at(2),
            euid: at(3),
        },
        WHAT_GID => Event::Gid { tgid: at(1) },
        WHAT_EXIT => Event::Exit {
            pid: at(0),
            tgid: at(1),
        },
        WHAT_PTRACE => Event::Ptrace {
            tgid: at(1),
            tracer_tgid: at(3),
        },
        what => Event::Other { what },
    };
    Ok(Message {
        cpu,
        seq,
        at_ns,
        event,
    })
}

/// The framing of [`decode`]: the netlink message and the connector message around one
/// process event; the connector's sequence number and the event's bytes (at least
/// `EVENT_BYTES`).
fn frame(d: &[u8]) -> Result<(u32, &[u8]), EventsError> {
    if d.len() > DATAGRAM_BYTES_MAX {
        return Err(EventsError::Datagram(format!(
            "datagram of {} bytes, over {DATAGRAM_BYTES_MAX}",
            d.len()
        )));
    }
    let (Some(len), Some(kind)) = (u32_at(d, 0), u16_at(d, 4)) else {
        return Err(EventsError::Datagram(format!(
            "netlink header cut at {} bytes",
            d.len()
        )));
    };
    if len as usize != d.len() {
        return Err(EventsError::Datagram(format!(
            "netlink message of {len} bytes in a datagram of {}",
            d.len()
        )));
    }
    if kind != NLMSG_DONE {
        return Err(EventsError::Datagram(format!(
            "netlink message of type {kind}"
        )));
    }
    let cn = &d[NLMSG_HDR_BYTES.min(d.len())..];
    let (Some(idx), Some(val), Some(seq), Some(data_len)) =
        (u32_at(cn, 0), u32_at(cn, 4), u32_at(cn, 8), u16_at(cn, 16))
    else {
        return Err(EventsError::Datagram(format!(
            "connector message cut at {} bytes",
            cn.len()
        )));
    };
    if (idx, val) != (CN_IDX_PROC, CN_VAL_PROC) {
        return Err(EventsError::Datagram(format!(
            "connector message of {idx}:{val}, not process events"
        )));
    }
    let ev = &cn[CN_MSG_BYTES.min(cn.len())..];
    if data_len as usize != ev.len() || ev.len() < EVENT_BYTES {
        return Err(EventsError::Datagram(format!(
            "process event of {data_len} bytes, {} in the message, at least {EVENT_BYTES} wanted",
            ev.len()
        )));
    }
    Ok((seq, ev))
}

/// The subscription request: `PROC_CN_MCAST_LISTEN` (or `_IGNORE`) to the connector.
fn request(op: u32, port: u32) -> [u8; NLMSG_HDR_BYTES + CN_MSG_BYTES + 4] {
    let mut b = [0u8; NLMSG_HDR_BYTES + CN_MSG_BYTES + 4];
    let len = b.len() as u32;
    b[0..4].copy_from_slice(&len.to_ne_bytes());
    b[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
    b[12..16].copy_from_slice(&port.to_ne_bytes());
    let cn = NLMSG_HDR_BYTES;
    b[cn..cn + 4].copy_from_slice(&CN_IDX_PROC.to_ne_bytes());
    b[cn + 4..cn + 8].copy_from_slice(&CN_VAL_PROC.to_ne_bytes());
    b[cn + 16..cn + 18].copy_from_slice(&4u16.to_ne_bytes());
    b[cn + CN_MSG_BYTES..].copy_from_slice(&op.to_ne_bytes());
    b
}

/// What one read of the subscription gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Event(Message),
    /// Nothing queued now.
    Empty,
    /// Events were lost (why); the subscription goes on.
    Lost(String),
}

/// Follows the sequence numbers of each CPU: a number that is not the one after the last
/// seen on that CPU is a loss. The first number seen on a CPU starts it.
#[derive(Debug, Default)]
pub struct Sequences {
    last: HashMap<u32, u32>,
}

impl Sequences {
    /// `Err` names the gap.
    pub fn check(&mut self, cpu: u32, seq: u32) -> Result<(), EventsError> {
        match self.last.insert(cpu, seq) {
            Some(last) if seq != last.wrapping_add(1) => Err(EventsError::Lost(format!(
                "cpu {cpu}: event {seq} after {last}"
            ))),
            _ => Ok(()),
        }
    }
}

/// A live subscription to the process events.
#[derive(Debug)]
pub struct Subscription {
    fd: OwnedFd,
    seqs: Sequences,
}

/// The inode numbers the kernel gives its initial user and pid namespaces
/// (`PROC_USER_INIT_INO`, `PROC_PID_INIT_INO` in `include/linux/proc_ns.h`), whatever procfs
/// they are read through (a container's own procfs numbers its pids from its namespace).
const USER_INIT_INO: u64 = 0xEFFF_FFFD;
const PID_INIT_INO: u64 = 0xEFFF_FFFC;

/// Whether this process is in the initial user and pid namespaces, the only ones the kernel
/// answers: `Err` says why not.
pub fn in_initial_namespaces() -> Result<(), EventsError> {
    for (ns, init, what) in [
        ("/proc/self/ns/user", USER_INIT_INO, "user"),
        ("/proc/self/ns/pid", PID_INIT_INO, "pid"),
    ] {
        let st = rustix::fs::stat(ns).map_err(|e| EventsError::Namespace(format!("{ns}: {e}")))?;
        if st.st_ino != init {
            return Err(EventsError::Namespace(format!(
                "outside the initial {what} namespace ({what}:[{}])",
                st.st_ino
            )));
        }
    }
    Ok(())
}

impl Subscription {
    /// Subscribes: the socket bound to `CN_IDX_PROC`, the listen request sent, the kernel's
    /// acknowledgement read. `Err` says why events cannot be had here.
    pub fn open() -> Result<Subscription, Error> {
        Subscription::open_with(RCVBUF_BYTES)
    }

    /// The same with a receive buffer of `rcvbuf` bytes asked (the kernel doubles it, and
    /// grants at most `net.core.rmem_max`): a small one loses events to any flood.
    pub fn open_with(rcvbuf: usize) -> Result<Subscription, Error> {
        in_initial_namespaces().map_err(|e| Error::Found(e.to_string()))?;
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::DGRAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            Some(CONNECTOR),
        )
        .context("NETLINK_CONNECTOR socket")?;
        rustix::net::sockopt::set_socket_recv_buffer_size(&fd, rcvbuf)
            .context("NETLINK_CONNECTOR receive buffer")?;
        rustix::net::bind(&fd, &SocketAddrNetlink::new(0, CN_IDX_PROC))
            .context("NETLINK_CONNECTOR bind to CN_IDX_PROC")?;
        let bound = rustix::net::getsockname(&fd).context("NETLINK_CONNECTOR")?;
        let port = SocketAddrNetlink::try_from(bound)
            .map_err(|_| Error::Found("NETLINK_CONNECTOR: not a netlink address".into()))?
            .pid();
        rustix::net::sendto(
            &fd,
            &request(PROC_CN_MCAST_LISTEN, port),
            SendFlags::empty(),
            &SocketAddrNetlink::new(0, 0),
        )
        .context("PROC_CN_MCAST_LISTEN")?;
        let mut s = Subscription {
            fd,
            seqs: Sequences::default(),
        };
        s.acknowledged()?;
        Ok(s)
    }

    fn acknowledged(&mut self) -> Result<(), Error> {
        let deadline = std::time::Instant::now()
            + std::time::Duration::from_millis(ACK_WAIT_MS.unsigned_abs().into());
        for _ in 0..ACK_DATAGRAMS_MAX {
            let mut buf = [0u8; DATAGRAM_BYTES_MAX + 1];
            match rustix::net::recv(&self.fd, &mut buf, RecvFlags::TRUNC) {
                Ok((_, n)) => {
                    if let Ok(Message {
                        event: Event::Ack { err },
                        ..
                    }) = decode(&buf[..n.min(buf.len())])
                    {
                        return match err {
                            0 => Ok(()),
                            e => Err(Error::Found(format!(
                                "PROC_CN_MCAST_LISTEN answered {}",
                                Errno::from_raw_os_error(e as i32)
                            ))),
                        };
                    }
                }
                Err(Errno::AGAIN) => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    let ts = rustix::event::Timespec::try_from(left).unwrap_or_default();
                    let mut p = [rustix::event::PollFd::new(
                        &self.fd,
                        rustix::event::PollFlags::IN,
                    )];
                    match rustix::event::poll(&mut p, Some(&ts)) {
                        Ok(_) | Err(Errno::INTR) => {}
                        Err(e) => return Err(Error::Found(format!("poll: {e}"))),
                    }
                }
                // A flood of other listeners' events before the answer: a loss before the
                // subscription counts for nothing.
                Err(Errno::NOBUFS) | Err(Errno::INTR) => {}
                Err(e) => return Err(Error::Found(format!("NETLINK_CONNECTOR receive: {e}"))),
            }
        }
        Err(Error::Found(format!(
            "no acknowledgement of PROC_CN_MCAST_LISTEN within {ACK_WAIT_MS} ms (the kernel \
             answers the initial pid and user namespaces only)"
        )))
    }

    /// The socket, to poll for readability.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The next event queued, without waiting.
    pub fn read(&mut self) -> Next {
        let mut buf = [0u8; DATAGRAM_BYTES_MAX + 1];
        match rustix::net::recv(&self.fd, &mut buf, RecvFlags::TRUNC | RecvFlags::DONTWAIT) {
            Ok((_, n)) => {
                if n > DATAGRAM_BYTES_MAX {
                    return Next::Lost(format!("datagram of {n} bytes, over {DATAGRAM_BYTES_MAX}"));
                }
                match decode(&buf[..n]) {
                    Ok(m) => match self.seqs.check(m.cpu, m.seq) {
                        Ok(()) => Next::Event(m),
                        Err(gap) => Next::Lost(gap.to_string()),
                    },
                    // A message that cannot be read may have been an event.
                    Err(e) => Next::Lost(e.to_string()),
                }
            }
            Err(Errno::AGAIN) | Err(Errno::INTR) => Next::Empty,
            Err(Errno::NOBUFS) => {
                Next::Lost("ENOBUFS: the receive buffer overflowed, events dropped".into())
            }
            Err(e) => Next::Lost(format!("NETLINK_CONNECTOR receive: {e}")),
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // The kernel counts listeners (and skips the work when none is left).
        let _ = rustix::net::sendto(
            &self.fd,
            &request(PROC_CN_MCAST_IGNORE, 0),
            SendFlags::DONTWAIT,
            &SocketAddrNetlink::new(0, 0),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram as the kernel sends it (`cn_proc.c`'s `send_msg`).
    pub(crate) fn datagram(what: u32, cpu: u32, seq: u32, data: [u32; 6]) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&76u32.to_ne_bytes());
        d.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        d.extend_from_slice(&0u16.to_ne_bytes());
        d.extend_from_slice(&seq.to_ne_bytes());
        d.extend_from_slice(&0u32.to_ne_bytes());
        d.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        d.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        d.extend_from_slice(&seq.to_ne_bytes());
        d.extend_from_slice(&0u32.to_ne_bytes());
        d.extend_from_slice(&(EVENT_BYTES as u16).to_ne_bytes());
        d.extend_from_slice(&0u16.to_ne_bytes());
        d.extend_from_slice(&what.to_ne_bytes());
        d.extend_from_slice(&cpu.to_ne_bytes());
        d.extend_from_slice(&123u64.to_ne_bytes());
        for x in data {
            d.extend_from_slice(&x.to_ne_bytes());
        }
        assert_eq!(d.len(), 76);
        d
    }

    #[test]
    fn each_event_kind_decodes_to_its_fields() {
        let m = |what, data| decode(&datagram(what, 3, 9, data)).unwrap();
        assert_eq!(
            m(WHAT_FORK, [10, 11, 12, 13, 0, 0]),
            Message {
                cpu: 3,
                seq: 9,
                at_ns: 123,
                event: Event::Fork {
                    parent_tgid: 11,
                    child_pid: 12,
                    child_tgid: 13
                }
            }
        );
        assert_eq!(
            m(WHAT_EXEC, [20, 21, 0, 0, 0, 0]).event,
            Event::Exec { tgid: 21 }
        );
        assert_eq!(
            m(WHAT_UID, [30, 31, 32, 33, 0, 0]).event,
            Event::Uid {
                tgid: 31,
                ruid: 32,
                euid: 33
            }
        );
        assert_eq!(
            m(WHAT_GID, [40, 41, 42, 43, 0, 0]).event,
            Event::Gid { tgid: 41 }
        );
        assert_eq!(
            m(WHAT_EXIT, [50, 51, 9, 0, 52, 53]).event,
            Event::Exit { pid: 50, tgid: 51 }
        );
        assert_eq!(
            m(WHAT_NONE, [22, 0, 0, 0, 0, 0]).event,
            Event::Ack { err: 22 }
        );
        assert_eq!(
            m(WHAT_PTRACE, [60, 61, 62, 63, 0, 0]).event,
            Event::Ptrace {
                tgid: 61,
                tracer_tgid: 63
            }
        );
        assert_eq!(
            m(0x200, [1, 2, 3, 4, 5, 6]).event,
            Event::Other { what: 0x200 }
        );
    }

    #[test]
    fn a_datagram_that_is_not_one_whole_process_event_is_refused() {
        let good = datagram(WHAT_EXEC, 0, 1, [5, 5, 0, 0, 0, 0]);
        assert!(decode(&good).is_ok());
        // Every cut, from nothing to one byte short.
        for n in 0..good.len() {
            assert!(decode(&good[..n]).is_err(), "cut at {n}");
        }
        let with = |at: usize, bytes: &[u8]| {
            let mut d = good.clone();
            d[at..at + bytes.len()].copy_from_slice(bytes);
            decode(&d).unwrap_err().to_string()
        };
        assert_eq!(
            with(0, &77u32.to_ne_bytes()),
            "netlink message of 77 bytes in a datagram of 76"
        );
        assert_eq!(with(4, &2u16.to_ne_bytes()), "netlink message of type 2");
        assert_eq!(
            with(16, &4u32.to_ne_bytes()),
            "connector message of 4:1, not process events"
        );
        assert_eq!(
            with(20, &2u32.to_ne_bytes()),
            "connector message of 1:2, not process events"
        );
        assert_eq!(
            with(32, &39u16.to_ne_bytes()),
            "process event of 39 bytes, 40 in the message, at least 40 wanted"
        );
        assert_eq!(
            with(40, &CPUS_MAX.to_ne_bytes()),
            "process event from cpu 8192, not below 8192"
        );
        // Longer than an event, consistently framed: read (a later kernel's larger union).
        let mut longer = good.clone();
        longer.extend_from_slice(&[0u8; 8]);
        longer[0..4].copy_from_slice(&84u32.to_ne_bytes());
        longer[32..34].copy_from_slice(&48u16.to_ne_bytes());
        assert_eq!(decode(&longer).unwrap().event, Event::Exec { tgid: 5 });
        // A short event framed consistently: refused.
        let mut short = good[..72].to_vec();
        short[0..4].copy_from_slice(&72u32.to_ne_bytes());
        short[32..34].copy_from_slice(&36u16.to_ne_bytes());
        assert_eq!(
            decode(&short).unwrap_err().to_string(),
            "process event of 36 bytes, 36 in the message, at least 40 wanted"
        );
        let over = vec![0u8; DATAGRAM_BYTES_MAX + 1];
        assert_eq!(
            decode(&over).unwrap_err().to_string(),
            "datagram of 257 bytes, over 256"
        );
        let mut at_max = vec![0u8; DATAGRAM_BYTES_MAX];
        at_max[0..4].copy_from_slice(&(DATAGRAM_BYTES_MAX as u32).to_ne_bytes());
        assert_eq!(
            decode(&at_max).unwrap_err().to_string(),
            "netlink message of type 0"
        );
    }

    #[test]
    fn any_bytes_decode_or_are_refused_without_a_panic() {
        // Seeded mutations of real datagrams: flipped, cut, extended bytes.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let kinds = [
            WHAT_NONE,
            WHAT_FORK,
            WHAT_EXEC,
            WHAT_UID,
            WHAT_GID,
            WHAT_EXIT,
            WHAT_PTRACE,
        ];
        for i in 0..200_000 {
            let mut d = datagram(kinds[i % kinds.len()], 1, 2, [1, 2, 3, 4, 5, 6]);
            for _ in 0..(rand() % 4) {
                let at = (rand() as usize) % d.len();
                d[at] = rand() as u8;
            }
            match rand() % 3 {
                0 => d.truncate((rand() as usize) % (d.len() + 1)),
                1 => d.extend((0..rand() % 300).map(|_| rand() as u8)),
                _ => {}
            }
            let _ = decode(&d);
        }
    }

    #[test]
    fn this_test_runs_in_the_initial_namespaces_or_says_which_not() {
        // On the host (CI, this machine) both are the initial ones; in a container the
        // answer names the namespace.
        match in_initial_namespaces() {
            Ok(()) => assert_eq!(
                std::fs::read_link("/proc/self/ns/pid").unwrap().to_str(),
                Some("pid:[4026531836]")
            ),
            Err(e) => assert!(e.to_string().starts_with("outside the initial "), "{e}"),
        }
    }

    #[test]
    fn a_gap_in_a_cpus_sequence_is_a_loss() {
        let mut s = Sequences::default();
        assert_eq!(s.check(0, 7), Ok(()));
        assert_eq!(s.check(1, 100), Ok(()));
        assert_eq!(s.check(0, 8), Ok(()));
        assert_eq!(s.check(1, 101), Ok(()));
        assert_eq!(
            s.check(0, 10),
            Err(EventsError::Lost("cpu 0: event 10 after 8".into()))
        );
        assert_eq!(s.check(0, 11), Ok(()));
        assert_eq!(
            s.check(0, 11),
            Err(EventsError::Lost("cpu 0: event 11 after 11".into()))
        );
        assert_eq!(s.check(2, u32::MAX), Ok(()));
        assert_eq!(s.check(2, 0), Ok(()), "the numbers wrap");
    }

    #[test]
    fn the_subscription_request_is_the_kernels_layout() {
        let r = request(PROC_CN_MCAST_LISTEN, 77);
        assert_eq!(u32_at(&r, 0), Some(40));
        assert_eq!(u16_at(&r, 4), Some(NLMSG_DONE));
        assert_eq!(u32_at(&r, 12), Some(77));
        assert_eq!(u32_at(&r, 16), Some(CN_IDX_PROC));
        assert_eq!(u32_at(&r, 20), Some(CN_VAL_PROC));
        assert_eq!(u16_at(&r, 32), Some(4));
        assert_eq!(u32_at(&r, 36), Some(PROC_CN_MCAST_LISTEN));
        assert_eq!(u32_at(&request(PROC_CN_MCAST_IGNORE, 0), 36), Some(2));
    }

    /// The offsets and constants used above, printed by a C program compiled against the
    /// installed kernel headers (`linux-libc-dev`).
    #[test]
    fn the_layout_is_the_kernel_headers() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("layout.c");
        std::fs::write(
            &src,
            r#"#include <stdio.h>
#include <stddef.h>
#include <linux/netlink.h>
#include <linux/connector.h>
#include <linux/cn_proc.h>
int main(void) {
  struct proc_event e;
  printf("%zu %zu %zu %zu\n", sizeof(struct nlmsghdr), sizeof(struct cn_msg),
         offsetof(struct cn_msg, len), sizeof(struct proc_event));
  printf("%zu %zu %zu\n", offsetof(struct proc_event, cpu),
         offsetof(struct proc_event, event_data), offsetof(struct cn_msg, seq));
  printf("%zu %zu %zu\n", (char *)&e.event_data.fork.parent_tgid - (char *)&e,
         (char *)&e.event_data.fork.child_pid - (char *)&e,
         (char *)&e.event_data.fork.child_tgid - (char *)&e);
  printf("%zu %zu %zu %zu\n", (char *)&e.event_data.exec.process_tgid - (char *)&e,
         (char *)&e.event_data.id.process_tgid - (char *)&e,
         (char *)&e.event_data.id.r.ruid - (char *)&e,
         (char *)&e.event_data.id.e.euid - (char *)&e);
  printf("%zu %zu %zu\n", (char *)&e.event_data.exit.process_pid - (char *)&e,
         (char *)&e.event_data.exit.process_tgid - (char *)&e,
         (char *)&e.event_data.ack.err - (char *)&e);
  printf("%zu %zu\n", (char *)&e.event_data.ptrace.process_tgid - (char *)&e,
         (char *)&e.event_data.ptrace.tracer_tgid - (char *)&e);
  printf("%d %d %d %d %u %u %u %u %u %u %u %d\n", CN_IDX_PROC, CN_VAL_PROC, PROC_CN_MCAST_LISTEN,
         PROC_CN_MCAST_IGNORE, PROC_EVENT_NONE, PROC_EVENT_FORK, PROC_EVENT_EXEC,
         PROC_EVENT_UID, PROC_EVENT_GID, (unsigned)PROC_EVENT_EXIT, PROC_EVENT_PTRACE,
         NLMSG_DONE);
  return 0;
}
"#,
        )
        .unwrap();
        let bin = dir.path().join("layout");
        let cc = std::process::Command::new("cc")
            .arg(&src)
            .arg("-o")
            .arg(&bin)
            .output()
            .expect("cc (gcc) and the kernel headers (linux-libc-dev) are needed");
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        let out = std::process::Command::new(&bin).output().unwrap();
        let h = EVENT_HEAD_BYTES;
        let want = format!(
            "{NLMSG_HDR_BYTES} {CN_MSG_BYTES} 16 {EVENT_BYTES}\n4 {h} 8\n{} {} {}\n{} {} {} {}\n{h} {} {h}\n\
             {} {}\n\
             {CN_IDX_PROC} {CN_VAL_PROC} {PROC_CN_MCAST_LISTEN} {PROC_CN_MCAST_IGNORE} {WHAT_NONE} \
             {WHAT_FORK} {WHAT_EXEC} {WHAT_UID} {WHAT_GID} {WHAT_EXIT} {WHAT_PTRACE} {NLMSG_DONE}\n",
            h + 4,
            h + 8,
            h + 12,
            h + 4,
            h + 4,
            h + 8,
            h + 12,
            h + 4,
            h + 4,
            h + 12,
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    }

    /// On a kernel that gives events here: our own child's fork, exec and exit are read.
    #[test]
    fn a_subscription_reads_the_fork_exec_and_exit_of_a_child() {
        let mut s = match Subscription::open() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("skipped: no process events here: {e}");
                return;
            }
        };
        let child = std::process::Command::new("/bin/true").spawn().unwrap();
        let pid = child.id();
        let mut child = child;
        child.wait().unwrap();
        let (mut forked, mut execd, mut exited) = (false, false, false);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !(forked && execd && exited) && std::time::Instant::now() < deadline {
            let e = match s.read() {
                Next::Event(m) => m.event,
                Next::Empty => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    continue;
                }
                Next::Lost(_) => continue,
            };
            match e {
                Event::Fork {
                    parent_tgid,
                    child_tgid,
                    ..
                } if child_tgid == pid => {
                    forked = parent_tgid == std::process::id();
                }
                Event::Exec { tgid } if tgid == pid => execd = true,
                Event::Exit { tgid, .. } if tgid == pid => exited = true,
                _ => {}
            }
        }
        assert_eq!((forked, execd, exited), (true, true, true));
    }
}

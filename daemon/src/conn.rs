//! A blocking peer connection whose every message has a deadline for the WHOLE message.
//!
//! `SO_RCVTIMEO` alone bounds each `read`: a peer that declares a 64 KiB frame and sends a
//! byte every few seconds would hold the issuance (its issuer lock and fences) for days.
//! [`Connection::read_msg`] re-arms the socket timeout with the time left before each read
//! and fails at the deadline; [`Connection::write_msg`] does the same for writes.

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use repoch_protocol::cbor::Canonical;
use repoch_protocol::wire::{frame, read_msg_by, refused, write_all_by};
use repoch_protocol::Reason;

use crate::limits::REFUSAL_WRITE_SECONDS_MAX;

/// One peer on a blocking Unix stream.
#[derive(Debug)]
pub struct Connection {
    stream: UnixStream,
}

impl Connection {
    pub fn new(stream: UnixStream) -> Connection {
        Connection { stream }
    }

    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// Reads one message, all of it before `deadline`.
    pub fn read_msg<T: Canonical>(&mut self, deadline: Instant) -> std::io::Result<T> {
        read_msg_by(&mut self.stream, deadline, &mut |s: &UnixStream, left| {
            s.set_read_timeout(Some(left))
        })
    }

    /// Writes one message, all of it before `deadline`.
    pub fn write_msg<T: Canonical>(&mut self, m: &T, deadline: Instant) -> std::io::Result<()> {
        self.write_bytes(&frame(&m.to_bytes()), deadline)
    }

    /// Writes raw bytes (the rest of a frame whose start carried fds) before `deadline`.
    pub fn write_bytes(&mut self, bytes: &[u8], deadline: Instant) -> std::io::Result<()> {
        write_all_by(
            &mut self.stream,
            bytes,
            deadline,
            &mut |s: &UnixStream, left| s.set_write_timeout(Some(left)),
        )
    }

    /// Tells the peer it is refused (the detail clipped to the receiver's bound). Best effort,
    /// within [`REFUSAL_WRITE_SECONDS_MAX`].
    pub fn refuse(&mut self, reason: Reason, detail: &str) {
        let by = Instant::now() + Duration::from_secs(REFUSAL_WRITE_SECONDS_MAX);
        let _ = self.write_msg(&refused(reason, detail), by);
    }
}

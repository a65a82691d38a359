//! Whole-message deadlines and clipping in the framing helpers of `wire.rs`, against an
//! in-memory peer that drips one byte per read.

use std::io::Read;
use std::time::{Duration, Instant};

use repoch_protocol::cbor::Canonical as _;
use repoch_protocol::wire::{
    bounded, frame, read_frame_by, refused, AdminEvent, GrantMsg, Outcome, WIRE_TEXT_BYTES_MAX,
};
use repoch_protocol::Reason;

/// A reader that yields one byte per call, `delay` after the previous one.
struct Drip {
    bytes: Vec<u8>,
    at: usize,
    delay: Duration,
}

impl Read for Drip {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::thread::sleep(self.delay);
        if self.at == self.bytes.len() || buf.is_empty() {
            return Ok(0);
        }
        buf[0] = self.bytes[self.at];
        self.at += 1;
        Ok(1)
    }
}

#[test]
fn a_frame_dripped_a_byte_per_read_fails_at_the_whole_message_deadline() {
    // Each read succeeds (a per-read timeout would never fire); the frame as a whole must
    // fail once the deadline passes, and the arm callback is told ever less time.
    let mut d = Drip {
        bytes: frame(&[0u8; 1000]),
        at: 0,
        delay: Duration::from_millis(5),
    };
    let start = Instant::now();
    let mut armed = Vec::new();
    let r = read_frame_by(
        &mut d,
        start + Duration::from_millis(100),
        &mut |_: &Drip, left| {
            armed.push(left);
            Ok(())
        },
    );
    let e = r.expect_err("a dripped frame must not complete");
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(start.elapsed() < Duration::from_millis(500));
    assert!(armed.windows(2).all(|w| w[1] <= w[0]), "{armed:?}");
}

#[test]
fn a_frame_within_its_deadline_is_read_whole() {
    let mut d = Drip {
        bytes: frame(b"abc"),
        at: 0,
        delay: Duration::ZERO,
    };
    let b = read_frame_by(
        &mut d,
        Instant::now() + Duration::from_secs(5),
        &mut |_: &Drip, _| Ok(()),
    )
    .unwrap();
    assert_eq!(b, b"abc");
}

#[test]
fn refusal_and_event_texts_are_clipped_to_what_receivers_accept() {
    // A 5000-byte detail would make the receiver refuse the frame as malformed.
    let long = "x".repeat(5000);
    let m = refused(Reason::ConsumerRejected, &long);
    let back = GrantMsg::from_bytes(&m.to_bytes()).expect("decodes");
    let GrantMsg::Refused { reason, detail } = back else {
        panic!("not a refusal")
    };
    assert_eq!(reason, Reason::ConsumerRejected);
    assert!(detail.len() <= WIRE_TEXT_BYTES_MAX);
    for e in [
        AdminEvent::Progress {
            step: "connect".into(),
            detail: long.clone(),
        },
        AdminEvent::Outcome {
            outcome: Outcome::Refused,
            reasons: vec![Reason::ConsumerAbsent],
            detail: long.clone(),
            grant: None,
        },
    ] {
        AdminEvent::from_bytes(&bounded(e).to_bytes()).expect("a bounded event decodes");
    }
}

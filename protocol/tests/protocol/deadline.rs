//! Whole-message deadlines and clipping in the framing helpers of `wire.rs`, against an
//! in-memory peer that drips one byte per read.

use std::io::Read;
use std::time::{Duration, Instant};

use repoch_protocol::cbor::Canonical as _;
use repoch_protocol::wire::{
    bounded, frame, read_frame_by, refused, AdminEvent, GrantMsg, Verdict, WIRE_TEXT_BYTES_MAX,
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
            outcome: Verdict::Refused,
            reasons: vec![Reason::ConsumerAbsent],
            detail: long.clone(),
            grant: None,
        },
    ] {
        AdminEvent::from_bytes(&bounded(e).to_bytes()).expect("a bounded event decodes");
    }
}

/// A peer that answers each call with the next scripted step: an error kind, or at most
/// `n` bytes moved.
struct Script {
    steps: Vec<Result<usize, std::io::ErrorKind>>,
    data: Vec<u8>,
    at: usize,
    written: Vec<u8>,
}

impl Script {
    fn new(steps: Vec<Result<usize, std::io::ErrorKind>>, data: &[u8]) -> Script {
        Script {
            steps,
            data: data.to_vec(),
            at: 0,
            written: Vec::new(),
        }
    }
    fn step(&mut self) -> Result<usize, std::io::Error> {
        if self.steps.is_empty() {
            return Ok(usize::MAX);
        }
        self.steps.remove(0).map_err(std::io::Error::from)
    }
}

impl Read for Script {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.step()?.min(buf.len()).min(self.data.len() - self.at);
        buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl std::io::Write for Script {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.step()?.min(buf.len());
        self.written.extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

#[test]
fn a_message_is_framed_written_and_read_back() {
    use repoch_protocol::wire::{read_frame, read_msg, write_msg};
    let m = GrantMsg::Accepted;
    let mut out = Vec::new();
    write_msg(&mut out, &m).unwrap();
    assert_eq!(out, frame(&m.to_bytes()));
    assert_eq!(read_frame(&mut out.as_slice()).unwrap(), m.to_bytes());
    assert_eq!(read_msg::<GrantMsg>(&mut out.as_slice()).unwrap(), m);
    // A length over the bound is refused before the payload is read.
    let over = (repoch_protocol::limits::FRAME_BYTES_MAX as u32 + 1).to_be_bytes();
    let e = read_frame(&mut over.as_slice()).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
}

#[test]
fn transient_read_errors_are_retried_and_others_returned_at_once() {
    use std::io::ErrorKind::*;
    let payload = frame(b"abcdef");
    let mut s = Script::new(
        vec![
            Ok(1),
            Err(Interrupted),
            Ok(2),
            Err(WouldBlock),
            Err(TimedOut),
            Ok(1),
        ],
        &payload,
    );
    let got = read_frame_by(&mut s, soon(), &mut |_: &Script, _| Ok(())).unwrap();
    assert_eq!(got, b"abcdef");
    let start = Instant::now();
    let mut s = Script::new(vec![Ok(2), Err(ConnectionReset)], &payload);
    let e = read_frame_by(&mut s, soon(), &mut |_: &Script, _| Ok(())).unwrap_err();
    assert_eq!(e.kind(), ConnectionReset);
    assert!(start.elapsed() < Duration::from_secs(1));
    // A peer that closes mid-frame.
    let mut s = Script::new(vec![], &payload[..5]);
    let e = read_frame_by(&mut s, soon(), &mut |_: &Script, _| Ok(())).unwrap_err();
    assert_eq!(e.kind(), UnexpectedEof);
}

#[test]
fn a_message_is_written_whole_a_byte_at_a_time_and_transient_errors_retried() {
    use repoch_protocol::wire::write_all_by;
    use std::io::ErrorKind::*;
    let bytes = frame(b"abcdef");
    let mut steps = vec![Err(Interrupted), Err(WouldBlock), Err(TimedOut)];
    steps.extend(std::iter::repeat_n(Ok(1), bytes.len()));
    let mut s = Script::new(steps, b"");
    let mut armed = 0;
    write_all_by(&mut s, &bytes, soon(), &mut |_: &Script, _| {
        armed += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(s.written, bytes);
    assert_eq!(armed, bytes.len() + 3, "armed before every write");
    let mut s = Script::new(vec![Ok(1), Err(BrokenPipe)], b"");
    let e = write_all_by(&mut s, &bytes, soon(), &mut |_: &Script, _| Ok(())).unwrap_err();
    assert_eq!(e.kind(), BrokenPipe);
    let mut s = Script::new(vec![Ok(0)], b"");
    let e = write_all_by(&mut s, &bytes, soon(), &mut |_: &Script, _| Ok(())).unwrap_err();
    assert_eq!(e.kind(), WriteZero);
}

#[test]
fn a_peer_that_takes_nothing_holds_the_writer_only_until_the_deadline() {
    use repoch_protocol::wire::write_all_by;
    let mut s = Script::new(vec![Err(std::io::ErrorKind::WouldBlock); 10_000], b"");
    let start = Instant::now();
    let e = write_all_by(
        &mut s,
        b"abc",
        start + Duration::from_millis(50),
        &mut |_: &Script, _| {
            std::thread::sleep(Duration::from_millis(1));
            Ok(())
        },
    )
    .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    assert!(start.elapsed() < Duration::from_secs(1));
}

/// Clipped text is the longest prefix that ends on a character boundary and fits with its
/// mark: for every budget over a text of 2-, 3- and 4-byte characters.
#[test]
fn clipped_text_is_the_longest_whole_character_prefix_within_the_budget() {
    use repoch_protocol::types::clip;
    let s = "aé€😀b€é";
    assert_eq!(clip(s, s.len()), s);
    for max in 3..s.len() {
        let c = clip(s, max);
        let kept = c.strip_suffix("...").expect("marked");
        assert!(c.len() <= max, "{max}: {c:?}");
        assert!(s.starts_with(kept), "{max}: {c:?}");
        let next = s[kept.len()..].chars().next().expect("cut");
        assert!(
            kept.len() + next.len_utf8() > max - 3,
            "{max}: {c:?} stops short of a character that fits"
        );
    }
    assert_eq!(clip(s, 2), "...");
}

//! repochd's log on stderr, written only when stderr can take it now: a log nobody reads
//! must not stall a recovery. A terminal paused with Ctrl-S (XOFF), a stalled SSH session,
//! `repochd 2>&1 | less` left paused, a pipe whose reader stopped: a blocking write would
//! hold the thread that logs, the issuance's own or the async one, and past the intent a
//! stall withholds the grant (`consumer-lost`: a burn). So each line is written only if
//! `poll` says stderr is writable at once, else dropped and counted, and the count is
//! written with the next line that goes out. The epoch log, not this one, is the record.
//!
//! The lines that go out are written in order, by the thread that logs them, before it goes
//! on (a test barrier's line is out before the process stops itself). What remains: a
//! terminal paused between the `poll` and the `write` (microseconds) holds that one write.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::event::{PollFd, PollFlags};

/// Lines dropped since the last one written.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The `MakeWriter` of repochd's stderr log.
#[derive(Debug, Clone, Copy, Default)]
pub struct StderrWhenWritable;

/// One line's writer: it keeps the line and writes it whole on drop, if stderr takes it.
#[derive(Debug, Default)]
pub struct Line(Vec<u8>);

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for StderrWhenWritable {
    type Writer = Line;
    fn make_writer(&'a self) -> Line {
        Line::default()
    }
}

impl Write for Line {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether `fd` can be written now (`poll` with no wait).
fn writable_now(fd: impl std::os::fd::AsFd) -> bool {
    let mut p = [PollFd::new(&fd, PollFlags::OUT)];
    let now = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut p, Some(&now)), Ok(1))
        && p[0].revents().contains(PollFlags::OUT)
        && !p[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let stderr = std::io::stderr();
        if !writable_now(&stderr) {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut out = stderr.lock();
        let dropped = DROPPED.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            let _ = writeln!(
                out,
                "({dropped} log lines dropped: stderr could not take them)"
            );
        }
        let _ = out.write_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::writable_now;

    /// A pipe with room is writable now; a full one is not (its line would be dropped).
    #[test]
    fn a_full_pipe_is_not_writable_now_and_one_with_room_is() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        assert!(writable_now(&w));
        rustix::io::ioctl_fionbio(&w, true).unwrap();
        let page = [0u8; 4096];
        while rustix::io::write(&w, &page).is_ok() {}
        assert!(!writable_now(&w), "a full pipe");
        let mut buf = [0u8; 65536];
        rustix::io::read(&r, &mut buf).unwrap();
        assert!(writable_now(&w), "a drained pipe");
    }
}

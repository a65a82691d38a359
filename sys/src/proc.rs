//! Tasks that run a contained executable (docs/THREAT-MODEL.md, "Who can change a fact"):
//! only tasks that can be the old root are looked at, those with a principal's uid (root or
//! one of the manifest's `old_root_uids`) among their real, effective, saved or
//! file-system uids, or with any capability in our user namespace (root that gave up its
//! uids and kept its power); another user's tasks are never read, so nothing such a user runs,
//! maps or names can fail or change the fact. A principal's task runs an enrolled
//! executable when its `exe`, or a file mapped into it (a binary started through the
//! dynamic loader has the loader as its `exe`), is that file by identity, or has its
//! content (same size, then same sha256: a copy, a rename, a bind or overlay mount, a
//! memfd); or, for a task in our own mount namespace, when its `exe` or mapping names the
//! enrolled path as removed or replaced. Path text is never compared across mount
//! namespaces: there it names another file.

use crate::error::{Context as _, Error};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

use repoch_protocol::limits::PATH_BYTES_MAX;
use repoch_protocol::Hash;
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;

use super::procfs::pids;

pub mod exec_hold;
mod judge;
mod walk;
mod watch;
use judge::*;
pub use walk::*;
pub use watch::{Known, OwnedWanted, Report, Watch, RUNNERS_KEPT_MAX, SETTLE_WAIT_MS, TRACKED_MAX};

/// Threads examined per process: the kernel's `PID_MAX_LIMIT`, which no process's tasks
/// can exceed (a lower bound would let a principal's process with more threads fail the
/// scan).
pub const TASKS_PER_PROC_MAX: usize = 1 << 22;
/// Lines read from one principal task's `/proc/PID/maps`, streamed: 16 times the kernel's
/// default `vm.max_map_count` (65530); more is an error.
pub const MAPS_LINES_MAX: u64 = 1 << 20;
/// Bytes kept of one maps line (the fixed fields, then a path of at most
/// `PATH_BYTES_MAX` and " (deleted)"). A longer line is read to its end and its path is
/// known to be none of the enrolled ones: no line of any length fails the scan.
pub const MAPS_LINE_KEPT_BYTES: usize = 128 + PATH_BYTES_MAX + 16;
/// Bytes kept of one `status` line (only `Uid:` and `Threads:` are parsed; a longer line,
/// `Groups:` of a process with many groups, is skipped to its end).
pub const STATUS_LINE_KEPT_BYTES: usize = 256;
/// Rounds of the chase after a walk (each lists `/proc` again and examines the pids born
/// since the round before), while a round meets a pid that exited before it could be
/// examined: a chain of short-lived processes running an enrolled executable must slip
/// past every one of them.
pub const CHASE_ROUNDS_MAX: usize = 256;
/// Pids examined in one round of the chase, newest first; past it the round counts as one
/// that missed a process (another round follows).
pub const CHASE_PIDS_PER_ROUND_MAX: usize = 1 << 16;
/// Distinct mapped files judged by content in one walk (each at most once).
pub const MAPPED_FILES_MAX: usize = 1 << 20;
/// Bytes of a file hashed to compare it with an enrolled executable of the same size.
pub const CONTENT_BYTES_MAX: u64 = crate::digest::EXE_BYTES_MAX;

/// The process space as a fact's subject: every process of our pid namespace.
pub const SPACE: &str = "/proc";

/// A task (process or thread) running a contained executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runner {
    pub pid: u32,
    pub tid: u32,
    /// Found in its maps, not as its `exe` (e.g. started through the dynamic loader).
    pub mapped: bool,
    /// Another file with the enrolled executable's content (a copy, an overlay, a memfd).
    pub copy: bool,
}

/// An enrolled executable as it is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted<'a> {
    /// Its enrolled path.
    pub path: &'a str,
    /// Its identity (device, inode), when it exists now.
    pub id: Option<(u64, u64)>,
    /// Its size and sha256, when it could be read now.
    pub content: Option<(u64, Hash)>,
    /// The sha256 of its last `digest::TAIL_BYTES` (a file of its size whose tail differs
    /// is not hashed whole).
    pub tail: Option<Hash>,
}

/// `path` exactly, or as the kernel names it once removed or replaced.
fn same_path(text: &[u8], path: &str) -> bool {
    text == path.as_bytes() || text.strip_suffix(b" (deleted)") == Some(path.as_bytes())
}

fn gone(e: Errno) -> bool {
    e == Errno::NOENT || e == Errno::SRCH
}

/// Whether `e`, met reading an entry of the task directory of task `id`, says the task
/// exited: [`gone`], or `EACCES` from a task reaped between the entry's lookup and its read
/// (procfs checks access against a task it no longer finds, and refuses), told apart from a
/// real refusal by the kernel's own answer for `id` (`kill(id, 0)`: no such process). Not
/// by a file under the task's directory: root in this mount namespace can mount over one,
/// and the answer would be the mount's.
fn exited(e: Errno, id: u32) -> bool {
    gone(e)
        || (e == Errno::ACCESS
            && rustix::process::Pid::from_raw(id as i32)
                .is_some_and(|p| rustix::process::test_kill_process(p) == Err(Errno::SRCH)))
}

/// Reads one line of `r` into `buf`, keeping at most `keep` bytes of it (the rest is read
/// and dropped). `None` at the end; else whether the line was cut.
fn read_line_kept(
    r: &mut impl std::io::BufRead,
    buf: &mut Vec<u8>,
    keep: usize,
) -> std::io::Result<Option<bool>> {
    buf.clear();
    let (mut cut, mut any) = (false, false);
    loop {
        let avail = r.fill_buf()?;
        if avail.is_empty() {
            return Ok(any.then_some(cut));
        }
        any = true;
        let (take, done) = match avail.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (avail.len(), false),
        };
        let room = keep.saturating_sub(buf.len());
        cut |= take > room;
        buf.extend_from_slice(&avail[..take.min(room)]);
        r.consume(take);
        if done {
            return Ok(Some(cut));
        }
    }
}

/// One `/proc/PID/maps` line: `(address range, dev major, dev minor, inode, path)`.
/// Example: `7f..-7f.. r-xp 00001000 fe:00 325843   /usr/lib/ld-linux-x86-64.so.2`
/// (device in hex; the path may contain spaces and may end in ` (deleted)`).
pub fn parse_maps_line(line: &[u8]) -> Option<(&str, u32, u32, u64, &[u8])> {
    let mut rest = line;
    let mut field = || {
        let start = rest.iter().position(|b| *b != b' ')?;
        rest = &rest[start..];
        let end = rest.iter().position(|b| *b == b' ').unwrap_or(rest.len());
        let (f, r) = rest.split_at(end);
        rest = r;
        std::str::from_utf8(f).ok()
    };
    let range = field()?;
    let (_perms, _offset) = (field()?, field()?);
    let dev = field()?;
    let ino = field()?.parse().ok()?;
    let (maj, min) = dev.split_once(':')?;
    let maj = u32::from_str_radix(maj, 16).ok()?;
    let min = u32::from_str_radix(min, 16).ok()?;
    let start = rest.iter().position(|b| *b != b' ').unwrap_or(rest.len());
    Some((range, maj, min, ino, &rest[start..]))
}

/// What a task's `status` says of who it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TaskStatus {
    /// Its thread group (process) id: the pid of a process, another for a thread.
    tgid: u32,
    /// Real, effective, saved and file-system uids.
    uids: [u32; 4],
    /// Whether it holds any capability (permitted, effective or ambient).
    capable: bool,
    /// Whether it holds an ambient capability (kept across an exec of a plain file).
    ambient: bool,
    threads: usize,
    /// Its status file is on another mount than its directory: something mounted over it
    /// (a forged status), which is no fact; the task counts as a principal's.
    covered: bool,
}

/// The status of the task under `dir` (its `status` file); `None` once it has exited.
/// `CapAmb` comes last of the fields read, after `Tgid`, `Uid`, `Threads` and the other
/// sets.
fn task_status(dir: impl AsFd, status: &str) -> Option<TaskStatus> {
    let f = rustix::fs::openat(&dir, status, OFlags::CLOEXEC, Mode::empty()).ok()?;
    let covered =
        crate::fs::mount_id(&f).is_none() || crate::fs::mount_id(&f) != crate::fs::mount_id(&dir);
    let mut r = std::io::BufReader::new(std::fs::File::from(f));
    let (mut tgid, mut uids, mut threads, mut capable, mut amb) = (None, None, None, false, false);
    let mut ambient = false;
    let mut line = Vec::new();
    while !amb {
        read_line_kept(&mut r, &mut line, STATUS_LINE_KEPT_BYTES).ok()??;
        let text = String::from_utf8_lossy(&line);
        if let Some(t) = text.strip_prefix("Tgid:") {
            tgid = Some(t.trim().parse().ok()?);
        } else if let Some(u) = text.strip_prefix("Uid:") {
            let v: Vec<u32> = u
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            uids = Some(<[u32; 4]>::try_from(v).ok()?);
        } else if let Some(t) = text.strip_prefix("Threads:") {
            threads = Some(t.trim().parse().ok()?);
        } else if let Some((name, set)) = ["CapPrm:", "CapEff:", "CapAmb:"]
            .iter()
            .find_map(|k| text.strip_prefix(k).map(|v| (*k, v)))
        {
            let held = u64::from_str_radix(set.trim(), 16).ok()? != 0;
            capable |= held;
            amb = name == "CapAmb:";
            ambient |= amb && held;
        }
    }
    Some(TaskStatus {
        tgid: tgid?,
        uids: uids?,
        capable,
        ambient,
        threads: threads?,
        covered,
    })
}

/// Whether the init of our pid namespace hides its `exe` and maps from root (as some
/// sandbox and VM supervisors run it). Such an init is no deployment's old root, and it
/// cannot be judged either way: it is the one process skipped. Anywhere else, unreadable
/// maps of a principal's live process fail the observation.
fn init_hidden() -> bool {
    let denied = |e: std::io::Error| e.kind() == std::io::ErrorKind::PermissionDenied;
    std::fs::read_link("/proc/1/exe").is_err_and(denied)
        && std::fs::File::open("/proc/1/maps").is_err_and(denied)
}
#[cfg(test)]
mod tests {
    use super::{exited, parse_maps_line, read_line_kept, same_path};
    use rustix::io::Errno;

    /// `EACCES` from an entry of a task that was reaped meanwhile is its exit (procfs
    /// answers it in the window between an entry's lookup and its read); from a task that
    /// lives, it is a refusal, and any other error is one too. Whether it lives is the
    /// kernel's answer for its pid, which no mount over its directory's files can change.
    #[test]
    fn a_refused_entry_of_a_reaped_task_is_its_exit_and_of_a_live_one_a_refusal() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let id = child.id();
        assert!(!exited(Errno::ACCESS, id), "a live task's EACCES");
        assert!(exited(Errno::SRCH, id));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(exited(Errno::ACCESS, id), "a reaped task's EACCES");
        assert!(!exited(Errno::PERM, id), "EPERM is no exit");
        assert!(!exited(Errno::IO, id), "EIO is no exit");
        // This process lives, whatever its directory's files say.
        assert!(!exited(Errno::ACCESS, std::process::id()));
    }

    #[test]
    fn maps_lines_parse_range_device_inode_and_a_path_with_spaces() {
        assert_eq!(
            parse_maps_line(
                b"7f72322c6000-7f72322ec000 r-xp 00001000 fe:00 325843                     /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
            ),
            Some((
                "7f72322c6000-7f72322ec000",
                0xfe,
                0,
                325843,
                &b"/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"[..]
            ))
        );
        assert_eq!(
            parse_maps_line(b"5555-6666 r-xp 00000000 103:02 77   /srv/old root/bin (deleted)"),
            Some((
                "5555-6666",
                0x103,
                2,
                77,
                &b"/srv/old root/bin (deleted)"[..]
            ))
        );
        // Anonymous mappings have no path.
        assert_eq!(
            parse_maps_line(b"7ffd-7ffe rw-p 00000000 00:00 0 "),
            Some(("7ffd-7ffe", 0, 0, 0, &b""[..]))
        );
        assert_eq!(
            parse_maps_line(b"7ffd-7ffe rw-p 00000000 00:00 0"),
            Some(("7ffd-7ffe", 0, 0, 0, &b""[..]))
        );
        assert_eq!(parse_maps_line(b"garbage"), None);
        assert_eq!(parse_maps_line(b"a b c zz:00 1 /x"), None);
    }

    #[test]
    fn a_line_of_any_length_is_read_to_its_end_keeping_a_prefix() {
        let long = "x".repeat(100_000);
        let input = format!("short\n{long}\nlast");
        let mut r = std::io::BufReader::with_capacity(4096, input.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(read_line_kept(&mut r, &mut buf, 10).unwrap(), Some(false));
        assert_eq!(buf, b"short\n");
        assert_eq!(read_line_kept(&mut r, &mut buf, 10).unwrap(), Some(true));
        assert_eq!(buf, b"xxxxxxxxxx");
        assert_eq!(read_line_kept(&mut r, &mut buf, 10).unwrap(), Some(false));
        assert_eq!(buf, b"last");
        assert_eq!(read_line_kept(&mut r, &mut buf, 10).unwrap(), None);
    }

    #[test]
    fn a_path_is_the_enrolled_one_exactly_or_as_removed() {
        assert!(same_path(b"/srv/a", "/srv/a"));
        assert!(same_path(b"/srv/a (deleted)", "/srv/a"));
        assert!(!same_path(b"/srv/ab", "/srv/a"));
        assert!(!same_path(b"/srv/a (deleted) (deleted)", "/srv/a"));
    }
}

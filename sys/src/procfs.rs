//! procfs readers: process start times, boot id, lock holders.

use std::fs;
use std::path::Path;

/// Pids scanned in one walk of `/proc`: the kernel's `PID_MAX_LIMIT` on 64-bit, which
/// `kernel.pid_max` cannot exceed, so `/proc` never lists more. A lower bound would let
/// any user holding more processes (systemd sets `pid_max` to this very value, and zombies
/// cost a pid and almost no memory) make every walk fail, and with it every recovery.
pub const PROC_PIDS_MAX: usize = 1 << 22;
/// File descriptors examined per process in one walk: the kernel's default `fs.nr_open`,
/// which no process can exceed unless root raised it. A lower bound would let any user
/// holding more descriptors make a scan fail, and with it a recovery.
pub const PROC_FDS_MAX: usize = 1 << 20;
/// Bytes read from one small procfs file.
pub const PROC_FILE_BYTES_MAX: u64 = 64 * 1024;
/// Bytes read from `/proc/locks`.
pub const PROC_LOCKS_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// Reads a small procfs file, bounded: more than `max` bytes is an error, never a prefix
/// (a table cut at its bound would read as a shorter, well-formed one, and what came after
/// the cut, a bound port or a held lock, would be unseen).
pub fn read_small(path: &Path, max: u64) -> std::io::Result<String> {
    read_small_from(fs::File::open(path)?, max)
}

/// [`read_small`] of a file already open (e.g. relative to a directory descriptor).
pub fn read_small_from(f: fs::File, max: u64) -> std::io::Result<String> {
    let bytes = crate::fs::read_bounded(&f, usize::try_from(max).unwrap_or(usize::MAX))?;
    String::from_utf8(bytes).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// [`read_small`] for a file whose text may hold another's bytes that are not UTF-8 (a
/// process's name in `stat` and `status`, a socket's path in `/proc/net/unix`): those
/// bytes read as U+FFFD, and the rest of the file as it is. Only for files whose parsing
/// never matches on such a field: a name that is not UTF-8 must not make its process, or a
/// table's other lines, unreadable (any user can name a process so).
pub fn read_small_lossy(path: &Path, max: u64) -> std::io::Result<String> {
    read_small_lossy_from(fs::File::open(path)?, max)
}

/// [`read_small_lossy`] of a file already open.
pub fn read_small_lossy_from(f: fs::File, max: u64) -> std::io::Result<String> {
    let bytes = crate::fs::read_bounded(&f, usize::try_from(max).unwrap_or(usize::MAX))?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The fields of one `/proc/<pid>/stat` line repoch reads, parsed in one place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    /// Field 2, `comm`: from the first `(` to the last `)` (it may hold both, and spaces).
    pub comm: String,
    /// Field 3: `R`, `S`, `Z`, ...
    pub state: String,
    /// Field 4: the parent's pid (its real parent, which a fork event names).
    pub ppid: u32,
    /// Field 7, `tty_nr`: the controlling terminal, 0 for none.
    pub tty: i64,
    /// Field 20, `num_threads`.
    pub threads: u64,
    /// Field 22: start time in clock ticks since boot.
    pub start_ticks: u64,
}

/// `/proc/<pid>/stat`, read and parsed; `None` once the process is gone (or unreadable).
pub fn stat(pid: u32) -> Option<Stat> {
    let s = read_small_lossy(Path::new(&format!("/proc/{pid}/stat")), PROC_FILE_BYTES_MAX).ok()?;
    parse_stat(&s)
}

/// One `/proc/<pid>/stat` line parsed ([`Stat`]).
pub fn parse_stat(s: &str) -> Option<Stat> {
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s.get(open.checked_add(1)?..close)?.to_owned();
    // The fields after `comm`, from field 3 on.
    let f: Vec<&str> = s.get(close.checked_add(2)?..)?.split(' ').collect();
    Some(Stat {
        comm,
        state: (*f.first()?).to_owned(),
        ppid: f.get(1)?.parse().ok()?,
        tty: f.get(4)?.parse().ok()?,
        threads: f.get(17)?.parse().ok()?,
        start_ticks: f.get(19)?.trim_end().parse().ok()?,
    })
}

/// `/proc/<pid>/stat` field 22: start time in clock ticks since boot.
pub fn start_ticks(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.start_ticks)
}

/// `/proc/<pid>/stat` field 4: the parent's pid (its real parent, which a fork event
/// names).
pub fn parent(pid: u32) -> Option<u32> {
    stat(pid).map(|s| s.ppid)
}

pub fn boot_id() -> String {
    read_small(Path::new("/proc/sys/kernel/random/boot_id"), 64)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

pub fn comm(pid: u32) -> String {
    read_small_lossy(Path::new(&format!("/proc/{pid}/comm")), 64)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Every numeric entry of `/proc`, bounded.
pub fn pids() -> std::io::Result<Vec<u32>> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc")? {
        let e = e?;
        if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
            if out.len() == PROC_PIDS_MAX {
                return Err(std::io::Error::other(format!(
                    "more than {PROC_PIDS_MAX} processes"
                )));
            }
            out.push(pid);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// A process that holds a lock, found through its fdinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    pub start_ticks: u64,
    pub comm: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} ({}) started at tick {}",
            self.pid, self.comm, self.start_ticks
        )
    }
}

/// One line of `/proc/locks` or an fdinfo `lock:` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockLine {
    /// `FLOCK`, `POSIX`, `OFDLCK`, `LEASE`.
    pub kind: String,
    /// Whether the lock is exclusive (`WRITE`) rather than shared (`READ`).
    pub exclusive: bool,
    /// The pid that took it (`-1` for OFD locks; a dead pid after a fork-and-exit).
    pub pid: i64,
    /// Device major and minor, inode number.
    pub dev: (u32, u32),
    pub ino: u64,
}

impl LockLine {
    /// Whether this is a lock of `kind` on the object `dev`/`ino`.
    pub fn on(&self, kind: &str, dev: u64, ino: u64) -> bool {
        self.kind == kind
            && self.dev == (rustix::fs::major(dev), rustix::fs::minor(dev))
            && self.ino == ino
    }
}

/// Parses a `/proc/locks` or fdinfo `lock:` line.
/// Example: `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF` (device numbers in hex).
pub fn parse_lock_line(line: &str) -> Option<LockLine> {
    let line = line.trim_start_matches("lock:").trim();
    let mut it = line.split_whitespace();
    let mut first = it.next()?;
    if first.ends_with(':') {
        first = it.next()?;
    }
    if first == "->" {
        return None; // a blocked waiter, not a holder
    }
    let kind = first.to_owned();
    let _advisory = it.next()?;
    let exclusive = match it.next()? {
        "WRITE" => true,
        "READ" => false,
        _ => return None,
    };
    let pid: i64 = it.next()?.parse().ok()?;
    let mut dev = it.next()?.split(':');
    let maj = u32::from_str_radix(dev.next()?, 16).ok()?;
    let min = u32::from_str_radix(dev.next()?, 16).ok()?;
    let ino = dev.next()?.parse().ok()?;
    Some(LockLine {
        kind,
        exclusive,
        pid,
        dev: (maj, min),
        ino,
    })
}

/// The pids `/proc/locks` names for locks of `kind` on the given device and inode. Only
/// for messages: `/proc/locks` is read a page at a time, each read resuming at an index,
/// so a lock released between two reads shifts the rest and one may be skipped. It is
/// never evidence that a lock is held or free ([`fdinfo_lock`] is).
pub fn locks_list(kind: &str, dev: u64, ino: u64) -> std::io::Result<Vec<i64>> {
    let s = read_small(Path::new("/proc/locks"), PROC_LOCKS_BYTES_MAX)?;
    Ok(s.lines()
        .filter_map(parse_lock_line)
        .filter(|l| l.on(kind, dev, ino))
        .map(|l| l.pid)
        .collect())
}

/// The lock of `kind` on `dev`/`ino` that `pid`'s fd `fd` holds, as its fdinfo shows it
/// (the kernel writes a file's fdinfo in one piece, from the locks of that open file).
/// `None`: no such lock, or the fdinfo is unreadable.
/// Bytes of `/proc/self/mountinfo` read at most (one line per mount).
pub const MOUNTINFO_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// The device the kernel names a lock by, for the file open as `fd` in this process: the
/// superblock device of the descriptor's mount (its fdinfo `mnt_id`, then that mount's
/// `major:minor` in `/proc/self/mountinfo`). `lock:` lines and `/proc/locks` print the
/// superblock's device; `stat` may name another: on btrfs, a subvolume's own anonymous
/// device. Elsewhere both are the same.
pub fn lock_device(fd: &impl std::os::fd::AsRawFd) -> std::io::Result<u64> {
    let fd = fd.as_raw_fd();
    let info = read_small(
        Path::new(&format!("/proc/self/fdinfo/{fd}")),
        PROC_FILE_BYTES_MAX,
    )?;
    let mnt = info
        .lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .ok_or_else(|| std::io::Error::other(format!("fdinfo of fd {fd} has no mnt_id")))?;
    let mounts = read_small(Path::new("/proc/self/mountinfo"), MOUNTINFO_BYTES_MAX)?;
    mounts
        .lines()
        .find_map(|line| {
            let mut f = line.split_whitespace();
            if f.next()?.parse::<u64>().ok()? != mnt {
                return None;
            }
            let (maj, min) = f.nth(1)?.split_once(':')?;
            Some(rustix::fs::makedev(maj.parse().ok()?, min.parse().ok()?))
        })
        .ok_or_else(|| std::io::Error::other(format!("mount {mnt} is not in /proc/self/mountinfo")))
}

pub fn fdinfo_lock(pid: u32, fd: u32, kind: &str, dev: u64, ino: u64) -> Option<LockLine> {
    let s = read_small(
        Path::new(&format!("/proc/{pid}/fdinfo/{fd}")),
        PROC_FILE_BYTES_MAX,
    )
    .ok()?;
    s.lines()
        .filter(|l| l.starts_with("lock:"))
        .filter_map(parse_lock_line)
        .find(|l| l.on(kind, dev, ino))
}

/// The processes that really hold a lock on `dev`/`ino`: those with an fd to the file
/// whose fdinfo shows the lock. `/proc/locks` names the pid that *took* the lock, which is
/// dead after a fork-and-exit; fdinfo stays right.
pub fn lock_holders(kind: &str, (dev, ino): (u64, u64), lock_dev: u64) -> Vec<Holder> {
    let mut out = Vec::new();
    let Ok(pids) = pids() else { return out };
    for pid in pids {
        let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for e in fds.take(PROC_FDS_MAX).flatten() {
            let Some(fd) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(st) = rustix::fs::stat(e.path()) else {
                continue;
            };
            if st.st_dev == dev
                && st.st_ino == ino
                && fdinfo_lock(pid, fd, kind, lock_dev, ino).is_some()
            {
                out.push(Holder {
                    pid,
                    start_ticks: start_ticks(pid).unwrap_or(0),
                    comm: comm(pid),
                });
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{parse_lock_line, parse_stat, LockLine};

    #[test]
    fn a_stat_line_is_read_past_a_comm_of_any_bytes() {
        let line = "42 (a) (b c)) S 7 42 42 34816 42 4194560 0 0 0 0 0 0 0 0 20 0 3 0 99 1 2\n";
        let s = parse_stat(line).unwrap();
        assert_eq!(s.comm, "a) (b c)");
        assert_eq!(
            (s.state.as_str(), s.ppid, s.tty, s.threads, s.start_ticks),
            ("S", 7, 34816, 3, 99)
        );
        assert_eq!(parse_stat("42 (x) S 7"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn lock_lines_parse_from_proc_locks_and_fdinfo() {
        let line = |kind: &str, exclusive, pid, dev, ino| LockLine {
            kind: kind.into(),
            exclusive,
            pid,
            dev,
            ino,
        };
        // /proc/locks: device in hex.
        assert_eq!(
            parse_lock_line("1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"),
            Some(line("FLOCK", true, 1234, (0xfd, 1), 5678))
        );
        // fdinfo: the same with a `lock:` prefix and a tab; a shared lock reads READ.
        let l = parse_lock_line("lock:\t1: FLOCK  ADVISORY  READ 99 08:02:17 0 EOF").unwrap();
        assert_eq!(l, line("FLOCK", false, 99, (8, 2), 17));
        assert!(l.on("FLOCK", rustix::fs::makedev(8, 2), 17));
        assert!(!l.on("POSIX", rustix::fs::makedev(8, 2), 17));
        assert!(!l.on("FLOCK", rustix::fs::makedev(8, 3), 17));
        assert!(!l.on("FLOCK", rustix::fs::makedev(9, 2), 17));
        assert!(!l.on("FLOCK", rustix::fs::makedev(8, 2), 18));
        // OFD locks name pid -1.
        assert_eq!(
            parse_lock_line("2: OFDLCK ADVISORY  WRITE -1 08:02:17 0 EOF").map(|l| l.pid),
            Some(-1)
        );
        // A blocked waiter is not a holder; an unknown access and garbage are nothing.
        assert_eq!(
            parse_lock_line("1: -> FLOCK  ADVISORY  WRITE 1 08:02:17 0 EOF"),
            None
        );
        assert_eq!(
            parse_lock_line("1: FLOCK  ADVISORY  RW 1 08:02:17 0 EOF"),
            None
        );
        assert_eq!(parse_lock_line("nonsense"), None);
    }
}

#[cfg(test)]
mod read_small_tests {
    use super::*;

    #[test]
    fn a_file_over_the_bound_is_an_error_never_a_silent_prefix() {
        // A table cut at its bound reads as a shorter, well-formed table: whatever came
        // after the cut (a bound port, a lock) would be unseen. Over the bound fails.
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("table");
        std::fs::write(&p, "header\nline 1\nline 2\n").unwrap();
        assert_eq!(read_small(&p, 21).unwrap(), "header\nline 1\nline 2\n");
        let e = read_small(&p, 20).unwrap_err();
        assert!(e.to_string().contains("over its bound of 20 bytes"), "{e}");
    }
}

//! Processes and threads running a given executable, wherever they are: by the identity of
//! their `exe`, or of a file mapped into them (a binary started through the dynamic loader
//! has the loader as its `exe` and the binary only in its maps).

use std::io::BufRead as _;
use std::path::Path;

use super::procfs::pids;

/// Threads examined per process: the kernel's `PID_MAX_LIMIT`, which no process's tasks
/// can exceed (a lower bound would let any user with more threads fail the scan).
pub const TASKS_PER_PROC_MAX: usize = 1 << 22;
/// Lines read from one `/proc/PID/maps`, streamed (memory stays one line): 16 times the
/// kernel's default `vm.max_map_count` (65530). A byte bound would let any user fail the
/// scan, and with it a recovery, by mapping one long-named file many times (seen: 17,500
/// mappings of a 3,829-byte path, 64 MiB); a maps over this many lines is refused.
pub const MAPS_LINES_MAX: u64 = 1 << 20;
/// Bytes of one maps line (the fixed fields and a path of at most `PATH_MAX`).
pub const MAPS_LINE_BYTES_MAX: usize = 8 * 1024;

/// A task (process or thread) running a contained executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runner {
    pub pid: u32,
    pub tid: u32,
    /// Found in its maps, not as its `exe` (e.g. started through the dynamic loader).
    pub mapped: bool,
}

fn same_path(l: &str, path: &str) -> bool {
    l == path || l.strip_suffix(" (deleted)") == Some(path)
}

fn matches(exe: &Path, dev: u64, ino: u64, path: &str) -> bool {
    // The live executable by identity; a deleted or replaced one by its former path.
    if let Ok(st) = rustix::fs::stat(exe) {
        if st.st_dev == dev && st.st_ino == ino {
            return true;
        }
    }
    std::fs::read_link(exe).is_ok_and(|l| same_path(&l.to_string_lossy(), path))
}

/// One `/proc/PID/maps` line: `(dev major, dev minor, inode, path)`. Example:
/// `7f..-7f.. r-xp 00001000 fe:00 325843   /usr/lib/ld-linux-x86-64.so.2` (device in
/// hex; the path may contain spaces and may end in ` (deleted)`).
pub fn parse_maps_line(line: &str) -> Option<(u32, u32, u64, &str)> {
    let mut rest = line;
    let mut field = || {
        rest = rest.trim_start_matches(' ');
        let end = rest.find(' ').unwrap_or(rest.len());
        let (f, r) = rest.split_at(end);
        rest = r;
        Some(f).filter(|f| !f.is_empty())
    };
    let (_addr, _perms, _offset) = (field()?, field()?, field()?);
    let dev = field()?;
    let ino = field()?.parse().ok()?;
    let (maj, min) = dev.split_once(':')?;
    let maj = u32::from_str_radix(maj, 16).ok()?;
    let min = u32::from_str_radix(min, 16).ok()?;
    Some((maj, min, ino, rest.trim_start_matches(' ')))
}

/// What a task's maps showed.
#[derive(Debug, PartialEq, Eq)]
enum Maps {
    /// The executable is mapped.
    Has,
    /// Mappings, none of them the executable.
    HasNot,
    /// No mapping at all (a kernel thread, or a zombie leader whose memory is gone), or
    /// the task has exited.
    Empty,
}

/// Whether `maps` (a `/proc/PID/maps` or `/proc/PID/task/TID/maps`) maps the executable:
/// by device and inode, or (removed or replaced) by its former path. Bounded; unreadable
/// maps of a live task is an error.
fn maps_has(maps: &Path, dev: u64, ino: u64, path: &str) -> Result<Maps, String> {
    let gone = |e: &std::io::Error| {
        matches!(
            e.raw_os_error(),
            Some(c) if c == rustix::io::Errno::NOENT.raw_os_error()
                || c == rustix::io::Errno::SRCH.raw_os_error()
        )
    };
    let f = match std::fs::File::open(maps) {
        Ok(f) => f,
        Err(e) if gone(&e) => return Ok(Maps::Empty),
        Err(e) => return Err(format!("{}: {e}", maps.display())),
    };
    let (want_maj, want_min) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let mut r = std::io::BufReader::new(f);
    let mut line = Vec::new();
    let (mut lines, mut any) = (0u64, false);
    loop {
        line.clear();
        let n = match r.read_until(b'\n', &mut line) {
            Ok(n) => n,
            Err(e) if gone(&e) => return Ok(Maps::Empty),
            Err(e) => return Err(format!("{}: {e}", maps.display())),
        };
        if n == 0 {
            return Ok(if any { Maps::HasNot } else { Maps::Empty });
        }
        lines = lines.saturating_add(1);
        if lines > MAPS_LINES_MAX {
            return Err(format!("{}: over {MAPS_LINES_MAX} lines", maps.display()));
        }
        if n > MAPS_LINE_BYTES_MAX {
            return Err(format!(
                "{}: a line over {MAPS_LINE_BYTES_MAX} bytes",
                maps.display()
            ));
        }
        any = true;
        let text = String::from_utf8_lossy(&line);
        let Some((maj, min, i, p)) = parse_maps_line(text.trim_end_matches('\n')) else {
            return Err(format!("{}: unknown line {text:?}", maps.display()));
        };
        if (i != 0 && i == ino && maj == want_maj && min == want_min) || same_path(p, path) {
            return Ok(Maps::Has);
        }
    }
}

/// Whether the init of our pid namespace hides its `exe` and maps from root (as some
/// sandbox and VM supervisors run it). Such an init is no deployment's old root, and it
/// cannot be judged either way: it is the one process skipped. Anywhere else, unreadable
/// maps of a live process fail the observation.
fn init_hidden() -> bool {
    let denied = |e: std::io::Error| e.kind() == std::io::ErrorKind::PermissionDenied;
    std::fs::read_link("/proc/1/exe").is_err_and(denied)
        && std::fs::File::open("/proc/1/maps").is_err_and(denied)
}

/// Every task whose executable is `path` (identity `dev`/`ino`), as its `exe` or mapped
/// into it. Looks at each process's `exe` and maps and at every thread's `exe`, so a
/// thread group whose leader exited (a zombie leader with live threads) is still found;
/// threads share their process's maps, read per thread only when the leader has none.
pub fn running(path: &str, dev: u64, ino: u64) -> Result<Vec<Runner>, String> {
    let mut out = Vec::new();
    for pid in pids().map_err(|e| format!("/proc: {e}"))? {
        if matches(Path::new(&format!("/proc/{pid}/exe")), dev, ino, path) {
            out.push(Runner {
                pid,
                tid: pid,
                mapped: false,
            });
            continue;
        }
        let leader_maps = match maps_has(Path::new(&format!("/proc/{pid}/maps")), dev, ino, path) {
            Ok(m) => m,
            Err(_) if pid == 1 && init_hidden() => continue,
            Err(e) => return Err(e),
        };
        if leader_maps == Maps::Has {
            out.push(Runner {
                pid,
                tid: pid,
                mapped: true,
            });
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.take(TASKS_PER_PROC_MAX).flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if tid == pid {
                continue;
            }
            if matches(&t.path().join("exe"), dev, ino, path) {
                out.push(Runner {
                    pid,
                    tid,
                    mapped: false,
                });
                break;
            }
            if leader_maps == Maps::Empty
                && maps_has(&t.path().join("maps"), dev, ino, path)? == Maps::Has
            {
                out.push(Runner {
                    pid,
                    tid,
                    mapped: true,
                });
                break;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::parse_maps_line;

    #[test]
    fn maps_lines_parse_device_inode_and_a_path_with_spaces() {
        assert_eq!(
            parse_maps_line(
                "7f72322c6000-7f72322ec000 r-xp 00001000 fe:00 325843                     /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
            ),
            Some((0xfe, 0, 325843, "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"))
        );
        assert_eq!(
            parse_maps_line("5555-6666 r-xp 00000000 103:02 77   /srv/old root/bin (deleted)"),
            Some((0x103, 2, 77, "/srv/old root/bin (deleted)"))
        );
        // Anonymous mappings have no path.
        assert_eq!(
            parse_maps_line("7ffd-7ffe rw-p 00000000 00:00 0 "),
            Some((0, 0, 0, ""))
        );
        assert_eq!(
            parse_maps_line("7ffd-7ffe rw-p 00000000 00:00 0"),
            Some((0, 0, 0, ""))
        );
        assert_eq!(parse_maps_line("garbage"), None);
        assert_eq!(parse_maps_line("a b c zz:00 1 /x"), None);
    }
}

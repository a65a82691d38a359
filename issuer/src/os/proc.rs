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

/// An enrolled executable: its path and the identity (`dev`, `ino`) it had when stat'ed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted<'a> {
    pub path: &'a str,
    pub dev: u64,
    pub ino: u64,
}

/// A task's `exe` link: its identity and, read only when asked for, its target.
struct ExeLink<'a> {
    link: &'a Path,
    id: Option<(u64, u64)>,
    target: Option<Option<String>>,
}

impl<'a> ExeLink<'a> {
    fn new(link: &'a Path) -> ExeLink<'a> {
        ExeLink {
            link,
            id: rustix::fs::stat(link).ok().map(|st| (st.st_dev, st.st_ino)),
            target: None,
        }
    }

    /// Whether it runs `w`: the live executable by identity; a deleted or replaced one by
    /// its former path.
    fn matches(&mut self, w: &Wanted<'_>) -> bool {
        if self.id == Some((w.dev, w.ino)) {
            return true;
        }
        let link = self.link;
        self.target
            .get_or_insert_with(|| {
                std::fs::read_link(link)
                    .ok()
                    .map(|l| l.to_string_lossy().into_owned())
            })
            .as_deref()
            .is_some_and(|l| same_path(l, w.path))
    }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Maps {
    /// The executable is mapped.
    Has,
    /// Mappings, none of them the executable.
    HasNot,
    /// No mapping at all (a kernel thread, or a zombie leader whose memory is gone), or
    /// the task has exited.
    Empty,
}

/// For each of `wanted`, whether `maps` (a `/proc/PID/maps` or `/proc/PID/task/TID/maps`)
/// maps it: by device and inode, or (removed or replaced) by its former path; read once,
/// and only as far as the last of them is found. Bounded; unreadable maps of a live task is
/// an error for each executable not found before it.
fn maps_has(maps: &Path, wanted: &[Wanted<'_>]) -> Vec<Result<Maps, String>> {
    let gone = |e: &std::io::Error| {
        matches!(
            e.raw_os_error(),
            Some(c) if c == rustix::io::Errno::NOENT.raw_os_error()
                || c == rustix::io::Errno::SRCH.raw_os_error()
        )
    };
    let mut out: Vec<Option<Result<Maps, String>>> = wanted.iter().map(|_| None).collect();
    // Every executable not decided yet gets `r`.
    let settle = |out: Vec<Option<Result<Maps, String>>>, r: Result<Maps, String>| {
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| r.clone()))
            .collect()
    };
    let f = match std::fs::File::open(maps) {
        Ok(f) => f,
        Err(e) if gone(&e) => return settle(out, Ok(Maps::Empty)),
        Err(e) => return settle(out, Err(format!("{}: {e}", maps.display()))),
    };
    let want: Vec<(u32, u32)> = wanted
        .iter()
        .map(|w| (rustix::fs::major(w.dev), rustix::fs::minor(w.dev)))
        .collect();
    let mut r = std::io::BufReader::new(f);
    let mut line = Vec::new();
    let (mut lines, mut any, mut left) = (0u64, false, wanted.len());
    loop {
        line.clear();
        let n = match r.read_until(b'\n', &mut line) {
            Ok(n) => n,
            Err(e) if gone(&e) => return settle(out, Ok(Maps::Empty)),
            Err(e) => return settle(out, Err(format!("{}: {e}", maps.display()))),
        };
        if n == 0 {
            return settle(out, Ok(if any { Maps::HasNot } else { Maps::Empty }));
        }
        lines = lines.saturating_add(1);
        if lines > MAPS_LINES_MAX {
            let e = format!("{}: over {MAPS_LINES_MAX} lines", maps.display());
            return settle(out, Err(e));
        }
        if n > MAPS_LINE_BYTES_MAX {
            let e = format!(
                "{}: a line over {MAPS_LINE_BYTES_MAX} bytes",
                maps.display()
            );
            return settle(out, Err(e));
        }
        any = true;
        let text = String::from_utf8_lossy(&line);
        let Some((maj, min, i, p)) = parse_maps_line(text.trim_end_matches('\n')) else {
            let e = format!("{}: unknown line {text:?}", maps.display());
            return settle(out, Err(e));
        };
        for (k, w) in wanted.iter().enumerate() {
            if out[k].is_none()
                && ((i != 0 && i == w.ino && (maj, min) == want[k]) || same_path(p, w.path))
            {
                out[k] = Some(Ok(Maps::Has));
                left -= 1;
            }
        }
        if left == 0 {
            return settle(out, Ok(Maps::Has));
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

/// For each of `wanted`, in order, every task running it, as its `exe` or mapped into
/// it; or why that could not be known. One walk of `/proc` for all of them: it looks at
/// each process's `exe` and maps and at every thread's `exe`, so a thread group whose
/// leader exited (a zombie leader with live threads) is still found; threads share their
/// process's maps, read per thread only when the leader has none. An error met for an
/// executable ends its search (its result is that error); the others go on.
pub fn running_all(wanted: &[Wanted<'_>]) -> Vec<Result<Vec<Runner>, String>> {
    let mut out: Vec<Result<Vec<Runner>, String>> = wanted.iter().map(|_| Ok(Vec::new())).collect();
    if wanted.is_empty() {
        return out;
    }
    let all = match pids() {
        Ok(p) => p,
        Err(e) => return wanted.iter().map(|_| Err(format!("/proc: {e}"))).collect(),
    };
    for pid in all {
        // The executables still searched for that this process does not run as its exe.
        let link = std::path::PathBuf::from(format!("/proc/{pid}/exe"));
        let mut exe = ExeLink::new(&link);
        let mut rest: Vec<usize> = Vec::new();
        for (k, w) in wanted.iter().enumerate() {
            let Ok(found) = &mut out[k] else { continue };
            if exe.matches(w) {
                found.push(Runner {
                    pid,
                    tid: pid,
                    mapped: false,
                });
            } else {
                rest.push(k);
            }
        }
        if rest.is_empty() {
            continue;
        }
        let ws: Vec<Wanted<'_>> = rest.iter().map(|k| wanted[*k]).collect();
        let leader = maps_has(Path::new(&format!("/proc/{pid}/maps")), &ws);
        // Those not mapped by the leader, with what its maps showed (HasNot or Empty).
        let mut threads: Vec<(usize, Maps)> = Vec::new();
        for (k, m) in rest.into_iter().zip(leader) {
            match m {
                Ok(Maps::Has) => {
                    if let Ok(found) = &mut out[k] {
                        found.push(Runner {
                            pid,
                            tid: pid,
                            mapped: true,
                        });
                    }
                }
                Ok(m) => threads.push((k, m)),
                Err(_) if pid == 1 && init_hidden() => {}
                Err(e) => out[k] = Err(e),
            }
        }
        if threads.is_empty() {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.take(TASKS_PER_PROC_MAX).flatten() {
            if threads.is_empty() {
                break;
            }
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if tid == pid {
                continue;
            }
            let (path, maps_path) = (t.path().join("exe"), t.path().join("maps"));
            let mut exe = ExeLink::new(&path);
            // Those whose search goes on past this thread, and those to look for in its maps.
            let mut on: Vec<(usize, Maps)> = Vec::new();
            let mut in_maps: Vec<usize> = Vec::new();
            for (k, m) in threads {
                if exe.matches(&wanted[k]) {
                    if let Ok(found) = &mut out[k] {
                        found.push(Runner {
                            pid,
                            tid,
                            mapped: false,
                        });
                    }
                } else if m == Maps::Empty {
                    in_maps.push(k);
                } else {
                    on.push((k, m));
                }
            }
            if !in_maps.is_empty() {
                let ws: Vec<Wanted<'_>> = in_maps.iter().map(|k| wanted[*k]).collect();
                for (k, r) in in_maps.into_iter().zip(maps_has(&maps_path, &ws)) {
                    match r {
                        Ok(Maps::Has) => {
                            if let Ok(found) = &mut out[k] {
                                found.push(Runner {
                                    pid,
                                    tid,
                                    mapped: true,
                                });
                            }
                        }
                        Ok(_) => on.push((k, Maps::Empty)),
                        Err(e) => out[k] = Err(e),
                    }
                }
            }
            threads = on;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{maps_has, parse_maps_line, Maps, Wanted};

    #[test]
    fn one_read_of_maps_answers_for_each_executable_and_an_error_fails_those_not_found_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let maps = dir.path().join("maps");
        let by_path = |path| Wanted {
            path,
            dev: u64::MAX,
            ino: u64::MAX,
        };
        let (a, b, c) = (by_path("/srv/a"), by_path("/srv/b"), by_path("/srv/c"));
        std::fs::write(
            &maps,
            "5555-6666 r-xp 00000000 fe:00 77   /srv/a\n\
             7777-8888 r-xp 00000000 fe:00 78   /srv/c (deleted)\n",
        )
        .unwrap();
        assert_eq!(
            maps_has(&maps, &[a, b, c]),
            [Ok(Maps::Has), Ok(Maps::HasNot), Ok(Maps::Has)]
        );
        std::fs::write(
            &maps,
            "5555-6666 r-xp 00000000 fe:00 77   /srv/a\ngarbage\n7777-8888 r-xp 00000000 fe:00 78   /srv/c\n",
        )
        .unwrap();
        let got = maps_has(&maps, &[a, b, c]);
        assert_eq!(got[0], Ok(Maps::Has));
        for r in &got[1..] {
            assert!(
                r.as_ref().is_err_and(|e| e.contains("unknown line")),
                "{r:?}"
            );
        }
        std::fs::write(&maps, "").unwrap();
        assert_eq!(maps_has(&maps, &[a, b]), [Ok(Maps::Empty), Ok(Maps::Empty)]);
        assert_eq!(maps_has(&dir.path().join("gone"), &[a]), [Ok(Maps::Empty)]);
    }

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

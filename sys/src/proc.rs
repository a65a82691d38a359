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
mod watch;
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

/// One walk's judge of files against the enrolled executables.
struct Judge<'w, 'a> {
    wanted: &'w [Wanted<'a>],
    /// Our mount namespace's inode: path text is compared only for tasks in it.
    own_mnt: Option<u64>,
    /// Mapped files already judged by content this walk: (major, minor, inode) -> the
    /// wanted indices whose content they have, as a bit set.
    by_content: HashMap<(u32, u32, u64), u16>,
    /// Files judged by content, by their stamp (a file changed since is judged again): kept
    /// across the event reader's looks, so one copy run again and again is hashed once.
    by_stamp: HashMap<FileStamp, u16>,
    /// For the event reader: files to hash later instead of now.
    deferred: Option<Vec<Deferred>>,
}

/// A file as `fstat` shows it: device, inode, size, modification and change times.
type FileStamp = (u64, u64, u64, i64, i64, i64, i64);

fn stamp_of(st: &rustix::fs::Stat) -> FileStamp {
    (
        st.st_dev,
        st.st_ino,
        st.st_size as u64,
        st.st_mtime,
        st.st_mtime_nsec as i64,
        st.st_ctime,
        st.st_ctime_nsec as i64,
    )
}

/// A file a task runs or maps, whose content may be an enrolled executable's, to hash
/// later: its descriptor (the file as the task had it), its stamp, the candidates, and
/// whether it was mapped (else the task's exe).
#[derive(Debug)]
struct Deferred {
    fd: OwnedFd,
    stamp: FileStamp,
    candidates: u16,
    mapped: bool,
}

impl<'w, 'a> Judge<'w, 'a> {
    fn new(wanted: &'w [Wanted<'a>], fs: &Procfs) -> Self {
        Judge {
            wanted,
            own_mnt: fs.own_mnt,
            by_content: HashMap::new(),
            by_stamp: HashMap::new(),
            deferred: None,
        }
    }

    /// The wanted indices (bit set) whose content the open file `fd` has, when it is not
    /// the enrolled file itself: same size first, then the sha256 (cached by its stamp).
    fn content_of(&mut self, fd: &OwnedFd, mapped: bool) -> Result<u16, Error> {
        let st = rustix::fs::fstat(fd).context("fstat")?;
        let stamp = stamp_of(&st);
        if let Some(m) = self.by_stamp.get(&stamp) {
            return Ok(*m);
        }
        let candidates = self.candidates(fd, &st)?;
        if candidates == 0 {
            if self.by_stamp.len() < MAPPED_FILES_MAX {
                self.by_stamp.insert(stamp, 0);
            }
            return Ok(0);
        }
        // The event reader hashes later, from this descriptor (the file stays readable
        // whatever the process does), so that no hash delays its look at the next event.
        if let Some(deferred) = self.deferred.as_mut() {
            deferred.push(Deferred {
                fd: rustix::io::dup(fd).context("dup")?,
                stamp,
                candidates,
                mapped,
            });
            return Ok(0);
        }
        let m = self.digest_matches(crate::digest::digest(fd, CONTENT_BYTES_MAX)?, candidates);
        if self.by_stamp.len() < MAPPED_FILES_MAX {
            self.by_stamp.insert(stamp, m);
        }
        Ok(m)
    }

    /// The wanted indices (bit set) of `candidates` whose sha256 is `digest`.
    fn digest_matches(&self, digest: Hash, candidates: u16) -> u16 {
        self.wanted
            .iter()
            .enumerate()
            .filter(|(k, w)| {
                candidates & (1 << k) != 0 && w.content.is_some_and(|(_, d)| d == digest)
            })
            .fold(0, |m, (k, _)| m | 1 << k)
    }

    /// The wanted indices (bit set) whose content the file may have: the same size, not
    /// the enrolled file itself, the same last `digest::TAIL_BYTES`.
    fn candidates(&self, fd: &OwnedFd, st: &rustix::fs::Stat) -> Result<u16, Error> {
        let size = st.st_size as u64;
        let mut tail: Option<Hash> = None;
        let mut out = 0u16;
        for (k, w) in self.wanted.iter().enumerate() {
            let Some((want_size, _)) = w.content else {
                continue;
            };
            if want_size != size || w.id == Some((st.st_dev, st.st_ino)) {
                continue;
            }
            let t = match tail {
                Some(t) => t,
                None => *tail.insert(crate::digest::tail(fd, size)?),
            };
            if w.tail.is_none_or(|want| want == t) {
                out |= 1 << k;
            }
        }
        Ok(out)
    }

    /// The wanted indices (bit set) that the file `fd` is by identity.
    fn identity_of(&self, fd: &OwnedFd) -> u16 {
        let Ok(st) = rustix::fs::fstat(fd) else {
            return 0;
        };
        self.wanted
            .iter()
            .enumerate()
            .filter(|(_, w)| w.id == Some((st.st_dev, st.st_ino)))
            .fold(0, |m, (k, _)| m | 1 << k)
    }

    /// The wanted indices (bit set) whose enrolled path `text` names.
    fn path_of(&self, text: &[u8]) -> u16 {
        self.wanted
            .iter()
            .enumerate()
            .filter(|(_, w)| same_path(text, w.path))
            .fold(0, |m, (k, _)| m | 1 << k)
    }
}

/// What one task showed: for each wanted index it runs, how.
#[derive(Default)]
struct Seen {
    exe: u16,
    exe_copy: u16,
    mapped: u16,
    mapped_copy: u16,
}

impl Seen {
    fn any(&self) -> u16 {
        self.exe | self.exe_copy | self.mapped | self.mapped_copy
    }
}

/// Examines the task directory `task` (`/proc/PID` or `/proc/PID/task/TID`) of a
/// principal's task with memory: its `exe`, then its maps for what its `exe` is not.
/// `Ok(None)`: it has no memory (a kernel thread, a zombie) or exited meanwhile.
fn examine(judge: &mut Judge<'_, '_>, task: &OwnedFd, id: u32) -> Result<Option<Seen>, Error> {
    let all: u16 = (1u16 << judge.wanted.len()) - 1;
    let mut seen = Seen::default();
    let exe = match rustix::fs::openat(task, "exe", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
    {
        Ok(fd) => fd,
        Err(e) if exited(e, id) => return Ok(None),
        Err(e) => return Err(Error::Found(format!("exe: {e}"))),
    };
    let same_mnt = judge.own_mnt.is_some()
        && rustix::fs::statat(task, "ns/mnt", rustix::fs::AtFlags::empty())
            .ok()
            .map(|st| st.st_ino)
            == judge.own_mnt;
    seen.exe = judge.identity_of(&exe);
    if same_mnt {
        if let Ok(text) = rustix::fs::readlinkat(task, "exe", Vec::new()) {
            seen.exe |= judge.path_of(text.as_bytes());
        }
    }
    seen.exe_copy = judge.content_of(&exe, false)? & !seen.exe;
    if seen.any() == all {
        return Ok(Some(seen));
    }
    examine_maps(judge, task, id, same_mnt, seen)
}

/// The wanted indices (bit set) whose content the file mapped at `range` has, judged once
/// per file a walk (`key`: its device and inode); `None` when it was unmapped since the line
/// was read, or the task exited.
fn mapped_content(
    judge: &mut Judge<'_, '_>,
    task: &OwnedFd,
    id: u32,
    range: &str,
    key: (u32, u32, u64),
) -> Result<Option<u16>, Error> {
    if let Some(m) = judge.by_content.get(&key) {
        return Ok(Some(*m));
    }
    if judge.by_content.len() >= MAPPED_FILES_MAX {
        return Err(Error::Found(format!(
            "more than {MAPPED_FILES_MAX} mapped files"
        )));
    }
    let file = format!("map_files/{range}");
    let fd = match rustix::fs::openat(
        task,
        file.as_str(),
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) if exited(e, id) => return Ok(None),
        Err(e) => return Err(Error::Found(format!("{file}: {e}"))),
    };
    let m = judge.content_of(&fd, true)?;
    judge.by_content.insert(key, m);
    Ok(Some(m))
}

/// The rest of [`examine`]: the task's maps, for what its `exe` is not (`seen` holds what
/// the exe showed). A task that exits meanwhile keeps what its exe showed.
fn examine_maps(
    judge: &mut Judge<'_, '_>,
    task: &OwnedFd,
    id: u32,
    same_mnt: bool,
    mut seen: Seen,
) -> Result<Option<Seen>, Error> {
    let maps = match rustix::fs::openat(
        task,
        "maps",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        // Exited after its exe was judged: what the exe showed stands.
        Err(e) if exited(e, id) => return Ok((seen.any() != 0).then_some(seen)),
        Err(e) => return Err(Error::Found(format!("maps: {e}"))),
    };
    let mut r = std::io::BufReader::new(std::fs::File::from(maps));
    let mut line = Vec::new();
    let mut lines = 0u64;
    let mut this_task: std::collections::HashSet<(u32, u32, u64)> = Default::default();
    loop {
        let cut = match read_line_kept(&mut r, &mut line, MAPS_LINE_KEPT_BYTES) {
            Ok(Some(cut)) => cut,
            Ok(None) => break,
            Err(e)
                if e.raw_os_error()
                    .map(Errno::from_raw_os_error)
                    .is_some_and(|e| exited(e, id)) =>
            {
                return Ok((seen.any() != 0).then_some(seen))
            }
            Err(e) => return Err(Error::Found(format!("maps: {e}"))),
        };
        lines += 1;
        if lines > MAPS_LINES_MAX {
            return Err(Error::Found(format!("maps: over {MAPS_LINES_MAX} lines")));
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let Some((range, maj, min, ino, path)) = parse_maps_line(text) else {
            return Err(Error::Found(format!(
                "maps: unknown line {:?}",
                String::from_utf8_lossy(text)
            )));
        };
        if ino == 0 || !this_task.insert((maj, min, ino)) {
            continue;
        }
        for (k, w) in judge.wanted.iter().enumerate() {
            let same = w.id.is_some_and(|(dev, i)| {
                i == ino && (rustix::fs::major(dev), rustix::fs::minor(dev)) == (maj, min)
            });
            if same || (same_mnt && !cut && same_path(path, w.path)) {
                seen.mapped |= 1 << k;
            }
        }
        if judge.wanted.iter().all(|w| w.content.is_none()) {
            continue;
        }
        if let Some(m) = mapped_content(judge, task, id, range, (maj, min, ino))? {
            seen.mapped_copy |= m;
        }
    }
    seen.mapped &= !seen.exe & !seen.exe_copy;
    seen.mapped_copy &= !seen.exe & !seen.exe_copy & !seen.mapped;
    Ok(Some(seen))
}

/// The last pid the kernel gave out in our pid namespace (`ns_last_pid`), read again and
/// again through one open descriptor (a round of the chase starts with it: the fewer
/// microseconds it costs, the younger the newest pid is when it is examined), and the
/// bound at which pids wrap (`pid_max`, read once per walk).
struct LastPid {
    file: OwnedFd,
    max: u32,
}

impl LastPid {
    const PATH: &'static str = "/proc/sys/kernel/ns_last_pid";

    fn open() -> Result<LastPid, Error> {
        let max_path = "/proc/sys/kernel/pid_max";
        let max = super::procfs::read_small(std::path::Path::new(max_path), 32)
            .context(format_args!("{max_path}"))?
            .trim()
            .parse()
            .context(format_args!("{max_path}"))?;
        let file = rustix::fs::open(Self::PATH, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            .context(format_args!("{}", Self::PATH))?;
        Ok(LastPid { file, max })
    }

    fn read(&self) -> Result<u32, Error> {
        let mut buf = [0u8; 24];
        let n =
            rustix::io::pread(&self.file, &mut buf, 0).context(format_args!("{}", Self::PATH))?;
        let last: u32 = std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .ok_or_else(|| format!("{}: not a pid: {:?}", Self::PATH, &buf[..n]))?;
        if last >= self.max {
            return Err(Error::Found(format!(
                "ns_last_pid {last} not below pid_max {}",
                self.max
            )));
        }
        Ok(last)
    }
}

/// What one task showed, through which task id; `None`: it has no memory or exited.
type Examined = Result<Option<(u32, Seen)>, Error>;

/// What one visit of a pid found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Visit {
    /// Examined: a task that cannot be the old root (`principal` false), or one whose files
    /// were judged.
    Seen { principal: bool },
    /// Exited before it could be examined (or a principal's task without memory now).
    Gone,
}

/// One walk of `/proc`: the judge, the tasks that count, what was found per executable.
struct Walk<'a, 'w, 'x, P> {
    judge: &'a mut Judge<'w, 'x>,
    proc_dir: &'a OwnedFd,
    /// The device of `proc_dir`'s procfs: a pid directory on another is a mount over it.
    proc_dev: u64,
    /// The mount `proc_dir` is on: a pid directory on another (another process's pid
    /// directory bound over it, procfs too) is a mount over it.
    proc_mnt: Option<u64>,
    principal: &'a P,
    out: &'a mut Vec<Result<Vec<Runner>, Error>>,
    /// Each process judged and its verdict, when asked (for the event reader to follow).
    seeds: Option<Vec<(u32, Known)>>,
}

impl<P: Fn(TaskStatus, &OwnedFd) -> bool> Walk<'_, '_, '_, P> {
    /// Whether every executable's search has its answer: a task found, or an error.
    fn settled(&self) -> bool {
        self.out
            .iter()
            .all(|f| f.as_ref().map_or(true, |f| !f.is_empty()))
    }

    /// Every executable's search that found nothing yet ends with `e`.
    fn fail(&mut self, e: &str) {
        for found in self.out.iter_mut() {
            if found.as_ref().is_ok_and(|f| f.is_empty()) {
                *found = Err(Error::Found(e.to_owned()));
            }
        }
    }

    /// Examines process `pid` (its leader, or a live thread) if it is a principal's.
    fn visit(&mut self, pid: u32) -> Visit {
        let principal = self.principal;
        let Ok(dir) = rustix::fs::openat(
            self.proc_dir,
            pid.to_string().as_str(),
            OFlags::CLOEXEC | OFlags::DIRECTORY,
            Mode::empty(),
        ) else {
            return Visit::Gone;
        };
        // Root can mount an empty directory over /proc/PID in our mount namespace: that
        // process would read as having exited. Not a fact to skip: the scan fails.
        match rustix::fs::fstat(&dir) {
            Ok(st) if st.st_dev == self.proc_dev && crate::fs::mount_id(&dir) == self.proc_mnt => {}
            Ok(_) => {
                self.fail(&format!("/proc/{pid}: not procfs (a mount over it)"));
                return Visit::Seen { principal: true };
            }
            Err(e) => {
                self.fail(&format!("/proc/{pid}: {e}"));
                return Visit::Seen { principal: true };
            }
        }
        let Some(status) = task_status(&dir, "status") else {
            return Visit::Gone;
        };
        if status.tgid != pid {
            // A thread (the chase meets thread ids; /proc's listing hides them): its
            // process is visited at its own pid, by the walk or by the chase.
            return Visit::Seen { principal: false };
        }
        let mut is_principal = principal(status, &dir);
        // The leader, then (when it has no memory, or is not a principal's while another
        // thread may be) each thread.
        let mut result = if is_principal {
            examine(self.judge, &dir, pid).map(|s| s.map(|s| (pid, s)))
        } else {
            Ok(None)
        };
        if status.threads > 1 && matches!(result, Ok(None)) {
            (is_principal, result) = self.threads(pid, &dir, is_principal);
        }
        // Its ids read again once what it runs was read: a principal's process that gave up
        // its ids and exec'd between the two reads (`setpriv --reuid=65534 FILE`: its exec
        // judged then, by the exec hold) runs the file as another user. Found by the burn
        // trial under load: another user's run read as a principal's, the recovery refused.
        if matches!(result, Ok(Some(_)))
            && task_status(&dir, "status").is_some_and(|again| !principal(again, &dir))
        {
            (is_principal, result) = (false, Ok(None));
        }
        self.seed(pid, is_principal, &result);
        match result {
            // A principal's process without memory now: a zombie, or a kernel thread.
            Ok(None) if is_principal => return Visit::Gone,
            Ok(None) => {}
            Ok(Some((tid, seen))) => self.found(pid, tid, &seen),
            Err(_) if pid == 1 && init_hidden() => {}
            Err(e) => self.fail(&format!("/proc/{pid}/{e}")),
        }
        Visit::Seen {
            principal: is_principal,
        }
    }

    /// Process `pid`'s threads but its leader, each until one is a principal's with memory:
    /// whether the process is a principal's, and what that thread showed.
    fn threads(&mut self, pid: u32, dir: &OwnedFd, mut is_principal: bool) -> (bool, Examined) {
        let mut result = Ok(None);
        let Ok(tasks) = rustix::fs::openat(
            dir,
            "task",
            OFlags::CLOEXEC | OFlags::DIRECTORY,
            Mode::empty(),
        ) else {
            return (is_principal, result);
        };
        let tids: Vec<u32> = match rustix::fs::Dir::read_from(&tasks) {
            Ok(d) => d
                .take(TASKS_PER_PROC_MAX)
                .filter_map(|e| e.ok()?.file_name().to_str().ok()?.parse().ok())
                .filter(|t| *t != pid)
                .collect(),
            Err(_) => Vec::new(),
        };
        for tid in tids {
            let Ok(t) = rustix::fs::openat(
                &tasks,
                tid.to_string().as_str(),
                OFlags::CLOEXEC | OFlags::DIRECTORY,
                Mode::empty(),
            ) else {
                continue;
            };
            if !is_principal {
                match task_status(&t, "status") {
                    Some(u) if (self.principal)(u, &t) => is_principal = true,
                    _ => continue,
                }
            }
            result = examine(self.judge, &t, tid).map(|s| s.map(|s| (tid, s)));
            if !matches!(result, Ok(None)) {
                break;
            }
        }
        (is_principal, result)
    }

    /// Keeps process `pid`'s verdict for the event reader, when asked.
    fn seed(&mut self, pid: u32, is_principal: bool, result: &Examined) {
        let Some(seeds) = self.seeds.as_mut() else {
            return;
        };
        let verdict = match result {
            _ if !is_principal => watch::Verdict::Other,
            Ok(Some((_, s))) if s.any() == 0 => watch::Verdict::Clean,
            Ok(Some((_, s))) => watch::Verdict::Runs {
                bits: s.any(),
                mapped: s.mapped | s.mapped_copy,
                copy: s.exe_copy | s.mapped_copy,
            },
            _ => return,
        };
        seeds.push((
            pid,
            Known {
                verdict,
                at_ns: watch::now_ns(),
            },
        ));
    }

    /// Names process `pid` (seen through task `tid`) under each executable it runs.
    fn found(&mut self, pid: u32, tid: u32, seen: &Seen) {
        for (k, found) in self.out.iter_mut().enumerate() {
            let Ok(found) = found else { continue };
            let bit = 1u16 << k;
            // A process seen by the walk and again by the chase is named once.
            if seen.any() & bit != 0 && !found.iter().any(|r| r.pid == pid) {
                found.push(Runner {
                    pid,
                    tid,
                    mapped: (seen.mapped | seen.mapped_copy) & bit != 0,
                    copy: (seen.exe_copy | seen.mapped_copy) & bit != 0,
                });
            }
        }
    }
}

/// What every visit needs of `/proc`, opened once: the directory, its device (a pid
/// directory on another is a mount over it), our user and mount namespaces.
struct Procfs {
    dir: OwnedFd,
    dev: u64,
    /// The mount `/proc` is on.
    mnt: Option<u64>,
    own_userns: Option<u64>,
    own_mnt: Option<u64>,
    /// The mount our own user namespace's file is on (nsfs's): a namespace file on another
    /// is one mounted over a task's.
    ns_mnt: Option<u64>,
}

impl Procfs {
    fn open() -> Result<Procfs, Error> {
        let dir = rustix::fs::open("/proc", OFlags::CLOEXEC | OFlags::DIRECTORY, Mode::empty())
            .map_err(|e| Error::Found(format!("/proc: {e}")))?;
        let dev = rustix::fs::fstat(&dir)
            .map_err(|e| Error::Found(format!("/proc: {e}")))?
            .st_dev;
        let ns = |n: &str| rustix::fs::stat(n).ok().map(|st| st.st_ino);
        let ns_mnt = rustix::fs::open("/proc/self/ns/user", OFlags::CLOEXEC, Mode::empty())
            .ok()
            .and_then(crate::fs::mount_id);
        Ok(Procfs {
            mnt: crate::fs::mount_id(&dir),
            dir,
            dev,
            own_userns: ns("/proc/self/ns/user"),
            own_mnt: ns("/proc/self/ns/mnt"),
            ns_mnt,
        })
    }

    /// A principal's task: one of its uids is a principal's; or it holds a capability in
    /// our user namespace (root that gave up its uids but kept its power); or it lives in a
    /// user namespace a principal made, or below one (a container of root's engine with
    /// its root mapped to host uid 100000: whoever made a namespace holds every capability
    /// in it, so its tasks are that principal's to run). Capabilities a task holds in a user
    /// namespace another user made are that namespace's, not the host's.
    fn principal<'p>(&self, principals: &'p [u32]) -> impl Fn(TaskStatus, &OwnedFd) -> bool + 'p {
        let (own_userns, ns_mnt) = (self.own_userns, self.ns_mnt);
        move |t: TaskStatus, dir: &OwnedFd| {
            if t.covered || t.uids.iter().any(|u| principals.contains(u)) {
                return true;
            }
            let Some(own) = own_userns else {
                return false;
            };
            let dir_flags = OFlags::CLOEXEC | OFlags::DIRECTORY;
            let Ok(nsdir) = rustix::fs::openat(dir, "ns", dir_flags, Mode::empty()) else {
                // Gone: a task that exited is no one's.
                return false;
            };
            let Ok(ns) = rustix::fs::openat(&nsdir, "user", OFlags::CLOEXEC, Mode::empty()) else {
                return false;
            };
            // Another task's namespace directory or file mounted over this one's: no fact.
            if crate::fs::mount_id(&nsdir) != crate::fs::mount_id(dir)
                || ns_mnt.is_none()
                || crate::fs::mount_id(&ns) != ns_mnt
            {
                return true;
            }
            match rustix::fs::fstat(&ns).map(|st| st.st_ino) {
                Ok(ino) if ino == own => t.capable,
                Ok(_) => made_by_a_principal(ns, own, principals),
                Err(_) => true,
            }
        }
    }
}

/// User namespaces nest at most 32 deep (the kernel's limit); a chain longer than this
/// from a task's namespace up to ours is not the kernel's.
pub const USERNS_DEPTH_MAX: usize = 33;

/// Whether user namespace `ns` (not ours), or one of its ancestors below ours
/// (`own`: its inode), was made by a principal. What cannot be asked counts as a
/// principal's: unknown is never another user's.
fn made_by_a_principal(mut ns: OwnedFd, own: u64, principals: &[u32]) -> bool {
    for _ in 0..USERNS_DEPTH_MAX {
        match crate::kernel::userns_owner(&ns) {
            Ok(uid) if principals.contains(&uid) => return true,
            Ok(_) => {}
            Err(_) => return true,
        }
        match crate::kernel::userns_parent(&ns) {
            // Above ours, or the initial one: the chain ends outside what we judge.
            Ok(None) => return false,
            Ok(Some(parent)) => match rustix::fs::fstat(&parent) {
                Ok(st) if st.st_ino == own => return false,
                Ok(_) => ns = parent,
                Err(_) => return true,
            },
            Err(_) => return true,
        }
    }
    true
}

/// Bytes of `/proc/self/mountinfo` read.
pub const MOUNTINFO_BYTES_MAX: usize = 4 << 20;

/// Nothing in our mount namespace is mounted over a task's files in `/proc` (a forged
/// `status`, `exe`, `maps` or `uid_map`, another task's directory, a tmpfs over `task`),
/// and `/proc` is our pid namespace's (`/proc/self` is this process). Found by attacking
/// the release binaries: each such mount in repochd's namespace hid a root task running
/// the old root, and a recovery was granted. What `/proc` says of a task is believed only
/// when this holds.
pub fn tasks_unmounted() -> Result<(), Error> {
    let me = rustix::fs::readlink("/proc/self", Vec::new()).context("/proc/self")?;
    if me.to_bytes() != std::process::id().to_string().as_bytes() {
        return Err(Error::Found(format!(
            "/proc/self is {:?}, not this process ({}): /proc is another pid namespace's",
            me.to_string_lossy(),
            std::process::id()
        )));
    }
    let path = std::path::Path::new("/proc/self/mountinfo");
    let info = crate::fs::read_regular(path, MOUNTINFO_BYTES_MAX, crate::fs::Links::Follow)
        .context("/proc/self/mountinfo")?;
    for line in String::from_utf8_lossy(&info).lines() {
        // ID PARENT MAJ:MIN ROOT MOUNT-POINT ...: the mount point, octal-escaped.
        let Some(point) = line.split(' ').nth(4) else {
            return Err(Error::Found(format!("/proc/self/mountinfo: {line:?}")));
        };
        let Some(rest) = point.strip_prefix("/proc/") else {
            continue;
        };
        let first = rest.split('/').next().unwrap_or_default();
        if first == "self" || first == "thread-self" || first.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::Found(format!(
                "a mount over a task's files at {}: /proc no longer tells who runs what",
                repoch_protocol::text::escape(point)
            )));
        }
    }
    Ok(())
}

/// Whether live thread `tid`, waiting in its exec of `file`, will be a principal's once the
/// exec is done, as a walk would judge it then, its real uid and its process (thread group);
/// `None` when its status cannot be read (gone, or hidden). The exec sets the saved and file-system uids to the
/// effective one (the file's owner when it is set-user-ID) and keeps only ambient
/// capabilities (a set-user-ID file none); a file with capabilities of its own gives them to
/// whoever runs it, so its exec is a principal's whoever runs it.
pub fn principal_after_exec(
    tid: u32,
    principals: &[u32],
    file: impl AsFd,
) -> Option<(bool, u32, Option<u32>)> {
    let fs = Procfs::open().ok()?;
    // `/proc/TID` is the thread's own: its status holds that thread's credentials.
    let dir = rustix::fs::openat(
        &fs.dir,
        tid.to_string(),
        OFlags::CLOEXEC | OFlags::DIRECTORY,
        Mode::empty(),
    )
    .ok()?;
    let t = task_status(&dir, "status")?;
    let st = rustix::fs::fstat(&file).ok()?;
    let setuid = st.st_mode & 0o4000 != 0;
    let file_caps = match rustix::fs::fgetxattr(&file, "security.capability", &mut [0u8; 64]) {
        Ok(_) => true,
        Err(Errno::NODATA) | Err(Errno::OPNOTSUPP) => false,
        Err(_) => return None,
    };
    let euid = if setuid { st.st_uid } else { t.uids[1] };
    let after = TaskStatus {
        uids: [t.uids[0], euid, euid, euid],
        capable: t.ambient && !setuid,
        ..t
    };
    let principal =
        file_caps || tasks_unmounted().is_err() || fs.principal(principals)(after, &dir);
    Some((principal, t.uids[0], Some(t.tgid)))
}

/// What one walk of `/proc` found.
#[derive(Debug)]
pub struct Walked {
    /// For each wanted executable, in order: every task running it, or why that could not
    /// be known.
    pub found: Vec<Result<Vec<Runner>, Error>>,
    /// The chase ran out of rounds while processes it could not examine were still being
    /// born (docs/THREAT-MODEL.md, "Who can change a fact"): why.
    pub unsettled: Option<String>,
    /// Each process it judged, and its verdict (for the event reader to follow).
    pub seeds: Vec<(u32, Known)>,
}

/// For each of `wanted`, in order, every task of a principal (`principals`: uids) running
/// it, as its `exe` or mapped into it, by identity or content; or why that could not be
/// known. One walk of `/proc` for all of them; then, with `chase`, the chase of the pids
/// born since the listing (not needed when the process events are held from before the
/// listing: they name every process born since). A process whose leader has exited (a
/// zombie leader with live threads) is examined through a live thread; a process is a
/// principal's when any of its tasks has a principal's uid. Tasks that exit during the
/// walk are skipped. An error met for an executable ends its search (its result is that
/// error); the others go on.
pub fn walk(wanted: &[Wanted<'_>], principals: &[u32], chase: bool) -> Walked {
    assert!(wanted.len() <= 16, "a u16 bit set per wanted executable");
    let mut out: Vec<Result<Vec<Runner>, Error>> = wanted.iter().map(|_| Ok(Vec::new())).collect();
    let failed = |e: String| Walked {
        found: wanted
            .iter()
            .map(|_| Err(Error::Found(e.clone())))
            .collect(),
        unsettled: None,
        seeds: Vec::new(),
    };
    if wanted.is_empty() {
        return Walked {
            found: out,
            unsettled: None,
            seeds: Vec::new(),
        };
    }
    let fs = match Procfs::open() {
        Ok(fs) => fs,
        Err(e) => return failed(e.to_string()),
    };
    let mut judge = Judge::new(wanted, &fs);
    let principal = fs.principal(principals);
    // Read before the listing: every pid given out after it is chased.
    let last_pid = LastPid::open().and_then(|p| p.read().map(|l| (p, l)));
    let all = match pids() {
        Ok(p) => p,
        Err(e) => return failed(format!("/proc: {e}")),
    };
    let mut walk = Walk {
        judge: &mut judge,
        proc_dir: &fs.dir,
        proc_dev: fs.dev,
        proc_mnt: fs.mnt,
        principal: &principal,
        out: &mut out,
        seeds: Some(Vec::new()),
    };
    let (last_pid, last) = match last_pid {
        Ok(p) => p,
        Err(e) => {
            walk.fail(&e.to_string());
            return Walked {
                found: out,
                unsettled: None,
                seeds: Vec::new(),
            };
        }
    };
    for pid in all {
        walk.visit(pid);
    }
    let unsettled = if chase {
        walk.chase(&last_pid, last)
    } else {
        None
    };
    let seeds = walk.seeds.take().unwrap_or_default();
    Walked {
        found: out,
        unsettled,
        seeds,
    }
}

impl<P: Fn(TaskStatus, &OwnedFd) -> bool> Walk<'_, '_, '_, P> {
    /// The chase of those born since the listing: the kernel gives pids out in turn
    /// (upwards, wrapping at pid_max), and `ns_last_pid` is the last one given, so each
    /// round examines, newest first, the pids given out since the round before. A round that
    /// meets no birth, or in which every pid born could be examined alive, ends the chase;
    /// a process that exited first may have left a child that runs on (a chain of
    /// short-lived processes, each forking and exiting at once, born after the listing and
    /// gone before a walk reaches it), so the chase goes on, up to CHASE_ROUNDS_MAX rounds,
    /// and says so when they ran out. The newest pid is visited within microseconds of being
    /// read, so a chain must outrun every round's first look. A pid found without its
    /// `/proc` entry may be one given out but not yet attached to its process (a fork
    /// between `alloc_pid` and `attach_pid`), not an exited one: it is looked at once more
    /// in the next round.
    fn chase(&mut self, last_pid: &LastPid, mut last: u32) -> Option<String> {
        let mut again: Vec<u32> = Vec::new();
        for _ in 0..CHASE_ROUNDS_MAX {
            let now = match last_pid.read() {
                Ok(l) => l,
                Err(e) => {
                    self.fail(&e.to_string());
                    return None;
                }
            };
            let mut missed = false;
            let mut gone: Vec<u32> = Vec::new();
            for pid in std::mem::take(&mut again) {
                missed |= self.visit(pid) == Visit::Gone;
            }
            let (mut pid, mut visited) = (now, 0usize);
            while pid != last {
                if visited == CHASE_PIDS_PER_ROUND_MAX {
                    missed = true;
                    break;
                }
                if self.visit(pid) == Visit::Gone {
                    missed = true;
                    gone.push(pid);
                }
                visited += 1;
                pid = if pid <= 1 { last_pid.max - 1 } else { pid - 1 };
            }
            again = gone;
            if !missed || self.settled() {
                return None;
            }
            last = now;
        }
        Some(format!(
            "the chase of processes born during the walk ran out of its {CHASE_ROUNDS_MAX} \
             rounds, each meeting a process that exited before it could be examined"
        ))
    }
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

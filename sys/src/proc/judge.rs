//! One walk's judge of a principal's task against the enrolled executables: its `exe`
//! and its mappings, by identity or content, each file's digest read once per walk.

use super::*;

/// One walk's judge of files against the enrolled executables.
pub(super) struct Judge<'w, 'a> {
    pub(super) wanted: &'w [Wanted<'a>],
    /// Our mount namespace's inode: path text is compared only for tasks in it.
    pub(super) own_mnt: Option<u64>,
    /// Mapped files already judged by content this walk: (major, minor, inode) -> the
    /// wanted indices whose content they have, as a bit set.
    pub(super) by_content: HashMap<(u32, u32, u64), u16>,
    /// Files judged by content, by their stamp (a file changed since is judged again): kept
    /// across the event reader's looks, so one copy run again and again is hashed once.
    pub(super) by_stamp: HashMap<FileStamp, u16>,
    /// For the event reader: files to hash later instead of now.
    pub(super) deferred: Option<Vec<Deferred>>,
}

/// A file as `fstat` shows it: device, inode, size, modification and change times.
pub(super) type FileStamp = (u64, u64, u64, i64, i64, i64, i64);

pub(super) fn stamp_of(st: &rustix::fs::Stat) -> FileStamp {
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
pub(super) struct Deferred {
    pub(super) fd: OwnedFd,
    pub(super) stamp: FileStamp,
    pub(super) candidates: u16,
    pub(super) mapped: bool,
}

impl<'w, 'a> Judge<'w, 'a> {
    pub(super) fn new(wanted: &'w [Wanted<'a>], fs: &Procfs) -> Self {
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
    pub(super) fn content_of(&mut self, fd: &OwnedFd, mapped: bool) -> Result<u16, Error> {
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
    pub(super) fn digest_matches(&self, digest: Hash, candidates: u16) -> u16 {
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
    pub(super) fn candidates(&self, fd: &OwnedFd, st: &rustix::fs::Stat) -> Result<u16, Error> {
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
    pub(super) fn identity_of(&self, fd: &OwnedFd) -> u16 {
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
    pub(super) fn path_of(&self, text: &[u8]) -> u16 {
        self.wanted
            .iter()
            .enumerate()
            .filter(|(_, w)| same_path(text, w.path))
            .fold(0, |m, (k, _)| m | 1 << k)
    }
}

/// What one task showed: for each wanted index it runs, how.
#[derive(Default)]
pub(super) struct Seen {
    pub(super) exe: u16,
    pub(super) exe_copy: u16,
    pub(super) mapped: u16,
    pub(super) mapped_copy: u16,
}

impl Seen {
    pub(super) fn any(&self) -> u16 {
        self.exe | self.exe_copy | self.mapped | self.mapped_copy
    }
}

/// Examines the task directory `task` (`/proc/PID` or `/proc/PID/task/TID`) of a
/// principal's task with memory: its `exe`, then its maps for what its `exe` is not.
/// `Ok(None)`: it has no memory (a kernel thread, a zombie) or exited meanwhile.
pub(super) fn examine(
    judge: &mut Judge<'_, '_>,
    task: &OwnedFd,
    id: u32,
) -> Result<Option<Seen>, Error> {
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
pub(super) fn mapped_content(
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
pub(super) fn examine_maps(
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

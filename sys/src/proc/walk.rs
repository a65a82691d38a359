//! The walk of the process space: every principal's task, the pids given out while it
//! runs chased to the last one, judged once per thread-group and credentials; and the
//! views it trusts (procfs itself, nothing mounted over a task's files, a user namespace
//! judged by its owner).

use super::*;
/// The last pid the kernel gave out in our pid namespace (`ns_last_pid`), read again and
/// again through one open descriptor (a round of the chase starts with it: the fewer
/// microseconds it costs, the younger the newest pid is when it is examined), and the
/// bound at which pids wrap (`pid_max`, read once per walk).
pub(super) struct LastPid {
    pub(super) file: OwnedFd,
    pub(super) max: u32,
}

impl LastPid {
    const PATH: &'static str = "/proc/sys/kernel/ns_last_pid";

    pub(super) fn open() -> Result<LastPid, Error> {
        let max_path = "/proc/sys/kernel/pid_max";
        let max = crate::procfs::read_small(std::path::Path::new(max_path), 32)
            .context(format_args!("{max_path}"))?
            .trim()
            .parse()
            .context(format_args!("{max_path}"))?;
        let file = rustix::fs::open(Self::PATH, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            .context(format_args!("{}", Self::PATH))?;
        Ok(LastPid { file, max })
    }

    pub(super) fn read(&self) -> Result<u32, Error> {
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
pub(super) type Examined = Result<Option<(u32, Seen)>, Error>;

/// What one visit of a pid found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Visit {
    /// Examined: a task that cannot be the old root (`principal` false), or one whose files
    /// were judged.
    Seen { principal: bool },
    /// Exited before it could be examined (or a principal's task without memory now).
    Gone,
}

/// One walk of `/proc`: the judge, the tasks that count, what was found per executable.
pub(super) struct Walk<'a, 'w, 'x, P> {
    pub(super) judge: &'a mut Judge<'w, 'x>,
    pub(super) proc_dir: &'a OwnedFd,
    /// The device of `proc_dir`'s procfs: a pid directory on another is a mount over it.
    pub(super) proc_dev: u64,
    /// The mount `proc_dir` is on: a pid directory on another (another process's pid
    /// directory bound over it, procfs too) is a mount over it.
    pub(super) proc_mnt: Option<u64>,
    pub(super) principal: &'a P,
    pub(super) out: &'a mut Vec<Result<Vec<Runner>, Error>>,
    /// Each process judged and its verdict, when asked (for the event reader to follow).
    pub(super) seeds: Option<Vec<(u32, Known)>>,
}

impl<P: Fn(TaskStatus, &OwnedFd) -> bool> Walk<'_, '_, '_, P> {
    /// Whether every executable's search has its answer: a task found, or an error.
    pub(super) fn settled(&self) -> bool {
        self.out
            .iter()
            .all(|f| f.as_ref().map_or(true, |f| !f.is_empty()))
    }

    /// Every executable's search that found nothing yet ends with `e`.
    pub(super) fn fail(&mut self, e: &str) {
        for found in self.out.iter_mut() {
            if found.as_ref().is_ok_and(|f| f.is_empty()) {
                *found = Err(Error::Found(e.to_owned()));
            }
        }
    }

    /// Examines process `pid` (its leader, or a live thread) if it is a principal's.
    pub(super) fn visit(&mut self, pid: u32) -> Visit {
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
    pub(super) fn threads(
        &mut self,
        pid: u32,
        dir: &OwnedFd,
        mut is_principal: bool,
    ) -> (bool, Examined) {
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
    pub(super) fn seed(&mut self, pid: u32, is_principal: bool, result: &Examined) {
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
    pub(super) fn found(&mut self, pid: u32, tid: u32, seen: &Seen) {
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
pub(super) struct Procfs {
    pub(super) dir: OwnedFd,
    pub(super) dev: u64,
    /// The mount `/proc` is on.
    pub(super) mnt: Option<u64>,
    pub(super) own_userns: Option<u64>,
    pub(super) own_mnt: Option<u64>,
    /// The mount our own user namespace's file is on (nsfs's): a namespace file on another
    /// is one mounted over a task's.
    pub(super) ns_mnt: Option<u64>,
}

impl Procfs {
    pub(super) fn open() -> Result<Procfs, Error> {
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
    pub(super) fn principal<'p>(
        &self,
        principals: &'p [u32],
    ) -> impl Fn(TaskStatus, &OwnedFd) -> bool + 'p {
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
pub(super) fn made_by_a_principal(mut ns: OwnedFd, own: u64, principals: &[u32]) -> bool {
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
    pub(super) fn chase(&mut self, last_pid: &LastPid, mut last: u32) -> Option<String> {
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

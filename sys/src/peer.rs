//! What a socket peer is, from `/proc`, pinned by a pidfd: its executable's identity and
//! digest, and its cgroup.

use crate::error::{Context as _, Error};
use std::os::fd::OwnedFd;

use repoch_protocol::grant::ConsumerPeer;
use repoch_protocol::limits::PATH_BYTES_MAX;

use super::cgroup;

/// Largest peer executable hashed.
pub const PEER_EXE_BYTES_MAX: u64 = crate::digest::EXE_BYTES_MAX;

/// Reads the peer's executable and cgroup, then checks through the pidfd that the process
/// read is still the one that connected (a pid reused meanwhile would be another process).
pub fn describe(pid: u32, uid: u32, gid: u32, pidfd: &OwnedFd) -> Result<ConsumerPeer, Error> {
    alive(pidfd)?;
    let exe_path = format!("/proc/{pid}/exe");
    let f = std::fs::File::open(&exe_path).context(format_args!("{exe_path}"))?;
    let exe = crate::fs::fstat_identity(&f).context(format_args!("{exe_path}"))?;
    // Read whole unless a proof remembered from an earlier read (the issuance's read of
    // the consumer executable, or an earlier peer's) shows this is that file, unchanged
    // (`crate::digest`; docs/THREAT-MODEL.md, "The consumer executable, hashed once per
    // issuance").
    let exe_sha256 =
        crate::digest::digest(&f, PEER_EXE_BYTES_MAX).context(format_args!("{exe_path}"))?;
    let cgroup = cgroup::of_pid(pid)?;
    // The cgroup goes into the intent and consume records, whose decoder bounds it: a
    // deeper one is refused here, before anything is written.
    if cgroup.len() > PATH_BYTES_MAX {
        return Err(Error::Found(format!(
            "cgroup path of {} bytes, over the bound of {PATH_BYTES_MAX}",
            cgroup.len()
        )));
    }
    // The intent and consume records are signed text that holds no forging character
    // (docs/PROTOCOL.md, "Text"): a peer in a cgroup whose name has one is refused here.
    if let Err(why) = repoch_protocol::text::check(&cgroup) {
        return Err(Error::Found(format!(
            "cgroup path {}: {why}",
            repoch_protocol::text::escape(&cgroup)
        )));
    }
    // Re-check after reading /proc: the pidfd still refers to a live process.
    alive(pidfd)?;
    Ok(ConsumerPeer {
        pid,
        uid,
        gid,
        exe,
        exe_sha256,
        cgroup,
    })
}

/// Whether `fd` reports any of `flags` right now (a poll with a zero timeout).
pub fn ready_now(
    fd: impl std::os::fd::AsFd,
    flags: rustix::event::PollFlags,
) -> Result<bool, Error> {
    ready_within(fd, flags, 0)
}

/// Whether `fd` reports any of `flags` within `seconds` (a poll, resumed after a signal).
pub fn ready_within(
    fd: impl std::os::fd::AsFd,
    flags: rustix::event::PollFlags,
    seconds: u64,
) -> Result<bool, Error> {
    use rustix::event::{poll, PollFd, Timespec};
    let mut fds = [PollFd::new(&fd, flags)];
    let t = Timespec {
        tv_sec: i64::try_from(seconds).unwrap_or(i64::MAX),
        tv_nsec: 0,
    };
    loop {
        match poll(&mut fds, Some(&t)) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(Error::Found(format!("poll: {e}"))),
        }
    }
}

/// A pidfd polls readable once its process has exited (its pid may then be reused).
pub fn alive(pidfd: &OwnedFd) -> Result<(), Error> {
    match ready_now(pidfd, rustix::event::PollFlags::IN)? {
        false => Ok(()),
        true => Err("the peer process has exited".into()),
    }
}

/// A pidfd for `pid` (the fallback when `SO_PEERPIDFD` is unavailable).
pub fn pidfd_open(pid: u32) -> Result<OwnedFd, Error> {
    let p = rustix::process::Pid::from_raw(pid as i32).ok_or("pid 0")?;
    rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
        .context(format_args!("pidfd_open({pid})"))
}

/// Tasks of one process examined for holders of a connection.
pub const HOLDER_TASKS_PER_PROC_MAX: usize = super::proc::TASKS_PER_PROC_MAX;
/// Descriptors of one task examined for holders of a connection.
pub const HOLDER_FDS_PER_TASK_MAX: usize = super::procfs::PROC_FDS_MAX;

/// What one walk of the descriptors found: the processes holding the socket, and how many
/// descriptor tables it read (threads sharing their process's table are read once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walked {
    pub holders: Vec<u32>,
    pub tables: usize,
}

/// The processes holding socket inode `inode` (`socket:[inode]` among the fds of any task:
/// a thread may have its own descriptor table), among the tasks whose real uid is one of
/// `uids`. Exceeding a bound is an error, never a partial answer. (An fd in flight in an
/// `SCM_RIGHTS` message is held by no task and cannot be seen.)
///
/// Only those tasks: the walk reads every descriptor of every task it looks at, and any
/// user can hold millions (a thousand threads sharing a table of 20,000 made the walk
/// take minutes and the real consumer time out). A task of another user cannot hold a
/// copy of the consumer's connection: the consumer makes it itself, after making itself
/// non-dumpable (no `ptrace`, no `pidfd_getfd` but with `CAP_SYS_PTRACE`), never forks or
/// sends it, and closes it on exec; a copy could only come from a task of the consumer's
/// uid or from root (docs/THREAT-MODEL.md, "The consumer's connection"). A thread whose
/// table is its process's first task's (`kcmp(KCMP_FILES)`) is not read again.
pub fn socket_holders(inode: u64, uids: &[u32]) -> Result<Walked, Error> {
    socket_holders_with(inode, uids, &[])
}

/// [`socket_holders`], with the tasks of the processes `made` read whatever their uid: the
/// processes a holder made since it was last walked (a child may give up its parent's
/// uid, and keep the copy it inherited).
pub fn socket_holders_with(inode: u64, uids: &[u32], made: &[u32]) -> Result<Walked, Error> {
    // Each directory is opened relative to the one above it and each link read relative
    // to its directory: the kernel resolves one name per call, not a path from `/`.
    let proc = dir_at(rustix::fs::CWD, "/proc").context("/proc")?;
    let target = format!("socket:[{inode}]");
    let mut walked = Walked {
        holders: Vec::new(),
        tables: 0,
    };
    for pid in super::procfs::pids().context("/proc")? {
        let any_uid = made.contains(&pid);
        let uids = if any_uid { None } else { Some(uids) };
        if process_holds(&proc, pid, uids, target.as_bytes(), &mut walked.tables)? {
            walked.holders.push(pid);
        }
    }
    Ok(walked)
}

/// Whether a task of process `pid` whose real uid is one of `uids` (any, for `None`) holds `target` (a
/// `socket:[INODE]` link); `tables` counts the descriptor tables read. A process gone
/// meanwhile holds nothing.
fn process_holds(
    proc: &OwnedFd,
    pid: u32,
    uids: Option<&[u32]>,
    target: &[u8],
    tables: &mut usize,
) -> Result<bool, Error> {
    use rustix::fs::Dir;
    let Ok(mut tasks) = dir_at(proc, format!("{pid}/task").as_str()).and_then(Dir::new) else {
        return Ok(false); // exited meanwhile
    };
    let mut seen_tasks = 0usize;
    // The first task read: a later one sharing its table holds what it holds.
    let mut first: Option<u32> = None;
    while let Some(t) = tasks.read() {
        let Ok(t) = t else {
            break; // exited meanwhile
        };
        let Some(tid) = t
            .file_name()
            .to_str()
            .ok()
            .and_then(|t| t.parse::<u32>().ok())
        else {
            continue; // `.`, `..`: not a task
        };
        seen_tasks += 1;
        if seen_tasks > HOLDER_TASKS_PER_PROC_MAX {
            return Err(Error::Found(format!(
                "pid {pid}: more than {HOLDER_TASKS_PER_PROC_MAX} tasks"
            )));
        }
        let Ok(at) = tasks.fd() else { break };
        if uids.is_some_and(|uids| !real_uid(at, tid).is_some_and(|u| uids.contains(&u))) {
            continue; // another user's, or exited meanwhile
        }
        match first {
            Some(f) if crate::kernel::same_descriptor_table(f, tid).unwrap_or(false) => continue,
            Some(_) => {}
            None => first = Some(tid),
        }
        *tables += 1;
        if table_holds(at, pid, tid, target)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether task `tid`'s descriptor table (`tid/fd` under its process's `task` directory
/// `at`) holds `target`; a task gone meanwhile holds nothing.
fn table_holds(
    at: std::os::fd::BorrowedFd<'_>,
    pid: u32,
    tid: u32,
    target: &[u8],
) -> Result<bool, Error> {
    use rustix::fs::{readlinkat_raw, Dir};
    let Ok(mut fds) = dir_at(at, format!("{tid}/fd").as_str()).and_then(Dir::new) else {
        return Ok(false); // exited meanwhile
    };
    // A link longer than `target` reads cut at the buffer's end: never equal to it.
    let mut link = [0u8; 64];
    let mut n = 0usize;
    while let Some(e) = fds.read() {
        let Ok(e) = e else { break };
        if e.file_name().to_bytes().starts_with(b".") {
            continue;
        }
        if n == HOLDER_FDS_PER_TASK_MAX {
            return Err(Error::Found(format!(
                "/proc/{pid}/task/{tid}/fd: more than {HOLDER_FDS_PER_TASK_MAX} descriptors"
            )));
        }
        n += 1;
        if fds
            .fd()
            .and_then(|at| readlinkat_raw(at, e.file_name(), &mut link[..]))
            .is_ok_and(|len| link[..len] == *target)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The real uid of task `tid` (`Uid:` in `tid/status` under its process's `task`
/// directory), or `None` once it has exited.
fn real_uid(tasks: std::os::fd::BorrowedFd<'_>, tid: u32) -> Option<u32> {
    let f = rustix::fs::openat(
        tasks,
        format!("{tid}/status").as_str(),
        rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    // Lossy: a task whose name is not UTF-8 is still read (its name is not parsed).
    super::procfs::read_small_lossy_from(f.into(), super::procfs::PROC_FILE_BYTES_MAX)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A procfs directory under `at`, opened read-only (`O_RDONLY` is 0) to be listed.
/// `O_DIRECTORY` and `O_NOFOLLOW` would add nothing: `PID/task` and `TID/fd` are always
/// directories, never symlinks, and listing anything else fails.
fn dir_at(at: impl std::os::fd::AsFd, name: &str) -> rustix::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::openat(at, name, OFlags::CLOEXEC, Mode::empty())
}

/// Why the other end of a connection is not held by its peer alone.
#[derive(Debug, thiserror::Error)]
pub enum NotSole {
    /// No process holds it any more: the peer closed it, or exited (its descriptors are
    /// closed before its exit is seen by a pidfd).
    #[error("{0}")]
    Gone(String),
    /// Another process holds it, with the peer or without it.
    #[error("{0}")]
    Shared(String),
    /// Its holders could not be found.
    #[error(transparent)]
    Unknown(#[from] Error),
}

impl From<NotSole> for Error {
    fn from(e: NotSole) -> Error {
        match e {
            NotSole::Unknown(e) => e,
            other => Error::Found(other.to_string()),
        }
    }
}

/// The process `pid` is the only holder of the other end of our connected unix socket
/// `ours`: its peer socket is found with `NETLINK_SOCK_DIAG` (`UDIAG_SHOW_PEER` on our
/// socket's inode), then the descriptors of every task of the peer's `uid` and of root
/// are scanned for it ([`socket_holders`] says why no other user's).
pub fn sole_holder(ours: impl std::os::fd::AsFd, pid: u32, uid: u32) -> Result<(), NotSole> {
    sole_holder_walked(ours, pid, uid, &[]).map(|_| ())
}

/// [`sole_holder`], with what its walk read.
fn sole_holder_walked(
    ours: impl std::os::fd::AsFd,
    pid: u32,
    uid: u32,
    made: &[u32],
) -> Result<Walked, NotSole> {
    let peer = peer_socket(&ours)?;
    let walked = socket_holders_with(peer, &[uid, 0], made)?;
    if walked.holders.is_empty() {
        return Err(NotSole::Gone(format!(
            "the connection (peer socket {peer}) is held by no process: pid {pid} closed it \
             or exited"
        )));
    }
    if walked.holders != [pid] {
        return Err(NotSole::Shared(format!(
            "the connection (peer socket {peer}) must be held by pid {pid} alone; its holders are pids {:?}",
            walked.holders
        )));
    }
    Ok(walked)
}

/// The inode of the other end of our connected unix socket `ours`; none is `Gone`.
fn peer_socket(ours: &impl std::os::fd::AsFd) -> Result<u64, NotSole> {
    let st = rustix::fs::fstat(ours).context("our socket")?;
    match super::sockdiag::peer_of(st.st_ino)? {
        Some(peer) => Ok(peer),
        None => Err(NotSole::Gone(format!(
            "socket {}: no peer (the peer closed)",
            st.st_ino
        ))),
    }
}

/// Processes made by a held connection's holder (and by those it made) followed at most:
/// past it the events cannot vouch.
pub const HELD_MADE_MAX: usize = 4096;

/// Process events read in one check of a [`Held`] connection at most: past it the
/// events cannot vouch and the walk stands in.
pub const HELD_EVENTS_MAX: usize = 1 << 16;

/// A connection proved held by one process alone, by one walk of the descriptors, and
/// kept so by the kernel's process events: asked again, it is walked again only when the
/// events cannot vouch that no process could have come to hold a copy since the last walk
/// (docs/THREAT-MODEL.md, "The consumer's connection").
///
/// A copy reaches another process by inheritance, by `SCM_RIGHTS` or by `pidfd_getfd` or
/// `ptrace`. Inheritance makes a fork event naming the holder as parent, or, with
/// `CLONE_PARENT`, the holder's parent; `ptrace` makes an event naming its tracee. So a
/// check walks again when, since the last walk, the holder or its parent made a process,
/// the holder's parent exited (the holder is then another's child), the holder was
/// traced, events were lost, or the events could not be had at all. `SCM_RIGHTS` needs
/// the holder to send it, which `repoch-consume` never does, and `pidfd_getfd` of a
/// non-dumpable process needs `CAP_SYS_PTRACE`: neither makes an event (THREAT-MODEL says
/// what is left).
#[derive(Debug)]
pub struct Held {
    pid: u32,
    uid: u32,
    /// The holder's parent when last walked (a `CLONE_PARENT` fork names it).
    parent: Option<u32>,
    /// The processes the holder and those made the events saw since the subscription (at
    /// most [`HELD_MADE_MAX`]): a walk reads them whatever their uid.
    made: Vec<u32>,
    events: Result<crate::procevents::Subscription, Error>,
    walks: u32,
    /// Whether the last walk found the holder alone: a check after one that did not walks
    /// again, whatever the events.
    proved: bool,
    /// Why the last check walked, or `None` when the events vouched.
    walked_because: Option<String>,
}

impl Held {
    /// Subscribes to the process events, then walks once: `pid` must hold the other end
    /// of `ours` alone ([`sole_holder`]).
    pub fn prove(ours: impl std::os::fd::AsFd, pid: u32, uid: u32) -> Result<Held, NotSole> {
        let events = crate::procevents::Subscription::open();
        let mut held = Held {
            pid,
            uid,
            parent: None,
            made: Vec::new(),
            events,
            walks: 0,
            proved: false,
            walked_because: Some("the first check".into()),
        };
        held.walk(&ours)?;
        Ok(held)
    }

    /// Still held by the proved process alone: its other end open, and either nothing
    /// since the last walk could have copied it (the events vouch) or a new walk says so.
    pub fn again(&mut self, ours: impl std::os::fd::AsFd) -> Result<(), NotSole> {
        // A peer that closed is gone whatever the events say (it closes before its exit
        // is seen).
        let hung_up = rustix::event::PollFlags::RDHUP | rustix::event::PollFlags::HUP;
        if ready_now(&ours, hung_up)? {
            return Err(NotSole::Gone(format!(
                "pid {} closed the connection or exited",
                self.pid
            )));
        }
        peer_socket(&ours)?;
        let why = self.unvouched();
        // Its parent now: re-parented since (its parent's last thread exited without the
        // leader's exit to see), a `CLONE_PARENT` fork would name a parent not followed.
        let parent = super::procfs::parent(self.pid);
        self.walked_because = match (self.proved, parent == self.parent) {
            (false, _) => Some("the last walk did not find it held by its peer alone".into()),
            (true, false) => Some(format!(
                "pid {}'s parent is {parent:?}, not {:?} as at the last walk",
                self.pid, self.parent
            )),
            (true, true) => why,
        };
        match self.walked_because {
            None => Ok(()),
            Some(_) => self.walk(&ours),
        }
    }

    /// The walks of the descriptors done so far (1 when the events vouched every time).
    pub fn walks(&self) -> u32 {
        self.walks
    }

    /// Why the last check walked, or `None` when the events vouched for it.
    pub fn walked_because(&self) -> Option<&str> {
        self.walked_because.as_deref()
    }

    fn walk(&mut self, ours: &impl std::os::fd::AsFd) -> Result<(), NotSole> {
        // The parent read before the walk: a fork it makes after shows in the events.
        self.parent = super::procfs::parent(self.pid);
        self.walks = self.walks.saturating_add(1);
        let walked = sole_holder_walked(ours, self.pid, self.uid, &self.made);
        self.proved = walked.is_ok();
        walked.map(|_| ())
    }

    /// Why the events since the last check cannot vouch that no other process came to hold
    /// the connection; `None` when they can. Reads every event queued (at most
    /// [`HELD_EVENTS_MAX`]).
    fn unvouched(&mut self) -> Option<String> {
        let events = match &mut self.events {
            Ok(s) => s,
            Err(e) => return Some(format!("no process events here: {e}")),
        };
        let mut made = std::mem::take(&mut self.made);
        let why = drain(events, (self.pid, self.parent), &mut made);
        self.made = made;
        why
    }
}

/// Reads every event queued on `events` (at most [`HELD_EVENTS_MAX`]) for the holder `pid`
/// whose parent is `parent`: why they cannot vouch, or `None`. A process the holder (or
/// one it made, or its parent) made joins `made`, to be read whatever its uid.
fn drain(
    events: &mut crate::procevents::Subscription,
    (pid, parent): (u32, Option<u32>),
    made: &mut Vec<u32>,
) -> Option<String> {
    use crate::procevents::{Event, Next};
    let mut why = None;
    for _ in 0..HELD_EVENTS_MAX {
        let seen = match events.read() {
            Next::Empty => return why,
            Next::Lost(w) => Some(format!("process events lost: {w}")),
            Next::Event(m) => match m.event {
                Event::Fork {
                    parent_tgid,
                    child_pid,
                    child_tgid,
                } if child_pid == child_tgid
                    && (parent_tgid == pid
                        || Some(parent_tgid) == parent
                        || made.contains(&parent_tgid)) =>
                {
                    if made.len() < HELD_MADE_MAX {
                        made.push(child_tgid);
                        Some(format!("pid {parent_tgid} made process {child_tgid}"))
                    } else {
                        Some(format!(
                            "over {HELD_MADE_MAX} processes made (HELD_MADE_MAX)"
                        ))
                    }
                }
                // Any task of the parent: its leader may have exited before.
                Event::Exit { pid: _, tgid } if Some(tgid) == parent => {
                    Some(format!("pid {pid}'s parent {tgid} exited"))
                }
                Event::Ptrace { tgid, tracer_tgid } if tgid == pid && tracer_tgid != 0 => {
                    Some(format!("pid {tracer_tgid} traced pid {pid}"))
                }
                _ => None,
            },
        };
        if why.is_none() {
            why = seen;
        }
    }
    Some(
        why.unwrap_or_else(|| {
            format!("over {HELD_EVENTS_MAX} process events since the last check")
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held by the tests a thread's unshared descriptor table would disturb: that table is a
    /// copy of every descriptor the process holds at that moment, another test's included.
    static DESCRIPTOR_TABLE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    use std::os::unix::fs::MetadataExt as _;

    fn inode(fd: &impl std::os::fd::AsFd) -> u64 {
        rustix::fs::fstat(fd).unwrap().st_ino
    }

    /// Whether `/proc/self/fd` (the thread-group leader's table) names socket `ino`.
    fn in_leaders_table(ino: u64) -> bool {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .any(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.ino() == ino))
    }

    /// `python3 -c script args…` holding `socket` as its stdin, its stdout read line by
    /// line (each line a barrier the script passes).
    fn python_holding(
        script: &str,
        args: &[&std::path::Path],
        socket: std::os::unix::net::UnixStream,
    ) -> (
        std::process::Child,
        std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    ) {
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .args(args)
            .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
                socket,
            )))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
        (child, out)
    }

    #[test]
    fn a_connection_whose_peer_closed_is_gone_and_one_held_by_another_is_shared() {
        let _alone = DESCRIPTOR_TABLE.lock().unwrap_or_else(|e| e.into_inner());
        // A consumer that exits right after its acknowledgement closes its end before its
        // pidfd says it exited: the last word reads `consumer-lost`, not
        // `consumer-rejected` ("its holders are pids []").
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let (me, uid) = (std::process::id(), rustix::process::getuid().as_raw());
        sole_holder(&ours, me, uid).unwrap();
        assert!(matches!(
            sole_holder(&ours, me + 1, uid),
            Err(NotSole::Shared(_))
        ));
        drop(theirs);
        let after = sole_holder(&ours, me, uid);
        assert!(matches!(after, Err(NotSole::Gone(_))), "{after:?}");
    }

    #[test]
    fn a_socket_we_hold_is_held_by_us_alone_and_a_closed_one_by_no_one() {
        let _alone = DESCRIPTOR_TABLE.lock().unwrap_or_else(|e| e.into_inner());
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let me = std::process::id();
        let uid = rustix::process::getuid().as_raw();
        assert_eq!(socket_holders(inode(&a), &[uid]).unwrap().holders, [me]);
        sole_holder(&b, me, uid).unwrap();
        // Tasks of other users are not read.
        assert_eq!(
            socket_holders(inode(&a), &[uid + 1]).unwrap().holders,
            Vec::<u32>::new()
        );
        let ino = inode(&a);
        drop(a);
        assert_eq!(
            socket_holders(ino, &[uid]).unwrap().holders,
            Vec::<u32>::new()
        );
    }

    #[test]
    fn a_connection_held_only_in_a_threads_own_descriptor_table_is_found() {
        let _alone = DESCRIPTOR_TABLE.lock().unwrap_or_else(|e| e.into_inner());
        // A thread that unshared its descriptor table holds sockets its process's
        // `/proc/PID/fd` never shows: every task's table is read.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_FILES).unwrap();
            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            tx.send((inode(&a), inode(&b))).unwrap();
            let _ = wait.recv();
            drop((a, b));
        });
        let (a, b) = rx.recv().unwrap();
        let uid = [rustix::process::getuid().as_raw()];
        let found = (
            socket_holders(a, &uid)
                .map(|w| w.holders)
                .map_err(String::from),
            socket_holders(b, &uid)
                .map(|w| w.holders)
                .map_err(String::from),
        );
        let premise = (in_leaders_table(a), in_leaders_table(b));
        done.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(premise, (false, false), "the leader's table shows them");
        let me = std::process::id();
        assert_eq!(found, (Ok(vec![me]), Ok(vec![me])));
    }

    /// Threads that share their process's descriptor table are read once; a thread that
    /// unshared its table is read too.
    #[test]
    fn threads_sharing_a_descriptor_table_are_read_once_and_an_unshared_one_again() {
        let _alone = DESCRIPTOR_TABLE.lock().unwrap_or_else(|e| e.into_inner());
        let me = std::process::id();
        let uid = [rustix::process::getuid().as_raw()];
        let proc = dir_at(rustix::fs::CWD, "/proc").unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        let (up, started) = std::sync::mpsc::channel();
        let spawn = |unshare: bool| {
            let (rx, up) = (rx.clone(), up.clone());
            std::thread::spawn(move || {
                if unshare {
                    nix::sched::unshare(nix::sched::CloneFlags::CLONE_FILES).unwrap();
                }
                up.send(()).unwrap();
                let _ = rx.lock().unwrap().recv();
            })
        };
        let mut threads: Vec<_> = (0..4).map(|_| spawn(false)).collect();
        (0..4).for_each(|_| started.recv().unwrap());
        // No socket has inode 0: every task of ours is looked at.
        let mut tables = 0;
        assert!(!process_holds(&proc, me, Some(&uid), b"socket:[0]", &mut tables).unwrap());
        assert_eq!(
            tables, 1,
            "four threads and the test harness's share one table"
        );
        threads.push(spawn(true));
        started.recv().unwrap();
        let mut tables = 0;
        assert!(!process_holds(&proc, me, Some(&uid), b"socket:[0]", &mut tables).unwrap());
        assert_eq!(tables, 2, "the unshared thread's table is its own");
        for _ in &threads {
            tx.send(()).unwrap();
        }
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert!(crate::kernel::same_descriptor_table(me, me).unwrap());
        assert!(crate::kernel::same_descriptor_table(me, u32::MAX >> 1).is_err());
    }

    /// Proved once, a connection is walked again when its holder made a process: a child
    /// that inherited it is found. Without the events nothing would say to walk again.
    #[test]
    fn a_held_connection_copied_by_a_fork_after_its_walk_is_found_shared() {
        let _alone = DESCRIPTOR_TABLE.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = crate::procevents::in_initial_namespaces() {
            eprintln!("skipped: no process events here: {e}");
            return;
        }
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let (me, uid) = (std::process::id(), rustix::process::getuid().as_raw());
        let mut held = Held::prove(&ours, me, uid).unwrap();
        assert_eq!(held.walks(), 1);
        held.again(&ours).unwrap();
        // Other tests of this process may fork meanwhile: then, and only then, it walked.
        if held.walks() > 1 {
            let why = held.walked_because().unwrap_or_default().to_owned();
            assert!(why.contains(&format!("pid {me} made process")), "{why}");
        }
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
                theirs,
            )))
            .spawn()
            .unwrap();
        let walks = held.walks();
        let shared = held.again(&ours);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            matches!(shared, Err(NotSole::Shared(ref s)) if s.contains(&child.id().to_string())),
            "{shared:?}"
        );
        assert_eq!(held.walks(), walks + 1);
        // Not proved any more: the next check walks whatever the events say; the child is
        // gone and took the only copy of the other end with it.
        let gone = held.again(&ours);
        assert!(matches!(gone, Err(NotSole::Gone(_))), "{gone:?}");
    }

    /// A holder whose name is not UTF-8 (any process can `prctl(PR_SET_NAME)` one) is
    /// still read: its status is read lossily (it was skipped as another user's).
    #[test]
    fn a_holder_whose_name_is_not_utf8_is_found() {
        let _alone = DESCRIPTOR_TABLE.lock().unwrap_or_else(|e| e.into_inner());
        let (_ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let ino = inode(&theirs);
        // Only a process itself can name itself so (`/proc/PID/comm` of another: EINVAL).
        let (mut child, mut out) = python_holding(
            "import ctypes, time\n\
             ctypes.CDLL(None).prctl(15, b'old\\xffroot', 0, 0, 0)\n\
             print('named', flush=True)\n\
             time.sleep(60)",
            &[],
            theirs,
        );
        assert_eq!(out.next().unwrap().unwrap(), "named");
        let comm = std::fs::read(format!("/proc/{}/comm", child.id())).unwrap();
        assert!(std::str::from_utf8(&comm).is_err(), "{comm:?}");
        let uid = rustix::process::getuid().as_raw();
        let found = socket_holders(ino, &[uid]).map(|w| w.holders);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found.unwrap(), [child.id()]);
    }

    /// The holder re-parented after the walk (its parent's last thread exits after the
    /// parent's leader already had: no exit of a process is seen): the next check walks
    /// again, saying why. Without it the events vouched, and a `CLONE_PARENT` fork would
    /// name the new parent, which is not followed.
    #[test]
    fn a_holder_re_parented_after_its_walk_is_walked_again() {
        let _alone = DESCRIPTOR_TABLE.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = crate::procevents::in_initial_namespaces() {
            eprintln!("skipped: no process events here: {e}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let cue = dir.path().join("cue");
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        // The launcher starts the holder from a thread, then its leader exits.
        let script = "import ctypes, os, subprocess, sys, threading, time\n\
             def t():\n\
             \x20   p = subprocess.Popen(['sleep', '60'], stdin=0, stdout=subprocess.DEVNULL)\n\
             \x20   os.close(0)\n\
             \x20   print(p.pid, flush=True)\n\
             \x20   while not os.path.exists(sys.argv[1]): time.sleep(0.01)\n\
             \x20   os._exit(0)\n\
             threading.Thread(target=t).start()\n\
             time.sleep(0.3)\n\
             ctypes.CDLL(None).pthread_exit(None)\n";
        let (mut launcher, mut out) = python_holding(script, &[&cue], theirs);
        let holder: u32 = out.next().unwrap().unwrap().trim().parse().unwrap();
        let lpid = launcher.id();
        let leader_gone = || {
            std::fs::read_to_string(format!("/proc/{lpid}/status"))
                .is_ok_and(|s| s.contains("State:\tZ"))
        };
        for _ in 0..500 {
            if leader_gone() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(leader_gone(), "the launcher's leader did not exit");
        let uid = rustix::process::getuid().as_raw();
        let mut held = Held::prove(&ours, holder, uid).unwrap();
        std::fs::write(&cue, "").unwrap();
        for _ in 0..500 {
            if crate::procfs::parent(holder) != Some(lpid) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let again = held.again(&ours);
        let why = held.walked_because().map(str::to_owned);
        if let Some(p) = rustix::process::Pid::from_raw(holder as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
        let _ = launcher.wait();
        again.unwrap();
        assert_eq!(held.walks(), 2, "{why:?}");
        assert!(
            why.as_deref().is_some_and(|w| w.contains("parent")),
            "{why:?}"
        );
    }

    /// A child the holder makes after the walk that gives up its parent's uid keeps the
    /// copy it inherited: it is read whatever its uid (it was skipped as another user's).
    #[test]
    fn a_child_of_the_holder_that_gives_up_its_uid_is_still_read() {
        let _alone = DESCRIPTOR_TABLE.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = crate::procevents::in_initial_namespaces() {
            eprintln!("skipped: no process events here: {e}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let cue = dir.path().join("cue");
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let script = "import os, sys, time\n\
             print('ready', flush=True)\n\
             while not os.path.exists(sys.argv[1]): time.sleep(0.01)\n\
             if os.fork() == 0:\n\
             \x20   os.setresgid(65534, 65534, 65534)\n\
             \x20   os.setresuid(65534, 65534, 65534)\n\
             \x20   print(os.getpid(), flush=True)\n\
             \x20   time.sleep(60)\n\
             \x20   os._exit(0)\n\
             time.sleep(60)\n";
        let (mut holder, mut out) = python_holding(script, &[&cue], theirs);
        assert_eq!(out.next().unwrap().unwrap(), "ready");
        let uid = rustix::process::getuid().as_raw();
        let mut held = Held::prove(&ours, holder.id(), uid).unwrap();
        std::fs::write(&cue, "").unwrap();
        let child: u32 = out.next().unwrap().unwrap().trim().parse().unwrap();
        let again = held.again(&ours);
        for p in [child, holder.id()] {
            if let Some(p) = rustix::process::Pid::from_raw(p as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
        let _ = holder.wait();
        assert!(
            matches!(&again, Err(NotSole::Shared(s)) if s.contains(&child.to_string())),
            "{again:?}"
        );
    }
}

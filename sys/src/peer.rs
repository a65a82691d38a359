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
/// uid or from root (docs/THREAT-MODEL.md, "The consumer's connection").
pub fn socket_holders(inode: u64, uids: &[u32]) -> Result<Vec<u32>, Error> {
    use rustix::fs::{readlinkat_raw, Dir, CWD};
    // Each directory is opened relative to the one above it and each link read relative
    // to its directory: the kernel resolves one name per call, not a path from `/`.
    let proc = dir_at(CWD, "/proc").context("/proc")?;
    let target = format!("socket:[{inode}]");
    // A link longer than `target` reads cut at the buffer's end: never equal to it.
    let mut link = [0u8; 64];
    let mut holders = Vec::new();
    for pid in super::procfs::pids().context("/proc")? {
        let Ok(mut tasks) = dir_at(&proc, format!("{pid}/task").as_str()).and_then(Dir::new) else {
            continue; // exited meanwhile
        };
        let mut seen_tasks = 0usize;
        'tasks: while let Some(t) = tasks.read() {
            let Ok(t) = t else {
                break; // exited meanwhile
            };
            let Ok(tid) = t.file_name().to_str() else {
                continue; // not a task
            };
            if tid.starts_with('.') {
                continue;
            }
            seen_tasks += 1;
            if seen_tasks > HOLDER_TASKS_PER_PROC_MAX {
                return Err(Error::Found(format!(
                    "pid {pid}: more than {HOLDER_TASKS_PER_PROC_MAX} tasks"
                )));
            }
            let Ok(at) = tasks.fd() else { break };
            if !real_uid(at, tid).is_some_and(|u| uids.contains(&u)) {
                continue; // another user's, or exited meanwhile
            }
            let Ok(mut fds) = dir_at(at, format!("{tid}/fd").as_str()).and_then(Dir::new) else {
                continue; // exited meanwhile
            };
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
                    .is_ok_and(|len| link[..len] == *target.as_bytes())
                {
                    holders.push(pid);
                    break 'tasks;
                }
            }
        }
    }
    Ok(holders)
}

/// The real uid of task `tid` (`Uid:` in `tid/status` under its process's `task`
/// directory), or `None` once it has exited.
fn real_uid(tasks: std::os::fd::BorrowedFd<'_>, tid: &str) -> Option<u32> {
    let f = rustix::fs::openat(
        tasks,
        format!("{tid}/status").as_str(),
        rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()?;
    super::procfs::read_small_from(f.into(), super::procfs::PROC_FILE_BYTES_MAX)
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
    let st = rustix::fs::fstat(&ours).context("our socket")?;
    let Some(peer) = super::sockdiag::peer_of(st.st_ino)? else {
        return Err(NotSole::Gone(format!(
            "socket {}: no peer (the peer closed)",
            st.st_ino
        )));
    };
    let holders = socket_holders(peer, &[uid, 0])?;
    if holders.is_empty() {
        return Err(NotSole::Gone(format!(
            "the connection (peer socket {peer}) is held by no process: pid {pid} closed it \
             or exited"
        )));
    }
    if holders != [pid] {
        return Err(NotSole::Shared(format!(
            "the connection (peer socket {peer}) must be held by pid {pid} alone; its holders are pids {holders:?}"
        )));
    }
    Ok(())
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
        assert_eq!(socket_holders(inode(&a), &[uid]).unwrap(), [me]);
        sole_holder(&b, me, uid).unwrap();
        // Tasks of other users are not read.
        assert_eq!(
            socket_holders(inode(&a), &[uid + 1]).unwrap(),
            Vec::<u32>::new()
        );
        let ino = inode(&a);
        drop(a);
        assert_eq!(socket_holders(ino, &[uid]).unwrap(), Vec::<u32>::new());
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
            socket_holders(a, &uid).map_err(String::from),
            socket_holders(b, &uid).map_err(String::from),
        );
        let premise = (in_leaders_table(a), in_leaders_table(b));
        done.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(premise, (false, false), "the leader's table shows them");
        let me = std::process::id();
        assert_eq!(found, (Ok(vec![me]), Ok(vec![me])));
    }
}

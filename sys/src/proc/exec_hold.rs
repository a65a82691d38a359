//! The exec hold (docs/THREAT-MODEL.md, "Who can change a fact"): from the first
//! observation to the dispatch, every exec of an enrolled executable waits in the kernel for
//! repochd's answer (fanotify, `FAN_OPEN_EXEC_PERM` on each file's inode). While the exec
//! waits, the process is alive and still its old self: it is judged as the walk will judge
//! it once the exec is done (a principal's: one of its uids is a principal's, or it holds a
//! capability in our user namespace; the exec makes the saved uid the effective one, and
//! keeps only ambient capabilities), `proc::principal_after_exec`. A principal's exec is denied (`execve` fails with `EPERM`) and kept as
//! an attempt, which the observations report; another user's is allowed. The process
//! events name a pid, not a file, and one that exits before the reader looks cannot be
//! judged: the hold leaves no such process, since the file cannot run before it is judged.
//!
//! The hold needs `CAP_SYS_ADMIN` (fanotify's permission events); without it the process
//! space is held as before, and the `process-space` fact says the hold is missing. Closing
//! the group (repochd gone) lets every waiting exec go on: the kernel answers "allow".

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use nix::sys::fanotify::{
    EventFFlags, Fanotify, FanotifyResponse, InitFlags, MarkFlags, MaskFlags, Response,
};

use crate::error::Error;

/// Attempts kept (the first ones); past it, only counted.
pub const ATTEMPTS_KEPT_MAX: usize = 16;

/// Files one hold marks: the manifest's bound on executables, with room.
pub const MARKED_MAX: usize = 64;

/// A principal's exec of an enrolled executable, denied by the hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// The process that tried, and its real uid (`None`: its status could not be read,
    /// and it was denied for that).
    pub pid: u32,
    pub uid: Option<u32>,
    /// The file it tried to run: the enrolled path it was held by.
    pub path: String,
}

impl std::fmt::Display for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.uid {
            Some(uid) => write!(f, "pid {} (uid {uid}) tried to exec it: denied", self.pid),
            None => write!(
                f,
                "pid {} (its status unreadable) tried to exec it: denied",
                self.pid
            ),
        }
    }
}

/// Each file held, as (device, inode), and the enrolled path it was held by.
type Marked = Mutex<Vec<((u64, u64), String)>>;

/// What the reader found, shared with the [`ExecHold`].
#[derive(Debug, Default)]
struct Found {
    attempts: Vec<Attempt>,
    more: u64,
    /// The reader ended (why): nothing it says holds any more.
    dead: Option<String>,
}

/// Every exec of the marked files held for a judgement, until dropped.
#[derive(Debug)]
pub struct ExecHold {
    group: Arc<Fanotify>,
    found: Arc<Mutex<Found>>,
    /// Each file held, (device, inode), and the path it was held by (shared with the
    /// reader, which names an attempt's file by it).
    marked: Arc<Marked>,
    /// Written to on drop: the reader's poll wakes and it ends.
    stop: OwnedFd,
    reader: Option<std::thread::JoinHandle<()>>,
}

fn os(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Found(format!("exec hold: {what}: {e}"))
}

impl ExecHold {
    /// Holds every exec of the files at `paths` (each followed to its inode now) for a
    /// judgement against `principals`.
    pub fn start(paths: &[&str], principals: &[u32]) -> Result<ExecHold, Error> {
        let group = Fanotify::init(
            // FAN_REPORT_TID: the event names the thread that execs, whose credentials are
            // the exec's (a process's threads may each hold their own: one root thread of a
            // process whose leader dropped to another uid runs the file as root).
            InitFlags::FAN_CLASS_CONTENT
                | InitFlags::FAN_CLOEXEC
                | InitFlags::FAN_NONBLOCK
                | InitFlags::FAN_REPORT_TID,
            EventFFlags::O_RDONLY | EventFFlags::O_CLOEXEC | EventFFlags::O_LARGEFILE,
        )
        .map_err(|e| os("fanotify_init", e))?;
        let (wake, stop) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| os("pipe", e))?;
        let mut hold = ExecHold {
            group: Arc::new(group),
            found: Arc::default(),
            marked: Arc::default(),
            stop,
            reader: None,
        };
        hold.mark(paths)?;
        let (group, found) = (Arc::clone(&hold.group), Arc::clone(&hold.found));
        let marked = Arc::clone(&hold.marked);
        let principals = principals.to_vec();
        let reader = std::thread::Builder::new()
            .name("exec-hold".into())
            .spawn(move || read(&group, &wake, (&principals, &marked), &found))
            .map_err(|e| os("a reader thread", e))?;
        hold.reader = Some(reader);
        Ok(hold)
    }

    /// Holds the files at `paths` too (a path that names another inode now than when the
    /// hold began: both held). A missing file is held once it is there again only through
    /// a later call.
    pub fn mark(&mut self, paths: &[&str]) -> Result<(), Error> {
        for p in paths {
            let st = match rustix::fs::stat(*p) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(os(p, e)),
            };
            // Files alone: a mark on a directory would hold the execs of every file in it
            // (the parent's mark is asked for its children's opens).
            if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile
            {
                continue;
            }
            let id = (st.st_dev, st.st_ino);
            let mut marked = self.marked.lock().unwrap_or_else(|p| p.into_inner());
            if marked.iter().any(|(m, _)| *m == id) {
                continue;
            }
            if marked.len() >= MARKED_MAX {
                return Err(os(p, format!("over {MARKED_MAX} files held")));
            }
            self.group
                .mark(
                    MarkFlags::FAN_MARK_ADD,
                    MaskFlags::FAN_OPEN_EXEC_PERM,
                    rustix::fs::CWD,
                    Some(*p),
                )
                .map_err(|e| os(p, e))?;
            marked.push((id, (*p).to_owned()));
        }
        Ok(())
    }

    /// The principals' execs denied so far (the first [`ATTEMPTS_KEPT_MAX`]), how many more,
    /// and why the hold stopped holding, if it did.
    pub fn attempts(&self) -> (Vec<Attempt>, u64, Option<String>) {
        let f = self.found.lock().unwrap_or_else(|p| p.into_inner());
        (f.attempts.clone(), f.more, f.dead.clone())
    }
}

impl Drop for ExecHold {
    fn drop(&mut self) {
        let _ = rustix::io::write(&self.stop, b"x");
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// The reader: answers every event as it comes, until `wake` is readable.
fn read(
    group: &Fanotify,
    wake: &OwnedFd,
    (principals, marked): (&[u32], &Marked),
    found: &Mutex<Found>,
) {
    use rustix::event::{poll, PollFd, PollFlags};
    let me = std::process::id();
    loop {
        let mut fds = [
            PollFd::new(group, PollFlags::IN),
            PollFd::new(wake, PollFlags::IN),
        ];
        if let Err(e) = poll(&mut fds, None) {
            if e == rustix::io::Errno::INTR {
                continue;
            }
            return end(found, format!("poll: {e}"));
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        let events = match group.read_events() {
            Ok(events) => events,
            Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return end(found, format!("read: {e}")),
        };
        for event in events {
            answer(group, &event, me, (principals, marked), found);
        }
    }
}

/// Judges the process of one event and answers the kernel: allowed when it is not a
/// principal's (or is repochd's own), else denied and kept as an attempt.
fn answer(
    group: &Fanotify,
    event: &nix::sys::fanotify::FanotifyEvent,
    me: u32,
    (principals, marked): (&[u32], &Marked),
    found: &Mutex<Found>,
) {
    let Some(fd) = event.fd() else {
        // An overflow of the queue: permission events are never dropped (the exec waits),
        // so no exec went unjudged; said all the same.
        return end(found, "the event queue overflowed".into());
    };
    let tid = u32::try_from(event.pid()).unwrap_or(0);
    let file = rustix::fs::fstat(fd)
        .map(|st| (st.st_dev, st.st_ino))
        .unwrap_or((0, 0));
    let path = marked
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(m, _)| *m == file)
        .map_or_else(String::new, |(_, p)| p.clone());
    let verdict = super::principal_after_exec(tid, principals, fd);
    // repochd's own threads never run an enrolled file; were one to, it is not the old root.
    let allow = verdict.is_some_and(|(principal, _, tgid)| !principal || tgid == Some(me));
    let pid = verdict.and_then(|(_, _, tgid)| tgid).unwrap_or(tid);
    if !allow {
        let mut f = found.lock().unwrap_or_else(|p| p.into_inner());
        let uid = verdict.map(|(_, uid, _)| uid);
        if f.attempts.len() < ATTEMPTS_KEPT_MAX {
            f.attempts.push(Attempt { pid, uid, path });
        } else {
            f.more = f.more.saturating_add(1);
        }
    }
    let response = match allow {
        true => Response::FAN_ALLOW,
        false => Response::FAN_DENY,
    };
    if let Err(e) = group.write_response(FanotifyResponse::new(fd, response)) {
        end(found, format!("answering pid {pid} (thread {tid}): {e}"));
    }
}

/// Notes why the hold no longer holds (the first reason).
fn end(found: &Mutex<Found>, why: String) {
    let mut f = found.lock().unwrap_or_else(|p| p.into_inner());
    f.dead.get_or_insert(why);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principals_exec_of_a_held_file_is_denied_and_a_directory_holds_nothing() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root (fanotify's permission events)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (held, beside) = (dir.path().join("old-root"), dir.path().join("beside"));
        for f in [&held, &beside] {
            std::fs::copy("/bin/true", f).unwrap();
        }
        let paths = [dir.path().to_str().unwrap(), held.to_str().unwrap()];
        let hold = ExecHold::start(&paths, &[0]).unwrap();
        // A file beside it, in the directory named too: runs (a directory holds nothing).
        assert!(std::process::Command::new(&beside)
            .status()
            .unwrap()
            .success());
        // By another user whose saved uid is still root's (setpriv --reuid sets the real
        // and effective ones): no principal once the exec is done (it makes the saved uid
        // the effective one, and clears the capabilities): it runs.
        let other = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&held)
            .status()
            .unwrap();
        assert!(other.success(), "{other}");
        // The held file, by root (a principal): denied, EPERM, and kept.
        let denied = std::process::Command::new(&held).status().unwrap_err();
        assert_eq!(denied.raw_os_error(), Some(1), "{denied}");
        let (attempts, more, dead) = hold.attempts();
        assert_eq!((attempts.len(), more, dead), (1, 0, None));
        assert_eq!(attempts[0].path, held.to_str().unwrap());
        assert_eq!(attempts[0].uid, Some(0));
        drop(hold);
        // The hold gone, it runs.
        assert!(std::process::Command::new(&held)
            .status()
            .unwrap()
            .success());
    }
}

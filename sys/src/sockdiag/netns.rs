//! Network namespaces: every one a task is in, entering one from a short-lived thread, the
//! host's; and what needs them all (a socket's peer wherever it lives, every socket bound
//! to a file).

use crate::error::{Context as _, Error};
use std::collections::BTreeMap;
use std::path::PathBuf;

use super::*;
use crate::proc::TASKS_PER_PROC_MAX;
use crate::procfs::pids;

/// Distinct network namespaces examined.
pub const NETNS_MAX: usize = 4096;
/// Tasks whose network namespace is looked at, over all processes.
pub const NETNS_TASKS_MAX: usize = 1 << 20;
/// Handles (`/proc/PID/task/TID/ns/net` paths) kept per namespace, tried in turn when the
/// task behind one has exited.
pub const NETNS_HANDLES_MAX: usize = 4;

/// The socket inode of the peer of socket `inode` (e.g. one's own connected socket, from
/// `fstat`); `None` if unconnected or no such socket. The socket is looked for in this
/// thread's network namespace, then in the host's ([`adopt_host_netns`]), then in every
/// other a task is in: an accepted connection lives in its listening socket's namespace,
/// which for a socket systemd passed is systemd's, not repochd's own (`PrivateNetwork=yes`).
pub fn peer_of(inode: u64) -> Result<Option<u64>, Error> {
    if let Some(s) = unix_socket(inode, None)? {
        return Ok(s.peer);
    }
    let host = match in_host_netns(|| unix_socket(inode, None))? {
        Some((_, Some(s))) => return Ok(s.peer),
        Some((id, None)) => Some(id),
        None => None,
    };
    let own = own_netns()?;
    for ns in network_namespaces()? {
        if ns.id == own || Some(ns.id) == host {
            continue;
        }
        let got = in_netns(&ns, || unix_socket(inode, None))
            .context(format_args!("network namespace {}", ns.id))?;
        if let Some(Some(s)) = got {
            return Ok(s.peer);
        }
    }
    Ok(None)
}

/// A network namespace: its nsfs identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NetnsId {
    pub dev: u64,
    pub ino: u64,
}

impl std::fmt::Display for NetnsId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "net:[{}]", self.ino)
    }
}

/// A network namespace and a few paths that open it.
#[derive(Debug, Clone)]
pub struct Netns {
    pub id: NetnsId,
    pub handles: Vec<PathBuf>,
}

pub(super) fn ns_identity(p: &std::path::Path) -> Option<NetnsId> {
    let st = rustix::fs::stat(p).ok()?;
    Some(NetnsId {
        dev: st.st_dev,
        ino: st.st_ino,
    })
}

/// This thread's network namespace.
pub fn own_netns() -> Result<NetnsId, Error> {
    ns_identity(std::path::Path::new("/proc/thread-self/ns/net"))
        .ok_or_else(|| "/proc/thread-self/ns/net: cannot stat".into())
}

/// The distinct network namespaces any task is in (`/proc/PID/task/TID/ns/net`; a thread
/// may be in another one than its leader) or that `ip netns` names (`/run/netns/*`).
/// A namespace kept alive only by a socket or an fd is not found here.
pub fn network_namespaces() -> Result<Vec<Netns>, Error> {
    // Every namespace lives on the one nsfs: its device is our own namespace's. Anything
    // else (an `ip netns` name being added or deleted is a plain file for a moment) is
    // not a namespace.
    let nsfs = own_netns()?.dev;
    let mut found: BTreeMap<NetnsId, Vec<PathBuf>> = BTreeMap::new();
    let mut add = |p: PathBuf| -> Result<(), Error> {
        let Some(id) = ns_identity(&p).filter(|id| id.dev == nsfs) else {
            return Ok(()); // the task exited meanwhile, or not a namespace
        };
        if !found.contains_key(&id) && found.len() == NETNS_MAX {
            return Err(Error::Found(format!(
                "more than {NETNS_MAX} network namespaces"
            )));
        }
        let h = found.entry(id).or_default();
        if h.len() < NETNS_HANDLES_MAX {
            h.push(p);
        }
        Ok(())
    };
    let mut tasks_seen = 0usize;
    for pid in pids().context("/proc")? {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue; // exited
        };
        for t in tasks.take(TASKS_PER_PROC_MAX).flatten() {
            tasks_seen += 1;
            if tasks_seen > NETNS_TASKS_MAX {
                return Err(Error::Found(format!("more than {NETNS_TASKS_MAX} tasks")));
            }
            add(t.path().join("ns/net"))?;
        }
    }
    match std::fs::read_dir("/run/netns") {
        Ok(named) => {
            for e in named.take(NETNS_MAX) {
                add(e.context("/run/netns")?.path())?;
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::Found(format!("/run/netns: {e}"))),
    }
    Ok(found
        .into_iter()
        .map(|(id, handles)| Netns { id, handles })
        .collect())
}

/// Runs `f` in network namespace `ns`, on a short-lived thread that `setns()`es into it
/// (the caller's threads keep their namespace). `Ok(None)` when every handle has vanished
/// (its tasks exited); an error when the namespace cannot be entered.
pub fn in_netns<T: Send>(
    ns: &Netns,
    f: impl FnOnce() -> Result<T, Error> + Send,
) -> Result<Option<T>, Error> {
    let mut fd = None;
    for h in &ns.handles {
        match rustix::fs::open(
            h,
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        ) {
            Ok(f) => {
                // The handle must still be the namespace enumerated (pids are reused).
                let st = rustix::fs::fstat(&f).context(format_args!("{}", h.display()))?;
                if st.st_dev == ns.id.dev && st.st_ino == ns.id.ino {
                    fd = Some(f);
                    break;
                }
            }
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::SRCH) => {}
            Err(e) => return Err(Error::Found(format!("{}: {e}", h.display()))),
        }
    }
    let Some(fd) = fd else { return Ok(None) };
    in_netns_fd(&fd, ns.id, f).map(Some)
}

/// Runs `f` on a short-lived thread that `setns()`es into the namespace open at `fd`.
pub(super) fn in_netns_fd<T: Send>(
    fd: &std::os::fd::OwnedFd,
    id: NetnsId,
    f: impl FnOnce() -> Result<T, Error> + Send,
) -> Result<T, Error> {
    std::thread::scope(|s| {
        s.spawn(move || {
            nix::sched::setns(fd, nix::sched::CloneFlags::CLONE_NEWNET)
                .context(format_args!("setns into {id}"))?;
            f()
        })
        .join()
        .map_err(|_| format!("the thread observing {id} panicked"))?
    })
}

/// The host's network namespace, kept open for the process's life: see
/// [`adopt_host_netns`].
pub(super) static HOST_NETNS: std::sync::OnceLock<(NetnsId, std::os::fd::OwnedFd)> =
    std::sync::OnceLock::new();

/// Records the network namespace that the listening socket `listener` lives in as the
/// host's: TCP and UDP ports are looked for there besides the observer's own namespace,
/// and a connection's peer is looked for there first. repochd calls it with its admin
/// socket at start: socket-activated and in its own, empty namespace (`PrivateNetwork=yes`
/// in `systemd/repochd.service`), that socket is in systemd's. Not recorded (an error)
/// when the socket is in no namespace a task is in.
pub fn adopt_host_netns(listener: impl std::os::fd::AsFd) -> Result<NetnsId, Error> {
    let inode = inode_of(listener)?;
    let own = own_netns()?;
    let open_own = || {
        rustix::fs::open(
            "/proc/thread-self/ns/net",
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .context("/proc/thread-self/ns/net")
    };
    let (id, fd) = if unix_socket(inode, None)?.is_some() {
        (own, open_own()?)
    } else {
        let mut found = None;
        for ns in network_namespaces()? {
            if ns.id == own {
                continue;
            }
            // Entered, the thread opens its namespace for us: the handle is then this very
            // namespace whatever became of the task it was found through.
            let got = in_netns(&ns, || {
                Ok(match unix_socket(inode, None)? {
                    Some(_) => Some(open_own()?),
                    None => None,
                })
            })
            .context(format_args!("network namespace {}", ns.id))?;
            if let Some(Some(fd)) = got {
                found = Some((ns.id, fd));
                break;
            }
        }
        found.ok_or_else(|| format!("socket {inode}: in no network namespace a task is in"))?
    };
    let _ = HOST_NETNS.set((id, fd));
    Ok(id)
}

/// Runs `f` in the host's network namespace ([`adopt_host_netns`]): `Ok(None)` when none
/// was recorded or it is this thread's own.
pub fn in_host_netns<T: Send>(
    f: impl FnOnce() -> Result<T, Error> + Send,
) -> Result<Option<(NetnsId, T)>, Error> {
    let Some((id, fd)) = HOST_NETNS.get() else {
        return Ok(None);
    };
    if *id == own_netns()? {
        return Ok(None);
    }
    in_netns_fd(fd, *id, f).map(|t| Some((*id, t)))
}

/// Every unix socket bound to the file with `stat()` identity `dev`/`ino`, in every
/// network namespace a task is in; with the namespace it lives in. A namespace that cannot
/// be entered or asked is an error (never skipped).
pub fn bound_to(dev: u64, ino: u64) -> Result<Vec<(NetnsId, UnixSocket)>, Error> {
    let pick = |all: Vec<UnixSocket>| -> Vec<UnixSocket> {
        all.into_iter()
            .filter(|s| s.vfs.is_some_and(|v| v.is(dev, ino)))
            .collect()
    };
    let own = own_netns()?;
    let mut out: Vec<(NetnsId, UnixSocket)> = pick(unix_sockets()?)
        .into_iter()
        .map(|s| (own, s))
        .collect();
    for ns in network_namespaces()? {
        if ns.id == own {
            continue;
        }
        let got = in_netns(&ns, || unix_sockets().map(pick))
            .context(format_args!("network namespace {}", ns.id))?;
        out.extend(got.unwrap_or_default().into_iter().map(|s| (ns.id, s)));
    }
    Ok(out)
}

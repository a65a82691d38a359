//! Listener endpoints held by repochd (docs/THREAT-MODEL.md, "Who can change a fact"):
//! an enrolled TCP or UDP endpoint is bound (and a TCP one listened on) by repochd itself,
//! on exactly its enrolled address (an IPv6 one with `IPV6_V6ONLY` on), or, enrolled as
//! `*`, on the IPv6 wildcard with `IPV6_V6ONLY` off, so that no other socket can bind it on
//! any IPv4 or IPv6 address; in the network namespace clients reach it in (the host's, where
//! repochd's own sockets are: `sockdiag::in_host_netns`, else this one); an enrolled unix
//! path is bound by repochd as a listening stream socket, through its directory's fd
//! (opened without following a symlink in any component), from a thread of its own file
//! system context. Held from the first observation to the dispatch, the sockets then go to
//! the new root with the fences; a unix socket file repochd made and did not hand over is
//! removed when it is released.

use crate::error::Error;
use std::os::fd::{AsFd, OwnedFd};

use repoch_protocol::manifest::{Inet, Listener, SocketFile as EnrolledSocketFile};
use rustix::fs::{AtFlags, OFlags};
use rustix::io::Errno;
use rustix::net::{AddressFamily, SocketAddrV6, SocketFlags, SocketType};

use super::sockdiag;

/// Backlog of a held listening socket: connections that arrive while the recovery runs
/// wait there for the new root.
pub const HELD_BACKLOG: i32 = 128;

/// A listener endpoint held by this process.
#[derive(Debug)]
pub struct Held {
    /// The socket.
    fd: OwnedFd,
    /// For a unix path: its directory, the name in it and the socket file's identity
    /// (device, inode) as bound; removed on drop unless handed over.
    file: Option<SocketFile>,
}

impl Held {
    /// The held socket, to hand over with the grant.
    pub fn socket(&self) -> &OwnedFd {
        &self.fd
    }
}

#[derive(Debug)]
struct SocketFile {
    dir: OwnedFd,
    name: String,
    id: (u64, u64),
    handed_over: bool,
}

impl Held {
    /// Marks the endpoint as the new root's: its socket file stays when this is dropped.
    pub fn hand_over(&mut self) {
        if let Some(f) = &mut self.file {
            f.handed_over = true;
        }
    }

    /// Whether the enrolled unix path still names the socket file bound here (always true
    /// for a port: nothing can take a bound port from its socket).
    pub fn still_ours(&self) -> Result<bool, Error> {
        let Some(f) = &self.file else {
            return Ok(true);
        };
        match rustix::fs::statat(&f.dir, f.name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok((st.st_dev, st.st_ino) == f.id),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(Error::Found(format!("{}: {e}", f.name))),
        }
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        // Only the file bound here: a name someone put in its place stays.
        if !self.handed_over
            && rustix::fs::statat(&self.dir, self.name.as_str(), AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| (st.st_dev, st.st_ino) == self.id)
        {
            let _ = rustix::fs::unlinkat(&self.dir, self.name.as_str(), AtFlags::empty());
        }
    }
}

/// Why an endpoint could not be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotTaken {
    /// Something is bound there already (a port in use, or a file at the path).
    InUse,
    /// A unix path's directory another user can write or owns: what it shows.
    Unprotected(String),
    /// Anything else.
    Failed(String),
}

/// A system call on the way to taking an endpoint failed: `what: errno`.
fn failed(what: &str, e: Errno) -> NotTaken {
    NotTaken::Failed(format!("{what}: {e}"))
}

/// Takes the endpoint `l`. `principals`: the uids that may own a unix path's directory;
/// `file`: how a unix listener's socket file is made (its mode, owner and group), if
/// enrolled.
pub fn take(
    l: &Listener,
    principals: &[u32],
    file: Option<&EnrolledSocketFile>,
) -> Result<Held, NotTaken> {
    match l {
        Listener::Tcp(i) => take_port(false, *i),
        Listener::Udp(i) => take_port(true, *i),
        Listener::Unix(path) => take_unix(path, principals, file),
    }
}

fn take_port(udp: bool, at: Inet) -> Result<Held, NotTaken> {
    if at.port == 0 {
        return Err(NotTaken::Failed("port 0 names no port".into()));
    }
    let bind = move || -> Result<Result<OwnedFd, NotTaken>, Error> { Ok(bind_port(udp, at)) };
    let fd = match sockdiag::in_host_netns(bind) {
        Ok(Some((_, r))) => r?,
        Ok(None) => bind_port(udp, at)?,
        Err(e) => {
            return Err(NotTaken::Failed(format!(
                "the host's network namespace: {e}"
            )))
        }
    };
    Ok(Held { fd, file: None })
}

/// Binds the endpoint in this thread's network namespace: on its one address, or on every
/// address of both families.
fn bind_port(udp: bool, at: Inet) -> Result<OwnedFd, NotTaken> {
    let kind = if udp {
        SocketType::DGRAM
    } else {
        SocketType::STREAM
    };
    let in_use = |e: Errno| {
        if e == Errno::ADDRINUSE {
            NotTaken::InUse
        } else {
            failed("bind", e)
        }
    };
    let port = at.port;
    let fd = match at.addr {
        Some(addr) => bind_one(kind, std::net::SocketAddr::new(addr, port), in_use)?,
        None => bind_every(kind, port, in_use)?,
    };
    if !udp {
        rustix::net::listen(&fd, HELD_BACKLOG).map_err(|e| failed("listen", e))?;
    }
    Ok(fd)
}

/// A socket bound to exactly `addr`: an IPv6 one with `IPV6_V6ONLY` on, so that `[::]`
/// is the IPv6 wildcard alone, as written.
fn bind_one(
    kind: SocketType,
    addr: std::net::SocketAddr,
    in_use: impl Fn(Errno) -> NotTaken,
) -> Result<OwnedFd, NotTaken> {
    let family = match addr {
        std::net::SocketAddr::V4(_) => AddressFamily::INET,
        std::net::SocketAddr::V6(_) => AddressFamily::INET6,
    };
    let fd = rustix::net::socket_with(family, kind, SocketFlags::CLOEXEC, None)
        .map_err(|e| failed("socket", e))?;
    if addr.is_ipv6() {
        rustix::net::sockopt::set_ipv6_v6only(&fd, true).map_err(|e| failed("IPV6_V6ONLY", e))?;
    }
    if kind == SocketType::STREAM {
        reuse_addr(&fd).map_err(|e| failed("SO_REUSEADDR", e))?;
    }
    rustix::net::bind(&fd, &addr).map_err(|e| match e {
        // An address this host does not have cannot be held: say so, not "in use".
        Errno::ADDRNOTAVAIL => failed(&format!("bind {addr}"), e),
        e => in_use(e),
    })?;
    Ok(fd)
}

/// A socket bound to `port` on every address of both families.
fn bind_every(
    kind: SocketType,
    port: u16,
    in_use: impl Fn(Errno) -> NotTaken,
) -> Result<OwnedFd, NotTaken> {
    let udp = kind == SocketType::DGRAM;
    let fd = match rustix::net::socket_with(AddressFamily::INET6, kind, SocketFlags::CLOEXEC, None)
    {
        Ok(fd) => {
            rustix::net::sockopt::set_ipv6_v6only(&fd, false)
                .map_err(|e| failed("IPV6_V6ONLY", e))?;
            if !udp {
                reuse_addr(&fd).map_err(|e| failed("SO_REUSEADDR", e))?;
            }
            let any = SocketAddrV6::new(std::net::Ipv6Addr::UNSPECIFIED, port, 0, 0);
            rustix::net::bind(&fd, &any).map_err(in_use)?;
            fd
        }
        // No IPv6 on this host: the IPv4 wildcard is every address there is.
        Err(Errno::AFNOSUPPORT) => {
            let fd =
                rustix::net::socket_with(AddressFamily::INET, kind, SocketFlags::CLOEXEC, None)
                    .map_err(|e| failed("socket", e))?;
            if !udp {
                reuse_addr(&fd).map_err(|e| failed("SO_REUSEADDR", e))?;
            }
            let any = std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, port);
            rustix::net::bind(&fd, &any).map_err(in_use)?;
            fd
        }
        Err(e) => return Err(failed("socket", e)),
    };
    Ok(fd)
}

/// `SO_REUSEADDR` on a TCP socket that will listen, as systemd sets it: the old root's
/// connections left in `TIME_WAIT` do not keep the port from being held, and no one can
/// bind beside a listening socket whatever options they set. Never on UDP, where it
/// would let another socket with the option share the port.
fn reuse_addr(fd: &OwnedFd) -> rustix::io::Result<()> {
    rustix::net::sockopt::set_socket_reuseaddr(fd, true)
}

fn take_unix(
    path: &str,
    principals: &[u32],
    file: Option<&EnrolledSocketFile>,
) -> Result<Held, NotTaken> {
    let p = std::path::Path::new(path);
    let (Some(parent), Some(name)) = (p.parent(), p.file_name().and_then(|n| n.to_str())) else {
        return Err(NotTaken::Failed(format!("{path}: no directory and name")));
    };
    let dir = crate::fs::open_path(parent, OFlags::DIRECTORY | OFlags::RDONLY, 0)
        .map_err(|e| NotTaken::Failed(format!("{}: {e}", parent.display())))?;
    let st = rustix::fs::fstat(&dir).map_err(|e| NotTaken::Failed(format!("{e}")))?;
    if st.st_mode & 0o022 != 0 || !principals.contains(&st.st_uid) {
        return Err(NotTaken::Unprotected(format!(
            "{} is uid {} mode {:o}",
            parent.display(),
            st.st_uid,
            st.st_mode & 0o7777
        )));
    }
    let fd = bind_unix(&dir, name, file)?;
    let id = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map(|st| (st.st_dev, st.st_ino))
        .map_err(|e| NotTaken::Failed(format!("{name}: {e}")))?;
    let held = Held {
        fd,
        file: Some(SocketFile {
            dir,
            name: name.to_owned(),
            id,
            handed_over: false,
        }),
    };
    if let Some(f) = file.filter(|f| f.uid.is_some() || f.gid.is_some()) {
        give_owner(&held, f)?;
    }
    rustix::net::listen(&held.fd, HELD_BACKLOG)
        .map_err(|e| NotTaken::Failed(format!("listen: {e}")))?;
    Ok(held)
}

/// A unix stream socket bound to `name` in `dir`: by its name relative to the directory,
/// in a thread whose working directory is its own (unshare CLONE_FS): no path walk, no
/// length limit but the name's.
fn bind_unix(
    dir: &OwnedFd,
    name: &str,
    file: Option<&EnrolledSocketFile>,
) -> Result<OwnedFd, NotTaken> {
    std::thread::scope(|s| {
        s.spawn(|| -> Result<OwnedFd, NotTaken> {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS)
                .map_err(|e| NotTaken::Failed(format!("unshare: {e}")))?;
            rustix::process::fchdir(dir).map_err(|e| failed("fchdir", e))?;
            // The umask is this thread's alone (CLONE_FS): the socket file is made with
            // exactly the enrolled mode, never with a looser one first.
            if let Some(f) = file {
                rustix::process::umask(rustix::fs::Mode::from_raw_mode(!f.mode & 0o777));
            }
            let fd = rustix::net::socket_with(
                AddressFamily::UNIX,
                SocketType::STREAM,
                SocketFlags::CLOEXEC,
                None,
            )
            .map_err(|e| failed("socket", e))?;
            let addr = rustix::net::SocketAddrUnix::new(name)
                .map_err(|e| failed("a socket address", e))?;
            rustix::net::bind(&fd, &addr).map_err(|e| {
                if e == Errno::ADDRINUSE {
                    NotTaken::InUse
                } else {
                    failed("bind", e)
                }
            })?;
            Ok(fd)
        })
        .join()
        .map_err(|_| NotTaken::Failed("the binding thread panicked".into()))?
    })
}

/// Gives the socket file just bound its enrolled owner and group (by its name in its
/// directory, never through a symlink), then checks the name is still that file. Only
/// root and the old root's uids can write the directory. Without `CAP_CHOWN` (the shipped
/// unit has none) another owner or group is refused: the endpoint is not taken, nothing
/// written, and the failure says what repochd lacks (docs/OPERATOR.md).
fn give_owner(held: &Held, f: &EnrolledSocketFile) -> Result<(), NotTaken> {
    let Some(sf) = &held.file else {
        return Ok(());
    };
    let uid = f.uid.map(rustix::process::Uid::from_raw);
    let gid = f.gid.map(rustix::process::Gid::from_raw);
    rustix::fs::chownat(
        &sf.dir,
        sf.name.as_str(),
        uid,
        gid,
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(|e| {
        NotTaken::Failed(format!(
            "chown {} to uid {} gid {}: {e}{}",
            sf.name,
            f.uid.map_or("(kept)".into(), |u| u.to_string()),
            f.gid.map_or("(kept)".into(), |g| g.to_string()),
            if e == Errno::PERM {
                " (repochd needs CAP_CHOWN to give a socket file another owner or group)"
            } else {
                ""
            }
        ))
    })?;
    match held.still_ours() {
        Ok(true) => Ok(()),
        Ok(false) => Err(NotTaken::Failed(format!(
            "{}: replaced while its owner was set",
            sf.name
        ))),
        Err(e) => Err(NotTaken::Failed(e.to_string())),
    }
}

/// The fd's socket, for tests and checks: whether it listens.
pub fn listening(fd: impl AsFd) -> bool {
    rustix::net::sockopt::socket_acceptconn(fd).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free_port(udp: bool) -> u16 {
        let s = if udp {
            std::net::UdpSocket::bind("[::]:0").unwrap().local_addr()
        } else {
            std::net::TcpListener::bind("[::]:0").unwrap().local_addr()
        };
        s.unwrap().port()
    }

    #[test]
    fn a_held_port_cannot_be_bound_by_anyone_on_any_address_and_is_freed_on_drop() {
        for udp in [false, true] {
            let port = free_port(udp);
            let l = if udp {
                Listener::Udp(Inet::any(port))
            } else {
                Listener::Tcp(Inet::any(port))
            };
            let held = take(&l, &[0], None).unwrap();
            assert_eq!(listening(&held.fd), !udp);
            for addr in [
                format!("0.0.0.0:{port}"),
                format!("127.0.0.1:{port}"),
                format!("[::]:{port}"),
                format!("[::1]:{port}"),
            ] {
                let bound = if udp {
                    std::net::UdpSocket::bind(&addr).is_ok()
                } else {
                    std::net::TcpListener::bind(&addr).is_ok()
                };
                assert!(!bound, "{l}: {addr} was bound while held");
            }
            assert_eq!(take(&l, &[0], None).unwrap_err(), NotTaken::InUse);
            drop(held);
            assert!(take(&l, &[0], None).is_ok(), "{l} not freed");
        }
    }

    #[test]
    fn a_port_held_on_one_address_is_bound_there_only() {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
        for udp in [false, true] {
            let port = free_port(udp);
            for addr in [
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(Ipv6Addr::LOCALHOST),
            ] {
                let at = Inet::at(addr, port);
                let l = if udp {
                    Listener::Udp(at)
                } else {
                    Listener::Tcp(at)
                };
                let held = take(&l, &[0], None).unwrap();
                let name = rustix::net::getsockname(&held.fd).unwrap();
                assert_eq!(
                    SocketAddr::try_from(name).unwrap(),
                    SocketAddr::new(addr, port),
                    "{l}"
                );
                assert_eq!(take(&l, &[0], None).unwrap_err(), NotTaken::InUse, "{l}");
                drop(held);
            }
        }
        // An address this host does not have is a failure that names it, not "in use".
        let l = Listener::Tcp(Inet::at(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 7070));
        assert!(
            matches!(take(&l, &[0], None), Err(NotTaken::Failed(e)) if e.contains("192.0.2.1")),
            "{l}"
        );
    }

    #[test]
    fn a_held_unix_path_is_a_listening_socket_removed_unless_handed_over() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("s.sock");
        let l = Listener::Unix(path.to_str().unwrap().into());
        let me = rustix::process::getuid().as_raw();
        let held = take(&l, &[me], None).unwrap();
        assert!(listening(&held.fd));
        assert!(held.still_ours().unwrap());
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
        assert_eq!(take(&l, &[me], None).unwrap_err(), NotTaken::InUse);
        drop(held);
        assert!(!path.exists(), "the socket file stayed");
        let mut held = take(&l, &[me], None).unwrap();
        held.hand_over();
        drop(held);
        assert!(path.exists(), "a handed-over socket file was removed");
        // A name put in its place is not ours, and is never removed.
        std::fs::remove_file(&path).unwrap();
        let held = take(&l, &[me], None).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"theirs").unwrap();
        assert!(!held.still_ours().unwrap());
        drop(held);
        assert_eq!(std::fs::read(&path).unwrap(), b"theirs");
    }

    #[test]
    fn a_held_unix_socket_file_has_its_enrolled_mode_and_owner() {
        use std::os::unix::fs::MetadataExt as _;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("s.sock");
        let p = path.to_str().unwrap();
        let l = Listener::Unix(p.into());
        let me = rustix::process::getuid().as_raw();
        for mode in [0o666, 0o600, 0o660] {
            let f = EnrolledSocketFile {
                path: p.into(),
                mode,
                uid: None,
                gid: None,
            };
            let held = take(&l, &[me], Some(&f)).unwrap();
            let m = std::fs::symlink_metadata(&path).unwrap();
            assert_eq!(m.mode() & 0o7777, mode, "mode 0o{mode:o}");
            assert_eq!(m.uid(), me);
            drop(held);
        }
        let f = EnrolledSocketFile {
            path: p.into(),
            mode: 0o660,
            uid: Some(65534),
            gid: Some(65534),
        };
        match take(&l, &[me], Some(&f)) {
            // As root (CAP_CHOWN): the file is the enrolled owner's.
            Ok(held) if me == 0 => {
                let m = std::fs::symlink_metadata(&path).unwrap();
                assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (65534, 65534, 0o660));
                assert!(listening(&held.fd));
                drop(held);
                assert!(!path.exists());
            }
            Err(NotTaken::Failed(e)) if me != 0 => {
                assert!(e.contains("CAP_CHOWN"), "{e}");
                assert!(!path.exists(), "a socket file not taken stayed");
            }
            other => panic!("as uid {me}: {other:?}"),
        }
    }

    #[test]
    fn a_unix_path_in_a_directory_others_can_write_is_not_taken() {
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let l = Listener::Unix(d.path().join("s.sock").to_str().unwrap().into());
        let me = rustix::process::getuid().as_raw();
        assert!(matches!(
            take(&l, &[me], None),
            Err(NotTaken::Unprotected(_))
        ));
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(
            take(&l, &[me + 1], None),
            Err(NotTaken::Unprotected(_))
        ));
        assert!(take(&l, &[me], None).is_ok());
    }
}

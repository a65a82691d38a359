//! Files as repoch opens and reads them: no symlink followed on any path, one bounded
//! reader, one identity (`statx`), and the append-only inode flag.

use crate::error::{Context as _, Error};
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use repoch_protocol::types::BIRTH_NSEC_MAX;
use repoch_protocol::{Birth, Identity};
use rustix::fs::{self, IFlags, Mode, OFlags, ResolveFlags, StatxFlags};

pub const OPEN_NOFOLLOW: ResolveFlags =
    ResolveFlags::NO_SYMLINKS.union(ResolveFlags::NO_MAGICLINKS);

/// What a non-regular file is, for an `observed` text ("a fifo"); `None` for a regular file.
/// Observed paths are opened with `O_NONBLOCK` and checked with this before any read, so a
/// FIFO or device put in a file's place refuses at once instead of blocking.
pub fn not_regular(mode: u32) -> Option<&'static str> {
    Some(match mode & 0o170000 {
        0o100000 => return None,
        0o010000 => "a fifo",
        0o140000 => "a socket",
        0o040000 => "a directory",
        0o020000 => "a character device",
        0o060000 => "a block device",
        0o120000 => "a symlink",
        _ => "an unknown file type",
    })
}

/// Opens an absolute path without following any symlink in any component.
pub fn open_path(path: &std::path::Path, flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
    open_nofollow(fs::CWD, path, flags, Mode::from_raw_mode(mode))
}

/// Opens `name` inside `dir` without following symlinks.
pub fn open_at(dir: impl AsFd, name: &str, flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
    if name.contains('/') || name == ".." || name == "." || name.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a plain name"),
        ));
    }
    open_nofollow(dir.as_fd(), name.as_ref(), flags, Mode::from_raw_mode(mode))
}

/// `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`; where that call is not available
/// (`ENOSYS`: systemd's `RestrictSUIDSGID=`, set in `repochd.service`, makes it so, since
/// its filter cannot read the mode inside `open_how`; kernels before 5.6), the same walk
/// one component at a time ([`open_walk`]).
fn open_nofollow(
    dir: std::os::fd::BorrowedFd<'_>,
    path: &std::path::Path,
    flags: OFlags,
    mode: Mode,
) -> io::Result<OwnedFd> {
    match fs::openat2(
        dir,
        path,
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        mode,
        OPEN_NOFOLLOW,
    ) {
        Err(rustix::io::Errno::NOSYS) => open_walk(dir, path, flags, mode),
        r => Ok(r?),
    }
}

/// Opens `path` relative to `dir` one component at a time, following no symlink: each
/// directory on the way is opened `O_PATH | O_NOFOLLOW` and must be a directory (a symlink
/// is `ELOOP`, as `RESOLVE_NO_SYMLINKS` answers), and the last component is opened with
/// `flags | O_NOFOLLOW` (so a symlink there is `ELOOP`, or, with `O_PATH`, the symlink
/// itself: as `openat2` answers).
fn open_walk(
    dir: std::os::fd::BorrowedFd<'_>,
    path: &std::path::Path,
    flags: OFlags,
    mode: Mode,
) -> io::Result<OwnedFd> {
    use std::path::Component;
    let mut names: Vec<&std::ffi::OsStr> = Vec::new();
    let mut held: Option<OwnedFd> = None;
    for c in path.components() {
        match c {
            Component::RootDir => {
                held = Some(fs::open(
                    "/",
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Mode::empty(),
                )?);
            }
            Component::Prefix(_) => return Err(io::ErrorKind::InvalidInput.into()),
            Component::CurDir => names.push(".".as_ref()),
            Component::ParentDir => names.push("..".as_ref()),
            Component::Normal(n) => names.push(n),
        }
    }
    let Some((last, between)) = names.split_last() else {
        return Err(io::ErrorKind::InvalidInput.into());
    };
    for name in between {
        let at = held.as_ref().map_or(dir, AsFd::as_fd);
        let next = fs::openat(
            at,
            *name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let st = fs::fstat(&next)?;
        match fs::FileType::from_raw_mode(st.st_mode) {
            fs::FileType::Directory => {}
            fs::FileType::Symlink => return Err(rustix::io::Errno::LOOP.into()),
            _ => return Err(rustix::io::Errno::NOTDIR.into()),
        }
        held = Some(next);
    }
    let at = held.as_ref().map_or(dir, AsFd::as_fd);
    Ok(fs::openat(
        at,
        *last,
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        mode,
    )?)
}

/// Symbolic links followed at most when resolving a path in a root (the kernel's own bound,
/// `MAXSYMLINKS`).
pub const IN_ROOT_LINKS_MAX: usize = 40;

/// Opens `path` (`O_PATH`) as a process whose root directory is `root` sees it: symbolic
/// links resolved inside `root` (an absolute target from `root`), `..` never above it, as
/// `openat2`'s `RESOLVE_IN_ROOT` does, which is asked first. Where that call is not
/// available (`ENOSYS`, under `repochd.service`'s `RestrictSUIDSGID=`: see
/// [`open_nofollow`]), the same resolution one component at a time ([`walk_in_root`]).
pub fn open_in_root(root: &std::path::Path, path: &str) -> io::Result<OwnedFd> {
    let dir = fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    match fs::openat2(
        &dir,
        path,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    ) {
        Err(rustix::io::Errno::NOSYS) => walk_in_root(&dir, path),
        r => Ok(r?),
    }
}

/// [`open_in_root`]'s resolution without `openat2`: each component opened `O_PATH |
/// O_NOFOLLOW` from the directory reached; a symbolic link's target put in its place (an
/// absolute one from `root`), at most [`IN_ROOT_LINKS_MAX`] of them (`ELOOP` past it); `..`
/// at `root` stays there.
pub fn walk_in_root(root: &OwnedFd, path: &str) -> io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    // The components still to walk, the next one last.
    let mut todo: Vec<Vec<u8>> = Vec::new();
    let push = |todo: &mut Vec<Vec<u8>>, p: &[u8]| {
        todo.extend(
            p.rsplit(|b| *b == b'/')
                .filter(|c| !c.is_empty() && *c != b".")
                .map(<[u8]>::to_vec),
        )
    };
    push(&mut todo, path.as_bytes());
    let mut stack: Vec<OwnedFd> = vec![root.try_clone()?];
    let mut links = 0;
    while let Some(name) = todo.pop() {
        let at = stack.last().ok_or(io::ErrorKind::InvalidInput)?;
        if name == b".." {
            if stack.len() > 1 {
                stack.pop();
            }
            continue;
        }
        let next = fs::openat(at, name.as_slice(), flags, Mode::empty())?;
        if fs::FileType::from_raw_mode(fs::fstat(&next)?.st_mode) != fs::FileType::Symlink {
            stack.push(next);
            continue;
        }
        links += 1;
        if links > IN_ROOT_LINKS_MAX {
            return Err(rustix::io::Errno::LOOP.into());
        }
        let target = fs::readlinkat(at, name.as_slice(), Vec::new())?;
        let target = target.as_bytes();
        if target.starts_with(b"/") {
            stack.truncate(1);
        }
        push(&mut todo, target);
    }
    stack
        .pop()
        .ok_or_else(|| io::ErrorKind::InvalidInput.into())
}

/// A readable descriptor of the file `fd` (an `O_PATH` one) names, reopened through its
/// magic link: `O_RDONLY | O_NONBLOCK | O_NOCTTY`.
pub fn reopen_readable(fd: impl AsFd) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd as _;
    let link = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    Ok(fs::open(link, flags, Mode::empty())?)
}

/// A file read with `pread` from offset 0 on: its fd's own offset is neither used nor moved
/// (an epoch log open for appending reads whole from its start).
struct FromStart<F> {
    fd: F,
    at: u64,
}

impl<F: AsFd> std::io::Read for FromStart<F> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = rustix::io::pread(&self.fd, buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// The one bounded reader: a whole file from offset 0 (`pread`), refusing more than `max`
/// bytes: more is an error, never a prefix (a table cut at its bound would read as a
/// shorter, well-formed one). The buffer grows as std's `read_to_end` grows it (a small
/// procfs file costs one small read and one at its end).
pub fn read_bounded(f: impl AsFd, max: usize) -> io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut out = Vec::new();
    FromStart { fd: f, at: 0 }
        .take(max as u64 + 1)
        .read_to_end(&mut out)?;
    if out.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("over its bound of {max} bytes"),
        ));
    }
    Ok(out)
}

/// Whether [`read_regular`] follows symlinks on the way to the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// As `open(2)` does: for paths an operator or a supervisor names (key files).
    Follow,
    /// None, in any component ([`open_path`]).
    Refuse,
}

/// Reads a regular file of at most `max` bytes. The open does not block and anything but a
/// regular file is refused before a byte is read: a FIFO given as a path never hangs.
pub fn read_regular(p: &std::path::Path, max: usize, links: Links) -> io::Result<Vec<u8>> {
    let flags = OFlags::RDONLY | OFlags::NONBLOCK;
    let fd = match links {
        Links::Refuse => open_path(p, flags, 0)?,
        Links::Follow => fs::open(p, flags | OFlags::CLOEXEC, Mode::empty())?,
    };
    let st = fs::fstat(&fd)?;
    if let Some(kind) = not_regular(st.st_mode) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{kind}, not a regular file"),
        ));
    }
    // A regular file's size is known before a byte is read: one far over the bound (a
    // sparse gigabyte) is refused saying how large it is, without reading up to the bound.
    if u64::try_from(st.st_size).is_ok_and(|n| n > max as u64) {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("{} bytes, over its bound of {max} bytes", st.st_size),
        ));
    }
    read_bounded(&fd, max)
}

/// Reads a credential only root can have written: a regular file of at most `max` bytes,
/// reached through no symlink, owned by root and writable by neither group nor others (and,
/// if `secret`, readable by neither), in directories each owned by root and writable by
/// neither group nor others unless sticky (as `/tmp` is: no one renames root's entries
/// there). Anything else is refused naming what is wrong, before a byte is read.
pub fn read_protected(p: &std::path::Path, max: usize, secret: bool) -> io::Result<Vec<u8>> {
    let unprotected = |what: String| io::Error::new(io::ErrorKind::PermissionDenied, what);
    let mut dir = p.parent();
    while let Some(d) = dir {
        let m = std::fs::symlink_metadata(d)?;
        use std::os::unix::fs::MetadataExt as _;
        let writable = m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0;
        if m.uid() != 0 || writable {
            return Err(unprotected(format!(
                "its directory {} is owned by uid {} with mode {:o}: only root may write there",
                d.display(),
                m.uid(),
                m.mode() & 0o7777
            )));
        }
        dir = d.parent();
    }
    let fd = open_path(p, OFlags::RDONLY | OFlags::NONBLOCK, 0)?;
    let st = fs::fstat(&fd)?;
    if let Some(kind) = not_regular(st.st_mode) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{kind}, not a regular file"),
        ));
    }
    let mode = st.st_mode & 0o7777;
    let open_to = if secret { 0o077 } else { 0o022 };
    if st.st_uid != 0 || mode & open_to != 0 {
        return Err(unprotected(format!(
            "owned by uid {} with mode {mode:o}: it must be root's, {}",
            st.st_uid,
            if secret {
                "readable and writable by no one else (0600 or 0400)"
            } else {
                "writable by no one else (0644 or narrower)"
            }
        )));
    }
    if u64::try_from(st.st_size).is_ok_and(|n| n > max as u64) {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("{} bytes, over its bound of {max} bytes", st.st_size),
        ));
    }
    read_bounded(&fd, max)
}

/// Sets `FS_APPEND_FL` where the file system supports it.
pub fn set_append_only(fd: impl AsFd) -> Result<(), Error> {
    let flags = fs::ioctl_getflags(&fd).context("reading inode flags")?;
    fs::ioctl_setflags(&fd, flags | IFlags::APPEND).context("setting the append-only flag")
}

/// Whether `FS_APPEND_FL` is set.
pub fn is_append_only(fd: impl AsFd) -> Result<bool, Error> {
    fs::ioctl_getflags(&fd)
        .map(|f| f.contains(IFlags::APPEND))
        .context("reading inode flags")
}

/// Clears `FS_APPEND_FL` (the only way such a file can be removed or rewritten: a failed
/// enrollment's journal, a test's fixture), best effort.
pub fn clear_append_only(fd: impl AsFd) {
    if let Ok(f) = fs::ioctl_getflags(&fd) {
        let _ = fs::ioctl_setflags(&fd, f - IFlags::APPEND);
    }
}

/// The mount an open file is on (`statx`'s `STATX_MNT_ID`); `None` when it cannot be had.
pub fn mount_id(fd: impl AsFd) -> Option<u64> {
    let sx = fs::statx(fd, "", fs::AtFlags::EMPTY_PATH, StatxFlags::MNT_ID).ok()?;
    (sx.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(sx.stx_mnt_id)
}

/// The path the kernel names an open file or directory by (`/proc/self/fd/N`), for a
/// message; `None` when it cannot say.
pub fn name_of(fd: impl AsFd) -> Option<String> {
    use std::os::fd::AsRawFd as _;
    let link = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
    rustix::fs::readlink(link, [])
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// The identity of an open file (or `O_PATH` fd), with its birth time: `statx` asks for
/// `STATX_BTIME`, and the birth is filled only when the returned mask has it (a file system
/// without birth times gives `None`; enrollment refuses such objects). The inode generation
/// (`FS_IOC_GETVERSION`) is not read: rustix has no safe wrapper for it, and the issuer
/// forbids `unsafe`.
pub fn fstat_identity(fd: impl std::os::fd::AsFd) -> std::io::Result<Identity> {
    identity_of(&statx(fd)?)
}

/// The one `statx` of an open file: everything basic, and the birth time.
pub fn statx(fd: impl std::os::fd::AsFd) -> std::io::Result<rustix::fs::Statx> {
    Ok(rustix::fs::statx(
        fd,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        StatxFlags::BASIC_STATS | StatxFlags::BTIME,
    )?)
}

/// The identity in a `statx` answer asked for `BASIC_STATS | BTIME` (see [`fstat_identity`]).
pub fn identity_of(sx: &rustix::fs::Statx) -> std::io::Result<Identity> {
    let basic = StatxFlags::TYPE | StatxFlags::MODE | StatxFlags::UID | StatxFlags::GID;
    if !StatxFlags::from_bits_retain(sx.stx_mask).contains(basic | StatxFlags::INO) {
        return Err(std::io::Error::other(format!(
            "statx gave no inode, owner or mode (mask {:#x})",
            sx.stx_mask
        )));
    }
    Ok(Identity {
        dev: rustix::fs::makedev(sx.stx_dev_major, sx.stx_dev_minor),
        ino: sx.stx_ino,
        uid: sx.stx_uid,
        gid: sx.stx_gid,
        mode: sx.stx_mode.into(),
        birth: birth_of(sx),
    })
}

/// Whether an open file carries a POSIX access ACL (`system.posix_acl_access`): named user
/// or group entries that the mode bits do not show (a minimal ACL, equal to the mode, is
/// never stored). A file system without extended attributes or ACLs has none.
pub fn has_access_acl(fd: impl std::os::fd::AsFd) -> std::io::Result<bool> {
    use rustix::io::Errno;
    match rustix::fs::fgetxattr_query(fd, "system.posix_acl_access") {
        Ok(_) => Ok(true),
        Err(e) if e == Errno::NODATA || e == Errno::OPNOTSUPP => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The birth time in a statx answer: only when its mask says the file system gave one, and
/// never a time before 1970 (read as none) or an out-of-range nanosecond count.
fn birth_of(sx: &rustix::fs::Statx) -> Option<Birth> {
    if !StatxFlags::from_bits_retain(sx.stx_mask).contains(StatxFlags::BTIME) {
        return None;
    }
    let sec = u64::try_from(sx.stx_btime.tv_sec).ok()?;
    let nsec = sx.stx_btime.tv_nsec;
    (nsec <= BIRTH_NSEC_MAX).then_some(Birth { sec, nsec })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path is resolved as a process rooted at `root` resolves it: an absolute link from
    /// the root, a relative one from where it sits, `..` never above the root, a loop an
    /// error; the walk and `openat2`'s `RESOLVE_IN_ROOT` answer alike.
    #[test]
    fn a_path_in_a_root_is_resolved_inside_it_by_the_walk_as_by_the_kernel() {
        use std::os::unix::fs::symlink;
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        std::fs::write(root.join("old-root"), b"inside").unwrap();
        std::fs::write(d.path().join("old-root"), b"outside").unwrap();
        symlink("/old-root", root.join("usr/bin/absolute")).unwrap();
        symlink("../../../../old-root", root.join("usr/bin/above")).unwrap();
        symlink("absolute", root.join("usr/bin/chained")).unwrap();
        symlink("loop", root.join("usr/bin/loop")).unwrap();
        let inside = fs::stat(root.join("old-root")).unwrap();
        let id = |fd: &OwnedFd| {
            let st = fs::fstat(fd).unwrap();
            (st.st_dev, st.st_ino)
        };
        let dir = fs::open(&root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
        for p in [
            "/usr/bin/absolute",
            "usr/bin/above",
            "/usr/bin/chained",
            "/usr/./bin/../bin/absolute",
            "/../../old-root",
        ] {
            let walked = walk_in_root(&dir, p).unwrap();
            assert_eq!(id(&walked), (inside.st_dev, inside.st_ino), "{p}");
            assert_eq!(id(&open_in_root(&root, p).unwrap()), id(&walked), "{p}");
        }
        let e = walk_in_root(&dir, "/usr/bin/loop").unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(rustix::io::Errno::LOOP.raw_os_error())
        );
        assert!(walk_in_root(&dir, "/nothing").is_err());
        let mut read = String::new();
        use std::io::Read as _;
        std::fs::File::from(
            reopen_readable(walk_in_root(&dir, "/usr/bin/above").unwrap()).unwrap(),
        )
        .read_to_string(&mut read)
        .unwrap();
        assert_eq!(read, "inside");
    }

    /// A file of exactly its bound is read whole, one byte more is refused (never a
    /// prefix), across the growing chunks; a FIFO is refused without blocking.
    #[test]
    fn the_bounded_reader_reads_whole_or_refuses() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("f");
        let body: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        std::fs::write(&p, &body).unwrap();
        assert_eq!(read_regular(&p, body.len(), Links::Refuse).unwrap(), body);
        let e = read_regular(&p, body.len() - 1, Links::Follow).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge, "{e}");
        // A sparse gigabyte is refused by its size, which the error names.
        let huge = t.path().join("huge");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        let e = read_regular(&huge, 10, Links::Refuse).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(
            e.to_string(),
            "1073741824 bytes, over its bound of 10 bytes"
        );
        std::fs::write(&p, b"0123456789").unwrap();
        assert_eq!(read_regular(&p, 10, Links::Refuse).unwrap(), b"0123456789");
        assert!(read_regular(&p, 9, Links::Refuse).is_err());
        let fifo = t.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = read_regular(&fifo, 10, Links::Follow).unwrap_err();
        assert_eq!(e.to_string(), "a fifo, not a regular file");
        std::os::unix::fs::symlink(&p, t.path().join("link")).unwrap();
        assert!(read_regular(&t.path().join("link"), 10, Links::Refuse).is_err());
        assert_eq!(
            read_regular(&t.path().join("link"), 10, Links::Follow).unwrap(),
            b"0123456789"
        );
    }

    /// The walk answers as `openat2(RESOLVE_NO_SYMLINKS)` does: a symlink anywhere is
    /// `ELOOP`, a file opens, a non-directory on the way is `ENOTDIR`.
    #[test]
    fn the_walk_follows_no_symlink_like_openat2() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        std::fs::create_dir(d.join("dir")).unwrap();
        std::fs::write(d.join("dir/file"), b"x").unwrap();
        std::os::unix::fs::symlink("dir", d.join("linkdir")).unwrap();
        std::os::unix::fs::symlink("file", d.join("dir/linkfile")).unwrap();
        let cases = [
            ("dir/file", OFlags::RDONLY),
            ("dir/file", OFlags::PATH),
            ("linkdir/file", OFlags::RDONLY),
            ("dir/linkfile", OFlags::RDONLY),
            ("dir/linkfile", OFlags::PATH),
            ("dir/file/x", OFlags::RDONLY),
            ("dir/absent", OFlags::RDONLY),
        ];
        for (rel, flags) in cases {
            let p = d.join(rel);
            let want = fs::openat2(
                fs::CWD,
                &p,
                flags | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
                OPEN_NOFOLLOW,
            )
            .map(|_| ())
            .map_err(|e| e.raw_os_error());
            let got = open_walk(fs::CWD, &p, flags, Mode::empty())
                .map(|_| ())
                .map_err(|e| e.raw_os_error().unwrap());
            assert_eq!(got, want, "{rel} {flags:?}");
        }
        assert_eq!(
            open_walk(
                fs::CWD,
                &d.join("linkdir/file"),
                OFlags::RDONLY,
                Mode::empty()
            )
            .unwrap_err()
            .raw_os_error(),
            Some(rustix::io::Errno::LOOP.raw_os_error())
        );
    }
}

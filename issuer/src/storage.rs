//! The durable operations of the state store, behind one small interface, so that the same
//! enrollment and append code runs against the real file system ([`Real`]) and against a
//! deterministic crash simulation ([`crate::sim::Sim`]).
//!
//! Every handle is relative to a directory handle: nothing follows a symlink.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{self, Mode, OFlags, ResolveFlags};

/// Durable operations. `write` appends with one `write(2)`; `sync_data` is `fdatasync`;
/// `sync_dir` is `fsync` of a directory (makes its entries durable).
pub trait Storage {
    type Dir;
    type File;
    fn mkdir_at(&mut self, parent: &Self::Dir, name: &str, mode: u32) -> io::Result<()>;
    fn open_dir_at(&mut self, parent: &Self::Dir, name: &str) -> io::Result<Self::Dir>;
    /// Creates a new file (`O_EXCL`, no symlink), open for appending and reading.
    fn create_at(&mut self, dir: &Self::Dir, name: &str, mode: u32) -> io::Result<Self::File>;
    /// Reserves the blocks that `len` bytes written at offset `at` will need, without
    /// changing the file's size (`fallocate(FALLOC_FL_KEEP_SIZE)`), so that a full disk
    /// fails an append before any byte of it is written (the page cache otherwise writes
    /// the part that fits and returns a short count: a partial record). The default
    /// reserves nothing: a storage without blocks to run out of.
    fn reserve(&mut self, _f: &Self::File, _at: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
    fn write(&mut self, f: &Self::File, bytes: &[u8]) -> io::Result<usize>;
    fn sync_data(&mut self, f: &Self::File) -> io::Result<()>;
    fn sync_dir(&mut self, d: &Self::Dir) -> io::Result<()>;
    /// Reads the whole file from offset 0, refusing more than `max` bytes.
    fn read_all(&mut self, f: &Self::File, max: usize) -> io::Result<Vec<u8>>;
    fn rename_at(&mut self, dir: &Self::Dir, from: &str, to: &str) -> io::Result<()>;
}

/// The real file system, through rustix.
#[derive(Debug, Default)]
pub struct Real;

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

impl Storage for Real {
    type Dir = OwnedFd;
    type File = OwnedFd;
    fn mkdir_at(&mut self, parent: &OwnedFd, name: &str, mode: u32) -> io::Result<()> {
        Ok(fs::mkdirat(parent, name, Mode::from_raw_mode(mode))?)
    }
    fn open_dir_at(&mut self, parent: &OwnedFd, name: &str) -> io::Result<OwnedFd> {
        open_at(parent, name, OFlags::RDONLY | OFlags::DIRECTORY, 0)
    }
    fn create_at(&mut self, dir: &OwnedFd, name: &str, mode: u32) -> io::Result<OwnedFd> {
        let fd = open_at(
            dir,
            name,
            OFlags::RDWR | OFlags::APPEND | OFlags::CREATE | OFlags::EXCL,
            mode,
        )?;
        // The umask may have narrowed the mode; set it exactly.
        fs::fchmod(&fd, Mode::from_raw_mode(mode))?;
        Ok(fd)
    }
    fn reserve(&mut self, f: &OwnedFd, at: u64, len: u64) -> io::Result<()> {
        match fs::fallocate(f, fs::FallocateFlags::KEEP_SIZE, at, len) {
            // A file system that cannot reserve (no fallocate) still fails closed: a short
            // write poisons the log.
            Err(e) if e == rustix::io::Errno::OPNOTSUPP => Ok(()),
            r => Ok(r?),
        }
    }
    fn write(&mut self, f: &OwnedFd, bytes: &[u8]) -> io::Result<usize> {
        Ok(rustix::io::write(f, bytes)?)
    }
    fn sync_data(&mut self, f: &OwnedFd) -> io::Result<()> {
        Ok(fs::fdatasync(f)?)
    }
    fn sync_dir(&mut self, d: &OwnedFd) -> io::Result<()> {
        Ok(fs::fsync(d)?)
    }
    fn read_all(&mut self, f: &OwnedFd, max: usize) -> io::Result<Vec<u8>> {
        read_all_fd(f, max)
    }
    fn rename_at(&mut self, dir: &OwnedFd, from: &str, to: &str) -> io::Result<()> {
        Ok(fs::renameat_with(
            dir,
            from,
            dir,
            to,
            fs::RenameFlags::NOREPLACE,
        )?)
    }
}

/// Reads a whole file from offset 0 with `pread`, refusing more than `max` bytes.
pub fn read_all_fd(f: impl AsFd, max: usize) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = rustix::io::pread(&f, &mut buf, out.len() as u64)?;
        if n == 0 {
            return Ok(out);
        }
        if out.len() + n > max {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("file is larger than {max} bytes"),
            ));
        }
        out.extend_from_slice(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

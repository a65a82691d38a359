//! The grant made durable: written beside `--out` under a random name, fsynced, renamed
//! over nothing, the directory fsynced; with its checkpoint beside it.

use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use repoch_protocol::limits::FRAME_BYTES_MAX;
use rustix::fs::{Mode, OFlags};

use crate::*;

/// `PATH_MAX`, with its terminating NUL: `--out` as given must be shorter.
pub(crate) const PATH_BYTES_MAX: usize = 4096;

/// Longest file name (`NAME_MAX`): the temporary name beside `--out` must fit it too.
pub(crate) const NAME_BYTES_MAX: usize = 255;

/// Where the grant goes: `--out`'s directory, opened once before connecting, and its file
/// name there. Every later step is relative to this directory fd.
#[derive(Debug)]
pub struct Out {
    dir: OwnedFd,
    name: std::ffi::OsString,
    path: PathBuf,
    /// The checkpoint's and the grant's temporary files, created and their space written
    /// by [`Out::prepare`]: a file system filled after the consumer started cannot make
    /// the persist fail. Each is taken by its persist; one never moved into place is
    /// unlinked on drop.
    checkpoint_tmp: Option<Reserved>,
    grant_tmp: Option<Reserved>,
}

/// A temporary file beside `--out` (`.NAME.PID.RANDOM.tmp`, `O_EXCL`, 0600) whose first
/// `len` bytes are already written (zeros): overwriting them needs no new space on file
/// systems that overwrite in place (ext4, xfs, tmpfs; not a copy-on-write one such as
/// btrfs, docs/OPERATOR.md).
#[derive(Debug)]
pub(crate) struct Reserved {
    name: std::ffi::OsString,
    file: std::fs::File,
}

impl Drop for Out {
    fn drop(&mut self) {
        for r in [self.checkpoint_tmp.take(), self.grant_tmp.take()]
            .into_iter()
            .flatten()
        {
            let _ = rustix::fs::unlinkat(&self.dir, &r.name, rustix::fs::AtFlags::empty());
        }
    }
}

/// Directories walked up from `--out`'s at most (a path of `PATH_MAX` bytes has fewer).
pub(crate) const ANCESTORS_MAX: usize = 2048;

/// How `--out`'s directory and each ancestor are opened: read-only, a directory, closed on
/// exec (a file named as the directory is refused either way: `ENOTDIR` here, or when its
/// `..` is opened).
const ANCESTOR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

/// `FUSE_SUPER_MAGIC`: a file system served by a process.
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

/// The directory `fd` is on a file system whose owners and modes, and whose mount ids,
/// the checks can believe: not FUSE (its server, any user who mounted it with
/// `allow_other`, answers every owner, mode and `..`, and can serve another file at the
/// path later: found by attacking the release binaries, a uid 1000 `fuse-overlayfs`
/// answering root's ownership was accepted), on a kernel that gives mount ids
/// (`STATX_MNT_ID`, Linux 5.8; without them a directory bound onto its own child reads
/// as `/`). Returns its mount id.
pub(crate) fn trusted_file_system(fd: &OwnedFd) -> Result<u64, String> {
    let name = || repoch_sys::fs::name_of(fd).unwrap_or_else(|| "an ancestor".into());
    let fs = rustix::fs::fstatfs(fd).map_err(|e| format!("{}: {e}", name()))?;
    if fs.f_type as i64 == FUSE_SUPER_MAGIC {
        return Err(format!(
            "{} is on a FUSE file system: its server answers every owner and mode, and could serve another file at the path later; give a path on a kernel file system",
            name()
        ));
    }
    repoch_sys::fs::mount_id(fd).ok_or_else(|| {
        format!(
            "{}: the kernel gives no mount id (statx STATX_MNT_ID, Linux 5.8): the path's mounts cannot be told apart",
            name()
        )
    })
}

/// Every ancestor of `--out`'s directory `dir`, up to `/`, is owned by root or this user
/// (`me`) and writable by no one else unless sticky (as `/tmp`, where no one renames an
/// entry of another's): an owner of an ancestor could rename `--out`'s directory and put
/// another in its place after the checks, and a later reader of the path (the new root
/// through `REPOCH_GRANT`, `repoch-consume verify PATH`) would read a planted grant.
/// Walked by descriptor (`..` of each), named by the kernel's name of each.
fn check_ancestors(dir: &OwnedFd, me: u32) -> Result<(), String> {
    let up = |fd: &OwnedFd| {
        rustix::fs::openat(fd, "..", ANCESTOR_FLAGS, Mode::empty())
            .map_err(|e| format!("an ancestor of its directory: {e}"))
    };
    // Each directory's stat and mount, read once.
    let stat = |fd: &OwnedFd| {
        let mount = trusted_file_system(fd)?;
        rustix::fs::fstat(fd)
            .map(|st| (st, mount))
            .map_err(|e| format!("an ancestor of its directory: {e}"))
    };
    let (mut below, mut below_mount) = stat(dir)?;
    let mut below_fd = dir.try_clone().map_err(|e| format!("its directory: {e}"))?;
    let mut at = up(dir)?;
    for _ in 0..ANCESTORS_MAX {
        let (st, mount) = stat(&at)?;
        // `/`: its `..` is itself, on the same mount (a directory bound onto its own child
        // has the same inode above it, on another mount: the walk goes on).
        if (st.st_dev, st.st_ino, mount) == (below.st_dev, below.st_ino, below_mount) {
            return Ok(());
        }
        let sticky = st.st_mode & 0o1000 != 0;
        let shared = st.st_mode & 0o022 != 0;
        // Root's or this user's (one owner when this user is root).
        let owned = [0, me].contains(&st.st_uid);
        let name = || repoch_sys::fs::name_of(&at).unwrap_or_else(|| "an ancestor".into());
        if !owned || (shared && !sticky) {
            return Err(format!(
                "its ancestor {} is owned by uid {} with mode {:o}; every ancestor must be owned by root or this user (uid {me}) and writable by no one else unless sticky",
                name(),
                st.st_uid,
                st.st_mode & 0o7777
            ));
        }
        // The directory below is a mount's root: the mount point it covers is an entry of
        // this one, never seen by the walk. In a directory others can write (sticky), its
        // owner, whoever that is, could rename it from another mount namespace.
        if shared && below_mount != mount {
            return Err(format!(
                "{} is a mount point in the sticky directory {} (mode {:o}): the owner of the directory it covers cannot be seen, and could rename it; mount it where only root or this user (uid {me}) can write",
                repoch_sys::fs::name_of(&below_fd).unwrap_or_else(|| "a directory".into()),
                name(),
                st.st_mode & 0o7777
            ));
        }
        (below, below_mount) = (st, mount);
        below_fd = at;
        at = up(&below_fd)?;
    }
    Err(format!("more than {ANCESTORS_MAX} ancestors"))
}

/// Neither the grant's name nor its checkpoint's exists in `dir`: the grant and its
/// checkpoint are never written over a file.
fn nothing_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> Result<(), String> {
    for n in [name.to_owned(), checkpoint_name(name)] {
        match rustix::fs::statat(dir, &n, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(_) => {
                return Err(format!(
                    "{} exists; the grant and its checkpoint are never written over a file",
                    n.to_string_lossy()
                ))
            }
            Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// `--out`'s directory, opened with no symbolic or magic link in its path (readers after
/// the grant take this path, and a link's owner could point it elsewhere once the grant
/// landed; the ancestors checked after are then the path's), owned by this user and
/// writable by no one else: anyone else who can write it could plant the grant's or its
/// checkpoint's name between this check and the persist, and the epoch would end
/// uncertain with no grant file (docs/OPERATOR.md, "Recovering (once)").
fn open_directory(out: &Path) -> Result<OwnedFd, String> {
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let linked = |e: &std::io::Error| {
        e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
            || std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink())
    };
    let fd = repoch_sys::fs::open_path(dir, ANCESTOR_FLAGS, 0).map_err(|e| match linked(&e) {
        true => "its path goes through a symbolic link: give its directory's real path (readers of the path after the grant would follow the link)".to_owned(),
        false => format!("its directory: {e}"),
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| format!("its directory: {e}"))?;
    let me = rustix::process::geteuid().as_raw();
    if st.st_uid != me || st.st_mode & 0o022 != 0 {
        return Err(format!(
            "its directory is owned by uid {} with mode {:o}; it must be owned by this user (uid {me}) and writable by no one else",
            st.st_uid,
            st.st_mode & 0o7777
        ));
    }
    Ok(fd)
}

impl Out {
    /// Checks `--out` before anything can be used: its directory opens, its name is a plain
    /// file name short enough for the temporary name, and nothing exists there (a usage
    /// error, exit 64: no epoch is touched). The grant is still never written over a file
    /// that appears later (see [`Out::persist`]).
    pub fn prepare(out: &Path) -> Result<Out, Error> {
        use std::os::unix::ffi::OsStrExt as _;
        let usage = |why: String| Error::Usage(format!("--out {}: {why}", out.display()));
        // No `.` or `..` segment (a leading `./` aside): the ancestors are walked from the
        // directory the path opens, and readers after the grant take the path as given; a
        // `..` would pass through a directory the walk never sees, and `NAME/.` names no
        // file.
        let bytes = out.as_os_str().as_bytes();
        // The new root opens the path as given (REPOCH_GRANT): one longer than a path can
        // be is refused here, not found unusable once the grant is spent.
        if bytes.len() >= PATH_BYTES_MAX {
            return Err(usage(format!(
                "a path of {} bytes, not below PATH_MAX ({PATH_BYTES_MAX}): the new root could not open it",
                bytes.len()
            )));
        }
        let mut segments = bytes
            .split(|b| *b == b'/')
            .skip(usize::from(bytes.starts_with(b"./")));
        if segments.any(|seg| seg == b"." || seg == b"..") {
            return Err(usage(
                "a path with a '.' or '..' segment: give the path itself".into(),
            ));
        }
        let name = match out.file_name() {
            Some(n) if !bytes.ends_with(b"/") => n.to_owned(),
            _ => return Err(usage("not a file name".into())),
        };
        let overhead =
            Out::temporary_name(std::ffi::OsStr::new(""), u32::MAX, &[0; TEMP_RANDOM_BYTES]).len();
        let overhead = overhead.saturating_add(CHECKPOINT_SUFFIX.len());
        if name.len().saturating_add(overhead) > NAME_BYTES_MAX {
            return Err(usage(format!(
                "a file name of at most {} bytes (its checkpoint's temporary name must fit NAME_MAX)",
                NAME_BYTES_MAX - overhead
            )));
        }
        let dir = open_directory(out).map_err(usage)?;
        let me = rustix::process::geteuid().as_raw();
        check_ancestors(&dir, me).map_err(usage)?;
        nothing_at(&dir, &name).map_err(usage)?;
        let mut o = Out {
            dir,
            name,
            path: out.to_owned(),
            checkpoint_tmp: None,
            grant_tmp: None,
        };
        let reserve = |o: &Out, n: &std::ffi::OsStr, len: usize| {
            o.reserve(n, len)
                .map_err(|e| usage(format!("reserving {len} bytes beside it: {e}")))
        };
        o.checkpoint_tmp = Some(reserve(
            &o,
            &checkpoint_name(&o.name),
            repoch_protocol::limits::CHECKPOINT_BYTES_MAX,
        )?);
        o.grant_tmp = Some(reserve(&o, &o.name, FRAME_BYTES_MAX)?);
        Ok(o)
    }

    /// Creates the temporary file for `name` and writes `len` zeros to it, fsynced.
    fn reserve(&self, name: &std::ffi::OsStr, len: usize) -> std::io::Result<Reserved> {
        let mut random = [0u8; TEMP_RANDOM_BYTES];
        rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty())?;
        let tmp = Out::temporary_name(name, std::process::id(), &random);
        let fd = rustix::fs::openat(
            &self.dir,
            &tmp,
            // Ordered so that any `|` -> `&` mutant drops WRONLY or CREATE, which a test
            // sees: NOFOLLOW, EXCL and CLOEXEC cannot be seen on a random name
            // (docs/MUTANTS.md).
            OFlags::NOFOLLOW | OFlags::WRONLY | OFlags::EXCL | OFlags::CREATE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let mut file = std::fs::File::from(fd);
        if let Err(e) = file
            .write_all(&vec![0u8; len])
            .and_then(|()| file.sync_all())
        {
            let _ = rustix::fs::unlinkat(&self.dir, &tmp, rustix::fs::AtFlags::empty());
            return Err(e);
        }
        Ok(Reserved { name: tmp, file })
    }

    /// `.NAME.PID.RANDOM.tmp`: unique per attempt, so a file a crash left behind never
    /// blocks a later run (docs/OPERATOR.md says what may be left).
    pub(crate) fn temporary_name(
        name: &std::ffi::OsStr,
        pid: u32,
        random: &[u8; TEMP_RANDOM_BYTES],
    ) -> std::ffi::OsString {
        let mut t = std::ffi::OsString::from(".");
        t.push(name);
        t.push(format!(".{pid}.{}.tmp", hex::encode(random)));
        t
    }

    /// Makes the grant durable at `--out` without ever showing a partial file there: written
    /// to a temporary name in the same directory (`O_EXCL`, 0600), fsynced, then moved into
    /// place with `renameat2(RENAME_NOREPLACE)` (or, where the file system lacks it,
    /// `linkat` then unlinking the temporary name), which fails rather than replace anything;
    /// then the directory is fsynced. Success is reported only once the grant is durable.
    pub fn persist(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let (name, path) = (self.name.clone(), self.path.clone());
        let tmp = self.grant_tmp.take();
        self.persist_as(tmp, &name, &path, bytes, true)
    }

    /// The checkpoint taken with the grant, made durable at `--out` + `.checkpoint` the same
    /// way, before the grant: a grant file at `--out` always has its checkpoint beside it
    /// (docs/AUDITOR.md, "Checkpoints").
    pub fn persist_checkpoint(&mut self, note: &str) -> Result<(), Error> {
        let name = checkpoint_name(&self.name);
        let path = self.path.with_file_name(&name);
        let tmp = self.checkpoint_tmp.take();
        self.persist_as(tmp, &name, &path, note.as_bytes(), false)
    }

    fn persist_as(
        &self,
        tmp: Option<Reserved>,
        name: &std::ffi::OsStr,
        path: &Path,
        bytes: &[u8],
        grant: bool,
    ) -> Result<(), Error> {
        use rustix::fs::{AtFlags, RenameFlags};
        use std::os::unix::fs::FileExt as _;
        let perr = |what: &str, e: std::io::Error| {
            Error::Persist(format!("{} ({what}): {e}", path.display()))
        };
        let Reserved { name: tmp, file: f } = tmp.ok_or_else(|| {
            perr(
                "temporary file",
                std::io::Error::other("already used: each file is persisted once"),
            )
        })?;
        let unlink = || {
            let _ = rustix::fs::unlinkat(&self.dir, &tmp, AtFlags::empty());
        };
        // Over the zeros written at `prepare`, then cut to its length.
        if let Err(e) = f
            .write_all_at(bytes, 0)
            .and_then(|()| f.set_len(bytes.len() as u64))
            .and_then(|()| f.sync_all())
        {
            unlink();
            return Err(perr("write", e));
        }
        drop(f);
        if grant {
            barrier::reach("persist-after-write");
        }
        match rustix::fs::renameat_with(&self.dir, &tmp, &self.dir, name, RenameFlags::NOREPLACE) {
            Ok(()) => {}
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
                let linked = rustix::fs::linkat(&self.dir, &tmp, &self.dir, name, AtFlags::empty());
                unlink();
                linked.map_err(|e| perr("link into place", e.into()))?;
            }
            Err(e) => {
                unlink();
                return Err(perr("move into place", e.into()));
            }
        }
        rustix::fs::fsync(&self.dir).map_err(|e| perr("directory fsync", e.into()))
    }
}

/// Random bytes in a temporary grant file's name.
pub(crate) const TEMP_RANDOM_BYTES: usize = 8;

/// What the checkpoint file's name adds to `--out`'s.
pub const CHECKPOINT_SUFFIX: &str = ".checkpoint";

/// `--out` + `.checkpoint`: where the checkpoint taken with the grant is kept.
pub fn checkpoint_name(name: &std::ffi::OsStr) -> std::ffi::OsString {
    let mut n = name.to_owned();
    n.push(CHECKPOINT_SUFFIX);
    n
}

/// The checkpoint file kept beside a grant file.
pub fn checkpoint_path(grant: &Path) -> PathBuf {
    let mut p = grant.as_os_str().to_owned();
    p.push(CHECKPOINT_SUFFIX);
    PathBuf::from(p)
}

/// [`Out::prepare`] then [`Out::persist`]: the grant durable at `out`, never over a file.
pub fn persist(out: &Path, bytes: &[u8]) -> Result<(), Error> {
    Out::prepare(out)?.persist(bytes)
}

//! The durable operations of the state store, behind one small interface, so that the same
//! enrollment and append code runs against the real file system ([`Real`]) and against a
//! deterministic crash simulation ([`crate::sim::Sim`]).
//!
//! Every handle is relative to a directory handle: nothing follows a symlink.

use std::io;
use std::os::fd::OwnedFd;

use rustix::fs::{self, Mode, OFlags};

use repoch_sys::fs::{open_at, read_bounded};

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
        read_bounded(f, max)
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

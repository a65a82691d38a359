//! A deterministic simulation of the storage the state store relies on, for crash testing.
//!
//! It keeps *cached* state (what reads see) and *durable* state (what survives a crash)
//! apart, with SQLite's crash-test semantics: at a crash, each write made since the file's
//! last sync is applied, dropped, or torn at sector granularity (some 512-byte sectors
//! written, others not); directory operations since the directory's last sync survive as an
//! ordered prefix. Every choice comes from a seeded generator, so a failing seed replays.

use std::collections::BTreeMap;
use std::io;

use crate::storage::Storage;

pub const SECTOR_BYTES: usize = 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    File(usize),
    Dir(usize),
}

#[derive(Clone, Debug, Default)]
struct SimFile {
    durable: Vec<u8>,
    cached: Vec<u8>,
    pending: Vec<(usize, Vec<u8>)>,
}

#[derive(Clone, Debug, Default)]
struct SimDir {
    durable: BTreeMap<String, Node>,
    cached: BTreeMap<String, Node>,
    /// Snapshots of `cached` after each unsynced operation, oldest first.
    pending: Vec<BTreeMap<String, Node>>,
}

/// What the simulation does at operation number `at` (counting every durable operation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The machine stops before the operation takes effect.
    Crash { at: u64 },
    /// The operation fails with `EIO` (a write or sync error) and the machine runs on.
    Error { at: u64 },
}

#[derive(Clone, Debug)]
pub struct Sim {
    files: Vec<SimFile>,
    dirs: Vec<SimDir>,
    ops: u64,
    fault: Option<Fault>,
    crashed: bool,
    rng: u64,
}

impl Sim {
    /// A fresh machine with an empty root directory (handle 0).
    pub fn new(seed: u64) -> Sim {
        Sim {
            files: vec![],
            dirs: vec![SimDir::default()],
            ops: 0,
            fault: None,
            crashed: false,
            rng: seed | 1,
        }
    }
    pub fn root(&self) -> usize {
        0
    }
    pub fn set_fault(&mut self, f: Option<Fault>) {
        self.fault = f;
    }
    pub fn ops(&self) -> u64 {
        self.ops
    }
    pub fn crashed(&self) -> bool {
        self.crashed
    }

    /// Counts an operation and applies the configured fault.
    fn step(&mut self) -> io::Result<()> {
        if self.crashed {
            return Err(io::Error::other("machine is down"));
        }
        let n = self.ops;
        self.ops += 1;
        match self.fault {
            Some(Fault::Crash { at }) if at == n => {
                self.crashed = true;
                Err(io::Error::other("simulated crash"))
            }
            Some(Fault::Error { at }) if at == n => Err(io::Error::from_raw_os_error(5)),
            _ => Ok(()),
        }
    }

    /// Power comes back: what is on disk now, after resolving every unsynced operation
    /// with the seeded generator.
    pub fn reboot(self) -> Sim {
        let mut rng = self.rng;
        let mut sim = self.reboot_with(|n| xorshift(&mut rng) % n);
        sim.rng = rng;
        sim
    }

    /// Power comes back, each unsynced operation resolved by `pick(n)` (a number below
    /// `n`): per unsynced write 0 dropped, 1 applied, 2 torn, and when torn, per sector 0
    /// written or not; per directory, how many of its unsynced operations survive. The
    /// checker (`issuer/tests/checker.rs`) enumerates these.
    pub fn reboot_with(mut self, mut pick: impl FnMut(u64) -> u64) -> Sim {
        for i in 0..self.files.len() {
            let pending = std::mem::take(&mut self.files[i].pending);
            let mut disk = self.files[i].durable.clone();
            for (off, bytes) in pending {
                match pick(3) {
                    0 => {} // dropped
                    1 => put(&mut disk, off, &bytes),
                    _ => {
                        // torn: each sector of the write independently written or not
                        let mut pos = off;
                        while pos < off + bytes.len() {
                            let end = ((pos / SECTOR_BYTES) + 1) * SECTOR_BYTES;
                            let end = end.min(off + bytes.len());
                            if pick(2) == 0 {
                                put(&mut disk, pos, &bytes[pos - off..end - off]);
                            }
                            pos = end;
                        }
                    }
                }
            }
            self.files[i] = SimFile {
                durable: disk.clone(),
                cached: disk,
                pending: vec![],
            };
        }
        for i in 0..self.dirs.len() {
            let pending = std::mem::take(&mut self.dirs[i].pending);
            let keep = pick(pending.len() as u64 + 1) as usize;
            let state = if keep == 0 {
                self.dirs[i].durable.clone()
            } else {
                pending[keep - 1].clone()
            };
            self.dirs[i] = SimDir {
                durable: state.clone(),
                cached: state,
                pending: vec![],
            };
        }
        Sim {
            files: self.files,
            dirs: self.dirs,
            ops: 0,
            fault: None,
            crashed: false,
            rng: self.rng,
        }
    }

    pub fn lookup(&self, dir: usize, name: &str) -> Option<Node> {
        self.dirs[dir].cached.get(name).copied()
    }
    pub fn names(&self, dir: usize) -> Vec<String> {
        self.dirs[dir].cached.keys().cloned().collect()
    }
    pub fn content(&self, file: usize) -> &[u8] {
        &self.files[file].cached
    }
    /// What a crash right now would keep at least: the file's synced content.
    pub fn durable(&self, file: usize) -> &[u8] {
        &self.files[file].durable
    }

    fn dir_op(&mut self, dir: usize, f: impl FnOnce(&mut BTreeMap<String, Node>)) {
        let d = &mut self.dirs[dir];
        f(&mut d.cached);
        let snap = d.cached.clone();
        d.pending.push(snap);
    }
}

/// xorshift64*: small, deterministic, good enough to pick crash outcomes.
fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Writes `bytes` at `off`, extending with zeros as a sparse file would read.
fn put(disk: &mut Vec<u8>, off: usize, bytes: &[u8]) {
    if disk.len() < off + bytes.len() {
        disk.resize(off + bytes.len(), 0);
    }
    disk[off..off + bytes.len()].copy_from_slice(bytes);
}

fn exists() -> io::Error {
    io::Error::from(io::ErrorKind::AlreadyExists)
}

impl Storage for Sim {
    type Dir = usize;
    type File = usize;
    fn mkdir_at(&mut self, parent: &usize, name: &str, _mode: u32) -> io::Result<()> {
        self.step()?;
        if self.lookup(*parent, name).is_some() {
            return Err(exists());
        }
        self.dirs.push(SimDir::default());
        let id = self.dirs.len() - 1;
        self.dir_op(*parent, |m| {
            m.insert(name.into(), Node::Dir(id));
        });
        Ok(())
    }
    fn open_dir_at(&mut self, parent: &usize, name: &str) -> io::Result<usize> {
        match self.lookup(*parent, name) {
            Some(Node::Dir(d)) => Ok(d),
            _ => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }
    fn create_at(&mut self, dir: &usize, name: &str, _mode: u32) -> io::Result<usize> {
        self.step()?;
        if self.lookup(*dir, name).is_some() {
            return Err(exists());
        }
        self.files.push(SimFile::default());
        let id = self.files.len() - 1;
        self.dir_op(*dir, |m| {
            m.insert(name.into(), Node::File(id));
        });
        Ok(id)
    }
    fn write(&mut self, f: &usize, bytes: &[u8]) -> io::Result<usize> {
        self.step()?;
        let file = &mut self.files[*f];
        let off = file.cached.len();
        file.cached.extend_from_slice(bytes);
        file.pending.push((off, bytes.to_vec()));
        Ok(bytes.len())
    }
    fn sync_data(&mut self, f: &usize) -> io::Result<()> {
        if let Err(e) = self.step() {
            if !self.crashed {
                // A failed fdatasync (fsyncgate): the kernel reports the error once and
                // marks the dirty pages clean. Reads still see the writes; the disk never
                // gets them, and a later fdatasync succeeds without writing them.
                self.files[*f].pending.clear();
            }
            return Err(e);
        }
        let file = &mut self.files[*f];
        for (off, bytes) in std::mem::take(&mut file.pending) {
            put(&mut file.durable, off, &bytes);
        }
        Ok(())
    }
    fn sync_dir(&mut self, d: &usize) -> io::Result<()> {
        self.step()?;
        let dir = &mut self.dirs[*d];
        dir.durable = dir.cached.clone();
        dir.pending.clear();
        Ok(())
    }
    fn read_all(&mut self, f: &usize, max: usize) -> io::Result<Vec<u8>> {
        if self.crashed {
            return Err(io::Error::other("machine is down"));
        }
        let c = &self.files[*f].cached;
        if c.len() > max {
            return Err(io::Error::new(io::ErrorKind::FileTooLarge, "too large"));
        }
        Ok(c.clone())
    }
    fn rename_at(&mut self, dir: &usize, from: &str, to: &str) -> io::Result<()> {
        self.step()?;
        if self.lookup(*dir, to).is_some() {
            return Err(exists());
        }
        let Some(node) = self.lookup(*dir, from) else {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        };
        self.dir_op(*dir, |m| {
            m.remove(from);
            m.insert(to.into(), node);
        });
        Ok(())
    }
}

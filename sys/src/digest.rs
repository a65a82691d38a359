//! An executable's sha256, read once and then proven unchanged by its stamp instead of read
//! again (docs/THREAT-MODEL.md, "The consumer executable, hashed once per issuance").
//!
//! The stamp is what `statx` says of the open file: its identity (device, inode, birth,
//! owner, group, mode), size, change time and modification time, nanoseconds. Every write,
//! truncate, `chmod`, `chown`, link or xattr change through the kernel sets the change time
//! to the current time, and nothing can set it back (`utimensat` sets only the access and
//! modification times); a rename over the path is another inode. So a stamp equal to the one
//! taken before the file was read, when that read saw the same stamp after it, proves the
//! same bytes, on two conditions: the change before the stamp was older than
//! [`CHANGE_SETTLED_MS`] when the stamp was taken (a change in the same clock tick as an
//! earlier one can carry the same time), and the clock was not set back since (root only).
//! A file whose stamp cannot prove anything (too recent, changed while read, no times in
//! the statx answer) is simply read again each time.

use crate::error::{Context as _, Error};
use std::os::fd::AsFd;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use repoch_protocol::{Hash, Identity};
use rustix::fs::StatxFlags;
use sha2::{Digest as _, Sha256};

/// How old a file's last change must be, when its stamp is taken, for the stamp to prove
/// later that the file is unchanged. The kernel stamps changes from a coarse clock (one
/// tick, at most 10 ms): two changes in one tick can carry the same change time, so a
/// change this recent is not a proof, and the file is read at every observation instead.
pub const CHANGE_SETTLED_MS: u64 = 1000;

/// Executables whose proven digest repochd keeps for the peers it describes (the latest
/// per device and inode; the oldest forgotten first).
pub const REMEMBERED_MAX: usize = 16;

/// Largest executable hashed: the consumer executable enrolled, a peer's, a principal's.
pub const EXE_BYTES_MAX: u64 = 512 * 1024 * 1024;

/// Bytes read at once while hashing.
const CHUNK_BYTES: usize = 64 * 1024;

/// What `statx` says of an open file that any change to its bytes or metadata changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub id: Identity,
    pub size: u64,
    /// Change time (seconds, nanoseconds).
    pub ctime: (i64, u32),
    /// Modification time (seconds, nanoseconds).
    pub mtime: (i64, u32),
}

impl Stamp {
    /// The open file's stamp; an error when `statx` gives no size or times.
    pub fn of(fd: impl AsFd) -> std::io::Result<Stamp> {
        let sx = crate::fs::statx(fd)?;
        let need = StatxFlags::SIZE | StatxFlags::CTIME | StatxFlags::MTIME;
        if !StatxFlags::from_bits_retain(sx.stx_mask).contains(need) {
            return Err(std::io::Error::other(format!(
                "statx gave no size or times (mask {:#x})",
                sx.stx_mask
            )));
        }
        Ok(Stamp {
            id: crate::fs::identity_of(&sx)?,
            size: sx.stx_size,
            ctime: (sx.stx_ctime.tv_sec, sx.stx_ctime.tv_nsec),
            mtime: (sx.stx_mtime.tv_sec, sx.stx_mtime.tv_nsec),
        })
    }

    /// Whether the last change is at least [`CHANGE_SETTLED_MS`] older than `now`.
    fn settled(&self, now: SystemTime) -> bool {
        let (Ok(secs), Ok(now)) = (u64::try_from(self.ctime.0), now.duration_since(UNIX_EPOCH))
        else {
            return false;
        };
        let changed = Duration::new(secs, self.ctime.1.min(999_999_999));
        changed.saturating_add(Duration::from_millis(CHANGE_SETTLED_MS)) <= now
    }
}

/// A digest and the stamp that proves it is still the file's: taken before the file was
/// read, equal after the read, settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proof {
    pub stamp: Stamp,
    pub digest: Hash,
}

impl Proof {
    /// Whether `now`, the file's stamp taken now, proves it is the file hashed, unchanged.
    pub fn proves(&self, now: &Stamp) -> bool {
        *now == self.stamp
    }
}

/// Reads `fd` from its start to its end (at most `max` bytes, else an error) and hashes it.
/// Returns the digest, and its proof when the file's stamp was settled before the read and
/// the same after it.
pub fn hash(fd: impl AsFd, max: u64) -> Result<(Hash, Option<Proof>), Error> {
    let now = SystemTime::now();
    let before = Stamp::of(&fd).ok();
    let digest = read_whole(&fd, max)?;
    let after = Stamp::of(&fd).ok();
    let proof = match (before, after) {
        (Some(b), Some(a)) if a == b && b.settled(now) => Some(Proof { stamp: b, digest }),
        _ => None,
    };
    Ok((digest, proof))
}

fn read_whole(fd: impl AsFd, max: u64) -> Result<Hash, Error> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK_BYTES];
    let mut total = 0u64;
    loop {
        let n = rustix::io::pread(&fd, &mut buf, total).context("pread")?;
        if n == 0 {
            return Ok(Hash(h.finalize().into()));
        }
        total = total.saturating_add(n as u64);
        if total > max {
            return Err(Error::Found(format!("larger than {max} bytes")));
        }
        h.update(&buf[..n]);
    }
}

/// Bytes at the end of a file hashed by [`tail`].
pub const TAIL_BYTES: u64 = 64 * 1024;

/// The sha256 of the last `TAIL_BYTES` of `fd` (of all of it when shorter), `size` bytes
/// long: a cheap first comparison of two files of one size, before their whole digests (two
/// builds of one program differ at the end as often as anywhere; a true copy is then hashed
/// whole).
pub fn tail(fd: impl AsFd, size: u64) -> Result<Hash, Error> {
    let mut h = Sha256::new();
    let mut at = size.saturating_sub(TAIL_BYTES);
    let mut buf = vec![0u8; CHUNK_BYTES];
    while at < size {
        let n = rustix::io::pread(&fd, &mut buf, at).context("pread")?;
        if n == 0 {
            return Err(Error::Found(format!("shorter than its {size} bytes")));
        }
        h.update(&buf[..n.min((size - at) as usize)]);
        at = at.saturating_add(n as u64);
    }
    Ok(Hash(h.finalize().into()))
}

/// Proven digests of the executables repochd hashed, for the peers it describes.
static REMEMBERED: Mutex<Vec<Proof>> = Mutex::new(Vec::new());

/// Keeps `p` for [`digest`] (replacing an older proof of the same device and inode).
pub fn remember(p: Proof) {
    let mut r = REMEMBERED.lock().unwrap_or_else(|e| e.into_inner());
    r.retain(|q| (q.stamp.id.dev, q.stamp.id.ino) != (p.stamp.id.dev, p.stamp.id.ino));
    if r.len() >= REMEMBERED_MAX {
        r.remove(0);
    }
    r.push(p);
}

/// `fd`'s digest: a remembered one when the file's stamp now proves it, else read whole
/// (at most `max` bytes) and remembered when its stamp can prove it later.
pub fn digest(fd: impl AsFd, max: u64) -> Result<Hash, Error> {
    if let Ok(now) = Stamp::of(&fd) {
        if now.size > max {
            return Err(Error::Found(format!("larger than {max} bytes")));
        }
        let r = REMEMBERED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = r.iter().find(|p| p.proves(&now)) {
            return Ok(p.digest);
        }
    }
    let (digest, proof) = hash(&fd, max)?;
    if let Some(p) = proof {
        remember(p);
    }
    Ok(digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn stamp(ctime: (i64, u32)) -> Stamp {
        Stamp {
            id: Identity {
                dev: 1,
                ino: 2,
                uid: 0,
                gid: 0,
                mode: 0o100755,
                birth: None,
            },
            size: 3,
            ctime,
            mtime: ctime,
        }
    }

    #[test]
    fn a_change_within_the_margin_is_not_settled() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(stamp((999_999, 0)).settled(now));
        assert!(!stamp((999_999, 1)).settled(now));
        assert!(!stamp((1_000_000, 0)).settled(now));
        assert!(
            !stamp((2_000_000, 0)).settled(now),
            "a change in the future"
        );
        assert!(!stamp((-1, 0)).settled(now), "before 1970");
    }

    #[test]
    fn a_fresh_file_is_hashed_without_a_proof_and_a_settled_one_with_one() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"hello").unwrap();
        let (d, proof) = hash(f.as_file(), 1024).unwrap();
        assert_eq!(d, Hash::of(b"hello"));
        assert_eq!(proof, None, "changed just now: no proof");
        std::thread::sleep(Duration::from_millis(CHANGE_SETTLED_MS + 100));
        let (d, proof) = hash(f.as_file(), 1024).unwrap();
        let p = proof.expect("settled: a proof");
        assert_eq!(d, p.digest);
        assert!(p.proves(&Stamp::of(f.as_file()).unwrap()));
        // The same size, other bytes: the stamp no longer proves it.
        use std::os::unix::fs::FileExt as _;
        f.as_file().write_all_at(b"j", 0).unwrap();
        assert!(!p.proves(&Stamp::of(f.as_file()).unwrap()));
        assert_eq!(
            hash(f.as_file(), 4).unwrap_err().to_string(),
            "larger than 4 bytes"
        );
    }
}

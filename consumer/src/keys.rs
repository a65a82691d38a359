//! The consumer's key files: reading a secret or public key, and making a pair.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use repoch_protocol::PublicKey;
use rustix::fs::{Mode, OFlags};

use crate::*;

/// Largest key file read (64 hex digits and a newline, with room for a comment-free
/// editor's whitespace).
pub const KEY_FILE_BYTES_MAX: usize = 1024;

/// A key file's text: a regular file, read without waiting (a FIFO is refused) and at most
/// `KEY_FILE_BYTES_MAX` bytes.
pub(crate) fn read_key_text(p: &Path) -> Result<String, Error> {
    let bytes = read_bounded(p, KEY_FILE_BYTES_MAX)
        .map_err(|e| Error::Usage(format!("{}: {e}", p.display())))?;
    String::from_utf8(bytes).map_err(|_| Error::Usage(format!("{}: not UTF-8", p.display())))
}

pub fn read_key(p: &Path) -> Result<SigningKey, Error> {
    let text = read_key_text(p)?;
    repoch_protocol::sign::signing_key_from_hex(&text)
        .ok_or_else(|| Error::Usage(format!("{}: not a key file (64 hex digits)", p.display())))
}

pub fn read_public(p: &Path) -> Result<PublicKey, Error> {
    let text = read_key_text(p)?;
    PublicKey::from_hex(&text)
        .filter(|k| k.verifying_key().is_some())
        .ok_or_else(|| Error::Usage(format!("{}: not a public key (64 hex digits)", p.display())))
}

/// A new key pair: `path` (secret, 0600, `O_EXCL`) and `path.pub`.
pub fn keygen(path: &Path) -> Result<PublicKey, Error> {
    let mut b = [0u8; 32];
    rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty())
        .map_err(|e| Error::Io(format!("getrandom: {e}")))?;
    let key = SigningKey::from_bytes(&b);
    let write = |p: &Path, text: String, mode: u32| -> Result<(), Error> {
        let fd = rustix::fs::open(
            p,
            OFlags::WRONLY | OFlags::CLOEXEC | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::EXCL,
            Mode::from_raw_mode(mode),
        )
        .map_err(|e| Error::Usage(format!("{}: {e}", p.display())))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| Error::Io(e.to_string()))?;
        let mut f = std::fs::File::from(fd);
        f.write_all(text.as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| Error::Io(format!("{}: {e}", p.display())))
    };
    let public = PublicKey::from(&key.verifying_key());
    write(path, format!("{}\n", hex::encode(key.to_bytes())), 0o600)?;
    write(
        &PathBuf::from(format!("{}.pub", path.display())),
        format!("{}\n", public.to_hex()),
        0o644,
    )?;
    Ok(public)
}

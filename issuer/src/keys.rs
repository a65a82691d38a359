//! Key files: 64 hex digits and a newline. Secret keys are 0600 and root-owned.

use std::io::Write as _;
use std::path::Path;

use ed25519_dalek::SigningKey;
use repoch_protocol::PublicKey;
use rustix::fs::{Mode, OFlags};

use repoch_sys::fs::{open_path, read_bounded};

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a key file (expected 64 hex digits)")]
    Format { path: String },
    #[error("{path}: {kind}, not a key file")]
    NotRegular { path: String, kind: &'static str },
    #[error("{path}: secret key must be mode 0600 and owned by root or uid {uid}; found mode {mode:o} uid {found}")]
    Unprotected {
        path: String,
        uid: u32,
        mode: u32,
        found: u32,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KeyError + '_ {
    move |source| KeyError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Fresh key material from the kernel's CSPRNG.
pub fn generate() -> std::io::Result<SigningKey> {
    let mut b = [0u8; 32];
    let n = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty())?;
    assert_eq!(n, 32, "getrandom returned a short read");
    Ok(SigningKey::from_bytes(&b))
}

/// Random bytes (nonces, deployment ids).
pub fn random<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    let n = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty())?;
    assert_eq!(n, N, "getrandom returned a short read");
    Ok(b)
}

/// Writes a new key file (`O_EXCL`, never over an existing one), fsynced.
pub fn write_new(path: &Path, hex: &str, mode: u32) -> Result<(), KeyError> {
    let fd =
        open_path(path, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL, mode).map_err(io(path))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| io(path)(e.into()))?;
    let mut f = std::fs::File::from(fd);
    f.write_all(format!("{hex}\n").as_bytes())
        .map_err(io(path))?;
    f.sync_all().map_err(io(path))?;
    Ok(())
}

/// Writes a signing key to `path` (0600) and its public key to `pub_path` (0644). When the
/// public key cannot be written, the secret key just created is removed again (it was
/// created here, `O_EXCL`): a half-written pair would make the rerun fail "File exists".
pub fn write_pair(path: &Path, pub_path: &Path, key: &SigningKey) -> Result<(), KeyError> {
    write_new(path, &hex::encode(key.to_bytes()), 0o600)?;
    write_new(
        pub_path,
        &hex::encode(key.verifying_key().to_bytes()),
        0o644,
    )
    .inspect_err(|_| {
        let _ = std::fs::remove_file(path);
    })
}

fn read_hex(path: &Path) -> Result<(String, rustix::fs::Stat), KeyError> {
    // Non-blocking and a regular file only: a FIFO given as a key must not hang the reader.
    let fd = open_path(path, OFlags::RDONLY | OFlags::NONBLOCK, 0).map_err(io(path))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| io(path)(e.into()))?;
    if let Some(kind) = repoch_sys::fs::not_regular(st.st_mode) {
        return Err(KeyError::NotRegular {
            path: path.display().to_string(),
            kind,
        });
    }
    let bytes = read_bounded(&fd, 256).map_err(io(path))?;
    let text = String::from_utf8(bytes).map_err(|_| KeyError::Format {
        path: path.display().to_string(),
    })?;
    Ok((text.trim().to_owned(), st))
}

/// Reads a secret key, refusing one readable by others or owned by another user than us
/// or root. (repochd runs as its own user and reads the root-owned issuer key through
/// `CAP_DAC_READ_SEARCH`: `systemd/repochd.service`.)
pub fn read_secret(path: &Path) -> Result<SigningKey, KeyError> {
    let (text, st) = read_hex(path)?;
    let uid = rustix::process::geteuid().as_raw();
    if st.st_mode & 0o077 != 0 || (st.st_uid != uid && st.st_uid != 0) {
        return Err(KeyError::Unprotected {
            path: path.display().to_string(),
            uid,
            mode: st.st_mode & 0o7777,
            found: st.st_uid,
        });
    }
    repoch_protocol::sign::signing_key_from_hex(&text).ok_or(KeyError::Format {
        path: path.display().to_string(),
    })
}

pub fn read_public(path: &Path) -> Result<PublicKey, KeyError> {
    let (text, _) = read_hex(path)?;
    parse_public(&text).ok_or(KeyError::Format {
        path: path.display().to_string(),
    })
}

/// A public key from hex, refusing keys that are not valid curve points.
pub fn parse_public(hex: &str) -> Option<PublicKey> {
    let k = PublicKey::from_hex(hex)?;
    k.verifying_key()?;
    Some(k)
}

#[cfg(test)]
mod tests {
    use super::{generate, read_secret, write_pair};

    #[test]
    fn a_pair_whose_public_key_cannot_be_written_leaves_no_secret_key_behind() {
        let d = tempfile::tempdir().unwrap();
        let (secret, public) = (d.path().join("k"), d.path().join("k.pub"));
        // The public key's path is taken: the pair cannot be written.
        std::fs::write(&public, "taken\n").unwrap();
        let key = generate().unwrap();
        assert!(write_pair(&secret, &public, &key).is_err());
        assert!(!secret.exists(), "the secret key was left behind");
        // Once the path is free, the same command succeeds (no "File exists").
        std::fs::remove_file(&public).unwrap();
        write_pair(&secret, &public, &key).unwrap();
        assert_eq!(read_secret(&secret).unwrap().to_bytes(), key.to_bytes());
    }
}

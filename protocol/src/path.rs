//! A `path` of the schema (docs/PROTOCOL.md, "Schema"): absolute, canonical, at most
//! `PATH_BYTES_MAX` bytes. Checked where a path is enrolled and where one is decoded.

use crate::limits::PATH_BYTES_MAX;

/// Checks that a path is absolute, normalized text within bounds: no `.`/`..`/empty
/// component, no trailing slash, no NUL. Symlink components are a property of the live
/// file system and are checked where paths are opened.
pub fn check_abs_path(p: &str) -> Result<(), crate::Invalid> {
    if p.len() > PATH_BYTES_MAX {
        return Err(format!(
            "path is {} bytes, over the bound of {PATH_BYTES_MAX}",
            p.len()
        )
        .into());
    }
    if !p.starts_with('/') {
        return Err("path must be absolute".into());
    }
    if p.contains('\0') {
        return Err("path contains NUL".into());
    }
    if p == "/" {
        return Ok(());
    }
    for c in p[1..].split('/') {
        if c.is_empty() || c == "." || c == ".." {
            return Err(
                "path must be canonical (no empty, '.' or '..' component, no trailing '/')".into(),
            );
        }
    }
    Ok(())
}

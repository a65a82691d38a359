//! Where repoch keeps things: `/etc/repoch`, `/var/lib/repoch`, `/run/repoch`, all relocated
//! under one directory by `--root DIR` (or `REPOCH_ROOT`) for tests and the demo.

use std::path::{Path, PathBuf};

use repoch_protocol::DeploymentId;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Host configuration: the issuer key pair.
    pub etc: PathBuf,
    /// Deployment state directories live in `var/deployments/<id>`.
    pub var: PathBuf,
    /// Sockets.
    pub run: PathBuf,
}

pub const STATE_DIR_MODE: u32 = 0o700;
pub const ISSUER_KEY: &str = "issuer.key";
pub const ISSUER_PUB: &str = "issuer.pub";
pub const MANIFEST_FILE: &str = "manifest.cbor";
pub use repoch_protocol::epoch::LOG_FILE;
pub const LOCK_FILE: &str = "issuer.lock";
pub const DEPLOYMENTS_DIR: &str = "deployments";
pub const ADMIN_SOCKET: &str = "admin.sock";
pub const GRANT_SOCKET: &str = "grant.sock";

impl Layout {
    pub fn new(root: Option<&Path>) -> Layout {
        let base = root.unwrap_or(Path::new("/"));
        Layout {
            etc: base.join("etc/repoch"),
            var: base.join("var/lib/repoch"),
            run: base.join("run/repoch"),
        }
    }
    pub fn deployments(&self) -> PathBuf {
        self.var.join(DEPLOYMENTS_DIR)
    }
    pub fn state_dir(&self, id: &DeploymentId) -> PathBuf {
        self.deployments().join(id.to_hex())
    }
    pub fn issuer_key(&self) -> PathBuf {
        self.etc.join(ISSUER_KEY)
    }
    pub fn issuer_pub(&self) -> PathBuf {
        self.etc.join(ISSUER_PUB)
    }
    pub fn admin_socket(&self) -> PathBuf {
        self.run.join(ADMIN_SOCKET)
    }
    pub fn grant_socket(&self) -> PathBuf {
        self.run.join(GRANT_SOCKET)
    }
}

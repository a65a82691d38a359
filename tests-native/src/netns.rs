//! A network namespace of the test's own, and the lock that serialises mount namespaces.

use std::process::Command;

/// Serializes tests that make new mount namespaces (`ip netns exec` copies every mount of
/// the moment) with tests that must really unmount a file system (power loss): a copied
/// mount would keep the shut-down superblock alive and the remount would reuse it.
static MOUNT_NAMESPACES: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn mount_namespace_guard() -> std::sync::MutexGuard<'static, ()> {
    MOUNT_NAMESPACES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A per-test network namespace (`ip netns`), deleted on drop.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
    _guard: std::sync::MutexGuard<'static, ()>,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        let guard = mount_namespace_guard();
        let name = format!("repoch-{tag}");
        let o = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .expect("ip");
        assert!(
            o.status.success(),
            "ip netns add: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let _ = Command::new("ip")
            .args(["-n", &name, "link", "set", "lo", "up"])
            .output();
        Netns {
            name,
            _guard: guard,
        }
    }
    /// `cmd` run inside the namespace.
    pub fn wrap(&self, cmd: &Command) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

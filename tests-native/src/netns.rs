//! A network namespace of the test's own, and the lock that serialises mount namespaces.

use std::process::Command;

/// Keeps tests that make new mount namespaces (`ip netns exec`, `unshare -m` and
/// `systemd-nspawn` copy every mount of the moment) apart from tests that must really
/// unmount a file system (power loss, a full or dead disk, a read-only remount): a copied
/// mount would keep the shut-down superblock alive and the remount would reuse it. Makers
/// of namespaces copy nothing of each other's that matters, so any number of them run at
/// once; a test that unmounts runs alone.
static MOUNT_NAMESPACES: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Serializes the trials that run in network namespaces or a systemd container with each
/// other: their observations search every network namespace, and their deployments use the
/// same fixed ports (a container's recovery found the `tcp:*:7071` a namespace trial bound).
static NAMESPACED_TRIALS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Taken by a trial in a network namespace or a systemd container, for its life.
pub fn namespaced_trial_guard() -> std::sync::MutexGuard<'static, ()> {
    NAMESPACED_TRIALS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Taken by a test while it makes mount namespaces: shared with every other such test.
pub fn mount_namespace_guard() -> std::sync::RwLockReadGuard<'static, ()> {
    MOUNT_NAMESPACES
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Taken by a test that must really unmount a file system: no namespace is made meanwhile.
pub fn no_mount_namespaces_guard() -> std::sync::RwLockWriteGuard<'static, ()> {
    MOUNT_NAMESPACES
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A per-test network namespace (`ip netns`), deleted on drop.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
    _guard: Option<(
        std::sync::MutexGuard<'static, ()>,
        std::sync::RwLockReadGuard<'static, ()>,
    )>,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        let guard = (namespaced_trial_guard(), mount_namespace_guard());
        let mut ns = Netns::another(tag);
        ns._guard = Some(guard);
        ns
    }

    /// Another namespace in a test that already holds one from [`Netns::new`] (whose
    /// guard keeps it apart from the power-loss tests; a second guard taken by the same
    /// test could wait behind one of them, which waits for the first).
    pub fn another(tag: &str) -> Netns {
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
        Netns { name, _guard: None }
    }

    /// A veth pair between this namespace and `other`: `ours` and `theirs` are the
    /// addresses (`A.B.C.D/NN`) of each end. Returns this end's interface name.
    pub fn veth_to(&self, other: &Netns, ours: &str, theirs: &str) -> String {
        let (a, b) = (
            format!("v{}", short(&self.name)),
            format!("v{}", short(&other.name)),
        );
        let ip = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().expect("ip");
            assert!(
                o.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        };
        ip(&[
            "link",
            "add",
            &a,
            "netns",
            &self.name,
            "type",
            "veth",
            "peer",
            "name",
            &b,
            "netns",
            &other.name,
        ]);
        ip(&["-n", &self.name, "addr", "add", ours, "dev", &a]);
        ip(&["-n", &other.name, "addr", "add", theirs, "dev", &b]);
        ip(&["-n", &self.name, "link", "set", &a, "up"]);
        ip(&["-n", &other.name, "link", "set", &b, "up"]);
        a
    }

    /// Sets this namespace's interface `dev` up or down.
    pub fn link(&self, dev: &str, up: bool) {
        let o = Command::new("ip")
            .args(["-n", &self.name, "link", "set", dev])
            .arg(if up { "up" } else { "down" })
            .output()
            .expect("ip");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
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

/// An interface name (at most 15 bytes) from a namespace name: its last 12 characters.
fn short(name: &str) -> String {
    let n: Vec<char> = name.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    n[n.len().saturating_sub(12)..].iter().collect()
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

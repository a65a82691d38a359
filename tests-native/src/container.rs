//! A real systemd in an nspawn container, and the Debian package it installs.

use std::path::PathBuf;
use std::process::{Command, Output};

use crate::*;

/// The minimal Debian rootfs with systemd that unit tests boot with `systemd-nspawn`,
/// built once (mmdebstrap, about 15 s) and cached under `target/`.
pub fn nspawn_rootfs() -> PathBuf {
    let target = bin_dir().parent().expect("target").to_path_buf();
    let rootfs = target.join("nspawn-rootfs");
    let lock = std::fs::File::create(target.join("nspawn-rootfs.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    if !nspawn_rootfs_built() {
        let tmp = target.join("nspawn-rootfs.tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        let o = Command::new("mmdebstrap")
            .args([
                "--variant=minbase",
                "--include=systemd,systemd-sysv,dbus,iproute2",
                "bookworm",
            ])
            .arg(&tmp)
            .arg("http://deb.debian.org/debian")
            .output()
            .expect("mmdebstrap (apt-get install mmdebstrap)");
        assert!(
            o.status.success(),
            "mmdebstrap: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::rename(&tmp, &rootfs).unwrap();
    }
    rootfs
}

/// Whether [`nspawn_rootfs`] is already built (then mmdebstrap is not needed).
pub fn nspawn_rootfs_built() -> bool {
    bin_dir()
        .parent()
        .expect("target")
        .join("nspawn-rootfs/usr/lib/systemd/systemd")
        .exists()
}

/// The Debian package built from this tree: `REPOCH_DEB` if set, else the last
/// `target/debian/repoch_*.deb` (built by `cargo build --release -p repoch-daemon -p
/// repoch-cli -p repoch-consumer && cargo deb -p repoch-daemon --no-build`, as .ci/run does). `None`
/// when there is no such file.
pub fn debian_package() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REPOCH_DEB") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let dir = bin_dir().parent().expect("target").join("debian");
    let mut debs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("repoch_") && n.ends_with(".deb"))
        })
        .collect();
    debs.sort();
    debs.pop()
}

/// A booted systemd container (`systemd-nspawn -b`, volatile overlay so tests can share
/// the rootfs). Killed on drop.
#[derive(Debug)]
pub struct Container {
    pub nspawn: std::process::Child,
    pub leader: u32,
    /// nspawn makes a mount namespace: see [`mount_namespace_guard`]; its recoveries search
    /// every network namespace: see [`namespaced_trial_guard`].
    _guard: (
        std::sync::MutexGuard<'static, ()>,
        std::sync::RwLockReadGuard<'static, ()>,
    ),
}

/// Longest wait for a container's systemd to come up.
pub const CONTAINER_BOOT_SECONDS_MAX: u64 = 180;

impl Container {
    pub fn boot(tag: &str) -> Container {
        let rootfs = nspawn_rootfs();
        let guard = (namespaced_trial_guard(), mount_namespace_guard());
        let nspawn = Command::new("systemd-nspawn")
            .args([
                "-q",
                "-b",
                "--register=no",
                "--keep-unit",
                "--volatile=overlay",
                // nspawn's own filter keeps fanotify's calls from the container; a host
                // gives repochd them (its unit's filter lets them through).
                "--system-call-filter=fanotify_init fanotify_mark",
                "-M",
            ])
            .arg(format!(
                "r{}",
                tag.to_lowercase()
                    .replace(|c: char| !c.is_ascii_alphanumeric(), "")
            ))
            .arg("-D")
            .arg(&rootfs)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("systemd-nspawn (apt-get install systemd-container)");
        let start = std::time::Instant::now();
        let mut c = Container {
            leader: 0,
            nspawn,
            _guard: guard,
        };
        loop {
            assert!(
                start.elapsed().as_secs() < CONTAINER_BOOT_SECONDS_MAX,
                "container did not boot within {CONTAINER_BOOT_SECONDS_MAX} s"
            );
            if c.leader == 0 {
                let kids = std::fs::read_to_string(format!(
                    "/proc/{}/task/{}/children",
                    c.nspawn.id(),
                    c.nspawn.id()
                ))
                .unwrap_or_default();
                c.leader = kids
                    .split_whitespace()
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0);
            }
            if c.leader != 0 {
                let o = c.exec(&["systemctl", "is-system-running"]);
                let state = String::from_utf8_lossy(&o.stdout);
                if state.starts_with("running") || state.starts_with("degraded") {
                    return c;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Runs a command inside the container (all its namespaces).
    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .args(["-t", &self.leader.to_string(), "-a"])
            .args(args)
            .output()
            .expect("nsenter")
    }

    pub fn sh(&self, script: &str) {
        let o = self.exec(&["sh", "-c", script]);
        assert!(
            o.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// The `REPOCH_SYSTEMCTL` value that asks this container's systemd.
    pub fn systemctl(&self) -> String {
        format!("nsenter -t {} -a systemctl", self.leader)
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // Killing the pid namespace's init kills every process in it.
        kill_pid(self.leader);
        let _ = self.nspawn.kill();
        let _ = self.nspawn.wait();
    }
}

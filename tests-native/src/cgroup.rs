//! A cgroup of the test's own, removed (its processes killed) on drop.

use std::path::{Path, PathBuf};

/// A per-test cgroup v2 directory under the hierarchy found through mountinfo. On drop,
/// everything in it is killed (`cgroup.kill`) and the directories are removed.
#[derive(Debug)]
pub struct Cgroup {
    pub root: PathBuf,
    /// Path relative to the hierarchy root, with a leading '/'.
    pub rel: String,
}

impl Cgroup {
    pub fn new(name: &str) -> Cgroup {
        let root = repoch_sys::cgroup::mount_point().expect("cgroup2 mounted");
        let rel = format!("/{name}");
        std::fs::create_dir_all(root.join(name)).expect("mkdir cgroup");
        Cgroup { root, rel }
    }
    pub fn path(&self) -> PathBuf {
        self.root.join(self.rel.trim_start_matches('/'))
    }
    pub fn child(&self, name: &str) -> Cgroup {
        let rel = format!("{}/{name}", self.rel);
        std::fs::create_dir_all(self.root.join(rel.trim_start_matches('/'))).unwrap();
        Cgroup {
            root: self.root.clone(),
            rel,
        }
    }
    pub fn add(&self, pid: u32) {
        std::fs::write(self.path().join("cgroup.procs"), pid.to_string())
            .expect("move into cgroup");
    }
    pub fn kill_all(&self) {
        let _ = std::fs::write(self.path().join("cgroup.kill"), "1");
        for _ in 0..200 {
            let ev = std::fs::read_to_string(self.path().join("cgroup.events")).unwrap_or_default();
            if ev.contains("populated 0") {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    fn remove(p: &Path) {
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    Cgroup::remove(&e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(p);
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.kill_all();
        Cgroup::remove(&self.path());
    }
}

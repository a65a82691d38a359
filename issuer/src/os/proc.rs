//! Processes and threads running a given executable, wherever they are.

use std::path::Path;

use super::procfs::pids;

/// Threads examined per process.
pub const TASKS_PER_PROC_MAX: usize = 1 << 15;

/// A task (process or thread) running a contained executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runner {
    pub pid: u32,
    pub tid: u32,
}

fn matches(exe: &Path, dev: u64, ino: u64, path: &str) -> bool {
    // The live executable by identity; a deleted or replaced one by its former path.
    if let Ok(st) = rustix::fs::stat(exe) {
        if st.st_dev == dev && st.st_ino == ino {
            return true;
        }
    }
    std::fs::read_link(exe).is_ok_and(|l| {
        let l = l.to_string_lossy();
        l == path || l.strip_suffix(" (deleted)") == Some(path)
    })
}

/// Every task whose executable is `path` (identity `dev`/`ino`). Looks at each process's
/// `exe` and at every thread's, so a thread group whose leader exited (a zombie leader with
/// live threads) is still found.
pub fn running(path: &str, dev: u64, ino: u64) -> Result<Vec<Runner>, String> {
    let mut out = Vec::new();
    for pid in pids().map_err(|e| format!("/proc: {e}"))? {
        if matches(Path::new(&format!("/proc/{pid}/exe")), dev, ino, path) {
            out.push(Runner { pid, tid: pid });
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.take(TASKS_PER_PROC_MAX).flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if tid != pid && matches(&t.path().join("exe"), dev, ino, path) {
                out.push(Runner { pid, tid });
                break;
            }
        }
    }
    Ok(out)
}

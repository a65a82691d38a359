//! cgroup v2: located through `/proc/self/mountinfo` (never hard-coded), checked recursively.

use crate::error::{Context as _, Error};
use std::path::{Path, PathBuf};

use super::procfs::{read_small, PROC_FILE_BYTES_MAX};

/// Descendant cgroups examined under one contained cgroup.
pub const CGROUP_DESCENDANTS_MAX: usize = 1024;
/// Tasks listed in one refusal.
pub const TASKS_SHOWN_MAX: usize = 8;

/// The mount point of the cgroup2 hierarchy, from `/proc/self/mountinfo`.
pub fn mount_point() -> Result<PathBuf, Error> {
    let s =
        read_small(Path::new("/proc/self/mountinfo"), 1 << 20).context("/proc/self/mountinfo")?;
    for line in s.lines() {
        // `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS`
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if right.split_whitespace().next() == Some("cgroup2") {
            if let Some(mp) = left.split_whitespace().nth(4) {
                return Ok(PathBuf::from(unescape(mp)));
            }
        }
    }
    Err("no cgroup2 hierarchy is mounted".into())
}

fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// What a cgroup subtree holds.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Occupancy {
    pub exists: bool,
    pub populated: bool,
    pub procs: Vec<u32>,
    pub threads: Vec<u32>,
    /// The first cgroup (relative path) where something was found.
    pub at: Option<String>,
}

impl Occupancy {
    pub fn empty(&self) -> bool {
        !self.populated && self.procs.is_empty() && self.threads.is_empty()
    }
}

fn read_ids(p: &Path) -> Result<Vec<u32>, Error> {
    let s = read_small(p, PROC_FILE_BYTES_MAX * 16).context(format_args!("{}", p.display()))?;
    s.lines()
        .map(|l| {
            l.trim()
                .parse::<u32>()
                .map_err(|_| Error::Found(format!("{}: unexpected line {l:?}", p.display())))
        })
        .collect()
}

/// One cgroup's `populated` flag (`cgroup.events`) and its processes (`cgroup.procs`; none
/// listed in a threaded cgroup, whose processes are accounted at the threaded domain
/// above it, its `cgroup.procs` unreadable). An unknown value is an error.
fn populated_and_procs(dir: &Path) -> Result<(bool, Vec<u32>), Error> {
    let events = read_small(&dir.join("cgroup.events"), PROC_FILE_BYTES_MAX)
        .context(format_args!("{}/cgroup.events", dir.display()))?;
    let populated = match events.lines().find_map(|l| l.strip_prefix("populated ")) {
        Some("0") => false,
        Some("1") => true,
        other => {
            return Err(Error::Found(format!(
                "{}/cgroup.events: unknown populated value {other:?}",
                dir.display()
            )))
        }
    };
    let kind = read_small(&dir.join("cgroup.type"), 64)
        .context(format_args!("{}/cgroup.type", dir.display()))?;
    let procs = match kind.trim() {
        "threaded" => Vec::new(),
        "domain" | "domain threaded" | "domain invalid" => read_ids(&dir.join("cgroup.procs"))?,
        other => {
            return Err(Error::Found(format!(
                "{}/cgroup.type: unknown type {other:?}",
                dir.display()
            )))
        }
    };
    Ok((populated, procs))
}

/// Examines `rel` (a path like `/system.slice/x.service`) and every descendant: any
/// `populated 1` in `cgroup.events`, any pid in `cgroup.procs`, any tid in `cgroup.threads`.
/// A leader that exited while its threads live shows as no procs but threads: still found.
pub fn occupancy(root: &Path, rel: &str) -> Result<Occupancy, Error> {
    let top = root.join(rel.trim_start_matches('/'));
    let mut occ = Occupancy::default();
    match std::fs::symlink_metadata(&top) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(occ),
        Err(e) => return Err(Error::Found(format!("{}: {e}", top.display()))),
        Ok(m) if !m.is_dir() => {
            return Err(Error::Found(format!(
                "{} is not a cgroup directory",
                top.display()
            )))
        }
        Ok(_) => occ.exists = true,
    }
    let mut stack = vec![top.clone()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        seen += 1;
        if seen > CGROUP_DESCENDANTS_MAX {
            return Err(Error::Found(format!(
                "more than {CGROUP_DESCENDANTS_MAX} cgroups under {rel}"
            )));
        }
        let here = dir
            .strip_prefix(root)
            .map(|p| format!("/{}", p.display()))
            .unwrap_or_default();
        let (populated, procs) = populated_and_procs(&dir)?;
        // cgroup.threads is unreadable (EOPNOTSUPP) in a domain-invalid cgroup: unknown is
        // never fine, so that is an error too.
        let threads = read_ids(&dir.join("cgroup.threads"))?;
        if (populated || !procs.is_empty() || !threads.is_empty()) && occ.at.is_none() {
            occ.at = Some(here);
        }
        occ.populated |= populated;
        occ.procs.extend(procs);
        occ.threads.extend(threads);
        for e in std::fs::read_dir(&dir).context(format_args!("{}", dir.display()))? {
            let e = e.context(format_args!("{}", dir.display()))?;
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                stack.push(e.path());
            }
        }
    }
    occ.procs.sort_unstable();
    occ.procs.dedup();
    occ.threads.sort_unstable();
    occ.threads.dedup();
    Ok(occ)
}

/// The cgroup v2 path of a process (`0::/path` in `/proc/<pid>/cgroup`).
pub fn of_pid(pid: u32) -> Result<String, Error> {
    let s = read_small(
        Path::new(&format!("/proc/{pid}/cgroup")),
        PROC_FILE_BYTES_MAX,
    )
    .context(format_args!("/proc/{pid}/cgroup"))?;
    s.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_owned)
        .ok_or_else(|| Error::Found(format!("/proc/{pid}/cgroup has no cgroup v2 line")))
}

/// Whether `path` is `cg` or below it.
pub fn is_within(path: &str, cg: &str) -> bool {
    path == cg || path.starts_with(&format!("{}/", cg.trim_end_matches('/')))
}

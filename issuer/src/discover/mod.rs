//! `repoch discover`: the old root's authorities, found on the live system from where it
//! runs (a pid, a cgroup, a unit), for an operator to enroll (docs/OPERATOR.md,
//! "Discovering the old root"). Its processes are the seeds and every descendant; for
//! them: the cgroups and units they run in, the containers those cgroups are, the units
//! that would start those units again, their executables, the uids they run as (a user
//! namespace's owner included), the sockets they listen on, the files they hold locks on,
//! what started each of them (its parent chain, classified), and the cron and at entries
//! that name their executables. What cannot be classified or read is listed as unknown,
//! never dropped. Nothing is written; nothing is judged: the draft is for a person.

mod draft;
mod starters;

use std::collections::BTreeMap;

use repoch_sys::held_by;
use serde::Serialize;

pub use draft::draft;
pub(crate) use starters::program;

/// Processes followed from the seeds at most (seeds and descendants).
pub const DISCOVER_PROCESSES_MAX: usize = 4096;

/// Where to start: the old root as it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seed {
    Pid(u32),
    /// A cgroup v2 path from the hierarchy's root (`/system.slice/x.service`).
    Cgroup(String),
    /// A systemd unit (its `ControlGroup=`).
    Unit(String),
}

impl std::fmt::Display for Seed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Seed::Pid(p) => write!(f, "pid {p}"),
            Seed::Cgroup(c) => write!(f, "cgroup {c}"),
            Seed::Unit(u) => write!(f, "unit {u}"),
        }
    }
}

/// Why discovery could not start: a seed that names nothing (the operator's input), or a
/// host that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("{0}: no such process")]
    NoSuchPid(u32),
    #[error("{seed}: {why}")]
    Seed { seed: String, why: String },
    #[error("more than {DISCOVER_PROCESSES_MAX} processes from the seeds (DISCOVER_PROCESSES_MAX): give a narrower one")]
    TooMany,
    #[error(transparent)]
    Host(#[from] repoch_sys::error::Error),
}

/// One thing found, the processes it was found through, and why it is listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Found {
    pub value: String,
    pub pids: Vec<u32>,
    pub why: String,
}

/// A process of the old root as found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessFound {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    pub exe: String,
    pub ruid: Option<u32>,
    pub euid: Option<u32>,
    pub userns_owner: Option<u32>,
    pub cgroup: String,
}

/// Everything found from the seeds (each list in the order found, each value once).
#[derive(Debug, Default, Clone, Serialize)]
pub struct Discovery {
    pub seeds: Vec<String>,
    pub processes: Vec<ProcessFound>,
    pub cgroups: Vec<Found>,
    pub units: Vec<Found>,
    /// Units that would start a found unit again (`TriggeredBy=`: timers, sockets, paths).
    pub unit_starters: Vec<Found>,
    pub containers: Vec<Found>,
    pub executables: Vec<Found>,
    /// Executables the old root runs that other processes run too (not in the draft's
    /// list; each said why).
    pub shared_executables: Vec<Found>,
    /// Executables run under another root directory (a container's, a chroot's): their
    /// paths are that root's, not the host's, so no manifest line names them (the
    /// container, or the cgroup, holds them).
    pub rooted_executables: Vec<Found>,
    pub uids: Vec<Found>,
    pub listeners: Vec<Found>,
    /// Files the processes hold locks on: fence candidates.
    pub locks: Vec<Found>,
    /// What started each process whose parent is not the old root's: its parent chain.
    pub starters: Vec<Found>,
    /// Lines of cron and at files that name a found executable.
    pub scheduled: Vec<Found>,
    /// Starters not classified (unknown: listed with the unknowns).
    pub unknown_starters: Vec<Found>,
    pub unknown: Vec<Found>,
}

impl Discovery {
    /// Adds `pid` to the entry `value` of `list`, made with `why` when new.
    fn add(
        list: &mut Vec<Found>,
        value: impl Into<String>,
        pid: u32,
        why: impl FnOnce() -> String,
    ) {
        let value = value.into();
        match list.iter_mut().find(|f| f.value == value) {
            Some(f) => {
                if !f.pids.contains(&pid) {
                    f.pids.push(pid);
                }
            }
            None => list.push(Found {
                value,
                pids: vec![pid],
                why: why(),
            }),
        }
    }
}

/// Discovers from `seeds`; `systemctl` asks the system manager (`None`: not asked, the
/// units' starters unknown); `engines` (`(ENGINE, SOCKET)`) are asked what they say of the
/// containers found ([`engines_say`]; none: not asked).
pub fn discover(
    seeds: &[Seed],
    systemctl: Option<&[String]>,
    engines: &[(String, String)],
) -> Result<Discovery, DiscoverError> {
    let pids = processes(seeds, systemctl)?;
    let mut d = Discovery {
        seeds: seeds.iter().map(ToString::to_string).collect(),
        ..Discovery::default()
    };
    for &pid in &pids {
        process(&mut d, pid);
    }
    shared_executables(&mut d, &pids)?;
    starters::units(&mut d, systemctl);
    for &pid in &pids {
        starters::parents(&mut d, pid, &pids);
    }
    starters::scheduled(&mut d);
    engines_say(&mut d, engines);
    quarantine(&mut d);
    Ok(d)
}

/// What the engines say of each container found (Docker and podman, asked at their
/// socket in `engines`): the systemd unit an engine names as running it (podman's label
/// `PODMAN_SYSTEMD_UNIT`, which `podman generate systemd` and Quadlet set) is a unit that
/// would start it again; a restart policy that starts it again is said in its reason. A
/// container its engine has none of, or an engine that cannot be asked, is an unknown.
fn engines_say(d: &mut Discovery, engines: &[(String, String)]) {
    for i in 0..d.containers.len() {
        let found = d.containers[i].clone();
        let pid = found.pids.first().copied().unwrap_or(0);
        let Some((engine, id)) = found.value.split_once(':') else {
            continue;
        };
        let Some((_, socket)) = engines.iter().find(|(e, _)| e == engine) else {
            continue;
        };
        let asked = crate::observe::containers::inspect_at(engine, socket, id);
        let k = match asked {
            Ok(Some(k)) => k,
            Ok(None) => {
                let why = || format!("its engine at {socket} has no such container");
                Discovery::add(&mut d.unknown, found.value.clone(), pid, why);
                continue;
            }
            Err(e) => {
                let why = || format!("its engine at {socket} could not be asked: {e}");
                Discovery::add(&mut d.unknown, found.value.clone(), pid, why);
                continue;
            }
        };
        match k
            .restart_policy
            .strip_prefix(repoch_engines::SYSTEMD_UNIT_POLICY)
        {
            Some(unit) => Discovery::add(&mut d.unit_starters, unit, pid, || {
                format!(
                    "runs the container {} (its engine's label PODMAN_SYSTEMD_UNIT): name it \
                     and mask it",
                    found.value
                )
            }),
            None if !matches!(k.restart_policy.as_str(), "no" | "") => {
                d.containers[i].why = format!(
                    "{}; restart policy {}: its engine starts it again (set it to no, or \
                     remove the container, to contain it)",
                    found.why, k.restart_policy
                );
            }
            None => {}
        }
    }
}

/// The lists whose values a manifest names (or a waiver does).
fn nameable_lists(d: &mut Discovery) -> [&mut Vec<Found>; 9] {
    [
        &mut d.cgroups,
        &mut d.units,
        &mut d.unit_starters,
        &mut d.containers,
        &mut d.executables,
        &mut d.shared_executables,
        &mut d.uids,
        &mut d.listeners,
        &mut d.locks,
    ]
}

/// What no manifest can name as found (a value holding a control, bidirectional or other
/// forging character, a unix name that is abstract or not UTF-8) moves to the unknowns,
/// escaped; every reason is escaped (docs/PROTOCOL.md, "Text"): nothing found is shown
/// raw, in the draft or in `--json`.
fn quarantine(d: &mut Discovery) {
    use repoch_protocol::text::{check, escape};
    let nameable =
        |v: &str| check(v).is_ok() && !v.contains('\u{fffd}') && !v.starts_with("unix:@");
    let mut moved = Vec::new();
    for list in nameable_lists(d) {
        let (keep, bad): (Vec<Found>, Vec<Found>) = std::mem::take(list)
            .into_iter()
            .partition(|f| nameable(&f.value));
        *list = keep;
        moved.extend(bad.into_iter().map(|mut f| {
            f.why = format!("{} (no manifest can name it as written)", f.why);
            f
        }));
    }
    d.unknown.extend(moved);
    let escape_all = |list: &mut Vec<Found>| {
        for f in list.iter_mut() {
            f.value = escape(&f.value).into_owned();
            f.why = escape(&f.why).into_owned();
        }
    };
    nameable_lists(d).into_iter().for_each(escape_all);
    [
        &mut d.rooted_executables,
        &mut d.starters,
        &mut d.scheduled,
        &mut d.unknown_starters,
        &mut d.unknown,
    ]
    .into_iter()
    .for_each(escape_all);
    for p in &mut d.processes {
        for text in [&mut p.comm, &mut p.exe, &mut p.cgroup] {
            *text = escape(text).into_owned();
        }
    }
}

/// Executables other processes run too (a shell, an interpreter, `sleep`): enrolled, any
/// root task running them would refuse the recovery. They move from `executables` to
/// `shared_executables`, with how many others run them now.
fn shared_executables(d: &mut Discovery, ours: &[u32]) -> Result<(), DiscoverError> {
    let mut others: BTreeMap<String, usize> = BTreeMap::new();
    for pid in held_by::all_pids()? {
        // `ours` is sorted (`processes`).
        if ours.binary_search(&pid).is_ok() {
            continue;
        }
        let Some(exe) = held_by::exe(pid).filter(|e| d.executables.iter().any(|f| &f.value == e))
        else {
            continue;
        };
        // Only a principal's process (root's, or a uid the old root runs as) would refuse
        // the recovery: another user running the same file shares nothing.
        let principal = held_by::runs_as(pid).is_ok_and(|r| {
            [r.ruid, r.euid]
                .iter()
                .any(|u| *u == 0 || d.uids.iter().any(|f| f.value == u.to_string()))
        });
        if principal {
            *others.entry(exe).or_default() += 1;
        }
    }
    let (shared, own): (Vec<Found>, Vec<Found>) = std::mem::take(&mut d.executables)
        .into_iter()
        .partition(|e| others.contains_key(&e.value));
    d.executables = own;
    d.shared_executables = shared
        .into_iter()
        .map(|mut e| {
            e.why = format!(
                "also run now by {} of the principals' processes that are not the old root's: \
                 enrolled, any of them running it refuses the recovery; name it only if it is \
                 the old root's alone",
                others[&e.value]
            );
            e
        })
        .collect();
    Ok(())
}

/// The seeds' processes and every descendant, sorted.
fn processes(seeds: &[Seed], systemctl: Option<&[String]>) -> Result<Vec<u32>, DiscoverError> {
    let mut set = Vec::new();
    for seed in seeds {
        match seed {
            Seed::Pid(p) => match held_by::ancestor(*p) {
                Some(_) => set.push(*p),
                None => return Err(DiscoverError::NoSuchPid(*p)),
            },
            Seed::Cgroup(c) => set.extend(in_cgroup(seed, c)?),
            Seed::Unit(u) => {
                let cg = unit_cgroup(seed, u, systemctl)?;
                set.extend(in_cgroup(seed, &cg)?);
            }
        }
    }
    // Every process's parent, read once: the descendants follow.
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for pid in held_by::all_pids()? {
        if let Some(a) = held_by::ancestor(pid) {
            children.entry(a.ppid).or_default().push(pid);
        }
    }
    let mut at = 0;
    while at < set.len() {
        if set.len() > DISCOVER_PROCESSES_MAX {
            return Err(DiscoverError::TooMany);
        }
        for kid in children.get(&set[at]).cloned().unwrap_or_default() {
            if !set.contains(&kid) {
                set.push(kid);
            }
        }
        at += 1;
    }
    set.sort_unstable();
    set.dedup();
    if set.is_empty() {
        return Err(DiscoverError::Seed {
            seed: seeds
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            why: "no process runs there now: nothing to discover".into(),
        });
    }
    Ok(set)
}

/// The processes in cgroup `cg` and its descendants.
fn in_cgroup(seed: &Seed, cg: &str) -> Result<Vec<u32>, DiscoverError> {
    if cg.split('/').any(|c| c == "." || c == "..") || !cg.starts_with('/') {
        return Err(DiscoverError::Seed {
            seed: seed.to_string(),
            why: "not a canonical cgroup path (absolute, no . or .. component)".into(),
        });
    }
    if cg.trim_matches('/').is_empty() {
        return Err(DiscoverError::Seed {
            seed: seed.to_string(),
            why: "the root cgroup holds every process of the host: give the old root's own".into(),
        });
    }
    let root = repoch_sys::cgroup::mount_point()?;
    let occ = repoch_sys::cgroup::occupancy(&root, cg)?;
    if !occ.exists {
        return Err(DiscoverError::Seed {
            seed: seed.to_string(),
            why: "no such cgroup".into(),
        });
    }
    Ok(occ.procs)
}

/// The cgroup systemd runs `unit` in (`ControlGroup=`).
fn unit_cgroup(
    seed: &Seed,
    unit: &str,
    systemctl: Option<&[String]>,
) -> Result<String, DiscoverError> {
    let fail = |why: String| DiscoverError::Seed {
        seed: seed.to_string(),
        why,
    };
    let cmd = systemctl.ok_or_else(|| fail("no systemd manager to ask".into()))?;
    let shown = repoch_sys::systemd::show_properties(cmd, "ControlGroup", &[unit.to_owned()])
        .map_err(|e| fail(e.to_string()))?;
    shown
        .first()
        .and_then(|p| p.iter().find(|(k, _)| k == "ControlGroup"))
        .map(|(_, v)| v.clone())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| fail("it runs in no cgroup (not active)".into()))
}

/// What one process is, runs as, runs in, listens on and holds.
fn process(d: &mut Discovery, pid: u32) {
    let Some(me) = held_by::ancestor(pid).filter(|a| !a.zombie) else {
        return; // exited (reaped or not): it runs and holds nothing
    };
    if me.exited_leader {
        Discovery::add(&mut d.unknown, format!("pid {pid}'s threads"), pid, || {
            "its leader exited while its other threads run: what they hold is not read".into()
        });
    }
    let cgroup = repoch_sys::cgroup::of_pid(pid).unwrap_or_default();
    let runs = held_by::runs_as(pid);
    d.processes.push(ProcessFound {
        pid,
        ppid: me.ppid,
        comm: me.comm.clone(),
        exe: me.exe.clone(),
        ruid: runs.as_ref().ok().map(|r| r.ruid),
        euid: runs.as_ref().ok().map(|r| r.euid),
        userns_owner: runs.as_ref().ok().and_then(|r| r.userns_owner),
        cgroup: cgroup.clone(),
    });
    place(d, pid, &cgroup);
    executable(d, pid, &me.exe);
    match runs {
        Ok(r) => uids(d, pid, r),
        Err(e) => Discovery::add(&mut d.unknown, format!("pid {pid}'s uids"), pid, || {
            e.to_string()
        }),
    }
    holds(d, pid);
}

/// The cgroup `pid` runs in, the unit that cgroup is, or the container.
fn place(d: &mut Discovery, pid: u32, cgroup: &str) {
    if cgroup.is_empty() {
        return Discovery::add(&mut d.unknown, format!("pid {pid}'s cgroup"), pid, || {
            "its cgroup unreadable, or without a cgroup v2 line".into()
        });
    }
    // The root cgroup holds every process no other cgroup holds: no manifest can name it
    // (and naming it would hold the whole host). Such a process is held by its
    // executable, its uid and its starter.
    if cgroup == "/" {
        return;
    }
    // A cgroup outside this cgroup namespace reads `/..`: not a path a manifest can name.
    if cgroup.starts_with("/..") {
        return Discovery::add(&mut d.unknown, format!("pid {pid}'s cgroup"), pid, || {
            format!("{cgroup}: outside repoch's cgroup namespace")
        });
    }
    Discovery::add(&mut d.cgroups, cgroup, pid, || {
        "a cgroup the old root runs in".into()
    });
    if let Some((engine, id)) = container_of(cgroup) {
        let why = || format!("the cgroup {cgroup} is this {engine} container's");
        return Discovery::add(&mut d.containers, format!("{engine}:{id}"), pid, why);
    }
    match unit_of(cgroup) {
        None => {}
        Some((unit, None)) => Discovery::add(&mut d.units, unit, pid, || {
            format!("runs the cgroup {cgroup}")
        }),
        Some((unit, Some(manager))) => Discovery::add(&mut d.unknown, unit, pid, || {
            format!(
                "a unit of a user's systemd manager ({manager}), which repoch does not ask: stop \
                 and disable it there, and name its cgroup {cgroup}"
            )
        }),
    }
}

/// The systemd unit whose cgroup `cgroup` is, or is below, as systemd lays its cgroups
/// out: slices, then one service or scope; below it, what the unit made of its own
/// (`Delegate=`) is still that unit's. A user's manager (`user@UID.service`) lays out its
/// own units below it the same way: such a unit comes with its manager. A cgroup not laid
/// out so is no unit's, whatever its name (found by attacking the release binaries: a
/// delegated service's `worker.scope` was taken for a unit, the service missed, and a
/// plain cgroup named `sshd.service` named the host's sshd).
fn unit_of(cgroup: &str) -> Option<(String, Option<String>)> {
    let mut parts = cgroup
        .split('/')
        .filter(|c| !c.is_empty() && !c.ends_with(".slice"));
    let first = parts.next()?;
    let is_unit = |c: &str| c.ends_with(".service") || c.ends_with(".scope");
    if !is_unit(first) || !below_slices(cgroup, first) {
        return None;
    }
    if !(first.starts_with("user@") && first.ends_with(".service")) {
        return Some((first.to_owned(), None));
    }
    // A user manager: its own unit below it, past its slices.
    let rest = cgroup.split_once(&format!("/{first}/"))?.1;
    let unit = rest
        .split('/')
        .find(|c| !c.is_empty() && !c.ends_with(".slice"))?;
    (is_unit(unit) && below_slices(rest, unit)).then(|| (unit.to_owned(), Some(first.to_owned())))
}

/// Whether every component of `cgroup` before `unit` is a slice.
fn below_slices(cgroup: &str, unit: &str) -> bool {
    cgroup
        .split('/')
        .filter(|c| !c.is_empty())
        .take_while(|c| *c != unit)
        .all(|c| c.ends_with(".slice"))
}

/// The engine and full id of a container whose cgroup this is, as Docker's and podman's
/// cgroup drivers name them (systemd's `docker-ID.scope` and `libpod-ID.scope`;
/// cgroupfs's `/docker/ID` and `libpod-ID`).
pub(crate) fn container_of(cgroup: &str) -> Option<(&'static str, String)> {
    let full = repoch_protocol::manifest::is_container_id;
    for c in cgroup.split('/').rev() {
        for (prefix, engine) in [("docker-", "docker"), ("libpod-", "podman")] {
            let Some(rest) = c.strip_prefix(prefix) else {
                continue;
            };
            let id = rest.strip_suffix(".scope").unwrap_or(rest);
            let scoped = id.len() != rest.len();
            // cgroupfs names no scope: podman's libpod-ID only.
            if full(id) && (scoped || engine == "podman") {
                return Some((engine, id.to_owned()));
            }
        }
    }
    // cgroupfs's `/docker/ID`, the process in it or in a child of it (cgroup v2 moves every
    // process to a leaf once a container enables controllers for its subtree).
    let parts: Vec<&str> = cgroup.split('/').collect();
    parts
        .windows(2)
        .rev()
        .find(|w| w[0] == "docker" && full(w[1]))
        .map(|w| ("docker", w[1].to_owned()))
}

/// The executable `pid` runs.
fn executable(d: &mut Discovery, pid: u32, exe: &str) {
    if exe.is_empty() {
        return Discovery::add(
            &mut d.unknown,
            format!("pid {pid}'s executable"),
            pid,
            || "its executable unreadable".into(),
        );
    }
    if held_by::other_root(pid) == Some(true) {
        return Discovery::add(&mut d.rooted_executables, exe, pid, || {
            "run under another root directory (a container's): a path there, not the host's".into()
        });
    }
    match exe.strip_suffix(" (deleted)") {
        Some(was) => Discovery::add(&mut d.unknown, exe, pid, || {
            format!("its executable was deleted: name the file it was ({was}) if it is back, and any copy")
        }),
        None => Discovery::add(&mut d.executables, exe, pid, || {
            "run by the old root".into()
        }),
    }
}

/// The uids `pid` runs as that are not root's (root is always a principal), and the owner
/// of its user namespace when it is not ours.
fn uids(d: &mut Discovery, pid: u32, r: held_by::RunsAs) {
    if let Some(owner) = r.userns_owner.filter(|o| *o != 0) {
        Discovery::add(&mut d.uids, owner.to_string(), pid, || {
            "the owner of a user namespace the old root runs in".into()
        });
    }
    for uid in [r.ruid, r.euid] {
        if uid != 0 {
            Discovery::add(&mut d.uids, uid.to_string(), pid, || {
                "a uid the old root runs as".into()
            });
        }
    }
}

/// What `pid` listens on and holds locks on.
fn holds(d: &mut Discovery, pid: u32) {
    let listening = held_by::socket_inodes(pid).and_then(|inodes| held_by::listening(pid, &inodes));
    match listening {
        Ok(ls) => {
            let other_ns = held_by::other_netns(pid);
            for l in ls {
                Discovery::add(&mut d.listeners, l.spelled, pid, || match &other_ns {
                    Some(ns) => {
                        format!("held by the old root, in another network namespace ({ns})")
                    }
                    None => "held by the old root".into(),
                });
            }
        }
        Err(e) => Discovery::add(&mut d.unknown, format!("pid {pid}'s sockets"), pid, || {
            e.to_string()
        }),
    }
    match held_by::locks_held(pid) {
        Ok(locks) => {
            for l in locks {
                let kind = l.kind.clone();
                Discovery::add(&mut d.locks, l.path, pid, || {
                    format!("{kind}: a fence candidate")
                });
            }
        }
        Err(e) => Discovery::add(&mut d.unknown, format!("pid {pid}'s locks"), pid, || {
            e.to_string()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_no_manifest_can_name_is_moved_to_the_unknowns_escaped() {
        let f = |value: &str| Found {
            value: value.into(),
            pids: vec![7],
            why: "found\u{202e}".into(),
        };
        let mut d = Discovery {
            listeners: vec![f("unix:@abstract"), f("tcp:127.0.0.1:80")],
            locks: vec![f("/srv/\u{202e}lock")],
            cgroups: vec![f("/odd\u{fffd}name")],
            ..Discovery::default()
        };
        quarantine(&mut d);
        assert_eq!(d.listeners.len(), 1);
        assert_eq!(d.listeners[0].value, "tcp:127.0.0.1:80");
        assert!(d.locks.is_empty() && d.cgroups.is_empty());
        assert_eq!(d.unknown.len(), 3);
        for u in d.unknown.iter().chain(&d.listeners) {
            assert!(repoch_protocol::text::check(&u.value).is_ok(), "{u:?}");
            assert!(repoch_protocol::text::check(&u.why).is_ok(), "{u:?}");
        }
    }

    #[test]
    fn a_unit_is_the_first_service_or_scope_below_slices_only() {
        let unit = |cg: &str| unit_of(cg).map(|(u, m)| (u, m.unwrap_or_default()));
        let u = |a: &str, m: &str| Some((a.to_owned(), m.to_owned()));
        assert_eq!(
            unit("/system.slice/billing.service"),
            u("billing.service", "")
        );
        // What a delegated service made below itself is still that service's.
        assert_eq!(
            unit("/system.slice/billing-d.service/worker.scope"),
            u("billing-d.service", "")
        );
        assert_eq!(unit("/a.slice/a-b.slice/x.scope/y"), u("x.scope", ""));
        // A plain cgroup named like a unit is no unit's.
        assert_eq!(unit("/hide2/sshd.service"), None);
        assert_eq!(unit("/repoch-x/old-root"), None);
        // A user manager's unit comes with its manager.
        assert_eq!(
            unit("/user.slice/user-1000.slice/user@1000.service/app.slice/old.service"),
            u("old.service", "user@1000.service")
        );
        assert_eq!(unit("/user.slice/user-1000.slice/user@1000.service"), None);
    }

    #[test]
    fn docker_and_podman_cgroups_name_their_container_by_full_id() {
        let id = "a".repeat(64);
        assert_eq!(
            container_of(&format!("/system.slice/docker-{id}.scope")),
            Some(("docker", id.clone()))
        );
        assert_eq!(
            container_of(&format!("/docker/{id}")),
            Some(("docker", id.clone()))
        );
        assert_eq!(
            container_of(&format!("/machine.slice/libpod-{id}.scope/container")),
            Some(("podman", id.clone()))
        );
        // podman's cgroupfs manager (found running podman with --cgroup-manager cgroupfs).
        assert_eq!(
            container_of(&format!("/libpod_parent/libpod-{id}")),
            Some(("podman", id.clone()))
        );
        assert_eq!(container_of(&format!("/libpod_parent/docker-{id}")), None);
        assert_eq!(
            container_of(&format!("/machine.slice/libpod-conmon-{id}.scope")),
            None
        );
        assert_eq!(
            container_of(&format!("/docker/{}", id.to_uppercase())),
            None
        );
        assert_eq!(container_of("/system.slice/docker.service"), None);
        assert_eq!(container_of("/docker/short"), None);
        // A child of the container's cgroup is the container's.
        assert_eq!(
            container_of(&format!("/docker/{id}/sub/deeper")),
            Some(("docker", id.clone()))
        );
        assert_eq!(
            container_of(&format!("/system.slice/docker-{id}.scope/init")),
            Some(("docker", id.clone()))
        );
    }
}

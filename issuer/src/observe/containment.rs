//! Containment (docs/ARCHITECTURE.md, "Issuance", step 2): units, cgroups, listeners by
//! the bound inode in every network namespace, and processes by executable or mapping.

use repoch_protocol::manifest::{Listener, Manifest};
use repoch_protocol::{Fact, Reason};
use std::os::fd::OwnedFd;

use super::Fences;
use repoch_sys::hold::{self, NotTaken};
use repoch_sys::{cgroup, net, systemd};

/// The enrolled units: masked, inactive, no main pid, no reload pending, nothing left in
/// their cgroup.
pub(super) fn units(m: &Manifest, systemctl: &[String], facts: &mut Vec<Fact>) {
    const WANT: &str = "masked, inactive, MainPID 0, no reload pending, nothing in its cgroup";
    let (templates, units): (Vec<String>, Vec<String>) = m
        .containment
        .units
        .iter()
        .cloned()
        .partition(|u| systemd::is_template(u));
    for t in &templates {
        facts.push(template(t, systemctl));
    }
    let states = systemd::show_all(systemctl, &units);
    for (u, state) in units.iter().zip(states) {
        let fact = match state {
            Err(e) => Fact::failed("unit", u, WANT, &e.to_string(), Reason::ControllerUnknown),
            Ok(s) => {
                let observed = format!(
                    "{} {}/{} MainPID {} reload {}",
                    s.load,
                    s.active,
                    s.sub,
                    s.main_pid,
                    if s.need_reload { "pending" } else { "no" }
                );
                if s.need_reload {
                    Fact::failed("unit", u, WANT, &observed, Reason::UnitReloadPending)
                } else if s.load != "masked" || s.file_state == "masked-runtime" {
                    // A mask in /run is gone at the next boot: the unit starts again then.
                    let observed = match s.file_state.as_str() {
                        "masked-runtime" => {
                            format!("{observed} (masked-runtime: until the next boot)")
                        }
                        _ => observed,
                    };
                    Fact::failed("unit", u, WANT, &observed, Reason::UnitNotMasked)
                } else if !matches!(s.active.as_str(), "inactive" | "failed") {
                    Fact::failed("unit", u, WANT, &observed, Reason::UnitActive)
                } else if s.main_pid != 0 {
                    Fact::failed("unit", u, WANT, &observed, Reason::UnitMainPid)
                } else if let Some((observed, reason)) = left_in(&s.control_group) {
                    Fact::failed("unit", u, WANT, &observed, reason)
                } else {
                    Fact::ok("unit", u, WANT, &format!("masked {}", s.active))
                }
            }
        };
        facts.push(fact);
    }
}

/// What an inactive unit left in its cgroup (`control_group`, as systemd names it): a
/// unit stopped with `KillMode=process`, `none` or `mixed` is inactive while what its main
/// process started still runs there, and starts the old root again (found by attacking the
/// release binaries: a watchdog left in a masked, inactive unit held, and exec'd the old
/// root after the grant). `None` when it holds nothing (or the unit has no cgroup).
fn left_in(control_group: &str) -> Option<(String, Reason)> {
    if control_group.is_empty() {
        return None;
    }
    let occupancy = cgroup::mount_point().and_then(|root| cgroup::occupancy(&root, control_group));
    match occupancy {
        // systemd names a cgroup repoch cannot see: another cgroup view than systemd's, not
        // an empty cgroup (found by attacking the release binaries: read as empty).
        Ok(o) if !o.exists => Some((
            format!("not in this cgroup view: its cgroup {control_group}, as systemd names it"),
            Reason::ControllerUnknown,
        )),
        Ok(o) if o.empty() => None,
        Ok(o) => Some((
            format!("inactive, its cgroup {control_group}: {}", occupied(&o)),
            Reason::UnitActive,
        )),
        Err(e) => Some((
            format!("its cgroup {control_group}: {e}"),
            Reason::ControllerUnknown,
        )),
    }
}

/// An enrolled template (`NAME@.service`): its unit file masked (so that no instance can
/// start) and every instance loaded now inactive.
fn template(t: &str, systemctl: &[String]) -> Fact {
    const WANT: &str = "the template masked, every instance inactive";
    match systemd::template_state(systemctl, t) {
        Err(e) => Fact::failed("unit", t, WANT, &e.to_string(), Reason::ControllerUnknown),
        // `masked-runtime` is gone at the next boot: only a lasting mask holds.
        Ok(s) if s.file != "masked" => {
            let observed = format!("template {}", s.file);
            Fact::failed("unit", t, WANT, &observed, Reason::UnitNotMasked)
        }
        // An instance's own unit file is not covered by the template's mask: it starts.
        Ok(s) => match (
            s.instance_files.iter().find(|(_, st)| st != "masked"),
            s.instances
                .iter()
                .find(|i| !matches!(i.active.as_str(), "inactive" | "failed")),
        ) {
            (Some((unit, st)), _) => {
                let observed = format!("template {}, {unit} {st}", s.file);
                Fact::failed("unit", t, WANT, &observed, Reason::UnitNotMasked)
            }
            (None, Some(i)) => {
                let observed = format!("template {}, {} {}/{}", s.file, i.unit, i.active, i.sub);
                Fact::failed("unit", t, WANT, &observed, Reason::UnitActive)
            }
            (None, None) => match instances_left(&s.instances, systemctl) {
                Some((observed, reason)) => Fact::failed("unit", t, WANT, &observed, reason),
                None => {
                    let observed = format!(
                        "template {}, {} instances inactive",
                        s.file,
                        s.instances.len()
                    );
                    Fact::ok("unit", t, WANT, &observed)
                }
            },
        },
    }
}

/// What a template's inactive instances still run: a main pid, or anything left in their
/// cgroups ([`left_in`]; found by attacking the release binaries: an instance stopped
/// with `KillMode=process` left a watchdog that held "every instance inactive", and the
/// recovery was granted).
fn instances_left(
    instances: &[systemd::Instance],
    systemctl: &[String],
) -> Option<(String, Reason)> {
    let units: Vec<String> = instances.iter().map(|i| i.unit.clone()).collect();
    let shown = match systemd::show_properties(systemctl, "Id,MainPID,ControlGroup", &units) {
        Ok(shown) => shown,
        Err(e) => return Some((e.to_string(), Reason::ControllerUnknown)),
    };
    shown.iter().zip(&units).find_map(|(props, unit)| {
        let get = |k: &str| props.iter().find(|(p, _)| p == k).map(|(_, v)| v.as_str());
        match get("MainPID").unwrap_or("0") {
            "0" => left_in(get("ControlGroup").unwrap_or(""))
                .map(|(observed, reason)| (format!("{unit} {observed}"), reason)),
            pid => Some((format!("{unit} MainPID {pid}"), Reason::UnitMainPid)),
        }
    })
}

/// What `systemd::service_commands` found: how many services it read, and each service
/// `units` does not name that runs one of `executables`, with what runs it
/// ("ExecStart runs PATH").
pub(crate) struct Unnamed {
    pub services: usize,
    pub found: Vec<(String, String)>,
}

/// Every service systemd could start that runs one of `executables` (one of its commands
/// names it, by its path or another path to the same file) and that `units` does not name.
/// `None` when there is nothing to search for (no executable) or no systemd here.
pub(crate) fn unnamed_services(
    executables: &[String],
    units: &[String],
    systemctl: &[String],
) -> Option<Result<Unnamed, repoch_sys::error::Error>> {
    if executables.is_empty() || !systemd::booted(systemctl) {
        return None;
    }
    let commands = match systemd::service_commands(systemctl) {
        Ok(c) => c,
        Err(e) => return Some(Err(e)),
    };
    let enrolled: Vec<Option<Known>> = executables.iter().map(|e| Known::of(e)).collect();
    // A word names an enrolled executable by its path, by another path to the same file, or
    // by a copy of it (the same size, then the same content), wherever the service's root
    // directory and bind mounts lead it on the host.
    // A command runs an enrolled executable when one of the files it may name (its path
    // as systemd searches it, its arguments' paths, wherever the service's root directory,
    // bind mounts, extensions and working directory lead them) is that file, another path
    // to it, or a copy of it (the same size, then the same content).
    let runs = |c: &systemd::ServiceCommand| -> Option<String> {
        let candidates = c.candidates();
        // A path in a root is resolved there once, whatever the executables asked of it.
        let in_root: Vec<Option<OwnedFd>> = candidates
            .iter()
            .map(|h| match h {
                systemd::OnHost::InRoot { root, path } => {
                    repoch_sys::fs::open_in_root(root.as_ref(), path).ok()
                }
                systemd::OnHost::Path(_) => None,
            })
            .collect();
        executables.iter().zip(&enrolled).find_map(|(e, known)| {
            candidates
                .iter()
                .zip(&in_root)
                .any(|(h, fd)| match (h, known) {
                    (systemd::OnHost::Path(p), _) if p == e => true,
                    (systemd::OnHost::Path(p), Some(k)) => p.starts_with('/') && k.is(p),
                    (systemd::OnHost::InRoot { .. }, Some(k)) => {
                        fd.as_ref().is_some_and(|fd| k.is_file(fd))
                    }
                    _ => false,
                })
                .then(|| e.clone())
        })
    };
    // Each unnamed service once, with its first command that runs one.
    let mut found: Vec<(String, String)> = Vec::new();
    for c in &commands {
        if named(units, &c.unit) || found.iter().any(|(u, _)| *u == c.unit) {
            continue;
        }
        if let Some(exe) = runs(c) {
            found.push((c.unit.clone(), format!("{} runs {exe}", c.property)));
        }
    }
    let services = commands
        .iter()
        .map(|c| &c.unit)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    Some(Ok(Unnamed { services, found }))
}

/// Whether `unit` is named in `units`: itself, or, for an instance (`NAME@I.TYPE`), its
/// template (`NAME@.TYPE`), which is held whole.
fn named(units: &[String], unit: &str) -> bool {
    let template = systemd::template_of(unit);
    units
        .iter()
        .any(|u| u == unit || Some(u) == template.as_ref())
}

/// The old root's controllers systemd knows and the manifest does not name
/// ([`unnamed_services`]): each such service a `controller-unnamed` fact (whose name then
/// belongs under `containment.units`, whose own facts hold it), or one fact that none is.
pub(super) fn unnamed_units(m: &Manifest, systemctl: &[String], facts: &mut Vec<Fact>) {
    const WANT: &str = "every service that runs an enrolled executable named in containment.units";
    let c = &m.containment;
    match unnamed_services(&c.executables, &c.units, systemctl) {
        None => {}
        Some(Err(e)) => facts.push(Fact::failed(
            "unit-search",
            "systemd",
            WANT,
            &e.to_string(),
            Reason::ControllerUnknown,
        )),
        Some(Ok(u)) if u.found.is_empty() => {
            let observed = format!("none unnamed of {} services", u.services);
            facts.push(Fact::ok("unit-search", "systemd", WANT, &observed));
        }
        Some(Ok(u)) => {
            for (unit, observed) in u.found {
                let reason = Reason::ControllerUnnamed;
                facts.push(Fact::failed("unit-search", &unit, WANT, &observed, reason));
            }
        }
    }
}

/// An enrolled executable as the unit search compares files with it: its identity, its
/// size and (read once, when a file of its size is met) its content.
struct Known {
    path: String,
    id: (u64, u64),
    size: u64,
    digest: std::cell::OnceCell<Option<repoch_protocol::Hash>>,
}

impl Known {
    fn of(path: &str) -> Option<Known> {
        let st = rustix::fs::stat(path).ok()?;
        Some(Known {
            path: path.to_owned(),
            id: (st.st_dev, st.st_ino),
            size: st.st_size as u64,
            digest: std::cell::OnceCell::new(),
        })
    }

    /// Whether the file at `path` is this executable, or a regular file of its content.
    fn is(&self, path: &str) -> bool {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::PATH | OFlags::CLOEXEC;
        rustix::fs::open(path, flags, Mode::empty()).is_ok_and(|fd| self.is_file(&fd))
    }

    /// Whether the file `fd` names (an `O_PATH` descriptor) is this executable, or a
    /// regular file of its content.
    fn is_file(&self, fd: &OwnedFd) -> bool {
        let Ok(st) = rustix::fs::fstat(fd) else {
            return false;
        };
        if (st.st_dev, st.st_ino) == self.id {
            return true;
        }
        if st.st_size as u64 != self.size || repoch_sys::fs::not_regular(st.st_mode).is_some() {
            return false;
        }
        let mine = self.digest.get_or_init(|| {
            use rustix::fs::{Mode, OFlags};
            let flags = OFlags::PATH | OFlags::CLOEXEC;
            rustix::fs::open(&self.path, flags, Mode::empty())
                .ok()
                .and_then(|fd| content(&fd))
        });
        mine.is_some() && *mine == content(fd)
    }
}

/// The sha256 of the regular file `fd` names (an `O_PATH` descriptor), read once and
/// bounded.
fn content(fd: &OwnedFd) -> Option<repoch_protocol::Hash> {
    let f = repoch_sys::fs::reopen_readable(fd).ok()?;
    let st = rustix::fs::fstat(&f).ok()?;
    if repoch_sys::fs::not_regular(st.st_mode).is_some() {
        return None;
    }
    repoch_sys::digest::hash(&f, repoch_sys::digest::EXE_BYTES_MAX)
        .ok()
        .map(|(h, _)| h)
}

/// The enrolled cgroups: absent or empty, recursively.
pub(super) fn cgroups(m: &Manifest, facts: &mut Vec<Fact>) {
    const WANT: &str = "no process, no thread, not populated (recursively)";
    if m.containment.cgroups.is_empty() {
        return;
    }
    let root = match cgroup::mount_point() {
        Ok(r) => r,
        Err(e) => {
            for c in &m.containment.cgroups {
                facts.push(Fact::failed(
                    "cgroup",
                    c,
                    WANT,
                    &e.to_string(),
                    Reason::ControllerUnknown,
                ));
            }
            return;
        }
    };
    for c in &m.containment.cgroups {
        facts.push(match cgroup::occupancy(&root, c) {
            Err(e) => Fact::failed("cgroup", c, WANT, &e.to_string(), Reason::ObserveFailed),
            Ok(o) if !o.exists => Fact::ok("cgroup", c, WANT, "absent"),
            Ok(o) if o.empty() => Fact::ok("cgroup", c, WANT, "empty"),
            Ok(o) => Fact::failed("cgroup", c, WANT, &occupied(&o), Reason::CgroupPopulated),
        });
    }
}

/// What an occupied cgroup subtree holds, as a fact shows it: where first, and the first
/// `TASKS_SHOWN_MAX` processes and threads.
pub(super) fn occupied(o: &cgroup::Occupancy) -> String {
    format!(
        "at {} populated {} procs {:?} threads {:?}",
        o.at.as_deref().unwrap_or_default(),
        u8::from(o.populated),
        &o.procs[..o.procs.len().min(cgroup::TASKS_SHOWN_MAX)],
        &o.threads[..o.threads.len().min(cgroup::TASKS_SHOWN_MAX)]
    )
}

/// The enrolled listeners, held by repochd from the first observation on (`repoch_sys::hold`):
/// taken then (all or none; one taken already is `listener-present`, its holder named),
/// afterwards each still ours.
pub(super) fn listeners(m: &Manifest, held: &mut Fences, facts: &mut Vec<Fact>) {
    let ls = &m.containment.listeners;
    if ls.is_empty() {
        return;
    }
    if held.listeners_len() == 0 {
        take_listeners(m, held, facts);
        return;
    }
    still_held(ls, held, facts);
}

/// The first observation: takes every enrolled listener, one fact each, and keeps them
/// held only if all were taken (a partial set is released, never kept).
fn take_listeners(m: &Manifest, held: &mut Fences, facts: &mut Vec<Fact>) {
    const WANT: &str = "held by repochd";
    let ls = &m.containment.listeners;
    let principals = m.containment.principals();
    let mut taken = Vec::with_capacity(ls.len());
    for l in ls {
        let subject = l.to_string();
        let file = match l {
            Listener::Unix(p) => m.containment.socket_file(p),
            _ => None,
        };
        match hold::take(l, &principals, file) {
            Ok(h) => {
                facts.push(Fact::ok("listener", &subject, WANT, "held"));
                taken.push((l.clone(), h));
            }
            Err(NotTaken::InUse) => facts.push(in_use(l)),
            Err(NotTaken::Unprotected(why)) => facts.push(Fact::failed(
                "listener",
                &subject,
                "in a directory only root or the old root's uids can write",
                &why,
                Reason::ListenerUnprotected,
            )),
            Err(NotTaken::Failed(e)) => facts.push(Fact::failed(
                "listener",
                &subject,
                WANT,
                &e,
                Reason::ObserveFailed,
            )),
        }
    }
    // All or none: a partial set is released (dropped), never kept.
    if taken.len() == ls.len() {
        held.hold_listeners(taken);
    }
}

/// A later observation: one fact per enrolled listener, whether the endpoint repochd
/// holds is still the one its path or port names.
fn still_held(ls: &[Listener], held: &Fences, facts: &mut Vec<Fact>) {
    const WANT: &str = "held by repochd";
    for l in ls {
        let subject = l.to_string();
        facts.push(match held.listener(l).map(hold::Held::still_ours) {
            Some(Ok(true)) => Fact::ok("listener", &subject, WANT, "held"),
            Some(Ok(false)) => Fact::failed(
                "listener",
                &subject,
                WANT,
                "the path no longer names the socket repochd holds",
                Reason::ListenerPresent,
            ),
            Some(Err(e)) => Fact::failed(
                "listener",
                &subject,
                WANT,
                &e.to_string(),
                Reason::ObserveFailed,
            ),
            None => Fact::failed(
                "listener",
                &subject,
                WANT,
                "not held",
                Reason::ListenerPresent,
            ),
        });
    }
}

/// The failed fact of an endpoint someone else took: what is there, holders named.
fn in_use(l: &Listener) -> Fact {
    let port = match l {
        Listener::Unix(p) => return unix_in_use(p, &l.to_string()),
        // Whoever holds the port, on whatever address: a socket on the enrolled address,
        // or on a wildcard covering it, is what kept it from being held.
        Listener::Tcp(i) => (false, i.port),
        Listener::Udp(i) => (true, i.port),
    };
    port_in_use(port, &l.to_string())
}

/// [`in_use`] of a unix path, judged by its inode: any socket bound to it in any network
/// namespace, however it was bound, or anything accepting there.
fn unix_in_use(p: &str, subject: &str) -> Fact {
    const WANT: &str = "nothing bound";
    match net::unix_at(p) {
        Err(e) => Fact::failed(
            "listener",
            subject,
            WANT,
            &e.to_string(),
            Reason::ObserveFailed,
        ),
        Ok(net::UnixAt::Nothing(why)) => Fact::failed(
            "listener",
            subject,
            WANT,
            &format!("taken, then gone ({why})"),
            Reason::ListenerPresent,
        ),
        Ok(net::UnixAt::Symlink(target)) => Fact::failed(
            "listener",
            subject,
            "nothing bound, no symlink",
            &format!("a symlink to {target}: connections follow it"),
            Reason::ListenerPresent,
        ),
        Ok(net::UnixAt::Bound {
            sockets,
            unsearched,
            accepts,
        }) => Fact::failed(
            "listener",
            subject,
            WANT,
            &describe_unix_bound(&sockets, unsearched.as_deref(), accepts),
            Reason::ListenerPresent,
        ),
    }
}

/// [`in_use`] of a TCP (`udp` false) or UDP port: the sockets bound to it on any address,
/// and the pids that hold them.
fn port_in_use(port: (bool, u16), subject: &str) -> Fact {
    const WANT: &str = "nothing bound";
    let bound = net::inet_bound_all(&[port])
        .into_iter()
        .next()
        .unwrap_or_else(|| Err("no lookup for this port".into()));
    let observed = match bound {
        Err(e) => format!("in use; {e}"),
        // Bound, not listening (TCP), or a connection's local port: in use all the same.
        Ok(b) if b.is_empty() => {
            "in use by a socket that does not listen (bound only, or a connection's port)".into()
        }
        Ok(b) => {
            let holders: Vec<u32> = b
                .iter()
                .flat_map(|s| net::socket_holders(s.inode))
                .collect();
            format!("bound, held by pid {holders:?}")
        }
    };
    Fact::failed(
        "listener",
        subject,
        WANT,
        &observed,
        Reason::ListenerPresent,
    )
}

/// The observed text of a unix path someone is bound to or accepts on: each socket bound
/// to its inode (type, state, namespace when not ours, holder pids), and the socket type
/// a connection was accepted for; "holder unknown" when no socket could be matched.
fn describe_unix_bound(
    sockets: &[(
        repoch_sys::sockdiag::NetnsId,
        repoch_sys::sockdiag::UnixSocket,
    )],
    unsearched: Option<&str>,
    accepts: Option<&str>,
) -> String {
    let own = repoch_sys::sockdiag::own_netns().ok();
    let shown = &sockets[..sockets.len().min(cgroup::TASKS_SHOWN_MAX)];
    let inodes: Vec<u64> = shown.iter().map(|(_, s)| s.inode).collect();
    let holders = net::socket_holders_of(&inodes);
    let mut parts: Vec<String> = shown
        .iter()
        .zip(holders)
        .map(|((ns, s), (_, pids))| {
            let ns = if Some(*ns) == own {
                String::new()
            } else {
                format!(" in {ns}")
            };
            format!(
                "bound: socket {} ({} {}){ns}, held by pid {pids:?}",
                s.inode,
                s.kind_name(),
                s.state_name()
            )
        })
        .collect();
    match (accepts, sockets.is_empty()) {
        (Some(k), true) => parts.push(format!("accepts connections ({k}), holder unknown")),
        (Some(k), false) => parts.push(format!("accepts connections ({k})")),
        // Short: a fact's observed text is clipped at FACT_TEXT_BYTES_MAX.
        (None, true) => {
            parts.push("socket file, none shown bound: stale or hidden; remove if stale".into())
        }
        (None, false) => {}
    }
    if let Some(why) = unsearched {
        parts.push(format!("not every namespace searched ({why})"));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    /// An instance is named by its own name or by its template's; a template names no
    /// other template's instance, and a plain unit no instance.
    #[test]
    fn an_instance_is_named_by_itself_or_its_template() {
        let units = vec!["old@.service".to_owned(), "plain.service".to_owned()];
        assert!(super::named(&units, "old@a.service"));
        assert!(super::named(&units, "plain.service"));
        assert!(!super::named(&units, "older@a.service"));
        assert!(!super::named(&units, "old@a.socket"));
        assert!(!super::named(&units, "plain@a.service"));
        assert!(!super::named(
            &["old@a.service".to_owned()],
            "old@b.service"
        ));
    }
}

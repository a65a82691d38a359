//! Enrollment's cross-check (docs/OPERATOR.md, "Discovering the old root"): while the old
//! root runs, what `repoch discover` finds from what the manifest names (its cgroups, the
//! processes running its executables, its active units) must be named in the manifest or
//! waived in its `[waive]` table, with a reason the genesis keeps. The first authority left
//! out refuses the enrollment, naming the line to add. When nothing of the old root runs,
//! nothing is cross-checked, and the enrollment says so.

use super::*;
use crate::discover::{self, Discovery, Found, Seed};
use crate::observe::containers::Pinning;
use repoch_sys::held_by;

/// What the cross-check did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrossCheck {
    /// Nothing of the old root runs now (`why` says what was looked for).
    NotRun { why: String },
    /// The old root's processes found from `seeds` hold nothing the manifest does not
    /// name or waive.
    Passed {
        seeds: Vec<String>,
        processes: usize,
    },
}

/// One authority found and left out: the manifest field to add it to (or `waive`), the
/// waiver key, and why it was found.
struct LeftOut {
    field: &'static str,
    what: String,
    why: String,
}

/// The cross-check of `v` against the live system.
/// `containers` is what pinning the named containers found: their main processes are
/// seeds too, and the cgroups their engines report are held.
pub(super) fn cross_check(v: &Validated, containers: &Pinning) -> Result<CrossCheck, EnrollError> {
    let cmd = repoch_sys::systemd::systemctl_command();
    let systemctl = repoch_sys::systemd::booted(&cmd).then_some(cmd.as_slice());
    let waived: Vec<&str> = v
        .containment
        .waived
        .iter()
        .map(|w| w.what.as_str())
        .collect();
    units_engines_name(v, containers, &waived)?;
    let (mut seeds, unit_cgroups) = seeds(&v.containment, systemctl)?;
    // A named container's main process, and the cgroup it runs in: every process of the
    // container (one an exec session started is no descendant of its main process).
    for &pid in &containers.pids {
        seeds.push(Seed::Pid(pid));
        // (Not the root cgroup: a container no cgroup of its own holds is its process.)
        match repoch_sys::cgroup::of_pid(pid) {
            Ok(cg) if !cg.trim_matches('/').is_empty() => seeds.push(Seed::Cgroup(cg)),
            _ => {}
        }
    }
    if seeds.is_empty() {
        return Ok(CrossCheck::NotRun {
            why: "no process runs in the named cgroups, units or containers, or runs the named \
                  executables"
                .into(),
        });
    }
    // The engines were asked when the containers were pinned (`units_engines_name`).
    let d = discover::discover(&seeds, systemctl, &[]).map_err(|e| EnrollError::Refused {
        what: "the cross-check with the running old root".into(),
        why: e.to_string(),
    })?;
    let held = Held {
        units: &unit_cgroups,
        containers,
    };
    if let Some(l) = left_out(v, &d, &held)
        .into_iter()
        .find(|l| !waived.contains(&l.what.as_str()))
    {
        use repoch_protocol::text::escape;
        return Err(field(
            l.field,
            format!(
                "the running old root holds {} ({}), which the manifest neither names nor \
                 waives: add it to {}, or waive it: [waive] \"{}\" = \"REASON\"",
                escape(l.what.split_once(':').map_or(&l.what[..], |(_, v)| v)),
                escape(&l.why),
                l.field,
                escape(&l.what)
            ),
        ));
    }
    Ok(CrossCheck::Passed {
        seeds: d.seeds.clone(),
        processes: d.processes.len(),
    })
}

/// Each systemd unit an engine names as running a named container (podman's
/// `PODMAN_SYSTEMD_UNIT`, what `podman generate systemd` and Quadlet set) is named under
/// `containment.units`, or waived: its next start runs the container again, and
/// observation refuses the container (`container-restartable`) until it is named. Checked
/// whether or not the old root runs now: the engine keeps the label on a stopped
/// container.
fn units_engines_name(
    v: &Validated,
    containers: &Pinning,
    waived: &[&str],
) -> Result<(), EnrollError> {
    use repoch_protocol::text::escape;
    let named = |u: &str| v.containment.units.iter().any(|n| n == u);
    let Some((container, unit)) = containers
        .units
        .iter()
        .find(|(_, u)| !named(u) && !waived.contains(&format!("unit:{u}").as_str()))
    else {
        return Ok(());
    };
    Err(field(
        "containment.units",
        format!(
            "the container {container} is run by systemd unit {} (its engine's label              PODMAN_SYSTEMD_UNIT), which the manifest neither names nor waives: add it to              containment.units (and mask it), or waive it: [waive] \"unit:{}\" = \"REASON\"",
            escape(unit),
            escape(unit)
        ),
    ))
}

/// The cgroups held by other facts than `containment.cgroups`: the named units' own, as
/// systemd reports them (a cgroup that is only named like a unit is no unit's: found by
/// attacking the release binaries), and the named containers' (as their engines report
/// them, or as their main processes run in).
struct Held<'a> {
    units: &'a [String],
    containers: &'a Pinning,
}

/// Where the old root runs now, by what the manifest names: each named cgroup that exists,
/// each process that runs a named executable, each named unit systemd runs in a cgroup;
/// and the cgroup systemd reports for each named unit.
fn seeds(
    c: &Containment,
    systemctl: Option<&[String]>,
) -> Result<(Vec<Seed>, Vec<String>), EnrollError> {
    let mut seeds = Vec::new();
    let mut unit_cgroups = Vec::new();
    let root = repoch_sys::cgroup::mount_point().ok();
    let populated = |cg: &str| {
        root.as_deref()
            .and_then(|r| repoch_sys::cgroup::occupancy(r, cg).ok())
            .is_some_and(|o| !o.procs.is_empty())
    };
    for cg in c.cgroups.iter().filter(|cg| populated(cg)) {
        seeds.push(Seed::Cgroup(cg.clone()));
    }
    for pid in held_by::all_pids().unwrap_or_default() {
        if held_by::exe(pid).is_some_and(|e| c.executables.contains(&e)) {
            seeds.push(Seed::Pid(pid));
        }
    }
    if let (Some(cmd), false) = (systemctl, c.units.is_empty()) {
        // A unit that runs in no cgroup here (inactive, not found, or another manager's
        // whose cgroups are not this host's) starts nothing now that a seed could follow.
        // A template is asked for by its instances (systemctl shows no template), and
        // every unit answers `Id=` (a timer has no `ControlGroup=` to print). What
        // systemd cannot answer refuses: a cross-check that asked nothing is none (found
        // by attacking the release binaries: it was skipped, and said nothing ran).
        let shown = named_units(cmd, &c.units)
            .and_then(|units| repoch_sys::systemd::show_properties(cmd, "Id,ControlGroup", &units))
            .map_err(|e| EnrollError::Refused {
                what: "the cross-check with the running old root".into(),
                why: format!("systemd could not be asked for the named units' cgroups: {e}"),
            })?;
        for props in shown {
            let Some((_, cg)) = props
                .iter()
                .find(|(k, v)| k == "ControlGroup" && !v.is_empty())
            else {
                continue;
            };
            unit_cgroups.push(cg.clone());
            if populated(cg) {
                seeds.push(Seed::Cgroup(cg.clone()));
            }
        }
    }
    Ok((seeds, unit_cgroups))
}

/// The named units as systemd can show them: each template by its loaded instances.
fn named_units(cmd: &[String], units: &[String]) -> Result<Vec<String>, repoch_sys::error::Error> {
    use repoch_sys::systemd::{is_template, template_state};
    let mut out: Vec<String> = units.iter().filter(|u| !is_template(u)).cloned().collect();
    for t in units.iter().filter(|u| is_template(u)) {
        out.extend(
            template_state(cmd, t)?
                .instances
                .into_iter()
                .map(|i| i.unit),
        );
    }
    Ok(out)
}

/// Every authority of `d` the manifest `v` does not name (waivers not yet applied);
/// `held` says which cgroups the named units and containers hold.
fn left_out(v: &Validated, d: &Discovery, held: &Held<'_>) -> Vec<LeftOut> {
    let c = &v.containment;
    let within = |cg: &str, of: &[String]| of.iter().any(|n| repoch_sys::cgroup::is_within(cg, n));
    let in_named_container = |cg: &str| within(cg, &held.containers.cgroups);
    let mut out = Vec::new();
    let mut each =
        |found: &[Found], field: &'static str, kind: &str, named: &dyn Fn(&str) -> bool| {
            for f in found.iter().filter(|f| !named(&f.value)) {
                out.push(LeftOut {
                    field,
                    what: format!("{kind}:{}", f.value),
                    why: f.why.clone(),
                });
            }
        };
    // A named template holds its instances whole (docs/OPERATOR.md).
    let units = |u: &str| {
        c.units
            .iter()
            .any(|n| n == u || repoch_sys::systemd::template_of(u).is_some_and(|t| *n == t))
    };
    each(&d.units, "containment.units", "unit", &units);
    each(&d.unit_starters, "containment.units", "unit", &units);
    each(&d.containers, "containment.containers", "container", &|k| {
        named_container(c, k)
    });
    // A named unit's own cgroup is the unit's: the unit fact holds it; a named container's
    // is its engine's.
    let held_cgroup = |cg: &str| {
        within(cg, held.units)
            || in_named_container(cg)
            || c.cgroups
                .iter()
                .any(|n| repoch_sys::cgroup::is_within(cg, n))
    };
    each(&d.cgroups, "containment.cgroups", "cgroup", &held_cgroup);
    // An executable must be named when a process runs it outside every held cgroup: there
    // only the executable holds it. (Inside, naming it too holds an escape from the cgroup.)
    let outside: Vec<Found> = d
        .executables
        .iter()
        .filter(|e| {
            d.processes
                .iter()
                .any(|p| p.exe == e.value && !held_cgroup(&p.cgroup))
        })
        .cloned()
        .collect();
    each(&outside, "containment.executables", "executable", &|e| {
        c.executables.iter().any(|n| n == e)
    });
    each(&d.uids, "containment.old_root_uids", "uid", &|u| {
        u.parse().is_ok_and(|u: u32| c.old_root_uids.contains(&u))
    });
    each(&d.listeners, "containment.listeners", "listener", &|l| {
        c.listeners.iter().any(|n| covers(&n.to_string(), l))
    });
    each(&d.locks, "fences", "lock", &|p| {
        v.fences.iter().any(|f| f == p)
    });
    each(&d.scheduled, "waive", "scheduled", &|_| false);
    each(&d.unknown, "waive", "unknown", &|_| false);
    out.extend(starters(d, &in_named_container));
    out
}

/// Whether the container discovery found (`ENGINE:FULL_ID`) is one the manifest names: by
/// the full id enrollment pinned for it, or by that id as its name.
fn named_container(c: &Containment, found: &str) -> bool {
    found.split_once(':').is_some_and(|(engine, id)| {
        c.containers
            .iter()
            .any(|n| n.engine == engine && (n.pinned.as_deref() == Some(id) || n.name == id))
    })
}

/// Whether the manifest's listener `named` holds the endpoint `found` (both spelled as the
/// manifest spells them): the same, or `KIND:*:PORT` for any address of that kind and port.
fn covers(named: &str, found: &str) -> bool {
    let parts = |s: &str| {
        let (kind, rest) = s.split_once(':')?;
        let (addr, port) = rest.rsplit_once(':')?;
        Some((kind.to_owned(), addr.to_owned(), port.to_owned()))
    };
    named == found
        || matches!((parts(named), parts(found)), (Some((k, a, p)), Some((k2, _, p2)))
            if k != "unix" && a == "*" && k == k2 && p == p2)
}

/// The starters of the old root's processes that no manifest line holds: every parent that
/// is not one of its processes, but the system's systemd (its units and cgroups are
/// named or left out above). Keyed by the starter's pid and program, which stay while it
/// runs.
fn starters(d: &Discovery, in_named_container: &dyn Fn(&str) -> bool) -> Vec<LeftOut> {
    let ours: Vec<u32> = d.processes.iter().map(|p| p.pid).collect();
    let mut out: Vec<LeftOut> = Vec::new();
    for p in d.processes.iter().filter(|p| !ours.contains(&p.ppid)) {
        let Some(a) = held_by::ancestor(p.ppid) else {
            continue; // gone: it starts nothing any more
        };
        let program = crate::discover::program(&a);
        if a.pid == 1 && program == "systemd" {
            continue;
        }
        // A named container's shim: the container fact holds what its engine starts.
        let shim = program.starts_with("containerd-shim") || program == "conmon";
        if shim && in_named_container(&p.cgroup) {
            continue;
        }
        let what = format!("starter:{} {program}", a.pid);
        if !out.iter().any(|l| l.what == what) {
            out.push(LeftOut {
                field: "waive",
                what,
                why: format!("it started pid {}, and may start it again", p.pid),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_on_every_address_covers_one_address_of_its_kind_and_port_only() {
        assert!(covers("tcp:*:7071", "tcp:127.0.0.1:7071"));
        assert!(covers("tcp:*:7071", "tcp:[::1]:7071"));
        assert!(covers("udp:[::1]:53", "udp:[::1]:53"));
        assert!(!covers("tcp:*:7071", "udp:127.0.0.1:7071"));
        assert!(!covers("tcp:*:7071", "tcp:127.0.0.1:7072"));
        assert!(!covers("tcp:127.0.0.1:7071", "tcp:*:7071"));
        assert!(!covers("unix:/run/a.sock", "unix:/run/b.sock"));
    }

    #[test]
    fn a_container_found_is_named_by_the_id_enrollment_pinned_or_by_that_id() {
        let id = "ab".repeat(32);
        let named = |name: &str, pinned: Option<&str>| Containment {
            containers: vec![repoch_protocol::manifest::ContainerRef {
                engine: "docker".into(),
                name: name.into(),
                socket: "/run/docker.sock".into(),
                pinned: pinned.map(Into::into),
            }],
            ..Containment::default()
        };
        let found = format!("docker:{id}");
        assert!(named_container(&named("old-root", Some(&id)), &found));
        assert!(named_container(&named(&id, None), &found));
        // A name alone says nothing of which container it is; another engine's is not it.
        assert!(!named_container(&named("old-root", None), &found));
        assert!(!named_container(
            &named("old-root", Some(&id)),
            &format!("podman:{id}")
        ));
    }
}

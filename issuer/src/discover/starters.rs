//! What would start the old root again: the units that trigger its units, what started
//! each of its processes (the parent chain, classified), and the cron and at entries that
//! name its executables.

use repoch_sys::held_by::{self, Ancestor};

use super::{Discovery, Found};

/// Files read under each cron or at directory at most.
pub const SCHEDULE_FILES_MAX: usize = 256;
/// Bytes of one cron or at file read at most.
pub const SCHEDULE_FILE_BYTES_MAX: u64 = 256 * 1024;
/// Where cron and at keep what they will run: files, or directories of files (Debian's
/// and most distributions' places).
pub const SCHEDULES: &[&str] = &[
    "/etc/crontab",
    "/etc/cron.d",
    "/var/spool/cron/crontabs",
    "/var/spool/cron/atjobs",
    "/var/spool/at",
];

/// For each unit found: the units that trigger it (timers, sockets, paths), asked of the
/// system manager in one `systemctl show`; a unit systemd restarts by itself is said so.
pub(super) fn units(d: &mut Discovery, systemctl: Option<&[String]>) {
    let units: Vec<String> = d.units.iter().map(|u| u.value.clone()).collect();
    if units.is_empty() {
        return;
    }
    let shown = match systemctl {
        None => Err("no systemd manager to ask".to_owned()),
        Some(cmd) => repoch_sys::systemd::show_properties(cmd, "TriggeredBy,Restart", &units)
            .map_err(|e| e.to_string()),
    };
    let shown = match shown {
        Ok(s) => s,
        Err(why) => {
            for u in &units {
                d.unknown.push(Found {
                    value: format!("what starts {u}"),
                    pids: Vec::new(),
                    why: format!("systemd could not be asked: {why}"),
                });
            }
            return;
        }
    };
    for (unit, props) in units.iter().zip(shown) {
        for (k, v) in props {
            match k.as_str() {
                "TriggeredBy" => {
                    for t in v.split_whitespace() {
                        let why = || format!("starts {unit} (TriggeredBy= of {unit})");
                        add_unpinned(&mut d.unit_starters, t, why);
                    }
                }
                "Restart" if v != "no" => {
                    if let Some(u) = d.units.iter_mut().find(|f| &f.value == unit) {
                        u.why
                            .push_str(&format!("; systemd restarts it (Restart={v})"));
                    }
                }
                _ => {}
            }
        }
    }
}

fn add_unpinned(list: &mut Vec<Found>, value: &str, why: impl FnOnce() -> String) {
    if !list.iter().any(|f| f.value == value) {
        list.push(Found {
            value: value.to_owned(),
            pids: Vec::new(),
            why: why(),
        });
    }
}

/// What started `pid`, when its parent is not one of the old root's processes (`ours`):
/// its parent chain up to pid 1, and what the first parent is.
pub(super) fn parents(d: &mut Discovery, pid: u32, ours: &[u32]) {
    let chain = held_by::parents(pid);
    let Some(first) = chain.first() else {
        return; // pid 1 itself, or gone
    };
    if ours.contains(&first.pid) {
        return;
    }
    let shown: Vec<String> = chain
        .iter()
        .map(|a| format!("{} ({})", a.pid, a.comm))
        .collect();
    let (kind, known) = classify(&chain);
    if let Some((container, runtime)) = shim_container(first) {
        Discovery::add(&mut d.containers, container, pid, || {
            format!(
                "its runtime's shim (pid {}, {runtime}) runs this container",
                first.pid
            )
        });
    }
    let value = format!("pid {pid}: started by {}", shown.join(" < "));
    let list = if known {
        &mut d.starters
    } else {
        &mut d.unknown_starters
    };
    Discovery::add(list, value, pid, || kind);
}

/// What the first of `chain` (a parent chain, parent first) is, and whether that is known:
/// systemd (the system's or a user's manager), a container runtime's shim, a supervisor, a
/// shell (in a terminal session or not), cron or at. Anything else is unknown.
fn classify(chain: &[Ancestor]) -> (String, bool) {
    let first = &chain[0];
    let name = program(first);
    let terminal = chain
        .iter()
        .find(|a| {
            matches!(
                program(a).as_str(),
                "tmux" | "tmux: server" | "screen" | "sshd" | "login"
            )
        })
        .map(program);
    let said = match name.as_str() {
        "systemd" if first.pid == 1 => "systemd, the system manager: a unit runs it (see units)".into(),
        "systemd" => format!("a user's systemd manager (pid {}): a user unit runs it", first.pid),
        n if n.starts_with("containerd-shim") || n == "conmon" => {
            format!("a container runtime's shim ({n}): a container runs it (see containers)")
        }
        "supervisord" | "runsv" | "runsvdir" | "s6-supervise" | "s6-svscan" | "supervise" | "monit" => {
            format!("a supervisor ({name}), which starts it again when it exits: stop the supervisor's service for it, and name it")
        }
        "sh" | "bash" | "dash" | "zsh" | "ksh" | "busybox" | "ash" => match (&terminal, first.tty) {
            (Some(t), _) => format!("a shell ({name}) in a terminal session ({t}): a loop there starts it again; end that session"),
            (None, 0) => format!("a shell ({name}) without a terminal: a script or loop that may start it again"),
            (None, _) => format!("a shell ({name}) on a terminal: a loop there starts it again; end that session"),
        },
        "cron" | "crond" | "atd" => format!("{name}: a scheduled job (see scheduled)"),
        _ => {
            return (
                format!(
                    "an unknown starter: pid {} ({}, {}); find out whether it starts the old root again",
                    first.pid,
                    first.comm,
                    if first.exe.is_empty() { "executable unreadable" } else { &first.exe }
                ),
                false,
            )
        }
    };
    (said, true)
}

/// The container a runtime's shim runs, as its arguments name it: containerd's shim
/// `-namespace NS -id ID` (`containerd:NS/ID`; in Docker's namespace `moby`, the Docker
/// container `docker:ID`), podman's `conmon` `--cid ID` (`podman:ID`); with the shim's
/// program. `None` for any other process, or arguments that name no valid container.
fn shim_container(a: &Ancestor) -> Option<(String, String)> {
    let name = program(a);
    if !(name.starts_with("containerd-shim") || name == "conmon") {
        return None;
    }
    let container = container_of_shim(&name, &held_by::arguments(a.pid)?)?;
    Some((container, name))
}

/// The container the shim `name` started with `args` runs ([`shim_container`]).
fn container_of_shim(name: &str, args: &[String]) -> Option<String> {
    use repoch_protocol::manifest::{is_container_id, is_containerd_identifier};
    let after = |flag: &str| {
        args.iter()
            .position(|x| x == flag)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    if name.starts_with("containerd-shim") {
        let (ns, id) = (after("-namespace")?, after("-id")?);
        match ns {
            "moby" => is_container_id(id).then(|| format!("docker:{id}")),
            _ => (is_containerd_identifier(ns) && is_containerd_identifier(id))
                .then(|| format!("containerd:{ns}/{id}")),
        }
    } else if name == "conmon" {
        let id = after("--cid").or_else(|| after("-c"))?;
        is_container_id(id).then(|| format!("podman:{id}"))
    } else {
        None
    }
}

/// A process's program name: its executable's file name, else its `comm`.
pub(crate) fn program(a: &Ancestor) -> String {
    std::path::Path::new(a.exe.trim_end_matches(" (deleted)"))
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| a.comm.clone())
}

/// Each line of a cron or at file ([`SCHEDULES`]) that names a found executable by its
/// path. A file that cannot be read is listed as unknown.
pub(super) fn scheduled(d: &mut Discovery) {
    let exes: Vec<String> = d
        .executables
        .iter()
        .chain(&d.shared_executables)
        .map(|e| e.value.clone())
        .collect();
    if exes.is_empty() {
        return;
    }
    for place in SCHEDULES {
        for file in schedule_files(d, place) {
            let text = match repoch_sys::procfs::read_small(&file, SCHEDULE_FILE_BYTES_MAX) {
                Ok(t) => t,
                Err(e) => {
                    d.unknown.push(Found {
                        value: file.display().to_string(),
                        pids: Vec::new(),
                        why: format!("a cron or at file that could not be read: {e}"),
                    });
                    continue;
                }
            };
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.starts_with('#') {
                    continue;
                }
                if let Some(exe) = exes.iter().find(|e| names_path(line, e)) {
                    d.scheduled.push(Found {
                        value: format!("{}:{}", file.display(), n + 1),
                        pids: Vec::new(),
                        why: format!("runs {exe}: {}", repoch_protocol::text::escape(line)),
                    });
                }
            }
        }
    }
}

/// Whether `line` names `path` as a word (not as the beginning of a longer path).
fn names_path(line: &str, path: &str) -> bool {
    line.match_indices(path).any(|(at, _)| {
        let after = line[at + path.len()..].chars().next();
        let before = line[..at].chars().last();
        !after.is_some_and(|c| c.is_alphanumeric() || c == '/' || c == '.' || c == '-' || c == '_')
            && !before.is_some_and(|c| {
                !c.is_whitespace() && !matches!(c, '\'' | '"' | ';' | '&' | '|' | '(')
            })
    })
}

/// The files of one schedule place: itself when a file, its entries when a directory (at
/// most [`SCHEDULE_FILES_MAX`], past which it is listed as unknown); nothing when absent.
fn schedule_files(d: &mut Discovery, place: &str) -> Vec<std::path::PathBuf> {
    let path = std::path::Path::new(place);
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Vec::new();
    };
    if !meta.is_dir() {
        return vec![path.to_owned()];
    }
    let entries: Vec<_> = match std::fs::read_dir(path) {
        Ok(rd) => rd
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .take(SCHEDULE_FILES_MAX + 1)
            .collect(),
        Err(e) => {
            d.unknown.push(Found {
                value: place.to_owned(),
                pids: Vec::new(),
                why: format!("a cron or at directory that could not be read: {e}"),
            });
            return Vec::new();
        }
    };
    if entries.len() > SCHEDULE_FILES_MAX {
        d.unknown.push(Found {
            value: place.to_owned(),
            pids: Vec::new(),
            why: format!("more than {SCHEDULE_FILES_MAX} files (SCHEDULE_FILES_MAX): not all read"),
        });
    }
    entries.into_iter().take(SCHEDULE_FILES_MAX).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(pid: u32, comm: &str, exe: &str, tty: u32) -> Ancestor {
        Ancestor {
            pid,
            comm: comm.into(),
            exe: exe.into(),
            tty,
            ppid: 1,
            zombie: false,
            exited_leader: false,
        }
    }

    #[test]
    fn each_kind_of_starter_is_named_and_an_unknown_one_is_unknown() {
        let init = a(1, "systemd", "/usr/lib/systemd/systemd", 0);
        let said = |chain: &[Ancestor]| classify(chain);
        assert!(said(std::slice::from_ref(&init))
            .0
            .starts_with("systemd, the system manager"));
        assert!(said(&[
            a(40, "systemd", "/usr/lib/systemd/systemd", 0),
            init.clone()
        ])
        .0
        .contains("user's systemd"));
        assert!(said(&[
            a(41, "containerd-shim", "/usr/bin/containerd-shim-runc-v2", 0),
            init.clone()
        ])
        .0
        .contains("shim"));
        assert!(said(&[
            a(42, "supervisord", "/usr/bin/supervisord", 0),
            init.clone()
        ])
        .0
        .contains("supervisor"));
        let shell = a(43, "sh", "/usr/bin/dash", 0);
        assert!(said(&[shell.clone(), init.clone()])
            .0
            .contains("without a terminal"));
        let tmux = a(44, "tmux: server", "/usr/bin/tmux", 0);
        assert!(said(&[shell.clone(), tmux, init.clone()])
            .0
            .contains("terminal session (tmux)"));
        let (what, known) = said(&[a(45, "odd", "/opt/odd", 0), init]);
        assert!(!known && what.contains("pid 45 (odd, /opt/odd)"), "{what}");
    }

    #[test]
    fn a_shims_arguments_name_its_container_and_nothing_else_does() {
        let args = |a: &str| a.split(' ').map(str::to_owned).collect::<Vec<_>>();
        let id = "c0".repeat(32);
        let shim = "containerd-shim-runc-v2";
        assert_eq!(
            container_of_shim(
                shim,
                &args("-namespace ops -id old-root -address /run/c.sock")
            ),
            Some("containerd:ops/old-root".into())
        );
        assert_eq!(
            container_of_shim(shim, &args(&format!("-namespace moby -id {id}"))),
            Some(format!("docker:{id}"))
        );
        assert_eq!(
            container_of_shim("conmon", &args(&format!("--api-version 1 -c {id} -u {id}"))),
            Some(format!("podman:{id}"))
        );
        // Arguments that name no valid container, or another program's: none.
        assert_eq!(
            container_of_shim(shim, &args("-namespace moby -id short")),
            None
        );
        assert_eq!(
            container_of_shim(shim, &args("-namespace o/ps -id x")),
            None
        );
        assert_eq!(container_of_shim(shim, &args("-namespace ops -id")), None);
        assert_eq!(container_of_shim("conmon", &args("-c ../x")), None);
        assert_eq!(
            container_of_shim("runsv", &args("-namespace ops -id x")),
            None
        );
    }

    #[test]
    fn a_schedule_line_names_an_executable_as_a_whole_path_only() {
        assert!(names_path(
            "* * * * * root /usr/local/bin/billing-root --once",
            "/usr/local/bin/billing-root"
        ));
        assert!(names_path("@reboot sh -c '/opt/x'", "/opt/x"));
        assert!(!names_path(
            "* * * * * root /usr/local/bin/billing-root2",
            "/usr/local/bin/billing-root"
        ));
        assert!(!names_path(
            "* * * * * root /srv/usr/local/bin/billing-root",
            "/usr/local/bin/billing-root"
        ));
    }
}

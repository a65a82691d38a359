//! Units, asked through `systemctl show`.
//!
//! Why `systemctl show` rather than D-Bus: it is systemd's stable, documented CLI contract
//! for exactly these properties, it needs no D-Bus client library in a security daemon, and
//! the same command works against a container's systemd (`nsenter -t LEADER -a systemctl`),
//! which is how the tests reach a real systemd. The command is `systemctl` unless
//! `REPOCH_SYSTEMCTL` names another (space-separated words).
//!
//! Here, the units' and templates' states and `systemctl` itself, run and bounded;
//! `services.rs`, the commands of every service systemd could start; `paths.rs`, where a
//! service's command paths lead on the host.

use crate::error::{Context as _, Error};
use std::process::{Command, Stdio};

mod paths;
mod services;

pub use paths::*;
pub use services::*;

/// Longest wait for one `systemctl show`.
pub const SYSTEMCTL_TIMEOUT_SECONDS: u64 = 10;
/// Bytes of `systemctl show` output read.
pub const SYSTEMCTL_OUTPUT_BYTES_MAX: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitState {
    pub load: String,
    /// `masked` for a mask that lasts, `masked-runtime` for one in `/run` (gone at the
    /// next boot), the unit file's state otherwise (empty for a unit with no file).
    pub file_state: String,
    pub active: String,
    pub sub: String,
    pub main_pid: u32,
    pub need_reload: bool,
    /// The cgroup systemd runs it in (`ControlGroup=`), empty when none: a unit stopped
    /// with `KillMode=process` (or `none`, `mixed`) is inactive while its cgroup still
    /// holds what its main process started.
    pub control_group: String,
}

pub fn systemctl_command() -> Vec<String> {
    match std::env::var("REPOCH_SYSTEMCTL") {
        Ok(s) if !s.trim().is_empty() => s.split_whitespace().map(str::to_owned).collect(),
        _ => vec!["systemctl".into()],
    }
}

/// Characters that make `systemctl show` take a name as a pattern over the loaded units
/// (systemd's `GLOB_CHARS`): it would show the units it matches (none, or others), not the
/// enrolled one. (A backslash is systemd's own escaping, as in `\x2d`, not a pattern.)
pub const PATTERN_CHARS: &[char] = &['*', '?', '['];

/// Asks systemd for the state of each of `units`, in one `systemctl show`. Each `Err` means
/// that unit's state could not be learnt (unknown): systemd could not be asked, its answer
/// did not hold one block per unit asked, or the name is a pattern.
pub fn show_all(cmd: &[String], units: &[String]) -> Vec<Result<UnitState, Error>> {
    let asked: Vec<&String> = units
        .iter()
        .filter(|u| !u.contains(PATTERN_CHARS))
        .collect();
    let mut answers = if asked.is_empty() {
        Ok(Vec::new())
    } else {
        ask(cmd, &asked)
    };
    if let Ok(blocks) = &answers {
        if blocks.len() != asked.len() {
            answers = Err(Error::Found(format!(
                "systemctl show answered for {} units, {} were asked",
                blocks.len(),
                asked.len()
            )));
        }
    }
    let mut blocks = answers.as_ref().map(|b| b.iter());
    units
        .iter()
        .map(|u| {
            if u.contains(PATTERN_CHARS) {
                return Err(Error::Found(format!(
                    "{u:?} is a pattern systemctl would expand, not a unit name"
                )));
            }
            match &mut blocks {
                Err(e) => Err(Error::Found(e.to_string())),
                Ok(b) => b
                    .next()
                    .map_or_else(|| Err("systemctl show: no block".into()), |b| parse(u, b)),
            }
        })
        .collect()
}

/// `PROPERTIES` (comma-separated, as `systemctl show --property=` takes them) of each of
/// `units`, in one `systemctl show`: for each unit, its `Key=value` lines as pairs, in
/// order. `Err` when systemd could not be asked, its answer did not hold one block per unit,
/// or a name is a pattern.
pub fn show_properties(
    cmd: &[String],
    properties: &str,
    units: &[String],
) -> Result<Vec<Vec<(String, String)>>, Error> {
    if let Some(u) = units.iter().find(|u| u.contains(PATTERN_CHARS)) {
        return Err(Error::Found(format!(
            "{u:?} is a pattern systemctl would expand, not a unit name"
        )));
    }
    if units.is_empty() {
        return Ok(Vec::new());
    }
    let asked: Vec<&String> = units.iter().collect();
    let blocks = show(cmd, properties, &asked, SYSTEMCTL_OUTPUT_BYTES_MAX)?;
    if blocks.len() != units.len() {
        return Err(Error::Found(format!(
            "systemctl show answered for {} units, {} were asked",
            blocks.len(),
            units.len()
        )));
    }
    Ok(blocks
        .iter()
        .map(|b| {
            b.lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .collect())
}

/// The template an instance (`NAME@I.TYPE`) is made from (`NAME@.TYPE`); `None` for a
/// unit that is no instance.
pub fn template_of(unit: &str) -> Option<String> {
    let (name, rest) = unit.split_once('@')?;
    let (_, kind) = rest.rsplit_once('.')?;
    Some(format!("{name}@.{kind}")).filter(|t| is_template(t))
}

/// Whether `unit` names a template (`NAME@.TYPE`): its instances run, never itself.
pub fn is_template(unit: &str) -> bool {
    unit.split_once("@.").is_some_and(|(name, kind)| {
        !name.is_empty() && !name.contains('@') && !kind.is_empty() && !kind.contains('.')
    })
}

/// A template's state: its unit file's (`masked`, `enabled`, `static`, ...), and each of
/// its instances loaded now with its active and sub state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateState {
    pub file: String,
    /// Instances with a unit file of their own, each with its state.
    pub instance_files: Vec<(String, String)>,
    pub instances: Vec<Instance>,
}

/// One instance of a template, as `systemctl list-units` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub unit: String,
    pub active: String,
    pub sub: String,
}

/// Asks systemd for `template`'s unit file state (`systemctl list-unit-files`) and for its
/// instances loaded now (`systemctl list-units --all NAME@*.TYPE`). Unit names hold no
/// space (systemd escapes them), so each row's first columns are exact; a row that is not
/// the template's, or not one of its instances, is no answer. A template with no unit
/// file is an error (systemctl exits 1).
pub fn template_state(cmd: &[String], template: &str) -> Result<TemplateState, Error> {
    let (name, kind) = template
        .split_once("@.")
        .filter(|_| is_template(template))
        .ok_or_else(|| Error::Found(format!("{template:?} is no template")))?;
    let plain = ["--no-legend", "--no-pager", "--plain", "--"];
    let rows = |words: &[&str]| -> Result<Vec<Vec<String>>, Error> {
        let out = run(cmd, words, SERVICES_OUTPUT_BYTES_MAX)?;
        Ok(out
            .lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect())
    };
    // The template's unit file and every instance's own (`NAME@I.TYPE` beside the
    // template, which the template's mask does not cover), then the instances loaded now.
    let pattern = format!("{name}@*.{kind}");
    let files = rows(&[&["list-unit-files"][..], &plain[..], &[pattern.as_str()]].concat())?;
    let listed = rows(
        &[
            &["list-units", "--all"][..],
            &plain[..],
            &[pattern.as_str()],
        ]
        .concat(),
    )?;
    if files.len().max(listed.len()) > SERVICES_MAX {
        return Err(Error::Found(format!(
            "over {SERVICES_MAX} instances of {template:?}"
        )));
    }
    let instance_of =
        |unit: &str| unit.starts_with(&format!("{name}@")) && unit.ends_with(&format!(".{kind}"));
    let (file, instance_files) = unit_files(&files, template, instance_of)?;
    let instances = listed
        .into_iter()
        .map(|row| match &row[..] {
            [unit, _load, active, sub, ..] if instance_of(unit) => Ok(Instance {
                unit: unit.clone(),
                active: active.clone(),
                sub: sub.clone(),
            }),
            _ => Err(Error::Found(format!(
                "systemctl list-units: a row that is no instance of {template:?}: {:?}",
                row.join(" ")
            ))),
        })
        .collect::<Result<_, _>>()?;
    Ok(TemplateState {
        file,
        instance_files,
        instances,
    })
}

/// `systemctl list-unit-files`' rows for a template's pattern: the template's own state,
/// and each instance's own unit file with its state. A row of another unit is no answer;
/// no row for the template is an error.
fn unit_files(
    rows: &[Vec<String>],
    template: &str,
    instance_of: impl Fn(&str) -> bool,
) -> Result<(String, Vec<(String, String)>), Error> {
    let mut file = None;
    let mut instance_files = Vec::new();
    for row in rows {
        match &row[..] {
            [unit, state, ..] if unit == template => file = Some(state.clone()),
            [unit, state, ..] if instance_of(unit) => {
                instance_files.push((unit.clone(), state.clone()))
            }
            _ => {
                return Err(Error::Found(format!(
                    "systemctl list-unit-files: a row that is no file of {template:?}: {:?}",
                    row.join(" ")
                )))
            }
        }
    }
    let file = file.ok_or_else(|| {
        Error::Found(format!(
            "systemctl list-unit-files lists no unit file of {template:?}"
        ))
    })?;
    Ok((file, instance_files))
}

/// Runs `systemctl show` for `units` and splits its answer into one block per unit (the
/// properties of each, separated by an empty line, in the order asked).
fn ask(cmd: &[String], units: &[&String]) -> Result<Vec<String>, Error> {
    show(
        cmd,
        "LoadState,UnitFileState,ActiveState,SubState,MainPID,NeedDaemonReload,ControlGroup",
        units,
        SYSTEMCTL_OUTPUT_BYTES_MAX,
    )
}

/// Runs `systemctl show --property=PROPERTIES -- UNITS` and splits its answer into one block
/// per unit, up to `bytes_max` of answer.
fn show(
    cmd: &[String],
    properties: &str,
    units: &[&String],
    bytes_max: usize,
) -> Result<Vec<String>, Error> {
    let property = format!("--property={properties}");
    let mut words = vec!["show", "--no-pager", &property, "--"];
    words.extend(units.iter().map(|u| u.as_str()));
    let out = run(cmd, &words, bytes_max)?;
    Ok(out
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(str::to_owned)
        .collect())
}

/// Runs `systemctl WORDS` and returns what it printed. Its output is read while it runs (a
/// pipe holds less than it may write), up to `bytes_max`: more is an error, never a cut
/// answer; so is an exit status other than success, or no end within
/// `SYSTEMCTL_TIMEOUT_SECONDS`.
fn run(cmd: &[String], words: &[&str], bytes_max: usize) -> Result<String, Error> {
    let (prog, args) = cmd.split_first().ok_or("empty systemctl command")?;
    let mut child = Command::new(prog)
        .args(args)
        .args(words)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context(format_args!("{prog}"))?;
    let stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        use std::io::Read as _;
        let mut out = Vec::new();
        stdout
            .take(bytes_max as u64 + 1)
            .read_to_end(&mut out)
            .map(|_| out)
    });
    // Its end: a pidfd polled with the deadline (no sleep between looks).
    let exited = super::peer::pidfd_open(child.id()).and_then(|fd| {
        super::peer::ready_within(&fd, rustix::event::PollFlags::IN, SYSTEMCTL_TIMEOUT_SECONDS)
    });
    let failed = match exited {
        Ok(true) => None,
        Ok(false) => Some(format!(
            "systemctl show did not answer within {SYSTEMCTL_TIMEOUT_SECONDS}s"
        )),
        Err(e) => Some(format!("systemctl show: {e}")),
    };
    if let Some(e) = failed {
        let _ = child.kill();
        let _ = child.wait();
        let _ = reader.join();
        return Err(Error::Found(e));
    }
    let status = child.wait().context("systemctl show")?;
    use std::io::Read as _;
    let out = reader
        .join()
        .map_err(|_| "systemctl show: its reader panicked")?
        .context("systemctl show")?;
    if out.len() > bytes_max {
        return Err(Error::Found(format!(
            "systemctl show answered more than {bytes_max} bytes"
        )));
    }
    let out = String::from_utf8(out).map_err(|_| "systemctl show: not UTF-8")?;
    let mut err = String::new();
    let _ = child
        .stderr
        .take()
        .expect("piped")
        .take(4096)
        .read_to_string(&mut err);
    if !status.success() {
        return Err(Error::Found(format!(
            "systemctl show exited {status}: {}",
            err.trim()
        )));
    }
    Ok(out)
}

/// One unit's block of `systemctl show` output, for `unit`. Only a service has a main
/// process: systemd prints no `MainPID=` for a timer, a socket, a path or any other unit
/// type, whose main pid is then 0 (found by enrolling a timer and a socket unit as
/// `repoch discover` names them: every observation was `controller-unknown`). A service
/// whose answer lacks it is not read.
fn parse(unit: &str, out: &str) -> Result<UnitState, Error> {
    let get = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
            .map(str::to_owned)
    };
    let field = |k: &str| get(k).ok_or_else(|| format!("systemctl show: no {k} in the answer"));
    Ok(UnitState {
        load: field("LoadState")?,
        file_state: field("UnitFileState")?,
        active: field("ActiveState")?,
        sub: field("SubState")?,
        main_pid: match get("MainPID") {
            None if !unit.ends_with(".service") => 0,
            _ => field("MainPID")?
                .parse()
                .map_err(|_| "systemctl show: MainPID is not a number".to_owned())?,
        },
        control_group: get("ControlGroup").unwrap_or_default(),
        need_reload: match field("NeedDaemonReload")?.as_str() {
            "yes" => true,
            "no" => false,
            other => {
                return Err(Error::Found(format!(
                    "systemctl show: NeedDaemonReload={other}"
                )))
            }
        },
    })
}

/// Whether a systemd may be asked here: `REPOCH_SYSTEMCTL` names one, or this host was
/// booted with systemd (`/run/systemd/system` is a directory, sd_booted(3)'s test).
pub fn booted(cmd: &[String]) -> bool {
    cmd != ["systemctl"]
        || std::fs::symlink_metadata("/run/systemd/system").is_ok_and(|m| m.is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A template's unit files: its own state, each instance's own file, no row of another
    /// unit, and no answer without the template's own row.
    #[test]
    fn a_templates_unit_files_are_its_own_and_its_instances() {
        let rows = |t: &str| -> Vec<Vec<String>> {
            t.lines()
                .map(|l| l.split_whitespace().map(str::to_owned).collect())
                .collect()
        };
        let instance_of = |u: &str| u.starts_with("old@") && u.ends_with(".service");
        let (file, own) = unit_files(
            &rows("old@.service masked enabled\nold@c.service static -"),
            "old@.service",
            instance_of,
        )
        .unwrap();
        assert_eq!(file, "masked");
        assert_eq!(own, [("old@c.service".into(), "static".into())]);
        assert!(unit_files(&rows("old@c.service static -"), "old@.service", instance_of).is_err());
        assert!(unit_files(
            &rows("old@.service masked -\nother.service enabled -"),
            "old@.service",
            instance_of
        )
        .is_err());
    }

    /// An answer larger than the bound is an error, never a cut answer: `yes` never ends.
    #[test]
    fn an_instance_is_of_its_template() {
        assert_eq!(
            template_of("billing@1.service").as_deref(),
            Some("billing@.service")
        );
        assert_eq!(template_of("a@b.c.timer").as_deref(), Some("a@.timer"));
        // A template is its own; a unit that is no instance has none.
        assert_eq!(
            template_of("billing@.service").as_deref(),
            Some("billing@.service")
        );
        assert_eq!(template_of("billing.service"), None);
    }

    #[test]
    fn only_a_service_has_a_main_pid_to_read() {
        let block = "LoadState=masked\nUnitFileState=masked\nActiveState=inactive\n\
                     SubState=dead\nNeedDaemonReload=no";
        for unit in ["old.timer", "old.socket", "old.path"] {
            assert_eq!(parse(unit, block).unwrap().main_pid, 0, "{unit}");
        }
        assert!(parse("old.service", block).is_err());
        let with = format!("{block}\nMainPID=42");
        assert_eq!(parse("old.service", &with).unwrap().main_pid, 42);
        assert_eq!(parse("old.timer", &with).unwrap().main_pid, 42);
    }

    #[test]
    fn an_answer_past_its_bound_is_an_error() {
        let cmd = vec![
            "sh".to_owned(),
            "-c".to_owned(),
            "head -c 100000 /dev/zero | tr '\\0' x; true".to_owned(),
        ];
        let e = show(&cmd, "Id", &[], 1000).unwrap_err();
        assert!(e.to_string().contains("more than 1000 bytes"), "{e}");
    }
}

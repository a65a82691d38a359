//! Units, asked through `systemctl show`.
//!
//! Why `systemctl show` rather than D-Bus: it is systemd's stable, documented CLI contract
//! for exactly these properties, it needs no D-Bus client library in a security daemon, and
//! the same command works against a container's systemd (`nsenter -t LEADER -a systemctl`),
//! which is how the tests reach a real systemd. The command is `systemctl` unless
//! `REPOCH_SYSTEMCTL` names another (space-separated words).

use crate::error::{Context as _, Error};
use std::process::{Command, Stdio};

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
                    .map_or_else(|| Err("systemctl show: no block".into()), |b| parse(b)),
            }
        })
        .collect()
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
        "LoadState,UnitFileState,ActiveState,SubState,MainPID,NeedDaemonReload",
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

/// One unit's block of `systemctl show` output.
fn parse(out: &str) -> Result<UnitState, Error> {
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
        main_pid: field("MainPID")?
            .parse()
            .map_err(|_| "systemctl show: MainPID is not a number".to_owned())?,
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

/// Bytes of the loaded services' commands read (`systemctl show '*.service'`).
pub const SERVICES_OUTPUT_BYTES_MAX: usize = 8 << 20;
/// Loaded services read.
pub const SERVICES_MAX: usize = 16_384;
/// The properties that hold a service's commands.
pub const EXEC_PROPERTIES: &str =
    "ExecCondition,ExecStartPre,ExecStart,ExecStartPost,ExecReload,ExecStop,ExecStopPost";

/// Whether a systemd may be asked here: `REPOCH_SYSTEMCTL` names one, or this host was
/// booted with systemd (`/run/systemd/system` is a directory, sd_booted(3)'s test).
pub fn booted(cmd: &[String]) -> bool {
    cmd != ["systemctl"]
        || std::fs::symlink_metadata("/run/systemd/system").is_ok_and(|m| m.is_dir())
}

/// One command of a loaded service: the unit, the property that holds it
/// (`ExecStart`, ...) and each word it names (its `path=` and its `argv[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceCommand {
    pub unit: String,
    pub property: String,
    pub words: Vec<String>,
    /// Where its paths lead on the host.
    pub paths: ServicePaths,
}

/// Every command of every service systemd could start: each service unit file installed
/// and not masked (enabled, static, disabled: `systemctl start` needs no more), and every
/// service loaded now (transient ones, from `systemd-run`, included), in one
/// `systemctl list-unit-files` and one `systemctl show`. A template (`NAME@.service`) is
/// asked through the instances loaded now.
pub fn service_commands(cmd: &[String]) -> Result<Vec<ServiceCommand>, Error> {
    let names = service_names(cmd)?;
    let asked: Vec<&String> = names.iter().collect();
    let props = format!("Id,{EXEC_PROPERTIES},{FILE_SYSTEM_PROPERTIES}");
    let blocks = show(cmd, &props, &asked, SERVICES_OUTPUT_BYTES_MAX)?;
    // One block per service asked, in the order asked, each its own Id: systemctl prints a
    // command's arguments raw, and an argument holding an empty line would split a block in
    // two (found by attacking the release binaries: the second half named a unit the
    // manifest names, and the service that runs the old root was read without commands).
    if blocks.len() != names.len() {
        return Err(Error::Found(format!(
            "systemctl show answered {} blocks for {} services",
            blocks.len(),
            names.len()
        )));
    }
    let mut out = Vec::new();
    for (name, b) in names.iter().zip(&blocks) {
        let (unit, commands) = service_block(b)?;
        if unit != *name {
            return Err(Error::Found(format!(
                "systemctl show answered for {unit:?} where {name:?} was asked"
            )));
        }
        out.extend(commands);
    }
    Ok(out)
}

/// Every service systemd could start, by name, sorted and once each: each unit file
/// installed that is neither masked, nor a template, nor an alias (shown under the unit
/// it names), and every service loaded now.
fn service_names(cmd: &[String]) -> Result<Vec<String>, Error> {
    let listed = |words: &[&str], state_column: usize, keep: fn(&str) -> bool| {
        run(cmd, words, SERVICES_OUTPUT_BYTES_MAX).map(|out| {
            out.lines()
                .filter_map(|l| {
                    let w: Vec<&str> = l.split_whitespace().collect();
                    let (name, state) = (*w.first()?, *w.get(state_column)?);
                    (name.ends_with(".service") && !name.ends_with("@.service") && keep(state))
                        .then(|| name.to_owned())
                })
                .collect::<Vec<String>>()
        })
    };
    let plain = ["--type=service", "--no-legend", "--no-pager", "--plain"];
    let files = [&["list-unit-files"][..], &plain[..]].concat();
    let loaded = [&["list-units", "--all"][..], &plain[..]].concat();
    // A mask in /run (`masked-runtime`) is gone at the next boot, and a masked unit's
    // commands are not loaded (systemctl shows none): such a service cannot be searched,
    // and says so (found by attacking the release binaries: passed over, it ran the old
    // root after a boot).
    let runtime = listed(&files, 1, |s| s == "masked-runtime")?;
    if let Some(first) = runtime.first() {
        return Err(Error::Found(format!(
            "{first} is masked until the next boot only (masked-runtime): its commands are not loaded and cannot be searched; mask it for good (systemctl mask) or name it under containment.units"
        )));
    }
    let mut names = listed(&files, 1, |s| !s.starts_with("masked") && s != "alias")?;
    names.extend(listed(&loaded, 1, |s| s == "loaded")?);
    names.sort_unstable();
    names.dedup();
    if names.len() > SERVICES_MAX {
        return Err(Error::Found(format!(
            "over {SERVICES_MAX} services installed or loaded"
        )));
    }
    Ok(names)
}

/// Properties asked of each service besides its commands: where its paths are resolved.
pub const FILE_SYSTEM_PROPERTIES: &str = "RootDirectory,RootImage,BindPaths,BindReadOnlyPaths,\
     ExtensionDirectories,ExecSearchPath,WorkingDirectory,User,NeedDaemonReload";

/// One service's block of `systemctl show`: its commands. Every line must be one property
/// asked, `Id` once: systemctl prints a command's arguments raw, so an argument holding a
/// newline (a unit file's `\n`) could print a line of its own, such as another `Id=`.
fn service_block(b: &str) -> Result<(String, Vec<ServiceCommand>), Error> {
    let asked = |p: &str| {
        p == "Id"
            || EXEC_PROPERTIES.split(',').any(|e| e == p)
            || FILE_SYSTEM_PROPERTIES.split(',').any(|e| e == p)
    };
    let mut unit = None;
    let mut paths = ServicePaths::default();
    let mut commands = Vec::new();
    for line in b.lines() {
        let runs = |v: &str| {
            path_runs(v)
                .ok_or_else(|| Error::Found(format!("systemctl show: too many words in {line:?}")))
        };
        let (property, value) = line
            .split_once('=')
            .filter(|(p, _)| asked(p))
            .ok_or_else(|| format!("systemctl show: a line that is no property asked: {line:?}"))?;
        match property {
            "Id" if unit.is_some() => {
                return Err(Error::Found(format!(
                    "systemctl show: a block with two Ids ({value:?})"
                )))
            }
            "Id" => unit = Some(value.to_owned()),
            "RootDirectory" => paths.root = Some(value.to_owned()).filter(|v| !v.is_empty()),
            "RootImage" => paths.image = Some(value.to_owned()).filter(|v| !v.is_empty()),
            // Each directory printed quoted when it holds a space: every run of words
            // (quotes dropped) that may be one directory is searched.
            "ExecSearchPath" => paths.search.extend(runs(&value.replace('"', ""))?),
            "User" => paths.user = Some(value.to_owned()).filter(|v| !v.is_empty()),
            "NeedDaemonReload" if value == "yes" => {
                return Err(Error::Found(format!(
                    "systemctl show: {} has a changed unit file systemd has not reloaded (its commands as loaded are not what it would run): run systemctl daemon-reload",
                    unit.as_deref().unwrap_or("a service")
                )))
            }
            "NeedDaemonReload" => {}
            // `!` (systemctl's spelling of `-`) when a missing directory is no error; `~`
            // the home of the service's user (resolved with its `User=`).
            "WorkingDirectory" => {
                paths.workdir = Some(value.trim_start_matches(['!', '-']).to_owned())
                    .filter(|v| v.starts_with('/') || v == "~")
            }
            "BindPaths" | "BindReadOnlyPaths" => paths.binds.extend(binds(value)?),
            // Joined with spaces, as arguments are: each run that may be one directory.
            "ExtensionDirectories" => paths.extensions.extend(runs(value)?),
            _ => commands.push((property.to_owned(), command_words(value)?)),
        }
    }
    let unit: String = unit.ok_or("systemctl show: a block with no Id")?;
    let commands = commands
        .into_iter()
        .map(|(property, words)| ServiceCommand {
            unit: unit.clone(),
            property,
            words,
            paths: paths.clone(),
        })
        .collect();
    Ok((unit, commands))
}

/// Where a service's command paths lead on the host: its root directory (or image), its
/// bind mounts (inside path to host path) and its extension directories (each overlaid on
/// its `/usr` and `/opt`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServicePaths {
    pub root: Option<String>,
    pub image: Option<String>,
    pub binds: Vec<(String, String)>,
    pub extensions: Vec<String>,
    /// `ExecSearchPath=`: where a command named without a `/` is looked for.
    pub search: Vec<String>,
    /// `WorkingDirectory=`: where a relative path leads (`/` when unset; `~` the user's
    /// home).
    pub workdir: Option<String>,
    /// `User=`: whose home `~` is (root's when unset).
    pub user: Option<String>,
}

/// A file a service's command may name, as the host reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnHost {
    /// A host path.
    Path(String),
    /// A path as a process rooted at `root` sees it: its symbolic links resolve inside
    /// `root` ([`crate::fs::open_in_root`]).
    InRoot { root: String, path: String },
}

/// Where systemd looks for a command named without a `/` when the service names no
/// `ExecSearchPath=` (its default `PATH`, with the directories of a split `/usr`).
pub const DEFAULT_SEARCH_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

impl ServicePaths {
    /// Where `word` (a path as the service sees it) may lead: through a bind mount of it
    /// or of a directory above it, through an extension directory (under `/usr` or
    /// `/opt`; a link there resolved inside it too), inside its root directory and on the
    /// host (`RootDirectoryStartOnly=` runs all but `ExecStart=` outside the root), and a
    /// relative path from its working directory. More places than the service may use:
    /// the search is for what could run the old root.
    pub fn on_host(&self, word: &str) -> Vec<OnHost> {
        let mut out = Vec::new();
        if !word.starts_with('/') {
            let joined = format!("{}/{word}", self.working_directory().trim_end_matches('/'));
            out.extend(self.on_host(&joined));
            out.push(OnHost::Path(word.to_owned()));
            return out;
        }
        // Through a link on the way (`/bin` to `usr/bin` on a merged /usr) the path may
        // reach a bind mount's destination: its directory as the host resolves it too.
        let canonical = std::path::Path::new(word)
            .parent()
            .and_then(|d| std::fs::canonicalize(d).ok())
            .zip(std::path::Path::new(word).file_name())
            .map(|(d, n)| d.join(n).to_string_lossy().into_owned())
            .filter(|c| c != word);
        for path in canonical.iter().map(String::as_str).chain([word]) {
            for (host, inside) in &self.binds {
                if let Some(rest) = path.strip_prefix(inside.as_str()) {
                    if rest.is_empty() || rest.starts_with('/') {
                        out.push(OnHost::Path(format!("{host}{rest}")));
                    }
                }
            }
        }
        if ["/usr/", "/opt/"].iter().any(|p| word.starts_with(p)) {
            for ext in &self.extensions {
                out.push(OnHost::Path(format!("{}{word}", ext.trim_end_matches('/'))));
                out.push(OnHost::InRoot {
                    root: ext.clone(),
                    path: word.to_owned(),
                });
            }
        }
        if let Some(root) = &self.root {
            out.push(OnHost::InRoot {
                root: root.clone(),
                path: word.to_owned(),
            });
        }
        out.push(OnHost::Path(word.to_owned()));
        out
    }

    /// Where the service's relative paths start: its `WorkingDirectory=`, `~` its user's
    /// home (as this host's user database says), else `/` (systemd's default).
    fn working_directory(&self) -> String {
        match self.workdir.as_deref() {
            Some("~") => {
                let user = self.user.as_deref().unwrap_or("root");
                nix::unistd::User::from_name(user)
                    .ok()
                    .flatten()
                    .map(|u| u.dir.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "/".to_owned())
            }
            Some(wd) => wd.to_owned(),
            None => "/".to_owned(),
        }
    }

    /// Where a command's path `path` may lead: named without a `/`, each directory of its
    /// search path (`ExecSearchPath=`, else systemd's default) holding it; else as
    /// [`ServicePaths::on_host`] says.
    pub fn command(&self, path: &str) -> Vec<OnHost> {
        if path.contains('/') {
            return self.on_host(path);
        }
        let search: Vec<&str> = match self.search.is_empty() {
            true => DEFAULT_SEARCH_PATH.to_vec(),
            false => self.search.iter().map(String::as_str).collect(),
        };
        search
            .iter()
            .flat_map(|d| self.on_host(&format!("{}/{path}", d.trim_end_matches('/'))))
            .collect()
    }
}

impl ServiceCommand {
    /// Every file this command may run or name: its path (searched as systemd searches
    /// it), and each path among its arguments ([`ServicePaths::on_host`]).
    pub fn candidates(&self) -> Vec<OnHost> {
        let mut words = self.words.iter();
        let mut out = words
            .next()
            .map(|p| self.paths.command(p))
            .unwrap_or_default();
        for w in words {
            out.extend(self.paths.on_host(w));
        }
        out
    }
}

/// `BindPaths=`'s value as systemctl shows it: `SRC:DST:rbind` or `SRC:DST` (`norbind`)
/// items, space-separated, `-` before an optional source. systemctl prints the paths raw,
/// so an item that is not so (a path holding a space or a colon, `\:` in the unit file) cannot
/// be read: an error, never a guess.
fn binds(value: &str) -> Result<Vec<(String, String)>, Error> {
    value
        .split_whitespace()
        .map(|item| {
            let parts: Vec<&str> = item.trim_start_matches('-').split(':').collect();
            match parts[..] {
                // `norbind` is printed as no third field.
                [src, dst] | [src, dst, "rbind" | "norbind"]
                    if src.starts_with('/') && dst.starts_with('/') =>
                {
                    Ok((src.to_owned(), dst.to_owned()))
                }
                _ => Err(Error::Found(format!(
                    "systemctl show: a bind mount that cannot be read: {value:?}"
                ))),
            }
        })
        .collect()
}

/// Words one path is looked for across at most (a path holding more than 15 spaces is
/// not found): the runs grow with the words, never with their square.
pub const RUN_WORDS_MAX: usize = 16;

/// Candidate paths read from one command's argument text at most (an argument holding
/// spaces is found among the runs of words joined back): more is an error.
pub const COMMAND_CANDIDATES_MAX: usize = 16_384;

/// The paths one command may name, from systemctl's line for it: `{ path=P ; argv[]=A ;
/// ignore_errors=… ; start_time=[…] ; stop_time=[…] ; pid=N ; code=… ; status=… }`. systemd
/// writes the fields after the arguments itself, so they are read from the end (their last
/// spelling); P and A are the unit's own text, printed raw: a command whose text holds
/// ` ; argv[]=` twice cannot be split into path and arguments, and is an error, never a
/// guess. systemctl joins the arguments with one space, so an argument holding spaces is
/// found among the runs of words joined back: P, and every run of A's words (split on
/// each space) that begins with `/`, up to `PATH_BYTES_MAX` bytes.
fn command_words(value: &str) -> Result<Vec<String>, Error> {
    let bad = |why: &str| {
        Error::Found(format!(
            "systemctl show: a command that cannot be read ({why}): {value:?}"
        ))
    };
    let any = |v: &str| !v.is_empty() && !v.contains(' ');
    let digits = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit());
    let bracketed = |v: &str| v.starts_with('[') && v.ends_with(']') && !v.contains(" ; ");
    let yes_no = |v: &str| v == "yes" || v == "no";
    type Valid<'a> = &'a dyn Fn(&str) -> bool;
    let tail: [(&str, Valid<'_>); 6] = [
        ("status", &any),
        ("code", &any),
        ("pid", &digits),
        ("stop_time", &bracketed),
        ("start_time", &bracketed),
        ("ignore_errors", &yes_no),
    ];
    let mut rest = value
        .strip_prefix("{ path=")
        .and_then(|v| v.strip_suffix(" }"))
        .ok_or_else(|| bad("not one command"))?;
    for (field, valid) in tail {
        let (head, _) = rest
            .rsplit_once(&format!(" ; {field}="))
            .filter(|(_, v)| valid(v))
            .ok_or_else(|| bad(field))?;
        rest = head;
    }
    let (path, argv) = rest
        .split_once(" ; argv[]=")
        .filter(|(_, a)| !a.contains(" ; argv[]="))
        .ok_or_else(|| bad("argv"))?;
    let mut words = vec![path.to_owned()];
    words.extend(path_runs(argv).ok_or_else(|| bad("too many words"))?);
    Ok(words)
}

/// Every run of `text`'s words (split on each space) that begins with `/`, joined back with
/// one space, up to `PATH_MAX` bytes: each path systemctl printed joined with spaces is
/// among them, whatever spaces it holds. `None` past [`COMMAND_CANDIDATES_MAX`].
fn path_runs(text: &str) -> Option<Vec<String>> {
    const PATH_BYTES_MAX: usize = 4096;
    let mut runs = Vec::new();
    let split: Vec<&str> = text.split(' ').collect();
    for (i, first) in split.iter().enumerate() {
        // A run begins at a path (`/…`; `-/…`, an optional one), at a relative path
        // holding a `/`, and at the first `/` inside a word (`--exe=/…`, `-S/…`).
        let mut starts: Vec<&str> = Vec::new();
        match first.strip_prefix('-').filter(|f| f.starts_with('/')) {
            Some(f) => starts.push(f),
            None if first.contains('/') => starts.push(first),
            None => {}
        }
        if let Some(at) = first.find('/').filter(|at| *at > 0) {
            starts.push(&first[at..]);
        }
        for start in starts {
            if runs.len() >= COMMAND_CANDIDATES_MAX {
                return None;
            }
            runs.push(start.to_owned());
            let mut run = start.to_owned();
            for w in split.iter().skip(i + 1).take(RUN_WORDS_MAX - 1) {
                run.push(' ');
                run.push_str(w);
                if run.len() > PATH_BYTES_MAX {
                    break;
                }
                if runs.len() >= COMMAND_CANDIDATES_MAX {
                    return None;
                }
                runs.push(run.clone());
            }
        }
    }
    Some(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// systemd's spelling of a command gives its path and every run of its arguments that
    /// begins with `/`: an argument holding spaces (`"/srv/old root"`, printed joined with
    /// one space) is among them, whatever the timestamps and status systemd wrote after it.
    #[test]
    fn a_commands_path_and_arguments_are_its_words() {
        let one = "{ path=/srv/old-root ; argv[]=/srv/old-root live-ms 5 ; ignore_errors=no ; \
                   start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }";
        assert_eq!(
            command_words(one).unwrap(),
            [
                "/srv/old-root",
                "/srv/old-root",
                "/srv/old-root live-ms",
                "/srv/old-root live-ms 5"
            ]
        );
        let spaced = "{ path=/bin/sh ; argv[]=sh /srv/old root  x ; ignore_errors=yes ; \
                      start_time=[Sun 2026-12-06 16:20:01 UTC] ; stop_time=[Sun 2026-12-06 16:20:01 UTC] ; \
                      pid=52 ; code=exited ; status=1/FAILURE }";
        let words = command_words(spaced).unwrap();
        assert!(words.contains(&"/srv/old root".to_owned()), "{words:?}");
        assert!(words.contains(&"/srv/old root  x".to_owned()), "{words:?}");
        assert_eq!(words[0], "/bin/sh");
    }

    /// The files a command may name: its bare path on the search path (the service's, else
    /// systemd's default), a path inside an option, a relative path from the working
    /// directory, an optional extension directory's, and the host's path beside the root
    /// directory's (found by attacking the release binaries, each missed before).
    #[test]
    fn a_command_names_every_file_systemd_could_run_for_it() {
        let tail = " ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }";
        let block = |exec: &str, more: &str| {
            let b = format!("ExecStart={{ path={exec}{tail}\n{more}Id=x.service");
            service_block(&b).unwrap().1.remove(0)
        };
        let paths = |c: &ServiceCommand| -> Vec<String> {
            c.candidates()
                .into_iter()
                .map(|h| match h {
                    OnHost::Path(p) => p,
                    OnHost::InRoot { root, path } => format!("{root}!{path}"),
                })
                .collect()
        };
        let bare = block("old-root ; argv[]=old-root 5", "");
        assert!(paths(&bare).contains(&"/usr/local/bin/old-root".to_owned()));
        let searched = block("old-root ; argv[]=old-root 5", "ExecSearchPath=/srv\n");
        assert_eq!(paths(&searched)[0], "/srv/old-root");
        let optioned = block("/usr/bin/env ; argv[]=env -S/srv/old-root 5", "");
        assert!(paths(&optioned).contains(&"/srv/old-root".to_owned()));
        let relative = block(
            "/usr/bin/env ; argv[]=env ./old-root",
            "WorkingDirectory=!/srv\n",
        );
        assert!(paths(&relative).contains(&"/srv/./old-root".to_owned()));
        let extended = block("/usr/bin/app ; argv[]=app", "ExtensionDirectories=-/ext\n");
        assert!(paths(&extended).contains(&"/ext/usr/bin/app".to_owned()));
        assert!(paths(&extended).contains(&"/ext!/usr/bin/app".to_owned()));
        let rooted = block("/srv/old-root ; argv[]=x", "RootDirectory=/jail\n");
        assert!(paths(&rooted).contains(&"/jail!/srv/old-root".to_owned()));
        assert!(paths(&rooted).contains(&"/srv/old-root".to_owned()));
        assert_eq!(
            binds("/usr/share:/opt/share").unwrap(),
            [("/usr/share".into(), "/opt/share".into())]
        );
        // Found by the second attack: a search directory holding a space (printed quoted),
        // a relative path with no working directory (systemd's is /), `~` (the user's
        // home), and a command's path through a link into a bind's destination.
        let quoted = block(
            "old-root ; argv[]=old-root",
            "ExecSearchPath=\"/srv/sp ace\" /usr/bin\n",
        );
        assert!(paths(&quoted).contains(&"/srv/sp ace/old-root".to_owned()));
        let from_root = block("/usr/bin/env ; argv[]=env srv/old-root", "");
        assert!(paths(&from_root).contains(&"/srv/old-root".to_owned()));
        let home = block(
            "/usr/bin/env ; argv[]=env ./old-root",
            "WorkingDirectory=~\nUser=root\n",
        );
        assert!(paths(&home).contains(&"/root/./old-root".to_owned()));
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("usr")).unwrap();
        std::os::unix::fs::symlink("usr", d.path().join("bin")).unwrap();
        let top = d.path().canonicalize().unwrap().display().to_string();
        let merged = block(
            &format!("{top}/bin/app ; argv[]=app"),
            &format!("BindReadOnlyPaths=/srv/old-root:{top}/usr/app:rbind\n"),
        );
        assert!(paths(&merged).contains(&"/srv/old-root".to_owned()));
    }

    /// A service whose unit file changed without a reload is not read as it would run: an
    /// error saying so (found by the second attack: its loaded commands were searched, and
    /// the new ones ran the old root after a reload).
    #[test]
    fn a_service_whose_file_changed_unreloaded_cannot_be_read() {
        let tail = " ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }";
        let b = format!("ExecStart={{ path=/bin/sleep ; argv[]=sleep 1{tail}\nNeedDaemonReload=yes\nId=x.service");
        let e = service_block(&b).unwrap_err().to_string();
        assert!(e.contains("not reloaded"), "{e}");
        let b = format!("ExecStart={{ path=/bin/sleep ; argv[]=sleep 1{tail}\nNeedDaemonReload=no\nId=x.service");
        assert!(service_block(&b).is_ok());
    }

    /// Runs grow with the words, never with their square: a command naming 1,000 paths is
    /// read (the second attack: 181 paths refused the whole host, too many words).
    #[test]
    fn a_command_of_many_paths_is_read() {
        let many: Vec<String> = (0..1000).map(|i| format!("/v/{i}")).collect();
        let runs = path_runs(&many.join(" ")).unwrap();
        assert!(runs.len() <= 1000 * RUN_WORDS_MAX, "{}", runs.len());
        assert!(runs.contains(&"/v/7 /v/8".to_owned()));
    }

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

    /// A command whose text cannot be split into its path and its arguments, or whose
    /// systemd-written fields are not systemd's, is an error: a path or an argument holding
    /// ` ; argv[]=` (found by attacking the release binaries: a path holding ` ; ` was read
    /// as another, and the service running the old root was not found), a line cut by a
    /// newline in an argument, two commands on one line.
    #[test]
    fn a_command_whose_text_cannot_be_split_is_an_error_never_a_guess() {
        let tail = " ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }";
        for raw in [
            format!("{{ path=/srv/old ; argv[]=x ; argv[]=/srv/old ; argv[]=x{tail}"),
            format!("{{ path=/bin/sh ; argv[]=sh -c echo a ; argv[]=b{tail}"),
            "{ path=/srv/old-root ; argv[]=/srv/old-root x".to_owned(),
            "{ path=/bin/sh ; argv[]=sh ; ignore_errors=maybe ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }".to_owned(),
            format!("{{ path=/bin/sh ; argv[]=sh{tail} {{ path=/bin/true ; argv[]=true{tail}"),
        ] {
            let e = command_words(&raw).unwrap_err();
            assert!(e.to_string().contains("cannot be read"), "{raw}: {e}");
        }
    }

    /// A block whose lines are not all properties asked is no answer: an argument holding a
    /// newline printed a line of its own (found by attacking the release binaries: a second
    /// `Id=` naming a unit the manifest names hid the one that runs the old root).
    #[test]
    fn a_forged_line_in_a_services_block_is_no_answer() {
        let tail = " ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }";
        let forged = format!(
            "ExecStart={{ path=/srv/old-root ; argv[]=/srv/old-root x\n\
             Id=named.service\ny{tail}\nId=evil.service"
        );
        let e = service_block(&forged).unwrap_err().to_string();
        assert!(
            e.contains("no property asked") || e.contains("cannot be read"),
            "{e}"
        );
        let two_ids = format!(
            "Id=named.service\nExecStart={{ path=/srv/old-root ; argv[]=x{tail}\nId=evil.service"
        );
        let e = service_block(&two_ids).unwrap_err();
        assert!(e.to_string().contains("two Ids"), "{e}");
        let fine = format!(
            "ExecStart={{ path=/srv/old-root ; argv[]=/srv/old-root{tail}\n\
             RootDirectory=/jail\nBindReadOnlyPaths=/srv/old-root:/usr/bin/billing:rbind\nId=ok.service"
        );
        let (unit, c) = service_block(&fine).unwrap();
        assert_eq!(unit, "ok.service");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].unit, "ok.service");
        let in_jail = |path: &str| OnHost::InRoot {
            root: "/jail".into(),
            path: path.into(),
        };
        assert_eq!(
            c[0].paths.on_host("/usr/bin/billing"),
            [
                OnHost::Path("/srv/old-root".into()),
                in_jail("/usr/bin/billing"),
                OnHost::Path("/usr/bin/billing".into())
            ]
        );
        assert_eq!(
            c[0].paths.on_host("/old-root"),
            [in_jail("/old-root"), OnHost::Path("/old-root".into())]
        );
    }

    /// A bind mount whose source or destination holds a space or a colon is printed raw and
    /// cannot be read: an error (the search is unknown), never another pair of paths (found
    /// by attacking the release binaries: `BindReadOnlyPaths=/srv/old\\:root:/usr/bin/app`
    /// was read as a bind of `/srv/old\`, and the service running the old root was not
    /// found).
    #[test]
    fn a_bind_mount_that_cannot_be_read_is_an_error_never_a_guess() {
        assert_eq!(
            binds("/a:/b:rbind -/c:/d:norbind").unwrap(),
            [("/a".into(), "/b".into()), ("/c".into(), "/d".into())]
        );
        for raw in [
            "/srv/old:root:/usr/bin/app:rbind",
            "/srv/old root:/usr/bin/app:rbind",
            "/srv/old-root:/usr/bin/app root:rbind",
            "/a:/b:/c",
        ] {
            let e = binds(raw).unwrap_err();
            assert!(e.to_string().contains("cannot be read"), "{raw}: {e}");
        }
    }

    /// An answer larger than the bound is an error, never a cut answer: `yes` never ends.
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

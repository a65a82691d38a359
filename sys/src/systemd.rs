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

/// Runs `systemctl show` for `units` and splits its answer into one block per unit (the
/// properties of each, separated by an empty line, in the order asked).
fn ask(cmd: &[String], units: &[&String]) -> Result<Vec<String>, Error> {
    let (prog, args) = cmd.split_first().ok_or("empty systemctl command")?;
    let mut child = Command::new(prog)
        .args(args)
        .args([
            "show",
            "--no-pager",
            "--property=LoadState,ActiveState,SubState,MainPID,NeedDaemonReload",
            "--",
        ])
        .args(units)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context(format_args!("{prog}"))?;
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
        return Err(Error::Found(e));
    }
    let status = child.wait().context("systemctl show")?;
    use std::io::Read as _;
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("piped")
        .take(SYSTEMCTL_OUTPUT_BYTES_MAX as u64)
        .read_to_string(&mut out)
        .map_err(|e| e.to_string())?;
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
    Ok(out
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .map(str::to_owned)
        .collect())
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

//! Units, asked through `systemctl show`.
//!
//! Why `systemctl show` rather than D-Bus: it is systemd's stable, documented CLI contract
//! for exactly these properties, it needs no D-Bus client library in a security daemon, and
//! the same command works against a container's systemd (`nsenter -t LEADER -a systemctl`),
//! which is how the tests reach a real systemd. The command is `systemctl` unless
//! `REPOCH_SYSTEMCTL` names another (space-separated words).

use std::process::{Command, Stdio};
use std::time::Duration;

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

/// Asks systemd for a unit's state. `Err` means systemd could not be asked (unknown).
pub fn show(cmd: &[String], unit: &str) -> Result<UnitState, String> {
    let (prog, args) = cmd.split_first().ok_or("empty systemctl command")?;
    let mut child = Command::new(prog)
        .args(args)
        .args([
            "show",
            "--no-pager",
            "--property=LoadState,ActiveState,SubState,MainPID,NeedDaemonReload",
            "--",
            unit,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{prog}: {e}"))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(SYSTEMCTL_TIMEOUT_SECONDS);
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "systemctl show did not answer within {SYSTEMCTL_TIMEOUT_SECONDS}s"
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
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
        return Err(format!("systemctl show exited {status}: {}", err.trim()));
    }
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
            other => return Err(format!("systemctl show: NeedDaemonReload={other}")),
        },
    })
}

//! `repoch-consume`, the worker supervisor's CLI: its clap definition ([`Args`], also the
//! source of its man page and shell completions) and its run. See `repoch-consume --help`.

use std::os::fd::AsRawFd as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use repoch_protocol::Outcome;
use serde_json::json;

use crate::{Error, Options};

/// What each outcome means for `repoch-consume`, in its `--help`; `None` for an outcome it
/// never ends with. Exhaustive: an outcome cannot be added without saying so here.
fn exit_code_meaning(o: Outcome) -> Option<&'static str> {
    match o {
        Outcome::Success => Some(
            "granted (receive: verified, persisted and acknowledged), verified (verify),
        created (keygen)",
        ),
        Outcome::Refused => Some(
            "by repochd (the epoch already used included), the grant does not verify,
        or nothing was used: repochd is not there, or the wait ended before repochd
        challenged this consumer",
        ),
        Outcome::Uncertain => Some(
            "the connection was lost after the challenge, the grant could not be
        persisted, or repochd did not take the acknowledgement (the grant is kept)",
        ),
        Outcome::Inconsistent => Some(
            "(verify --log): the epoch log does not extend the checkpoint kept
        beside the grant (rollback, fork or truncation; the evidence pair printed),
        or its receipt carries another grant than this one",
        ),
        Outcome::Usage => Some(
            "bad arguments or key files, or --out exists or its directory cannot be
        opened (checked before connecting)",
        ),
        Outcome::Busy | Outcome::Internal => None,
    }
}

/// `repoch-consume --help`'s EXIT CODES, generated from [`Outcome::ALL`] (docs/EXIT-CODES.md).
pub fn exit_codes_help() -> String {
    let mut s = String::from("EXIT CODES (with --json, `outcome` names the code as below):");
    for o in Outcome::ALL {
        let Some(meaning) = exit_code_meaning(o) else {
            continue;
        };
        // A success names what succeeded; every other outcome its name.
        let sep = match o {
            Outcome::Success => "",
            Outcome::Inconsistent => " ",
            _ => ": ",
        };
        let name = if o.is_success() { "" } else { o.name() };
        s.push_str(&format!("\n    {:<4}{name}{sep}{meaning}", o.code()));
    }
    s
}

/// Longest `receive --wait` (seconds): a day.
const RECEIVE_WAIT_SECONDS_MAX: u64 = 86_400;

/// Writes one line to stdout; an output error (EPIPE) never aborts nor changes the exit
/// code (`println!` panics, and a panic aborts).
fn say(line: &str) {
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}").and_then(|()| o.flush());
}

/// [`say`] for stderr.
fn warn(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// repoch-consume: receive a deployment's single-use recovery grant.
///
/// `receive` connects to repochd's grant socket, waits for the operator's `repoch recover`,
/// proves custody of the enrolled consumer key, receives the grant with the held lock
/// fences, verifies it against the pinned issuer key, persists it durably (a temporary
/// name in the same directory, fsync, moved into place never over a file, directory
/// fsync) and acknowledges it to repochd before reporting success (repochd reports
/// `granted` only on that acknowledgement). With `-- CMD...` it then executes the
/// new root in its place: the listening sockets repochd held for the deployment's
/// enrolled listeners at fds 3, 4, ... in systemd's socket-activation convention
/// (LISTEN_FDS, LISTEN_FDNAMES as tcp-PORT, udp-PORT, unix-NAME, LISTEN_PID its own pid;
/// none set when there are none), the fence fds above them, their numbers in
/// REPOCH_FENCE_FDS (comma separated), and the grant's path in REPOCH_GRANT. With a fleet
/// registry, the grant's fencing token: REPOCH_FENCING_TOKEN (its revision, decimal) and
/// REPOCH_FENCING_CLUSTER (the etcd cluster id, 16 hex digits); without one, neither is
/// set, whatever the caller's environment held.
#[derive(Parser, Debug)]
#[command(name = "repoch-consume", version, after_help = exit_codes_help(), after_long_help = exit_codes_help())]
pub struct Args {
    /// Machine-readable output: one JSON object on stdout.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Create a consumer key pair: KEYFILE (secret, 0600) and KEYFILE.pub; prints the public key.
    Keygen { keyfile: PathBuf },
    /// Receive the grant of DEPLOYMENT's recovery (waits for the operator).
    Receive {
        /// Deployment id or unique prefix (as `repoch list` prints it).
        #[arg(long)]
        deployment: String,
        /// The consumer's secret key file.
        #[arg(long)]
        key: PathBuf,
        /// The host issuer's public key, pinned.
        #[arg(long)]
        issuer_key: PathBuf,
        /// Where to persist the grant (must not exist; a crash may leave a temporary
        /// `.NAME.PID.RANDOM.tmp` beside it, never a partial file at NAME).
        #[arg(long)]
        out: PathBuf,
        /// repochd's grant socket.
        #[arg(
            long,
            default_value = "/run/repoch/grant.sock",
            env = "REPOCH_GRANT_SOCKET"
        )]
        socket: PathBuf,
        /// Longest wait for repochd at each step, in seconds (1..=86400).
        #[arg(long, default_value_t = crate::WAIT_SECONDS_DEFAULT,
              value_parser = clap::value_parser!(u64).range(1..=RECEIVE_WAIT_SECONDS_MAX))]
        wait: u64,
        /// The new root to execute with the listeners and fences inherited.
        #[arg(last = true)]
        cmd: Vec<String>,
    },
    /// Verify a persisted grant offline against the pinned issuer key; with --log, also
    /// that the epoch log extends the checkpoint kept beside the grant (GRANT.checkpoint).
    Verify {
        #[arg(long)]
        issuer_key: PathBuf,
        /// The deployment's epoch log (or a copy of it) to check against GRANT.checkpoint.
        #[arg(long)]
        log: Option<PathBuf>,
        grant: PathBuf,
    },
}

fn fail(json: bool, e: &Error) -> Outcome {
    fail_with(json, e, e.outcome())
}

/// One rule (docs/EXIT-CODES.md): a failure's `outcome` is the exit-code table's name for
/// its code.
fn fail_with(json: bool, e: &Error, outcome: Outcome) -> Outcome {
    if json {
        let mut j =
            json!({"outcome": outcome.name(), "exit": outcome.code(), "message": e.to_string()});
        if let Error::Refused { reason, .. } | Error::LogInvalid { reason, .. } = e {
            j["reason"] = json!(reason.as_str());
        }
        if let Error::Inconsistent(i, from) = e {
            j["reason"] = json!(i.reason.as_str());
            j["evidence"] = json!({
                "checkpoint": {"size": i.old.0, "head": i.old.1.to_hex()},
                "log": {"size": i.current.0, "head": i.current.1.to_hex()},
                "rewritten_from_record": from,
            });
        }
        if let Error::NotThisGrant {
            grant_sha256,
            log,
            from,
        } = e
        {
            j["reason"] = json!(repoch_protocol::Reason::CheckpointFork.as_str());
            j["evidence"] = json!({
                "grant": {"sha256": grant_sha256.to_hex()},
                "log": {"size": log.0, "head": log.1.to_hex()},
                "rewritten_from_record": from,
            });
        }
        say(&j.to_string());
    } else {
        warn(&format!("repoch-consume: {e}"));
    }
    outcome
}

/// docs/EXIT-CODES.md: a connection that failed, timed out or ended before repochd
/// challenged this consumer leaves nothing uncertain for it: repochd signs a grant only
/// after the consumer proves custody in answer to the challenge, so none exists: 2 (not
/// granted). After the challenge a grant may have been signed and lost: the library's
/// code (3, uncertain).
fn receive_outcome(e: &Error, challenged: bool) -> Outcome {
    match e {
        Error::Io(_) if !challenged => Outcome::Refused,
        _ => e.outcome(),
    }
}

/// The fencing token's revision (decimal) for the new root, with a `[registry]`.
pub const FENCING_TOKEN_ENV: &str = "REPOCH_FENCING_TOKEN";
/// The etcd cluster id (16 hex digits) the token's revision belongs to.
pub const FENCING_CLUSTER_ENV: &str = "REPOCH_FENCING_CLUSTER";

fn summary(g: &repoch_protocol::grant::Grant, bytes: &[u8]) -> serde_json::Value {
    json!({"deployment": g.deployment.to_hex(), "ready": g.ready_path, "ready_sha256": g.ready_sha256.to_hex(),
           "fences": g.fences.iter().map(|f| f.path.clone()).collect::<Vec<_>>(),
           "frontier": {"seq": g.frontier_seq, "hash": g.frontier_hash.to_hex()},
           "unknown_ops": g.unknown_ops.iter().map(|u| json!({"op": u.op, "name": u.name})).collect::<Vec<_>>(),
           "fencing": g.fencing.map(|t| json!({"revision": t.revision, "cluster": format!("{:016x}", t.cluster)})),
           "sha256": repoch_protocol::Hash::of(bytes).to_hex()})
}

/// `repoch-consume`'s whole run: the command line parsed, the command run, its outcome.
pub fn main() -> Outcome {
    match Args::try_parse() {
        Ok(args) => run(args),
        Err(e) => {
            let _ = e.print();
            match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    Outcome::Success
                }
                _ => Outcome::Usage,
            }
        }
    }
}

/// Runs one parsed command line.
pub fn run(args: Args) -> Outcome {
    let json = args.json;
    // Before any key is read or made (`crate::undumpable`).
    if let Err(e) = crate::undumpable() {
        return fail(json, &e);
    }
    match args.cmd {
        Cmd::Keygen { keyfile } => keygen(json, &keyfile),
        Cmd::Verify {
            issuer_key,
            log,
            grant,
        } => verify(json, &issuer_key, log.as_deref(), &grant),
        Cmd::Receive {
            deployment,
            key,
            issuer_key,
            out,
            socket,
            wait,
            cmd,
        } => {
            let prefix = deployment.to_ascii_lowercase();
            if repoch_protocol::wire::check_deployment_prefix(&prefix).is_err() {
                let e = Error::Usage(format!("--deployment {deployment:?}: 1 to 32 hex digits, a deployment id or a unique prefix of one, as `repoch list` prints it"));
                return fail(json, &e);
            }
            let opts = crate::read_key(&key).and_then(|k| {
                let issuer = crate::read_public(&issuer_key)?;
                let mut o = Options::new(socket, &deployment, k, issuer, out.clone());
                o.wait = std::time::Duration::from_secs(wait);
                Ok(o)
            });
            match opts {
                Ok(o) => receive(json, &o, &out, &cmd),
                Err(e) => fail(json, &e),
            }
        }
    }
}

/// `keygen`: a new consumer key, its public half printed.
fn keygen(json: bool, keyfile: &Path) -> Outcome {
    match crate::keygen(keyfile) {
        Ok(k) => {
            if json {
                say(&format!("{}", json!({"public_key": k.to_hex()})))
            } else {
                say(&format!("{k}"))
            }
            Outcome::Success
        }
        Err(e) => fail(json, &e),
    }
}

/// `verify`: a grant against the issuer key, and with `--log` its kept checkpoint against
/// the epoch log.
fn verify(json: bool, issuer_key: &Path, log: Option<&Path>, grant: &Path) -> Outcome {
    let r = crate::read_public(issuer_key).and_then(|k| {
        // A grant travels in one frame: a larger file is no grant; a FIFO is refused,
        // never waited on.
        let bytes = crate::read_bounded(grant, repoch_protocol::limits::FRAME_BYTES_MAX)
            .map_err(|e| Error::Usage(format!("{}: {e}", grant.display())))?;
        let g = crate::verify(&bytes, &k, None)?;
        let ext = match log {
            Some(l) => Some(crate::verify_log_against(&g, &bytes, grant, l, &k)?),
            None => None,
        };
        Ok((g, bytes, ext))
    });
    let (g, bytes, ext) = match r {
        Ok(r) => r,
        Err(e) => return fail(json, &e),
    };
    let mut s = summary(&g, &bytes);
    if let Some((_, x)) = &ext {
        s["checkpoint"] = json!({
            "size": x.old.0, "head": x.old.1.to_hex(),
            "log": {"size": x.current.0, "head": x.current.1.to_hex()},
        });
        if !json {
            say(&format!(
                "checkpoint: the log ({} records) extends the checkpoint kept with the grant ({} records, head {})",
                x.current.0, x.old.0, x.old.1
            ));
        }
    }
    if json {
        say(&format!("{}", json!({"outcome": "verified", "grant": s})))
    } else {
        say(&format!(
            "verified: grant for deployment {} (sha256 {})",
            g.deployment,
            s["sha256"].as_str().unwrap_or("")
        ))
    }
    Outcome::Success
}

/// `receive`: the grant received and persisted at `out`, then, with a command, the new
/// root started in this process's place.
fn receive(json: bool, opts: &Options, out: &Path, cmd: &[String]) -> Outcome {
    let mut challenged = false;
    let r = crate::receive_with(opts, &mut |step| {
        challenged |= step == "challenge";
        if !json {
            warn(&format!("repoch-consume: {step}"));
        }
    });
    let got = match r {
        Ok(g) => g,
        Err(e) => return fail_with(json, &e, receive_outcome(&e, challenged)),
    };
    let s = summary(&got.grant, &got.bytes);
    if json {
        say(&format!(
            "{}",
            json!({"outcome": "granted", "grant_file": shown(out), "grant": s})
        ));
    } else {
        say(&format!(
            "granted: deployment {} (grant {}, sha256 {})",
            got.grant.deployment,
            out.display(),
            s["sha256"].as_str().unwrap_or("")
        ));
    }
    match cmd.split_first() {
        None => Outcome::Success,
        Some((prog, rest)) => start_new_root(json, got, out, prog, rest),
    }
}

/// Executes the new root in this process's place, its fences and listeners handed over
/// (docs/PROTOCOL.md, "The new root's descriptors"). Returns only on failure.
fn start_new_root(
    json: bool,
    got: crate::Received,
    out: &Path,
    prog: &str,
    rest: &[String],
) -> Outcome {
    let env = match handoff_fds(got.fences, got.listeners, &got.grant.listeners) {
        Ok(env) => env,
        Err(e) => return fail(json, &Error::Io(e)),
    };
    let mut c = std::process::Command::new(prog);
    c.args(rest).env("REPOCH_GRANT", out);
    for k in [
        "LISTEN_FDS",
        "LISTEN_FDNAMES",
        "LISTEN_PID",
        FENCING_TOKEN_ENV,
        FENCING_CLUSTER_ENV,
    ] {
        c.env_remove(k);
    }
    // The fleet registry's fencing token, for the new root to hand to its storage
    // (docs/OPERATOR.md, "Fencing tokens"); never one inherited from our caller.
    if let Some(t) = got.grant.fencing {
        c.env(FENCING_TOKEN_ENV, t.revision.to_string())
            .env(FENCING_CLUSTER_ENV, format!("{:016x}", t.cluster));
    }
    c.envs(env);
    let err = c.exec();
    // exec only returns on failure; the grant is persisted and the fences are held by no
    // one once we exit: say so.
    fail(
        json,
        &Error::Io(format!(
            "exec {prog}: {err} (the grant is persisted at {})",
            out.display()
        )),
    )
}

/// Descriptors for the new root in systemd's socket-activation convention: the listeners
/// at 3, 4, … in grant order, named in `LISTEN_FDNAMES` ([`fd_name`]), `LISTEN_FDS` their
/// count and `LISTEN_PID` this process (the command is executed in place); the fences
/// above them, their numbers in `REPOCH_FENCE_FDS`. Every one is moved above the
/// listeners' range first, so placing one never closes another; a number in that range
/// still in use is an error (never an fd closed behind its owner's back). Returns the
/// environment to set; the descriptors stay open across exec.
fn handoff_fds(
    fences: Vec<std::os::fd::OwnedFd>,
    listeners: Vec<std::os::fd::OwnedFd>,
    names: &[repoch_protocol::manifest::Listener],
) -> Result<Vec<(String, String)>, String> {
    use rustix::io::{fcntl_dupfd_cloexec, fcntl_setfd, FdFlags};
    const FIRST: i32 = 3; // SD_LISTEN_FDS_START
    let n = i32::try_from(listeners.len()).map_err(|_| "too many listeners".to_owned())?;
    let above = FIRST + n;
    let lift = |fds: Vec<std::os::fd::OwnedFd>| -> Result<Vec<std::os::fd::OwnedFd>, String> {
        fds.iter()
            .map(|fd| fcntl_dupfd_cloexec(fd, above).map_err(|e| format!("dup: {e}")))
            .collect()
    };
    // Lifted copies first, then the originals closed: the low numbers are free again.
    let (fences, lifted) = (lift(fences)?, lift(listeners)?);
    let mut placed = Vec::with_capacity(lifted.len());
    for (i, fd) in lifted.iter().enumerate() {
        let want = FIRST + i as i32;
        let got = fcntl_dupfd_cloexec(fd, want).map_err(|e| format!("dup: {e}"))?;
        if got.as_raw_fd() != want {
            return Err(format!(
                "fd {want} is in use: listener {} cannot be passed at it",
                names[i]
            ));
        }
        placed.push(got);
    }
    drop(lifted);
    for fd in fences.iter().chain(&placed) {
        fcntl_setfd(fd, FdFlags::empty()).map_err(|e| format!("fd flags: {e}"))?;
    }
    let nums: Vec<String> = fences.iter().map(|f| f.as_raw_fd().to_string()).collect();
    let mut env = vec![("REPOCH_FENCE_FDS".to_owned(), nums.join(","))];
    if !placed.is_empty() {
        env.push(("LISTEN_FDS".into(), placed.len().to_string()));
        env.push((
            "LISTEN_FDNAMES".into(),
            names.iter().map(fd_name).collect::<Vec<_>>().join(":"),
        ));
        env.push(("LISTEN_PID".into(), std::process::id().to_string()));
    }
    // Kept open for the command: exec replaces this process, nothing closes them.
    std::mem::forget(fences);
    std::mem::forget(placed);
    Ok(env)
}

/// A listener's name in `LISTEN_FDNAMES`: `tcp-PORT`, `udp-PORT`, `unix-NAME` (the path's
/// file name, each character outside `[A-Za-z0-9._-]` as one `_`, the whole name cut at
/// 255 bytes: systemd's rule for a descriptor name; docs/OPERATOR.md, "What the new root
/// receives").
fn fd_name(l: &repoch_protocol::manifest::Listener) -> String {
    use repoch_protocol::manifest::Listener;
    let mut s = match l {
        Listener::Tcp(i) => format!("tcp-{}", i.port),
        Listener::Udp(i) => format!("udp-{}", i.port),
        Listener::Unix(p) => {
            let name = std::path::Path::new(p)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let clean: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            format!("unix-{clean}")
        }
    };
    s.truncate(255);
    s
}

/// A path as `--json` prints it: any bytes, escaped by the one text rule (docs/PROTOCOL.md,
/// "Text"); a name that is not UTF-8 shows U+FFFD where its bytes are.
fn shown(p: &std::path::Path) -> String {
    repoch_protocol::text::escape(&p.to_string_lossy()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::fd_name;
    use repoch_protocol::manifest::Listener;

    /// The names docs/OPERATOR.md ("What the new root receives") promises a supervisor.
    #[test]
    fn listener_names_are_systemds_descriptor_names() {
        use repoch_protocol::manifest::Inet;
        assert_eq!(fd_name(&Listener::Tcp(Inet::any(7070))), "tcp-7070");
        let lo = std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
        assert_eq!(fd_name(&Listener::Udp(Inet::at(lo, 53))), "udp-53");
        let unix = |p: &str| fd_name(&Listener::Unix(p.into()));
        assert_eq!(unix("/run/billing/api.sock"), "unix-api.sock");
        // One `_` per character outside [A-Za-z0-9._-], a 2-byte one included.
        assert_eq!(unix("/run/b/a pi:é.sock"), "unix-a_pi__.sock");
        // Cut at 255 bytes in all.
        assert_eq!(unix(&format!("/run/{}", "x".repeat(300))).len(), 255);
    }
}

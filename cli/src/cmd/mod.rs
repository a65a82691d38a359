//! `repoch`, the operator and auditor CLI: its clap definition ([`Args`], also the source
//! of the man page and the shell completions), one module per command, and [`main`].
//! Each command returns its [`Outcome`] or a [`Failure`]; the binary turns the outcome into
//! the exit code of docs/EXIT-CODES.md, once.

pub mod audit;
pub mod checkpoint;
pub mod common;
pub mod discover;
pub mod enroll;
pub mod journal;
pub mod list;
pub mod observe;
pub mod recover;
pub mod status;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use repoch_protocol::Outcome;

pub use common::{say, warn, Ctx};

use crate::exit::Failure;
use repoch_protocol::limits;

/// What a command ends with: its outcome, or a failure `main` reports.
pub type CmdResult = Result<Outcome, Failure>;

/// What each outcome means for `repoch`, in its `--help`. Exhaustive: an outcome cannot be
/// added without saying what it means here.
fn exit_code_meaning(o: Outcome) -> &'static str {
    match o {
        Outcome::Success => "done, and everything the command verified holds",
        Outcome::Refused => {
            "something it verified does not hold (a fact, a log that does not
        verify, a used epoch for observe/recover) or a precondition failed; reason
        codes name each"
        }
        Outcome::Uncertain => {
            "the epoch was consumed or partially published; it is preserved as is"
        }
        Outcome::Busy => "another issuer holds the epoch now (the holder is named)",
        Outcome::Inconsistent => {
            "audit --checkpoint: the log does not extend the checkpoint
        (rollback, fork or truncation; the evidence pair printed)"
        }
        Outcome::Usage => "bad or out-of-range arguments, or a manifest the host cannot enroll",
        Outcome::Internal => "a bug; never a silent success",
    }
}

/// `repoch --help`'s EXIT CODES, generated from [`Outcome::ALL`] so it cannot drift from
/// docs/EXIT-CODES.md (a test keeps that table equal to the enum).
pub fn exit_codes_help() -> String {
    let mut s = String::from(
        "EXIT CODES (one rule for every command; docs/EXIT-CODES.md has the full table):\n",
    );
    for o in Outcome::ALL {
        s.push_str(&format!(
            "    {:<4}{}: {}\n",
            o.code(),
            o.name(),
            exit_code_meaning(o)
        ));
    }
    s.push_str(
        "\nA closed stdout loses the text, never the exit code. Reason codes are listed in
docs/REASONS.md. Every command takes --json.",
    );
    s
}

/// repoch: host-owned, once-per-deployment recovery epochs.
///
/// An operator enrolls a deployment once, and runs `repoch recover` once when its
/// management root lost its exclusion. repochd verifies lineage, containment and held
/// fences from live OS facts, writes fsynced intent/consume/receipt records and hands a
/// single-use signed grant to the authenticated worker supervisor. Auditors verify the
/// epoch chain offline with `repoch audit`.
#[derive(Parser, Debug)]
#[command(name = "repoch", version, after_long_help = exit_codes_help(), after_help = exit_codes_help())]
pub struct Args {
    /// Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo).
    #[arg(long, global = true, env = "REPOCH_ROOT", value_name = "DIR")]
    root: Option<PathBuf>,
    /// Machine-readable output: one JSON object per line on stdout.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Enroll a deployment from a TOML manifest (root, once per deployment); prints its id.
    ///
    /// Captures the identity of every inventory object, creates the deployment's state
    /// directory with the signed manifest, the epoch log (genesis) and the issuer lock, and
    /// writes the producer journal's genesis. Refuses to enroll over anything that exists.
    Enroll {
        /// The manifest (see docs/OPERATOR.md and docs/examples/).
        manifest: PathBuf,
        /// Establishing a fleet (a `[registry]` without `fleet_id`): an etcd
        /// administrator's client certificate (PEM), which writes the fleet record no
        /// host's credential may write. Used for that one write (and its removal if the
        /// enrollment fails), never kept. Root's file, in root's directories.
        #[arg(long, value_name = "FILE", requires = "fleet_admin_key")]
        fleet_admin_cert: Option<PathBuf>,
        /// The key of `--fleet-admin-cert` (PEM; root's, 0600).
        #[arg(long, value_name = "FILE", requires = "fleet_admin_cert")]
        fleet_admin_key: Option<PathBuf>,
    },
    /// Find the old root's authorities on the live system and print a draft manifest.
    ///
    /// Starting from where the old root runs now (--pid, --cgroup, --unit; any number,
    /// at least one), follows its processes and every descendant, and finds the cgroups
    /// and units they run in (a user manager's units listed as unknown), the containers
    /// those cgroups are (by full id), the units that trigger its units (timers, sockets,
    /// paths), its executables, the uids it runs as (a user namespace's owner included),
    /// the sockets it listens on (spelled as `containment.listeners` spells them), the
    /// files it holds locks on (fence candidates), what started each of its processes
    /// (systemd, a container shim, a supervisor, a shell in a terminal session, cron), the
    /// cron and at lines that run its executables, and what the container engines say of
    /// its containers (the systemd unit that runs one, a restart policy). Prints a draft manifest, each entry
    /// with a comment saying why; what it could not classify or read is listed as UNKNOWN
    /// at the end, never dropped. Writes nothing. Root only. Exit 0 once discovered (read
    /// the unknowns), 64 when a seed names nothing, 2 (observe-failed) when the host could
    /// not be read. --json: {"found": {...}, "draft": "..."}.
    #[command(group(clap::ArgGroup::new("seeds").required(true).multiple(true).args(["pid", "cgroup", "unit"])))]
    Discover {
        /// A process of the old root (it and its descendants are followed).
        #[arg(long, value_name = "PID")]
        pid: Vec<u32>,
        /// A cgroup v2 path the old root runs in, from the hierarchy's root
        /// (`/system.slice/x.service`); every process in it and below.
        #[arg(long, value_name = "PATH")]
        cgroup: Vec<String>,
        /// A systemd unit of the old root (its `ControlGroup=`).
        #[arg(long, value_name = "UNIT")]
        unit: Vec<String>,
        /// Where a container engine listens (`docker=unix:///run/docker.sock`; docker,
        /// podman or containerd, each once): asked what it says of the containers found
        /// (the systemd unit its label names as running one, its restart policy). Each
        /// engine not given is asked at its default socket.
        #[arg(long, value_name = "ENGINE=unix:///PATH")]
        engine: Vec<String>,
    },
    /// Ask repochd to run the one recovery of DEPLOYMENT; streams each step.
    Recover {
        /// Deployment id, or any unique prefix of it.
        deployment: String,
        /// The sha256 of the READY file you approve (hex). Without it, the first
        /// observation's digest is shown and used.
        #[arg(long, value_name = "SHA256")]
        approve_ready: Option<String>,
        /// How long repochd waits for the consumer to connect, in seconds (1..=3600).
        #[arg(long, default_value_t = recover::CONSUMER_WAIT_SECONDS_DEFAULT, value_name = "SECONDS",
              value_parser = clap::value_parser!(u64).range(
                  limits::CONSUMER_WAIT_SECONDS_MIN..=limits::CONSUMER_WAIT_SECONDS_MAX))]
        consumer_wait: u64,
    },
    /// Observe lineage, containment, fences, READY and the consumer executable now, and
    /// print every fact with the evidence digest. Writes nothing: a preflight check.
    ///
    /// The fences are acquired (and released at exit), so a busy fence shows as
    /// `fence-busy`. The `process-space` fact says what held the process space while the
    /// enrolled executables were searched: the kernel's process events (Linux 6.6 or later,
    /// in the initial pid and user namespaces), or walks of /proc and their chase (`--json`:
    /// `process_space.held_by`, `events` or `walk`). Exit 0 if every fact holds, else 2 with
    /// each failed fact's reason.
    Observe {
        /// Deployment id, or any unique prefix of it.
        deployment: String,
        /// The READY sha256 to check against (hex).
        #[arg(long, value_name = "SHA256")]
        approve_ready: Option<String>,
    },
    /// Classify a deployment's epoch. Changes nothing.
    Status {
        /// Deployment id, or any unique prefix of it.
        deployment: String,
    },
    /// List enrolled deployments and their epoch state.
    List,
    /// Print the deployment's epoch-log checkpoint: a C2SP signed note (origin, record
    /// count, head hash) under the host issuer key, for auditors (`audit --checkpoint`).
    /// Root only; the log must verify.
    Checkpoint {
        /// Deployment id, or any unique prefix of it.
        deployment: String,
    },
    /// Verify epoch logs and the chain between deployments, offline.
    ///
    /// Each PATH is an epoch.log file or a deployment state directory. Checks every
    /// record's encoding, issuer signature, sequence, hash chain and phase order, and every
    /// predecessor link. Exit 0 only if all logs and links verify.
    ///
    /// With --checkpoint, also proves that the log the checkpoint is about (its origin
    /// names the deployment) extends it, or reports rollback, fork or truncation with the
    /// evidence pair (exit 5).
    Audit {
        /// The host issuer public key (default: the one under --root or /etc/repoch).
        #[arg(long, value_name = "PUBFILE")]
        issuer_key: Option<PathBuf>,
        /// A checkpoint taken earlier (`repoch checkpoint`, or the one `repoch-consume`
        /// keeps beside its grant).
        #[arg(long, value_name = "NOTE")]
        checkpoint: Option<PathBuf>,
        /// A TOML file with the fleet registry's `[registry]` table (a deployment's manifest
        /// will do): list every fleet deployment under its prefix and the host whose claim
        /// used its epoch, count the host records (--json lists them), any number of keys
        /// in bounded memory, and compare each PATH's log with the
        /// registry: a log that does not hold the claim the registry recorded for it
        /// (rolled back or replaced), or that consumed with a token the registry does not
        /// hold, is reported with the evidence pair (exit 5).
        #[arg(long, value_name = "FILE")]
        registry: Option<PathBuf>,
        /// Verify the signatures in batches first (ed25519 batch verification): the same
        /// verdicts, as each signature a batch cannot prove equal to strict verification's
        /// is verified strictly (docs/AUDITOR.md, "Batch verification").
        #[arg(long)]
        batch: bool,
        /// Verify with N threads, each a share of the logs (default: one per CPU, at most
        /// 64). The reports are the same, in the order given, for any N.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
        jobs: Option<u16>,
        #[arg(required_unless_present = "registry")]
        paths: Vec<PathBuf>,
    },
    /// Producer journal records, for roots not written in Rust.
    #[command(subcommand)]
    Journal(JournalCmd),
}

#[derive(Subcommand, Debug)]
pub enum JournalCmd {
    /// Create a producer key pair: KEYFILE (secret, 0600) and KEYFILE.pub.
    Keygen { keyfile: PathBuf },
    /// Append one signed record to the producer journal (fsynced before exit 0).
    Append {
        /// The journal file.
        #[arg(long)]
        journal: PathBuf,
        /// The producer's secret key file.
        #[arg(long)]
        key: PathBuf,
        /// Deployment id or unique prefix (the journal's genesis must name it).
        #[arg(long)]
        deployment: String,
        #[command(subcommand)]
        record: journal::JournalRecordArg,
    },
}

/// Runs one parsed command line; failures are reported here (stderr, or JSON on stdout).
pub fn run(args: Args) -> Outcome {
    let ctx = Ctx::new(args.root.as_deref(), args.json);
    let r = match args.cmd {
        Cmd::Enroll {
            manifest,
            fleet_admin_cert,
            fleet_admin_key,
        } => enroll::run(&ctx, &manifest, fleet_admin_cert.zip(fleet_admin_key)),
        Cmd::Recover {
            deployment,
            approve_ready,
            consumer_wait,
        } => recover::run(&ctx, &deployment, approve_ready.as_deref(), consumer_wait),
        Cmd::Status { deployment } => status::run(&ctx, &deployment),
        Cmd::Discover {
            pid,
            cgroup,
            unit,
            engine,
        } => discover::run(
            &ctx,
            discover::Seeds {
                pids: pid,
                cgroups: cgroup,
                units: unit,
                engines: engine,
            },
        ),
        Cmd::Observe {
            deployment,
            approve_ready,
        } => observe::run(&ctx, &deployment, approve_ready.as_deref()),
        Cmd::List => list::run(&ctx),
        Cmd::Checkpoint { deployment } => checkpoint::run(&ctx, &deployment),
        Cmd::Audit {
            issuer_key,
            checkpoint,
            registry,
            batch,
            jobs,
            paths,
        } => audit::run(
            &ctx,
            issuer_key.as_deref(),
            checkpoint.as_deref(),
            registry.as_deref(),
            &paths,
            batch,
            jobs.map_or_else(crate::audit::default_jobs, usize::from),
        ),
        Cmd::Journal(JournalCmd::Keygen { keyfile }) => journal::keygen(&ctx, &keyfile),
        Cmd::Journal(JournalCmd::Append {
            journal,
            key,
            deployment,
            record,
        }) => journal::append(&ctx, &journal, &key, &deployment, record),
    };
    match r {
        Ok(outcome) => outcome,
        Err(f) => f.report(args.json),
    }
}

/// `repoch`'s whole run: the command line parsed, the command run, its outcome.
pub fn main() -> Outcome {
    match Args::try_parse() {
        Ok(args) => run(args),
        Err(e) => crate::exit::clap_exit(e),
    }
}

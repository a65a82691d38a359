//! `repochd`, the recovery-epoch daemon: its clap definition ([`Args`], also the source of
//! its man page and shell completions) and its run. See docs/OPERATOR.md.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use repoch_protocol::Outcome;

/// repochd: runs each deployment's one recovery, on request of `repoch recover`.
///
/// Listens on the admin socket (root only) and the grant socket (the worker supervisor),
/// under /run/repoch (or --root), or on the sockets systemd passes (LISTEN_FDS with
/// LISTEN_FDNAMES=admin:grant). Notifies systemd (READY, STATUS, STOPPING) when
/// NOTIFY_SOCKET is set; logs to journald when JOURNAL_STREAM is set, else to stderr.
/// Stops cleanly on SIGTERM, SIGINT or SIGQUIT: a recovery before its intent ends refused
/// daemon-stopping, one past it runs to its end. Ignores, and logs, SIGHUP (it reads its
/// configuration at start only), SIGUSR1, SIGUSR2, SIGPWR and every other signal that
/// would otherwise end it, so that none interrupts a recovery.
///
/// Exit codes: 0 clean stop; 64 usage; 70 internal (could not start).
#[derive(Parser, Debug)]
#[command(name = "repochd", version)]
pub struct Args {
    /// Relocate /etc/repoch, /var/lib/repoch and /run/repoch under DIR (tests, demo).
    #[arg(long, env = "REPOCH_ROOT", value_name = "DIR")]
    root: Option<PathBuf>,
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `repoch_daemon=debug`.
    #[arg(long, env = "REPOCH_LOG", default_value = "info")]
    log: String,
    /// Limits and waits from a TOML file (tables [limits] and [waits]; every key, its
    /// default and range: docs/OPERATOR.md, "Configuring repochd"). An invalid file is
    /// refused at start, naming the key (exit 64).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

fn init_tracing(filter: &str) {
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let journald = std::env::var_os("JOURNAL_STREAM").and_then(|_| tracing_journald::layer().ok());
    match journald {
        Some(j) => tracing_subscriber::registry().with(filter).with(j).init(),
        None => tracing_subscriber::registry()
            .with(filter)
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                    .with_writer(crate::logwriter::StderrWhenWritable),
            )
            .init(),
    }
}

/// `repochd`'s whole run: the command line parsed, the daemon served until SIGTERM, its
/// outcome (docs/EXIT-CODES.md: 0 clean stop, 64 usage or an invalid config, 70 could not
/// start).
pub fn main() -> Outcome {
    match Args::try_parse() {
        Ok(args) => run(&args),
        // Help and version print and exit 0; every usage error exits 64 (not clap's 2,
        // which would read as a refusal).
        Err(e) => {
            let _ = e.print();
            if e.use_stderr() {
                Outcome::Usage
            } else {
                Outcome::Success
            }
        }
    }
}

/// Runs the daemon as `args` say.
pub fn run(args: &Args) -> Outcome {
    if let Some(path) = &args.config {
        match crate::limits::Config::load(path) {
            Ok(c) => crate::limits::set_config(c),
            Err(e) => {
                eprintln!("repochd: config: {e}");
                return Outcome::Usage;
            }
        }
    }
    init_tracing(&args.log);
    tracing::debug!("limits and waits: {:?}", crate::limits::config());
    let layout = repoch_issuer::Layout::new(args.root.as_deref());
    let (admin, grant) = match crate::server::listeners(&layout) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("cannot listen: {e}");
            return Outcome::Internal;
        }
    };
    // The network namespace the admin socket is in (systemd's, when socket-activated) is
    // the host's: TCP and UDP ports are looked for there too, since repochd may run in
    // its own, empty one (`PrivateNetwork=yes`, systemd/repochd.service).
    match repoch_sys::sockdiag::adopt_host_netns(&admin) {
        Ok(id) => tracing::debug!("host network namespace {id}"),
        Err(e) => {
            tracing::error!("cannot find the admin socket's network namespace: {e}");
            return Outcome::Internal;
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("tokio runtime: {e}");
            return Outcome::Internal;
        }
    };
    let daemon = Arc::new(crate::server::Daemon::new(layout));
    let served = rt.block_on(daemon.serve(admin, grant));
    // A consumer's handshake still on a blocking thread ends within its own deadline (and
    // is refused `daemon-stopping` by the stopped registry); a runtime dropped without a
    // bound would wait for any blocking thread indefinitely.
    rt.shutdown_timeout(std::time::Duration::from_secs(
        crate::limits::config().handshake_seconds,
    ));
    match served {
        Ok(()) => Outcome::Success,
        Err(e) => {
            tracing::error!("{e}");
            Outcome::Internal
        }
    }
}

//! `repochd`: the recovery-epoch daemon. See `repochd --help` and docs/OPERATOR.md.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

/// repochd: runs each deployment's one recovery, on request of `repoch recover`.
///
/// Listens on the admin socket (root only) and the grant socket (the worker supervisor),
/// under /run/repoch (or --root), or on the sockets systemd passes (LISTEN_FDS with
/// LISTEN_FDNAMES=admin:grant). Notifies systemd (READY, STATUS, STOPPING) when
/// NOTIFY_SOCKET is set; logs to journald when JOURNAL_STREAM is set, else to stderr.
/// Stops cleanly on SIGTERM.
///
/// Exit codes: 0 clean stop; 64 usage; 70 internal (could not start).
#[derive(Parser, Debug)]
#[command(name = "repochd", version)]
struct Args {
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
                    .with_writer(std::io::stderr),
            )
            .init(),
    }
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => return repoch_daemon::exit::clap_exit(e),
    };
    if let Some(path) = &args.config {
        match repoch_daemon::limits::Config::load(path) {
            Ok(c) => repoch_daemon::limits::set_config(c),
            Err(e) => {
                eprintln!("repochd: config: {e}");
                return ExitCode::from(64);
            }
        }
    }
    init_tracing(&args.log);
    tracing::debug!("limits and waits: {:?}", repoch_daemon::limits::config());
    let layout = repoch_issuer::Layout::new(args.root.as_deref());
    let (admin, grant) = match repoch_daemon::server::listeners(&layout) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("cannot listen: {e}");
            return ExitCode::from(70);
        }
    };
    // The network namespace the admin socket is in (systemd's, when socket-activated) is
    // the host's: TCP and UDP ports are looked for there too, since repochd may run in
    // its own, empty one (`PrivateNetwork=yes`, systemd/repochd.service).
    match repoch_issuer::os::sockdiag::adopt_host_netns(&admin) {
        Ok(id) => tracing::debug!("host network namespace {id}"),
        Err(e) => {
            tracing::error!("cannot find the admin socket's network namespace: {e}");
            return ExitCode::from(70);
        }
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("tokio runtime: {e}");
            return ExitCode::from(70);
        }
    };
    let daemon = Arc::new(repoch_daemon::server::Daemon::new(layout));
    match rt.block_on(daemon.serve(admin, grant)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::from(70)
        }
    }
}

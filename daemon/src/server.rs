//! repochd: the admin and grant sockets, around the synchronous issuance.
//!
//! The async edge is thin: tokio accepts, checks peer credentials and reads the first frame
//! of each connection under a timeout and a connection semaphore; an issuance then runs on
//! a blocking thread, with the consumer's connection handed over as a blocking stream.
//! This file: the listeners, the accept loop and the stop; `admin.rs` an admin connection
//! and its recovery; `handshake.rs` a grant-socket peer, up to its wait in the registry.

use std::os::unix::net::UnixListener as StdListener;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use repoch_issuer::stop::Stop;
use repoch_issuer::{Layout, Refusal};
use repoch_protocol::cbor::Canonical;
use repoch_protocol::wire::{bounded, frame, Verdict};
use repoch_protocol::Reason;

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;

use crate::admission::{Admission, Handshakes, Warnings};
use crate::epochs::Epochs;
use crate::frames::outcome_event;
use crate::limits::*;
use crate::link::Registry;

#[derive(Debug)]
pub struct Daemon {
    pub layout: Layout,
    pub(crate) registry: Registry,
    /// Which uids may use the grant socket, and what their prefixes resolve to.
    pub(crate) admission: Admission,
    pub(crate) handshakes: Handshakes,
    /// Whether a deployment's epoch is used, as known to `hello` (daemon/src/epochs.rs).
    pub(crate) epochs: Epochs,
    pub(crate) warnings: Warnings,
    /// Set when a write or fsync of an epoch log failed: no further issuance until restart.
    pub(crate) poisoned: AtomicBool,
    /// Set on SIGTERM, SIGINT or SIGQUIT ([`Daemon::serve`]); shared with the registry and every
    /// issuance.
    pub(crate) stop: Stop,
}

/// A connection past a bound: one frame saying so, sent without waiting (`MSG_DONTWAIT`:
/// a fresh socket's buffer takes it; no task is spawned past the bound), then closed. The
/// peer reads a refusal, not a reset.
pub(crate) fn refuse_over_bound(s: &UnixStream, bytes: &[u8]) {
    use rustix::net::{send, SendFlags};
    match send(s, bytes, SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
        Ok(n) if n == bytes.len() => {}
        // Not a warning: a flood makes many of these, and the refusal itself was already
        // logged (rate-limited) by the caller.
        Ok(n) => tracing::debug!("told a refused connection only {n} bytes"),
        Err(e) => tracing::debug!("could not tell a refused connection: {e}"),
    }
}

/// The listening sockets: from systemd (`LISTEN_FDS`, named `admin` and `grant` by
/// `LISTEN_FDNAMES`), else bound under the layout's run directory.
pub fn listeners(layout: &Layout) -> Result<(StdListener, StdListener), String> {
    let ours = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        == Some(std::process::id());
    if ours {
        let n: usize = std::env::var("LISTEN_FDS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let fds = repoch_sys::kernel::adopt_listen_fds(n)?;
        let names: Vec<String> = std::env::var("LISTEN_FDNAMES")
            .unwrap_or_default()
            .split(':')
            .map(str::to_owned)
            .collect();
        let mut admin = None;
        let mut grant = None;
        for (i, fd) in fds.into_iter().enumerate() {
            match names.get(i).map(String::as_str) {
                Some("admin") => admin = Some(StdListener::from(fd)),
                Some("grant") => grant = Some(StdListener::from(fd)),
                other => {
                    return Err(format!(
                        "socket-activated fd {} has unknown name {other:?}",
                        i + 3
                    ))
                }
            }
        }
        return match (admin, grant) {
            (Some(a), Some(g)) => Ok((a, g)),
            _ => Err("socket activation must pass two sockets named admin and grant".into()),
        };
    }
    std::fs::create_dir_all(&layout.run).map_err(|e| format!("{}: {e}", layout.run.display()))?;
    let bind = |p: &Path, mode: u32| -> Result<StdListener, String> {
        // A stale socket from a previous run is replaced; a live one (another repochd on
        // the same root) or anything else is refused.
        if let Ok(m) = std::fs::symlink_metadata(p) {
            use std::os::unix::fs::FileTypeExt as _;
            if !m.file_type().is_socket() {
                return Err(format!("{} exists and is not a socket", p.display()));
            }
            if std::os::unix::net::UnixStream::connect(p).is_ok() {
                return Err(format!("{}: another repochd is listening", p.display()));
            }
            std::fs::remove_file(p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        let l = StdListener::bind(p).map_err(|e| format!("bind {}: {e}", p.display()))?;
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(l)
    };
    // The admin socket is root's only; the grant socket is open to the consumer's uid,
    // which is authenticated per connection.
    Ok((
        bind(&layout.admin_socket(), 0o600)?,
        bind(&layout.grant_socket(), 0o666)?,
    ))
}

impl Daemon {
    pub fn new(layout: Layout) -> Daemon {
        let stop = Stop::default();
        Daemon {
            admission: Admission::new(layout.clone()),
            epochs: Epochs::new(layout.clone()),
            layout,
            registry: Registry::new(stop.clone()),
            stop,
            handshakes: Handshakes::default(),
            warnings: Warnings::default(),
            poisoned: AtomicBool::new(false),
        }
    }

    /// An admin connection admitted: root only, decided before a slot is taken (a peer of
    /// another uid, the socket's mode opened by mistake, can never hold root's admin
    /// slots), then one of `limits.admin_connections`. Refused otherwise, in one bounded
    /// write.
    fn admit_admin(
        &self,
        s: &UnixStream,
        slots: &Arc<Semaphore>,
    ) -> Option<tokio::sync::OwnedSemaphorePermit> {
        match s.peer_cred().map(|c| c.uid()) {
            Ok(0) => {}
            other => {
                let observed = other.map_or_else(|e| e.to_string(), |u| format!("uid {u}"));
                self.warnings
                    .warn(format_args!("admin peer refused: {observed}"));
                let r = Refusal::new(Reason::AdminDenied, "admin socket", "uid 0", observed);
                let e = outcome_event(
                    Verdict::Refused,
                    vec![r],
                    "the admin socket is root's only",
                    None,
                );
                refuse_over_bound(s, &frame(&bounded(e).to_bytes()));
                return None;
            }
        }
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            let n = config().admin_connections;
            self.warnings
                .warn(format_args!("admin connection refused: {n} already open"));
            let r = Refusal::new(
                Reason::IssuerBusy,
                "admin socket",
                format!("fewer than {n} admin connections (limits.admin_connections)"),
                format!("{n} admin connections open"),
            );
            let e = outcome_event(Verdict::Busy, vec![r], &format!("repochd is busy: {n} admin connections open (limits.admin_connections); retry later"), None);
            refuse_over_bound(s, &frame(&bounded(e).to_bytes()));
            return None;
        };
        Some(permit)
    }

    /// A grant connection admitted before any work, by credentials only (no pidfd, no
    /// /proc, no read): an enrolled consumer's uid, within its handshakes in progress and
    /// `limits.grant_connections`. Turned away otherwise.
    fn admit_grant(
        &self,
        s: &UnixStream,
        slots: &Arc<Semaphore>,
    ) -> Option<(
        crate::admission::HandshakeSlot,
        tokio::sync::OwnedSemaphorePermit,
    )> {
        let (uid, pid) = match s.peer_cred() {
            Ok(c) => (c.uid(), c.pid().unwrap_or(0)),
            Err(e) => {
                self.warnings
                    .warn(format_args!("grant peer credentials: {e}"));
                return None;
            }
        };
        if !self.admission.admits(uid) {
            let why = format!("uid {uid} is no enrolled deployment's consumer");
            self.turn_away(s, pid, Reason::ConsumerRejected, &why);
            return None;
        }
        let Some(slot) = self.handshakes.acquire(uid) else {
            let why = format!(
                "uid {uid} already has {} handshakes in progress",
                config().handshakes_per_uid
            );
            self.turn_away(s, pid, Reason::ProtocolError, &why);
            return None;
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            let why = format!(
                "{} grant connections already open",
                config().grant_connections
            );
            self.turn_away(s, pid, Reason::ProtocolError, &why);
            return None;
        };
        Some((slot, permit))
    }

    /// After the stop: every waiting consumer refused, every admin connection waited for
    /// at most [`stop_seconds`]; an error if one is still running then (its recovery may
    /// not end granted: no operator would read it).
    async fn drain(&self, mut admins: tokio::task::JoinSet<()>) -> Result<(), String> {
        crate::notify::notify("STOPPING=1\nSTATUS=stopping: ending the recoveries in progress");
        let told = self.registry.stop();
        tracing::info!(
            recoveries = admins.len(),
            consumers_told = told,
            "repochd stopping: recoveries before their intent end refused daemon-stopping, later ones run to their end"
        );
        let limit = stop_seconds();
        let drained = tokio::time::timeout(Duration::from_secs(limit), async {
            while admins.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            // No operator will read these outcomes: none may end granted.
            self.stop.abandon();
            return Err(format!(
                "{} recoveries still running {limit}s after the stop (custody_seconds + persisted_ack_seconds + {STOP_MARGIN_SECONDS_MAX}); their epochs are kept as their logs say",
                admins.len()
            ));
        }
        Ok(())
    }

    /// Serves until SIGTERM, SIGINT or SIGQUIT, then stops (docs/ARCHITECTURE.md, "Stopping"): no
    /// connection is accepted any more; the stop is set, so a recovery that has not written
    /// its intent ends refused `daemon-stopping` (one waiting for its consumer is woken),
    /// and every waiting consumer is refused the same; every admin connection is then
    /// waited for, so each operator reads its recovery's real outcome, at most
    /// [`stop_seconds`] (a recovery past its intent runs to its own end within its
    /// deadlines). Returns an error if one is still running then.
    pub async fn serve(
        self: Arc<Self>,
        admin: StdListener,
        grant: StdListener,
    ) -> Result<(), String> {
        admin.set_nonblocking(true).map_err(|e| e.to_string())?;
        grant.set_nonblocking(true).map_err(|e| e.to_string())?;
        let admin = UnixListener::from_std(admin).map_err(|e| e.to_string())?;
        let grant = UnixListener::from_std(grant).map_err(|e| e.to_string())?;
        let admin_slots = Arc::new(Semaphore::new(config().admin_connections));
        let mut admins = tokio::task::JoinSet::new();
        let grant_slots = Arc::new(Semaphore::new(config().grant_connections));
        // Every signal that ends a process by default: a stop, or ignored (crate::signals).
        let mut signals = crate::signals::Signals::install()?;
        self.admission.warm();
        let sweeper = {
            let d = self.clone();
            tokio::spawn(async move { d.registry.sweeper().await })
        };
        crate::notify::notify("READY=1\nSTATUS=waiting for recoveries");
        tracing::info!(admin = %self.layout.admin_socket().display(), grant = %self.layout.grant_socket().display(), barriers = repoch_issuer::barrier::ENABLED, "repochd ready");
        loop {
            tokio::select! {
                r = admin.accept() => {
                    let Ok((s, _)) = r else { continue };
                    let Some(permit) = self.admit_admin(&s, &admin_slots) else { continue };
                    let d = self.clone();
                    admins.spawn(async move { d.admin(s).await; drop(permit); });
                }
                Some(_) = admins.join_next(), if !admins.is_empty() => {}
                r = grant.accept() => {
                    let Ok((s, _)) = r else { continue };
                    let Some((slot, permit)) = self.admit_grant(&s, &grant_slots) else { continue };
                    let d = self.clone();
                    tokio::spawn(async move { d.grant(s, slot).await; drop(permit); });
                }
                name = signals.stop() => {
                    tracing::info!(signal = name, "{name}: stopping");
                    break;
                }
            }
        }
        drop((admin, grant));
        sweeper.abort();
        self.drain(admins).await?;
        tracing::info!("repochd stopped");
        Ok(())
    }
}

//! repochd: the admin and grant sockets, around the synchronous issuance.
//!
//! The async edge is thin: tokio accepts, checks peer credentials and reads the first frame
//! of each connection under a timeout and a connection semaphore; an issuance then runs on
//! a blocking thread, with the consumer's connection handed over as a blocking stream.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener as StdListener;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use repoch_issuer::issuance::{self, epoch_refusal, Ended};
use repoch_issuer::stop::Stop;
use repoch_issuer::{Layout, Refusal};
use repoch_protocol::cbor::Canonical;
use repoch_protocol::epoch::Contender;
use repoch_protocol::grant::KeyProof;
use repoch_protocol::wire::{
    bounded, frame, frame_len, refused, AdminEvent, AdminRequest, GrantMsg, Verdict,
};
use repoch_protocol::{DeploymentId, Hash, Reason};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, Semaphore};

use crate::admission::{Admission, HandshakeSlot, Handshakes, Warnings};
use crate::epochs::Epochs;
use crate::limits::*;
use crate::link::{Pending, Registry};

#[derive(Debug)]
pub struct Daemon {
    pub layout: Layout,
    registry: Registry,
    /// Which uids may use the grant socket, and what their prefixes resolve to.
    admission: Admission,
    handshakes: Handshakes,
    /// Whether a deployment's epoch is used, as known to `hello` (daemon/src/epochs.rs).
    epochs: Epochs,
    warnings: Warnings,
    /// Set when a write or fsync of an epoch log failed: no further issuance until restart.
    poisoned: AtomicBool,
    /// Set on SIGTERM or SIGINT ([`Daemon::serve`]); shared with the registry and every
    /// issuance.
    stop: Stop,
}

/// Reads a peer's first frame, the WHOLE of it within `HANDSHAKE_SECONDS_MAX` (not per
/// read: a peer dripping a byte at a time is cut off at the deadline).
async fn read_first_frame(s: &mut UnixStream) -> Result<Vec<u8>, String> {
    let whole = async {
        let mut h = [0u8; 4];
        s.read_exact(&mut h).await.map_err(|e| e.to_string())?;
        let len = frame_len(h).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; len];
        s.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
        Ok(buf)
    };
    let secs = config().handshake_seconds;
    tokio::time::timeout(Duration::from_secs(secs), whole)
        .await
        .map_err(|_| format!("the whole first frame did not arrive within {secs}s"))?
}

/// Sends an admin event, its texts clipped to the receiver's bounds ([`bounded`]).
async fn send(s: &mut UnixStream, e: &AdminEvent) -> std::io::Result<()> {
    s.write_all(&frame(&bounded(e.clone()).to_bytes())).await
}

/// A connection past a bound: one frame saying so, sent without waiting (`MSG_DONTWAIT`:
/// a fresh socket's buffer takes it; no task is spawned past the bound), then closed. The
/// peer reads a refusal, not a reset.
fn refuse_over_bound(s: &UnixStream, bytes: &[u8]) {
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
        let fds = crate::sys::adopt_listen_fds(n)?;
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

    /// Serves until SIGTERM or SIGINT, then stops (docs/ARCHITECTURE.md, "Stopping"): no
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
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| e.to_string())?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(|e| e.to_string())?;
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
                    // Root only, decided before a slot is taken: a peer of another uid (the
                    // socket's mode opened by mistake) can never hold root's admin slots.
                    match s.peer_cred().map(|c| c.uid()) {
                        Ok(0) => {}
                        other => {
                            let observed = other.map_or_else(|e| e.to_string(), |u| format!("uid {u}"));
                            self.warnings.warn(format_args!("admin peer refused: {observed}"));
                            let r = Refusal::new(Reason::AdminDenied, "admin socket", "uid 0", observed);
                            let e = outcome_event(Verdict::Refused, vec![r], "the admin socket is root's only", None);
                            refuse_over_bound(&s, &frame(&bounded(e).to_bytes()));
                            continue;
                        }
                    }
                    let Ok(permit) = admin_slots.clone().try_acquire_owned() else {
                        let n = config().admin_connections;
                        self.warnings.warn(format_args!("admin connection refused: {n} already open"));
                        let r = Refusal::new(
                            Reason::IssuerBusy,
                            "admin socket",
                            format!("fewer than {n} admin connections (limits.admin_connections)"),
                            format!("{n} admin connections open"),
                        );
                        let e = outcome_event(Verdict::Busy, vec![r], &format!("repochd is busy: {n} admin connections open (limits.admin_connections); retry later"), None);
                        refuse_over_bound(&s, &frame(&bounded(e).to_bytes()));
                        continue;
                    };
                    let d = self.clone();
                    admins.spawn(async move { d.admin(s).await; drop(permit); });
                }
                Some(_) = admins.join_next(), if !admins.is_empty() => {}
                r = grant.accept() => {
                    let Ok((s, _)) = r else { continue };
                    // Admission before any work: credentials only; no pidfd, no /proc, no read.
                    let (uid, pid) = match s.peer_cred() {
                        Ok(c) => (c.uid(), c.pid().unwrap_or(0)),
                        Err(e) => { self.warnings.warn(format_args!("grant peer credentials: {e}")); continue; }
                    };
                    if !self.admission.admits(uid) {
                        self.turn_away(&s, pid, Reason::ConsumerRejected, &format!("uid {uid} is no enrolled deployment's consumer"));
                        continue;
                    }
                    let Some(slot) = self.handshakes.acquire(uid) else {
                        self.turn_away(&s, pid, Reason::ProtocolError, &format!("uid {uid} already has {} handshakes in progress", config().handshakes_per_uid));
                        continue;
                    };
                    let Ok(permit) = grant_slots.clone().try_acquire_owned() else {
                        self.turn_away(&s, pid, Reason::ProtocolError, &format!("{} grant connections already open", config().grant_connections));
                        continue;
                    };
                    let d = self.clone();
                    tokio::spawn(async move { d.grant(s, slot).await; drop(permit); });
                }
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        drop((admin, grant));
        sweeper.abort();
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
        tracing::info!("repochd stopped");
        Ok(())
    }

    /// Refuses a grant-socket peer at once, without reading from it or waiting on it: one
    /// non-blocking write of the refusal, a rate-limited warning, and the connection closes.
    fn turn_away(&self, s: &UnixStream, pid: i32, reason: Reason, detail: &str) {
        self.warnings.warn(format_args!(
            "grant peer pid={pid} refused at once: {reason}: {detail}"
        ));
        refuse_over_bound(s, &frame(&refused(reason, detail).to_bytes()));
    }

    /// A consumer connection, admitted by uid: `hello`; its prefix resolved to one enrolled
    /// deployment whose consumer has this uid, gid and key; the peer described through its
    /// pidfd; its key proven on a nonce bound to this connection. Only then does it wait in
    /// the registry. A consumer whose epoch is already used (or whose log does not verify)
    /// is refused right after the resolution, before it is described: it could only wait
    /// out its `--wait`. Every refusal writes nothing and says why.
    async fn grant(self: Arc<Self>, mut s: UnixStream, slot: HandshakeSlot) {
        let cred = match s.peer_cred() {
            Ok(c) => c,
            Err(e) => {
                return self
                    .warnings
                    .warn(format_args!("grant peer credentials: {e}"))
            }
        };
        let Some(pid) = cred.pid().and_then(|p| u32::try_from(p).ok()) else {
            return;
        };
        let hello = read_first_frame(&mut s).await;
        let (prefix, key) =
            match hello.and_then(|b| GrantMsg::from_bytes(&b).map_err(|e| e.to_string())) {
                Ok(GrantMsg::Hello { deployment, key }) => (deployment, key),
                Ok(_) => {
                    return self
                        .refuse_grant(&mut s, pid, Reason::ProtocolError, "expected hello")
                        .await
                }
                Err(e) => {
                    return self
                        .refuse_grant(&mut s, pid, Reason::ProtocolError, &e)
                        .await
                }
            };
        let (uid, gid) = (cred.uid(), cred.gid());
        let enrolled = match self.admission.resolve(&prefix) {
            Ok(e) => e,
            Err(r) => return self.refuse_grant(&mut s, pid, r.reason, &r.detail()).await,
        };
        let subject = format!("grant socket peer pid {pid}");
        let mismatch = if (enrolled.uid, enrolled.gid) != (uid, gid) {
            Some(Refusal::consumer_rejected(
                &subject,
                "uid/gid",
                format_args!("{}/{}", enrolled.uid, enrolled.gid),
                format_args!("{uid}/{gid}"),
            ))
        } else if enrolled.key != key {
            Some(Refusal::consumer_rejected(
                &subject,
                "key",
                enrolled.key.to_hex(),
                key.to_hex(),
            ))
        } else {
            None
        };
        if let Some(r) = mismatch {
            return self.refuse_grant(&mut s, pid, r.reason, &r.detail()).await;
        }
        let pidfd = match peer_pidfd(&s, pid) {
            Ok(fd) => fd,
            Err(e) => {
                return self
                    .refuse_grant(
                        &mut s,
                        pid,
                        Reason::ConsumerRejected,
                        &format!("pid {pid}: {e}"),
                    )
                    .await
            }
        };
        let std = match s.into_std() {
            Ok(std) => std,
            Err(e) => return self.warnings.warn(format_args!("grant socket: {e}")),
        };
        let d = self.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let mut std = std;
            let refuse = |std: &mut std::os::unix::net::UnixStream, r: Refusal| {
                d.warnings
                    .warn(format_args!("grant peer pid={pid} refused: {r}"));
                let _ = repoch_protocol::wire::write_msg(std, &refused(r.reason, &r.detail()));
            };
            let _ = std.set_nonblocking(false);
            let secs = Duration::from_secs(config().handshake_seconds);
            let _ = std.set_read_timeout(Some(secs));
            let _ = std.set_write_timeout(Some(secs));
            // Its epoch, read without the issuer lock (a verdict per log state, the "used"
            // one final: daemon/src/epochs.rs): only an early refusal, never a decision.
            if let Some(r) = d.epochs.unissuable(enrolled.deployment) {
                return refuse(&mut std, r);
            }
            // Describe the peer from /proc, pinned by its pidfd.
            let peer = match repoch_sys::peer::describe(pid, uid, gid, &pidfd) {
                Ok(p) => p,
                Err(e) => {
                    return refuse(
                        &mut std,
                        Refusal::new(Reason::ConsumerRejected, &subject, "a describable peer", e),
                    )
                }
            };
            if let Err(r) = prove_key(&mut std, &enrolled.key, enrolled.deployment, &peer, &pidfd) {
                return refuse(&mut std, r);
            }
            tracing::info!(pid, uid, deployment = %enrolled.deployment, "consumer connected, waiting for a recovery");
            let _ = std.set_read_timeout(None);
            let _ = std.set_write_timeout(None);
            let p = Pending {
                deployment: enrolled.deployment,
                key,
                peer,
                pidfd,
                stream: std,
                since: Instant::now(),
            };
            if let Err((mut p, r)) = d.registry.push(p, |id| d.epochs.known_used(id)) {
                refuse(&mut p.stream, r);
            }
        })
        .await;
    }

    async fn refuse_grant(&self, s: &mut UnixStream, pid: u32, reason: Reason, detail: &str) {
        self.warnings.warn(format_args!(
            "grant peer pid={pid} refused: {reason}: {detail}"
        ));
        let m = frame(&refused(reason, detail).to_bytes());
        let _ = tokio::time::timeout(
            Duration::from_secs(config().handshake_seconds),
            s.write_all(&m),
        )
        .await;
    }

    /// An admin connection, root's (the accept loop turned every other uid away before it
    /// took a slot): one `recover` request, its progress streamed back, its outcome last.
    async fn admin(self: Arc<Self>, mut s: UnixStream) {
        let cred = match s.peer_cred() {
            Ok(c) => c,
            Err(e) => return tracing::warn!("admin peer credentials: {e}"),
        };
        let req = match self.admit(&mut s).await {
            Ok(r) => r,
            Err((verdict, r, detail)) => {
                let _ = send(&mut s, &outcome_event(verdict, vec![r], detail, None)).await;
                return;
            }
        };
        let contender = Contender {
            pid: cred.pid().and_then(|p| u32::try_from(p).ok()).unwrap_or(0),
            start_ticks: cred
                .pid()
                .and_then(|p| repoch_sys::procfs::start_ticks(p as u32))
                .unwrap_or(0),
            boot_id: repoch_sys::procfs::boot_id(),
        };
        // The operator's connection, for the handoff's last word: a recovery whose operator
        // went away never ends granted (daemon/src/link.rs, `SocketLink::last_word`).
        let operator = match std::os::fd::AsFd::as_fd(&s).try_clone_to_owned() {
            Ok(fd) => fd,
            Err(e) => {
                let r = Refusal::new(
                    Reason::Internal,
                    "admin socket",
                    "a descriptor",
                    e.to_string(),
                );
                let e = outcome_event(Verdict::Internal, vec![r], "dup", None);
                let _ = send(&mut s, &e).await;
                return;
            }
        };
        let (tx, rx) = mpsc::channel::<AdminEvent>(EVENTS_BUFFERED_MAX);
        crate::notify::notify(&format!("STATUS=recovering {}", req.deployment));
        tracing::info!(deployment = %req.deployment, "recovery requested");
        let d = self.clone();
        let worker = tokio::task::spawn_blocking(move || d.recover(req, contender, operator, tx));
        forward(s, rx).await;
        let _ = worker.await;
        crate::notify::notify("STATUS=waiting for recoveries");
    }

    /// The admin request read and admitted: a well-formed `recover`, a store not poisoned,
    /// repochd not stopping. Otherwise the verdict, the refusal and its detail to send.
    async fn admit(&self, s: &mut UnixStream) -> Result<Recover, (Verdict, Refusal, &'static str)> {
        let req = read_first_frame(s).await;
        let req = req
            .and_then(|b| AdminRequest::from_bytes(&b).map_err(|e| e.to_string()))
            .map_err(|e| {
                let r = Refusal::new(
                    Reason::ProtocolError,
                    "admin request",
                    "a recover request",
                    e,
                );
                (Verdict::Refused, r, "bad request")
            })?;
        let AdminRequest::Recover {
            deployment,
            approve_ready,
            consumer_wait_seconds,
        } = req;
        if self.poisoned.load(Ordering::SeqCst) {
            let r = Refusal::new(
                Reason::StorePoisoned,
                "repochd",
                "a healthy store",
                "an earlier write or fsync failed; restart repochd",
            );
            return Err((Verdict::Refused, r, "issuance stopped"));
        }
        if self.stop.is_set() {
            let r = Stop::refusal("the recovery was not started");
            return Err((Verdict::Refused, r, "repochd is stopping"));
        }
        Ok(Recover {
            deployment,
            approve_ready,
            consumer_wait: Duration::from_secs(
                consumer_wait_seconds.min(CONSUMER_WAIT_SECONDS_MAX),
            ),
        })
    }

    /// One recovery, on a blocking thread: the issuance, its outcome sent last on `tx`,
    /// then the consumers waiting for an epoch that can no longer be issued told so.
    fn recover(
        self: Arc<Self>,
        req: Recover,
        contender: Contender,
        operator: OwnedFd,
        tx: mpsc::Sender<AdminEvent>,
    ) {
        let Recover {
            deployment,
            approve_ready,
            consumer_wait,
        } = req;
        let progress_tx = tx.clone();
        let progress: issuance::Progress = Box::new(move |e: AdminEvent| {
            log_event(&e);
            let _ = progress_tx.blocking_send(e);
        });
        let key = match repoch_issuer::enroll::issuer_key(&self.layout, false) {
            Ok(k) => k,
            Err(e) => {
                let r = Refusal::new(Reason::Internal, "issuer key", "readable", e.to_string());
                let e = outcome_event(Verdict::Internal, vec![r], "no issuer key", None);
                let _ = tx.blocking_send(e);
                return;
            }
        };
        let registry = &self.registry;
        let result = issuance::run(
            &self.layout,
            self.stop.clone(),
            key,
            deployment,
            approve_ready,
            contender,
            progress,
            |expected, progress| registry.wait_for(expected, consumer_wait, progress, operator),
        );
        // The epoch used by this issuance (from its intent on: granted, withheld,
        // uncertain), or found used or not verifying at reserve: no consumer waiting for
        // this deployment will ever get a grant; tell them.
        let unissuable = match &result {
            Ok(done) => epoch_refusal(deployment, done.epoch, None),
            Err(Ended {
                used: Some(state), ..
            }) => epoch_refusal(deployment, *state, None),
            Err(Ended { refusals, .. }) => refusals
                .iter()
                .find(|r| epoch_unissuable(r.reason))
                .cloned(),
        };
        let event = match result {
            Ok(done) => outcome_event(
                Verdict::Granted,
                vec![],
                "granted: the consumer acknowledged a durable grant",
                Some(done.grant),
            ),
            Err(Ended {
                outcome,
                refusals,
                detail,
                poisoned,
                ..
            }) => {
                if poisoned {
                    self.poisoned.store(true, Ordering::SeqCst);
                    tracing::error!(
                        "the state store is poisoned: no further issuance until restart"
                    );
                }
                outcome_event(outcome, refusals, &detail, None)
            }
        };
        log_event(&event);
        let _ = tx.blocking_send(event);
        drop(tx);
        if let Some(r) = unissuable {
            // Recorded first: a consumer that finishes its handshake after this is
            // refused as it would wait (`Registry::push`); one already waiting is told now.
            if r.reason == Reason::EpochConsumed {
                self.epochs.used(deployment, r.clone());
            }
            let n = self
                .registry
                .refuse_waiting(&deployment, r.reason, &r.detail());
            if n > 0 {
                tracing::info!(%deployment, n, "told the waiting consumers: {}", r.reason);
            }
        }
    }
}

/// An admitted `recover` request.
struct Recover {
    deployment: DeploymentId,
    approve_ready: Option<Hash>,
    consumer_wait: Duration,
}

/// Forwards a recovery's events to its admin client. A client that stops reading is dropped
/// and the issuance still runs to its end: it must not stall it.
async fn forward(s: UnixStream, mut rx: mpsc::Receiver<AdminEvent>) {
    let mut client = Some(s);
    while let Some(e) = rx.recv().await {
        if let Some(c) = client.as_mut() {
            let sent =
                tokio::time::timeout(Duration::from_secs(ADMIN_WRITE_SECONDS_MAX), send(c, &e))
                    .await;
            if !matches!(sent, Ok(Ok(()))) {
                tracing::warn!(
                    "the admin client stopped reading; the issuance continues without it"
                );
                client = None;
            }
        }
    }
}

/// The refusals that say the epoch itself can never be issued (docs/REASONS.md).
fn epoch_unissuable(r: Reason) -> bool {
    matches!(
        r,
        Reason::EpochConsumed
            | Reason::EpochTorn
            | Reason::EpochCorrupt
            | Reason::EpochForged
            | Reason::EpochForeign
            | Reason::EpochMissing
    )
}

fn outcome_event(
    outcome: Verdict,
    refusals: Vec<Refusal>,
    detail: &str,
    grant: Option<Vec<u8>>,
) -> AdminEvent {
    // The reasons travel as codes; subject/expected/observed go into the detail text.
    let mut text = detail.to_owned();
    for r in refusals.iter().map(ToString::to_string) {
        if !text.contains(&r) {
            text.push_str(&format!("\n{r}"));
        }
    }
    AdminEvent::Outcome {
        outcome,
        reasons: refusals.iter().map(|r| r.reason).collect(),
        detail: repoch_protocol::types::clip(&text, 4 * repoch_protocol::limits::TEXT_BYTES_MAX),
        grant,
    }
}

fn log_event(e: &AdminEvent) {
    match e {
        AdminEvent::Progress { step, detail } => tracing::info!(step, "{detail}"),
        AdminEvent::Fact(f) if f.holds() => {
            tracing::debug!(kind = %f.kind, subject = %f.subject, "fact holds")
        }
        AdminEvent::Fact(f) => {
            tracing::warn!(kind = %f.kind, subject = %f.subject, reason = ?f.reason, expected = %f.expected, observed = %f.observed, "fact fails")
        }
        AdminEvent::Record { kind, seq, hash } => {
            tracing::info!(kind, seq, %hash, "record appended and fsynced")
        }
        AdminEvent::Outcome {
            outcome, reasons, ..
        } => tracing::info!(outcome = outcome.as_str(), ?reasons, "issuance ended"),
    }
}

/// The peer pinned by `SO_PEERPIDFD`, falling back to `pidfd_open` (older kernels).
fn peer_pidfd(s: &UnixStream, pid: u32) -> Result<OwnedFd, String> {
    match nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerPidfd) {
        Ok(fd) => Ok(fd),
        Err(_) => repoch_sys::peer::pidfd_open(pid),
    }
}

/// The key proof (before anything is written): the peer signs, with the enrolled consumer
/// key, a fresh nonce bound to the resolved deployment and to this peer's pid and start
/// time; strictly verified. Then the pidfd must still name the process that was described,
/// and that process must be the connection's only holder.
fn prove_key(
    s: &mut std::os::unix::net::UnixStream,
    key: &repoch_protocol::PublicKey,
    deployment: repoch_protocol::DeploymentId,
    peer: &repoch_protocol::grant::ConsumerPeer,
    pidfd: &OwnedFd,
) -> Result<(), Refusal> {
    let subject = format!("grant socket peer pid {}", peer.pid);
    let rejected =
        |want: &str, got: String| Refusal::new(Reason::ConsumerRejected, &subject, want, got);
    let start_ticks = repoch_sys::procfs::start_ticks(peer.pid)
        .ok_or_else(|| rejected("a live peer", "no start time".into()))?;
    let nonce = repoch_issuer::keys::random()
        .map_err(|e| Refusal::new(Reason::Internal, "getrandom", "a nonce", e.to_string()))?;
    let proof = KeyProof {
        deployment,
        nonce,
        pid: peer.pid,
        start_ticks,
    };
    // One deadline for the whole exchange (not a timeout per read: a proof dripped a byte at
    // a time must not hold a handshake slot for minutes).
    let deadline = Instant::now() + Duration::from_secs(config().handshake_seconds);
    repoch_protocol::wire::write_all_by(
        s,
        &repoch_protocol::wire::frame(&GrantMsg::Prove(proof.clone()).to_bytes()),
        deadline,
        &mut |s: &std::os::unix::net::UnixStream, left| s.set_write_timeout(Some(left)),
    )
    .map_err(|e| rejected("a key proof", format!("sending the nonce: {e}")))?;
    let read = repoch_protocol::wire::read_msg_by::<GrantMsg, _>(
        s,
        deadline,
        &mut |s: &std::os::unix::net::UnixStream, left| s.set_read_timeout(Some(left)),
    );
    let sig = match read {
        Ok(GrantMsg::Proof(sig)) => sig,
        Ok(other) => return Err(rejected("a key proof", format!("{other:?}"))),
        Err(e) => return Err(rejected("a key proof", e.to_string())),
    };
    if !proof.check(key, &sig) {
        return Err(rejected(
            "a key proof signed by the enrolled consumer key",
            "does not verify".into(),
        ));
    }
    repoch_sys::peer::alive(pidfd).map_err(|e| rejected("the described peer", e))?;
    // Whoever signed, the connection must be the pinned peer's alone.
    repoch_sys::peer::sole_holder(&*s, peer.pid, peer.uid)
        .map_err(|e| rejected("the peer as the connection's sole holder", e))?;
    if repoch_sys::procfs::start_ticks(peer.pid) != Some(start_ticks) {
        return Err(rejected("the described peer", "another process".into()));
    }
    Ok(())
}

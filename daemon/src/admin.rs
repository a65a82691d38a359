//! An admin connection: root's one `recover` request, the recovery run on a blocking
//! thread, its events streamed back and its outcome last (docs/OPERATOR.md, "Recovering").

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use repoch_issuer::issuance::{self, epoch_refusal, Ended};
use repoch_issuer::stop::Stop;
use repoch_issuer::Refusal;
use repoch_protocol::cbor::Canonical;
use repoch_protocol::epoch::Contender;
use repoch_protocol::wire::{AdminEvent, AdminRequest, Verdict};
use repoch_protocol::{DeploymentId, Hash, Reason};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use crate::frames::{log_event, outcome_event, read_first_frame, send};
use crate::limits::*;
use crate::server::Daemon;

impl Daemon {
    /// An admin connection, root's (the accept loop turned every other uid away before it
    /// took a slot): one `recover` request, its progress streamed back, its outcome last.
    pub(crate) async fn admin(self: Arc<Self>, mut s: UnixStream) {
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
        let (outcome_tx, outcome_rx) = tokio::sync::oneshot::channel::<AdminEvent>();
        let events = Events {
            tx,
            outcome: outcome_tx,
            dropped: Arc::default(),
        };
        let dropped = Arc::clone(&events.dropped);
        crate::notify::notify(&format!("STATUS=recovering {}", req.deployment));
        tracing::info!(deployment = %req.deployment, "recovery requested");
        let d = self.clone();
        let worker =
            tokio::task::spawn_blocking(move || d.recover(req, contender, operator, events));
        forward(s, (rx, outcome_rx), dropped, self.stop.clone()).await;
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
        events: Events,
    ) {
        let Recover {
            deployment,
            approve_ready,
            consumer_wait,
        } = req;
        let Events {
            tx,
            outcome: outcome_tx,
            dropped,
        } = events;
        // Never waits for the operator's client: an event it has no room for is counted
        // (the forwarder says how many), and the issuance goes on.
        let progress: issuance::Progress = Box::new(move |e: AdminEvent| {
            log_event(&e);
            if tx.try_send(e).is_err() {
                dropped.fetch_add(1, Ordering::Relaxed);
            }
        });
        let key = match repoch_issuer::enroll::issuer_key(&self.layout, false) {
            Ok(k) => k,
            Err(e) => {
                let r = Refusal::new(Reason::Internal, "issuer key", "readable", e.to_string());
                let e = outcome_event(Verdict::Internal, vec![r], "no issuer key", None);
                let _ = outcome_tx.send(e);
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
        let unissuable = unissuable(deployment, &result);
        let event = self.outcome_of(result);
        log_event(&event);
        let _ = outcome_tx.send(event);
        if let Some(r) = unissuable {
            self.tell_waiting(deployment, r);
        }
    }

    /// A finished issuance's outcome event; a poisoned state store is kept in mind (no
    /// further issuance until restart).
    fn outcome_of(&self, result: Result<issuance::Granted, Ended>) -> AdminEvent {
        match result {
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
        }
    }

    /// Tells the consumers waiting for `deployment` that its epoch can no longer be
    /// issued (`r`), and records it first: a consumer that finishes its handshake after
    /// this is refused as it would wait (`Registry::push`). This deployment's own epoch
    /// only: the fleet epoch a registry names used (`repoch_issuer::fleet`, subject "fleet
    /// epoch KEY") is the registry's to say, asked again at every recovery; kept here, it
    /// turned every consumer away at its handshake and the recovery read consumer-absent.
    fn tell_waiting(&self, deployment: DeploymentId, r: Refusal) {
        if r.reason == Reason::EpochConsumed && !r.subject.starts_with("fleet epoch ") {
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

/// The epoch used by an issuance (from its intent on: granted, withheld, uncertain), or
/// found used or not verifying at reserve: no consumer waiting for this deployment will
/// ever get a grant.
fn unissuable(
    deployment: DeploymentId,
    result: &Result<issuance::Granted, Ended>,
) -> Option<Refusal> {
    match result {
        Ok(done) => epoch_refusal(deployment, done.epoch, None),
        Err(Ended {
            used: Some(state), ..
        }) => epoch_refusal(deployment, *state, None),
        Err(Ended { refusals, .. }) => refusals
            .iter()
            .find(|r| epoch_unissuable(r.reason))
            .cloned(),
    }
}

/// An admitted `recover` request.
struct Recover {
    deployment: DeploymentId,
    approve_ready: Option<Hash>,
    consumer_wait: Duration,
}

/// What an issuance sends its operator: its events (at most [`EVENTS_BUFFERED_MAX`] waiting;
/// past them, counted in `dropped`), and its outcome, sent last on a channel of its own.
struct Events {
    tx: mpsc::Sender<AdminEvent>,
    outcome: tokio::sync::oneshot::Sender<AdminEvent>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
}

/// Forwards a recovery's events, then how many found no room, then its outcome, to its admin
/// client. A client that does not read (a suspended `repoch recover`: Ctrl-Z, a paused
/// terminal) is waited for, never dropped: its outcome is the consumer's, read once it reads
/// again. The issuance never waits for it (its events find room or are counted). Dropped
/// only when it hangs up, or repochd stops.
async fn forward(
    s: UnixStream,
    (mut rx, outcome): (
        mpsc::Receiver<AdminEvent>,
        tokio::sync::oneshot::Receiver<AdminEvent>,
    ),
    dropped: Arc<std::sync::atomic::AtomicU64>,
    stop: Stop,
) {
    let mut client = Some(s);
    while let Some(e) = rx.recv().await {
        deliver(&mut client, &e, &stop).await;
    }
    let n = dropped.load(Ordering::Relaxed);
    if n > 0 {
        let e = AdminEvent::Progress {
            step: "events".into(),
            detail: format!(
                "{n} progress events not delivered: this client read them slower than the recovery made them"
            ),
        };
        deliver(&mut client, &e, &stop).await;
    }
    if let Ok(e) = outcome.await {
        deliver(&mut client, &e, &stop).await;
    }
}

/// Writes `e` to the client however long it takes to read it, unless it hangs up or repochd
/// stops (then it is dropped).
async fn deliver(client: &mut Option<UnixStream>, e: &AdminEvent, stop: &Stop) {
    let Some(c) = client.as_mut() else {
        return;
    };
    if !written(c, e, stop).await {
        *client = None;
    }
}

/// Whether `e` was written whole to `c`: waited for however long the client takes to read,
/// unless it hangs up or repochd stops.
async fn written(c: &mut UnixStream, e: &AdminEvent, stop: &Stop) -> bool {
    let write = send(c, e);
    tokio::pin!(write);
    loop {
        match tokio::time::timeout(Duration::from_secs(ADMIN_STOP_CHECK_SECONDS), &mut write).await
        {
            Ok(Ok(())) => return true,
            Ok(Err(_)) => {
                tracing::warn!("the admin client went away; the issuance continues without it");
                return false;
            }
            Err(_) if stop.is_set() => {
                tracing::warn!(
                    "repochd is stopping: the admin client that does not read is dropped"
                );
                return false;
            }
            Err(_) => {}
        }
    }
}

/// The refusals that say the epoch itself can never be issued (docs/REASONS.md).
fn epoch_unissuable(r: Reason) -> bool {
    matches!(
        r,
        Reason::EpochConsumed
            | Reason::RegistryForged
            | Reason::EpochTorn
            | Reason::EpochCorrupt
            | Reason::EpochForged
            | Reason::EpochForeign
            | Reason::EpochMissing
    )
}

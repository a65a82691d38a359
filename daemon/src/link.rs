//! The grant socket, on the issuance's (blocking) side: pending consumers waiting for a
//! recovery, and the [`ConsumerLink`] over one of them.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use repoch_issuer::issuance::{Authenticated, ConsumerLink, Expected, LinkError};
use repoch_issuer::stop::Stop;
use repoch_issuer::Refusal;
use repoch_protocol::grant::{Challenge, ConsumerPeer};
use repoch_protocol::wire::{AdminEvent, GrantMsg};
use repoch_protocol::{DeploymentId, Hash, PublicKey, Reason};

use crate::conn::Connection;
use crate::limits::*;

/// A consumer connected, resolved, described and proven, waiting for a recovery of its
/// deployment.
#[derive(Debug)]
pub struct Pending {
    /// The full id its prefix resolved to at `hello`.
    pub deployment: DeploymentId,
    pub key: PublicKey,
    pub peer: ConsumerPeer,
    pub pidfd: OwnedFd,
    pub stream: UnixStream,
    pub since: Instant,
}

/// Pending consumers, shared between the grant socket's acceptor and the issuances.
#[derive(Debug, Default)]
pub struct Registry {
    pending: Mutex<VecDeque<Pending>>,
    arrived: Condvar,
    /// Told of every arrival, so the sweeper sleeps without a timer while none waits.
    occupied: tokio::sync::Notify,
    /// repochd's stop: once set, no consumer is added or taken ([`Registry::stop`]).
    stop: Stop,
}

/// Whether a waiting consumer is still there: not too old, its process alive, its
/// connection open and silent.
fn still_there(p: &Pending) -> bool {
    p.since.elapsed() < Duration::from_secs(config().pending_consumer_seconds)
        && repoch_sys::peer::alive(&p.pidfd).is_ok()
        && hung_up(&p.stream).is_ok()
}

impl Registry {
    /// An empty registry that stops with `stop`.
    pub fn new(stop: Stop) -> Registry {
        Registry {
            stop,
            ..Registry::default()
        }
    }

    /// Adds a consumer; refuses it (saying why) when its epoch is known used (`used`,
    /// asked under the registry's lock: a recovery records the epoch used before it refuses
    /// the waiting consumers, so a consumer is either refused here or found waiting then),
    /// when its uid already has `limits.pending_per_uid` waiting, or
    /// `limits.pending_consumers` are waiting in all (defaults `PENDING_PER_UID_MAX`,
    /// `PENDING_CONSUMERS_MAX`). Peers that went away are purged first.
    pub fn push(
        &self,
        p: Pending,
        used: impl FnOnce(&DeploymentId) -> Option<Refusal>,
    ) -> Result<(), (Box<Pending>, Refusal)> {
        let mut q = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.stop.is_set() {
            return Err((Box::new(p), Stop::refusal("the consumer was not taken")));
        }
        if let Some(r) = used(&p.deployment) {
            return Err((Box::new(p), r));
        }
        q.retain(still_there);
        let uid = p.peer.uid;
        let full = |why: String| {
            Refusal::new(
                Reason::ProtocolError,
                "grant socket",
                "a waiting place",
                why,
            )
        };
        let (per_uid, all) = (config().pending_per_uid, config().pending_consumers);
        if q.iter().filter(|o| o.peer.uid == uid).count() >= per_uid {
            return Err((
                Box::new(p),
                full(format!("{per_uid} consumers of uid {uid} already waiting")),
            ));
        }
        if q.len() >= all {
            return Err((
                Box::new(p),
                full(format!("{all} consumers already waiting")),
            ));
        }
        q.push_back(p);
        self.arrived.notify_all();
        self.occupied.notify_one();
        Ok(())
    }

    /// Refuses, and drops, every consumer waiting for `id`: a recovery found its epoch
    /// cannot be issued (used, torn, corrupt, forged, foreign or missing), or ended with it
    /// used (granted, withheld, uncertain), so none of them will ever get a grant. Each
    /// refusal is bounded by `REFUSAL_WRITE_SECONDS_MAX`.
    pub fn refuse_waiting(&self, id: &DeploymentId, reason: Reason, detail: &str) -> usize {
        let taken: VecDeque<Pending> = {
            let mut q = self
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (taken, kept): (VecDeque<Pending>, VecDeque<Pending>) = std::mem::take(&mut *q)
                .into_iter()
                .partition(|p| p.deployment == *id);
            *q = kept;
            taken
        };
        let n = taken.len();
        for p in taken {
            Connection::new(p.stream).refuse(reason, detail);
        }
        n
    }

    /// repochd is stopping: sets the stop (under the registry's lock, so a consumer is
    /// either refused by [`Registry::push`] or found here), wakes every issuance waiting
    /// for its consumer (it ends refused `daemon-stopping`), and refuses every waiting
    /// consumer with the same reason. Returns how many were told.
    pub fn stop(&self) -> usize {
        let taken: VecDeque<Pending> = {
            let mut q = self
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.stop.set();
            self.arrived.notify_all();
            std::mem::take(&mut *q)
        };
        let n = taken.len();
        let r = Stop::refusal("the consumer was not taken");
        for p in taken {
            Connection::new(p.stream).refuse(r.reason, &r.detail());
        }
        n
    }

    /// Drops every waiting consumer that hung up, exited or waited too long.
    pub fn sweep(&self) {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(still_there);
    }

    /// Sweeps every `REGISTRY_SWEEP_SECONDS_MAX` while a consumer waits, and sleeps on the
    /// next arrival, with no timer, while none does: an idle repochd is never woken.
    pub async fn sweeper(&self) {
        loop {
            let empty = self
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .is_empty();
            if empty {
                // An arrival between the check and this wait left a permit: no arrival is
                // missed.
                self.occupied.notified().await;
                continue;
            }
            tokio::time::sleep(Duration::from_secs(REGISTRY_SWEEP_SECONDS_MAX)).await;
            self.sweep();
        }
    }

    /// Takes the next pending consumer for `id` until `deadline`.
    fn take(&self, id: &DeploymentId, deadline: Instant) -> Option<Pending> {
        let mut q = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if self.stop.is_set() {
                return None;
            }
            q.retain(still_there);
            if let Some(i) = q.iter().position(|p| p.deployment == *id) {
                return q.remove(i);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            // Wake at least once a second so the caller can report progress.
            let wait = (deadline - now).min(Duration::from_secs(1));
            let (guard, timeout) = self
                .arrived
                .wait_timeout(q, wait)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            q = guard;
            if timeout.timed_out() {
                return None;
            }
        }
    }

    /// Step 3 of an issuance: waits for the enrolled consumer until the deadline. Peers that
    /// fail authentication are refused (`consumer-rejected`) and burn nothing; the wait goes on.
    pub fn wait_for<'id>(
        &self,
        expected: &Expected<'id>,
        wait: Duration,
        progress: &mut dyn FnMut(AdminEvent),
        operator: OwnedFd,
    ) -> Result<(SocketLink, Authenticated<'id>), Refusal> {
        let id = expected.deployment();
        let start = Instant::now();
        let deadline = start + wait;
        progress(AdminEvent::Progress {
            step: "connect".into(),
            detail: format!("waiting for the consumer (deadline {}s)", wait.as_secs()),
        });
        // What the operator is told while it waits is bounded, whoever connects: a tick
        // every WAIT_TICK_SECONDS, the first PEER_EVENTS_SHOWN_MAX peers turned away, then
        // how many more.
        let mut told = Told::default();
        let mut last_tick = start;
        while Instant::now() < deadline {
            if self.stop.is_set() {
                return Err(Stop::refusal("the recovery ended waiting for its consumer"));
            }
            let Some(p) = self.take(&id, deadline) else {
                if last_tick.elapsed() >= Duration::from_secs(WAIT_TICK_SECONDS) {
                    last_tick = Instant::now();
                    let e = start.elapsed().as_secs();
                    progress(AdminEvent::Progress {
                        step: "connect".into(),
                        detail: format!("waiting for the consumer: {e}s of {}s", wait.as_secs()),
                    });
                }
                continue;
            };
            let Some((conn, authenticated)) = admit(
                p.stream, &p.peer, &p.key, &p.pidfd, expected, &mut told, progress,
            ) else {
                continue;
            };
            told.more(progress);
            return Ok((
                SocketLink {
                    conn,
                    pidfd: p.pidfd,
                    peer: p.peer,
                    held: None,
                    operator,
                    stop: self.stop.clone(),
                },
                authenticated,
            ));
        }
        told.more(progress);
        Err(Refusal::new(
            Reason::ConsumerAbsent,
            "grant socket",
            "the enrolled consumer",
            format!("none within {}s; nothing written", wait.as_secs()),
        ))
    }
}

/// A pending consumer taken for an issuance: still there, authenticated against what the
/// issuance expects, and told `accepted`; `None` (the operator told why) when it went away
/// or failed, which burns nothing: the wait goes on.
fn admit<'id>(
    stream: UnixStream,
    peer: &ConsumerPeer,
    key: &PublicKey,
    pidfd: &OwnedFd,
    expected: &Expected<'id>,
    told: &mut Told,
    progress: &mut dyn FnMut(AdminEvent),
) -> Option<(Connection, Authenticated<'id>)> {
    // A consumer that went away while pending must not be taken: it would burn the epoch
    // at the challenge.
    if let Err(e) = repoch_sys::peer::alive(pidfd)
        .map_err(LinkError::from)
        .and_then(|_| hung_up(&stream))
    {
        told.peer(
            progress,
            format!("dropped a stale consumer (pid {}): {e}", peer.pid),
        );
        return None;
    }
    let mut conn = Connection::new(stream);
    let authenticated = match expected.authenticate(peer, key) {
        Ok(a) => a,
        Err(r) => {
            conn.refuse(r.reason, &r.detail());
            told.peer(progress, format!("rejected a peer: {r}"));
            return None;
        }
    };
    let by = Instant::now() + Duration::from_secs(REFUSAL_WRITE_SECONDS_MAX);
    if conn.write_msg(&GrantMsg::Accepted, by).is_err() {
        told.peer(progress, format!("consumer pid {} went away", peer.pid));
        return None;
    }
    Some((conn, authenticated))
}

/// The peers a consumer wait told the operator of: the first [`PEER_EVENTS_SHOWN_MAX`], and
/// how many more (said once, when the wait ends).
#[derive(Default)]
struct Told {
    shown: usize,
    more: u64,
}

impl Told {
    fn peer(&mut self, progress: &mut dyn FnMut(AdminEvent), detail: String) {
        if self.shown < PEER_EVENTS_SHOWN_MAX {
            self.shown += 1;
            progress(AdminEvent::Progress {
                step: "connect".into(),
                detail,
            });
        } else {
            self.more = self.more.saturating_add(1);
        }
    }

    fn more(&mut self, progress: &mut dyn FnMut(AdminEvent)) {
        if self.more > 0 {
            progress(AdminEvent::Progress {
                step: "connect".into(),
                detail: format!(
                    "and {} more peers turned away (the first {PEER_EVENTS_SHOWN_MAX} are named)",
                    std::mem::take(&mut self.more)
                ),
            });
        }
    }
}

/// Whether the peer closed its end (poll reports HUP, or readable EOF or stray data).
fn hung_up(s: impl AsFd) -> Result<(), LinkError> {
    match repoch_sys::peer::ready_now(
        s,
        rustix::event::PollFlags::IN | rustix::event::PollFlags::RDHUP,
    )? {
        false => Ok(()),
        true => Err("the consumer closed its connection or sent unexpected data".into()),
    }
}

/// The consumer link over a grant-socket connection; every message bounded by a deadline
/// for the whole of it.
#[derive(Debug)]
pub struct SocketLink {
    conn: Connection,
    pidfd: OwnedFd,
    /// The peer as described and authenticated at connect.
    peer: ConsumerPeer,
    /// The connection proved the peer's alone (by the first description again, right
    /// before the intent), and kept so by the process events.
    held: Option<repoch_sys::peer::Held>,
    /// The operator's admin connection (a duplicate): hung up, the operator already read
    /// "uncertain" and left, so no `granted` may be given.
    operator: OwnedFd,
    /// repochd's stop: abandoned, no operator will read the outcome.
    stop: Stop,
}

impl SocketLink {
    /// The connection still the pinned peer's alone: proved by one walk the first time
    /// asked, kept by the process events after.
    fn held_alone(&mut self) -> Result<(), repoch_sys::peer::NotSole> {
        let p = &self.peer;
        match &mut self.held {
            Some(h) => {
                let checked = h.again(self.conn.stream());
                if let Some(why) = h.walked_because() {
                    tracing::info!(pid = p.pid, "the consumer's connection walked again: {why}");
                }
                checked
            }
            None => {
                self.held = Some(repoch_sys::peer::Held::prove(
                    self.conn.stream(),
                    p.pid,
                    p.uid,
                )?);
                Ok(())
            }
        }
    }
}

impl ConsumerLink for SocketLink {
    /// The challenge out and the whole custody answer back within `waits.custody_seconds`
    /// (default `CUSTODY_SECONDS_MAX`).
    fn challenge(&mut self, c: &Challenge) -> Result<[u8; 64], LinkError> {
        let secs = config().custody_seconds;
        let deadline = Instant::now() + Duration::from_secs(secs);
        self.conn
            .write_msg(&GrantMsg::Challenge(c.clone()), deadline)
            .map_err(|e| LinkError::failed("sending the challenge", e))?;
        match self.conn.read_msg::<GrantMsg>(deadline) {
            Ok(GrantMsg::Custody(sig)) => Ok(sig),
            Ok(other) => Err(format!("expected custody, got {other:?}").into()),
            Err(e) => Err(LinkError::failed(
                format_args!("reading custody (deadline {secs}s for the whole answer)"),
                e,
            )),
        }
    }

    fn dispatch(
        &mut self,
        grant: &[u8],
        checkpoint: &str,
        fences: &[&OwnedFd],
    ) -> Result<(), LinkError> {
        use repoch_protocol::cbor::Canonical as _;
        use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        let msg = GrantMsg::Grant {
            grant: grant.to_vec(),
            checkpoint: checkpoint.to_owned(),
        };
        let payload = repoch_protocol::wire::frame(&msg.to_bytes());
        let fds: Vec<_> = fences.iter().map(|f| f.as_fd()).collect();
        let mut space = vec![
            std::mem::MaybeUninit::uninit();
            rustix::cmsg_space!(ScmRights(repoch_protocol::limits::GRANT_FDS_MAX))
        ];
        let mut anc = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() && !anc.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err("fence and listener fds do not fit the control buffer".into());
        }
        let secs = Duration::from_secs(config().custody_seconds);
        let deadline = Instant::now() + secs;
        self.conn
            .stream()
            .set_write_timeout(Some(secs))
            .map_err(|e| e.to_string())?;
        // The fds ride on the first byte; the rest of the frame follows.
        let n = sendmsg(
            self.conn.stream(),
            &[std::io::IoSlice::new(&payload)],
            &mut anc,
            SendFlags::NOSIGNAL,
        )
        .map_err(|e| LinkError::failed("sending the grant", e))?;
        self.conn
            .write_bytes(&payload[n..], deadline)
            .map_err(|e| LinkError::failed("sending the grant", e))
    }

    /// The peer's sole holding of the connection: one walk of the descriptors the first
    /// time (right before the intent), the process events after it
    /// (`repoch_sys::peer::Held`).
    fn describe_again(&mut self) -> Result<ConsumerPeer, LinkError> {
        self.held_alone().map_err(repoch_sys::error::Error::from)?;
        let p = &self.peer;
        Ok(repoch_sys::peer::describe(
            p.pid,
            p.uid,
            p.gid,
            &self.pidfd,
        )?)
    }

    fn refuse(&mut self, reason: Reason, detail: &str) {
        self.conn.refuse(reason, detail);
    }

    /// The pinned pidfd not readable (its process has not exited), and the connection
    /// neither hung up nor carrying unexpected data; both polled with a zero timeout.
    fn alive(&mut self) -> Result<(), LinkError> {
        repoch_sys::peer::alive(&self.pidfd)?;
        hung_up(self.conn.stream())
    }

    /// The whole `persisted` frame within `waits.persisted_ack_seconds` (default
    /// `PERSISTED_ACK_SECONDS_MAX`) of the dispatch; a consumer that dies or closes first
    /// ends the wait at once.
    fn acknowledgement(&mut self) -> Result<Hash, LinkError> {
        let secs = config().persisted_ack_seconds;
        let deadline = Instant::now() + Duration::from_secs(secs);
        match self.conn.read_msg::<GrantMsg>(deadline) {
            Ok(GrantMsg::Persisted { grant_sha256 }) => Ok(grant_sha256),
            Ok(other) => Err(format!("expected persisted, got {other:?}").into()),
            Err(e) => Err(LinkError::failed(
                format_args!("no acknowledgement (deadline {secs}s, waits.persisted_ack_seconds)"),
                e,
            )),
        }
    }

    /// The pinned pidfd's process still alive (a child that acknowledged for an exited
    /// consumer is not it) and the connection its alone, then `granted`, all within
    /// `LAST_WORD_SECONDS_MAX` of the acknowledgement.
    /// The operator's admin connection neither hung up nor readable (a client that left
    /// closed it: EOF reads as readable).
    fn operator_present(&mut self) -> Result<(), LinkError> {
        hung_up(&self.operator).map_err(|_| LinkError::from("it went away".to_owned()))
    }

    fn last_word(&mut self, grant_sha256: &Hash) -> Result<(), (Reason, LinkError)> {
        use repoch_protocol::limits::LAST_WORD_SECONDS_MAX;
        let deadline = Instant::now() + Duration::from_secs(LAST_WORD_SECONDS_MAX);
        // The operator must be there to read `granted` too: both sides or neither.
        if self.stop.abandoned() {
            return Err((
                Reason::DaemonStopping,
                "repochd stopped waiting for its recoveries; no operator will read this one's outcome".into(),
            ));
        }
        if hung_up(&self.operator).is_err() {
            return Err((
                Reason::DaemonUnreachable,
                "the operator's repoch recover went away before the last word".into(),
            ));
        }
        let pid = self.peer.pid;
        repoch_sys::peer::alive(&self.pidfd).map_err(|e| {
            (
                Reason::ConsumerLost,
                LinkError::failed(format_args!("the authenticated consumer pid {pid}"), e),
            )
        })?;
        // A consumer that exits right after its acknowledgement has closed the connection
        // before its pidfd says so: gone, not another holder.
        self.held_alone().map_err(|e| match e {
            repoch_sys::peer::NotSole::Gone(_) => (Reason::ConsumerLost, e.to_string().into()),
            _ => (Reason::ConsumerRejected, e.to_string().into()),
        })?;
        if let Some(h) = &self.held {
            tracing::info!(
                pid = self.peer.pid,
                walks = h.walks(),
                "the consumer's connection held by it alone: {} walk(s) of the descriptors, \
                 the process events between",
                h.walks()
            );
        }
        if Instant::now() >= deadline {
            return Err((
                Reason::ConsumerLost,
                format!("the checks took over {LAST_WORD_SECONDS_MAX}s (LAST_WORD_SECONDS_MAX)")
                    .into(),
            ));
        }
        self.conn
            .write_msg(
                &GrantMsg::Granted {
                    grant_sha256: *grant_sha256,
                },
                deadline,
            )
            .map_err(|e| {
                (
                    Reason::ConsumerLost,
                    LinkError::failed("sending granted", e),
                )
            })
    }
}

//! A grant-socket peer, from its `hello` to its place in the registry: its prefix
//! resolved, its credentials and key checked against the enrolled consumer, described
//! through its pidfd, its key proven on a nonce bound to this connection
//! (docs/PROTOCOL.md, "The grant socket").

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use repoch_issuer::Refusal;
use repoch_protocol::cbor::Canonical;
use repoch_protocol::grant::KeyProof;
use repoch_protocol::wire::{frame, refused, GrantMsg};
use repoch_protocol::Reason;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use crate::admission::HandshakeSlot;
use crate::frames::read_first_frame;
use crate::limits::*;
use crate::link::Pending;
use crate::server::{refuse_over_bound, Daemon};

impl Daemon {
    /// Refuses a grant-socket peer at once, without reading from it or waiting on it: one
    /// non-blocking write of the refusal, a rate-limited warning, and the connection closes.
    pub(crate) fn turn_away(&self, s: &UnixStream, pid: i32, reason: Reason, detail: &str) {
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
    pub(crate) async fn grant(self: Arc<Self>, mut s: UnixStream, slot: HandshakeSlot) {
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
        let mismatch = consumer_mismatch(&subject, &enrolled, (uid, gid), &key);
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
            d.wait_in_registry(std, pid, (uid, gid), enrolled, &subject, pidfd);
        })
        .await;
    }

    /// A consumer admitted by uid, gid and key, on a blocking thread: refused if its epoch
    /// can never be issued, else described through its pidfd, its key proven on a nonce
    /// bound to this connection, and put in the registry to wait for a recovery.
    fn wait_in_registry(
        self: Arc<Self>,
        mut std: std::os::unix::net::UnixStream,
        pid: u32,
        (uid, gid): (u32, u32),
        enrolled: crate::admission::Enrolled,
        subject: &str,
        pidfd: OwnedFd,
    ) {
        let d = self;
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
                    Refusal::new(Reason::ConsumerRejected, subject, "a describable peer", e),
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
            key: enrolled.key,
            peer,
            pidfd,
            stream: std,
            since: Instant::now(),
        };
        if let Err((mut p, r)) = d.registry.push(p, |id| d.epochs.known_used(id)) {
            refuse(&mut p.stream, r);
        }
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
}

/// The peer pinned by `SO_PEERPIDFD`, falling back to `pidfd_open` (older kernels).
/// Whether the peer is the enrolled consumer by uid, gid and key; the refusal if not.
fn consumer_mismatch(
    subject: &str,
    enrolled: &crate::admission::Enrolled,
    (uid, gid): (u32, u32),
    key: &repoch_protocol::PublicKey,
) -> Option<Refusal> {
    if (enrolled.uid, enrolled.gid) != (uid, gid) {
        Some(Refusal::consumer_rejected(
            subject,
            "uid/gid",
            format_args!("{}/{}", enrolled.uid, enrolled.gid),
            format_args!("{uid}/{gid}"),
        ))
    } else if enrolled.key != *key {
        Some(Refusal::consumer_rejected(
            subject,
            "key",
            enrolled.key.to_hex(),
            key.to_hex(),
        ))
    } else {
        None
    }
}

fn peer_pidfd(s: &UnixStream, pid: u32) -> Result<OwnedFd, String> {
    match nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerPidfd) {
        Ok(fd) => Ok(fd),
        Err(_) => repoch_sys::peer::pidfd_open(pid).map_err(String::from),
    }
}

/// The key proof (before anything is written): the peer signs, with the enrolled consumer
/// key, a fresh nonce bound to the resolved deployment and to this peer's pid and start
/// time; strictly verified. Then the pidfd must still name the process that was described.
/// (That the connection is that process's alone is proved before the intent.)
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
    repoch_sys::peer::alive(pidfd).map_err(|e| rejected("the described peer", e.into()))?;
    // That the connection is the pinned peer's alone is proved once per issuance, right
    // before the intent (crate::link, `repoch_sys::peer::Held`), not at each connection.
    if repoch_sys::procfs::start_ticks(peer.pid) != Some(start_ticks) {
        return Err(rejected("the described peer", "another process".into()));
    }
    Ok(())
}

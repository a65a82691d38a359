//! The worker supervisor's side of repoch: connect to repochd's grant socket, prove custody
//! of the enrolled consumer key, receive the single-use signed grant with the held lock
//! fences, verify it against the pinned issuer key, and persist it durably.
//!
//! ```no_run
//! use repoch_consumer::{receive, Options};
//! # fn main() -> Result<(), repoch_consumer::Error> {
//! let key = repoch_consumer::read_key("/etc/billing/consumer.key".as_ref())?;
//! let issuer = repoch_consumer::read_public("/etc/repoch/issuer.pub".as_ref())?;
//! let got = receive(&Options::new("/run/repoch/grant.sock", "3f1c0a", key, issuer, "/var/lib/billing/grant.cbor"))?;
//! // got.fences: the lock fds, held; got.grant: what was authorized (READY digest,
//! // unknown operations the new root must resolve, the journal frontier).
//! println!("granted {} with {} fences", got.grant.deployment, got.fences.len());
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

pub mod barrier;
pub mod cli;
mod keys;
mod persist;
mod verify;

pub use keys::*;
pub use persist::*;
pub use verify::*;

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use repoch_protocol::cbor::Canonical;
use repoch_protocol::checkpoint;
use repoch_protocol::grant::Grant;
use repoch_protocol::limits::{FRAME_BYTES_MAX, GRANT_FDS_MAX};
use repoch_protocol::wire::{frame_len, read_exact_by, write_msg, GrantMsg, WIRE_TEXT_BYTES_MAX};
use repoch_protocol::{PublicKey, Reason};

/// Longest wait for each whole message from repochd (an operator must start the recovery
/// within this time after `receive` connects). It bounds the message, not each read: a
/// peer dripping bytes cannot stretch it.
pub const WAIT_SECONDS_DEFAULT: u64 = 600;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("refused by repochd: {reason}: {detail}")]
    Refused { reason: Reason, detail: String },
    #[error("the grant does not verify: {0}")]
    BadGrant(String),
    #[error("{0}")]
    Io(String),
    #[error("the log does not extend the checkpoint kept with the grant ({reason}): {0}{from}", reason = .0.reason, from = rewritten(.1))]
    Inconsistent(checkpoint::Inconsistency, Option<u64>),
    /// The log extends the checkpoint kept beside the grant, yet its receipt does not carry
    /// this grant: the checkpoint is another issuance's, and the log was rewritten since
    /// this grant (docs/AUDITOR.md, "Checkpoints").
    #[error("the log does not hold this grant (sha256 {grant_sha256}): its receipt carries another grant, so the checkpoint kept beside the grant is another issuance's{from}", from = rewritten(.from))]
    NotThisGrant {
        grant_sha256: repoch_protocol::Hash,
        log: (u64, repoch_protocol::Hash),
        from: Option<u64>,
    },
    /// `verify --log`: the log extends the kept checkpoint yet does not verify as a whole
    /// (bytes after the receipt: torn or corrupt), as `repoch audit` reads it.
    #[error("the log does not verify: {reason}: {detail}")]
    LogInvalid { reason: Reason, detail: String },
    #[error("the grant was received and verified but could not be persisted: {0}")]
    Persist(String),
    #[error("the grant is persisted at {out}, but repochd did not confirm the acknowledgement ({why}): repochd reports the outcome uncertain; the new root was not started")]
    Unacknowledged { out: String, why: String },
}

impl Error {
    /// The outcome of docs/EXIT-CODES.md: refused, uncertain, inconsistent or usage.
    pub fn outcome(&self) -> repoch_protocol::Outcome {
        use repoch_protocol::Outcome;
        match self {
            Error::Usage(_) => Outcome::Usage,
            Error::Refused { .. } | Error::BadGrant(_) | Error::LogInvalid { .. } => {
                Outcome::Refused
            }
            Error::Io(_) | Error::Persist(_) | Error::Unacknowledged { .. } => Outcome::Uncertain,
            Error::Inconsistent(..) | Error::NotThisGrant { .. } => Outcome::Inconsistent,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    pub socket: PathBuf,
    pub deployment: String,
    pub key: SigningKey,
    pub issuer: PublicKey,
    pub out: PathBuf,
    pub wait: Duration,
}

impl Options {
    pub fn new(
        socket: impl Into<PathBuf>,
        deployment: &str,
        key: SigningKey,
        issuer: PublicKey,
        out: impl Into<PathBuf>,
    ) -> Options {
        Options {
            socket: socket.into(),
            deployment: deployment.to_ascii_lowercase(),
            key,
            issuer,
            out: out.into(),
            wait: Duration::from_secs(WAIT_SECONDS_DEFAULT),
        }
    }
}

/// A verified, persisted and acknowledged grant, the lock fences and the listening
/// sockets it hands over.
#[derive(Debug)]
pub struct Received {
    pub grant: Grant,
    pub bytes: Vec<u8>,
    /// One per `grant.fences`, in that order: the held locks.
    pub fences: Vec<OwnedFd>,
    /// One per `grant.listeners`, in that order: the endpoints repochd held, bound (and,
    /// but for UDP, listening), each checked against its listener.
    pub listeners: Vec<OwnedFd>,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::Io(format!("{what}: {e}"))
}

/// Progress callback: `waiting`, `proven`, `accepted`, `challenge`.
pub type Observer<'a> = &'a mut dyn FnMut(&str);

/// Connects, answers the challenge, receives, verifies and persists the grant, and
/// acknowledges it durable to repochd.
pub fn receive(o: &Options) -> Result<Received, Error> {
    receive_with(o, &mut |_| {})
}

/// Makes this process non-dumpable (`PR_SET_DUMPABLE` 0): a process of the same uid can
/// then neither `ptrace` it nor copy its descriptors with `pidfd_getfd` nor read its
/// memory; only `CAP_SYS_PTRACE` can. Without it, a process of the consumer's uid took a
/// copy of the connection (and of the grant's temporary files) and kept it out of
/// repochd's sole-holder walk by forking on (docs/THREAT-MODEL.md, "The consumer's
/// connection"). The receiving functions call it before connecting; the CLI calls it
/// before reading any key. A later `execve` of the new root makes that image dumpable
/// again (the kernel resets it), after the grant is persisted and the connection closed.
pub fn undumpable() -> Result<(), Error> {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| Error::Io(format!("prctl(PR_SET_DUMPABLE, 0): {e}")))
}

pub fn receive_with(o: &Options, progress: Observer<'_>) -> Result<Received, Error> {
    undumpable()?;
    // Before connecting: a bad `--out` must not cost the epoch.
    let mut out = Out::prepare(&o.out)?;
    let s = UnixStream::connect(&o.socket).map_err(io(&o.socket.display().to_string()))?;
    receive_on(s, &mut out, o, progress)
}

/// [`receive_with`] over a stream already connected to repochd's grant socket (`--out` is
/// checked first, as [`receive_with`] checks it before connecting).
pub fn receive_over(s: UnixStream, o: &Options, progress: Observer<'_>) -> Result<Received, Error> {
    undumpable()?;
    let mut out = Out::prepare(&o.out)?;
    receive_on(s, &mut out, o, progress)
}

/// Receives the grant over a connected stream: says hello, answers the key proof and the
/// custody challenge as they come, then takes the grant (docs/PROTOCOL.md, "The grant
/// socket"). Each message is awaited for at most `o.wait`.
fn receive_on(
    mut s: UnixStream,
    out: &mut Out,
    o: &Options,
    progress: Observer<'_>,
) -> Result<Received, Error> {
    s.set_read_timeout(Some(o.wait)).map_err(io("socket"))?;
    s.set_write_timeout(Some(o.wait)).map_err(io("socket"))?;
    let key = PublicKey::from(&o.key.verifying_key());
    let sent = write_msg(
        &mut s,
        &GrantMsg::Hello {
            deployment: o.deployment.clone(),
            key,
        },
    );
    if let Err(e) = sent {
        return Err(queued_refusal(&s, o, "hello", e));
    }
    barrier::reach("after-hello");
    progress("waiting");
    // The full id our prefix resolved to, as repochd proved it to us: everything after
    // must name exactly this deployment.
    let mut full: Option<repoch_protocol::DeploymentId> = None;
    let mut challenged = None;
    loop {
        // The grant frame carries the fence fds: read it with recvmsg.
        let (msg, fds) = recv_msg(&s, Instant::now() + o.wait)?;
        match msg {
            GrantMsg::Prove(p) => {
                full = Some(answer_proof(&mut s, o, p, full)?);
                barrier::reach("after-key-proof");
                progress("proven");
            }
            GrantMsg::Accepted => progress("accepted"),
            GrantMsg::Challenge(c) => {
                challenged = Some(answer_challenge(&mut s, o, c, full, &mut *progress)?);
                barrier::reach("after-custody");
            }
            GrantMsg::Grant {
                grant: bytes,
                checkpoint,
            } => {
                let c = challenged
                    .ok_or_else(|| Error::BadGrant("a grant without a challenge".into()))?;
                let mut fds = fds;
                let (grant, listeners) =
                    checked_grant(&bytes, &checkpoint, &mut fds, o, &key, full, &c)?;
                barrier::reach("after-receive");
                persist_acknowledged(&mut s, out, o, &bytes, &checkpoint)?;
                return Ok(Received {
                    grant,
                    bytes,
                    fences: fds,
                    listeners,
                });
            }
            GrantMsg::Refused { reason, detail } => return Err(Error::Refused { reason, detail }),
            GrantMsg::Hello { .. }
            | GrantMsg::Custody(_)
            | GrantMsg::Proof(_)
            | GrantMsg::Persisted { .. }
            | GrantMsg::Granted { .. } => {
                return Err(Error::Io("unexpected message from repochd".into()))
            }
        }
    }
}

/// Answers repochd's key-proof request with the consumer key, once, and only for a
/// deployment our prefix names; returns the full id it resolved to, which everything after
/// must name.
fn answer_proof(
    s: &mut UnixStream,
    o: &Options,
    p: repoch_protocol::grant::KeyProof,
    full: Option<repoch_protocol::DeploymentId>,
) -> Result<repoch_protocol::DeploymentId, Error> {
    if full.is_some() || !p.deployment.to_hex().starts_with(&o.deployment) {
        return Err(Error::BadGrant(format!(
            "a key-proof request for deployment {}",
            p.deployment
        )));
    }
    write_msg(s, &GrantMsg::Proof(p.answer(&o.key)))
        .map_err(|e| queued_refusal(s, o, "key proof", e))?;
    Ok(p.deployment)
}

/// Answers the custody challenge with the consumer key, only if it names the deployment
/// the key proof resolved; returns the challenge, which the grant must match.
fn answer_challenge(
    s: &mut UnixStream,
    o: &Options,
    c: repoch_protocol::grant::Challenge,
    full: Option<repoch_protocol::DeploymentId>,
    progress: Observer<'_>,
) -> Result<repoch_protocol::grant::Challenge, Error> {
    if Some(c.deployment) != full {
        return Err(Error::BadGrant(format!(
            "challenge for deployment {}, not the resolved {}",
            c.deployment,
            full.map_or("(none)".into(), |d| d.to_hex())
        )));
    }
    progress("challenge");
    write_msg(s, &GrantMsg::Custody(c.answer(&o.key)))
        .map_err(|e| queued_refusal(s, o, "custody", e))?;
    Ok(c)
}

/// Checks a received grant before anything is persisted: it verifies against the pinned
/// issuer for our key, is for the challenged epoch of the resolved deployment, its
/// checkpoint holds it, and the fds that came with it match its fences and listeners
/// (returned: the listeners, split off `fds`, which keeps the fences).
fn checked_grant(
    bytes: &[u8],
    checkpoint: &str,
    fds: &mut Vec<OwnedFd>,
    o: &Options,
    key: &PublicKey,
    full: Option<repoch_protocol::DeploymentId>,
    c: &repoch_protocol::grant::Challenge,
) -> Result<(Grant, Vec<OwnedFd>), Error> {
    let grant = verify(bytes, &o.issuer, Some(key))?;
    // The challenge named the resolved deployment (checked when it came).
    if Some(grant.deployment) != full || grant.intent != c.intent {
        return Err(Error::BadGrant(
            "the grant is not for the challenged epoch of the resolved deployment".into(),
        ));
    }
    check_checkpoint(checkpoint, &grant, &o.issuer)?;
    let listeners = check_fds(&grant, fds)?;
    Ok((grant, listeners))
}

/// Persists the checked grant and its checkpoint durably, acknowledges it to repochd
/// (which reports granted only on this acknowledgement, docs/PROTOCOL.md), and waits for
/// repochd's last word naming it.
fn persist_acknowledged(
    s: &mut UnixStream,
    out: &mut Out,
    o: &Options,
    bytes: &[u8],
    checkpoint: &str,
) -> Result<(), Error> {
    out.persist_checkpoint(checkpoint)?;
    out.persist(bytes)?;
    barrier::reach("after-persist");
    let ack = GrantMsg::Persisted {
        grant_sha256: repoch_protocol::Hash::of(bytes),
    };
    write_msg(s, &ack).map_err(|e| Error::Unacknowledged {
        out: o.out.display().to_string(),
        why: e.to_string(),
    })?;
    barrier::reach("after-acknowledge");
    last_word(s, repoch_protocol::Hash::of(bytes), &o.out)?;
    barrier::reach("after-last-word");
    Ok(())
}

/// A message to repochd could not be written: repochd may have refused and stopped
/// reading (at once after `hello`, or after the challenge when the recovery was withheld
/// before any grant was signed). Its refusal is still there to read, and it is the
/// outcome (refused, exit 2: repochd refuses only what it will not sign). With none, the
/// failed write itself (`what: error`; after the challenge, uncertain).
fn queued_refusal(s: &UnixStream, o: &Options, what: &str, e: impl std::fmt::Display) -> Error {
    match recv_msg(s, Instant::now() + o.wait) {
        Ok((GrantMsg::Refused { reason, detail }, _)) => Error::Refused { reason, detail },
        _ => Error::Io(format!("{what}: {e}")),
    }
}

/// The handoff's last word (docs/PROTOCOL.md, "The grant socket"): after `persisted`,
/// repochd's `granted` naming the grant, or the outcome is uncertain here as it is for the
/// operator (`Error::Unacknowledged`: the grant is kept at `--out`, the new root is not
/// started). repochd sends it within `LAST_WORD_SECONDS_MAX` of reading `persisted`, or
/// never; this waits twice as long from sending it, and reads whatever is already there
/// however late this process runs (a poll reports data that arrived while it was stopped).
fn last_word(s: &UnixStream, sha: repoch_protocol::Hash, out: &Path) -> Result<(), Error> {
    use repoch_protocol::limits::{LAST_WORD_SECONDS_MAX, LAST_WORD_WAIT_SECONDS_MAX};
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let unacknowledged = |why: String| Error::Unacknowledged {
        out: out.display().to_string(),
        why,
    };
    // One poll: this process sets no signal handler, so a stop and continue (or any
    // signal) restarts it inside the kernel rather than failing it with EINTR.
    let t = Timespec {
        tv_sec: LAST_WORD_WAIT_SECONDS_MAX as i64,
        tv_nsec: 0,
    };
    let mut fds = [PollFd::new(s, PollFlags::IN)];
    let ready = poll(&mut fds, Some(&t))
        .map_err(|e| unacknowledged(format!("waiting for granted: poll: {e}")))?;
    if ready == 0 {
        return Err(unacknowledged(format!(
            "no last word (granted) within {LAST_WORD_WAIT_SECONDS_MAX}s of the acknowledgement"
        )));
    }
    match recv_msg(
        s,
        Instant::now() + Duration::from_secs(LAST_WORD_SECONDS_MAX),
    ) {
        Ok((GrantMsg::Granted { grant_sha256 }, fds)) if grant_sha256 == sha && fds.is_empty() => {
            Ok(())
        }
        Ok((GrantMsg::Refused { reason, detail }, _)) => {
            Err(unacknowledged(format!("repochd: {reason}: {detail}")))
        }
        Ok((GrantMsg::Granted { grant_sha256 }, _)) => Err(unacknowledged(format!(
            "granted names {grant_sha256}, not this grant"
        ))),
        Ok((other, _)) => Err(unacknowledged(format!("expected granted, got {other:?}"))),
        Err(e) => Err(unacknowledged(e.to_string())),
    }
}

/// Reads one frame, the whole of it before `deadline`, collecting any fds passed with it
/// (at most `GRANT_FDS_MAX`).
fn recv_msg(s: &UnixStream, deadline: Instant) -> Result<(GrantMsg, Vec<OwnedFd>), Error> {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let late = || Error::Io("repochd did not send a whole message before the deadline".into());
    let mut fds = Vec::new();
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(late());
        }
        s.set_read_timeout(Some(left)).map_err(io("socket"))?;
        let mut space =
            vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(GRANT_FDS_MAX))];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        let r = recvmsg(
            s,
            &mut [std::io::IoSliceMut::new(&mut header[got..])],
            &mut anc,
            RecvFlags::CMSG_CLOEXEC,
        );
        let r = match r {
            Ok(r) => r,
            Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::INTR => continue,
            Err(e) => return Err(Error::Io(format!("reading from repochd: {e}"))),
        };
        if r.bytes == 0 {
            return Err(Error::Io("repochd closed the connection".into()));
        }
        got += r.bytes;
        for m in anc.drain() {
            if let RecvAncillaryMessage::ScmRights(it) = m {
                fds.extend(it);
            }
        }
        if fds.len() > GRANT_FDS_MAX {
            return Err(Error::BadGrant(format!("more than {GRANT_FDS_MAX} fds")));
        }
    }
    let len = frame_len(header).map_err(|e| Error::Io(e.to_string()))?;
    let mut body = vec![0u8; len.min(FRAME_BYTES_MAX)];
    let mut r = s;
    read_exact_by(&mut r, &mut body, deadline, &mut |s: &&UnixStream, left| {
        s.set_read_timeout(Some(left))
    })
    .map_err(io("reading from repochd"))?;
    let msg = match GrantMsg::from_bytes(&body) {
        Ok(m) => m,
        Err(e) => refusal_of(&body).ok_or_else(|| Error::Io(format!("malformed message: {e}")))?,
    };
    Ok((msg, fds))
}

/// A refusal whose only fault is an over-long detail (an older or careless sender): its
/// reason is still read, and the detail clipped, so a clean refusal stays a refusal (exit 2)
/// rather than "uncertain".
fn refusal_of(body: &[u8]) -> Option<GrantMsg> {
    use ciborium::value::Value;
    use repoch_protocol::cbor::decode_strict;
    let Ok(Value::Array(items)) = decode_strict(body, FRAME_BYTES_MAX) else {
        return None;
    };
    let mut items = items.into_iter();
    match (items.next(), items.next(), items.next(), items.next()) {
        (Some(Value::Text(k)), Some(reason), Some(Value::Text(detail)), None) if k == "refused" => {
            Some(GrantMsg::Refused {
                reason: Reason::from_value(reason).ok()?,
                detail: repoch_protocol::types::clip(&detail, WIRE_TEXT_BYTES_MAX),
            })
        }
        _ => None,
    }
}

/// Reads a regular file of at most `max` bytes, following symlinks as the paths a
/// supervisor names may (`repoch_sys::fs::read_regular`).
pub(crate) fn read_bounded(p: &Path, max: usize) -> std::io::Result<Vec<u8>> {
    repoch_sys::fs::read_regular(p, max, repoch_sys::fs::Links::Follow)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn an_out_under_a_file_is_refused_as_its_directory() {
        // `--out FILE/grant.cbor`: the directory open (O_DIRECTORY) is what refuses it.
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("f"), b"").unwrap();
        match Out::prepare(&d.path().join("f").join("grant.cbor")) {
            Err(Error::Usage(m)) => assert!(m.contains("its directory: Not a directory"), "{m}"),
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    fn refused_for_its_directory(out: &Path) -> String {
        match Out::prepare(out) {
            Err(Error::Usage(m)) => m,
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn an_out_directory_others_can_write_is_refused_before_connecting() {
        // Another user who can write the directory could plant the grant's or its
        // checkpoint's name after this check and make the persist fail: the epoch would
        // end uncertain with no grant file. Refused up front, nothing burnt.
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("grant.cbor");
        for mode in [0o1777, 0o777, 0o770, 0o730, 0o702] {
            std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(mode)).unwrap();
            let m = refused_for_its_directory(&out);
            assert!(m.contains(&format!("mode {mode:o}")), "{mode:o}: {m}");
            assert!(m.contains("writable by no one else"), "{mode:o}: {m}");
        }
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(Out::prepare(&out).is_ok());
    }

    #[test]
    #[ignore = "needs root"]
    fn an_out_directory_owned_by_another_user_is_refused_before_connecting() {
        assert!(rustix::process::geteuid().is_root(), "needs root");
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("grant.cbor");
        rustix::fs::chown(
            d.path(),
            Some(rustix::fs::Uid::from_raw(65534)),
            Some(rustix::fs::Gid::from_raw(65534)),
        )
        .unwrap();
        let m = refused_for_its_directory(&out);
        assert!(m.contains("owned by uid 65534"), "{m}");
        assert!(m.contains("must be owned by this user (uid 0)"), "{m}");
    }

    #[test]
    fn an_out_directory_below_another_users_directory_is_refused_before_connecting() {
        // An owner of an ancestor of --out's directory can rename that directory and put
        // another in its place after the check: a later reader of the path (the new root
        // through REPOCH_GRANT, `repoch-consume verify PATH`) reads a planted grant. Every
        // ancestor must be owned by root or this user, and writable by no one else unless
        // sticky (as /tmp: no one renames an entry of another's there). Found by attacking
        // the release binaries: the grant landed, the path then named another file.
        // As another user than root, the ownership half needs a directory of another
        // user's, which only root can make: it is asserted when the test runs as root (as
        // CI runs it); the mode half runs as anyone.
        use std::os::unix::fs::PermissionsExt as _;
        let d = tempfile::tempdir().unwrap();
        let theirs = d.path().join("theirs");
        let mine = theirs.join("mine");
        std::fs::create_dir_all(&mine).unwrap();
        let out = mine.join("grant.cbor");
        assert!(Out::prepare(&out).is_ok());
        if rustix::process::geteuid().is_root() {
            let nobody = Some(rustix::fs::Uid::from_raw(65534));
            rustix::fs::chown(&theirs, nobody, None).unwrap();
            let m = refused_for_its_directory(&out);
            assert!(
                m.contains(&format!("{} is owned by uid 65534", theirs.display())),
                "{m}"
            );
            rustix::fs::chown(&theirs, Some(rustix::fs::Uid::from_raw(0)), None).unwrap();
        }
        // Writable by others (not sticky): refused; sticky: taken.
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o777)).unwrap();
        let m = refused_for_its_directory(&out);
        assert!(m.contains("mode 777"), "{m}");
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(Out::prepare(&out).is_ok());
    }

    /// Runs `f` on a thread of its own in a mount namespace of its own (private), so that
    /// what it mounts is seen by no other test.
    fn in_own_mount_namespace<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).unwrap();
            let flags = nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE;
            nix::mount::mount(None::<&str>, "/", None::<&str>, flags, None::<&str>).unwrap();
            f()
        })
        .join()
        .unwrap()
    }

    #[test]
    #[ignore = "needs root"]
    fn an_out_below_a_mount_point_in_a_sticky_directory_is_refused_before_connecting() {
        // A mount point's own directory is covered by what is mounted on it: the walk by
        // `..` goes from the mount's root to the directory above the mount point and never
        // sees it. In a sticky directory its owner (any user) can rename it from another
        // mount namespace, and the path then leads to a directory of theirs. Found by
        // attacking the release binaries: a tmpfs on a directory of uid 1000's in a sticky
        // directory. Its owner cannot be seen by an unprivileged consumer (a copy of the
        // mount without its submounts is refused to it), so the mount point is refused;
        // under a directory only root or this user can write, it is taken.
        use std::os::unix::fs::PermissionsExt as _;
        assert!(rustix::process::geteuid().is_root(), "needs root");
        let d = tempfile::tempdir().unwrap();
        let path = d.path().to_owned();
        let (refused, taken) = in_own_mount_namespace(move || {
            let covered = path.join("theirs");
            std::fs::create_dir(&covered).unwrap();
            let nobody = Some(rustix::fs::Uid::from_raw(65534));
            rustix::fs::chown(&covered, nobody, None).unwrap();
            let tmpfs = |at: &Path| {
                let none = nix::mount::MsFlags::empty();
                nix::mount::mount(Some("tmpfs"), at, Some("tmpfs"), none, Some("mode=0755"))
                    .unwrap();
            };
            tmpfs(&covered);
            let out = covered.join("grant.cbor");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o1777)).unwrap();
            let refused = Out::prepare(&out).map(drop);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            let taken = Out::prepare(&out).map(drop);
            let _ = nix::mount::umount(&covered);
            (refused, taken)
        });
        match refused {
            Err(Error::Usage(m)) => {
                assert!(
                    m.contains("is a mount point in the sticky directory"),
                    "{m}"
                );
                assert!(m.contains(&format!("{}", d.path().display())), "{m}");
            }
            other => panic!("expected a usage error, got {other:?}"),
        }
        taken.unwrap();
    }

    #[test]
    #[ignore = "needs root"]
    fn an_out_below_a_directory_bound_onto_its_own_child_is_walked_to_the_root() {
        // `..` of a bind mount's root is the directory above its mount point, which is
        // here the bound directory itself, in the mount below: the same inode, read as
        // `/` (whose `..` is itself), ended the walk, and the owner of a directory above
        // (uid 65534 here) could rename the path away after the grant. Found by attacking
        // the release binaries: the path then led to a planted file.
        assert!(rustix::process::geteuid().is_root(), "needs root");
        let d = tempfile::tempdir().unwrap();
        let path = d.path().to_owned();
        let refused = in_own_mount_namespace(move || {
            let theirs = path.join("theirs");
            let a = theirs.join("a");
            std::fs::create_dir_all(a.join("b")).unwrap();
            let nobody = Some(rustix::fs::Uid::from_raw(65534));
            rustix::fs::chown(&theirs, nobody, None).unwrap();
            let none = nix::mount::MsFlags::MS_BIND;
            nix::mount::mount(Some(&a), &a.join("b"), None::<&str>, none, None::<&str>).unwrap();
            let r = Out::prepare(&a.join("b").join("grant.cbor")).map(drop);
            let _ = nix::mount::umount(&a.join("b"));
            r
        });
        match refused {
            Err(Error::Usage(m)) => assert!(m.contains("owned by uid 65534"), "{m}"),
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn a_kernel_file_system_is_trusted_and_named_by_its_mount() {
        // The walk compares mounts by what this answers: the directory's own mount id, as
        // statx gives it (not a constant, which would read every mount as one).
        let d = tempfile::tempdir().unwrap();
        let fd = repoch_sys::fs::open_path(d.path(), rustix::fs::OFlags::DIRECTORY, 0).unwrap();
        let dev_fd =
            repoch_sys::fs::open_path(Path::new("/dev"), rustix::fs::OFlags::DIRECTORY, 0).unwrap();
        let mine = persist::trusted_file_system(&fd).unwrap();
        assert_eq!(Some(mine), repoch_sys::fs::mount_id(&fd));
        assert_ne!(Some(mine), repoch_sys::fs::mount_id(&dev_fd));
    }

    #[test]
    #[ignore = "needs root"]
    fn an_out_on_a_fuse_file_system_is_refused_before_connecting() {
        // A FUSE server answers every owner, mode and `..` of its file system, and can
        // serve another file at the path later: found by attacking the release binaries,
        // a uid 1000 fuse-overlayfs (allow_other) answering root's ownership was accepted.
        // Here root's own fuse-overlayfs, in a mount namespace of the test's own.
        assert!(rustix::process::geteuid().is_root(), "needs root");
        let d = tempfile::tempdir().unwrap();
        let path = d.path().to_owned();
        let refused = in_own_mount_namespace(move || {
            for sub in ["lower", "upper", "work", "m"] {
                std::fs::create_dir(path.join(sub)).unwrap();
            }
            let opts = format!(
                "lowerdir={0}/lower,upperdir={0}/upper,workdir={0}/work",
                path.display()
            );
            let st = std::process::Command::new("fuse-overlayfs")
                .args(["-o", &opts])
                .arg(path.join("m"))
                .status()
                .expect("fuse-overlayfs (apt-get install fuse-overlayfs)");
            assert!(st.success(), "fuse-overlayfs: {st}");
            let r = Out::prepare(&path.join("m").join("grant.cbor")).map(drop);
            let _ = nix::mount::umount2(&path.join("m"), nix::mount::MntFlags::MNT_DETACH);
            r
        });
        match refused {
            Err(Error::Usage(m)) => assert!(m.contains("FUSE file system"), "{m}"),
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn an_out_path_through_a_symlink_is_refused_before_connecting() {
        // The ancestors are walked from the directory the path opens, but readers after
        // the grant (the new root through REPOCH_GRANT, `repoch-consume verify PATH`) take
        // the path as given: a symlink in it, which its owner can point elsewhere later,
        // would make them read another file. Found
        // by attacking the release binaries: a symlink another user owned, repointed after
        // the grant landed, made the new root read a planted grant.
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let m = refused_for_its_directory(&link.join("grant.cbor"));
        assert!(m.contains("symbolic link"), "{m}");
        assert!(Out::prepare(&real.join("grant.cbor")).is_ok());
    }

    #[test]
    fn an_out_path_with_a_dot_or_dot_dot_component_is_refused_before_connecting() {
        // A `..` lets the path as given pass through a directory the walk from the opened
        // directory never sees (its owner renames it after the grant landed: the new root
        // reads a planted grant), and `grant.cbor/.` names a file the new root cannot
        // open. Found by attacking the release binaries: both were accepted.
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        std::fs::create_dir(&a).unwrap();
        for out in [
            a.join("..").join("grant.cbor"),
            a.join(".").join("grant.cbor"),
            a.join("grant.cbor").join("."),
            a.join("grant.cbor").join(".."),
        ] {
            let m = refused_for_its_directory(&out);
            assert!(m.contains("'.' or '..'"), "{}: {m}", out.display());
        }
        assert!(Out::prepare(&a.join("grant.cbor")).is_ok());
    }

    #[test]
    fn an_out_path_a_path_cannot_be_is_refused_before_connecting() {
        // The new root opens the path as given: one of PATH_MAX bytes or more is refused on
        // its length, one byte shorter is not (it fails later, on its missing directory).
        let at = |n: usize| {
            let mut p = std::path::PathBuf::from("/nonexistent");
            while p.as_os_str().len() < n {
                let room = n - p.as_os_str().len() - 1;
                p.push("d".repeat(room.min(200)));
            }
            assert_eq!(p.as_os_str().len(), n);
            p
        };
        let m = refused_for_its_directory(&at(persist::PATH_BYTES_MAX));
        assert!(m.contains("PATH_MAX"), "{m}");
        let m = refused_for_its_directory(&at(persist::PATH_BYTES_MAX - 1));
        assert!(!m.contains("PATH_MAX"), "{m}");
    }

    #[test]
    fn a_leftover_temporary_file_does_not_block_a_later_persist() {
        // What a crash between the write and the link leaves: a temporary file under a
        // name of the same shape. A later persist picks a new unique name and succeeds.
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("grant.cbor");
        let left = d.path().join(format!(
            ".grant.cbor.{}.0000000000000000.tmp",
            std::process::id()
        ));
        std::fs::write(&left, b"partial").unwrap();
        persist(&out, b"whole grant").unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"whole grant");
        assert_eq!(std::fs::read(&left).unwrap(), b"partial");
        assert_eq!(names(d.path()).len(), 2, "{:?}", names(d.path()));
    }

    #[test]
    fn the_grant_is_never_written_over_a_file_and_no_temporary_file_stays() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("grant.cbor");
        // Checked before connecting: a usage error.
        std::fs::write(&out, b"").unwrap();
        assert!(matches!(Out::prepare(&out), Err(Error::Usage(_))));
        std::fs::remove_file(&out).unwrap();
        // A file that appears between the check and the link is not replaced.
        let mut o = Out::prepare(&out).unwrap();
        std::fs::write(&out, b"someone else's").unwrap();
        assert!(matches!(o.persist(b"grant"), Err(Error::Persist(_))));
        assert_eq!(std::fs::read(&out).unwrap(), b"someone else's");
        // The grant's temporary file is gone; the checkpoint's, never used, goes with `o`.
        let left = names(d.path());
        assert_eq!(left.len(), 2, "{left:?}");
        assert!(left[0].starts_with(".grant.cbor.checkpoint."), "{left:?}");
        // Each file is persisted once.
        assert!(
            matches!(o.persist(b"grant"), Err(Error::Persist(m)) if m.contains("already used"))
        );
        drop(o);
        assert_eq!(names(d.path()), ["grant.cbor"]);
    }

    #[test]
    fn the_space_of_both_files_is_written_before_connecting() {
        // `prepare` leaves two temporary files holding as many bytes as the largest grant
        // and checkpoint: the persist overwrites them, so it needs no new space.
        let d = tempfile::tempdir().unwrap();
        let mut o = Out::prepare(&d.path().join("grant.cbor")).unwrap();
        let mut sizes: Vec<(String, u64)> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().into_string().unwrap(),
                    e.metadata().unwrap().len(),
                )
            })
            .collect();
        // The checkpoint's name sorts last: the grant's goes on with its pid's digits.
        sizes.sort();
        assert_eq!(sizes.len(), 2, "{sizes:?}");
        assert!(
            sizes[1].0.starts_with(".grant.cbor.checkpoint."),
            "{sizes:?}"
        );
        assert_eq!(
            sizes[1].1,
            repoch_protocol::limits::CHECKPOINT_BYTES_MAX as u64
        );
        assert!(sizes[0].0.starts_with(".grant.cbor.") && sizes[0].0.ends_with(".tmp"));
        assert_eq!(sizes[0].1, FRAME_BYTES_MAX as u64);
        // Persisted at their own lengths.
        o.persist_checkpoint("note").unwrap();
        o.persist(b"grant").unwrap();
        assert_eq!(
            std::fs::read(d.path().join("grant.cbor")).unwrap(),
            b"grant"
        );
        assert_eq!(
            std::fs::read(d.path().join("grant.cbor.checkpoint")).unwrap(),
            b"note"
        );
        assert_eq!(names(d.path()), ["grant.cbor", "grant.cbor.checkpoint"]);
    }

    #[test]
    fn an_out_naming_a_directory_is_not_a_file_name() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("grant.cbor/");
        match Out::prepare(Path::new(&format!("{}/", out.display()))) {
            Err(Error::Usage(m)) => assert!(m.ends_with("not a file name"), "{m}"),
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn the_longest_out_name_whose_temporary_names_fit_name_max_is_accepted_and_persisted() {
        let d = tempfile::tempdir().unwrap();
        let overhead =
            Out::temporary_name(std::ffi::OsStr::new(""), u32::MAX, &[0; TEMP_RANDOM_BYTES]).len()
                + CHECKPOINT_SUFFIX.len();
        let longest = "g".repeat(NAME_BYTES_MAX - overhead);
        let mut o = Out::prepare(&d.path().join(&longest)).unwrap();
        // Its checkpoint's temporary name is the longest and still fits, whatever the pid.
        o.persist_checkpoint("note").unwrap();
        o.persist(b"grant").unwrap();
        assert_eq!(std::fs::read(d.path().join(&longest)).unwrap(), b"grant");
        let over = format!("{longest}g");
        match Out::prepare(&d.path().join(over)) {
            Err(Error::Usage(m)) => assert!(m.contains("NAME_MAX"), "{m}"),
            other => panic!("expected a usage error, got {other:?}"),
        }
    }

    #[test]
    fn a_rewritten_log_names_its_first_record_not_the_grants() {
        use repoch_protocol::epoch::{EpochBody, EpochRecord, LogReport, SignedEpochRecord};
        let rec = |seq: u64, hash: u8| repoch_protocol::epoch::VerifiedRecord {
            offset: seq,
            hash: repoch_protocol::Hash([hash; 32]),
            record: SignedEpochRecord {
                record: EpochRecord {
                    deployment: repoch_protocol::DeploymentId([1; 16]),
                    seq,
                    prev: repoch_protocol::Hash([0; 32]),
                    body: EpochBody::Withheld {
                        reason: Reason::EvidenceChanged,
                        detail: String::new(),
                    },
                },
                signature: [0; 64],
            },
        };
        let g = Grant {
            deployment: repoch_protocol::DeploymentId([1; 16]),
            intent: repoch_protocol::Hash([11; 32]),
            consume: repoch_protocol::Hash([12; 32]),
            evidence: repoch_protocol::Hash([4; 32]),
            consumer_key: PublicKey([3; 32]),
            ready_path: "/READY".into(),
            ready_sha256: repoch_protocol::Hash([5; 32]),
            fences: vec![],
            frontier_seq: 0,
            frontier_hash: repoch_protocol::Hash([6; 32]),
            unknown_ops: vec![],
            issued_at: 0,
            listeners: vec![],
            fencing: None,
        };
        let report = |hashes: &[u8]| LogReport {
            classification: repoch_protocol::epoch::Classification::Receipted,
            records: hashes
                .iter()
                .enumerate()
                .map(|(i, h)| rec(i as u64, *h))
                .collect(),
            problem: None,
        };
        assert_eq!(rewritten_from(&g, &report(&[0, 11, 12, 13])), None);
        assert_eq!(rewritten_from(&g, &report(&[0, 11])), None);
        assert_eq!(rewritten_from(&g, &report(&[0, 21, 12])), Some(1));
        assert_eq!(rewritten_from(&g, &report(&[0, 11, 22])), Some(2));
        assert_eq!(rewritten(&None), "");
        assert_eq!(
            rewritten(&Some(2)),
            "; rewritten from record #2, which is not the one the grant names"
        );
    }

    #[test]
    fn an_out_whose_temporary_name_cannot_fit_is_a_usage_error() {
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(
            Out::prepare(&d.path().join("g".repeat(250))),
            Err(Error::Usage(_))
        ));
        assert!(Out::prepare(&d.path().join("g".repeat(200))).is_ok());
        assert!(matches!(
            Out::prepare(&d.path().join("missing/grant.cbor")),
            Err(Error::Usage(_))
        ));
    }
}

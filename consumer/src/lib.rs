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

use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use repoch_protocol::cbor::Canonical;
use repoch_protocol::grant::{Grant, SignedGrant};
use repoch_protocol::limits::{FENCES_MAX, FRAME_BYTES_MAX};
use repoch_protocol::wire::{frame_len, read_exact_by, write_msg, GrantMsg, WIRE_TEXT_BYTES_MAX};
use repoch_protocol::{PublicKey, Reason};
use rustix::fs::{Mode, OFlags};

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
    #[error("the grant was received and verified but could not be persisted: {0}")]
    Persist(String),
}

impl Error {
    /// Exit codes as docs/EXIT-CODES.md: refused 2, uncertain 3, usage 64, internal 70.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Usage(_) => 64,
            Error::Refused { .. } | Error::BadGrant(_) => 2,
            Error::Io(_) | Error::Persist(_) => 3,
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

/// A verified, persisted grant and the lock fences it hands over.
#[derive(Debug)]
pub struct Received {
    pub grant: Grant,
    pub bytes: Vec<u8>,
    pub fences: Vec<OwnedFd>,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::Io(format!("{what}: {e}"))
}

/// Progress callback: `waiting`, `proven`, `accepted`, `challenge`.
pub type Observer<'a> = &'a mut dyn FnMut(&str);

/// Connects, answers the challenge, receives, verifies and persists the grant.
pub fn receive(o: &Options) -> Result<Received, Error> {
    receive_with(o, &mut |_| {})
}

pub fn receive_with(o: &Options, progress: Observer<'_>) -> Result<Received, Error> {
    let s = UnixStream::connect(&o.socket).map_err(io(&o.socket.display().to_string()))?;
    receive_over(s, o, progress)
}

/// [`receive_with`] over a stream already connected to repochd's grant socket.
pub fn receive_over(
    mut s: UnixStream,
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
        // repochd may refuse a peer at once and close: its refusal is still there to read.
        return match recv_msg(&s, Instant::now() + o.wait) {
            Ok((GrantMsg::Refused { reason, detail }, _)) => Err(Error::Refused { reason, detail }),
            _ => Err(Error::Io(format!("hello: {e}"))),
        };
    }
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
                if full.is_some() || !p.deployment.to_hex().starts_with(&o.deployment) {
                    return Err(Error::BadGrant(format!(
                        "a key-proof request for deployment {}",
                        p.deployment
                    )));
                }
                write_msg(&mut s, &GrantMsg::Proof(p.answer(&o.key))).map_err(io("key proof"))?;
                full = Some(p.deployment);
                progress("proven");
            }
            GrantMsg::Accepted => progress("accepted"),
            GrantMsg::Challenge(c) => {
                if Some(c.deployment) != full {
                    return Err(Error::BadGrant(format!(
                        "challenge for deployment {}, not the resolved {}",
                        c.deployment,
                        full.map_or("(none)".into(), |d| d.to_hex())
                    )));
                }
                progress("challenge");
                write_msg(&mut s, &GrantMsg::Custody(c.answer(&o.key))).map_err(io("custody"))?;
                challenged = Some(c);
            }
            GrantMsg::Grant(bytes) => {
                let c = challenged
                    .ok_or_else(|| Error::BadGrant("a grant without a challenge".into()))?;
                let grant = verify(&bytes, &o.issuer, Some(&key))?;
                // The challenge named the resolved deployment (checked when it came).
                if Some(grant.deployment) != full || grant.intent != c.intent {
                    return Err(Error::BadGrant(
                        "the grant is not for the challenged epoch of the resolved deployment"
                            .into(),
                    ));
                }
                check_fences(&grant, &fds)?;
                persist(&o.out, &bytes)?;
                return Ok(Received {
                    grant,
                    bytes,
                    fences: fds,
                });
            }
            GrantMsg::Refused { reason, detail } => return Err(Error::Refused { reason, detail }),
            GrantMsg::Hello { .. } | GrantMsg::Custody(_) | GrantMsg::Proof(_) => {
                return Err(Error::Io("unexpected message from repochd".into()))
            }
        }
    }
}

/// Reads one frame, the whole of it before `deadline`, collecting any fds passed with it
/// (at most `FENCES_MAX`).
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
            vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(FENCES_MAX))];
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
        if fds.len() > FENCES_MAX {
            return Err(Error::BadGrant(format!("more than {FENCES_MAX} fds")));
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

/// Verifies a grant's issuer signature (strictly) and, when given, that it names our key.
pub fn verify(bytes: &[u8], issuer: &PublicKey, ours: Option<&PublicKey>) -> Result<Grant, Error> {
    let g = SignedGrant::from_bytes(bytes).map_err(|e| Error::BadGrant(e.to_string()))?;
    if !g.verify(issuer) {
        return Err(Error::BadGrant(format!(
            "not signed by the pinned issuer key {issuer}"
        )));
    }
    if let Some(k) = ours {
        if &g.grant.consumer_key != k {
            return Err(Error::BadGrant(
                "the grant names another consumer key".into(),
            ));
        }
    }
    Ok(g.grant)
}

/// Every received fd is the fence the grant names, by device and inode, in order.
fn check_fences(g: &Grant, fds: &[OwnedFd]) -> Result<(), Error> {
    if fds.len() != g.fences.len() {
        return Err(Error::BadGrant(format!(
            "{} fence fds received, the grant names {}",
            fds.len(),
            g.fences.len()
        )));
    }
    for (fd, f) in fds.iter().zip(&g.fences) {
        let st = rustix::fs::fstat(fd).map_err(|e| Error::BadGrant(e.to_string()))?;
        if st.st_dev != f.identity.dev || st.st_ino != f.identity.ino {
            return Err(Error::BadGrant(format!(
                "fd for {} is inode {}, the grant names {}",
                f.path, st.st_ino, f.identity.ino
            )));
        }
    }
    Ok(())
}

/// Writes the grant with `O_EXCL` (never over an existing file), fsyncs it and its
/// directory: success is reported only once the grant is durable.
pub fn persist(out: &Path, bytes: &[u8]) -> Result<(), Error> {
    let perr = |e: std::io::Error| Error::Persist(format!("{}: {e}", out.display()));
    let fd = rustix::fs::open(
        out,
        OFlags::WRONLY | OFlags::CLOEXEC | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::EXCL,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| perr(e.into()))?;
    let mut f = std::fs::File::from(fd);
    f.write_all(bytes).map_err(perr)?;
    f.sync_all().map_err(perr)?;
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    sync_dir(dir).map_err(perr)
}

/// Fsyncs a directory (the one a file was just created in).
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let d = rustix::fs::open(dir, OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    Ok(rustix::fs::fsync(&d)?)
}

pub fn read_key(p: &Path) -> Result<SigningKey, Error> {
    let text =
        std::fs::read_to_string(p).map_err(|e| Error::Usage(format!("{}: {e}", p.display())))?;
    repoch_protocol::sign::signing_key_from_hex(&text)
        .ok_or_else(|| Error::Usage(format!("{}: not a key file (64 hex digits)", p.display())))
}

pub fn read_public(p: &Path) -> Result<PublicKey, Error> {
    let text =
        std::fs::read_to_string(p).map_err(|e| Error::Usage(format!("{}: {e}", p.display())))?;
    PublicKey::from_hex(&text)
        .filter(|k| k.verifying_key().is_some())
        .ok_or_else(|| Error::Usage(format!("{}: not a public key (64 hex digits)", p.display())))
}

/// A new key pair: `path` (secret, 0600, `O_EXCL`) and `path.pub`.
pub fn keygen(path: &Path) -> Result<PublicKey, Error> {
    let mut b = [0u8; 32];
    rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty())
        .map_err(|e| Error::Io(format!("getrandom: {e}")))?;
    let key = SigningKey::from_bytes(&b);
    let write = |p: &Path, text: String, mode: u32| -> Result<(), Error> {
        let fd = rustix::fs::open(
            p,
            OFlags::WRONLY | OFlags::CLOEXEC | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::EXCL,
            Mode::from_raw_mode(mode),
        )
        .map_err(|e| Error::Usage(format!("{}: {e}", p.display())))?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| Error::Io(e.to_string()))?;
        let mut f = std::fs::File::from(fd);
        f.write_all(text.as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| Error::Io(format!("{}: {e}", p.display())))
    };
    let public = PublicKey::from(&key.verifying_key());
    write(path, format!("{}\n", hex::encode(key.to_bytes())), 0o600)?;
    write(
        &PathBuf::from(format!("{}.pub", path.display())),
        format!("{}\n", public.to_hex()),
        0o644,
    )?;
    Ok(public)
}

//! `receive` against a scripted repochd on a real unix socket: every check the consumer
//! makes of what it is sent (the key-proof request, the challenge, the grant's signature,
//! key, deployment and intent, the checkpoint sent with it, and every fence fd against the
//! fence the grant names by device, inode and birth), the grant and its checkpoint made
//! durable beside `--out` and acknowledged (`persisted`), and the refusals and failures it
//! reports. The fake repochd signs with a test issuer key; the
//! consumer's side runs unchanged.

use std::io::Write as _;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use ed25519_dalek::SigningKey;
use repoch_consumer::{checkpoint_path, receive_over, receive_with, Error, Options, Received};
use repoch_protocol::cbor::{self, Canonical as _};
use repoch_protocol::checkpoint::{self, Checkpoint};
use repoch_protocol::grant::{Challenge, Grant, GrantFence, KeyProof, SignedGrant};
use repoch_protocol::limits::{FENCES_MAX, GRANT_FDS_MAX};
use repoch_protocol::wire::{frame, read_msg, write_msg, GrantMsg};
use repoch_protocol::{Birth, DeploymentId, Hash, Identity, PublicKey, Reason};

const DEP: DeploymentId = DeploymentId([0x3f; 16]);
const OTHER_DEP: DeploymentId = DeploymentId([0x3e; 16]);
const INTENT: Hash = Hash([1; 32]);

fn issuer() -> SigningKey {
    SigningKey::from_bytes(&[1; 32])
}
fn consumer() -> SigningKey {
    SigningKey::from_bytes(&[3; 32])
}
fn pk(k: &SigningKey) -> PublicKey {
    PublicKey::from(&k.verifying_key())
}

/// A tempdir with the fake repochd's socket, the grant's destination and fence files.
struct Fake {
    dir: tempfile::TempDir,
    listener: Option<UnixListener>,
}

impl Fake {
    fn new() -> Fake {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(dir.path().join("grant.sock")).unwrap();
        Fake {
            dir,
            listener: Some(listener),
        }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn out(&self) -> PathBuf {
        self.path("grant.cbor")
    }
    /// A new empty file: a fence, or the wrong file passed in its place.
    fn file(&self, name: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, b"").unwrap();
        p
    }
    fn options(&self, wait: Duration) -> Options {
        let mut o = Options::new(
            self.path("grant.sock"),
            &DEP.to_hex()[..6],
            consumer(),
            pk(&issuer()),
            self.out(),
        );
        o.wait = wait;
        o
    }
    /// Serves one connection with `script` on a thread.
    fn serve(&mut self, script: impl FnOnce(UnixStream) + Send + 'static) -> JoinHandle<()> {
        let l = self.listener.take().unwrap();
        std::thread::spawn(move || {
            let (c, _) = l.accept().unwrap();
            script(c)
        })
    }
    /// Serves `script`, runs `receive` against it and returns its result and the progress.
    fn run(
        mut self,
        script: impl FnOnce(UnixStream) + Send + 'static,
    ) -> (Result<Received, Error>, Vec<String>, Fake) {
        let server = self.serve(script);
        let mut seen = Vec::new();
        let r = receive_with(&self.options(Duration::from_secs(5)), &mut |s| {
            seen.push(s.to_owned())
        });
        server.join().unwrap();
        (r, seen, self)
    }
}

/// The file's identity as the issuer enrolls it: with its birth time where the file
/// system gives one (`statx`), which the consumer compares too.
fn identity(p: &Path) -> Identity {
    use rustix::fs::{AtFlags, StatxFlags};
    let st = rustix::fs::stat(p).unwrap();
    let sx = rustix::fs::statx(rustix::fs::CWD, p, AtFlags::empty(), StatxFlags::BTIME).unwrap();
    let birth = StatxFlags::from_bits_retain(sx.stx_mask)
        .contains(StatxFlags::BTIME)
        .then_some(Birth {
            sec: sx.stx_btime.tv_sec as u64,
            nsec: sx.stx_btime.tv_nsec,
        });
    Identity {
        dev: st.st_dev,
        ino: st.st_ino,
        uid: st.st_uid,
        gid: st.st_gid,
        mode: st.st_mode,
        birth,
    }
}

/// The checkpoint a faithful repochd sends with `DEP`'s grant: of `DEP`'s log, with its
/// four records (genesis, intent, consume, receipt), signed by the issuer key.
fn note() -> String {
    note_of(&checkpoint::origin(&DEP), 4, &issuer())
}

fn note_of(origin: &str, size: u64, key: &SigningKey) -> String {
    Checkpoint {
        origin: origin.into(),
        size,
        head: Hash([7; 32]),
    }
    .sign(checkpoint::KEY_NAME, key)
}

/// The grant a faithful repochd signs for `DEP`'s challenged intent, naming `fences`.
fn grant(fences: &[PathBuf]) -> Grant {
    Grant {
        deployment: DEP,
        intent: INTENT,
        consume: Hash([3; 32]),
        evidence: Hash([4; 32]),
        consumer_key: pk(&consumer()),
        ready_path: "/READY".into(),
        ready_sha256: Hash([5; 32]),
        fences: fences
            .iter()
            .map(|p| GrantFence {
                path: p.display().to_string(),
                identity: identity(p),
            })
            .collect(),
        frontier_seq: 0,
        frontier_hash: Hash([6; 32]),
        unknown_ops: vec![],
        issued_at: 0,
        listeners: vec![],
        fencing: None,
    }
}

fn signed(g: Grant, key: &SigningKey) -> Vec<u8> {
    SignedGrant::sign(g, key).to_bytes()
}

/// hello, prove (for `DEP`), proof, accepted: what repochd does before the operator acts.
fn admit(c: &mut UnixStream) {
    let Ok(GrantMsg::Hello { key, .. }) = read_msg::<GrantMsg>(c) else {
        panic!("no hello")
    };
    assert_eq!(key, pk(&consumer()));
    let proof = KeyProof {
        deployment: DEP,
        nonce: [7; 32],
        pid: 1,
        start_ticks: 1,
    };
    write_msg(c, &GrantMsg::Prove(proof.clone())).unwrap();
    let Ok(GrantMsg::Proof(sig)) = read_msg::<GrantMsg>(c) else {
        panic!("no proof")
    };
    assert!(proof.check(&key, &sig), "the key proof does not verify");
    write_msg(c, &GrantMsg::Accepted).unwrap();
}

/// `admit`, then the custody challenge for `DEP`'s `INTENT`, answered.
fn challenge(c: &mut UnixStream) {
    admit(c);
    let ch = Challenge {
        deployment: DEP,
        intent: INTENT,
        nonce: [2; 32],
    };
    write_msg(c, &GrantMsg::Challenge(ch.clone())).unwrap();
    let Ok(GrantMsg::Custody(sig)) = read_msg::<GrantMsg>(c) else {
        panic!("no custody answer")
    };
    assert!(ch.check(&pk(&consumer()), &sig), "custody does not verify");
}

/// Sends `payload` in pieces, each carrying its own fds (`SCM_RIGHTS`). Fails once the
/// consumer has closed (it refuses a frame before reading all of it).
fn send_with_fds(
    c: &mut UnixStream,
    pieces: &[(&[u8], Vec<BorrowedFd<'_>>)],
) -> std::io::Result<()> {
    for (bytes, fds) in pieces {
        let mut space = vec![
            std::mem::MaybeUninit::uninit();
            rustix::cmsg_space!(ScmRights(GRANT_FDS_MAX + 1))
        ];
        let mut anc = rustix::net::SendAncillaryBuffer::new(&mut space);
        assert!(anc.push(rustix::net::SendAncillaryMessage::ScmRights(fds)));
        let n = rustix::net::sendmsg(
            &*c,
            &[std::io::IoSlice::new(bytes)],
            &mut anc,
            rustix::net::SendFlags::NOSIGNAL,
        )?;
        c.write_all(&bytes[n..])?;
    }
    Ok(())
}

/// The grant message (with a faithful checkpoint) with `sent` as its fds, all on its first
/// byte; returns what the consumer answered, if anything.
fn dispatch(c: &mut UnixStream, bytes: Vec<u8>, sent: &[PathBuf]) -> Option<GrantMsg> {
    dispatch_with(c, bytes, note(), sent)
}

fn dispatch_with(
    c: &mut UnixStream,
    bytes: Vec<u8>,
    checkpoint: String,
    sent: &[PathBuf],
) -> Option<GrantMsg> {
    let files: Vec<std::fs::File> = sent
        .iter()
        .map(|p| std::fs::File::open(p).unwrap())
        .collect();
    let msg = GrantMsg::Grant {
        grant: bytes,
        checkpoint,
    };
    let payload = frame(&msg.to_bytes());
    let fds = files.iter().map(|f| f.as_fd()).collect();
    send_with_fds(c, &[(&payload[..1], fds), (&payload[1..], vec![])]).unwrap();
    // Stay until the consumer has judged the grant (it acknowledges it or closes); an
    // acknowledgement gets the last word, `granted` (docs/PROTOCOL.md).
    let ack = read_msg::<GrantMsg>(c).ok();
    if let Some(GrantMsg::Persisted { grant_sha256 }) = &ack {
        let _ = write_msg(
            c,
            &GrantMsg::Granted {
                grant_sha256: *grant_sha256,
            },
        );
    }
    ack
}

/// Like [`dispatch`], then `last` (or nothing, the connection closed) instead of the
/// last word `granted` naming the acknowledged grant.
fn dispatch_then(c: &mut UnixStream, bytes: Vec<u8>, sent: &[PathBuf], last: Option<GrantMsg>) {
    let files: Vec<std::fs::File> = sent
        .iter()
        .map(|p| std::fs::File::open(p).unwrap())
        .collect();
    let payload = frame(
        &GrantMsg::Grant {
            grant: bytes,
            checkpoint: note(),
        }
        .to_bytes(),
    );
    let fds = files.iter().map(|f| f.as_fd()).collect();
    send_with_fds(c, &[(&payload[..1], fds), (&payload[1..], vec![])]).unwrap();
    assert!(matches!(
        read_msg::<GrantMsg>(c),
        Ok(GrantMsg::Persisted { .. })
    ));
    if let Some(m) = last {
        write_msg(c, &m).unwrap();
    }
}

#[test]
fn an_acknowledged_grant_without_the_last_word_is_unacknowledged_and_kept() {
    // After `persisted`, anything but `granted` naming this grant (the connection closed,
    // a refusal, `granted` naming other bytes) is uncertain: the grant stays durable at
    // --out, and no new root may start (receive returns Unacknowledged, never Ok).
    let other = GrantMsg::Granted {
        grant_sha256: Hash::of(b"other bytes"),
    };
    let refused = GrantMsg::Refused {
        reason: Reason::ConsumerLost,
        detail: "not granted".into(),
    };
    for (last, why) in [
        (None, "closed the connection"),
        (Some(refused), "consumer-lost"),
        (Some(other), "not this grant"),
    ] {
        let fake = Fake::new();
        let fences = vec![fake.file("lock0")];
        let bytes = signed(grant(&fences), &issuer());
        let want = bytes.clone();
        let (r, _, fake) = fake.run(move |mut c| {
            challenge(&mut c);
            dispatch_then(&mut c, bytes, &fences, last);
        });
        match r {
            Err(Error::Unacknowledged { why: got, .. }) => {
                assert!(got.contains(why), "{why}: {got}")
            }
            Err(e) => panic!("{why}: expected Unacknowledged, got {e:?}"),
            Ok(_) => panic!("{why}: a grant without the last word was taken as granted"),
        }
        assert_eq!(
            std::fs::read(fake.out()).unwrap(),
            want,
            "{why}: the grant was not kept"
        );
    }
}

/// Nothing at `--out` nor beside it, and no temporary file left in its directory.
fn nothing_persisted(fake: &Fake) {
    assert!(!fake.out().exists(), "a refused grant was persisted");
    assert!(!checkpoint_path(&fake.out()).exists(), "its checkpoint was");
    let tmp: Vec<_> = std::fs::read_dir(fake.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(tmp.is_empty(), "{tmp:?}");
}

fn bad_grant(r: Result<Received, Error>) -> String {
    match r {
        Err(Error::BadGrant(m)) => m,
        Err(e) => panic!("expected a refused grant, got {e:?}"),
        Ok(g) => panic!("expected a refused grant, got {:?}", g.grant),
    }
}

#[test]
fn a_grant_whose_fds_are_the_fences_it_names_is_verified_persisted_and_its_fds_held() {
    // FENCES_MAX fences: the most a grant may carry, each fd checked.
    let fake = Fake::new();
    let fences: Vec<PathBuf> = (0..FENCES_MAX)
        .map(|i| fake.file(&format!("lock{i}")))
        .collect();
    let g = grant(&fences);
    let bytes = signed(g.clone(), &issuer());
    let (sent, want) = (fences.clone(), bytes.clone());
    let (r, seen, fake) = fake.run(move |mut c| {
        challenge(&mut c);
        // Acknowledged durable, naming the grant's sha256 (docs/PROTOCOL.md).
        let ack = dispatch(&mut c, want.clone(), &sent);
        assert_eq!(
            ack,
            Some(GrantMsg::Persisted {
                grant_sha256: Hash::of(&want)
            })
        );
    });
    let got = r.expect("a faithful grant is accepted");
    assert_eq!(seen, ["waiting", "proven", "accepted", "challenge"]);
    assert_eq!(got.grant, g);
    assert_eq!(got.bytes, bytes);
    assert_eq!(std::fs::read(fake.out()).unwrap(), bytes, "persisted");
    assert_eq!(
        std::fs::read_to_string(checkpoint_path(&fake.out())).unwrap(),
        note(),
        "its checkpoint beside it"
    );
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(fake.out()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(got.fences.len(), FENCES_MAX);
    for (fd, p) in got.fences.iter().zip(&fences) {
        let st = rustix::fs::fstat(fd).unwrap();
        assert_eq!(st.st_ino, identity(p).ino, "{}", p.display());
    }
}

#[test]
fn a_grant_whose_fence_fd_is_another_file_is_refused_and_nothing_persisted() {
    // The grant is correctly signed and names the two fences; the second fd passed with it
    // is of another file on the same file system. Only the fds differ from a faithful grant.
    let fake = Fake::new();
    let fences = vec![fake.file("lock0"), fake.file("lock1")];
    let sent = vec![fences[0].clone(), fake.file("other")];
    let bytes = signed(grant(&fences), &issuer());
    let (r, _, fake) = fake.run(move |mut c| {
        challenge(&mut c);
        dispatch(&mut c, bytes, &sent);
    });
    let m = bad_grant(r);
    assert!(m.contains("the grant names"), "{m}");
    nothing_persisted(&fake);
}

#[test]
fn a_grant_with_fewer_fds_than_fences_is_refused_and_nothing_persisted() {
    let fake = Fake::new();
    let fences = vec![fake.file("lock0"), fake.file("lock1")];
    let sent = vec![fences[0].clone()];
    let bytes = signed(grant(&fences), &issuer());
    let (r, _, fake) = fake.run(move |mut c| {
        challenge(&mut c);
        dispatch(&mut c, bytes, &sent);
    });
    let m = bad_grant(r);
    assert!(
        m.contains("1 fds received, the grant names 2 fences and 0 listeners"),
        "{m}"
    );
    nothing_persisted(&fake);
}

#[test]
fn more_than_grant_fds_max_fds_are_refused_as_they_arrive() {
    // GRANT_FDS_MAX fds (every fence and every listener a grant may carry) on the frame's
    // first byte and one more on its second: the consumer holds no more than that from
    // repochd, whatever the grant says.
    let fake = Fake::new();
    let fences: Vec<PathBuf> = (0..GRANT_FDS_MAX)
        .map(|i| fake.file(&format!("lock{i}")))
        .collect();
    let extra = fake.file("extra");
    let bytes = signed(grant(&fences[..FENCES_MAX]), &issuer());
    let (r, _, fake) = fake.run(move |mut c| {
        challenge(&mut c);
        let files: Vec<std::fs::File> = fences
            .iter()
            .map(|p| std::fs::File::open(p).unwrap())
            .collect();
        let extra = std::fs::File::open(extra).unwrap();
        let payload = frame(
            &GrantMsg::Grant {
                grant: bytes,
                checkpoint: note(),
            }
            .to_bytes(),
        );
        // The consumer refuses at the second piece and closes: the rest may not be sent.
        let _ = send_with_fds(
            &mut c,
            &[
                (&payload[..1], files.iter().map(|f| f.as_fd()).collect()),
                (&payload[1..2], vec![extra.as_fd()]),
                (&payload[2..], vec![]),
            ],
        );
        let _ = read_msg::<GrantMsg>(&mut c);
    });
    let m = bad_grant(r);
    assert_eq!(m, format!("more than {GRANT_FDS_MAX} fds"));
    nothing_persisted(&fake);
}

#[test]
fn a_listener_fd_that_is_not_its_listener_is_refused_and_nothing_persisted() {
    // The grant names one listener after its fence; the fd sent for it is, in turn, a
    // file, a socket of another type, on another port, on a single address, bound but not
    // listening, at another path: each refused, naming the listener. The right ones pass.
    use repoch_protocol::manifest::{Inet, Listener};
    use std::os::fd::OwnedFd;
    let port = |l: &std::net::TcpListener| l.local_addr().unwrap().port();
    let right = std::net::TcpListener::bind("[::]:0").unwrap();
    let other = std::net::TcpListener::bind("[::]:0").unwrap();
    let loopback = std::net::TcpListener::bind("[::1]:0").unwrap();
    let udp = std::net::UdpSocket::bind("[::]:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    // Bound, never listened on.
    let unlistened = |family, addr: &dyn Fn(&OwnedFd)| {
        let fd = rustix::net::socket_with(
            family,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap();
        addr(&fd);
        fd
    };
    let idle = unlistened(rustix::net::AddressFamily::INET6, &|fd| {
        let any = std::net::SocketAddrV6::new(std::net::Ipv6Addr::UNSPECIFIED, 0, 0, 0);
        rustix::net::bind(fd, &any).unwrap();
    });
    let idle_port = std::net::SocketAddr::try_from(rustix::net::getsockname(&idle).unwrap())
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a.sock"),
        dir.path().join("b.sock"),
        dir.path().join("c.sock"),
    );
    let unix = |p: &Path| Listener::Unix(p.to_str().unwrap().into());
    let at_a = UnixListener::bind(&a).unwrap();
    let at_b = UnixListener::bind(&b).unwrap();
    let c_addr = rustix::net::SocketAddrUnix::new(c.as_path()).unwrap();
    let idle_unix = unlistened(rustix::net::AddressFamily::UNIX, &|fd| {
        rustix::net::bind(fd, &c_addr).unwrap();
    });
    let p = port(&right);
    let any = Inet::any;
    let lo = std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
    let cases: Vec<(Listener, OwnedFd, &str)> = vec![
        (
            Listener::Tcp(any(p)),
            std::fs::File::open("/dev/null").unwrap().into(),
            "not a socket",
        ),
        (
            Listener::Tcp(any(udp_port)),
            udp.try_clone().unwrap().into(),
            "a socket of type",
        ),
        (
            Listener::Tcp(any(p)),
            other.try_clone().unwrap().into(),
            "bound to",
        ),
        // Enrolled for every address, sent bound to loopback only; enrolled for loopback,
        // sent bound to every address.
        (
            Listener::Tcp(any(port(&loopback))),
            loopback.try_clone().unwrap().into(),
            "bound to",
        ),
        (
            Listener::Tcp(Inet::at(lo, p)),
            right.try_clone().unwrap().into(),
            "bound to",
        ),
        (Listener::Tcp(any(idle_port)), idle, "not listening"),
        (unix(&a), at_b.try_clone().unwrap().into(), "bound to"),
        (unix(&c), idle_unix, "not listening"),
        (Listener::Tcp(any(p)), right.try_clone().unwrap().into(), ""),
        (
            Listener::Tcp(Inet::at(lo, port(&loopback))),
            loopback.try_clone().unwrap().into(),
            "",
        ),
        (
            Listener::Udp(any(udp_port)),
            udp.try_clone().unwrap().into(),
            "",
        ),
        (unix(&a), at_a.try_clone().unwrap().into(), ""),
    ];
    for (want, fd, why) in cases {
        let fake = Fake::new();
        let fences = vec![fake.file("lock0")];
        let mut g = grant(&fences);
        g.listeners = vec![want.clone()];
        let bytes = signed(g, &issuer());
        let sent = fences.clone();
        let (r, _, fake) = fake.run(move |mut c| {
            challenge(&mut c);
            let lock = std::fs::File::open(&sent[0]).unwrap();
            let payload = frame(
                &GrantMsg::Grant {
                    grant: bytes,
                    checkpoint: note(),
                }
                .to_bytes(),
            );
            send_with_fds(
                &mut c,
                &[
                    (&payload[..1], vec![lock.as_fd(), fd.as_fd()]),
                    (&payload[1..], vec![]),
                ],
            )
            .unwrap();
            if let Ok(GrantMsg::Persisted { grant_sha256 }) = read_msg::<GrantMsg>(&mut c) {
                let _ = write_msg(&mut c, &GrantMsg::Granted { grant_sha256 });
            }
        });
        if why.is_empty() {
            let got = r.unwrap();
            assert_eq!(got.listeners.len(), 1);
            assert_eq!(got.fences.len(), 1);
        } else {
            let m = bad_grant(r);
            assert!(m.contains(&format!("fd for {want}: {why}")), "{m}");
            nothing_persisted(&fake);
        }
    }
}

#[test]
fn a_grant_not_signed_by_the_pinned_issuer_is_refused() {
    let fake = Fake::new();
    let fences = vec![fake.file("lock0")];
    let bytes = signed(grant(&fences), &SigningKey::from_bytes(&[9; 32]));
    let (r, _, fake) = fake.run(move |mut c| {
        challenge(&mut c);
        dispatch(&mut c, bytes, &fences);
    });
    let m = bad_grant(r);
    assert!(m.contains("not signed by the pinned issuer key"), "{m}");
    nothing_persisted(&fake);
}

#[test]
fn a_grant_naming_another_consumer_key_is_refused() {
    let fake = Fake::new();
    let fences = vec![fake.file("lock0")];
    let mut g = grant(&fences);
    g.consumer_key = pk(&SigningKey::from_bytes(&[4; 32]));
    let bytes = signed(g, &issuer());
    let (r, _, fake) = fake.run(move |mut c| {
        challenge(&mut c);
        dispatch(&mut c, bytes, &fences);
    });
    assert_eq!(bad_grant(r), "the grant names another consumer key");
    nothing_persisted(&fake);
}

#[test]
fn a_grant_for_another_deployment_or_intent_than_challenged_is_refused() {
    for (deployment, intent) in [(OTHER_DEP, INTENT), (DEP, Hash([8; 32]))] {
        let fake = Fake::new();
        let fences = vec![fake.file("lock0")];
        let mut g = grant(&fences);
        g.deployment = deployment;
        g.intent = intent;
        let bytes = signed(g, &issuer());
        let (r, _, fake) = fake.run(move |mut c| {
            challenge(&mut c);
            dispatch(&mut c, bytes, &fences);
        });
        let m = bad_grant(r);
        assert!(m.contains("not for the challenged epoch"), "{m}");
        nothing_persisted(&fake);
    }
}

#[test]
fn a_grant_without_a_challenge_is_refused() {
    let fake = Fake::new();
    let fences = vec![fake.file("lock0")];
    let bytes = signed(grant(&fences), &issuer());
    let (r, _, fake) = fake.run(move |mut c| {
        admit(&mut c);
        dispatch(&mut c, bytes, &fences);
    });
    assert_eq!(bad_grant(r), "a grant without a challenge");
    nothing_persisted(&fake);
}

#[test]
fn a_key_proof_request_for_a_deployment_the_prefix_does_not_name_is_refused() {
    let (r, seen, _) = Fake::new().run(|mut c| {
        let _ = read_msg::<GrantMsg>(&mut c);
        let proof = KeyProof {
            deployment: OTHER_DEP,
            nonce: [7; 32],
            pid: 1,
            start_ticks: 1,
        };
        write_msg(&mut c, &GrantMsg::Prove(proof)).unwrap();
    });
    assert!(bad_grant(r).contains("key-proof request"));
    assert!(!seen.contains(&"proven".to_string()), "{seen:?}");
}

#[test]
fn a_second_key_proof_request_is_refused() {
    let (r, _, _) = Fake::new().run(|mut c| {
        admit(&mut c);
        let proof = KeyProof {
            deployment: DEP,
            nonce: [8; 32],
            pid: 1,
            start_ticks: 1,
        };
        write_msg(&mut c, &GrantMsg::Prove(proof)).unwrap();
        let _ = read_msg::<GrantMsg>(&mut c);
    });
    assert!(bad_grant(r).contains("key-proof request"));
}

#[test]
fn a_challenge_for_another_deployment_is_refused_unanswered() {
    let (r, seen, _) = Fake::new().run(|mut c| {
        admit(&mut c);
        let ch = Challenge {
            deployment: OTHER_DEP,
            intent: INTENT,
            nonce: [2; 32],
        };
        write_msg(&mut c, &GrantMsg::Challenge(ch)).unwrap();
        let _ = read_msg::<GrantMsg>(&mut c);
    });
    assert!(bad_grant(r).contains("challenge for deployment"));
    assert!(!seen.contains(&"challenge".to_string()), "{seen:?}");
}

#[test]
fn a_refusal_is_reported_with_its_reason_and_detail() {
    let (r, _, _) = Fake::new().run(|mut c| {
        admit(&mut c);
        let m = GrantMsg::Refused {
            reason: Reason::ConsumerRejected,
            detail: "uid 1000, enrolled 0".into(),
        };
        write_msg(&mut c, &m).unwrap();
    });
    match r {
        Err(e @ Error::Refused { .. }) => {
            assert_eq!(e.outcome(), repoch_protocol::Outcome::Refused);
            let Error::Refused { reason, detail } = e else {
                unreachable!()
            };
            assert_eq!(reason, Reason::ConsumerRejected);
            assert_eq!(detail, "uid 1000, enrolled 0");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_refusal_with_an_over_long_detail_is_still_a_refusal_with_its_reason() {
    let (r, _, _) = Fake::new().run(|mut c| {
        let _ = read_msg::<GrantMsg>(&mut c);
        // Over the decoder's bound for a refusal's detail: read by refusal_of, clipped.
        let v = cbor::array(vec![
            cbor::text("refused"),
            Reason::ConsumerRejected.to_value(),
            cbor::text(&"x".repeat(5000)),
        ]);
        c.write_all(&frame(&cbor::encode(&v))).unwrap();
    });
    match r {
        Err(Error::Refused { reason, detail }) => {
            assert_eq!(reason, Reason::ConsumerRejected);
            assert!(detail.len() < 5000 && detail.starts_with("xxx"), "{detail}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_malformed_message_shaped_like_a_refusal_is_not_read_as_one() {
    // Three items, a reason and a text, but not a refusal: malformed (uncertain, exit 3).
    let (r, _, _) = Fake::new().run(|mut c| {
        let _ = read_msg::<GrantMsg>(&mut c);
        let v = cbor::array(vec![
            cbor::text("refusal"),
            Reason::ConsumerRejected.to_value(),
            cbor::text(&"x".repeat(5000)),
        ]);
        c.write_all(&frame(&cbor::encode(&v))).unwrap();
    });
    match r {
        Err(e @ Error::Io(_)) => {
            assert!(e.to_string().contains("malformed message"), "{e}");
            assert_eq!(e.outcome(), repoch_protocol::Outcome::Uncertain);
        }
        other => panic!("expected a malformed message, got {other:?}"),
    }
}

#[test]
fn a_message_only_a_consumer_sends_is_unexpected_from_repochd() {
    let (r, _, _) = Fake::new().run(|mut c| {
        let _ = read_msg::<GrantMsg>(&mut c);
        write_msg(&mut c, &GrantMsg::Custody([0; 64])).unwrap();
    });
    match r {
        Err(Error::Io(m)) => assert_eq!(m, "unexpected message from repochd"),
        other => panic!("expected an unexpected message, got {other:?}"),
    }
}

#[test]
fn a_silent_repochd_ends_the_wait_at_the_deadline() {
    let mut fake = Fake::new();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let server = fake.serve(move |mut c| {
        let _ = read_msg::<GrantMsg>(&mut c);
        let _ = rx.recv(); // silent until the consumer gave up
    });
    let started = std::time::Instant::now();
    let r = receive_with(&fake.options(Duration::from_secs(1)), &mut |_| {});
    drop(tx);
    server.join().unwrap();
    match r {
        Err(Error::Io(m)) => assert!(m.contains("deadline"), "{m}"),
        other => panic!("expected the deadline, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_connection_reset_by_repochd_is_reported_as_a_read_error() {
    // repochd closes with the hello unread in its queue: the consumer's read fails with
    // ECONNRESET, which is reported at once (only EAGAIN and EINTR are retried).
    let (r, _, _) = Fake::new().run(|c| {
        let mut b = [0u8; 1];
        // Wait until the hello is there, leave it unread, close.
        rustix::net::recv(&c, &mut b, rustix::net::RecvFlags::PEEK).unwrap();
        drop(c);
    });
    match r {
        Err(Error::Io(m)) => assert!(m.starts_with("reading from repochd"), "{m}"),
        other => panic!("expected a read error, got {other:?}"),
    }
}

/// `admit`, then the custody challenge, after shutting the reading side: the consumer's
/// answer fails (a unix stream writer gets EPIPE from a peer that shut down reading).
fn challenge_unread(c: &mut UnixStream) {
    admit(c);
    c.shutdown(std::net::Shutdown::Read).unwrap();
    let ch = Challenge {
        deployment: DEP,
        intent: INTENT,
        nonce: [2; 32],
    };
    write_msg(c, &GrantMsg::Challenge(ch)).unwrap();
}

#[test]
fn a_refusal_queued_when_the_custody_answer_cannot_be_written_is_the_outcome() {
    // repochd challenges, then refuses (the recovery withheld before it signs a grant) and
    // stops reading: the custody answer fails (EPIPE), and the refusal already sent is read
    // and reported as such: refused, exit 2, not the uncertain failed write (exit 3).
    // (The fake shuts its reading side before the challenge, so the write fails every
    // time; a unix stream writer gets EPIPE from a peer that shut down reading.)
    let fake = Fake::new();
    let (r, seen, _fake) = fake.run(|mut c| {
        challenge_unread(&mut c);
        let m = GrantMsg::Refused {
            reason: Reason::EvidenceChanged,
            detail: "withheld before the grant".into(),
        };
        write_msg(&mut c, &m).unwrap();
    });
    assert!(seen.iter().any(|s| s == "challenge"), "{seen:?}");
    match r {
        Err(e @ Error::Refused { .. }) => {
            assert_eq!(e.outcome(), repoch_protocol::Outcome::Refused);
            let Error::Refused { reason, detail } = e else {
                unreachable!()
            };
            assert_eq!(reason, Reason::EvidenceChanged);
            assert_eq!(detail, "withheld before the grant");
        }
        other => panic!("expected the queued refusal, got {other:?}"),
    }
    // Nothing queued: the failed answer itself (uncertain: a grant may have been signed).
    let fake = Fake::new();
    let (r, _, _fake) = fake.run(|mut c| {
        challenge_unread(&mut c);
    });
    match r {
        Err(e @ Error::Io(_)) => {
            assert!(e.to_string().starts_with("custody: "), "{e}");
            assert_eq!(e.outcome(), repoch_protocol::Outcome::Uncertain);
        }
        other => panic!("expected a failed custody answer, got {other:?}"),
    }
}

#[test]
fn a_refusal_sent_before_the_hello_could_be_written_is_still_read() {
    // repochd refuses a peer at once and closes before the consumer's hello is written: the
    // hello fails (EPIPE), and the refusal already sent is read and reported as such.
    let fake = Fake::new();
    let (ours, mut theirs) = UnixStream::pair().unwrap();
    let m = GrantMsg::Refused {
        reason: Reason::DeploymentUnknown,
        detail: "no deployment 3f3f3f".into(),
    };
    write_msg(&mut theirs, &m).unwrap();
    drop(theirs);
    let r = receive_over(ours, &fake.options(Duration::from_secs(10)), &mut |_| {});
    match r {
        Err(Error::Refused { reason, detail }) => {
            assert_eq!(reason, Reason::DeploymentUnknown);
            assert_eq!(detail, "no deployment 3f3f3f");
        }
        other => panic!("expected the refusal, got {other:?}"),
    }
    // Closed with nothing sent: the failed hello itself is reported.
    let (ours, theirs) = UnixStream::pair().unwrap();
    drop(theirs);
    match receive_over(ours, &fake.options(Duration::from_secs(10)), &mut |_| {}) {
        Err(Error::Io(m)) => assert!(m.starts_with("hello: "), "{m}"),
        other => panic!("expected a failed hello, got {other:?}"),
    }
}

#[test]
fn an_existing_grant_file_is_refused_before_connecting() {
    // A usage error (exit 64) before the socket is touched: a bad --out costs no epoch.
    for existing in ["grant.cbor", "grant.cbor.checkpoint"] {
        let fake = Fake::new();
        std::fs::write(fake.path(existing), b"an earlier grant").unwrap();
        let r = receive_with(&fake.options(Duration::from_secs(5)), &mut |_| {});
        match r {
            Err(e @ Error::Usage(_)) => {
                assert_eq!(e.outcome(), repoch_protocol::Outcome::Usage, "{e}")
            }
            other => panic!("expected a usage error, got {other:?}"),
        }
        let l = fake.listener.as_ref().unwrap();
        l.set_nonblocking(true).unwrap();
        let e = l.accept().expect_err("the consumer connected");
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
        assert_eq!(
            std::fs::read(fake.path(existing)).unwrap(),
            b"an earlier grant"
        );
    }
}

#[test]
fn a_grant_file_appearing_while_connected_is_never_overwritten() {
    // --out was free when checked; a file appears there before the grant comes: the grant
    // is not moved over it (RENAME_NOREPLACE) and no temporary file is left.
    let fake = Fake::new();
    let fences = vec![fake.file("lock0")];
    let bytes = signed(grant(&fences), &issuer());
    let out = fake.out();
    let (r, _, fake) = fake.run(move |mut c| {
        challenge(&mut c);
        std::fs::write(&out, b"an earlier grant").unwrap();
        assert_eq!(dispatch(&mut c, bytes, &fences), None, "acknowledged");
    });
    match r {
        Err(e @ Error::Persist(_)) => assert_eq!(e.outcome(), repoch_protocol::Outcome::Uncertain),
        other => panic!("expected a persist failure, got {other:?}"),
    }
    assert_eq!(std::fs::read(fake.out()).unwrap(), b"an earlier grant");
    let tmp: Vec<_> = std::fs::read_dir(fake.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(tmp.is_empty(), "{tmp:?}");
}

#[test]
fn a_grant_whose_fence_fd_is_the_named_inode_born_at_another_time_is_refused() {
    // Same device and inode number, another birth: a recreated file reusing the inode
    // number is another object (docs/THREAT-MODEL.md), as the issuer compares enrolled ones.
    let fake = Fake::new();
    let fences = vec![fake.file("lock0")];
    let mut g = grant(&fences);
    let b = g.fences[0].identity.birth;
    g.fences[0].identity.birth = Some(Birth {
        sec: b.map_or(1, |b| b.sec.wrapping_sub(1)),
        nsec: b.map_or(0, |b| b.nsec),
    });
    let bytes = signed(g, &issuer());
    let (r, _, fake) = fake.run(move |mut c| {
        challenge(&mut c);
        assert_eq!(dispatch(&mut c, bytes, &fences), None);
    });
    let m = bad_grant(r);
    assert!(m.contains("the grant names inode"), "{m}");
    nothing_persisted(&fake);
}

#[test]
fn a_grant_whose_checkpoint_is_not_the_issuers_of_its_log_is_refused() {
    // Each checkpoint fails exactly one check: the signing key, the origin (another
    // deployment's log), the size (fewer records than a receipted log has).
    let cases = [
        (
            note_of(
                &checkpoint::origin(&DEP),
                4,
                &SigningKey::from_bytes(&[9; 32]),
            ),
            "no signature line verifies",
        ),
        (
            note_of(&checkpoint::origin(&OTHER_DEP), 4, &issuer()),
            "its checkpoint is of",
        ),
        (
            note_of(&checkpoint::origin(&DEP), 3, &issuer()),
            "its checkpoint has 3 records, a receipted log at least 4",
        ),
        ("not a note".to_string(), "its checkpoint: malformed note"),
    ];
    for (bad, why) in cases {
        let fake = Fake::new();
        let fences = vec![fake.file("lock0")];
        let bytes = signed(grant(&fences), &issuer());
        let (r, _, fake) = fake.run(move |mut c| {
            challenge(&mut c);
            assert_eq!(dispatch_with(&mut c, bytes, bad, &fences), None);
        });
        let m = bad_grant(r);
        assert!(m.contains(why), "{why}: {m}");
        nothing_persisted(&fake);
    }
    // Five records (a later append) is still a receipted log.
    let fake = Fake::new();
    let fences = vec![fake.file("lock0")];
    let bytes = signed(grant(&fences), &issuer());
    let (r, _, _) = fake.run(move |mut c| {
        challenge(&mut c);
        let five = note_of(&checkpoint::origin(&DEP), 5, &issuer());
        assert!(dispatch_with(&mut c, bytes, five, &fences).is_some());
    });
    r.unwrap();
}

#[test]
fn the_cli_persists_the_grant_at_a_path_relative_to_its_working_directory() {
    // repoch-consume receive --out grant.cbor, run in the tempdir: the grant and its
    // directory are made durable there.
    let mut fake = Fake::new();
    let fences = vec![fake.file("lock0")];
    let bytes = signed(grant(&fences), &issuer());
    let want = bytes.clone();
    std::fs::write(fake.path("c.key"), hex::encode(consumer().to_bytes())).unwrap();
    std::fs::write(fake.path("i.pub"), pk(&issuer()).to_hex()).unwrap();
    let server = fake.serve(move |mut c| {
        challenge(&mut c);
        dispatch(&mut c, bytes, &fences);
    });
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_repoch-consume"))
        .current_dir(fake.dir.path())
        .args(["--json", "receive", "--deployment", &DEP.to_hex()[..6]])
        .args([
            "--key",
            "c.key",
            "--issuer-key",
            "i.pub",
            "--out",
            "grant.cbor",
        ])
        .args(["--socket", "grant.sock", "--wait", "10"])
        .output()
        .unwrap();
    server.join().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        repoch_protocol::Outcome::from_exit(out.status.code().unwrap_or(-1)),
        Some(repoch_protocol::Outcome::Success),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(fake.out()).unwrap(), want);
    assert_eq!(
        std::fs::read_to_string(fake.path("grant.cbor.checkpoint")).unwrap(),
        note()
    );
}

#[test]
fn undumpable_makes_the_consumer_process_not_dumpable() {
    // What keeps a process of the consumer's uid from copying its connection
    // (pidfd_getfd, ptrace): the receiving functions call it before connecting.
    repoch_consumer::undumpable().unwrap();
    assert_eq!(
        rustix::process::dumpable_behavior().unwrap(),
        rustix::process::DumpableBehavior::NotDumpable
    );
}

#[test]
fn exactly_grant_fds_max_fds_are_read_and_judged_against_the_grant() {
    // GRANT_FDS_MAX fds in one piece is the most a grant may carry: they are all taken and
    // compared with the grant (here it names FENCES_MAX fences and no listener), not
    // refused as too many.
    let fake = Fake::new();
    let files: Vec<PathBuf> = (0..GRANT_FDS_MAX)
        .map(|i| fake.file(&format!("lock{i}")))
        .collect();
    let bytes = signed(grant(&files[..FENCES_MAX]), &issuer());
    let (r, _, fake) = fake.run(move |mut c| {
        challenge(&mut c);
        dispatch(&mut c, bytes, &files);
    });
    let m = bad_grant(r);
    assert_eq!(
        m,
        format!(
            "{GRANT_FDS_MAX} fds received, the grant names {FENCES_MAX} fences and 0 listeners"
        )
    );
    nothing_persisted(&fake);
}

#[test]
fn undumpable_leaves_the_process_not_dumpable() {
    // What receive_with and receive_over call first, and the CLI before it reads a key:
    // then no process of the consumer's uid can ptrace it or open its /proc/PID/fd and take
    // a copy of the connection (docs/THREAT-MODEL.md, "The consumer's connection").
    repoch_consumer::undumpable().unwrap();
    assert_eq!(
        rustix::process::dumpable_behavior().unwrap(),
        rustix::process::DumpableBehavior::NotDumpable
    );
}

//! The issuance state machine (docs/ARCHITECTURE.md, "Issuance"), synchronous and typed.
//!
//! `Reserved → Observed → Connected → Intended → Custodied → Verified1 → Consumed →
//! Receipted → Verified2 → Dispatched → Granted`: each step takes the previous state by value and
//! each state has only the next step's method. Only [`Verified1`] (what
//! [`Custodied::verify`] returns) has `consume`, and only [`Verified2`] (what
//! [`Receipted::verify`] returns) has `dispatch`, so skipping or reusing a final
//! verification does not compile (`issuer/tests/compile-fail/`). `connect` takes only an
//! [`Authenticated`] peer, which only [`Expected::authenticate`] builds, for the issuance
//! that made the `Expected`.
//!
//! Before the intent, a refusal writes nothing. From the intent on the epoch is used: a
//! refusal appends a best-effort `withheld{reason}`, sends no grant, and the epoch is never
//! issued again. A failed append (write or fsync) is never retried: the outcome is
//! uncertain and the caller must stop issuing.
#![allow(missing_debug_implementations)] // the states hold a boxed progress callback

use std::marker::PhantomData;
use std::os::fd::OwnedFd;

use ed25519_dalek::SigningKey;
use repoch_protocol::cbor::Canonical;
use repoch_protocol::epoch::{
    Classification, Contender, EpochBody, EpochRecord, SignedEpochRecord,
};
use repoch_protocol::fleet::{FencingToken, FleetClaim, FleetId};
use repoch_protocol::grant::{Challenge, ConsumerPeer, Grant, SignedGrant};
use repoch_protocol::manifest::Manifest;
use repoch_protocol::wire::{AdminEvent, Verdict};
use repoch_protocol::{DeploymentId, Hash, Identity, Reason};

use crate::fleet::Fleet;
use crate::layout::Layout;
use crate::log::{AppendError, EpochLog};
use crate::observe::{Fences, Observation, Observe};
use crate::refusal::Refusal;
use crate::stop::Stop;
use crate::storage::Storage;
use crate::store::{read_epoch_log, read_only_refusal};
use crate::world::{Host, World};

mod after_intent;
mod before_intent;

pub use after_intent::*;
pub use before_intent::*;

/// How an issuance ended when it did not grant.
#[derive(Debug)]
pub struct Ended {
    pub outcome: Verdict,
    pub refusals: Vec<Refusal>,
    pub detail: String,
    /// The store failed a write or sync: stop issuing until restarted.
    pub poisoned: bool,
    /// Once its intent is durable, the epoch as this issuance left it (its log as last
    /// appended and read back: `intended`, `consumed`, `receipted`, `withheld`): used, never
    /// issued again. `None` when it wrote nothing, or its intent may not be durable.
    pub used: Option<Classification>,
}

impl Ended {
    fn refused(refusals: Vec<Refusal>, detail: impl Into<String>) -> Ended {
        Ended {
            outcome: Verdict::Refused,
            refusals,
            detail: detail.into(),
            poisoned: false,
            used: None,
        }
    }
    fn one(r: Refusal) -> Ended {
        let outcome = if r.reason == Reason::IssuerBusy {
            Verdict::Busy
        } else {
            Verdict::Refused
        };
        let detail = r.to_string();
        Ended {
            outcome,
            refusals: vec![r],
            detail,
            poisoned: false,
            used: None,
        }
    }
}

/// Why a call over the consumer link failed: the error below it kept as the source, or
/// what the peer did that it must not. Its text becomes a refusal's `observed`.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// `what` failed because of `source` (the connection's I/O, a deadline, a pidfd).
    #[error("{what}: {source}")]
    Failed {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The peer as the OS describes it (`repoch-sys`).
    #[error(transparent)]
    Peer(#[from] repoch_sys::error::Error),
    /// The peer said or did what it must not (the text says what).
    #[error("{0}")]
    Said(String),
}

impl LinkError {
    /// `what` failed because of `e`.
    pub fn failed(
        what: impl std::fmt::Display,
        e: impl std::error::Error + Send + Sync + 'static,
    ) -> LinkError {
        LinkError::Failed {
            what: what.to_string(),
            source: Box::new(e),
        }
    }
}

impl From<String> for LinkError {
    fn from(s: String) -> LinkError {
        LinkError::Said(s)
    }
}

impl From<&str> for LinkError {
    fn from(s: &str) -> LinkError {
        LinkError::Said(s.to_owned())
    }
}

/// The consumer connection, as the issuance needs it. The daemon implements it over the
/// grant socket; every call is bounded by a timeout there.
pub trait ConsumerLink {
    /// Sends the challenge and returns the consumer's custody signature.
    fn challenge(&mut self, c: &Challenge) -> Result<[u8; 64], LinkError>;
    /// Sends the signed grant with the fence fds (`SCM_RIGHTS`).
    /// `checkpoint`: the log's checkpoint with the receipt, a signed note
    /// (docs/AUDITOR.md, "Checkpoints"), sent with the grant.
    fn dispatch(
        &mut self,
        grant: &[u8],
        checkpoint: &str,
        fences: &[&OwnedFd],
    ) -> Result<(), LinkError>;
    /// Tells the consumer it gets nothing. Best effort.
    fn refuse(&mut self, reason: Reason, detail: &str);
    /// Describes the connected peer again, through the pidfd pinned at connect: what the
    /// intent and the dispatch must still find (an exec after connecting changes it).
    fn describe_again(&mut self) -> Result<ConsumerPeer, LinkError>;
    /// Whether the peer pinned at connect is still there, without waiting: its process has
    /// not exited and its end of the connection is open. Asked right before `consume` and
    /// before `dispatch`, so a consumer that died is never consumed for nor sent a grant.
    fn alive(&mut self) -> Result<(), LinkError>;
    /// After the dispatch: waits, bounded by the link, for the consumer's acknowledgement
    /// that its grant file is durable (`persisted`), and returns the sha256 it names.
    fn acknowledgement(&mut self) -> Result<Hash, LinkError>;
    /// The handoff's last word, once the acknowledgement named the dispatched grant: the
    /// pinned consumer must still live (`consumer-lost` otherwise) and alone hold the
    /// connection (`consumer-rejected`), then `granted` naming `grant_sha256` is sent within
    /// `LAST_WORD_SECONDS_MAX` of the acknowledgement. Only a word sent makes the outcome
    /// `granted`; the consumer starts the new root only on it.
    fn last_word(&mut self, grant_sha256: &Hash) -> Result<(), (Reason, LinkError)>;
    /// Whether the operator who asked for this recovery (its `repoch recover`) is still
    /// connected, without waiting. Asked right before the intent, and before the fleet claim
    /// and `consume`: an interrupted recover is cancelled where nothing (more) is written.
    fn operator_present(&mut self) -> Result<(), LinkError>;
}

/// Right before the intent, and before the fleet claim and `consume`: an operator whose
/// `repoch recover` went away ends the recovery `recover-cancelled`.
fn operator_present<C: ConsumerLink>(consumer: &mut C, when: &str) -> Result<(), Refusal> {
    consumer.operator_present().map_err(|e| {
        Refusal::new(
            Reason::RecoverCancelled,
            "the operator's repoch recover",
            "connected",
            format!("{e} {when}"),
        )
    })
}

/// Before `consume` and `dispatch`: a consumer that went away ends `consumer-lost`.
fn still_alive<C: ConsumerLink>(consumer: &mut C, peer: &ConsumerPeer) -> Result<(), Refusal> {
    consumer.alive().map_err(|e| {
        Refusal::new(
            Reason::ConsumerLost,
            format!("grant socket peer pid {}", peer.pid),
            "alive, its connection open",
            e.to_string(),
        )
    })
}

/// The peer described again must be the peer authenticated at connect, field by field.
fn same_peer<C: ConsumerLink>(
    consumer: &mut C,
    authenticated: &ConsumerPeer,
) -> Result<(), Refusal> {
    let subject = format!("grant socket peer pid {}", authenticated.pid);
    let now = consumer.describe_again().map_err(|e| {
        Refusal::new(
            Reason::ConsumerRejected,
            &subject,
            "the peer authenticated at connect",
            e.to_string(),
        )
    })?;
    if &now == authenticated {
        return Ok(());
    }
    let (want, got) = if now.exe != authenticated.exe || now.exe_sha256 != authenticated.exe_sha256
    {
        (
            format!(
                "executable ino {} sha256 {}",
                authenticated.exe.ino, authenticated.exe_sha256
            ),
            format!("executable ino {} sha256 {}", now.exe.ino, now.exe_sha256),
        )
    } else if now.cgroup != authenticated.cgroup {
        (
            format!("cgroup {}", authenticated.cgroup),
            format!("cgroup {}", now.cgroup),
        )
    } else {
        (
            format!(
                "pid {} uid {} gid {}",
                authenticated.pid, authenticated.uid, authenticated.gid
            ),
            format!("pid {} uid {} gid {}", now.pid, now.uid, now.gid),
        )
    };
    Err(Refusal::new(Reason::ConsumerRejected, subject, want, got))
}

/// Where progress goes (the admin connection).
pub type Progress = Box<dyn FnMut(AdminEvent) + Send>;

/// What every state carries: the deployment, the storage its log is on, the held issuer
/// lock, the observer and the fences.
struct Common<W: World> {
    id: DeploymentId,
    manifest: Manifest,
    storage: W::Storage,
    log: EpochLog<<W::Storage as Storage>::File>,
    key: SigningKey,
    observer: W::Observer,
    fences: Fences,
    progress: Progress,
    /// repochd's stop, asked right before the intent.
    stop: Stop,
    /// The fleet registry, when the manifest names one (crate::fleet).
    fleet: Option<Box<dyn Fleet>>,
    /// The issuer lock, held while the issuance lives (last field: dropped last).
    _lock: W::Lock,
}

impl<W: World> Common<W> {
    fn say(&mut self, step: &str, detail: impl Into<String>) {
        (self.progress)(AdminEvent::Progress {
            step: step.into(),
            detail: detail.into(),
        });
    }

    fn facts(&mut self, o: &Observation) {
        for f in &o.facts {
            (self.progress)(AdminEvent::Fact(f.clone()));
        }
    }

    /// The epoch once this issuance's intent is durable (see [`Ended::used`]).
    fn used(&self) -> Option<Classification> {
        Some(self.log.report().classification).filter(|k| *k != Classification::Enrolled)
    }

    /// Appends a record and reports it; any failure poisons the store (never retried).
    fn append(&mut self, body: EpochBody) -> Result<Hash, AppendError> {
        let kind = body.kind().as_str();
        let log = &mut self.log;
        let rec = EpochRecord {
            deployment: self.id,
            seq: log.next_seq(),
            prev: log.last_hash(),
            body,
        };
        let seq = rec.seq;
        let signed = SignedEpochRecord::sign(rec, &self.key);
        let hash = log.append(&mut self.storage, &signed)?;
        (self.progress)(AdminEvent::Record {
            kind: kind.into(),
            seq,
            hash,
        });
        Ok(hash)
    }
}

/// After the intent: append `withheld`, refuse the consumer, end.
fn withhold<C: ConsumerLink, W: World>(mut c: Common<W>, consumer: &mut C, r: Refusal) -> Ended {
    consumer.refuse(r.reason, &r.detail());
    let detail =
        repoch_protocol::types::clip(&r.to_string(), repoch_protocol::limits::TEXT_BYTES_MAX);
    match c.append(EpochBody::Withheld {
        reason: r.reason,
        detail,
    }) {
        Ok(_) => Ended {
            outcome: Verdict::Refused,
            detail: format!("withheld: {r}"),
            refusals: vec![r],
            poisoned: false,
            used: c.used(),
        },
        Err(e) => Ended {
            outcome: Verdict::Uncertain,
            detail: format!("{r}; then the withheld record could not be written: {e}"),
            refusals: vec![r],
            poisoned: true,
            used: c.used(),
        },
    }
}

fn uncertain<W: World>(c: &Common<W>, e: AppendError, what: &str) -> Ended {
    Ended {
        outcome: Verdict::Uncertain,
        refusals: vec![Refusal::new(
            Reason::StorePoisoned,
            what,
            "durable",
            e.to_string(),
        )],
        detail: format!("{what}: {e}; the epoch is uncertain and preserved; issuance stopped"),
        poisoned: true,
        used: c.used(),
    }
}

/// Appends a publication record (intent, consume, receipt). A failure is never retried:
/// the consumer is told, and the outcome is uncertain.
fn publish<C: ConsumerLink, W: World>(
    c: &mut Common<W>,
    consumer: &mut C,
    body: EpochBody,
) -> Result<Hash, Ended> {
    let kind = body.kind().as_str();
    c.append(body).map_err(|e| {
        consumer.refuse(
            Reason::StorePoisoned,
            &format!("the {kind} record could not be written"),
        );
        uncertain(c, e, kind)
    })
}

/// Why an epoch in state `class` can never be issued (`None` only for `enrolled`): its
/// reason (docs/REASONS.md), naming the state and, for a log that does not verify, where and
/// why. The one text of the refusal, at reserve and wherever repochd tells a consumer.
pub fn epoch_refusal(
    id: DeploymentId,
    class: Classification,
    problem: Option<&(u64, String)>,
) -> Option<Refusal> {
    let reason = class.refusal()?;
    let observed = match problem {
        Some((at, why)) => format!("{} (offset {at}: {why})", class.as_str()),
        None => class.as_str().to_owned(),
    };
    Some(Refusal::new(
        reason,
        format!("deployment {id}"),
        "enrolled",
        observed,
    ))
}

/// The end of a granted issuance (the consumer acknowledged a durable grant): the grant
/// bytes, for the operator's summary.
#[derive(Debug)]
pub struct Granted {
    pub grant: Vec<u8>,
    /// The epoch as the issuance left it (`receipted`): used, never issued again.
    pub epoch: Classification,
}

/// Runs all eleven steps in order, on the host (the real file system, `flock`, the live
/// observers).
#[allow(clippy::too_many_arguments)]
pub fn run<C: ConsumerLink>(
    layout: &Layout,
    stop: Stop,
    key: SigningKey,
    id: DeploymentId,
    approve_ready: Option<Hash>,
    contender: Contender,
    progress: Progress,
    wait: impl for<'id> FnOnce(
        &Expected<'id>,
        &mut dyn FnMut(AdminEvent),
    ) -> Result<(C, Authenticated<'id>), Refusal>,
) -> Result<Granted, Ended> {
    let mut host = Host {
        layout: layout.clone(),
        stop,
    };
    run_in(&mut host, key, id, approve_ready, contender, progress, wait)
}

/// Runs all eleven steps in order in any [`World`]: the code the host runs, and the code
/// the checker (`issuer/tests/checker.rs`) explores.
pub fn run_in<W: World, C: ConsumerLink>(
    world: &mut W,
    key: SigningKey,
    id: DeploymentId,
    approve_ready: Option<Hash>,
    contender: Contender,
    progress: Progress,
    wait: impl for<'id> FnOnce(
        &Expected<'id>,
        &mut dyn FnMut(AdminEvent),
    ) -> Result<(C, Authenticated<'id>), Refusal>,
) -> Result<Granted, Ended> {
    use crate::barrier::reach;
    let reserved = Reserved::reserve(world, key, id, approve_ready, progress)?;
    reach("after-reserve");
    let observed = reserved.observe()?;
    reach("after-observe");
    let connected = observed.connect(wait)?;
    reach("after-connect");
    let intended = connected.intent(contender)?;
    reach("after-intent");
    let custodied = intended.custody()?;
    reach("after-custody");
    let verified = custodied.verify()?;
    reach("after-final-1");
    let consumed = verified.consume()?;
    reach("after-consume");
    let receipted = consumed.receipt()?;
    reach("after-receipt");
    let verified = receipted.verify()?;
    reach("after-final-2");
    let dispatched = verified.dispatch()?;
    reach("after-dispatch");
    dispatched.acknowledged()
}

#[cfg(test)]
mod tests {
    //! `same_peer` (docs/ARCHITECTURE.md, "Issuance", steps 3 and 9): the peer described
    //! again is compared field by field with the one authenticated, and a refusal names the
    //! field that changed. The link here only returns descriptions; the comparison is the
    //! code under test.
    use super::*;
    use repoch_protocol::Birth;

    struct Described(Result<ConsumerPeer, LinkError>);

    impl ConsumerLink for Described {
        fn challenge(&mut self, _: &Challenge) -> Result<[u8; 64], LinkError> {
            unreachable!()
        }
        fn dispatch(&mut self, _: &[u8], _: &str, _: &[&OwnedFd]) -> Result<(), LinkError> {
            unreachable!()
        }
        fn refuse(&mut self, _: Reason, _: &str) {}
        fn describe_again(&mut self) -> Result<ConsumerPeer, LinkError> {
            match &self.0 {
                Ok(p) => Ok(p.clone()),
                Err(e) => Err(e.to_string().into()),
            }
        }
        fn alive(&mut self) -> Result<(), LinkError> {
            unreachable!()
        }
        fn last_word(&mut self, _: &Hash) -> Result<(), (Reason, LinkError)> {
            unreachable!()
        }
        fn acknowledgement(&mut self) -> Result<Hash, LinkError> {
            unreachable!()
        }
        fn operator_present(&mut self) -> Result<(), LinkError> {
            unreachable!()
        }
    }

    fn peer() -> ConsumerPeer {
        ConsumerPeer {
            pid: 77,
            uid: 1000,
            gid: 1001,
            exe: Identity {
                dev: 2049,
                ino: 4242,
                uid: 0,
                gid: 0,
                mode: 0o100755,
                birth: Some(Birth { sec: 1, nsec: 2 }),
            },
            exe_sha256: Hash([9; 32]),
            cgroup: "/system.slice/supervisor.service".into(),
        }
    }

    /// The refusal for a peer now described as `now`: (expected, observed).
    fn refused(now: Result<ConsumerPeer, LinkError>) -> (String, String) {
        let r = same_peer(&mut Described(now), &peer()).unwrap_err();
        assert_eq!(r.reason, Reason::ConsumerRejected, "{r}");
        assert_eq!(r.subject, "grant socket peer pid 77");
        (r.expected, r.observed)
    }

    #[test]
    fn the_same_peer_passes() {
        same_peer(&mut Described(Ok(peer())), &peer()).unwrap();
    }

    #[test]
    fn another_executable_object_or_digest_is_named_as_the_executable() {
        let exe = |ino: u64, sha: u8| format!("executable ino {ino} sha256 {}", Hash([sha; 32]));
        let mut p = peer();
        p.exe.ino = 4243;
        assert_eq!(refused(Ok(p)), (exe(4242, 9), exe(4243, 9)));
        let mut p = peer();
        p.exe_sha256 = Hash([8; 32]);
        assert_eq!(refused(Ok(p)), (exe(4242, 9), exe(4242, 8)));
        // Another object with the same inode number (a new birth), cgroup moved too: the
        // executable is what is named.
        let mut p = peer();
        p.exe.birth = Some(Birth { sec: 3, nsec: 0 });
        p.cgroup = "/user.slice".into();
        assert_eq!(refused(Ok(p)), (exe(4242, 9), exe(4242, 9)));
    }

    #[test]
    fn another_cgroup_is_named_as_the_cgroup() {
        let mut p = peer();
        p.cgroup = "/user.slice".into();
        assert_eq!(
            refused(Ok(p)),
            (
                "cgroup /system.slice/supervisor.service".into(),
                "cgroup /user.slice".into()
            )
        );
    }

    #[test]
    fn another_pid_uid_or_gid_is_named_as_the_credentials() {
        let mut p = peer();
        p.gid = 0;
        assert_eq!(
            refused(Ok(p)),
            (
                "pid 77 uid 1000 gid 1001".into(),
                "pid 77 uid 1000 gid 0".into()
            )
        );
    }

    #[test]
    fn a_peer_that_cannot_be_described_again_is_refused_with_why() {
        assert_eq!(
            refused(Err("the process exited".into())),
            (
                "the peer authenticated at connect".into(),
                "the process exited".into()
            )
        );
    }
    mod authenticate {
        //! `Expected::authenticate` (docs/ARCHITECTURE.md, "Issuance", step 3): a peer that fails
        //! exactly one check — uid, gid, executable identity, executable digest, cgroup, key — is
        //! refused `consumer-rejected` naming that field, and only a peer passing every check is
        //! accepted. Each case differs from the accepted peer in one field alone.
        use super::super::*;
        use repoch_protocol::{Birth, PublicKey};

        const KEY: PublicKey = PublicKey([3; 32]);

        fn exe() -> Identity {
            Identity {
                dev: 2049,
                ino: 4242,
                uid: 0,
                gid: 0,
                mode: 0o100755,
                birth: Some(Birth {
                    sec: 1_700_000_000,
                    nsec: 5,
                }),
            }
        }

        fn expected() -> Expected<'static> {
            Expected {
                brand: PhantomData,
                deployment: DeploymentId([0xd5; 16]),
                uid: 1000,
                gid: 1001,
                key: KEY,
                exe: Some((exe(), Hash([9; 32]))),
                cgroup: Some("/system.slice/billing-supervisor.service".into()),
            }
        }

        /// The peer `expected()` accepts.
        fn peer() -> ConsumerPeer {
            ConsumerPeer {
                pid: 77,
                uid: 1000,
                gid: 1001,
                exe: exe(),
                exe_sha256: Hash([9; 32]),
                cgroup: "/system.slice/billing-supervisor.service".into(),
            }
        }

        /// Refused `consumer-rejected` about the peer, expected and observed naming `field`.
        fn rejected(
            e: &Expected<'_>,
            p: &ConsumerPeer,
            key: &PublicKey,
            field: &str,
        ) -> (String, String) {
            let r = e
                .authenticate(p, key)
                .err()
                .unwrap_or_else(|| panic!("a peer failing {field} was accepted"));
            assert_eq!(r.reason, Reason::ConsumerRejected, "{r}");
            assert_eq!(r.subject, "grant socket peer pid 77", "{r}");
            assert!(r.expected.starts_with(field), "{field}: {r}");
            assert!(r.observed.starts_with(field), "{field}: {r}");
            (r.expected, r.observed)
        }

        #[test]
        fn the_peer_passing_every_check_is_accepted() {
            expected().authenticate(&peer(), &KEY).unwrap();
            // A descendant of the enrolled cgroup is within it.
            let mut p = peer();
            p.cgroup = "/system.slice/billing-supervisor.service/worker".into();
            expected().authenticate(&p, &KEY).unwrap();
            // No cgroup enrolled: any cgroup.
            let mut e = expected();
            e.cgroup = None;
            p.cgroup = "/user.slice".into();
            e.authenticate(&p, &KEY).unwrap();
        }

        #[test]
        fn another_uid_alone_is_refused() {
            let mut p = peer();
            p.uid = 1002;
            let (want, got) = rejected(&expected(), &p, &KEY, "uid/gid");
            assert_eq!(
                (want.as_str(), got.as_str()),
                ("uid/gid 1000/1001", "uid/gid 1002/1001")
            );
        }

        #[test]
        fn another_gid_alone_is_refused() {
            let mut p = peer();
            p.gid = 0;
            let (want, got) = rejected(&expected(), &p, &KEY, "uid/gid");
            assert_eq!(
                (want.as_str(), got.as_str()),
                ("uid/gid 1000/1001", "uid/gid 1000/0")
            );
        }

        #[test]
        fn another_executable_object_alone_is_refused() {
            // Same digest, another object: by inode, by device, and by birth (a reused inode).
            let changes: [fn(&mut Identity); 3] = [
                |i| i.ino += 1,
                |i| i.dev += 1,
                |i| {
                    i.birth = Some(Birth {
                        sec: 1_700_000_001,
                        nsec: 5,
                    })
                },
            ];
            for change in changes {
                let mut p = peer();
                change(&mut p.exe);
                rejected(&expected(), &p, &KEY, "executable");
            }
        }

        #[test]
        fn another_executable_digest_alone_is_refused() {
            let mut p = peer();
            p.exe_sha256 = Hash([8; 32]);
            let (want, got) = rejected(&expected(), &p, &KEY, "executable");
            assert_eq!(
                want,
                format!("executable ino 4242 sha256 {}", Hash([9; 32]))
            );
            assert_eq!(got, format!("executable ino 4242 sha256 {}", Hash([8; 32])));
        }

        #[test]
        fn no_executable_baseline_refuses_every_peer() {
            let mut e = expected();
            e.exe = None;
            let (want, got) = rejected(&e, &peer(), &KEY, "executable");
            assert_eq!(
                (want.as_str(), got.as_str()),
                ("executable observed", "executable no baseline")
            );
        }

        #[test]
        fn a_cgroup_outside_the_enrolled_one_alone_is_refused() {
            // A sibling whose name extends the enrolled one's is outside it, as is its parent.
            for outside in [
                "/system.slice/billing-supervisor.service2",
                "/system.slice",
                "/user.slice/billing-supervisor.service",
            ] {
                let mut p = peer();
                p.cgroup = outside.into();
                let (want, got) = rejected(&expected(), &p, &KEY, "cgroup");
                assert_eq!(want, "cgroup /system.slice/billing-supervisor.service");
                assert_eq!(got, format!("cgroup {outside}"));
            }
        }

        #[test]
        fn another_key_alone_is_refused() {
            let other = PublicKey([4; 32]);
            let (want, got) = rejected(&expected(), &peer(), &other, "key");
            assert_eq!(want, format!("key {}", KEY.to_hex()));
            assert_eq!(got, format!("key {}", other.to_hex()));
        }
    }
}

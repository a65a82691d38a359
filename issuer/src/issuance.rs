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

/// Step 1 done: the issuer lock is held and the epoch is `enrolled`.
pub struct Reserved<W: World = Host> {
    c: Common<W>,
}

impl<W: World> Reserved<W> {
    /// Opens the deployment's objects, takes its issuer lock (busy names the holder), then
    /// reads and checks the epoch under it: never a classification read before the lock.
    /// A contender that paused after opening cannot act on a classification read before
    /// another issuance finished.
    pub fn reserve(
        world: &mut W,
        key: SigningKey,
        id: DeploymentId,
        approve_ready: Option<Hash>,
        mut progress: Progress,
    ) -> Result<Reserved<W>, Ended> {
        let issuer = repoch_protocol::PublicKey::from(&key.verifying_key());
        let o = world.open(&issuer, id).map_err(Ended::one)?;
        crate::barrier::reach("after-open");
        if o.read_only {
            return Err(Ended::one(read_only_refusal()));
        }
        world.lock(&o.lock).map_err(Ended::one)?;
        let mut storage = world.storage();
        let log = read_epoch_log(&mut storage, o.log, &issuer, id, &o.manifest_hash)
            .map_err(Ended::one)?;
        let class = log.report().classification;
        if let Some(r) = epoch_refusal(id, class, log.report().problem.as_ref()) {
            return Err(Ended::one(r));
        }
        progress(AdminEvent::Progress {
            step: "reserve".into(),
            detail: format!("issuer lock held; epoch {}", class.as_str()),
        });
        let fleet = match &o.manifest.registry {
            Some(r) => Some(world.fleet(r).map_err(Ended::one)?),
            None => None,
        };
        let observer = world.observer(&o.manifest, approve_ready);
        let stop = world.stop();
        Ok(Reserved {
            c: Common {
                id,
                manifest: o.manifest,
                storage,
                log,
                key,
                observer,
                fences: Fences::default(),
                progress,
                stop,
                fleet,
                _lock: o.lock,
            },
        })
    }

    pub fn manifest(&self) -> &Manifest {
        &self.c.manifest
    }

    /// Step 2: observe everything; acquire and hold the fences. Any failed fact refuses.
    pub fn observe(mut self) -> Result<Observed<W>, Ended> {
        self.c.say(
            "observe",
            "lineage, containment, fences, READY, consumer executable",
        );
        let first = self.c.observer.observe(&mut self.c.fences);
        self.c.facts(&first);
        if !first.holds() {
            let refusals: Vec<Refusal> = first.failed().filter_map(Refusal::from_fact).collect();
            return Err(Ended::refused(
                refusals,
                "observation failed; nothing written",
            ));
        }
        self.c.say(
            "evidence",
            format!(
                "digest {}; READY sha256 {}",
                first.digest, first.ready_sha256
            ),
        );
        Ok(Observed { c: self.c, first })
    }
}

/// One call of [`Observed::connect`], as a lifetime: invariant, and chosen by `connect` for
/// its `wait` closure alone (`for<'id>`), so an [`Authenticated`] made from one call's
/// [`Expected`] has a type no other call accepts.
type Brand<'id> = PhantomData<fn(&'id ()) -> &'id ()>;

/// What the consumer must be: from the manifest and the first observation of one issuance,
/// made by [`Observed::connect`] only (its fields are private) and branded with that call.
#[derive(Debug)]
pub struct Expected<'id> {
    brand: Brand<'id>,
    deployment: DeploymentId,
    uid: u32,
    gid: u32,
    key: repoch_protocol::PublicKey,
    exe: Option<(Identity, Hash)>,
    cgroup: Option<String>,
}

/// A consumer peer that [`Expected::authenticate`] accepted, branded with the `connect`
/// call whose `Expected` accepted it; nothing else builds one, and [`Observed::connect`]
/// takes no other (`issuer/tests/compile-fail/`).
#[derive(Debug)]
pub struct Authenticated<'id> {
    brand: Brand<'id>,
    peer: ConsumerPeer,
}

impl Authenticated<'_> {
    /// The peer as described and authenticated.
    pub fn peer(&self) -> &ConsumerPeer {
        &self.peer
    }
}

impl<'id> Expected<'id> {
    /// The deployment whose consumer is expected.
    pub fn deployment(&self) -> DeploymentId {
        self.deployment
    }

    /// Transport authentication: credentials, executable identity and digest, cgroup, key.
    pub fn authenticate(
        &self,
        peer: &ConsumerPeer,
        key: &repoch_protocol::PublicKey,
    ) -> Result<Authenticated<'id>, Refusal> {
        let subject = format!("grant socket peer pid {}", peer.pid);
        let fail = |what: &str, want: String, got: String| {
            Err(Refusal::consumer_rejected(&subject, what, want, got))
        };
        if peer.uid != self.uid || peer.gid != self.gid {
            return fail(
                "uid/gid",
                format!("{}/{}", self.uid, self.gid),
                format!("{}/{}", peer.uid, peer.gid),
            );
        }
        match &self.exe {
            Some((id, sha)) if id.same_object(&peer.exe) && *sha == peer.exe_sha256 => {}
            Some((id, sha)) => {
                return fail(
                    "executable",
                    format!("ino {} sha256 {sha}", id.ino),
                    format!("ino {} sha256 {}", peer.exe.ino, peer.exe_sha256),
                )
            }
            None => return fail("executable", "observed".into(), "no baseline".into()),
        }
        if let Some(cg) = &self.cgroup {
            if !repoch_sys::cgroup::is_within(&peer.cgroup, cg) {
                return fail("cgroup", cg.clone(), peer.cgroup.clone());
            }
        }
        if key != &self.key {
            return fail("key", self.key.to_hex(), key.to_hex());
        }
        Ok(Authenticated {
            brand: PhantomData,
            peer: peer.clone(),
        })
    }
}

/// Step 2 done: every fact holds, the fences are held.
pub struct Observed<W: World = Host> {
    c: Common<W>,
    first: Observation,
}

impl<W: World> Observed<W> {
    /// Only `connect` calls this, once, for its `wait` closure.
    fn expected<'id>(&self) -> Expected<'id> {
        let m = &self.c.manifest;
        Expected {
            brand: PhantomData,
            deployment: m.deployment,
            uid: m.consumer.uid,
            gid: m.consumer.gid,
            key: m.consumer.key,
            exe: self.c.observer.consumer_exe_baseline(),
            cgroup: m.consumer.cgroup.clone(),
        }
    }

    /// Step 3: wait (bounded, in `wait`) for a consumer authenticated by the [`Expected`]
    /// given to `wait`: the closure must work for a brand it cannot name, so only that
    /// `Expected`'s [`Authenticated`] type-checks. Nothing is written if none comes:
    /// `consumer-absent`. (That the link is the authenticated peer's is checked before the
    /// intent: `same_peer`.)
    pub fn connect<C: ConsumerLink>(
        mut self,
        wait: impl for<'id> FnOnce(
            &Expected<'id>,
            &mut dyn FnMut(AdminEvent),
        ) -> Result<(C, Authenticated<'id>), Refusal>,
    ) -> Result<Connected<C, W>, Ended> {
        let expected = self.expected();
        let progress = &mut self.c.progress;
        let (consumer, auth) = wait(&expected, &mut |e| progress(e)).map_err(Ended::one)?;
        let peer = auth.peer;
        self.c.say(
            "connect",
            format!("consumer pid {} uid {} authenticated", peer.pid, peer.uid),
        );
        Ok(Connected {
            s: Session {
                c: self.c,
                first: self.first,
                consumer,
                peer,
                claim: None,
            },
        })
    }
}

/// What every state from [`Connected`] to [`Verified2`] carries: the issuance's common
/// part, the first observation (the evidence every later one must equal), the consumer's
/// link, and the peer pinned at connect.
struct Session<C, W: World> {
    c: Common<W>,
    first: Observation,
    consumer: C,
    peer: ConsumerPeer,
    /// The fleet registry's claim this issuance won, and its fencing token (from step 7).
    claim: Option<(FleetClaim, FencingToken)>,
}

/// Step 5's proof: the challenge and the consumer's signature of it with its enrolled key.
struct Custody {
    challenge: Challenge,
    custody: [u8; 64],
}

/// Step 3 done: the consumer is authenticated at transport level.
pub struct Connected<C, W: World = Host> {
    s: Session<C, W>,
}

impl<C: ConsumerLink, W: World> Connected<C, W> {
    /// Step 4: describe the peer again (it must be the one authenticated: refused, nothing
    /// written, otherwise), observe everything again (a failed fact refuses, nothing
    /// written), then append and fsync the intent. From here the epoch is used.
    pub fn intent(mut self, contender: Contender) -> Result<Intended<C, W>, Ended> {
        if let Err(r) = same_peer(&mut self.s.consumer, &self.s.peer) {
            self.s.consumer.refuse(r.reason, &r.detail());
            self.s.c.say(
                "connect",
                format!("rejected the consumer before the intent: {r}"),
            );
            return Err(Ended::one(r));
        }
        // The first observation may be minutes old (the wait for the consumer): observe
        // again right before the intent. A failed fact refuses with its own reason and
        // nothing written (the operator retries); the intent records this observation.
        self.s.c.say("observe", "again, right before the intent");
        let now = self.s.c.observer.observe(&mut self.s.c.fences);
        self.s.c.facts(&now);
        if !now.holds() {
            let refusals: Vec<Refusal> = now.failed().filter_map(Refusal::from_fact).collect();
            if let Some(r) = refusals.first() {
                self.s.consumer.refuse(r.reason, &r.detail());
            }
            return Err(Ended::refused(
                refusals,
                "observation before the intent failed; nothing written",
            ));
        }
        self.s.first = now;
        // The fleet epoch must be unclaimed, and the registry answering, before anything
        // is written: a restored or second host is refused here, nothing written.
        if let Some(r) = self.s.c.manifest.registry.clone() {
            self.s.c.say(
                "registry",
                format!("fleet epoch {}: unclaimed?", r.epoch_key()),
            );
            let own = repoch_protocol::PublicKey::from(&self.s.c.key.verifying_key());
            let looked = match &mut self.s.c.fleet {
                Some(fleet) => crate::fleet::look(fleet.as_mut(), &r, &own),
                None => Ok(()),
            };
            if let Err(r) = looked {
                self.s.consumer.refuse(r.reason, &r.detail());
                return Err(Ended::one(r));
            }
        }
        crate::barrier::reach("before-intent");
        // The last point before anything is written: a stopping repochd ends here, and
        // never after the intent (crate::stop).
        if self.s.c.stop.is_set() {
            let r = Stop::refusal("the recovery ended before its intent");
            self.s.consumer.refuse(r.reason, &r.detail());
            return Err(Ended::one(r));
        }
        if let Err(r) = operator_present(&mut self.s.consumer, "before the intent; nothing written")
        {
            self.s.consumer.refuse(r.reason, &r.detail());
            return Err(Ended::one(r));
        }
        let body = EpochBody::Intent {
            evidence: self.s.first.digest,
            facts: self.s.first.facts.clone(),
            contender,
            consumer: self.s.peer.clone(),
        };
        let h = publish(&mut self.s.c, &mut self.s.consumer, body)?;
        Ok(Intended {
            s: self.s,
            intent: h,
        })
    }
}

/// Step 4 done: the intent is durable.
pub struct Intended<C, W: World = Host> {
    s: Session<C, W>,
    intent: Hash,
}

impl<C: ConsumerLink, W: World> Intended<C, W> {
    /// Step 5: challenge the consumer; its enrolled key must sign (strictly verified).
    pub fn custody(mut self) -> Result<Custodied<C, W>, Ended> {
        let nonce = match crate::keys::random() {
            Ok(n) => n,
            Err(e) => {
                return Err(withhold(
                    self.s.c,
                    &mut self.s.consumer,
                    Refusal::new(Reason::Internal, "getrandom", "a nonce", e.to_string()),
                ))
            }
        };
        let challenge = Challenge {
            deployment: self.s.c.id,
            intent: self.intent,
            nonce,
        };
        self.s.c.say("custody", "challenge sent");
        let sig = match self.s.consumer.challenge(&challenge) {
            Ok(s) => s,
            Err(e) => {
                return Err(withhold(
                    self.s.c,
                    &mut self.s.consumer,
                    Refusal::new(
                        Reason::ConsumerLost,
                        "consumer",
                        "a custody answer",
                        e.to_string(),
                    ),
                ))
            }
        };
        if !challenge.check(&self.s.c.manifest.consumer.key, &sig) {
            let r = Refusal::new(
                Reason::CustodyInvalid,
                "custody signature",
                "signed by the enrolled consumer key",
                "does not verify",
            );
            return Err(withhold(self.s.c, &mut self.s.consumer, r));
        }
        Ok(Custodied {
            s: self.s,
            intent: self.intent,
            proof: Custody {
                challenge,
                custody: sig,
            },
        })
    }
}

/// Observes everything again; the digest must be identical.
fn verify_final<W: World>(
    c: &mut Common<W>,
    first: &Observation,
    which: &str,
) -> Result<(), Refusal> {
    c.say(which, "observing again");
    let again = c.observer.observe(&mut c.fences);
    if again.digest == first.digest && again.holds() {
        c.say(which, format!("digest {} unchanged", again.digest));
        return Ok(());
    }
    c.facts(&again);
    let changed = again
        .facts
        .iter()
        .zip(first.facts.iter())
        .find(|(a, b)| a != b)
        .map(|(a, _)| a.clone());
    let failed = again.failed().next().cloned();
    let (subject, observed) = match failed.or(changed) {
        Some(f) => (
            format!("{} {}", f.kind, f.subject),
            format!(
                "{} ({})",
                f.observed,
                f.reason.map_or("changed", |r| r.as_str())
            ),
        ),
        None => ("evidence".into(), format!("digest {}", again.digest)),
    };
    Err(Refusal::new(
        Reason::EvidenceChanged,
        subject,
        format!("digest {}", first.digest),
        observed,
    ))
}

/// Step 5 done: the consumer proved custody of its enrolled key.
pub struct Custodied<C, W: World = Host> {
    s: Session<C, W>,
    intent: Hash,
    proof: Custody,
}

impl<C: ConsumerLink, W: World> Custodied<C, W> {
    /// Step 6: final verification #1. Only its success, [`Verified1`], can consume.
    pub fn verify(mut self) -> Result<Verified1<C, W>, Ended> {
        match verify_final(&mut self.s.c, &self.s.first, "final-verification-1") {
            Ok(()) => Ok(Verified1 {
                s: self.s,
                intent: self.intent,
                proof: self.proof,
            }),
            Err(r) => Err(withhold(self.s.c, &mut self.s.consumer, r)),
        }
    }
}

/// Step 6 done: final verification #1 observed the first observation's digest.
pub struct Verified1<C, W: World = Host> {
    s: Session<C, W>,
    intent: Hash,
    proof: Custody,
}

impl<C: ConsumerLink, W: World> Verified1<C, W> {
    /// The fleet registry's claim (a manifest with a `[registry]`): after the intent and
    /// the first final verification, right before `consume`. Won: the fencing token the
    /// consume record and the grant carry. Another host's: `Err((refusal, false))`,
    /// withheld `epoch-consumed` naming it. No answer: `Err((refusal, true))`, withheld and
    /// uncertain (the claim may have applied; a key naming this host is never reused).
    fn claim_fleet_epoch(&mut self) -> Result<Option<FencingToken>, (Refusal, bool)> {
        let (Some(r), Some(fleet)) = (&self.s.c.manifest.registry, &mut self.s.c.fleet) else {
            // No registry: no claim to make (the barrier is still reached, in one place).
            crate::barrier::reach("after-claim");
            return Ok(None);
        };
        let claim = FleetClaim {
            fleet: r.fleet.clone(),
            // Pinned in every recovery (`fleet::connect_pinned`); none only in a world
            // whose manifest pins none.
            fleet_id: r.pin.as_ref().map_or(FleetId([0; 16]), |p| p.id),
            host: r.host.clone(),
            deployment: self.s.c.id,
            intent: self.intent,
            evidence: self.s.first.digest,
            nonce: self.proof.challenge.nonce,
            floor: r.pin.as_ref().map_or(0, |p| p.floor),
            signature: [0; repoch_protocol::limits::SIGNATURE_BYTES],
        }
        .signed(&self.s.c.key);
        let own = repoch_protocol::PublicKey::from(&self.s.c.key.verifying_key());
        let won = crate::fleet::claim(fleet.as_mut(), r, &own, &claim);
        let key = r.epoch_key();
        crate::barrier::reach("after-claim");
        match won {
            Ok(token) => {
                self.s
                    .c
                    .say("registry", format!("fleet epoch {key} claimed: {token}"));
                self.s.claim = Some((claim, token));
                Ok(Some(token))
            }
            Err(crate::fleet::Lost::Refused(r)) => Err((r, false)),
            Err(crate::fleet::Lost::Unknown(r)) => Err((r, true)),
        }
    }

    /// Step 7: the consumer must still be there (else `withheld{consumer-lost}`, nothing
    /// consumed); append and fsync `consume`.
    pub fn consume(mut self) -> Result<Consumed<C, W>, Ended> {
        if let Err(r) = still_alive(&mut self.s.consumer, &self.s.peer) {
            return Err(withhold(self.s.c, &mut self.s.consumer, r));
        }
        if let Err(r) = operator_present(&mut self.s.consumer, "before consume; nothing claimed") {
            return Err(withhold(self.s.c, &mut self.s.consumer, r));
        }
        let fencing = match self.claim_fleet_epoch() {
            Ok(f) => f,
            Err((r, unknown)) => {
                let mut ended = withhold(self.s.c, &mut self.s.consumer, r);
                if unknown {
                    ended.outcome = Verdict::Uncertain;
                    ended.detail = format!(
                        "{}; whether the fleet registry recorded this host's claim is unknown: this host's epoch is used either way, and the fleet epoch is used if the claim applied (`repoch audit --registry` tells)",
                        ended.detail
                    );
                }
                return Err(ended);
            }
        };
        let body = EpochBody::Consume {
            consumer: self.s.peer.clone(),
            challenge: self.proof.challenge.clone(),
            custody: self.proof.custody,
            fencing,
        };
        let h = publish(&mut self.s.c, &mut self.s.consumer, body)?;
        Ok(Consumed {
            s: self.s,
            intent: self.intent,
            consume: h,
        })
    }
}

/// Step 7 done.
pub struct Consumed<C, W: World = Host> {
    s: Session<C, W>,
    intent: Hash,
    consume: Hash,
}

use repoch_sys::time::now;

impl<C: ConsumerLink, W: World> Consumed<C, W> {
    /// Step 8: sign the grant and append it in the receipt; fsync.
    pub fn receipt(mut self) -> Result<Receipted<C, W>, Ended> {
        let m = &self.s.c.manifest;
        let grant = Grant {
            deployment: m.deployment,
            intent: self.intent,
            consume: self.consume,
            evidence: self.s.first.digest,
            consumer_key: m.consumer.key,
            ready_path: m.target.ready_path.clone(),
            ready_sha256: self.s.first.ready_sha256,
            fences: self.s.c.fences.grant_fences(),
            frontier_seq: self.s.first.frontier_seq,
            frontier_hash: self.s.first.frontier_hash,
            unknown_ops: self.s.first.unknown_ops.clone(),
            issued_at: now(),
            listeners: self.s.c.fences.grant_listeners(),
            fencing: self.s.claim.as_ref().map(|(_, t)| *t),
        };
        let bytes = SignedGrant::sign(grant, &self.s.c.key).to_bytes();
        publish(
            &mut self.s.c,
            &mut self.s.consumer,
            EpochBody::Receipt {
                grant: bytes.clone(),
            },
        )?;
        Ok(Receipted {
            s: self.s,
            grant: bytes,
        })
    }
}

/// Step 8 done: consume and receipt are durable.
pub struct Receipted<C, W: World = Host> {
    s: Session<C, W>,
    grant: Vec<u8>,
}

impl<C: ConsumerLink, W: World> Receipted<C, W> {
    /// Step 9: final verification #2. Only its success, [`Verified2`], can dispatch.
    pub fn verify(mut self) -> Result<Verified2<C, W>, Ended> {
        match verify_final(&mut self.s.c, &self.s.first, "final-verification-2") {
            Ok(()) => Ok(Verified2 {
                s: self.s,
                grant: self.grant,
            }),
            Err(r) => Err(withhold(self.s.c, &mut self.s.consumer, r)),
        }
    }
}

/// Step 9 done: final verification #2 observed the first observation's digest.
pub struct Verified2<C, W: World = Host> {
    s: Session<C, W>,
    grant: Vec<u8>,
}

impl<C: ConsumerLink, W: World> Verified2<C, W> {
    /// Step 10: send the grant and pass the held fence fds. A failure here is a lost reply:
    /// the outcome is uncertain, and the epoch is preserved as receipted.
    pub fn dispatch(mut self) -> Result<Dispatched<C, W>, Ended> {
        // A consumer that went away gets nothing: `withheld{consumer-lost}`.
        if let Err(r) = still_alive(&mut self.s.consumer, &self.s.peer) {
            return Err(withhold(self.s.c, &mut self.s.consumer, r));
        }
        // The peer that gets the grant is still the one recorded in intent and consume.
        if let Err(r) = same_peer(&mut self.s.consumer, &self.s.peer) {
            return Err(withhold(self.s.c, &mut self.s.consumer, r));
        }
        // The fleet epoch still holds this issuance's claim, unmodified.
        if let (Some(r), Some(fleet), Some((claim, token))) = (
            &self.s.c.manifest.registry,
            &mut self.s.c.fleet,
            &self.s.claim,
        ) {
            if let Err(r) = crate::fleet::still_ours(fleet.as_mut(), r, claim, token) {
                return Err(withhold(self.s.c, &mut self.s.consumer, r));
            }
        }
        // What the observer follows (engine events) still shows no change: final
        // verification #2's look is not the dispatch.
        if let Some(r) = self.s.c.observer.still_held() {
            return Err(withhold(self.s.c, &mut self.s.consumer, r));
        }
        self.s.c.say(
            "dispatch",
            format!(
                "sending the grant with {} fence fd(s) and {} listener fd(s)",
                self.s.c.fences.len(),
                self.s.c.fences.listeners_len()
            ),
        );
        let fds: Vec<&OwnedFd> = self.s.c.fences.fds();
        // The log's head now (its receipt last), for the consumer to keep.
        let checkpoint = repoch_protocol::checkpoint::Checkpoint {
            origin: repoch_protocol::checkpoint::origin(&self.s.c.id),
            size: self.s.c.log.next_seq(),
            head: self.s.c.log.last_hash(),
        }
        .sign(repoch_protocol::checkpoint::KEY_NAME, &self.s.c.key);
        match self.s.consumer.dispatch(&self.grant, &checkpoint, &fds) {
            Ok(()) => {
                // The fences are the consumer's now: repochd keeps none while it waits for
                // the acknowledgement (only the issuer lock, until the issuance ends).
                let mut c = self.s.c;
                std::mem::take(&mut c.fences).hand_over();
                Ok(Dispatched {
                    c,
                    consumer: self.s.consumer,
                    grant: self.grant,
                })
            }
            Err(e) => Err(Ended {
                outcome: Verdict::Uncertain,
                refusals: vec![Refusal::new(Reason::ConsumerLost, "dispatch", "grant delivered", e.to_string())],
                detail: format!("the grant may not have reached the consumer ({e}); the epoch is receipted and preserved"),
                poisoned: false,
                used: self.s.c.used(),
            }),
        }
    }
}

/// Step 10 done: the grant and the fences left; whether the consumer holds them durably is
/// not known yet.
pub struct Dispatched<C, W: World = Host> {
    c: Common<W>,
    consumer: C,
    grant: Vec<u8>,
}

impl<C: ConsumerLink, W: World> Dispatched<C, W> {
    /// Step 11: the consumer's acknowledgement that its grant file is durable, naming the
    /// grant's sha256, then the handoff's last word ([`ConsumerLink::last_word`]: the
    /// pinned consumer alive and alone on its connection, `granted` sent). Only then is the
    /// issuance granted (docs/OPERATOR.md, "Outcomes"). Without both, in time and for these
    /// very bytes: "dispatched, not acknowledged", the outcome uncertain (the consumer is
    /// told so and starts nothing), the epoch receipted and preserved, never reissued.
    /// Nothing is appended: the receipt already holds the grant.
    pub fn acknowledged(mut self) -> Result<Granted, Ended> {
        let sha = Hash::of(&self.grant);
        let used = self.c.used();
        self.c.say(
            "acknowledge",
            "waiting for the consumer to acknowledge a durable grant",
        );
        let failed = |consumer: &mut C, reason: Reason, observed: String| {
            let r = Refusal::new(
                reason,
                "grant acknowledgement",
                format!("the consumer's persisted {sha}"),
                observed,
            );
            // The consumer waits for the last word: tell it there is none (best effort; a
            // closed connection says the same).
            consumer.refuse(
                reason,
                &format!("not granted: {}; the outcome is uncertain", r.detail()),
            );
            Ended {
                outcome: Verdict::Uncertain,
                detail: format!(
                    "dispatched, not acknowledged: {r}; the consumer may or may not hold the grant; the epoch is receipted and preserved, never reissued"
                ),
                refusals: vec![r],
                poisoned: false,
                used,
            }
        };
        let ack = self.consumer.acknowledgement();
        crate::barrier::reach("after-acknowledgement");
        match ack {
            Ok(h) if h == sha => match self.consumer.last_word(&sha) {
                Ok(()) => {
                    self.c.say(
                        "acknowledge",
                        format!(
                            "the consumer acknowledged its grant durable (sha256 {sha}) and was told granted"
                        ),
                    );
                    Ok(Granted {
                        grant: self.grant,
                        epoch: self.c.log.report().classification,
                    })
                }
                Err((reason, e)) => Err(failed(
                    &mut self.consumer,
                    reason,
                    format!("persisted {sha}, but no last word: {e}"),
                )),
            },
            Ok(h) => Err(failed(
                &mut self.consumer,
                Reason::ProtocolError,
                format!("persisted {h}"),
            )),
            Err(e) => Err(failed(
                &mut self.consumer,
                Reason::ConsumerLost,
                e.to_string(),
            )),
        }
    }
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

//! The checker: the real issuance (`issuance::run_in`), model-checked (docs/ARCHITECTURE.md,
//! "The checker").
//!
//! Contenders, each a full issuance in a thread of its own, share one simulated disk
//! (`Sim`), one modelled issuer lock (held by a run until its lock object is dropped, as an
//! `flock` is until its fd closes) and one scripted world. Only one runs at a time: at every
//! step it takes through the seam (a storage operation, open, lock, an observation, a
//! consumer call) it stops at a choice point, where the checker chooses what happens next:
//!
//! 0. the step proceeds;
//! 1. the machine crashes: every run dies, each unsynced write is dropped, applied or torn
//!    (every resolution enumerated), and a restarted issuer queues;
//! 2. this issuer restarts (killed, its lock released, the disk cache kept);
//! 3. a fact of the world changes (new evidence that still holds, the READY digest, a
//!    unit's state);
//! 4. this run's consumer vanishes;
//! 5. (a write or fdatasync) the operation fails with EIO, fsyncgate semantics;
//! 6. another contender arrives, or a paused one resumes;
//! 7. (a call to the fleet registry) the call gets no answer (a claim's create may have
//!    applied or not: both enumerated);
//! 8. (the fleet world, its epoch unclaimed) another host's claim lands;
//! 9. (the fleet world, its epoch claimed) an etcd writer rewrites the key, same bytes.
//!
//! The fleet world: the same search over a deployment whose manifest names a `[registry]`,
//! against a modelled etcd key (one cluster, revisions that only grow, create-if-absent).
//!
//! At its acknowledgement, a consumer may also acknowledge other bytes than it was sent.
//!
//! Choices other than 0 are deviations. The search is stateless (every path re-runs from
//! the enrolled disk, replaying a choice prefix): exhaustive up to a bound on deviations,
//! then seeded random walks. A violation shrinks its choices greedily and prints the run
//! with `REPOCH_SIM_TRACE=...`, which replays it.
//!
//! Why not a model-checking crate: the code under test is the real, blocking issuance, not
//! a model with enumerable states; exploring it needs control at each of its calls through
//! the seam and replay from a prefix (as loom or CHESS do for threads), a few hundred lines
//! here. `stateright` explores a model's state space and would need the issuance rewritten
//! as one.
//!
//! Invariants, after every step and at every crash point: at most one grant per deployment
//! ever; every dispatched grant is preceded by durable intent, consume and receipt records
//! whose bytes match it, and by an observation made after the receipt was durable that
//! equals its evidence; nothing after a terminal record, never a second intent (a restarted
//! issuer never issues a used epoch); no grant after `withheld`; the log classifies to a
//! known state (never corrupt, forged, foreign or empty); `consume` appended and the grant
//! dispatched each only after the consumer was asked whether it is alive (and was); a
//! grant's `issued_at` is now. In the fleet world, a grant also carries the fencing token
//! of the registry's key, which holds this host's claim for this very intent, created at
//! that revision and never modified, and the consume record carries the same token; a
//! grant outside it carries none.
//!
//! And at the end of each run that was not killed, on what it reported (the admin stream
//! and its `Ended`): granted only with its consumer's acknowledgement of these very bytes,
//! after reporting every step in order and its observation's facts; `busy` exactly when the
//! only refusal is `issuer-busy`; the epoch reported used exactly when its intent record
//! was reported durable; `evidence-changed` naming a fact that failed or changed.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use ed25519_dalek::SigningKey;
use repoch_issuer::fleet::{Fleet, Said};
use repoch_issuer::issuance::{self, ConsumerLink, LinkError};
use repoch_issuer::log::enroll_sequence;
use repoch_issuer::observe::{Fences, Observation, Observe};
use repoch_issuer::sim::{Fault, Node, Sim};
use repoch_issuer::storage::Storage;
use repoch_issuer::world::{Objects, World};
use repoch_issuer::Refusal;
use repoch_protocol::cbor::Canonical;
use repoch_protocol::epoch::{
    verify_log, Classification, Contender, EpochBody, EpochRecord, Kind, SignedEpochRecord,
};
use repoch_protocol::fleet::{FencingToken, FleetClaim, FleetHost, Registry};
use repoch_protocol::grant::{Challenge, ConsumerPeer, SignedGrant};
use repoch_protocol::manifest::{
    Consumer, Containment, InventoryEntry, Lineage, Manifest, Role, SignedManifest, Target,
};
use repoch_protocol::types::evidence_digest;
use repoch_protocol::wire::AdminEvent;
use repoch_protocol::{DeploymentId, Fact, Hash, Identity, PublicKey, Reason};
use repoch_registry::{Claimed, Entry, Error as RegistryError};

const DEP: DeploymentId = DeploymentId([0x5e; 16]);
/// The modelled etcd cluster's id, and its revision before any claim.
const CLUSTER: u64 = 0xc1u64 << 56 | 0x5e;
const REVISION_START: i64 = 41;
/// Steps (choice points) one path may take before it is cut (every issuance ends long before).
const STEPS_MAX: usize = 2_000;
/// Issuer restarts (after a kill or a crash) one path may queue.
const RESTARTS_MAX: usize = 2;
/// Deviations one random walk may take.
const WALK_DEVIATIONS_MAX: u32 = 6;
/// How long one path may take before the checker calls itself deadlocked.
const PATH_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(60);

fn issuer_key() -> SigningKey {
    SigningKey::from_bytes(&[7; 32])
}
fn consumer_key() -> SigningKey {
    SigningKey::from_bytes(&[8; 32])
}
fn issuer() -> PublicKey {
    PublicKey::from(&issuer_key().verifying_key())
}
fn identity(ino: u64) -> Identity {
    Identity {
        dev: 1,
        ino,
        uid: 0,
        gid: 0,
        mode: 0o100600,
        birth: None,
    }
}
fn peer(pid: u32) -> ConsumerPeer {
    ConsumerPeer {
        pid,
        uid: 990,
        gid: 990,
        exe: identity(77),
        exe_sha256: Hash([5; 32]),
        cgroup: "/consumer.slice".into(),
    }
}

/// The `[registry]` of the fleet world: this host, `this`, of fleet deployment `billing`.
fn registry() -> Registry {
    Registry {
        endpoints: vec!["https://etcd.sim:2379".into()],
        ca: "/etc/repoch/ca.pem".into(),
        cert: "/etc/repoch/this.pem".into(),
        key: "/etc/repoch/this.key".into(),
        prefix: "/repoch/sim".into(),
        fleet: "billing".into(),
        host: "this".into(),
        pin: None,
        record_revision: 0,
    }
}

fn manifest(fleet: bool) -> Manifest {
    Manifest {
        deployment: DEP,
        label: "checked".into(),
        enrolled_at: 1_790_000_000,
        issuer_key: issuer(),
        inventory: vec![
            InventoryEntry {
                role: Role::StateDir,
                path: "/var/lib/repoch/d".into(),
                identity: identity(10),
            },
            InventoryEntry {
                role: Role::EpochLog,
                path: "/var/lib/repoch/d/epoch.log".into(),
                identity: identity(11),
            },
        ],
        target: Target {
            ready_path: "/srv/x/READY".into(),
        },
        containment: Containment {
            units: vec!["x.service".into()],
            ..Containment::default()
        },
        consumer: Consumer {
            uid: 990,
            gid: 990,
            executable: "/usr/bin/repoch-consume".into(),
            executable_sha256: None,
            key: PublicKey::from(&consumer_key().verifying_key()),
            cgroup: None,
        },
        lineage: Lineage {
            predecessor: None,
            journal_path: "/srv/x/journal".into(),
            journal_genesis: Hash([4; 32]),
            producer_key: issuer(),
        },
        registry: fleet.then(registry),
    }
}

/// The enrolled disk every path starts from, and whether its deployment is a fleet's.
struct Disk {
    sim: Sim,
    deps: usize,
    fleet: bool,
}

fn enrolled() -> Disk {
    enrolled_as(false)
}

/// Enrolled through the real enrollment sequence; `fleet`: the manifest names a registry.
fn enrolled_as(fleet: bool) -> Disk {
    let mut sim = Sim::new(1);
    let root = sim.root();
    sim.mkdir_at(&root, "deployments", 0o700).unwrap();
    sim.sync_dir(&root).unwrap();
    let deps = sim.open_dir_at(&root, "deployments").unwrap();
    let mbytes = SignedManifest::sign(manifest(fleet), &issuer_key()).to_bytes();
    let genesis = SignedEpochRecord::sign(
        EpochRecord {
            deployment: DEP,
            seq: 0,
            prev: Hash::ZERO,
            body: EpochBody::Genesis {
                manifest: Hash::of(&mbytes),
                issuer_key: issuer(),
                predecessor: None,
            },
        },
        &issuer_key(),
    );
    enroll_sequence(&mut sim, &deps, &DEP, issuer(), |_, _| {
        Ok::<_, std::convert::Infallible>((mbytes.clone(), genesis.clone()))
    })
    .unwrap();
    Disk { sim, deps, fleet }
}

// ---- choices ----

/// The choices of one path: replayed from `prefix`, then 0 (exhaustive search) or random
/// (walks). `taken` is what this path chose and among how many.
#[derive(Clone, Debug, Default)]
struct Chooser {
    prefix: Vec<u32>,
    taken: Vec<(u32, u32)>,
    /// Deviations allowed; beyond them a choice point offers only "proceed".
    budget: u32,
    used: u32,
    walk: Option<u64>,
}

impl Chooser {
    fn pick(&mut self, n: u32, deviation: bool) -> u32 {
        let n = if deviation && self.used >= self.budget {
            1
        } else {
            n
        };
        let i = self.taken.len();
        let c = if i < self.prefix.len() {
            self.prefix[i].min(n - 1)
        } else if let Some(rng) = &mut self.walk {
            let r = xorshift(rng);
            if !deviation {
                (r % u64::from(n)) as u32
            } else if n > 1 && r.is_multiple_of(16) {
                1 + ((r >> 8) % u64::from(n - 1)) as u32
            } else {
                0
            }
        } else {
            0
        };
        if deviation && c != 0 {
            self.used += 1;
        }
        self.taken.push((c, n));
        c
    }

    /// The next path in depth-first order, or none when the bounded tree is exhausted.
    fn next_prefix(&self) -> Option<Vec<u32>> {
        let i = self.taken.iter().rposition(|&(c, n)| c + 1 < n)?;
        let mut p: Vec<u32> = self.taken[..i].iter().map(|&(c, _)| c).collect();
        p.push(self.taken[i].0 + 1);
        Some(p)
    }
}

fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// A trace: the non-zero choices, `index:choice`, comma-separated.
fn encode(choices: &[u32]) -> String {
    let v: Vec<String> = choices
        .iter()
        .enumerate()
        .filter(|(_, &c)| c != 0)
        .map(|(i, c)| format!("{i}:{c}"))
        .collect();
    if v.is_empty() {
        "-".into()
    } else {
        v.join(",")
    }
}

fn decode(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty() && *p != "-") {
        let (i, c) = part.split_once(':').expect("index:choice");
        let (i, c): (usize, u32) = (i.parse().unwrap(), c.parse().unwrap());
        if out.len() <= i {
            out.resize(i + 1, 0);
        }
        out[i] = c;
    }
    out
}

// ---- the shared state of one path ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Queued,
    Running,
    Done,
    Killed,
}

#[derive(Debug)]
struct Run {
    status: Status,
    /// Whether this run's consumer is still there.
    consumer: bool,
    /// The digest of this run's last observation, and how many log bytes were durable then.
    observed: Option<(Hash, usize)>,
    /// A run restarted after a kill or crash (for the trace).
    restarted: bool,
    outcome: String,
    /// Whether the run asked if its consumer is alive (and it was) since its last
    /// `consume` record or dispatch: both must be preceded by one.
    asked_alive: bool,
    /// What the run reported on its admin stream: step names, facts, record kinds.
    steps: Vec<String>,
    facts: usize,
    records: Vec<String>,
    /// The facts of the run's first observation and of its last.
    first_facts: Option<Vec<Fact>>,
    last_facts: Vec<Fact>,
    /// The grant's sha256, once its consumer acknowledged it durable.
    acknowledged: Option<Hash>,
    /// The grant's sha256, once its consumer was told `granted` (the last word).
    told_granted: Option<Hash>,
    /// Whether this run's operator (its `repoch recover`) is still connected.
    operator: bool,
    /// Whether the run asked if its operator is there (and it was) since its last intent
    /// or `consume` record: both must be preceded by one.
    asked_operator: bool,
    /// The fleet world: the fleet epoch's key as this run's last read of it found it
    /// (none before its first read).
    looked: Option<Option<Entry>>,
    /// The fleet world: the registry answered this run's probe of the claim's write.
    writable: bool,
}

impl Run {
    fn queued(restarted: bool) -> Run {
        Run {
            status: Status::Queued,
            consumer: true,
            observed: None,
            restarted,
            outcome: String::new(),
            asked_alive: false,
            steps: Vec::new(),
            facts: 0,
            records: Vec::new(),
            first_facts: None,
            last_facts: Vec::new(),
            acknowledged: None,
            told_granted: None,
            looked: None,
            writable: false,
            operator: true,
            asked_operator: false,
        }
    }
}

struct St {
    sim: Option<Sim>,
    log_file: usize,
    chooser: Chooser,
    runs: Vec<Run>,
    active: Option<usize>,
    alive_threads: usize,
    lock: Option<usize>,
    /// The world's version: each fact change bumps it.
    world: u64,
    dispatched: Vec<(usize, Vec<u8>)>,
    violation: Option<String>,
    trace: Vec<String>,
    steps: usize,
    restarts: usize,
    over: bool,
    /// The log content last checked.
    checked: Option<Vec<u8>>,
    /// The fleet world's registry: none outside it.
    registry: Option<SimRegistry>,
}

/// The modelled etcd: one cluster whose revision only grows, and the fleet epoch's key.
struct SimRegistry {
    revision: i64,
    epoch: Option<Entry>,
}

impl SimRegistry {
    /// Create-if-absent: the key, created now, or as it was.
    fn create(&mut self, value: &[u8]) -> &Entry {
        if self.epoch.is_none() {
            self.revision += 1;
            self.epoch = Some(Entry {
                key: registry().epoch_key().into_bytes(),
                value: value.to_vec(),
                value_bytes: value.len(),
                create_revision: self.revision,
                mod_revision: self.revision,
                version: 1,
            });
        }
        self.epoch.as_ref().expect("created")
    }
}

/// Another host's issuer key.
fn rival_key() -> SigningKey {
    SigningKey::from_bytes(&[0x7a; 32])
}

/// Another host's claim of the fleet epoch, signed with its key.
fn rival_claim() -> Vec<u8> {
    FleetClaim {
        fleet: registry().fleet,
        fleet_id: repoch_protocol::fleet::FleetId([0; 16]),
        host: "rival".into(),
        deployment: DeploymentId([0x77; 16]),
        intent: Hash([0x77; 32]),
        evidence: Hash([0x78; 32]),
        nonce: [0x79; 32],
        floor: 0,
        signature: [0; 64],
    }
    .signed(&rival_key())
    .to_bytes()
}

/// Where the other host's record is, and the record its enrollment created (before any
/// claim): what the issuance reads to check the rival claim's signature.
fn rival_host() -> (String, Entry) {
    let key = format!("{}rival", registry().hosts_prefix());
    let record = FleetHost {
        fleet: registry().fleet,
        host: "rival".into(),
        deployment: DeploymentId([0x77; 16]),
        manifest: Hash([0x76; 32]),
        label: "rival".into(),
        issuer_key: PublicKey::from(&rival_key().verifying_key()),
    }
    .to_bytes();
    let entry = Entry {
        key: key.clone().into_bytes(),
        value_bytes: record.len(),
        value: record,
        create_revision: REVISION_START,
        mod_revision: REVISION_START,
        version: 1,
    };
    (key, entry)
}

struct Shared {
    m: Mutex<St>,
    cv: Condvar,
}

/// Unwinds a run that the checker killed (restart, crash, end of a violating path).
struct Killed;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Read,
    Write,
    Sync,
    World,
    Consumer,
    /// A call to the fleet registry.
    Registry,
}

#[derive(Clone, Copy, Debug)]
enum Alt {
    Proceed,
    Crash,
    Restart,
    Change,
    Vanish,
    /// A write or sync fails with EIO; a registry call gets no answer.
    Eio,
    /// This run's operator interrupts its `repoch recover`.
    Interrupt,
    /// Another host's claim of the fleet epoch lands first.
    Rival,
    /// A holder of an etcd credential rewrites the claimed key with the same bytes (its
    /// value unchanged, its mod revision not its create revision).
    Rewrite,
    Switch(usize),
}

fn name(run: usize) -> String {
    ((b'A' + run as u8) as char).to_string()
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, St> {
        self.m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A choice point of run `me`, before `what`. Returns with the state locked, or
    /// unwinds if the run dies here. `Ok(true)` means: fail this operation with EIO.
    fn point(&self, me: usize, what: &str, op: Op) -> (MutexGuard<'_, St>, bool) {
        let mut st = self.lock();
        loop {
            if st.runs[me].status != Status::Running || st.over {
                drop(st);
                resume_unwind(Box::new(Killed));
            }
            check(&mut st, "");
            if st.violation.is_some() || st.steps >= STEPS_MAX {
                self.end(&mut st);
                continue;
            }
            st.steps += 1;
            let mut alts = vec![Alt::Proceed, Alt::Crash];
            if st.restarts < RESTARTS_MAX {
                alts.push(Alt::Restart);
            }
            alts.push(Alt::Change);
            if st.runs[me].consumer {
                alts.push(Alt::Vanish);
            }
            if op == Op::World && st.runs[me].operator {
                alts.push(Alt::Interrupt);
            }
            if matches!(op, Op::Write | Op::Sync | Op::Registry) {
                alts.push(Alt::Eio);
            }
            // Another host may claim at any time, not only while this one calls.
            if st.registry.as_ref().is_some_and(|r| r.epoch.is_none()) {
                alts.push(Alt::Rival);
            }
            if st.registry.as_ref().is_some_and(|r| r.epoch.is_some()) {
                alts.push(Alt::Rewrite);
            }
            let mut arrival = false;
            for (j, r) in st.runs.iter().enumerate() {
                let first_queued = r.status == Status::Queued && !arrival;
                if j != me && (first_queued || r.status == Status::Running) {
                    alts.push(Alt::Switch(j));
                }
                arrival |= r.status == Status::Queued;
            }
            let c = st.chooser.pick(alts.len() as u32, true) as usize;
            let at = format!("{} {what}", name(me));
            match alts[c] {
                Alt::Proceed => {
                    st.trace.push(at);
                    return (st, false);
                }
                Alt::Eio if op == Op::Registry => {
                    st.trace.push(format!("{at}: gets no answer"));
                    return (st, true);
                }
                Alt::Eio => {
                    st.trace.push(format!("{at}: fails with EIO"));
                    return (st, true);
                }
                Alt::Interrupt => {
                    st.runs[me].operator = false;
                    st.trace
                        .push(format!("{at}: its operator interrupts repoch recover"));
                    return (st, false);
                }
                Alt::Rewrite => {
                    let reg = st.registry.as_mut().expect("a registry");
                    reg.revision += 1;
                    let e = reg.epoch.as_mut().expect("claimed");
                    e.mod_revision = reg.revision;
                    e.version += 1;
                    st.trace.push(format!(
                        "{at}: an etcd writer rewrites the fleet epoch's key"
                    ));
                    return (st, false);
                }
                Alt::Rival => {
                    let reg = st.registry.as_mut().expect("a registry");
                    reg.create(&rival_claim());
                    st.trace
                        .push(format!("{at}: another host claims the fleet epoch first"));
                    return (st, false);
                }
                Alt::Change => {
                    st.world += 1;
                    st.trace.push(format!("{at}: a fact of the world changes"));
                    return (st, false);
                }
                Alt::Vanish => {
                    st.runs[me].consumer = false;
                    st.trace.push(format!("{at}: its consumer vanishes"));
                    return (st, false);
                }
                Alt::Restart => {
                    st.trace
                        .push(format!("{at}: the issuer is killed and restarts"));
                    st.runs[me].status = Status::Killed;
                    if st.lock == Some(me) {
                        st.lock = None;
                    }
                    st.restarts += 1;
                    st.runs.push(Run::queued(true));
                    self.next(&mut st);
                    drop(st);
                    resume_unwind(Box::new(Killed));
                }
                Alt::Crash => {
                    self.crash(&mut st, &at);
                    drop(st);
                    resume_unwind(Box::new(Killed));
                }
                Alt::Switch(j) => {
                    let how = if st.runs[j].status == Status::Queued {
                        "arrives"
                    } else {
                        "resumes"
                    };
                    st.trace.push(format!("{at}: {} {how}", name(j)));
                    self.activate(&mut st, j);
                    while st.active != Some(me) && st.runs[me].status == Status::Running && !st.over
                    {
                        st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                    }
                }
            }
        }
    }

    fn crash(&self, st: &mut St, at: &str) {
        st.trace.push(format!("{at}: the machine crashes"));
        for r in st.runs.iter_mut() {
            if r.status == Status::Running {
                r.status = Status::Killed;
            }
        }
        st.lock = None;
        let sim = st.sim.take().expect("sim");
        let mut choices = std::mem::take(&mut st.chooser);
        let sim = sim.reboot_with(|n| u64::from(choices.pick(n as u32, false)));
        st.chooser = choices;
        st.sim = Some(sim);
        check(st, " after the crash");
        if st.restarts < RESTARTS_MAX {
            st.restarts += 1;
            st.runs.push(Run::queued(true));
        }
        self.next(st);
    }

    /// Makes run `j` the one that runs, starting its thread if it was queued.
    fn activate(&self, st: &mut St, j: usize) {
        st.active = Some(j);
        if st.runs[j].status == Status::Queued {
            st.runs[j].status = Status::Running;
            st.alive_threads += 1;
            let shared = self.self_arc();
            std::thread::spawn(move || contender(shared, j));
        }
        self.cv.notify_all();
    }

    /// After the active run stopped: a paused run resumes, else the next queued arrives.
    fn next(&self, st: &mut St) {
        st.active = None;
        if st.over {
            self.cv.notify_all();
            return;
        }
        let pick = st
            .runs
            .iter()
            .position(|r| r.status == Status::Running)
            .or_else(|| st.runs.iter().position(|r| r.status == Status::Queued));
        match pick {
            Some(j) => self.activate(st, j),
            None => self.cv.notify_all(),
        }
    }

    /// Ends the path: every run dies.
    fn end(&self, st: &mut St) {
        st.over = true;
        st.active = None;
        self.cv.notify_all();
    }

    fn self_arc(&self) -> Arc<Shared> {
        SELF.with(|s| s.borrow().clone().expect("shared"))
    }
}

thread_local! {
    static SELF: std::cell::RefCell<Option<Arc<Shared>>> = const { std::cell::RefCell::new(None) };
}

/// The invariants, on the log as it reads now (`when` names a crash point).
fn check(st: &mut St, when: &str) {
    if st.violation.is_some() {
        return;
    }
    let sim = st.sim.as_ref().expect("sim");
    let bytes = sim.content(st.log_file);
    // The log changes at a few steps only: verify it again only then.
    if st.checked.as_deref() == Some(bytes) && st.dispatched.len() <= 1 {
        return;
    }
    let bytes = bytes.to_vec();
    let rep = verify_log(&bytes, &issuer(), Some(DEP));
    st.checked = Some(bytes);
    let fail = match rep.classification {
        Classification::Corrupt
        | Classification::Forged
        | Classification::Foreign
        | Classification::Empty => Some(format!(
            "the log classifies {}{when} ({:?})",
            rep.classification.as_str(),
            rep.problem
        )),
        _ => None,
    };
    let intents = rep
        .records
        .iter()
        .filter(|r| r.record.record.body.kind() == Kind::Intent)
        .count();
    let fail = fail
        .or_else(|| {
            (intents > 1)
                .then(|| format!("{intents} intent records{when}: a used epoch issued again"))
        })
        .or_else(|| {
            (st.dispatched.len() > 1).then(|| {
                format!(
                    "{} grants dispatched for one deployment (runs {:?})",
                    st.dispatched.len(),
                    st.dispatched.iter().map(|d| name(d.0)).collect::<Vec<_>>()
                )
            })
        });
    if let Some(v) = fail {
        st.violation = Some(v);
    }
}

/// How far a grant's `issued_at` may be from the checker's clock.
const ISSUED_AT_SKEW_SECONDS_MAX: u64 = 600;

/// What must hold when run `me` dispatches `grant`.
fn check_dispatch(st: &St, me: usize, grant: &[u8]) -> Result<(), String> {
    let sim = st.sim.as_ref().expect("sim");
    let durable = sim.durable(st.log_file);
    let rep = verify_log(durable, &issuer(), Some(DEP));
    let find = |k: Kind| {
        rep.records
            .iter()
            .find(|r| r.record.record.body.kind() == k)
    };
    let (Some(intent), Some(consume), Some(receipt)) =
        (find(Kind::Intent), find(Kind::Consume), find(Kind::Receipt))
    else {
        return Err(format!(
            "dispatch without durable intent, consume and receipt: the durable log is {} with {} records",
            rep.classification.as_str(),
            rep.records.len()
        ));
    };
    let EpochBody::Receipt { grant: kept } = &receipt.record.record.body else {
        unreachable!()
    };
    if kept.as_slice() != grant {
        return Err("the dispatched grant differs from the receipt's".into());
    }
    let g = SignedGrant::from_bytes(grant).map_err(|e| format!("grant undecodable: {e}"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if g.grant.issued_at.abs_diff(now) > ISSUED_AT_SKEW_SECONDS_MAX {
        return Err(format!(
            "the grant says it was issued at {}, it is {now}",
            g.grant.issued_at
        ));
    }
    if g.grant.intent != intent.hash || g.grant.consume != consume.hash {
        return Err("the grant names another intent or consume".into());
    }
    let EpochBody::Consume { fencing, .. } = &consume.record.record.body else {
        unreachable!()
    };
    if *fencing != g.grant.fencing {
        return Err(format!(
            "the grant's fencing token {:?} is not its consume record's {fencing:?}",
            g.grant.fencing
        ));
    }
    check_fencing(st, me, g.grant.fencing, intent.hash)?;
    let cached = verify_log(sim.content(st.log_file), &issuer(), Some(DEP));
    if cached
        .records
        .iter()
        .any(|r| r.record.record.body.kind() == Kind::Withheld)
    {
        return Err("a grant after withheld".into());
    }
    let receipt_end = (receipt.offset as usize) + receipt.record.to_bytes().len() + 4;
    match st.runs[me].observed {
        Some((digest, durable_then)) if durable_then >= receipt_end && digest == g.grant.evidence => {
            Ok(())
        }
        Some((digest, durable_then)) => Err(format!(
            "dispatch without an observation equal to the evidence after the receipt was durable (last observation: digest {} with {durable_then} of {receipt_end} log bytes durable)",
            if digest == g.grant.evidence { "equal" } else { "different" }
        )),
        None => Err("dispatch without any observation".into()),
    }
}

/// A grant's fencing token: in the fleet world, the registry's key, as the run last read it
/// (a rewrite after that read no issuer can see), holds this host's claim for this intent,
/// created at the token's revision of the cluster and never modified; outside it, no token.
fn check_fencing(
    st: &St,
    me: usize,
    token: Option<FencingToken>,
    intent: Hash,
) -> Result<(), String> {
    let token = match (&st.registry, token) {
        (None, None) => return Ok(()),
        (None, Some(t)) => {
            return Err(format!(
                "a grant with a fencing token ({t}) and no registry"
            ))
        }
        (Some(_), None) => return Err("a fleet grant without a fencing token".into()),
        (Some(_), Some(t)) => t,
    };
    let Some(Some(e)) = &st.runs[me].looked else {
        return Err(format!(
            "a grant with {token} while the fleet epoch read unclaimed, or was never read"
        ));
    };
    let claim = FleetClaim::from_bytes(&e.value).map_err(|e| format!("the fleet claim: {e}"))?;
    let ours = claim.host == registry().host && claim.deployment == DEP && claim.intent == intent;
    let at = e.create_revision == token.revision as i64 && e.mod_revision == e.create_revision;
    if !ours || !at || token.cluster != CLUSTER {
        return Err(format!(
            "a grant with {token} while the fleet epoch holds {claim} created at revision {} of cluster {CLUSTER:016x}",
            e.create_revision
        ));
    }
    Ok(())
}

// ---- the simulated world, behind the seam ----

struct SimDisk {
    shared: Arc<Shared>,
    me: usize,
}

impl SimDisk {
    fn op<T>(
        &mut self,
        what: &str,
        op: Op,
        f: impl FnOnce(&mut Sim) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let (mut st, eio) = self.shared.point(self.me, what, op);
        let sim = st.sim.as_mut().expect("sim");
        if eio {
            let at = sim.ops();
            sim.set_fault(Some(Fault::Error { at }));
        }
        let r = f(sim);
        sim.set_fault(None);
        r
    }
}

impl Storage for SimDisk {
    type Dir = usize;
    type File = usize;
    fn mkdir_at(&mut self, p: &usize, n: &str, m: u32) -> std::io::Result<()> {
        self.op("mkdir", Op::Write, |s| s.mkdir_at(p, n, m))
    }
    fn open_dir_at(&mut self, p: &usize, n: &str) -> std::io::Result<usize> {
        self.op("open dir", Op::Read, |s| s.open_dir_at(p, n))
    }
    fn create_at(&mut self, d: &usize, n: &str, m: u32) -> std::io::Result<usize> {
        self.op("create", Op::Write, |s| s.create_at(d, n, m))
    }
    fn write(&mut self, f: &usize, b: &[u8]) -> std::io::Result<usize> {
        self.op("write the log", Op::Write, |s| s.write(f, b))
    }
    fn sync_data(&mut self, f: &usize) -> std::io::Result<()> {
        self.op("fdatasync the log", Op::Sync, |s| s.sync_data(f))
    }
    fn sync_dir(&mut self, d: &usize) -> std::io::Result<()> {
        self.op("fsync dir", Op::Sync, |s| s.sync_dir(d))
    }
    fn read_all(&mut self, f: &usize, max: usize) -> std::io::Result<Vec<u8>> {
        self.op("read the log", Op::Read, |s| s.read_all(f, max))
    }
    fn rename_at(&mut self, d: &usize, a: &str, b: &str) -> std::io::Result<()> {
        self.op("rename", Op::Write, |s| s.rename_at(d, a, b))
    }
}

/// The modelled issuer lock: one holder; released when the holder's lock object is dropped
/// (as closing an fd releases an `flock`), or when its run dies.
struct SimLock {
    shared: Arc<Shared>,
    me: usize,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if st.lock == Some(self.me) {
            st.lock = None;
        }
    }
}

struct SimWorld {
    shared: Arc<Shared>,
    me: usize,
}

/// The scripted world: what it shows depends on its version, which a choice changes.
struct SimObserver {
    shared: Arc<Shared>,
    me: usize,
    first_ready: Option<Hash>,
}

impl Observe for SimObserver {
    fn observe(&mut self, _fences: &mut Fences) -> Observation {
        let (mut st, _) = self.shared.point(self.me, "observe", Op::World);
        // Each change of the world changes the lineage fact's observation, which still
        // holds (the journal grew: new evidence, nothing failed); every third also makes
        // the unit active, and from the third on the READY digest differs.
        let v = st.world;
        let ready = Hash::of(&(v / 3).to_be_bytes());
        let approved = *self.first_ready.get_or_insert(ready);
        let mut facts = vec![Fact::ok(
            "lineage",
            "/srv/x/journal",
            "the enrolled journal, append-only, verified",
            &format!("verified, {v} producer records"),
        )];
        const WANT: &str = "masked, inactive, MainPID 0, no reload pending";
        facts.push(if v % 3 == 2 {
            Fact::failed(
                "unit",
                "x.service",
                WANT,
                "masked active/running",
                Reason::UnitActive,
            )
        } else {
            Fact::ok("unit", "x.service", WANT, "masked inactive")
        });
        facts.push(if ready == approved {
            Fact::ok(
                "ready",
                "/srv/x/READY",
                &format!("sha256 {approved}"),
                &format!("sha256 {ready}"),
            )
        } else {
            Fact::failed(
                "ready",
                "/srv/x/READY",
                &format!("sha256 {approved}"),
                &format!("sha256 {ready}"),
                Reason::ReadyChanged,
            )
        });
        let digest = evidence_digest(&facts);
        let durable = st.sim.as_ref().expect("sim").durable(st.log_file).len();
        let run = &mut st.runs[self.me];
        run.observed = Some((digest, durable));
        run.first_facts.get_or_insert_with(|| facts.clone());
        run.last_facts = facts.clone();
        Observation {
            facts,
            digest,
            ready_sha256: ready,
            frontier_seq: 0,
            frontier_hash: Hash::ZERO,
            unknown_ops: vec![],
        }
    }
    fn consumer_exe_baseline(&self) -> Option<(Identity, Hash)> {
        let p = peer(0);
        Some((p.exe, p.exe_sha256))
    }
}

impl World for SimWorld {
    type Storage = SimDisk;
    type Lock = SimLock;
    type Observer = SimObserver;
    fn open(
        &mut self,
        issuer: &PublicKey,
        id: DeploymentId,
    ) -> Result<Objects<usize, SimLock>, Refusal> {
        let (st, _) = self.shared.point(self.me, "open the deployment", Op::World);
        let sim = st.sim.as_ref().expect("sim");
        let missing = || Refusal::new(Reason::StateReplaced, "state", "present", "missing");
        let deps = match sim.lookup(sim.root(), "deployments") {
            Some(Node::Dir(d)) => d,
            _ => return Err(missing()),
        };
        let Some(Node::Dir(dir)) = sim.lookup(deps, &id.to_hex()) else {
            return Err(missing());
        };
        let (Some(Node::File(mf)), Some(Node::File(log))) = (
            sim.lookup(dir, "manifest.cbor"),
            sim.lookup(dir, "epoch.log"),
        ) else {
            return Err(missing());
        };
        let bytes = sim.content(mf).to_vec();
        let signed = SignedManifest::from_bytes(&bytes)
            .ok()
            .filter(|s| s.verify(issuer))
            .ok_or_else(|| Refusal::new(Reason::ManifestForged, "manifest", "signed", "not"))?;
        drop(st);
        Ok(Objects {
            id,
            manifest: signed.manifest,
            manifest_hash: Hash::of(&bytes),
            log,
            lock: SimLock {
                shared: self.shared.clone(),
                me: self.me,
            },
            read_only: false,
        })
    }
    fn lock(&mut self, lock: &SimLock) -> Result<(), Refusal> {
        let (mut st, _) = self
            .shared
            .point(self.me, "take the issuer lock", Op::World);
        match st.lock {
            None => {
                st.lock = Some(lock.me);
                Ok(())
            }
            Some(h) => Err(Refusal::new(
                Reason::IssuerBusy,
                "issuer.lock",
                "unlocked",
                format!("held by {}", name(h)),
            )),
        }
    }
    fn storage(&mut self) -> SimDisk {
        SimDisk {
            shared: self.shared.clone(),
            me: self.me,
        }
    }
    fn observer(&mut self, _m: &Manifest, _approve: Option<Hash>) -> SimObserver {
        SimObserver {
            shared: self.shared.clone(),
            me: self.me,
            first_ready: None,
        }
    }
    fn fleet(&mut self, r: &Registry) -> Result<Box<dyn Fleet>, Refusal> {
        assert_eq!(*r, registry(), "the enrolled registry");
        Ok(Box::new(SimFleet {
            shared: self.shared.clone(),
            me: self.me,
        }))
    }
}

/// The registry client of one run: each call a choice point ([`Op::Registry`]).
struct SimFleet {
    shared: Arc<Shared>,
    me: usize,
}

fn no_answer() -> RegistryError {
    RegistryError::Unanswered("the modelled call got no answer".into())
}

impl Fleet for SimFleet {
    /// The modelled registry grants each host the least privilege: every probe of a key no
    /// host may write is refused (its unanswered probe is a refusal before the intent, as
    /// the epoch key's probe, which the model explores).
    fn may_write(&mut self, _key: &[u8]) -> Result<bool, RegistryError> {
        Ok(false)
    }
    fn keys(&mut self, _prefix: &[u8], _max: usize) -> Result<Vec<Vec<u8>>, RegistryError> {
        Ok(Vec::new())
    }
    /// The modelled cluster is one member (the manifest pins none): its one answer.
    fn get_each(&mut self, key: &[u8]) -> Vec<Result<Said, RegistryError>> {
        let answer = self.get(key).map(|(cluster, entry)| Said {
            member: 1,
            cluster,
            entry,
        });
        vec![answer]
    }
    fn get(&mut self, key: &[u8]) -> Result<(u64, Option<Entry>), RegistryError> {
        let (rival, record) = rival_host();
        if key == rival.as_bytes() {
            let (_st, unanswered) =
                self.shared
                    .point(self.me, "read the rival's host record", Op::Registry);
            return match unanswered {
                true => Err(no_answer()),
                false => Ok((CLUSTER, Some(record))),
            };
        }
        assert_eq!(key, registry().epoch_key().as_bytes());
        let (mut st, unanswered) = self
            .shared
            .point(self.me, "read the fleet epoch", Op::Registry);
        if unanswered {
            return Err(no_answer());
        }
        let epoch = st.registry.as_ref().expect("a registry").epoch.clone();
        st.runs[self.me].looked = Some(epoch.clone());
        Ok((CLUSTER, epoch))
    }
    fn writable(&mut self, key: &[u8]) -> Result<(), RegistryError> {
        assert_eq!(key, registry().epoch_key().as_bytes());
        // No answer stands for every refusal too (an alarm, no permission): either way the
        // claim could not be made now.
        let (mut st, unanswered) =
            self.shared
                .point(self.me, "probe the claim's write", Op::Registry);
        if unanswered {
            return Err(no_answer());
        }
        st.runs[self.me].writable = true;
        Ok(())
    }
    fn claim(&mut self, key: &[u8], value: &[u8]) -> Result<Claimed, RegistryError> {
        assert_eq!(key, registry().epoch_key().as_bytes());
        let (mut st, unanswered) =
            self.shared
                .point(self.me, "claim the fleet epoch", Op::Registry);
        if unanswered {
            // Lost before etcd applied it, or its answer lost after: both enumerated.
            if st.chooser.pick(2, false) == 1 {
                let reg = st.registry.as_mut().expect("a registry");
                if reg.create(value).value == value {
                    st.trace
                        .push("  (the claim applied; its answer was lost)".into());
                }
            }
            return Err(no_answer());
        }
        let entry = st
            .registry
            .as_mut()
            .expect("a registry")
            .create(value)
            .clone();
        Ok(if entry.value == value {
            Claimed::Ours {
                cluster: CLUSTER,
                entry,
            }
        } else {
            Claimed::Theirs {
                cluster: CLUSTER,
                entry,
            }
        })
    }
}

struct SimLink {
    shared: Arc<Shared>,
    me: usize,
    sent: Option<Vec<u8>>,
}

impl SimLink {
    fn call(&self, what: &str) -> Result<MutexGuard<'_, St>, String> {
        let (st, _) = self.shared.point(self.me, what, Op::Consumer);
        if st.runs[self.me].consumer {
            Ok(st)
        } else {
            Err("the consumer is gone".into())
        }
    }
}

impl ConsumerLink for SimLink {
    fn challenge(&mut self, c: &Challenge) -> Result<[u8; 64], LinkError> {
        drop(self.call("challenge the consumer")?);
        Ok(c.answer(&consumer_key()))
    }
    fn dispatch(
        &mut self,
        grant: &[u8],
        _checkpoint: &str,
        _fences: &[&std::os::fd::OwnedFd],
    ) -> Result<(), LinkError> {
        let mut st = self.call("dispatch the grant")?;
        if !std::mem::take(&mut st.runs[self.me].asked_alive) {
            st.violation.get_or_insert(format!(
                "{} dispatches without asking whether its consumer is alive",
                name(self.me)
            ));
        }
        if let Err(v) = check_dispatch(&st, self.me, grant) {
            st.violation
                .get_or_insert(format!("{} dispatches: {v}", name(self.me)));
        }
        st.dispatched.push((self.me, grant.to_vec()));
        st.trace
            .push(format!("{} dispatched its grant", name(self.me)));
        drop(st);
        self.sent = Some(grant.to_vec());
        Ok(())
    }
    fn refuse(&mut self, _reason: Reason, _detail: &str) {}
    fn describe_again(&mut self) -> Result<ConsumerPeer, LinkError> {
        drop(self.call("describe the consumer again")?);
        Ok(peer(100 + self.me as u32))
    }
    fn alive(&mut self) -> Result<(), LinkError> {
        let mut st = self.call("is the consumer alive")?;
        st.runs[self.me].asked_alive = true;
        Ok(())
    }
    fn acknowledgement(&mut self) -> Result<Hash, LinkError> {
        let mut st = self.call("the consumer's acknowledgement")?;
        let sent = Hash::of(self.sent.as_deref().unwrap_or_default());
        // A deviation: the consumer acknowledges other bytes than it was sent.
        if st.chooser.pick(2, true) == 1 {
            st.trace.push(format!(
                "{}'s consumer acknowledges other bytes",
                name(self.me)
            ));
            return Ok(Hash::of(b"other bytes"));
        }
        st.runs[self.me].acknowledged = Some(sent);
        Ok(sent)
    }
    fn operator_present(&mut self) -> Result<(), LinkError> {
        let mut st = self.shared.lock();
        let run = &mut st.runs[self.me];
        run.asked_operator = run.operator;
        match run.operator {
            true => Ok(()),
            false => Err("it went away".to_owned().into()),
        }
    }
    fn last_word(&mut self, grant_sha256: &Hash) -> Result<(), (Reason, LinkError)> {
        let mut st = self
            .call("the last word")
            .map_err(|e| (Reason::ConsumerLost, e.into()))?;
        st.runs[self.me].told_granted = Some(*grant_sha256);
        Ok(())
    }
}

/// Run `me`'s admin stream: what it reports is kept, and a `consume` record must follow
/// an answer that the consumer is alive.
fn progress(shared: Arc<Shared>, me: usize) -> issuance::Progress {
    Box::new(move |e| {
        let mut st = shared.lock();
        match e {
            AdminEvent::Progress { step, .. } => st.runs[me].steps.push(step),
            AdminEvent::Fact(_) => st.runs[me].facts += 1,
            AdminEvent::Record { kind, .. } => {
                // The fleet world: an intent only after a look that found the fleet epoch
                // unclaimed (another host may claim it after the look: the claim loses).
                if kind == "intent" && st.registry.is_some() && st.runs[me].looked != Some(None) {
                    st.violation.get_or_insert(format!(
                        "{} appends its intent without having found the fleet epoch unclaimed",
                        name(me)
                    ));
                }
                // ... and only once the registry said it would take the claim.
                if kind == "intent" && st.registry.is_some() && !st.runs[me].writable {
                    st.violation.get_or_insert(format!(
                        "{} appends its intent before the registry said it would take the claim",
                        name(me)
                    ));
                }
                if matches!(kind.as_str(), "intent" | "consume")
                    && !std::mem::take(&mut st.runs[me].asked_operator)
                {
                    st.violation.get_or_insert(format!(
                        "{} appends {kind} without asking whether its operator is there",
                        name(me)
                    ));
                }
                if kind == "consume" && !std::mem::take(&mut st.runs[me].asked_alive) {
                    st.violation.get_or_insert(format!(
                        "{} appends consume without asking whether its consumer is alive",
                        name(me)
                    ));
                }
                st.runs[me].records.push(kind);
            }
            AdminEvent::Outcome { .. } => {}
        }
    })
}

/// What a run that ended (not killed) must have said: a granted run its steps in order and
/// its first observation's facts; a refused one `busy` exactly when the issuer was busy, and
/// its epoch as used (`Ended::used`) exactly when it reported its intent durable.
fn check_end(run: &Run, ended: &Result<issuance::Granted, issuance::Ended>) -> Result<(), String> {
    match ended {
        Ok(g) => {
            if run.acknowledged != Some(Hash::of(&g.grant)) {
                return Err("granted without its consumer acknowledging these bytes".into());
            }
            if run.told_granted != Some(Hash::of(&g.grant)) {
                return Err("granted without telling its consumer so (the last word)".into());
            }
            let mut want = [
                "reserve",
                "observe",
                "evidence",
                "connect",
                "custody",
                "final-verification-1",
                "final-verification-2",
                "dispatch",
                "acknowledge",
            ]
            .into_iter()
            .peekable();
            for s in &run.steps {
                if want.peek() == Some(&s.as_str()) {
                    want.next();
                }
            }
            if let Some(missing) = want.next() {
                return Err(format!(
                    "granted without reporting {missing}: {:?}",
                    run.steps
                ));
            }
            if run.facts == 0 {
                return Err("granted without reporting a fact".into());
            }
            Ok(())
        }
        Err(e) => {
            let busy = matches!(&e.refusals[..], [r] if r.reason == Reason::IssuerBusy);
            if (e.outcome.as_str() == "busy") != busy {
                return Err(format!(
                    "ended {} with reasons {:?}",
                    e.outcome.as_str(),
                    e.refusals
                        .iter()
                        .map(|r| r.reason.as_str())
                        .collect::<Vec<_>>()
                ));
            }
            // `evidence-changed` names a fact that failed or reads otherwise than at first.
            for r in e
                .refusals
                .iter()
                .filter(|r| r.reason == Reason::EvidenceChanged)
            {
                let first = run.first_facts.as_deref().unwrap_or_default();
                let named = run.last_facts.iter().zip(first).find(|(f, was)| {
                    format!("{} {}", f.kind, f.subject) == r.subject
                        && (f.reason.is_some() || f != was)
                        && r.observed.starts_with(&f.observed)
                });
                if named.is_none() {
                    return Err(format!(
                        "evidence-changed names {} ({}), which neither failed nor changed",
                        r.subject, r.observed
                    ));
                }
            }
            let intent = run.records.iter().any(|k| k == "intent");
            match e.used {
                Some(Classification::Enrolled) => {
                    Err("ended with its epoch used as enrolled".into())
                }
                Some(_) if !intent => Err("ended with its epoch used, no intent reported".into()),
                None if intent => Err("ended with its intent reported, the epoch not used".into()),
                _ => Ok(()),
            }
        }
    }
}

/// One contender: a full issuance, as the daemon runs it.
fn contender(shared: Arc<Shared>, me: usize) {
    SELF.with(|s| *s.borrow_mut() = Some(shared.clone()));
    {
        let mut st = shared.lock();
        while st.active != Some(me) && st.runs[me].status == Status::Running && !st.over {
            st = shared.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
    let s2 = shared.clone();
    let r = catch_unwind(AssertUnwindSafe(move || {
        let mut world = SimWorld {
            shared: s2.clone(),
            me,
        };
        let contender = Contender {
            pid: 1000 + me as u32,
            start_ticks: me as u64,
            boot_id: "sim".into(),
        };
        issuance::run_in(
            &mut world,
            issuer_key(),
            DEP,
            None,
            contender,
            progress(s2.clone(), me),
            |expected, _| {
                let p = peer(100 + me as u32);
                let auth =
                    expected.authenticate(&p, &PublicKey::from(&consumer_key().verifying_key()))?;
                Ok((
                    SimLink {
                        shared: s2.clone(),
                        me,
                        sent: None,
                    },
                    auth,
                ))
            },
        )
    }));
    let mut st = shared.lock();
    if let Ok(ended) = &r {
        if let Err(v) = check_end(&st.runs[me], ended) {
            st.violation.get_or_insert(format!("{} {v}", name(me)));
        }
    }
    match r {
        Ok(Ok(_)) => st.runs[me].outcome = "granted".into(),
        Ok(Err(e)) => {
            let reasons: Vec<&str> = e.refusals.iter().map(|r| r.reason.as_str()).collect();
            // A refusal after the intent says so: its epoch was withheld.
            let withheld = if st.runs[me].records.iter().any(|k| k == "withheld") {
                " withheld"
            } else {
                ""
            };
            st.runs[me].outcome = format!("{} {reasons:?}{withheld}", e.outcome.as_str());
        }
        Err(p) if p.is::<Killed>() => st.runs[me].outcome = "killed".into(),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            st.violation
                .get_or_insert(format!("{} panicked: {msg}", name(me)));
        }
    }
    let outcome = st.runs[me].outcome.clone();
    if st.runs[me].status == Status::Running {
        st.runs[me].status = Status::Done;
        st.trace.push(format!("{} ends: {outcome}", name(me)));
        if st.lock == Some(me) {
            st.lock = None;
        }
        check(&mut st, " at the end of a run");
        if st.violation.is_some() {
            shared.end(&mut st);
        } else if st.active == Some(me) {
            shared.next(&mut st);
        }
    }
    st.alive_threads -= 1;
    shared.cv.notify_all();
}

/// What one path found.
struct PathResult {
    chooser: Chooser,
    violation: Option<String>,
    trace: Vec<String>,
}

fn run_path(disk: &Disk, contenders: usize, chooser: Chooser) -> PathResult {
    let Disk { sim, deps, fleet } = disk;
    let Some(Node::Dir(dir)) = sim.lookup(*deps, &DEP.to_hex()) else {
        panic!("not enrolled")
    };
    let Some(Node::File(log_file)) = sim.lookup(dir, "epoch.log") else {
        panic!("no log")
    };
    let shared = Arc::new(Shared {
        m: Mutex::new(St {
            sim: Some(sim.clone()),
            log_file,
            chooser,
            runs: (0..contenders).map(|_| Run::queued(false)).collect(),
            active: None,
            alive_threads: 0,
            lock: None,
            world: 0,
            dispatched: vec![],
            violation: None,
            trace: vec![],
            steps: 0,
            restarts: 0,
            over: false,
            checked: None,
            registry: fleet.then_some(SimRegistry {
                revision: REVISION_START,
                epoch: None,
            }),
        }),
        cv: Condvar::new(),
    });
    SELF.with(|s| *s.borrow_mut() = Some(shared.clone()));
    let mut st = shared.lock();
    shared.activate(&mut st, 0);
    let started = Instant::now();
    while st.alive_threads > 0 || st.active.is_some() {
        let (next, _) = shared
            .cv
            .wait_timeout(st, PATH_WAIT_MAX)
            .unwrap_or_else(|p| p.into_inner());
        st = next;
        assert!(
            started.elapsed() < PATH_WAIT_MAX,
            "a path did not finish in {PATH_WAIT_MAX:?} (the checker deadlocked): {}\nreplay: REPOCH_SIM_TRACE={}",
            st.trace.join("\n  "),
            encode(&st.chooser.taken.iter().map(|t| t.0).collect::<Vec<_>>())
        );
    }
    if st.violation.is_none() {
        check(&mut st, " at the end");
    }
    let mut trace = std::mem::take(&mut st.trace);
    for (i, r) in st.runs.iter().enumerate() {
        let tag = if r.restarted { " (restarted)" } else { "" };
        trace.push(format!("run {}{tag}: {}", name(i), r.outcome));
    }
    PathResult {
        chooser: std::mem::take(&mut st.chooser),
        violation: st.violation.take(),
        trace,
    }
}

/// Zeroes the deviations one by one while the path still violates: a short replayable trace.
fn shrink(disk: &Disk, contenders: usize, choices: Vec<u32>) -> PathResult {
    let replay = |p: Vec<u32>| {
        run_path(
            disk,
            contenders,
            Chooser {
                prefix: p,
                budget: u32::MAX,
                ..Chooser::default()
            },
        )
    };
    let mut best = replay(choices);
    assert!(best.violation.is_some(), "the violation does not replay");
    let mut i = best.chooser.taken.len();
    while i > 0 {
        i -= 1;
        let mut p: Vec<u32> = best.chooser.taken.iter().map(|t| t.0).collect();
        if p.get(i).copied().unwrap_or(0) == 0 {
            continue;
        }
        p[i] = 0;
        let r = replay(p);
        if r.violation.is_some() {
            best = r;
            i = i.min(best.chooser.taken.len());
        }
    }
    best
}

fn report(disk: &Disk, contenders: usize, found: PathResult, what: &str) -> ! {
    let small = shrink(
        disk,
        contenders,
        found.chooser.taken.iter().map(|t| t.0).collect(),
    );
    let choices: Vec<u32> = small.chooser.taken.iter().map(|t| t.0).collect();
    let deviations = choices.iter().filter(|&&c| c != 0).count();
    panic!(
        "{what}: {}\n{} steps, {deviations} deviation(s):\n  {}\nreplay: REPOCH_SIM_TRACE={} REPOCH_SIM_CONTENDERS={contenders} REPOCH_SIM_FLEET={} cargo test -p repoch-issuer --test checker replay",
        small.violation.unwrap_or_default(),
        small.trace.len(),
        small.trace.join("\n  "),
        encode(&choices),
        u8::from(disk.fleet)
    )
}

/// Every path with up to `budget` deviations, fewest deviations first (so a violation is
/// found with as few as it needs); returns how many paths ran.
fn exhaustive(disk: &Disk, contenders: usize, budget: u32) -> u64 {
    let mut paths = 0;
    for b in 0..=budget {
        let mut prefix = Some(vec![]);
        while let Some(p) = prefix {
            let r = run_path(
                disk,
                contenders,
                Chooser {
                    prefix: p,
                    budget: b,
                    ..Chooser::default()
                },
            );
            paths += 1;
            if r.violation.is_some() {
                report(
                    disk,
                    contenders,
                    r,
                    &format!(
                        "exhaustive search ({contenders} contenders, up to {b} deviations), path {paths}"
                    ),
                );
            }
            prefix = r.chooser.next_prefix();
        }
    }
    paths
}

fn walks(disk: &Disk, contenders: usize, base: u64, seeds: u64) {
    for i in 0..seeds {
        let seed = base.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(i);
        let r = run_path(
            disk,
            contenders,
            Chooser {
                budget: WALK_DEVIATIONS_MAX,
                walk: Some(seed),
                ..Chooser::default()
            },
        );
        if r.violation.is_some() {
            report(disk, contenders, r, &format!("random walk, seed {seed}"));
        }
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The stated bound: every path of 2 contenders with up to 2 deviations, and of 3 contenders
/// with up to 1.
#[test]
fn exhaustive_to_the_bound() {
    let disk = enrolled();
    let t = Instant::now();
    let two = exhaustive(&disk, 2, 2);
    let three = exhaustive(&disk, 3, 1);
    eprintln!(
        "exhaustive: {two} paths (2 contenders, 2 deviations), {three} paths (3 contenders, 1 deviation) in {:?}",
        t.elapsed()
    );
}

/// Seeded random walks beyond the bound: `REPOCH_SIM_SEEDS` (10,000 by default; the
/// documented long run is 1,000,000), `REPOCH_SIM_SEED` the base seed.
#[test]
fn random_walks() {
    let disk = enrolled();
    let seeds = env_u64("REPOCH_SIM_SEEDS", 10_000);
    let base = env_u64("REPOCH_SIM_SEED", 0x5eed);
    let t = Instant::now();
    walks(&disk, 2, base, seeds / 2);
    walks(&disk, 3, base ^ 0x3, seeds - seeds / 2);
    eprintln!("{seeds} random walks in {:?}", t.elapsed());
}

/// Replays a printed trace: `REPOCH_SIM_TRACE=... REPOCH_SIM_CONTENDERS=n`, in the fleet
/// world with `REPOCH_SIM_FLEET=1`.
#[test]
fn replay() {
    let Ok(trace) = std::env::var("REPOCH_SIM_TRACE") else {
        return;
    };
    let contenders = env_u64("REPOCH_SIM_CONTENDERS", 2) as usize;
    let disk = enrolled_as(env_u64("REPOCH_SIM_FLEET", 0) == 1);
    let r = run_path(
        &disk,
        contenders,
        Chooser {
            prefix: decode(&trace),
            budget: u32::MAX,
            ..Chooser::default()
        },
    );
    eprintln!("{}", r.trace.join("\n"));
    if let Some(v) = r.violation {
        panic!("replayed: {v}");
    }
}

/// The checker reaches what it claims to explore: a grant, a withheld epoch, a busy
/// contender, a crash left torn, a restarted issuer refused, a consumer acknowledging
/// other bytes.
#[test]
fn the_search_reaches_every_outcome() {
    reaches(
        &enrolled(),
        77,
        &[
            ("granted", "granted"),
            ("epoch-consumed", "epoch-consumed"),
            ("issuer-busy", "issuer-busy"),
            ("epoch-torn", "epoch-torn"),
            ("evidence-changed", "evidence-changed"),
            ("consumer-lost", "consumer-lost"),
            ("store-poisoned", "store-poisoned"),
            ("crashes", "crash"),
            ("acknowledges other bytes", "a false acknowledgement"),
            ("[\"recover-cancelled\"]", "recover-cancelled"),
        ],
    );
}

/// 2,000 random walks of 2 contenders over `disk` (seeds salted with `salt`): each outcome
/// `what` must appear in some walk's trace, as a line holding its `key`.
fn reaches(disk: &Disk, salt: u64, outcomes: &[(&str, &'static str)]) {
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..2_000u64 {
        let r = run_path(
            disk,
            2,
            Chooser {
                budget: WALK_DEVIATIONS_MAX,
                walk: Some(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt),
                ..Chooser::default()
            },
        );
        for line in &r.trace {
            for (key, what) in outcomes {
                if line.contains(key) {
                    seen.insert(*what);
                }
            }
        }
    }
    for (_, want) in outcomes {
        assert!(seen.contains(want), "no walk reached {want}: {seen:?}");
    }
}

/// The fleet world's bound: every path of 1 contender with up to 2 deviations and of 2 with
/// up to 1, among them a registry call unanswered (a claim applied or not) and another
/// host's claim landing first (the other host is the second contender the registry sees).
#[test]
fn the_fleet_world_exhaustive_to_the_bound() {
    let disk = enrolled_as(true);
    let t = Instant::now();
    let one = exhaustive(&disk, 1, 2);
    let two = exhaustive(&disk, 2, 1);
    eprintln!(
        "fleet exhaustive: {one} paths (1 contender, 2 deviations), {two} paths (2 contenders, 1 deviation) in {:?}",
        t.elapsed()
    );
}

/// Seeded random walks in the fleet world: a tenth of `REPOCH_SIM_SEEDS`.
#[test]
fn the_fleet_world_random_walks() {
    let disk = enrolled_as(true);
    let seeds = env_u64("REPOCH_SIM_SEEDS", 10_000) / 10;
    let base = env_u64("REPOCH_SIM_SEED", 0x5eed) ^ 0xf1ee7;
    let t = Instant::now();
    walks(&disk, 2, base, seeds / 2);
    walks(&disk, 3, base ^ 0x3, seeds - seeds / 2);
    eprintln!("{seeds} fleet random walks in {:?}", t.elapsed());
}

/// The fleet search reaches what it claims to explore: a grant carrying its token, another
/// host's claim first (refused before the intent, and withheld after it), a registry that
/// does not answer (refused before the intent), a claim whose answer was lost (uncertain),
/// the key rewritten by an etcd writer after the claim (withheld `registry-changed`).
#[test]
fn the_fleet_search_reaches_every_outcome() {
    reaches(
        &enrolled_as(true),
        0xf1ee7,
        &[
            (": granted", "granted"),
            ("another host claims", "a rival's claim"),
            ("refused [\"epoch-consumed\"]", "epoch-consumed"),
            ("refused [\"registry-unavailable\"]", "registry-unavailable"),
            ("uncertain [\"registry-unavailable\"]", "uncertain"),
            ("the claim applied; its answer was lost", "a lost answer"),
            ("rewrites the fleet epoch", "a rewrite"),
            (
                "[\"registry-changed\"] withheld",
                "registry-changed, withheld",
            ),
            ("[\"epoch-consumed\"] withheld", "epoch-consumed, withheld"),
        ],
    );
}

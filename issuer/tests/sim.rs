//! Deterministic storage-fault simulation of enrollment and of every append (docs/ARCHITECTURE.md, "Testing").
//!
//! The same `enroll_sequence` and `EpochLog::append` code that runs on the real file system
//! runs here on `Sim`, which crashes before a chosen operation and then resolves every
//! unsynced write (applied, dropped or torn at sector granularity) and every unsynced
//! directory operation (an ordered prefix survives). After each crash the state is
//! reopened and must classify to an allowed state: never a panic, never a later phase
//! without its earlier ones, never a lost acknowledged record. Failures print their seed.

use ed25519_dalek::SigningKey;
use repoch_issuer::log::{enroll_sequence, EpochLog};
use repoch_issuer::sim::{Fault, Node, Sim};
use repoch_issuer::storage::Storage;
use repoch_protocol::epoch::{
    Classification, Contender, EpochBody, EpochRecord, Kind, SignedEpochRecord,
};
use repoch_protocol::grant::{Challenge, ConsumerPeer};
use repoch_protocol::{DeploymentId, Hash, Identity, PublicKey, Reason};

const DEP: DeploymentId = DeploymentId([0x5e; 16]);
/// The fleet registry's token the consume record and the grant carry: the records a
/// recovery with a `[registry]` appends, crashed and torn like any others.
const FENCING: Option<repoch_protocol::fleet::FencingToken> =
    Some(repoch_protocol::fleet::FencingToken {
        cluster: 0xc1,
        revision: 44,
    });

fn key() -> SigningKey {
    SigningKey::from_bytes(&[7; 32])
}
fn issuer() -> PublicKey {
    PublicKey::from(&key().verifying_key())
}

fn peer() -> ConsumerPeer {
    ConsumerPeer {
        pid: 9,
        uid: 0,
        gid: 0,
        exe: Identity {
            dev: 1,
            ino: 2,
            uid: 0,
            gid: 0,
            mode: 0o100755,
            birth: None,
        },
        exe_sha256: Hash([1; 32]),
        cgroup: "/".into(),
    }
}

fn consumer_key() -> SigningKey {
    SigningKey::from_bytes(&[8; 32])
}

/// A receipt whose grant names the intent and consume records by their hashes, as every
/// receipt must (docs/PROTOCOL.md, "The epoch log").
fn receipt(intent: Hash, consume: Hash) -> EpochBody {
    use repoch_protocol::cbor::Canonical as _;
    use repoch_protocol::grant::{Grant, SignedGrant};
    let g = Grant {
        deployment: DEP,
        intent,
        consume,
        evidence: Hash([4; 32]),
        consumer_key: PublicKey::from(&consumer_key().verifying_key()),
        ready_path: "/srv/READY".into(),
        ready_sha256: Hash([6; 32]),
        fences: Vec::new(),
        frontier_seq: 0,
        frontier_hash: Hash::ZERO,
        unknown_ops: Vec::new(),
        issued_at: 1,
        listeners: Vec::new(),
        fencing: FENCING,
    };
    EpochBody::Receipt {
        grant: SignedGrant::sign(g, &key()).to_bytes(),
    }
}

/// A manifest large enough to span several sectors, so tearing has something to tear.
fn manifest_bytes() -> Vec<u8> {
    (0..1500u32).map(|i| (i % 251) as u8).collect()
}

/// The consume answering the custody challenge for the intent record `intent`.
fn consume(intent: Hash) -> EpochBody {
    let c = Challenge {
        deployment: DEP,
        intent,
        nonce: [3; 32],
    };
    EpochBody::Consume {
        consumer: peer(),
        custody: c.answer(&consumer_key()),
        challenge: c,
        fencing: FENCING,
    }
}

fn bodies(withheld_at: Option<usize>) -> Vec<EpochBody> {
    let mut v = vec![
        EpochBody::Intent {
            evidence: Hash([4; 32]),
            facts: vec![repoch_protocol::Fact::ok("fence", "/srv/lock", "held", "held"); 20],
            contender: Contender {
                pid: 1,
                start_ticks: 2,
                boot_id: "b".into(),
            },
            consumer: peer(),
        },
        // Its challenge names the intent record's hash, made in `run`.
        consume(Hash::ZERO),
        // Its grant is made in `run`, from the hashes of the records it follows.
        EpochBody::Receipt { grant: Vec::new() },
    ];
    if let Some(at) = withheld_at {
        v.truncate(at);
        v.push(EpochBody::Withheld {
            reason: Reason::EvidenceChanged,
            detail: "changed".into(),
        });
    }
    v
}

/// What the run acknowledged before it stopped.
#[derive(Debug, Default)]
struct Acked {
    enrolled: bool,
    records: usize,
}

/// Runs enrollment then the appends, stopping at the first error.
fn run(sim: &mut Sim, deps: usize, withheld_at: Option<usize>) -> Acked {
    let mut acked = Acked::default();
    let genesis = SignedEpochRecord::sign(
        EpochRecord {
            deployment: DEP,
            seq: 0,
            prev: Hash::ZERO,
            body: EpochBody::Genesis {
                manifest: Hash::of(&manifest_bytes()),
                issuer_key: issuer(),
                predecessor: None,
            },
        },
        &key(),
    );
    if enroll_sequence(sim, &deps, &DEP, issuer(), |_, _| {
        Ok::<_, std::convert::Infallible>((manifest_bytes(), genesis.clone()))
    })
    .is_err()
    {
        return acked;
    }
    acked.enrolled = true;
    acked.records = 1;
    let dir = sim.open_dir_at(&deps, &DEP.to_hex()).unwrap();
    let Some(Node::File(f)) = sim.lookup(dir, "epoch.log") else {
        panic!("no log after enrollment")
    };
    let mut log = EpochLog::open(sim, f, issuer(), DEP).unwrap();
    let mut hashes = vec![log.last_hash()];
    for mut body in bodies(withheld_at) {
        match body {
            EpochBody::Consume { .. } => body = consume(hashes[1]),
            EpochBody::Receipt { .. } => body = receipt(hashes[1], hashes[2]),
            _ => {}
        }
        let rec = SignedEpochRecord::sign(
            EpochRecord {
                deployment: DEP,
                seq: log.next_seq(),
                prev: log.last_hash(),
                body,
            },
            &key(),
        );
        if log.append(sim, &rec).is_err() {
            // Never retried: a poisoned log refuses every later append without touching disk.
            let ops = sim.ops();
            assert!(log.append(sim, &rec).is_err());
            assert_eq!(sim.ops(), ops, "a failed append was retried");
            return acked;
        }
        acked.records += 1;
        hashes.push(log.last_hash());
    }
    acked
}

fn fresh(seed: u64) -> (Sim, usize) {
    let mut sim = Sim::new(seed);
    let root = sim.root();
    sim.mkdir_at(&root, "deployments", 0o700).unwrap();
    sim.sync_dir(&root).unwrap();
    let deps = sim.open_dir_at(&root, "deployments").unwrap();
    (sim, deps)
}

/// Checks the invariants on the rebooted machine. Returns the classification.
fn check(sim: &mut Sim, deps: usize, acked: &Acked, ctx: &str) -> Option<Classification> {
    let names = sim.names(deps);
    assert!(
        names
            .iter()
            .all(|n| n == &DEP.to_hex() || n.starts_with('.')),
        "{ctx}: stray entry {names:?}"
    );
    let Some(Node::Dir(dir)) = sim.lookup(deps, &DEP.to_hex()) else {
        assert!(!acked.enrolled, "{ctx}: acknowledged enrollment lost");
        return None;
    };
    // Under its name, a deployment is whole: manifest and genesis durable.
    let Some(Node::File(mf)) = sim.lookup(dir, "manifest.cbor") else {
        panic!("{ctx}: deployment without manifest")
    };
    assert_eq!(
        sim.content(mf),
        manifest_bytes().as_slice(),
        "{ctx}: manifest torn under the final name"
    );
    let Some(Node::File(f)) = sim.lookup(dir, "epoch.log") else {
        panic!("{ctx}: deployment without log")
    };
    let log = EpochLog::open(sim, f, issuer(), DEP).unwrap();
    let rep = log.report();
    assert!(
        rep.records.len() >= acked.records,
        "{ctx}: {} records durable, {} acknowledged",
        rep.records.len(),
        acked.records
    );
    assert!(!rep.records.is_empty(), "{ctx}: deployment without genesis");
    // Records are always a prefix of the phase order (verify_log enforces it; check anyway).
    let kinds: Vec<Kind> = rep
        .records
        .iter()
        .map(|r| r.record.record.body.kind())
        .collect();
    for w in kinds.windows(2) {
        assert!(Kind::may_follow(Some(w[0]), w[1]), "{ctx}: {kinds:?}");
    }
    // A crash is never read as tampering (docs/REASONS.md): whatever it left is a phase or
    // torn, never forged, foreign or corrupt.
    assert!(
        !matches!(
            rep.classification,
            Classification::Forged | Classification::Foreign | Classification::Corrupt
        ),
        "{ctx}: a crash left a log that reads {} ({:?})",
        rep.classification.as_str(),
        rep.problem
    );
    Some(rep.classification)
}

#[test]
fn crash_before_every_operation_leaves_an_allowed_state() {
    // Count the operations of a complete run, then crash before each one, with three
    // resolutions of the unsynced state per point.
    for withheld_at in [None, Some(1), Some(2), Some(3)] {
        let (mut sim, deps) = fresh(1);
        let start = sim.ops();
        let full = run(&mut sim, deps, withheld_at);
        assert_eq!(full.records, withheld_at.map_or(4, |w| w + 2));
        let total = sim.ops() - start;
        for at in 0..=total {
            for seed in 1..=3u64 {
                let (mut sim, deps) = fresh(seed * 7919 + at);
                let base = sim.ops();
                sim.set_fault(Some(Fault::Crash { at: base + at }));
                let acked = run(&mut sim, deps, withheld_at);
                let mut sim = sim.reboot();
                check(
                    &mut sim,
                    deps,
                    &acked,
                    &format!("crash before op {at}, seed {seed}, withheld {withheld_at:?}"),
                );
            }
        }
    }
}

#[test]
fn seeded_random_crashes_leave_allowed_states() {
    let runs: u64 = std::env::var("REPOCH_SIM_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let base_seed: u64 = std::env::var("REPOCH_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let mut seen = std::collections::BTreeMap::new();
    for i in 0..runs {
        let seed = base_seed.wrapping_mul(6364136223846793005).wrapping_add(i);
        let (mut sim, deps) = fresh(seed);
        let at = sim.ops() + seed % 24;
        let withheld_at = match (seed >> 8) % 5 {
            0 => Some(1),
            1 => Some(2),
            2 => Some(3),
            _ => None,
        };
        sim.set_fault(Some(Fault::Crash { at }));
        let acked = run(&mut sim, deps, withheld_at);
        let mut sim = sim.reboot();
        let ctx = format!("seed {seed} (replay: REPOCH_SIM_SEED={base_seed} run {i})");
        let c = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            check(&mut sim, deps, &acked, &ctx)
        }))
        .unwrap_or_else(|_| panic!("failed at {ctx}"));
        *seen.entry(c.map(|c| c.as_str())).or_insert(0u32) += 1;
    }
    // The runs reach every state the crash semantics allow, including torn tails.
    for want in [
        "enrolled",
        "intended",
        "consumed",
        "receipted",
        "withheld",
        "torn",
    ] {
        assert!(
            seen.contains_key(&Some(want)),
            "no run ended {want}: {seen:?}"
        );
    }
    eprintln!("classifications over {runs} runs: {seen:?}");
}

#[test]
fn a_write_or_sync_error_poisons_the_log_and_is_never_retried() {
    let (mut sim, deps) = fresh(3);
    let start = sim.ops();
    let full = run(&mut sim, deps, None);
    let total = sim.ops() - start;
    assert_eq!(full.records, 4);
    for at in 0..total {
        let (mut sim, deps) = fresh(3);
        let base = sim.ops();
        sim.set_fault(Some(Fault::Error { at: base + at }));
        let acked = run(&mut sim, deps, None);
        assert!(acked.records < 4, "error at op {at} went unnoticed");
        // The machine did not crash: what it reads now is the cached state, still allowed.
        check(&mut sim, deps, &acked, &format!("error at op {at}"));
    }
}

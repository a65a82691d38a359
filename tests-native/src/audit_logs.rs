//! Many deployments' epoch logs, generated fast for `repoch audit` (docs/BENCHMARKS.md,
//! "Audit throughput"): `repoch-test-helper audit-logs DIR N` writes `DIR/issuer.pub` and N
//! logs `DIR/NNNNNNN.log`, each the four records of a granted recovery (genesis, intent,
//! consume, receipt) of its own deployment, signed by one issuer key, as repochd writes them.

use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use repoch_protocol::cbor::Canonical as _;
use repoch_protocol::epoch::{Contender, EpochBody, EpochRecord, SignedEpochRecord};
use repoch_protocol::grant::{Challenge, ConsumerPeer, Grant, GrantFence, SignedGrant};
use repoch_protocol::{Birth, DeploymentId, Fact, Hash, Identity, PublicKey};

/// Records in each generated log.
pub const RECORDS_PER_LOG: usize = 4;

/// The issuer key the logs are signed with (fixed: the output is reproducible).
pub fn issuer() -> SigningKey {
    SigningKey::from_bytes(&[0x5a; 32])
}

fn identity(ino: u64) -> Identity {
    Identity {
        dev: 2049,
        ino,
        uid: 0,
        gid: 0,
        mode: 0o100644,
        birth: Some(Birth {
            sec: 1_790_000_000,
            nsec: 0,
        }),
    }
}

/// Deployment `i`'s log: a granted recovery, as bytes on disk.
pub fn log(key: &SigningKey, i: u64) -> Vec<u8> {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&i.to_be_bytes());
    id[8..].copy_from_slice(b"repochbn");
    let deployment = DeploymentId(id);
    let consumer_key = SigningKey::from_bytes(&[0x33; 32]);
    let peer = ConsumerPeer {
        pid: 4242,
        uid: 990,
        gid: 990,
        exe: identity(77),
        exe_sha256: Hash([5; 32]),
        cgroup: "/system.slice/billing-root.service".into(),
    };
    let mut prev = Hash::ZERO;
    let mut out = Vec::new();
    let mut records = Vec::new();
    let mut append = |body: EpochBody, records: &mut Vec<Hash>| {
        let r = SignedEpochRecord::sign(
            EpochRecord {
                deployment,
                seq: records.len() as u64,
                prev,
                body,
            },
            key,
        );
        prev = Hash::of(&r.to_bytes());
        records.push(prev);
        out.extend_from_slice(&r.to_frame());
    };
    append(
        EpochBody::Genesis {
            manifest: Hash::of(&id),
            issuer_key: PublicKey::from(&key.verifying_key()),
            predecessor: None,
        },
        &mut records,
    );
    let evidence = Hash([12; 32]);
    append(
        EpochBody::Intent {
            evidence,
            facts: vec![
                Fact::ok("fence", "/srv/billing/lock", "held", "held"),
                Fact::ok(
                    "cgroup",
                    "/system.slice/billing-old.service",
                    "empty",
                    "empty",
                ),
                Fact::ok(
                    "consumer-exe",
                    "/usr/libexec/billing-root",
                    "root-owned, not writable by others, unchanged",
                    "sha256 05",
                ),
            ],
            contender: Contender {
                pid: 1,
                start_ticks: 99,
                boot_id: "b0a7".into(),
            },
            consumer: peer.clone(),
        },
        &mut records,
    );
    let challenge = Challenge {
        deployment,
        intent: records[1],
        nonce: [8; 32],
    };
    append(
        EpochBody::Consume {
            consumer: peer,
            challenge: challenge.clone(),
            custody: challenge.answer(&consumer_key),
            fencing: None,
        },
        &mut records,
    );
    let grant = Grant {
        deployment,
        intent: records[1],
        consume: records[2],
        evidence,
        consumer_key: PublicKey::from(&consumer_key.verifying_key()),
        ready_path: "/srv/billing/READY".into(),
        ready_sha256: Hash([13; 32]),
        fences: vec![GrantFence {
            path: "/srv/billing/lock".into(),
            identity: identity(12),
        }],
        frontier_seq: 7,
        frontier_hash: Hash([14; 32]),
        unknown_ops: Vec::new(),
        issued_at: 1_790_000_100,
        listeners: vec![],
        fencing: None,
    };
    append(
        EpochBody::Receipt {
            grant: SignedGrant::sign(grant, key).to_bytes(),
        },
        &mut records,
    );
    out
}

/// Writes `dir/issuer.pub` and `n` logs; returns the logs' paths.
pub fn write(dir: &Path, n: u64) -> std::io::Result<Vec<PathBuf>> {
    let key = issuer();
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("issuer.pub"),
        format!("{}\n", hex::encode(key.verifying_key().to_bytes())),
    )?;
    (0..n)
        .map(|i| {
            let p = dir.join(format!("{i:07}.log"));
            std::fs::write(&p, log(&key, i))?;
            Ok(p)
        })
        .collect()
}

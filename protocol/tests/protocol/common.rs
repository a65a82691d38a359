//! Fixed test keys and one sample of every structure, shared by the protocol tests.
#![allow(dead_code)]

use ed25519_dalek::SigningKey;
use repoch_protocol::cbor::Canonical;
use repoch_protocol::epoch::{Contender, EpochBody, EpochRecord, SignedEpochRecord};
use repoch_protocol::fleet::{FencingToken, FleetClaim, FleetHost, Registry};
use repoch_protocol::grant::{Challenge, ConsumerPeer, Grant, GrantFence, SignedGrant, UnknownOp};
use repoch_protocol::journal::{JournalBody, JournalRecord, OpOutcome, SignedJournalRecord};
use repoch_protocol::manifest::*;
use repoch_protocol::wire::{AdminEvent, AdminRequest, GrantMsg};
use repoch_protocol::{DeploymentId, Fact, Hash, Identity, PublicKey, Reason};

pub fn issuer() -> SigningKey {
    SigningKey::from_bytes(&[1; 32])
}
pub fn producer() -> SigningKey {
    SigningKey::from_bytes(&[2; 32])
}
pub fn consumer() -> SigningKey {
    SigningKey::from_bytes(&[3; 32])
}
pub fn pk(k: &SigningKey) -> PublicKey {
    PublicKey::from(&k.verifying_key())
}
pub const DEP: DeploymentId = DeploymentId([0xd5; 16]);

pub fn identity(ino: u64) -> Identity {
    Identity {
        dev: 2049,
        ino,
        uid: 0,
        gid: 0,
        mode: 0o100600,
        birth: Some(repoch_protocol::Birth {
            sec: 1_700_000_000 + ino,
            nsec: 123_456_789,
        }),
    }
}

pub fn manifest() -> Manifest {
    Manifest {
        deployment: DEP,
        label: "billing-root".into(),
        enrolled_at: 1_790_000_000,
        issuer_key: pk(&issuer()),
        inventory: vec![
            InventoryEntry {
                role: Role::StateDir,
                path: "/var/lib/repoch/d/x".into(),
                identity: identity(10),
            },
            InventoryEntry {
                role: Role::EpochLog,
                path: "/var/lib/repoch/d/x/epoch.log".into(),
                identity: identity(11),
            },
            InventoryEntry {
                role: Role::Fence,
                path: "/srv/billing/lock".into(),
                identity: identity(12),
            },
            InventoryEntry {
                role: Role::Store,
                path: "/srv/billing/data".into(),
                identity: identity(13),
            },
        ],
        target: Target {
            ready_path: "/srv/billing/READY".into(),
        },
        containment: Containment {
            units: vec!["billing-root.service".into()],
            cgroups: vec!["/system.slice/billing-root.service".into()],
            listeners: vec![
                Listener::Unix("/run/billing.sock".into()),
                Listener::Tcp(Inet::any(7070)),
                Listener::Udp(Inet::any(53)),
            ],
            executables: vec!["/usr/bin/billing-root".into()],
            old_root_uids: vec![],
            socket_files: vec![],
            containers: vec![],
            waived: vec![],
        },
        consumer: Consumer {
            uid: 990,
            gid: 990,
            executable: "/usr/bin/repoch-consume".into(),
            executable_sha256: Some(Hash([7; 32])),
            key: pk(&consumer()),
            cgroup: None,
        },
        lineage: Lineage {
            predecessor: Some(Predecessor {
                deployment: DeploymentId([0xaa; 16]),
                final_hash: Hash([9; 32]),
            }),
            journal_path: "/srv/billing/journal".into(),
            journal_genesis: Hash([4; 32]),
            producer_key: pk(&producer()),
        },
        registry: None,
    }
}

pub fn peer() -> ConsumerPeer {
    ConsumerPeer {
        pid: 4242,
        uid: 990,
        gid: 990,
        exe: identity(77),
        exe_sha256: Hash([5; 32]),
        cgroup: "/user.slice".into(),
    }
}

pub fn challenge() -> Challenge {
    Challenge {
        deployment: DEP,
        intent: Hash([6; 32]),
        nonce: [8; 32],
    }
}

pub fn grant() -> Grant {
    Grant {
        deployment: DEP,
        intent: Hash([6; 32]),
        consume: Hash([11; 32]),
        evidence: Hash([12; 32]),
        consumer_key: pk(&consumer()),
        ready_path: "/srv/billing/READY".into(),
        ready_sha256: Hash([13; 32]),
        fences: vec![GrantFence {
            path: "/srv/billing/lock".into(),
            identity: identity(12),
        }],
        frontier_seq: 7,
        frontier_hash: Hash([14; 32]),
        unknown_ops: vec![UnknownOp {
            op: 3,
            name: "charge-batch".into(),
        }],
        issued_at: 1_790_000_100,
        listeners: vec![],
        fencing: None,
    }
}

pub fn facts() -> Vec<Fact> {
    vec![
        Fact::ok("fence", "/srv/billing/lock", "held", "held"),
        Fact::failed(
            "cgroup",
            "/system.slice/x",
            "empty",
            "procs=[12]",
            Reason::CgroupPopulated,
        ),
    ]
}

/// The records of a granted recovery before its receipt: genesis, intent, consume.
pub fn bodies_before_the_receipt() -> Vec<EpochBody> {
    let mut bodies = vec![
        EpochBody::Genesis {
            manifest: Hash([15; 32]),
            issuer_key: pk(&issuer()),
            predecessor: None,
        },
        EpochBody::Intent {
            evidence: Hash([12; 32]),
            facts: facts(),
            contender: Contender {
                pid: 1,
                start_ticks: 99,
                boot_id: "b0a7".into(),
            },
            consumer: peer(),
        },
    ];
    bodies.push(consume_answering(Challenge {
        intent: Hash::of(&chain(bodies.clone())[1].to_bytes()),
        ..challenge()
    }));
    bodies
}

/// A consume record's body answering `c` (the consumer's key signs it).
pub fn consume_answering(c: Challenge) -> EpochBody {
    EpochBody::Consume {
        consumer: peer(),
        custody: c.answer(&consumer()),
        challenge: c,
        fencing: None,
    }
}

/// The full epoch log of a granted recovery, signed with the fixed issuer key: its
/// receipt's grant names the intent and consume records before it, the intent's evidence,
/// and the key that answered the custody challenge.
pub fn epoch_records() -> Vec<SignedEpochRecord> {
    let mut bodies = bodies_before_the_receipt();
    let before = chain(bodies.clone());
    let g = Grant {
        intent: Hash::of(&before[1].to_bytes()),
        consume: Hash::of(&before[2].to_bytes()),
        ..grant()
    };
    bodies.push(EpochBody::Receipt {
        grant: SignedGrant::sign(g, &issuer()).to_bytes(),
    });
    chain(bodies)
}

/// [`epoch_records`] with `grant` as its receipt's grant bytes.
pub fn epoch_records_receipting(grant: Vec<u8>) -> Vec<SignedEpochRecord> {
    let mut bodies = bodies_before_the_receipt();
    bodies.push(EpochBody::Receipt { grant });
    chain(bodies)
}

pub fn chain(bodies: Vec<EpochBody>) -> Vec<SignedEpochRecord> {
    let mut prev = Hash::ZERO;
    let mut out = Vec::new();
    for (seq, body) in bodies.into_iter().enumerate() {
        let r = SignedEpochRecord::sign(
            EpochRecord {
                deployment: DEP,
                seq: seq as u64,
                prev,
                body,
            },
            &issuer(),
        );
        prev = Hash::of(&r.to_bytes());
        out.push(r);
    }
    out
}

pub fn log_bytes(records: &[SignedEpochRecord]) -> Vec<u8> {
    records.iter().flat_map(|r| r.to_frame()).collect()
}

pub fn withheld() -> EpochBody {
    EpochBody::Withheld {
        reason: Reason::EvidenceChanged,
        detail: "fence identity changed".into(),
    }
}

/// A journal: genesis, root-start, op 0 succeeded, op 1 unknown, op 2 never ended.
pub fn journal_records() -> Vec<SignedJournalRecord> {
    let bodies = vec![
        JournalBody::Genesis {
            producer_key: pk(&producer()),
        },
        JournalBody::RootStart { pid: 100 },
        JournalBody::OpBegin {
            op: 0,
            name: "migrate".into(),
        },
        JournalBody::OpEnd {
            op: 0,
            outcome: OpOutcome::Succeeded,
        },
        JournalBody::OpBegin {
            op: 1,
            name: "charge".into(),
        },
        JournalBody::OpEnd {
            op: 1,
            outcome: OpOutcome::Unknown,
        },
        JournalBody::OpBegin {
            op: 2,
            name: "refund".into(),
        },
    ];
    let mut prev = Hash::ZERO;
    let mut out = Vec::new();
    for (seq, body) in bodies.into_iter().enumerate() {
        let key = if seq == 0 { issuer() } else { producer() };
        let r = SignedJournalRecord::sign(
            JournalRecord {
                deployment: DEP,
                seq: seq as u64,
                prev,
                body,
            },
            &key,
        );
        prev = Hash::of(&r.to_bytes());
        out.push(r);
    }
    out
}

pub fn journal_bytes(records: &[SignedJournalRecord]) -> Vec<u8> {
    records
        .iter()
        .flat_map(|r| repoch_protocol::wire::frame(&r.to_bytes()))
        .collect()
}

/// One named sample of each top-level structure: (CDDL rule, canonical bytes).
/// A `[registry]` naming a three-member cluster.
pub fn registry() -> Registry {
    Registry {
        endpoints: vec![
            "https://10.0.0.1:2379".into(),
            "https://10.0.0.2:2379".into(),
            "https://etcd-3.example:2379".into(),
        ],
        ca: "/etc/repoch/etcd-ca.pem".into(),
        cert: "/etc/repoch/etcd-client.pem".into(),
        key: "/etc/repoch/etcd-client.key".into(),
        prefix: "/repoch/prod".into(),
        fleet: "billing".into(),
        host: "host-a".into(),
        pin: Some(repoch_protocol::fleet::FleetPin {
            id: repoch_protocol::fleet::FleetId(*b"fleet-id-sample!"),
            cluster: 0x5a2b_c3d4_e5f6_0718,
            members: vec![0x1111, 0x2222, 0x3333],
            floor: 0,
        }),
        record_revision: 7,
    }
}

pub fn token() -> FencingToken {
    FencingToken {
        cluster: 0x5a2b_c3d4_e5f6_0718,
        revision: 42,
    }
}

pub fn samples() -> Vec<(&'static str, Vec<u8>)> {
    let mut v = vec![
        (
            "signed-manifest",
            SignedManifest::sign(manifest(), &issuer()).to_bytes(),
        ),
        (
            "signed-grant",
            SignedGrant::sign(grant(), &issuer()).to_bytes(),
        ),
        (
            "signed-grant",
            SignedGrant::sign(
                Grant {
                    listeners: manifest().containment.listeners,
                    ..grant()
                },
                &issuer(),
            )
            .to_bytes(),
        ),
        (
            "signed-manifest",
            SignedManifest::sign(
                {
                    let mut m = manifest();
                    m.containment.old_root_uids = vec![990, 4_294_967_295];
                    m
                },
                &issuer(),
            )
            .to_bytes(),
        ),
        ("challenge", challenge().to_bytes()),
        (
            "admin-request",
            AdminRequest::Recover {
                deployment: DEP,
                approve_ready: Some(Hash([1; 32])),
                consumer_wait_seconds: 30,
            }
            .to_bytes(),
        ),
        (
            "admin-request",
            AdminRequest::Recover {
                deployment: DEP,
                approve_ready: None,
                consumer_wait_seconds: 0,
            }
            .to_bytes(),
        ),
        (
            "admin-event",
            AdminEvent::Progress {
                step: "observe".into(),
                detail: "lineage".into(),
            }
            .to_bytes(),
        ),
        (
            "admin-event",
            AdminEvent::Fact(facts()[1].clone()).to_bytes(),
        ),
        (
            "admin-event",
            AdminEvent::Record {
                kind: "intent".into(),
                seq: 1,
                hash: Hash([2; 32]),
            }
            .to_bytes(),
        ),
        (
            "admin-event",
            AdminEvent::Outcome {
                outcome: repoch_protocol::wire::Verdict::Granted,
                reasons: vec![],
                detail: "ok".into(),
                grant: Some(vec![1, 2]),
            }
            .to_bytes(),
        ),
        (
            "admin-event",
            AdminEvent::Outcome {
                outcome: repoch_protocol::wire::Verdict::Refused,
                reasons: vec![Reason::FenceBusy],
                detail: "no".into(),
                grant: None,
            }
            .to_bytes(),
        ),
        (
            "grant-msg",
            GrantMsg::Hello {
                deployment: DEP.to_hex()[..8].to_owned(),
                key: pk(&consumer()),
            }
            .to_bytes(),
        ),
        (
            "grant-msg",
            GrantMsg::Prove(repoch_protocol::grant::KeyProof {
                deployment: DEP,
                nonce: [5; 32],
                pid: 4242,
                start_ticks: 123_456,
            })
            .to_bytes(),
        ),
        ("grant-msg", GrantMsg::Proof([8; 64]).to_bytes()),
        ("grant-msg", GrantMsg::Accepted.to_bytes()),
        ("grant-msg", GrantMsg::Challenge(challenge()).to_bytes()),
        ("grant-msg", GrantMsg::Custody([9; 64]).to_bytes()),
        (
            "grant-msg",
            GrantMsg::Grant {
                grant: vec![1, 2, 3],
                checkpoint: "repoch/epoch-log/x\n4\nAA==\n\n\u{2014} repoch-issuer AA==\n".into(),
            }
            .to_bytes(),
        ),
        (
            "grant-msg",
            GrantMsg::Refused {
                reason: Reason::ConsumerRejected,
                detail: "uid".into(),
            }
            .to_bytes(),
        ),
        (
            "grant-msg",
            GrantMsg::Persisted {
                grant_sha256: Hash([10; 32]),
            }
            .to_bytes(),
        ),
        (
            "grant-msg",
            GrantMsg::Granted {
                grant_sha256: Hash([11; 32]),
            }
            .to_bytes(),
        ),
    ];
    // The records as first committed (their receipt's grant names no record of the log:
    // each record decodes and verifies on its own, which is what a sample checks).
    for r in epoch_records_receipting(SignedGrant::sign(grant(), &issuer()).to_bytes())
        .iter()
        .chain(
            chain(vec![
                EpochBody::Genesis {
                    manifest: Hash([15; 32]),
                    issuer_key: pk(&issuer()),
                    predecessor: Some(Predecessor {
                        deployment: DeploymentId([0xaa; 16]),
                        final_hash: Hash([9; 32]),
                    }),
                },
                EpochBody::Intent {
                    evidence: Hash([1; 32]),
                    facts: vec![],
                    contender: Contender {
                        pid: 1,
                        start_ticks: 1,
                        boot_id: "x".into(),
                    },
                    consumer: peer(),
                },
                withheld(),
            ])
            .iter(),
        )
    {
        v.push(("signed-epoch-record", r.to_bytes()));
    }
    for r in journal_records() {
        v.push(("signed-journal-record", r.to_bytes()));
    }
    v.push(("signed-journal-record", {
        let r = JournalRecord {
            deployment: DEP,
            seq: 7,
            prev: Hash([1; 32]),
            body: JournalBody::RootStop,
        };
        SignedJournalRecord::sign(r, &producer()).to_bytes()
    }));
    // The fleet registry's forms (after every older sample: their vectors keep their lines).
    v.extend(vec![
        (
            "signed-manifest",
            SignedManifest::sign(
                Manifest {
                    registry: Some(registry()),
                    ..manifest()
                },
                &issuer(),
            )
            .to_bytes(),
        ),
        (
            "signed-grant",
            SignedGrant::sign(
                Grant {
                    fencing: Some(token()),
                    ..grant()
                },
                &issuer(),
            )
            .to_bytes(),
        ),
        (
            "signed-grant",
            SignedGrant::sign(
                Grant {
                    fencing: Some(token()),
                    listeners: manifest().containment.listeners,
                    ..grant()
                },
                &issuer(),
            )
            .to_bytes(),
        ),
        (
            "fleet-claim",
            FleetClaim {
                fleet: "billing".into(),
                fleet_id: repoch_protocol::fleet::FleetId([5; 16]),
                host: "host-a".into(),
                deployment: DEP,
                intent: Hash([6; 32]),
                evidence: Hash([12; 32]),
                nonce: [8; 32],
                floor: 0,
                signature: [0; 64],
            }
            .signed(&issuer())
            .to_bytes(),
        ),
        (
            "fleet-host",
            FleetHost {
                fleet: "billing".into(),
                host: "host-a".into(),
                deployment: DEP,
                manifest: Hash([15; 32]),
                label: "billing-root".into(),
                issuer_key: pk(&issuer()),
            }
            .to_bytes(),
        ),
        (
            "fleet-record",
            repoch_protocol::fleet::FleetRecord {
                fleet: "billing".into(),
                prefix: "/repoch/prod".into(),
                pin: registry().pin.unwrap(),
                host: "host-a".into(),
                established: 1_700_000_000,
                key: pk(&issuer()),
                signature: [0; 64],
            }
            .signed(&issuer())
            .to_bytes(),
        ),
    ]);
    for r in chain(vec![
        EpochBody::Genesis {
            manifest: Hash([15; 32]),
            issuer_key: pk(&issuer()),
            predecessor: None,
        },
        EpochBody::Intent {
            evidence: Hash([1; 32]),
            facts: vec![],
            contender: Contender {
                pid: 1,
                start_ticks: 1,
                boot_id: "x".into(),
            },
            consumer: peer(),
        },
        EpochBody::Consume {
            consumer: peer(),
            challenge: challenge(),
            custody: challenge().answer(&consumer()),
            fencing: Some(token()),
        },
    ]) {
        v.push(("signed-epoch-record", r.to_bytes()));
    }
    // A receipt whose grant is bound to the records before it (docs/PROTOCOL.md, "The
    // epoch log"): what every receipted log's last record is.
    v.push(("signed-epoch-record", epoch_records()[3].to_bytes()));
    // Listeners enrolled with their address (docs/OPERATOR.md, `containment.listeners`),
    // in a manifest and in the grant that hands them over.
    let lo4 = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    let lo6 = std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
    let addressed = vec![
        Listener::Tcp(Inet::at(lo4, 7070)),
        Listener::Udp(Inet::at(lo6, 53)),
        Listener::Tcp(Inet::any(8080)),
    ];
    let mut m = manifest();
    m.containment.listeners = addressed.clone();
    v.push((
        "signed-manifest",
        SignedManifest::sign(m, &issuer()).to_bytes(),
    ));
    // Socket files: the unix listener's mode, owner and group (no old-root uids: the list
    // before them is empty).
    let mut m = manifest();
    m.containment.socket_files = vec![SocketFile {
        path: "/run/billing.sock".into(),
        mode: 0o660,
        uid: Some(990),
        gid: None,
    }];
    v.push((
        "signed-manifest",
        SignedManifest::sign(m, &issuer()).to_bytes(),
    ));
    // Containers: each named to its engine's socket (no socket file, no old-root uid: both
    // lists before them empty).
    let mut m = manifest();
    m.containment.containers = vec![repoch_protocol::manifest::ContainerRef {
        engine: "docker".into(),
        name: "old-root".into(),
        socket: "/run/docker.sock".into(),
        pinned: None,
    }];
    v.push((
        "signed-manifest",
        SignedManifest::sign(m.clone(), &issuer()).to_bytes(),
    ));
    // The same container pinned to its full id at enrollment (a fourth field).
    m.containment.containers[0].pinned = Some("0123456789abcdef".repeat(4));
    v.push((
        "signed-manifest",
        SignedManifest::sign(m, &issuer()).to_bytes(),
    ));
    v.push((
        "signed-grant",
        SignedGrant::sign(
            Grant {
                listeners: addressed,
                ..grant()
            },
            &issuer(),
        )
        .to_bytes(),
    ));
    v
}

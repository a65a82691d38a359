//! Every bound the decoder enforces on an epoch record, a grant and a journal record is in
//! the CDDL (docs/PROTOCOL.md, "Schema") as a `.size` or an occurrence, and pinned by a
//! golden pair (vectors/bounds.txt): the value just inside its bound, which decodes and
//! which the CDDL accepts, and the value just outside it, which neither takes. Regenerate
//! only after a deliberate change:
//! `REPOCH_REGENERATE_VECTORS=1 cargo test -p repoch-protocol --test protocol bounds`.

use repoch_protocol::cbor::Canonical;
use repoch_protocol::epoch::{Contender, EpochBody, EpochRecord, SignedEpochRecord};
use repoch_protocol::grant::{GrantFence, SignedGrant, UnknownOp};
use repoch_protocol::journal::{JournalBody, JournalRecord, SignedJournalRecord};
use repoch_protocol::limits::{
    FACTS_MAX, FACT_TEXT_BYTES_MAX, FENCES_MAX, LISTENERS_MAX, OP_NAME_BYTES_MAX, PATH_BYTES_MAX,
    TEXT_BYTES_MAX, UNKNOWN_OPS_MAX,
};
use repoch_protocol::manifest::Listener;
use repoch_protocol::{Fact, Hash};

use crate::common::*;

const FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/vectors/bounds.txt");

/// The longest fact kind (an observer family's name).
const FACT_KIND_BYTES_MAX: usize = 32;
/// The longest boot id a contender names.
const BOOT_ID_BYTES_MAX: usize = 64;

fn intent_record(f: impl FnOnce(&mut Vec<Fact>, &mut Contender, &mut String)) -> Vec<u8> {
    let mut facts = facts();
    let mut contender = Contender {
        pid: 1,
        start_ticks: 99,
        boot_id: "b0a7".into(),
    };
    let mut p = peer();
    f(&mut facts, &mut contender, &mut p.cgroup);
    record(EpochBody::Intent {
        evidence: Hash([12; 32]),
        facts,
        contender,
        consumer: p,
    })
}

fn record(body: EpochBody) -> Vec<u8> {
    SignedEpochRecord::sign(
        EpochRecord {
            deployment: DEP,
            seq: 1,
            prev: Hash([1; 32]),
            body,
        },
        &issuer(),
    )
    .to_bytes()
}

fn grant_with(f: impl FnOnce(&mut repoch_protocol::grant::Grant)) -> Vec<u8> {
    let mut g = grant();
    f(&mut g);
    SignedGrant::sign(g, &issuer()).to_bytes()
}

fn op_begin(name: String) -> Vec<u8> {
    SignedJournalRecord::sign(
        JournalRecord {
            deployment: DEP,
            seq: 2,
            prev: Hash([1; 32]),
            body: JournalBody::OpBegin { op: 0, name },
        },
        &producer(),
    )
    .to_bytes()
}

fn text(n: usize) -> String {
    "a".repeat(n)
}

/// `/` then `n - 1` letters: an absolute path (or cgroup) of `n` bytes.
fn path(n: usize) -> String {
    format!("/{}", "a".repeat(n - 1))
}

type Pair = (&'static str, &'static str, [Vec<u8>; 2]);

/// Each bound: its name, the CDDL rule of the bytes, and the encodings at the bound and one
/// past it.
fn pairs() -> Vec<Pair> {
    let at = |n: usize| [n, n + 1];
    let fact = |kind: String, subject: String, expected: String, observed: String| Fact {
        kind,
        subject,
        expected,
        observed,
        reason: None,
    };
    let fact_field = |which: usize, n: usize| {
        intent_record(|facts, _, _| {
            let mut t = [text(4), path(8), text(4), text(4)];
            t[which] = if which == 1 { path(n) } else { text(n) };
            let [k, s, e, o] = t;
            facts[0] = fact(k, s, e, o);
        })
    };
    let each = |f: &dyn Fn(usize) -> Vec<u8>, n: usize| at(n).map(f);
    vec![
        (
            "fact-kind",
            "signed-epoch-record",
            each(&|n| fact_field(0, n), FACT_KIND_BYTES_MAX),
        ),
        (
            "fact-subject",
            "signed-epoch-record",
            each(&|n| fact_field(1, n), PATH_BYTES_MAX),
        ),
        (
            "fact-expected",
            "signed-epoch-record",
            each(&|n| fact_field(2, n), FACT_TEXT_BYTES_MAX),
        ),
        (
            "fact-observed",
            "signed-epoch-record",
            each(&|n| fact_field(3, n), FACT_TEXT_BYTES_MAX),
        ),
        (
            "intent-facts",
            "signed-epoch-record",
            each(
                &|n| intent_record(|facts, _, _| *facts = vec![facts[0].clone(); n]),
                FACTS_MAX,
            ),
        ),
        (
            "contender-boot-id",
            "signed-epoch-record",
            each(
                &|n| intent_record(|_, c, _| c.boot_id = text(n)),
                BOOT_ID_BYTES_MAX,
            ),
        ),
        (
            "consumer-peer-cgroup",
            "signed-epoch-record",
            each(&|n| intent_record(|_, _, cg| *cg = path(n)), PATH_BYTES_MAX),
        ),
        (
            "withheld-detail",
            "signed-epoch-record",
            each(
                &|n| {
                    record(EpochBody::Withheld {
                        reason: repoch_protocol::Reason::EvidenceChanged,
                        detail: text(n),
                    })
                },
                TEXT_BYTES_MAX,
            ),
        ),
        (
            "grant-fences",
            "signed-grant",
            each(
                &|n| {
                    grant_with(|g| {
                        g.fences = (0..n)
                            .map(|i| GrantFence {
                                path: format!("/srv/lock{i}"),
                                identity: identity(i as u64),
                            })
                            .collect()
                    })
                },
                FENCES_MAX,
            ),
        ),
        (
            "grant-unknown-ops",
            "signed-grant",
            each(
                &|n| {
                    grant_with(|g| {
                        g.unknown_ops = (0..n)
                            .map(|i| UnknownOp {
                                op: i as u64,
                                name: "x".into(),
                            })
                            .collect()
                    })
                },
                UNKNOWN_OPS_MAX,
            ),
        ),
        (
            "grant-unknown-op-name",
            "signed-grant",
            each(
                &|n| grant_with(|g| g.unknown_ops[0].name = text(n)),
                OP_NAME_BYTES_MAX,
            ),
        ),
        (
            "grant-listeners",
            "signed-grant",
            each(
                &|n| {
                    grant_with(|g| {
                        g.listeners = (1..=n)
                            .map(|p| Listener::Tcp(repoch_protocol::manifest::Inet::any(p as u16)))
                            .collect()
                    })
                },
                LISTENERS_MAX,
            ),
        ),
        (
            "grant-ready-path",
            "signed-grant",
            each(&|n| grant_with(|g| g.ready_path = path(n)), PATH_BYTES_MAX),
        ),
        (
            "op-begin-name",
            "signed-journal-record",
            each(&|n| op_begin(text(n)), OP_NAME_BYTES_MAX),
        ),
    ]
}

fn decodes(rule: &str, bytes: &[u8]) -> bool {
    match rule {
        "signed-epoch-record" => SignedEpochRecord::from_bytes(bytes).is_ok(),
        "signed-grant" => SignedGrant::from_bytes(bytes).is_ok(),
        "signed-journal-record" => SignedJournalRecord::from_bytes(bytes).is_ok(),
        _ => unreachable!("{rule}"),
    }
}

#[test]
fn bounds_just_inside_decode_and_just_outside_do_not_alike_in_the_cddl() {
    let pairs = pairs();
    let mut lines = String::new();
    for (name, rule, [inside, outside]) in &pairs {
        assert!(decodes(rule, inside), "{name}: at its bound, refused");
        assert!(!decodes(rule, outside), "{name}: past its bound, decoded");
        crate::cddl::validate(rule, inside)
            .unwrap_or_else(|e| panic!("{name}: the CDDL refuses it at its bound: {e}"));
        assert!(
            crate::cddl::validate(rule, outside).is_err(),
            "{name}: the CDDL takes it past its bound"
        );
        for (verdict, bytes) in [("inside", inside), ("outside", outside)] {
            lines.push_str(&format!("{name} {rule} {verdict} {}\n", hex::encode(bytes)));
        }
    }
    if std::env::var_os("REPOCH_REGENERATE_VECTORS").is_some() {
        std::fs::write(FILE, &lines).unwrap();
    }
    let committed = std::fs::read_to_string(FILE).expect("vectors/bounds.txt");
    assert!(
        committed == lines,
        "vectors/bounds.txt differs from the bounds' encodings: regenerate deliberately"
    );
}

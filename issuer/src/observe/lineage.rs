//! Lineage (docs/ARCHITECTURE.md, "Issuance", step 2): the enrolled journal, append-only
//! and verified, its frontier and unknown operations, the predecessor link, and the
//! enrolled stores.

use repoch_protocol::grant::UnknownOp;
use repoch_protocol::journal::{verify_journal, JournalPins};
use repoch_protocol::limits::JOURNAL_BYTES_MAX;
use repoch_protocol::manifest::{Manifest, Role};
use repoch_protocol::{Fact, Hash, Reason};

use super::{open_enrolled, Enrolled};
use crate::layout::Layout;
use repoch_sys::fs::read_bounded;

/// The lineage facts: the journal, its frontier and unknown operations, and the
/// predecessor link. Returns the frontier and the unknown operations for the grant.
pub(super) fn lineage(
    m: &Manifest,
    layout: &Layout,
    facts: &mut Vec<Fact>,
) -> (u64, Hash, Vec<UnknownOp>) {
    match journal(m) {
        Err(f) => {
            facts.push(f);
            (0, Hash::ZERO, vec![])
        }
        Ok(f) => {
            let path = &m.lineage.journal_path;
            facts.push(Fact::ok(
                "lineage",
                path,
                "the enrolled journal, append-only, verified",
                "verified",
            ));
            let frontier = format!("seq {} hash {}", f.last_seq, f.last_hash);
            facts.push(Fact::ok("lineage-frontier", path, "recorded", &frontier));
            let unknown = format!("{} unknown", f.unknown_ops.len());
            facts.push(Fact::ok(
                "lineage-unknown",
                path,
                "carried into the grant",
                &unknown,
            ));
            predecessor(m, layout, facts);
            (f.last_seq, f.last_hash, f.unknown_ops)
        }
    }
}

/// The journal: the enrolled inode, still protected, verified. The first failure is
/// the fact returned.
fn journal(m: &Manifest) -> Result<repoch_protocol::journal::Frontier, Fact> {
    let path = m.lineage.journal_path.as_str();
    let fail = |expected: &str, observed: &str, reason| {
        Fact::failed("lineage", path, expected, observed, reason)
    };
    let enrolled = m.entry(Role::Journal).map(|e| e.identity).ok_or_else(|| {
        fail(
            "an enrolled journal",
            "none in the manifest",
            Reason::LineageMissing,
        )
    })?;
    let (fd, id) = open_enrolled(&Enrolled {
        kind: "lineage",
        path,
        missing: ("present", Reason::LineageMissing),
        want: None,
        symlink: Reason::LineageUnprotected,
        regular: Some(("the enrolled regular file", Reason::LineageReplaced)),
        identity: Some((&enrolled, Reason::LineageReplaced)),
    })?;
    let append_only = repoch_sys::fs::is_append_only(&fd).map_err(String::from);
    if id.uid != enrolled.uid || id.mode != enrolled.mode || append_only != Ok(true) {
        let expected = format!(
            "uid {} mode {:o} append-only true",
            enrolled.uid,
            enrolled.mode & 0o7777
        );
        let observed = format!(
            "uid {} mode {:o} append-only {}",
            id.uid,
            id.mode & 0o7777,
            append_only.map_or_else(|e| e, |b| b.to_string())
        );
        return Err(fail(&expected, &observed, Reason::LineageUnprotected));
    }
    let bytes = read_bounded(&fd, JOURNAL_BYTES_MAX)
        .map_err(|e| fail("readable", &e.to_string(), Reason::ObserveFailed))?;
    let pins = JournalPins {
        deployment: m.deployment,
        issuer: &m.issuer_key,
        producer: &m.lineage.producer_key,
        genesis: Some(m.lineage.journal_genesis),
    };
    verify_journal(&bytes, pins).map_err(|e| {
        fail(
            "an unbroken, signed journal of this deployment",
            &format!("offset {}: {}", e.offset, e.detail),
            e.reason,
        )
    })
}

fn predecessor(m: &Manifest, layout: &Layout, facts: &mut Vec<Fact>) {
    let Some(p) = m.lineage.predecessor else {
        return;
    };
    let subject = format!("deployment {}", p.deployment);
    let issuer = m.issuer_key;
    match crate::store::Deployment::open(layout, &issuer, p.deployment) {
        Err(r) => facts.push(Fact::failed(
            "predecessor",
            &subject,
            "readable",
            &r.to_string(),
            Reason::PredecessorMismatch,
        )),
        Ok(d) => {
            let last = d.report().last_hash();
            if d.report().problem.is_none() && last == Some(p.final_hash) {
                facts.push(Fact::ok(
                    "predecessor",
                    &subject,
                    &format!("ends in {}", p.final_hash),
                    "as linked",
                ));
            } else {
                let observed = last.map_or("no record".into(), |h| format!("ends in {h}"));
                facts.push(Fact::failed(
                    "predecessor",
                    &subject,
                    &format!("ends in {}", p.final_hash),
                    &observed,
                    Reason::PredecessorMismatch,
                ));
            }
        }
    }
}

/// The enrolled stores: each still the enrolled inode.
pub(super) fn stores(m: &Manifest, facts: &mut Vec<Fact>) {
    for e in m.entries(Role::Store) {
        let opened = open_enrolled(&Enrolled {
            kind: "store",
            path: &e.path,
            missing: ("present", Reason::StoreMissing),
            want: None,
            symlink: Reason::StoreReplaced,
            regular: None,
            identity: Some((&e.identity, Reason::StoreReplaced)),
        });
        facts.push(match opened {
            Ok(_) => Fact::ok("store", &e.path, "the enrolled inode", "the enrolled inode"),
            Err(f) => f,
        });
    }
}

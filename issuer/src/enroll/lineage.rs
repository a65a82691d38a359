//! A successor's lineage at enrollment (docs/THREAT-MODEL.md): the predecessor the
//! manifest names, its epoch used and its log sound, with no other successor, and a fleet
//! successor's token floor above the fencing token its predecessor consumed with.

use super::*;

/// The predecessor named by the manifest: an enrolled deployment whose epoch is used (never
/// a live `enrolled` one) and that has no successor yet.
pub(super) fn predecessor_of(
    layout: &Layout,
    v: &Validated,
    issuer: &PublicKey,
) -> Result<Option<Predecessor>, EnrollError> {
    let issuer = *issuer;
    Ok(match &v.predecessor {
        None => None,
        Some(p) => {
            let pid = store::resolve(layout, p).map_err(|r| field("predecessor", r.to_string()))?;
            let d = store::Deployment::open(layout, &issuer, pid)
                .map_err(|r| field("predecessor", r.to_string()))?;
            let rep = d.report();
            if let Some((at, why)) = &rep.problem {
                return Err(field(
                    "predecessor",
                    format!(
                        "its log is {} at offset {at}: {why}",
                        rep.classification.as_str()
                    ),
                ));
            }
            if rep.classification == repoch_protocol::epoch::Classification::Enrolled {
                return Err(field(
                    "predecessor",
                    "its epoch is unused (enrolled): recover it, do not replace it",
                ));
            }
            only_successor(layout, &issuer, pid)?;
            floor_above(v, rep)?;
            crate::barrier::reach("enroll-after-successor-check");
            Some(Predecessor {
                deployment: pid,
                final_hash: rep.last_hash().expect("a verified log has a genesis"),
            })
        }
    })
}

/// A successor with a registry: its `token_floor` at least the fencing token its
/// predecessor's log consumed with (the largest it holds). A cluster rebuilt from its
/// template restarts its revisions, and no host can tell a rebuilt cluster from the one
/// its predecessor claimed in: without the floor, the successor's token could be at or
/// below its predecessor's, which a store keeping the largest token would take as older.
fn floor_above(v: &Validated, rep: &repoch_protocol::epoch::LogReport) -> Result<(), EnrollError> {
    use repoch_protocol::epoch::EpochBody;
    if v.registry.is_none() {
        return Ok(());
    }
    let consumed = rep
        .records
        .iter()
        .filter_map(|r| match &r.record.record.body {
            EpochBody::Consume { fencing, .. } => *fencing,
            _ => None,
        })
        .max_by_key(|t| t.revision);
    match consumed {
        Some(t) if v.token_floor < t.revision => Err(field(
            "registry.token_floor",
            format!(
                "{} is below the fencing token {} (cluster {:016x}) the predecessor's log consumed with: set token_floor = {} or more",
                v.token_floor, t.revision, t.cluster, t.revision
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuses a second successor of `predecessor`: each successor could recover once, so two
/// would fork its lineage (docs/THREAT-MODEL.md). Every enrolled deployment is read; one
/// that cannot be read might be a successor, so it refuses too (fail closed). Bounded by
/// the deployments `store::list` returns.
fn only_successor(
    layout: &Layout,
    issuer: &PublicKey,
    predecessor: DeploymentId,
) -> Result<(), EnrollError> {
    let ids = store::list(layout).map_err(|e| {
        field(
            "predecessor",
            format!("cannot list the enrolled deployments: {e}"),
        )
    })?;
    for id in ids {
        let d = store::Deployment::open(layout, issuer, id).map_err(|r| {
            field(
                "predecessor",
                format!(
                    "deployment {id} cannot be read, it may already succeed {predecessor}: {r}"
                ),
            )
        })?;
        if d.predecessor().is_some_and(|p| p.deployment == predecessor) {
            return Err(field(
                "predecessor",
                format!("{predecessor} already has a successor, {id}: a lineage has one successor"),
            ));
        }
    }
    Ok(())
}

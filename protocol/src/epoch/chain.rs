//! The chain between deployments (docs/PROTOCOL.md, "The epoch log"): each successor
//! names its predecessor's receipt, in one line from the first deployment.

use super::*;

/// A problem in the chain between deployments.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    #[error("deployment {0}: log is not valid ({1})")]
    Invalid(DeploymentId, String),
    #[error("deployment {successor} names predecessor {predecessor}, which is not among the logs")]
    MissingPredecessor {
        successor: DeploymentId,
        predecessor: DeploymentId,
    },
    #[error("deployment {successor}: predecessor {predecessor} ends in {observed}, the link says {expected}")]
    Mismatch {
        successor: DeploymentId,
        predecessor: DeploymentId,
        expected: Hash,
        observed: Hash,
    },
    #[error("deployment {0} has more than one successor ({1} and {2})")]
    Fork(DeploymentId, DeploymentId, DeploymentId),
    #[error("two different logs claim deployment {0}")]
    Duplicate(DeploymentId),
    #[error("log without a genesis")]
    NoGenesis,
}

impl ChainError {
    /// The stable reason an audit reports for this problem.
    pub fn reason(&self) -> Reason {
        match self {
            ChainError::Invalid(..) => Reason::EpochCorrupt,
            ChainError::MissingPredecessor { .. } | ChainError::Mismatch { .. } => {
                Reason::PredecessorMismatch
            }
            ChainError::Fork(..) => Reason::ChainFork,
            ChainError::Duplicate(_) => Reason::ChainDuplicate,
            ChainError::NoGenesis => Reason::EpochMissing,
        }
    }
}

/// Verifies predecessor links between already-verified logs: no two different logs claim
/// one deployment id (the same log given twice is one), every named predecessor is
/// present and ends in the recorded final hash, and no deployment has two successors.
/// Returns the deployments in chain order (roots first).
pub fn verify_chain(reports: &[LogReport]) -> Result<Vec<DeploymentId>, ChainError> {
    use std::collections::BTreeMap;
    let mut by_id = BTreeMap::new();
    for r in reports {
        let d = r.deployment().ok_or(ChainError::NoGenesis)?;
        if let Some((at, why)) = &r.problem {
            return Err(ChainError::Invalid(d, format!("at offset {at}: {why}")));
        }
        if let Some(seen) = by_id.insert(d, r) {
            // The same log (same head, which chains every record) given twice is one log.
            if seen.last_hash() != r.last_hash() {
                return Err(ChainError::Duplicate(d));
            }
        }
    }
    let mut successor_of: BTreeMap<DeploymentId, DeploymentId> = BTreeMap::new();
    for (d, r) in &by_id {
        if let Some((_, Some(p))) = r.genesis() {
            let pred = by_id
                .get(&p.deployment)
                .ok_or(ChainError::MissingPredecessor {
                    successor: *d,
                    predecessor: p.deployment,
                })?;
            let observed = pred.last_hash().ok_or(ChainError::NoGenesis)?;
            if observed != p.final_hash {
                return Err(ChainError::Mismatch {
                    successor: *d,
                    predecessor: p.deployment,
                    expected: p.final_hash,
                    observed,
                });
            }
            if let Some(other) = successor_of.insert(p.deployment, *d) {
                return Err(ChainError::Fork(p.deployment, other, *d));
            }
        }
    }
    // Order: roots (no predecessor among the logs) first, then follow successors.
    let mut order = Vec::new();
    for (d, r) in &by_id {
        if r.genesis().and_then(|(_, p)| p).is_none() {
            let mut cur = *d;
            order.push(cur);
            // Each deployment names one predecessor and has at most one successor, so a
            // path from a root visits each log once: at most `by_id.len()` steps.
            for _ in 1..by_id.len() {
                let Some(next) = successor_of.get(&cur) else {
                    break;
                };
                order.push(*next);
                cur = *next;
            }
        }
    }
    Ok(order)
}

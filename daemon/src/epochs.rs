//! Whether a deployment's epoch can still be issued, as the grant socket asks it at `hello`
//! (docs/PROTOCOL.md, "The grant socket"): read without the issuer lock, writing nothing.
//! It decides nothing but an early refusal of a consumer that would otherwise wait out its
//! `--wait` for a grant that can never come; an issuance still reads and classifies the
//! log under the issuer lock (docs/ARCHITECTURE.md, "Issuance").
//!
//! Bounded per `hello`, whoever floods it: a verdict "used" (an intent or anything after it
//! in the log) is final, since a log is never truncated and a used epoch never becomes
//! unused, and is answered from memory. Any other verdict (`enrolled`, or a log that does
//! not verify) holds only while the log's stamp (inode, size, mtime, ctime) is unchanged:
//! a `hello` then costs one `lstat`, and the log is read again only after it changed. At
//! most `EPOCH_VERDICTS_MAX` verdicts are kept.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt as _;
use std::sync::{Mutex, PoisonError};

use repoch_issuer::issuance::epoch_refusal;
use repoch_issuer::{Layout, Refusal};
use repoch_protocol::{DeploymentId, Reason};

use crate::limits::EPOCH_VERDICTS_MAX;

/// What identifies one state of an epoch log: an append changes its size, mtime and ctime;
/// anything that rewrites it changes at least its ctime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

#[derive(Clone, Debug)]
enum Verdict {
    /// The epoch is used (`epoch-consumed`): final.
    Used(Refusal),
    /// Read at this stamp of the log: `None` when `enrolled`, else why it cannot be issued
    /// (torn, corrupt, forged, foreign, empty). Holds while the stamp is unchanged.
    AsOf(Stamp, Option<Refusal>),
}

/// The verdicts, per deployment.
#[derive(Debug)]
pub struct Epochs {
    layout: Layout,
    verdicts: Mutex<HashMap<DeploymentId, Verdict>>,
}

impl Epochs {
    pub fn new(layout: Layout) -> Epochs {
        Epochs {
            layout,
            verdicts: Mutex::new(HashMap::new()),
        }
    }

    fn stamp(&self, id: &DeploymentId) -> Option<Stamp> {
        let m = std::fs::symlink_metadata(
            self.layout
                .state_dir(id)
                .join(repoch_issuer::layout::LOG_FILE),
        )
        .ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    /// The refusal a consumer of `id` gets at once: `Some` when the epoch is used or its log
    /// does not verify. `None` when it is `enrolled`, and whenever it cannot be told (the
    /// objects do not open, the log changed while it was read): the consumer then waits, as
    /// it would without this check, and the issuance decides.
    pub fn unissuable(&self, id: DeploymentId) -> Option<Refusal> {
        let known = self.verdicts().get(&id).cloned();
        match known {
            Some(Verdict::Used(r)) => return Some(r),
            Some(Verdict::AsOf(then, r)) if Some(then) == self.stamp(&id) => return r,
            _ => {}
        }
        // Read without holding the verdicts: a slow disk must not stall every hello. Reads
        // in parallel are bounded by the grant socket's handshake slots.
        let before = self.stamp(&id)?;
        let issuer = repoch_issuer::store::issuer_public(&self.layout).ok()?;
        let dep = repoch_issuer::store::Deployment::open(&self.layout, &issuer, id).ok()?;
        let r = epoch_refusal(id, dep.classification(), dep.report().problem.as_ref());
        drop(dep);
        if let Some(r) = r.as_ref().filter(|r| r.reason == Reason::EpochConsumed) {
            // Used records verified in the log: whatever happens next, never unused again.
            self.used(id, r.clone());
            return Some(r.clone());
        }
        if self.stamp(&id) != Some(before) {
            // An append under way (a torn tail read mid-write): no verdict; read again next.
            return None;
        }
        self.keep(id, Verdict::AsOf(before, r.clone()));
        r
    }

    /// Records that `id`'s epoch is used (`epoch-consumed`, naming its state): an issuance
    /// found it so under the issuer lock, or ended with it so.
    pub fn used(&self, id: DeploymentId, r: Refusal) {
        self.keep(id, Verdict::Used(r));
    }

    /// The final verdict on `id`, from memory only (no read): `Some` once it is known used.
    pub fn known_used(&self, id: &DeploymentId) -> Option<Refusal> {
        match self.verdicts().get(id) {
            Some(Verdict::Used(r)) => Some(r.clone()),
            _ => None,
        }
    }

    fn keep(&self, id: DeploymentId, v: Verdict) {
        let mut m = self.verdicts();
        if matches!(m.get(&id), Some(Verdict::Used(_))) {
            return;
        }
        if m.len() >= EPOCH_VERDICTS_MAX && !m.contains_key(&id) {
            // Full: forget what can be read again first; only then the final ones (a
            // forgotten "used" costs a read at the next hello; at worst a consumer then
            // waits, as it would without this check).
            m.retain(|_, v| matches!(v, Verdict::Used(_)));
            if m.len() >= EPOCH_VERDICTS_MAX {
                m.clear();
            }
        }
        m.insert(id, v);
    }

    fn verdicts(&self) -> std::sync::MutexGuard<'_, HashMap<DeploymentId, Verdict>> {
        self.verdicts.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

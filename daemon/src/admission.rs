//! Who may use the grant socket at all, decided before any work: the consumers the enrolled
//! deployments name (uid, gid, key), read once per change of the deployments directory; the
//! resolution of a consumer's prefix to one full id at `hello`; per-uid handshake slots; and
//! rate-limited warnings, so a flood of refused peers cannot flood the log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use repoch_issuer::{Layout, Refusal};
use repoch_protocol::{DeploymentId, PublicKey, Reason};

use crate::limits::*;

/// The consumer an enrolled deployment names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enrolled {
    pub deployment: DeploymentId,
    pub uid: u32,
    pub gid: u32,
    pub key: PublicKey,
}

/// What identifies one state of the deployments directory (an enrollment renames its
/// staging directory in, which changes the directory's mtime and ctime).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    mtime: (i64, u64),
    ctime: (i64, u64),
}

fn stamp(layout: &Layout) -> Option<Stamp> {
    let st = rustix::fs::stat(layout.deployments()).ok()?;
    Some(Stamp {
        ino: st.st_ino,
        mtime: (st.st_mtime, st.st_mtime_nsec as u64),
        ctime: (st.st_ctime, st.st_ctime_nsec as u64),
    })
}

/// The enrolled consumers, cached per [`Stamp`].
#[derive(Debug)]
pub struct Admission {
    layout: Layout,
    cache: Mutex<Option<(Stamp, Arc<Vec<Enrolled>>)>>,
}

impl Admission {
    pub fn new(layout: Layout) -> Admission {
        Admission {
            layout,
            cache: Mutex::new(None),
        }
    }

    /// Every deployment that opens with every identity checked, and the consumer it names.
    /// A deployment that does not open cannot be recovered: its consumer is not admitted.
    fn enrolled(&self) -> Arc<Vec<Enrolled>> {
        let now = stamp(&self.layout);
        let mut c = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        match (now, c.as_ref()) {
            (Some(now), Some((then, list))) if now == *then => return list.clone(),
            // The directory cannot be read now (a failing disk): admission is only the
            // first filter (each recovery authenticates against its own manifest), so the
            // consumers enrolled when it last could be read stay admitted.
            (None, Some((_, list))) => return list.clone(),
            _ => {}
        }
        let list = Arc::new(self.read());
        if let Some(now) = now {
            *c = Some((now, list.clone()));
        }
        list
    }

    fn read(&self) -> Vec<Enrolled> {
        let Ok(issuer) = repoch_issuer::store::issuer_public(&self.layout) else {
            return Vec::new();
        };
        let ids = repoch_issuer::store::list(&self.layout).unwrap_or_default();
        ids.into_iter()
            .filter_map(|id| {
                let d = repoch_issuer::store::Deployment::open(&self.layout, &issuer, id).ok()?;
                let c = &d.manifest.consumer;
                Some(Enrolled {
                    deployment: id,
                    uid: c.uid,
                    gid: c.gid,
                    key: c.key,
                })
            })
            .collect()
    }

    /// Reads the enrolled consumers now (at start, so admission survives a disk that fails
    /// later).
    pub fn warm(&self) {
        let _ = self.enrolled();
    }

    /// Whether some enrolled deployment names `uid` as its consumer.
    pub fn admits(&self, uid: u32) -> bool {
        self.enrolled().iter().any(|e| e.uid == uid)
    }

    /// Resolves a consumer's prefix to exactly one enrolled deployment: none is
    /// `deployment-unknown`, several is `deployment-ambiguous` listing them.
    pub fn resolve(&self, prefix: &str) -> Result<Enrolled, Refusal> {
        let all = self.enrolled();
        let hits: Vec<&Enrolled> = all
            .iter()
            .filter(|e| e.deployment.to_hex().starts_with(prefix))
            .collect();
        match hits.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(Refusal::new(
                Reason::DeploymentUnknown,
                format!("hello prefix {prefix}"),
                "an enrolled deployment",
                "no match",
            )),
            many => Err(Refusal::new(
                Reason::DeploymentAmbiguous,
                format!("hello prefix {prefix}"),
                "a unique prefix",
                many.iter()
                    .map(|e| e.deployment.to_hex())
                    .collect::<Vec<_>>()
                    .join(" "),
            )),
        }
    }
}

/// Handshakes in progress per uid.
#[derive(Debug, Default)]
pub struct Handshakes {
    by_uid: Arc<Mutex<HashMap<u32, usize>>>,
}

/// One uid's handshake slot, given back on drop.
#[derive(Debug)]
pub struct HandshakeSlot {
    by_uid: Arc<Mutex<HashMap<u32, usize>>>,
    uid: u32,
}

impl Handshakes {
    /// A slot for `uid`, or `None` when it already has `limits.handshakes_per_uid`
    /// (default `HANDSHAKES_PER_UID_MAX`).
    pub fn acquire(&self, uid: u32) -> Option<HandshakeSlot> {
        let mut m = self.by_uid.lock().unwrap_or_else(PoisonError::into_inner);
        let n = m.entry(uid).or_insert(0);
        if *n >= config().handshakes_per_uid {
            return None;
        }
        *n += 1;
        Some(HandshakeSlot {
            by_uid: self.by_uid.clone(),
            uid,
        })
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut m = self.by_uid.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = m.get_mut(&self.uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.uid);
            }
        }
    }
}

/// Warnings about grant-socket peers: at most `limits.warnings_per_window` (default
/// `WARNINGS_PER_WINDOW_MAX`) per `waits.warning_window_seconds` (default
/// `WARNING_WINDOW_SECONDS_MAX`); the rest are counted and reported once per window.
#[derive(Debug)]
pub struct Warnings {
    state: Mutex<(Instant, u32, u64)>,
}

impl Default for Warnings {
    fn default() -> Self {
        Warnings {
            state: Mutex::new((Instant::now(), 0, 0)),
        }
    }
}

impl Warnings {
    pub fn warn(&self, msg: impl std::fmt::Display) {
        let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (start, logged, suppressed) = &mut *st;
        let window = config().warning_window_seconds;
        if start.elapsed() >= Duration::from_secs(window) {
            if *suppressed > 0 {
                tracing::warn!("{suppressed} peer warnings suppressed in the last {window}s");
            }
            *start = Instant::now();
            *logged = 0;
            *suppressed = 0;
        }
        if *logged < config().warnings_per_window {
            *logged += 1;
            tracing::warn!("{msg}");
        } else {
            *suppressed += 1;
        }
    }
}

//! Offline verification of epoch logs and of the chain between deployments.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use repoch_protocol::epoch::{batch_proven, verify_chain, verify_log_proven, LogReport};
use repoch_protocol::limits::LOG_BYTES_MAX;
use repoch_protocol::{DeploymentId, PublicKey};

/// Logs one audit reads.
pub const AUDIT_LOGS_MAX: usize = 1024;
/// Threads verifying logs at once (`repoch audit --jobs`).
pub const AUDIT_JOBS_MAX: usize = 64;

/// The default of `--jobs`: one thread per CPU this process may run on, within the bound.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(AUDIT_JOBS_MAX)
}

#[derive(Debug)]
pub struct Audited {
    pub path: PathBuf,
    pub report: LogReport,
}

/// Accepts a log file or a deployment state directory (its `epoch.log`).
pub fn read_log(path: &Path) -> Result<Vec<u8>, String> {
    let p = if path.is_dir() {
        path.join(repoch_protocol::epoch::LOG_FILE)
    } else {
        path.to_path_buf()
    };
    read_bounded(&p, LOG_BYTES_MAX)
}

/// The deployment a path given to `audit` must hold the log of: a directory named by a
/// deployment id (a state directory, `/var/lib/repoch/deployments/ID`); `None` for a log
/// file or a directory of another name.
pub fn expected_deployment(path: &Path) -> Option<DeploymentId> {
    if !path.is_dir() {
        return None;
    }
    // By its real name: `.`, `x/..` or a trailing `/` name the directory they resolve to.
    std::fs::canonicalize(path)
        .ok()?
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(DeploymentId::from_hex)
}

/// A path as every audit sink prints it (a terminal, `--json`, a usage error): escaped
/// (docs/PROTOCOL.md, "Text"), since a file name in a directory an auditor globs is
/// anyone's text.
pub fn shown(p: &Path) -> String {
    repoch_protocol::text::escape(&p.to_string_lossy()).into_owned()
}

/// Reads a regular file of at most `max` bytes, following no symlink (a FIFO never hangs
/// the reader: `repoch_sys::fs::read_regular`).
pub fn read_bounded(p: &Path, max: usize) -> Result<Vec<u8>, String> {
    repoch_sys::fs::read_regular(p, max, repoch_sys::fs::Links::Refuse)
        .map_err(|e| format!("{}: {e}", shown(p)))
}

/// The deployments in chain order, or why the links do not verify (with its reason).
pub type ChainResult = Result<Vec<String>, (repoch_protocol::Reason, String)>;

/// Verifies each log and the links between them. With `batch`, the logs' signatures are
/// first verified in batches (`epoch::batch_proven`; docs/AUDITOR.md, "Batch
/// verification"): a signature a batch proves is one strict verification accepts, any
/// other is verified strictly, so the reports are the same either way. The logs are
/// verified by `jobs` threads (at most [`AUDIT_JOBS_MAX`]), each a contiguous share of
/// them: each log's report is what one thread alone would give, in the order given.
pub fn audit(
    paths: &[PathBuf],
    issuer: &PublicKey,
    batch: bool,
    jobs: usize,
) -> Result<(Vec<Audited>, ChainResult), String> {
    if paths.len() > AUDIT_LOGS_MAX {
        return Err(format!(
            "{} logs, over the bound of {AUDIT_LOGS_MAX}",
            paths.len()
        ));
    }
    // A deployment's state directory, named by its id, must hold that deployment's log: a
    // whole log of another deployment placed there is foreign (a log file given by its own
    // path names no deployment to expect).
    let logs = paths
        .iter()
        .map(|p| Ok((read_log(p)?, expected_deployment(p))))
        .collect::<Result<Vec<_>, String>>()?;
    let jobs = jobs.clamp(1, AUDIT_JOBS_MAX);
    let share = logs.len().div_ceil(jobs).max(1);
    let verify = |logs: &[(Vec<u8>, Option<DeploymentId>)]| -> Vec<LogReport> {
        let proven = if batch {
            let refs: Vec<&[u8]> = logs.iter().map(|(b, _)| b.as_slice()).collect();
            batch_proven(&refs, issuer)
        } else {
            HashSet::new()
        };
        logs.iter()
            .map(|(bytes, expected)| verify_log_proven(bytes, issuer, *expected, &proven))
            .collect()
    };
    let reports: Vec<LogReport> = std::thread::scope(|s| {
        let shares: Vec<_> = logs
            .chunks(share)
            .map(|c| s.spawn(move || verify(c)))
            .collect();
        shares
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let chain = verify_chain(&reports)
        .map(|ids| ids.iter().map(|d| d.to_hex()).collect())
        .map_err(|e| (e.reason(), e.to_string()));
    let out: Vec<Audited> = paths
        .iter()
        .cloned()
        .zip(reports)
        .map(|(path, report)| Audited { path, report })
        .collect();
    Ok((out, chain))
}

/// One fleet epoch as the registry holds it (`PREFIX/epochs/FLEET`).
#[derive(Debug, Clone)]
pub struct FleetEpoch {
    /// The key, escaped (docs/PROTOCOL.md, "Text").
    pub key: String,
    /// The key's bytes, in hex: exact.
    pub key_hex: String,
    /// The claim, or why its value is no claim.
    pub claim: Result<repoch_protocol::fleet::FleetClaim, String>,
    pub cluster: u64,
    pub create_revision: i64,
    pub mod_revision: i64,
    /// The token floor of the claim's fleet (its record's; 0 when none).
    pub floor: u64,
}

/// What the registry and one host's log say together (docs/AUDITOR.md, "The fleet
/// registry").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FleetVerdict {
    /// The registry's claim names this log's deployment, and the log holds that intent
    /// (and, when it consumed, that fencing token).
    Consistent { key: String },
    /// No claim names this deployment and its log consumed with no fencing token.
    Unclaimed,
    /// The registry recorded this deployment's claim, and the log does not hold it: the
    /// log was rolled back (shorter) or replaced (different). `registry` and `log` are the
    /// evidence pair.
    Rollback { registry: String, log: String },
    /// The log consumed with a fencing token the registry does not hold (the key deleted,
    /// rewritten, or the cluster restored from an older snapshot).
    Unregistered { log: String, registry: String },
    /// A claim names this log's deployment, and this log's issuer key did not sign it: an
    /// etcd writer's claim, not this host's (whatever the log holds).
    Forged { registry: String, log: String },
    /// A claim naming this log's deployment sits at another key than its own
    /// (`PREFIX/epochs/FLEET`): an etcd writer's copy, which never counts as the
    /// deployment's registration.
    Planted { registry: String, log: String },
}

/// A log (its intents, the token it consumed with, `summary` of it) against the claim
/// `e` this host signed for its deployment: consistent when the log holds the claim's
/// intent and consumed with the claim's token, the key never modified; else a rollback.
fn against_claim(
    e: &FleetEpoch,
    intents: &[repoch_protocol::Hash],
    token: Option<repoch_protocol::fleet::FencingToken>,
    summary: &str,
) -> FleetVerdict {
    let c = e.claim.as_ref().expect("a signed claim");
    let registered = repoch_protocol::fleet::token_above(e.floor, e.cluster, e.create_revision)
        .unwrap_or(repoch_protocol::fleet::FencingToken {
            cluster: e.cluster,
            revision: 0,
        });
    let said = format!("{}: intent {} at {registered}", e.key, c.intent);
    if !intents.contains(&c.intent) {
        FleetVerdict::Rollback {
            registry: said,
            log: format!("no such intent: {summary}"),
        }
    } else if token.is_some_and(|t| t != registered) || e.mod_revision != e.create_revision {
        FleetVerdict::Rollback {
            registry: format!("{said} (modified at revision {})", e.mod_revision),
            log: format!(
                "consumed with {}",
                token.map_or("no token".into(), |t| t.to_string())
            ),
        }
    } else {
        FleetVerdict::Consistent { key: e.key.clone() }
    }
}

/// Of every claim the registry holds, what the audited logs need: for each audited
/// deployment, the first claim naming it that the logs' issuer key signed, and the first
/// naming it at all. However many keys the registry holds, this keeps two for each log.
#[derive(Debug)]
pub struct Naming<'a> {
    issuer: &'a repoch_protocol::PublicKey,
    /// The registry's prefix: a claim counts only at its own key, `PREFIX/epochs/FLEET`.
    prefix: String,
    by_deployment: std::collections::BTreeMap<
        repoch_protocol::DeploymentId,
        (Option<FleetEpoch>, Option<FleetEpoch>),
    >,
    /// For each audited deployment, the first claim naming it found at another key than
    /// its own: an etcd writer's copy, planted (a claim is created at its own key only).
    planted: std::collections::BTreeMap<repoch_protocol::DeploymentId, FleetEpoch>,
}

impl<'a> Naming<'a> {
    /// Slots for the deployments of `logs`.
    pub fn new(
        logs: &[Audited],
        issuer: &'a repoch_protocol::PublicKey,
        prefix: &str,
    ) -> Naming<'a> {
        let by_deployment = logs
            .iter()
            .filter_map(|a| a.report.deployment())
            .map(|d| (d, (None, None)))
            .collect();
        Naming {
            issuer,
            prefix: prefix.to_owned(),
            by_deployment,
            planted: std::collections::BTreeMap::new(),
        }
    }

    /// Keeps `e` if it is the first claim naming an audited deployment, or the first one
    /// naming it that the issuer key signed; a claim at another key than its own is kept
    /// as planted, never as the deployment's registration.
    pub fn offer(&mut self, e: &FleetEpoch) {
        let Ok(c) = &e.claim else { return };
        let Some((ours, any)) = self.by_deployment.get_mut(&c.deployment) else {
            return;
        };
        if e.key != format!("{}/epochs/{}", self.prefix, c.fleet) {
            self.planted
                .entry(c.deployment)
                .or_insert_with(|| e.clone());
            return;
        }
        if any.is_none() {
            *any = Some(e.clone());
        }
        if ours.is_none() && c.signed_by(self.issuer) {
            *ours = Some(e.clone());
        }
    }

    /// (signed by the issuer key, any) of the claims naming `d`.
    fn of(
        &self,
        d: Option<repoch_protocol::DeploymentId>,
    ) -> (Option<&FleetEpoch>, Option<&FleetEpoch>) {
        d.and_then(|d| self.by_deployment.get(&d))
            .map_or((None, None), |(o, a)| (o.as_ref(), a.as_ref()))
    }
}

/// Compares each verified log (its records verified with the issuer key `named` was
/// made with) with the claims the registry holds.
pub fn compare_fleet(named: &Naming<'_>, logs: &[Audited]) -> Vec<FleetVerdict> {
    use repoch_protocol::epoch::EpochBody;
    logs.iter()
        .map(|a| {
            let r = &a.report;
            let intents: Vec<repoch_protocol::Hash> = r
                .records
                .iter()
                .filter(|v| matches!(v.record.record.body, EpochBody::Intent { .. }))
                .map(|v| v.hash)
                .collect();
            let token = r.records.iter().find_map(|v| match &v.record.record.body {
                EpochBody::Consume { fencing, .. } => *fencing,
                _ => None,
            });
            let summary = format!(
                "{} record(s), head {}",
                r.records.len(),
                r.last_hash().map_or("-".into(), |h| h.to_hex())
            );
            // A claim this host signed is its own; one naming it that it did not sign is
            // only a writer's.
            if let Some(p) = r.deployment().and_then(|d| named.planted.get(&d)) {
                let c = p.claim.as_ref().expect("a claim");
                return FleetVerdict::Planted {
                    registry: format!(
                        "{}: a claim naming host {} (intent {}) at a key not its own, {}/epochs/{}: planted",
                        p.key, c.host, c.intent, named.prefix, c.fleet
                    ),
                    log: summary,
                };
            }
            let (ours, naming) = named.of(r.deployment());
            if let (None, Some(forged)) = (ours, naming) {
                let c = forged.claim.as_ref().expect("a claim");
                return FleetVerdict::Forged {
                    registry: format!(
                        "{}: intent {} in a claim naming host {}",
                        forged.key, c.intent, c.host
                    ),
                    log: format!("its issuer key signed no such claim: {summary}"),
                };
            }
            match (ours, token) {
                (Some(e), _) => against_claim(e, &intents, token, &summary),
                (None, Some(t)) => FleetVerdict::Unregistered {
                    log: format!("consumed with {t}: {summary}"),
                    registry: "no claim names this deployment".into(),
                },
                (None, None) => FleetVerdict::Unclaimed,
            }
        })
        .collect()
}

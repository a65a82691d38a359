//! `repoch audit`: epoch logs and the chain between deployments, verified offline; with
//! `--checkpoint`, whether a log extends a checkpoint signed earlier.

use std::path::Path;

use repoch_issuer::store;
use repoch_issuer::Refusal;
use repoch_protocol::{Outcome, Reason};
use serde_json::json;

use super::common::Ctx;
use super::CmdResult;
use crate::exit::{Failure, Why};

/// `audit --checkpoint`: the note verified under the issuer key, and whether the log it
/// names (by origin) among `logs` extends it.
fn audit_checkpoint(
    note: &Path,
    issuer: &repoch_protocol::PublicKey,
    logs: &[crate::audit::Audited],
) -> Result<(serde_json::Value, Option<Refusal>), Failure> {
    use repoch_protocol::checkpoint::{origin, Checkpoint, KEY_NAME};
    let invalid = |observed: String| {
        Failure::refused(Refusal::new(
            Reason::CheckpointInvalid,
            note.display().to_string(),
            format!("a note signed by {KEY_NAME} under the issuer key, about a log given"),
            observed,
        ))
    };
    // A note over the bound is an invalid checkpoint, as every reader judges it
    // (`Checkpoint::verify`); a path that cannot be read is a usage error.
    let max = repoch_protocol::limits::CHECKPOINT_BYTES_MAX;
    let bytes = repoch_sys::fs::read_regular(note, max, repoch_sys::fs::Links::Refuse).map_err(
        |e| match e.kind() {
            std::io::ErrorKind::FileTooLarge => invalid(format!("{e}")),
            _ => Failure::Usage(format!("{}: {e}", note.display()).into()),
        },
    )?;
    let text = String::from_utf8(bytes).map_err(|_| invalid("not UTF-8".into()))?;
    let c = Checkpoint::verify(&text, KEY_NAME, issuer).map_err(|e| invalid(e.to_string()))?;
    let Some(a) = logs
        .iter()
        .find(|a| a.report.deployment().map(|d| origin(&d)).as_deref() == Some(&c.origin))
    else {
        return Err(invalid(format!("origin {:?}: no such log given", c.origin)));
    };
    let (extends, reason, now) = match c.extended_by(&a.report) {
        Ok(x) => (true, None, x.current),
        Err(i) => (false, Some(i.reason), i.current),
    };
    let j = json!({"origin": c.origin, "path": a.path, "size": c.size, "head": c.head.to_hex(),
                   "log": {"size": now.0, "head": now.1.to_hex()}, "extends": extends,
                   "reason": reason.map(|r| r.as_str())});
    let refusal = reason.map(|r| {
        Refusal::new(
            r,
            a.path.display().to_string(),
            format!(
                "a log extending the checkpoint: size {} head {}",
                c.size, c.head
            ),
            format!("size {} head {}", now.0, now.1),
        )
    });
    Ok((j, refusal))
}

/// Keys `audit --registry` reads under each of `PREFIX/epochs/` and `PREFIX/hosts/`: each
/// kept as a few hundred bytes, so about 60 MB at most.
pub const AUDIT_KEYS_MAX: usize = 200_000;

/// `audit --registry`: every fleet deployment under the registry's prefix, and each log
/// compared with its claim (crate::audit::compare_fleet).
fn audit_registry(
    file: &Path,
    logs: &[crate::audit::Audited],
    issuer: &repoch_protocol::PublicKey,
) -> Result<(serde_json::Value, Option<Refusal>), Failure> {
    let bytes = crate::audit::read_bounded(file, repoch_protocol::limits::MANIFEST_TOML_BYTES_MAX)
        .map_err(|e| Failure::Usage(e.into()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| Failure::Usage(format!("{}: not UTF-8 text", file.display()).into()))?;
    let r = repoch_issuer::enroll::registry_of(&text)
        .map_err(|e| Failure::Usage(format!("{}: {e}", file.display()).into()))?;
    let ((cluster, revision), epochs, hosts) = read_registry(&r)?;
    let verdicts = crate::audit::compare_fleet(&epochs, logs, issuer);
    let fleets: Vec<serde_json::Value> = epochs.iter().map(|e| fleet_row(e, &hosts)).collect();
    let (rows, finding) = log_rows(logs, &verdicts);
    Ok((
        json!({"prefix": r.prefix, "cluster": format!("{cluster:016x}"), "revision": revision,
               "fleets": fleets, "logs": rows}),
        finding,
    ))
}

/// The hosts enrolled under a prefix, by fleet name.
type HostsByFleet = std::collections::BTreeMap<String, Vec<repoch_protocol::fleet::FleetHost>>;

/// What the registry holds under a prefix: the cluster and revision read at, the claims,
/// and the host records by fleet.
type Registered = ((u64, i64), Vec<crate::audit::FleetEpoch>, HostsByFleet);

/// Everything under `r`'s prefix, page by page, each key read once and kept only as what
/// the audit reports: any number of keys up to AUDIT_KEYS_MAX per directory, a key that
/// is no record reported as such beside the others. The claims (each with its fleet's
/// token floor, from the fleet records), and the host records by fleet.
fn read_registry(r: &repoch_protocol::fleet::Registry) -> Result<Registered, Failure> {
    use repoch_protocol::cbor::Canonical;
    use repoch_protocol::fleet::{FleetClaim, FleetHost, FleetRecord};
    // The auditor's own credentials: readable regular files (a usage error otherwise).
    // A credential's refusal names it (`registry.ca PATH`): the auditor's file to fix.
    let mut client = repoch_issuer::fleet::connect(r, false).map_err(|e| {
        match e.subject.starts_with("registry.") {
            true => Failure::Usage(e.to_string().into()),
            false => Failure::refused(e),
        }
    })?;
    let unavailable = |e: &dyn std::fmt::Display| {
        Failure::refused(Refusal::new(
            Reason::RegistryUnavailable,
            format!("registry {}", r.prefix),
            "an answer",
            e.to_string(),
        ))
    };
    let dir = |d: &str| format!("{}/{d}/", r.prefix).into_bytes();
    let mut epochs: Vec<crate::audit::FleetEpoch> = Vec::new();
    let header = client
        .scan(&dir("epochs"), AUDIT_KEYS_MAX, |e| {
            epochs.push(crate::audit::FleetEpoch {
                // Keys are anyone's with write access to etcd: escaped once, here, for
                // every sink (a terminal, a log line, the refusal); `key_hex` is exact.
                key: repoch_protocol::text::escape(&String::from_utf8_lossy(&e.key)).into_owned(),
                key_hex: e.key.iter().map(|b| format!("{b:02x}")).collect(),
                claim: FleetClaim::from_bytes(&e.value).map_err(|e| e.to_string()),
                cluster: 0,
                create_revision: e.create_revision,
                mod_revision: e.mod_revision,
                floor: 0,
            })
        })
        .map_err(|e| unavailable(&e))?;
    // The fleets' records: each claim's token is its create revision above its fleet's
    // floor.
    let mut floors = std::collections::BTreeMap::new();
    client
        .scan(&dir("fleets"), AUDIT_KEYS_MAX, |e| {
            if let Ok(rec) = FleetRecord::from_bytes(&e.value) {
                floors.insert(rec.fleet, rec.pin.floor);
            }
        })
        .map_err(|e| unavailable(&e))?;
    for e in &mut epochs {
        e.cluster = header.cluster;
        if let Ok(c) = &e.claim {
            e.floor = floors.get(&c.fleet).copied().unwrap_or(0);
        }
    }
    let mut hosts = HostsByFleet::new();
    client
        .scan(&dir("hosts"), AUDIT_KEYS_MAX, |e| {
            if let Ok(h) = FleetHost::from_bytes(&e.value) {
                hosts.entry(h.fleet.clone()).or_default().push(h);
            }
        })
        .map_err(|e| unavailable(&e))?;
    Ok(((header.cluster, header.revision), epochs, hosts))
}

/// A fleet deployment as `--json` lists it: its claim, whether the host record naming it
/// signed it (null: none does), and the hosts enrolled for it; or why its key holds no
/// claim.
fn fleet_row(e: &crate::audit::FleetEpoch, hosts: &HostsByFleet) -> serde_json::Value {
    let c = match &e.claim {
        Ok(c) => c,
        Err(why) => {
            return json!({"key": e.key, "key_hex": e.key_hex, "error": repoch_protocol::text::escape(why), "revision": e.create_revision})
        }
    };
    let enrolled = hosts.get(&c.fleet).map_or(&[][..], Vec::as_slice);
    let signed = enrolled
        .iter()
        .find(|h| (&h.host, h.deployment) == (&c.host, c.deployment))
        .map(|h| c.signed_by(&h.issuer_key));
    let listed: Vec<serde_json::Value> = enrolled
        .iter()
        .map(|h| json!({"host": h.host, "deployment": h.deployment.to_hex()}))
        .collect();
    json!({"key": e.key, "key_hex": e.key_hex, "fleet": c.fleet, "signed": signed,
           "host": c.host, "deployment": c.deployment.to_hex(), "intent": c.intent.to_hex(),
           "revision": e.create_revision, "modified": e.mod_revision, "hosts": listed})
}

/// Each log's verdict as `--json` lists it, and the first finding (a rollback, an
/// unregistered token, a forged claim) as the refusal the audit ends with.
fn log_rows(
    logs: &[crate::audit::Audited],
    verdicts: &[crate::audit::FleetVerdict],
) -> (Vec<serde_json::Value>, Option<Refusal>) {
    use crate::audit::FleetVerdict as V;
    let mut finding = None;
    let rows = logs
        .iter()
        .zip(verdicts)
        .map(|(a, v)| {
            let (verdict, evidence) = match v {
                V::Consistent { key } => ("consistent", json!({"key": key})),
                V::Unclaimed => ("unclaimed", json!(null)),
                V::Rollback { registry, log } | V::Unregistered { registry, log } | V::Forged { registry, log } => {
                    let (name, reason) = match v {
                        V::Rollback { .. } => ("rollback", Reason::RegistryRollback),
                        V::Unregistered { .. } => ("unregistered", Reason::RegistryRollback),
                        _ => ("forged", Reason::RegistryForged),
                    };
                    finding.get_or_insert_with(|| {
                        Refusal::new(reason, a.path.display().to_string(), registry.clone(), log.clone())
                    });
                    (name, json!({"registry": registry, "log": log}))
                }
            };
            json!({"path": a.path, "deployment": a.report.deployment().map(|d| d.to_hex()), "verdict": verdict, "evidence": evidence})
        })
        .collect();
    (rows, finding)
}

pub fn run(
    ctx: &Ctx,
    issuer_key: Option<&Path>,
    checkpoint: Option<&Path>,
    registry: Option<&Path>,
    paths: &[std::path::PathBuf],
    batch: bool,
    jobs: usize,
) -> CmdResult {
    let issuer = match issuer_key {
        Some(p) => {
            repoch_issuer::keys::read_public(p).map_err(|e| Failure::Usage(Why::error(e)))?
        }
        None => store::issuer_public(&ctx.layout)?,
    };
    let (logs, chain) =
        crate::audit::audit(paths, &issuer, batch, jobs).map_err(|e| Failure::Usage(e.into()))?;
    let bad: Vec<&crate::audit::Audited> = logs
        .iter()
        .filter(|a| a.report.problem.is_some() || a.report.records.is_empty())
        .collect();
    let rows: Vec<serde_json::Value> = logs
        .iter()
        .map(|a| {
            let r = &a.report;
            // The fencing token it consumed with (a fleet's): what a fleet established after
            // a rebuild takes as its floor (docs/OPERATOR.md, "Fencing tokens").
            let fencing = r.records.iter().find_map(|v| match &v.record.record.body {
                repoch_protocol::epoch::EpochBody::Consume { fencing, .. } => *fencing,
                _ => None,
            });
            json!({"path": a.path, "deployment": r.deployment().map(|d| d.to_hex()), "epoch": r.classification.as_str(),
                   "fencing": fencing.map(|t| json!({"cluster": format!("{:016x}", t.cluster), "revision": t.revision})),
                   "records": r.records.len(), "head": r.last_hash().map(|h| h.to_hex()),
                   "predecessor": r.genesis().and_then(|(_, p)| p).map(|p| p.deployment.to_hex()),
                   "problem": r.problem.as_ref().map(|(at, why)| json!({"offset": at, "reason": why}))})
        })
        .collect();
    let cp = match checkpoint {
        Some(n) => Some(audit_checkpoint(n, &issuer, &logs)?),
        None => None,
    };
    let fleet = match registry {
        Some(f) => Some(audit_registry(f, &logs, &issuer)?),
        None => None,
    };
    let inconsistent = cp
        .as_ref()
        .and_then(|(_, r)| r.clone())
        .or_else(|| fleet.as_ref().and_then(|(_, r)| r.clone()));
    let verified = bad.is_empty() && chain.is_ok() && inconsistent.is_none();
    // The first log that does not verify, with its own reason (epoch-torn, -forged, …);
    // the chain cannot be checked past it, so it is also what `chain_error` carries.
    let first = bad.first().map(|a| {
        let reason = a
            .report
            .classification
            .refusal()
            .unwrap_or(Reason::EpochMissing);
        Refusal::new(
            reason,
            a.path.display().to_string(),
            "a valid log",
            a.report
                .problem
                .as_ref()
                .map_or("no record".into(), |(at, w)| format!("offset {at}: {w}")),
        )
    });
    let chain_error = match (&first, &chain) {
        (Some(r), _) => Some(json!({"reason": r.reason.as_str(), "detail": r.detail()})),
        (None, Err((r, e))) => Some(json!({"reason": r.as_str(), "detail": e})),
        (None, Ok(_)) => None,
    };
    ctx.out(json!({"verified": verified, "logs": rows, "chain": chain.as_ref().ok(), "chain_error": chain_error,
                   "checkpoint": cp.as_ref().map(|(j, _)| j), "registry": fleet.as_ref().map(|(j, _)| j)}), || {
        let mut s = format!("{:<32}  {:<10}  {:>7}  {:<16}  PREDECESSOR\n", "DEPLOYMENT", "EPOCH", "RECORDS", "HEAD");
        for a in &logs {
            let r = &a.report;
            s.push_str(&format!(
                "{:<32}  {:<10}  {:>7}  {:<16}  {}\n",
                r.deployment().map_or("-".into(), |d| d.to_hex()),
                r.classification.as_str(),
                r.records.len(),
                r.last_hash().map_or("-".into(), |h| h.to_hex()[..16].to_owned()),
                r.genesis().and_then(|(_, p)| p).map_or("-".into(), |p| p.deployment.to_hex()),
            ));
            if let Some((at, why)) = &r.problem {
                s.push_str(&format!("  {}: problem at offset {at}: {why}\n", a.path.display()));
            }
        }
        match (&chain, &chain_error) {
            (Ok(order), None) => s.push_str(&format!("chain: verified ({} deployment{})", order.len(), if order.len() == 1 { "" } else { "s" })),
            (_, Some(e)) => s.push_str(&format!("chain: NOT verified: {}: {}", e["reason"].as_str().unwrap_or(""), e["detail"].as_str().unwrap_or(""))),
            (Err((r, e)), None) => s.push_str(&format!("chain: NOT verified: {r}: {e}")),
        }
        if let Some((j, r)) = &cp {
            match r {
                None => s.push_str(&format!("\ncheckpoint: the log extends it (size {} -> {})", j["size"], j["log"]["size"])),
                Some(r) => s.push_str(&format!("\ncheckpoint: NOT extended: {r}")),
            }
        }
        if let Some((j, _)) = &fleet {
            for f in j["fleets"].as_array().into_iter().flatten() {
                // Every text here was escaped where it was read (the key, the error).
                let key = f["key"].as_str().unwrap_or("");
                s.push_str(&match f["error"].as_str() {
                    Some(why) => format!(
                        "\nregistry: {key} holds no fleet claim ({why}) at revision {}",
                        f["revision"]
                    ),
                    None => format!(
                        "\nregistry: {key} used by host {} (deployment {}) at revision {}",
                        f["host"].as_str().unwrap_or("?"),
                        f["deployment"].as_str().unwrap_or("?"),
                        f["revision"]
                    ),
                });
            }
            for l in j["logs"].as_array().into_iter().flatten() {
                s.push_str(&format!(
                    "\nregistry: {}: {}{}",
                    l["path"].as_str().unwrap_or(""),
                    l["verdict"].as_str().unwrap_or(""),
                    match l["evidence"]["registry"].as_str() {
                        Some(reg) => format!(" (registry: {reg}; log: {})", l["evidence"]["log"].as_str().unwrap_or("")),
                        None => String::new(),
                    }
                ));
            }
        }
        if verified {
            s.push_str("\naudit: verified");
        } else {
            s.push_str("\naudit: FAILED");
        }
        s
    });
    // A log that does not extend a signed checkpoint is the finding, even when it is also
    // torn: the evidence pair says what was lost.
    if let Some(r) = inconsistent {
        return Err(Failure::Inconsistent(r));
    }
    if verified {
        Ok(Outcome::Success)
    } else {
        let r = first.unwrap_or_else(|| {
            let (reason, why) = chain
                .err()
                .unwrap_or((Reason::Internal, "no chain error".into()));
            Refusal::new(reason, "chain", "verified links", why)
        });
        Err(Failure::Refused(vec![r]))
    }
}

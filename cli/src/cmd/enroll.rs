//! `repoch enroll`: a deployment from its manifest, once.

use std::path::Path;

use repoch_issuer::Refusal;
use repoch_protocol::{Outcome, Reason};
// Host names and labels read from the registry are outside text (docs/PROTOCOL.md, "Text").
use repoch_protocol::text::escape;
use serde_json::json;

use super::common::{now, require_root, warn, Ctx};
use super::CmdResult;
use crate::exit::Failure;

/// Reads a manifest: a regular file (a FIFO or device would block or never end:
/// `read_regular` opens it non-blocking and checks its type), at most
/// `MANIFEST_TOML_BYTES_MAX` bytes, UTF-8. The path is the operator's: a symlink is followed.
fn read_manifest(path: &Path) -> Result<String, String> {
    use repoch_protocol::limits::MANIFEST_TOML_BYTES_MAX;
    use repoch_sys::fs::{read_regular, Links};
    let bytes =
        read_regular(path, MANIFEST_TOML_BYTES_MAX, Links::Follow).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".into())
}

pub fn run(
    ctx: &Ctx,
    manifest: &Path,
    fleet_admin: Option<(std::path::PathBuf, std::path::PathBuf)>,
) -> CmdResult {
    require_root("enroll")?;
    let v = validated(manifest, fleet_admin)?;
    let e = repoch_issuer::enroll::enroll(&ctx.layout, &v, now())
        .map_err(|e| enroll_failure(manifest, &e))?;
    let absent = absent_now(&v.containment, &e.containers_absent);
    // stdout is the id alone (`ID=$(repoch enroll m.toml)`); warnings go to stderr.
    ctx.out(enrolled_json(&v, &e, &absent), || e.id.to_hex());
    if !ctx.json {
        warn_human(&v, &e, &absent);
    }
    Ok(Outcome::Success)
}

/// The manifest at `manifest` read and validated, with the fleet administrator's
/// credential (`--fleet-admin-cert`, `--fleet-admin-key`) made absolute.
fn validated(
    manifest: &Path,
    fleet_admin: Option<(std::path::PathBuf, std::path::PathBuf)>,
) -> Result<repoch_issuer::enroll::Validated, Failure> {
    let text = read_manifest(manifest)
        .map_err(|e| Failure::Usage(format!("{}: {e}", manifest.display()).into()))?;
    let mut v = repoch_issuer::enroll::validate(&text).map_err(|e| invalid(manifest, &e))?;
    v.fleet_admin = match fleet_admin {
        None => None,
        Some((cert, key)) => {
            let absolute = |p: &Path| {
                std::path::absolute(p)
                    .map(|p| p.display().to_string())
                    .map_err(|e| Failure::Usage(format!("{}: {e}", p.display()).into()))
            };
            Some((absolute(&cert)?, absolute(&key)?))
        }
    };
    Ok(v)
}

/// A manifest the host cannot enroll as written.
fn invalid(manifest: &Path, e: &repoch_issuer::enroll::EnrollError) -> Failure {
    Failure::Manifest(Refusal::new(
        Reason::ManifestInvalid,
        manifest.display().to_string(),
        "an enrollable manifest",
        e.to_string(),
    ))
}

/// docs/EXIT-CODES.md: a manifest the host cannot enroll as written (a field, an object
/// that exists or is missing, a predecessor that already has a successor) is 64; the host
/// failing to write its files is a refusal (2) that kept nothing.
fn enroll_failure(manifest: &Path, e: &repoch_issuer::enroll::EnrollError) -> Failure {
    use repoch_issuer::enroll::EnrollError;
    match e {
        EnrollError::Manifest { .. } | EnrollError::Refused { .. } => invalid(manifest, e),
        EnrollError::Io(_) => Failure::Refused(vec![Refusal::new(
            Reason::EnrollFailed,
            manifest.display().to_string(),
            "enrolled",
            e.to_string(),
        )]),
        EnrollError::Registry(_) => Failure::Refused(vec![Refusal::new(
            Reason::RegistryUnavailable,
            manifest.display().to_string(),
            "this host recorded in the fleet registry",
            format!("{e}; enrollment failed, nothing kept"),
        )]),
    }
}

/// Why a file could not be made append-only, escaped: every text another program or the
/// system wrote is (an engine's error answer above all: docs/THREAT-MODEL.md, texts shown
/// to people).
fn append_only_error(r: &repoch_issuer::enroll::AppendOnly) -> Option<String> {
    r.as_ref()
        .err()
        .map(|e| escape(&e.to_string()).into_owned())
}

/// `repoch --json enroll`'s answer.
fn enrolled_json(
    v: &repoch_issuer::enroll::Validated,
    e: &repoch_issuer::enroll::Enrolled,
    absent: &[(&'static str, String, String)],
) -> serde_json::Value {
    let fleet = v.registry.as_ref().map(|r| {
        let (id, established) = e.fleet.expect("a [registry] enrolls a fleet");
        json!({"name": r.fleet, "id": id.to_string(), "established": established, "prefix": r.prefix, "host": r.host, "epoch_key": r.epoch_key(),
               "hosts": e.fleet_hosts.iter().map(|h| json!({"host": escape(&h.host), "deployment": h.deployment.to_hex(), "label": escape(&h.label)})).collect::<Vec<_>>()})
    });
    let journal_err = append_only_error(&e.journal_append_only);
    let log_err = append_only_error(&e.log_append_only);
    json!({"outcome": "enrolled", "deployment": e.id.to_hex(), "state_dir": escape(&e.state_dir.display().to_string()), "manifest_sha256": e.manifest_hash.to_hex(),
           "journal_append_only": journal_err.is_none(), "journal_append_only_error": journal_err,
           "log_append_only": log_err.is_none(), "log_append_only_error": log_err,
           "absent_at_enrollment": absent.iter().map(|(k, p, w)| json!({"kind": k, "path": escape(p), "observed": escape(w)})).collect::<Vec<_>>(),
           "socket_files": v.containment.socket_files.iter().map(|f| json!({"path": f.path, "mode": format!("0o{:o}", f.mode), "uid": f.uid, "gid": f.gid})).collect::<Vec<_>>(),
           "cross_check": cross_check_json(&e.cross_check),
           "containers": e.containers.iter().map(|c| json!({"container": c.spelled(), "socket": escape(&c.socket), "pinned": c.pinned})).collect::<Vec<_>>(),
           "waived": v.containment.waived.iter().map(|w| json!({"what": w.what, "reason": w.reason})).collect::<Vec<_>>(),
           "fleet": fleet})
}

/// What the cross-check with the running old root did, for `--json`.
fn cross_check_json(c: &repoch_issuer::enroll::CrossCheck) -> serde_json::Value {
    use repoch_issuer::enroll::CrossCheck;
    match c {
        CrossCheck::NotRun { why } => json!({"ran": false, "why": why}),
        CrossCheck::Passed { seeds, processes } => {
            json!({"ran": true, "seeds": seeds.iter().map(|s| escape(s)).collect::<Vec<_>>(), "processes": processes})
        }
    }
}

/// What the human form says on stderr after an enrollment: the journal and the epoch log
/// when not append-only, each object absent now, and the fleet joined or established.
fn warn_human(
    v: &repoch_issuer::enroll::Validated,
    e: &repoch_issuer::enroll::Enrolled,
    absent: &[(&'static str, String, String)],
) {
    let journal_err = append_only_error(&e.journal_append_only);
    let log_err = append_only_error(&e.log_append_only);
    if let repoch_issuer::enroll::CrossCheck::NotRun { why } = &e.cross_check {
        warn(&format!("repoch: note: nothing was cross-checked with the running old root: {why} (docs/OPERATOR.md, \"Discovering the old root\")"));
    }
    if let Some(w) = &journal_err {
        warn(&format!("repoch: warning: the producer journal is not append-only ({w}); lineage verification will refuse it (lineage-unprotected)"));
    }
    for (kind, path, what) in absent {
        warn(&format!("repoch: warning: {kind} {path} {}: it is observed as absent (contained), so a misspelt path checks nothing; the deployment cannot be re-enrolled", escape(what)));
    }
    if let Some(r) = &v.registry {
        let hosts: Vec<String> = e
            .fleet_hosts
            .iter()
            .map(|h| format!("{} (deployment {})", escape(&h.host), h.deployment))
            .collect();
        let (id, established) = e.fleet.expect("a [registry] enrolls a fleet");
        let how = match established {
            true => format!(
                "established by this enrollment; every other host joins it with registry.fleet_id = \"{id}\""
            ),
            false => "joined".to_owned(),
        };
        warn(&format!(
            "repoch: fleet {} (id {id}, {how}): this host is {}; the hosts that may recover it: {}",
            r.fleet,
            r.host,
            hosts.join(", ")
        ));
    }
    if let Some(w) = &log_err {
        warn(&format!("repoch: warning: the epoch log is not append-only ({w}); only its owner and mode protect it"));
    }
}

/// The enrolled cgroups and executables that cannot be what they name now, in manifest
/// order, cgroups first: `(kind, path, what)`, `what` "does not exist now" (a dangling
/// symlink included: observation follows it) or "is not a regular file" (an executable).
/// Observation finds such a cgroup absent and no task running such an executable, which is
/// contained: right once the old root is gone, but a misspelt path checks nothing.
/// Enrollment happens while the old root runs, so each is named (docs/OPERATOR.md,
/// "Enrolling a deployment (once)"). A path that cannot be checked otherwise is not named:
/// observation reports it. A named container its engine has none of is named too, and one
/// whose engine could not be asked.
fn absent_now(
    c: &repoch_protocol::manifest::Containment,
    containers: &[(String, String)],
) -> Vec<(&'static str, String, String)> {
    const MISSING: &str = "does not exist now";
    let missing = |p: &Path| matches!(std::fs::metadata(p), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
    let mut out = Vec::new();
    if let Ok(root) = repoch_sys::cgroup::mount_point() {
        for g in &c.cgroups {
            if missing(&root.join(g.trim_start_matches('/'))) {
                out.push(("cgroup", g.clone(), MISSING.into()));
            }
        }
    }
    for x in &c.executables {
        match std::fs::metadata(x) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                out.push(("executable", x.clone(), MISSING.into()))
            }
            Ok(m) if !m.is_file() => {
                out.push(("executable", x.clone(), "is not a regular file".into()))
            }
            _ => {}
        }
    }
    out.extend(
        containers
            .iter()
            .map(|(n, what)| ("container", n.clone(), what.clone())),
    );
    out
}

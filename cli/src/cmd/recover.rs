//! `repoch recover`: asks repochd for the deployment's one recovery and streams its steps.

use repoch_issuer::store;
use repoch_issuer::Refusal;
use repoch_protocol::wire::AdminEvent;
use repoch_protocol::Reason;
use serde_json::json;

use super::common::{fact_json, fact_line, parse_sha256, warn, Ctx};
use super::CmdResult;
use crate::exit::Failure;

/// Default wait for the consumer on the grant socket.
pub const CONSUMER_WAIT_SECONDS_DEFAULT: u64 = 30;

/// Prints one admin event as a human line (or its JSON with --json).
fn print_event(ctx: &Ctx, e: &AdminEvent) {
    match e {
        AdminEvent::Progress { step, detail } => ctx.out(
            json!({"event": "progress", "step": step, "detail": detail}),
            || format!("{step:<22} {detail}"),
        ),
        AdminEvent::Fact(f) => ctx.out(json!({"event": "fact", "fact": fact_json(f)}), || {
            fact_line(f)
        }),
        AdminEvent::Record { kind, seq, hash } => ctx.out(
            json!({"event": "record", "kind": kind, "seq": seq, "hash": hash.to_hex()}),
            || format!("{:<22} #{seq} {kind} {hash} (fsynced)", "record"),
        ),
        AdminEvent::Outcome { .. } => {}
    }
}

pub fn grant_json(bytes: &[u8]) -> serde_json::Value {
    use repoch_protocol::cbor::Canonical as _;
    match repoch_protocol::grant::SignedGrant::from_bytes(bytes) {
        Ok(g) => {
            let g = g.grant;
            json!({"deployment": g.deployment.to_hex(), "intent": g.intent.to_hex(), "consume": g.consume.to_hex(), "evidence": g.evidence.to_hex(),
                   "ready": g.ready_path, "ready_sha256": g.ready_sha256.to_hex(),
                   "fences": g.fences.iter().map(|f| json!({"path": f.path, "ino": f.identity.ino})).collect::<Vec<_>>(),
                   "frontier": {"seq": g.frontier_seq, "hash": g.frontier_hash.to_hex()},
                   "unknown_ops": g.unknown_ops.iter().map(|u| json!({"op": u.op, "name": u.name})).collect::<Vec<_>>(),
                   "sha256": repoch_protocol::Hash::of(bytes).to_hex()})
        }
        Err(e) => json!({"error": e.to_string()}),
    }
}

pub fn run(ctx: &Ctx, prefix: &str, approve: Option<&str>, wait: u64) -> CmdResult {
    use repoch_protocol::wire::{read_msg_by, write_msg, AdminRequest};
    let approve_ready = approve.map(parse_sha256).transpose()?;
    let id = store::resolve(&ctx.layout, prefix)?;
    let sock = ctx.layout.admin_socket();
    let mut s = connect(&sock)?;
    // Every message whole within the consumer wait (at most CONSUMER_WAIT_SECONDS_MAX, by
    // the parser) plus a margin for an observation, re-armed before every read: a repochd
    // that drips bytes cannot hold us past it. Per message, not per session: observations
    // that a crowded host makes slow (each one streams its facts when done) must not make
    // the client give up, and say "uncertain", while repochd goes on and grants.
    let margin = repoch_issuer::barrier::margin_seconds(RECOVER_MARGIN_SECONDS);
    let per_message = std::time::Duration::from_secs(wait.saturating_add(margin));
    let _ = s.set_write_timeout(Some(std::time::Duration::from_secs(RECOVER_MARGIN_SECONDS)));
    // repochd may refuse before reading (a non-root peer): a failed write is reported only
    // if no answer can be read either.
    let sent = write_msg(
        &mut s,
        &AdminRequest::Recover {
            deployment: id,
            approve_ready,
            consumer_wait_seconds: wait,
        },
    );
    ctx.out(json!({"event": "start", "deployment": id.to_hex()}), || {
        format!("recover {id}")
    });
    loop {
        let deadline = std::time::Instant::now() + per_message;
        let e: AdminEvent = match read_msg_by(&mut s, deadline, &mut |s, left| {
            s.set_read_timeout(Some(left))
        }) {
            Ok(e) => e,
            Err(e) => return Err(read_failed(e, sent.as_ref().err(), &sock, &id)),
        };
        let AdminEvent::Outcome {
            outcome,
            reasons,
            detail,
            grant,
        } = &e
        else {
            print_event(ctx, &e);
            continue;
        };
        return Ok(print_outcome(
            ctx,
            outcome,
            reasons,
            detail,
            grant.as_deref(),
        ));
    }
}

/// Why no message could be read from repochd: the request never sent (unreachable), a
/// peer speaking something else (a bug on one side), or repochd lost mid-issuance (the
/// epoch may have been used; only its log can tell: uncertain).
fn read_failed(
    e: std::io::Error,
    unsent: Option<&std::io::Error>,
    sock: &std::path::Path,
    id: &repoch_protocol::DeploymentId,
) -> Failure {
    if let Some(unsent) = unsent {
        return Failure::refused(Refusal::new(
            Reason::DaemonUnreachable,
            sock.display().to_string(),
            "a request sent",
            unsent.to_string(),
        ));
    }
    if e.kind() == std::io::ErrorKind::InvalidData {
        return Failure::Internal(format!("repochd sent a malformed message: {e}").into());
    }
    Failure::Uncertain(
        format!(
            "repochd stopped answering ({e}); the outcome is unknown: read `repoch status {}`",
            &id.to_hex()[..8]
        )
        .into(),
    )
}

/// The admin socket, connected: refused `admin-denied` when its mode keeps this peer out
/// (a denial, not an absence), else `daemon-unreachable`.
fn connect(sock: &std::path::Path) -> Result<std::os::unix::net::UnixStream, Failure> {
    std::os::unix::net::UnixStream::connect(sock).map_err(|e| {
        let reason = match e.kind() {
            std::io::ErrorKind::PermissionDenied => Reason::AdminDenied,
            _ => Reason::DaemonUnreachable,
        };
        Failure::refused(Refusal::new(
            reason,
            sock.display().to_string(),
            "repochd listening, and a root peer",
            e.to_string(),
        ))
    })
}

/// The recovery's outcome as repochd told it, printed (the grant's summary when granted,
/// the reasons otherwise); its exit.
fn print_outcome(
    ctx: &Ctx,
    outcome: &repoch_protocol::wire::Verdict,
    reasons: &[Reason],
    detail: &str,
    grant: Option<&[u8]>,
) -> repoch_protocol::Outcome {
    let result = outcome.outcome();
    let code = result.code();
    let g = grant.map(grant_json);
    ctx.out(
        json!({"event": "outcome", "outcome": outcome.as_str(), "exit": code, "reasons": reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>(), "detail": detail, "grant": g}),
        || {
            let mut t = format!("{:<22} {}", "outcome", outcome.as_str());
            if let Some(g) = &g {
                t.push_str(&format!("\ngrant sha256 {}\n  READY {} sha256 {}\n  fences {}\n  journal frontier seq {} \n  unknown operations {}",
                    g["sha256"].as_str().unwrap_or(""), g["ready"].as_str().unwrap_or(""), g["ready_sha256"].as_str().unwrap_or(""),
                    g["fences"].as_array().map_or(0, Vec::len), g["frontier"]["seq"], g["unknown_ops"]));
            } else {
                t.push_str(&format!(" ({})\n{detail}", reasons.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(", ")));
            }
            t
        },
    );
    if !result.is_success() && !ctx.json {
        warn(&format!(
            "repoch: {}: {}",
            outcome.as_str(),
            reasons
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    result
}

/// Margin over the consumer wait for a recovery's observations and appends.
pub const RECOVER_MARGIN_SECONDS: u64 = 120;

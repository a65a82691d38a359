//! `repoch list`: every enrolled deployment and its epoch state.

use repoch_issuer::store::{self, Deployment};
use repoch_protocol::Outcome;
use serde_json::json;

use super::common::{integrity_refusal, say, warn, Ctx};
use super::CmdResult;
use crate::exit::Failure;

pub fn run(ctx: &Ctx) -> CmdResult {
    let ids = store::list(&ctx.layout).map_err(|e| {
        Failure::Internal(format!("{}: {e}", ctx.layout.deployments().display()).into())
    })?;
    let issuer = if ids.is_empty() {
        None
    } else {
        Some(store::issuer_public(&ctx.layout)?)
    };
    let mut rows = Vec::new();
    let mut unverified = 0usize;
    for id in ids {
        let row = match Deployment::open(
            &ctx.layout,
            issuer.as_ref().expect("deployments imply an issuer key"),
            id,
        ) {
            Ok(d) => {
                let refusal = integrity_refusal(&d);
                unverified = unverified.saturating_add(usize::from(refusal.is_some()));
                json!({"deployment": id.to_hex(), "label": repoch_protocol::text::escape(&d.manifest.label), "epoch": d.classification().as_str(),
                       "refusal": refusal.as_ref().map(crate::exit::refusal_json)})
            }
            Err(r) => {
                unverified = unverified.saturating_add(1);
                json!({"deployment": id.to_hex(), "label": null, "epoch": "unreadable", "refusal": crate::exit::refusal_json(&r)})
            }
        };
        rows.push(row);
    }
    if ctx.json {
        say(&json!({"deployments": rows}).to_string());
    } else if rows.is_empty() {
        say(&format!(
            "no deployments enrolled under {}",
            ctx.layout.deployments().display()
        ));
    } else {
        say(&format!("{:<32}  {:<10}  LABEL", "DEPLOYMENT", "EPOCH"));
        for r in rows {
            say(&format!(
                "{:<32}  {:<10}  {}",
                r["deployment"].as_str().unwrap_or(""),
                r["epoch"].as_str().unwrap_or(""),
                r["label"].as_str().unwrap_or("-")
            ));
        }
    }
    // docs/EXIT-CODES.md: 2 when a deployment's state or log does not verify.
    if unverified > 0 {
        warn(&format!(
            "repoch: refused: {unverified} deployment(s) do not verify (see their refusal)"
        ));
        return Ok(Outcome::Refused);
    }
    Ok(Outcome::Success)
}

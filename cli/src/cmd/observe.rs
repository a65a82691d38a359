//! `repoch observe`: a recovery's preflight. Observes every fact now; writes nothing.

use repoch_issuer::Refusal;
use repoch_protocol::Outcome;
use serde_json::json;

use super::common::{fact_json, fact_line, open, parse_sha256, require_root, warn, Ctx};
use super::CmdResult;

/// What held the process space (the `process-space` fact), for `--json`: `null` when no
/// executable is enrolled (nothing to hold).
fn process_space(facts: &[repoch_protocol::Fact]) -> serde_json::Value {
    facts
        .iter()
        .find(|f| f.kind == "process-space")
        .map_or(serde_json::Value::Null, |f| {
            let by = if f.observed == repoch_issuer::observe::processes::HELD_BY_EVENTS {
                "events"
            } else {
                "walk"
            };
            json!({"held_by": by, "observed": f.observed})
        })
}

pub fn run(ctx: &Ctx, prefix: &str, approve: Option<&str>) -> CmdResult {
    require_root("observe")?;
    let approve = approve.map(parse_sha256).transpose()?;
    let d = open(ctx, prefix)?;
    let mut obs =
        repoch_issuer::observe::Observer::new(d.manifest.clone(), ctx.layout.clone(), approve);
    let mut fences = repoch_issuer::observe::Fences::default();
    let o = obs.observe(&mut fences);
    let rep = d.report();
    let epoch = rep.classification.refusal().map(|reason| {
        Refusal::new(
            reason,
            d.id.to_hex(),
            "an unused epoch (enrolled)",
            rep.classification.as_str(),
        )
    });
    let refusals: Vec<Refusal> = epoch
        .iter()
        .cloned()
        .chain(o.failed().filter_map(Refusal::from_fact))
        .collect();
    ctx.out(
        json!({"deployment": d.id.to_hex(), "digest": o.digest.to_hex(), "holds": o.holds(), "ready_sha256": o.ready_sha256.to_hex(),
               "epoch": rep.classification.as_str(),
               "refusals": refusals.iter().map(crate::exit::refusal_json).collect::<Vec<_>>(),
               "frontier": {"seq": o.frontier_seq, "hash": o.frontier_hash.to_hex()},
               "unknown_ops": o.unknown_ops.iter().map(|u| json!({"op": u.op, "name": u.name})).collect::<Vec<_>>(),
               "process_space": process_space(&o.facts),
               "facts": o.facts.iter().map(fact_json).collect::<Vec<_>>()}),
        || {
            let mut s = format!("deployment {}
", d.id);
            for f in &o.facts {
                s.push_str(&fact_line(f));
                s.push('\n');
            }
            s.push_str(&format!("evidence digest {}", o.digest));
            s
        },
    );
    // docs/EXIT-CODES.md: observe is a recovery's preflight: 0 only if a recovery now
    // would be admitted (every fact holds and the epoch is unused), else 2 with each reason.
    if o.holds() && epoch.is_none() {
        Ok(Outcome::Success)
    } else {
        if !ctx.json {
            for r in &refusals {
                warn(&format!("repoch: refused: {r}"));
            }
        }
        Ok(Outcome::Refused)
    }
}

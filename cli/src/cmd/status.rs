//! `repoch status`: one deployment's epoch, classified. Changes nothing.

use repoch_issuer::store::Deployment;
use repoch_protocol::epoch::EpochBody;
// A label from an enrollment made before the text rule grew, a withheld record's detail:
// escaped at the sink whatever the enrollment checked (docs/PROTOCOL.md, "Text").
use repoch_protocol::text::escape;
use repoch_protocol::Outcome;
use serde_json::json;

use super::common::{integrity_refusal, open, warn, Ctx};
use super::CmdResult;

fn status_json(d: &Deployment) -> serde_json::Value {
    let rep = d.report();
    json!({
        "deployment": d.id.to_hex(),
        "label": escape(&d.manifest.label),
        "epoch": rep.classification.as_str(),
        "records": rep.records.iter().map(|r| json!({
            "seq": r.record.record.seq, "kind": r.record.record.body.kind().as_str(), "hash": r.hash.to_hex(), "offset": r.offset,
            "reason": match &r.record.record.body { EpochBody::Withheld { reason, .. } => Some(reason.as_str()), _ => None },
        })).collect::<Vec<_>>(),
        "problem": rep.problem.as_ref().map(|(at, why)| json!({"offset": at, "reason": why})),
        "refusal": rep.classification.refusal().map(|r| r.as_str()),
        "predecessor": d.predecessor().map(|p| json!({"deployment": p.deployment.to_hex(), "final_hash": p.final_hash.to_hex()})),
    })
}

pub fn run(ctx: &Ctx, prefix: &str) -> CmdResult {
    let d = open(ctx, prefix)?;
    let rep = d.report();
    ctx.out(status_json(&d), || {
        let mut s = format!(
            "deployment {}  ({})\nepoch      {}\n",
            d.id,
            escape(&d.manifest.label),
            rep.classification.as_str()
        );
        for r in &rep.records {
            let rec = &r.record.record;
            s.push_str(&format!(
                "  #{} {:<9} {}",
                rec.seq,
                rec.body.kind().as_str(),
                r.hash
            ));
            if let EpochBody::Withheld { reason, detail } = &rec.body {
                s.push_str(&format!("  {reason}: {}", escape(detail)));
            }
            s.push('\n');
        }
        if let Some((at, why)) = &rep.problem {
            s.push_str(&format!("problem at offset {at}: {why}\n"));
        }
        if let Some(p) = d.predecessor() {
            s.push_str(&format!(
                "predecessor {} (final {})\n",
                p.deployment, p.final_hash
            ));
        }
        s.trim_end().to_owned()
    });
    Ok(epoch_outcome(&d))
}

/// docs/EXIT-CODES.md: a log that verifies (enrolled or used, whatever its phase) is 0; one
/// that does not (torn, corrupt, forged, foreign, empty) is 2 with its reason on stderr.
fn epoch_outcome(d: &Deployment) -> Outcome {
    match integrity_refusal(d) {
        None => Outcome::Success,
        Some(r) => {
            warn(&format!("repoch: refused: {r}"));
            Outcome::Refused
        }
    }
}

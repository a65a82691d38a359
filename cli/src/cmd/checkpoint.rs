//! `repoch checkpoint`: the epoch log's head as a signed note.

use repoch_protocol::Outcome;
use serde_json::json;

use super::common::{integrity_refusal, open, require_root, Ctx};
use super::CmdResult;
use crate::exit::{Failure, Why};

/// `repoch checkpoint`: the log's head as a signed note (docs/AUDITOR.md, "Checkpoints").
pub fn run(ctx: &Ctx, prefix: &str) -> CmdResult {
    use repoch_protocol::checkpoint::{Checkpoint, KEY_NAME};
    require_root("repoch checkpoint")?;
    let d = open(ctx, prefix)?;
    if let Some(r) = integrity_refusal(&d) {
        return Err(Failure::refused(r));
    }
    let key = repoch_issuer::keys::read_secret(&ctx.layout.issuer_key())
        .map_err(|e| Failure::Usage(Why::error(e)))?;
    let c = Checkpoint::of_log(d.report())
        .ok_or_else(|| Failure::Internal("a verified log without a genesis".into()))?;
    let note = c.sign(KEY_NAME, &key);
    ctx.out(
        json!({"deployment": d.id.to_hex(), "origin": c.origin, "size": c.size,
               "head": c.head.to_hex(), "key_name": KEY_NAME, "note": note}),
        || note.trim_end().to_owned(),
    );
    Ok(Outcome::Success)
}

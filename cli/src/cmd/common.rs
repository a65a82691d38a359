//! What every `repoch` command shares: its context, the fallible writers, and the checks
//! and renderings more than one command uses.

use std::path::Path;

use repoch_issuer::store::{self, Deployment};
use repoch_issuer::{Layout, Refusal};
use repoch_protocol::Reason;
use serde_json::json;

use crate::exit::Failure;

#[derive(Debug)]
pub struct Ctx {
    pub layout: Layout,
    pub root: Option<std::path::PathBuf>,
    pub json: bool,
}

impl Ctx {
    pub fn new(root: Option<&Path>, json: bool) -> Ctx {
        Ctx {
            layout: Layout::new(root),
            root: root.map(Path::to_path_buf),
            json,
        }
    }
    /// Prints a JSON value (with --json) or the human text, through [`say`].
    pub fn out(&self, v: serde_json::Value, human: impl FnOnce() -> String) {
        if self.json {
            say(&v.to_string());
        } else {
            say(&human());
        }
    }
}

pub use crate::out::{say, warn};

pub fn require_root(what: &str) -> Result<(), Failure> {
    if !rustix::process::geteuid().is_root() {
        return Err(Failure::refused(Refusal::new(
            Reason::AdminDenied,
            what,
            "uid 0",
            format!("uid {}", rustix::process::geteuid().as_raw()),
        )));
    }
    Ok(())
}

pub use repoch_sys::time::now;

/// Opens a deployment named by id or unique prefix.
pub fn open(ctx: &Ctx, prefix: &str) -> Result<Deployment, Failure> {
    let id = store::resolve(&ctx.layout, prefix)?;
    let issuer = store::issuer_public(&ctx.layout)?;
    Ok(Deployment::open(&ctx.layout, &issuer, id)?)
}

/// The refusal of a deployment whose log does not verify; `None` for a verified log.
pub fn integrity_refusal(d: &Deployment) -> Option<Refusal> {
    let rep = d.report();
    match rep.classification.refusal() {
        None | Some(Reason::EpochConsumed) => None,
        Some(reason) => Some(Refusal::new(
            reason,
            d.id.to_hex(),
            "a verified epoch log",
            rep.problem.as_ref().map_or_else(
                || rep.classification.as_str().to_owned(),
                |(at, why)| format!("{} at offset {at}: {why}", rep.classification.as_str()),
            ),
        )),
    }
}

pub fn parse_sha256(s: &str) -> Result<repoch_protocol::Hash, Failure> {
    repoch_protocol::Hash::from_hex(s.trim())
        .ok_or_else(|| Failure::Usage(format!("{s:?} is not a sha256 (64 hex digits)").into()))
}

pub fn fact_json(f: &repoch_protocol::Fact) -> serde_json::Value {
    json!({"kind": f.kind, "subject": f.subject, "expected": f.expected, "observed": f.observed, "holds": f.holds(), "reason": f.reason.map(|r| r.as_str())})
}

pub fn fact_line(f: &repoch_protocol::Fact) -> String {
    match f.reason {
        None => format!("  ok    {:<16} {}  ({})", f.kind, f.subject, f.observed),
        Some(r) => format!(
            "  FAIL  {:<16} {}  {r}: expected {}, observed {}",
            f.kind, f.subject, f.expected, f.observed
        ),
    }
}

//! `repoch discover`: the old root's authorities found on the live system, printed as a
//! draft manifest (or `--json`). Writes nothing.

use repoch_issuer::discover::{self, DiscoverError, Seed};
use repoch_issuer::Refusal;
use repoch_protocol::{Outcome, Reason};
use serde_json::json;

use super::common::{require_root, warn, Ctx};
use super::CmdResult;
use crate::exit::Failure;

/// The seeds as given on the command line: pids, cgroups, units; and the engines to ask
/// (`ENGINE=unix:///PATH`, each engine's default otherwise).
#[derive(Debug)]
pub struct Seeds {
    pub pids: Vec<u32>,
    pub cgroups: Vec<String>,
    pub units: Vec<String>,
    pub engines: Vec<String>,
}

/// The engines asked: each `ENGINE=unix:///PATH` given, and the default socket of each
/// engine not given (`containment.engines`' defaults).
fn engines(given: &[String]) -> Result<Vec<(String, String)>, Failure> {
    use repoch_issuer::enroll::ENGINE_DEFAULTS;
    let mut out: Vec<(String, String)> = Vec::new();
    for g in given {
        let parsed = g.split_once('=').and_then(|(e, url)| {
            let known = ENGINE_DEFAULTS.iter().any(|(d, _)| *d == e);
            let path = url.strip_prefix("unix://").filter(|p| p.starts_with('/'))?;
            known.then(|| (e.to_owned(), path.to_owned()))
        });
        match parsed {
            Some(p) if !out.iter().any(|(e, _)| *e == p.0) => out.push(p),
            _ => {
                return Err(Failure::Usage(
                    format!(
                        "--engine {}: expected ENGINE=unix:///PATH, ENGINE one of docker, \
                         podman, containerd, each once",
                        repoch_protocol::text::escape(g)
                    )
                    .into(),
                ))
            }
        }
    }
    for (e, url) in ENGINE_DEFAULTS {
        if !out.iter().any(|(g, _)| g == e) {
            out.push((
                (*e).to_owned(),
                url.trim_start_matches("unix://").to_owned(),
            ));
        }
    }
    Ok(out)
}

pub fn run(ctx: &Ctx, seeds: Seeds) -> CmdResult {
    require_root("discover")?;
    let engines = engines(&seeds.engines)?;
    let seeds: Vec<Seed> = seeds
        .pids
        .into_iter()
        .map(Seed::Pid)
        .chain(seeds.cgroups.into_iter().map(Seed::Cgroup))
        .chain(seeds.units.into_iter().map(Seed::Unit))
        .collect();
    let cmd = repoch_sys::systemd::systemctl_command();
    let systemctl = repoch_sys::systemd::booted(&cmd).then_some(cmd.as_slice());
    let d = discover::discover(&seeds, systemctl, &engines).map_err(failure)?;
    let draft = discover::draft(&d);
    ctx.out(json!({"found": d, "draft": draft}), || {
        draft.trim_end().to_owned()
    });
    let unknown = d.unknown.len() + d.unknown_starters.len();
    if unknown > 0 && !ctx.json {
        warn(&format!(
            "repoch: {unknown} findings are unknown (listed at the end of the draft): resolve each before enrolling"
        ));
    }
    Ok(Outcome::Success)
}

/// A seed that names nothing is the operator's input (exit 64); a host that could not be
/// read is `observe-failed` (exit 2).
fn failure(e: DiscoverError) -> Failure {
    match e {
        DiscoverError::Host(e) => Failure::refused(Refusal::new(
            Reason::ObserveFailed,
            "repoch discover",
            "the host's /proc, cgroups and systemd readable",
            e.to_string(),
        )),
        other => Failure::Usage(other.to_string().into()),
    }
}

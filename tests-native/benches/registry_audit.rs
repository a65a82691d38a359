//! `repoch audit --registry` over many fleet deployments (docs/BENCHMARKS.md, "The fleet
//! registry"): a three-member etcd cluster of the bench's own on loopback (mutual TLS)
//! holding, per fleet deployment, what enrollment and a recovery write (its fleet record,
//! one host record, one signed claim), at 1,000, 10,000 and 100,000 fleet deployments
//! (`REPOCH_BENCH_FLEETS`); the audit (no logs: every key read, paged, and listed) timed
//! from spawn to exit, its peak RSS from the kernel's accounting of the reaped process
//! (GNU time's `%M`: package `time`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use repoch_protocol::fleet::{FleetClaim, FleetHost, FleetId, FleetPin, FleetRecord};
use repoch_protocol::{Canonical, DeploymentId, Hash, PublicKey};
use repoch_tests_native::bench::{self, ms, Samples};
use repoch_tests_native::*;

/// Writers filling the registry at once (each its own client): etcd batches their
/// proposals, one writer alone waits for each commit.
const WRITERS: usize = 16;
/// Keys each fleet deployment holds: its fleet record, a host record, a claim.
const KEYS_PER_FLEET: u64 = 3;

/// The three keys of fleet deployment `i` under `prefix`, as enrollment and a recovery
/// write them.
fn fleet_keys(prefix: &str, i: u64, cluster: u64) -> [(String, Vec<u8>); 3] {
    let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
    let (fleet, host) = (format!("f{i:06}"), format!("h{i:06}"));
    let pin = FleetPin {
        id: FleetId([(i % 251) as u8; 16]),
        cluster,
        members: vec![1, 2, 3],
        floor: 0,
    };
    let record = FleetRecord {
        fleet: fleet.clone(),
        prefix: prefix.to_owned(),
        pin,
        host: host.clone(),
        established: 0,
        key: PublicKey([0; 32]),
        signature: [0; 64],
    }
    .signed(&key);
    let deployment = DeploymentId([(i % 253) as u8; 16]);
    let h = FleetHost {
        fleet: fleet.clone(),
        host: host.clone(),
        deployment,
        manifest: Hash([1; 32]),
        label: "bench".into(),
        issuer_key: PublicKey::from(&key.verifying_key()),
    };
    let claim = FleetClaim {
        fleet: fleet.clone(),
        fleet_id: record.pin.id,
        host: host.clone(),
        deployment,
        intent: Hash([2; 32]),
        evidence: Hash([3; 32]),
        nonce: [4; 32],
        floor: 0,
        signature: [0; 64],
    }
    .signed(&key);
    [
        (format!("{prefix}/fleets/{fleet}"), record.to_bytes()),
        (format!("{prefix}/hosts/{fleet}/{host}"), h.to_bytes()),
        (format!("{prefix}/epochs/{fleet}"), claim.to_bytes()),
    ]
}

/// Fleet deployments `from..to` written by [`WRITERS`] clients at once.
fn fill(etcd: &Etcd, prefix: &str, from: u64, to: u64, cluster: u64) {
    std::thread::scope(|s| {
        for w in 0..WRITERS as u64 {
            s.spawn(move || {
                let mut c = repoch_registry::Client::connect(&etcd.spec(), Duration::from_secs(10))
                    .unwrap();
                for i in (from..to).filter(|i| i % WRITERS as u64 == w) {
                    for (k, v) in fleet_keys(prefix, i, cluster) {
                        c.create(k.as_bytes(), &v).unwrap();
                    }
                }
            });
        }
    });
}

/// `repoch ARGS` run to its exit under GNU time (package `time`): how long it took, from
/// spawn to exit, and its peak resident set in KiB, as the kernel accounted the reaped
/// process alone (`%M`).
fn timed(
    repoch: &std::path::Path,
    args: &[&std::ffi::OsStr],
    out: &std::path::Path,
) -> (Duration, u64) {
    let t = Instant::now();
    let status = Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o"])
        .arg(out)
        .arg(repoch)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .output()
        .expect("/usr/bin/time (package time)");
    let took = t.elapsed();
    assert!(
        status.status.success(),
        "repoch audit --registry: {:?}: {}",
        status.status,
        String::from_utf8_lossy(&status.stdout)
    );
    let kib = std::fs::read_to_string(out).unwrap();
    (took, kib.trim().parse().unwrap())
}

fn main() {
    if !bench::under_cargo_bench("registry_audit") {
        return;
    }
    require_root!();
    let sizes: Vec<u64> = std::env::var("REPOCH_BENCH_FLEETS")
        .map(|v| v.split(',').map(|n| n.trim().parse().unwrap()).collect())
        .unwrap_or_else(|_| match bench::quick() {
            true => vec![100, 1_000],
            false => vec![1_000, 10_000, 100_000],
        });
    let runs = bench::iterations(3, 1);
    let s = Sandbox::new();
    let etcd = Etcd::start(&s.path("etcd"));
    let prefix = "/bench";
    let cluster = etcd.cluster_id(0);
    let table = s.path("registry.toml");
    std::fs::write(
        &table,
        etcd.registry_toml_as("f000000", "h000000", prefix, None),
    )
    .unwrap();
    let repoch = bin("repoch");
    let issuer = s.path("issuer.pub");
    let public = ed25519_dalek::SigningKey::from_bytes(&[7; 32]).verifying_key();
    std::fs::write(&issuer, format!("{}\n", hex::encode(public.to_bytes()))).unwrap();
    let mut md = String::from("#### `repoch audit --registry` over many fleet deployments\n\n");
    md.push_str(&bench::machine(&s.root));
    md.push_str(&format!(
        " etcd: three members on loopback, mutual TLS. Each fleet deployment holds {KEYS_PER_FLEET} \
         keys (its fleet record, one host record, one signed claim), written by {WRITERS} clients \
         at once. The audit is given no log: it reads every key, paged, and lists each fleet \
         deployment. {runs} run(s) per size; peak RSS by GNU time (`%M`).\n\n"
    ));
    md.push_str(
        "| fleet deployments | keys | fill s | audit median ms | keys/s | peak RSS MiB |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    let mut have = 0;
    for &n in &sizes {
        let t = Instant::now();
        fill(&etcd, prefix, have, n, cluster);
        let filled = t.elapsed();
        have = n;
        let mut times = Samples::new();
        let mut rss = 0;
        for _ in 0..runs {
            let args = ["--json", "audit", "--issuer-key"].map(std::ffi::OsStr::new);
            let at = [issuer.as_os_str(), "--registry".as_ref(), table.as_os_str()];
            let args = [&args[..], &at[..]].concat();
            let (took, peak) = timed(&repoch, &args, &s.path("time.txt"));
            times.push(took);
            rss = rss.max(peak);
        }
        let keys = n * KEYS_PER_FLEET;
        md.push_str(&format!(
            "| {n} | {keys} | {:.1} | {} | {:.0} | {:.1} |\n",
            filled.as_secs_f64(),
            ms(times.median()),
            keys as f64 / times.median().as_secs_f64(),
            rss as f64 / 1024.0
        ));
    }
    bench::emit("registry_audit", &md);
}

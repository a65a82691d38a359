//! Audit throughput (docs/BENCHMARKS.md, "Audit throughput"): records verified per second by
//! the real `repoch audit` (strict, and `--batch`), against raw `verify_strict` and the
//! batch path in this process, over the same generated logs, in the same run.
//!
//!     cargo build --release --workspace && cargo bench -p repoch-tests-native --bench audit
//!
//! `REPOCH_BIN_DIR` names the directory holding `repoch` (default: the one the bench was
//! built into, `target/release` under `cargo bench`); `REPOCH_BENCH_AUDIT_LOGS` the number
//! of deployments' logs (default 100000; 2000 under `REPOCH_BENCH_QUICK=1`), written by
//! `repoch_tests_native::audit_logs` (also `repoch-test-helper audit-logs DIR N`) into a
//! temporary directory, or read from `REPOCH_BENCH_AUDIT_DIR` if it already holds them;
//! `REPOCH_BENCH_RUNS` how many times each row is timed (default 3; 1 under QUICK): the
//! median is reported. `repoch audit` reads at most `AUDIT_LOGS_MAX` (1024) logs a run, so
//! it is run once per 1024 logs, each run a process of its own (its start is part of the
//! time).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use repoch_protocol::cbor::Canonical as _;
use repoch_protocol::epoch::{batch_proven, verify_log, verify_log_proven, SignedEpochRecord};
use repoch_protocol::sign::{proven_by_batch, Context, BATCH_SIGNATURES_MAX};
use repoch_protocol::PublicKey;
use repoch_tests_native::{audit_logs, bench};

/// Logs per `repoch audit` run (its bound, `AUDIT_LOGS_MAX`).
const LOGS_PER_RUN: usize = 1024;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `f` `runs` times; the median time.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut t: Vec<Duration> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    t[t.len() / 2]
}

fn frames(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut off = 0usize;
    std::iter::from_fn(move || {
        let len = u32::from_be_bytes(bytes.get(off..off + 4)?.try_into().ok()?) as usize;
        let p = bytes.get(off + 4..off + 4 + len)?;
        off += 4 + len;
        Some(p)
    })
}

fn main() {
    if !bench::under_cargo_bench("audit") {
        return;
    }
    let repoch = repoch_tests_native::bin("repoch");
    let n: u64 = env_or(
        "REPOCH_BENCH_AUDIT_LOGS",
        if bench::quick() { 2_000 } else { 100_000 },
    );
    let runs: usize = env_or("REPOCH_BENCH_RUNS", bench::iterations(3, 1)).max(1);
    let tmp;
    let dir = match std::env::var_os("REPOCH_BENCH_AUDIT_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            tmp = tempfile::tempdir().unwrap();
            tmp.path().join("logs")
        }
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect()
        })
        .unwrap_or_default();
    let mut generated = String::from("reused");
    if paths.len() as u64 != n {
        let s = Instant::now();
        paths = audit_logs::write(&dir, n).unwrap();
        generated = format!("generated in {:.1?}", s.elapsed());
    }
    paths.sort();
    let pubkey = dir.join("issuer.pub");
    let records = n as f64 * audit_logs::RECORDS_PER_LOG as f64;
    let issuer = PublicKey::from(&audit_logs::issuer().verifying_key());
    let logs: Vec<Vec<u8>> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();

    // `jobs`: `--jobs N`, or None for the default (one thread per CPU).
    let audit = |batch: bool, jobs: Option<&str>| {
        for chunk in paths.chunks(LOGS_PER_RUN) {
            let mut c = Command::new(&repoch);
            c.args(["--json", "audit", "--issuer-key"]).arg(&pubkey);
            if batch {
                c.arg("--batch");
            }
            if let Some(j) = jobs {
                c.args(["--jobs", j]);
            }
            let o = c
                .args(chunk)
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output()
                .unwrap();
            assert!(o.status.success(), "repoch audit failed: {:?}", o.status);
        }
    };
    // The signed messages and signatures, decoded once, for the raw rows.
    let vk = issuer.verifying_key().unwrap();
    let items: Vec<(Vec<u8>, [u8; 64])> = logs
        .iter()
        .flat_map(|b| frames(b))
        .map(|p| {
            let r = SignedEpochRecord::from_bytes(p).unwrap();
            (r.record.to_bytes(), r.signature)
        })
        .collect();
    let message = |m: &[u8]| {
        let mut full = Context::EpochRecord.as_str().as_bytes().to_vec();
        full.push(0);
        full.extend_from_slice(m);
        full
    };
    let full: Vec<(Vec<u8>, ed25519_dalek::Signature)> = items
        .iter()
        .map(|(m, s)| (message(m), ed25519_dalek::Signature::from_bytes(s)))
        .collect();
    let rows: Vec<(&str, Duration)> = vec![
        (
            "repoch audit (strict, --jobs 1)",
            median(runs, || audit(false, Some("1"))),
        ),
        (
            "repoch audit --batch --jobs 1",
            median(runs, || audit(true, Some("1"))),
        ),
        (
            "repoch audit (strict, default --jobs: one per CPU)",
            median(runs, || audit(false, None)),
        ),
        (
            "repoch audit --batch (default --jobs)",
            median(runs, || audit(true, None)),
        ),
        (
            "verify_log, strict (in process)",
            median(runs, || {
                for b in &logs {
                    assert!(verify_log(b, &issuer, None).problem.is_none());
                }
            }),
        ),
        (
            "batch_proven + verify_log_proven (in process)",
            median(runs, || {
                for chunk in logs.chunks(LOGS_PER_RUN) {
                    let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
                    let proven = batch_proven(&refs, &issuer);
                    for b in chunk {
                        let r = verify_log_proven(b, &issuer, None, &proven);
                        assert!(r.problem.is_none());
                    }
                }
            }),
        ),
        (
            "verify_strict alone (decoded messages)",
            median(runs, || {
                for (m, s) in &full {
                    vk.verify_strict(m, s).unwrap();
                }
            }),
        ),
        (
            "proven_by_batch alone (strictness checks + verify_batch)",
            median(runs, || {
                let refs: Vec<(&[u8], &[u8; 64])> =
                    items.iter().map(|(m, s)| (m.as_slice(), s)).collect();
                let p = proven_by_batch(&issuer, Context::EpochRecord, &refs);
                assert!(p.iter().all(|x| *x));
            }),
        ),
        (
            "verify_batch alone (no strictness checks: not a verdict)",
            median(runs, || {
                for chunk in full.chunks(BATCH_SIGNATURES_MAX) {
                    let msgs: Vec<&[u8]> = chunk.iter().map(|(m, _)| m.as_slice()).collect();
                    let sigs: Vec<_> = chunk.iter().map(|(_, s)| *s).collect();
                    let keys = vec![vk; chunk.len()];
                    ed25519_dalek::verify_batch(&msgs, &sigs, &keys).unwrap();
                }
            }),
        ),
    ];
    let mut md = String::from("### Audit throughput\n\n");
    md.push_str(&bench::machine(&dir));
    md.push_str(&format!(
        "\n\n{n} logs ({generated}), {records} records, median of {runs} run(s) per row; `repoch audit` runs once per {LOGS_PER_RUN} logs.\n\n| row | s | records/s |\n| --- | ---: | ---: |\n"
    ));
    for (what, t) in rows {
        md.push_str(&format!(
            "| {what} | {:.3} | {:.0} |\n",
            t.as_secs_f64(),
            records / t.as_secs_f64()
        ));
    }
    bench::emit("audit", &md);
}

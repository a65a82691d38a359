//! The benchmarks' small in-house timing helper (docs/BENCHMARKS.md): samples of durations,
//! their median and p99, and the markdown each bench prints. Benchmarks measure and report;
//! they never fail for speed (only a broken correctness check fails them).

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `REPOCH_BENCH_QUICK=1`: tiny iteration counts, for developing the benches.
pub const QUICK_ENV: &str = "REPOCH_BENCH_QUICK";

pub fn quick() -> bool {
    std::env::var(QUICK_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// `full` iterations, or `quick` under `REPOCH_BENCH_QUICK=1`.
pub fn iterations(full: usize, quick_n: usize) -> usize {
    if quick() {
        quick_n
    } else {
        full
    }
}

/// A bench target runs only under `cargo bench` (which passes `--bench`): `cargo test
/// --all-targets` runs bench targets without it, and they then only say so. Returns whether
/// to run.
pub fn under_cargo_bench(name: &str) -> bool {
    if std::env::args().any(|a| a == "--bench") {
        return true;
    }
    println!("{name}: a benchmark; run it with `cargo bench` (docs/BENCHMARKS.md). Skipped.");
    false
}

/// Durations of one measured thing.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    v: Vec<Duration>,
}

impl Samples {
    pub fn new() -> Samples {
        Samples::default()
    }
    pub fn push(&mut self, d: Duration) {
        self.v.push(d);
    }
    /// Runs `f` and records how long it took; returns its value.
    pub fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let r = f();
        self.v.push(t.elapsed());
        r
    }
    pub fn len(&self) -> usize {
        self.v.len()
    }
    pub fn is_empty(&self) -> bool {
        self.v.is_empty()
    }
    /// The sample pushed last (zero when none).
    pub fn last(&self) -> Duration {
        self.v.last().copied().unwrap_or_default()
    }
    fn sorted(&self) -> Vec<Duration> {
        let mut s = self.v.clone();
        s.sort();
        s
    }
    /// The value at quantile `q` (nearest rank); zero for no samples.
    pub fn quantile(&self, q: f64) -> Duration {
        let s = self.sorted();
        if s.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
        s[rank - 1]
    }
    pub fn median(&self) -> Duration {
        self.quantile(0.5)
    }
    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }
    pub fn max(&self) -> Duration {
        self.v.iter().copied().max().unwrap_or_default()
    }
    /// `| median | p99 |` cells in milliseconds.
    pub fn cells(&self) -> String {
        format!("{} | {}", ms(self.median()), ms(self.p99()))
    }
}

/// Milliseconds with three decimals.
pub fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

/// `a / b`, two decimals ("n/a" for a zero divisor).
pub fn ratio(a: Duration, b: Duration) -> String {
    if b.is_zero() {
        "n/a".into()
    } else {
        format!("{:.2}", a.as_secs_f64() / b.as_secs_f64())
    }
}

/// The workspace's root (the benches write their SVG under its `docs/`).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Prints a bench's markdown section and keeps a copy in `target/bench/NAME.md`.
pub fn emit(name: &str, markdown: &str) {
    println!("\n{markdown}");
    let dir = workspace_root().join("target/bench");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join(format!("{name}.md")), markdown);
    }
}

fn first_line(cmd: &str, args: &[&str]) -> String {
    std::process::Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_owned()
        })
        .unwrap_or_default()
}

/// One markdown line naming the machine, the binaries and the file system measured on.
pub fn machine(fs_dir: &std::path::Path) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("?")
        .trim()
        .to_owned();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .next()
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|k| k.parse::<u64>().ok())
        })
        .map_or("?".into(), |k| format!("{} GiB", k / (1024 * 1024)));
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let fs = first_line("stat", &["-f", "-c", "%T", &fs_dir.display().to_string()]);
    let kernel = first_line("uname", &["-r"]);
    let commit = first_line(
        "git",
        &[
            "-C",
            &workspace_root().display().to_string(),
            "rev-parse",
            "--short",
            "HEAD",
        ],
    );
    let bins = crate::bin_dir();
    let bins_shown = bins
        .strip_prefix(workspace_root())
        .unwrap_or(&bins)
        .to_path_buf();
    let profile = if bins.ends_with("release") {
        "release"
    } else if bins.ends_with("debug") {
        "DEBUG"
    } else {
        "?"
    };
    format!(
        "Machine: {cpu}, {cores} cores, {mem}, Linux {kernel}; file system of the state root: {fs}; \
         binaries: {} ({profile}); commit {commit}; {}.",
        bins_shown.display(),
        if quick() {
            "QUICK run (REPOCH_BENCH_QUICK=1: tiny iteration counts)"
        } else {
            "full run"
        }
    )
}

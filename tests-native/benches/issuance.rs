//! Issuance latency against its floor (docs/BENCHMARKS.md, "Issuance"): real recoveries of
//! profiles of 1 and 16 objects of each kind, a consumer already waiting, timed from the
//! spawn of `repoch recover` to the grant sent, interleaved with samples of the floor on
//! the same file system.

mod common;

use common::*;
use repoch_tests_native::bench::{self, ratio, Samples};
use repoch_tests_native::*;

fn main() {
    if !bench::under_cargo_bench("issuance") {
        return;
    }
    require_root!();
    let systemd = Systemd::detect();
    let n = bench::iterations(50, 3);
    let mut w = World::new(systemd);
    // One recovery not measured: it warms the caches and gives the appended sizes.
    let warm = w.issue(&Profile::of(1, systemd));
    let sizes = w.appended_sizes(&warm.id);
    let exe = bin("repoch-consume");
    let floor_file = w.s.path("floor.dat");
    let mut floor = Floor::default();
    let mut runs = Vec::new();
    for k in [1, 16] {
        let p = Profile::of(k, systemd);
        let mut ts = Vec::new();
        for _ in 0..n {
            ts.push(w.issue(&p));
            floor.sample(&floor_file, &sizes, &exe);
        }
        runs.push((p, ts));
    }
    let exe_bytes = std::fs::metadata(&exe).map_or(0, |m| m.len());
    let mut md = String::from("### Issuance latency and its floor\n\n");
    md.push_str(&bench::machine(&w.s.root));
    md.push_str(&format!(
        " repochd barriers={}. {}\n\n",
        w.barriers(),
        systemd.describe()
    ));
    md.push_str(&format!(
        "{n} recoveries per profile, each of a new deployment, its consumer already waiting; \
         issuance = spawn of `repoch --json recover` to the grant sent (the first `acknowledge` \
         event as the client reads it); outcome = to the `granted` line (the consumer's \
         acknowledgement included). Each recovery is followed by one floor sample.\n\n"
    ));
    md.push_str("| what | n | median ms | p99 ms |\n| --- | ---: | ---: | ---: |\n");
    for (p, ts) in &runs {
        let mut d = Samples::new();
        let mut o = Samples::new();
        let mut r = Samples::new();
        for t in ts {
            d.push(t.dispatched);
            o.push(t.outcome);
            r.push(t.dispatched.saturating_sub(t.at("start")));
        }
        md.push_str(&format!(
            "| issuance, profile {} | {} | {} |\n",
            p.describe(),
            d.len(),
            d.cells()
        ));
        md.push_str(&format!(
            "| issuance from the request sent (the `start` line), profile {} | {} | {} |\n",
            p.n,
            r.len(),
            r.cells()
        ));
        md.push_str(&format!(
            "| outcome, profile {} | {} | {} |\n",
            p.n,
            o.len(),
            o.cells()
        ));
    }
    let sizes_text = sizes
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    for (what, s) in [
        (
            "**floor**, the sum of the five below".to_owned(),
            &floor.total,
        ),
        (
            format!("floor: 3 appends + fdatasync ({sizes_text} bytes)"),
            &floor.appends,
        ),
        (
            format!(
                "floor: 3 scans of /proc (exe, cgroup, maps of {} processes)",
                floor.processes
            ),
            &floor.scans,
        ),
        (
            format!("floor: sha256 of the consumer executable ({exe_bytes} bytes)"),
            &floor.sha256,
        ),
        (
            "floor: one walk of every root task's descriptors (a connection held alone)".to_owned(),
            &floor.walk,
        ),
        (
            "floor: process start (`repoch --version`)".to_owned(),
            &floor.start,
        ),
    ] {
        md.push_str(&format!("| {what} | {} | {} |\n", s.len(), s.cells()));
    }
    md.push_str(
        "\nIssuance / floor (target ≤ 1.25):\n\n| profile | median | p99 |\n| --- | ---: | ---: |\n",
    );
    for (p, ts) in &runs {
        let mut d = Samples::new();
        for t in ts {
            d.push(t.dispatched);
        }
        md.push_str(&format!(
            "| {} | {} | {} |\n",
            p.n,
            ratio(d.median(), floor.total.median()),
            ratio(d.p99(), floor.total.p99())
        ));
    }
    for (p, ts) in &runs {
        md.push_str(&format!(
            "\nBy step, profile {} (each row: from the previous event to this one, as the client \
             reads the stream; `X done` is a step's second report):\n\n\
             | event | median ms | p99 ms |\n| --- | ---: | ---: |\n",
            p.n
        ));
        for (l, s) in breakdown(ts) {
            let l = if l == "start" {
                "start (client process start, connect, request sent)".to_owned()
            } else {
                l
            };
            md.push_str(&format!("| {l} | {} |\n", s.cells()));
        }
    }
    bench::emit("issuance", &md);
}

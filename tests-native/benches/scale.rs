//! Scale (docs/BENCHMARKS.md, "Scale"): issuance latency with 100, 1,000 and 10,000
//! sleeping processes on the host and profiles of 1, 16 and 64 objects of each kind (capped
//! at the manifest's limits), with the floor sampled at each host size. Prints a markdown
//! table and writes the plot to docs/bench-scale.svg.

mod common;

use std::time::Duration;

use common::*;
use repoch_tests_native::bench::{self, ms, ratio, Samples};
use repoch_tests_native::*;

const PROFILES: [usize; 3] = [1, 16, 64];

/// One cell: sleepers, processes scanned, profile, issuance samples.
#[derive(Debug)]
struct Cell {
    sleepers: usize,
    processes: usize,
    profile: Profile,
    issuance: Samples,
}

/// A plotted line: its name, colour, dash attribute and points.
type Series<'a> = (String, &'a str, &'a str, Vec<(f64, f64)>);

/// One host size: its sleepers, the processes the last floor scan read, the floor.
#[derive(Debug)]
struct Host {
    sleepers: usize,
    processes: usize,
    floor: Samples,
}

/// The plot: median issuance per profile (and the floor) against the processes on the
/// host, log-scaled, as a few lines of SVG text.
fn svg(cells: &[Cell], floors: &[Host], note: &str) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 420.0, 70.0, 190.0, 40.0, 60.0);
    let pw = w - left - right;
    let ph = h - top - bottom;
    let xs: Vec<f64> = floors.iter().map(|f| f.processes as f64).collect();
    let (x0, x1) = (
        xs.iter().cloned().fold(f64::MAX, f64::min).log10(),
        xs.iter().cloned().fold(0.0, f64::max).log10(),
    );
    let ymax = cells
        .iter()
        .map(|c| c.issuance.median())
        .chain(floors.iter().map(|f| f.floor.median()))
        .max()
        .unwrap_or(Duration::from_millis(1))
        .as_secs_f64()
        * 1e3
        * 1.1;
    // A cell's x: the processes its host size's floor scanned.
    let x_of = |sleepers: usize| {
        floors
            .iter()
            .find(|f| f.sleepers == sleepers)
            .map_or(sleepers as f64, |f| f.processes as f64)
    };
    let px = |p: f64| {
        left + if x1 > x0 {
            (p.log10() - x0) / (x1 - x0) * pw
        } else {
            pw / 2.0
        }
    };
    let py = |v: f64| top + ph - v / ymax * ph;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{left}\" y=\"20\" font-size=\"14\">repoch: median issuance latency vs processes on the host</text>\n\
         <text x=\"{left}\" y=\"{}\" font-size=\"10\" fill=\"#555\">{note}</text>\n\
         <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">processes on the host (log scale)</text>\n\
         <text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">median ms</text>\n",
        h - 8.0,
        top + ph,
        left + pw,
        top + ph,
        top + ph,
        left + pw / 2.0,
        h - 24.0,
        top + ph / 2.0,
        top + ph / 2.0,
    );
    for &x in &xs {
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{x}</text>\n",
            px(x),
            top + ph + 16.0
        ));
    }
    for i in 0..=4 {
        let v = ymax * i as f64 / 4.0;
        s.push_str(&format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{v:.0}</text>\n\
             <line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\n",
            left - 6.0,
            py(v) + 4.0,
            py(v),
            left + pw,
            py(v)
        ));
    }
    let colors = ["#1f77b4", "#d62728", "#2ca02c"];
    let mut series: Vec<Series<'_>> = PROFILES
        .iter()
        .zip(colors)
        .map(|(k, color)| {
            let pts = cells
                .iter()
                .filter(|c| c.profile.n == *k)
                .map(|c| (x_of(c.sleepers), c.issuance.median().as_secs_f64() * 1e3))
                .collect();
            (format!("issuance, profile {k}"), color, "", pts)
        })
        .collect();
    series.push((
        "floor".into(),
        "#777",
        " stroke-dasharray=\"5,4\"",
        floors
            .iter()
            .map(|f| (f.processes as f64, f.floor.median().as_secs_f64() * 1e3))
            .collect(),
    ));
    for (i, (name, color, dash, pts)) in series.iter().enumerate() {
        let points: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        s.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash} points=\"{}\"/>\n",
            points.join(" ")
        ));
        for (x, y) in pts {
            s.push_str(&format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>\n",
                px(*x),
                py(*y)
            ));
        }
        let ly = top + 10.0 + 20.0 * i as f64;
        s.push_str(&format!(
            "<line x1=\"{:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{color}\" stroke-width=\"2\"{dash}/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\">{name}</text>\n",
            left + pw + 12.0,
            left + pw + 36.0,
            left + pw + 42.0,
            ly + 4.0
        ));
    }
    s.push_str("</svg>\n");
    s
}

fn main() {
    if !bench::under_cargo_bench("scale") {
        return;
    }
    require_root!();
    let systemd = Systemd::detect();
    // REPOCH_BENCH_HOSTS=100,1000 overrides the host sizes (sleepers added).
    let hosts: Vec<usize> = match std::env::var("REPOCH_BENCH_HOSTS") {
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .map(|x| {
                x.trim()
                    .parse()
                    .expect("REPOCH_BENCH_HOSTS: numbers, comma-separated")
            })
            .collect(),
        _ if bench::quick() => vec![100, 1000],
        _ => vec![100, 1000, 10_000],
    };
    let hosts = &hosts[..];
    let n = bench::iterations(20, 2);
    let mut w = World::new(systemd);
    let warm = w.issue(&Profile::of(1, systemd));
    let sizes = w.appended_sizes(&warm.id);
    let exe = bin("repoch-consume");
    let floor_file = w.s.path("floor.dat");
    let mut cells = Vec::new();
    let mut floors = Vec::new();
    for &sleepers in hosts {
        let sl = Sleepers::new(sleepers, &w.s.tag);
        let mut floor = Floor::default();
        for k in PROFILES {
            let p = Profile::of(k, systemd);
            let mut s = Samples::new();
            for _ in 0..n {
                s.push(w.issue(&p).dispatched);
                floor.sample(&floor_file, &sizes, &exe);
            }
            cells.push(Cell {
                sleepers,
                processes: floor.processes,
                profile: p,
                issuance: s,
            });
        }
        floors.push(Host {
            sleepers,
            processes: floor.processes,
            floor: floor.total,
        });
        drop(sl);
    }
    let mut md = String::from("### Scale\n\n");
    md.push_str(&bench::machine(&w.s.root));
    md.push_str(&format!(
        " repochd barriers={}. {}\n\n",
        w.barriers(),
        systemd.describe()
    ));
    md.push_str(&format!(
        "Issuance (spawn of `repoch recover` to the grant sent), {n} recoveries per cell, with N \
         sleeping processes (`sleep`, in their own cgroup) added to the host; the floor sampled \
         after each recovery. Profiles are capped at the manifest's limits: {}; {}; {}.\n\n",
        Profile::of(1, systemd).describe(),
        Profile::of(16, systemd).describe(),
        Profile::of(64, systemd).describe()
    ));
    md.push_str("| sleepers | processes scanned | profile | median ms | p99 ms | floor median ms | issuance/floor (median) |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for c in &cells {
        let f = &floors
            .iter()
            .find(|f| f.sleepers == c.sleepers)
            .expect("a floor per host size")
            .floor;
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            c.sleepers,
            c.processes,
            c.profile.n,
            c.issuance.cells(),
            ms(f.median()),
            ratio(c.issuance.median(), f.median())
        ));
    }
    // Linearity: the added cost per added process between consecutive host sizes.
    md.push_str("\nAdded median issuance per added process (µs), between consecutive host sizes (at most linear: these do not grow):\n\n| profile | ");
    let pairs: Vec<(usize, usize)> = hosts.windows(2).map(|p| (p[0], p[1])).collect();
    md.push_str(
        &pairs
            .iter()
            .map(|(a, b)| format!("{a} → {b}"))
            .collect::<Vec<_>>()
            .join(" | "),
    );
    md.push_str(" |\n| ---: |");
    md.push_str(&" ---: |".repeat(pairs.len()));
    md.push('\n');
    for k in PROFILES {
        md.push_str(&format!("| {k} |"));
        for (a, b) in &pairs {
            let get = |h: usize| cells.iter().find(|c| c.sleepers == h && c.profile.n == k);
            let (ca, cb) = (get(*a).unwrap(), get(*b).unwrap());
            let dt = cb.issuance.median().as_secs_f64() - ca.issuance.median().as_secs_f64();
            let procs = |h: usize| {
                floors
                    .iter()
                    .find(|f| f.sleepers == h)
                    .map_or(h, |f| f.processes) as f64
            };
            let dp = procs(*b) - procs(*a);
            md.push_str(&format!(" {:.2} |", dt / dp * 1e6));
        }
        md.push('\n');
    }
    let note = format!(
        "{}, {} build, {n} per point; profiles capped at the manifest's limits",
        if bench::quick() {
            "QUICK run"
        } else {
            "full run"
        },
        if bin_dir().ends_with("release") {
            "release"
        } else {
            "DEBUG"
        }
    );
    let svg_path = std::env::var_os("REPOCH_BENCH_SVG").map_or_else(
        || bench::workspace_root().join("docs/bench-scale.svg"),
        std::path::PathBuf::from,
    );
    std::fs::write(&svg_path, svg(&cells, &floors, &note)).unwrap();
    md.push_str(&format!(
        "\nPlot: [bench-scale.svg](bench-scale.svg) (written to {}).\n",
        svg_path
            .strip_prefix(bench::workspace_root())
            .unwrap_or(&svg_path)
            .display()
    ));
    bench::emit("scale", &md);
}

//! The observation's cost (docs/BENCHMARKS.md, "Observation"): `repoch observe` (every
//! fact of a deployment with one enrolled executable, nothing written) on a host with
//! 10,000 of root's sleeping processes added, for the binaries in `REPOCH_BIN_DIR` and,
//! when `REPOCH_BEFORE_BIN_DIR` names another build of `repoch`, for those too, in turn in
//! the same run: medians, p99 and the ratio of each pair. Beside it, in the same run and at
//! the same host sizes, the issuance of `REPOCH_BIN_DIR` (profile 1, spawn of `repoch
//! recover` to the grant sent) and its ratio to one observation: with the process events
//! an issuance walks `/proc` once, so at 10,000 processes it costs little more than one.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::*;
use repoch_tests_native::bench::{self, ms, ratio, Samples};
use repoch_tests_native::*;

/// One timed `repoch observe` of `id` with the `repoch` binary `exe`; it must hold.
fn observe(s: &Sandbox, exe: &std::path::Path, id: &str, samples: &mut Samples) {
    let mut c = Command::new(exe);
    c.env("REPOCH_ROOT", &s.root).args(["observe", id]);
    let o = samples.time(|| c.output().expect("repoch observe"));
    assert!(
        o.status.success(),
        "{}: {}{}",
        exe.display(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn main() {
    if !bench::under_cargo_bench("observe") {
        return;
    }
    require_root!();
    let s = Sandbox::new();
    let exe = s.srv.join("old-root");
    std::fs::write(&exe, b"#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let id = s.enroll_with(&s.manifest(&format!(
        "[containment]\nexecutables = [\"{}\"]\n",
        exe.display()
    )));
    let after = bin("repoch");
    let before = std::env::var_os("REPOCH_BEFORE_BIN_DIR").map(|d| PathBuf::from(d).join("repoch"));
    let hosts: Vec<usize> = if bench::quick() {
        vec![0, 1000]
    } else {
        vec![0, 10_000]
    };
    let n = bench::iterations(20, 3);
    let systemd = Systemd::detect();
    let mut w = World::new(systemd);
    let profile = Profile::of(1, systemd);
    let mut md = format!(
        "### Observation\n\n{}\n\n`repoch observe` of a deployment with one enrolled executable (every fact, nothing written), {n} runs of each binary in turn, with N of root's sleeping processes (`sleep`) added to the host; then {n} issuances of profile {} with this build, at the same host size. After: `{}`; before: {}.\n\n| sleepers | processes | after median ms | after p99 ms | before median ms | before p99 ms | after/before (median) | issuance median ms | issuance/observe (median) |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        bench::machine(&s.root),
        profile.describe(),
        after.display(),
        before
            .as_ref()
            .map_or("not measured (`REPOCH_BEFORE_BIN_DIR` unset)".into(), |b| format!("`{}`", b.display())),
    );
    for sleepers in hosts {
        let _sl = (sleepers > 0).then(|| Sleepers::new(sleepers, &format!("{}-{sleepers}", s.tag)));
        let processes = procfs_count();
        let (mut a, mut b) = (Samples::new(), Samples::new());
        for _ in 0..n {
            observe(&s, &after, &id, &mut a);
            if let Some(before) = &before {
                observe(&s, before, &id, &mut b);
            }
        }
        let (bm, bp, r) = if b.is_empty() {
            ("-".into(), "-".into(), "-".into())
        } else {
            (ms(b.median()), ms(b.p99()), ratio(a.median(), b.median()))
        };
        let mut issued = Samples::new();
        for _ in 0..n {
            issued.push(w.issue(&profile).dispatched);
        }
        md.push_str(&format!(
            "| {sleepers} | {processes} | {} | {} | {bm} | {bp} | {r} | {} | {} |\n",
            ms(a.median()),
            ms(a.p99()),
            ms(issued.median()),
            ratio(issued.median(), a.median())
        ));
    }
    bench::emit("observe", &md);
}

/// The processes on the host now (the pids `/proc` lists).
fn procfs_count() -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .count()
}

//! Contention (docs/BENCHMARKS.md, "Contention"): one recovery waits for its consumer
//! while 64 more `repoch recover` of the same deployment start at once, round after round.
//! Every one of them must be refused busy and write nothing, and the waiting one must then
//! be granted: that is checked (a failure here is a bug, not a slow run). Their latency is
//! reported against 64 bare process starts (`repoch --version`) of the same shape.

mod common;

use std::io::BufRead as _;
use std::process::Stdio;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::*;
use repoch_tests_native::bench::{self, ms, Samples};
use repoch_tests_native::*;

/// Concurrent contenders per round.
const CONTENDERS: usize = 64;

/// Runs `CONTENDERS` copies of `cmd()` at once (released by one barrier); returns each
/// one's spawn-to-exit time and output.
fn round(cmd: impl Fn() -> std::process::Command + Sync) -> Vec<(Duration, Run)> {
    let gate = Arc::new(Barrier::new(CONTENDERS));
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..CONTENDERS)
            .map(|_| {
                let gate = gate.clone();
                let cmd = &cmd;
                sc.spawn(move || {
                    let mut c = cmd();
                    c.stdin(Stdio::null());
                    gate.wait();
                    let t = Instant::now();
                    let o = c.output().expect("spawn");
                    (t.elapsed(), Run::from(o))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn run_one(mut c: std::process::Command) -> Run {
    c.stdin(Stdio::null()).output().expect("spawn").into()
}

fn main() {
    if !bench::under_cargo_bench("contention") {
        return;
    }
    require_root!();
    let rounds = bench::iterations(10, 1);
    let mut w = World::new(Systemd::None);
    let p = Profile::of(1, Systemd::None);
    let id = w.enroll(&p);
    // The recovery that proceeds: it takes the issuer lock and waits for its consumer.
    let mut first = Kill(
        w.s.recover(&id, 600, &[])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = std::io::BufReader::new(first.0.stdout.take().unwrap()).lines();
    let mut text = String::new();
    loop {
        let l = lines
            .next()
            .expect("the first recovery ended before waiting")
            .unwrap();
        text.push_str(&l);
        text.push('\n');
        if l.contains("waiting for the consumer") {
            break;
        }
    }
    let mut busy = Samples::new();
    let mut bare = Samples::new();
    let (mut by_lock, mut by_slots) = (0, 0);
    for _ in 0..rounds {
        for (t, r) in round(|| w.s.recover(&id, 1, &[])) {
            // Correctness, not speed: every contender is refused busy, naming why.
            assert_eq!(
                r.code,
                Outcome::Busy,
                "a contender was not refused busy:\n{}{}",
                r.stdout,
                r.stderr
            );
            assert_eq!(r.reasons(), ["issuer-busy"], "{}", r.stdout);
            if r.outcome()["detail"]
                .as_str()
                .unwrap_or("")
                .contains("admin connections")
            {
                by_slots += 1;
            } else {
                by_lock += 1;
            }
            busy.push(t);
        }
        for (t, r) in round(|| {
            let mut c = std::process::Command::new(bin("repoch"));
            c.arg("--version");
            c
        }) {
            assert_eq!(r.code, Outcome::Success);
            bare.push(t);
        }
    }
    // One at a time too: the refusal's own cost, without 64 processes sharing the cores.
    let mut busy1 = Samples::new();
    let mut bare1 = Samples::new();
    for _ in 0..bench::iterations(200, 8) {
        let t = Instant::now();
        let r = run_one(w.s.recover(&id, 1, &[]));
        busy1.push(t.elapsed());
        assert_eq!(r.code, Outcome::Busy, "{}{}", r.stdout, r.stderr);
        assert_eq!(r.reasons(), ["issuer-busy"], "{}", r.stdout);
        let mut c = std::process::Command::new(bin("repoch"));
        c.arg("--version");
        let t = Instant::now();
        assert_eq!(run_one(c).code, Outcome::Success);
        bare1.push(t.elapsed());
    }
    // Nothing was written by any contender; now the consumer comes and the first proceeds.
    let before = w.s.status(&id).json()["records"].as_array().unwrap().len();
    assert_eq!(before, 1, "a contender wrote to the epoch log");
    let mut consumer = w.consumer(&id);
    for l in lines {
        let l = l.unwrap();
        text.push_str(&l);
        text.push('\n');
    }
    let st = wait_bounded(&mut first.0, "the first recovery");
    assert!(
        st.success() && text.contains("\"outcome\":\"granted\""),
        "the waiting recovery was not granted:\n{text}"
    );
    assert!(wait_bounded(&mut consumer.0, "repoch-consume").success());
    let kinds: Vec<String> = w.s.status(&id).json()["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds, ["genesis", "intent", "consume", "receipt"]);

    let mut md = String::from("### Contention\n\n");
    md.push_str(&bench::machine(&w.s.root));
    md.push_str(&format!(
        " repochd barriers={}.\n\n{rounds} round(s) of {CONTENDERS} `repoch recover` of one \
         deployment started at once (one barrier) while a first recovery holds its issuer \
         lock and waits for its consumer; each timed from its spawn to its exit. Checked: all \
         {} were refused busy (exit 4, `issuer-busy`), {by_lock} by the held issuer lock and \
         {by_slots} by the full admin connection slots (`limits.admin_connections`, default \
         8); none wrote a record; the first was then granted (log: genesis, intent, consume, \
         receipt). The same rounds of {CONTENDERS} bare `repoch --version` starts are the \
         baseline. Then {} contenders one at a time, each followed by one bare start.\n\n",
        w.barriers(),
        busy.len(),
        busy1.len()
    ));
    md.push_str("| what | n | median ms | p99 ms |\n| --- | ---: | ---: | ---: |\n");
    md.push_str(&format!(
        "| busy refusal (`repoch recover`, {CONTENDERS} at once) | {} | {} |\n",
        busy.len(),
        busy.cells()
    ));
    md.push_str(&format!(
        "| bare process start (`repoch --version`, {CONTENDERS} at once) | {} | {} |\n",
        bare.len(),
        bare.cells()
    ));
    md.push_str(&format!(
        "| busy refusal, one at a time | {} | {} |\n",
        busy1.len(),
        busy1.cells()
    ));
    md.push_str(&format!(
        "| bare process start, one at a time | {} | {} |\n",
        bare1.len(),
        bare1.cells()
    ));
    md.push_str(&format!(
        "\nOne at a time, busy refusal p99 above the bare start's p99: {} ms (target ≤ 5 ms); \
         median: {} ms.\n",
        ms(busy1.p99().saturating_sub(bare1.p99())),
        ms(busy1.median().saturating_sub(bare1.median()))
    ));
    let over = busy.p99().saturating_sub(bare.p99());
    md.push_str(&format!(
        "{CONTENDERS} at once, busy refusal p99 above the bare start's p99: {} ms; median: {} ms.\n",
        ms(over),
        ms(busy.median().saturating_sub(bare.median()))
    ));
    bench::emit("contention", &md);
}

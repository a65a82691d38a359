//! An idle repochd sleeps: no timer, no sweep, no poll wakes it while nothing happens
//! (docs/ARCHITECTURE.md, "Entry points"). Every thread's context switches are read from
//! `/proc/PID/task/*/status` before and after an idle window.

use repoch_tests_native::*;

/// How long the daemon is watched doing nothing.
const IDLE_WINDOW_MS: u64 = 3_500;

/// Voluntary and involuntary context switches of every thread of `pid`, by thread id.
fn switches(pid: u32) -> std::collections::BTreeMap<u32, u64> {
    let mut out = std::collections::BTreeMap::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let t = t.unwrap();
        let tid: u32 = t.file_name().to_str().unwrap().parse().unwrap();
        let Ok(status) = std::fs::read_to_string(t.path().join("status")) else {
            continue;
        };
        let n = status
            .lines()
            .filter(|l| l.contains("ctxt_switches:"))
            .map(|l| l.split_whitespace().last().unwrap().parse::<u64>().unwrap())
            .sum();
        out.insert(tid, n);
    }
    out
}

#[test]
#[ignore = "needs root"]
fn an_idle_repochd_is_never_woken() {
    require_root!();
    let s = Sandbox::new();
    s.enroll();
    let d = s.daemon();
    let pid = d.child.id();
    // Let start-up finish (threads that parked after warming the admission cache).
    std::thread::sleep(std::time::Duration::from_millis(1_000));
    let before = switches(pid);
    std::thread::sleep(std::time::Duration::from_millis(IDLE_WINDOW_MS));
    let after = switches(pid);
    let woken: Vec<String> = after
        .iter()
        .filter(|(tid, n)| before.get(tid) != Some(n))
        .map(|(tid, n)| {
            format!(
                "thread {tid}: {} -> {n}",
                before.get(tid).copied().unwrap_or(0)
            )
        })
        .collect();
    assert!(
        woken.is_empty(),
        "repochd was woken while idle for {IDLE_WINDOW_MS} ms: {woken:?}"
    );
}

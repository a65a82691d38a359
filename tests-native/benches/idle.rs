//! The idle daemon (docs/BENCHMARKS.md, "Idle daemon"): repochd's resident memory once
//! ready, its context switches over idle seconds (no polling: the goal is 0), and the time
//! from the first connection on a socket-activated admin socket to its READY=1.

mod common;

use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use repoch_tests_native::bench::{self, Samples};
use repoch_tests_native::*;

/// Longest wait for READY=1 or for the activator's sockets.
const READY_WAIT_SECONDS_MAX: u64 = 30;

/// A `/proc/PID/status` field's number (kB for memory, a count for switches).
fn status_field(pid: u32, task: Option<&str>, field: &str) -> u64 {
    let p = match task {
        Some(t) => format!("/proc/{pid}/task/{t}/status"),
        None => format!("/proc/{pid}/status"),
    };
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(&format!("{field}:")))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Every thread's voluntary and involuntary context switches, summed, and the threads.
fn switches(pid: u32) -> (u64, u64, Vec<String>) {
    let mut tids: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    tids.sort();
    let (mut v, mut nv) = (0, 0);
    for t in &tids {
        v += status_field(pid, Some(t), "voluntary_ctxt_switches");
        nv += status_field(pid, Some(t), "nonvoluntary_ctxt_switches");
    }
    (v, nv, tids)
}

/// One socket-activated start: `systemd-socket-activate` listens on both sockets and execs
/// repochd on the first connection; returns the time from that connect to READY=1 and
/// repochd's VmRSS (kB) then.
fn activation(dir: &Path) -> (Duration, u64) {
    let s = Sandbox::new();
    s.enroll();
    let run_dir = s.root.join("run/repoch");
    std::fs::create_dir_all(&run_dir).unwrap();
    let notify_path = s.path("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(READY_WAIT_SECONDS_MAX)))
        .unwrap();
    let log = std::fs::File::create(dir.join(format!("activation-{}.log", s.tag))).unwrap();
    let act = Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(run_dir.join("admin.sock"))
        .arg("-l")
        .arg(run_dir.join("grant.sock"))
        .arg("--fdname=admin:grant")
        .arg("-E")
        .arg(format!("REPOCH_ROOT={}", s.root.display()))
        .arg("-E")
        .arg(format!("NOTIFY_SOCKET={}", notify_path.display()))
        .arg(bin("repochd"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("systemd-socket-activate");
    let pid = act.id();
    let act = Kill(act);
    let start = Instant::now();
    while !(run_dir.join("admin.sock").exists() && run_dir.join("grant.sock").exists()) {
        assert!(
            start.elapsed().as_secs() < READY_WAIT_SECONDS_MAX,
            "systemd-socket-activate did not listen"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The activator's sockets exist before it listens: connect until one is accepted.
    let t0;
    let _conn = loop {
        let t = Instant::now();
        match UnixStream::connect(run_dir.join("admin.sock")) {
            Ok(c) => {
                t0 = t;
                break c;
            }
            Err(_) => {
                assert!(
                    start.elapsed().as_secs() < READY_WAIT_SECONDS_MAX,
                    "the admin socket never accepted"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    };
    let mut buf = [0u8; 512];
    loop {
        let n = notify.recv(&mut buf).expect("no READY=1 from repochd");
        if String::from_utf8_lossy(&buf[..n])
            .lines()
            .any(|l| l == "READY=1")
        {
            break;
        }
    }
    let ready = t0.elapsed();
    let rss = status_field(pid, None, "VmRSS");
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::TERM,
    );
    let mut act = act;
    let _ = wait_bounded(&mut act.0, "repochd (socket-activated)");
    (ready, rss)
}

fn main() {
    if !bench::under_cargo_bench("idle") {
        return;
    }
    require_root!();
    let idle = Duration::from_secs(if bench::quick() { 2 } else { 10 });
    // A started repochd with one deployment enrolled and nothing connected.
    let s = Sandbox::new();
    s.enroll();
    let d = s.daemon();
    let barriers = std::fs::read_to_string(&d.log)
        .unwrap_or_default()
        .contains("barriers=true");
    let pid = d.child.id();
    let rss = status_field(pid, None, "VmRSS");
    let hwm = status_field(pid, None, "VmHWM");
    let (v0, nv0, t0) = switches(pid);
    std::thread::sleep(idle);
    let (v1, nv1, t1) = switches(pid);
    let rss_after = status_field(pid, None, "VmRSS");
    drop(d);

    let n = bench::iterations(20, 3);
    let mut ready = Samples::new();
    let mut act_rss = Vec::new();
    for _ in 0..n {
        let (t, r) = activation(s.dir.path());
        ready.push(t);
        act_rss.push(r);
    }
    act_rss.sort();

    let mut md = String::from("### Idle daemon\n\n");
    md.push_str(&bench::machine(&s.root));
    md.push_str(&format!(
        " repochd barriers={barriers}.\n\nA repochd started on a state root with one deployment \
         enrolled and nothing connected (`/proc/PID/status`; switches summed over its threads, \
         {} thread(s) before, {} after{}).\n\n",
        t0.len(),
        t1.len(),
        if t0 == t1 {
            ", the same ones"
        } else {
            ": threads came or went, so the sum may miss some"
        }
    ));
    md.push_str("| what | value |\n| --- | ---: |\n");
    md.push_str(&format!(
        "| VmRSS once ready (target ≤ 8 MiB) | {:.2} MiB |\n",
        rss as f64 / 1024.0
    ));
    md.push_str(&format!(
        "| VmHWM once ready | {:.2} MiB |\n",
        hwm as f64 / 1024.0
    ));
    md.push_str(&format!(
        "| VmRSS after {} idle seconds | {:.2} MiB |\n",
        idle.as_secs(),
        rss_after as f64 / 1024.0
    ));
    md.push_str(&format!(
        "| voluntary context switches in {} idle seconds (target 0) | {} |\n",
        idle.as_secs(),
        v1.saturating_sub(v0)
    ));
    md.push_str(&format!(
        "| involuntary context switches in {} idle seconds (target 0) | {} |\n",
        idle.as_secs(),
        nv1.saturating_sub(nv0)
    ));
    md.push_str(&format!(
        "| wakeups per idle second (both kinds) | {:.2} |\n",
        (v1 + nv1).saturating_sub(v0 + nv0) as f64 / idle.as_secs_f64()
    ));
    md.push_str(&format!(
        "\nSocket activation, {n} starts: `systemd-socket-activate` listens on both sockets \
         (as the shipped .socket units do) and execs repochd on the first connection; timed \
         from that `connect` on the admin socket to READY=1 on a NOTIFY_SOCKET the bench \
         binds.\n\n| what | n | median ms | p99 ms |\n| --- | ---: | ---: | ---: |\n\
         | first connect → READY=1 | {} | {} |\n\nVmRSS at READY=1: median {:.2} MiB, max {:.2} MiB.\n",
        ready.len(),
        ready.cells(),
        act_rss[act_rss.len() / 2] as f64 / 1024.0,
        *act_rss.last().unwrap() as f64 / 1024.0
    ));
    bench::emit("idle", &md);
}

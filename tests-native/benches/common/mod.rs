//! What the benches share (docs/BENCHMARKS.md): a world of one sandbox and one repochd with
//! deployments enrolled on demand, each recovered once by a real `repoch recover` while a
//! real `repoch-consume` waits; the streamed events timed as the client prints them; and
//! the floor (what an issuance cannot avoid doing) measured on the same file system.
#![allow(dead_code)] // each bench target uses part of it

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use repoch_protocol::limits::{
    CGROUPS_MAX, EXECUTABLES_MAX, FENCES_MAX, LISTENERS_MAX, STORES_MAX, UNITS_MAX,
};
use repoch_tests_native::bench::Samples;
use repoch_tests_native::*;

/// Longest a benchmark's recovery waits for its consumer (it is already waiting).
pub const CONSUMER_WAIT_SECONDS: u64 = 30;
/// Longest wait for a child process's first lines or exit in a bench.
pub const CHILD_WAIT_SECONDS_MAX: u64 = 120;

/// A child killed (and reaped) on drop.
#[derive(Debug)]
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `REPOCH_BENCH_UNITS=nspawn`: where no systemd runs the host, boot one in a container
/// (`systemd-nspawn`, as the unit tests do) and have repochd ask it through
/// `REPOCH_SYSTEMCTL=nsenter -t LEADER -a systemctl`.
pub const UNITS_ENV: &str = "REPOCH_BENCH_UNITS";

/// Whether a systemd runs this host (PID 1), so units can be enrolled and masked.
pub fn host_systemd() -> bool {
    Command::new("systemctl")
        .arg("is-system-running")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .is_some_and(|s| s.starts_with("running") || s.starts_with("degraded"))
}

/// Where the enrolled units live, if anywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Systemd {
    /// No systemd reachable: units are skipped.
    None,
    /// The host's (PID 1).
    Host,
    /// A container's, booted for the bench (`REPOCH_BENCH_UNITS=nspawn`).
    Container,
}

impl Systemd {
    pub fn detect() -> Systemd {
        if host_systemd() {
            Systemd::Host
        } else if std::env::var(UNITS_ENV).is_ok_and(|v| v == "nspawn") {
            Systemd::Container
        } else {
            Systemd::None
        }
    }
    pub fn units(self) -> bool {
        self != Systemd::None
    }
    /// A sentence for the report.
    pub fn describe(self) -> String {
        match self {
            Systemd::Host => "Units enrolled (masked on this host's systemd).".into(),
            Systemd::Container => format!(
                "Units enrolled, masked in a systemd container that repochd asks through \
                 `nsenter -t LEADER -a systemctl` ({UNITS_ENV}=nspawn: no systemd runs this host)."
            ),
            Systemd::None => format!(
                "Units skipped: no systemd runs this host (PID 1), so none can be enrolled \
                 ({UNITS_ENV}=nspawn boots one in a container)."
            ),
        }
    }
}

/// How many objects of each kind a profile enrolls: `n` of each, capped at the manifest's
/// limit for that kind (docs/OPERATOR.md, "The manifest, field by field").
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    pub n: usize,
    pub fences: usize,
    pub stores: usize,
    pub cgroups: usize,
    pub listeners: usize,
    pub executables: usize,
    pub units: usize,
}

impl Profile {
    pub fn of(n: usize, systemd: Systemd) -> Profile {
        let units = systemd.units();
        Profile {
            n,
            fences: n.min(FENCES_MAX),
            stores: n.min(STORES_MAX),
            cgroups: n.min(CGROUPS_MAX),
            listeners: n.min(LISTENERS_MAX),
            executables: n.min(EXECUTABLES_MAX),
            units: if units { n.min(UNITS_MAX) } else { 0 },
        }
    }
    /// "16 (8 fences, 16 stores, 8 cgroups, 16 listeners, 8 executables, 0 units)".
    pub fn describe(&self) -> String {
        format!(
            "{} ({} fences, {} stores, {} cgroups, {} listeners, {} executables, {} units)",
            self.n,
            self.fences,
            self.stores,
            self.cgroups,
            self.listeners,
            self.executables,
            self.units
        )
    }
}

/// Masked runtime units, unmasked on drop.
#[derive(Debug, Default)]
pub struct Units(pub Vec<String>);

impl Drop for Units {
    fn drop(&mut self) {
        // A container's masks go with the container.
        if !self.0.is_empty() && host_systemd() {
            let _ = Command::new("systemctl")
                .args(["unmask", "--runtime"])
                .args(&self.0)
                .output();
        }
    }
}

/// One sandbox, one repochd, the objects of the largest profile, and a counter of
/// deployments (each epoch is issued once, so every measured recovery enrolls a new one).
#[derive(Debug)]
pub struct World {
    // Dropped in order: the daemon, then the cgroups, the units, the container, the sandbox.
    pub d: Daemon,
    pub cg: Cgroup,
    pub units: Units,
    pub container: Option<Container>,
    pub s: Sandbox,
    pub systemd: Systemd,
    enrolled: usize,
    /// A `[registry]` table each manifest gets, `{FLEET}` replaced by a fleet name of the
    /// deployment's own (benches/registry.rs); `None`: no registry.
    pub registry: Option<String>,
}

impl World {
    pub fn new(systemd: Systemd) -> World {
        let s = Sandbox::new();
        let cg = Cgroup::new(&format!("repoch-bench-{}", s.tag));
        let mut units = Units::default();
        for i in 0..FENCES_MAX.max(STORES_MAX) {
            let f = s.srv.join(format!("fence-{i}"));
            std::fs::write(&f, b"").unwrap();
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::fs::write(s.srv.join(format!("store-{i}")), b"a store").unwrap();
        }
        for i in 0..CGROUPS_MAX {
            let _ = cg.child(&format!("c{i}"));
        }
        // The old root's executables: files no process runs.
        for i in 0..EXECUTABLES_MAX {
            let e = s.srv.join(format!("old-root-{i}"));
            std::fs::write(&e, b"#!/bin/sh\nexit 0\n").unwrap();
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&e, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let names: Vec<String> = (0..UNITS_MAX)
            .map(|i| format!("repoch-bench-{}-{i}.service", s.tag.to_lowercase()))
            .collect();
        let mut container = None;
        let mut cmd = s.cmd("repochd");
        match systemd {
            Systemd::None => {}
            Systemd::Host => {
                let o = Command::new("systemctl")
                    .args(["mask", "--runtime"])
                    .args(&names)
                    .output()
                    .expect("systemctl");
                assert!(o.status.success(), "systemctl mask: {o:?}");
                units.0 = names;
            }
            Systemd::Container => {
                let c = Container::boot(&s.tag);
                c.sh(&format!("systemctl mask --runtime {}", names.join(" ")));
                cmd.env("REPOCH_SYSTEMCTL", c.systemctl());
                container = Some(c);
                units.0 = names;
            }
        }
        let log = s.path("repochd.log");
        let child = cmd
            .stderr(std::fs::File::create(&log).unwrap())
            .stdout(Stdio::null())
            .spawn()
            .expect("repochd");
        let d = Daemon { child, log };
        d.wait_log("repochd ready");
        World {
            d,
            cg,
            units,
            container,
            s,
            systemd,
            enrolled: 0,
            registry: None,
        }
    }

    /// Whether this world's repochd was built with barriers (a test build).
    pub fn barriers(&self) -> bool {
        std::fs::read_to_string(&self.d.log)
            .unwrap_or_default()
            .contains("barriers=true")
    }

    pub fn manifest(&self, p: &Profile, idx: usize) -> String {
        let srv = self.s.srv.display().to_string();
        let list = |v: Vec<String>| {
            v.iter()
                .map(|x| format!("\"{x}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let fences = list((0..p.fences).map(|i| format!("{srv}/fence-{i}")).collect());
        let stores = list((0..p.stores).map(|i| format!("{srv}/store-{i}")).collect());
        let cgroups = list(
            (0..p.cgroups)
                .map(|i| format!("{}/c{i}", self.cg.rel))
                .collect(),
        );
        // Unix paths (nothing there), TCP and UDP ports (nothing bound), in turn. Each
        // deployment has unix paths of its own: a granted one handed its held sockets to its
        // consumer, and the socket files stay behind it (stale, as an operator would find
        // them), where the next enrollment's observation would rightly see them.
        let listeners = list(
            (0..p.listeners)
                .map(|i| match i % 3 {
                    0 => format!("unix:{srv}/listener-{idx}-{i}.sock"),
                    1 => format!("tcp:*:{}", 47000 + i),
                    _ => format!("udp:*:{}", 47000 + i),
                })
                .collect(),
        );
        let units = list(self.units.0.iter().take(p.units).cloned().collect());
        let executables = list(
            (0..p.executables)
                .map(|i| format!("{srv}/old-root-{i}"))
                .collect(),
        );
        let d = self.s.dir.path().display();
        format!(
            "label = \"bench-{tag}-{idx}\"\nfences = [{fences}]\nstores = [{stores}]\nready = \"{srv}/READY\"\n\n\
             [containment]\ncgroups = [{cgroups}]\nlisteners = [{listeners}]\nunits = [{units}]\n\
             executables = [{executables}]\n\n\
             [journal]\npath = \"{srv}/journal-{idx}\"\nproducer_key_file = \"{d}/producer.key.pub\"\n\n\
             [consumer]\nuid = 0\ngid = 0\nexecutable = \"{exe}\"\nkey_file = \"{d}/consumer.key.pub\"\n",
            tag = self.s.tag,
            exe = bin("repoch-consume").display(),
        )
    }

    /// Enrolls a new deployment of profile `p`; returns its id.
    pub fn enroll(&mut self, p: &Profile) -> String {
        self.enrolled += 1;
        let mut m = self.manifest(p, self.enrolled);
        if let Some(r) = &self.registry {
            m.push_str(&r.replace("{FLEET}", &format!("fleet-{}", self.enrolled)));
        }
        self.s.enroll_with(&m)
    }

    /// Starts `repoch-consume receive` for `id` and waits until repochd holds it waiting.
    pub fn consumer(&self, id: &str) -> Kill {
        let out = format!("grant-{id}.cbor");
        let c = self
            .s
            .consumer(id, "consumer.key", &out, &[])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("repoch-consume");
        let pid = c.id();
        let c = Kill(c);
        self.d.wait_log(&format!("pid={pid} uid="));
        c
    }

    /// One measured recovery of a new deployment of profile `p`, its consumer already
    /// waiting. Fails loudly unless it is granted.
    pub fn issue(&mut self, p: &Profile) -> Timeline {
        let id = self.enroll(p);
        let mut consumer = self.consumer(&id);
        let t = recover_timed(&self.s, &id);
        let status = wait_bounded(&mut consumer.0, "repoch-consume");
        assert!(status.success(), "the consumer failed: {status}");
        t
    }

    /// The sizes of the frames the first granted deployment's log holds after its genesis
    /// (intent, consume, receipt).
    pub fn appended_sizes(&self, id: &str) -> Vec<usize> {
        frames(&std::fs::read(self.s.log(id)).unwrap())
            .into_iter()
            .skip(1)
            .collect()
    }
}

/// The frame sizes (length prefix included) of an epoch log.
pub fn frames(log: &[u8]) -> Vec<usize> {
    let mut v = Vec::new();
    let mut rest = log;
    while rest.len() >= 4 {
        let n = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let f = (4 + n).min(rest.len());
        v.push(f);
        rest = &rest[f..];
    }
    v
}

/// Waits for `c` to exit, at most [`CHILD_WAIT_SECONDS_MAX`].
pub fn wait_bounded(c: &mut Child, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return s;
        }
        assert!(
            start.elapsed().as_secs() < CHILD_WAIT_SECONDS_MAX,
            "{what} did not exit within {CHILD_WAIT_SECONDS_MAX}s"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One recovery as the client saw it: each streamed event (facts left out) with the time
/// since `repoch recover` was spawned.
#[derive(Debug, Clone)]
pub struct Timeline {
    pub id: String,
    pub events: Vec<(String, Duration)>,
    /// Spawn to the grant sent (the first `acknowledge` event: the dispatch is done).
    pub dispatched: Duration,
    /// Spawn to the outcome line (the consumer's acknowledgement included).
    pub outcome: Duration,
}

impl Timeline {
    /// When the event labelled `l` was read (zero if it never came).
    pub fn at(&self, l: &str) -> Duration {
        self.events
            .iter()
            .find(|(x, _)| x == l)
            .map_or(Duration::ZERO, |(_, t)| *t)
    }
}

/// The label of a streamed event: its step (or `record KIND`), and `STEP done` the second
/// time a step is reported (connect, final-1, final-2 and acknowledge each report twice:
/// started, then done).
fn label(j: &serde_json::Value, seen: &mut Vec<String>) -> Option<String> {
    let base = match j["event"].as_str()? {
        "fact" => return None,
        "progress" => j["step"].as_str()?.to_owned(),
        "record" => format!("record {}", j["kind"].as_str()?),
        other => other.to_owned(),
    };
    let n = seen.iter().filter(|s| **s == base).count();
    seen.push(base.clone());
    Some(match n {
        0 => base,
        1 => format!("{base} done"),
        n => format!("{base} #{}", n + 1),
    })
}

/// Runs `repoch --json recover ID` and times its streamed lines as they arrive. Fails
/// loudly unless it is granted.
pub fn recover_timed(s: &Sandbox, id: &str) -> Timeline {
    let t0 = Instant::now();
    let mut c = s
        .recover(id, CONSUMER_WAIT_SECONDS, &[])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("repoch recover");
    let out = c.stdout.take().unwrap();
    let mut events = Vec::new();
    let mut seen = Vec::new();
    let mut text = String::new();
    for line in std::io::BufReader::new(out).lines() {
        let t = t0.elapsed();
        let line = line.unwrap();
        text.push_str(&line);
        text.push('\n');
        if let Ok(j) = serde_json::from_str::<serde_json::Value>(&line) {
            if let Some(l) = label(&j, &mut seen) {
                events.push((l, t));
            }
        }
    }
    let status = wait_bounded(&mut c, "repoch recover");
    let mut err = String::new();
    use std::io::Read as _;
    let _ = c.stderr.take().unwrap().read_to_string(&mut err);
    assert!(
        status.success() && text.contains("\"outcome\":\"granted\""),
        "the recovery was not granted ({status}):\n{text}{err}"
    );
    let at = |l: &str| {
        events
            .iter()
            .find(|(x, _)| x == l)
            .map(|(_, t)| *t)
            .unwrap_or_else(|| panic!("no {l} event:\n{text}"))
    };
    Timeline {
        id: id.to_owned(),
        dispatched: at("acknowledge"),
        outcome: at("outcome"),
        events,
    }
}

/// Per step, the time from the previous event to this one, over many timelines, in the
/// order of the first.
pub fn breakdown(ts: &[Timeline]) -> Vec<(String, Samples)> {
    let mut rows: Vec<(String, Samples)> = Vec::new();
    for t in ts {
        let mut prev = Duration::ZERO;
        for (l, at) in &t.events {
            let d = at.saturating_sub(prev);
            prev = *at;
            match rows.iter_mut().find(|(x, _)| x == l) {
                Some((_, s)) => s.push(d),
                None => rows.push((l.clone(), {
                    let mut s = Samples::new();
                    s.push(d);
                    s
                })),
            }
        }
    }
    rows
}

/// What an issuance cannot avoid, measured in the same run on the same file system: its
/// three appends (each fdatasync'ed), three scans of /proc (every process's exe, cgroup and
/// mappings, as each observation does), one sha256 of the consumer executable, and the
/// start of the client process (`repoch --version`).
#[derive(Debug, Default)]
pub struct Floor {
    pub appends: Samples,
    pub scans: Samples,
    pub sha256: Samples,
    /// One walk of every root task's descriptors for a socket (`repoch_sys::peer`): what
    /// proving the consumer's connection its own costs, once per issuance.
    pub walk: Samples,
    pub start: Samples,
    pub total: Samples,
    pub processes: usize,
}

impl Floor {
    /// One floor sample: appends of `sizes` to `file` (in the state root's file system).
    pub fn sample(&mut self, file: &Path, sizes: &[usize], exe: &Path) {
        use sha2::Digest as _;
        use std::io::Write as _;
        let t0 = Instant::now();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
            .unwrap();
        for &n in sizes {
            f.write_all(&vec![0xa5; n]).unwrap();
            f.sync_data().unwrap();
        }
        drop(f);
        let t1 = Instant::now();
        for _ in 0..3 {
            self.processes = scan_proc();
        }
        let t2 = Instant::now();
        let bytes = std::fs::read(exe).unwrap();
        std::hint::black_box(sha2::Sha256::digest(&bytes));
        let t3 = Instant::now();
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let ino = rustix::fs::fstat(&a).unwrap().st_ino;
        let walked = repoch_sys::peer::socket_holders(ino, &[0]).unwrap();
        assert_eq!(walked.holders, [std::process::id()]);
        let t3w = Instant::now();
        let st = Command::new(bin("repoch"))
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
        let t4 = Instant::now();
        self.appends.push(t1 - t0);
        self.scans.push(t2 - t1);
        self.sha256.push(t3 - t2);
        self.walk.push(t3w - t3);
        self.start.push(t4 - t3w);
        self.total.push(t4 - t0);
    }
}

/// Reads every process's `exe` link, `cgroup` and `maps`; returns how many were read.
pub fn scan_proc() -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let dir = PathBuf::from("/proc").join(pid);
        let _ = std::hint::black_box(std::fs::read_link(dir.join("exe")));
        let _ = std::hint::black_box(std::fs::read(dir.join("cgroup")));
        let _ = std::hint::black_box(std::fs::read(dir.join("maps")));
        n += 1;
    }
    n
}

/// Sleeping processes (`sleep`, started by one shell) in their own cgroup, all killed on
/// drop.
#[derive(Debug)]
pub struct Sleepers {
    pub n: usize,
    shell: Kill,
    cg: Cgroup,
}

/// Processes the host may need beside the sleepers.
pub const SLEEPERS_HEADROOM: usize = 4096;

/// Longest wait for sleepers to start or die.
pub const SLEEPERS_WAIT_SECONDS_MAX: u64 = 300;

impl Sleepers {
    pub fn new(n: usize, tag: &str) -> Sleepers {
        let cg = Cgroup::new(&format!("repoch-bench-sleepers-{tag}"));
        // Room for them and for what runs already: pid_max, threads-max, RLIMIT_NPROC.
        let sysctl = |name: &str| -> usize {
            std::fs::read_to_string(format!("/proc/sys/kernel/{name}"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(usize::MAX)
        };
        let nproc = rustix::process::getrlimit(rustix::process::Resource::Nproc)
            .current
            .map_or(usize::MAX, |v| v as usize);
        for (what, limit) in [
            ("kernel.pid_max", sysctl("pid_max")),
            ("kernel.threads-max", sysctl("threads-max")),
            ("RLIMIT_NPROC", nproc),
        ] {
            assert!(
                n.saturating_add(SLEEPERS_HEADROOM) < limit,
                "{n} sleepers do not fit under {what} = {limit}"
            );
        }
        let mut sh = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "read go; i=0; while [ $i -lt {n} ]; do sleep 86400 & i=$((i+1)); done; echo ready; wait"
            ))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("sh");
        let mut stdin = sh.stdin.take().unwrap();
        let stdout = sh.stdout.take().unwrap();
        cg.add(sh.id());
        let s = Sleepers {
            n,
            shell: Kill(sh),
            cg,
        };
        use std::io::Write as _;
        stdin.write_all(b"go\n").unwrap();
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the sleepers did not start");
        let procs = std::fs::read_to_string(s.cg.path().join("cgroup.procs")).unwrap();
        assert!(
            procs.lines().count() > n,
            "only {} processes in the sleepers' cgroup",
            procs.lines().count()
        );
        s
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        let _ = std::fs::write(self.cg.path().join("cgroup.kill"), "1");
        let start = Instant::now();
        while start.elapsed().as_secs() < SLEEPERS_WAIT_SECONDS_MAX {
            let ev =
                std::fs::read_to_string(self.cg.path().join("cgroup.events")).unwrap_or_default();
            if ev.contains("populated 0") || ev.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = &self.shell;
    }
}

//! The observers (`issuer/src/observe/`) against real objects: files, symlinks, FIFOs,
//! cgroup v2 directories with a real process in them, processes running an enrolled
//! executable, bound TCP, UDP and unix sockets. Nothing observed is scripted: each test
//! makes the object, observes it through [`Observer::observe`] and checks the fact's kind,
//! subject, reason and observed text (docs/ARCHITECTURE.md, "Issuance", step 2; "Testing").
//! These are the tests that catch the observers' mutants with the issuer's own tests
//! (docs/MUTANTS.md).
//!
//! The tests that need root (a cgroup, a root-owned consumer executable, every process's
//! maps, every network namespace) are ignored unless run with `--include-ignored` as root,
//! as CI does (`.ci/run`).

use std::fs::File;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use repoch_issuer::observe::{Fences, Observation, Observe, Observer};
use repoch_issuer::Layout;
use repoch_protocol::grant::GrantFence;
use repoch_protocol::journal::{next_frame, JournalBody};
use repoch_protocol::manifest::{
    Consumer, Containment, Inet, InventoryEntry, Lineage, Listener, Manifest, Predecessor, Role,
    Target,
};
use repoch_protocol::{DeploymentId, Fact, Hash, Identity, PublicKey, Reason};
use repoch_sys::fs::fstat_identity;

fn assert_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test needs root (run with --include-ignored as root)"
    );
}

/// A unique tag for this test's objects: process id, test name and a counter.
fn tag(name: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "repoch-obstest-{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

fn s(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_owned()
}

/// A manifest whose objects all live in `dir` (none made yet: journal, READY and consumer
/// executable are missing) and whose containment is empty.
fn manifest(dir: &Path) -> Manifest {
    Manifest {
        deployment: DeploymentId([7; 16]),
        label: "observe-test".into(),
        enrolled_at: 0,
        issuer_key: PublicKey([1; 32]),
        inventory: vec![],
        target: Target {
            ready_path: s(&dir.join("READY")),
        },
        containment: Containment::default(),
        consumer: Consumer {
            uid: 0,
            gid: 0,
            executable: s(&dir.join("consumer")),
            executable_sha256: None,
            key: PublicKey([2; 32]),
            cgroup: None,
        },
        lineage: Lineage {
            predecessor: None,
            journal_path: s(&dir.join("journal")),
            journal_genesis: Hash::ZERO,
            producer_key: PublicKey([3; 32]),
        },
        registry: None,
    }
}

fn observer(dir: &Path, m: Manifest) -> Observer {
    Observer::new(m, Layout::new(Some(&dir.join("root"))), None)
}

fn observe(dir: &Path, m: Manifest) -> Observation {
    observer(dir, m).observe(&mut Fences::default())
}

/// The one fact of `kind` about `subject`.
fn fact<'a>(o: &'a Observation, kind: &str, subject: &str) -> &'a Fact {
    let mut found = o
        .facts
        .iter()
        .filter(|f| f.kind == kind && f.subject == subject);
    let f = found
        .next()
        .unwrap_or_else(|| panic!("no {kind} fact about {subject}: {:#?}", o.facts));
    assert!(found.next().is_none(), "two {kind} facts about {subject}");
    f
}

fn identity(p: &Path) -> Identity {
    fstat_identity(File::open(p).unwrap()).unwrap()
}

fn store(path: &Path, identity: Identity) -> InventoryEntry {
    InventoryEntry {
        role: Role::Store,
        path: s(path),
        identity,
    }
}

#[test]
fn failed_lists_exactly_the_facts_that_do_not_hold() {
    let d = tempfile::tempdir().unwrap();
    let good = d.path().join("good");
    std::fs::write(&good, b"store").unwrap();
    let gone = d.path().join("gone");
    let mut m = manifest(d.path());
    m.inventory = vec![store(&good, identity(&good)), store(&gone, identity(&good))];
    let o = observe(d.path(), m);
    assert!(fact(&o, "store", &s(&good)).holds());
    assert!(!fact(&o, "store", &s(&gone)).holds());
    let failed: Vec<&Fact> = o.failed().collect();
    let want: Vec<&Fact> = o.facts.iter().filter(|f| !f.holds()).collect();
    assert_eq!(failed, want);
    assert!(failed.iter().any(|f| f.subject == s(&gone)));
    assert!(failed.iter().all(|f| f.subject != s(&good)));
    assert!(
        !o.holds(),
        "a missing store, journal and READY: {:#?}",
        o.facts
    );
}

#[test]
fn a_store_that_is_the_enrolled_inode_holds_another_inode_is_replaced() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("a");
    let b = d.path().join("b");
    std::fs::write(&a, b"a").unwrap();
    std::fs::write(&b, b"b").unwrap();
    let (ia, ib) = (identity(&a), identity(&b));
    let mut m = manifest(d.path());
    m.inventory = vec![store(&a, ia), store(&b, ia)];
    let o = observe(d.path(), m);
    let fa = fact(&o, "store", &s(&a));
    assert!(fa.holds(), "{fa:?}");
    assert_eq!(fa.observed, "the enrolled inode");
    let fb = fact(&o, "store", &s(&b));
    assert_eq!(fb.reason, Some(Reason::StoreReplaced), "{fb:?}");
    assert_eq!(fb.expected, ia.object());
    assert_eq!(fb.observed, ib.object());
}

#[test]
fn a_missing_store_is_missing() {
    let d = tempfile::tempdir().unwrap();
    let gone = d.path().join("gone");
    let mut m = manifest(d.path());
    m.inventory = vec![store(&gone, identity(d.path()))];
    let o = observe(d.path(), m);
    let f = fact(&o, "store", &s(&gone));
    assert_eq!(f.reason, Some(Reason::StoreMissing), "{f:?}");
    assert_eq!(
        (f.expected.as_str(), f.observed.as_str()),
        ("present", "missing")
    );
}

#[test]
fn a_symlink_in_a_stores_place_or_path_is_a_symlink() {
    let d = tempfile::tempdir().unwrap();
    let real = d.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let file = real.join("store");
    std::fs::write(&file, b"store").unwrap();
    let last = d.path().join("last");
    std::os::unix::fs::symlink(&file, &last).unwrap();
    let linked_dir = d.path().join("linked");
    std::os::unix::fs::symlink(&real, &linked_dir).unwrap();
    let inner = linked_dir.join("store");
    let mut m = manifest(d.path());
    m.inventory = vec![
        store(&last, identity(&file)),
        store(&inner, identity(&file)),
    ];
    let o = observe(d.path(), m);
    for p in [&last, &inner] {
        let f = fact(&o, "store", &s(p));
        assert_eq!(f.reason, Some(Reason::StoreReplaced), "{f:?}");
        assert_eq!(
            (f.expected.as_str(), f.observed.as_str()),
            ("no symlink", "a symlink")
        );
    }
}

#[test]
fn a_store_below_a_regular_file_is_unreadable_not_a_symlink() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let below = file.join("store");
    let mut m = manifest(d.path());
    m.inventory = vec![store(&below, identity(&file))];
    let o = observe(d.path(), m);
    let f = fact(&o, "store", &s(&below));
    assert_eq!(f.reason, Some(Reason::ObserveFailed), "{f:?}");
    assert_eq!(f.expected, "readable");
    assert_eq!(
        f.observed,
        std::io::Error::from_raw_os_error(rustix::io::Errno::NOTDIR.raw_os_error()).to_string()
    );
}

/// Longest wait for an observation of a FIFO (a blocked open never returns by itself).
const FIFO_OBSERVE_SECONDS_MAX: u64 = 20;

#[test]
fn a_fifo_in_a_stores_place_does_not_block_the_observer() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let enrolled = identity(d.path());
    let mut m = manifest(d.path());
    m.inventory = vec![store(&fifo, enrolled)];
    let (tx, rx) = std::sync::mpsc::channel();
    let dir = d.path().to_owned();
    let t = std::thread::spawn(move || tx.send(observe(&dir, m)).unwrap());
    let o = match rx.recv_timeout(Duration::from_secs(FIFO_OBSERVE_SECONDS_MAX)) {
        Ok(o) => o,
        Err(_) => {
            // Unblock the observer's open (a reader and a writer now), then fail.
            let _w = rustix::fs::open(
                &fifo,
                rustix::fs::OFlags::RDWR | rustix::fs::OFlags::NONBLOCK,
                rustix::fs::Mode::empty(),
            );
            let _ = t.join();
            panic!("the observer blocked opening a FIFO for {FIFO_OBSERVE_SECONDS_MAX} s");
        }
    };
    t.join().unwrap();
    let f = fact(&o, "store", &s(&fifo));
    assert_eq!(f.reason, Some(Reason::StoreReplaced), "{f:?}");
    assert_eq!(f.expected, enrolled.object());
}

#[test]
#[ignore = "needs root"]
fn the_consumer_exe_baseline_is_its_first_observed_identity_and_digest() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let m = manifest(d.path());
    let exe = PathBuf::from(&m.consumer.executable);
    let content = b"#!/bin/sh\nexit 0\n";
    std::fs::write(&exe, content).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut obs = observer(d.path(), m);
    assert_eq!(obs.consumer_exe_baseline(), None);
    let o = obs.observe(&mut Fences::default());
    let f = fact(&o, "consumer-exe", &s(&exe));
    assert!(f.holds(), "{f:?}");
    let want = Some((identity(&exe), Hash::of(content)));
    assert_eq!(obs.consumer_exe_baseline(), want);
    assert_eq!(Observe::consumer_exe_baseline(&obs), want);
    let o = Observe::observe(&mut obs, &mut Fences::default());
    assert!(fact(&o, "consumer-exe", &s(&exe)).holds());
    assert_eq!(Observe::consumer_exe_baseline(&obs), want);
}

/// Writes `bytes` to `p` with `mode`, owned by `uid`:`gid` (root makes the file, so this
/// needs root for any other owner).
fn file(p: &Path, bytes: &[u8], mode: u32, uid: u32, gid: u32) {
    std::fs::write(p, bytes).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
}

/// Waits until a file changed just now is old enough for its stamp to prove it unchanged later
/// (`repoch_sys::digest::CHANGE_SETTLED_MS`): nothing can set a change time back.
fn settle() {
    std::thread::sleep(Duration::from_millis(
        repoch_sys::digest::CHANGE_SETTLED_MS + 100,
    ));
}

#[test]
#[ignore = "needs root"]
fn a_ready_of_the_bound_is_hashed_a_larger_one_is_not() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let m = manifest(d.path());
    let ready = PathBuf::from(&m.target.ready_path);
    // `READY_BYTES_MAX`, 1 MiB, as a literal: a changed constant fails here.
    let bound = 1024 * 1024;
    let bytes = vec![b'r'; bound];
    file(&ready, &bytes, 0o644, 0, 0);
    let o = observe(d.path(), m.clone());
    let f = fact(&o, "ready", &s(&ready));
    assert!(f.holds(), "{f:?}");
    assert_eq!(f.observed, format!("sha256 {}", Hash::of(&bytes)));
    assert_eq!(o.ready_sha256, Hash::of(&bytes));
    file(&ready, &vec![b'r'; bound + 1], 0o644, 0, 0);
    let o = observe(d.path(), m);
    let f = fact(&o, "ready", &s(&ready));
    assert_eq!(f.reason, Some(Reason::ObserveFailed), "{f:?}");
    assert_eq!(f.observed, format!("larger than {bound} bytes"));
    assert_eq!(o.ready_sha256, Hash::ZERO);
}

#[test]
#[ignore = "needs root"]
fn a_ready_writable_by_others_or_not_root_owned_is_unprotected() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let m = manifest(d.path());
    let ready = PathBuf::from(&m.target.ready_path);
    for (mode, uid, observed) in [
        (0o646, 0, "uid 0 mode 100646"),
        (0o664, 0, "uid 0 mode 100664"),
        (0o644, 1, "uid 1 mode 100644"),
    ] {
        file(&ready, b"ready", mode, uid, 0);
        let o = observe(d.path(), m.clone());
        let f = fact(&o, "ready", &s(&ready));
        assert_eq!(f.reason, Some(Reason::ReadyUnprotected), "{f:?}");
        assert_eq!(f.observed, observed);
        assert_eq!(o.ready_sha256, Hash::ZERO);
    }
}

#[test]
#[ignore = "needs root"]
fn a_consumer_exe_writable_by_others_or_not_root_owned_is_unprotected() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let m = manifest(d.path());
    let exe = PathBuf::from(&m.consumer.executable);
    for (mode, uid, observed) in [
        (0o757, 0, "uid 0 mode 100757"),
        (0o775, 0, "uid 0 mode 100775"),
        (0o755, 1, "uid 1 mode 100755"),
    ] {
        file(&exe, b"#!/bin/sh\n", mode, uid, 0);
        let o = observe(d.path(), m.clone());
        let f = fact(&o, "consumer-exe", &s(&exe));
        assert_eq!(f.reason, Some(Reason::ConsumerExeUnprotected), "{f:?}");
        assert_eq!(f.observed, observed);
    }
}

#[test]
#[ignore = "needs root"]
fn a_consumer_exe_of_several_mebibytes_matching_its_pin_holds_another_pin_does_not() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let mut m = manifest(d.path());
    let exe = PathBuf::from(&m.consumer.executable);
    // 3 MiB: larger than READY's bound (1 MiB); the executable's is 512 MiB.
    let bytes = vec![b'x'; 3 * 1024 * 1024];
    file(&exe, &bytes, 0o755, 0, 0);
    let digest = Hash::of(&bytes);
    m.consumer.executable_sha256 = Some(digest);
    let o = observe(d.path(), m.clone());
    let f = fact(&o, "consumer-exe", &s(&exe));
    assert!(f.holds(), "{f:?}");
    assert_eq!(f.observed, format!("sha256 {digest}"));
    let other = Hash::of(b"another build");
    m.consumer.executable_sha256 = Some(other);
    let o = observe(d.path(), m);
    let f = fact(&o, "consumer-exe", &s(&exe));
    assert_eq!(f.reason, Some(Reason::ConsumerExeMismatch), "{f:?}");
    assert_eq!(
        (f.expected.as_str(), f.observed.as_str()),
        (
            format!("sha256 {other}").as_str(),
            format!("sha256 {digest}").as_str()
        )
    );
}

#[test]
#[ignore = "needs root"]
fn a_consumer_exe_rewritten_in_place_at_its_size_after_a_proof_is_changed() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let m = manifest(d.path());
    let exe = PathBuf::from(&m.consumer.executable);
    file(&exe, b"#!/bin/sh\nexit 0\n", 0o755, 0, 0);
    // Settled: the first observation's stamp proves the digest at the later ones.
    settle();
    let mut obs = observer(d.path(), m);
    let o = obs.observe(&mut Fences::default());
    assert!(fact(&o, "consumer-exe", &s(&exe)).holds());
    let ino = identity(&exe).ino;
    use std::os::unix::fs::FileExt as _;
    let f = std::fs::OpenOptions::new().write(true).open(&exe).unwrap();
    f.write_all_at(b"1", 15).unwrap();
    drop(f);
    assert_eq!(identity(&exe).ino, ino, "the same inode");
    let o = obs.observe(&mut Fences::default());
    let f = fact(&o, "consumer-exe", &s(&exe));
    assert_eq!(f.reason, Some(Reason::ConsumerExeChanged), "{f:?}");
    assert_eq!(
        (f.expected.as_str(), f.observed.as_str()),
        (
            format!("ino {ino} sha256 {}", Hash::of(b"#!/bin/sh\nexit 0\n")).as_str(),
            format!("ino {ino} sha256 {}", Hash::of(b"#!/bin/sh\nexit 1\n")).as_str()
        )
    );
}

#[test]
#[ignore = "needs root"]
fn a_consumer_exe_rechmodded_or_regrouped_with_the_same_bytes_is_changed() {
    assert_root();
    for (mode, gid) in [(0o700, 0), (0o755, 1)] {
        let d = tempfile::tempdir().unwrap();
        let m = manifest(d.path());
        let exe = PathBuf::from(&m.consumer.executable);
        file(&exe, b"#!/bin/sh\n", 0o755, 0, 0);
        let mut obs = observer(d.path(), m);
        let o = obs.observe(&mut Fences::default());
        assert!(fact(&o, "consumer-exe", &s(&exe)).holds());
        file(&exe, b"#!/bin/sh\n", mode, 0, gid);
        let o = obs.observe(&mut Fences::default());
        let f = fact(&o, "consumer-exe", &s(&exe));
        assert_eq!(f.reason, Some(Reason::ConsumerExeChanged), "{f:?}");
        let want = format!(
            "ino {} sha256 {}",
            identity(&exe).ino,
            Hash::of(b"#!/bin/sh\n")
        );
        assert_eq!(
            (f.expected.as_str(), f.observed.as_str()),
            (want.as_str(), want.as_str())
        );
    }
}

/// Whether `inotify` reports an access (a read) through `watch` since the last call.
fn read_since(watch: &rustix::fd::OwnedFd) -> bool {
    use rustix::fs::inotify;
    let mut buf = [std::mem::MaybeUninit::uninit(); 4096];
    let mut r = inotify::Reader::new(watch, &mut buf);
    let mut read = false;
    loop {
        match r.next() {
            Ok(e) => read |= e.events().contains(inotify::ReadFlags::ACCESS),
            Err(rustix::io::Errno::AGAIN) => return read,
            Err(e) => panic!("inotify: {e}"),
        }
    }
}

#[test]
#[ignore = "needs root"]
fn a_consumer_exe_proven_unchanged_by_its_stamp_is_not_read_again() {
    assert_root();
    use rustix::fs::inotify;
    let d = tempfile::tempdir().unwrap();
    let m = manifest(d.path());
    let exe = PathBuf::from(&m.consumer.executable);
    file(&exe, b"#!/bin/sh\nexit 0\n", 0o755, 0, 0);
    settle();
    let watch =
        inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).unwrap();
    inotify::add_watch(&watch, &exe, inotify::WatchFlags::ACCESS).unwrap();
    let mut obs = observer(d.path(), m);
    let o = obs.observe(&mut Fences::default());
    assert!(fact(&o, "consumer-exe", &s(&exe)).holds());
    assert!(read_since(&watch), "the first observation reads it whole");
    for _ in 0..2 {
        let o = obs.observe(&mut Fences::default());
        let f = fact(&o, "consumer-exe", &s(&exe));
        assert!(f.holds(), "{f:?}");
        assert_eq!(
            f.observed,
            format!("sha256 {}", Hash::of(b"#!/bin/sh\nexit 0\n"))
        );
        assert!(!read_since(&watch), "its stamp proves it: not read again");
    }
}

/// A cgroup v2 directory of this test, with any process in it killed and the directory
/// removed on drop.
struct Cgroup {
    path: PathBuf,
    /// Relative to the hierarchy root, with a leading `/`.
    rel: String,
    child: Option<Child>,
}

/// Longest wait for a killed cgroup to empty.
const CGROUP_EMPTY_WAIT_MS_MAX: u64 = 5000;

impl Cgroup {
    fn new(name: &str) -> Cgroup {
        let root = repoch_sys::cgroup::mount_point().expect("cgroup2 mounted");
        let rel = format!("/{}", tag(name));
        let path = root.join(&rel[1..]);
        std::fs::create_dir(&path).expect("mkdir cgroup");
        Cgroup {
            path,
            rel,
            child: None,
        }
    }
    /// Starts a long sleep in the cgroup; returns its pid.
    fn run_sleep(&mut self) -> u32 {
        let child = Command::new("sleep").arg("1000").spawn().expect("sleep");
        let pid = child.id();
        self.child = Some(child);
        std::fs::write(self.path.join("cgroup.procs"), pid.to_string()).expect("move");
        pid
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.path.join("cgroup.kill"), "1");
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
        for _ in 0..CGROUP_EMPTY_WAIT_MS_MAX / 10 {
            let ev = std::fs::read_to_string(self.path.join("cgroup.events")).unwrap_or_default();
            if !ev.contains("populated 1") {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir(&self.path);
    }
}

#[test]
#[ignore = "needs root"]
fn cgroups_absent_and_empty_hold_populated_does_not() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let empty = Cgroup::new("empty");
    let mut full = Cgroup::new("full");
    let pid = full.run_sleep();
    let absent = format!("/{}", tag("absent"));
    let mut m = manifest(d.path());
    m.containment.cgroups = vec![absent.clone(), empty.rel.clone(), full.rel.clone()];
    let o = observe(d.path(), m);
    let f = fact(&o, "cgroup", &absent);
    assert!(f.holds(), "{f:?}");
    assert_eq!(f.observed, "absent");
    let f = fact(&o, "cgroup", &empty.rel);
    assert!(f.holds(), "{f:?}");
    assert_eq!(f.observed, "empty");
    let f = fact(&o, "cgroup", &full.rel);
    assert_eq!(f.reason, Some(Reason::CgroupPopulated), "{f:?}");
    assert!(
        f.observed.starts_with(&format!(
            "at {} populated 1 procs [{pid}] threads [{pid}]",
            full.rel
        )),
        "{f:?}"
    );
}

/// A copy of `sleep` in `dir` under `name` (its own inode, so only what runs it matches).
fn enrolled_exe(dir: &Path, name: &str) -> PathBuf {
    let sleep = std::env::split_paths(&std::env::var_os("PATH").expect("PATH"))
        .map(|p| p.join("sleep"))
        .find(|p| p.is_file())
        .expect("sleep in PATH");
    let exe = dir.join(name);
    // Content of its own (bytes past the program are ignored by the loader): a copy of
    // sleep is the executable by content, and other processes run sleep.
    let mut bytes = std::fs::read(sleep).unwrap();
    bytes.extend_from_slice(format!("\n{}\n", exe.display()).as_bytes());
    std::fs::write(&exe, bytes).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    exe
}

/// A child process, killed on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "needs root"]
fn an_enrolled_executable_that_runs_is_an_escaped_task_one_that_does_not_holds() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let running = enrolled_exe(d.path(), "running");
    let idle = enrolled_exe(d.path(), "idle");
    // spawn returns after the exec: the process runs `running` from here on.
    let p = Running(Command::new(&running).arg("1000").spawn().unwrap());
    let pid = p.0.id();
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
        .expect("a cgroup v2 line");
    let mut m = manifest(d.path());
    m.containment.executables = vec![s(&running), s(&idle)];
    let o = observe(d.path(), m);
    let f = fact(&o, "process", &s(&running));
    assert_eq!(f.reason, Some(Reason::EscapedTask), "{f:?}");
    assert_eq!(f.observed, format!("pid {pid} in {cg}"));
    let f = fact(&o, "process", &s(&idle));
    assert!(f.holds(), "{f:?}");
    assert_eq!(f.observed, "none");
}

/// A port nothing in this namespace is bound to: bound, then released.
fn free_port(udp: bool) -> u16 {
    if udp {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    } else {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }
}

#[test]
#[ignore = "needs root"]
fn bound_tcp_udp_and_unix_listeners_are_present_free_ones_hold() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // IPv6 only, and both families through one IPv6 socket (`[::]` without V6ONLY).
    let tcp6 = std::net::TcpListener::bind("[::1]:0").unwrap();
    let udp6 = std::net::UdpSocket::bind("[::1]:0").unwrap();
    let dual = std::net::TcpListener::bind("[::]:0").unwrap();
    let unix_path = d.path().join("bound.sock");
    let _unix = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
    let bound = [
        Listener::Tcp(Inet::any(tcp.local_addr().unwrap().port())),
        Listener::Udp(Inet::any(udp.local_addr().unwrap().port())),
        Listener::Unix(s(&unix_path)),
        Listener::Tcp(Inet::any(tcp6.local_addr().unwrap().port())),
        Listener::Udp(Inet::any(udp6.local_addr().unwrap().port())),
        Listener::Tcp(Inet::any(dual.local_addr().unwrap().port())),
    ];
    // A TCP socket bound but not listening, and a client connected from a port: neither
    // accepts anything on it.
    let unlistened = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let unlistened_port = unlistened.local_addr().unwrap().port();
    drop(unlistened);
    let bound_only = bound_tcp_socket(unlistened_port);
    let client = std::net::TcpStream::connect(tcp.local_addr().unwrap()).unwrap();
    let client_port = client.local_addr().unwrap().port();
    let free = [
        Listener::Tcp(Inet::any(free_port(false))),
        Listener::Udp(Inet::any(free_port(true))),
    ];
    // Neither accepts anything, but each keeps repochd from holding the port: in use.
    let in_use = [
        Listener::Tcp(Inet::any(unlistened_port)),
        Listener::Tcp(Inet::any(client_port)),
    ];
    let unbound_path = d.path().join("none.sock");
    let mut m = manifest(d.path());
    m.containment.listeners = bound.to_vec();
    m.containment.listeners.extend(free.iter().cloned());
    m.containment.listeners.extend(in_use.iter().cloned());
    m.containment
        .listeners
        .push(Listener::Unix(s(&unbound_path)));
    let o = observe(d.path(), m);
    let me = std::process::id().to_string();
    for l in &bound {
        let f = fact(&o, "listener", &l.to_string());
        assert_eq!(f.reason, Some(Reason::ListenerPresent), "{f:?}");
        assert!(f.observed.contains(&me), "held by us: {f:?}");
    }
    // A unix socket bound in our own network namespace: no namespace named.
    let f = fact(&o, "listener", &bound[2].to_string());
    assert!(f.observed.starts_with("bound: socket "), "{f:?}");
    assert!(
        f.observed.contains(&format!("), held by pid [{me}]")),
        "{f:?}"
    );
    for l in &in_use {
        let f = fact(&o, "listener", &l.to_string());
        assert_eq!(f.reason, Some(Reason::ListenerPresent), "{f:?}");
        assert!(
            f.observed
                .starts_with("in use by a socket that does not listen"),
            "{f:?}"
        );
    }
    // The free ones are taken and held by the observer: nothing else can bind them.
    for l in &free {
        let f = fact(&o, "listener", &l.to_string());
        assert!(f.holds(), "{f:?}");
        assert_eq!(f.observed, "held");
    }
    let f = fact(&o, "listener", &format!("unix:{}", s(&unbound_path)));
    assert!(f.holds(), "{f:?}");
    assert_eq!(f.observed, "held");
    drop((bound_only, client));
}

/// Port 0 names no port (enrollment refuses it): a manifest that holds one anyway is not
/// "nothing bound" (asked about port 0, the kernel lists every socket of the namespace).
#[test]
fn a_listener_on_port_0_is_not_read_as_free() {
    let d = tempfile::tempdir().unwrap();
    let mut m = manifest(d.path());
    m.containment.listeners = vec![Listener::Tcp(Inet::any(0)), Listener::Udp(Inet::any(0))];
    let o = observe(d.path(), m);
    for l in ["tcp:*:0", "udp:*:0"] {
        let f = fact(&o, "listener", l);
        assert_eq!(f.reason, Some(Reason::ObserveFailed), "{f:?}");
        assert!(f.observed.ends_with("port 0 names no port"), "{f:?}");
    }
}

/// A TCP socket bound to 127.0.0.1:`port`, never listening.
fn bound_tcp_socket(port: u16) -> std::os::fd::OwnedFd {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .unwrap();
    rustix::net::bind(
        &fd,
        &std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, port),
    )
    .unwrap();
    fd
}

/// UDP sockets in the flood: past what `/proc/net/udp` can list in 16 MiB (128 bytes a
/// line), the bound the observer once read it with.
const UDP_FLOOD_SOCKETS: usize = 140_000;
/// Sockets one flooding process holds (under the usual `RLIMIT_NOFILE` hard limit, which
/// root without `CAP_SYS_RESOURCE` cannot raise).
const UDP_FLOOD_PER_PROCESS: usize = 15_000;
/// The flood's ports, each shared by many sockets (`SO_REUSEADDR`).
const UDP_FLOOD_PORTS: std::ops::Range<u16> = 40_000..41_000;

/// Not a test on its own: with `REPOCH_FLOOD_SOCKETS=N` and `REPOCH_FLOOD_NETNS` (`new`,
/// or the path of a network namespace to enter) in the environment, this test binary run
/// on this test alone binds N UDP sockets in that namespace on `UDP_FLOOD_PORTS`, prints
/// `flooding`, and holds them until its stdin closes.
#[test]
fn flood_holder() {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let (Ok(n), Ok(netns)) = (
        std::env::var("REPOCH_FLOOD_SOCKETS"),
        std::env::var("REPOCH_FLOOD_NETNS"),
    ) else {
        return;
    };
    let n: usize = n.parse().unwrap();
    if netns == "new" {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
    } else {
        let ns = File::open(&netns).unwrap();
        nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
    }
    let want = n as u64 + 256;
    let nofile = rustix::process::Resource::Nofile;
    let was = rustix::process::getrlimit(nofile);
    rustix::process::setrlimit(
        nofile,
        rustix::process::Rlimit {
            current: Some(want),
            maximum: was.maximum,
        },
    )
    .unwrap();
    let flood: Vec<std::os::fd::OwnedFd> = UDP_FLOOD_PORTS
        .cycle()
        .take(n)
        .map(|p| {
            let fd = rustix::net::socket_with(
                AddressFamily::INET,
                SocketType::DGRAM,
                SocketFlags::CLOEXEC,
                None,
            )
            .unwrap();
            rustix::net::sockopt::set_socket_reuseaddr(&fd, true).unwrap();
            rustix::net::bind(
                &fd,
                &std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, p),
            )
            .unwrap();
            fd
        })
        .collect();
    // The namespace by this thread's path: the harness runs a test in a thread of its
    // own, so `/proc/PID/ns/net` (the main thread's) is not it.
    println!(
        "flooding /proc/{}/task/{}/ns/net",
        std::process::id(),
        rustix::thread::gettid().as_raw_nonzero()
    );
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new()).unwrap();
    drop(flood);
}

/// Flooding processes, all in one network namespace of their own (named by a path that
/// opens it), killed on drop.
struct Flood(Vec<Child>, String);

impl Drop for Flood {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Flood {
    fn start(sockets: usize) -> Flood {
        let mut f = Flood(Vec::new(), String::new());
        for at in (0..sockets).step_by(UDP_FLOOD_PER_PROCESS) {
            let netns = match f.0.first() {
                None => "new".to_string(),
                Some(_) => f.1.clone(),
            };
            let c = Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "flood_holder", "--nocapture", "--test-threads=1"])
                .env(
                    "REPOCH_FLOOD_SOCKETS",
                    UDP_FLOOD_PER_PROCESS.min(sockets - at).to_string(),
                )
                .env("REPOCH_FLOOD_NETNS", netns)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            f.0.push(c);
            // Each in turn: the first makes the namespace the others enter.
            let c = f.0.last_mut().unwrap();
            let mut out = std::io::BufReader::new(c.stdout.as_mut().unwrap());
            let mut said = String::new();
            while !said.contains("flooding ") {
                let n = std::io::BufRead::read_line(&mut out, &mut said).unwrap();
                assert!(n > 0, "a flooding process ended: {said}");
            }
            if f.1.is_empty() {
                let at = said.split("flooding ").nth(1).unwrap();
                f.1 = at.split_whitespace().next().unwrap().to_string();
            }
        }
        f
    }

    /// The flood's network namespace.
    fn netns(&self) -> String {
        self.1.clone()
    }
}

/// Any local user may bind UDP sockets by the hundred thousand (a few hundred bytes of
/// kernel memory each, spread over processes). Reading the whole socket table, the
/// observer once had to cut it (hiding a bound port past the cut) or refuse it (every
/// recovery denied while the flood lasts). Asked about the enrolled ports only, it neither
/// hides the bound port nor fails the free ones. The flood and the observer are in a
/// network namespace of their own, out of other tests' way.
#[test]
#[ignore = "needs root"]
fn a_flood_of_unrelated_udp_sockets_neither_hides_a_bound_port_nor_fails_a_free_one() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let flood = Flood::start(UDP_FLOOD_SOCKETS);
    let netns = flood.netns();
    let dir = d.path().to_path_buf();
    // A fresh namespace: nothing else is bound there.
    let (bound, free_udp, free_tcp) = (2345, 2346, 2347);
    let o = std::thread::spawn(move || {
        let ns = File::open(&netns).unwrap();
        nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let _held = std::net::UdpSocket::bind(("0.0.0.0", bound)).unwrap();
        let mut m = manifest(&dir);
        m.containment.listeners = vec![
            Listener::Udp(Inet::any(bound)),
            Listener::Udp(Inet::any(free_udp)),
            Listener::Tcp(Inet::any(free_tcp)),
        ];
        observe(&dir, m)
    })
    .join()
    .unwrap();
    drop(flood);
    let f = fact(&o, "listener", &Listener::Udp(Inet::any(bound)).to_string());
    assert_eq!(f.reason, Some(Reason::ListenerPresent), "{f:?}");
    for l in [
        Listener::Udp(Inet::any(free_udp)),
        Listener::Tcp(Inet::any(free_tcp)),
    ] {
        let f = fact(&o, "listener", &l.to_string());
        assert!(f.holds(), "{f:?}");
        assert_eq!(f.observed, "held");
    }
}

#[test]
fn units_without_a_reachable_systemd_are_unknown() {
    let d = tempfile::tempdir().unwrap();
    let mut m = manifest(d.path());
    m.containment.units = vec!["old.service".into()];
    let mut obs = observer(d.path(), m);
    obs.systemctl = vec!["false".into()];
    let o = obs.observe(&mut Fences::default());
    let f = fact(&o, "unit", "old.service");
    assert_eq!(f.reason, Some(Reason::ControllerUnknown), "{f:?}");
    assert!(f.observed.starts_with("systemctl show exited"), "{f:?}");
}

/// A `systemctl` that does not answer is stopped at its deadline: unknown, never waited for.
#[test]
fn a_systemctl_that_does_not_answer_is_stopped_and_unknown() {
    let d = tempfile::tempdir().unwrap();
    let mut m = manifest(d.path());
    m.containment.units = vec!["a.service".into()];
    let mut obs = observer(d.path(), m);
    obs.systemctl = vec![
        "sh".into(),
        "-c".into(),
        "exec sleep 600".into(),
        "sh".into(),
    ];
    let o = obs.observe(&mut Fences::default());
    let f = fact(&o, "unit", "a.service");
    assert_eq!(f.reason, Some(Reason::ControllerUnknown), "{f:?}");
    assert_eq!(f.observed, "systemctl show did not answer within 10s");
}

/// The units' states come from one `systemctl show` for all of them: an answer that does
/// not hold one block per unit asked is no unit's state.
#[test]
fn an_answer_without_one_block_per_unit_is_unknown_for_each() {
    let d = tempfile::tempdir().unwrap();
    let mut m = manifest(d.path());
    m.containment.units = vec!["a.service".into(), "b.service".into()];
    let block = "LoadState=masked\\nUnitFileState=masked\\nActiveState=inactive\\nSubState=dead\\nMainPID=0\\nNeedDaemonReload=no\\n";
    for (blocks, holds) in [(1, false), (2, true), (3, false)] {
        let mut obs = observer(d.path(), m.clone());
        let script = vec![format!("printf '{block}\\n'"); blocks].join(";");
        obs.systemctl = vec!["sh".into(), "-c".into(), script, "sh".into()];
        let o = obs.observe(&mut Fences::default());
        for u in ["a.service", "b.service"] {
            let f = fact(&o, "unit", u);
            if holds {
                assert!(f.holds(), "{blocks} blocks: {f:?}");
                assert_eq!(f.observed, "masked inactive");
            } else {
                assert_eq!(f.reason, Some(Reason::ControllerUnknown), "{f:?}");
                assert_eq!(
                    f.observed,
                    format!("systemctl show answered for {blocks} units, 2 were asked")
                );
            }
        }
    }
}

// Fences (`issuer/src/observe/fences.rs`).

/// A fence file at `path` with `mode`, and its manifest entry (enrolled as it is now).
fn fence(path: &Path, mode: u32) -> InventoryEntry {
    std::fs::write(path, b"").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    InventoryEntry {
        role: Role::Fence,
        path: s(path),
        identity: identity(path),
    }
}

/// Whether another open file description can take the lock now.
fn lockable(p: &Path) -> bool {
    let f = File::open(p).unwrap();
    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok()
}

/// Fence `a` (mode 0600) in `dir`, and an observer whose manifest enrolls it alone.
fn one_fence(dir: &Path) -> (InventoryEntry, Observer) {
    let a = fence(&dir.join("a"), 0o600);
    let mut m = manifest(dir);
    m.inventory = vec![a.clone()];
    (a, observer(dir, m))
}

#[test]
fn fences_are_acquired_held_and_reverified_by_their_own_entries() {
    let d = tempfile::tempdir().unwrap();
    let a = fence(&d.path().join("a"), 0o600);
    let b = fence(&d.path().join("b"), 0o640);
    let mut m = manifest(d.path());
    m.inventory = vec![a.clone(), b.clone()];
    let mut obs = observer(d.path(), m.clone());
    let mut fences = Fences::default();
    assert!(fences.is_empty());
    for round in 0..2 {
        let o = obs.observe(&mut fences);
        for e in [&a, &b] {
            let f = fact(&o, "fence", &e.path);
            assert!(f.holds(), "round {round}: {f:?}");
            assert_eq!(f.observed, "held");
        }
        assert_eq!(fences.len(), 2);
        assert!(!fences.is_empty());
    }
    let want: Vec<GrantFence> = [&a, &b]
        .map(|e| GrantFence {
            path: e.path.clone(),
            identity: e.identity,
        })
        .to_vec();
    assert_eq!(fences.grant_fences(), want);
    let fds = fences.fds();
    assert_eq!(fds.len(), 2);
    for (fd, e) in fds.iter().zip([&a, &b]) {
        assert!(fstat_identity(fd).unwrap().same_object(&e.identity));
    }
    assert!(!lockable(Path::new(&a.path)), "a is held");
    // Each entry is matched by its path and its enrolled identity, never by position.
    let c = fence(&d.path().join("c"), 0o600);
    let b_as_a = InventoryEntry {
        identity: a.identity,
        ..b.clone()
    };
    let c_as_a = InventoryEntry {
        path: c.path.clone(),
        ..a.clone()
    };
    m.inventory = vec![a.clone(), b_as_a, c_as_a];
    let o = observer(d.path(), m).observe(&mut fences);
    assert!(fact(&o, "fence", &a.path).holds());
    for p in [&b.path, &c.path] {
        let f = fact(&o, "fence", p);
        assert_eq!(f.reason, Some(Reason::FenceCustody), "{f:?}");
        assert_eq!(f.observed, "not held");
    }
}

#[test]
fn a_partial_fence_set_is_released() {
    let d = tempfile::tempdir().unwrap();
    let a = fence(&d.path().join("a"), 0o600);
    let gone = InventoryEntry {
        path: s(&d.path().join("gone")),
        ..a.clone()
    };
    let mut m = manifest(d.path());
    m.inventory = vec![a.clone(), gone.clone()];
    let mut fences = Fences::default();
    let o = observer(d.path(), m).observe(&mut fences);
    assert!(fact(&o, "fence", &a.path).holds());
    let f = fact(&o, "fence", &gone.path);
    assert_eq!(f.reason, Some(Reason::FenceMissing), "{f:?}");
    assert_eq!(fences.len(), 0);
    assert!(fences.is_empty());
    assert!(
        lockable(Path::new(&a.path)),
        "the acquired fence was released"
    );
}

#[test]
fn a_fence_locked_elsewhere_is_busy() {
    let d = tempfile::tempdir().unwrap();
    let (a, mut obs) = one_fence(d.path());
    let other = File::open(&a.path).unwrap();
    rustix::fs::flock(&other, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let mut fences = Fences::default();
    let o = obs.observe(&mut fences);
    let f = fact(&o, "fence", &a.path);
    assert_eq!(f.reason, Some(Reason::FenceBusy), "{f:?}");
    assert_eq!(f.expected, "the enrolled inode, locked by us");
    assert!(fences.is_empty());
    // The holder is named from the descriptors that hold the lock: this process, once.
    let me = format!("held by pid {} (", std::process::id());
    assert!(f.observed.starts_with(&me), "{f:?}");
    assert!(!f.observed.contains(", pid"), "{f:?}");
}

#[test]
fn a_fence_locked_only_by_a_descriptor_in_flight_is_busy_naming_the_pid_that_locked_it() {
    // The locked descriptor sits in an SCM_RIGHTS message and its last copy is closed: no
    // task holds it, so no holder is found, and the message says what /proc/locks says
    // (the pid that took the lock).
    let d = tempfile::tempdir().unwrap();
    let (a, mut obs) = one_fence(d.path());
    let other = File::open(&a.path).unwrap();
    rustix::fs::flock(&other, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let (tx, _rx) = std::os::unix::net::UnixStream::pair().unwrap();
    {
        use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
        use std::os::fd::AsFd as _;
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut anc = SendAncillaryBuffer::new(&mut space);
        let fds = [other.as_fd()];
        assert!(anc.push(SendAncillaryMessage::ScmRights(&fds)));
        sendmsg(
            &tx,
            &[std::io::IoSlice::new(b"x")],
            &mut anc,
            SendFlags::empty(),
        )
        .unwrap();
    }
    drop(other);
    let want = format!(
        "locked (holder not found; /proc/locks names pid [{}])",
        std::process::id()
    );
    // /proc/locks may skip an entry while another test churns locks (it is no snapshot,
    // which is why it is only quoted in messages): a few observations, one must name it.
    let mut seen = Vec::new();
    for _ in 0..20 {
        let o = obs.observe(&mut Fences::default());
        let f = fact(&o, "fence", &a.path).clone();
        assert_eq!(f.reason, Some(Reason::FenceBusy), "{f:?}");
        if f.observed == want {
            return;
        }
        seen.push(f.observed);
    }
    panic!("never {want:?}: {seen:?}");
}

/// Gives `path` an access ACL that lets uid 1 read, with the mask `r--` (a mode whose group
/// bits are `r--` is unchanged): the `system.posix_acl_access` xattr as the kernel reads it
/// (version 2, then tag, permissions and id of each entry, in tag order), set without a tool.
fn add_acl_entry(path: &Path) {
    const NO_ID: u32 = u32::MAX;
    const USER_OBJ: u16 = 0x01;
    const USER: u16 = 0x02;
    const GROUP_OBJ: u16 = 0x04;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (USER_OBJ, 6u16, NO_ID),
        (USER, 4, 1),
        (GROUP_OBJ, 4, NO_ID),
        (MASK, 4, NO_ID),
        (OTHER, 0, NO_ID),
    ] {
        v.extend(tag.to_le_bytes());
        v.extend(perm.to_le_bytes());
        v.extend(id.to_le_bytes());
    }
    rustix::fs::setxattr(
        path,
        "system.posix_acl_access",
        &v,
        rustix::fs::XattrFlags::empty(),
    )
    .expect("an access ACL");
}

#[test]
#[ignore = "needs root"]
fn a_fence_open_to_others_widened_reowned_or_with_an_acl_is_unprotected() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n);
    // Enrolled with a bit for others: that bit alone fails it.
    let others = fence(&p("others"), 0o604);
    let widened = fence(&p("widened"), 0o600);
    std::fs::set_permissions(&widened.path, std::fs::Permissions::from_mode(0o660)).unwrap();
    let uid = fence(&p("uid"), 0o600);
    std::os::unix::fs::chown(&uid.path, Some(1), None).unwrap();
    let gid = fence(&p("gid"), 0o600);
    std::os::unix::fs::chown(&gid.path, None, Some(1)).unwrap();
    // The mask stays r--: the mode is unchanged, only the ACL is new.
    let acl = fence(&p("acl"), 0o640);
    add_acl_entry(Path::new(&acl.path));
    let mut m = manifest(d.path());
    m.inventory = vec![
        others.clone(),
        widened.clone(),
        uid.clone(),
        gid.clone(),
        acl.clone(),
    ];
    let o = observe(d.path(), m);
    for (e, mode, observed) in [
        (&others, "604", "uid 0 gid 0 mode 604"),
        (&widened, "600", "uid 0 gid 0 mode 660"),
        (&uid, "600", "uid 1 gid 0 mode 600"),
        (&gid, "600", "uid 0 gid 1 mode 600"),
        (&acl, "640", "uid 0 gid 0 mode 640, an access ACL"),
    ] {
        let f = fact(&o, "fence", &e.path);
        assert_eq!(f.reason, Some(Reason::FenceUnprotected), "{f:?}");
        assert_eq!(
            f.expected,
            format!("uid 0 gid 0 mode {mode}, no access for others, no ACL")
        );
        assert_eq!(f.observed, observed);
    }
}

#[test]
fn a_held_fence_replaced_removed_or_below_a_file_is_not_held() {
    let d = tempfile::tempdir().unwrap();
    let dir = |n: &str| {
        let p = d.path().join(n);
        std::fs::create_dir(&p).unwrap();
        p
    };
    let (d1, d2, d3) = (dir("replaced"), dir("removed"), dir("below"));
    let replaced = fence(&d1.join("fence"), 0o600);
    let removed = fence(&d2.join("fence"), 0o600);
    let below = fence(&d3.join("fence"), 0o600);
    let mut m = manifest(d.path());
    m.inventory = vec![replaced.clone(), removed.clone(), below.clone()];
    let mut obs = observer(d.path(), m);
    let mut fences = Fences::default();
    let o = obs.observe(&mut fences);
    assert!(o.failed().all(|f| f.kind != "fence"), "{:#?}", o.facts);
    assert_eq!(fences.len(), 3);
    let new = d1.join("new");
    std::fs::write(&new, b"").unwrap();
    std::fs::rename(&new, &replaced.path).unwrap();
    std::fs::remove_file(&removed.path).unwrap();
    std::fs::rename(&d3, d.path().join("away")).unwrap();
    std::fs::write(&d3, b"a file where the directory was").unwrap();
    let o = obs.observe(&mut fences);
    let f = fact(&o, "fence", &replaced.path);
    assert_eq!(f.reason, Some(Reason::FenceReplaced), "{f:?}");
    assert_eq!(f.expected, replaced.identity.object());
    assert_eq!(
        f.observed,
        format!(
            "path now names {}",
            identity(Path::new(&replaced.path)).object()
        )
    );
    let f = fact(&o, "fence", &removed.path);
    assert_eq!(f.reason, Some(Reason::FenceReplaced), "{f:?}");
    assert_eq!(f.observed, "path removed");
    let f = fact(&o, "fence", &below.path);
    assert_eq!(f.reason, Some(Reason::ObserveFailed), "{f:?}");
    assert_eq!(
        f.observed,
        std::io::Error::from_raw_os_error(rustix::io::Errno::NOTDIR.raw_os_error()).to_string()
    );
}

#[test]
fn a_fence_whose_lock_another_took_is_out_of_custody() {
    let d = tempfile::tempdir().unwrap();
    let (a, mut obs) = one_fence(d.path());
    let mut fences = Fences::default();
    let o = obs.observe(&mut fences);
    assert!(fact(&o, "fence", &a.path).holds());
    // Made shared through a duplicate of the held fd (the same open file description):
    // still ours, but another may now take it shared too.
    let dup = fences.fds()[0].try_clone().unwrap();
    rustix::fs::flock(&dup, rustix::fs::FlockOperation::NonBlockingLockShared).unwrap();
    let o = obs.observe(&mut fences);
    let f = fact(&o, "fence", &a.path);
    assert_eq!(f.reason, Some(Reason::FenceCustody), "{f:?}");
    assert_eq!(f.observed, "our descriptor holds it shared, not exclusive");
    // Unlocked through the duplicate, then locked by another: a lock on the file, not ours.
    rustix::fs::flock(&dup, rustix::fs::FlockOperation::Unlock).unwrap();
    let other = File::open(&a.path).unwrap();
    rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
    let o = obs.observe(&mut fences);
    let f = fact(&o, "fence", &a.path);
    assert_eq!(f.reason, Some(Reason::FenceCustody), "{f:?}");
    assert_eq!(f.observed, "our descriptor holds no lock on it");
    // Unlocked explicitly: a process another test forks at this moment holds a copy of
    // `other` until its exec, and a close alone would leave the lock with that copy.
    rustix::fs::flock(&other, rustix::fs::FlockOperation::Unlock).unwrap();
    drop(other);
    let o = obs.observe(&mut fences);
    let f = fact(&o, "fence", &a.path);
    assert_eq!(f.reason, Some(Reason::FenceCustody), "{f:?}");
    assert_eq!(f.observed, "our descriptor holds no lock on it");
}

#[test]
fn a_held_fence_stays_held_while_others_take_and_release_many_locks() {
    // `/proc/locks` is no snapshot: it is read a page at a time, each read resuming at an
    // index, so locks released between two reads shift ours onto the page already read and
    // it is skipped. Hundreds of locks taken and released by another thread while the
    // fence is re-verified: it must read held every time.
    let d = tempfile::tempdir().unwrap();
    let (a, mut obs) = one_fence(d.path());
    let mut fences = Fences::default();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let (dir, stop) = (d.path().join("churn"), stop.clone());
        std::fs::create_dir(&dir).unwrap();
        let files: Vec<File> = (0..400)
            .map(|i| File::create(dir.join(i.to_string())).unwrap())
            .collect();
        std::thread::spawn(move || {
            use rustix::fs::FlockOperation::{NonBlockingLockExclusive, Unlock};
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for op in [NonBlockingLockExclusive, Unlock] {
                    for f in &files {
                        rustix::fs::flock(f, op).unwrap();
                    }
                }
            }
        })
    };
    let start = std::time::Instant::now();
    let mut rounds = 0;
    let mut failed = None;
    while start.elapsed() < Duration::from_secs(3) && failed.is_none() {
        let o = obs.observe(&mut fences);
        let f = fact(&o, "fence", &a.path);
        if !f.holds() {
            failed = Some(format!("round {rounds}: {f:?}"));
        }
        rounds += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().unwrap();
    assert_eq!(failed, None, "after {rounds} rounds");
    assert!(rounds > 10, "only {rounds} rounds");
}

// Lineage (`issuer/src/observe/lineage.rs`) and a world where every fact holds.

/// A journal at `path` (genesis signed by the issuer, then `bodies` by the producer),
/// owned by root, mode 0600, append-only, enrolled in `m` as it is now. Returns the
/// frontier (last seq, last hash).
fn journal(m: &mut Manifest, path: &Path, bodies: Vec<JournalBody>) -> (u64, Hash) {
    let issuer = ed25519_dalek::SigningKey::from_bytes(&[11; 32]);
    journal_signed(m, path, bodies, &issuer)
}

/// [`journal`], its genesis signed by `issuer` (the manifest's issuer key).
fn journal_signed(
    m: &mut Manifest,
    path: &Path,
    bodies: Vec<JournalBody>,
    issuer: &ed25519_dalek::SigningKey,
) -> (u64, Hash) {
    let producer = ed25519_dalek::SigningKey::from_bytes(&[12; 32]);
    m.issuer_key = PublicKey::from(&issuer.verifying_key());
    m.lineage.producer_key = PublicKey::from(&producer.verifying_key());
    m.lineage.journal_path = s(path);
    let (genesis_frame, genesis) = next_frame(
        m.deployment,
        None,
        JournalBody::Genesis {
            producer_key: m.lineage.producer_key,
        },
        issuer,
    );
    m.lineage.journal_genesis = genesis;
    let mut bytes = genesis_frame;
    let mut frontier = (0, genesis);
    for b in bodies {
        let (frame, h) = next_frame(m.deployment, Some(frontier), b, &producer);
        bytes.extend(frame);
        frontier = (frontier.0 + 1, h);
    }
    std::fs::write(path, &bytes).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let f = File::open(path).unwrap();
    repoch_sys::fs::set_append_only(&f).expect("append-only (ext4, root)");
    m.inventory.push(InventoryEntry {
        role: Role::Journal,
        path: s(path),
        identity: identity(path),
    });
    frontier
}

/// Sets or clears the append-only flag (chown and chmod fail while it is set).
fn append_only(p: &Path, on: bool) {
    let f = File::open(p).unwrap();
    if on {
        repoch_sys::fs::set_append_only(&f).unwrap();
    } else {
        repoch_sys::fs::clear_append_only(&f);
    }
}

/// A journal path whose append-only flag is cleared on drop (so the tempdir can go).
struct Journal(PathBuf);

impl Drop for Journal {
    fn drop(&mut self) {
        if self.0.exists() {
            append_only(&self.0, false);
        }
    }
}

fn bodies() -> Vec<JournalBody> {
    vec![
        JournalBody::RootStart { pid: 1 },
        JournalBody::OpBegin {
            op: 1,
            name: "migrate".into(),
        },
        JournalBody::OpBegin {
            op: 2,
            name: "compact".into(),
        },
        JournalBody::OpEnd {
            op: 2,
            outcome: repoch_protocol::journal::OpOutcome::Succeeded,
        },
    ]
}

#[test]
#[ignore = "needs root"]
fn a_world_where_every_fact_holds() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let mut m = manifest(d.path());
    let j = Journal(d.path().join("journal"));
    let (seq, hash) = journal(&mut m, &j.0, bodies());
    let ready = d.path().join("READY");
    std::fs::write(&ready, b"ready").unwrap();
    std::fs::set_permissions(&ready, std::fs::Permissions::from_mode(0o644)).unwrap();
    let exe = Path::new(&m.consumer.executable).to_owned();
    std::fs::write(&exe, b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let st = d.path().join("store");
    std::fs::write(&st, b"store").unwrap();
    m.inventory.push(store(&st, identity(&st)));
    m.inventory.push(fence(&d.path().join("fence"), 0o600));
    let o = observe(d.path(), m.clone());
    assert!(o.holds(), "{:#?}", o.failed().collect::<Vec<_>>());
    assert_eq!(o.failed().count(), 0);
    assert_eq!((o.frontier_seq, o.frontier_hash), (seq, hash));
    assert_eq!(seq, 4);
    assert_eq!(o.unknown_ops.len(), 1, "op 1 has no end");
    let f = fact(&o, "lineage", &m.lineage.journal_path);
    assert_eq!(f.observed, "verified");
    let f = fact(&o, "lineage-frontier", &m.lineage.journal_path);
    assert_eq!(f.observed, format!("seq {seq} hash {hash}"));
    let f = fact(&o, "lineage-unknown", &m.lineage.journal_path);
    assert_eq!(f.observed, "1 unknown");
}

#[test]
#[ignore = "needs root"]
fn a_journal_reowned_rechmodded_or_not_append_only_is_unprotected() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let chown = |p: &Path| std::os::unix::fs::chown(p, Some(1), None).unwrap();
    let chmod =
        |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o400)).unwrap();
    type Change<'a> = &'a dyn Fn(&Path);
    let cases: [(&str, Change<'_>, bool, &str); 3] = [
        ("uid", &chown, true, "uid 1 mode 600 append-only true"),
        ("mode", &chmod, true, "uid 0 mode 400 append-only true"),
        ("flag", &|_| {}, false, "uid 0 mode 600 append-only false"),
    ];
    for (name, change, flag, observed) in cases {
        let mut m = manifest(d.path());
        let j = Journal(d.path().join(format!("journal-{name}")));
        journal(&mut m, &j.0, vec![]);
        append_only(&j.0, false);
        change(&j.0);
        if flag {
            append_only(&j.0, true);
        }
        let o = observe(d.path(), m);
        let f = fact(&o, "lineage", &s(&j.0));
        assert_eq!(f.reason, Some(Reason::LineageUnprotected), "{name}: {f:?}");
        assert_eq!(f.expected, "uid 0 mode 600 append-only true");
        assert_eq!(f.observed, observed, "{name}");
        assert_eq!((o.frontier_seq, o.frontier_hash), (0, Hash::ZERO));
    }
}

/// Clears the append-only flag of every file under a directory on drop (enrollment makes
/// the journal and the epoch log append-only), so the tempdir can be removed.
struct Unappend(PathBuf);

impl Drop for Unappend {
    fn drop(&mut self) {
        fn walk(p: &Path) {
            let Ok(m) = std::fs::symlink_metadata(p) else {
                return;
            };
            if m.is_dir() {
                for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
                    walk(&e.path());
                }
            } else if m.is_file() {
                append_only(p, false);
            }
        }
        walk(&self.0);
    }
}

#[test]
#[ignore = "needs root"]
fn a_predecessor_is_linked_by_its_final_record() {
    assert_root();
    let d = tempfile::tempdir().unwrap();
    let _unappend = Unappend(d.path().to_owned());
    let layout = Layout::new(Some(&d.path().join("root")));
    let srv = d.path().join("srv");
    std::fs::create_dir(&srv).unwrap();
    fence(&srv.join("lock"), 0o600);
    std::fs::write(srv.join("data"), b"store").unwrap();
    std::fs::write(srv.join("READY"), b"ready").unwrap();
    let key =
        PublicKey::from(&ed25519_dalek::SigningKey::from_bytes(&[13; 32]).verifying_key()).to_hex();
    let producer =
        PublicKey::from(&ed25519_dalek::SigningKey::from_bytes(&[12; 32]).verifying_key());
    let text = format!(
        "label = \"obstest-predecessor\"\nfences = [\"{s}/lock\"]\nstores = [\"{s}/data\"]\n\
         ready = \"{s}/READY\"\n[journal]\npath = \"{s}/journal\"\nproducer_key = \"{p}\"\n\
         [consumer]\nuid = 0\ngid = 0\nexecutable = \"/bin/sh\"\nkey = \"{key}\"\n",
        s = srv.display(),
        p = producer.to_hex(),
    );
    let v = repoch_issuer::enroll::validate(&text).expect("a valid manifest");
    let enrolled = repoch_issuer::enroll::enroll(&layout, &v, 0).expect("enrolled");
    let issuer_key = repoch_issuer::enroll::issuer_key(&layout, false).unwrap();
    let issuer = PublicKey::from(&issuer_key.verifying_key());
    let last = repoch_issuer::store::Deployment::open(&layout, &issuer, enrolled.id)
        .expect("the predecessor opens")
        .report()
        .last_hash()
        .expect("an enrolled log has a record");
    let mut m = manifest(d.path());
    m.deployment = DeploymentId([8; 16]);
    let j = Journal(d.path().join("journal"));
    journal_signed(&mut m, &j.0, vec![], &issuer_key);
    let subject = format!("deployment {}", enrolled.id);
    let with = |deployment, final_hash| {
        let mut m = m.clone();
        m.lineage.predecessor = Some(Predecessor {
            deployment,
            final_hash,
        });
        observe(d.path(), m)
    };
    let o = with(enrolled.id, last);
    let f = fact(&o, "predecessor", &subject);
    assert!(f.holds(), "{f:?}");
    assert_eq!(
        (f.expected.as_str(), f.observed.as_str()),
        (format!("ends in {last}").as_str(), "as linked")
    );
    let other = Hash([9; 32]);
    let o = with(enrolled.id, other);
    let f = fact(&o, "predecessor", &subject);
    assert_eq!(f.reason, Some(Reason::PredecessorMismatch), "{f:?}");
    assert_eq!(f.expected, format!("ends in {other}"));
    assert_eq!(f.observed, format!("ends in {last}"));
    let unknown = DeploymentId([5; 16]);
    let o = with(unknown, last);
    let f = fact(&o, "predecessor", &format!("deployment {unknown}"));
    assert_eq!(f.reason, Some(Reason::PredecessorMismatch), "{f:?}");
    assert_eq!(f.expected, "readable");
}

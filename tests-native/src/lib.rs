//! Shared harness for the native tests: a per-test sandbox (its own temporary directory,
//! state root, fixture files, keys and ids) and helpers to run the real binaries.
#![deny(unsafe_code)]

pub mod audit_logs;
pub mod bench;
pub mod sys;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub use repoch_protocol::Outcome;

/// Names the directory of the binaries to drive instead of the one this executable was
/// built into (the benchmarks: docs/BENCHMARKS.md).
pub const BIN_DIR_ENV: &str = "REPOCH_BIN_DIR";

/// The directory holding the workspace's built binaries: `$REPOCH_BIN_DIR` when set, else
/// the profile directory this executable was built into (`target/debug` for the tests,
/// `target/release` for `cargo bench`).
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(BIN_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    let dir = if deps.ends_with("deps") {
        deps.parent().unwrap().to_path_buf()
    } else {
        deps.to_path_buf()
    };
    dir
}

pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} is not built: run `cargo test --workspace` (it builds every binary)",
        p.display()
    );
    p
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The first statement of every test that needs root. Such a test is also marked
/// `#[ignore = "needs root"]`, so a plain `cargo test` lists it as ignored (never as
/// passed); `cargo test --workspace -- --include-ignored` runs it, and then, as another
/// user, it fails here rather than passing without having run. The `root_tests_are_ignored`
/// test holds every test that calls this to the attribute.
#[macro_export]
macro_rules! require_root {
    () => {
        assert!(
            $crate::is_root(),
            "needs root: run as root, or run without --include-ignored to skip it"
        );
    };
}

/// Clears the append-only flag of every file under `dir` so it can be removed.
pub fn clear_append_only(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            clear_append_only(&p);
        } else if ft.is_file() {
            unset_append_only(&p);
        }
    }
}

pub fn unset_append_only(p: &Path) {
    if let Ok(f) = std::fs::File::open(p) {
        repoch_sys::fs::clear_append_only(&f);
    }
}

pub fn is_append_only(p: &Path) -> bool {
    std::fs::File::open(p)
        .ok()
        .is_some_and(|f| matches!(repoch_sys::fs::is_append_only(&f), Ok(true)))
}

/// A process's exit status, compared with the [`Outcome`] it documents
/// (docs/EXIT-CODES.md): tests name outcomes, not numbers, and a mismatch prints both.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Exit(pub i32);

impl Exit {
    /// The status of a process ended by a signal (it has no exit code).
    pub const SIGNALED: Exit = Exit(-1);
    /// The status a command ending in `o` exits with.
    pub fn of(o: Outcome) -> Exit {
        Exit(i32::from(o.code()))
    }
    /// The outcome this status is, if it is one.
    pub fn outcome(self) -> Option<Outcome> {
        Outcome::from_exit(self.0)
    }
}

impl PartialEq<Outcome> for Exit {
    fn eq(&self, o: &Outcome) -> bool {
        self.0 == i32::from(o.code())
    }
}

impl std::fmt::Debug for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.outcome() {
            Some(o) => write!(f, "{} ({})", self.0, o.name()),
            None if *self == Exit::SIGNALED => f.write_str("killed by a signal"),
            None => write!(f, "{} (no documented outcome)", self.0),
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// The result of running a binary.
#[derive(Debug)]
pub struct Run {
    pub code: Exit,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        let line = self
            .stdout
            .lines()
            .last()
            .unwrap_or_else(|| panic!("no stdout; stderr: {}", self.stderr));
        serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\nstderr: {}", self.stderr))
    }
    /// Every JSON line of stdout.
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: Exit(o.status.code().unwrap_or(-1)),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// One test's world: a temporary directory with a state root and fixture objects.
#[derive(Debug)]
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub srv: PathBuf,
    /// A short unique tag for names that live outside the directory (cgroups, netns).
    pub tag: String,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        clear_append_only(self.dir.path());
    }
}

impl Sandbox {
    pub fn new() -> Sandbox {
        Sandbox::within(None)
    }

    /// A sandbox whose state root and fixtures live under `base` (e.g. a loop mount).
    pub fn within(base: Option<&Path>) -> Sandbox {
        let dir = tempfile::Builder::new()
            .prefix("repoch-test-")
            .tempdir()
            .expect("tempdir");
        let top = base.map_or_else(|| dir.path().to_path_buf(), Path::to_path_buf);
        let root = top.join("root");
        let srv = top.join("srv");
        std::fs::create_dir_all(&srv).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        let tag = dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .trim_start_matches("repoch-test-")
            .to_owned();
        let s = Sandbox {
            dir,
            root,
            srv,
            tag,
        };
        std::fs::write(s.srv.join("lock"), b"").unwrap();
        // A fence others can open is refused at enrollment (they could hold it shared).
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(s.srv.join("lock"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        std::fs::write(s.srv.join("data"), b"the store").unwrap();
        std::fs::write(s.srv.join("READY"), b"v1\n").unwrap();
        s.keygen("producer");
        s.keygen("consumer");
        s
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn keygen(&self, name: &str) {
        let r = self.repoch(&[
            "journal",
            "keygen",
            self.path(&format!("{name}.key")).to_str().unwrap(),
        ]);
        assert_eq!(r.code, Outcome::Success, "keygen: {}", r.stderr);
    }

    pub fn cmd(&self, bin_name: &str) -> Command {
        let mut c = Command::new(bin(bin_name));
        c.env("REPOCH_ROOT", &self.root);
        c.env_remove("JOURNAL_STREAM");
        c
    }

    pub fn run(&self, bin_name: &str, args: &[&str]) -> Run {
        self.cmd(bin_name)
            .args(args)
            .output()
            .expect("spawn")
            .into()
    }

    pub fn repoch(&self, args: &[&str]) -> Run {
        self.run("repoch", args)
    }

    /// A manifest with the sandbox's fixtures and the given extra TOML sections.
    pub fn manifest(&self, extra: &str) -> String {
        let s = self.srv.display();
        let d = self.dir.path().display();
        format!(
            "label = \"test-{tag}\"\nfences = [\"{s}/lock\"]\nstores = [\"{s}/data\"]\nready = \"{s}/READY\"\n{extra}\n\
             [journal]\npath = \"{s}/journal\"\nproducer_key_file = \"{d}/producer.key.pub\"\n\n\
             [consumer]\nuid = 0\ngid = 0\nexecutable = \"{exe}\"\nkey_file = \"{d}/consumer.key.pub\"\n",
            tag = self.tag,
            exe = bin("repoch-consume").display(),
        )
    }

    /// Enrolls a manifest through the real binary; returns the deployment id.
    pub fn enroll_with(&self, manifest: &str) -> String {
        let p = self.path("manifest.toml");
        std::fs::write(&p, manifest).unwrap();
        let r = self.repoch(&["--json", "enroll", p.to_str().unwrap()]);
        assert_eq!(
            r.code,
            Outcome::Success,
            "enroll failed: {}{}",
            r.stdout,
            r.stderr
        );
        r.json()["deployment"].as_str().unwrap().to_owned()
    }

    /// Enrolls the default manifest with the test helper binary as the consumer executable
    /// (a consumer that misbehaves on purpose: drips, exits, shares its connection).
    pub fn enroll_with_helper_consumer(&self) -> String {
        let m = self.manifest("").replace(
            &bin("repoch-consume").display().to_string(),
            &bin("repoch-test-helper").display().to_string(),
        );
        self.enroll_with(&m)
    }

    pub fn enroll(&self) -> String {
        self.enroll_with(&self.manifest(""))
    }

    pub fn state_dir(&self, id: &str) -> PathBuf {
        self.root.join("var/lib/repoch/deployments").join(id)
    }

    pub fn log(&self, id: &str) -> PathBuf {
        self.state_dir(id).join("epoch.log")
    }

    pub fn status(&self, id: &str) -> Run {
        self.repoch(&["--json", "status", id])
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox::new()
    }
}

/// A real process started from the helper, killed on drop.
#[derive(Debug)]
pub struct Proc {
    pub child: std::process::Child,
    /// The first line it printed (usually its pid).
    pub line: String,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.line
            .split_whitespace()
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {:?}", self.line))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `cmd` and waits for its first stdout line (the barrier: it is ready).
pub fn spawn_ready(mut cmd: Command) -> Proc {
    use std::io::BufRead as _;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(!line.is_empty(), "the process exited before it was ready");
    Proc {
        child,
        line: line.trim().to_owned(),
    }
}

/// A command run by the helper's `reaped` in a cgroup (`cgroup.procs` of `cg`), every
/// process orphaned below it reaped there: on drop, the reaper kills that cgroup, reaps
/// what it held, and exits (bounded wait; then it is killed).
#[derive(Debug)]
pub struct Reaped(Proc);

impl Drop for Reaped {
    fn drop(&mut self) {
        drop(self.0.child.stdin.take());
        for _ in 0..2000 {
            if !matches!(self.0.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// Starts `bin args` under a reaper in `cg`, ready once it printed its first line.
pub fn reaped(cg: &Cgroup, bin: &Path, args: &[&str]) -> Reaped {
    let mut c = helper(&["reaped", cg.path().join("cgroup.procs").to_str().unwrap()]);
    c.arg(bin).args(args).stdin(std::process::Stdio::piped());
    Reaped(spawn_ready(c))
}

/// `exe fork-chain` (a copy of the helper) run under a reaper in `cg`, as uid 65534 when
/// `nobody`: a chain of short-lived processes, one alive at a time.
pub fn fork_chain(cg: &Cgroup, exe: &Path, nobody: bool) -> Reaped {
    let exe = exe.to_str().expect("a UTF-8 path");
    if nobody {
        let args = [
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            exe,
            "fork-chain",
        ];
        reaped(cg, Path::new("setpriv"), &args)
    } else {
        reaped(cg, Path::new(exe), &["fork-chain"])
    }
}

pub fn helper(args: &[&str]) -> Command {
    let mut c = Command::new(bin("repoch-test-helper"));
    c.args(args);
    c
}

pub fn kill_pid(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
}

/// A per-test cgroup v2 directory under the hierarchy found through mountinfo. On drop,
/// everything in it is killed (`cgroup.kill`) and the directories are removed.
#[derive(Debug)]
pub struct Cgroup {
    pub root: PathBuf,
    /// Path relative to the hierarchy root, with a leading '/'.
    pub rel: String,
}

impl Cgroup {
    pub fn new(name: &str) -> Cgroup {
        let root = repoch_sys::cgroup::mount_point().expect("cgroup2 mounted");
        let rel = format!("/{name}");
        std::fs::create_dir_all(root.join(name)).expect("mkdir cgroup");
        Cgroup { root, rel }
    }
    pub fn path(&self) -> PathBuf {
        self.root.join(self.rel.trim_start_matches('/'))
    }
    pub fn child(&self, name: &str) -> Cgroup {
        let rel = format!("{}/{name}", self.rel);
        std::fs::create_dir_all(self.root.join(rel.trim_start_matches('/'))).unwrap();
        Cgroup {
            root: self.root.clone(),
            rel,
        }
    }
    pub fn add(&self, pid: u32) {
        std::fs::write(self.path().join("cgroup.procs"), pid.to_string())
            .expect("move into cgroup");
    }
    pub fn kill_all(&self) {
        let _ = std::fs::write(self.path().join("cgroup.kill"), "1");
        for _ in 0..200 {
            let ev = std::fs::read_to_string(self.path().join("cgroup.events")).unwrap_or_default();
            if ev.contains("populated 0") {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    fn remove(p: &Path) {
        if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    Cgroup::remove(&e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(p);
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.kill_all();
        Cgroup::remove(&self.path());
    }
}

/// Serializes tests that make new mount namespaces (`ip netns exec` copies every mount of
/// the moment) with tests that must really unmount a file system (power loss): a copied
/// mount would keep the shut-down superblock alive and the remount would reuse it.
static MOUNT_NAMESPACES: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn mount_namespace_guard() -> std::sync::MutexGuard<'static, ()> {
    MOUNT_NAMESPACES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A per-test network namespace (`ip netns`), deleted on drop.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
    _guard: std::sync::MutexGuard<'static, ()>,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        let guard = mount_namespace_guard();
        let name = format!("repoch-{tag}");
        let o = Command::new("ip")
            .args(["netns", "add", &name])
            .output()
            .expect("ip");
        assert!(
            o.status.success(),
            "ip netns add: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let _ = Command::new("ip")
            .args(["-n", &name, "link", "set", "lo", "up"])
            .output();
        Netns {
            name,
            _guard: guard,
        }
    }
    /// `cmd` run inside the namespace.
    pub fn wrap(&self, cmd: &Command) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name])
            .arg(cmd.get_program())
            .args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

impl Sandbox {
    /// `repoch --json observe ID` as a command (so tests can wrap it, e.g. in a netns).
    pub fn observe_cmd(&self, id: &str, extra: &[&str]) -> Command {
        let mut c = self.cmd("repoch");
        c.args(["--json", "observe", id]).args(extra);
        c
    }
    /// Uses deployment `id`'s epoch the way an issuance that was withheld would: intent, then
    /// withheld, signed with the host issuer key and appended through the store.
    pub fn use_epoch(&self, id: &str) {
        let layout = repoch_issuer::Layout::new(Some(&self.root));
        let key = repoch_issuer::enroll::issuer_key(&layout, false).unwrap();
        let mut d = self.deployment(id);
        for body in [
            repoch_protocol::epoch::EpochBody::Intent {
                evidence: repoch_protocol::Hash([1; 32]),
                facts: vec![],
                contender: repoch_protocol::epoch::Contender {
                    pid: 1,
                    start_ticks: 1,
                    boot_id: "b".into(),
                },
                consumer: repoch_protocol::grant::ConsumerPeer {
                    pid: 1,
                    uid: 0,
                    gid: 0,
                    exe: repoch_protocol::Identity {
                        dev: 1,
                        ino: 1,
                        uid: 0,
                        gid: 0,
                        mode: 0,
                        birth: None,
                    },
                    exe_sha256: repoch_protocol::Hash([1; 32]),
                    cgroup: "/".into(),
                },
            },
            repoch_protocol::epoch::EpochBody::Withheld {
                reason: repoch_protocol::Reason::ConsumerLost,
                detail: "test".into(),
            },
        ] {
            let rec = repoch_protocol::epoch::SignedEpochRecord::sign(
                repoch_protocol::epoch::EpochRecord {
                    deployment: d.id,
                    seq: d.log.next_seq(),
                    prev: d.log.last_hash(),
                    body,
                },
                &key,
            );
            d.log
                .append(&mut repoch_issuer::storage::Real, &rec)
                .unwrap();
        }
    }
    /// The deployment, opened through the library as repochd opens it.
    pub fn deployment(&self, id: &str) -> repoch_issuer::store::Deployment {
        let layout = repoch_issuer::Layout::new(Some(&self.root));
        let issuer = repoch_issuer::store::issuer_public(&layout).unwrap();
        repoch_issuer::store::Deployment::open(
            &layout,
            &issuer,
            repoch_protocol::DeploymentId::from_hex(id).unwrap(),
        )
        .unwrap()
    }

    /// An in-process observer of the deployment (one issuance's view), with its fences.
    pub fn observer(
        &self,
        id: &str,
    ) -> (
        repoch_issuer::observe::Observer,
        repoch_issuer::observe::Fences,
    ) {
        let d = self.deployment(id);
        let obs = repoch_issuer::observe::Observer::new(
            d.manifest.clone(),
            repoch_issuer::Layout::new(Some(&self.root)),
            None,
        );
        (obs, repoch_issuer::observe::Fences::default())
    }

    pub fn observe(&self, id: &str) -> Run {
        self.observe_cmd(id, &[]).output().unwrap().into()
    }
}

/// The failed facts of an observation, as `(kind, reason)`.
pub fn failed(r: &Run) -> Vec<(String, String)> {
    let j = r.json();
    j["facts"]
        .as_array()
        .unwrap_or_else(|| panic!("no facts: {j}"))
        .iter()
        .filter(|f| f["holds"] == false)
        .map(|f| {
            (
                f["kind"].as_str().unwrap().to_owned(),
                f["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The observed text of the first failed fact of `kind`.
pub fn observed(r: &Run, kind: &str) -> String {
    r.json()["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind && f["holds"] == false)
        .map(|f| f["observed"].as_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// The minimal Debian rootfs with systemd that unit tests boot with `systemd-nspawn`,
/// built once (mmdebstrap, about 15 s) and cached under `target/`.
pub fn nspawn_rootfs() -> PathBuf {
    let target = bin_dir().parent().expect("target").to_path_buf();
    let rootfs = target.join("nspawn-rootfs");
    let lock = std::fs::File::create(target.join("nspawn-rootfs.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    if !nspawn_rootfs_built() {
        let tmp = target.join("nspawn-rootfs.tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        let o = Command::new("mmdebstrap")
            .args([
                "--variant=minbase",
                "--include=systemd,systemd-sysv,dbus,iproute2",
                "bookworm",
            ])
            .arg(&tmp)
            .arg("http://deb.debian.org/debian")
            .output()
            .expect("mmdebstrap (apt-get install mmdebstrap)");
        assert!(
            o.status.success(),
            "mmdebstrap: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::rename(&tmp, &rootfs).unwrap();
    }
    rootfs
}

/// Whether [`nspawn_rootfs`] is already built (then mmdebstrap is not needed).
pub fn nspawn_rootfs_built() -> bool {
    bin_dir()
        .parent()
        .expect("target")
        .join("nspawn-rootfs/usr/lib/systemd/systemd")
        .exists()
}

/// The Debian package built from this tree: `REPOCH_DEB` if set, else the last
/// `target/debian/repoch_*.deb` (built by `cargo build --release -p repoch-daemon -p
/// repoch-cli -p repoch-consumer && cargo deb -p repoch-daemon --no-build`, as .ci/run does). `None`
/// when there is no such file.
pub fn debian_package() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("REPOCH_DEB") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let dir = bin_dir().parent().expect("target").join("debian");
    let mut debs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("repoch_") && n.ends_with(".deb"))
        })
        .collect();
    debs.sort();
    debs.pop()
}

/// A booted systemd container (`systemd-nspawn -b`, volatile overlay so tests can share
/// the rootfs). Killed on drop.
#[derive(Debug)]
pub struct Container {
    pub nspawn: std::process::Child,
    pub leader: u32,
    /// nspawn makes a mount namespace: see [`mount_namespace_guard`].
    _guard: std::sync::MutexGuard<'static, ()>,
}

/// Longest wait for a container's systemd to come up.
pub const CONTAINER_BOOT_SECONDS_MAX: u64 = 180;

impl Container {
    pub fn boot(tag: &str) -> Container {
        let rootfs = nspawn_rootfs();
        let guard = mount_namespace_guard();
        let nspawn = Command::new("systemd-nspawn")
            .args([
                "-q",
                "-b",
                "--register=no",
                "--keep-unit",
                "--volatile=overlay",
                "-M",
            ])
            .arg(format!(
                "r{}",
                tag.to_lowercase()
                    .replace(|c: char| !c.is_ascii_alphanumeric(), "")
            ))
            .arg("-D")
            .arg(&rootfs)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("systemd-nspawn (apt-get install systemd-container)");
        let start = std::time::Instant::now();
        let mut c = Container {
            leader: 0,
            nspawn,
            _guard: guard,
        };
        loop {
            assert!(
                start.elapsed().as_secs() < CONTAINER_BOOT_SECONDS_MAX,
                "container did not boot within {CONTAINER_BOOT_SECONDS_MAX} s"
            );
            if c.leader == 0 {
                let kids = std::fs::read_to_string(format!(
                    "/proc/{}/task/{}/children",
                    c.nspawn.id(),
                    c.nspawn.id()
                ))
                .unwrap_or_default();
                c.leader = kids
                    .split_whitespace()
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0);
            }
            if c.leader != 0 {
                let o = c.exec(&["systemctl", "is-system-running"]);
                let state = String::from_utf8_lossy(&o.stdout);
                if state.starts_with("running") || state.starts_with("degraded") {
                    return c;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// Runs a command inside the container (all its namespaces).
    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .args(["-t", &self.leader.to_string(), "-a"])
            .args(args)
            .output()
            .expect("nsenter")
    }

    pub fn sh(&self, script: &str) {
        let o = self.exec(&["sh", "-c", script]);
        assert!(
            o.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// The `REPOCH_SYSTEMCTL` value that asks this container's systemd.
    pub fn systemctl(&self) -> String {
        format!("nsenter -t {} -a systemctl", self.leader)
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // Killing the pid namespace's init kills every process in it.
        kill_pid(self.leader);
        let _ = self.nspawn.kill();
        let _ = self.nspawn.wait();
    }
}

/// A running `repochd` for one sandbox; stopped (SIGTERM) on drop. Its log is kept in the
/// sandbox so tests can wait for named lines (barriers).
#[derive(Debug)]
pub struct Daemon {
    pub child: std::process::Child,
    pub log: PathBuf,
}

/// Longest wait for a daemon to listen or log a line.
pub const DAEMON_WAIT_SECONDS_MAX: u64 = 20;

impl Daemon {
    /// Waits until the daemon's log contains `needle`.
    pub fn wait_log(&self, needle: &str) -> String {
        let start = std::time::Instant::now();
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains(needle) {
                return log;
            }
            assert!(
                start.elapsed().as_secs() < DAEMON_WAIT_SECONDS_MAX,
                "repochd never logged {needle:?}:\n{log}"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        for _ in 0..200 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sandbox {
    /// Starts repochd on this sandbox's root and waits until it is ready.
    pub fn daemon(&self) -> Daemon {
        let log = self.path("repochd.log");
        let f = std::fs::File::create(&log).unwrap();
        let child = self
            .cmd("repochd")
            .stderr(f)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("repochd");
        let d = Daemon { child, log };
        d.wait_log("repochd ready");
        d
    }

    pub fn grant_socket(&self) -> PathBuf {
        self.root.join("run/repoch/grant.sock")
    }

    pub fn issuer_pub(&self) -> PathBuf {
        self.root.join("etc/repoch/issuer.pub")
    }

    /// `repoch-consume --json receive` for deployment `prefix`, persisting to `out`.
    pub fn consumer(&self, prefix: &str, key: &str, out: &str, exec: &[&str]) -> Command {
        self.consumer_from(&bin("repoch-consume"), prefix, key, out, exec)
    }

    /// The same, run from another copy of the consumer executable.
    pub fn consumer_from(
        &self,
        program: &Path,
        prefix: &str,
        key: &str,
        out: &str,
        exec: &[&str],
    ) -> Command {
        let mut c = Command::new(program);
        c.env("REPOCH_ROOT", &self.root)
            .env_remove("JOURNAL_STREAM");
        c.args(["--json", "receive", "--deployment", prefix, "--key"])
            .arg(self.path(key))
            .arg("--issuer-key")
            .arg(self.issuer_pub())
            .arg("--out")
            .arg(self.path(out))
            .arg("--socket")
            .arg(self.grant_socket())
            .args(["--wait", "30"]);
        if !exec.is_empty() {
            c.arg("--").args(exec);
        }
        c
    }

    /// `repoch --json recover PREFIX --consumer-wait SECONDS`.
    pub fn recover(&self, prefix: &str, wait: u64, extra: &[&str]) -> Command {
        let mut c = self.cmd("repoch");
        c.args([
            "--json",
            "recover",
            prefix,
            "--consumer-wait",
            &wait.to_string(),
        ])
        .args(extra);
        c
    }
}

impl Run {
    /// The final `outcome` line of `repoch --json recover`.
    pub fn outcome(&self) -> serde_json::Value {
        self.json_lines()
            .into_iter()
            .rev()
            .find(|j| j["event"] == "outcome")
            .unwrap_or_else(|| panic!("no outcome:\n{}\n{}", self.stdout, self.stderr))
    }
    pub fn reasons(&self) -> Vec<String> {
        self.outcome()["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_owned())
            .collect()
    }
}

// ---- loop-mounted ext4 and real power loss ----

pub fn sh(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// Attempts to unmount, 20 ms apart.
const UMOUNT_TRIES_MAX: u32 = 250;

/// A loop-mounted ext4 image, unmounted and detached on drop.
#[derive(Debug)]
pub struct Ext4 {
    pub image: PathBuf,
    pub mnt: PathBuf,
    dev: String,
    /// `ext4`, or `btrfs` ([`Ext4::btrfs`]).
    fstype: &'static str,
    _dir: tempfile::TempDir,
}

impl Ext4 {
    /// The same fixture formatted btrfs (128 MiB sparse: mkfs.btrfs's smallest default),
    /// for what btrfs does differently (a subvolume's own device in `stat`).
    pub fn btrfs() -> Ext4 {
        Ext4::formatted("btrfs", 128 << 20, &["mkfs.btrfs", "-q", "-f"])
    }
    pub fn new() -> Ext4 {
        Ext4::formatted("ext4", 32 << 20, &["mkfs.ext4", "-q", "-F"])
    }
    /// A sparse image of `bytes`, formatted by `mkfs` (the program, then its options; the
    /// image path is appended), on a loop device, mounted as `fstype`.
    fn formatted(fstype: &'static str, bytes: u64, mkfs: &[&str]) -> Ext4 {
        let dir = tempfile::Builder::new()
            .prefix(&format!("repoch-{fstype}-"))
            .tempdir()
            .unwrap();
        let image = dir.path().join("image");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::File::create(&image)
            .unwrap()
            .set_len(bytes)
            .unwrap();
        let mut args = mkfs[1..].to_vec();
        args.push(image.to_str().unwrap());
        sh(mkfs[0], &args);
        let dev = sh("losetup", &["--find", "--show", image.to_str().unwrap()]);
        let e = Ext4 {
            image,
            mnt,
            dev,
            fstype,
            _dir: dir,
        };
        e.mount();
        e
    }
    pub fn mount(&self) {
        sh(
            "mount",
            &["-t", self.fstype, &self.dev, self.mnt.to_str().unwrap()],
        );
    }
    /// Unmounts. A child that another test thread forked while this one had files open on
    /// the mount keeps them until its exec: "target is busy" for a moment. Retry, bounded.
    pub fn umount(&self) {
        for _ in 0..UMOUNT_TRIES_MAX {
            let o = Command::new("umount").arg(&self.mnt).output().unwrap();
            if o.status.success() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        sh("umount", &[self.mnt.to_str().unwrap()]);
    }
    pub fn cut_power(&self) {
        let fd = std::fs::File::open(&self.mnt).unwrap();
        crate::sys::ext4_shutdown(&fd, crate::sys::EXT4_GOING_FLAGS_NOLOGFLUSH)
            .expect("EXT4_IOC_SHUTDOWN");
    }
    /// Unmounts and mounts again: a fresh superblock that reads only what reached the
    /// image. (The same loop device keeps st_dev, so identities still match.)
    pub fn remount_after_power_loss(&self) {
        self.umount();
        self.mount();
    }
}

impl Ext4 {
    /// Whether the image is mounted at `mnt` now (a test may fail between the unmount and
    /// the mount of a remount).
    fn mounted(&self) -> bool {
        let mnt = self.mnt.to_string_lossy();
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(&*mnt))
    }
}

impl Drop for Ext4 {
    /// Unmounts (bounded retries while a forked child lets go of the mount, then a lazy
    /// unmount so the mount point never outlives the test), detaches the loop device and
    /// removes the image, also when the test failed. Never panics: it may run while
    /// unwinding.
    fn drop(&mut self) {
        if self.mounted() {
            let mut tries = 0;
            while tries < UMOUNT_TRIES_MAX
                && !Command::new("umount")
                    .arg(&self.mnt)
                    .output()
                    .is_ok_and(|o| o.status.success())
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if self.mounted() {
                eprintln!(
                    "{}: still busy after {UMOUNT_TRIES_MAX} tries; unmounting lazily",
                    self.mnt.display()
                );
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).output();
            }
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).output();
        let _ = std::fs::remove_file(&self.image);
    }
}

impl Default for Ext4 {
    fn default() -> Self {
        Ext4::new()
    }
}

/// Replaces `path` with a new inode holding `content` (written beside it, then renamed
/// over it): "the same name, another object".
pub fn rename_over(path: &Path, content: &[u8]) {
    let new = path.with_extension("repoch-new");
    std::fs::write(&new, content).unwrap();
    std::fs::rename(&new, path).unwrap();
}

/// Replaces `path` with a byte-identical copy (same content and mode, another inode).
pub fn rename_copy_over(path: &Path) {
    let new = path.with_extension("repoch-new");
    std::fs::copy(path, &new).unwrap();
    std::fs::rename(&new, path).unwrap();
}

// Issuance helpers shared by both test binaries (tests/native and tests/tooled).

pub fn run(mut c: Command) -> Run {
    c.stdin(Stdio::null()).output().expect("spawn").into()
}

pub fn records(s: &Sandbox, id: &str) -> Vec<String> {
    s.status(id).json()["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_owned())
        .collect()
}

/// Starts a recovery in the background (its wait covers consumers started afterwards).
pub fn recover_bg(s: &Sandbox, prefix: &str, wait: u64) -> std::process::Child {
    s.recover(prefix, wait, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

pub fn finish(c: std::process::Child) -> Run {
    c.wait_with_output().unwrap().into()
}

/// Copies the executable `src` to `dst` (mode 0755) with `tag` appended: it runs as `src`
/// does (the loader ignores bytes past the program) but its content is its own, so that
/// no other test's process runs a copy of it.
pub fn unique_copy(src: &Path, dst: &Path, tag: &str) {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::copy(src, dst).unwrap();
    let mut f = std::fs::OpenOptions::new().append(true).open(dst).unwrap();
    f.write_all(format!("\nrepoch-test-{tag}\n").as_bytes())
        .unwrap();
    f.sync_all().unwrap();
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A TCP or UDP port free now on every address (bound on the IPv6 wildcard, then closed).
pub fn free_port(udp: bool) -> u16 {
    let a = if udp {
        std::net::UdpSocket::bind("[::]:0").unwrap().local_addr()
    } else {
        std::net::TcpListener::bind("[::]:0").unwrap().local_addr()
    };
    a.unwrap().port()
}

pub fn open_to_all(s: &Sandbox) {
    use std::os::unix::fs::PermissionsExt as _;
    // Let an unprivileged process reach the sandbox's sockets and binaries.
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for p in ["root", "root/run", "root/run/repoch"] {
        std::fs::set_permissions(s.dir.path().join(p), std::fs::Permissions::from_mode(0o755))
            .unwrap();
    }
}

/// Whether `pid` is stopped (state T in /proc/PID/stat).
pub fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('T'))
    })
}

/// repochd started with `REPOCH_BARRIER`: it stops itself right after the named step.
#[derive(Debug)]
pub struct AtBarrier {
    daemon: std::process::Child,
    log: std::path::PathBuf,
    barrier: String,
}

impl AtBarrier {
    pub fn start(s: &Sandbox, barrier: &str) -> AtBarrier {
        AtBarrier::start_with(s, barrier, &[])
    }
    /// The same, with more arguments for repochd (e.g. `--config FILE`).
    pub fn start_with(s: &Sandbox, barrier: &str, args: &[&str]) -> AtBarrier {
        let log = s.path("repochd.log");
        let daemon = s
            .cmd("repochd")
            .args(args)
            .env("REPOCH_BARRIER", barrier)
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let d = AtBarrier {
            daemon,
            log,
            barrier: barrier.to_owned(),
        };
        d.wait_for(|t| t.contains("repochd ready"), "start");
        assert!(d.text().contains("barriers=true"), "this repochd was built without barriers: build it with `cargo test --workspace` (a plain `cargo build` leaves one without)");
        d
    }
    pub fn pid(&self) -> u32 {
        self.daemon.id()
    }
    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    fn wait_for(&self, ok: impl Fn(&str) -> bool, what: &str) {
        let start = std::time::Instant::now();
        while !ok(&self.text()) {
            assert!(
                start.elapsed().as_secs() < DAEMON_WAIT_SECONDS_MAX,
                "repochd did not {what}:\n{}",
                self.text()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    /// The barrier: logged, and the process stopped there.
    pub fn reached(&self) {
        let line = format!("barrier {} reached", self.barrier);
        let pid = self.daemon.id();
        self.wait_for(
            |t| t.contains(&line) && stopped(pid),
            &format!("stop at {}", self.barrier),
        );
    }
    pub fn signal(&self, sig: rustix::process::Signal) {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.daemon.id() as i32).unwrap(),
            sig,
        )
        .unwrap();
    }
    /// What `systemctl stop` does to it, stopped at its barrier: SIGTERM, then SIGCONT.
    pub fn stop_as_systemd_does(&self) {
        self.signal(rustix::process::Signal::TERM);
        self.signal(rustix::process::Signal::CONT);
    }
    /// Its exit status once it exits, at most `limit` from now; `None` if it still runs.
    pub fn exit_within(&mut self, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
        exit_within(&mut self.daemon, limit)
    }
}

/// `child`'s exit status once it exits, at most `limit` from now; `None` if it still runs.
pub fn exit_within(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}

impl Drop for AtBarrier {
    fn drop(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

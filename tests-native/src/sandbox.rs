//! One test's world: a temporary directory with a state root and fixture objects, and
//! the commands a test runs in it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::*;

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

    /// `repoch --json enroll MANIFEST`, as an operator runs it: for a manifest that
    /// establishes a fleet (a `[registry]` without `fleet_id`), with the etcd
    /// administrator's credential beside the host's (`--fleet-admin-cert`, `--fleet-admin-key`:
    /// the test cluster's `client.pem`, CN `root`, next to the host's certificate).
    pub fn enroll_cmd(&self, manifest: &Path) -> Command {
        let mut c = self.cmd("repoch");
        c.args(["--json", "enroll", manifest.to_str().unwrap()]);
        let text = std::fs::read_to_string(manifest).unwrap_or_default();
        c.args(fleet_admin_flags(&text));
        c
    }

    /// [`Sandbox::enroll_cmd`] run to its end.
    pub fn enroll_manifest(&self, manifest: &Path) -> Run {
        self.enroll_cmd(manifest)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("spawn")
            .into()
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
        let r = self.enroll_manifest(&p);
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

    /// Starts repochd on this sandbox's root and waits until it is ready.
    pub fn daemon(&self) -> Daemon {
        self.daemon_env(&[])
    }

    /// [`Sandbox::daemon`] with more environment variables (`(NAME, VALUE)`), such as
    /// `REPOCH_SYSTEMCTL` for a systemd of a test's own.
    pub fn daemon_env(&self, env: &[(&str, &str)]) -> Daemon {
        let log = self.path("repochd.log");
        let f = std::fs::File::create(&log).unwrap();
        let child = self
            .cmd("repochd")
            .envs(env.iter().copied())
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

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox::new()
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
    let mode = std::fs::metadata(path).unwrap().permissions();
    copy_executable(path, &new, "");
    std::fs::set_permissions(&new, mode).unwrap();
    std::fs::rename(&new, path).unwrap();
}

// Issuance helpers shared by both test binaries (tests/native and tests/tooled).

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

/// Copies the executable `src` to `dst` (mode 0755) with `tag` appended: it runs as `src`
/// does (the loader ignores bytes past the program) but its content is its own, so that
/// no other test's process runs a copy of it.
pub fn unique_copy(src: &Path, dst: &Path, tag: &str) {
    copy_executable(src, dst, &format!("\nrepoch-test-{tag}\n"));
}

/// Copies the executable `src` to `dst` (mode 0755), `tail` appended, durably.
///
/// The copy is written by a child process (`cp`, then the shell's append and `sync`):
/// a descriptor open for writing in this process would be inherited by whatever another
/// thread forks meanwhile, and an exec of `dst` before that child execs fails with
/// `ETXTBSY` ("Text file busy"), a failure no test asked for.
pub fn copy_executable(src: &Path, dst: &Path, tail: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    let done = Command::new("sh")
        .args([
            "-c",
            r#"cp -- "$1" "$2" && printf %s "$3" >>"$2" && sync -- "$2""#,
            "copy_executable",
        ])
        .arg(src)
        .arg(dst)
        .arg(tail)
        .status()
        .expect("sh");
    assert!(
        done.success(),
        "copy {} to {}: {done}",
        src.display(),
        dst.display()
    );
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(0o755)).unwrap();
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

/// The administrator's flags for an enrollment of `manifest` (its text) that establishes a
/// fleet: the test cluster's `client.pem` and `client.key` (CN `root`), in the directory of
/// the `[registry]`'s `cert`; none for a manifest without a registry or naming `fleet_id`.
pub fn fleet_admin_flags(manifest: &str) -> Vec<String> {
    if manifest.lines().any(|l| l.starts_with("fleet_id")) {
        return Vec::new();
    }
    let cert = manifest.lines().find_map(|l| {
        l.strip_prefix("cert = \"")
            .and_then(|r| r.strip_suffix('"'))
            .map(|c| Path::new(c).with_file_name(""))
    });
    match cert {
        Some(dir) => vec![
            "--fleet-admin-cert".into(),
            dir.join("client.pem").display().to_string(),
            "--fleet-admin-key".into(),
            dir.join("client.key").display().to_string(),
        ],
        None => Vec::new(),
    }
}

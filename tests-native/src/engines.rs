//! Container engines of a test's own: a containerd and a dockerd with their own data and
//! state directories, sockets and pidfile (no bridge, no iptables, the `vfs` storage
//! driver: nothing of the host's network or mounts is touched), and an image made offline
//! from busybox-static. containerd 1.6 puts its shims' sockets under
//! `/run/containerd/s/` whatever its state directory (named by a hash of this
//! containerd's own socket path, so never another's).
//!
//! Every process started here is stopped on drop: dockerd (which stops its containers),
//! containerd, and any shim left running for this engine.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The image every test container runs: busybox-static as `/bin/busybox`, `sh`, `sleep`.
pub const BUSYBOX_IMAGE: &str = "repoch-busybox:1";
/// How long an engine may take to answer after it starts.
const READY_SECONDS_MAX: u64 = 60;

/// A dockerd (and its containerd) of the test's own.
#[derive(Debug)]
pub struct Dockerd {
    pub dir: PathBuf,
    /// dockerd's API socket: what a manifest names (`unix://` + this).
    pub socket: PathBuf,
    containerd: Option<Child>,
    dockerd: Option<Child>,
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        self.stop();
        if let Some(mut c) = self.containerd.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&c),
                rustix::process::Signal::TERM,
            );
            wait_bounded(&mut c, Duration::from_secs(10));
        }
        // Shims that outlived containerd (reparented to init) hold their bundles here.
        let dir = self.dir.display().to_string();
        let _ = Command::new("pkill").args(["-f", &dir]).status();
    }
}

/// Waits for `c` to exit, at most `max`; then kills it.
fn wait_bounded(c: &mut Child, max: Duration) {
    let start = Instant::now();
    while start.elapsed() < max {
        if !matches!(c.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// The Docker CLI of the Debian package (`docker.io`), or the first on `PATH`.
fn docker_cli() -> &'static str {
    if Path::new("/usr/bin/docker").exists() {
        "/usr/bin/docker"
    } else {
        "docker"
    }
}

impl Dockerd {
    /// Starts containerd and dockerd under `dir` and waits until dockerd answers.
    pub fn start(dir: &Path) -> Dockerd {
        std::fs::create_dir_all(dir).unwrap();
        let mut d = Dockerd {
            dir: dir.to_path_buf(),
            socket: dir.join("docker.sock"),
            containerd: None,
            dockerd: None,
        };
        d.spawn_containerd();
        d.spawn_dockerd();
        d
    }

    fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    fn spawn_containerd(&mut self) {
        let (root, state) = (
            self.dir.join("containerd-root"),
            self.dir.join("containerd-state"),
        );
        let config = self.dir.join("containerd.toml");
        std::fs::write(
            &config,
            format!(
                "version = 2\nroot = \"{}\"\nstate = \"{}\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
                 [grpc]\n  address = \"{}\"\n[ttrpc]\n  address = \"{}.ttrpc\"\n[debug]\n  address = \"\"\n[metrics]\n  address = \"\"\n",
                root.display(),
                state.display(),
                self.containerd_socket().display(),
                self.containerd_socket().display(),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(self.dir.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("containerd (Debian package containerd, brought by docker.io)");
        self.containerd = Some(child);
        let start = Instant::now();
        while !self.containerd_socket().exists() {
            assert!(
                start.elapsed() < Duration::from_secs(READY_SECONDS_MAX),
                "containerd did not listen: {}",
                std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn spawn_dockerd(&mut self) {
        let config = self.dir.join("daemon.json");
        std::fs::write(&config, "{}").unwrap();
        let log = std::fs::File::create(self.dir.join("dockerd.log")).unwrap();
        let child = Command::new("dockerd")
            .arg("--config-file")
            .arg(&config)
            .arg("--data-root")
            .arg(self.dir.join("data"))
            .arg("--exec-root")
            .arg(self.dir.join("exec"))
            .arg("--pidfile")
            .arg(self.dir.join("dockerd.pid"))
            .arg("-H")
            .arg(format!("unix://{}", self.socket.display()))
            .arg("--containerd")
            .arg(self.containerd_socket())
            .args([
                "--storage-driver=vfs",
                "--bridge=none",
                "--iptables=false",
                "--ip-masq=false",
                "--ip-forward=false",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("dockerd (Debian package docker.io)");
        self.dockerd = Some(child);
        let start = Instant::now();
        while !self.docker(&["version"]).status.success() {
            assert!(
                start.elapsed() < Duration::from_secs(READY_SECONDS_MAX),
                "dockerd did not answer: {}",
                std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops dockerd (SIGTERM: it stops its containers first), as an upgrade or a reboot
    /// does; containerd keeps running.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.dockerd.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&c),
                rustix::process::Signal::TERM,
            );
            wait_bounded(&mut c, Duration::from_secs(30));
        }
    }

    /// Stops dockerd and starts it again, waiting until it answers.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn_dockerd();
    }

    /// `docker -H unix://SOCKET ARGS`, with a client configuration of this engine's own.
    pub fn docker(&self, args: &[&str]) -> Output {
        Command::new(docker_cli())
            .env("DOCKER_CONFIG", self.dir.join("cli"))
            .arg("-H")
            .arg(format!("unix://{}", self.socket.display()))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("docker (Debian package docker.io)")
    }
}

/// A tar of a root file system holding busybox-static as `/bin/busybox` and the applets
/// the tests run (`sh`, `sleep`), made under `dir`.
pub fn busybox_rootfs_tar(dir: &Path) -> PathBuf {
    let root = busybox_rootfs(dir);
    let tar = dir.join("busybox.tar");
    let o = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    tar
}

/// A root file system under `dir` holding busybox-static as `/bin/busybox` and the applets
/// the tests run (`sh`, `sleep`, `true`).
pub fn busybox_rootfs(dir: &Path) -> PathBuf {
    let root = dir.join("rootfs");
    std::fs::create_dir_all(root.join("bin")).unwrap();
    crate::copy_executable(Path::new("/bin/busybox"), &root.join("bin/busybox"), "");
    for applet in ["sh", "sleep", "true"] {
        let link = root.join("bin").join(applet);
        if !link.exists() {
            std::os::unix::fs::symlink("busybox", link).unwrap();
        }
    }
    root
}

/// A containerd of the test's own (its root, state, sockets; CRI off; its restart monitor
/// acting at containerd's start and then hourly, so that what it would start stays still
/// until the test restarts containerd, as an upgrade or a reboot does), its containers in a namespace of the test's own (their cgroups are
/// `/NAMESPACE/ID`, host-wide), run with `ctr` from a busybox root file system.
#[derive(Debug)]
pub struct Containerd {
    pub dir: PathBuf,
    /// containerd's gRPC socket: what a manifest names (`unix://` + this).
    pub socket: PathBuf,
    /// The namespace of this engine's containers.
    pub namespace: String,
    child: Option<Child>,
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if self.child.is_some() {
            let ls = |what: &str| {
                let o = self.ctr(&[what, "ls", "-q"]);
                String::from_utf8_lossy(&o.stdout).into_owned()
            };
            for id in ls("task").lines() {
                let _ = self.ctr(&["task", "kill", "-a", "-s", "KILL", id]);
                let _ = self.ctr(&["task", "rm", "-f", id]);
            }
            for id in ls("container").lines() {
                let _ = self.ctr(&["container", "rm", id]);
            }
        }
        self.stop();
        // Whatever still runs in this namespace's cgroups (containerd was stopped with
        // tasks left, or a task's container record was deleted under it), then their
        // directories, in the v2 hierarchy and (a hybrid host) in each v1 one; then the
        // shims.
        let root = repoch_sys::cgroup::mount_point().unwrap_or_else(|_| "/sys/fs/cgroup".into());
        kill_cgroups_below(&root.join(&self.namespace));
        for h in std::fs::read_dir("/sys/fs/cgroup")
            .into_iter()
            .flatten()
            .flatten()
        {
            remove_cgroups_below(&h.path().join(&self.namespace));
        }
        let dir = self.dir.display().to_string();
        let _ = Command::new("pkill").args(["-f", &dir]).status();
    }
}

/// Kills everything in each cgroup directly below `dir` (`cgroup.kill`) and waits, at most
/// 5 s each, until it is empty.
fn kill_cgroups_below(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let _ = std::fs::write(e.path().join("cgroup.kill"), "1");
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            let events =
                std::fs::read_to_string(e.path().join("cgroup.events")).unwrap_or_default();
            if events.contains("populated 0") {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Removes the (empty) cgroups directly below `dir`, and `dir`.
fn remove_cgroups_below(dir: &Path) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir(e.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

impl Containerd {
    /// Starts containerd under `dir` and waits until it listens.
    pub fn start(dir: &Path) -> Containerd {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        std::fs::create_dir_all(dir).unwrap();
        busybox_rootfs(dir);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut c = Containerd {
            dir: dir.to_path_buf(),
            socket: dir.join("containerd.sock"),
            namespace: format!("repoch-t{}-{n}", std::process::id()),
            child: None,
        };
        let (root, state) = (dir.join("root"), dir.join("state"));
        std::fs::write(
            dir.join("containerd.toml"),
            format!(
                "version = 2\nroot = \"{}\"\nstate = \"{}\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
                 [grpc]\n  address = \"{}\"\n[ttrpc]\n  address = \"{}.ttrpc\"\n[debug]\n  address = \"\"\n\
                 [metrics]\n  address = \"\"\n[plugins.\"io.containerd.internal.v1.restart\"]\n  interval = \"1h\"\n",
                root.display(),
                state.display(),
                c.socket.display(),
                c.socket.display(),
            ),
        )
        .unwrap();
        c.spawn();
        c
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("containerd.log"))
            .unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(self.dir.join("containerd.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("containerd (Debian package containerd, brought by docker.io)");
        self.child = Some(child);
        let start = Instant::now();
        while !self.ctr(&["version"]).status.success() {
            assert!(
                start.elapsed() < Duration::from_secs(READY_SECONDS_MAX),
                "containerd did not answer: {}",
                std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops containerd (its shims, and so its tasks, keep running).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&c),
                rustix::process::Signal::TERM,
            );
            wait_bounded(&mut c, Duration::from_secs(10));
        }
    }

    /// Stops containerd and starts it again (as an upgrade or a reboot does).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// `ctr --address SOCKET --namespace NAMESPACE ARGS`.
    pub fn ctr(&self, args: &[&str]) -> Output {
        Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", &self.namespace])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ctr (Debian package containerd)")
    }

    /// [`Containerd::ctr`] that must succeed: its stdout, trimmed.
    pub fn ok(&self, args: &[&str]) -> String {
        let o = self.ctr(args);
        assert!(
            o.status.success(),
            "ctr {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    }

    /// The manifest's name of container `id`: `containerd:NAMESPACE/ID`.
    pub fn spelled(&self, id: &str) -> String {
        format!("containerd:{}/{id}", self.namespace)
    }

    /// `ctr run -d` of `sleep` in the busybox root file system, its own network namespace,
    /// labelled for the restart monitor when `restart`.
    pub fn run_sleeping(&self, id: &str, restart: bool) {
        self.sleeping("run", id, restart);
    }

    /// `ctr container create` of the same: a container without a task.
    pub fn create_sleeping(&self, id: &str) {
        self.sleeping("container", id, false);
    }

    fn sleeping(&self, how: &str, id: &str, restart: bool) {
        let rootfs = self.dir.join("rootfs");
        let mut args = match how {
            "run" => vec!["run", "-d"],
            _ => vec!["container", "create"],
        };
        if restart {
            args.extend(["--label", "containerd.io/restart.status=running"]);
        }
        // No image: no PATH in the environment, so the program by its path.
        let command = [id, "/bin/sleep", "1000000"];
        args.extend(["--rootfs", rootfs.to_str().unwrap()]);
        args.extend(command);
        self.ok(&args);
    }

    /// The status and pid of container `id`'s task (`ctr task ls`), if it has one.
    pub fn task(&self, id: &str) -> Option<(String, u32)> {
        self.ok(&["task", "ls"]).lines().skip(1).find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.first() == Some(&id)).then(|| (f[2].to_owned(), f[1].parse().unwrap()))
        })
    }

    /// Kills container `id`'s task and deletes it, waiting for it to stop.
    pub fn delete_task(&self, id: &str) {
        let _ = self.ctr(&["task", "kill", "-s", "KILL", id]);
        let start = Instant::now();
        while self.task(id).is_some_and(|(s, _)| s != "STOPPED") {
            assert!(
                start.elapsed() < Duration::from_secs(READY_SECONDS_MAX),
                "{id} did not stop"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.ctr(&["task", "rm", id]);
    }

    /// The manifest's `[containment.engines]` line for this engine.
    pub fn engines_toml(&self) -> String {
        format!("containerd = \"unix://{}\"", self.socket.display())
    }

    /// Deletes container `id`'s record under its task and creates it again (`ctr container
    /// create --config`) with its spec but for `linux.cgroupsPath`, naming `runtime`: a
    /// record that leads tasks.Get to another runtime than its task's and names an empty
    /// cgroup.
    pub fn recreate_record(&self, id: &str, runtime: &str, cgroups_path: &str) {
        let info: serde_json::Value =
            serde_json::from_str(&self.ok(&["container", "info", id])).unwrap();
        let mut spec = info["Spec"].clone();
        spec["linux"]["cgroupsPath"] = cgroups_path.into();
        let path = self.dir.join(format!("{id}.spec.json"));
        std::fs::write(&path, spec.to_string()).unwrap();
        self.delete_record(id);
        let config = path.to_str().unwrap();
        self.ok(&[
            "container",
            "create",
            "--runtime",
            runtime,
            "--config",
            config,
            id,
        ]);
    }

    /// Deletes container `id`'s record through containerd's API, whatever its task does
    /// (containerd's containers service does not look; `ctr container rm` refuses a
    /// container with a task, any other client need not).
    pub fn delete_record(&self, id: &str) {
        #[derive(Clone, PartialEq, prost::Message)]
        struct DeleteContainerRequest {
            #[prost(string, tag = "1")]
            id: String,
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let path = self.socket.clone();
        rt.block_on(async move {
            let connector = tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move {
                    let s = tokio::net::UnixStream::connect(path).await?;
                    Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                }
            });
            let channel = tonic::transport::Endpoint::from_static("http://containerd")
                .connect_with_connector(connector)
                .await
                .expect("containerd's socket");
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready().await.unwrap();
            let mut req = tonic::Request::new(DeleteContainerRequest { id: id.into() });
            req.metadata_mut()
                .insert("containerd-namespace", self.namespace.parse().unwrap());
            let method = "/containerd.services.containers.v1.Containers/Delete";
            let codec = tonic_prost::ProstCodec::<DeleteContainerRequest, ()>::default();
            grpc.unary(req, method.parse().unwrap(), codec)
                .await
                .expect("containers.Delete");
        });
    }
}

/// A podman API service of the test's own (`podman system service` on a socket under its
/// directory, its own root, runroot, tmpdir and events log; the `vfs` driver, cgroupfs),
/// and the podman CLI with the same storage: what it does, the service reports.
#[derive(Debug)]
pub struct Podman {
    pub dir: PathBuf,
    /// The service's API socket: what a manifest names (`unix://` + this).
    pub socket: PathBuf,
    service: Option<Child>,
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.podman(&["rm", "--all", "--force", "--time", "0"]);
        self.stop();
        let dir = self.dir.display().to_string();
        let _ = Command::new("pkill").args(["-f", &dir]).status();
    }
}

impl Podman {
    /// Starts the service under `dir` and waits until it answers.
    pub fn start(dir: &Path) -> Podman {
        std::fs::create_dir_all(dir).unwrap();
        let mut p = Podman {
            dir: dir.to_path_buf(),
            socket: dir.join("podman.sock"),
            service: None,
        };
        p.spawn_service();
        p
    }

    fn command(&self) -> Command {
        let mut c = Command::new("podman");
        for (flag, sub) in [
            ("--root", "root"),
            ("--runroot", "run"),
            ("--tmpdir", "tmp"),
            ("--volumepath", "volumes"),
            ("--network-config-dir", "net"),
        ] {
            c.arg(flag).arg(self.dir.join(sub));
        }
        c.args([
            "--cgroup-manager",
            "cgroupfs",
            "--events-backend",
            "file",
            "--storage-driver",
            "vfs",
        ]);
        c
    }

    fn spawn_service(&mut self) {
        let log = std::fs::File::create(self.dir.join("service.log")).unwrap();
        let child = self
            .command()
            .args(["system", "service", "--time=0"])
            .arg(format!("unix://{}", self.socket.display()))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("podman (Debian package podman)");
        self.service = Some(child);
        let start = Instant::now();
        while !self.socket.exists() {
            assert!(
                start.elapsed() < Duration::from_secs(READY_SECONDS_MAX),
                "podman's service did not listen: {}",
                std::fs::read_to_string(self.dir.join("service.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the API service (the containers keep their state).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.service.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&c),
                rustix::process::Signal::TERM,
            );
            wait_bounded(&mut c, Duration::from_secs(10));
        }
    }

    /// `podman ARGS` on this service's storage.
    pub fn podman(&self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("podman (Debian package podman)")
    }

    /// What `podman-restart.service` runs at boot: every container whose policy is
    /// `always` started.
    pub fn restart_at_boot(&self) {
        self.ok(&["start", "--all", "--filter", "restart-policy=always"]);
    }
}

/// What the tests ask of an engine of their own, Docker's or podman's alike: its CLI on
/// its own storage and socket, and what a manifest names it by.
pub trait Engine {
    /// `docker` or `podman`: the manifest's engine and `[containment.engines]` key.
    fn name(&self) -> &'static str;
    /// The engine's API socket.
    fn socket(&self) -> &Path;
    /// Where its files go (the image's rootfs among them).
    fn dir(&self) -> &Path;
    /// The engine's CLI with ARGS, on this engine.
    fn cli(&self, args: &[&str]) -> Output;

    /// [`Engine::cli`] that must succeed: its stdout, trimmed.
    fn ok(&self, args: &[&str]) -> String {
        let o = self.cli(args);
        assert!(
            o.status.success(),
            "{} {args:?}: {}",
            self.name(),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).trim().to_owned()
    }

    /// [`Engine::cli`] with one more environment variable (`(NAME, VALUE)`).
    fn cli_with_env(&self, env: (&str, &str), args: &[&str]) -> Output;

    /// Imports [`BUSYBOX_IMAGE`] from busybox-static (offline).
    fn import_busybox(&self) {
        let tar = busybox_rootfs_tar(self.dir());
        self.ok(&["import", tar.to_str().unwrap(), BUSYBOX_IMAGE]);
    }

    /// `run -d` of `sleep` in the busybox image, no network, with `restart`; its id.
    /// (The limits are set: podman run as root cannot raise them past the host's here.)
    fn run_sleeping(&self, name: &str, restart: &str) -> String {
        self.ok(&[
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "none",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            &format!("--restart={restart}"),
            BUSYBOX_IMAGE,
            "sleep",
            "1000000",
        ])
    }

    /// `inspect NAME`'s one object.
    fn inspect(&self, name: &str) -> serde_json::Value {
        let v: serde_json::Value = serde_json::from_str(&self.ok(&["inspect", name])).unwrap();
        v[0].clone()
    }

    /// The manifest's `[containment.engines]` line for this engine.
    fn engines_toml(&self) -> String {
        format!("{} = \"unix://{}\"", self.name(), self.socket().display())
    }
}

impl Engine for Dockerd {
    fn name(&self) -> &'static str {
        "docker"
    }
    fn socket(&self) -> &Path {
        &self.socket
    }
    fn dir(&self) -> &Path {
        &self.dir
    }
    fn cli(&self, args: &[&str]) -> Output {
        self.docker(args)
    }
    fn cli_with_env(&self, (name, value): (&str, &str), args: &[&str]) -> Output {
        Command::new(docker_cli())
            .env("DOCKER_CONFIG", self.dir.join("cli"))
            .env(name, value)
            .arg("-H")
            .arg(format!("unix://{}", self.socket.display()))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("docker CLI")
    }
}

impl Engine for Podman {
    fn name(&self) -> &'static str {
        "podman"
    }
    fn socket(&self) -> &Path {
        &self.socket
    }
    fn dir(&self) -> &Path {
        &self.dir
    }
    fn cli(&self, args: &[&str]) -> Output {
        self.podman(args)
    }
    fn cli_with_env(&self, (name, value): (&str, &str), args: &[&str]) -> Output {
        self.command()
            .env(name, value)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("podman (Debian package podman)")
    }
}

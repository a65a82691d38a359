//! A real etcd cluster of the test's own: `etcd` from Debian's `etcd-server`, three members
//! on `127.0.0.1` ports, mutual TLS on both the client and the peer side (certificates made
//! by `openssl` for this cluster alone), data directories under the test's sandbox. Every
//! member is killed on drop. Members can be killed, stopped, continued and restarted from
//! their data directories.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::*;

/// How long a cluster (or a restarted member) may take to serve.
pub const ETCD_READY_SECONDS_MAX: u64 = 60;

/// One member: its name, ports and (while it runs) its process.
#[derive(Debug)]
pub struct Member {
    pub name: String,
    /// The address it listens on: `127.0.0.1`, or one of a network namespace of the test's.
    pub addr: String,
    /// The network namespace it runs in (`ip netns exec`), if not this one.
    pub netns: Option<String>,
    /// Another address it serves clients on, beside `addr` (its certificate still names
    /// `addr`: a client reaching it there through a relay checks the name it dialled).
    pub client_addr: Option<String>,
    pub client_port: u16,
    pub peer_port: u16,
    pub child: Option<Child>,
}

impl Member {
    pub fn endpoint(&self) -> String {
        format!("https://{}:{}", self.addr, self.client_port)
    }
    /// Every client URL it listens on.
    fn listen_urls(&self) -> String {
        match &self.client_addr {
            Some(a) => format!("{},https://{a}:{}", self.endpoint(), self.client_port),
            None => self.endpoint(),
        }
    }
    fn peer_url(&self) -> String {
        format!("https://{}:{}", self.addr, self.peer_port)
    }
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}

/// How a member starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spawn {
    /// A member of a new cluster.
    New,
    /// From its data directory.
    Existing,
    /// From its data directory, alone: the one member of a cluster with its old id.
    ForceNewCluster,
}

/// Keys one transaction of [`Etcd::put_many`] puts.
pub const PUT_MANY_TXN: usize = 10_000;

/// Puts [`Etcd::fill_to_revision`] makes at most: a record's revision in a test's cluster.
pub const REVISION_FILLERS_MAX: usize = 10_000;

/// A running cluster and the credentials a client uses.
#[derive(Debug)]
pub struct Etcd {
    pub dir: PathBuf,
    pub members: Vec<Member>,
    token: String,
    /// The network namespace etcdctl runs in (one that reaches every member).
    ctl_netns: Option<String>,
    /// More flags for every member (`--quota-backend-bytes`, ...).
    extra: Vec<String>,
    /// Every host granted its role ([`Etcd::grant_host`]): (prefix, fleet, host).
    granted: std::sync::Mutex<Vec<(String, String, String)>>,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(mut c) = m.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("openssl (Debian package openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, one server certificate for every member (`IP:127.0.0.1` and every address of
/// `addrs`, both server and client use: members authenticate each other with it), and the
/// administrator's client certificate (CN `root`: etcd's root user once authentication is
/// on). Each host's own certificate is made by [`Etcd::host_credential`].
fn certificates(dir: &Path, addrs: &[&str]) {
    let mut san = String::from("subjectAltName=IP:127.0.0.1,DNS:localhost");
    for a in addrs.iter().filter(|a| **a != "127.0.0.1") {
        san.push_str(&format!(",IP:{a}"));
    }
    std::fs::create_dir_all(dir).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=repoch test etcd CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    signed_certificate(dir, "member", "etcd member", &san);
    client_certificate(dir, "client", "root");
    // The keys as an operator keeps them: root's, 0600 (repochd refuses others).
    for key in ["ca.key", "member.key"] {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.join(key), std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// A certificate `NAME.pem` (and its key `NAME.key`, 0600) with common name `cn` and the
/// extensions `san`, signed by the CA of `dir`.
fn signed_certificate(dir: &Path, name: &str, cn: &str, san: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    let ext = format!("{san}\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n");
    std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
            "-out",
            &format!("{name}.pem"),
        ],
    );
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        dir.join(format!("{name}.key")),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
}

/// A client certificate `NAME.pem` with common name `cn`: etcd's user of that name once
/// authentication is on.
fn client_certificate(dir: &Path, name: &str, cn: &str) {
    signed_certificate(dir, name, cn, &format!("subjectAltName=DNS:{cn}"));
}

impl Etcd {
    /// Starts a three-member cluster under `dir` and waits until it serves.
    pub fn start(dir: &Path) -> Etcd {
        Etcd::start_n(dir, 3)
    }

    /// Every member with `flags` too: all of them restarted with these.
    pub fn with_flags(mut self, flags: &[&str]) -> Etcd {
        self.extra = flags.iter().map(|f| (*f).to_owned()).collect();
        let all: Vec<usize> = (0..self.members.len()).collect();
        for &i in &all {
            self.restart(i);
        }
        self.wait_ready(&all);
        self
    }

    pub fn start_n(dir: &Path, n: usize) -> Etcd {
        Etcd::start_placed(dir, &vec![("127.0.0.1", None); n], None)
    }

    /// Starts one member per `(address, network namespace)` of `placement`; etcdctl runs
    /// in `ctl_netns` (one that reaches every member).
    pub fn start_placed(
        dir: &Path,
        placement: &[(&str, Option<&str>)],
        ctl_netns: Option<&str>,
    ) -> Etcd {
        let n = placement.len();
        let addrs: Vec<&str> = placement.iter().map(|(a, _)| *a).collect();
        certificates(&dir.join("tls"), &addrs);
        let token = format!("repoch-test-{}-{}", std::process::id(), fastrand_u64());
        let members = placement
            .iter()
            .enumerate()
            .map(|(i, (addr, netns))| Member {
                name: format!("m{i}"),
                addr: (*addr).to_owned(),
                netns: netns.map(str::to_owned),
                client_addr: None,
                client_port: free_port(false),
                peer_port: free_port(false),
                child: None,
            })
            .collect();
        let mut etcd = Etcd {
            dir: dir.to_path_buf(),
            members,
            token,
            ctl_netns: ctl_netns.map(str::to_owned),
            extra: Vec::new(),
            granted: std::sync::Mutex::default(),
        };
        for i in 0..n {
            etcd.spawn(i, Spawn::New);
        }
        etcd.wait_ready(&(0..n).collect::<Vec<_>>());
        etcd.enable_auth();
        etcd
    }

    /// A second cluster from this one's template, as an operator who rebuilds or copies a
    /// cluster starts it: the same member names, addresses, ports, cluster token and
    /// certificates (copied), new data directories under `dir`, in network namespace `ns`
    /// (where the same addresses and ports are free). etcd derives the cluster and member
    /// ids from these, so the twin answers with this cluster's ids.
    pub fn start_twin(&self, dir: &Path, ns: &str) -> Etcd {
        self.start_twin_serving(dir, ns, None)
    }

    /// [`Etcd::start_twin`], its members serving clients on `client_addr` too (an address
    /// of `ns` reachable from here).
    pub fn start_twin_serving(&self, dir: &Path, ns: &str, client_addr: Option<&str>) -> Etcd {
        std::fs::create_dir_all(dir.join("tls")).unwrap();
        for e in std::fs::read_dir(self.dir.join("tls")).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.join("tls").join(e.file_name())).unwrap();
        }
        let members = self
            .members
            .iter()
            .map(|m| Member {
                name: m.name.clone(),
                addr: m.addr.clone(),
                netns: Some(ns.to_owned()),
                client_addr: client_addr.map(str::to_owned),
                client_port: m.client_port,
                peer_port: m.peer_port,
                child: None,
            })
            .collect();
        let mut twin = Etcd {
            dir: dir.to_path_buf(),
            members,
            token: self.token.clone(),
            ctl_netns: Some(ns.to_owned()),
            extra: self.extra.clone(),
            granted: std::sync::Mutex::new(self.granted.lock().unwrap().clone()),
        };
        let all: Vec<usize> = (0..twin.members.len()).collect();
        for &i in &all {
            twin.spawn(i, Spawn::New);
        }
        twin.wait_ready(&all);
        twin.restore_auth();
        twin
    }

    /// A copy of member `i`'s data (taken while it is stopped), started under `dir` alone
    /// with `--force-new-cluster`, serving clients on `client_port`: what whoever holds one
    /// member's disk can make. It answers as a one-member cluster with this cluster's id
    /// and data.
    pub fn fork_member(&self, i: usize, dir: &Path, client_port: u16) -> Etcd {
        std::fs::create_dir_all(dir).unwrap();
        self.signal(i, rustix::process::Signal::STOP);
        let from = self.dir.join(format!("data-{}", self.members[i].name));
        let to = dir.join(format!("data-{}", self.members[i].name));
        let copied = Command::new("cp").arg("-a").arg(&from).arg(&to).status();
        self.signal(i, rustix::process::Signal::CONT);
        assert!(copied.unwrap().success(), "cp -a {}", from.display());
        std::os::unix::fs::symlink(self.dir.join("tls"), dir.join("tls")).unwrap();
        let m = &self.members[i];
        let mut fork = Etcd {
            dir: dir.to_path_buf(),
            members: vec![Member {
                name: m.name.clone(),
                addr: m.addr.clone(),
                netns: m.netns.clone(),
                client_addr: None,
                client_port,
                peer_port: free_port(false),
                child: None,
            }],
            token: self.token.clone(),
            ctl_netns: self.ctl_netns.clone(),
            extra: self.extra.clone(),
            granted: std::sync::Mutex::new(self.granted.lock().unwrap().clone()),
        };
        fork.spawn(0, Spawn::ForceNewCluster);
        fork.wait_ready(&[0]);
        fork
    }

    /// Every member killed, its data deleted, and the cluster started again from its
    /// template (the same names, ports and token, users and roles): a cluster rebuilt after
    /// a data loss.
    pub fn rebuild(&mut self) {
        self.rebuild_bare();
        self.restore_auth();
    }

    /// [`Etcd::rebuild`] from a template that holds no users, roles or authentication: a
    /// cluster any client certificate of its CA may write all of.
    pub fn rebuild_bare(&mut self) {
        let all: Vec<usize> = (0..self.members.len()).collect();
        for &i in &all {
            self.kill(i);
            let data = self.dir.join(format!("data-{}", self.members[i].name));
            std::fs::remove_dir_all(&data).unwrap();
        }
        for &i in &all {
            self.spawn(i, Spawn::New);
        }
        self.wait_ready(&all);
    }

    /// Puts values of 512 KiB under `prefix` until etcd refuses one for its space quota
    /// (a cluster started with a small `--quota-backend-bytes`), so that the `NOSPACE`
    /// alarm is raised; at most 64 puts.
    pub fn fill_until_nospace(&self, prefix: &str) {
        let filler = self.dir.join("filler");
        std::fs::write(&filler, vec![b'f'; 512 * 1024]).unwrap();
        for i in 0..64 {
            let o = self.put_file(&format!("{prefix}{i}"), &filler);
            if !o.status.success() {
                let why = String::from_utf8_lossy(&o.stderr);
                assert!(why.contains("space exceeded"), "{why}");
                break;
            }
        }
        assert!(self.alarmed(), "the NOSPACE alarm is raised");
    }

    /// Whether the `NOSPACE` alarm is raised.
    pub fn alarmed(&self) -> bool {
        let all: Vec<usize> = (0..self.members.len()).collect();
        let o = self.etcdctl(&all, &["alarm", "list"]);
        String::from_utf8_lossy(&o.stdout).contains("NOSPACE")
    }

    /// What an operator does for a full cluster: deletes what `prefix` holds, compacts,
    /// defragments every member, disarms the alarm.
    pub fn clear_nospace(&self, prefix: &str) {
        let all: Vec<usize> = (0..self.members.len()).collect();
        let ok = |o: std::process::Output| {
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            o
        };
        ok(self.etcdctl(&all, &["del", "--prefix", prefix]));
        let status = ok(self.etcdctl(&[0], &["endpoint", "status", "-w", "json"]));
        let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        let rev = v[0]["Status"]["header"]["revision"].as_u64().unwrap();
        ok(self.etcdctl(&all, &["compact", &rev.to_string()]));
        for i in all.iter().copied() {
            ok(self.etcdctl(&[i], &["defrag"]));
        }
        ok(self.etcdctl(&all, &["alarm", "disarm"]));
        assert!(!self.alarmed());
    }

    /// The cluster id that member `i` answers with (`endpoint status`).
    pub fn cluster_id(&self, i: usize) -> u64 {
        let out = self.etcdctl(&[i], &["endpoint", "status", "-w", "json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "endpoint status: {e}: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        v[0]["Status"]["header"]["cluster_id"].as_u64().unwrap()
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("tls/ca.pem")
    }
    pub fn client_cert(&self) -> PathBuf {
        self.dir.join("tls/client.pem")
    }
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("tls/client.key")
    }
    /// A client's [`repoch_registry::Spec`] for this cluster, with repoch's credentials.
    pub fn spec(&self) -> repoch_registry::Spec {
        repoch_registry::Spec {
            endpoints: self.endpoints(),
            ca: std::fs::read(self.ca()).unwrap(),
            cert: std::fs::read(self.client_cert()).unwrap(),
            key: std::fs::read(self.client_key()).unwrap(),
        }
    }
    /// The [`repoch_registry::Spec`] of host `host`'s own credential (its user's least
    /// privilege): what the holder of that one host's etcd credential can do.
    pub fn spec_as(&self, host: &str) -> repoch_registry::Spec {
        let (cert, key) = self.host_credential(host);
        repoch_registry::Spec {
            cert: std::fs::read(cert).unwrap(),
            key: std::fs::read(key).unwrap(),
            ..self.spec()
        }
    }
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// The manifest's `[registry]` table for this cluster: as an operator writes it, with
    /// the fleet's id when the fleet is established (its record read from the cluster),
    /// without when this host will establish it; the host's own credential, its user
    /// granted the least privilege ([`Etcd::grant_host`]).
    pub fn registry_toml(&self, fleet: &str, host: &str, prefix: &str) -> String {
        let id = self.fleet_id(prefix, fleet);
        self.registry_toml_as(fleet, host, prefix, id.as_deref())
    }

    /// The same with `fleet_id` as given (none: this host establishes the fleet).
    pub fn registry_toml_as(
        &self,
        fleet: &str,
        host: &str,
        prefix: &str,
        fleet_id: Option<&str>,
    ) -> String {
        let eps: Vec<String> = self.endpoints().iter().map(|e| format!("{e:?}")).collect();
        let id = fleet_id.map_or_else(String::new, |id| format!("fleet_id = {id:?}\n"));
        let (cert, key) = self.host_credential(host);
        self.grant_host(prefix, fleet, host);
        format!(
            "[registry]\nendpoints = [{}]\nca = {:?}\ncert = {:?}\nkey = {:?}\nprefix = {prefix:?}\nfleet = {fleet:?}\nhost = {host:?}\n{id}",
            eps.join(", "),
            self.ca().display().to_string(),
            cert.display().to_string(),
            key.display().to_string(),
        )
    }

    /// Host `host`'s client certificate and key (CN `host`: etcd's user of that name once
    /// authentication is on), made on first use.
    pub fn host_credential(&self, host: &str) -> (PathBuf, PathBuf) {
        let tls = self.dir.join("tls");
        let (cert, key) = (
            tls.join(format!("host-{host}.pem")),
            tls.join(format!("host-{host}.key")),
        );
        if !cert.exists() {
            client_certificate(&tls, &format!("host-{host}"), host);
        }
        (cert, key)
    }

    /// Authentication on, as OPERATOR.md's "Roles" sets it up: the `root` user (the
    /// administrator's certificate), then `auth enable`.
    pub fn enable_auth(&self) {
        let all: Vec<usize> = (0..self.members.len()).collect();
        for args in [
            &["user", "add", "root", "--no-password"][..],
            &["user", "grant-role", "root", "root"],
            &["auth", "enable"],
        ] {
            let o = self.etcdctl(&all, args);
            assert!(
                o.status.success(),
                "etcdctl {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }

    /// Host `host` of fleet `fleet` under `prefix` given the least privilege OPERATOR.md's
    /// "Roles" grants: read on the prefix, write on its own host record and on the fleet
    /// epochs. Its user is its certificate's CN.
    pub fn grant_host(&self, prefix: &str, fleet: &str, host: &str) {
        let role = format!("repoch-{host}");
        let own = format!("{prefix}/hosts/{fleet}/{host}");
        let read = format!("{prefix}/");
        let epochs = format!("{prefix}/epochs/");
        self.etcdctl_quiet(&["role", "add", &role]);
        self.etcdctl_quiet(&["user", "add", host, "--no-password"]);
        for args in [
            &["role", "grant-permission", &role, "read", &read, "--prefix"][..],
            &["role", "grant-permission", &role, "readwrite", &own],
            &[
                "role",
                "grant-permission",
                &role,
                "readwrite",
                &epochs,
                "--prefix",
            ],
        ] {
            let o = self.etcdctl_live(args);
            assert!(
                o.status.success(),
                "etcdctl {args:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        self.etcdctl_quiet(&["user", "grant-role", host, &role]);
        let grant = (prefix.to_owned(), fleet.to_owned(), host.to_owned());
        let mut granted = self.granted.lock().unwrap();
        if !granted.contains(&grant) {
            granted.push(grant);
        }
    }

    /// The users, roles and authentication of this cluster set up again, as its template
    /// holds them: after a rebuild, or in a twin.
    fn restore_auth(&self) {
        self.enable_auth();
        let granted = self.granted.lock().unwrap().clone();
        for (prefix, fleet, host) in granted {
            self.grant_host(&prefix, &fleet, &host);
        }
    }

    /// `etcdctl` against every member that runs.
    pub fn etcdctl_live(&self, args: &[&str]) -> std::process::Output {
        let live: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].child.is_some())
            .collect();
        self.etcdctl(&live, args)
    }

    /// [`Etcd::etcdctl_live`] of a command that may have been made before (a role or user
    /// that exists): its failure is not looked at.
    fn etcdctl_quiet(&self, args: &[&str]) {
        let _ = self.etcdctl_live(args);
    }

    /// The id of `fleet` under `prefix`, as its record in this cluster holds it.
    pub fn fleet_id(&self, prefix: &str, fleet: &str) -> Option<String> {
        use repoch_protocol::Canonical as _;
        let all: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].child.is_some())
            .collect();
        let key = format!("{prefix}/fleets/{fleet}");
        let out = self.etcdctl(&all, &["get", &key, "--print-value-only"]);
        assert!(
            out.status.success(),
            "etcdctl get: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let value = out.stdout.strip_suffix(b"\n")?;
        let record = repoch_protocol::fleet::FleetRecord::from_bytes(value).unwrap();
        Some(record.pin.id.to_string())
    }

    fn spawn(&mut self, i: usize, how: Spawn) {
        let tls = self.dir.join("tls");
        let cluster: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect();
        let m = &self.members[i];
        let data = self.dir.join(format!("data-{}", m.name));
        let log = std::fs::File::create(self.dir.join(format!("{}.log", m.name))).unwrap();
        let t = |f: &str| tls.join(f).display().to_string();
        let mut cmd = in_netns(m.netns.as_deref(), "etcd");
        cmd.args([
            "--name",
            &m.name,
            "--data-dir",
            &data.display().to_string(),
            "--listen-client-urls",
            &m.listen_urls(),
            "--advertise-client-urls",
            &m.endpoint(),
            "--listen-peer-urls",
            &m.peer_url(),
            "--initial-advertise-peer-urls",
            &m.peer_url(),
            "--initial-cluster",
            &cluster.join(","),
            "--initial-cluster-token",
            &self.token,
            "--initial-cluster-state",
            match how {
                Spawn::New => "new",
                Spawn::Existing | Spawn::ForceNewCluster => "existing",
            },
            "--cert-file",
            &t("member.pem"),
            "--key-file",
            &t("member.key"),
            "--trusted-ca-file",
            &t("ca.pem"),
            "--client-cert-auth",
            "--peer-cert-file",
            &t("member.pem"),
            "--peer-key-file",
            &t("member.key"),
            "--peer-trusted-ca-file",
            &t("ca.pem"),
            "--peer-client-cert-auth",
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
            "--listen-metrics-urls",
            "",
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
        if how == Spawn::ForceNewCluster {
            cmd.arg("--force-new-cluster");
        }
        cmd.args(&self.extra);
        let child = cmd.spawn().expect("etcd (Debian package etcd-server)");
        self.members[i].child = Some(child);
    }

    /// `etcdctl` against the members named by index, with this cluster's credentials.
    pub fn etcdctl(&self, members: &[usize], args: &[&str]) -> std::process::Output {
        self.etcdctl_cmd(members, args)
            .output()
            .expect("etcdctl (Debian package etcd-client)")
    }

    /// `etcdctl put KEY` of the bytes of `file` (read on its standard input, as etcdctl
    /// takes a value of any size), against every member that runs.
    pub fn put_file(&self, key: &str, file: &Path) -> std::process::Output {
        self.put_file_with(key, file, &[])
    }

    /// [`Etcd::put_file`] with host `host`'s credential (its etcd user), not the
    /// administrator's: what the holder of that one credential can write.
    pub fn put_file_as(&self, host: &str, key: &str, file: &Path) -> std::process::Output {
        let (cert, key_file) = self.host_credential(host);
        let credential = [
            format!("--cert={}", cert.display()),
            format!("--key={}", key_file.display()),
        ];
        self.put_file_with(key, file, &credential)
    }

    /// `etcdctl put KEY` of `file`'s bytes, `flags` after the cluster's own (etcdctl takes
    /// a flag's last value).
    fn put_file_with(&self, key: &str, file: &Path, flags: &[String]) -> std::process::Output {
        let live: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].child.is_some())
            .collect();
        self.etcdctl_cmd(&live, &["put", key])
            .args(flags)
            .stdin(std::fs::File::open(file).unwrap())
            .output()
            .expect("etcdctl (Debian package etcd-client)")
    }

    /// Keys put under `prefix` by the administrator until the cluster's revision is
    /// `revision - 1`, so that its next write lands at `revision`: what a writer does to
    /// put a record back at the revision it was created at.
    pub fn fill_to_revision(&self, prefix: &str, revision: i64) {
        for n in 0..REVISION_FILLERS_MAX {
            let out = self.etcdctl_live(&["get", "/", "-w", "json"]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            if v["header"]["revision"].as_i64().unwrap() >= revision - 1 {
                return;
            }
            let o = self.etcdctl_live(&["put", &format!("{prefix}/epochs/filler-{n}"), "x"]);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        panic!("revision {revision} not reached in {REVISION_FILLERS_MAX} puts");
    }

    /// Puts `value` at each of `keys`, [`PUT_MANY_TXN`] keys a transaction (`etcdctl txn`
    /// on its standard input): a cluster started with `--max-txn-ops` at least that.
    pub fn put_many(&self, keys: &[String], value: &str) {
        use std::io::Write as _;
        let live: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].child.is_some())
            .collect();
        for chunk in keys.chunks(PUT_MANY_TXN) {
            let mut txn = String::from("\n");
            for k in chunk {
                txn.push_str(&format!("put {k} {value}\n"));
            }
            txn.push_str("\n\n");
            let mut c = self
                .etcdctl_cmd(&live, &["txn"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("etcdctl (Debian package etcd-client)");
            c.stdin.take().unwrap().write_all(txn.as_bytes()).unwrap();
            let o = c.wait_with_output().unwrap();
            assert!(
                o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("SUCCESS"),
                "etcdctl txn: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }

    fn etcdctl_cmd(&self, members: &[usize], args: &[&str]) -> Command {
        let eps: Vec<String> = members
            .iter()
            .map(|&i| self.members[i].endpoint())
            .collect();
        let mut c = in_netns(self.ctl_netns.as_deref(), "etcdctl");
        c.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", eps.join(",")))
            .arg(format!("--cacert={}", self.ca().display()))
            .arg(format!("--cert={}", self.client_cert().display()))
            .arg(format!("--key={}", self.client_key().display()))
            .arg("--command-timeout=3s")
            .args(args);
        c
    }

    /// Waits until every member named answers `endpoint health`.
    pub fn wait_ready(&self, members: &[usize]) {
        let start = Instant::now();
        loop {
            let out = self.etcdctl(members, &["endpoint", "health"]);
            if out.status.success() {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(ETCD_READY_SECONDS_MAX),
                "etcd did not become healthy: {}{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.logs_tail(members)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last lines each member named logged: why one did not serve.
    fn logs_tail(&self, members: &[usize]) -> String {
        const LINES: usize = 8;
        let mut said = String::new();
        for &i in members {
            let name = &self.members[i].name;
            let log =
                std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(LINES)..].join("\n");
            said.push_str(&format!("\n--- {name}.log, last {LINES} lines:\n{tail}"));
        }
        said
    }

    /// `kill -9` of member `i`.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again from its data directory.
    pub fn restart(&mut self, i: usize) {
        self.kill(i);
        self.spawn(i, Spawn::Existing);
    }

    /// Member `i` replaced as an operator replaces one: removed from the cluster (`etcdctl
    /// member remove`), killed and its data deleted; a new member of another name and other
    /// ports added (`etcdctl member add`) and started to join. etcd gives it a new member
    /// id; index `i` is the new member from now on.
    pub fn replace(&mut self, i: usize) {
        let others: Vec<usize> = (0..self.members.len()).filter(|&k| k != i).collect();
        let listed = self.etcdctl(&others, &["member", "list", "-w", "json"]);
        let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
        let name = self.members[i].name.clone();
        let id = listed["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name.as_str())
            .and_then(|m| m["ID"].as_u64())
            .unwrap_or_else(|| panic!("member {name} in {listed}"));
        self.reconfigure(&others, &["member", "remove", &format!("{id:x}")]);
        self.kill(i);
        std::fs::remove_dir_all(self.dir.join(format!("data-{name}"))).unwrap();
        let old = &self.members[i];
        let new = Member {
            name: format!("{name}r"),
            addr: old.addr.clone(),
            netns: old.netns.clone(),
            client_addr: None,
            client_port: free_port(false),
            peer_port: free_port(false),
            child: None,
        };
        let peers = format!("--peer-urls={}", new.peer_url());
        self.reconfigure(&others, &["member", "add", &new.name, &peers]);
        self.members[i] = new;
        self.spawn(i, Spawn::Existing);
        self.wait_ready(&[i]);
    }

    /// `etcdctl ARGS` of a membership change, asked again until etcd takes it: etcd
    /// refuses one while it deems the cluster unhealthy (members connected for less than
    /// its five-second health interval: a cluster just started, a member just removed).
    /// Within the wait for a cluster to serve.
    fn reconfigure(&self, members: &[usize], args: &[&str]) {
        let start = Instant::now();
        loop {
            let out = self.etcdctl(members, args);
            if out.status.success() {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(ETCD_READY_SECONDS_MAX),
                "etcdctl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// SIGSTOP or SIGCONT to member `i`.
    pub fn signal(&self, i: usize, sig: rustix::process::Signal) {
        let pid = self.members[i].pid().expect("the member runs");
        let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
        rustix::process::kill_process(pid, sig).unwrap();
    }

    /// The index of the member that leads now (`endpoint status`, by the members named).
    pub fn leader(&self, members: &[usize]) -> usize {
        let start = Instant::now();
        loop {
            for &i in members {
                let out = self.etcdctl(&[i], &["endpoint", "status", "-w", "json"]);
                let text = String::from_utf8_lossy(&out.stdout);
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
                    let s = &v[0]["Status"];
                    let (leader, me) = (s["leader"].as_u64(), s["header"]["member_id"].as_u64());
                    if leader.is_some() && leader == me {
                        return i;
                    }
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(ETCD_READY_SECONDS_MAX),
                "no leader among {members:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The value at `key` as etcdctl reads it (hex of the raw bytes), with its revisions.
    pub fn get(&self, key: &str) -> Option<serde_json::Value> {
        let all: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].child.is_some())
            .collect();
        let out = self.etcdctl(&all, &["get", key, "-w", "json"]);
        assert!(
            out.status.success(),
            "etcdctl get: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["kvs"].as_array().and_then(|k| k.first().cloned())
    }

    /// `key`'s create revision and value bytes, if it exists ([`Etcd::get`], its value
    /// decoded).
    pub fn value(&self, key: &str) -> Option<(i64, Vec<u8>)> {
        use base64::Engine as _;
        let kv = self.get(key)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(kv["value"].as_str().unwrap())
            .unwrap();
        Some((kv["create_revision"].as_i64().unwrap(), bytes))
    }
}

/// `program`, run in network namespace `netns` (`ip netns exec`: the process that runs is
/// `program` itself) or in this one.
fn in_netns(netns: Option<&str>, program: &str) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, program]);
            c
        }
        None => Command::new(program),
    }
}

pub(crate) fn fastrand_u64() -> u64 {
    let mut b = [0u8; 8];
    rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).unwrap();
    u64::from_le_bytes(b)
}

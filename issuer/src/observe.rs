//! The observers (docs/ARCHITECTURE.md, "Issuance", step 2): lineage, containment, held lock fences, target and
//! consumer executable. Each returns facts from the live system and fails closed: an error,
//! an unknown format or an unreachable controller is a failed fact, never a pass.
//!
//! Facts come in a fixed order and carry nothing volatile when they hold, so observing an
//! unchanged world twice gives the same evidence digest.

use std::os::fd::OwnedFd;
use std::path::Path;

use repoch_protocol::grant::{GrantFence, UnknownOp};
use repoch_protocol::journal::{verify_journal, JournalPins};
use repoch_protocol::limits::JOURNAL_BYTES_MAX;
use repoch_protocol::manifest::{InventoryEntry, Listener, Manifest, Role};
use repoch_protocol::types::evidence_digest;
use repoch_protocol::{Fact, Hash, Identity, Reason};
use rustix::fs::{FlockOperation, OFlags};
use sha2::{Digest as _, Sha256};

use crate::layout::Layout;
use crate::os::{cgroup, net, proc, procfs, systemd};
use crate::storage::{not_regular, open_path, read_all_fd};
use crate::store::fstat_identity;

/// Largest READY file hashed.
pub const READY_BYTES_MAX: u64 = 1024 * 1024;
/// Largest consumer executable hashed.
pub const EXE_BYTES_MAX: u64 = 512 * 1024 * 1024;

/// What one observation found.
#[derive(Debug, Clone)]
pub struct Observation {
    pub facts: Vec<Fact>,
    pub digest: Hash,
    pub ready_sha256: Hash,
    pub frontier_seq: u64,
    pub frontier_hash: Hash,
    pub unknown_ops: Vec<UnknownOp>,
}

impl Observation {
    pub fn failed(&self) -> impl Iterator<Item = &Fact> {
        self.facts.iter().filter(|f| !f.holds())
    }
    pub fn holds(&self) -> bool {
        self.facts.iter().all(Fact::holds)
    }
}

/// A fence acquired and held by this process: never opened twice (closing any fd of a
/// file drops its POSIX locks), handed to the consumer with `SCM_RIGHTS`. Keyed by its
/// manifest entry (path and enrolled identity), never by its position.
#[derive(Debug)]
pub struct HeldFence {
    /// The manifest entry's path.
    path: String,
    /// The manifest entry's enrolled identity.
    enrolled: Identity,
    /// The identity observed through `fd` at acquisition (the same object as `enrolled`).
    identity: Identity,
    fd: OwnedFd,
}

impl HeldFence {
    fn is_for(&self, e: &InventoryEntry) -> bool {
        self.path == e.path && self.enrolled == e.identity
    }
}

/// The fences, held from the first successful observation on: all of the manifest's, in
/// manifest order, or none (a partial set is released, never kept).
#[derive(Debug, Default)]
pub struct Fences {
    held: Vec<HeldFence>,
}

impl Fences {
    /// How many fences are held (all of the manifest's, or none).
    pub fn len(&self) -> usize {
        self.held.len()
    }
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
    /// The held fence for a manifest entry, matched by path and enrolled identity.
    fn of(&self, e: &InventoryEntry) -> Option<&HeldFence> {
        self.held.iter().find(|h| h.is_for(e))
    }
    /// The grant's fence list: path and identity of each held fence, in manifest order.
    pub fn grant_fences(&self) -> Vec<GrantFence> {
        self.held
            .iter()
            .map(|h| GrantFence {
                path: h.path.clone(),
                identity: h.identity,
            })
            .collect()
    }
    /// The fds to dispatch, in the order of `grant_fences`.
    pub fn fds(&self) -> Vec<&OwnedFd> {
        self.held.iter().map(|h| &h.fd).collect()
    }
}

/// What the issuance observes through (`crate::world::World::Observer`): the live
/// [`Observer`], or the checker's scripted world.
pub trait Observe {
    /// Observes everything, in the fixed order. Acquires the fences on first use and keeps
    /// them in `fences`; later observations re-verify the held fences.
    fn observe(&mut self, fences: &mut Fences) -> Observation;
    /// The consumer executable's identity and digest as first observed.
    fn consumer_exe_baseline(&self) -> Option<(Identity, Hash)>;
}

impl Observe for Observer {
    fn observe(&mut self, fences: &mut Fences) -> Observation {
        Observer::observe(self, fences)
    }
    fn consumer_exe_baseline(&self) -> Option<(Identity, Hash)> {
        Observer::consumer_exe_baseline(self)
    }
}

/// The observer of one deployment, for one issuance.
#[derive(Debug)]
pub struct Observer {
    pub manifest: Manifest,
    pub layout: Layout,
    pub systemctl: Vec<String>,
    /// The READY digest the operator approved, or (when none) the first observation's.
    pub approved_ready: Option<Hash>,
    operator_approved: bool,
    /// Consumer executable identity and digest at the first observation.
    consumer_exe: Option<(Identity, Hash)>,
}

fn sha256_fd(fd: &OwnedFd, max: u64) -> Result<Hash, String> {
    use std::io::Read as _;
    let mut f = std::fs::File::from(fd.try_clone().map_err(|e| e.to_string())?);
    use std::io::Seek as _;
    f.seek(std::io::SeekFrom::Start(0))
        .map_err(|e| e.to_string())?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(Hash(h.finalize().into()));
        }
        total += n as u64;
        if total > max {
            return Err(format!("larger than {max} bytes"));
        }
        h.update(&buf[..n]);
    }
}

fn is_eloop(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

impl Observer {
    pub fn new(manifest: Manifest, layout: Layout, approved_ready: Option<Hash>) -> Observer {
        let operator_approved = approved_ready.is_some();
        Observer {
            manifest,
            layout,
            systemctl: systemd::systemctl_command(),
            approved_ready,
            operator_approved,
            consumer_exe: None,
        }
    }

    /// Observes everything, in the fixed order. Acquires the fences on first use and keeps
    /// them in `fences`; later observations re-verify the held fences.
    pub fn observe(&mut self, fences: &mut Fences) -> Observation {
        let mut facts = Vec::new();
        let (frontier_seq, frontier_hash, unknown_ops) = self.lineage(&mut facts);
        self.stores(&mut facts);
        self.units(&mut facts);
        self.cgroups(&mut facts);
        self.listeners(&mut facts);
        self.executables(&mut facts);
        self.fences(fences, &mut facts);
        let ready_sha256 = self.ready(&mut facts);
        self.consumer_exe(&mut facts);
        let digest = evidence_digest(&facts);
        Observation {
            facts,
            digest,
            ready_sha256,
            frontier_seq,
            frontier_hash,
            unknown_ops,
        }
    }

    // ---- lineage ----

    fn lineage(&self, facts: &mut Vec<Fact>) -> (u64, Hash, Vec<UnknownOp>) {
        match self.journal() {
            Err(f) => {
                facts.push(f);
                (0, Hash::ZERO, vec![])
            }
            Ok(f) => {
                let path = &self.manifest.lineage.journal_path;
                facts.push(Fact::ok(
                    "lineage",
                    path,
                    "the enrolled journal, append-only, verified",
                    "verified",
                ));
                let frontier = format!("seq {} hash {}", f.last_seq, f.last_hash);
                facts.push(Fact::ok("lineage-frontier", path, "recorded", &frontier));
                let unknown = format!("{} unknown", f.unknown_ops.len());
                facts.push(Fact::ok(
                    "lineage-unknown",
                    path,
                    "carried into the grant",
                    &unknown,
                ));
                self.predecessor(facts);
                (f.last_seq, f.last_hash, f.unknown_ops)
            }
        }
    }

    /// The journal: the enrolled inode, still protected, verified. The first failure is
    /// the fact returned.
    fn journal(&self) -> Result<repoch_protocol::journal::Frontier, Fact> {
        let m = &self.manifest;
        let path = m.lineage.journal_path.as_str();
        let fail = |expected: &str, observed: &str, reason| {
            Fact::failed("lineage", path, expected, observed, reason)
        };
        let enrolled = m.entry(Role::Journal).map(|e| e.identity).ok_or_else(|| {
            fail(
                "an enrolled journal",
                "none in the manifest",
                Reason::LineageMissing,
            )
        })?;
        // O_NONBLOCK: a FIFO at the journal path must not block the open.
        let fd =
            open_path(Path::new(path), OFlags::RDONLY | OFlags::NONBLOCK, 0).map_err(
                |e| match e.kind() {
                    std::io::ErrorKind::NotFound => {
                        fail("present", "missing", Reason::LineageMissing)
                    }
                    _ if is_eloop(&e) => {
                        fail("no symlink", "a symlink", Reason::LineageUnprotected)
                    }
                    _ => fail("readable", &e.to_string(), Reason::ObserveFailed),
                },
            )?;
        let id =
            fstat_identity(&fd).map_err(|e| fail("stat", &e.to_string(), Reason::ObserveFailed))?;
        if let Some(kind) = not_regular(id.mode) {
            return Err(fail(
                "the enrolled regular file",
                kind,
                Reason::LineageReplaced,
            ));
        }
        if !id.same_object(&enrolled) {
            return Err(fail(
                &enrolled.object(),
                &id.object(),
                Reason::LineageReplaced,
            ));
        }
        let append_only = crate::enroll::is_append_only(&fd);
        if id.uid != enrolled.uid || id.mode != enrolled.mode || append_only != Ok(true) {
            let expected = format!(
                "uid {} mode {:o} append-only true",
                enrolled.uid,
                enrolled.mode & 0o7777
            );
            let observed = format!(
                "uid {} mode {:o} append-only {}",
                id.uid,
                id.mode & 0o7777,
                append_only.map_or_else(|e| e, |b| b.to_string())
            );
            return Err(fail(&expected, &observed, Reason::LineageUnprotected));
        }
        let bytes = read_all_fd(&fd, JOURNAL_BYTES_MAX)
            .map_err(|e| fail("readable", &e.to_string(), Reason::ObserveFailed))?;
        let pins = JournalPins {
            deployment: m.deployment,
            issuer: &m.issuer_key,
            producer: &m.lineage.producer_key,
            genesis: Some(m.lineage.journal_genesis),
        };
        verify_journal(&bytes, pins).map_err(|e| {
            fail(
                "an unbroken, signed journal of this deployment",
                &format!("offset {}: {}", e.offset, e.detail),
                e.reason,
            )
        })
    }

    fn predecessor(&self, facts: &mut Vec<Fact>) {
        let Some(p) = self.manifest.lineage.predecessor else {
            return;
        };
        let subject = format!("deployment {}", p.deployment);
        let issuer = self.manifest.issuer_key;
        match crate::store::Deployment::open(&self.layout, &issuer, p.deployment) {
            Err(r) => facts.push(Fact::failed(
                "predecessor",
                &subject,
                "readable",
                &r.to_string(),
                Reason::PredecessorMismatch,
            )),
            Ok(d) => {
                let last = d.report().last_hash();
                if d.report().problem.is_none() && last == Some(p.final_hash) {
                    facts.push(Fact::ok(
                        "predecessor",
                        &subject,
                        &format!("ends in {}", p.final_hash),
                        "as linked",
                    ));
                } else {
                    let observed = last.map_or("no record".into(), |h| format!("ends in {h}"));
                    facts.push(Fact::failed(
                        "predecessor",
                        &subject,
                        &format!("ends in {}", p.final_hash),
                        &observed,
                        Reason::PredecessorMismatch,
                    ));
                }
            }
        }
    }

    fn stores(&self, facts: &mut Vec<Fact>) {
        for e in self.manifest.entries(Role::Store) {
            let fact = match open_path(Path::new(&e.path), OFlags::RDONLY | OFlags::NONBLOCK, 0) {
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    Fact::failed("store", &e.path, "present", "missing", Reason::StoreMissing)
                }
                Err(err) if is_eloop(&err) => Fact::failed(
                    "store",
                    &e.path,
                    "no symlink",
                    "a symlink",
                    Reason::StoreReplaced,
                ),
                Err(err) => Fact::failed(
                    "store",
                    &e.path,
                    "readable",
                    &err.to_string(),
                    Reason::ObserveFailed,
                ),
                Ok(fd) => match fstat_identity(&fd) {
                    Ok(id) if id.same_object(&e.identity) => {
                        Fact::ok("store", &e.path, "the enrolled inode", "the enrolled inode")
                    }
                    Ok(id) => Fact::failed(
                        "store",
                        &e.path,
                        &e.identity.object(),
                        &id.object(),
                        Reason::StoreReplaced,
                    ),
                    Err(err) => Fact::failed(
                        "store",
                        &e.path,
                        "stat",
                        &err.to_string(),
                        Reason::ObserveFailed,
                    ),
                },
            };
            facts.push(fact);
        }
    }

    // ---- containment ----

    fn units(&self, facts: &mut Vec<Fact>) {
        const WANT: &str = "masked, inactive, MainPID 0, no reload pending";
        for u in &self.manifest.containment.units {
            let fact = match systemd::show(&self.systemctl, u) {
                Err(e) => Fact::failed("unit", u, WANT, &e, Reason::ControllerUnknown),
                Ok(s) => {
                    let observed = format!(
                        "{} {}/{} MainPID {} reload {}",
                        s.load,
                        s.active,
                        s.sub,
                        s.main_pid,
                        if s.need_reload { "pending" } else { "no" }
                    );
                    if s.need_reload {
                        Fact::failed("unit", u, WANT, &observed, Reason::UnitReloadPending)
                    } else if s.load != "masked" {
                        Fact::failed("unit", u, WANT, &observed, Reason::UnitNotMasked)
                    } else if !matches!(s.active.as_str(), "inactive" | "failed") {
                        Fact::failed("unit", u, WANT, &observed, Reason::UnitActive)
                    } else if s.main_pid != 0 {
                        Fact::failed("unit", u, WANT, &observed, Reason::UnitMainPid)
                    } else {
                        Fact::ok("unit", u, WANT, &format!("masked {}", s.active))
                    }
                }
            };
            facts.push(fact);
        }
    }

    fn cgroups(&self, facts: &mut Vec<Fact>) {
        const WANT: &str = "no process, no thread, not populated (recursively)";
        if self.manifest.containment.cgroups.is_empty() {
            return;
        }
        let root = match cgroup::mount_point() {
            Ok(r) => r,
            Err(e) => {
                for c in &self.manifest.containment.cgroups {
                    facts.push(Fact::failed(
                        "cgroup",
                        c,
                        WANT,
                        &e,
                        Reason::ControllerUnknown,
                    ));
                }
                return;
            }
        };
        for c in &self.manifest.containment.cgroups {
            facts.push(match cgroup::occupancy(&root, c) {
                Err(e) => Fact::failed("cgroup", c, WANT, &e, Reason::ObserveFailed),
                Ok(o) if !o.exists => Fact::ok("cgroup", c, WANT, "absent"),
                Ok(o) if o.empty() => Fact::ok("cgroup", c, WANT, "empty"),
                Ok(o) => {
                    let observed = format!(
                        "at {} populated {} procs {:?} threads {:?}",
                        o.at.unwrap_or_default(),
                        u8::from(o.populated),
                        &o.procs[..o.procs.len().min(cgroup::TASKS_SHOWN_MAX)],
                        &o.threads[..o.threads.len().min(cgroup::TASKS_SHOWN_MAX)]
                    );
                    Fact::failed("cgroup", c, WANT, &observed, Reason::CgroupPopulated)
                }
            });
        }
    }

    fn listeners(&self, facts: &mut Vec<Fact>) {
        const WANT: &str = "nothing bound";
        for l in &self.manifest.containment.listeners {
            let subject = l.to_string();
            let bound = match l {
                // A unix path is judged by its inode: any socket bound to it in any
                // network namespace, however it was bound, or anything accepting there.
                Listener::Unix(p) => {
                    facts.push(match net::unix_at(p) {
                        Err(e) => {
                            Fact::failed("listener", &subject, WANT, &e, Reason::ObserveFailed)
                        }
                        Ok(net::UnixAt::Nothing(why)) => Fact::ok(
                            "listener",
                            &subject,
                            WANT,
                            &format!("nothing bound ({why})"),
                        ),
                        Ok(net::UnixAt::Symlink(target)) => Fact::failed(
                            "listener",
                            &subject,
                            "nothing bound, no symlink",
                            &format!("a symlink to {target}: connections follow it"),
                            Reason::ListenerPresent,
                        ),
                        Ok(net::UnixAt::Bound {
                            sockets,
                            unsearched,
                            accepts,
                        }) => Fact::failed(
                            "listener",
                            &subject,
                            WANT,
                            &describe_unix_bound(&sockets, unsearched.as_deref(), accepts),
                            Reason::ListenerPresent,
                        ),
                    });
                    continue;
                }
                Listener::Tcp(p) => net::inet_bound(false, *p),
                Listener::Udp(p) => net::inet_bound(true, *p),
            };
            facts.push(match bound {
                Err(e) => Fact::failed(
                    "listener",
                    &subject,
                    "nothing bound",
                    &e,
                    Reason::ObserveFailed,
                ),
                Ok(b) if b.is_empty() => {
                    Fact::ok("listener", &subject, "nothing bound", "nothing bound")
                }
                Ok(b) => {
                    let holders: Vec<u32> = b
                        .iter()
                        .flat_map(|s| net::socket_holders(s.inode))
                        .collect();
                    Fact::failed(
                        "listener",
                        &subject,
                        "nothing bound",
                        &format!("bound, held by pid {holders:?}"),
                        Reason::ListenerPresent,
                    )
                }
            });
        }
    }

    fn executables(&self, facts: &mut Vec<Fact>) {
        for exe in &self.manifest.containment.executables {
            let (dev, ino) = match rustix::fs::stat(exe.as_str()) {
                Ok(st) => (st.st_dev, st.st_ino),
                // A removed executable can still run: match by its former path only.
                Err(_) => (u64::MAX, u64::MAX),
            };
            facts.push(match proc::running(exe, dev, ino) {
                Err(e) => Fact::failed(
                    "process",
                    exe,
                    "no live task runs it",
                    &e,
                    Reason::ObserveFailed,
                ),
                Ok(r) if r.is_empty() => Fact::ok("process", exe, "no live task runs it", "none"),
                Ok(r) => {
                    let tasks: Vec<String> = r
                        .iter()
                        .take(cgroup::TASKS_SHOWN_MAX)
                        .map(|t| {
                            let cg = cgroup::of_pid(t.pid).unwrap_or_else(|_| "?".into());
                            let how = if t.mapped {
                                " (mapped, not its exe)"
                            } else {
                                ""
                            };
                            if t.tid == t.pid {
                                format!("pid {}{how} in {cg}", t.pid)
                            } else {
                                format!("pid {} tid {}{how} in {cg}", t.pid, t.tid)
                            }
                        })
                        .collect();
                    Fact::failed(
                        "process",
                        exe,
                        "no live task runs it",
                        &tasks.join(", "),
                        Reason::EscapedTask,
                    )
                }
            });
        }
    }

    // ---- fences ----

    /// The fences: on first use each is acquired; afterwards each manifest entry's own held
    /// fence (matched by path and enrolled identity) is re-verified. One fact per entry, in
    /// manifest order, each naming only its own entry.
    fn fences(&self, fences: &mut Fences, facts: &mut Vec<Fact>) {
        const WANT: &str = "the enrolled inode, locked by us";
        let entries: Vec<&InventoryEntry> = self.manifest.entries(Role::Fence).collect();
        if fences.is_empty() {
            let mut acquired = Vec::with_capacity(entries.len());
            for e in &entries {
                match acquire(&e.path, &e.identity) {
                    Ok(h) => {
                        facts.push(check_held(&h).unwrap_or_else(|f| f));
                        acquired.push(h);
                    }
                    Err(f) => facts.push(f),
                }
            }
            // A fence set is all or nothing: a partial set is released (dropped), never kept.
            if acquired.len() == entries.len() {
                fences.held = acquired;
            }
            return;
        }
        for e in &entries {
            facts.push(match fences.of(e) {
                Some(h) => check_held(h).unwrap_or_else(|f| f),
                None => Fact::failed("fence", &e.path, WANT, "not held", Reason::FenceCustody),
            });
        }
    }

    // ---- target and consumer ----

    fn ready(&mut self, facts: &mut Vec<Fact>) -> Hash {
        let (digest, fact) = match self.ready_fact() {
            Ok((d, f)) => (d, f),
            Err(f) => (Hash::ZERO, f),
        };
        facts.push(fact);
        digest
    }

    /// READY: present, no symlink, a root-owned regular file not writable by group or
    /// others, its digest the approved one (or, without approval, the first observation's).
    fn ready_fact(&mut self) -> Result<(Hash, Fact), Fact> {
        let path = self.manifest.target.ready_path.clone();
        let fail = |expected: &str, observed: &str, reason| {
            Fact::failed("ready", &path, expected, observed, reason)
        };
        let fd = open_path(Path::new(&path), OFlags::RDONLY | OFlags::NONBLOCK, 0).map_err(
            |e| match e.kind() {
                std::io::ErrorKind::NotFound => fail("present", "missing", Reason::ReadyMissing),
                _ if is_eloop(&e) => fail("no symlink", "a symlink", Reason::ReadyUnprotected),
                _ => fail("readable", &e.to_string(), Reason::ObserveFailed),
            },
        )?;
        let st =
            fstat_identity(&fd).map_err(|e| fail("stat", &e.to_string(), Reason::ObserveFailed))?;
        if let Some(kind) = not_regular(st.mode) {
            return Err(fail("a regular file", kind, Reason::ReadyUnprotected));
        }
        if st.uid != 0 || st.mode & 0o022 != 0 {
            let observed = format!("uid {} mode {:o}", st.uid, st.mode);
            return Err(fail(
                "a regular file, uid 0, not group/other writable",
                &observed,
                Reason::ReadyUnprotected,
            ));
        }
        let digest = sha256_fd(&fd, READY_BYTES_MAX)
            .map_err(|e| fail("readable", &e, Reason::ObserveFailed))?;
        let observed = format!("sha256 {digest}");
        let approved = *self.approved_ready.get_or_insert(digest);
        if approved != digest {
            let reason = if self.operator_approved {
                Reason::ReadyUnapproved
            } else {
                Reason::ReadyChanged
            };
            return Err(fail(&format!("sha256 {approved}"), &observed, reason));
        }
        Ok((
            digest,
            Fact::ok("ready", &path, &format!("sha256 {approved}"), &observed),
        ))
    }

    fn consumer_exe(&mut self, facts: &mut Vec<Fact>) {
        facts.push(self.consumer_exe_fact().unwrap_or_else(|f| f));
    }

    /// The consumer executable: present, a root-owned regular file not writable by group or
    /// others, matching its pin, with the same identity and digest at every observation.
    fn consumer_exe_fact(&mut self) -> Result<Fact, Fact> {
        const WANT: &str = "root-owned, not writable by others, unchanged";
        let c = &self.manifest.consumer;
        let path = c.executable.clone();
        let fail = |expected: &str, observed: &str, reason| {
            Fact::failed("consumer-exe", &path, expected, observed, reason)
        };
        // O_NONBLOCK: a FIFO at the executable's path must not block the open.
        let fd = open_path(Path::new(&path), OFlags::RDONLY | OFlags::NONBLOCK, 0).map_err(
            |e| match e.kind() {
                std::io::ErrorKind::NotFound => {
                    fail("present", "missing", Reason::ConsumerExeMissing)
                }
                _ if is_eloop(&e) => fail(WANT, "a symlink", Reason::ConsumerExeUnprotected),
                _ => fail(WANT, &e.to_string(), Reason::ObserveFailed),
            },
        )?;
        let id =
            fstat_identity(&fd).map_err(|e| fail(WANT, &e.to_string(), Reason::ObserveFailed))?;
        if let Some(kind) = not_regular(id.mode) {
            return Err(fail(WANT, kind, Reason::ConsumerExeUnprotected));
        }
        if id.uid != 0 || id.mode & 0o022 != 0 {
            return Err(fail(
                WANT,
                &format!("uid {} mode {:o}", id.uid, id.mode),
                Reason::ConsumerExeUnprotected,
            ));
        }
        let digest =
            sha256_fd(&fd, EXE_BYTES_MAX).map_err(|e| fail(WANT, &e, Reason::ObserveFailed))?;
        if let Some(pin) = c.executable_sha256 {
            if pin != digest {
                return Err(fail(
                    &format!("sha256 {pin}"),
                    &format!("sha256 {digest}"),
                    Reason::ConsumerExeMismatch,
                ));
            }
        }
        let (i0, d0) = *self.consumer_exe.get_or_insert((id, digest));
        if i0 != id || d0 != digest {
            return Err(fail(
                &format!("ino {} sha256 {d0}", i0.ino),
                &format!("ino {} sha256 {digest}", id.ino),
                Reason::ConsumerExeChanged,
            ));
        }
        Ok(Fact::ok(
            "consumer-exe",
            &path,
            WANT,
            &format!("sha256 {digest}"),
        ))
    }

    /// The consumer executable's identity and digest as first observed.
    pub fn consumer_exe_baseline(&self) -> Option<(Identity, Hash)> {
        self.consumer_exe
    }
}

/// The observed text of a unix path someone is bound to or accepts on: each socket bound
/// to its inode (type, state, namespace when not ours, holder pids), and the socket type
/// a connection was accepted for; "holder unknown" when no socket could be matched.
fn describe_unix_bound(
    sockets: &[(
        crate::os::sockdiag::NetnsId,
        crate::os::sockdiag::UnixSocket,
    )],
    unsearched: Option<&str>,
    accepts: Option<&str>,
) -> String {
    let own = crate::os::sockdiag::own_netns().ok();
    let shown = &sockets[..sockets.len().min(cgroup::TASKS_SHOWN_MAX)];
    let inodes: Vec<u64> = shown.iter().map(|(_, s)| s.inode).collect();
    let holders = net::socket_holders_of(&inodes);
    let mut parts: Vec<String> = shown
        .iter()
        .zip(holders)
        .map(|((ns, s), (_, pids))| {
            let ns = if Some(*ns) == own {
                String::new()
            } else {
                format!(" in {ns}")
            };
            format!(
                "bound: socket {} ({} {}){ns}, held by pid {pids:?}",
                s.inode,
                s.kind_name(),
                s.state_name()
            )
        })
        .collect();
    match (accepts, sockets.is_empty()) {
        (Some(k), true) => parts.push(format!("accepts connections ({k}), holder unknown")),
        (Some(k), false) => parts.push(format!("accepts connections ({k})")),
        // Short: a fact's observed text is clipped at FACT_TEXT_BYTES_MAX.
        (None, true) => {
            parts.push("socket file, none shown bound: stale or hidden; remove if stale".into())
        }
        (None, false) => {}
    }
    if let Some(why) = unsearched {
        parts.push(format!("not every namespace searched ({why})"));
    }
    parts.join("; ")
}

/// Whether a fence still keeps others out: no mode bit for others, no owner, group or
/// permission bit that the enrollment did not have, and no access ACL (read through `fd`,
/// an fd of the same object). Anyone who can open a fence can hold it shared (`flock -s`
/// needs only read access) and so make it busy.
fn fence_protection(
    path: &str,
    enrolled: &Identity,
    id: &Identity,
    fd: &OwnedFd,
) -> Result<(), Fact> {
    let perms = |m: u32| m & 0o7777;
    let expected = format!(
        "uid {} gid {} mode {:o}, no access for others, no ACL",
        enrolled.uid,
        enrolled.gid,
        perms(enrolled.mode)
    );
    let acl = crate::store::has_access_acl(fd).map_err(|e| {
        Fact::failed(
            "fence",
            path,
            &expected,
            &format!("reading its ACL: {e}"),
            Reason::ObserveFailed,
        )
    })?;
    let widened = perms(id.mode) & !perms(enrolled.mode);
    if acl
        || id.mode & 0o007 != 0
        || widened != 0
        || id.uid != enrolled.uid
        || id.gid != enrolled.gid
    {
        let observed = format!(
            "uid {} gid {} mode {:o}{}",
            id.uid,
            id.gid,
            perms(id.mode),
            if acl { ", an access ACL" } else { "" }
        );
        return Err(Fact::failed(
            "fence",
            path,
            &expected,
            &observed,
            Reason::FenceUnprotected,
        ));
    }
    Ok(())
}

/// Acquires one fence: open once, read-only (flock needs no write access, and a read-only
/// mount must not break observation), without following symlinks; fstat against the
/// enrolled identity (birth time included) and protection; `flock` EX non-blocking;
/// re-stat the path to catch a replacement during acquisition, then confirm kernel custody.
fn acquire(path: &str, enrolled: &Identity) -> Result<HeldFence, Fact> {
    const WANT: &str = "the enrolled inode, locked by us";
    let fd =
        open_path(Path::new(path), OFlags::RDONLY | OFlags::NONBLOCK, 0).map_err(|e| {
            match e.kind() {
                std::io::ErrorKind::NotFound => {
                    Fact::failed("fence", path, WANT, "missing", Reason::FenceMissing)
                }
                _ if is_eloop(&e) => {
                    Fact::failed("fence", path, WANT, "a symlink", Reason::FenceReplaced)
                }
                _ => Fact::failed("fence", path, WANT, &e.to_string(), Reason::ObserveFailed),
            }
        })?;
    let id = fstat_identity(&fd)
        .map_err(|e| Fact::failed("fence", path, WANT, &e.to_string(), Reason::ObserveFailed))?;
    if !id.same_object(enrolled) {
        return Err(Fact::failed(
            "fence",
            path,
            &enrolled.object(),
            &id.object(),
            Reason::FenceReplaced,
        ));
    }
    // Before locking: a fence others can open may be held shared by anyone, and a busy
    // answer would then blame whoever that is.
    fence_protection(path, enrolled, &id, &fd)?;
    match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
            return Err(Fact::failed(
                "fence",
                path,
                WANT,
                &crate::store::describe_holders("FLOCK", &id),
                Reason::FenceBusy,
            ));
        }
        Err(e) => {
            return Err(Fact::failed(
                "fence",
                path,
                WANT,
                &e.to_string(),
                Reason::ObserveFailed,
            ))
        }
    }
    let h = HeldFence {
        path: path.to_owned(),
        enrolled: *enrolled,
        identity: id,
        fd,
    };
    check_held(&h)?;
    Ok(h)
}

/// Re-verifies a held fence: the path still names our object (birth time included), its
/// owner and mode still keep others out, and the kernel shows our lock (`/proc/locks` for
/// the device and inode, and our own fdinfo `lock:` line).
fn check_held(h: &HeldFence) -> Result<Fact, Fact> {
    const WANT: &str = "the enrolled inode, locked by us";
    let now = open_path(Path::new(&h.path), OFlags::PATH, 0).and_then(fstat_identity);
    match now {
        Ok(id) if id.same_object(&h.identity) => {
            fence_protection(&h.path, &h.enrolled, &id, &h.fd)?
        }
        Ok(id) => {
            return Err(Fact::failed(
                "fence",
                &h.path,
                &h.identity.object(),
                &format!("path now names {}", id.object()),
                Reason::FenceReplaced,
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Fact::failed(
                "fence",
                &h.path,
                WANT,
                "path removed",
                Reason::FenceReplaced,
            ))
        }
        Err(e) => {
            return Err(Fact::failed(
                "fence",
                &h.path,
                WANT,
                &e.to_string(),
                Reason::ObserveFailed,
            ))
        }
    }
    let listed = procfs::locks_list("FLOCK", h.identity.dev, h.identity.ino).map_err(|e| {
        Fact::failed(
            "fence",
            &h.path,
            WANT,
            &e.to_string(),
            Reason::ObserveFailed,
        )
    })?;
    use std::os::fd::AsRawFd as _;
    let own = procfs::fdinfo_has_lock(
        std::process::id(),
        h.fd.as_raw_fd() as u32,
        "FLOCK",
        h.identity.dev,
        h.identity.ino,
    );
    if listed.is_empty() || !own {
        return Err(Fact::failed(
            "fence",
            &h.path,
            WANT,
            &format!(
                "/proc/locks {} entries, own fdinfo lock {own}",
                listed.len()
            ),
            Reason::FenceCustody,
        ));
    }
    Ok(Fact::ok("fence", &h.path, WANT, "held"))
}

//! The observers (docs/ARCHITECTURE.md, "Issuance", step 2), one module per kind of fact:
//! [`lineage`] (the journal, the predecessor, the stores), [`containment`] (units, cgroups,
//! listeners, processes), [`fences`] (held, private, keyed by manifest entry) and
//! [`targets`] (READY and the consumer executable, against a [`Baseline`]). Each returns
//! facts from the live system and fails closed: an error, an unknown format or an
//! unreachable controller is a failed fact, never a pass. Every enrolled object is opened
//! by one helper, [`open_enrolled`].
//!
//! This module fixes the order of the facts and their digest: facts carry nothing volatile
//! when they hold, so observing an unchanged world twice gives the same evidence digest.

use std::os::fd::OwnedFd;
use std::path::Path;

use repoch_protocol::types::evidence_digest;
use repoch_protocol::{Fact, Hash, Identity, Reason};
use rustix::fs::OFlags;

use crate::layout::Layout;
use crate::store::fstat_identity;
use repoch_sys::fs::{not_regular, open_path};
use repoch_sys::systemd;

pub mod containers;
pub mod containment;
pub mod fences;
pub mod lineage;
pub mod processes;
pub mod targets;

pub use fences::{Fences, HeldFence};
pub use targets::{Baseline, EXE_BYTES_MAX, READY_BYTES_MAX};

use repoch_protocol::grant::UnknownOp;
use repoch_protocol::manifest::Manifest;

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

/// What the issuance observes through (`crate::world::World::Observer`): the live
/// [`Observer`], or the checker's scripted world.
pub trait Observe {
    /// Observes everything, in the fixed order. Acquires the fences on first use and keeps
    /// them in `fences`; later observations re-verify the held fences.
    fn observe(&mut self, fences: &mut Fences) -> Observation;
    /// The consumer executable's identity and digest as first observed.
    fn consumer_exe_baseline(&self) -> Option<(Identity, Hash)>;
    /// At the dispatch decision, after final verification #2: what the observer follows
    /// from the first observation on (the named containers' engine events) still shows no
    /// change; the first change, as the refusal that withholds. An observer that follows
    /// nothing keeps the default.
    fn still_held(&mut self) -> Option<crate::refusal::Refusal> {
        None
    }
}

impl Observe for Observer {
    fn observe(&mut self, fences: &mut Fences) -> Observation {
        Observer::observe(self, fences)
    }
    fn consumer_exe_baseline(&self) -> Option<(Identity, Hash)> {
        Observer::consumer_exe_baseline(self)
    }
    fn still_held(&mut self) -> Option<crate::refusal::Refusal> {
        containers::still_held(&self.manifest, &mut self.containers)
    }
}

/// The observer of one deployment, for one issuance.
#[derive(Debug)]
pub struct Observer {
    pub manifest: Manifest,
    pub layout: Layout,
    pub systemctl: Vec<String>,
    /// What the first observation fixed (READY digest, consumer executable).
    baseline: Baseline,
    /// The process space, held from the first observation's listing.
    processes: processes::ProcessSpace,
    /// The named containers' engines and event streams, held from the first observation.
    containers: containers::Containers,
}

fn is_eloop(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

impl Observer {
    pub fn new(manifest: Manifest, layout: Layout, approved_ready: Option<Hash>) -> Observer {
        Observer {
            manifest,
            layout,
            systemctl: systemd::systemctl_command(),
            baseline: Baseline::new(approved_ready),
            processes: processes::ProcessSpace::default(),
            containers: containers::Containers::default(),
        }
    }

    /// This observer holds every exec of an enrolled executable from its first
    /// observation on (an issuance's: `repoch observe` changes nothing of the world).
    pub fn holding_execs(mut self) -> Observer {
        self.processes.hold_execs = true;
        self
    }

    /// Observes everything, in the fixed order. Acquires the fences on first use and keeps
    /// them in `fences`; later observations re-verify the held fences.
    pub fn observe(&mut self, fences: &mut Fences) -> Observation {
        let m = &self.manifest;
        let mut facts = Vec::new();
        let (frontier_seq, frontier_hash, unknown_ops) =
            lineage::lineage(m, &self.layout, &mut facts);
        lineage::stores(m, &mut facts);
        containment::units(m, &self.systemctl, &mut facts);
        containment::unnamed_units(m, &self.systemctl, &mut facts);
        containers::containers(m, &mut self.containers, &mut facts);
        containment::cgroups(m, &mut facts);
        containment::listeners(m, fences, &mut facts);
        processes::executables(m, &mut self.processes, &mut facts);
        fences::observe(m, fences, &mut facts);
        let ready_sha256 = targets::ready(m, &mut self.baseline, &mut facts);
        targets::consumer_exe(m, &mut self.baseline, &mut facts);
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

    /// The consumer executable's identity and digest as first observed.
    pub fn consumer_exe_baseline(&self) -> Option<(Identity, Hash)> {
        self.baseline.consumer_exe()
    }
}

/// How one kind of enrolled object words each way opening it can fail.
pub(crate) struct Enrolled<'a> {
    /// The fact's kind ("lineage", "store", "fence", "ready", "consumer-exe").
    pub kind: &'a str,
    /// The fact's subject: the object's absolute path.
    pub path: &'a str,
    /// The expected text and the reason when it is missing.
    pub missing: (&'a str, Reason),
    /// The expected text when it is a symlink, unreadable or fails fstat; `None` says
    /// "no symlink", "readable" and "stat".
    pub want: Option<&'a str>,
    /// The reason when it is a symlink.
    pub symlink: Reason,
    /// It must be a regular file: the expected text and reason when it is not.
    pub regular: Option<(&'a str, Reason)>,
    /// It must be the enrolled object (device, inode, birth): the identity, and the reason
    /// when another object is there.
    pub identity: Option<(&'a Identity, Reason)>,
}

/// Who holds a lease on the file at `path` (opened `O_PATH`, which breaks no lease).
fn leased_by(path: &str) -> String {
    match open_path(Path::new(path), OFlags::PATH, 0) {
        Ok(fd) => crate::store::describe_holders("LEASE", &fd),
        Err(e) => format!("(holder unknown: {e})"),
    }
}

/// Opens an enrolled object: read-only and `O_NONBLOCK` (a FIFO in its place must not
/// block the open), following no symlink in any component; classifies the errno
/// (missing, a symlink, unreadable); fstat; then the file type and the enrolled identity.
/// Each failure is the failed fact that says so.
pub(crate) fn open_enrolled(e: &Enrolled<'_>) -> Result<(OwnedFd, Identity), Fact> {
    let fail = |expected: &str, observed: &str, reason| {
        Fact::failed(e.kind, e.path, expected, observed, reason)
    };
    let fd =
        open_path(Path::new(e.path), OFlags::RDONLY | OFlags::NONBLOCK, 0).map_err(
            |err| match err.kind() {
                std::io::ErrorKind::NotFound => fail(e.missing.0, "missing", e.missing.1),
                // Another holds a write lease: our open asked it to give the lease up and
                // would block. For a fence, that holder is busy with it, named.
                std::io::ErrorKind::WouldBlock if e.kind == "fence" => fail(
                    e.want.unwrap_or("readable"),
                    &format!("a write lease {}", leased_by(e.path)),
                    Reason::FenceBusy,
                ),
                _ if is_eloop(&err) => fail(e.want.unwrap_or("no symlink"), "a symlink", e.symlink),
                _ => fail(
                    e.want.unwrap_or("readable"),
                    &err.to_string(),
                    Reason::ObserveFailed,
                ),
            },
        )?;
    let id = fstat_identity(&fd).map_err(|err| {
        fail(
            e.want.unwrap_or("stat"),
            &err.to_string(),
            Reason::ObserveFailed,
        )
    })?;
    if let Some((expected, reason)) = e.regular {
        if let Some(kind) = not_regular(id.mode) {
            return Err(fail(expected, kind, reason));
        }
    }
    if let Some((enrolled, reason)) = e.identity {
        if !id.same_object(enrolled) {
            return Err(fail(&enrolled.object(), &id.object(), reason));
        }
    }
    Ok((fd, id))
}

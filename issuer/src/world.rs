//! The seam between the issuance and what it touches (docs/ARCHITECTURE.md, "The seam"):
//! the storage the epoch log lives on, the deployment's objects and issuer lock, and the
//! world it observes. The issuance (`crate::issuance`) is generic over a [`World`] and a
//! `ConsumerLink`; production monomorphizes to [`Host`] (the real file system, `flock`, the
//! live observers) and the daemon's grant socket, and the checker (`issuer/tests/checker.rs`)
//! to a simulated disk, a modelled lock and a scripted world, so the very code that decides
//! "at most one grant" is model-checked.

use std::os::fd::OwnedFd;

use repoch_protocol::manifest::Manifest;
use repoch_protocol::{DeploymentId, Hash, PublicKey};

use repoch_protocol::fleet::Registry;
use repoch_protocol::Reason;

use crate::fleet::Fleet;
use crate::layout::Layout;
use crate::observe::{Observe, Observer};
use crate::refusal::Refusal;
use crate::stop::Stop;
use crate::storage::{Real, Storage};
use crate::store::{lock_issuer, Deployment};

/// A deployment's objects, opened and checked against the signed manifest; the issuer lock
/// not taken, the log not read.
#[derive(Debug)]
pub struct Objects<F, L> {
    pub id: DeploymentId,
    pub manifest: Manifest,
    /// sha256 of the manifest file as read: the genesis must name it.
    pub manifest_hash: Hash,
    pub log: F,
    /// The issuer lock object. The lock taken through it is held while it lives.
    pub lock: L,
    /// On a read-only file system: readable, never issued from (`state-read-only`).
    pub read_only: bool,
}

/// What an issuance touches besides its consumer.
pub trait World {
    type Storage: Storage;
    /// The issuer lock object of an opened deployment; the lock is held while it lives
    /// (the real one is an fd: closing it releases the `flock`).
    type Lock;
    type Observer: Observe;
    /// Opens deployment `id`'s objects, checking each identity; takes no lock, reads no log.
    #[allow(clippy::type_complexity)]
    fn open(
        &mut self,
        issuer: &PublicKey,
        id: DeploymentId,
    ) -> Result<Objects<<Self::Storage as Storage>::File, Self::Lock>, Refusal>;
    /// Takes the issuer lock, non-blocking: `issuer-busy` names the holder.
    fn lock(&mut self, lock: &Self::Lock) -> Result<(), Refusal>;
    /// The storage the log is read from and appended to.
    fn storage(&mut self) -> Self::Storage;
    /// The observer of one deployment for one issuance.
    fn observer(&mut self, manifest: &Manifest, approve_ready: Option<Hash>) -> Self::Observer;
    /// The stop an issuance asks before it writes its intent ([`Stop`]); a world that never
    /// stops keeps the default, never set.
    fn stop(&self) -> Stop {
        Stop::default()
    }
    /// The fleet registry a manifest's `[registry]` names (crate::fleet). A world without
    /// one refuses `registry-unavailable`.
    fn fleet(&mut self, r: &Registry) -> Result<Box<dyn Fleet>, Refusal> {
        Err(Refusal::new(
            Reason::RegistryUnavailable,
            format!("registry {}", r.epoch_key()),
            "a registry client",
            "none in this world",
        ))
    }
}

/// The host: the real file system under a state root, `flock`, the live observers.
#[derive(Debug, Clone)]
pub struct Host {
    pub layout: Layout,
    /// repochd's stop (set on SIGTERM).
    pub stop: Stop,
}

impl World for Host {
    type Storage = Real;
    type Lock = OwnedFd;
    type Observer = Observer;

    fn open(
        &mut self,
        issuer: &PublicKey,
        id: DeploymentId,
    ) -> Result<Objects<OwnedFd, OwnedFd>, Refusal> {
        let o = Deployment::open_objects(&self.layout, issuer, id)?;
        Ok(Objects {
            id: o.id,
            manifest_hash: Hash::of(&o.bytes),
            manifest: o.manifest,
            log: o.log_fd,
            lock: o.lock,
            read_only: o.read_only,
        })
    }
    fn lock(&mut self, lock: &OwnedFd) -> Result<(), Refusal> {
        lock_issuer(lock)
    }
    fn storage(&mut self) -> Real {
        Real
    }
    fn observer(&mut self, manifest: &Manifest, approve_ready: Option<Hash>) -> Observer {
        Observer::new(manifest.clone(), self.layout.clone(), approve_ready).holding_execs()
    }
    fn stop(&self) -> Stop {
        self.stop.clone()
    }
    fn fleet(&mut self, r: &Registry) -> Result<Box<dyn Fleet>, Refusal> {
        Ok(Box::new(crate::fleet::connect_pinned(r)?))
    }
}

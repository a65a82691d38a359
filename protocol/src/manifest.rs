//! The enrolled manifest (docs/OPERATOR.md, "The manifest, field by field"): what a deployment is, fixed at enrollment.

use ciborium::value::Value;

use crate::cbor::{self, as_text, as_uint, Canonical, DecodeError, Fields};
use crate::limits::*;
use crate::types::{DeploymentId, Hash, Identity, PublicKey};

mod container;
mod waiver;
pub use container::{
    is_container_id, is_container_name, is_container_ref, is_containerd_identifier, ContainerRef,
    CONTAINER_ENGINES,
};
pub use waiver::{Waiver, WAIVER_KINDS};

/// The role of an inventory object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    StateDir,
    EpochLog,
    IssuerLock,
    Fence,
    Store,
    Journal,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::StateDir => "state-dir",
            Role::EpochLog => "epoch-log",
            Role::IssuerLock => "issuer-lock",
            Role::Fence => "fence",
            Role::Store => "store",
            Role::Journal => "journal",
        }
    }
    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "state-dir" => Role::StateDir,
            "epoch-log" => Role::EpochLog,
            "issuer-lock" => Role::IssuerLock,
            "fence" => Role::Fence,
            "store" => Role::Store,
            "journal" => Role::Journal,
            _ => return None,
        })
    }
}

/// One object of the fixed inventory: its role, canonical path and enrolled identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InventoryEntry {
    pub role: Role,
    pub path: String,
    pub identity: Identity,
}

impl Canonical for InventoryEntry {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::text(self.role.as_str()),
            cbor::text(&self.path),
            self.identity.to_value(),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "inventory-entry", 3)?;
        let role = f.text(32)?;
        let role = Role::parse(&role).ok_or_else(|| {
            DecodeError::schema("inventory-entry", format!("unknown role {role:?}"))
        })?;
        Ok(InventoryEntry {
            role,
            path: f.path()?,
            identity: Identity::from_value(f.field()?)?,
        })
    }
}

/// A listener endpoint repochd holds (docs/OPERATOR.md, `containment.listeners`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Listener {
    Unix(String),
    Tcp(Inet),
    Udp(Inet),
}

/// Where a TCP or UDP endpoint is bound: a port on one address, or on every address of
/// both families (`*`, which is also what a listener enrolled as a port alone, before
/// addresses were enrolled, means).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Inet {
    /// `None`: every address. An IPv4 address is never written IPv4-mapped.
    pub addr: Option<std::net::IpAddr>,
    pub port: u16,
}

impl Inet {
    /// The port on every address of both families.
    pub const fn any(port: u16) -> Inet {
        Inet { addr: None, port }
    }
    /// The port on `addr` only.
    pub const fn at(addr: std::net::IpAddr, port: u16) -> Inet {
        Inet {
            addr: Some(addr),
            port,
        }
    }
}

/// `*:PORT`, `A.B.C.D:PORT`, `[IPV6]:PORT`: what enrollment reads back.
impl std::fmt::Display for Inet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.addr {
            None => write!(f, "*:{}", self.port),
            Some(a) => write!(f, "{}", std::net::SocketAddr::new(a, self.port)),
        }
    }
}

impl Inet {
    fn to_fields(self, kind: &str) -> Value {
        let mut fields = vec![cbor::text(kind), cbor::uint(self.port.into())];
        match self.addr {
            None => {}
            Some(std::net::IpAddr::V4(a)) => fields.push(cbor::bytes(&a.octets())),
            Some(std::net::IpAddr::V6(a)) => fields.push(cbor::bytes(&a.octets())),
        }
        cbor::array(fields)
    }
    fn from_fields(f: &mut Fields) -> Result<Inet, DecodeError> {
        let port = u16::try_from(f.uint()?)
            .map_err(|_| DecodeError::schema("listener", "port over 65535"))?;
        if !f.more() {
            return Ok(Inet::any(port));
        }
        let addr = match f.bstr(16)? {
            b if b.len() == 4 => {
                std::net::IpAddr::from(<[u8; 4]>::try_from(b.as_slice()).unwrap_or_default())
            }
            b if b.len() == 16 => {
                let a = std::net::Ipv6Addr::from(
                    <[u8; 16]>::try_from(b.as_slice()).unwrap_or_default(),
                );
                // One encoding per value: an IPv4 address is its 4 bytes.
                if a.to_ipv4_mapped().is_some() {
                    return Err(DecodeError::schema(
                        "listener",
                        "an IPv4-mapped IPv6 address",
                    ));
                }
                std::net::IpAddr::V6(a)
            }
            _ => {
                return Err(DecodeError::schema(
                    "listener",
                    "an address of 4 or 16 bytes",
                ))
            }
        };
        Ok(Inet::at(addr, port))
    }
}

impl Canonical for Listener {
    fn to_value(&self) -> Value {
        match self {
            Listener::Unix(p) => cbor::array(vec![cbor::text("unix"), cbor::text(p)]),
            Listener::Tcp(i) => i.to_fields("tcp"),
            Listener::Udp(i) => i.to_fields("udp"),
        }
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let unix = matches!(&v, Value::Array(items)
            if matches!(items.first(), Some(Value::Text(k)) if k == "unix"));
        // `["unix", path]`; `["tcp" / "udp", port]` (every address) or with the address's
        // 4 or 16 bytes after the port.
        let mut f = Fields::open_between(v, "listener", 2, if unix { 2 } else { 3 })?;
        match f.text(8)?.as_str() {
            "unix" => Ok(Listener::Unix(f.path()?)),
            "tcp" => Ok(Listener::Tcp(Inet::from_fields(&mut f)?)),
            "udp" => Ok(Listener::Udp(Inet::from_fields(&mut f)?)),
            k => Err(DecodeError::schema(
                "listener",
                format!("unknown kind {k:?}"),
            )),
        }
    }
}

impl std::fmt::Display for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listener::Unix(p) => write!(f, "unix:{p}"),
            Listener::Tcp(i) => write!(f, "tcp:{i}"),
            Listener::Udp(i) => write!(f, "udp:{i}"),
        }
    }
}

/// The containment profile: a closed list of facts that must hold (docs/OPERATOR.md, "The manifest, field by field").
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Containment {
    pub units: Vec<String>,
    /// cgroup v2 paths relative to the hierarchy root, starting with `/`.
    pub cgroups: Vec<String>,
    pub listeners: Vec<Listener>,
    /// Absolute paths of executables no live process may run.
    pub executables: Vec<String>,
    /// The old root's own uids besides root: only tasks with one of these or uid 0 among
    /// their real, effective, saved or file-system uids can be the old root, so only they
    /// are matched against `executables` (docs/THREAT-MODEL.md, "Who can change a fact").
    /// Sorted, without duplicates, without 0; encoded only when not empty (an older
    /// four-field containment decodes as root alone).
    pub old_root_uids: Vec<u32>,
    /// How repochd makes each held unix listener's socket file: one per unix listener,
    /// sorted by path (docs/OPERATOR.md, `containment.socket_files`). Encoded only when not
    /// empty (then after `old_root_uids`, even an empty one); a deployment enrolled before
    /// has none, and its socket files are made as repochd's umask makes them.
    pub socket_files: Vec<SocketFile>,
    /// Containers whose engine could start them again: each asked of its engine at every
    /// observation and held by its event stream (docs/OPERATOR.md, "Containers"). Sorted
    /// and distinct; encoded only when not empty (then after `socket_files`, even empty).
    pub containers: Vec<ContainerRef>,
    /// What the old root held at enrollment that the manifest leaves out on purpose, each
    /// with its reason. Sorted and distinct by `what`; encoded only when not empty (then
    /// after `containers`, even empty).
    pub waived: Vec<Waiver>,
}

/// The owner, group and mode a held unix listener's socket file is given, as systemd's
/// `SocketUser=`, `SocketGroup=` and `SocketMode=` give them: what the new root's clients
/// rely on to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketFile {
    pub path: String,
    /// Permission bits only (at most `0o777`).
    pub mode: u32,
    /// `None`: repochd's own.
    pub uid: Option<u32>,
    /// `None`: repochd's own.
    pub gid: Option<u32>,
}

/// The largest mode a socket file is given: permission bits, no set-id or sticky bit.
pub const SOCKET_MODE_MAX: u32 = 0o777;

impl Canonical for SocketFile {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::text(&self.path),
            cbor::uint(self.mode.into()),
            cbor::opt(&self.uid, |u| cbor::uint((*u).into())),
            cbor::opt(&self.gid, |g| cbor::uint((*g).into())),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "socket-file", 4)?;
        let id = |v: Value| {
            u32::try_from(as_uint(v, "socket-file")?)
                .map_err(|_| DecodeError::schema("socket-file", "an id over 32 bits"))
        };
        let path = f.path()?;
        let mode = f.uint()?;
        if mode > u64::from(SOCKET_MODE_MAX) {
            return Err(DecodeError::schema("socket-file", "a mode over 0o777"));
        }
        Ok(SocketFile {
            path,
            mode: mode as u32,
            uid: f.opt(id)?,
            gid: f.opt(id)?,
        })
    }
}

impl Containment {
    /// The principals whose tasks can be the old root: root, then `old_root_uids`.
    pub fn principals(&self) -> Vec<u32> {
        let mut p = vec![0];
        p.extend(self.old_root_uids.iter().copied().filter(|u| *u != 0));
        p
    }
    /// How the socket file of the held unix listener at `path` is made, if enrolled.
    pub fn socket_file(&self, path: &str) -> Option<&SocketFile> {
        self.socket_files.iter().find(|f| f.path == path)
    }
}

fn texts(items: &[String]) -> Value {
    cbor::array(items.iter().map(|s| cbor::text(s)).collect())
}

impl Canonical for Containment {
    fn to_value(&self) -> Value {
        let mut fields = vec![
            texts(&self.units),
            texts(&self.cgroups),
            cbor::list(&self.listeners),
            texts(&self.executables),
        ];
        // Each later field is present when it or any after it is not empty.
        let waived = !self.waived.is_empty();
        let containers = !self.containers.is_empty() || waived;
        let socket_files = !self.socket_files.is_empty() || containers;
        if !self.old_root_uids.is_empty() || socket_files {
            fields.push(cbor::array(
                self.old_root_uids
                    .iter()
                    .map(|u| cbor::uint((*u).into()))
                    .collect(),
            ));
        }
        if socket_files {
            fields.push(cbor::list(&self.socket_files));
        }
        if containers {
            fields.push(cbor::list(&self.containers));
        }
        if waived {
            fields.push(cbor::list(&self.waived));
        }
        cbor::array(fields)
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let arity = match &v {
            Value::Array(items) if (5..=8).contains(&items.len()) => items.len(),
            _ => 4,
        };
        let mut f = Fields::open(v, "containment", arity)?;
        let mut c = Containment {
            units: f.list(UNITS_MAX, |v| as_text(v, "unit", TEXT_BYTES_MAX))?,
            cgroups: f.list(CGROUPS_MAX, |v| cbor::as_path(v, "cgroup"))?,
            listeners: f.list(LISTENERS_MAX, Listener::from_value)?,
            executables: f.list(EXECUTABLES_MAX, |v| cbor::as_path(v, "executable"))?,
            old_root_uids: Vec::new(),
            socket_files: Vec::new(),
            containers: Vec::new(),
            waived: Vec::new(),
        };
        if arity >= 5 {
            c.old_root_uids = f.list(OLD_ROOT_UIDS_MAX, |v| {
                u32::try_from(as_uint(v, "old-root-uid")?)
                    .map_err(|_| DecodeError::schema("containment", "uid over 32 bits"))
            })?;
            // One encoding per value: an empty list is the four-field form; the list is
            // sorted, without duplicates and without root (always a principal).
            let canonical = (arity >= 6 || !c.old_root_uids.is_empty())
                && c.old_root_uids.windows(2).all(|w| w[0] < w[1])
                && !c.old_root_uids.contains(&0);
            if !canonical {
                return Err(DecodeError::schema(
                    "containment",
                    "old-root uids must be sorted, distinct, not 0, and present only when not empty",
                ));
            }
        }
        if arity >= 6 {
            c.socket_files = f.list(LISTENERS_MAX, SocketFile::from_value)?;
            // One encoding per value: present only when not empty, sorted and distinct by
            // path, each the file of a unix listener.
            let canonical = (arity >= 7 || !c.socket_files.is_empty())
                && c.socket_files.windows(2).all(|w| w[0].path < w[1].path)
                && c.socket_files.iter().all(|f| {
                    c.listeners
                        .iter()
                        .any(|l| matches!(l, Listener::Unix(p) if *p == f.path))
                });
            if !canonical {
                return Err(DecodeError::schema(
                    "containment",
                    "socket files must be sorted and distinct by path, each a unix listener's, and present only when not empty",
                ));
            }
        }
        if arity >= 7 {
            c.containers = f.list(CONTAINERS_MAX, ContainerRef::from_value)?;
            c.waived = match arity {
                8 => f.list(WAIVERS_MAX, Waiver::from_value)?,
                _ => Vec::new(),
            };
            canonical_tail(&c, arity)?;
        }
        Ok(c)
    }
}

/// One encoding per value for a containment's last two fields: containers present only
/// when they or the waivers are not empty, each list sorted and distinct.
fn canonical_tail(c: &Containment, arity: usize) -> Result<(), DecodeError> {
    if (c.containers.is_empty() && arity == 7) || !c.containers.windows(2).all(|w| w[0] < w[1]) {
        return Err(DecodeError::schema(
            "containment",
            "containers must be sorted, distinct, and present only when not empty",
        ));
    }
    if arity == 8 && (c.waived.is_empty() || !c.waived.windows(2).all(|w| w[0].what < w[1].what)) {
        return Err(DecodeError::schema(
            "containment",
            "waivers must be sorted and distinct by what, and present only when not empty",
        ));
    }
    Ok(())
}

/// The authenticated consumer (the worker supervisor).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumer {
    pub uid: u32,
    pub gid: u32,
    /// Absolute path of the consumer executable; its content is checked at recovery.
    pub executable: String,
    /// Optional sha256 pin of the executable's content.
    pub executable_sha256: Option<Hash>,
    pub key: PublicKey,
    /// Optional cgroup v2 path the consumer must run in.
    pub cgroup: Option<String>,
}

impl Canonical for Consumer {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::uint(self.uid.into()),
            cbor::uint(self.gid.into()),
            cbor::text(&self.executable),
            cbor::opt(&self.executable_sha256, |h| cbor::bytes(&h.0)),
            cbor::bytes(&self.key.0),
            cbor::opt(&self.cgroup, |s| cbor::text(s)),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "consumer", 6)?;
        let id = |f: &mut Fields| {
            u32::try_from(f.uint()?).map_err(|_| DecodeError::schema("consumer", "id over 32 bits"))
        };
        Ok(Consumer {
            uid: id(&mut f)?,
            gid: id(&mut f)?,
            executable: f.path()?,
            executable_sha256: f.opt(|v| cbor::as_bytes(v, "consumer").map(Hash))?,
            key: PublicKey(f.bytes()?),
            cgroup: f.opt(|v| cbor::as_path(v, "consumer"))?,
        })
    }
}

/// The predecessor deployment: its id and its log's final record hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Predecessor {
    pub deployment: DeploymentId,
    pub final_hash: Hash,
}

impl Canonical for Predecessor {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::bytes(&self.deployment.0),
            cbor::bytes(&self.final_hash.0),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "predecessor", 2)?;
        Ok(Predecessor {
            deployment: DeploymentId(f.bytes()?),
            final_hash: Hash(f.bytes()?),
        })
    }
}

/// The lineage: predecessor and the original producer's journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lineage {
    pub predecessor: Option<Predecessor>,
    pub journal_path: String,
    /// Hash of the journal's genesis record, written at enrollment.
    pub journal_genesis: Hash,
    pub producer_key: PublicKey,
}

impl Canonical for Lineage {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::opt(&self.predecessor, Predecessor::to_value),
            cbor::text(&self.journal_path),
            cbor::bytes(&self.journal_genesis.0),
            cbor::bytes(&self.producer_key.0),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "lineage", 4)?;
        Ok(Lineage {
            predecessor: f.opt(Predecessor::from_value)?,
            journal_path: f.path()?,
            journal_genesis: Hash(f.bytes()?),
            producer_key: PublicKey(f.bytes()?),
        })
    }
}

/// The target: the READY file the grant authorizes. Its content is approved at recovery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub ready_path: String,
}

/// The enrolled manifest, stored signed (by the issuer key) next to the epoch log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub deployment: DeploymentId,
    pub label: String,
    /// Seconds since the Unix epoch at enrollment (informational).
    pub enrolled_at: u64,
    pub issuer_key: PublicKey,
    pub inventory: Vec<InventoryEntry>,
    pub target: Target,
    pub containment: Containment,
    pub consumer: Consumer,
    pub lineage: Lineage,
    /// The fleet registry this deployment's epoch is also claimed in (docs/OPERATOR.md,
    /// "A fleet registry"); `None`: this host's log alone. Encoded only when set.
    pub registry: Option<crate::fleet::Registry>,
}

/// Inventory entries: state dir, epoch log, issuer lock, journal, fences and stores.
pub const INVENTORY_MAX: usize = 4 + FENCES_MAX + STORES_MAX;

pub const MANIFEST_VERSION: u64 = 1;

impl Manifest {
    pub fn entries(&self, role: Role) -> impl Iterator<Item = &InventoryEntry> {
        self.inventory.iter().filter(move |e| e.role == role)
    }
    pub fn entry(&self, role: Role) -> Option<&InventoryEntry> {
        self.entries(role).next()
    }
}

impl Canonical for Manifest {
    fn to_value(&self) -> Value {
        let mut fields = vec![
            cbor::uint(MANIFEST_VERSION),
            cbor::bytes(&self.deployment.0),
            cbor::text(&self.label),
            cbor::uint(self.enrolled_at),
            cbor::bytes(&self.issuer_key.0),
            cbor::list(&self.inventory),
            cbor::text(&self.target.ready_path),
            self.containment.to_value(),
            self.consumer.to_value(),
            self.lineage.to_value(),
        ];
        if let Some(r) = &self.registry {
            fields.push(r.to_value());
        }
        cbor::array(fields)
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open_between(v, "manifest", 10, 11)?;
        if f.uint()? != MANIFEST_VERSION {
            return Err(DecodeError::schema("manifest", "unsupported version"));
        }
        Ok(Manifest {
            deployment: DeploymentId(f.bytes()?),
            label: f.text(TEXT_BYTES_MAX)?,
            enrolled_at: f.uint()?,
            issuer_key: PublicKey(f.bytes()?),
            inventory: f.list(INVENTORY_MAX, InventoryEntry::from_value)?,
            target: Target {
                ready_path: f.path()?,
            },
            containment: Containment::from_value(f.field()?)?,
            consumer: Consumer::from_value(f.field()?)?,
            lineage: Lineage::from_value(f.field()?)?,
            registry: match f.more() {
                true => Some(crate::fleet::Registry::from_value(f.field()?)?),
                false => None,
            },
        })
    }
}

/// The manifest as stored: its canonical bytes and the issuer's signature over them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedManifest {
    pub manifest: Manifest,
    pub signature: [u8; SIGNATURE_BYTES],
}

impl Canonical for SignedManifest {
    fn to_value(&self) -> Value {
        cbor::array(vec![self.manifest.to_value(), cbor::bytes(&self.signature)])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "signed-manifest", 2)?;
        Ok(SignedManifest {
            manifest: Manifest::from_value(f.field()?)?,
            signature: f.bytes()?,
        })
    }
}

impl SignedManifest {
    pub fn sign(manifest: Manifest, key: &ed25519_dalek::SigningKey) -> Self {
        let signature =
            crate::sign::sign(key, crate::sign::Context::Manifest, &manifest.to_bytes());
        SignedManifest {
            manifest,
            signature,
        }
    }
    pub fn verify(&self, issuer: &PublicKey) -> bool {
        crate::sign::verify(
            issuer,
            crate::sign::Context::Manifest,
            &self.manifest.to_bytes(),
            &self.signature,
        )
    }
}

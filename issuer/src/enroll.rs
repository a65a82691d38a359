//! Enrollment (docs/OPERATOR.md, "The manifest, field by field"): a human-written TOML manifest becomes an enrolled deployment.

use repoch_protocol::Invalid;
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use repoch_protocol::cbor::Canonical;
use repoch_protocol::epoch::{EpochBody, EpochRecord, SignedEpochRecord};
use repoch_protocol::journal::{next_frame, JournalBody};
use repoch_protocol::limits::*;
use repoch_protocol::manifest::*;
use repoch_protocol::types::{check_abs_path, check_text};
use repoch_protocol::{DeploymentId, Hash, PublicKey};
use rustix::fs::OFlags;
use serde::Deserialize;

use crate::layout::Layout;
use crate::log::{enroll_sequence, staging_name};
use crate::storage::Real;
use crate::store::{self, fstat_identity};
use repoch_sys::fs::open_path;

/// The manifest as an operator writes it (docs/OPERATOR.md documents every field).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestToml {
    pub label: String,
    #[serde(default)]
    pub fences: Vec<String>,
    #[serde(default)]
    pub stores: Vec<String>,
    pub ready: String,
    pub journal: JournalToml,
    #[serde(default)]
    pub containment: ContainmentToml,
    pub consumer: ConsumerToml,
    /// Id (or unique prefix) of the deployment this one succeeds.
    pub predecessor: Option<String>,
    /// The fleet registry (docs/OPERATOR.md, "A fleet registry").
    pub registry: Option<RegistryToml>,
}

/// `[registry]`: the etcd cluster that holds the fleet deployment's one epoch.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryToml {
    pub endpoints: Vec<String>,
    pub ca: String,
    pub cert: String,
    pub key: String,
    /// Default `/repoch`.
    pub prefix: Option<String>,
    pub fleet: String,
    /// Default: this host's name (`uname -n`).
    pub host: Option<String>,
    /// The id of the established fleet this host joins (32 hex digits, printed by the
    /// enrollment that established it); absent: this enrollment establishes the fleet.
    pub fleet_id: Option<String>,
    /// Establishing only: added to every fencing token of the fleet (docs/OPERATOR.md,
    /// "Fencing tokens"): at least the largest token of the fleets before it, for a fleet
    /// on a cluster rebuilt from nothing. Default 0.
    pub token_floor: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JournalToml {
    pub path: String,
    /// Hex public key of the producer, or `producer_key_file`.
    pub producer_key: Option<String>,
    pub producer_key_file: Option<String>,
    /// Owner of the journal (the producer appends to it). Default root.
    #[serde(default)]
    pub uid: u32,
    #[serde(default)]
    pub gid: u32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContainmentToml {
    #[serde(default)]
    pub units: Vec<String>,
    #[serde(default)]
    pub cgroups: Vec<String>,
    #[serde(default)]
    pub listeners: Vec<String>,
    #[serde(default)]
    pub executables: Vec<String>,
    /// The old root's own uids besides root (docs/OPERATOR.md, "The manifest, field by
    /// field").
    #[serde(default)]
    pub old_root_uids: Vec<u32>,
    /// How each held unix listener's socket file is made, by path (docs/OPERATOR.md,
    /// `containment.socket_files`).
    #[serde(default)]
    pub socket_files: std::collections::BTreeMap<String, SocketFileToml>,
    /// Containers an engine could start again: `docker:NAME_OR_ID`, `podman:NAME_OR_ID`
    /// (docs/OPERATOR.md, "Containers").
    #[serde(default)]
    pub containers: Vec<String>,
    /// Where each engine listens (`unix:///PATH`; the engines' own defaults otherwise).
    #[serde(default)]
    pub engines: EnginesToml,
}

/// `[containment.engines]`: each engine's socket.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnginesToml {
    pub docker: Option<String>,
    pub podman: Option<String>,
    pub containerd: Option<String>,
}

/// Where each engine listens unless `[containment.engines]` says otherwise.
pub const ENGINE_DEFAULTS: &[(&str, &str)] = &[
    ("docker", "unix:///run/docker.sock"),
    ("podman", "unix:///run/podman/podman.sock"),
    ("containerd", "unix:///run/containerd/containerd.sock"),
];

/// `[containment.socket_files."/PATH"]`: the mode (`0o660`), and optionally the owner
/// and group, of the socket file repochd makes for that unix listener.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocketFileToml {
    pub mode: u32,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerToml {
    pub uid: u32,
    pub gid: u32,
    pub executable: String,
    pub executable_sha256: Option<String>,
    pub key: Option<String>,
    pub key_file: Option<String>,
    pub cgroup: Option<String>,
}

/// A manifest or enrollment error: names the field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnrollError {
    #[error("manifest: {field}: {why}")]
    Manifest { field: String, why: String },
    #[error("{what}: {why}")]
    Refused { what: String, why: String },
    #[error("{0}")]
    Io(String),
    /// The fleet registry did not answer (or refused the request): nothing kept.
    #[error("{0}")]
    Registry(String),
}

fn field(field: impl Into<String>, why: impl Into<String>) -> EnrollError {
    EnrollError::Manifest {
        field: field.into(),
        why: why.into(),
    }
}

fn bounded<T>(name: &str, items: &[T], max: usize) -> Result<(), EnrollError> {
    if items.len() > max {
        return Err(field(
            name,
            format!("{} entries, over the bound of {max}", items.len()),
        ));
    }
    Ok(())
}

fn path_field(name: &str, p: &str) -> Result<(), EnrollError> {
    enrollable_path(p).map_err(|why| field(name, why))
}

/// An absolute, canonical path ([`check_abs_path`]) without control characters: every
/// enrolled path is printed back (facts, warnings, refusals), where an escape sequence or a
/// newline could forge a line of output.
fn enrollable_path(p: &str) -> Result<(), Invalid> {
    check_abs_path(p)?;
    if p.chars().any(char::is_control) {
        return Err("path contains a control character".into());
    }
    repoch_protocol::text::check(p)
}

fn key_field(
    name: &str,
    inline: &Option<String>,
    file: &Option<String>,
) -> Result<PublicKey, EnrollError> {
    match (inline, file) {
        (Some(h), None) => crate::keys::parse_public(h)
            .ok_or_else(|| field(name, "not a valid ed25519 public key (64 hex digits)")),
        (None, Some(f)) => crate::keys::read_public(Path::new(f))
            .map_err(|e| field(format!("{name}_file"), e.to_string())),
        _ => Err(field(
            name,
            format!("give exactly one of `{name}` and `{name}_file`"),
        )),
    }
}

/// systemd's `SocketMode=` default: every user may connect.
pub const SOCKET_MODE_DEFAULT: u32 = 0o666;

/// How each unix listener's socket file is made: as `named` in the manifest; else with the
/// mode of the socket file at its path now (the old root's, which its clients reach), its
/// owner and group kept as repochd's; else systemd's default mode (0666). Every unix
/// listener gets one, sorted by path.
fn socket_files(
    listeners: &[Listener],
    named: &std::collections::BTreeMap<String, SocketFileToml>,
) -> Result<Vec<SocketFile>, EnrollError> {
    let unix: Vec<&str> = listeners
        .iter()
        .filter_map(|l| match l {
            Listener::Unix(p) => Some(p.as_str()),
            _ => None,
        })
        .collect();
    for (path, f) in named {
        let name = format!("containment.socket_files.{path:?}");
        if !unix.contains(&path.as_str()) {
            return Err(field(
                name,
                "names no unix listener of containment.listeners",
            ));
        }
        // -1 is chown's "leave unchanged": an owner that would silently not be given.
        if f.uid == Some(u32::MAX) || f.gid == Some(u32::MAX) {
            return Err(field(
                name,
                "uid and gid 4294967295 (-1) name no user or group",
            ));
        }
        if f.mode > SOCKET_MODE_MAX {
            return Err(field(
                name,
                format!("mode 0o{:o}: permission bits only, at most 0o777", f.mode),
            ));
        }
    }
    let mut files: Vec<SocketFile> = unix
        .iter()
        .map(|p| match named.get(*p) {
            Some(f) => SocketFile {
                path: (*p).into(),
                mode: f.mode,
                uid: f.uid,
                gid: f.gid,
            },
            None => SocketFile {
                path: (*p).into(),
                mode: socket_mode_now(p).unwrap_or(SOCKET_MODE_DEFAULT),
                uid: None,
                gid: None,
            },
        })
        .collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files.dedup_by(|a, b| a.path == b.path);
    Ok(files)
}

/// The permission bits of the socket file at `path` now, if one is there (not followed
/// through a symlink).
fn socket_mode_now(path: &str) -> Option<u32> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_socket())
        .map(|m| m.mode() & SOCKET_MODE_MAX)
}

/// Parses `unix:/PATH`, `tcp:ADDRESS:PORT`, `udp:ADDRESS:PORT` (ADDRESS: an IPv4 address,
/// an IPv6 address in brackets, or `*` for every address of both families).
pub fn parse_listener(s: &str) -> Result<Listener, Invalid> {
    const EXPECTED: &str = "expected unix:/PATH, tcp:ADDRESS:PORT or udp:ADDRESS:PORT";
    let (kind, rest) = s.split_once(':').ok_or(EXPECTED)?;
    match kind {
        "unix" => enrollable_path(rest).map(|_| Listener::Unix(rest.into())),
        "tcp" => parse_inet(kind, rest).map(Listener::Tcp),
        "udp" => parse_inet(kind, rest).map(Listener::Udp),
        _ => Err(format!("unknown listener kind {kind:?}; {EXPECTED}").into()),
    }
}

/// `ADDRESS:PORT` of a TCP or UDP listener: the address it is held on, never guessed (a
/// port alone would be held on every address, exposing a service its old root bound to
/// loopback only).
fn parse_inet(kind: &str, rest: &str) -> Result<Inet, Invalid> {
    use std::net::{IpAddr, SocketAddr};
    // Port 0 names no port: a socket bound "to port 0" gets another, and asked about port
    // 0 the kernel lists every socket.
    let port = |p: &str| match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(Invalid(format!("{p:?} is not a port (1..65535)"))),
        Ok(p) => Ok(p),
    };
    // One spelling: what is printed back is what was written (no leading zero or sign in
    // the port, no scope id, the IPv6 address in its canonical form).
    let canonical = |at: Inet| match at.to_string() == rest {
        true => Ok(at),
        false => Err(Invalid(format!("{rest:?} is written {at}: write it so"))),
    };
    if let Some(p) = rest.strip_prefix("*:") {
        return port(p).map(Inet::any).and_then(canonical);
    }
    if rest.parse::<u16>().is_ok() {
        return Err(format!(
            "{kind}:{rest} names no address: write {kind}:127.0.0.1:{rest} (or another address) to hold the port on that address only, or {kind}:*:{rest} to hold it on every address"
        ).into());
    }
    let (addr, p) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("{rest:?} is not ADDRESS:PORT"))?;
    let p = port(p)?;
    let a: SocketAddr = rest.parse().map_err(|_| {
        format!("{addr:?} is not an IPv4 address, an IPv6 address in brackets, or *")
    })?;
    let at = match a.ip() {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => {
            return Err(format!(
                "{addr} is an IPv4-mapped address: write the IPv4 address"
            ).into())
        }
        IpAddr::V6(v6) if v6.is_unicast_link_local() => {
            return Err(format!(
                "{addr} is link-local: it needs an interface, which a listener cannot name"
            ).into())
        }
        ip if ip.is_multicast() => {
            return Err(format!(
                "{addr} is a multicast address: a socket bound to it serves no one (hold the address the service answers on)"
            ).into())
        }
        IpAddr::V4(v4) if v4.is_broadcast() => {
            return Err(format!(
                "{addr} is the broadcast address: a socket bound to it serves no one (hold the address the service answers on)"
            ).into())
        }
        ip => Inet::at(ip, p),
    };
    canonical(at)
}

/// Two listeners of one kind on one port where one's address covers the other's (the same
/// address, or `*`), or one unix path twice: repochd could hold only the first, and every
/// recovery would find the second in use by repochd itself.
fn overlapping(ls: &[Listener]) -> Option<(usize, usize)> {
    let covers = |a: &Inet, b: &Inet| {
        a.port == b.port && (a.addr.is_none() || b.addr.is_none() || a.addr == b.addr)
    };
    (0..ls.len()).find_map(|j| {
        (0..j)
            .find(|&i| match (&ls[i], &ls[j]) {
                (Listener::Tcp(a), Listener::Tcp(b)) | (Listener::Udp(a), Listener::Udp(b)) => {
                    covers(a, b)
                }
                (Listener::Unix(a), Listener::Unix(b)) => a == b,
                _ => false,
            })
            .map(|i| (i, j))
    })
}

/// The manifest after validation, before anything is touched on disk.
#[derive(Debug, Clone)]
pub struct Validated {
    pub label: String,
    pub fences: Vec<String>,
    pub stores: Vec<String>,
    pub ready: String,
    pub journal_path: String,
    pub journal_uid: u32,
    pub journal_gid: u32,
    pub producer_key: PublicKey,
    pub containment: Containment,
    pub consumer: Consumer,
    pub predecessor: Option<String>,
    pub registry: Option<repoch_protocol::fleet::Registry>,
    /// `registry.fleet_id`: the fleet this host joins; `None`: it establishes one.
    pub fleet_id: Option<repoch_protocol::fleet::FleetId>,
    /// `registry.token_floor`: the floor of the fleet this enrollment establishes, or the
    /// least floor the fleet it joins may hold.
    pub token_floor: u64,
    /// An etcd administrator's client certificate and key (paths; `repoch enroll
    /// --fleet-admin-cert/--fleet-admin-key`): what writes the record of a fleet this
    /// enrollment establishes, which no host's credential may write. Never kept.
    pub fleet_admin: Option<(String, String)>,
}

/// Parses and validates a TOML manifest: every path absolute and canonical, every list
/// bounded, every key a valid point, no duplicates.
pub fn validate(text: &str) -> Result<Validated, EnrollError> {
    let m: ManifestToml = toml::from_str(text).map_err(|e| {
        field(
            e.span().map_or("manifest".into(), |s| {
                format!("at bytes {}..{}", s.start, s.end)
            }),
            e.message().to_owned(),
        )
    })?;
    check_text(&m.label).map_err(|w| field("label", w))?;
    if m.label.is_empty() {
        return Err(field("label", "must not be empty"));
    }
    repoch_protocol::text::check_name(&m.label).map_err(|w| field("label", w))?;
    check_bounds(&m)?;
    check_paths(&m)?;
    let containment = check_containment(m.containment)?;
    path_field("consumer.executable", &m.consumer.executable)?;
    if let Some(c) = &m.consumer.cgroup {
        path_field("consumer.cgroup", c)?;
    }
    let executable_sha256 = match &m.consumer.executable_sha256 {
        None => None,
        Some(h) => Some(
            Hash::from_hex(h)
                .ok_or_else(|| field("consumer.executable_sha256", "expected 64 hex digits"))?,
        ),
    };
    let producer_key = key_field(
        "journal.producer_key",
        &m.journal.producer_key,
        &m.journal.producer_key_file,
    )?;
    let consumer_key = key_field("consumer.key", &m.consumer.key, &m.consumer.key_file)?;
    let (fleet_id, token_floor) = registry_pins(m.registry.as_ref())?;
    let registry = m.registry.map(registry_field).transpose()?;
    Ok(Validated {
        fleet_id,
        token_floor,
        fleet_admin: None,
        label: m.label,
        fences: m.fences,
        stores: m.stores,
        ready: m.ready,
        journal_path: m.journal.path,
        journal_uid: m.journal.uid,
        journal_gid: m.journal.gid,
        producer_key,
        containment,
        consumer: Consumer {
            uid: m.consumer.uid,
            gid: m.consumer.gid,
            executable: m.consumer.executable,
            executable_sha256,
            key: consumer_key,
            cgroup: m.consumer.cgroup,
        },
        predecessor: m.predecessor,
        registry,
    })
}

/// The manifest's lists within their bounds, and at least one fence.
fn check_bounds(m: &ManifestToml) -> Result<(), EnrollError> {
    bounded("fences", &m.fences, FENCES_MAX)?;
    bounded("stores", &m.stores, STORES_MAX)?;
    bounded("containment.units", &m.containment.units, UNITS_MAX)?;
    bounded("containment.cgroups", &m.containment.cgroups, CGROUPS_MAX)?;
    bounded(
        "containment.listeners",
        &m.containment.listeners,
        LISTENERS_MAX,
    )?;
    bounded(
        "containment.executables",
        &m.containment.executables,
        EXECUTABLES_MAX,
    )?;
    bounded(
        "containment.old_root_uids",
        &m.containment.old_root_uids,
        OLD_ROOT_UIDS_MAX,
    )?;
    bounded(
        "containment.containers",
        &m.containment.containers,
        CONTAINERS_MAX,
    )?;
    if m.fences.is_empty() {
        return Err(field(
            "fences",
            "at least one lock fence is required: exclusion is what the grant hands over",
        ));
    }
    Ok(())
}

/// Fences, stores, READY and the journal: absolute paths, each listed once, the journal
/// and READY apart from every fence and store.
fn check_paths(m: &ManifestToml) -> Result<(), EnrollError> {
    let mut seen = std::collections::BTreeSet::new();
    for (name, list) in [("fences", &m.fences), ("stores", &m.stores)] {
        for (i, p) in list.iter().enumerate() {
            path_field(&format!("{name}[{i}]"), p)?;
            if !seen.insert(p.clone()) {
                return Err(field(
                    format!("{name}[{i}]"),
                    format!("{p} is listed twice"),
                ));
            }
        }
    }
    path_field("ready", &m.ready)?;
    path_field("journal.path", &m.journal.path)?;
    if seen.contains(&m.journal.path) || seen.contains(&m.ready) {
        return Err(field(
            "journal.path",
            "the journal and READY must differ from every fence and store",
        ));
    }
    Ok(())
}

/// The containment's units, cgroups, listeners and executables checked; its listeners
/// parsed, their socket files, and the old root's uids (sorted, distinct, root left out:
/// it is always a principal).
fn check_containment(c: ContainmentToml) -> Result<Containment, EnrollError> {
    for (i, u) in c.units.iter().enumerate() {
        check_text(u).map_err(|w| field(format!("containment.units[{i}]"), w))?;
        // Not a pattern: `systemctl show` would expand it to the units it matches. A
        // template (`name@.service`) is held whole: masked, every instance inactive.
        if u.is_empty()
            || u.contains('/')
            || u.contains(repoch_sys::systemd::PATTERN_CHARS)
            || (u.contains("@.") && !repoch_sys::systemd::is_template(u))
            || !u.contains('.')
        {
            return Err(field(
                format!("containment.units[{i}]"),
                "expected a unit name such as billing.service (or a template, billing@.service)",
            ));
        }
    }
    for (i, c) in c.cgroups.iter().enumerate() {
        path_field(&format!("containment.cgroups[{i}]"), c)?;
        if c == "/" {
            return Err(field(
                format!("containment.cgroups[{i}]"),
                "the root cgroup holds every process; name the controller's own cgroup",
            ));
        }
    }
    let listeners = c
        .listeners
        .iter()
        .enumerate()
        .map(|(i, l)| {
            parse_listener(l).map_err(|w| field(format!("containment.listeners[{i}]"), w))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some((i, j)) = overlapping(&listeners) {
        return Err(field(
            format!("containment.listeners[{j}]"),
            format!(
                "{} overlaps containment.listeners[{i}] ({}): list each endpoint once",
                listeners[j], listeners[i]
            ),
        ));
    }
    for (i, e) in c.executables.iter().enumerate() {
        path_field(&format!("containment.executables[{i}]"), e)?;
    }
    let socket_files = socket_files(&listeners, &c.socket_files)?;
    // Root is always a principal; the rest are kept sorted and distinct (one encoding).
    let mut old_root_uids = c.old_root_uids.clone();
    old_root_uids.sort_unstable();
    old_root_uids.dedup();
    old_root_uids.retain(|u| *u != 0);
    let containers = containers(&c.containers, &c.engines)?;
    Ok(Containment {
        units: c.units,
        cgroups: c.cgroups,
        listeners,
        executables: c.executables,
        old_root_uids,
        socket_files,
        containers,
    })
}

/// Each `ENGINE:NAME` parsed with its engine's socket (root's, checked now as at every
/// observation), sorted and distinct (one encoding).
fn containers(
    named: &[String],
    engines: &EnginesToml,
) -> Result<Vec<repoch_protocol::manifest::ContainerRef>, EnrollError> {
    let mut out = Vec::with_capacity(named.len());
    for (i, spelled) in named.iter().enumerate() {
        let at = format!("containment.containers[{i}]");
        let (engine, name) = spelled
            .split_once(':')
            .ok_or_else(|| field(&at, "expected ENGINE:NAME, such as docker:billing"))?;
        if !repoch_protocol::manifest::CONTAINER_ENGINES.contains(&engine) {
            return Err(field(
                &at,
                format!("engine {engine:?}: one of docker, podman, containerd"),
            ));
        }
        if !repoch_protocol::manifest::is_container_ref(engine, name) {
            return Err(field(
                &at,
                match engine {
                    "containerd" => {
                        "NAMESPACE/ID: each letters and digits, runs joined by one _ . or -, \
                         at most 76 bytes"
                    }
                    _ => {
                        "a container name or id: a letter or digit, then letters, digits, _ . or -"
                    }
                },
            ));
        }
        let socket = engine_socket(engine, engines)?;
        out.push(repoch_protocol::manifest::ContainerRef {
            engine: engine.to_owned(),
            name: name.to_owned(),
            socket,
        });
    }
    out.sort();
    if let Some(w) = out.windows(2).find(|w| w[0] == w[1]) {
        return Err(field(
            "containment.containers",
            format!("{} is listed twice", w[0].spelled()),
        ));
    }
    Ok(out)
}

/// The socket `engine` listens on: `[containment.engines]`'s `unix:///PATH` or the
/// default, root's.
fn engine_socket(engine: &str, engines: &EnginesToml) -> Result<String, EnrollError> {
    let at = format!("containment.engines.{engine}");
    let given = match engine {
        "docker" => engines.docker.as_deref(),
        "podman" => engines.podman.as_deref(),
        _ => engines.containerd.as_deref(),
    };
    let url = given.unwrap_or_else(|| {
        ENGINE_DEFAULTS
            .iter()
            .find(|(e, _)| *e == engine)
            .map_or("", |(_, d)| d)
    });
    let path = url
        .strip_prefix("unix://")
        .ok_or_else(|| field(&at, format!("{url:?}: only unix:///PATH endpoints")))?;
    path_field(&at, path)?;
    crate::observe::containers::root_only(path).map_err(|why| {
        field(
            &at,
            format!(
                "the engine's socket must be root's, in directories only root can write: {why}"
            ),
        )
    })?;
    Ok(path.to_owned())
}

/// `[registry]`'s fleet id (joining a fleet) and token floor (the floor of a fleet it
/// establishes, or the least floor of the fleet it joins).
fn registry_pins(
    r: Option<&RegistryToml>,
) -> Result<(Option<repoch_protocol::fleet::FleetId>, u64), EnrollError> {
    let fleet_id = match r.and_then(|r| r.fleet_id.as_deref()) {
        Some(id) => Some(id.parse().map_err(|w| field("registry.fleet_id", w))?),
        None => None,
    };
    let token_floor = match r.map(|r| (r.token_floor, r.fleet_id.is_some())) {
        Some((Some(f), _)) if f > repoch_protocol::fleet::FLOOR_MAX => {
            return Err(field(
                "registry.token_floor",
                format!("{f}: at most {}", repoch_protocol::fleet::FLOOR_MAX),
            ))
        }
        Some((floor, _)) => floor.unwrap_or(0),
        None => 0,
    };
    Ok((fleet_id, token_floor))
}

/// The `[registry]` table of a TOML file (a manifest, or a file holding that table alone:
/// `repoch audit --registry`); other tables are not read.
pub fn registry_of(text: &str) -> Result<repoch_protocol::fleet::Registry, EnrollError> {
    #[derive(Deserialize)]
    struct Only {
        registry: Option<RegistryToml>,
    }
    let table: toml::Table =
        toml::from_str(text).map_err(|e| field("registry", e.message().to_owned()))?;
    let only = Only::deserialize(toml::Value::Table(
        table.into_iter().filter(|(k, _)| k == "registry").collect(),
    ))
    .map_err(|e| field("registry", e.to_string()))?;
    registry_field(
        only.registry
            .ok_or_else(|| field("registry", "no [registry] table"))?,
    )
}

/// The default key prefix of a `[registry]`.
pub const REGISTRY_PREFIX_DEFAULT: &str = "/repoch";

fn registry_field(r: RegistryToml) -> Result<repoch_protocol::fleet::Registry, EnrollError> {
    use repoch_protocol::fleet::{check_endpoint, check_name, check_prefix, Registry};
    if r.endpoints.is_empty() || r.endpoints.len() > repoch_protocol::fleet::REGISTRY_ENDPOINTS_MAX
    {
        return Err(field(
            "registry.endpoints",
            format!(
                "{} endpoints: 1 to {} are needed",
                r.endpoints.len(),
                repoch_protocol::fleet::REGISTRY_ENDPOINTS_MAX
            ),
        ));
    }
    for (i, e) in r.endpoints.iter().enumerate() {
        check_endpoint(e).map_err(|w| field(format!("registry.endpoints[{i}]"), w))?;
    }
    for (name, p) in [
        ("registry.ca", &r.ca),
        ("registry.cert", &r.cert),
        ("registry.key", &r.key),
    ] {
        path_field(name, p)?;
    }
    let prefix = r
        .prefix
        .unwrap_or_else(|| REGISTRY_PREFIX_DEFAULT.to_owned());
    check_prefix(&prefix).map_err(|w| field("registry.prefix", w))?;
    check_name("fleet", &r.fleet).map_err(|w| field("registry.fleet", w))?;
    let host = match r.host {
        Some(h) => h,
        None => rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned(),
    };
    check_name("host", &host).map_err(|w| field("registry.host", w))?;
    let r = Registry {
        endpoints: r.endpoints,
        ca: r.ca,
        cert: r.cert,
        key: r.key,
        prefix,
        fleet: r.fleet,
        host,
        pin: None,
        record_revision: 0,
    };
    // What the fields alone cannot say (an endpoint listed twice).
    r.check().map_err(|w| field("registry.endpoints", w))?;
    Ok(r)
}

/// The host issuer key: read it, or create it (0600, root) on first use.
pub fn issuer_key(layout: &Layout, create: bool) -> Result<SigningKey, EnrollError> {
    let path = layout.issuer_key();
    if !store::exists_nofollow(&path) && create {
        std::fs::create_dir_all(&layout.etc)
            .map_err(|e| EnrollError::Io(format!("{}: {e}", layout.etc.display())))?;
        let key =
            crate::keys::generate().map_err(|e| EnrollError::Io(format!("getrandom: {e}")))?;
        crate::keys::write_pair(&path, &layout.issuer_pub(), &key)
            .map_err(|e| EnrollError::Io(e.to_string()))?;
        return Ok(key);
    }
    crate::keys::read_secret(&path).map_err(|e| EnrollError::Io(e.to_string()))
}

/// Why an object without a birth time cannot be enrolled.
const NO_BIRTH_TIME: &str = "the file system reports no birth time (statx STATX_BTIME): a file \
     deleted and created again could take the same inode number unnoticed; keep it on a file \
     system that records birth times (ext4 with 256-byte inodes, xfs v5, btrfs, tmpfs)";

/// An enrolled identity must carry a birth time: without one, inode reuse cannot be told
/// apart, so enrollment fails closed (docs/THREAT-MODEL.md).
fn require_birth(
    what: impl Into<String>,
    id: repoch_protocol::Identity,
) -> Result<repoch_protocol::Identity, EnrollError> {
    if id.birth.is_none() {
        return Err(EnrollError::Refused {
            what: what.into(),
            why: NO_BIRTH_TIME.into(),
        });
    }
    Ok(id)
}

fn identity_at(role: &str, p: &str) -> Result<repoch_protocol::Identity, EnrollError> {
    opened_at(role, p).map(|(_, id)| id)
}

/// Opens an inventory object once (read-only, no symlink) and reads its identity, which
/// must carry a birth time.
fn opened_at(
    role: &str,
    p: &str,
) -> Result<(std::os::fd::OwnedFd, repoch_protocol::Identity), EnrollError> {
    let fd = open_path(Path::new(p), OFlags::RDONLY | OFlags::NONBLOCK, 0).map_err(|e| {
        EnrollError::Refused {
            what: format!("{role} {p}"),
            why: if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                "a path component is a symlink; enroll the canonical path".into()
            } else {
                e.to_string()
            },
        }
    })?;
    let id = fstat_identity(&fd).map_err(|e| EnrollError::Io(format!("{p}: {e}")))?;
    Ok((fd, require_birth(format!("{role} {p}"), id)?))
}

/// A lock fence must keep others out: anyone who can open it (read access suffices for
/// `flock -s`) can hold it shared and make it busy. So no mode bit for others, and no
/// access ACL (whose named entries the mode does not show). `name` is the manifest field.
fn fence_at(name: &str, p: &str) -> Result<repoch_protocol::Identity, EnrollError> {
    let (fd, id) = opened_at("fence", p)?;
    if id.mode & 0o007 != 0 {
        return Err(field(
            name,
            format!(
                "{p} has mode {:04o}: others can open it and hold it shared (flock -s needs \
                 only read access); make it 0600 or 0640",
                id.mode & 0o7777
            ),
        ));
    }
    match store::has_access_acl(&fd) {
        Ok(false) => Ok(id),
        Ok(true) => Err(field(
            name,
            format!(
                "{p} has an access ACL: its named entries may let others open it and hold \
                 it shared; remove it (setfacl -b) and use mode 0600 or 0640"
            ),
        )),
        Err(e) => Err(EnrollError::Io(format!("{p}: reading its ACL: {e}"))),
    }
}

/// The outcome of an enrollment.
#[derive(Debug, Clone)]
pub struct Enrolled {
    pub id: DeploymentId,
    pub state_dir: PathBuf,
    pub journal_append_only: Result<(), String>,
    /// Whether the epoch log could be made append-only.
    pub log_append_only: Result<(), String>,
    pub manifest_hash: Hash,
    /// With a `[registry]`: the hosts enrolled for the fleet deployment now (this one
    /// among them), by name.
    pub fleet_hosts: Vec<repoch_protocol::fleet::FleetHost>,
    /// With a `[registry]`: the fleet's id, and whether this enrollment established it.
    pub fleet: Option<(repoch_protocol::fleet::FleetId, bool)>,
}

/// A fleet as an enrollment found it, or made it: the connected client (and the
/// administrator's, which wrote the fleet record, when this enrollment established it),
/// the `[registry]` with its pin, whether this enrollment established the fleet, and each
/// registry key it created with its create revision (removed if the enrollment fails).
#[derive(Debug)]
struct FleetJoin {
    client: repoch_registry::Client,
    admin: Option<repoch_registry::Client>,
    registry: repoch_protocol::fleet::Registry,
    pin: repoch_protocol::fleet::FleetPin,
    established: bool,
    recorded: Vec<(String, i64)>,
}

/// Reads the fleet `r` names (docs/OPERATOR.md, "A fleet registry"), once this host's
/// credential is proven unable to write the fleet record, another host's record or a key
/// outside the prefix. With the manifest's `registry.fleet_id`: its record must exist
/// under the prefix with that id, signed by the key the id names, the answering cluster
/// must be the record's, and its members a majority of the record's. Without: no record
/// may exist; the fleet is established with a record signed by this host's issuer key
/// (`key`), written with the administrator's credential. Refused either way when the
/// fleet epoch is already used.
fn join_fleet(
    r: &repoch_protocol::fleet::Registry,
    v: &Validated,
    (key, now): (&SigningKey, u64),
) -> Result<FleetJoin, EnrollError> {
    let unavailable = |e: repoch_registry::Error| {
        EnrollError::Registry(format!("registry {}: {e}", r.fleet_key()))
    };
    let mut client = connect_enrolling(r)?;
    let (header, mut voting) = client.members().map_err(unavailable)?;
    voting.sort_unstable();
    endpoints_cover(&mut client, r, &voting)?;
    crate::fleet::least_privilege(&mut client, r).map_err(|refusal| {
        field(
            "registry.cert",
            format!("{}: {}", refusal.reason.as_str(), refusal),
        )
    })?;
    let (_, entry) = client.get(r.fleet_key().as_bytes()).map_err(unavailable)?;
    let mut admin = None;
    let (pin, record_revision, established, record) = pin_fleet(
        (&mut client, &mut admin),
        r,
        v,
        entry.as_ref(),
        (&header, voting),
        (key, now),
    )?;
    let mut recorded = Vec::new();
    if established {
        recorded.push((r.fleet_key(), record_revision));
    }
    let mut join = FleetJoin {
        client,
        admin,
        registry: repoch_protocol::fleet::Registry {
            pin: Some(pin.clone()),
            record_revision: u64::try_from(record_revision).unwrap_or(0),
            ..r.clone()
        },
        pin,
        established,
        recorded,
    };
    if !established {
        let members = join.pin.members.clone();
        unused_epoch(&mut join.client, r, &members)?;
    }
    let members = join.pin.members.clone();
    let held = (record_revision, &record[..]);
    if let Err(e) = held_by_majority(&mut join.client, &r.fleet_key(), held, &members) {
        let keys = std::mem::take(&mut join.recorded);
        return Err(match unregister(&mut join, &keys) {
            Ok(()) => e,
            Err(left) => EnrollError::Registry(format!("{e}; {left}")),
        });
    }
    Ok(join)
}

/// The client of an enrollment: credentials only root can write, each usable, or no
/// enrollment (the field named; `registry-unprotected` or `registry-unavailable` at
/// recovery).
fn connect_enrolling(
    r: &repoch_protocol::fleet::Registry,
) -> Result<repoch_registry::Client, EnrollError> {
    crate::fleet::connect(r, true).map_err(|e| match e.subject.strip_prefix("registry.") {
        Some(_) => field(e.subject.clone(), e.observed.clone()),
        None => EnrollError::Registry(e.to_string()),
    })
}

/// The administrator's client that writes the record of a fleet `v` establishes
/// (`--fleet-admin-cert`, `--fleet-admin-key`; the `[registry]`'s CA): refused when none
/// was given, since no host's credential may write it.
fn connect_admin(
    r: &repoch_protocol::fleet::Registry,
    v: &Validated,
) -> Result<repoch_registry::Client, EnrollError> {
    let Some((cert, key)) = &v.fleet_admin else {
        return Err(field(
            "registry.fleet_id",
            format!(
                "fleet {} has no record under {}: establishing it writes its record with an etcd administrator's credential (repoch enroll --fleet-admin-cert FILE --fleet-admin-key FILE), which no host's may write; to join an established fleet, set registry.fleet_id",
                r.fleet, r.prefix
            ),
        ));
    };
    let admin = repoch_protocol::fleet::Registry {
        cert: cert.clone(),
        key: key.clone(),
        ..r.clone()
    };
    crate::fleet::connect(&admin, true).map_err(|e| {
        let flag = match e.subject.as_str() {
            "registry.cert" => "--fleet-admin-cert".to_owned(),
            "registry.key" => "--fleet-admin-key".to_owned(),
            other => other.to_owned(),
        };
        field(flag, e.observed.clone())
    })
}

/// Whether a majority of the pinned `members`, each endpoint asked alone, hold `key` as
/// `value`, created at `revision` and never modified: a record read or written through an
/// endpoint relayed to a copy of the fleet exists there alone (or the fleet holds another
/// value at that revision, planted), and every recovery would refuse it.
fn held_by_majority(
    client: &mut repoch_registry::Client,
    key: &str,
    (revision, value): (i64, &[u8]),
    members: &[u64],
) -> Result<(), EnrollError> {
    let mut holding: Vec<u64> = Vec::new();
    let mut other = Vec::new();
    for (endpoint, answer) in client.get_each(key.as_bytes()) {
        match answer {
            Ok((h, Some(e)))
                if members.contains(&h.member)
                    && (e.create_revision, e.mod_revision) == (revision, revision)
                    && e.value == value
                    && e.value_bytes == value.len() =>
            {
                holding.push(h.member)
            }
            Ok((h, e)) => other.push(format!(
                "{endpoint} (member {:016x}): {}",
                h.member,
                e.map_or("absent".into(), |e| format!(
                    "{} bytes created at revision {}, modified at {}",
                    e.value_bytes, e.create_revision, e.mod_revision
                ))
            )),
            Err(e) => other.push(format!("{endpoint}: {e}")),
        }
    }
    let holding = crate::fleet::distinct(holding);
    let need = crate::fleet::quorum_of(members.len());
    if holding >= need {
        return Ok(());
    }
    Err(EnrollError::Registry(format!(
        "registry {key}: held as written ({} bytes) at revision {revision} by {} of the {} pinned members, each endpoint asked alone; {need} must ({})",
        value.len(),
        holding,
        members.len(),
        other.join("; ")
    )))
}

/// Whether `r`'s endpoints, each asked alone, answer as a majority of the cluster's
/// `voting` members: a recovery needs a majority of the pinned members to say the fleet
/// epoch is unclaimed, and then that it holds this host's claim, each at an endpoint of
/// its own (docs/THREAT-MODEL.md, "The fleet registry"). Fewer could never recover.
fn endpoints_cover(
    client: &mut repoch_registry::Client,
    r: &repoch_protocol::fleet::Registry,
    voting: &[u64],
) -> Result<(), EnrollError> {
    let mut heard: Vec<u64> = Vec::new();
    let mut silent = Vec::new();
    for (endpoint, answer) in client.get_each(r.fleet_key().as_bytes()) {
        match answer {
            Ok((h, _)) if voting.contains(&h.member) => heard.push(h.member),
            Ok((h, _)) => silent.push(format!("{endpoint}: member {:016x}, not voting", h.member)),
            Err(e) => silent.push(format!("{endpoint}: {e}")),
        }
    }
    let heard = crate::fleet::distinct(heard);
    let need = crate::fleet::quorum_of(voting.len());
    if heard >= need {
        return Ok(());
    }
    let silent = match silent.is_empty() {
        true => String::new(),
        false => format!(" ({})", silent.join("; ")),
    };
    Err(field(
        "registry.endpoints",
        format!(
            "the endpoints answer as {} of the cluster's {} voting members{silent}: a recovery needs {need}, each at an endpoint of its own; list every member",
            heard,
            voting.len()
        ),
    ))
}

/// The fleet's pin, from the fleet record `entry` the cluster answering (`header`, its
/// voting members) holds: checked against `v`'s fleet id and floor, or, with neither a
/// record nor an id, established (its record signed by `key`, written by the
/// administrator's client, kept in `admin`). With the record's create revision, its bytes,
/// and whether this enrollment established it.
fn pin_fleet(
    (client, admin): (
        &mut repoch_registry::Client,
        &mut Option<repoch_registry::Client>,
    ),
    r: &repoch_protocol::fleet::Registry,
    v: &Validated,
    entry: Option<&repoch_registry::Entry>,
    (header, voting): (&repoch_registry::Header, Vec<u64>),
    (key, now): (&SigningKey, u64),
) -> Result<(repoch_protocol::fleet::FleetPin, i64, bool, Vec<u8>), EnrollError> {
    use repoch_protocol::fleet::FleetRecord;
    let record = entry
        .map(|e| {
            FleetRecord::from_bytes(&e.value).map_err(|err| {
                field(
                    "registry.fleet",
                    format!("{} holds no fleet record ({err})", r.fleet_key()),
                )
            })
        })
        .transpose()?;
    Ok(match (v.fleet_id, record) {
        (None, Some(rec)) => {
            return Err(field(
                "registry.fleet_id",
                format!(
                    "fleet {} already has a record under {} (id {}, naming host {} as its establisher, signed by key {}): join it with registry.fleet_id only if that host's own enrollment printed this id; a record no host of yours established was planted",
                    r.fleet, r.prefix, rec.pin.id, rec.host, rec.key
                ),
            ))
        }
        (Some(id), None) => {
            return Err(field(
                "registry.fleet_id",
                format!(
                    "no fleet record at {} in cluster {:016x}: fleet {id} is not established there (check registry.prefix, exactly as its other hosts spell it, and registry.endpoints)",
                    r.fleet_key(),
                    header.cluster
                ),
            ))
        }
        (Some(id), Some(rec)) => {
            let read = entry.expect("a record read");
            let pin = check_join(r, id, &rec, read, (header, &voting))?;
            if pin.floor < v.token_floor {
                return Err(field(
                    "registry.token_floor",
                    format!(
                        "fleet {id}'s record holds the token floor {}, below this host's {}: its tokens could be at or below ones already used",
                        pin.floor, v.token_floor
                    ),
                ));
            }
            (pin, read.create_revision, false, read.value.clone())
        }
        (None, None) => {
            let record = new_fleet(r, header, voting, (v.token_floor, now))?.signed(key);
            unused_epoch(client, r, &record.pin.members)?;
            let writer = admin.insert(connect_admin(r, v)?);
            let revision = establish(writer, r, &record)?;
            (record.pin.clone(), revision, true, record.to_bytes())
        }
    })
}

/// Whether this host may join fleet `id` whose record `rec` (as `read`) the cluster
/// answering (`header`, its voting members) holds: the record never modified, its members
/// a majority of the cluster's and the cluster's a majority of its, the pinned cluster and
/// a pinned member answering. The pin to enroll.
fn check_join(
    r: &repoch_protocol::fleet::Registry,
    id: repoch_protocol::fleet::FleetId,
    rec: &repoch_protocol::fleet::FleetRecord,
    read: &repoch_registry::Entry,
    (header, voting): (&repoch_registry::Header, &[u64]),
) -> Result<repoch_protocol::fleet::FleetPin, EnrollError> {
    use repoch_protocol::fleet::FleetPin;
    let pin = rec.pin.clone();
    if read.mod_revision != read.create_revision {
        return Err(field(
            "registry.fleet_id",
            format!(
                "the fleet record at {} was modified (created at revision {}, modified at {}): it is never rewritten; re-establish the fleet",
                r.fleet_key(),
                read.create_revision,
                read.mod_revision
            ),
        ));
    }
    // The record's members a majority of the cluster's too: a record planted with
    // fewer members would pin a fleet that one member's copy could answer for.
    let live = FleetPin {
        members: voting.to_vec(),
        ..pin.clone()
    };
    if !live.majority_of(&pin.members) {
        return Err(field(
            "registry.fleet_id",
            format!(
                "the fleet record at {} pins the members {:x?}, no majority of the cluster's voting members {voting:x?}",
                r.fleet_key(),
                pin.members
            ),
        ));
    }
    let vouch = crate::fleet::Pinned {
        r: r.clone(),
        pin: FleetPin { id, ..pin.clone() },
    };
    use repoch_registry::Vouch as _;
    let e = rec.host.clone();
    vouch
        .record(Some(read))
        .and_then(|()| vouch.header(header))
        .and_then(|()| vouch.members(header, voting))
        .map_err(|why| {
            field(
                "registry.fleet_id",
                format!("fleet {id} (established by host {e}): {why}"),
            )
        })?;
    Ok(pin)
}

/// A new fleet's record, to be signed ([`FleetRecord::signed`] derives its id): the
/// answering cluster and its voting members, the floor, this host, the time.
fn new_fleet(
    r: &repoch_protocol::fleet::Registry,
    header: &repoch_registry::Header,
    voting: Vec<u64>,
    (floor, now): (u64, u64),
) -> Result<repoch_protocol::fleet::FleetRecord, EnrollError> {
    use repoch_protocol::fleet::{FleetId, FleetPin, FleetRecord, FLEET_ID_BYTES, MEMBERS_MAX};
    if voting.is_empty() || voting.len() > MEMBERS_MAX || header.cluster == 0 {
        return Err(EnrollError::Registry(format!(
            "registry {}: cluster {:016x} lists {} voting members: 1 to {MEMBERS_MAX} can be pinned",
            r.fleet_key(),
            header.cluster,
            voting.len()
        )));
    }
    Ok(FleetRecord {
        fleet: r.fleet.clone(),
        prefix: r.prefix.clone(),
        pin: FleetPin {
            id: FleetId([0; FLEET_ID_BYTES]),
            cluster: header.cluster,
            members: voting,
            floor,
        },
        host: r.host.clone(),
        established: now,
        key: PublicKey([0; 32]),
        signature: [0; repoch_protocol::limits::SIGNATURE_BYTES],
    })
}

/// The fleet epoch must be unused: a successor deployment takes a new fleet name.
fn unused_epoch(
    client: &mut repoch_registry::Client,
    r: &repoch_protocol::fleet::Registry,
    members: &[u64],
) -> Result<(), EnrollError> {
    // Each endpoint alone, as a recovery asks: one copy of the fleet at one endpoint
    // neither passes a used epoch nor refuses an unused one.
    let mut views: Vec<(u64, Option<repoch_registry::Entry>)> = Vec::new();
    let mut silent = Vec::new();
    for (endpoint, answer) in client.get_each(r.epoch_key().as_bytes()) {
        match answer {
            Ok((h, e)) if members.contains(&h.member) => views.push((h.member, e)),
            Ok((h, _)) => silent.push(format!("{endpoint}: member {:016x}, not pinned", h.member)),
            Err(e) => silent.push(format!("{endpoint}: {e}")),
        }
    }
    let heard = crate::fleet::distinct(views.iter().map(|(m, _)| *m));
    let need = crate::fleet::quorum_of(members.len());
    let key = r.epoch_key();
    if heard < need {
        return Err(EnrollError::Registry(format!(
            "registry {key}: {} of the {} pinned members answered, each endpoint asked alone; {need} must ({})",
            heard,
            members.len(),
            silent.join("; ")
        )));
    }
    if views.iter().any(|(_, e)| *e != views[0].1) {
        let seen: Vec<String> = views
            .iter()
            .map(|(m, e)| {
                let view = e.as_ref().map_or("unused".into(), crate::fleet::holder);
                format!("member {m:016x}: {view}")
            })
            .collect();
        return Err(EnrollError::Registry(format!(
            "registry {key}: the members disagree about the fleet epoch: {}",
            seen.join("; ")
        )));
    }
    match &views[0].1 {
        None => Ok(()),
        Some(e) => Err(field(
            "registry.fleet",
            format!(
                "the fleet epoch {key} is used ({}); a successor deployment takes a new fleet name",
                crate::fleet::holder(e)
            ),
        )),
    }
}

/// Creates the fleet record (create-if-absent, a lost answer read back): its create
/// revision. Refused when another enrollment established the fleet meanwhile.
fn establish(
    client: &mut repoch_registry::Client,
    r: &repoch_protocol::fleet::Registry,
    record: &repoch_protocol::fleet::FleetRecord,
) -> Result<i64, EnrollError> {
    use repoch_protocol::fleet::FleetRecord;
    let claimed = client
        .claim(
            r.fleet_key().as_bytes(),
            &record.to_bytes(),
            crate::fleet::CLAIM_ROUNDS_MAX,
            std::time::Duration::from_secs(crate::fleet::CLAIM_SECONDS_MAX),
        )
        .map_err(|e| EnrollError::Registry(format!("registry {}: {e}", r.fleet_key())))?;
    match claimed {
        repoch_registry::Claimed::Ours { entry, .. } => Ok(entry.create_revision),
        repoch_registry::Claimed::Theirs { entry, .. } => Err(field(
            "registry.fleet_id",
            format!(
                "fleet {} was established under {} meanwhile ({}): enroll again to join it",
                r.fleet,
                r.prefix,
                FleetRecord::from_bytes(&entry.value)
                    .map(|x| format!("id {}, by host {}", x.pin.id, x.host))
                    .unwrap_or_else(|e| format!("no fleet record: {e}"))
            ),
        )),
    }
}

/// Records this host under its fleet deployment's name (`PREFIX/hosts/FLEET/HOST`,
/// created only if absent) and lists the hosts enrolled for it; the key created is pushed
/// to the fleet's `recorded`. Refused: this host is already enrolled for the fleet as
/// another deployment.
fn register_host(
    f: &mut FleetJoin,
    host: &repoch_protocol::fleet::FleetHost,
) -> Result<Vec<repoch_protocol::fleet::FleetHost>, EnrollError> {
    use repoch_protocol::fleet::FleetHost;
    use repoch_registry::Claimed;
    let r = f.registry.clone();
    let unavailable = |e: repoch_registry::Error| {
        EnrollError::Registry(format!("registry {}: {e}", r.host_key()))
    };
    // Shown, not judged: the first HOSTS_SHOWN_MAX records that parse, however many keys
    // (planted or not) are there.
    let mut hosts: Vec<FleetHost> = Vec::new();
    f.client
        .scan(r.hosts_prefix().as_bytes(), usize::MAX, |e| {
            if hosts.len() < HOSTS_SHOWN_MAX {
                hosts.extend(FleetHost::from_bytes(&e.value).ok());
            }
        })
        .map_err(unavailable)?;
    let claimed = f
        .client
        .claim(
            r.host_key().as_bytes(),
            &host.to_bytes(),
            crate::fleet::CLAIM_ROUNDS_MAX,
            std::time::Duration::from_secs(crate::fleet::CLAIM_SECONDS_MAX),
        )
        .map_err(unavailable)?;
    match claimed {
        Claimed::Ours { entry, .. } => {
            f.recorded.push((r.host_key(), entry.create_revision));
            let members = f.pin.members.clone();
            let held = (entry.create_revision, &host.to_bytes()[..]);
            held_by_majority(&mut f.client, &r.host_key(), held, &members)?;
        }
        Claimed::Theirs { entry, .. } => {
            let was = FleetHost::from_bytes(&entry.value)
                .map(|h| format!("deployment {}", h.deployment))
                .unwrap_or_else(|e| format!("a value that is no host record ({e})"));
            return Err(field(
                "registry.host",
                format!(
                    "{} is already enrolled for fleet {} as {was} ({}): one deployment per host and fleet name",
                    r.host,
                    r.fleet,
                    r.host_key()
                ),
            ));
        }
    }
    hosts.retain(|h| h.host != r.host);
    hosts.push(host.clone());
    hosts.sort_by(|a, b| a.host.cmp(&b.host));
    Ok(hosts)
}

/// The hosts of a fleet an enrollment shows.
pub const HOSTS_SHOWN_MAX: usize = 64;

/// After a failed enrollment: removes the registry keys it created (each only if still
/// the one it created). What could not be removed, and the command that does.
fn unregister(f: &mut FleetJoin, recorded: &[(String, i64)]) -> Result<(), String> {
    let mut left = Vec::new();
    for (key, revision) in recorded {
        // The fleet record was written by the administrator's client: only it may remove it.
        let client = match (*key == f.registry.fleet_key(), f.admin.as_mut()) {
            (true, Some(admin)) => admin,
            _ => &mut f.client,
        };
        match client.remove(key.as_bytes(), *revision) {
            Ok(_) => {}
            Err(e) => left.push(format!(
                "{key} (created at revision {revision}) is left in the registry ({e}): remove it with `etcdctl del {key}` once no host uses it"
            )),
        }
    }
    match left.is_empty() {
        true => Ok(()),
        false => Err(left.join("; ")),
    }
}

/// Creates the journal with its genesis; returns its identity, genesis hash and whether the
/// append-only flag could be set.
fn create_journal(
    v: &Validated,
    id: DeploymentId,
    key: &SigningKey,
) -> Result<(repoch_protocol::Identity, Hash, Result<(), String>), EnrollError> {
    let path = Path::new(&v.journal_path);
    let parent = path.parent().expect("absolute path has a parent");
    let pfd = open_path(parent, OFlags::RDONLY | OFlags::DIRECTORY, 0).map_err(|e| {
        EnrollError::Refused {
            what: format!("journal directory {}", parent.display()),
            why: e.to_string(),
        }
    })?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .expect("validated path");
    let fd = repoch_sys::fs::open_at(
        &pfd,
        name,
        OFlags::RDWR | OFlags::APPEND | OFlags::CREATE | OFlags::EXCL,
        0o600,
    )
    .map_err(|e| EnrollError::Refused {
        what: format!("journal {}", v.journal_path),
        why: format!("{e} (enrollment never writes over an existing file)"),
    })?;
    let (frame, genesis) = next_frame(
        id,
        None,
        JournalBody::Genesis {
            producer_key: v.producer_key,
        },
        key,
    );
    let io = |e: std::io::Error| EnrollError::Io(format!("journal {}: {e}", v.journal_path));
    // Owner and mode before the append-only flag: afterwards even chown fails.
    rustix::fs::fchown(
        &fd,
        Some(rustix::process::Uid::from_raw(v.journal_uid)),
        Some(rustix::process::Gid::from_raw(v.journal_gid)),
    )
    .map_err(|e| io(e.into()))?;
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o600)).map_err(|e| io(e.into()))?;
    let n = rustix::io::write(&fd, &frame).map_err(|e| io(e.into()))?;
    if n != frame.len() {
        return Err(io(std::io::Error::other("short write")));
    }
    rustix::fs::fdatasync(&fd).map_err(|e| io(e.into()))?;
    rustix::fs::fsync(&pfd).map_err(|e| io(e.into()))?;
    let append_only = repoch_sys::fs::set_append_only(&fd);
    let ident = fstat_identity(&fd).map_err(io)?;
    if ident.birth.is_none() {
        // Checked before the deployment exists; the caller removes the journal.
        remove_journal(&v.journal_path);
        return Err(EnrollError::Refused {
            what: format!("journal {}", v.journal_path),
            why: NO_BIRTH_TIME.into(),
        });
    }
    Ok((ident, genesis, append_only.map_err(String::from)))
}

/// Removes a journal created by a failed enrollment (clearing the append-only flag first).
fn remove_journal(path: &str) {
    if let Ok(fd) = open_path(Path::new(path), OFlags::RDONLY, 0) {
        repoch_sys::fs::clear_append_only(&fd);
    }
    let _ = std::fs::remove_file(path);
}

/// Longest wait for another enrollment on the same state root to finish.
pub const ENROLL_LOCK_SECONDS_MAX: u64 = 30;
/// Pause between attempts to take the enrollment lock.
const ENROLL_LOCK_POLL_MILLISECONDS: u64 = 20;

/// Serializes enrollments on one state root: an exclusive flock on the deployments
/// directory, held until the returned fd drops. The one-successor check and the creation
/// of the successor are then atomic with respect to another enrollment. Bounded by
/// `ENROLL_LOCK_SECONDS_MAX`; past it, a clear refusal naming the wait.
fn lock_enrollments(layout: &Layout) -> Result<std::os::fd::OwnedFd, EnrollError> {
    let deployments = layout.deployments();
    std::fs::create_dir_all(&deployments)
        .map_err(|e| EnrollError::Io(format!("{}: {e}", deployments.display())))?;
    let fd = open_path(&deployments, OFlags::RDONLY | OFlags::DIRECTORY, 0)
        .map_err(|e| EnrollError::Io(format!("{}: {e}", deployments.display())))?;
    let start = std::time::Instant::now();
    loop {
        match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(fd),
            Err(rustix::io::Errno::WOULDBLOCK) => {}
            Err(e) => {
                return Err(EnrollError::Io(format!(
                    "{}: flock: {e}",
                    deployments.display()
                )))
            }
        }
        if start.elapsed() >= std::time::Duration::from_secs(ENROLL_LOCK_SECONDS_MAX) {
            return Err(EnrollError::Io(format!(
                "another enrollment held {} for over {ENROLL_LOCK_SECONDS_MAX} s",
                deployments.display()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(
            ENROLL_LOCK_POLL_MILLISECONDS,
        ));
    }
}

/// Refuses a second successor of `predecessor`: each successor could recover once, so two
/// would fork its lineage (docs/THREAT-MODEL.md). Every enrolled deployment is read; one
/// that cannot be read might be a successor, so it refuses too (fail closed). Bounded by
/// the deployments `store::list` returns.
fn only_successor(
    layout: &Layout,
    issuer: &PublicKey,
    predecessor: DeploymentId,
) -> Result<(), EnrollError> {
    let ids = store::list(layout).map_err(|e| {
        field(
            "predecessor",
            format!("cannot list the enrolled deployments: {e}"),
        )
    })?;
    for id in ids {
        let d = store::Deployment::open(layout, issuer, id).map_err(|r| {
            field(
                "predecessor",
                format!(
                    "deployment {id} cannot be read, it may already succeed {predecessor}: {r}"
                ),
            )
        })?;
        if d.predecessor().is_some_and(|p| p.deployment == predecessor) {
            return Err(field(
                "predecessor",
                format!("{predecessor} already has a successor, {id}: a lineage has one successor"),
            ));
        }
    }
    Ok(())
}

/// Enrolls a validated manifest. Root only (checked by the caller's CLI too).
pub fn enroll(layout: &Layout, v: &Validated, now: u64) -> Result<Enrolled, EnrollError> {
    let key = issuer_key(layout, true)?;
    let issuer = PublicKey::from(&key.verifying_key());
    // One enrollment at a time, from the successor check until the deployment exists.
    let _enrolling = lock_enrollments(layout)?;
    let predecessor = predecessor_of(layout, v, &issuer)?;
    unnamed_controllers(v)?;
    let inventory = existing_inventory(v)?;
    // The fleet, before anything is written here: joined (its record read and this
    // cluster checked against it) or established (its record made now).
    let mut fleet = match &v.registry {
        Some(r) => Some(join_fleet(r, v, (&key, now))?),
        None => None,
    };
    let done = enroll_with(
        layout,
        v,
        now,
        (&key, predecessor, inventory),
        fleet.as_mut(),
    );
    match (done, fleet) {
        (Err(e), Some(mut f)) => {
            // Nothing local was kept: neither is anything this enrollment wrote to the
            // registry (each key only if it is still the one it created).
            let keys = std::mem::take(&mut f.recorded);
            match unregister(&mut f, &keys) {
                Ok(()) => Err(e),
                Err(left) => Err(EnrollError::Io(format!("{e}; {left}"))),
            }
        }
        (done, _) => done,
    }
}

/// Every service systemd could start that runs an enrolled executable is named under
/// `containment.units` (docs/OPERATOR.md, "Controllers found, not only told"): one left out
/// would start the old root again after the grant. Refused now, as every observation would.
fn unnamed_controllers(v: &Validated) -> Result<(), EnrollError> {
    use repoch_protocol::text::escape;
    let c = &v.containment;
    let systemctl = repoch_sys::systemd::systemctl_command();
    match crate::observe::containment::unnamed_services(&c.executables, &c.units, &systemctl) {
        None => Ok(()),
        Some(Err(e)) => Err(field(
            "containment.units",
            format!(
                "systemd could not be asked which services run the enrolled executables: {}",
                escape(&e.to_string())
            ),
        )),
        Some(Ok(u)) => match u.found.first() {
            None => Ok(()),
            Some((unit, how)) => Err(field(
                "containment.units",
                format!(
                    "{} {}: a controller of the old root; name it here (and mask it before \
                     recovering)",
                    escape(unit),
                    escape(how)
                ),
            )),
        },
    }
}

/// The predecessor named by the manifest: an enrolled deployment whose epoch is used (never
/// a live `enrolled` one) and that has no successor yet.
fn predecessor_of(
    layout: &Layout,
    v: &Validated,
    issuer: &PublicKey,
) -> Result<Option<Predecessor>, EnrollError> {
    let issuer = *issuer;
    Ok(match &v.predecessor {
        None => None,
        Some(p) => {
            let pid = store::resolve(layout, p).map_err(|r| field("predecessor", r.to_string()))?;
            let d = store::Deployment::open(layout, &issuer, pid)
                .map_err(|r| field("predecessor", r.to_string()))?;
            let rep = d.report();
            if let Some((at, why)) = &rep.problem {
                return Err(field(
                    "predecessor",
                    format!(
                        "its log is {} at offset {at}: {why}",
                        rep.classification.as_str()
                    ),
                ));
            }
            if rep.classification == repoch_protocol::epoch::Classification::Enrolled {
                return Err(field(
                    "predecessor",
                    "its epoch is unused (enrolled): recover it, do not replace it",
                ));
            }
            only_successor(layout, &issuer, pid)?;
            floor_above(v, rep)?;
            crate::barrier::reach("enroll-after-successor-check");
            Some(Predecessor {
                deployment: pid,
                final_hash: rep.last_hash().expect("a verified log has a genesis"),
            })
        }
    })
}

/// A successor with a registry: its `token_floor` at least the fencing token its
/// predecessor's log consumed with (the largest it holds). A cluster rebuilt from its
/// template restarts its revisions, and no host can tell a rebuilt cluster from the one
/// its predecessor claimed in: without the floor, the successor's token could be at or
/// below its predecessor's, which a store keeping the largest token would take as older.
fn floor_above(v: &Validated, rep: &repoch_protocol::epoch::LogReport) -> Result<(), EnrollError> {
    use repoch_protocol::epoch::EpochBody;
    if v.registry.is_none() {
        return Ok(());
    }
    let consumed = rep
        .records
        .iter()
        .filter_map(|r| match &r.record.record.body {
            EpochBody::Consume { fencing, .. } => *fencing,
            _ => None,
        })
        .max_by_key(|t| t.revision);
    match consumed {
        Some(t) if v.token_floor < t.revision => Err(field(
            "registry.token_floor",
            format!(
                "{} is below the fencing token {} (cluster {:016x}) the predecessor's log consumed with: set token_floor = {} or more",
                v.token_floor, t.revision, t.cluster, t.revision
            ),
        )),
        _ => Ok(()),
    }
}

/// Every inventory object that must already exist (fences, stores), by identity.
fn existing_inventory(v: &Validated) -> Result<Vec<InventoryEntry>, EnrollError> {
    let mut inventory = Vec::new();
    for (i, f) in v.fences.iter().enumerate() {
        let identity = fence_at(&format!("fences[{i}]"), f)?;
        inventory.push(InventoryEntry {
            role: Role::Fence,
            path: f.clone(),
            identity,
        });
    }
    for s in &v.stores {
        inventory.push(InventoryEntry {
            role: Role::Store,
            path: s.clone(),
            identity: identity_at("store", s)?,
        });
    }
    Ok(inventory)
}

/// Enrolls once the fleet (if any) is known: the journal, the state directory, the signed
/// manifest and the genesis, and this host's record in the registry.
/// The staged state directory's own entries (the directory, its log and its lock), each
/// by identity with its birth time.
fn staged_inventory(
    state_dir: &Path,
    staged: &crate::log::Staged<std::os::fd::OwnedFd, std::os::fd::OwnedFd>,
) -> Result<Vec<InventoryEntry>, String> {
    let ident = |fd| match fstat_identity(fd) {
        Ok(id) if id.birth.is_none() => Err(format!("state directory: {NO_BIRTH_TIME}")),
        Ok(id) => Ok(id),
        Err(e) => Err(e.to_string()),
    };
    let path = |n: &str| state_dir.join(n).display().to_string();
    Ok(vec![
        InventoryEntry {
            role: Role::StateDir,
            path: state_dir.display().to_string(),
            identity: ident(&staged.dir)?,
        },
        InventoryEntry {
            role: Role::EpochLog,
            path: path(crate::layout::LOG_FILE),
            identity: ident(&staged.log)?,
        },
        InventoryEntry {
            role: Role::IssuerLock,
            path: path(crate::layout::LOCK_FILE),
            identity: ident(&staged.lock)?,
        },
    ])
}

/// The manifest of deployment `id` enrolled at `now` under `issuer`: the validated
/// manifest as written, the inventory by identity, the lineage and the pinned fleet.
fn manifest_of(
    v: &Validated,
    (id, now, issuer): (DeploymentId, u64, PublicKey),
    inventory: Vec<InventoryEntry>,
    (predecessor, journal_genesis): (Option<Predecessor>, Hash),
    registry: Option<repoch_protocol::fleet::Registry>,
) -> Manifest {
    Manifest {
        deployment: id,
        label: v.label.clone(),
        enrolled_at: now,
        issuer_key: issuer,
        inventory,
        target: Target {
            ready_path: v.ready.clone(),
        },
        containment: v.containment.clone(),
        consumer: v.consumer.clone(),
        lineage: Lineage {
            predecessor,
            journal_path: v.journal_path.clone(),
            journal_genesis,
            producer_key: v.producer_key,
        },
        registry,
    }
}

/// This host's record in the fleet `f` joins, for deployment `id` whose signed manifest
/// hashes to `manifest` and whose issuer key is `issuer`, created; the fleet's hosts now.
fn register_staged(
    f: &mut FleetJoin,
    v: &Validated,
    (id, manifest, issuer): (DeploymentId, Hash, PublicKey),
) -> Result<Vec<repoch_protocol::fleet::FleetHost>, EnrollError> {
    let host = repoch_protocol::fleet::FleetHost {
        fleet: f.registry.fleet.clone(),
        host: f.registry.host.clone(),
        deployment: id,
        manifest,
        label: v.label.clone(),
        issuer_key: issuer,
    };
    register_host(f, &host)
}

/// A deployment's first record: its signed manifest's hash, its issuer key, its
/// predecessor.
fn genesis_of(
    id: DeploymentId,
    manifest: Hash,
    issuer_key: PublicKey,
    predecessor: Option<Predecessor>,
) -> EpochRecord {
    EpochRecord {
        deployment: id,
        seq: 0,
        prev: Hash::ZERO,
        body: EpochBody::Genesis {
            manifest,
            issuer_key,
            predecessor,
        },
    }
}

/// The epoch log made append-only too, where the file system allows it.
fn log_append_only(state_dir: &Path) -> Result<(), String> {
    open_path(&state_dir.join(crate::layout::LOG_FILE), OFlags::RDONLY, 0)
        .map_err(|e| e.to_string())
        .and_then(|fd| repoch_sys::fs::set_append_only(&fd).map_err(String::from))
}

fn enroll_with(
    layout: &Layout,
    v: &Validated,
    now: u64,
    (key, predecessor, mut inventory): (&SigningKey, Option<Predecessor>, Vec<InventoryEntry>),
    mut fleet: Option<&mut FleetJoin>,
) -> Result<Enrolled, EnrollError> {
    let issuer = PublicKey::from(&key.verifying_key());
    let id = DeploymentId(
        crate::keys::random().map_err(|e| EnrollError::Io(format!("getrandom: {e}")))?,
    );
    let deployments = layout.deployments();
    std::fs::create_dir_all(&deployments)
        .map_err(|e| EnrollError::Io(format!("{}: {e}", deployments.display())))?;
    let (journal_id, journal_genesis, append_only) = create_journal(v, id, key)?;
    inventory.push(InventoryEntry {
        role: Role::Journal,
        path: v.journal_path.clone(),
        identity: journal_id,
    });
    let state_dir = layout.state_dir(&id);
    let dfd = open_path(&deployments, OFlags::RDONLY | OFlags::DIRECTORY, 0)
        .map_err(|e| EnrollError::Io(format!("{}: {e}", deployments.display())))?;
    let mut manifest_hash = Hash::ZERO;
    let mut fleet_hosts = Vec::new();
    let mut registry_error = None;
    let result = enroll_sequence(&mut Real, &dfd, &id, issuer, |_, staged| {
        let mut inv = staged_inventory(&state_dir, staged)?;
        inv.extend(inventory.iter().cloned());
        let manifest = manifest_of(
            v,
            (id, now, issuer),
            inv,
            (predecessor, journal_genesis),
            fleet.as_ref().map(|f| f.registry.clone()),
        );
        let bytes = SignedManifest::sign(manifest, key).to_bytes();
        manifest_hash = Hash::of(&bytes);
        let genesis = genesis_of(id, manifest_hash, issuer, predecessor);
        // Last, once the manifest's hash is known: a registry that refuses or does not
        // answer leaves nothing enrolled here.
        if let Some(f) = fleet.as_mut() {
            fleet_hosts = register_staged(f, v, (id, manifest_hash, issuer))
                .inspect_err(|e| registry_error = Some(e.clone()))
                .map_err(|e| e.to_string())?;
        }
        Ok((bytes, SignedEpochRecord::sign(genesis, key)))
    });
    if let Err(e) = result {
        // Leave nothing a later enrollment or issuance could take for a deployment.
        let _ = std::fs::remove_dir_all(deployments.join(staging_name(&id)));
        remove_journal(&v.journal_path);
        return Err(registry_error
            .unwrap_or_else(|| EnrollError::Io(format!("enrollment failed, nothing kept: {e}"))));
    }
    let log_append_only = log_append_only(&state_dir);
    Ok(Enrolled {
        id,
        state_dir,
        journal_append_only: append_only,
        log_append_only,
        manifest_hash,
        fleet_hosts,
        fleet: fleet.map(|f| (f.pin.id, f.established)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29";

    fn manifest(extra: &str) -> String {
        format!(
            "label = \"x\"\nfences = [\"/srv/lock\"]\nready = \"/srv/READY\"\n{extra}\n[journal]\npath = \"/srv/journal\"\nproducer_key = \"{KEY}\"\n\
             [consumer]\nuid = 0\ngid = 0\nexecutable = \"/usr/bin/c\"\nkey = \"{KEY}\"\n"
        )
    }

    fn field_of(text: &str) -> String {
        match validate(text).unwrap_err() {
            EnrollError::Manifest { field, .. } => field,
            other => panic!("{other}"),
        }
    }

    #[test]
    fn a_label_of_invisible_fillers_is_refused() {
        // Hangul fillers and the braille blank are letters and symbols, no control or
        // format character, yet show as blank: "billing" and "billing" with one of them
        // appended, or a label of them alone, read alike to an operator choosing a
        // deployment. Found by attacking the release binaries: such labels enrolled.
        for label in [
            "billing\u{3164}",
            "\u{115F}billing",
            "bill\u{2800}ing",
            "\u{FFA0}",
            "\u{1160}",
            " ",
        ] {
            let text = manifest("").replace("label = \"x\"", &format!("label = \"{label}\""));
            assert_eq!(field_of(&text), "label", "{label:?}");
        }
        let text = manifest("").replace("label = \"x\"", "label = \"billing ✓\"");
        assert!(validate(&text).is_ok());
    }

    #[test]
    fn a_minimal_manifest_validates() {
        let v = validate(&manifest("")).unwrap();
        assert_eq!(v.fences, ["/srv/lock"]);
        assert!(v.containment.units.is_empty());
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            field_of(&manifest("").replace("/srv/lock", "srv/lock")),
            "fences[0]"
        );
        assert_eq!(
            field_of(&manifest("").replace("fences = [\"/srv/lock\"]", "fences = []")),
            "fences"
        );
        assert_eq!(field_of(&manifest("stores = [\"/srv/lock\"]")), "stores[0]");
        assert_eq!(
            field_of(&manifest("[containment]\ncgroups = [\"/\"]")),
            "containment.cgroups[0]"
        );
        assert_eq!(
            field_of(&manifest("[containment]\nunits = [\"a/b.service\"]")),
            "containment.units[0]"
        );
        for pattern in [
            "old@x@.service",
            "@.service",
            "old*.service",
            "old?.service",
            "old[12].service",
        ] {
            assert_eq!(
                field_of(&manifest(&format!(
                    "[containment]\nunits = [\"{pattern}\"]"
                ))),
                "containment.units[0]",
                "{pattern}"
            );
        }
        assert_eq!(
            field_of(&manifest("").replace(&format!("\nkey = \"{KEY}\""), "\nkey = \"00\"")),
            "consumer.key"
        );
        assert_eq!(
            field_of(&manifest("").replace("/usr/bin/c", "/usr/../c")),
            "consumer.executable"
        );
    }

    #[test]
    fn lists_are_bounded() {
        let many: Vec<String> = (0..=FENCES_MAX).map(|i| format!("\"/srv/l{i}\"")).collect();
        let text = manifest("").replace(
            "fences = [\"/srv/lock\"]",
            &format!("fences = [{}]", many.join(", ")),
        );
        assert_eq!(field_of(&text), "fences");
    }

    #[test]
    fn a_socket_file_names_a_listener_a_real_owner_and_permission_bits() {
        let ls = vec![Listener::Unix("/run/a.sock".into())];
        let named = |path: &str, mode, uid| {
            std::collections::BTreeMap::from([(
                path.to_owned(),
                SocketFileToml {
                    mode,
                    uid,
                    gid: None,
                },
            )])
        };
        let f = socket_files(&ls, &named("/run/a.sock", 0o660, Some(7))).unwrap();
        assert_eq!((f[0].mode, f[0].uid), (0o660, Some(7)));
        // None named and no socket there: systemd's default mode, repochd's owner.
        let f = socket_files(&ls, &Default::default()).unwrap();
        assert_eq!((f[0].mode, f[0].uid), (SOCKET_MODE_DEFAULT, None));
        for (path, mode, uid) in [
            ("/run/b.sock", 0o660, None),
            ("/run/a.sock", 0o1660, None),
            ("/run/a.sock", 0o660, Some(u32::MAX)),
        ] {
            assert!(
                socket_files(&ls, &named(path, mode, uid)).is_err(),
                "{path} {mode:o} {uid:?}"
            );
        }
    }

    #[test]
    fn a_listener_on_a_multicast_or_broadcast_address_is_refused() {
        // Such an address binds yet serves no one: held, it holds nothing the old root
        // served, and a grant of it would hand the new root a socket no client reaches.
        for (l, why) in [
            ("udp:224.0.0.251:5353", "multicast"),
            ("udp:239.1.2.3:9", "multicast"),
            ("udp:[ff02::fb]:5353", "multicast"),
            ("tcp:255.255.255.255:80", "broadcast"),
        ] {
            let e = parse_listener(l).unwrap_err();
            assert!(e.contains(why), "{l}: {e}");
        }
        assert!(parse_listener("udp:223.255.255.255:9").is_ok());
    }

    #[test]
    fn listeners_parse_or_say_why() {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        assert_eq!(
            parse_listener("tcp:127.0.0.1:7070"),
            Ok(Listener::Tcp(Inet::at(lo, 7070)))
        );
        assert_eq!(
            parse_listener("udp:[::1]:53"),
            Ok(Listener::Udp(Inet::at(IpAddr::V6(Ipv6Addr::LOCALHOST), 53)))
        );
        assert_eq!(
            parse_listener("tcp:*:7070"),
            Ok(Listener::Tcp(Inet::any(7070)))
        );
        assert_eq!(
            parse_listener("udp:0.0.0.0:53"),
            Ok(Listener::Udp(Inet::at(
                IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                53
            )))
        );
        // What is printed is what is typed back in.
        for l in [
            "tcp:127.0.0.1:7070",
            "udp:[::1]:53",
            "tcp:*:7070",
            "tcp:[::]:80",
        ] {
            assert_eq!(parse_listener(l).unwrap().to_string(), l);
        }
        // A port alone names no address: refused, saying how to write one.
        let e = parse_listener("tcp:7070").unwrap_err();
        assert!(
            e.contains("tcp:127.0.0.1:7070") && e.contains("tcp:*:7070"),
            "{e}"
        );
        // Another spelling of what would be printed is refused, naming the one spelling.
        for (other, one) in [
            ("tcp:*:080", "*:80"),
            ("tcp:*:+80", "*:80"),
            ("tcp:127.0.0.1:080", "127.0.0.1:80"),
            ("udp:[::1%1]:53", "[::1]:53"),
            ("tcp:[::1.2.3.4]:80", "[::102:304]:80"),
            ("tcp:[0::1]:80", "[::1]:80"),
        ] {
            let e = parse_listener(other).unwrap_err();
            assert!(e.contains(&format!("written {one}")), "{other}: {e}");
        }
        let l = |s: &str| parse_listener(s).unwrap();
        assert_eq!(overlapping(&[l("tcp:*:80"), l("udp:*:80")]), None);
        assert_eq!(
            overlapping(&[
                l("tcp:127.0.0.1:80"),
                l("tcp:[::1]:80"),
                l("tcp:127.0.0.1:81")
            ]),
            None
        );
        assert_eq!(
            overlapping(&[l("tcp:*:80"), l("tcp:127.0.0.1:80")]),
            Some((0, 1))
        );
        assert_eq!(
            overlapping(&[l("udp:*:53"), l("tcp:*:53"), l("udp:[::1]:53")]),
            Some((0, 2))
        );
        assert_eq!(
            overlapping(&[l("tcp:[::1]:80"), l("tcp:[::1]:80")]),
            Some((0, 1))
        );
        assert_eq!(
            overlapping(&[l("unix:/run/a"), l("unix:/run/a")]),
            Some((0, 1))
        );
        for bad in [
            "tcp:[::ffff:127.0.0.1]:7070",
            "tcp:[fe80::1]:7070",
            "tcp:localhost:7070",
            "tcp:127.0.0.1",
            "tcp:127.0.0.1:0",
            "udp:*:0",
            "tcp:::1:7070",
        ] {
            assert!(parse_listener(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_listener("unix:/run/x.sock"),
            Ok(Listener::Unix("/run/x.sock".into()))
        );
        assert!(parse_listener("tcp:70000").is_err());
        for zero in ["tcp:*:0", "udp:127.0.0.1:0"] {
            assert_eq!(
                parse_listener(zero),
                Err("\"0\" is not a port (1..65535)".into())
            );
        }
        assert!(parse_listener("sctp:1")
            .unwrap_err()
            .contains("unknown listener kind"));
        assert!(parse_listener("unix:relative").is_err());
    }
}

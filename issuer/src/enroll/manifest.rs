//! The manifest as an operator writes it, and its validation into [`Validated`]: every
//! field checked before anything is touched on disk (docs/OPERATOR.md, "The manifest,
//! field by field").

use super::*;

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
    /// Authorities of the running old root left out on purpose, `"KIND:VALUE" = "reason"`
    /// (docs/OPERATOR.md, "Discovering the old root"); kept in the signed manifest.
    #[serde(default)]
    pub waive: std::collections::BTreeMap<String, String>,
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
    let mut containment = check_containment(m.containment)?;
    containment.waived = waivers(&m.waive)?;
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
pub(super) fn check_bounds(m: &ManifestToml) -> Result<(), EnrollError> {
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
pub(super) fn check_paths(m: &ManifestToml) -> Result<(), EnrollError> {
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
pub(super) fn check_containment(c: ContainmentToml) -> Result<Containment, EnrollError> {
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
        waived: Vec::new(),
    })
}

/// The `[waive]` table as the signed manifest keeps it (sorted by `what`, as the table
/// is): each `KIND:VALUE` of a known kind, with a reason, both plain text.
fn waivers(
    table: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<repoch_protocol::manifest::Waiver>, EnrollError> {
    use repoch_protocol::manifest::{Waiver, WAIVER_KINDS};
    bounded("waive", &table.iter().collect::<Vec<_>>(), WAIVERS_MAX)?;
    table
        .iter()
        .map(|(what, reason)| {
            let w = Waiver {
                what: what.clone(),
                reason: reason.clone(),
            };
            match w.well_formed() {
                true => Ok(w),
                false => Err(field(
                    format!("waive.{}", repoch_protocol::text::escape(what)),
                    format!(
                        "expected \"KIND:VALUE\" = \"REASON\", KIND one of {}, a reason, each at most \
                         {WAIVER_TEXT_BYTES_MAX} bytes of plain text",
                        WAIVER_KINDS.join(", ")
                    ),
                )),
            }
        })
        .collect()
}

/// Each `ENGINE:NAME` parsed with its engine's socket (root's, checked now as at every
/// observation), sorted and distinct (one encoding).
pub(super) fn containers(
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
            pinned: None,
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
pub(super) fn engine_socket(engine: &str, engines: &EnginesToml) -> Result<String, EnrollError> {
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
pub(super) fn registry_pins(
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

pub(super) fn registry_field(
    r: RegistryToml,
) -> Result<repoch_protocol::fleet::Registry, EnrollError> {
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

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
use crate::log::{enroll_sequence, staging_name, EnrollSequenceError};
use crate::storage::Real;
use crate::store::{self, fstat_identity};
use repoch_sys::fs::open_path;

mod crosscheck;
mod fleet;
mod journal;
mod lineage;
mod listeners;
mod manifest;
pub use crosscheck::CrossCheck;

use fleet::*;
use journal::*;
use lineage::*;
pub use listeners::*;
pub use manifest::*;

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

/// Whether a file could be made append-only, or the file system's (or the kernel's) answer.
pub type AppendOnly = Result<(), repoch_sys::error::Error>;

/// The outcome of an enrollment.
#[derive(Debug)]
pub struct Enrolled {
    pub id: DeploymentId,
    pub state_dir: PathBuf,
    pub journal_append_only: AppendOnly,
    /// Whether the epoch log could be made append-only.
    pub log_append_only: AppendOnly,
    pub manifest_hash: Hash,
    /// With a `[registry]`: the hosts enrolled for the fleet deployment now (this one
    /// among them), by name.
    pub fleet_hosts: Vec<repoch_protocol::fleet::FleetHost>,
    /// With a `[registry]`: the fleet's id, and whether this enrollment established it.
    pub fleet: Option<(repoch_protocol::fleet::FleetId, bool)>,
    /// What the cross-check with the running old root did.
    pub cross_check: crosscheck::CrossCheck,
    /// The named containers as enrolled: each pinned to its full id when its engine had it.
    pub containers: Vec<repoch_protocol::manifest::ContainerRef>,
    /// The named containers their engines had none of, or could not be asked about:
    /// `(ENGINE:NAME, what)`, left unpinned.
    pub containers_absent: Vec<(String, String)>,
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

/// Enrolls a validated manifest. Root only (checked by the caller's CLI too).
pub fn enroll(layout: &Layout, v: &Validated, now: u64) -> Result<Enrolled, EnrollError> {
    // Each named container pinned to the full id of the one its name names now.
    let mut v = v.clone();
    let pinning = crate::observe::containers::pin_at_enrollment(&mut v.containment.containers);
    let v = &v;
    let key = issuer_key(layout, true)?;
    let issuer = PublicKey::from(&key.verifying_key());
    // One enrollment at a time, from the successor check until the deployment exists.
    let _enrolling = lock_enrollments(layout)?;
    let predecessor = predecessor_of(layout, v, &issuer)?;
    unnamed_controllers(v)?;
    let cross_check = crosscheck::cross_check(v, &pinning)?;
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
    .map(|e| Enrolled {
        cross_check,
        containers: v.containment.containers.clone(),
        containers_absent: pinning.absent,
        ..e
    })
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

/// The staged state directory's own entries (the directory, its log and its lock), each
/// by identity with its birth time.
fn staged_inventory(
    state_dir: &Path,
    staged: &crate::log::Staged<std::os::fd::OwnedFd, std::os::fd::OwnedFd>,
) -> Result<Vec<InventoryEntry>, EnrollError> {
    let failed = |why: String| EnrollError::Io(format!("enrollment failed, nothing kept: {why}"));
    let ident = |fd| match fstat_identity(fd) {
        Ok(id) if id.birth.is_none() => Err(failed(format!("state directory: {NO_BIRTH_TIME}"))),
        Ok(id) => Ok(id),
        Err(e) => Err(failed(e.to_string())),
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
fn log_append_only(state_dir: &Path) -> AppendOnly {
    use repoch_sys::error::Context as _;
    let log = state_dir.join(crate::layout::LOG_FILE);
    let fd = open_path(&log, OFlags::RDONLY, 0).context(log.display())?;
    repoch_sys::fs::set_append_only(&fd)
}

/// Enrolls once the fleet (if any) is known: the journal, the state directory, the signed
/// manifest and the genesis, and this host's record in the registry.
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
            fleet_hosts = register_staged(f, v, (id, manifest_hash, issuer))?;
        }
        Ok((bytes, SignedEpochRecord::sign(genesis, key)))
    });
    if let Err(e) = result {
        // Leave nothing a later enrollment or issuance could take for a deployment.
        let _ = std::fs::remove_dir_all(deployments.join(staging_name(&id)));
        remove_journal(&v.journal_path);
        return Err(match e {
            EnrollSequenceError::Describe(e) => e,
            e => EnrollError::Io(format!("enrollment failed, nothing kept: {e}")),
        });
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
        cross_check: crosscheck::CrossCheck::NotRun {
            why: "not asked".into(),
        },
        containers: Vec::new(),
        containers_absent: Vec::new(),
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

//! Joining a fleet at enrollment: the registry reached and pinned (its cluster, a majority
//! of its members, its fleet record), the fleet established or its epoch found unused, this
//! host's record written, and what a failed enrollment wrote removed.

use super::*;

/// A fleet as an enrollment found it, or made it: the connected client (and the
/// administrator's, which wrote the fleet record, when this enrollment established it),
/// the `[registry]` with its pin, whether this enrollment established the fleet, and each
/// registry key it created with its create revision (removed if the enrollment fails).
#[derive(Debug)]
pub(super) struct FleetJoin {
    pub(super) client: repoch_registry::Client,
    pub(super) admin: Option<repoch_registry::Client>,
    pub(super) registry: repoch_protocol::fleet::Registry,
    pub(super) pin: repoch_protocol::fleet::FleetPin,
    pub(super) established: bool,
    pub(super) recorded: Vec<(String, i64)>,
}

/// Reads the fleet `r` names (docs/OPERATOR.md, "A fleet registry"), once this host's
/// credential is proven unable to write the fleet record, another host's record or a key
/// outside the prefix. With the manifest's `registry.fleet_id`: its record must exist
/// under the prefix with that id, signed by the key the id names, the answering cluster
/// must be the record's, and its members a majority of the record's. Without: no record
/// may exist; the fleet is established with a record signed by this host's issuer key
/// (`key`), written with the administrator's credential. Refused either way when the
/// fleet epoch is already used.
pub(super) fn join_fleet(
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
pub(super) fn connect_enrolling(
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
pub(super) fn connect_admin(
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
pub(super) fn held_by_majority(
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
pub(super) fn endpoints_cover(
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
pub(super) fn pin_fleet(
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
pub(super) fn check_join(
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
pub(super) fn new_fleet(
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
pub(super) fn unused_epoch(
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
pub(super) fn establish(
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
pub(super) fn register_host(
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

/// A registry key a failed enrollment created and could not remove (the registry's answer
/// below it), and the command that does.
#[derive(Debug)]
pub(super) struct LeftKey {
    key: String,
    revision: i64,
    why: repoch_registry::Error,
}

impl std::fmt::Display for LeftKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let LeftKey { key, revision, why } = self;
        write!(
            f,
            "{key} (created at revision {revision}) is left in the registry ({why}): remove it with `etcdctl del {key}` once no host uses it"
        )
    }
}

/// The keys a failed enrollment left in the registry: the registry's doing (it did not
/// answer, or refused), never the manifest's.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub(super) struct LeftInRegistry(Vec<LeftKey>);

/// After a failed enrollment: removes the registry keys it created (each only if still
/// the one it created). What could not be removed, and the command that does.
pub(super) fn unregister(
    f: &mut FleetJoin,
    recorded: &[(String, i64)],
) -> Result<(), LeftInRegistry> {
    let mut left = Vec::new();
    for (key, revision) in recorded {
        // The fleet record was written by the administrator's client: only it may remove it.
        let client = match (*key == f.registry.fleet_key(), f.admin.as_mut()) {
            (true, Some(admin)) => admin,
            _ => &mut f.client,
        };
        if let Err(why) = client.remove(key.as_bytes(), *revision) {
            left.push(LeftKey {
                key: key.clone(),
                revision: *revision,
                why,
            });
        }
    }
    match left.is_empty() {
        true => Ok(()),
        false => Err(LeftInRegistry(left)),
    }
}

//! Containers as their engines report them (docs/OPERATOR.md, "Containers"): a container
//! engine is a controller that can start the old root again, so each named container is
//! asked of its engine at every observation and held, from the first observation on, by
//! the engine's event stream.
//!
//! Docker and podman are asked through the Docker Engine API, containerd through its own
//! (a container is its `NAMESPACE/ID`, its state its task's, its restart policy the restart
//! monitor's label: see `repoch_engines::containerd`).
//!
//! Contained means, for each: its engine's socket is root's; the engine answers; the
//! container is absent, or present and not running, restarting or paused, with no process
//! and no exec session, and a restart policy that cannot start it again (`no`); it is the
//! container of the first observation (its full id and creation time pinned then, and its
//! last start); and the engine reported
//! no event that could start or change it since (a start, restart, unpause, exec, update,
//! create: anything but its end and its removal). An event stream that ended is unknown,
//! never quiet.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use repoch_engines::containerd::Containerd;
use repoch_engines::{Container, Engine, Watch};
use repoch_protocol::manifest::{ContainerRef, Manifest};
use repoch_protocol::{Fact, Reason};

use crate::refusal::Refusal;

/// The longest wait for one engine's answer at an observation.
pub const ENGINE_CALL_SECONDS_MAX: u64 = 5;

const KIND: &str = "container";

/// What one issuance holds of the containers: per engine socket, the engine and its event
/// stream; per container, its id and last start at the first observation (`None`: absent
/// then).
#[derive(Debug, Default)]
pub struct Containers {
    engines: BTreeMap<Socket, Held>,
    pinned: BTreeMap<ContainerRef, Option<Pinned>>,
    started: bool,
    /// The manifest's `containment.units`: a container a systemd unit runs is held by its
    /// unit when the unit is one of them.
    units: Vec<String>,
}

/// A container as the first observation found it: its full id, when it was created and
/// when it last started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    pub id: String,
    pub created: String,
    pub started_at: String,
}

/// One engine as an issuance holds it: its client, its event stream, and when the stream
/// was opened.
#[derive(Debug)]
struct Held {
    client: Client,
    watch: Watch,
    since: SystemTime,
}

/// An engine's socket, and the engine (`docker`, `podman`, `containerd`).
type Socket = (String, String);

/// An engine's client: the Docker Engine API (Docker, podman) or containerd's.
#[derive(Debug)]
enum Client {
    Api(Engine),
    Containerd(Containerd),
}

impl Client {
    fn new(socket: &Socket, deadline: Duration) -> Result<Client, repoch_engines::Error> {
        let path = std::path::Path::new(&socket.0);
        Ok(match socket.1.as_str() {
            "containerd" => Client::Containerd(Containerd::new(path, deadline)?),
            _ => Client::Api(Engine::new(path, deadline)?),
        })
    }
    fn ping(&self) -> Result<(), repoch_engines::Error> {
        match self {
            Client::Api(e) => e.ping(),
            Client::Containerd(c) => c.ping(),
        }
    }
    /// Follows the containers named, from now on (Docker's API replays from `since`).
    fn watch(&self, names: &[String], since: SystemTime) -> Result<Watch, repoch_engines::Error> {
        match self {
            Client::Api(e) => e.watch(names, since),
            Client::Containerd(c) => c.watch(names),
        }
    }
    fn inspect(&self, name: &str) -> Result<Option<Container>, repoch_engines::Error> {
        match self {
            Client::Api(e) => e.inspect(name),
            Client::Containerd(c) => c.inspect(name),
        }
    }
}

/// Observes every named container (nothing when none is named).
pub(super) fn containers(m: &Manifest, held: &mut Containers, facts: &mut Vec<Fact>) {
    let named = &m.containment.containers;
    if named.is_empty() {
        return;
    }
    let first = !held.started;
    held.started = true;
    held.units.clone_from(&m.containment.units);
    for (socket, refs) in by_socket(named) {
        if let Err(f) = engine_of(held, &socket, &refs, first) {
            facts.extend(refs.iter().map(|c| f.about(c)));
            continue;
        }
        facts.extend(judged_now(held, &socket, &refs, first));
    }
}

/// Each container of the engine at `socket` looked at now (pinned when `first`), the
/// engine's stream caught up to the looks, and each judged.
fn judged_now(
    held: &mut Containers,
    socket: &Socket,
    refs: &[ContainerRef],
    first: bool,
) -> Vec<Fact> {
    let mut facts = Vec::with_capacity(refs.len());
    let mut looked = Vec::with_capacity(refs.len());
    for c in refs {
        match look(&held.engines[socket].client, c, held.pinned.get(c)) {
            Err(e) => {
                // An engine restarted or gone: its event stream says so first.
                let ended = held.engines[socket].watch.seen().ended;
                let why = match ended {
                    Some(w) => format!("its event stream: {w}; then the engine: {e}"),
                    None => format!("the engine: {e}"),
                };
                facts.push(Failure::unknown(&why).about(c));
            }
            Ok(now) => looked.push((c.clone(), now)),
        }
    }
    if first {
        pin(held, socket, &looked);
    }
    // The engine's word up to the looks: what its stream may not have delivered yet.
    match caught_up(held, socket, &looked) {
        Ok(seen) => facts.extend(looked.iter().map(|(c, now)| {
            judge(
                c,
                now.as_ref(),
                held.pinned.get(c),
                Some(&seen),
                &held.units,
            )
        })),
        Err(f) => facts.extend(looked.iter().map(|(c, _)| f.about(c))),
    }
    facts
}

/// At the dispatch decision, after final verification #2 (whose look is not the
/// dispatch): each container looked at once more and its engine's stream caught up, judged
/// as an observation judges: an event of a named container since the first observation, a
/// container running, replaced or gone unreported, or a stream that ended, withholds
/// (found by attacking the release binaries: a container started between that
/// verification and the dispatch was granted, by a podman client that writes no event
/// too). The first such fact, as a refusal.
pub(super) fn still_held(m: &Manifest, held: &mut Containers) -> Option<Refusal> {
    for (socket, refs) in by_socket(&m.containment.containers) {
        let facts = match engine_of(held, &socket, &refs, false) {
            Ok(()) => judged_now(held, &socket, &refs, false),
            Err(f) => refs.iter().map(|c| f.about(c)).collect(),
        };
        if let Some(r) = facts.iter().find_map(Refusal::from_fact) {
            return Some(r);
        }
    }
    None
}

/// Pins each container as the first observation found it (and follows its id).
fn pin(held: &mut Containers, socket: &Socket, looked: &[(ContainerRef, Option<Container>)]) {
    for (c, now) in looked {
        let pin = now.as_ref().map(|k| Pinned {
            id: k.id.clone(),
            created: k.created.clone(),
            started_at: k.started_at.clone(),
        });
        if let Some(p) = &pin {
            held.engines[socket].watch.pin(&p.id);
        }
        // Found by its name: the name is no id prefix to follow (a bystander's random id
        // may begin with it).
        if now.as_ref().is_some_and(|k| k.name == c.name) {
            held.engines[socket].watch.named(&c.name);
        }
        held.pinned.insert(c.clone(), pin);
    }
}

/// What the engine's stream delivered, and what it had not yet: Docker's events logged from
/// the subscription to now, read whole (dockerd keeps them in memory); podman's stream read
/// up to a volume of repoch's own created now (its service reads its events from a file a
/// while later, and answers nothing to `/events?until=` a time already past); containerd's
/// stream read up to an event of repoch's own published now.
fn caught_up(
    held: &Containers,
    socket: &Socket,
    looked: &[(ContainerRef, Option<Container>)],
) -> Result<repoch_engines::Seen, Failure> {
    let e = &held.engines[socket];
    let failed = |e: repoch_engines::Error| Failure::unknown(&format!("its event stream: {e}"));
    match &e.client {
        Client::Api(engine) if socket.1 == "podman" => {
            engine.caught_up(&e.watch).map_err(failed)?;
            Ok(e.watch.seen())
        }
        Client::Api(engine) => {
            let names: Vec<String> = looked.iter().map(|(c, _)| c.name.clone()).collect();
            let ids: Vec<String> = looked
                .iter()
                .filter_map(|(c, _)| held.pinned.get(c).cloned().flatten())
                .map(|p| p.id)
                .chain(looked.iter().filter_map(|(c, _)| c.pinned.clone()))
                .collect();
            // A name that found a container by that name, or whose container enrollment
            // pinned, is no id prefix.
            let prefixes: Vec<String> = looked
                .iter()
                .filter(|(c, now)| {
                    c.pinned.is_none() && now.as_ref().is_none_or(|k| k.name != c.name)
                })
                .map(|(c, _)| c.name.clone())
                .collect();
            let logged = engine
                .events_until_now(&names, &ids, &prefixes, e.since)
                .map_err(failed)?;
            Ok(e.watch.seen().merged(logged))
        }
        Client::Containerd(c) => {
            let namespace = looked
                .first()
                .and_then(|(r, _)| r.name.split_once('/'))
                .map_or("default", |(ns, _)| ns);
            c.caught_up(&e.watch, namespace).map_err(failed)?;
            Ok(e.watch.seen())
        }
    }
}

/// The container as its engine reports it now: by the id pinned at the first observation,
/// or before it by the id enrollment pinned (a container renamed away is still the one to
/// judge), and by name when none was pinned or the pinned one is gone (something created
/// under the name since is judged then). containerd's ids are their names: asked by name
/// alone.
fn look(
    engine: &Client,
    c: &ContainerRef,
    pinned: Option<&Option<Pinned>>,
) -> Result<Option<Container>, repoch_engines::Error> {
    let id = match pinned {
        Some(Some(p)) => Some(p.id.as_str()),
        Some(None) => None,
        None => c.pinned.as_deref(),
    };
    if let (Client::Api(_), Some(id)) = (engine, id) {
        if let Some(k) = engine.inspect(id)? {
            return Ok(Some(k));
        }
    }
    let by_name = engine.inspect(&c.name)?;
    // The pinned container gone, the engine answers a container whose id begins with the
    // name: a bystander's random id (`d`, `cafe`), not what the name named. A container
    // created under the name is judged.
    Ok(by_name.filter(|k| c.pinned.is_none() || k.name == c.name))
}

/// The named containers by engine socket (and API), in the manifest's order.
fn by_socket(named: &[ContainerRef]) -> BTreeMap<Socket, Vec<ContainerRef>> {
    let mut by: BTreeMap<Socket, Vec<ContainerRef>> = BTreeMap::new();
    for c in named {
        let key = (c.socket.clone(), c.engine.clone());
        by.entry(key).or_default().push(c.clone());
    }
    by
}

/// A failed fact not yet about a container.
struct Failure {
    expected: String,
    observed: String,
    reason: Reason,
}

impl Failure {
    fn unknown(observed: &str) -> Failure {
        Failure {
            expected: "an engine that answers".into(),
            observed: observed.into(),
            reason: Reason::ControllerUnknown,
        }
    }
    fn about(&self, c: &ContainerRef) -> Fact {
        Fact::failed(
            KIND,
            &c.spelled(),
            &self.expected,
            &self.observed,
            self.reason,
        )
    }
}

/// The engine at `socket`, its socket checked: on the first observation connected, its
/// event stream opened (from this moment on) and then asked whether it answers; later,
/// the one already held.
fn engine_of(
    held: &mut Containers,
    key: &Socket,
    refs: &[ContainerRef],
    first: bool,
) -> Result<(), Failure> {
    let socket = key.0.as_str();
    // No socket at all: the engine does not run (or not there): unknown, not unprotected.
    if let Err(e) = std::fs::symlink_metadata(socket) {
        if e.kind() == std::io::ErrorKind::NotFound {
            return Err(Failure::unknown(&format!(
                "no socket at {socket}: the engine is not running"
            )));
        }
    }
    root_only(socket).map_err(|why| Failure {
        expected: format!("the engine's socket {socket}, root's"),
        observed: why.to_string(),
        reason: Reason::ContainerEngineUnprotected,
    })?;
    if !first {
        return match held.engines.contains_key(key) {
            true => Ok(()),
            false => Err(Failure::unknown("not reached at the first observation")),
        };
    }
    let deadline = Duration::from_secs(ENGINE_CALL_SECONDS_MAX);
    let engine = Client::new(key, deadline).map_err(|e| Failure::unknown(&e.to_string()))?;
    // From the moment of the subscription (the engine replays what it kept since then,
    // should its subscription begin after its answer's headers): an event between it and
    // the first inspect is one the inspect may already show, and is counted anyway.
    let since = SystemTime::now();
    let names: Vec<String> = refs.iter().map(|c| c.name.clone()).collect();
    let watch = engine
        .watch(&names, since)
        .map_err(|e| Failure::unknown(&format!("its event stream: {e}")))?;
    // The containers enrollment pinned are followed by their ids from the start, and
    // their names are no id prefixes: a bystander whose random id begins with one is no
    // one's.
    for c in refs {
        if let Some(id) = &c.pinned {
            watch.pin(id);
            watch.named(&c.name);
        }
    }
    engine
        .ping()
        .map_err(|e| Failure::unknown(&e.to_string()))?;
    held.engines.insert(
        key.clone(),
        Held {
            client: engine,
            watch,
            since,
        },
    );
    Ok(())
}

/// One container's fact: what the engine reports now, against the first observation's
/// pin and what its event stream saw.
fn judge(
    c: &ContainerRef,
    now: Option<&Container>,
    pinned: Option<&Option<Pinned>>,
    seen: Option<&repoch_engines::Seen>,
    units: &[String],
) -> Fact {
    let failed = seen
        .and_then(against_events)
        .or_else(|| {
            pinned
                .zip(now)
                .and_then(|(f, k)| against_pin(c, k, f.as_ref()))
        })
        .or_else(|| match (pinned, now) {
            (Some(Some(f)), None) => against_removal(c, f, seen),
            _ => None,
        })
        .or_else(|| now.and_then(|k| against_state(k, units)))
        .or_else(|| match now {
            Some(k) => against_cgroup(&c.engine, k),
            None => against_gone_cgroups(c, pinned),
        });
    match (failed, now) {
        (Some((expected, observed, reason)), _) => {
            Fact::failed(KIND, &c.spelled(), &expected, &observed, reason)
        }
        (None, None) => Fact::ok(KIND, &c.spelled(), "stopped, restart policy no", "absent"),
        (None, Some(k)) => Fact::ok(
            KIND,
            &c.spelled(),
            "stopped, restart policy no",
            &format!("{} {}", k.status, repoch_engines::short_id(&k.id)),
        ),
    }
}

/// A failed judgment: expected, observed, reason.
type Failed = (String, String, Reason);

/// An event of the container since the first observation, or the stream ended.
fn against_events(s: &repoch_engines::Seen) -> Option<Failed> {
    if let Some(e) = s.events.first() {
        let more = match s.events.len() as u64 + s.more {
            1 => String::new(),
            n => format!(" (and {} more)", n - 1),
        };
        return Some((
            "no start, exec or change since the first observation".into(),
            format!(
                "{} of {} at {}{more}",
                e.action,
                repoch_engines::short_id(&e.id),
                e.time
            ),
            Reason::ContainerChanged,
        ));
    }
    s.ended.as_ref().map(|why| {
        (
            "its engine's event stream, followed".into(),
            why.clone(),
            Reason::ControllerUnknown,
        )
    })
}

/// The container now against the first observation's: another one (or one where there
/// was none), started since, or renamed away.
fn against_pin(c: &ContainerRef, k: &Container, first: Option<&Pinned>) -> Option<Failed> {
    let Some(f) = first else {
        return Some((
            "absent, as at the first observation".into(),
            format!("container {}", repoch_engines::short_id(&k.id)),
            Reason::ContainerReplaced,
        ));
    };
    if f.id != k.id || f.created != k.created {
        return Some((
            format!(
                "container {} created at {}",
                repoch_engines::short_id(&f.id),
                f.created
            ),
            format!(
                "container {} created at {}",
                repoch_engines::short_id(&k.id),
                k.created
            ),
            Reason::ContainerReplaced,
        ));
    }
    // Started since the first observation, even if stopped again and its event not
    // delivered yet.
    if f.started_at != k.started_at {
        return Some((
            format!("its last start as first observed: {}", f.started_at),
            format!("its last start now: {}", k.started_at),
            Reason::ContainerChanged,
        ));
    }
    // The pinned container under another name (renamed away: what is named may be created
    // anew, and what runs is the old root by another name). Named by an id prefix, its
    // name is its own.
    (!repoch_engines::named_by(&c.name, k)).then(|| {
        (
            format!("named {}", c.name),
            format!(
                "container {} renamed {}",
                repoch_engines::short_id(&k.id),
                k.name
            ),
            Reason::ContainerChanged,
        )
    })
}

/// The container of the first observation gone since: gone by its engine's word only once
/// its removal came through the event stream (which is in order: a start before the
/// removal came through first). An engine whose events lag (podman reads them from a
/// file) or were never written (a client run with `--events-backend none`) leaves it
/// unknown.
fn against_removal(
    c: &ContainerRef,
    first: &Pinned,
    seen: Option<&repoch_engines::Seen>,
) -> Option<Failed> {
    let reported = seen.is_some_and(|s| s.removed.iter().any(|r| *r == first.id || *r == c.name));
    (!reported).then(|| {
        (
            format!(
                "container {} removed, as its engine's events report",
                repoch_engines::short_id(&first.id)
            ),
            "absent, its removal not reported by its engine's events (yet)".to_owned(),
            Reason::ControllerUnknown,
        )
    })
}

/// The container's own state: running, or stopped with a policy that can start it. A
/// systemd unit that runs it (its engine's own label names it) is held by the unit fact
/// when the manifest names it in `containment.units` (masked), and is a policy that can
/// start it when it does not.
fn against_state(k: &Container, units: &[String]) -> Option<Failed> {
    if let Some(why) = running(k) {
        return Some(("stopped".into(), why, Reason::ContainerRunning));
    }
    let unit = k
        .restart_policy
        .strip_prefix(repoch_engines::SYSTEMD_UNIT_POLICY);
    if let Some(unit) = unit {
        return (!units.iter().any(|u| u == unit)).then(|| {
            (
                format!("restart policy no, or its unit {unit} in containment.units"),
                format!(
                    "{}, run by systemd unit {unit} (its engine's label), which containment.units does not name",
                    k.status
                ),
                Reason::ContainerRestartable,
            )
        });
    }
    (!matches!(k.restart_policy.as_str(), "no" | "")).then(|| {
        (
            "restart policy no".into(),
            format!("{}, restart policy {}", k.status, k.restart_policy),
            Reason::ContainerRestartable,
        )
    })
}

/// The cgroup its engine reports for it (containerd's spec), or the cgroups Docker's and
/// podman's drivers make for it ([`driver_cgroups`]: their API names none), holding a
/// process or thread: the old root left in, or moved into, a container that is stopped
/// by its engine's word (the cgroup facts of `containment.cgroups`, recursively). A
/// cgroup that cannot be read is unknown.
fn against_cgroup(engine: &str, k: &Container) -> Option<Failed> {
    match &k.cgroup {
        Some(rel) => against_cgroups(std::slice::from_ref(rel)),
        None => against_cgroups(&driver_cgroups(engine, &k.id)),
    }
}

/// The first of `cgroups` that holds a process or thread, or cannot be read.
fn against_cgroups(cgroups: &[String]) -> Option<Failed> {
    use repoch_sys::cgroup;
    let root = cgroup::mount_point();
    cgroups.iter().find_map(|rel| {
        let expected = format!("its cgroup {rel}: no process, no thread");
        let occupancy = match &root {
            Ok(root) => cgroup::occupancy(root, rel).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match occupancy {
            Err(e) => Some((expected, e, Reason::ControllerUnknown)),
            Ok(o) if o.empty() => None,
            Ok(o) => Some((
                expected,
                super::containment::occupied(&o),
                Reason::ContainerRunning,
            )),
        }
    })
}

/// A named container its engine has none of now: the cgroups its drivers made for the
/// ids it was pinned to (at enrollment, at the first observation) hold no process (found
/// by attacking the release binaries: a process left in a removed container's cgroup was
/// observed absent, and granted).
fn against_gone_cgroups(c: &ContainerRef, pinned: Option<&Option<Pinned>>) -> Option<Failed> {
    let first = pinned.and_then(Option::as_ref).map(|p| p.id.clone());
    let mut ids: Vec<String> = c.pinned.iter().cloned().chain(first).collect();
    ids.dedup();
    ids.iter()
        .find_map(|id| against_cgroups(&driver_cgroups(&c.engine, id)))
}

/// The cgroups Docker's and podman's cgroup drivers make for container `id` under their
/// default parents: systemd's (`/system.slice/docker-ID.scope`,
/// `/machine.slice/libpod-ID.scope`) and cgroupfs's (`/docker/ID`,
/// `/libpod_parent/libpod-ID`). A container given another parent (`--cgroup-parent`) is
/// not among them (docs/THREAT-MODEL.md, "Container engines").
fn driver_cgroups(engine: &str, id: &str) -> Vec<String> {
    if !repoch_protocol::manifest::is_container_id(id) {
        return Vec::new();
    }
    match engine {
        "docker" => vec![
            format!("/system.slice/docker-{id}.scope"),
            format!("/docker/{id}"),
        ],
        "podman" => vec![
            format!("/machine.slice/libpod-{id}.scope"),
            format!("/libpod_parent/libpod-{id}"),
        ],
        _ => Vec::new(),
    }
}

/// Why the container counts as running, if it does: its state, a process, exec sessions,
/// or a status that is no known stopped one.
fn running(k: &Container) -> Option<String> {
    const STOPPED: &[&str] = &[
        "created",
        "exited",
        "dead",
        "stopped",
        "configured",
        "no task",
    ];
    if k.running || k.restarting || k.paused || k.pid != 0 {
        return Some(format!("{} (pid {})", k.status, k.pid));
    }
    if k.exec_sessions > 0 {
        return Some(format!("{}, {} exec session(s)", k.status, k.exec_sessions));
    }
    if !STOPPED.contains(&k.status.as_str()) {
        return Some(format!("{}: not a stopped state", k.status));
    }
    None
}

/// The container `name` as the `engine` at `socket` reports it now (its socket checked to
/// be root's first: another user's answer would be anyone's), for `repoch discover`.
pub fn inspect_at(engine: &str, socket: &str, name: &str) -> Result<Option<Container>, String> {
    root_only(socket).map_err(|why| format!("its socket is not root's alone: {why}"))?;
    let key = (socket.to_owned(), engine.to_owned());
    let deadline = Duration::from_secs(ENGINE_CALL_SECONDS_MAX);
    Client::new(&key, deadline)
        .and_then(|e| e.inspect(name))
        .map_err(|e| e.to_string())
}

/// Pins each named Docker and podman container to the full id of the container its name
/// names now (`pinned`): observation judges that container whatever it is named since (a
/// container renamed away, and another created under its name, before the first
/// observation). Returns the named containers their engines have none of now, or that
/// could not be asked, left unpinned ([`Pinning::absent`]). Observation finds such a
/// container absent, which is contained: right once the old root is gone, but a misspelt
/// name checks nothing. Enrollment happens while the old root runs, so it names each
/// (docs/OPERATOR.md, "Enrolling a deployment (once)").
pub fn pin_at_enrollment(named: &mut [ContainerRef]) -> Pinning {
    let deadline = Duration::from_secs(ENGINE_CALL_SECONDS_MAX);
    let mut p = Pinning::default();
    for c in named.iter_mut() {
        let key = (c.socket.clone(), c.engine.clone());
        let asked = Client::new(&key, deadline).and_then(|e| e.inspect(&c.name));
        match asked {
            Ok(Some(k)) => {
                let api = c.engine != "containerd";
                if let Ok(pid @ 1..) = u32::try_from(k.pid) {
                    p.pids.push(pid);
                    p.shims.extend(repoch_sys::procfs::parent(pid));
                }
                // The cgroups observation checks for it: its spec's (containerd), or its
                // drivers' (Docker, podman).
                match &k.cgroup {
                    Some(cg) => p.cgroups.push(cg.clone()),
                    None => p.cgroups.extend(driver_cgroups(&c.engine, &k.id)),
                }
                if let Some(unit) = k
                    .restart_policy
                    .strip_prefix(repoch_engines::SYSTEMD_UNIT_POLICY)
                {
                    p.units.push((c.spelled(), unit.to_owned()));
                }
                c.pinned =
                    (api && repoch_protocol::manifest::is_container_id(&k.id)).then_some(k.id);
            }
            Ok(None) => p
                .absent
                .push((c.spelled(), "does not exist now".to_owned())),
            Err(e) => p.absent.push((
                c.spelled(),
                format!("could not be asked of its engine ({e})"),
            )),
        }
    }
    p
}

/// What pinning the named containers at enrollment found.
#[derive(Debug, Default, Clone)]
pub struct Pinning {
    /// The named containers their engines have none of now, or that could not be asked:
    /// `(ENGINE:NAME, what)`, in manifest order.
    pub absent: Vec<(String, String)>,
    /// The main process of each named container that runs now (its engine's word): where
    /// the cross-check with the running old root starts from.
    pub pids: Vec<u32>,
    /// The cgroups observation checks for the named containers (containerd's spec, Docker's
    /// and podman's drivers'): held by the container facts.
    pub cgroups: Vec<String>,
    /// The parent of each named container's main process (its runtime's shim, by its
    /// engine's word): no starter to waive.
    pub shims: Vec<u32>,
    /// The systemd units the engines name as running a named container (podman's label
    /// `PODMAN_SYSTEMD_UNIT`): `(ENGINE:NAME, unit)`. Each must be named under
    /// `containment.units`: observation refuses the container otherwise.
    pub units: Vec<(String, String)>,
}

/// Why an engine's socket is not root's alone: whoever wrote the manifest, or whoever owns
/// the path, would let another user answer as the engine. The path named is where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRootOnly {
    #[error("{0}: not an absolute path")]
    Relative(String),
    #[error("{path}: {errno}")]
    Unreadable {
        path: String,
        errno: rustix::io::Errno,
    },
    #[error("{0}: a symbolic link (not followed)")]
    Link(String),
    #[error("{path}: owned by uid {uid}, mode {mode:o}")]
    Others { path: String, uid: u32, mode: u32 },
    #[error("{path}: a {kind}, not a socket")]
    NotASocket { path: String, kind: String },
}

/// Whether the socket at `path` is root's: every directory on the way owned by root and
/// writable by no one else (or sticky, as `/tmp`, whose next entry is then root's), no
/// symbolic link, and the socket itself owned by root and not writable by everyone.
pub fn root_only(path: &str) -> Result<(), NotRootOnly> {
    use rustix::fs::{FileType, Mode};
    let p = std::path::Path::new(path);
    if !p.is_absolute() {
        return Err(NotRootOnly::Relative(path.to_owned()));
    }
    let lstat = |at: &std::path::Path| {
        rustix::fs::lstat(at).map_err(|errno| NotRootOnly::Unreadable {
            path: at.display().to_string(),
            errno,
        })
    };
    let others = |at: &std::path::Path, st: &rustix::fs::Stat| NotRootOnly::Others {
        path: at.display().to_string(),
        uid: st.st_uid,
        mode: st.st_mode & 0o7777,
    };
    let mut at = std::path::PathBuf::from("/");
    let mut parts: Vec<_> = p.components().skip(1).collect();
    let last = parts.pop();
    for part in parts.into_iter().chain(last) {
        let st = lstat(&at)?;
        if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
            return Err(NotRootOnly::Link(at.display().to_string()));
        }
        let mode = Mode::from_raw_mode(st.st_mode);
        if st.st_uid != 0
            || (mode.intersects(Mode::WGRP | Mode::WOTH) && !mode.contains(Mode::SVTX))
        {
            return Err(others(&at, &st));
        }
        at.push(part);
    }
    let st = lstat(&at)?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Socket if st.st_uid == 0 && st.st_mode & 0o002 == 0 => Ok(()),
        FileType::Socket => Err(others(p, &st)),
        t => Err(NotRootOnly::NotASocket {
            path: path.to_owned(),
            kind: format!("{t:?}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docker(name: &str) -> ContainerRef {
        ContainerRef {
            engine: "docker".into(),
            name: name.into(),
            socket: "/run/docker.sock".into(),
            pinned: None,
        }
    }

    fn stopped(id: &str, policy: &str) -> Container {
        Container {
            id: id.into(),
            created: "2026-12-04T18:59:00Z".into(),
            name: "old-root".into(),
            status: "exited".into(),
            running: false,
            restarting: false,
            paused: false,
            pid: 0,
            restart_policy: policy.into(),
            exec_sessions: 0,
            cgroup: None,
            started_at: "2026-12-04T19:00:00Z".into(),
        }
    }

    fn pin(id: &str) -> Option<Pinned> {
        Some(Pinned {
            id: id.into(),
            created: "2026-12-04T18:59:00Z".into(),
            started_at: "2026-12-04T19:00:00Z".into(),
        })
    }

    #[test]
    fn a_container_a_systemd_unit_runs_is_held_only_by_its_named_unit() {
        // podman's label names the unit that runs it (Restart=always, podman start -a):
        // refused unless containment.units names the unit, whose own fact then holds it.
        let c = docker("old-root");
        let k = stopped("a1", "systemd unit container-old-root.service");
        let f = judge(&c, Some(&k), None, None, &[]);
        assert_eq!(f.reason, Some(Reason::ContainerRestartable));
        assert!(
            f.observed
                .contains("run by systemd unit container-old-root.service"),
            "{}",
            f.observed
        );
        let named = ["container-old-root.service".to_owned()];
        assert!(judge(&c, Some(&k), None, None, &named).holds());
        let other = ["other.service".to_owned()];
        assert!(!judge(&c, Some(&k), None, None, &other).holds());
        let pod = stopped("a1", "kubernetes pod default/billing");
        assert!(!judge(&c, Some(&pod), None, None, &named).holds());
    }

    #[test]
    fn each_state_of_a_container_is_judged() {
        let c = docker("old-root");
        let judged = |k: Option<&Container>, pinned: Option<&Option<Pinned>>| {
            let f = judge(&c, k, pinned, None, &[]);
            (f.holds(), f.reason)
        };
        assert_eq!(judged(None, None), (true, None));
        assert_eq!(judged(Some(&stopped("a1", "no")), None), (true, None));
        assert_eq!(judged(Some(&stopped("a1", "")), None), (true, None));
        for policy in ["always", "unless-stopped", "on-failure"] {
            assert_eq!(
                judged(Some(&stopped("a1", policy)), None),
                (false, Some(Reason::ContainerRestartable)),
                "{policy}"
            );
        }
        let alive = [
            Container {
                running: true,
                ..stopped("a1", "no")
            },
            Container {
                restarting: true,
                ..stopped("a1", "no")
            },
            Container {
                paused: true,
                ..stopped("a1", "no")
            },
            Container {
                pid: 7,
                ..stopped("a1", "no")
            },
            Container {
                exec_sessions: 1,
                ..stopped("a1", "no")
            },
            Container {
                status: "removing".into(),
                ..stopped("a1", "no")
            },
        ];
        for k in &alive {
            assert_eq!(
                judged(Some(k), None),
                (false, Some(Reason::ContainerRunning)),
                "{k:?}"
            );
        }
    }

    #[test]
    fn a_container_is_judged_against_the_first_observation() {
        let c = docker("old-root");
        let judged = |k: Option<&Container>, pinned: Option<&Option<Pinned>>| {
            let f = judge(&c, k, pinned, None, &[]);
            (f.holds(), f.reason)
        };
        // Another container under the name, or one created since an absent first look.
        let first = pin("a1");
        assert_eq!(
            judged(Some(&stopped("b2", "no")), Some(&first)),
            (false, Some(Reason::ContainerReplaced))
        );
        assert_eq!(
            judged(Some(&stopped("b2", "no")), Some(&None)),
            (false, Some(Reason::ContainerReplaced))
        );
        // containerd's ids are their names: one removed and created again under the same id
        // is known by when it was created.
        let again = Container {
            created: "2026-12-04T20:00:00Z".into(),
            ..stopped("a1", "no")
        };
        assert_eq!(
            judged(Some(&again), Some(&first)),
            (false, Some(Reason::ContainerReplaced))
        );
        // containerd's container without a task: stopped; with the restart label: armed.
        let no_task = Container {
            status: "no task".into(),
            ..stopped("a1", "no")
        };
        assert_eq!(judged(Some(&no_task), Some(&first)), (true, None));
        let labelled = Container {
            restart_policy: "containerd.io/restart.status=running".into(),
            ..no_task
        };
        assert_eq!(
            judged(Some(&labelled), Some(&first)),
            (false, Some(Reason::ContainerRestartable))
        );
        // Gone since the first observation: by the engine's word only once its removal
        // came through its events.
        assert_eq!(
            judged(None, Some(&first)),
            (false, Some(Reason::ControllerUnknown))
        );
        let removed = repoch_engines::Seen {
            removed: vec!["a1".into()],
            ..Default::default()
        };
        assert!(judge(&c, None, Some(&first), Some(&removed), &[]).holds());
        assert_eq!(
            judged(Some(&stopped("a1", "no")), Some(&first)),
            (true, None)
        );
    }

    #[test]
    fn a_symbolic_link_on_the_way_to_an_engine_socket_is_named_as_one() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        // Refused at the link, before the socket itself is looked at.
        let sock = link.join("engine.sock");
        let why = root_only(sock.to_str().unwrap()).unwrap_err().to_string();
        assert!(why.contains("a symbolic link"), "{why}");
    }

    #[test]
    fn an_event_or_an_ended_stream_is_never_quiet() {
        let c = docker("old-root");
        let k = stopped("a1", "no");
        let start = repoch_engines::Event {
            action: "start".into(),
            id: "a1".into(),
            name: "old-root".into(),
            time: 17,
        };
        let seen = repoch_engines::Seen {
            events: vec![start],
            more: 2,
            ..Default::default()
        };
        let f = judge(&c, Some(&k), None, Some(&seen), &[]);
        assert_eq!(f.reason, Some(Reason::ContainerChanged));
        assert!(
            f.observed.contains("start of a1 at 17 (and 2 more)"),
            "{}",
            f.observed
        );
        let ended = repoch_engines::Seen {
            ended: Some("the engine closed the event stream".into()),
            ..Default::default()
        };
        let f = judge(&c, Some(&k), None, Some(&ended), &[]);
        assert_eq!(f.reason, Some(Reason::ControllerUnknown));
        let quiet = repoch_engines::Seen::default();
        assert!(judge(&c, Some(&k), None, Some(&quiet), &[]).holds());
    }
}

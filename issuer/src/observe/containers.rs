//! Containers as their engines report them (docs/OPERATOR.md, "Containers"): a container
//! engine is a controller that can start the old root again, so each named container is
//! asked of its engine at every observation and held, from the first observation on, by
//! the engine's event stream.
//!
//! Contained means, for each: its engine's socket is root's; the engine answers; the
//! container is absent, or present and not running, restarting or paused, with no process
//! and no exec session, and a restart policy that cannot start it again (`no`); it is the
//! container of the first observation (its full id pinned then); and the engine reported
//! no event that could start or change it since (a start, restart, unpause, exec, update,
//! create: anything but its end and its removal). An event stream that ended is unknown,
//! never quiet.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use repoch_engines::{Container, Engine, Watch};
use repoch_protocol::manifest::{ContainerRef, Manifest};
use repoch_protocol::{Fact, Reason};

/// The longest wait for one engine's answer at an observation.
pub const ENGINE_CALL_SECONDS_MAX: u64 = 5;

const KIND: &str = "container";

/// What one issuance holds of the containers: per engine socket, the engine and its event
/// stream; per container, its id and last start at the first observation (`None`: absent
/// then).
#[derive(Debug, Default)]
pub struct Containers {
    engines: BTreeMap<String, (Engine, Option<Watch>)>,
    pinned: BTreeMap<ContainerRef, Option<Pinned>>,
    started: bool,
}

/// A container as the first observation found it: its full id and when it last started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    pub id: String,
    pub started_at: String,
}

/// Observes every named container (nothing when none is named).
pub(super) fn containers(m: &Manifest, held: &mut Containers, facts: &mut Vec<Fact>) {
    let named = &m.containment.containers;
    if named.is_empty() {
        return;
    }
    let first = !held.started;
    held.started = true;
    for (socket, refs) in by_socket(named) {
        if let Err(f) = engine_of(held, &socket, &refs, first) {
            facts.extend(refs.iter().map(|c| f.about(c)));
            continue;
        }
        let (engine, watch) = &held.engines[&socket];
        let watch = watch.as_ref();
        let seen = watch.map(Watch::seen);
        for c in refs {
            let pinned = held.pinned.get(&c).cloned();
            let now = match look(engine, &c, pinned.as_ref()) {
                Err(e) => {
                    facts.push(Failure::unknown(&format!("the engine: {e}")).about(&c));
                    continue;
                }
                Ok(now) => now,
            };
            if first {
                let pin = now.as_ref().map(|k| Pinned {
                    id: k.id.clone(),
                    started_at: k.started_at.clone(),
                });
                if let (Some(p), Some(w)) = (&pin, watch) {
                    w.pin(&p.id);
                }
                held.pinned.insert(c.clone(), pin);
            }
            facts.push(judge(&c, now.as_ref(), held.pinned.get(&c), seen.as_ref()));
        }
    }
}

/// The container as its engine reports it now: by the id pinned at the first observation
/// (a container renamed away is still the one to judge), and by name when none was pinned
/// or the pinned one is gone (something created under the name since is judged then).
fn look(
    engine: &Engine,
    c: &ContainerRef,
    pinned: Option<&Option<Pinned>>,
) -> Result<Option<Container>, repoch_engines::Error> {
    if let Some(Some(p)) = pinned {
        if let Some(k) = engine.inspect(&p.id)? {
            return Ok(Some(k));
        }
    }
    engine.inspect(&c.name)
}

/// The named containers by engine socket, in the manifest's order.
fn by_socket(named: &[ContainerRef]) -> BTreeMap<String, Vec<ContainerRef>> {
    let mut by: BTreeMap<String, Vec<ContainerRef>> = BTreeMap::new();
    for c in named {
        by.entry(c.socket.clone()).or_default().push(c.clone());
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
    socket: &str,
    refs: &[ContainerRef],
    first: bool,
) -> Result<(), Failure> {
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
        observed: why,
        reason: Reason::ContainerEngineUnprotected,
    })?;
    if !first {
        return match held.engines.contains_key(socket) {
            true => Ok(()),
            false => Err(Failure::unknown("not reached at the first observation")),
        };
    }
    let deadline = Duration::from_secs(ENGINE_CALL_SECONDS_MAX);
    let engine = Engine::new(std::path::Path::new(socket), deadline)
        .map_err(|e| Failure::unknown(&e.to_string()))?;
    // From the moment of the subscription (the engine replays what it kept since then,
    // should its subscription begin after its answer's headers): an event between it and
    // the first inspect is one the inspect may already show, and is counted anyway.
    let since = SystemTime::now();
    let names: Vec<String> = refs.iter().map(|c| c.name.clone()).collect();
    let watch = engine
        .watch(&names, since)
        .map_err(|e| Failure::unknown(&format!("its event stream: {e}")))?;
    engine
        .ping()
        .map_err(|e| Failure::unknown(&e.to_string()))?;
    held.engines
        .insert(socket.to_owned(), (engine, Some(watch)));
    Ok(())
}

/// One container's fact: what the engine reports now, against the first observation's
/// pin and what its event stream saw.
fn judge(
    c: &ContainerRef,
    now: Option<&Container>,
    pinned: Option<&Option<Pinned>>,
    seen: Option<&repoch_engines::Seen>,
) -> Fact {
    let failed = seen
        .and_then(against_events)
        .or_else(|| {
            pinned
                .zip(now)
                .and_then(|(f, k)| against_pin(c, k, f.as_ref()))
        })
        .or_else(|| now.and_then(against_state));
    match (failed, now) {
        (Some((expected, observed, reason)), _) => {
            Fact::failed(KIND, &c.spelled(), &expected, &observed, reason)
        }
        (None, None) => Fact::ok(KIND, &c.spelled(), "stopped, restart policy no", "absent"),
        (None, Some(k)) => Fact::ok(
            KIND,
            &c.spelled(),
            "stopped, restart policy no",
            &format!("{} {}", k.status, short(&k.id)),
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
            format!("{} of {} at {}{more}", e.action, short(&e.id), e.time),
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
            format!("container {}", short(&k.id)),
            Reason::ContainerReplaced,
        ));
    };
    if f.id != k.id {
        return Some((
            format!("container {}", short(&f.id)),
            format!("container {}", short(&k.id)),
            Reason::ContainerReplaced,
        ));
    }
    // Started since the first observation, even if stopped again and its event not
    // delivered yet.
    if f.started_at != k.started_at {
        return Some((
            format!("last started at {}", f.started_at),
            format!("started at {}", k.started_at),
            Reason::ContainerChanged,
        ));
    }
    // The pinned container under another name (renamed away: what is named may be created
    // anew, and what runs is the old root by another name). Named by an id prefix, its
    // name is its own.
    (k.name != c.name && !f.id.starts_with(c.name.as_str())).then(|| {
        (
            format!("named {}", c.name),
            format!("container {} renamed {}", short(&k.id), k.name),
            Reason::ContainerChanged,
        )
    })
}

/// The container's own state: running, or stopped with a policy that can start it.
fn against_state(k: &Container) -> Option<Failed> {
    if let Some(why) = running(k) {
        return Some(("stopped".into(), why, Reason::ContainerRunning));
    }
    (!matches!(k.restart_policy.as_str(), "no" | "")).then(|| {
        (
            "restart policy no".into(),
            format!("{}, restart policy {}", k.status, k.restart_policy),
            Reason::ContainerRestartable,
        )
    })
}

/// Why the container counts as running, if it does: its state, a process, exec sessions,
/// or a status that is no known stopped one.
fn running(k: &Container) -> Option<String> {
    const STOPPED: &[&str] = &["created", "exited", "dead", "stopped", "configured"];
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

/// The first 12 digits of an id, as engines print them.
fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// Whether the socket at `path` is root's: every directory on the way owned by root and
/// writable by no one else (or sticky, as `/tmp`, whose next entry is then root's), no
/// symbolic link, and the socket itself owned by root and not writable by everyone.
pub fn root_only(path: &str) -> Result<(), String> {
    use rustix::fs::{FileType, Mode};
    let p = std::path::Path::new(path);
    if !p.is_absolute() {
        return Err(format!("{path}: not an absolute path"));
    }
    let mut at = std::path::PathBuf::from("/");
    let mut parts: Vec<_> = p.components().skip(1).collect();
    let last = parts.pop();
    for part in parts.into_iter().chain(last) {
        let st = rustix::fs::lstat(&at).map_err(|e| format!("{}: {e}", at.display()))?;
        let mode = Mode::from_raw_mode(st.st_mode);
        if st.st_uid != 0
            || (mode.intersects(Mode::WGRP | Mode::WOTH) && !mode.contains(Mode::SVTX))
        {
            return Err(format!(
                "{}: owned by uid {}, mode {:o}",
                at.display(),
                st.st_uid,
                st.st_mode & 0o7777
            ));
        }
        at.push(part);
    }
    let st = rustix::fs::lstat(&at).map_err(|e| format!("{}: {e}", at.display()))?;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Socket if st.st_uid == 0 && st.st_mode & 0o002 == 0 => Ok(()),
        FileType::Socket => Err(format!(
            "{path}: owned by uid {}, mode {:o}",
            st.st_uid,
            st.st_mode & 0o7777
        )),
        t => Err(format!("{path}: a {t:?}, not a socket")),
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
        }
    }

    fn stopped(id: &str, policy: &str) -> Container {
        Container {
            id: id.into(),
            name: "old-root".into(),
            status: "exited".into(),
            running: false,
            restarting: false,
            paused: false,
            pid: 0,
            restart_policy: policy.into(),
            exec_sessions: 0,
            started_at: "2026-12-04T19:00:00Z".into(),
        }
    }

    fn pin(id: &str) -> Option<Pinned> {
        Some(Pinned {
            id: id.into(),
            started_at: "2026-12-04T19:00:00Z".into(),
        })
    }

    #[test]
    fn each_state_of_a_container_is_judged() {
        let c = docker("old-root");
        let judged = |k: Option<&Container>, pinned: Option<&Option<Pinned>>| {
            let f = judge(&c, k, pinned, None);
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
        assert_eq!(judged(None, Some(&first)), (true, None));
        assert_eq!(
            judged(Some(&stopped("a1", "no")), Some(&first)),
            (true, None)
        );
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
            ended: None,
        };
        let f = judge(&c, Some(&k), None, Some(&seen));
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
        let f = judge(&c, Some(&k), None, Some(&ended));
        assert_eq!(f.reason, Some(Reason::ControllerUnknown));
        let quiet = repoch_engines::Seen::default();
        assert!(judge(&c, Some(&k), None, Some(&quiet)).holds());
    }
}

//! Container engines asked as controllers (docs/ARCHITECTURE.md, "Container engines"): a
//! container's state and restart policy as its engine reports them, and the engine's
//! event stream for the containers named, through the Docker Engine API (which podman's
//! `podman system service` also speaks) over the engine's unix socket, behind a blocking
//! facade, so that the issuance stays one synchronous thread of control. The runtime
//! (tokio, current-thread) is private to each [`Engine`] and each [`Watch`].
//!
//! Every answer is bounded ([`ANSWER_BYTES_MAX`], [`EVENT_BYTES_MAX`], [`EVENTS_KEPT_MAX`])
//! and every call has a deadline ([`CALL_SECONDS_MAX`] at most). An answer that lacks a
//! field the containment judges, or holds one of another type, is an [`Error::Answer`],
//! never a default: unknown is never "not running".

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http_body_util::BodyExt as _;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

mod answers;
pub mod containerd;
mod watch;

pub use answers::*;
pub use watch::*;

/// The largest answer read for one call (an inspect is a few KiB).
pub const ANSWER_BYTES_MAX: usize = 1 << 20;
/// The longest event line read from an event stream: as long as a whole answer, so that a
/// bystander's labels of tens of KiB (an event carries them) do not end the stream for
/// every recovery on that engine.
pub const EVENT_BYTES_MAX: usize = ANSWER_BYTES_MAX;
/// Events a [`Watch`] keeps; past it only counted.
pub const EVENTS_KEPT_MAX: usize = 64;
/// The name prefix of the volumes [`Engine::caught_up`] creates and removes.
pub const CAUGHT_UP_VOLUME: &str = "repoch-caught-up-";

/// A nonce for repoch's own events and volumes: the process, the time, a counter.
fn nonce() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{}{}{}{n}",
        std::process::id(),
        now.as_secs(),
        now.subsec_nanos()
    )
}

/// The most bytes of events one catch-up read ([`Engine::events_until_now`]) takes.
pub const EVENTS_READ_BYTES_MAX: usize = 16 << 20;
/// The longest wait for one answer; the caller's deadline is clamped to it.
pub const CALL_SECONDS_MAX: u64 = 30;

/// Why an engine did not give an answer the containment can judge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The engine could not be asked: no socket, a refused connection, no answer in time.
    #[error("{0}")]
    Unreachable(String),
    /// The engine answered something this client cannot read, or an error status.
    #[error("{0}")]
    Answer(String),
}

/// A container as its engine reports it: the fields the containment judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// The full id.
    pub id: String,
    /// When the engine created it (Docker's `Created`, containerd's `created_at`): a
    /// container removed and created again under the same id (containerd's ids are their
    /// names) is another one.
    pub created: String,
    /// The name, without Docker's leading `/`.
    pub name: String,
    /// `State.Status`: `created`, `running`, `exited`, … (podman also says `stopped`).
    pub status: String,
    pub running: bool,
    pub restarting: bool,
    pub paused: bool,
    /// The container's first process as the host sees it; 0 when none runs.
    pub pid: i64,
    /// `HostConfig.RestartPolicy.Name`: `no` (or empty), `always`, `unless-stopped`,
    /// `on-failure`.
    pub restart_policy: String,
    /// Exec sessions the engine holds for it (`ExecIDs`).
    pub exec_sessions: usize,
    /// The cgroup (v2, from the hierarchy's root) the engine reports for it: containerd's
    /// spec (`linux.cgroupsPath`). `None`: the engine reports none (the Docker Engine API
    /// names no cgroup for a container).
    pub cgroup: Option<String>,
    /// When it last started (`State.StartedAt`, the engine's text; containerd, which keeps
    /// no start time: its task's pid and exit, or `no task`): a start between two looks
    /// changes it, whatever the event stream has delivered yet.
    pub started_at: String,
}

/// One event of a container named to a [`Watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `Action` (`start`, `restart`, `exec_create: sh`, …).
    pub action: String,
    /// The container's id as the event gives it.
    pub id: String,
    /// The container's name as the event gives it.
    pub name: String,
    /// The engine's time of the event, seconds since the epoch.
    pub time: i64,
}

/// What a [`Watch`] saw since it was opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Seen {
    /// The first [`EVENTS_KEPT_MAX`] events that could start or change a container.
    pub events: Vec<Event>,
    /// Such events past the first [`EVENTS_KEPT_MAX`].
    pub more: u64,
    /// Why the stream ended, if it did: from then on nothing is watched.
    pub ended: Option<String>,
    /// The containers followed whose removal the engine reported (Docker's and podman's
    /// full ids, containerd's `NAMESPACE/ID`), the first [`EVENTS_KEPT_MAX`]: a container
    /// found gone is gone by the engine's word only once its removal came through, and
    /// then everything before it (a start among them) came through too.
    pub removed: Vec<String>,
}

impl Seen {
    /// `self` with what `other` saw too (a catch-up read's events past the ones kept are
    /// counted; removals merged).
    pub fn merged(mut self, other: Seen) -> Seen {
        for e in other.events {
            if self.events.len() < EVENTS_KEPT_MAX {
                self.events.push(e);
            } else {
                self.more = self.more.saturating_add(1);
            }
        }
        self.more = self.more.saturating_add(other.more);
        for r in other.removed {
            if self.removed.len() < EVENTS_KEPT_MAX && !self.removed.contains(&r) {
                self.removed.push(r);
            }
        }
        self.ended = self.ended.or(other.ended);
        self
    }
}

/// The actions that neither start nor change a stopped container: its end, its removal.
/// Every other action of a named container is an event that counts (unknown is never
/// harmless).
pub const HARMLESS_ACTIONS: &[&str] = &[
    "die", "stop", "kill", "destroy", "remove", "cleanup", "oom", "died",
];
/// The actions that say a container was removed (Docker's `destroy`, podman's `remove`).
pub const REMOVAL_ACTIONS: &[&str] = &["destroy", "remove"];

/// One engine, asked over its unix socket.
#[derive(Debug)]
pub struct Engine {
    rt: tokio::runtime::Runtime,
    socket: PathBuf,
    deadline: Duration,
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Unreachable(format!("a runtime for the engine's client: {e}")))
}

/// Sends `GET path` over a new connection to `socket`; the answer's status and the
/// response, its headers read (the body is the caller's to read).
async fn send(socket: &Path, path: &str) -> Result<hyper::Response<hyper::body::Incoming>, Error> {
    request(socket, hyper::Method::GET, path, Vec::new()).await
}

/// Sends `METHOD path` with `body` (JSON when not empty) over a new connection to `socket`.
async fn request(
    socket: &Path,
    method: hyper::Method,
    path: &str,
    body: Vec<u8>,
) -> Result<hyper::Response<hyper::body::Incoming>, Error> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| Error::Unreachable(format!("{}: {e}", socket.display())))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Error::Unreachable(format!("{}: HTTP: {e}", socket.display())))?;
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method(method.clone())
        .uri(path)
        .header(hyper::header::HOST, "localhost")
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(http_body_util::Full::new(Bytes::from(body)))
        .map_err(|e| Error::Answer(format!("a request for {path}: {e}")))?;
    sender
        .send_request(req)
        .await
        .map_err(|e| Error::Unreachable(format!("{}: {method} {path}: {e}", socket.display())))
}

/// The whole body of `r`, at most [`ANSWER_BYTES_MAX`] bytes.
async fn body(r: hyper::Response<hyper::body::Incoming>) -> Result<Vec<u8>, Error> {
    let limited = http_body_util::Limited::new(r.into_body(), ANSWER_BYTES_MAX);
    let collected = limited.collect().await.map_err(|e| {
        Error::Answer(format!(
            "an answer over {ANSWER_BYTES_MAX} bytes or cut: {e}"
        ))
    })?;
    Ok(collected.to_bytes().to_vec())
}

/// An error answer's message (`{"message": …}`), or its first bytes.
fn message(bytes: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned())
}

impl Engine {
    /// An engine listening on `socket`; nothing is sent until asked. `deadline` bounds each
    /// answer (at most [`CALL_SECONDS_MAX`]).
    pub fn new(socket: &Path, deadline: Duration) -> Result<Engine, Error> {
        Ok(Engine {
            rt: runtime()?,
            socket: socket.to_path_buf(),
            deadline: deadline.min(Duration::from_secs(CALL_SECONDS_MAX)),
        })
    }

    /// `GET path`, whole answer, within the deadline.
    fn get(&self, path: &str) -> Result<(hyper::StatusCode, Vec<u8>), Error> {
        self.call(hyper::Method::GET, path, Vec::new())
    }

    /// `METHOD path` with `body`, whole answer, within the deadline.
    fn call(
        &self,
        method: hyper::Method,
        path: &str,
        body_bytes: Vec<u8>,
    ) -> Result<(hyper::StatusCode, Vec<u8>), Error> {
        let socket = self.socket.clone();
        let deadline = self.deadline;
        self.rt.block_on(async move {
            let call = async {
                let r = request(&socket, method, path, body_bytes).await?;
                let status = r.status();
                Ok((status, body(r).await?))
            };
            tokio::time::timeout(deadline, call)
                .await
                .unwrap_or_else(|_| {
                    Err(Error::Unreachable(format!(
                        "{}: {path}: no answer within {} ms",
                        socket.display(),
                        deadline.as_millis()
                    )))
                })
        })
    }

    /// Whether the engine answers as one (`GET /_ping`: 200, `OK`). Not `/version`:
    /// podman's service gathers its runtime's and conmon's versions for it, about 390 ms
    /// a call, where `/_ping` takes one.
    pub fn ping(&self) -> Result<(), Error> {
        let (status, bytes) = self.get("/_ping")?;
        match (status, bytes.as_slice()) {
            (hyper::StatusCode::OK, b"OK") => Ok(()),
            (status, _) => Err(Error::Answer(format!(
                "/_ping: {status}: {}",
                message(&bytes)
            ))),
        }
    }

    /// The container named `name_or_id` (`GET /containers/NAME/json`); `None` when the
    /// engine says it has none (404).
    pub fn inspect(&self, name_or_id: &str) -> Result<Option<Container>, Error> {
        let path = format!("/containers/{}/json", escape_segment(name_or_id));
        let (status, bytes) = self.get(&path)?;
        let found = match status {
            hyper::StatusCode::NOT_FOUND => return Ok(None),
            hyper::StatusCode::OK => serde_json::from_slice::<Inspect>(&bytes)
                .map_err(|e| Error::Answer(e.to_string()))
                .and_then(Container::try_from)
                .map_err(|e| Error::Answer(format!("{path}: {e}")))?,
            s => return Err(Error::Answer(format!("{path}: {s}: {}", message(&bytes)))),
        };
        self.unambiguous(name_or_id, &found)?;
        Ok(named_by(name_or_id, &found).then_some(found))
    }

    /// Docker and podman take a reference as a full id, then a name, then an id prefix: a
    /// short id that another container took as its name names that one instead (found by
    /// attacking the release binaries: a stopped container named by the old root's short
    /// id, and the recovery granted while the old root ran). A reference that is a name
    /// here and begins another container's id is refused as ambiguous. One shorter than a
    /// short id is a name alone ([`named_by`]): no ambiguity.
    fn unambiguous(&self, spelled: &str, found: &Container) -> Result<(), Error> {
        let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
        let id_like =
            (SHORT_ID_HEX_DIGITS..64).contains(&spelled.len()) && spelled.chars().all(hex);
        if found.name != spelled || !id_like {
            return Ok(());
        }
        let filters = serde_json::json!({ "id": [spelled] }).to_string();
        let path = format!(
            "/containers/json?all=1&filters={}",
            escape_segment(&filters)
        );
        let (status, bytes) = self.get(&path)?;
        if status != hyper::StatusCode::OK {
            return Err(Error::Answer(format!(
                "{path}: {status}: {}",
                message(&bytes)
            )));
        }
        #[derive(serde::Deserialize)]
        struct Listed {
            #[serde(rename = "Id")]
            id: String,
        }
        let listed: Vec<Listed> =
            serde_json::from_slice(&bytes).map_err(|e| Error::Answer(format!("{path}: {e}")))?;
        match listed
            .iter()
            .find(|l| l.id != found.id && l.id.starts_with(spelled))
        {
            // Short: a fact's observed text is clipped (docs/OPERATOR.md, "Containers",
            // says what to name instead: a full id, or a name that is no id's beginning).
            Some(other) => Err(Error::Answer(format!(
                "ambiguous: {}'s name, {}'s id",
                short_id(&found.id),
                short_id(&other.id)
            ))),
            None => Ok(()),
        }
    }

    /// Follows the engine's events for the containers named (`GET /events`, filtered to
    /// them, from `since`: the engine replays what it kept since then). Returns once the
    /// engine accepted the subscription (its answer's headers read).
    pub fn watch(&self, names: &[String], since: SystemTime) -> Result<Watch, Error> {
        Watch::open(self.socket.clone(), names, since, self.deadline)
    }

    /// Returns once `watch` has read every event the engine logged before this call: a
    /// volume of repoch's own (`repoch-caught-up-NONCE`) is created and removed, and its
    /// creation's event came back through the stream (an engine's events come in the
    /// order it logs them). podman's service reads its events from a file a while after
    /// they happened, and answers nothing to `/events?until=` a time already past: this is
    /// how its stream is known to be caught up.
    pub fn caught_up(&self, watch: &Watch) -> Result<(), Error> {
        let name = format!("{CAUGHT_UP_VOLUME}{}", nonce());
        let create = serde_json::json!({ "Name": name }).to_string().into_bytes();
        let (status, bytes) = self.call(hyper::Method::POST, "/volumes/create", create)?;
        if !status.is_success() {
            return Err(Error::Answer(format!(
                "/volumes/create: {status}: {}",
                message(&bytes)
            )));
        }
        let path = format!("/volumes/{}", escape_segment(&name));
        let (status, bytes) = self.call(hyper::Method::DELETE, &path, Vec::new())?;
        if !status.is_success() {
            return Err(Error::Answer(format!(
                "DELETE {path}: {status}: {}",
                message(&bytes)
            )));
        }
        watch.await_mark(&name, self.deadline)
    }

    /// Every event of the containers named or pinned (`ids`) from `since` to now, as the
    /// engine has logged them (`GET /events?since&until=now`, an answer that ends): what a
    /// [`Watch`] may not have been delivered yet (podman's service reads its events from a
    /// file, up to a quarter second behind). At most [`EVENTS_READ_BYTES_MAX`] bytes.
    pub fn events_until_now(
        &self,
        names: &[String],
        ids: &[String],
        prefixes: &[String],
        since: SystemTime,
    ) -> Result<Seen, Error> {
        let path = format!(
            "{}&until={}",
            events_query(since),
            seconds(SystemTime::now())
        );
        let shared = Mutex::new(Shared {
            names: names.to_vec(),
            ids: ids.to_vec(),
            prefixes: prefixes.to_vec(),
            ..Shared::default()
        });
        let socket = self.socket.clone();
        let deadline = self.deadline;
        self.rt.block_on(async {
            let read = async {
                let r = send(&socket, &path).await?;
                if r.status() != hyper::StatusCode::OK {
                    let status = r.status();
                    let bytes = body(r).await.unwrap_or_default();
                    return Err(Error::Answer(format!(
                        "/events: {status}: {}",
                        message(&bytes)
                    )));
                }
                read_events(r.into_body(), &shared).await
            };
            tokio::time::timeout(deadline, read)
                .await
                .unwrap_or_else(|_| {
                    Err(Error::Unreachable(format!(
                        "{}: /events until now: no end within {} ms",
                        socket.display(),
                        deadline.as_millis()
                    )))
                })
        })?;
        Ok(shared
            .into_inner()
            .map_or_else(|_| Seen::default(), |s| s.seen))
    }
}

/// Reads a whole event answer into `shared`, at most [`EVENTS_READ_BYTES_MAX`] bytes; a
/// last line without its newline is read as a line.
async fn read_events(mut body: hyper::body::Incoming, shared: &Mutex<Shared>) -> Result<(), Error> {
    let mut line = Vec::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Error::Unreachable(format!("/events: cut: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total = total.saturating_add(data.len());
        if total > EVENTS_READ_BYTES_MAX {
            return Err(Error::Answer(format!(
                "/events: over {EVENTS_READ_BYTES_MAX} bytes"
            )));
        }
        take_lines(&mut line, &data, shared)
            .map_err(|why| Error::Answer(format!("/events: {why}")))?;
    }
    if !line.is_empty() {
        take_lines(&mut line, b"\n", shared)
            .map_err(|why| Error::Answer(format!("/events: {why}")))?;
    }
    Ok(())
}

/// The digits of a short id: the shortest id prefix a reference is taken as.
pub const SHORT_ID_HEX_DIGITS: usize = 12;

/// Whether `reference` names container `k`: its name, its id, or the beginning of its id
/// of at least [`SHORT_ID_HEX_DIGITS`] digits. Docker and podman take any beginning of an
/// id, so a short name nothing is called (`db`, `d`) reads as a bystander whose random id
/// begins with it (found by attacking the release binaries: such a bystander was pinned at
/// enrollment, and a container of that very name started later ran unjudged).
pub fn named_by(reference: &str, k: &Container) -> bool {
    k.name == reference
        || k.id == reference
        || (reference.len() >= SHORT_ID_HEX_DIGITS && k.id.starts_with(reference))
}

/// An id's first 12 characters, as the engines print it.
pub fn short_id(id: &str) -> &str {
    id.get(..SHORT_ID_HEX_DIGITS).unwrap_or(id)
}

/// A path segment as the URL carries it.
fn escape_segment(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The query of `GET /events`: every container event, from `since`. Not filtered by name
/// at the engine: Docker matches a name filter against a container's current name, so a
/// container renamed away would not be followed; [`Watch`] matches each event itself.
fn events_query(since: SystemTime) -> String {
    let filters = serde_json::json!({"type": ["container", "volume"]});
    format!(
        "/events?since={}&filters={}",
        seconds(since),
        escape_segment(&filters.to_string())
    )
}

/// A time as the engines' event queries take it: seconds since the epoch, with nanoseconds.
fn seconds(t: SystemTime) -> String {
    let t = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:09}", t.as_secs(), t.subsec_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inspect_lacking_a_judged_field_is_no_answer() {
        let whole = r#"{"Id":"abc","Created":"2026-12-04T18:59:00Z","Name":"/old-root","State":{"Status":"exited","Running":false,"Restarting":false,"Paused":false,"Pid":0,"StartedAt":"2026-12-04T19:00:00Z"},"HostConfig":{"RestartPolicy":{"Name":"always"}},"Config":{"Labels":null},"ExecIDs":null}"#;
        let read = |text: &str| {
            serde_json::from_str::<Inspect>(text)
                .map_err(|e| Error::Answer(e.to_string()))
                .and_then(Container::try_from)
        };
        let c = read(whole).unwrap();
        assert_eq!(
            (c.name.as_str(), c.restart_policy.as_str(), c.exec_sessions),
            ("old-root", "always", 0)
        );
        for cut in [
            whole.replace("\"Running\":false,", ""),
            whole.replace("\"RestartPolicy\":{\"Name\":\"always\"}", ""),
            whole.replace(",\"ExecIDs\":null", ""),
            whole.replace("\"ExecIDs\":null", "\"ExecIDs\":7"),
        ] {
            assert!(read(&cut).is_err(), "{cut}");
        }
        let two = whole.replace("\"ExecIDs\":null", "\"ExecIDs\":[\"e1\",\"e2\"]");
        assert_eq!(read(&two).unwrap().exec_sessions, 2);
        assert!(read(&whole.replace(",\"Config\":{\"Labels\":null}", "")).is_err());
        // A swarm service's task: its policy "no" is not what starts it again.
        let task = whole
            .replace("\"always\"", "\"\"")
            .replace(
                "\"Labels\":null",
                r#""Labels":{"com.docker.swarm.service.id":"x1","com.docker.swarm.service.name":"billing"}"#,
            );
        assert_eq!(read(&task).unwrap().restart_policy, "swarm service billing");
        // A systemd unit podman names as the one that runs it, of policy "no"; a pod's
        // container a kubelet recreates.
        let unit = whole.replace("\"always\"", "\"no\"").replace(
            "\"Labels\":null",
            r#""Labels":{"PODMAN_SYSTEMD_UNIT":"container-billing.service"}"#,
        );
        assert_eq!(
            read(&unit).unwrap().restart_policy,
            "systemd unit container-billing.service"
        );
        let pod = whole.replace(
            "\"Labels\":null",
            r#""Labels":{"io.kubernetes.pod.name":"billing","io.kubernetes.pod.namespace":"prod"}"#,
        );
        assert_eq!(
            read(&pod).unwrap().restart_policy,
            "kubernetes pod prod/billing"
        );
        // A Nomad allocation's task container, of policy "no": Nomad restarts and
        // reschedules it.
        let nomad = whole.replace("\"always\"", "\"no\"").replace(
            "\"Labels\":null",
            r#""Labels":{"com.hashicorp.nomad.alloc_id":"5e1c0c1a","com.hashicorp.nomad.job_name":"billing"}"#,
        );
        assert_eq!(
            read(&nomad).unwrap().restart_policy,
            "nomad job billing (allocation 5e1c0c1a)"
        );
        // podman's compatible API says "stopped": a state like any other.
        let podman = whole.replace("\"exited\"", "\"stopped\"");
        assert!(read(&podman).is_ok());
    }

    fn following(names: &[&str], ids: &[&str]) -> Mutex<Shared> {
        Mutex::new(Shared {
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            ids: ids.iter().map(|n| (*n).to_owned()).collect(),
            prefixes: names.iter().map(|n| (*n).to_owned()).collect(),
            ..Shared::default()
        })
    }

    fn event(action: &str, id: &str, attributes: &str) -> Vec<u8> {
        format!(
            r#"{{"Type":"container","Action":"{action}","Actor":{{"ID":"{id}","Attributes":{{{attributes}}}}},"time":17}}"#
        )
        .into_bytes()
    }

    #[test]
    fn events_are_split_by_line_and_harmless_ones_left_out() {
        let shared = following(&["old-root"], &[]);
        let mut line = Vec::new();
        let start = event("start", "abc", r#""name":"old-root""#);
        let die = event("die", "abc", r#""name":"old-root""#);
        let other = event("start", "def", r#""name":"bystander""#);
        let mut stream = [&start[..], b"\n", &die[..], b"\n", &other[..], b"\n"].concat();
        let tail = stream.split_off(10);
        take_lines(&mut line, &stream, &shared).unwrap();
        take_lines(&mut line, &tail, &shared).unwrap();
        let s = shared.into_inner().unwrap().seen;
        assert_eq!(s.events.len(), 1);
        assert_eq!(
            (s.events[0].action.as_str(), s.events[0].name.as_str()),
            ("start", "old-root")
        );
        assert!(s.removed.is_empty(), "{s:?}");
        // A removal is noted by the id, not kept as an event; a bystander's is not noted.
        let shared = following(&["old-root"], &[]);
        for e in [
            event("destroy", "abc", r#""name":"old-root""#),
            event("remove", "def", r#""name":"bystander""#),
        ] {
            take_lines(&mut Vec::new(), &[&e[..], b"\n"].concat(), &shared).unwrap();
        }
        let s = shared.into_inner().unwrap().seen;
        assert_eq!(
            (s.events.len(), s.removed.as_slice()),
            (0, &["abc".to_owned()][..])
        );
        let shared = following(&["old-root"], &[]);
        assert!(take_lines(&mut Vec::new(), b"{not json}\n", &shared).is_err());
        let long = vec![b'x'; EVENT_BYTES_MAX + 1];
        assert!(take_lines(&mut Vec::new(), &long, &shared).is_err());
    }

    #[test]
    fn a_container_is_followed_by_its_old_name_its_pinned_id_and_its_id_prefix() {
        // Renamed away, then started under its new name: the rename by its old name, the
        // start by its pinned id.
        let shared = following(&["old-root"], &["abc123"]);
        for e in [
            event(
                "rename",
                "abc123",
                r#""name":"hidden","oldName":"/old-root""#,
            ),
            event("start", "abc123", r#""name":"hidden""#),
        ] {
            take_lines(&mut Vec::new(), &[&e[..], b"\n"].concat(), &shared).unwrap();
        }
        let actions: Vec<String> = shared
            .lock()
            .unwrap()
            .seen
            .events
            .iter()
            .map(|e| e.action.clone())
            .collect();
        assert_eq!(actions, ["rename", "start"]);
        // Named by a short id: its events by the id they start.
        let shared = following(&["abc123456789"], &[]);
        let e = event("start", "abc123456789ff", r#""name":"anything""#);
        take_lines(&mut Vec::new(), &[&e[..], b"\n"].concat(), &shared).unwrap();
        assert_eq!(shared.lock().unwrap().seen.events.len(), 1);
        // A reference shorter than a short id is a name: no id prefix.
        let shared = following(&["abc1"], &[]);
        take_lines(&mut Vec::new(), &[&e[..], b"\n"].concat(), &shared).unwrap();
        assert!(shared.lock().unwrap().seen.events.is_empty());
    }

    #[test]
    fn a_bystander_whose_id_begins_with_a_name_found_by_that_name_is_not_followed() {
        // The manifest names `docker:db`, found by that name (pinned `db0`); an unrelated
        // container whose random id begins with `db` is created and started: not the
        // named container's events. Found by attacking the release binaries: such a create
        // refused the recovery container-changed, and such a start after the intent
        // withheld it (one create in 256 for a two-letter name of hex digits).
        let shared = following(&["db"], &["db0"]);
        shared.lock().unwrap().prefixes.retain(|p| p != "db");
        for e in [
            event("create", "dbd4846e61a0", r#""name":"bystander""#),
            event("start", "dbd4846e61a0", r#""name":"bystander""#),
        ] {
            take_lines(&mut Vec::new(), &[&e[..], b"\n"].concat(), &shared).unwrap();
        }
        assert!(shared.lock().unwrap().seen.events.is_empty());
        // The named container's own events still are, by its name and its pinned id.
        let e = event("start", "db0", r#""name":"db""#);
        take_lines(&mut Vec::new(), &[&e[..], b"\n"].concat(), &shared).unwrap();
        assert_eq!(shared.lock().unwrap().seen.events.len(), 1);
    }

    #[test]
    fn what_a_catch_up_read_saw_is_added_to_what_the_stream_saw() {
        let e = |action: &str| Event {
            action: action.into(),
            id: "abc".into(),
            name: "old-root".into(),
            time: 1,
        };
        let stream = Seen {
            events: vec![e("start")],
            removed: vec!["abc".into()],
            ..Seen::default()
        };
        let logged = Seen {
            events: (0..EVENTS_KEPT_MAX).map(|_| e("exec_create")).collect(),
            more: 2,
            removed: vec!["abc".into(), "def".into()],
            ended: None,
        };
        let m = stream.merged(logged);
        assert_eq!(m.events.len(), EVENTS_KEPT_MAX);
        assert_eq!(m.events[0].action, "start");
        // One past the kept, and the two the read counted.
        assert_eq!(m.more, 3);
        assert_eq!(m.removed, ["abc", "def"]);
    }

    #[test]
    fn the_events_query_asks_for_every_container_event_from_since() {
        let q = events_query(SystemTime::UNIX_EPOCH + Duration::from_millis(1500));
        assert!(
            q.starts_with("/events?since=1.500000000&filters=%7B"),
            "{q}"
        );
        assert!(q.contains("container") && !q.contains("old"), "{q}");
    }
}

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

/// The largest answer read for one call (an inspect is a few KiB).
pub const ANSWER_BYTES_MAX: usize = 1 << 20;
/// The longest event line read from an event stream.
pub const EVENT_BYTES_MAX: usize = 64 * 1024;
/// Events a [`Watch`] keeps; past it only counted.
pub const EVENTS_KEPT_MAX: usize = 64;
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
}

/// The actions that neither start nor change a stopped container: its end, its removal.
/// Every other action of a named container is an event that counts (unknown is never
/// harmless).
pub const HARMLESS_ACTIONS: &[&str] = &[
    "die", "stop", "kill", "destroy", "remove", "cleanup", "oom", "died",
];

/// One engine, asked over its unix socket.
#[derive(Debug)]
pub struct Engine {
    rt: tokio::runtime::Runtime,
    socket: PathBuf,
    deadline: Duration,
}

/// The Docker API's inspect answer: only what is judged, each field required.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Inspect {
    id: String,
    name: String,
    state: State,
    host_config: HostConfig,
    #[serde(rename = "ExecIDs")]
    exec_ids: Option<Vec<String>>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct State {
    status: String,
    running: bool,
    restarting: bool,
    paused: bool,
    pid: i64,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct HostConfig {
    restart_policy: RestartPolicy,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RestartPolicy {
    name: String,
}

/// An event line: Docker's and podman's compatible API both give these fields.
#[derive(Debug, serde::Deserialize)]
struct EventLine {
    #[serde(rename = "Type")]
    kind: String,
    #[serde(rename = "Action")]
    action: String,
    #[serde(rename = "Actor")]
    actor: Actor,
    time: i64,
}

#[derive(Debug, serde::Deserialize)]
struct Actor {
    #[serde(rename = "ID")]
    id: String,
    #[serde(rename = "Attributes", default)]
    attributes: std::collections::BTreeMap<String, String>,
}

impl From<Inspect> for Container {
    fn from(i: Inspect) -> Container {
        Container {
            name: i.name.trim_start_matches('/').to_owned(),
            id: i.id,
            status: i.state.status,
            running: i.state.running,
            restarting: i.state.restarting,
            paused: i.state.paused,
            pid: i.state.pid,
            restart_policy: i.host_config.restart_policy.name,
            exec_sessions: i.exec_ids.map_or(0, |v| v.len()),
        }
    }
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
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| Error::Unreachable(format!("{}: {e}", socket.display())))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Error::Unreachable(format!("{}: HTTP: {e}", socket.display())))?;
    tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, "localhost")
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| Error::Answer(format!("a request for {path}: {e}")))?;
    sender
        .send_request(req)
        .await
        .map_err(|e| Error::Unreachable(format!("{}: GET {path}: {e}", socket.display())))
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
        let socket = self.socket.clone();
        let deadline = self.deadline;
        self.rt.block_on(async move {
            let call = async {
                let r = send(&socket, path).await?;
                let status = r.status();
                Ok((status, body(r).await?))
            };
            tokio::time::timeout(deadline, call)
                .await
                .unwrap_or_else(|_| {
                    Err(Error::Unreachable(format!(
                        "{}: GET {path}: no answer within {} ms",
                        socket.display(),
                        deadline.as_millis()
                    )))
                })
        })
    }

    /// The engine's own name and API version (`GET /version`): that it answers as an
    /// engine.
    pub fn version(&self) -> Result<String, Error> {
        let (status, bytes) = self.get("/version")?;
        if status != hyper::StatusCode::OK {
            return Err(Error::Answer(format!(
                "/version: {status}: {}",
                message(&bytes)
            )));
        }
        let v: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| Error::Answer(format!("/version: {e}")))?;
        match (v["Version"].as_str(), v["ApiVersion"].as_str()) {
            (Some(version), Some(api)) => Ok(format!("{version} (API {api})")),
            _ => Err(Error::Answer("/version: no Version and ApiVersion".into())),
        }
    }

    /// The container named `name_or_id` (`GET /containers/NAME/json`); `None` when the
    /// engine says it has none (404).
    pub fn inspect(&self, name_or_id: &str) -> Result<Option<Container>, Error> {
        let path = format!("/containers/{}/json", escape_segment(name_or_id));
        let (status, bytes) = self.get(&path)?;
        match status {
            hyper::StatusCode::NOT_FOUND => Ok(None),
            hyper::StatusCode::OK => serde_json::from_slice::<Inspect>(&bytes)
                .map(|i| Some(i.into()))
                .map_err(|e| Error::Answer(format!("{path}: {e}"))),
            s => Err(Error::Answer(format!("{path}: {s}: {}", message(&bytes)))),
        }
    }

    /// Follows the engine's events for the containers named (`GET /events`, filtered to
    /// them, from `since`: the engine replays what it kept since then). Returns once the
    /// engine accepted the subscription (its answer's headers read).
    pub fn watch(&self, names: &[String], since: SystemTime) -> Result<Watch, Error> {
        Watch::open(self.socket.clone(), names, since, self.deadline)
    }
}

/// A path segment as the URL carries it.
fn escape_segment(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The query of `GET /events`: container events of `names`, from `since`.
fn events_query(names: &[String], since: SystemTime) -> String {
    let filters = serde_json::json!({"type": ["container"], "container": names});
    let since = since
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "/events?since={}.{:09}&filters={}",
        since.as_secs(),
        since.subsec_nanos(),
        escape_segment(&filters.to_string())
    )
}

/// An engine's event stream, read by a thread of its own until dropped.
#[derive(Debug)]
pub struct Watch {
    seen: Arc<Mutex<Seen>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    fn open(
        socket: PathBuf,
        names: &[String],
        since: SystemTime,
        deadline: Duration,
    ) -> Result<Watch, Error> {
        let path = events_query(names, since);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (ready, accepted) = std::sync::mpsc::channel();
        let rt = runtime()?;
        let shared = Arc::clone(&seen);
        let thread = std::thread::Builder::new()
            .name("repoch-engine-events".into())
            .spawn(move || {
                rt.block_on(follow(socket, path, deadline, shared, ready, stopped));
            })
            .map_err(|e| Error::Unreachable(format!("a thread for the event stream: {e}")))?;
        let watch = Watch {
            seen,
            stop: Some(stop),
            thread: Some(thread),
        };
        match accepted.recv_timeout(deadline + Duration::from_secs(1)) {
            Ok(Ok(())) => Ok(watch),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Unreachable(format!(
                "the event stream: not accepted within {} ms",
                deadline.as_millis()
            ))),
        }
    }

    /// What was seen so far.
    pub fn seen(&self) -> Seen {
        self.seen.lock().map_or_else(
            |_| Seen {
                ended: Some("the event reader failed".into()),
                ..Seen::default()
            },
            |s| s.clone(),
        )
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The reader: subscribes, says whether the engine accepted, then records each event
/// until stopped or the stream ends.
async fn follow(
    socket: PathBuf,
    path: String,
    deadline: Duration,
    seen: Arc<Mutex<Seen>>,
    ready: std::sync::mpsc::Sender<Result<(), Error>>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let subscribed = tokio::time::timeout(deadline, send(&socket, &path)).await;
    let r = match subscribed {
        Ok(Ok(r)) if r.status() == hyper::StatusCode::OK => r,
        Ok(Ok(r)) => {
            let status = r.status();
            let bytes = body(r).await.unwrap_or_default();
            let _ = ready.send(Err(Error::Answer(format!(
                "/events: {status}: {}",
                message(&bytes)
            ))));
            return;
        }
        Ok(Err(e)) => {
            let _ = ready.send(Err(e));
            return;
        }
        Err(_) => {
            let _ = ready.send(Err(Error::Unreachable(format!(
                "/events: no answer within {} ms",
                deadline.as_millis()
            ))));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    let mut body = r.into_body();
    let mut line: Vec<u8> = Vec::new();
    let ended = loop {
        let frame = tokio::select! {
            _ = &mut stopped => return,
            f = body.frame() => f,
        };
        let data = match frame {
            None => break "the engine closed the event stream".to_owned(),
            Some(Err(e)) => break format!("the event stream broke: {e}"),
            Some(Ok(f)) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
        };
        if let Err(why) = take_lines(&mut line, &data, &seen) {
            break why;
        }
    };
    if let Ok(mut s) = seen.lock() {
        s.ended.get_or_insert(ended);
    }
}

/// Appends `data` to the partial `line`, recording every whole event line in `seen`.
fn take_lines(line: &mut Vec<u8>, data: &[u8], seen: &Mutex<Seen>) -> Result<(), String> {
    for &b in data {
        if b != b'\n' {
            if line.len() >= EVENT_BYTES_MAX {
                return Err(format!("an event line over {EVENT_BYTES_MAX} bytes"));
            }
            line.push(b);
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            line.clear();
            continue;
        }
        let e: EventLine = serde_json::from_slice(line)
            .map_err(|e| format!("an event that cannot be read: {e}"))?;
        line.clear();
        record(seen, e);
    }
    Ok(())
}

fn record(seen: &Mutex<Seen>, e: EventLine) {
    if e.kind != "container" || HARMLESS_ACTIONS.contains(&e.action.as_str()) {
        return;
    }
    let Ok(mut s) = seen.lock() else { return };
    if s.events.len() >= EVENTS_KEPT_MAX {
        s.more = s.more.saturating_add(1);
        return;
    }
    s.events.push(Event {
        name: e.actor.attributes.get("name").cloned().unwrap_or_default(),
        action: e.action,
        id: e.actor.id,
        time: e.time,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inspect_lacking_a_judged_field_is_no_answer() {
        let whole = r#"{"Id":"abc","Name":"/old-root","State":{"Status":"exited","Running":false,"Restarting":false,"Paused":false,"Pid":0},"HostConfig":{"RestartPolicy":{"Name":"always"}},"ExecIDs":null}"#;
        let c: Container = serde_json::from_str::<Inspect>(whole).unwrap().into();
        assert_eq!(
            (c.name.as_str(), c.restart_policy.as_str(), c.exec_sessions),
            ("old-root", "always", 0)
        );
        for field in [
            "\"Running\":false,",
            "\"RestartPolicy\":{\"Name\":\"always\"}",
        ] {
            let cut = whole.replace(field, "");
            assert!(serde_json::from_str::<Inspect>(&cut).is_err(), "{cut}");
        }
        // podman's compatible API says "stopped": a state like any other.
        let podman = whole.replace("\"exited\"", "\"stopped\"");
        assert!(serde_json::from_str::<Inspect>(&podman).is_ok());
    }

    #[test]
    fn events_are_split_by_line_and_harmless_ones_left_out() {
        let seen = Mutex::new(Seen::default());
        let mut line = Vec::new();
        let start = br#"{"Type":"container","Action":"start","Actor":{"ID":"abc","Attributes":{"name":"old-root"}},"time":17}"#;
        let die = br#"{"Type":"container","Action":"die","Actor":{"ID":"abc","Attributes":{}},"time":18}"#;
        let mut stream = [&start[..], b"\n", &die[..], b"\n"].concat();
        let tail = stream.split_off(10);
        take_lines(&mut line, &stream, &seen).unwrap();
        take_lines(&mut line, &tail, &seen).unwrap();
        let s = seen.into_inner().unwrap();
        assert_eq!(s.events.len(), 1);
        assert_eq!(
            (s.events[0].action.as_str(), s.events[0].name.as_str()),
            ("start", "old-root")
        );
        let seen = Mutex::new(Seen::default());
        assert!(take_lines(&mut Vec::new(), b"{not json}\n", &seen).is_err());
        let long = vec![b'x'; EVENT_BYTES_MAX + 1];
        assert!(take_lines(&mut Vec::new(), &long, &seen).is_err());
    }

    #[test]
    fn the_events_query_filters_to_the_names_from_since() {
        let q = events_query(
            &["old-root".into()],
            SystemTime::UNIX_EPOCH + Duration::from_millis(1500),
        );
        assert!(
            q.starts_with("/events?since=1.500000000&filters=%7B"),
            "{q}"
        );
        assert!(q.contains("old%2Droot"), "{q}");
    }
}

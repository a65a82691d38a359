//! containerd asked through its own gRPC API over its unix socket: a container
//! (`NAMESPACE/ID`) and its task, as [`Container`]s judged like the Docker API's, and its
//! events service followed as a [`Watch`].
//!
//! containerd keeps no restart policy of its own: its restart monitor (the
//! `io.containerd.internal.v1.restart` plugin, which `ctr run --label` and nerdctl arm)
//! starts again, every interval and at containerd's start, each container labelled
//! `containerd.io/restart.status=running`. A container without that label, or labelled
//! `stopped`, reads as restart policy `no`; any other value of the label is the policy.
//!
//! containerd's events service sends no answer headers before its first event, and replays
//! nothing: a subscription is known to be in place only once an event published after it
//! came back through it. [`Containerd::watch`] publishes one of its own
//! (`/repoch/subscribed/NONCE`) and returns once it has come back.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::transport::Channel;

use crate::{nonce, Container, Error, Event, Ready, Shared, Watch, ANSWER_BYTES_MAX};

#[allow(clippy::all, rust_2018_idioms, missing_debug_implementations, dead_code)]
#[rustfmt::skip]
mod gen {
    pub mod containerd {
        pub mod types {
            include!("gen/containerd.types.rs");
        }
        pub mod v1 {
            pub mod types {
                include!("gen/containerd.v1.types.rs");
            }
        }
        pub mod events {
            include!("gen/containerd.events.rs");
        }
        pub mod services {
            pub mod containers {
                pub mod v1 {
                    include!("gen/containerd.services.containers.v1.rs");
                }
            }
            pub mod tasks {
                pub mod v1 {
                    include!("gen/containerd.services.tasks.v1.rs");
                }
            }
            pub mod events {
                pub mod v1 {
                    include!("gen/containerd.services.events.v1.rs");
                }
            }
            pub mod version {
                pub mod v1 {
                    include!("gen/containerd.services.version.v1.rs");
                }
            }
        }
    }
}

use gen::containerd::services::containers::v1 as containers;
use gen::containerd::services::events::v1 as events;
use gen::containerd::services::tasks::v1 as tasks;
use gen::containerd::services::version::v1 as version;
use gen::containerd::v1::types::{Process, Status};

/// The label containerd's restart monitor acts on.
pub const RESTART_LABEL: &str = "containerd.io/restart.status";
/// Event topics of a container or its task that neither start nor change a stopped one.
pub const HARMLESS_TOPICS: &[&str] = &[
    "/tasks/exit",
    "/tasks/delete",
    "/tasks/oom",
    "/containers/delete",
];
/// The topic prefix of every event repoch publishes.
pub const OWN_TOPICS: &str = "/repoch/";
/// The topic prefix of the events [`Containerd::watch`] publishes to learn that its
/// subscription is in place.
pub const SUBSCRIBED_TOPIC: &str = "/repoch/subscribed/";
/// The topic prefix of the events [`Containerd::caught_up`] publishes.
pub const CAUGHT_UP_TOPIC: &str = "/repoch/caught-up/";
/// How often the subscription's own event is published again while none came back.
const SUBSCRIBED_RETRY: Duration = Duration::from_millis(2);

/// One containerd, asked over its unix socket.
#[derive(Debug)]
pub struct Containerd {
    rt: tokio::runtime::Runtime,
    channel: Channel,
    socket: PathBuf,
    deadline: Duration,
}

/// A connection to containerd's socket (HTTP/2), made now.
async fn connect(socket: &Path, deadline: Duration) -> Result<Channel, Error> {
    let path = socket.to_path_buf();
    let connector = tower::service_fn(move |_: tonic::transport::Uri| {
        let path = path.clone();
        async move {
            Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
        }
    });
    let endpoint = tonic::transport::Endpoint::from_static("http://containerd")
        .connect_timeout(deadline)
        .timeout(deadline);
    tokio::time::timeout(deadline, endpoint.connect_with_connector(connector))
        .await
        .map_err(|_| {
            Error::Unreachable(format!(
                "{}: no connection within {} ms",
                socket.display(),
                deadline.as_millis()
            ))
        })?
        .map_err(|e| Error::Unreachable(format!("{}: {e}", socket.display())))
}

/// `NAMESPACE/ID` split; an error names what is wrong.
fn split(spelled: &str) -> Result<(&str, &str), Error> {
    spelled
        .split_once('/')
        .ok_or_else(|| Error::Answer(format!("{spelled}: not NAMESPACE/ID")))
}

/// A request in `namespace` (containerd's `containerd-namespace` header).
fn in_namespace<T>(namespace: &str, message: T) -> Result<tonic::Request<T>, Error> {
    let mut r = tonic::Request::new(message);
    let value = namespace
        .parse()
        .map_err(|_| Error::Answer(format!("namespace {namespace:?}: not a header value")))?;
    r.metadata_mut().insert("containerd-namespace", value);
    Ok(r)
}

/// A failed call as an [`Error`]: not answering, or an answer that is not one.
fn failed(call: &str, s: &tonic::Status) -> Error {
    match s.code() {
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
            Error::Unreachable(format!("{call}: {}", s.message()))
        }
        code => Error::Answer(format!("{call}: {code:?}: {}", s.message())),
    }
}

/// A timestamp as seconds and nanoseconds since the epoch (`-` when none).
fn stamp(t: Option<&prost_types::Timestamp>) -> String {
    t.map_or_else(|| "-".into(), |t| format!("{}.{:09}", t.seconds, t.nanos))
}

impl Containerd {
    /// containerd listening on `socket`, connected now. `deadline` bounds each answer (at
    /// most [`crate::CALL_SECONDS_MAX`]).
    pub fn new(socket: &Path, deadline: Duration) -> Result<Containerd, Error> {
        let deadline = deadline.min(Duration::from_secs(crate::CALL_SECONDS_MAX));
        let rt = crate::runtime()?;
        let channel = rt.block_on(connect(socket, deadline))?;
        Ok(Containerd {
            rt,
            channel,
            socket: socket.to_path_buf(),
            deadline,
        })
    }

    /// Runs `call` within the deadline.
    fn call<T>(
        &self,
        what: &str,
        call: impl std::future::Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let deadline = self.deadline;
        self.rt.block_on(async {
            tokio::time::timeout(deadline, call)
                .await
                .unwrap_or_else(|_| {
                    Err(Error::Unreachable(format!(
                        "{}: {what}: no answer within {} ms",
                        self.socket.display(),
                        deadline.as_millis()
                    )))
                })
        })
    }

    /// Whether containerd answers as one (its version service).
    pub fn ping(&self) -> Result<(), Error> {
        let mut c = version::version_client::VersionClient::new(self.channel.clone());
        self.call("version", async move {
            c.version(())
                .await
                .map(drop)
                .map_err(|s| failed("version", &s))
        })
    }

    /// The container `NAMESPACE/ID` and its task; `None` when containerd has no such
    /// container.
    pub fn inspect(&self, spelled: &str) -> Result<Option<Container>, Error> {
        let (namespace, id) = split(spelled)?;
        let mut cs = containers::containers_client::ContainersClient::new(self.channel.clone())
            .max_decoding_message_size(ANSWER_BYTES_MAX);
        let mut ts = tasks::tasks_client::TasksClient::new(self.channel.clone())
            .max_decoding_message_size(ANSWER_BYTES_MAX);
        let get = containers::GetContainerRequest { id: id.to_owned() };
        let container = self.call("containers.Get", async {
            match cs.get(in_namespace(namespace, get)?).await {
                Ok(r) => Ok(r.into_inner().container),
                Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
                Err(s) => Err(failed("containers.Get", &s)),
            }
        })?;
        // Its task, asked two ways at every look. Through its container (tasks.Get): the
        // runtime the record names. In the runtimes' own list (tasks.List, every runtime's
        // tasks of the namespace): a record deleted under its running task (containers.Delete
        // does not look), or created again naming another runtime, leads tasks.Get to none
        // (found by attacking the release binaries: granted), while the list holds it; a
        // task whose shim does not answer is listed after 2 s with status unknown
        // (containerd 1.6, measured), which is no stopped one. The liveliest of what either
        // found is judged.
        let got = match &container {
            Some(_) => self.task_got(&mut ts, namespace, id)?,
            None => None,
        };
        let listed = self.tasks_listed(&mut ts, namespace, id)?;
        let task = liveliest(got.into_iter().chain(listed));
        judged(spelled, container.as_ref(), task.as_ref())
    }

    /// Container `id`'s task through its record (tasks.Get), if it has one.
    fn task_got(
        &self,
        ts: &mut tasks::tasks_client::TasksClient<Channel>,
        namespace: &str,
        id: &str,
    ) -> Result<Option<Process>, Error> {
        self.call("tasks.Get", async {
            let get = tasks::GetRequest {
                container_id: id.to_owned(),
                exec_id: String::new(),
            };
            match ts.get(in_namespace(namespace, get)?).await {
                Ok(r) => r.into_inner().process.map(Some).ok_or_else(|| {
                    Error::Answer("tasks.Get: an answer without its process".into())
                }),
                Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
                Err(s) => Err(failed("tasks.Get", &s)),
            }
        })
    }

    /// The tasks of id `id` in the runtimes' own list (tasks.List; at most one a runtime).
    fn tasks_listed(
        &self,
        ts: &mut tasks::tasks_client::TasksClient<Channel>,
        namespace: &str,
        id: &str,
    ) -> Result<Vec<Process>, Error> {
        self.call("tasks.List", async {
            let list = tasks::ListTasksRequest {
                filter: String::new(),
            };
            match ts.list(in_namespace(namespace, list)?).await {
                Ok(r) => Ok(r
                    .into_inner()
                    .tasks
                    .into_iter()
                    .filter(|t| t.id == id)
                    .collect()),
                Err(s) => Err(failed("tasks.List", &s)),
            }
        })
    }

    /// Returns once `watch` has read every event containerd published before this call:
    /// an event of repoch's own, published now in `namespace`, came back through it
    /// (containerd's exchange delivers in order). What a later look cannot see (a task
    /// started and deleted again since the last one) is then in `watch`'s [`crate::Seen`].
    pub fn caught_up(&self, watch: &Watch, namespace: &str) -> Result<(), Error> {
        let topic = format!("{CAUGHT_UP_TOPIC}{}", nonce());
        let mut publisher = events::events_client::EventsClient::new(self.channel.clone());
        let publish = events::PublishRequest {
            topic: topic.clone(),
            event: Some(prost_types::Any {
                type_url: "types.repoch.dev/caught-up".into(),
                value: Vec::new(),
            }),
        };
        self.call("events.Publish", async move {
            publisher
                .publish(in_namespace(namespace, publish)?)
                .await
                .map(drop)
                .map_err(|s| failed("events.Publish", &s))
        })?;
        watch.await_mark(&topic, self.deadline)
    }

    /// Follows containerd's events of the containers named (`NAMESPACE/ID`): every event
    /// of a container or its task but its end and its removal. Returns once the
    /// subscription is known to be in place (module docs).
    pub fn watch(&self, names: &[String]) -> Result<Watch, Error> {
        let socket = self.socket.clone();
        let deadline = self.deadline;
        let namespace = names
            .first()
            .and_then(|n| n.split_once('/'))
            .map_or("default", |(ns, _)| ns)
            .to_owned();
        Watch::start(names, deadline, move |shared, ready, stopped| {
            follow(socket, namespace, deadline, shared, ready, stopped)
        })
    }
}

/// The task to judge of those found: the first that is not stopped, else the first.
fn liveliest(found: impl IntoIterator<Item = Process>) -> Option<Process> {
    let found: Vec<Process> = found.into_iter().collect();
    let stopped = Status::Stopped as i32;
    found
        .iter()
        .find(|p| p.status != stopped)
        .or(found.first())
        .cloned()
}

/// containerd's container and task as a [`Container`]: none when it has neither. A task
/// whose container record is gone is a container still (created `-`, its policy unknown
/// and so read as its task's state alone).
fn judged(
    spelled: &str,
    c: Option<&containers::Container>,
    task: Option<&Process>,
) -> Result<Option<Container>, Error> {
    let Some(c) = c.cloned().or_else(|| {
        task.map(|t| containers::Container {
            id: t.id.clone(),
            ..Default::default()
        })
    }) else {
        return Ok(None);
    };
    let restart_policy = match c.labels.get(RESTART_LABEL).map(String::as_str) {
        None | Some("stopped") => "no".to_owned(),
        Some(v) => format!("{RESTART_LABEL}={v}"),
    };
    let (status, pid, started_at) = match task {
        None => ("no task".to_owned(), 0, "no task".to_owned()),
        Some(p) => {
            let status = Status::try_from(p.status)
                .map_err(|_| Error::Answer(format!("a task status {}", p.status)))?;
            let pid = if status == Status::Stopped {
                0
            } else {
                i64::from(p.pid)
            };
            (
                status.as_str_name().to_ascii_lowercase(),
                pid,
                format!(
                    "task pid {} exited at {}",
                    p.pid,
                    stamp(p.exited_at.as_ref())
                ),
            )
        }
    };
    Ok(Some(Container {
        id: c.id.clone(),
        created: stamp(c.created_at.as_ref()),
        name: spelled.to_owned(),
        running: status == "running",
        restarting: false,
        paused: matches!(status.as_str(), "paused" | "pausing"),
        status,
        pid,
        restart_policy,
        // An exec runs only in a running task, which is judged running already.
        exec_sessions: 0,
        cgroup: cgroup_of(c.spec.as_ref())?,
        started_at,
    }))
}

/// The cgroup a container's OCI spec (JSON, as containerd stores it) names for its task:
/// `linux.cgroupsPath` (`/NAMESPACE/ID` by default). Only a clean absolute path is the
/// runtime's cgroup for certain: runc cleans `..` away, takes a relative path (systemd's
/// `SLICE:PREFIX:NAME` among them, under its cgroupfs driver) below its own cgroup, and
/// picks one of its own for none, so each of those is no answer (found by attacking the
/// release binaries: a process in the cgroup runc used, and the recovery granted). `None`:
/// no spec (a task whose container record is gone: its task is judged).
fn cgroup_of(spec: Option<&prost_types::Any>) -> Result<Option<String>, Error> {
    let Some(spec) = spec else { return Ok(None) };
    let v: serde_json::Value = serde_json::from_slice(&spec.value)
        .map_err(|e| Error::Answer(format!("the container's spec: {e}")))?;
    let path = v["linux"]["cgroupsPath"].as_str().unwrap_or_default();
    let clean = path
        .strip_prefix('/')
        .is_some_and(|rest| rest.split('/').all(|part| !matches!(part, "" | "." | "..")));
    match clean {
        true => Ok(Some(path.to_owned())),
        false => Err(Error::Answer(format!(
            "its spec's cgroupsPath is no clean absolute path (its cgroup unknown): {path:?}"
        ))),
    }
}

/// The first field of every container and task event: the container's id.
#[derive(Clone, PartialEq, prost::Message)]
struct Subject {
    #[prost(string, tag = "1")]
    id: String,
}

/// Keeps the event of `envelope` if it is of a container followed and could start or
/// change it. An event of a container or a task whose subject cannot be read counts for
/// every container followed.
fn record(shared: &Mutex<Shared>, envelope: &gen::containerd::types::Envelope) {
    let topic = envelope.topic.as_str();
    if topic.starts_with(OWN_TOPICS) {
        if let Ok(mut s) = shared.lock() {
            s.mark(topic);
        }
        return;
    }
    if !(topic.starts_with("/tasks/") || topic.starts_with("/containers/")) {
        return;
    }
    let subject = envelope
        .event
        .as_ref()
        .and_then(|a| <Subject as prost::Message>::decode(a.value.as_slice()).ok())
        .map(|s| format!("{}/{}", envelope.namespace, s.id));
    let Ok(mut s) = shared.lock() else { return };
    let followed = match &subject {
        Some(name) => s.names.iter().any(|n| n == name),
        None => true,
    };
    if let (true, Some(name), "/containers/delete") = (followed, &subject, topic) {
        s.removed(name);
    }
    if followed && !HARMLESS_TOPICS.contains(&topic) {
        let name = subject.unwrap_or_else(|| format!("{}/?", envelope.namespace));
        s.keep(Event {
            action: topic.to_owned(),
            id: name.split_once('/').map_or("?", |(_, id)| id).to_owned(),
            name,
            time: envelope.timestamp.as_ref().map_or(0, |t| t.seconds),
        });
    }
}

/// The reader: subscribes, publishes its own event until it comes back (the subscription
/// is in place), says so, then records each event until stopped or the stream ends.
async fn follow(
    socket: PathBuf,
    namespace: String,
    deadline: Duration,
    seen: Arc<Mutex<Shared>>,
    ready: Ready,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let mut stream = match subscribed(&socket, &namespace, deadline, &seen).await {
        Ok(s) => s,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    let ended = loop {
        let next = tokio::select! {
            _ = &mut stopped => return,
            m = stream.message() => m,
        };
        match next {
            Ok(Some(envelope)) => record(&seen, &envelope),
            Ok(None) => break "containerd closed the event stream".to_owned(),
            Err(s) => break format!("the event stream broke: {}", s.message()),
        }
    };
    if let Ok(mut s) = seen.lock() {
        s.seen.ended.get_or_insert(ended);
    }
}

type Stream = tonic::Streaming<gen::containerd::types::Envelope>;

/// A subscription known to be in place: its own event came back through it. Every event
/// read before that one is recorded.
async fn subscribed(
    socket: &Path,
    namespace: &str,
    deadline: Duration,
    seen: &Mutex<Shared>,
) -> Result<Stream, Error> {
    let work = async {
        let channel = connect(socket, deadline).await?;
        let mut client = events::events_client::EventsClient::new(channel.clone())
            .max_decoding_message_size(ANSWER_BYTES_MAX);
        let mut publisher = events::events_client::EventsClient::new(channel);
        let topic = format!("{SUBSCRIBED_TOPIC}{}", nonce());
        // Sent at once, on a task of its own; no answer headers come before the first
        // event: publish until one does, every SUBSCRIBED_RETRY (an event published before
        // containerd took the subscription reaches no one here).
        let mut subscribe = tokio::spawn(async move {
            client
                .subscribe(events::SubscribeRequest { filters: vec![] })
                .await
        });
        let mut stream = loop {
            tokio::select! {
                r = &mut subscribe => {
                    let r = r.map_err(|e| Error::Unreachable(format!("events.Subscribe: {e}")))?;
                    break r.map_err(|s| failed("events.Subscribe", &s))?.into_inner();
                }
                _ = tokio::time::sleep(SUBSCRIBED_RETRY) => {}
            }
            let publish = events::PublishRequest {
                topic: topic.clone(),
                event: Some(prost_types::Any {
                    type_url: "types.repoch.dev/subscribed".into(),
                    value: Vec::new(),
                }),
            };
            publisher
                .publish(in_namespace(namespace, publish)?)
                .await
                .map_err(|s| failed("events.Publish", &s))?;
        };
        loop {
            match stream.message().await {
                Ok(Some(e)) if e.topic == topic => return Ok(stream),
                Ok(Some(e)) => record(seen, &e),
                Ok(None) => {
                    return Err(Error::Unreachable(
                        "containerd closed the event stream".into(),
                    ))
                }
                Err(s) => return Err(failed("events.Subscribe", &s)),
            }
        }
    };
    tokio::time::timeout(deadline, work)
        .await
        .unwrap_or_else(|_| {
            Err(Error::Unreachable(format!(
                "{}: events.Subscribe: not in place within {} ms",
                socket.display(),
                deadline.as_millis()
            )))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn following(names: &[&str]) -> Mutex<Shared> {
        Mutex::new(Shared {
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            ..Shared::default()
        })
    }

    fn envelope(
        namespace: &str,
        topic: &str,
        id: Option<&str>,
    ) -> gen::containerd::types::Envelope {
        use prost::Message as _;
        gen::containerd::types::Envelope {
            timestamp: Some(prost_types::Timestamp {
                seconds: 17,
                nanos: 0,
            }),
            namespace: namespace.into(),
            topic: topic.into(),
            event: id.map(|id| prost_types::Any {
                type_url: "containerd.events.TaskStart".into(),
                value: gen::containerd::events::TaskStart {
                    container_id: id.into(),
                    pid: 7,
                }
                .encode_to_vec(),
            }),
        }
    }

    #[test]
    fn events_of_a_named_container_count_but_its_end_and_those_of_others() {
        let shared = following(&["ops/old-root"]);
        for (ns, topic, id) in [
            ("ops", "/tasks/start", Some("old-root")),
            ("ops", "/tasks/exit", Some("old-root")),
            ("ops", "/containers/delete", Some("bystander")),
            ("ops", "/containers/delete", Some("old-root")),
            ("ops", "/tasks/start", Some("bystander")),
            ("other", "/tasks/start", Some("old-root")),
            ("ops", "/images/create", Some("old-root")),
            ("ops", "/tasks/exec-added", Some("old-root")),
            // No subject to read: counts for every container followed.
            ("ops", "/containers/update", None),
        ] {
            record(&shared, &envelope(ns, topic, id));
        }
        let s = shared.into_inner().unwrap().seen;
        let got: Vec<(&str, &str)> = s
            .events
            .iter()
            .map(|e| (e.action.as_str(), e.name.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("/tasks/start", "ops/old-root"),
                ("/tasks/exec-added", "ops/old-root"),
                ("/containers/update", "ops/?"),
            ]
        );
        assert_eq!(s.events[0].time, 17);
        assert_eq!(s.removed, ["ops/old-root"]);
    }

    #[test]
    fn a_container_and_its_task_are_judged_as_containerd_reports_them() {
        let mut c = containers::Container {
            id: "old-root".into(),
            created_at: Some(prost_types::Timestamp {
                seconds: 5,
                nanos: 6,
            }),
            ..Default::default()
        };
        let k = judged("ops/old-root", Some(&c), None).unwrap().unwrap();
        assert_eq!(
            (
                k.status.as_str(),
                k.pid,
                k.restart_policy.as_str(),
                k.created.as_str()
            ),
            ("no task", 0, "no", "5.000000006")
        );
        c.labels.insert(RESTART_LABEL.into(), "stopped".into());
        assert_eq!(
            judged("ops/old-root", Some(&c), None)
                .unwrap()
                .unwrap()
                .restart_policy,
            "no"
        );
        c.labels.insert(RESTART_LABEL.into(), "running".into());
        assert_eq!(
            judged("ops/old-root", Some(&c), None)
                .unwrap()
                .unwrap()
                .restart_policy,
            "containerd.io/restart.status=running"
        );
        let task = |status: Status| gen::containerd::v1::types::Process {
            container_id: "old-root".into(),
            pid: 42,
            status: status as i32,
            ..Default::default()
        };
        let k = judged("ops/old-root", Some(&c), Some(&task(Status::Running)))
            .unwrap()
            .unwrap();
        assert!(k.running && k.pid == 42, "{k:?}");
        let k = judged("ops/old-root", Some(&c), Some(&task(Status::Stopped)))
            .unwrap()
            .unwrap();
        assert!(!k.running && k.pid == 0 && k.status == "stopped", "{k:?}");
        assert_eq!(k.started_at, "task pid 42 exited at -");
        let k = judged("ops/old-root", Some(&c), Some(&task(Status::Pausing)))
            .unwrap()
            .unwrap();
        assert!(k.paused, "{k:?}");
        let k = judged("ops/old-root", Some(&c), Some(&task(Status::Created)))
            .unwrap()
            .unwrap();
        assert_eq!((k.status.as_str(), k.pid), ("created", 42));
        let mut odd = task(Status::Running);
        odd.status = 99;
        assert!(judged("ops/old-root", Some(&c), Some(&odd)).is_err());
        // Neither a container nor a task: absent. A task without its container record
        // (deleted under it): still a container, running.
        assert_eq!(judged("ops/old-root", None, None).unwrap(), None);
        let orphan = judged("ops/old-root", None, Some(&task(Status::Running)))
            .unwrap()
            .unwrap();
        assert!(orphan.running && orphan.created == "-", "{orphan:?}");
    }

    #[test]
    fn the_task_judged_is_the_liveliest_found() {
        let task = |pid: u32, status: Status| Process {
            pid,
            status: status as i32,
            ..Default::default()
        };
        let pid = |found: Vec<Process>| liveliest(found).map(|p| p.pid);
        assert_eq!(pid(vec![]), None);
        assert_eq!(pid(vec![task(1, Status::Stopped)]), Some(1));
        // tasks.Get's stopped task and the list's running one (another runtime's): running.
        let both = vec![task(1, Status::Stopped), task(2, Status::Running)];
        assert_eq!(pid(both), Some(2));
        let unknown = vec![task(1, Status::Stopped), task(3, Status::Unknown)];
        assert_eq!(pid(unknown), Some(3));
        let first = vec![task(1, Status::Paused), task(2, Status::Running)];
        assert_eq!(pid(first), Some(1));
    }

    #[test]
    fn only_a_clean_absolute_cgroup_path_in_a_spec_is_an_answer() {
        let spec = |linux: &str| prost_types::Any {
            type_url: "types.containerd.io/opencontainers/runtime-spec/1/Spec".into(),
            value: format!(r#"{{"linux":{{{linux}}}}}"#).into_bytes(),
        };
        let read = |path: &str| cgroup_of(Some(&spec(&format!(r#""cgroupsPath":"{path}""#))));
        assert_eq!(
            read("/ops/old-root").unwrap().as_deref(),
            Some("/ops/old-root")
        );
        assert_eq!(cgroup_of(None).unwrap(), None);
        for bad in [
            "",
            "/",
            "/nonexist/../ops/old",
            "/ops/./old",
            "/ops//old",
            "ops/old-root",
            "system.slice:docker:abc",
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
        assert!(cgroup_of(Some(&spec(""))).is_err(), "no cgroupsPath");
        let garbage = prost_types::Any {
            type_url: String::new(),
            value: b"{not json".to_vec(),
        };
        assert!(cgroup_of(Some(&garbage)).is_err());
    }
}

//! The engine's event stream for the containers named, read on a thread of its own from
//! the first observation to the dispatch: what it saw, kept bounded, and followed by the
//! names given and the ids pinned since.

use crate::*;
/// What the reader shares with its [`Watch`]: what it saw, and what it follows: the names
/// given, and the ids pinned since ([`Watch::pin`]).
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) seen: Seen,
    pub(crate) names: Vec<String>,
    pub(crate) ids: Vec<String>,
    /// The names that may be a container's id prefix (the manifest's spelling of one it
    /// names by id), followed by the ids they begin: every name until the first
    /// observation found the container it names by that very name ([`Watch::named`]). A
    /// bystander whose random id begins with a name (`db`, `cafe`) is then no one's.
    pub(crate) prefixes: Vec<String>,
    /// containerd: the topics of repoch's own events come back through the stream (the
    /// last [`EVENTS_KEPT_MAX`]).
    pub(crate) marks: Vec<String>,
}

impl Shared {
    /// Notes that repoch's own event or volume `topic` came back through the stream (the
    /// last [`EVENTS_KEPT_MAX`] kept).
    pub(crate) fn mark(&mut self, topic: &str) {
        if self.marks.len() >= EVENTS_KEPT_MAX {
            self.marks.remove(0);
        }
        self.marks.push(topic.to_owned());
    }

    /// Notes that the engine reported `container` removed.
    pub(crate) fn removed(&mut self, container: &str) {
        let r = &mut self.seen.removed;
        if r.len() < EVENTS_KEPT_MAX && !r.iter().any(|c| c == container) {
            r.push(container.to_owned());
        }
    }

    /// Keeps `e`, or counts it past [`EVENTS_KEPT_MAX`].
    pub(crate) fn keep(&mut self, e: Event) {
        let s = &mut self.seen;
        if s.events.len() >= EVENTS_KEPT_MAX {
            s.more = s.more.saturating_add(1);
            return;
        }
        s.events.push(e);
    }

    /// Whether `e` is of a container followed: by its name now or before a rename
    /// (`oldName`), by a pinned id, or by the id prefix it was named by (at least a short
    /// id's digits: a shorter reference is a name, [`crate::named_by`]).
    pub(crate) fn follows(&self, e: &EventLine) -> bool {
        let named = |key: &str| {
            e.actor
                .attributes
                .get(key)
                .is_some_and(|n| self.names.iter().any(|m| m == n.trim_start_matches('/')))
        };
        named("name")
            || named("oldName")
            || self.ids.contains(&e.actor.id)
            || self.prefixes.iter().any(|n| {
                n.len() >= crate::SHORT_ID_HEX_DIGITS && e.actor.id.starts_with(n.as_str())
            })
    }
}

/// How a reader says whether the engine accepted its subscription.
pub(crate) type Ready = std::sync::mpsc::Sender<Result<(), Error>>;

/// An engine's event stream, read by a thread of its own until dropped.
#[derive(Debug)]
pub struct Watch {
    pub(crate) seen: Arc<Mutex<Shared>>,
    pub(crate) stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    pub(crate) fn open(
        socket: PathBuf,
        names: &[String],
        since: SystemTime,
        deadline: Duration,
    ) -> Result<Watch, Error> {
        let path = events_query(since);
        Watch::start(names, deadline, move |shared, ready, stopped| {
            follow(socket, path, deadline, shared, ready, stopped)
        })
    }

    /// Runs `reader` on a thread of its own, with a runtime of its own, following `names`;
    /// returns once it said the engine accepted the subscription (or why not).
    pub(crate) fn start<F, R>(
        names: &[String],
        deadline: Duration,
        reader: R,
    ) -> Result<Watch, Error>
    where
        R: FnOnce(Arc<Mutex<Shared>>, Ready, tokio::sync::oneshot::Receiver<()>) -> F
            + Send
            + 'static,
        F: std::future::Future<Output = ()>,
    {
        let seen = Arc::new(Mutex::new(Shared {
            names: names.to_vec(),
            prefixes: names.to_vec(),
            ..Shared::default()
        }));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let (ready, accepted) = std::sync::mpsc::channel();
        let rt = runtime()?;
        let shared = Arc::clone(&seen);
        let thread = std::thread::Builder::new()
            .name("repoch-engine-events".into())
            .spawn(move || {
                rt.block_on(reader(shared, ready, stopped));
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
            |s| s.seen.clone(),
        )
    }

    /// Whether repoch's own event or volume `mark` came back through the stream.
    pub(crate) fn marked(&self, mark: &str) -> bool {
        self.seen
            .lock()
            .is_ok_and(|s| s.marks.iter().any(|m| m == mark))
    }

    /// Waits until `mark` came back through the stream: every event the engine logged
    /// before it has then come through too. The stream ended, or `deadline` passed first:
    /// unreachable.
    pub(crate) fn await_mark(&self, mark: &str, deadline: Duration) -> Result<(), Error> {
        let start = std::time::Instant::now();
        while !self.marked(mark) {
            if let Some(why) = self.seen().ended {
                return Err(Error::Unreachable(why));
            }
            if start.elapsed() > deadline {
                return Err(Error::Unreachable(format!(
                    "the event stream did not deliver repoch's own {mark} within {} ms",
                    deadline.as_millis()
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// `name` is the name of the container it names, not the beginning of an id: events
    /// of containers whose id begins with it are not followed for it from now on.
    pub fn named(&self, name: &str) {
        if let Ok(mut s) = self.seen.lock() {
            s.prefixes.retain(|p| p != name);
        }
    }

    /// Follows the container `id` too, whatever it is named from now on.
    pub fn pin(&self, id: &str) {
        if let Ok(mut s) = self.seen.lock() {
            if !s.ids.iter().any(|i| i == id) {
                s.ids.push(id.to_owned());
            }
        }
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
    seen: Arc<Mutex<Shared>>,
    ready: Ready,
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
            break why.to_string();
        }
    };
    if let Ok(mut s) = seen.lock() {
        s.seen.ended.get_or_insert(ended);
    }
}

/// Appends `data` to the partial `line`, recording every whole event line in `seen`.
/// An engine's event stream that cannot be read is the engine's answer at fault.
pub(crate) fn take_lines(
    line: &mut Vec<u8>,
    data: &[u8],
    seen: &Mutex<Shared>,
) -> Result<(), Error> {
    for &b in data {
        if b != b'\n' {
            if line.len() >= EVENT_BYTES_MAX {
                return Err(Error::Answer(format!(
                    "an event line over {EVENT_BYTES_MAX} bytes"
                )));
            }
            line.push(b);
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            line.clear();
            continue;
        }
        let e: EventLine = serde_json::from_slice(line)
            .map_err(|e| Error::Answer(format!("an event that cannot be read: {e}")))?;
        line.clear();
        record(seen, e);
    }
    Ok(())
}

/// Keeps `e` if it is of a container followed and could start or change it. The engine
/// sends container events alone (its `type` filter); the event's own type is not judged.
pub(crate) fn record(shared: &Mutex<Shared>, e: EventLine) {
    let Ok(mut s) = shared.lock() else { return };
    if e.kind == "volume" {
        let name = e.actor.attributes.get("name").unwrap_or(&e.actor.id);
        if name.starts_with(CAUGHT_UP_VOLUME) {
            s.mark(name);
        }
        return;
    }
    if !s.follows(&e) {
        return;
    }
    if REMOVAL_ACTIONS.contains(&e.action.as_str()) {
        s.removed(&e.actor.id);
    }
    if HARMLESS_ACTIONS.contains(&e.action.as_str()) {
        return;
    }
    s.keep(Event {
        name: e.actor.attributes.get("name").cloned().unwrap_or_default(),
        action: e.action,
        id: e.actor.id,
        time: e.time,
    });
}

//! The process space held between walks: a thread that reads the kernel's process events
//! ([`crate::procevents`]) as they come and judges each process they name with the walk's
//! own judge (principals only; the enrolled executables by identity or content), so a
//! process born, exec'd or given a principal's uid after a walk's listing is judged
//! within microseconds of its event, not at the next walk (docs/THREAT-MODEL.md, "Who can
//! change a fact").
//!
//! What a process runs is fixed at its exec and copied at its fork, so each process is
//! followed by a verdict: another user's (`Other`), a principal's running no enrolled
//! executable (`Clean`), a principal's running one (`Runs`), or not known. A fork copies
//! its parent's verdict (the parent judged when first met); an exec, a uid or gid change is
//! judged on the live process. A process gone before it could be judged (it exec'd and
//! exited, or it and its parent exited, within the reader's latency, microseconds) is
//! counted and named ([`Report::unjudged`]), not judged: its live descendants are judged
//! at their own fork, and another user's exec stays another user's (its setuid exec of a
//! copy of the old root's executable is the residual THREAT-MODEL.md names).
//!
//! Events the reader did not get (the socket's buffer overflowed, a gap in a CPU's
//! numbers, a flood past what one settle reads, the executables changed, the reader ended)
//! leave the events unable to vouch for the process space until the next walk
//! ([`Report::unsettled`]): the walk stands in. Nothing here fails a fact by itself.

use std::collections::HashMap;
use std::os::fd::{AsFd as _, OwnedFd};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use repoch_protocol::Hash;
use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;

use super::{Judge, Procfs, Runner, Visit, Walk, Wanted};
use crate::error::Error;
use crate::procevents::{Event, Message, Next, Subscription};

/// Processes followed at once (the kernel's `PID_MAX_LIMIT`; an exit ends a process's
/// entry): past it the events cannot vouch until the next walk.
pub const TRACKED_MAX: usize = 1 << 22;
/// Tasks kept per executable found running (the fact shows fewer).
pub const RUNNERS_KEPT_MAX: usize = 64;
/// Events read in one settle past the request: a flood that outpaces the judge leaves the
/// events unable to vouch (the walk stands in) instead of a settle that never ends.
pub const SETTLE_EVENTS_MAX: usize = 1 << 18;
/// Events read before they are judged: the looks at what processes run now come first.
pub const BATCH_MAX: usize = 4096;
/// Bytes hashed between two looks at the events: a file of the enrolled size is hashed in
/// these steps, so no hash delays the reader's look at a new exec by more than one.
pub const HASH_CHUNK_BYTES: usize = 1 << 20;
/// Files of principals' processes waiting to be hashed at once; past it the process facts
/// fail (only a principal can queue them).
pub const PENDING_MAX: usize = 4096;
/// Longest wait for the reader to answer a settle.
pub const SETTLE_WAIT_MS: u64 = 5_000;

/// An enrolled executable as it is now, owned (the reader thread keeps it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedWanted {
    pub path: String,
    pub id: Option<(u64, u64)>,
    pub content: Option<(u64, Hash)>,
    pub tail: Option<Hash>,
}

impl OwnedWanted {
    pub fn of(w: &Wanted<'_>) -> OwnedWanted {
        OwnedWanted {
            path: w.path.to_owned(),
            id: w.id,
            content: w.content,
            tail: w.tail,
        }
    }
}

/// What the events found since the reader started (or the executables last changed).
#[derive(Debug)]
pub struct Report {
    /// For each wanted executable, in order: every task the events found running it (alive
    /// or not any more), or why that could not be known.
    pub found: Vec<Result<Vec<Runner>, Error>>,
    /// Why the events cannot vouch for the process space since the last walk began: lost
    /// events, a reader that did not answer.
    pub unsettled: Option<String>,
    /// Processes gone before they could be judged since the reader started, and the last
    /// one (what it did).
    pub unjudged: (u64, Option<String>),
}

/// What a process runs, as followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Other,
    Clean,
    Runs { bits: u16, mapped: u16, copy: u16 },
}

/// A verdict and when it was known (`CLOCK_MONOTONIC` ns: after the look that made it,
/// or the fork that copied it). A fork event from before it cannot copy it: the parent may
/// have exec'd between the fork and the look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    pub(super) verdict: Verdict,
    pub(super) at_ns: u64,
}

/// `CLOCK_MONOTONIC` now, in ns: the clock of the events' timestamps.
pub(super) fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

#[derive(Debug, Default)]
struct State {
    /// Verdicts a walk made, for the reader to take (those it has not met itself).
    seeds: Vec<(u32, Known)>,
    wanted: Vec<OwnedWanted>,
    generation: u64,
    principals: Vec<u32>,
    runners: Vec<Vec<Runner>>,
    errors: Vec<Option<String>>,
    unsettled: Option<String>,
    unjudged: (u64, Option<String>),
    /// Files still waiting to be hashed.
    pending: usize,
    requested: u64,
    answered: u64,
    stop: bool,
    /// The reader ended (why): nothing it says holds any more.
    dead: Option<String>,
}

impl State {
    fn unjudged(&mut self, what: String) {
        self.unjudged = (self.unjudged.0.saturating_add(1), Some(what));
    }

    fn unsettle(&mut self, why: impl FnOnce() -> String) {
        if self.unsettled.is_none() {
            self.unsettled = Some(why());
        }
    }
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    answered: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The reader of one subscription, judging as events come; stopped when dropped.
#[derive(Debug)]
pub struct Watch {
    shared: Arc<Shared>,
    wake: Arc<OwnedFd>,
}

impl Watch {
    /// Starts the reader on `sub` (subscribed before the walk this watch complements),
    /// judging against `wanted` for `principals`.
    pub fn start(
        sub: Subscription,
        wanted: &[Wanted<'_>],
        principals: &[u32],
    ) -> Result<Watch, Error> {
        let wake = Arc::new(
            rustix::event::eventfd(
                0,
                rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
            )
            .map_err(|e| Error::Found(format!("eventfd: {e}")))?,
        );
        let shared = Arc::new(Shared::default());
        {
            let mut st = shared.lock();
            st.principals = principals.to_vec();
            st.wanted = wanted.iter().map(OwnedWanted::of).collect();
            st.runners = vec![Vec::new(); wanted.len()];
            st.errors = vec![None; wanted.len()];
        }
        let (s, w) = (shared.clone(), wake.clone());
        std::thread::Builder::new()
            .name("repoch-procevents".into())
            .spawn(move || {
                let why = Reader::new(sub, &s, &w).map_or_else(|e| e.to_string(), Reader::run);
                let mut st = s.lock();
                st.dead = Some(why);
                s.answered.notify_all();
            })
            .map_err(|e| Error::Found(format!("process event reader: {e}")))?;
        Ok(Watch { shared, wake })
    }

    /// The executables as they are now: when they changed, what was judged against the old
    /// ones counts for nothing and the events cannot vouch until the next walk.
    pub fn set_wanted(&self, wanted: &[Wanted<'_>]) {
        let now: Vec<OwnedWanted> = wanted.iter().map(OwnedWanted::of).collect();
        let mut st = self.shared.lock();
        if st.wanted != now {
            st.runners = vec![Vec::new(); now.len()];
            st.errors = vec![None; now.len()];
            st.wanted = now;
            st.generation += 1;
            st.unsettle(|| "the enrolled executables changed".into());
        }
    }

    /// What a walk judged (each pid's verdict and when), for the reader to follow: a fork
    /// of a process the walk judged copies its verdict without a look of its own.
    pub fn seed(&self, seeds: Vec<(u32, Known)>) {
        let mut st = self.shared.lock();
        if st.seeds.len().saturating_add(seeds.len()) <= TRACKED_MAX {
            st.seeds.extend(seeds);
        }
    }

    /// A walk begins now: it covers what the events could not vouch for before.
    pub fn mark_walk(&self) {
        self.shared.lock().unsettled = None;
    }

    /// Every event queued now read and judged; what was found.
    pub fn settle(&self) -> Report {
        let want = {
            let mut st = self.shared.lock();
            st.requested += 1;
            st.requested
        };
        let _ = rustix::io::write(self.wake.as_fd(), &1u64.to_ne_bytes());
        let st = self.shared.lock();
        let (mut st, waited) = self
            .shared
            .answered
            .wait_timeout_while(st, Duration::from_millis(SETTLE_WAIT_MS), |s| {
                s.answered < want && s.dead.is_none()
            })
            .unwrap_or_else(|p| p.into_inner());
        if let Some(why) = st.dead.clone() {
            st.unsettle(|| format!("the process event reader ended: {why}"));
        } else if waited.timed_out() {
            st.unsettle(|| {
                format!("the process event reader did not answer within {SETTLE_WAIT_MS} ms")
            });
        }
        Report {
            found: st
                .runners
                .iter()
                .zip(&st.errors)
                .map(|(r, e)| match e {
                    Some(e) => Err(Error::Found(e.clone())),
                    None => Ok(r.clone()),
                })
                .collect(),
            unsettled: st.unsettled.clone(),
            unjudged: st.unjudged.clone(),
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        let _ = rustix::io::write(self.wake.as_fd(), &1u64.to_ne_bytes());
    }
}

/// The reader thread's own state.
struct Reader<'s> {
    sub: Subscription,
    shared: &'s Shared,
    wake: &'s OwnedFd,
    fs: Procfs,
    table: HashMap<u32, Known>,
    generation: u64,
    wanted: Vec<OwnedWanted>,
    principals: Vec<u32>,
    /// Files judged by content, by stamp, across looks (see `Judge::by_stamp`).
    by_stamp: HashMap<super::FileStamp, u16>,
    /// Files a principal's task ran or mapped, held open, waiting to be hashed.
    pending: std::collections::VecDeque<Pending>,
}

/// What a visit found of each wanted executable, in their order: the processes running it,
/// or why it could not be looked for.
type Found = Vec<Result<Vec<Runner>, Error>>;

/// A file waiting to be hashed, for task `pid`, and the hash so far.
struct Pending {
    pid: u32,
    file: super::Deferred,
    hasher: sha2::Sha256,
    read: u64,
}

impl<'s> Reader<'s> {
    fn new(sub: Subscription, shared: &'s Shared, wake: &'s OwnedFd) -> Result<Reader<'s>, Error> {
        let (wanted, principals, generation) = {
            let st = shared.lock();
            (st.wanted.clone(), st.principals.clone(), st.generation)
        };
        Ok(Reader {
            sub,
            shared,
            wake,
            fs: Procfs::open()?,
            table: HashMap::new(),
            generation,
            wanted,
            principals,
            by_stamp: HashMap::new(),
            pending: std::collections::VecDeque::new(),
        })
    }

    /// Reads and judges until stopped; returns why it ended.
    fn run(mut self) -> String {
        loop {
            // While files wait to be hashed, poll without waiting: events first, then one
            // chunk of a hash.
            let zero = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            let wait = (!self.pending.is_empty()).then_some(&zero);
            let polled = {
                let sub = self.sub.fd();
                let mut fds = [
                    PollFd::new(&sub, PollFlags::IN),
                    PollFd::new(self.wake, PollFlags::IN),
                ];
                rustix::event::poll(&mut fds, wait)
            };
            match polled {
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return format!("poll: {e}"),
            }
            let mut counter = [0u8; 8];
            let _ = rustix::io::read(self.wake, &mut counter);
            let (stop, requested) = {
                let st = self.shared.lock();
                (st.stop, st.requested)
            };
            if stop {
                return "stopped".into();
            }
            self.drain();
            self.hash_step();
            let mut st = self.shared.lock();
            st.pending = self.pending.len();
            // A settle is answered once every event queued before it was read and every
            // file it named was hashed.
            if self.pending.is_empty() {
                st.answered = st.answered.max(requested);
                self.shared.answered.notify_all();
            }
        }
    }

    /// One chunk (`HASH_CHUNK_BYTES`) of the first file waiting to be hashed; a file hashed
    /// whole is judged: a copy of an enrolled executable names its task as running it.
    fn hash_step(&mut self) {
        let Some(p) = self.pending.front_mut() else {
            return;
        };
        let mut buf = vec![0u8; HASH_CHUNK_BYTES];
        let n = match rustix::io::pread(&p.file.fd, &mut buf, p.read) {
            Ok(n) => n,
            Err(e) => {
                let why = format!("pid {}: reading a file it runs: {e}", p.pid);
                self.pending.pop_front();
                let mut st = self.shared.lock();
                for slot in st.errors.iter_mut() {
                    slot.get_or_insert_with(|| why.clone());
                }
                return;
            }
        };
        p.read = p.read.saturating_add(n as u64);
        if n > 0 && p.read <= super::CONTENT_BYTES_MAX {
            sha2::Digest::update(&mut p.hasher, &buf[..n]);
            return;
        }
        let Some(p) = self.pending.pop_front() else {
            return;
        };
        let digest = Hash(sha2::Digest::finalize(p.hasher).into());
        let bits = self
            .wanted
            .iter()
            .enumerate()
            .filter(|(k, w)| {
                p.file.candidates & (1 << k) != 0 && w.content.is_some_and(|(_, d)| d == digest)
            })
            .fold(0u16, |m, (k, _)| m | 1 << k);
        if self.by_stamp.len() < super::MAPPED_FILES_MAX {
            self.by_stamp.insert(p.file.stamp, bits);
        }
        if bits != 0 {
            let mapped = if p.file.mapped { bits } else { 0 };
            self.runners(p.pid, bits, mapped, bits);
        }
    }

    /// Reads every event queued now (at most SETTLE_EVENTS_MAX) and judges each.
    fn drain(&mut self) {
        self.refresh();
        let mut read = 0usize;
        loop {
            let batch = self.batch(&mut read);
            if batch.is_empty() {
                break;
            }
            // What a process runs now is looked at first (it may exit at any moment); then
            // the forks copy verdicts and the exits end them, in order.
            for m in &batch {
                self.look_first(m);
            }
            for m in batch {
                self.handle(m);
            }
        }
    }

    /// Every event queued now, at most BATCH_MAX; `read` counts toward SETTLE_EVENTS_MAX.
    fn batch(&mut self, read: &mut usize) -> Vec<Message> {
        let mut batch = Vec::new();
        while batch.len() < BATCH_MAX {
            if *read == SETTLE_EVENTS_MAX {
                self.shared.lock().unsettle(|| {
                    format!(
                        "over {SETTLE_EVENTS_MAX} events queued at once: the judge was outpaced"
                    )
                });
                break;
            }
            *read += 1;
            match self.sub.read() {
                Next::Empty => break,
                Next::Event(m) => batch.push(m),
                Next::Lost(why) => self
                    .shared
                    .lock()
                    .unsettle(|| format!("events lost: {why}")),
            }
        }
        batch
    }

    /// Takes the executables as the watch now has them.
    fn refresh(&mut self) {
        let mut st = self.shared.lock();
        if st.generation != self.generation {
            self.generation = st.generation;
            self.wanted = st.wanted.clone();
            self.table.clear();
            self.by_stamp.clear();
            self.pending.clear();
            st.seeds.clear();
        }
        for (pid, k) in std::mem::take(&mut st.seeds) {
            if self.table.len() < TRACKED_MAX {
                self.table.entry(pid).or_insert(k);
            }
        }
    }

    /// The first pass over a batch: an exec or a change of ids is looked at now.
    fn look_first(&mut self, m: &Message) {
        match m.event {
            Event::Exec { tgid } => self.look(tgid, || {
                format!("pid {tgid} exec'd and exited before what it ran could be judged")
            }),
            Event::Uid { tgid, .. } | Event::Gid { tgid } => self.look(tgid, || {
                format!("pid {tgid} changed its ids and exited before it could be judged")
            }),
            _ => {}
        }
    }

    /// The second pass, in order: a fork copies its parent's verdict as it stood at the
    /// fork (a child already looked at since keeps what was seen), else the child is looked
    /// at; an exit ends the process's entry.
    fn handle(&mut self, m: Message) {
        match m.event {
            Event::Fork {
                parent_tgid,
                child_pid,
                child_tgid,
            } if child_pid == child_tgid => {
                if self
                    .table
                    .get(&child_tgid)
                    .is_some_and(|k| k.at_ns >= m.at_ns)
                {
                    return;
                }
                match self.table.get(&parent_tgid).copied() {
                    Some(k) if k.at_ns <= m.at_ns => self.record(child_tgid, k.verdict, m.at_ns),
                    known => {
                        // The parent looked at too when not followed yet: its later forks
                        // then copy what it runs.
                        if known.is_none() {
                            if let Some(v) = self.judge(parent_tgid) {
                                self.record(parent_tgid, v, now_ns());
                            }
                        }
                        self.look(child_tgid, || {
                            format!(
                                "pid {child_tgid} (born of pid {parent_tgid}) exited before it \
                                 could be judged"
                            )
                        })
                    }
                }
            }
            Event::Exit { pid, tgid } if pid == tgid => {
                self.table.remove(&tgid);
            }
            _ => {}
        }
    }

    /// Judges `pid` now; gone, it is counted as unjudged (`what` says what it did).
    fn look(&mut self, pid: u32, what: impl FnOnce() -> String) {
        match self.judge(pid) {
            Some(v) => self.record(pid, v, now_ns()),
            None => {
                self.table.remove(&pid);
                self.shared.lock().unjudged(what());
            }
        }
    }

    /// Keeps `v` for `pid` as known at `at_ns`; a runner is reported.
    fn record(&mut self, pid: u32, v: Verdict, at_ns: u64) {
        if let Verdict::Runs { bits, mapped, copy } = v {
            self.runners(pid, bits, mapped, copy);
        }
        if self.table.len() >= TRACKED_MAX && !self.table.contains_key(&pid) {
            self.shared
                .lock()
                .unsettle(|| format!("over {TRACKED_MAX} processes followed"));
            return;
        }
        self.table.insert(pid, Known { verdict: v, at_ns });
    }

    /// Names `pid` under each executable of `bits` it runs.
    fn runners(&mut self, pid: u32, bits: u16, mapped: u16, copy: u16) {
        let mut st = self.shared.lock();
        for (k, found) in st.runners.iter_mut().enumerate() {
            let bit = 1u16 << k;
            if bits & bit != 0
                && found.len() < RUNNERS_KEPT_MAX
                && !found.iter().any(|r| r.pid == pid)
            {
                found.push(Runner {
                    pid,
                    tid: pid,
                    mapped: mapped & bit != 0,
                    copy: copy & bit != 0,
                });
            }
        }
    }

    /// Judges live process `pid` with the walk's judge; `None` when it is gone.
    fn judge(&mut self, pid: u32) -> Option<Verdict> {
        let (visited, out, deferred) = self.visit(pid);
        self.defer(pid, deferred);
        let principal = match visited {
            Visit::Gone => return None,
            Visit::Seen { principal } => principal,
        };
        if !principal {
            return Some(Verdict::Other);
        }
        Some(self.verdict_of(out))
    }

    /// Walks live process `pid` as the walk does, each wanted executable looked for in it:
    /// whether it was there and a principal's, what was found of each executable, and the
    /// files of principals' processes left to compare by content. The judge's stamps are
    /// kept for the next visit.
    fn visit(&mut self, pid: u32) -> (Visit, Found, Vec<super::Deferred>) {
        let wanted: Vec<Wanted<'_>> = self
            .wanted
            .iter()
            .map(|w| Wanted {
                path: &w.path,
                id: w.id,
                content: w.content,
                tail: w.tail,
            })
            .collect();
        let mut judge = Judge::new(&wanted, &self.fs);
        judge.by_stamp = std::mem::take(&mut self.by_stamp);
        judge.deferred = Some(Vec::new());
        let principal = self.fs.principal(&self.principals);
        let mut out: Found = wanted.iter().map(|_| Ok(Vec::new())).collect();
        let mut walk = Walk {
            judge: &mut judge,
            proc_dir: &self.fs.dir,
            proc_dev: self.fs.dev,
            proc_mnt: self.fs.mnt,
            principal: &principal,
            out: &mut out,
            seeds: None,
        };
        let visited = walk.visit(pid);
        self.by_stamp = std::mem::take(&mut judge.by_stamp);
        let deferred = judge.deferred.take().unwrap_or_default();
        (visited, out, deferred)
    }

    /// Queues the files of `pid` to be compared by content, at most `PENDING_MAX` waiting:
    /// past it, every executable's watch is failed with the reason.
    fn defer(&mut self, pid: u32, deferred: Vec<super::Deferred>) {
        for file in deferred {
            if self.pending.len() >= PENDING_MAX {
                let mut st = self.shared.lock();
                let why = format!(
                    "over {PENDING_MAX} files of principals' processes waiting to be compared \
                     by content"
                );
                for slot in st.errors.iter_mut() {
                    slot.get_or_insert_with(|| why.clone());
                }
                break;
            }
            self.pending.push_back(Pending {
                pid,
                file,
                hasher: <sha2::Sha256 as sha2::Digest>::new(),
                read: 0,
            });
        }
    }

    /// The verdict on a principal's process from what its visit found of each wanted
    /// executable (bit `k` for the `k`th): clean, or the executables it runs, mapped or as
    /// a copy. An executable that could not be looked for fails its watch with the error.
    fn verdict_of(&self, out: Found) -> Verdict {
        let (mut bits, mut mapped, mut copy) = (0u16, 0u16, 0u16);
        let mut st = self.shared.lock();
        for (k, found) in out.into_iter().enumerate() {
            let bit = 1u16 << k;
            match found {
                Ok(r) => {
                    if let Some(r) = r.first() {
                        bits |= bit;
                        mapped |= if r.mapped { bit } else { 0 };
                        copy |= if r.copy { bit } else { 0 };
                    }
                }
                Err(e) => {
                    if let Some(slot) = st.errors.get_mut(k) {
                        slot.get_or_insert_with(|| e.to_string());
                    }
                }
            }
        }
        if bits == 0 {
            Verdict::Clean
        } else {
            Verdict::Runs { bits, mapped, copy }
        }
    }
}

//! The enrolled executables (docs/ARCHITECTURE.md, "Issuance", step 2): no principal's task
//! runs them, by identity or content, as its exe or a mapping, from the first observation's
//! listing to the dispatch decision (docs/THREAT-MODEL.md, "Who can change a fact").
//!
//! The first observation subscribes to the kernel's process events, then walks `/proc`
//! once; from then on a reader judges every process the events name as its event comes,
//! and the later observations take what it found instead of walking again. Where the
//! events cannot be had (a kernel before 6.6 without `CAP_NET_ADMIN`, outside the initial
//! pid or user namespace) every observation walks and chases, as do the observations after
//! events were lost or a process could not be accounted for. Which one held the process
//! space is the `process-space` fact, fixed at the first observation (it is part of the
//! evidence, so it does not change between two observations of one issuance).

use repoch_protocol::manifest::Manifest;
use repoch_protocol::{Fact, Reason};
use repoch_sys::error::{Context as _, Error};
use repoch_sys::proc::exec_hold::ExecHold;
use repoch_sys::proc::{self, Runner, Walked, Watch};
use repoch_sys::{cgroup, procevents};

/// The process space of one issuance: how it is held, and the reader when events are.
#[derive(Debug, Default)]
pub struct ProcessSpace {
    /// The `process-space` fact's observed text, fixed by the first observation.
    held: Option<String>,
    watch: Option<Watch>,
    /// Whether every exec of an enrolled executable is held from the first observation on
    /// (an issuance's observer), and the hold, or why there is none.
    pub(super) hold_execs: bool,
    hold: Option<Result<ExecHold, Error>>,
}

/// The `process-space` fact's observed text when events hold it.
pub const HELD_BY_EVENTS: &str =
    "held by the kernel's process events from before the first listing";

/// The process events, or why they cannot be had here.
fn subscribe() -> Result<procevents::Subscription, Error> {
    #[cfg(feature = "barriers")]
    {
        if std::env::var_os("REPOCH_TEST_PROC_EVENTS").is_some_and(|v| v == "off") {
            return Err("switched off for a test (REPOCH_TEST_PROC_EVENTS=off)".into());
        }
        // A receive buffer of this many bytes, for a test whose flood must lose events
        // whatever the machine's speed (tests-native/tests/tooled/burn.rs).
        if let Some(bytes) = std::env::var("REPOCH_TEST_PROC_EVENTS_RCVBUF")
            .ok()
            .and_then(|b| b.parse().ok())
        {
            return procevents::Subscription::open_with(bytes);
        }
    }
    procevents::Subscription::open()
}

/// Each executable's search: an error from either, else the tasks of both (each pid once).
fn merged(
    a: Vec<Result<Vec<Runner>, repoch_sys::error::Error>>,
    b: Vec<Result<Vec<Runner>, repoch_sys::error::Error>>,
) -> Vec<Result<Vec<Runner>, Error>> {
    a.into_iter()
        .zip(b)
        .map(|(a, b)| {
            // A task found running it is the fact, whatever else failed.
            match (a, b) {
                (Ok(mut a), Ok(b)) => {
                    for r in b {
                        if !a.iter().any(|x| x.pid == r.pid) {
                            a.push(r);
                        }
                    }
                    Ok(a)
                }
                (Ok(r), Err(_)) | (Err(_), Ok(r)) if !r.is_empty() => Ok(r),
                (Err(e), _) | (_, Err(e)) => Err(e),
            }
        })
        .collect()
}

/// Says what the reader could not judge (processes gone within its latency).
fn log_unjudged(r: &proc::Report) {
    if let (n @ 1.., Some(last)) = &r.unjudged {
        tracing::info!(
            unjudged = n,
            "processes gone before they could be judged, the last: {last}"
        );
    }
}

impl ProcessSpace {
    /// What runs the enrolled executables now (or ran them since the first listing).
    fn search(
        &mut self,
        wanted: &[proc::Wanted<'_>],
        principals: &[u32],
    ) -> Vec<Result<Vec<Runner>, Error>> {
        let none = || wanted.iter().map(|_| Ok(Vec::new())).collect::<Vec<_>>();
        if self.held.is_none() {
            match subscribe().and_then(|s| Watch::start(s, wanted, principals)) {
                Ok(w) => {
                    let walked = proc::walk(wanted, principals, false);
                    w.seed(walked.seeds);
                    self.held = Some(HELD_BY_EVENTS.into());
                    tracing::info!("process space {HELD_BY_EVENTS}");
                    let r = w.settle();
                    log_unjudged(&r);
                    if let Some(why) = &r.unsettled {
                        tracing::info!("process events could not vouch during the walk: {why}");
                    }
                    self.watch = Some(w);
                    return merged(walked.found, r.found);
                }
                Err(why) => {
                    let Walked {
                        found, unsettled, ..
                    } = proc::walk(wanted, principals, true);
                    let mut held =
                        format!("walks of /proc and their chase (no process events: {why})");
                    if let Some(u) = unsettled {
                        held.push_str(&format!("; process-scan-unsettled: {u}"));
                    }
                    tracing::info!("process space held by {held}");
                    self.held = Some(held);
                    return merged(found, none());
                }
            }
        }
        let Some(w) = &self.watch else {
            let walked = proc::walk(wanted, principals, true);
            if let Some(u) = &walked.unsettled {
                tracing::warn!("process-scan-unsettled: {u}");
            }
            return merged(walked.found, none());
        };
        w.set_wanted(wanted);
        let r = w.settle();
        log_unjudged(&r);
        let Some(why) = r.unsettled else {
            return merged(r.found, none());
        };
        // The walk stands in: every process alive now is listed, those born since are
        // chased and named by the events that follow.
        tracing::info!(
            "process events cannot vouch since the last observation ({why}): walking /proc"
        );
        w.mark_walk();
        let walked = proc::walk(wanted, principals, true);
        if let Some(u) = &walked.unsettled {
            tracing::warn!("process-scan-unsettled: {u}");
        }
        w.seed(walked.seeds);
        let after = w.settle();
        // What the reader reports only grows (its runners and errors are kept), so `after`
        // holds all `r` held.
        merged(walked.found, after.found)
    }

    /// Holds every exec of `exes` (from the first call on; the later ones add the files
    /// the paths name now), when this space holds execs.
    fn hold(&mut self, exes: &[String], principals: &[u32]) {
        if !self.hold_execs {
            return;
        }
        let paths: Vec<&str> = exes.iter().map(String::as_str).collect();
        match &mut self.hold {
            None => {
                let started = ExecHold::start(&paths, principals);
                if let Err(why) = &started {
                    tracing::info!("no exec hold: {why}");
                }
                self.hold = Some(started);
            }
            Some(Ok(h)) => {
                if let Err(e) = h.mark(&paths) {
                    self.hold = Some(Err(e));
                }
            }
            Some(Err(_)) => {}
        }
    }

    /// What the exec hold denied of `exe` (its principals' execs), or why it no longer
    /// holds: a failed fact's observed text.
    fn denied(&self, exe: &str) -> Option<String> {
        let Some(Ok(h)) = &self.hold else {
            return None;
        };
        let (attempts, more, dead) = h.attempts();
        if let Some(why) = dead {
            return Some(format!("the exec hold stopped: {why}"));
        }
        let mut said: Vec<String> = attempts
            .iter()
            .filter(|a| a.path == exe)
            .map(ToString::to_string)
            .collect();
        if said.is_empty() {
            return None;
        }
        if more > 0 {
            said.push(format!("{more} more attempts"));
        }
        Some(said.join(", "))
    }

    /// The `process-space` fact (after the first observation's search), and the
    /// `exec-hold` fact when this space holds execs: both fixed by the first observation.
    fn facts(&self) -> Vec<Fact> {
        let Some(held) = self.held.as_deref() else {
            return Vec::new();
        };
        let mut facts = vec![Fact::ok(
            "process-space",
            proc::SPACE,
            "each process judged at its fork, exec or change of ids (one gone before it was looked at is counted, not judged)",
            held,
        )];
        let hold = match &self.hold {
            Some(Ok(_)) => "held (fanotify permission events)".to_owned(),
            Some(Err(why)) => format!("not held: {why}"),
            None => return facts,
        };
        facts.push(Fact::ok(
            "exec-hold",
            "fanotify",
            "every exec of an enrolled executable waits for a judgement: a principal's is denied",
            &hold,
        ));
        facts
    }
}

/// The text of the tasks found running an executable.
fn describe(r: &[Runner]) -> String {
    let tasks: Vec<String> = r
        .iter()
        .take(cgroup::TASKS_SHOWN_MAX)
        .map(|t| {
            let cg = cgroup::of_pid(t.pid).unwrap_or_else(|_| "?".into());
            let how = match (t.mapped, t.copy) {
                (false, false) => "",
                (true, false) => " (mapped, not its exe)",
                (false, true) => " (a copy: its content)",
                (true, true) => " (a copy mapped, not its exe)",
            };
            if t.tid == t.pid {
                format!("pid {}{how} in {cg}", t.pid)
            } else {
                format!("pid {} tid {}{how} in {cg}", t.pid, t.tid)
            }
        })
        .collect();
    tasks.join(", ")
}

/// Each enrolled file as it is now: its identity and content. A removed one can still run:
/// it is then matched by its former path alone.
fn wanted_now(exe: &str) -> Result<proc::Wanted<'_>, Error> {
    let f = match std::fs::File::open(exe) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(proc::Wanted {
                path: exe,
                id: None,
                content: None,
                tail: None,
            })
        }
        Err(e) => return Err(e).context(exe),
    };
    let st = rustix::fs::fstat(&f).context(exe)?;
    let digest = repoch_sys::digest::digest(&f, proc::CONTENT_BYTES_MAX).context(exe)?;
    let tail = repoch_sys::digest::tail(&f, st.st_size as u64).context(exe)?;
    Ok(proc::Wanted {
        path: exe,
        id: Some((st.st_dev, st.st_ino)),
        content: Some((st.st_size as u64, digest)),
        tail: Some(tail),
    })
}

/// The enrolled executables: no principal's task runs them, by identity or content, as
/// its exe or a mapping; then how the process space was held.
pub(super) fn executables(m: &Manifest, space: &mut ProcessSpace, facts: &mut Vec<Fact>) {
    const WANT: &str = "no live task runs it";
    let exes = &m.containment.executables;
    if exes.is_empty() {
        return;
    }
    // Held before the listing: from then on no exec of them goes unjudged.
    space.hold(exes, &m.containment.principals());
    let now: Vec<Result<proc::Wanted<'_>, Error>> = exes.iter().map(|e| wanted_now(e)).collect();
    let wanted: Vec<proc::Wanted<'_>> = now
        .iter()
        .filter_map(|w| w.as_ref().ok().cloned())
        .collect();
    let mut running = space
        .search(&wanted, &m.containment.principals())
        .into_iter();
    // At every observation: what /proc says of a task is believed only with nothing
    // mounted over a task's files in our namespace.
    let unmounted = proc::tasks_unmounted();
    for (exe, now) in exes.iter().zip(now) {
        let running = match now {
            Err(e) => Err(e),
            Ok(_) => running
                .next()
                .unwrap_or_else(|| Err("no walk for it".into())),
        };
        let running = running.and_then(|r| match &unmounted {
            Ok(()) => Ok(r),
            Err(e) => Err(Error::Found(e.to_string())),
        });
        let denied = space.denied(exe);
        facts.push(match (running, denied) {
            (Err(e), _) => {
                Fact::failed("process", exe, WANT, &e.to_string(), Reason::ObserveFailed)
            }
            (Ok(r), Some(d)) if d.starts_with("the exec hold stopped") && r.is_empty() => {
                Fact::failed("process", exe, WANT, &d, Reason::ObserveFailed)
            }
            (Ok(r), Some(d)) if r.is_empty() => {
                Fact::failed("process", exe, WANT, &d, Reason::EscapedTask)
            }
            (Ok(r), Some(d)) => Fact::failed(
                "process",
                exe,
                WANT,
                &format!("{}; {d}", describe(&r)),
                Reason::EscapedTask,
            ),
            (Ok(r), None) if r.is_empty() => Fact::ok("process", exe, WANT, "none"),
            (Ok(r), None) => Fact::failed("process", exe, WANT, &describe(&r), Reason::EscapedTask),
        });
    }
    facts.extend(space.facts());
}

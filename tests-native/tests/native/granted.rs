//! What "granted" means (docs/OPERATOR.md, "Outcomes"): the consumer acknowledged a durable
//! grant. The consumer (`repoch-consume`) is stopped at each of its named barriers
//! (consumer/src/barrier.rs, `REPOCH_CONSUMER_BARRIER`) and SIGKILLed there; then the
//! documented outcome: `repoch recover`'s exit code and outcome, the epoch never reissued
//! (a second recovery refused, or, where nothing was written, recoverable again), a grant
//! file at `--out` only if `repoch-consume verify` accepts it, and no temporary file at
//! `--out`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use repoch_tests_native::*;

use crate::e2e::{records, AtBarrier};

/// A process killed (and reaped) on drop, its output collected on finish.
pub(crate) struct Guard(Option<std::process::Child>);

impl Guard {
    pub(crate) fn spawn(mut c: Command) -> Guard {
        Guard(Some(
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn"),
        ))
    }
    /// The same, its stderr to `log` (to wait for a barrier line in it).
    pub(crate) fn spawn_with_stderr(mut c: Command, log: &Path) -> Guard {
        Guard(Some(
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(std::fs::File::create(log).unwrap())
                .spawn()
                .expect("spawn"),
        ))
    }
    pub(crate) fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }
    /// Waits for its exit, at most `limit`; `None` if it still runs.
    pub(crate) fn finish_within(&mut self, limit: Duration) -> Option<Run> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Ok(Some(_)) = self.0.as_mut().unwrap().try_wait() {
                return Some(self.0.take().unwrap().wait_with_output().unwrap().into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
    /// SIGKILL now; what it printed until then.
    pub(crate) fn kill_now(&mut self) -> Run {
        let mut c = self.0.take().unwrap();
        let _ = c.kill();
        c.wait_with_output().unwrap().into()
    }
    pub(crate) fn finish(&mut self) -> Run {
        self.finish_within(Duration::from_secs(60))
            .expect("the process never ended")
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `repoch-consume receive` started with `REPOCH_CONSUMER_BARRIER=barrier`, its stderr in a
/// file so the test can wait for the barrier line.
pub(crate) struct AtConsumerBarrier {
    child: Option<std::process::Child>,
    log: PathBuf,
    barrier: String,
}

impl AtConsumerBarrier {
    pub(crate) fn start(s: &Sandbox, id: &str, barrier: &str, out: &str) -> AtConsumerBarrier {
        let log = s.path(&format!("consumer-{barrier}.log"));
        let child = s
            .consumer(&id[..6], "consumer.key", out, &[])
            .env("REPOCH_CONSUMER_BARRIER", barrier)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        AtConsumerBarrier {
            child: Some(child),
            log,
            barrier: barrier.to_owned(),
        }
    }
    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }
    /// The barrier line logged and the consumer stopped there.
    pub(crate) fn reached(&self) {
        stopped_at(&self.log, self.pid(), &self.barrier, "repoch-consume");
    }
    /// SIGKILL at the barrier, reaped.
    pub(crate) fn kill(&mut self) {
        let mut c = self.child.take().unwrap();
        let _ = c.kill();
        let _ = c.wait();
    }
    /// SIGCONT: it goes on from the barrier, as a [`Guard`] (killed on drop).
    pub(crate) fn go_on(mut self) -> Guard {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.pid() as i32).unwrap(),
            rustix::process::Signal::CONT,
        )
        .unwrap();
        Guard(self.child.take())
    }
    /// SIGCONT: it goes on from the barrier; its output once it ends.
    fn resume(&mut self) -> Run {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.pid() as i32).unwrap(),
            rustix::process::Signal::CONT,
        )
        .unwrap();
        self.child
            .take()
            .unwrap()
            .wait_with_output()
            .unwrap()
            .into()
    }
}

impl Drop for AtConsumerBarrier {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn recover_bg(s: &Sandbox, id: &str, wait: u64) -> Guard {
    Guard::spawn(s.recover(&id[..6], wait, &[]))
}

/// `repoch-consume --json verify` of `p`.
fn verify(s: &Sandbox, p: &Path) -> Run {
    s.run(
        "repoch-consume",
        &[
            "--json",
            "verify",
            "--issuer-key",
            s.issuer_pub().to_str().unwrap(),
            p.to_str().unwrap(),
        ],
    )
}

/// The files the consumer may leave beside `--out`: its temporary names
/// (`.NAME.<pid>.<random>.tmp`, docs/OPERATOR.md).
fn temporaries(s: &Sandbox, out: &str) -> Vec<String> {
    let prefix = format!(".{out}.");
    std::fs::read_dir(s.path(""))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// A consumer killed before its persist leaves at most its two reserved temporary files
/// (the grant's and the checkpoint's, written with zeros before it connected,
/// docs/OPERATOR.md): nothing of a grant in them, nothing at `--out`.
fn only_reserved_temporaries(s: &Sandbox, out: &str) {
    let t = temporaries(s, out);
    assert!(t.len() <= 2, "{t:?}");
    for n in &t {
        let bytes = std::fs::read(s.path(n)).unwrap();
        assert!(
            bytes.iter().all(|b| *b == 0),
            "{n}: a temporary file holds more than its reserved zeros"
        );
    }
}

/// A grant file exists at `--out` only if it verifies (never a partial or empty file, never
/// a temporary one under the final name); returns whether one exists.
fn out_is_whole_or_absent(s: &Sandbox, out: &str, id: &str) -> bool {
    let p = s.path(out);
    if !p.exists() {
        return false;
    }
    let v = verify(s, &p);
    assert_eq!(
        v.code,
        Outcome::Success,
        "a grant file at --out that does not verify ({} bytes): {}",
        std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0),
        v.stdout
    );
    assert_eq!(v.json()["grant"]["deployment"], id);
    true
}

/// Waits until repochd (whose log is the sandbox's `repochd.log`) registered consumer `pid`
/// as waiting for a recovery.
pub(crate) fn waiting(s: &Sandbox, pid: u32) {
    let start = Instant::now();
    loop {
        let log = std::fs::read_to_string(s.path("repochd.log")).unwrap_or_default();
        if log
            .lines()
            .any(|l| l.contains("waiting for a recovery") && l.contains(&format!("pid={pid} ")))
        {
            return;
        }
        assert!(
            start.elapsed().as_secs() < DAEMON_WAIT_SECONDS_MAX,
            "repochd never registered consumer {pid}:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The epoch is used: a new consumer is refused epoch-consumed at its hello, at once (exit
/// 2, docs/PROTOCOL.md); a second recovery is refused epoch-consumed and appends nothing.
fn never_reissued(s: &Sandbox, id: &str) {
    let before = records(s, id);
    let c2 = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant2.cbor", &[]))
        .finish_within(Duration::from_secs(10))
        .expect("a consumer of a used epoch was not refused at its hello");
    assert_eq!(c2.code, Outcome::Refused, "{}{}", c2.stdout, c2.stderr);
    assert_eq!(c2.json()["reason"], "epoch-consumed", "{}", c2.stdout);
    let again: Run = Guard::spawn(s.recover(&id[..6], 1, &[])).finish();
    assert_eq!(again.code, Outcome::Refused, "{}", again.stdout);
    assert_eq!(again.reasons(), ["epoch-consumed"]);
    assert_eq!(records(s, id), before, "a refused recovery appended");
    assert!(!s.path("grant2.cbor").exists());
}

/// Killed before the key proof or right after it: nothing was written; the recovery finds
/// no consumer (refused `consumer-absent`, exit 2) and the epoch stays recoverable: a
/// recovery with a live consumer then grants.
fn killed_before_any_recovery(barrier: &str) {
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let mut c = AtConsumerBarrier::start(&s, &id, barrier, "grant.cbor");
    c.reached();
    // After its key proof repochd may register it as waiting: once dead it is dropped.
    c.kill();
    let r = Guard::spawn(s.recover(&id[..6], 2, &[])).finish();
    assert_eq!(r.code, Outcome::Refused, "{barrier}: {}", r.stdout);
    assert_eq!(r.reasons(), ["consumer-absent"], "{barrier}");
    assert_eq!(records(&s, &id), ["genesis"], "{barrier}");
    assert_eq!(s.status(&id).json()["epoch"], "enrolled");
    assert!(!out_is_whole_or_absent(&s, "grant.cbor", &id));
    only_reserved_temporaries(&s, "grant.cbor");
    // Recoverable again.
    let mut live = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant.cbor", &[]));
    let r = Guard::spawn(s.recover(&id[..6], 20, &[])).finish();
    assert_eq!(r.code, Outcome::Success, "{barrier}: {}", r.stdout);
    assert_eq!(live.finish().code, Outcome::Success);
    assert!(out_is_whole_or_absent(&s, "grant.cbor", &id));
}

#[test]
#[ignore = "needs root"]
fn consumer_killed_after_hello_burns_nothing_and_the_epoch_stays_recoverable() {
    require_root!();
    killed_before_any_recovery("after-hello");
}

#[test]
#[ignore = "needs root"]
fn consumer_killed_after_its_key_proof_burns_nothing_and_the_epoch_stays_recoverable() {
    require_root!();
    killed_before_any_recovery("after-key-proof");
}

/// repochd stopped at its barrier `ours`, the consumer at its barrier `theirs`; the
/// consumer is killed there, then repochd goes on: the recovery's output once it ends, and
/// repochd still running (bind it last: it is dropped, and killed, before the sandbox).
fn killed_while_repochd_stands(ours: &str, theirs: &str) -> (Sandbox, String, Run, AtBarrier) {
    let s = Sandbox::new();
    let id = s.enroll();
    let d = AtBarrier::start(&s, ours);
    let mut c = AtConsumerBarrier::start(&s, &id, theirs, "grant.cbor");
    let mut rec = recover_bg(&s, &id, 20);
    c.reached();
    d.reached();
    c.kill();
    d.signal(rustix::process::Signal::CONT);
    let r = rec.finish();
    (s, id, r, d)
}

#[test]
#[ignore = "needs root"]
fn consumer_killed_after_custody_is_withheld_and_never_reissued() {
    // repochd stops right after reading the custody answer; the consumer is killed at its
    // own after-custody barrier; repochd goes on: before `consume` it finds the peer gone
    // and withholds consumer-lost (refused, exit 2): nothing consumed, no grant made.
    require_root!();
    let (s, id, r, _d) = killed_while_repochd_stands("after-custody", "after-custody");
    assert_eq!(r.code, Outcome::Refused, "{}", r.stdout);
    assert_eq!(r.outcome()["outcome"], "refused");
    assert_eq!(r.reasons(), ["consumer-lost"]);
    assert_eq!(records(&s, &id), ["genesis", "intent", "withheld"]);
    assert!(!out_is_whole_or_absent(&s, "grant.cbor", &id));
    only_reserved_temporaries(&s, "grant.cbor");
    never_reissued(&s, &id);
}

/// The grant dispatched; the consumer killed at `barrier` before it acknowledged: recover
/// reports "dispatched, not acknowledged" (uncertain, exit 3, reason consumer-lost), the
/// epoch stays receipted and is never reissued. Returns the sandbox and id for more checks.
fn killed_after_dispatch(barrier: &str) -> (Sandbox, String) {
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let mut c = AtConsumerBarrier::start(&s, &id, barrier, "grant.cbor");
    let mut rec = recover_bg(&s, &id, 20);
    c.reached();
    c.kill();
    let r = rec.finish();
    assert_eq!(
        r.code,
        Outcome::Uncertain,
        "{barrier}: dispatched, not acknowledged: {}",
        r.stdout
    );
    assert_eq!(r.outcome()["outcome"], "uncertain");
    assert_eq!(r.reasons(), ["consumer-lost"]);
    assert!(
        r.outcome()["detail"]
            .as_str()
            .unwrap()
            .contains("not acknowledged"),
        "{}",
        r.stdout
    );
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
    assert_eq!(s.status(&id).json()["epoch"], "receipted");
    never_reissued(&s, &id);
    (s, id)
}

#[test]
#[ignore = "needs root"]
fn consumer_killed_after_receiving_the_grant_is_not_granted() {
    // Before: recover said granted (exit 0) though no grant was ever persisted.
    require_root!();
    let (s, id) = killed_after_dispatch("after-receive");
    assert!(!out_is_whole_or_absent(&s, "grant.cbor", &id));
    only_reserved_temporaries(&s, "grant.cbor");
}

#[test]
#[ignore = "needs root"]
fn consumer_killed_with_its_grant_written_but_not_linked_leaves_only_a_temporary_file() {
    require_root!();
    let (s, id) = killed_after_dispatch("persist-after-write");
    assert!(!out_is_whole_or_absent(&s, "grant.cbor", &id));
    let t = temporaries(&s, "grant.cbor");
    assert_eq!(t.len(), 1, "{t:?}");
    assert!(t[0].ends_with(".tmp"), "{t:?}");
}

#[test]
#[ignore = "needs root"]
fn consumer_killed_after_persisting_before_acknowledging_is_uncertain_and_its_grant_verifies() {
    require_root!();
    let (s, id) = killed_after_dispatch("after-persist");
    assert!(out_is_whole_or_absent(&s, "grant.cbor", &id));
    assert!(temporaries(&s, "grant.cbor").is_empty());
}

#[test]
#[ignore = "needs root"]
fn consumer_killed_after_the_last_word_is_granted() {
    // The acknowledgement taken and the last word (`granted`) read: granted (exit 0) means
    // the consumer acknowledged a durable grant and was told so, even if it dies before
    // exec'ing the new root.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let mut c = AtConsumerBarrier::start(&s, &id, "after-last-word", "grant.cbor");
    let mut rec = recover_bg(&s, &id, 20);
    c.reached();
    c.kill();
    let r = rec.finish();
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert_eq!(r.outcome()["outcome"], "granted");
    assert!(out_is_whole_or_absent(&s, "grant.cbor", &id));
    assert_eq!(
        verify(&s, &s.path("grant.cbor")).json()["grant"]["sha256"],
        r.outcome()["grant"]["sha256"]
    );
    assert!(temporaries(&s, "grant.cbor").is_empty());
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
    never_reissued(&s, &id);
}

#[test]
#[ignore = "needs root"]
fn consumer_killed_after_acknowledging_before_the_last_word_is_uncertain() {
    // repochd stops right after reading the acknowledgement; the consumer, stopped right
    // after sending it, is killed: the pinned consumer is gone at the last word, so no
    // `granted` is sent and the outcome is uncertain (exit 3, consumer-lost), its grant
    // durable and verifying, the epoch receipted and never reissued.
    require_root!();
    let (s, id, r, _d) = killed_while_repochd_stands("after-acknowledgement", "after-acknowledge");
    assert_eq!(r.code, Outcome::Uncertain, "{}", r.stdout);
    assert_eq!(r.outcome()["outcome"], "uncertain");
    assert_eq!(r.reasons(), ["consumer-lost"], "{}", r.stdout);
    assert!(out_is_whole_or_absent(&s, "grant.cbor", &id));
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
    never_reissued(&s, &id);
}

#[test]
#[ignore = "needs root"]
fn a_consumer_that_cannot_deliver_its_acknowledgement_is_uncertain_with_its_grant_kept() {
    // repochd stops right after the dispatch and is killed once the consumer made its grant
    // durable; the consumer's acknowledgement finds no one: it exits 3 (uncertain) without
    // exec'ing, its grant file verifying; recover, having lost repochd, says uncertain.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = AtBarrier::start(&s, "after-dispatch");
    let held = s.path("held.txt");
    let mut c = AtConsumerBarrier::start(&s, &id, "after-persist", "grant.cbor");
    let mut rec = recover_bg(&s, &id, 20);
    d.reached();
    c.reached();
    drop(d); // SIGKILL
    let r = rec.finish();
    assert_eq!(r.code, Outcome::Uncertain, "{}", r.stdout);
    let out = c.resume();
    assert_eq!(out.code, Outcome::Uncertain, "{}{}", out.stdout, out.stderr);
    assert_eq!(out.json()["outcome"], "uncertain", "{}", out.stdout);
    assert!(!held.exists());
    assert!(out_is_whole_or_absent(&s, "grant.cbor", &id));
    assert!(temporaries(&s, "grant.cbor").is_empty());
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
}

#[test]
#[ignore = "needs root"]
fn a_waiting_consumer_is_told_when_its_epoch_is_found_used() {
    // A consumer waits for an enrolled epoch; the epoch is then used behind repochd's back
    // (intent and withheld appended to the log); `repoch recover` is refused epoch-consumed
    // at reserve: the waiting consumer is told at once (exit 2, refused, epoch-consumed), not
    // left to wait out its own timeout (30 s here).
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let mut c = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant.cbor", &[]));
    waiting(&s, c.pid());
    s.use_epoch(&id);
    let r = Guard::spawn(s.recover(&id[..6], 1, &[])).finish();
    assert_eq!(r.code, Outcome::Refused, "{}", r.stdout);
    assert_eq!(r.reasons(), ["epoch-consumed"]);
    let out = c
        .finish_within(Duration::from_secs(10))
        .expect("the waiting consumer was never told");
    assert_eq!(out.code, Outcome::Refused, "{}{}", out.stdout, out.stderr);
    let j = out.json();
    assert_eq!(j["outcome"], "refused", "{}", out.stdout);
    assert_eq!(j["reason"], "epoch-consumed", "{}", out.stdout);
    assert!(!s.path("grant.cbor").exists());
}

#[test]
#[ignore = "needs root"]
fn consume_json_names_each_outcome_as_the_exit_codes_table_does() {
    // One rule (docs/EXIT-CODES.md): the `outcome` of `--json` is the table's name for the
    // exit code: 2 refused, 3 uncertain, 64 usage. Here: no repochd (2), an existing --out
    // (64, before connecting: nothing can be used), repochd lost after the challenge (3).
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let none = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant.cbor", &[])).finish();
    assert_eq!(none.code, Outcome::Refused, "{}", none.stdout);
    assert_eq!(none.json()["outcome"], "refused", "{}", none.stdout);
    std::fs::write(s.path("taken.cbor"), b"").unwrap();
    let taken = Guard::spawn(s.consumer(&id[..6], "consumer.key", "taken.cbor", &[])).finish();
    assert_eq!(taken.code, Outcome::Usage, "{}", taken.stdout);
    assert_eq!(taken.json()["outcome"], "usage", "{}", taken.stdout);
    assert_eq!(std::fs::read(s.path("taken.cbor")).unwrap(), b"");
    let d = AtBarrier::start(&s, "after-receipt");
    let mut c = Guard::spawn(s.consumer(&id[..6], "consumer.key", "grant.cbor", &[]));
    let mut rec = recover_bg(&s, &id, 20);
    d.reached();
    drop(d); // SIGKILL
    assert_eq!(rec.finish().code, Outcome::Uncertain);
    let lost = c.finish();
    assert_eq!(lost.code, Outcome::Uncertain, "{}", lost.stdout);
    assert_eq!(lost.json()["outcome"], "uncertain", "{}", lost.stdout);
    assert!(!s.path("grant.cbor").exists());
}

#[test]
#[ignore = "needs root"]
fn an_acknowledgement_naming_other_bytes_is_not_granted() {
    // A consumer (the helper, enrolled as the consumer) acknowledges `persisted` with a
    // sha256 that is not the dispatched grant's: not granted; uncertain (exit 3),
    // protocol-error, the epoch receipted and never reissued.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll_with_helper_consumer();
    let d = s.daemon();
    let rogue = spawn_ready(helper(&[
        "rogue-consumer",
        s.grant_socket().to_str().unwrap(),
        &id[..6],
        s.path("consumer.key").to_str().unwrap(),
        "wrong-ack",
    ]));
    d.wait_log(&format!("pid={}", rogue.pid()));
    let r = Guard::spawn(s.recover(&id[..6], 10, &[])).finish();
    assert_eq!(r.code, Outcome::Uncertain, "{}", r.stdout);
    assert_eq!(r.outcome()["outcome"], "uncertain");
    assert_eq!(r.reasons(), ["protocol-error"]);
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
}

/// A tmpfs of `size` mounted at `at`, unmounted (lazily) on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let st = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "repoch-test",
            ])
            .arg(at)
            .status()
            .unwrap();
        assert!(st.success(), "mount tmpfs at {}", at.display());
        Tmpfs(at.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
#[ignore = "needs root"]
fn a_file_system_filled_after_the_consumer_started_does_not_cost_the_grant() {
    // Another user sharing --out's file system fills it while the consumer waits: the
    // consumer reserved the space of its grant and checkpoint before connecting, so the
    // grant is still made durable and the recovery granted, not burnt as uncertain.
    require_root!();
    let s = Sandbox::new();
    let small = Tmpfs::mount(&s.path("small"), "256k");
    let id = s.enroll();
    let d = s.daemon();
    let mut c = Guard::spawn(s.consumer(&id[..8], "consumer.key", "small/grant.cbor", &[]));
    d.wait_log(&format!("pid={}", c.pid()));
    // Fill it to the last byte.
    {
        use std::io::Write as _;
        let mut f = std::fs::File::create(small.0.join("fill")).unwrap();
        let block = [0u8; 4096];
        let full = loop {
            if let Err(e) = f.write_all(&block) {
                break e;
            }
        };
        assert_eq!(full.raw_os_error(), Some(libc::ENOSPC), "{full}");
        let one = f.write_all(&[0]).and_then(|()| f.sync_all());
        assert!(one.is_err(), "the file system still took a byte");
    }
    let r = recover_bg(&s, &id[..8], 20).finish();
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.outcome()["outcome"], "granted", "{}", r.stdout);
    let out = c.finish();
    assert_eq!(out.code, Outcome::Success, "{}{}", out.stdout, out.stderr);
    assert!(out_is_whole_or_absent(&s, "small/grant.cbor", &id));
    assert!(s.path("small/grant.cbor").exists());
    let mut left: Vec<String> = std::fs::read_dir(&small.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["fill", "grant.cbor", "grant.cbor.checkpoint"]);
}

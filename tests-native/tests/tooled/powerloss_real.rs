//! Power loss at every barrier of a real issuance (docs/ARCHITECTURE.md, "Testing at
//! barriers"): the state root lives on its own loop-mounted ext4; repochd, a consumer and
//! `repoch recover` run as real processes; repochd stops at the named barrier; the power is
//! cut there (`EXT4_IOC_SHUTDOWN` with `EXT4_GOING_FLAGS_NOLOGFLUSH`: what was not synced
//! is dropped, the journal is not flushed), every process is killed with SIGKILL, and the
//! file system is unmounted and mounted again (journal replay). A fresh repochd then runs
//! on what the disk kept.
//!
//! Oracles, read independently of the daemon that crashed:
//! - nothing rewritten: the log after the remount is a prefix of the bytes read while
//!   repochd stood at the barrier, and holds every one of them (each append is fsynced
//!   before its step returns, so every record seen at the barrier was durable);
//! - the log verifies offline (`repoch audit`: verified, or a torn tail only) and `repoch
//!   status` classifies it as the barrier implies;
//! - never a grant at the consumer's `--out` without durable `consume` and `receipt`
//!   records, and then its bytes are the receipt's grant;
//! - never two grants: a partial epoch is refused (`epoch-consumed`, exit 2, the epoch's
//!   state named) and nothing is appended; an epoch with nothing written is granted once,
//!   and a third attempt is refused.

use std::path::Path;
use std::process::{Child, Stdio};

use repoch_protocol::epoch::{verify_log, EpochBody, LogReport};
use repoch_protocol::{DeploymentId, PublicKey};
use repoch_tests_native::*;

/// Every issuance barrier, in order, with the records its steps have appended (and
/// fsynced) when it is reached.
const CASES: &[(&str, &[&str])] = &[
    ("after-open", &["genesis"]),
    ("after-reserve", &["genesis"]),
    ("after-observe", &["genesis"]),
    ("after-connect", &["genesis"]),
    ("before-intent", &["genesis"]),
    ("after-intent", &["genesis", "intent"]),
    ("after-custody", &["genesis", "intent"]),
    ("after-final-1", &["genesis", "intent"]),
    ("after-claim", &["genesis", "intent"]),
    ("after-consume", &["genesis", "intent", "consume"]),
    (
        "after-receipt",
        &["genesis", "intent", "consume", "receipt"],
    ),
    (
        "after-final-2",
        &["genesis", "intent", "consume", "receipt"],
    ),
    (
        "after-dispatch",
        &["genesis", "intent", "consume", "receipt"],
    ),
    (
        "after-acknowledgement",
        &["genesis", "intent", "consume", "receipt"],
    ),
];

/// The classification a log of exactly these records has.
fn epoch_of(kept: &[&str]) -> &'static str {
    match kept.last() {
        Some(&"genesis") => "enrolled",
        Some(&"intent") => "intended",
        Some(&"consume") => "consumed",
        Some(&"receipt") => "receipted",
        other => panic!("no classification for a log ending in {other:?}"),
    }
}

/// Written on the mount right before the cut and never synced.
const CANARY: &[u8] = b"written after the last sync, lost at the power cut\n";

/// Longest wait for a consumer to connect, or to persist the grant and exit.
const CONSUMER_SECONDS_MAX: u64 = 20;

/// A background process, killed (SIGKILL) and reaped on drop: a test that fails early
/// still releases everything it holds on the mount before the file system is unmounted.
struct Bg(Option<Child>);

impl Bg {
    fn pid(&self) -> u32 {
        self.0.as_ref().unwrap().id()
    }
    /// SIGKILL, then what it printed.
    fn kill(mut self) -> Run {
        let mut c = self.0.take().unwrap();
        let _ = c.kill();
        c.wait_with_output().unwrap().into()
    }
    /// Waits, bounded, for it to exit by itself.
    fn exit_within(mut self, seconds: u64, what: &str) -> Run {
        let start = std::time::Instant::now();
        let c = self.0.as_mut().unwrap();
        while c.try_wait().unwrap().is_none() {
            assert!(
                start.elapsed().as_secs() < seconds,
                "{what}: did not exit within {seconds} s"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.0.take().unwrap().wait_with_output().unwrap().into()
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A consumer for `id` whose pinned issuer key and `--out` live off the failing disk.
fn consumer(s: &Sandbox, id: &str, out: &str) -> Bg {
    let mut c = s.cmd("repoch-consume");
    c.args(["--json", "receive", "--deployment", &id[..6], "--key"])
        .arg(s.path("consumer.key"))
        .arg("--issuer-key")
        .arg(s.path("issuer.pub"))
        .arg("--out")
        .arg(s.path(out))
        .arg("--socket")
        .arg(s.grant_socket())
        .args(["--wait", &CONSUMER_SECONDS_MAX.to_string()]);
    Bg(Some(
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ))
}

/// Waits until repochd's log (at `log`) says the consumer `pid` is connected and waiting.
fn wait_connected(log: &Path, pid: u32) {
    let start = std::time::Instant::now();
    let needle = format!("pid={pid} ");
    loop {
        let t = std::fs::read_to_string(log).unwrap_or_default();
        if t.lines()
            .any(|l| l.contains(&needle) && l.contains("consumer connected"))
        {
            return;
        }
        assert!(
            start.elapsed().as_secs() < CONSUMER_SECONDS_MAX,
            "the consumer pid {pid} never connected:\n{t}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn kinds(r: &LogReport) -> Vec<&'static str> {
    r.records
        .iter()
        .map(|v| v.record.record.body.kind().as_str())
        .collect()
}

/// The signed grant bytes the log's receipt carries.
fn receipt_grant(r: &LogReport) -> Option<&[u8]> {
    r.records.iter().find_map(|v| match &v.record.record.body {
        EpochBody::Receipt { grant } => Some(grant.as_slice()),
        _ => None,
    })
}

/// Never a grant at `out` without durable `consume` and `receipt` records in `log`, and
/// then its bytes are exactly the receipt's grant.
fn grant_is_backed(out: &Path, log: &LogReport, what: &str) {
    let Ok(bytes) = std::fs::read(out) else {
        return;
    };
    let k = kinds(log);
    assert!(
        k.contains(&"consume") && k.contains(&"receipt"),
        "{what}: a grant at {} without durable consume and receipt records: {k:?}",
        out.display()
    );
    assert!(
        receipt_grant(log) == Some(bytes.as_slice()),
        "{what}: the grant at {} ({} bytes) is not the receipt's grant",
        out.display(),
        bytes.len()
    );
}

/// `repoch audit` of the log, with the issuer key given explicitly (offline): verified, or
/// a torn tail only.
fn audit_passes_or_torn(s: &Sandbox, log: &Path, what: &str) {
    let a = s.repoch(&[
        "--json",
        "audit",
        "--issuer-key",
        s.path("issuer.pub").to_str().unwrap(),
        log.to_str().unwrap(),
    ]);
    let j = a.json();
    if a.code == Outcome::Success && j["verified"] == true {
        return;
    }
    assert_eq!(
        j["logs"][0]["epoch"], "torn",
        "{what}: the audit failed with more than a torn tail (exit {}): {j}",
        a.code
    );
}

/// A recovery refused because the epoch is used: exit 2, `epoch-consumed`, naming the
/// state it found; nothing appended.
fn refused_consumed(s: &Sandbox, id: &str, state: &str, what: &str) {
    let log = s.log(id);
    let before = std::fs::read(&log).unwrap();
    let c = consumer(s, id, "refused.cbor");
    let r = run(s.recover(&id[..6], 1, &[]));
    assert_eq!(r.code, Outcome::Refused, "{what}: {}{}", r.stdout, r.stderr);
    assert_eq!(r.reasons(), ["epoch-consumed"], "{what}");
    let detail = r.outcome()["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        detail.contains(&format!("observed {state}")),
        "{what}: the refusal must name the epoch's state {state}: {detail}"
    );
    drop(c);
    assert!(
        !s.path("refused.cbor").exists(),
        "{what}: a refused recovery's consumer got a grant"
    );
    assert!(
        std::fs::read(&log).unwrap() == before,
        "{what}: a refused recovery changed the log"
    );
}

fn power_cut_at(barrier: &str) {
    let kept = CASES
        .iter()
        .find(|(b, _)| *b == barrier)
        .unwrap_or_else(|| panic!("no case for barrier {barrier}"))
        .1;
    let what = format!("power cut at {barrier}");
    // No mount namespace may copy this mount (it would keep the shut-down superblock).
    let _no_namespaces = no_mount_namespaces_guard();
    // Declared before every process, so dropped after them: each is killed and reaped
    // before the file system is unmounted and its loop device detached, even on a panic.
    let fs = Ext4::new();
    let s = Sandbox::within(Some(&fs.mnt));
    let id = s.enroll();
    let layout = repoch_issuer::Layout::new(Some(&s.root));
    let issuer: PublicKey = repoch_issuer::store::issuer_public(&layout).unwrap();
    let dep = DeploymentId::from_hex(&id).unwrap();
    // The consumer's pinned issuer key, like its key and --out, is off the failing disk.
    std::fs::copy(s.issuer_pub(), s.path("issuer.pub")).unwrap();
    let log = s.log(&id);

    let d = AtBarrier::start(&s, barrier);
    let first = consumer(&s, &id, "grant.cbor");
    wait_connected(&s.path("repochd.log"), first.pid());
    let rec = Bg(Some(recover_bg(&s, &id[..6], CONSUMER_SECONDS_MAX)));
    d.reached();
    if barrier == "after-dispatch" {
        // The grant left repochd: the consumer (on its own disk) persists it, acknowledges
        // it, and waits for repochd's last word, which the cut will never let come.
        let start = std::time::Instant::now();
        while !s.path("grant.cbor").exists() {
            assert!(
                start.elapsed().as_secs() < CONSUMER_SECONDS_MAX,
                "{what}: no grant persisted"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    // What the barrier's steps wrote, read while repochd stands still.
    let at_barrier = std::fs::read(&log).unwrap();
    let seen = verify_log(&at_barrier, &issuer, Some(dep));
    assert_eq!(kinds(&seen), kept, "{what}: the log at the barrier");
    assert!(seen.problem.is_none(), "{what}: {:?}", seen.problem);

    // A canary written and never synced: the remount must not show it, or this cut is no
    // power loss and the durability oracles below prove nothing.
    let canary = fs.mnt.join("canary");
    std::fs::write(&canary, CANARY).unwrap();
    // The power cut, then everything dies (SIGKILL): the client and the consumer first, so
    // what they printed is what they knew at the cut, then repochd.
    fs.cut_power();
    let c = first.kill();
    assert!(
        !c.stdout.contains("granted"),
        "{what}: the consumer reported a grant: {}",
        c.stdout
    );
    let r = rec.kill();
    assert!(
        !r.json_lines().iter().any(|j| j["outcome"] == "granted"),
        "{what}: the client reported a grant: {}",
        r.stdout
    );
    assert_eq!(r.code, Exit::SIGNALED, "{what}: the client was not killed");
    drop(d);
    fs.remount_after_power_loss();

    assert!(
        std::fs::read(&canary).unwrap_or_default() != CANARY,
        "{what}: data never synced survived the power cut: the cut dropped nothing"
    );
    // Nothing rewritten, nothing fsynced lost.
    let after = std::fs::read(&log).unwrap();
    assert!(
        at_barrier.starts_with(&after),
        "{what}: the log after the remount ({} bytes) is not a prefix of the log at the barrier ({} bytes)",
        after.len(),
        at_barrier.len()
    );
    assert_eq!(
        after.len(),
        at_barrier.len(),
        "{what}: records fsynced before the barrier were lost"
    );
    let kept_report = verify_log(&after, &issuer, Some(dep));
    assert_eq!(kinds(&kept_report), kept, "{what}");
    audit_passes_or_torn(&s, &log, &what);
    let st = s.status(&id);
    assert_eq!(
        st.code,
        Outcome::Success,
        "{what}: status: {}{}",
        st.stdout,
        st.stderr
    );
    let j = st.json();
    let state = epoch_of(kept);
    assert_eq!(j["epoch"], state, "{what}: {j}");
    grant_is_backed(&s.path("grant.cbor"), &kept_report, &what);
    if kept.len() > 1 {
        assert_eq!(j["refusal"], "epoch-consumed", "{what}: {j}");
    } else {
        assert!(
            !s.path("grant.cbor").exists(),
            "{what}: a grant with nothing in the log"
        );
    }

    // A fresh repochd on what the disk kept.
    let daemon = s.daemon();
    if kept.len() > 1 {
        refused_consumed(&s, &id, state, &what);
    } else {
        // Nothing was written: the recovery runs, once.
        let c = consumer(&s, &id, "grant2.cbor");
        wait_connected(&daemon.log, c.pid());
        let r = run(s.recover(&id[..6], CONSUMER_SECONDS_MAX, &[]));
        assert_eq!(
            r.code,
            Outcome::Success,
            "{what}: the recovery again: {}",
            r.stdout
        );
        assert_eq!(r.outcome()["outcome"], "granted", "{what}");
        let c = c.exit_within(
            CONSUMER_SECONDS_MAX,
            &format!("{what}: the second consumer"),
        );
        assert_eq!(c.code, Outcome::Success, "{what}: {}{}", c.stdout, c.stderr);
        let now = verify_log(&std::fs::read(&log).unwrap(), &issuer, Some(dep));
        assert_eq!(
            kinds(&now),
            ["genesis", "intent", "consume", "receipt"],
            "{what}"
        );
        assert!(
            s.path("grant2.cbor").exists(),
            "{what}: granted but nothing persisted"
        );
        grant_is_backed(&s.path("grant2.cbor"), &now, &what);
        refused_consumed(&s, &id, "receipted", &format!("{what}, third attempt"));
    }
    let end = verify_log(&std::fs::read(&log).unwrap(), &issuer, Some(dep));
    assert!(end.problem.is_none(), "{what}: {:?}", end.problem);
    drop(daemon);
}

pub(crate) fn every_issuance_barrier_has_a_power_cut_case_in_order() {
    let issuance: Vec<&str> = repoch_issuer::barrier::BARRIERS
        .iter()
        .copied()
        .take_while(|b| *b != "enroll-after-successor-check")
        .collect();
    let cases: Vec<&str> = CASES.iter().map(|(b, _)| *b).collect();
    assert_eq!(cases, issuance);
}

pub(crate) fn power_cut_after_open_writes_nothing_and_grants_once() {
    require_root!();
    power_cut_at("after-open");
}

pub(crate) fn power_cut_after_reserve_writes_nothing_and_grants_once() {
    require_root!();
    power_cut_at("after-reserve");
}

pub(crate) fn power_cut_after_observe_writes_nothing_and_grants_once() {
    require_root!();
    power_cut_at("after-observe");
}

pub(crate) fn power_cut_after_connect_writes_nothing_and_grants_once() {
    require_root!();
    power_cut_at("after-connect");
}

pub(crate) fn power_cut_before_intent_writes_nothing_and_grants_once() {
    require_root!();
    power_cut_at("before-intent");
}

pub(crate) fn power_cut_after_intent_keeps_the_epoch_intended_and_refused() {
    require_root!();
    power_cut_at("after-intent");
}

pub(crate) fn power_cut_after_custody_keeps_the_epoch_intended_and_refused() {
    require_root!();
    power_cut_at("after-custody");
}

pub(crate) fn power_cut_after_the_first_final_verification_keeps_the_epoch_intended_and_refused() {
    require_root!();
    power_cut_at("after-final-1");
}

pub(crate) fn power_cut_after_the_claim_keeps_the_epoch_intended_and_refused() {
    // Without a registry there is no claim to make: the same point as after-final-1, one
    // step on.
    require_root!();
    power_cut_at("after-claim");
}

pub(crate) fn power_cut_after_consume_keeps_the_epoch_consumed_and_refused() {
    require_root!();
    power_cut_at("after-consume");
}

pub(crate) fn power_cut_after_receipt_keeps_the_epoch_receipted_and_refused() {
    require_root!();
    power_cut_at("after-receipt");
}

pub(crate) fn power_cut_after_the_second_final_verification_keeps_the_epoch_receipted_and_refused()
{
    require_root!();
    power_cut_at("after-final-2");
}

pub(crate) fn power_cut_after_dispatch_keeps_the_receipt_the_persisted_grant_carries() {
    require_root!();
    power_cut_at("after-dispatch");
}

pub(crate) fn power_cut_after_the_acknowledgement_keeps_the_receipt_the_persisted_grant_carries() {
    require_root!();
    power_cut_at("after-acknowledgement");
}

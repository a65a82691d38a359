//! Issuance end to end: repochd, repoch recover and repoch-consume as real processes
//! against real files, locks, sockets and processes. Oracles are read independently: the
//! epoch log (status and audit), the consumer's persisted grant, and the fence held by the
//! process the consumer exec'd.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};

use repoch_tests_native::*;

// Shared with the other modules and with the `tooled` test binary (tests/tooled).
pub(crate) use repoch_tests_native::{finish, open_to_all, records, recover_bg, run, AtBarrier};

#[test]
#[ignore = "needs root"]
fn a_recovery_grants_once_and_the_new_root_holds_the_fences() {
    // Enroll; start repochd; the consumer connects (6-digit prefix) and exec's a helper
    // that reports and holds its inherited fence fds; recover runs with a 5-digit prefix.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let held = s.path("held.txt");
    let consumer = s.consumer(
        &id[..6],
        "consumer.key",
        "grant.cbor",
        &[
            bin("repoch-test-helper").to_str().unwrap(),
            "hold-fences",
            held.to_str().unwrap(),
        ],
    );
    let mut c = consumer;
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let before = unix_now();
    let r = run(s.recover(&id[..5], 20, &[]));
    assert_eq!(r.code, Outcome::Success, "{}\n{}", r.stdout, r.stderr);
    let out = r.outcome();
    assert_eq!(out["outcome"], "granted");
    // The progress stream shows each durable record as it is fsynced, in order.
    let kinds: Vec<String> = r
        .json_lines()
        .iter()
        .filter(|j| j["event"] == "record")
        .map(|j| j["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds, ["intent", "consume", "receipt"]);
    // It also shows the first observation's facts and each step as it happens.
    let lines = r.json_lines();
    assert!(
        lines.iter().any(|j| j["event"] == "fact"),
        "no fact shown: {}",
        r.stdout
    );
    let steps: Vec<&str> = lines
        .iter()
        .filter(|j| j["event"] == "progress")
        .filter_map(|j| j["step"].as_str())
        .collect();
    for step in ["observe", "evidence", "custody"] {
        assert!(steps.contains(&step), "{step} not shown: {steps:?}");
    }
    // Oracle 1: the epoch log, through status (8-digit prefix) and audit.
    assert_eq!(
        records(&s, &id[..8]),
        ["genesis", "intent", "consume", "receipt"]
    );
    assert_eq!(s.status(&id).json()["epoch"], "receipted");
    let a = s.repoch(&["--json", "audit", s.state_dir(&id).to_str().unwrap()]);
    assert_eq!(a.code, Outcome::Success, "{}", a.stdout);
    assert_eq!(a.json()["verified"], true);
    // Oracle 2: the consumer's persisted grant verifies offline and is the receipted one.
    let g = s.path("grant.cbor");
    let v = s.run(
        "repoch-consume",
        &[
            "--json",
            "verify",
            "--issuer-key",
            s.issuer_pub().to_str().unwrap(),
            g.to_str().unwrap(),
        ],
    );
    assert_eq!(v.code, Outcome::Success, "{}", v.stdout);
    assert_eq!(v.json()["grant"]["sha256"], out["grant"]["sha256"]);
    assert_eq!(v.json()["grant"]["deployment"], id.as_str());
    // Its issue time is the time of this recovery.
    let signed = <repoch_protocol::grant::SignedGrant as repoch_protocol::Canonical>::from_bytes(
        &std::fs::read(&g).unwrap(),
    )
    .unwrap();
    let issued = signed.grant.issued_at;
    assert!(
        (before..=unix_now()).contains(&issued),
        "issued at {issued}"
    );
    // Oracle 3: the exec'd new root holds the fence: its fd is the enrolled inode, and no
    // one else can lock it.
    let start = std::time::Instant::now();
    while !held.exists() {
        assert!(start.elapsed().as_secs() < 10, "the new root never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let line = std::fs::read_to_string(&held).unwrap();
    let st = std::fs::metadata(s.srv.join("lock")).unwrap();
    use std::os::unix::fs::MetadataExt as _;
    assert!(
        line.contains(&format!(":{}:{}", st.dev(), st.ino())),
        "{line}"
    );
    let o = helper(&["try-flock", s.srv.join("lock").to_str().unwrap()])
        .stderr(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "the fence was free while the new root runs"
    );
    let root_pid: u32 = line.split_whitespace().next().unwrap().parse().unwrap();
    kill_pid(root_pid);
    let _ = child.wait_with_output();
    // A second recovery is refused and writes nothing.
    let again = run(s.recover(&id[..5], 1, &[]));
    assert_eq!(again.code, Outcome::Refused, "{}", again.stdout);
    assert_eq!(again.reasons(), ["epoch-consumed"]);
    assert_eq!(records(&s, &id).len(), 4);
}

#[test]
#[ignore = "needs root"]
fn no_consumer_refuses_consumer_absent_and_writes_nothing() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let r = run(s.recover(&id, 1, &[]));
    assert_eq!(r.code, Outcome::Refused, "{}", r.stdout);
    assert_eq!(r.reasons(), ["consumer-absent"]);
    assert_eq!(records(&s, &id), ["genesis"]);
    assert_eq!(s.status(&id).json()["epoch"], "enrolled");
}

#[test]
#[ignore = "needs root"]
fn a_failed_observation_refuses_with_every_reason_and_writes_nothing() {
    // The fence is busy and READY is missing: both reasons, nothing written.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let _h = spawn_ready(helper(&["flock", s.srv.join("lock").to_str().unwrap()]));
    std::fs::remove_file(s.srv.join("READY")).unwrap();
    let r = run(s.recover(&id, 1, &[]));
    assert_eq!(r.code, Outcome::Refused);
    let mut reasons = r.reasons();
    reasons.sort();
    assert_eq!(reasons, ["fence-busy", "ready-missing"]);
    assert_eq!(records(&s, &id), ["genesis"]);
}

#[test]
#[ignore = "needs root"]
fn the_admin_socket_refuses_a_non_root_peer() {
    // By default the socket's mode keeps others out (admin-denied: the connect is refused
    // with EACCES); with the mode opened, repochd itself refuses the peer by SO_PEERCRED
    // (admin-denied too).
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    open_to_all(&s);
    let mut c = s.recover(&id, 1, &[]);
    c.uid(65534).gid(65534);
    let r = run(c);
    assert_first_refusal(&r, "admin-denied");
    std::fs::set_permissions(
        s.root.join("run/repoch/admin.sock"),
        std::fs::Permissions::from_mode(0o666),
    )
    .unwrap();
    let mut c = s.recover(&id, 1, &[]);
    c.uid(65534).gid(65534);
    let r = run(c);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.reasons(), ["admin-denied"]);
    assert_eq!(records(&s, &id), ["genesis"]);
}

#[test]
#[ignore = "needs root"]
fn a_wrong_uid_peer_is_rejected_burns_nothing_and_the_real_consumer_succeeds() {
    // An impostor (uid 65534, same executable) connects first; no deployment names its uid,
    // so it is refused consumer-rejected at accept, then the real consumer gets the grant.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = s.daemon();
    open_to_all(&s);
    let key = s.path("consumer.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(s.issuer_pub(), std::fs::Permissions::from_mode(0o644)).unwrap();
    // The impostor's --out is in a directory of its own (the consumer refuses one that
    // another user can write).
    let own = s.path("impostor");
    std::fs::create_dir(&own).unwrap();
    rustix::fs::chown(
        &own,
        Some(rustix::fs::Uid::from_raw(65534)),
        Some(rustix::fs::Gid::from_raw(65534)),
    )
    .unwrap();
    let mut imp = s.consumer(&id[..8], "consumer.key", "impostor/impostor.cbor", &[]);
    imp.uid(65534).gid(65534);
    let imp = imp
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    d.wait_log(&format!("pid={}", imp.id()));
    let rec = recover_bg(&s, &id[..8], 20);
    let imp = finish(imp);
    assert_eq!(imp.code, Outcome::Refused, "{}{}", imp.stdout, imp.stderr);
    assert!(imp.stdout.contains("consumer-rejected"), "{}", imp.stdout);
    assert!(!s.path("impostor/impostor.cbor").exists());
    assert_eq!(
        records(&s, &id),
        ["genesis"],
        "the impostor burned the epoch"
    );
    let real = finish(
        s.consumer(&id[..8], "consumer.key", "grant.cbor", &[])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert_eq!(
        real.code,
        Outcome::Success,
        "{}{}",
        real.stdout,
        real.stderr
    );
    let r = finish(rec);
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert_eq!(records(&s, &id).len(), 4);
}

#[test]
#[ignore = "needs root"]
fn a_peer_with_the_wrong_key_is_rejected_and_the_real_consumer_succeeds() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = s.daemon();
    s.keygen("stranger");
    let imp = s
        .consumer(&id, "stranger.key", "impostor.cbor", &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    d.wait_log(&format!("pid={}", imp.id()));
    let rec = recover_bg(&s, &id, 20);
    let imp = finish(imp);
    assert_eq!(imp.code, Outcome::Refused, "{}", imp.stdout);
    assert!(
        imp.stdout.contains("consumer-rejected") && imp.stdout.contains("key"),
        "{}",
        imp.stdout
    );
    let real = run(s.consumer(&id, "consumer.key", "grant.cbor", &[]));
    assert_eq!(
        real.code,
        Outcome::Success,
        "{}{}",
        real.stdout,
        real.stderr
    );
    assert_eq!(finish(rec).code, Outcome::Success);
    assert_eq!(records(&s, &id).len(), 4);
}

#[test]
#[ignore = "needs root"]
fn the_consumer_refuses_a_grant_signed_by_another_key() {
    // The consumer pins an issuer key that is not the host's: it receives the grant and
    // refuses it, persisting nothing.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    s.keygen("other");
    let mut c = s.cmd("repoch-consume");
    c.args(["--json", "receive", "--deployment", &id, "--key"])
        .arg(s.path("consumer.key"))
        .arg("--issuer-key")
        .arg(s.path("other.key.pub"))
        .arg("--out")
        .arg(s.path("grant.cbor"))
        .arg("--socket")
        .arg(s.grant_socket());
    let c = c.stdout(Stdio::piped()).spawn().unwrap();
    let r = run(s.recover(&id, 20, &[]));
    let c = finish(c);
    assert_eq!(c.code, Outcome::Refused, "{}", c.stdout);
    assert!(
        c.stdout.contains("not signed by the pinned issuer key"),
        "{}",
        c.stdout
    );
    assert!(!s.path("grant.cbor").exists());
    // repochd dispatched, and the consumer never acknowledged a durable grant: not granted
    // but "dispatched, not acknowledged" (uncertain, exit 3); the epoch stays receipted.
    assert_eq!(r.code, Outcome::Uncertain, "{}", r.stdout);
    assert_eq!(r.reasons(), ["consumer-lost"]);
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
}

#[test]
#[ignore = "needs root"]
fn a_lost_reply_after_the_receipt_is_uncertain_and_preserved() {
    // A consumer (enrolled as the helper binary) answers the challenge and shuts its
    // receiving side (still alive, still the described peer and the connection's sole
    // holder): the dispatch's send fails. Exit 3; the epoch stays receipted, never reissued.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll_with_helper_consumer();
    let d = s.daemon();
    let rogue = spawn_ready(helper(&[
        "rogue-consumer",
        s.grant_socket().to_str().unwrap(),
        &id[..4],
        s.path("consumer.key").to_str().unwrap(),
    ]));
    d.wait_log(&format!("pid={}", rogue.pid()));
    let r = run(s.recover(&id, 10, &[]));
    assert_eq!(r.code, Outcome::Uncertain, "{}", r.stdout);
    assert_eq!(r.outcome()["outcome"], "uncertain");
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
    let again = run(s.recover(&id, 1, &[]));
    assert_eq!(again.code, Outcome::Refused);
    assert_eq!(again.reasons(), ["epoch-consumed"]);
}

#[test]
#[ignore = "needs root"]
fn a_held_issuer_lock_is_busy_and_names_the_holder() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let _d = s.daemon();
    let h = spawn_ready(helper(&[
        "flock",
        s.state_dir(&id).join("issuer.lock").to_str().unwrap(),
    ]));
    let r = run(s.recover(&id, 1, &[]));
    assert_eq!(r.code, Outcome::Busy, "{}", r.stdout);
    assert_eq!(r.reasons(), ["issuer-busy"]);
    assert!(
        r.outcome()["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {} ", h.pid())),
        "{}",
        r.stdout
    );
}

#[test]
#[ignore = "needs root"]
fn usage_errors_exit_64_and_a_malformed_daemon_reply_exits_70() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let r = run(s.recover(&id, 1, &["--approve-ready", "not-a-digest"]));
    assert_eq!(r.code, Outcome::Usage, "{}", r.stdout);
    let r = s.repoch(&["recover"]);
    assert_eq!(r.code, Outcome::Usage);
    // A fake repochd that answers with a malformed message.
    std::fs::create_dir_all(s.root.join("run/repoch")).unwrap();
    let _fake = spawn_ready(helper(&[
        "serve-garbage",
        s.root.join("run/repoch/admin.sock").to_str().unwrap(),
    ]));
    let r = run(s.recover(&id, 1, &[]));
    assert_eq!(r.code, Outcome::Internal, "{}{}", r.stdout, r.stderr);
}

#[test]
#[ignore = "needs root"]
fn an_ambiguous_prefix_is_refused_with_the_candidates() {
    require_root!();
    let s = Sandbox::new();
    let mut ids: Vec<String> = Vec::new();
    // Enroll until two ids share their first digit (a few tries).
    let shared = loop {
        repoch_tests_native::clear_append_only(&s.srv);
        let _ = std::fs::remove_file(s.srv.join("journal"));
        let id = s.enroll();
        if let Some(other) = ids.iter().find(|o| o[..1] == id[..1]) {
            break (other.clone(), id);
        }
        ids.push(id);
        assert!(ids.len() <= 17, "pigeonhole");
    };
    let r = s.status(&shared.0[..1]);
    assert_eq!(r.code, Outcome::Refused, "{}", r.stdout);
    let j = r.json();
    assert_eq!(j["refusals"][0]["reason"], "deployment-ambiguous");
    let observed = j["refusals"][0]["observed"].as_str().unwrap();
    assert!(
        observed.contains(&shared.0) && observed.contains(&shared.1),
        "{observed}"
    );
    // The full id, and a unique longer prefix, still work.
    assert_eq!(s.status(&shared.1).code, Outcome::Success);
    let r = run(s.recover("zz", 1, &[]));
    assert_eq!(r.code, Outcome::Refused);
}

#[test]
#[ignore = "needs root"]
fn the_demo_runs_a_granted_recovery_and_cleans_up() {
    // The README's first command: a whole sandboxed recovery with the real binaries.
    require_root!();
    let before: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    let r: Run = Command::new(bin("repoch-demo"))
        .args(["--json"])
        .env_remove("REPOCH_ROOT")
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, Outcome::Success, "{}\n{}", r.stdout, r.stderr);
    let last = r.json();
    assert_eq!(last["demo"], "ok", "{last}");
    assert_eq!(last["refused_while_old_root_lived"], true);
    assert_eq!(last["granted"], true);
    assert_eq!(last["second_recovery_refused"], true);
    assert_eq!(last["audit_verified"], true);
    let after: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    let leaked: Vec<_> = after
        .iter()
        .filter(|n| !before.contains(n) && n.to_string_lossy().starts_with("repoch-demo-"))
        .collect();
    assert!(leaked.is_empty(), "the demo left {leaked:?}");
}

#[test]
#[ignore = "needs root"]
fn repochd_serves_socket_activated_sockets_notifies_systemd_and_stops_on_sigterm() {
    // systemd-socket-activate listens on both paths and execs repochd on the first
    // connection with LISTEN_FDS/LISTEN_FDNAMES: the recovery runs through the inherited
    // sockets. NOTIFY_SOCKET receives READY=1, then STOPPING=1 on SIGTERM; exit 0.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let run_dir = s.root.join("run/repoch");
    std::fs::create_dir_all(&run_dir).unwrap();
    let notify_path = s.path("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let mut act = Command::new("systemd-socket-activate");
    act.arg("-l")
        .arg(run_dir.join("admin.sock"))
        .arg("-l")
        .arg(run_dir.join("grant.sock"))
        .arg("--fdname=admin:grant");
    act.arg("-E")
        .arg(format!("REPOCH_ROOT={}", s.root.display()))
        .arg("-E")
        .arg(format!("NOTIFY_SOCKET={}", notify_path.display()));
    act.arg(bin("repochd"));
    let mut daemon = act
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("systemd-socket-activate");
    let start = std::time::Instant::now();
    while !run_dir.join("grant.sock").exists() {
        assert!(
            start.elapsed().as_secs() < 10,
            "systemd-socket-activate did not listen"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let c = s
        .consumer(&id[..7], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let r = run(s.recover(&id[..7], 20, &[]));
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    assert_eq!(finish(c).code, Outcome::Success);
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("READY=1"));
    // The daemon bound nothing itself: the sockets are the ones systemd-socket-activate made.
    let pid = rustix::process::Pid::from_raw(daemon.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let mut stopping = false;
    while let Ok(n) = notify.recv(&mut buf) {
        if String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1") {
            stopping = true;
            break;
        }
    }
    assert!(stopping, "no STOPPING=1");
    let status = daemon.wait().unwrap();
    assert_eq!(
        status.code().map(Exit),
        Some(Exit::of(Outcome::Success)),
        "repochd did not stop cleanly"
    );
    let _ = daemon.stderr.take();
}

#[test]
#[ignore = "needs root"]
fn the_shipped_example_manifest_enrolls() {
    // docs/examples/billing.toml, with its paths moved into the sandbox, enrolls as is.
    require_root!();
    let s = Sandbox::new();
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/examples/billing.toml"
    ))
    .unwrap();
    let m = text
        .replace(
            "/srv/billing/data",
            &s.srv.join("data").display().to_string(),
        )
        .replace("/srv/billing/", &format!("{}/", s.srv.display()))
        .replace(
            "/etc/billing/producer.key.pub",
            &s.path("producer.key.pub").display().to_string(),
        )
        .replace(
            "/etc/billing/consumer.key.pub",
            &s.path("consumer.key.pub").display().to_string(),
        )
        .replace(
            "/usr/bin/repoch-consume",
            &bin("repoch-consume").display().to_string(),
        );
    let id = s.enroll_with(&m);
    assert_eq!(s.status(&id).json()["label"], "billing-root");
}

#[test]
#[ignore = "needs root"]
fn the_demo_as_another_user_runs_the_offline_parts_and_says_what_it_skipped() {
    require_root!();
    let mut c = Command::new(bin("repoch-demo"));
    c.args(["--json"])
        .env_remove("REPOCH_ROOT")
        .uid(65534)
        .gid(65534);
    let r = run(c);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    let j = r.json();
    assert_eq!(j["demo"], "offline");
    assert_eq!(j["flipped_byte"], "lineage-mutated");
    assert_eq!(j["checkpoint_verified"], true);
    assert!(j["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s == "recover"));
}

/// `kill -9` of repochd stopped at `barrier` (a named publication point), then the oracles:
/// the client and the consumer learn no grant; the log holds exactly `kept`; a restarted
/// repochd recovers again only if nothing was written, else refuses epoch-consumed and
/// appends nothing.
fn crash_at(barrier: &str, kept: &[&str]) {
    let s = Sandbox::new();
    let id = s.enroll();
    let d = AtBarrier::start(&s, barrier);
    let consumer = s
        .consumer(&id[..6], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rec = recover_bg(&s, &id[..6], 20);
    d.reached();
    drop(d); // SIGKILL
    let r = finish(rec);
    assert_eq!(
        r.code,
        Outcome::Uncertain,
        "{barrier}: the client must report uncertain: {}",
        r.stdout
    );
    let c = finish(consumer);
    // The consumer's exit follows docs/EXIT-CODES.md: before repochd challenged it no grant
    // can exist (2); once it answered the challenge, the connection lost is uncertain (3).
    let challenged = !matches!(barrier, "after-connect" | "after-intent");
    assert_eq!(
        c.code,
        if challenged {
            Outcome::Uncertain
        } else {
            Outcome::Refused
        },
        "{barrier}: the consumer's exit: {}",
        c.stdout
    );
    assert!(
        !s.path("grant.cbor").exists(),
        "{barrier}: a grant was persisted"
    );
    assert_eq!(records(&s, &id), kept, "{barrier}");
    // Restart: the epoch is used once anything was written; never repaired, never reissued.
    let _d = s.daemon();
    let mut c2 = s
        .consumer(&id[..6], "consumer.key", "grant2.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let fresh = kept.len() == 1;
    let again = run(s.recover(&id[..6], if fresh { 20 } else { 1 }, &[]));
    if fresh {
        assert_eq!(
            again.code,
            Outcome::Success,
            "{barrier}: nothing was written, the recovery may run: {}",
            again.stdout
        );
        assert_eq!(finish(c2).code, Outcome::Success);
    } else {
        assert_eq!(again.code, Outcome::Refused, "{barrier}: {}", again.stdout);
        assert_eq!(again.reasons(), ["epoch-consumed"]);
        assert_eq!(
            records(&s, &id),
            kept,
            "{barrier}: a refused recovery appended"
        );
        let _ = c2.kill();
        let _ = c2.wait();
    }
}

#[test]
#[ignore = "needs root"]
fn kill_after_connect_writes_nothing_and_the_epoch_stays_recoverable() {
    require_root!();
    crash_at("after-connect", &["genesis"]);
}

#[test]
#[ignore = "needs root"]
fn kill_after_intent_leaves_the_epoch_intended() {
    require_root!();
    crash_at("after-intent", &["genesis", "intent"]);
}

#[test]
#[ignore = "needs root"]
fn kill_after_custody_leaves_the_epoch_intended() {
    require_root!();
    crash_at("after-custody", &["genesis", "intent"]);
}

#[test]
#[ignore = "needs root"]
fn kill_after_the_first_final_verification_leaves_the_epoch_intended() {
    require_root!();
    crash_at("after-final-1", &["genesis", "intent"]);
}

#[test]
#[ignore = "needs root"]
fn kill_after_consume_leaves_the_epoch_consumed() {
    require_root!();
    crash_at("after-consume", &["genesis", "intent", "consume"]);
}

#[test]
#[ignore = "needs root"]
fn kill_after_receipt_leaves_the_epoch_receipted_without_a_grant_sent() {
    require_root!();
    crash_at(
        "after-receipt",
        &["genesis", "intent", "consume", "receipt"],
    );
}

#[test]
#[ignore = "needs root"]
fn kill_after_the_second_final_verification_leaves_the_epoch_receipted() {
    require_root!();
    crash_at(
        "after-final-2",
        &["genesis", "intent", "consume", "receipt"],
    );
}

/// The consumer side of a refusal test: the real `repoch-consume` with a command that would
/// create a marker file, or the helper's `peek-consumer` (enrolled as the consumer
/// executable, with the real key) that peeks what repochd queued before reading it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Side {
    Real,
    Peek,
}

impl Side {
    pub(crate) const BOTH: [Side; 2] = [Side::Real, Side::Peek];

    /// The enrolled consumer executable.
    pub(crate) fn exe(self) -> std::path::PathBuf {
        match self {
            Side::Real => bin("repoch-consume"),
            Side::Peek => bin("repoch-test-helper"),
        }
    }

    /// The sandbox's manifest with `extra`, this side's executable as the consumer.
    pub(crate) fn manifest(self, s: &Sandbox, extra: &str) -> String {
        s.manifest(extra).replace(
            &bin("repoch-consume").display().to_string(),
            &self.exe().display().to_string(),
        )
    }

    pub(crate) fn enroll(self, s: &Sandbox, extra: &str) -> String {
        s.enroll_with(&self.manifest(s, extra))
    }
}

/// A consumer of either side, started from `exe` (the enrolled executable or a copy).
pub(crate) enum Consumer {
    Real(std::process::Child),
    Peek(Proc),
}

impl Consumer {
    pub(crate) fn start(s: &Sandbox, id: &str, side: Side, exe: &std::path::Path) -> Consumer {
        Consumer::start_mode(s, id, side, exe, "answer")
    }

    /// `mode`: the peek consumer's answer to the challenge (answer, wrong-key, half-close).
    pub(crate) fn start_mode(
        s: &Sandbox,
        id: &str,
        side: Side,
        exe: &std::path::Path,
        mode: &str,
    ) -> Consumer {
        match side {
            Side::Real => {
                let marker = s.path("marker");
                Consumer::Real(
                    s.consumer_from(
                        exe,
                        &id[..6],
                        "consumer.key",
                        "grant.cbor",
                        &["/usr/bin/touch", marker.to_str().unwrap()],
                    )
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
                )
            }
            Side::Peek => {
                let mut c = Command::new(exe);
                c.args(["peek-consumer"])
                    .arg(s.grant_socket())
                    .arg(&id[..6])
                    .arg(s.path("consumer.key"))
                    .arg(s.path("peek.json"))
                    .arg(mode);
                Consumer::Peek(spawn_ready(c))
            }
        }
    }

    /// The consumer's end, with the proof that no grant byte reached it: the real consumer
    /// exits non-zero, persisted no grant and never started its command (no marker); the
    /// peek consumer found a `refused` frame queued first, and nothing else, no grant frame
    /// and no fd, when it read to EOF. Returns the real consumer's run (exit, stdout).
    pub(crate) fn refused_without_a_grant_byte(self, s: &Sandbox, reason: &str) -> Option<Run> {
        match self {
            Consumer::Real(c) => {
                let r = finish(c);
                assert_ne!(
                    r.code,
                    Outcome::Success,
                    "the consumer succeeded: {}",
                    r.stdout
                );
                assert!(!s.path("grant.cbor").exists(), "a grant was persisted");
                assert!(
                    !s.path("marker").exists(),
                    "the consumer started its command: a grant reached it"
                );
                Some(r)
            }
            Consumer::Peek(mut p) => {
                let status = p.child.wait().unwrap();
                let report = std::fs::read_to_string(s.path("peek.json")).unwrap_or_default();
                assert!(status.success(), "peek-consumer: {status}: {report}");
                let j: serde_json::Value =
                    serde_json::from_str(report.trim()).unwrap_or_else(|e| panic!("{e}: {report}"));
                assert_eq!(j["peeked"][0], "refused", "queued first: {j}");
                assert_eq!(
                    j["frames"],
                    serde_json::json!(["refused"]),
                    "read to EOF: {j}"
                );
                assert_eq!(j["fds"], 0, "fds passed with the refusal: {j}");
                assert_eq!(j["reason"], reason, "{j}");
                None
            }
        }
    }
}

/// repochd stopped at `barrier`; the world changes (`mutate`); repochd continues. The next
/// final verification must see it: `withheld{evidence-changed}` appended after `kept`,
/// nothing granted, the consumer refused without a grant byte; `naming` appears in the
/// refusal.
fn late_mutation(
    s: &Sandbox,
    id: &str,
    side: Side,
    barrier: &str,
    mutate: impl FnOnce(),
    kept: &[&str],
    naming: &str,
) {
    late_mutation_with(s, id, side, barrier, mutate, kept, naming, &side.exe());
}

#[allow(clippy::too_many_arguments)]
fn late_mutation_with(
    s: &Sandbox,
    id: &str,
    side: Side,
    barrier: &str,
    mutate: impl FnOnce(),
    kept: &[&str],
    naming: &str,
    consumer_exe: &std::path::Path,
) {
    let d = AtBarrier::start(s, barrier);
    let consumer = Consumer::start(s, id, side, consumer_exe);
    let rec = recover_bg(s, &id[..6], 20);
    d.reached();
    mutate();
    d.signal(rustix::process::Signal::CONT);
    let r = finish(rec);
    assert_eq!(r.code, Outcome::Refused, "{barrier}: {}", r.stdout);
    assert_eq!(r.reasons(), ["evidence-changed"], "{barrier}");
    assert!(
        r.outcome()["detail"].as_str().unwrap().contains(naming),
        "{}",
        r.stdout
    );
    if let Some(c) = consumer.refused_without_a_grant_byte(s, "evidence-changed") {
        assert_eq!(c.code, Outcome::Refused, "{barrier}: {}", c.stdout);
        assert!(c.stdout.contains("evidence-changed"), "{}", c.stdout);
    }
    let mut want: Vec<&str> = kept.to_vec();
    want.push("withheld");
    assert_eq!(records(s, id), want, "{barrier}");
    assert_eq!(
        s.status(id).json()["records"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["reason"],
        "evidence-changed"
    );
}

#[test]
#[ignore = "needs root"]
fn ready_changed_after_the_intent_is_withheld_at_the_first_final_verification() {
    require_root!();
    for side in Side::BOTH {
        let s = Sandbox::new();
        let id = side.enroll(&s, "");
        let ready = s.srv.join("READY");
        late_mutation(
            &s,
            &id,
            side,
            "after-intent",
            || std::fs::write(&ready, b"tampered\n").unwrap(),
            &["genesis", "intent"],
            "ready",
        );
    }
}

#[test]
#[ignore = "needs root"]
fn a_listener_appearing_after_the_receipt_is_withheld_at_the_second_final_verification() {
    // repochd holds the enrolled path from its first observation on: no one else can bind
    // it. The old controller, root, removes repochd's socket file and binds its own there
    // between the receipt and the second verification (only root or the old root's uids
    // can write the directory): the grant is recorded but never dispatched.
    require_root!();
    for side in Side::BOTH {
        let s = Sandbox::new();
        let sock = s.path("old.sock");
        let id = side.enroll(
            &s,
            &format!("[containment]\nlisteners = [\"unix:{}\"]", sock.display()),
        );
        let mut old = None;
        late_mutation(
            &s,
            &id,
            side,
            "after-receipt",
            || {
                std::fs::remove_file(&sock).unwrap();
                old = Some(spawn_ready(helper(&[
                    "listen-unix",
                    sock.to_str().unwrap(),
                ])))
            },
            &["genesis", "intent", "consume", "receipt"],
            "listener",
        );
    }
}

#[test]
#[ignore = "needs root"]
fn a_second_repochd_on_the_same_root_refuses_to_start() {
    // It must not take over the live daemon's sockets.
    require_root!();
    let s = Sandbox::new();
    let _d = s.daemon();
    let r = s.run("repochd", &[]);
    assert_eq!(r.code, Outcome::Internal, "{}", r.stderr);
    assert!(
        r.stderr.contains("another repochd is listening"),
        "{}",
        r.stderr
    );
}

#[test]
#[ignore = "needs root"]
fn a_fence_replaced_after_the_intent_is_withheld() {
    require_root!();
    for side in Side::BOTH {
        let s = Sandbox::new();
        let id = side.enroll(&s, "");
        let lock = s.srv.join("lock");
        let swap = || rename_over(&lock, b"");
        late_mutation(
            &s,
            &id,
            side,
            "after-intent",
            swap,
            &["genesis", "intent"],
            "fence",
        );
    }
}

#[test]
#[ignore = "needs root"]
fn a_store_replaced_after_custody_is_withheld() {
    require_root!();
    for side in Side::BOTH {
        let s = Sandbox::new();
        let id = side.enroll(&s, "");
        let data = s.srv.join("data");
        let swap = || rename_over(&data, b"the store");
        late_mutation(
            &s,
            &id,
            side,
            "after-custody",
            swap,
            &["genesis", "intent"],
            "store",
        );
    }
}

#[test]
#[ignore = "needs root"]
fn the_old_root_appending_to_its_journal_after_the_intent_is_withheld() {
    // The old root is still acting: its journal's frontier moved.
    require_root!();
    for side in Side::BOTH {
        let s = Sandbox::new();
        let id = side.enroll(&s, "");
        let j = s.srv.join("journal");
        let key = s.path("producer.key");
        let append = || {
            let r = s.repoch(&[
                "journal",
                "append",
                "--journal",
                j.to_str().unwrap(),
                "--key",
                key.to_str().unwrap(),
                "--deployment",
                &id,
                "op-begin",
                "late write",
            ]);
            assert_eq!(r.code, Outcome::Success, "{}", r.stderr);
        };
        late_mutation(
            &s,
            &id,
            side,
            "after-intent",
            append,
            &["genesis", "intent"],
            // The frontier fact still holds (a valid, longer journal) but changed: it is
            // the one named, with its subject, not the first fact of the set (`lineage`).
            &format!("lineage-frontier {}", s.srv.join("journal").display()),
        );
    }
}

#[test]
#[ignore = "needs root"]
fn a_contained_executable_started_after_the_intent_is_withheld() {
    require_root!();
    for side in Side::BOTH {
        let s = Sandbox::new();
        let exe = s.srv.join("old-root");
        unique_copy(&bin("repoch-test-helper"), &exe, &s.tag);
        let id = side.enroll(
            &s,
            &format!("[containment]\nexecutables = [\"{}\"]", exe.display()),
        );
        // The old root started again: its exec waits for repochd's exec hold (repochd is
        // stopped at the barrier), which denies it once it goes on.
        let mut old = None;
        let start = || {
            old = Some(exec_held(&exe, &["threads"]));
        };
        late_mutation(
            &s,
            &id,
            side,
            "after-intent",
            start,
            &["genesis", "intent"],
            "process",
        );
    }
}

#[test]
#[ignore = "needs root"]
fn a_fact_that_changes_while_the_consumer_is_awaited_is_refused_before_the_intent() {
    // The first observation can be minutes before the consumer connects: the old root
    // starts again in that window (repochd stopped right after the connect, before the
    // intent). It is observed again right before the intent: refused with the fact's own
    // reason, nothing written, the epoch still enrolled: the operator retries.
    require_root!();
    for side in Side::BOTH {
        let s = Sandbox::new();
        let exe = s.srv.join("old-root");
        unique_copy(&bin("repoch-test-helper"), &exe, &s.tag);
        let id = side.enroll(
            &s,
            &format!("[containment]\nexecutables = [\"{}\"]", exe.display()),
        );
        let d = AtBarrier::start(&s, "after-connect");
        let consumer = Consumer::start(&s, &id, side, &side.exe());
        let rec = recover_bg(&s, &id[..6], 20);
        d.reached();
        let old = exec_held(&exe, &["threads"]);
        d.signal(rustix::process::Signal::CONT);
        let r = finish(rec);
        assert_eq!(r.code, Outcome::Refused, "{}", r.stdout);
        assert_eq!(r.reasons(), ["escaped-task"], "{}", r.stdout);
        match consumer {
            Consumer::Real(c) => {
                let c = finish(c);
                assert_eq!(c.code, Outcome::Refused, "{}{}", c.stdout, c.stderr);
                assert!(!s.path("grant.cbor").exists(), "a grant was persisted");
            }
            // Refused before any challenge: the test consumer reports what came instead.
            Consumer::Peek(mut p) => {
                p.child.wait().unwrap();
                let report = std::fs::read_to_string(s.path("peek.json")).unwrap_or_default();
                assert!(
                    report.contains("before-challenge") && report.contains("EscapedTask"),
                    "{report}"
                );
            }
        }
        assert_eq!(records(&s, &id), ["genesis"]);
        assert_eq!(s.status(&id).json()["epoch"], "enrolled");
        drop(old);
    }
}

#[test]
#[ignore = "needs root"]
fn a_process_entering_the_contained_cgroup_after_consume_is_withheld_after_the_receipt() {
    require_root!();
    for side in Side::BOTH {
        let s = Sandbox::new();
        let name = format!("repoch-test-{}", s.tag);
        let cg = Cgroup::new(&name);
        let id = side.enroll(&s, &format!("[containment]\ncgroups = [\"{}\"]", cg.rel));
        let mut old = None;
        let enter = || {
            let p = spawn_ready(helper(&["threads"]));
            cg.add(p.pid());
            old = Some(p);
        };
        late_mutation(
            &s,
            &id,
            side,
            "after-consume",
            enter,
            &["genesis", "intent", "consume", "receipt"],
            "cgroup",
        );
    }
}

#[test]
#[ignore = "needs root"]
fn the_consumer_executable_replaced_after_the_intent_is_withheld() {
    require_root!();
    for side in Side::BOTH {
        let s = Sandbox::new();
        let exe = s.srv.join("consume");
        copy_executable(&side.exe(), &exe, "");
        let id = s.enroll_with(&s.manifest("").replace(
            &bin("repoch-consume").display().to_string(),
            &exe.display().to_string(),
        ));
        let swap = || rename_copy_over(&exe);
        // The consumer process runs the old inode (authenticated before the intent).
        late_mutation_with(
            &s,
            &id,
            side,
            "after-intent",
            swap,
            &["genesis", "intent"],
            "consumer-exe",
            &exe,
        );
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Bytes a process has read (`rchar` in `/proc/PID/io`: every `read`, files and sockets).
fn bytes_read(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .unwrap()
        .parse()
        .unwrap()
}

/// CPU time a process has used (utime + stime in `/proc/PID/stat`), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after_comm.split_whitespace().collect();
    // Fields 14 and 15 of stat(5), counted from the state (field 3) here.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
#[ignore = "needs root"]
fn a_granted_recovery_reads_the_consumer_executable_at_most_twice() {
    // The consumer executable is hashed once per issuance (the first observation, with the
    // file held open); the two final verifications and the peer's /proc/PID/exe at the
    // connect, before the intent and before the dispatch prove it unchanged by its stamp
    // and read nothing. A fresh repochd has nothing remembered when the consumer connects,
    // so it reads it once more then: at most two reads of it in all (six before).
    require_root!();
    let s = Sandbox::new();
    let exe = s.srv.join("consume");
    copy_executable(&bin("repoch-consume"), &exe, "");
    let size = std::fs::metadata(&exe).unwrap().len();
    let id = s.enroll_with(&s.manifest("").replace(
        &bin("repoch-consume").display().to_string(),
        &exe.display().to_string(),
    ));
    // Older than the margin after which a change time is a proof.
    std::thread::sleep(std::time::Duration::from_millis(
        repoch_sys::digest::CHANGE_SETTLED_MS + 200,
    ));
    let d = s.daemon();
    let before = bytes_read(d.child.id());
    let cpu_before = cpu_ticks(d.child.id());
    let started = std::time::Instant::now();
    let consumer = s
        .consumer_from(
            &exe,
            &id[..6],
            "consumer.key",
            "grant.cbor",
            &["/usr/bin/true"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let r = run(s.recover(&id[..6], 20, &[]));
    assert_eq!(r.code, Outcome::Success, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.outcome()["outcome"], "granted");
    let c = finish(consumer);
    assert_eq!(c.code, Outcome::Success, "{}", c.stderr);
    let read = bytes_read(d.child.id()) - before;
    let ticks = cpu_ticks(d.child.id()) - cpu_before;
    eprintln!(
        "repochd read {read} bytes during the recovery; the consumer executable is {size} bytes ({:.2} times); recover took {:?}, repochd used {ticks} CPU ticks",
        read as f64 / size as f64,
        started.elapsed()
    );
    assert!(
        read < 2 * size + size / 4,
        "repochd read {read} bytes, {:.2} times the consumer executable's {size}",
        read as f64 / size as f64
    );
}

//! The observers against real OS objects (docs/ARCHITECTURE.md, "Issuance", step 2): each reason
//! code produced by a real object, next to the passing case. Observations run through the
//! real `repoch observe` binary (a separate process, in a network namespace where a port is
//! involved); the oracle is the JSON list of facts it prints.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;

use repoch_tests_native::*;

fn set_append_only(p: &std::path::Path) {
    let f = std::fs::File::open(p).unwrap();
    repoch_sys::fs::set_append_only(&f).unwrap();
}

// ---- lineage ----

#[test]
#[ignore = "needs root"]
fn an_unchanged_world_observes_the_same_digest_twice() {
    // Two separate observer processes, an unchanged world: every fact holds, same digest.
    // Then one fact changes (READY content), and the digest changes with it.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let a = s.observe(&id);
    assert_holds(&a);
    let b = s.observe(&id);
    assert_eq!(a.json()["digest"], b.json()["digest"]);
    std::fs::write(s.srv.join("READY"), b"v2\n").unwrap();
    let c = s.observe(&id);
    assert_holds(&c);
    assert_ne!(
        a.json()["digest"],
        c.json()["digest"],
        "a changed fact left the digest unchanged"
    );
}

#[test]
#[ignore = "needs root"]
fn journal_frontier_and_unknown_operations_are_observed() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let j = s.srv.join("journal");
    let key = s.path("producer.key");
    let append = |args: &[&str]| {
        let mut a = vec![
            "--json",
            "journal",
            "append",
            "--journal",
            j.to_str().unwrap(),
            "--key",
            key.to_str().unwrap(),
            "--deployment",
            &id[..6],
        ];
        a.extend_from_slice(args);
        let r = s.repoch(&a);
        assert_eq!(r.code, Outcome::Success, "{}", r.stderr);
        r.json()
    };
    append(&["root-start"]);
    let op = append(&["op-begin", "charge batch 7"])["op"]
        .as_u64()
        .unwrap();
    append(&["op-end", &op.to_string(), "unknown"]);
    let op2 = append(&["op-begin", "refund"])["op"].as_u64().unwrap();
    let r = s.observe(&id);
    assert_holds(&r);
    let v = r.json();
    assert_eq!(v["frontier"]["seq"], 4);
    let unknown: Vec<u64> = v["unknown_ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["op"].as_u64().unwrap())
        .collect();
    assert_eq!(unknown, vec![op, op2]);
    assert_eq!(v["unknown_ops"][0]["name"], "charge batch 7");
}

#[test]
#[ignore = "needs root"]
fn missing_journal_is_lineage_missing() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    unset_append_only(&s.srv.join("journal"));
    std::fs::remove_file(s.srv.join("journal")).unwrap();
    assert_refused(&s.observe(&id), "lineage-missing");
}

#[test]
#[ignore = "needs root"]
fn replaced_journal_is_lineage_replaced() {
    // A byte-identical copy, append-only too, renamed over the journal.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let j = s.srv.join("journal");
    unset_append_only(&j);
    rename_copy_over(&j);
    set_append_only(&j);
    assert_refused(&s.observe(&id), "lineage-replaced");
}

#[test]
#[ignore = "needs root"]
fn journal_without_append_only_flag_is_unprotected() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    unset_append_only(&s.srv.join("journal"));
    assert_refused(&s.observe(&id), "lineage-unprotected");
}

#[test]
#[ignore = "needs root"]
fn torn_journal_is_lineage_torn() {
    // Half a frame appended (O_APPEND works on an append-only file): a producer crash.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(s.srv.join("journal"))
        .unwrap()
        .write_all(&[0, 0, 0, 80, 1, 2])
        .unwrap();
    assert_refused(&s.observe(&id), "lineage-torn");
}

#[test]
#[ignore = "needs root"]
fn byte_flipped_journal_is_lineage_mutated() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let j = s.srv.join("journal");
    let r = s.repoch(&[
        "journal",
        "append",
        "--journal",
        j.to_str().unwrap(),
        "--key",
        s.path("producer.key").to_str().unwrap(),
        "--deployment",
        &id,
        "op-begin",
        "migrate",
    ]);
    assert_eq!(r.code, Outcome::Success, "{}", r.stderr);
    unset_append_only(&j);
    let mut b = std::fs::read(&j).unwrap();
    let at = b.windows(7).position(|w| w == b"migrate").unwrap();
    b[at] ^= 0x20;
    std::fs::write(&j, &b).unwrap();
    set_append_only(&j);
    assert_refused(&s.observe(&id), "lineage-mutated");
}

#[test]
#[ignore = "needs root"]
fn record_signed_by_a_foreign_key_is_lineage_forged() {
    // A well-formed, correctly chained record signed by a key that is not the producer's.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let j = s.srv.join("journal");
    let bytes = std::fs::read(&j).unwrap();
    let issuer =
        repoch_issuer::store::issuer_public(&repoch_issuer::Layout::new(Some(&s.root))).unwrap();
    let dep = repoch_protocol::DeploymentId::from_hex(&id).unwrap();
    let producer = repoch_issuer::keys::read_public(&s.path("producer.key.pub")).unwrap();
    let pins = repoch_protocol::journal::JournalPins {
        deployment: dep,
        issuer: &issuer,
        producer: &producer,
        genesis: None,
    };
    let f = repoch_protocol::journal::verify_journal(&bytes, pins).unwrap();
    let foreign = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
    let (frame, _) = repoch_protocol::journal::next_frame(
        dep,
        Some((f.last_seq, f.last_hash)),
        repoch_protocol::journal::JournalBody::RootStart { pid: 1 },
        &foreign,
    );
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&j)
        .unwrap()
        .write_all(&frame)
        .unwrap();
    assert_refused(&s.observe(&id), "lineage-forged");
}

#[test]
#[ignore = "needs root"]
fn journal_copied_from_another_deployment_is_lineage_foreign() {
    require_root!();
    let a = Sandbox::new();
    let ida = a.enroll();
    let b = Sandbox::new();
    b.enroll();
    let ja = a.srv.join("journal");
    unset_append_only(&ja);
    std::fs::write(&ja, std::fs::read(b.srv.join("journal")).unwrap()).unwrap();
    set_append_only(&ja);
    assert_refused(&a.observe(&ida), "lineage-foreign");
}

#[test]
#[ignore = "needs root"]
fn missing_or_replaced_store_is_refused() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let data = s.srv.join("data");
    rename_over(&data, b"the store");
    assert_refused(&s.observe(&id), "store-replaced");
    std::fs::remove_file(&data).unwrap();
    assert_refused(&s.observe(&id), "store-missing");
}

#[test]
#[ignore = "needs root"]
fn predecessor_link_is_verified_against_the_predecessors_log() {
    // A's epoch is used (intent, withheld), B succeeds A; B observes A's log ending in the
    // linked hash. Then A's log is altered, and B's predecessor fact fails.
    require_root!();
    let s = Sandbox::new();
    let a = s.enroll();
    s.use_epoch(&a);
    // The successor: new journal and fixtures in a sibling directory of the same root.
    let m = s
        .manifest(&format!("predecessor = \"{}\"", &a[..8]))
        .replace(
            &format!("{}/journal", s.srv.display()),
            &format!("{}/journal2", s.srv.display()),
        );
    let b = s.enroll_with(&m);
    assert_holds(&s.observe(&b));
    let log = s.log(&a);
    unset_append_only(&log);
    let mut bytes = std::fs::read(&log).unwrap();
    let n = bytes.len() - 3;
    bytes[n] ^= 1;
    std::fs::write(&log, &bytes).unwrap();
    assert_refused(&s.observe(&b), "predecessor-mismatch");
}

// ---- containment: cgroups ----

#[test]
#[ignore = "needs root"]
fn cgroup_containment_sees_processes_threads_and_zombie_leaders() {
    // A real per-test cgroup: absent and empty hold; a live process, a leader that exited
    // while its thread lives, and a thread moved to a threaded child are all refused.
    require_root!();
    let s = Sandbox::new();
    let name = format!("repoch-test-{}", s.tag);
    let cg_rel = format!("/{name}/ctl");
    let id = s.enroll_with(&s.manifest(&format!("[containment]\ncgroups = [\"{cg_rel}\"]")));
    assert_holds(&s.observe(&id)); // absent
    let parent = Cgroup::new(&name);
    let cg = parent.child("ctl");
    assert_holds(&s.observe(&id)); // empty
                                   // a live process
    let p = spawn_ready(helper(&["threads"]));
    cg.add(p.pid());
    let r = s.observe(&id);
    assert_refused(&r, "cgroup-populated");
    assert!(
        observed(&r, "cgroup").contains(&p.pid().to_string()),
        "{}",
        r.stdout
    );
    drop(p);
    cg.kill_all();
    assert_holds(&s.observe(&id));
    // a zombie leader with a live thread
    let z = spawn_ready(helper(&["zombie-leader"]));
    let zpid = z.pid();
    cg.add(zpid);
    std::thread::sleep(std::time::Duration::from_millis(50));
    let r = s.observe(&id);
    assert_refused(&r, "cgroup-populated");
    drop(z);
    cg.kill_all();
    // a thread moved into a threaded child: that child has no readable procs, threads=[tid]
    let x = cg.child("x");
    let th = x.child("t");
    std::fs::write(th.path().join("cgroup.type"), "threaded").unwrap();
    let t = spawn_ready(helper(&["threads"]));
    x.add(t.pid());
    let tid = t
        .line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .split(',')
        .find(|x| *x != t.pid().to_string())
        .unwrap()
        .to_owned();
    std::fs::write(th.path().join("cgroup.threads"), &tid).unwrap();
    // A threaded cgroup's cgroup.procs cannot even be read: the observer must cope.
    assert!(std::fs::read_to_string(th.path().join("cgroup.procs")).is_err());
    assert_eq!(
        std::fs::read_to_string(th.path().join("cgroup.threads"))
            .unwrap()
            .trim(),
        tid
    );
    let r = s.observe(&id);
    assert_refused(&r, "cgroup-populated");
    assert!(observed(&r, "cgroup").contains(&tid), "{}", r.stdout);
}

// ---- containment: listeners ----

#[test]
#[ignore = "needs root"]
fn bound_unix_path_is_listener_present_naming_the_holder() {
    require_root!();
    let s = Sandbox::new();
    let sock = s.path("old.sock");
    let id = s.enroll_with(&s.manifest(&format!(
        "[containment]\nlisteners = [\"unix:{}\"]",
        sock.display()
    )));
    assert_holds(&s.observe(&id));
    let l = spawn_ready(helper(&["listen-unix", sock.to_str().unwrap()]));
    let r = s.observe(&id);
    assert_refused(&r, "listener-present");
    assert!(
        observed(&r, "listener").contains(&l.pid().to_string()),
        "{}",
        r.stdout
    );
}

// ---- containment: processes ----

#[test]
#[ignore = "needs root"]
fn a_task_running_a_contained_executable_anywhere_is_an_escaped_task() {
    // The old controller's binary (a copy of the helper) runs outside any contained cgroup.
    require_root!();
    let s = Sandbox::new();
    let exe = s.srv.join("old-root");
    unique_copy(&bin("repoch-test-helper"), &exe, &s.tag);
    let id = s.enroll_with(&s.manifest(&format!(
        "[containment]\nexecutables = [\"{}\"]",
        exe.display()
    )));
    assert_holds(&s.observe(&id));
    let mut c = Command::new(&exe);
    c.arg("zombie-leader");
    let p = spawn_ready(c);
    std::thread::sleep(std::time::Duration::from_millis(50));
    // Its leader has exited; its thread still runs the executable.
    let r = s.observe(&id);
    assert_refused(&r, "escaped-task");
    assert!(
        observed(&r, "process").contains(&p.pid().to_string()),
        "{}",
        r.stdout
    );
    drop(p);
    let mut c = Command::new(&exe);
    c.arg("threads");
    let p = spawn_ready(c);
    assert_refused(&s.observe(&id), "escaped-task");
    drop(p);
    assert_holds(&s.observe(&id));
}

#[test]
#[ignore = "needs root"]
fn of_several_contained_executables_only_the_running_one_is_an_escaped_task() {
    // /proc is scanned once per observation for every enrolled executable: each fact must
    // be judged by its own executable. Only the second one runs.
    require_root!();
    let s = Sandbox::new();
    let (first, second) = (s.srv.join("old-root-1"), s.srv.join("old-root-2"));
    for exe in [&first, &second] {
        unique_copy(
            &bin("repoch-test-helper"),
            exe,
            &format!("{}-{}", s.tag, exe.display()),
        );
    }
    let id = s.enroll_with(&s.manifest(&format!(
        "[containment]\nexecutables = [\"{}\", \"{}\"]",
        first.display(),
        second.display()
    )));
    assert_holds(&s.observe(&id));
    let mut c = Command::new(&second);
    c.arg("threads");
    let p = spawn_ready(c);
    let r = s.observe(&id);
    assert_refused(&r, "escaped-task");
    let subjects: Vec<String> = r.json()["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "process" && f["holds"] == false)
        .map(|f| f["subject"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(subjects, [second.display().to_string()], "{}", r.stdout);
    assert!(
        observed(&r, "process").contains(&format!("pid {} ", p.pid())),
        "{}",
        r.stdout
    );
    drop(p);
    assert_holds(&s.observe(&id));
}

// ---- fences ----

#[test]
#[ignore = "needs root"]
fn fence_busy_names_the_holder_even_after_fork_and_exit() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let fence = s.srv.join("lock");
    {
        let h = spawn_ready(helper(&["flock", fence.to_str().unwrap()]));
        let r = s.observe(&id);
        assert_refused(&r, "fence-busy");
        assert!(
            observed(&r, "fence").contains(&format!("pid {} ", h.pid())),
            "{}",
            r.stdout
        );
    }
    // output() would wait for the child, which keeps stdout open: read one line instead.
    let mut parent = spawn_ready(helper(&["flock-fork", fence.to_str().unwrap()]));
    parent.child.wait().unwrap();
    let child = parent.pid();
    let r = s.observe(&id);
    assert_refused(&r, "fence-busy");
    assert!(
        observed(&r, "fence").contains(&format!("pid {child} ")),
        "{}",
        r.stdout
    );
    kill_pid(child);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_holds(&s.observe(&id));
}

#[test]
#[ignore = "needs root"]
fn replaced_or_missing_fence_is_refused() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let fence = s.srv.join("lock");
    rename_over(&fence, b"");
    assert_refused(&s.observe(&id), "fence-replaced");
    std::fs::remove_file(&fence).unwrap();
    assert_refused(&s.observe(&id), "fence-missing");
    // A symlink to the original inode is not the enrolled path.
    let s = Sandbox::new();
    let id = s.enroll();
    std::fs::rename(s.srv.join("lock"), s.srv.join("lock.real")).unwrap();
    std::os::unix::fs::symlink(s.srv.join("lock.real"), s.srv.join("lock")).unwrap();
    assert_refused(&s.observe(&id), "fence-replaced");
}

#[test]
#[ignore = "needs root"]
fn fences_are_held_by_the_observer_and_replacement_after_acquisition_is_caught() {
    // Library-level: the observer holds the fence fd (kernel custody confirmed), and a
    // rename over the fence path after acquisition fails the next observation.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let (mut obs, mut fences) = s.observer(&id);
    let first = obs.observe(&mut fences);
    assert!(first.holds(), "{:?}", first.failed().collect::<Vec<_>>());
    assert_eq!(fences.len(), 1);
    // Another process cannot take it now.
    let o = helper(&["try-flock", s.srv.join("lock").to_str().unwrap()])
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert!(!o.status.success(), "the fence was not held");
    let again = obs.observe(&mut fences);
    assert_eq!(
        first.digest, again.digest,
        "an unchanged world changed the digest"
    );
    rename_over(&s.srv.join("lock"), b"");
    let third = obs.observe(&mut fences);
    let reasons: Vec<_> = third.failed().map(|f| f.reason.unwrap()).collect();
    assert_eq!(reasons, vec![repoch_protocol::Reason::FenceReplaced]);
    assert_ne!(third.digest, first.digest);
}

// ---- target and consumer ----

#[test]
#[ignore = "needs root"]
fn ready_is_checked_against_the_approved_digest_and_between_observations() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let r = s.observe(&id);
    let sha = r.json()["ready_sha256"].as_str().unwrap().to_owned();
    assert_holds(
        &s.observe_cmd(&id, &["--approve-ready", &sha])
            .output()
            .unwrap()
            .into(),
    );
    let wrong = "00".repeat(32);
    assert_refused(
        &s.observe_cmd(&id, &["--approve-ready", &wrong])
            .output()
            .unwrap()
            .into(),
        "ready-unapproved",
    );
    // Changed between two observations of one issuance (no approval given).
    let (mut obs, mut fences) = s.observer(&id);
    assert!(obs.observe(&mut fences).holds());
    std::fs::write(s.srv.join("READY"), b"v2\n").unwrap();
    let o = obs.observe(&mut fences);
    assert_eq!(
        o.failed().map(|f| f.reason.unwrap()).collect::<Vec<_>>(),
        vec![repoch_protocol::Reason::ReadyChanged]
    );
    // Unprotected and missing (the in-process observer's fences released first).
    drop(fences);
    std::fs::set_permissions(s.srv.join("READY"), std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_refused(&s.observe(&id), "ready-unprotected");
    std::fs::remove_file(s.srv.join("READY")).unwrap();
    assert_refused(&s.observe(&id), "ready-missing");
}

#[test]
#[ignore = "needs root"]
fn consumer_executable_must_be_protected_and_match_its_pin() {
    require_root!();
    let s = Sandbox::new();
    let exe = s.srv.join("consume");
    copy_executable(&bin("repoch-consume"), &exe, "");
    let m = s.manifest("").replace(
        &format!("executable = \"{}\"", bin("repoch-consume").display()),
        &format!(
            "executable = \"{}\"\nexecutable_sha256 = \"{}\"",
            exe.display(),
            "11".repeat(32)
        ),
    );
    let id = s.enroll_with(&m);
    assert_refused(&s.observe(&id), "consumer-exe-mismatch");
    let s2 = Sandbox::new();
    let exe2 = s2.srv.join("consume");
    copy_executable(&bin("repoch-consume"), &exe2, "");
    let id2 = s2.enroll_with(&s2.manifest("").replace(
        &bin("repoch-consume").display().to_string(),
        &exe2.display().to_string(),
    ));
    assert_holds(&s2.observe(&id2));
    std::fs::set_permissions(&exe2, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_refused(&s2.observe(&id2), "consumer-exe-unprotected");
    std::fs::remove_file(&exe2).unwrap();
    assert_refused(&s2.observe(&id2), "consumer-exe-missing");
}

#[test]
#[ignore = "needs root"]
fn a_consumer_executable_replaced_between_observations_is_consumer_exe_changed() {
    // One issuance observes the consumer executable twice; a new release renamed over it in
    // between (same content, new inode) is a change, not "the same file".
    require_root!();
    let s = Sandbox::new();
    let exe = s.srv.join("consume");
    copy_executable(&bin("repoch-consume"), &exe, "");
    let id = s.enroll_with(&s.manifest("").replace(
        &bin("repoch-consume").display().to_string(),
        &exe.display().to_string(),
    ));
    let (mut obs, mut fences) = s.observer(&id);
    assert!(obs.observe(&mut fences).holds());
    rename_copy_over(&exe);
    let o = obs.observe(&mut fences);
    assert_eq!(
        o.failed().map(|f| f.reason.unwrap()).collect::<Vec<_>>(),
        vec![repoch_protocol::Reason::ConsumerExeChanged]
    );
}

/// Rewrites `path` in place (same inode, same size): its last byte flipped. The last bytes
/// of an ELF executable are section headers, which the loader never reads, so a rewritten
/// helper still runs.
fn rewrite_last_byte_in_place(path: &std::path::Path) {
    use std::os::unix::fs::FileExt as _;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let len = f.metadata().unwrap().len();
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, len - 1).unwrap();
    b[0] ^= 1;
    f.write_all_at(&b, len - 1).unwrap();
    f.sync_all().unwrap();
    assert_eq!(f.metadata().unwrap().len(), len);
}

/// Waits until a change made now is older than the margin after which the issuer trusts a
/// file's change time as proof that it is unchanged (docs/THREAT-MODEL.md, "The consumer
/// executable, hashed once per issuance").
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(
        repoch_sys::digest::CHANGE_SETTLED_MS + 200,
    ));
}

fn sha256_file(path: &std::path::Path) -> repoch_protocol::Hash {
    repoch_protocol::Hash::of(&std::fs::read(path).unwrap())
}

#[test]
#[ignore = "needs root"]
fn a_consumer_executable_rewritten_in_place_at_the_same_size_is_consumer_exe_changed() {
    // The executable is hashed once per issuance; later observations prove it unchanged by
    // its identity, size and change and modification times. A rewrite in place keeps the
    // inode, the birth time, the owner, the mode and the size: only the times tell. Once
    // with a settled file (the times are the proof), once right after it was written (too
    // recent to be a proof: hashed again).
    require_root!();
    for settled in [true, false] {
        let s = Sandbox::new();
        let exe = s.srv.join("consume");
        copy_executable(&bin("repoch-consume"), &exe, "");
        let id = s.enroll_with(&s.manifest("").replace(
            &bin("repoch-consume").display().to_string(),
            &exe.display().to_string(),
        ));
        if settled {
            settle();
        }
        let (mut obs, mut fences) = s.observer(&id);
        let first = obs.observe(&mut fences);
        assert!(first.holds(), "{:?}", first.failed().collect::<Vec<_>>());
        let again = obs.observe(&mut fences);
        assert_eq!(again.digest, first.digest, "settled {settled}");
        rewrite_last_byte_in_place(&exe);
        let o = obs.observe(&mut fences);
        assert_eq!(
            o.failed().map(|f| f.reason.unwrap()).collect::<Vec<_>>(),
            vec![repoch_protocol::Reason::ConsumerExeChanged],
            "settled {settled}"
        );
        let f = o.failed().next().unwrap();
        assert!(
            f.observed.contains(&sha256_file(&exe).to_string()),
            "settled {settled}: {f:?}"
        );
    }
}

#[test]
#[ignore = "needs root"]
fn a_peer_executable_rewritten_in_place_between_two_connections_is_hashed_again() {
    // The peer's /proc/PID/exe is proven unchanged by the same stamp as the consumer
    // executable. A process exits, its executable is rewritten in place (same inode, same
    // size; a running executable cannot be written: ETXTBSY), a new process runs it: the
    // digest describe reports is the new content's, not the one remembered.
    require_root!();
    let s = Sandbox::new();
    let exe = s.srv.join("peer");
    std::fs::copy(bin("repoch-test-helper"), &exe).unwrap();
    settle();
    let describe = |want: repoch_protocol::Hash| {
        let p = spawn_ready({
            let mut c = Command::new(&exe);
            c.arg("threads");
            c
        });
        let pidfd = repoch_sys::peer::pidfd_open(p.pid()).unwrap();
        let d = repoch_sys::peer::describe(p.pid(), 0, 0, &pidfd).unwrap();
        assert_eq!(d.exe_sha256, want);
        // Described twice: the second from the proof, the same answer.
        let d2 = repoch_sys::peer::describe(p.pid(), 0, 0, &pidfd).unwrap();
        assert_eq!(d2.exe_sha256, want);
        d
    };
    let before = describe(sha256_file(&exe));
    rewrite_last_byte_in_place(&exe);
    settle();
    let after = describe(sha256_file(&exe));
    assert!(after.exe.same_object(&before.exe));
    assert_ne!(after.exe_sha256, before.exe_sha256);
}

//! The state store refuses every replaced, unprotected or foreign object, classifies torn
//! and corrupt logs, and names the holder of a busy issuer lock (docs/ARCHITECTURE.md, "Issuance", step 1).

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::process::Stdio;

use repoch_tests_native::{
    is_append_only, require_root, unset_append_only, Exit, Outcome, Sandbox,
};

fn refusal(s: &Sandbox, id: &str) -> (Exit, String) {
    let r = s.status(id);
    let reason = if r.code == Outcome::Success {
        String::new()
    } else {
        r.json()["refusals"][0]["reason"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    (r.code, reason)
}

#[test]
#[ignore = "needs root"]
fn enroll_creates_a_protected_deployment_and_status_reads_it_by_prefix() {
    // Enrolls through the binary, then reads it back by an 8-digit prefix.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    assert_eq!(id.len(), 32);
    let r = s.status(&id[..8]);
    assert_eq!(r.code, Outcome::Success, "{}", r.stderr);
    let j = r.json();
    assert_eq!(j["deployment"], id.as_str());
    assert_eq!(j["epoch"], "enrolled");
    assert_eq!(j["records"][0]["kind"], "genesis");
    let dir = s.state_dir(&id);
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777,
        0o700
    );
    assert_eq!(
        std::fs::metadata(s.log(&id)).unwrap().permissions().mode() & 0o7777,
        0o600
    );
    assert!(
        is_append_only(&s.srv.join("journal")),
        "journal is not append-only"
    );
    assert!(is_append_only(&s.log(&id)), "epoch log is not append-only");
    let key = s.root.join("etc/repoch/issuer.key");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o7777,
        0o600
    );
    // Nothing but the fixed inventory in the state directory.
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["epoch.log", "issuer.lock", "manifest.cbor"]);
    // list shows it with the same id people type back in.
    let l = s.repoch(&["--json", "list"]).json();
    assert_eq!(l["deployments"][0]["deployment"], id.as_str());
}

#[test]
#[ignore = "needs root"]
fn enroll_refuses_to_overwrite_and_leaves_nothing_behind() {
    // A second enrollment of the same manifest hits the existing journal and is refused
    // as a manifest the host cannot enroll (64, docs/EXIT-CODES.md); the deployments
    // directory still holds exactly one deployment and no staging leftovers.
    require_root!();
    let s = Sandbox::new();
    s.enroll();
    let p = s.path("manifest.toml");
    let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
    assert_eq!(r.code, Outcome::Usage, "{}", r.stdout);
    let deps: Vec<_> = std::fs::read_dir(s.root.join("var/lib/repoch/deployments"))
        .unwrap()
        .collect();
    assert_eq!(deps.len(), 1);
    // A manifest naming a missing fence fails (64) before anything is created.
    let s2 = Sandbox::new();
    std::fs::remove_file(s2.srv.join("lock")).unwrap();
    let m = s2.path("m.toml");
    std::fs::write(&m, s2.manifest("")).unwrap();
    let r = s2.repoch(&["--json", "enroll", m.to_str().unwrap()]);
    assert_eq!(r.code, Outcome::Usage);
    assert!(
        !s2.srv.join("journal").exists(),
        "a failed enrollment left a journal"
    );
    assert_eq!(
        s2.repoch(&["--json", "list"]).json()["deployments"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
}

#[test]
#[ignore = "needs root"]
fn manifest_errors_name_the_field_and_exit_64() {
    require_root!();
    let s = Sandbox::new();
    let cases = [
        (
            s.manifest("")
                .replace("fences = [", "fences = [\"relative/lock\", "),
            "fences[0]",
        ),
        (
            s.manifest("").replace("ready = \"", "ready = \"/a/../"),
            "ready",
        ),
        (
            s.manifest("[containment]\nlisteners = [\"sctp:1\"]\n"),
            "containment.listeners[0]",
        ),
        (s.manifest("bogus = 1\n"), "unknown field"),
        (
            s.manifest("")
                .replace("\nkey_file = ", "\nkey = \"00\"\nkey_file = "),
            "consumer.key",
        ),
    ];
    for (m, want) in cases {
        let p = s.path("bad.toml");
        std::fs::write(&p, m).unwrap();
        let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
        assert_eq!(r.code, Outcome::Usage, "{want}: {}", r.stdout);
        assert!(
            r.json()["message"].as_str().unwrap().contains(want),
            "{want}: {}",
            r.stdout
        );
    }
}

#[test]
#[ignore = "needs root"]
fn symlinked_state_directory_is_refused() {
    // The deployment directory is swapped for a symlink to a faithful copy.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let dir = s.state_dir(&id);
    let moved = s.path("moved");
    std::fs::rename(&dir, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &dir).unwrap();
    assert_eq!(
        refusal(&s, &id),
        (Exit::of(Outcome::Refused), "state-unprotected".into())
    );
}

#[test]
#[ignore = "needs root"]
fn symlinked_log_is_refused() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let log = s.log(&id);
    unset_append_only(&log);
    let moved = s.path("epoch.log");
    std::fs::rename(&log, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &log).unwrap();
    assert_eq!(
        refusal(&s, &id),
        (Exit::of(Outcome::Refused), "state-unprotected".into())
    );
}

#[test]
#[ignore = "needs root"]
fn log_replaced_by_rename_is_refused() {
    // A byte-identical copy renamed over the log is another inode: replaced.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let log = s.log(&id);
    unset_append_only(&log);
    repoch_tests_native::rename_copy_over(&log);
    assert_eq!(
        refusal(&s, &id),
        (Exit::of(Outcome::Refused), "state-replaced".into())
    );
}

#[test]
#[ignore = "needs root"]
fn wrong_mode_or_owner_is_refused() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let log = s.log(&id);
    unset_append_only(&log);
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(
        refusal(&s, &id),
        (Exit::of(Outcome::Refused), "state-unprotected".into())
    );
    std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(refusal(&s, &id).0, Outcome::Success);
    std::os::unix::fs::chown(&log, Some(65534), None).unwrap();
    assert_eq!(
        refusal(&s, &id),
        (Exit::of(Outcome::Refused), "state-unprotected".into())
    );
}

#[test]
#[ignore = "needs root"]
fn foreign_deployments_manifest_is_refused() {
    // Another deployment's (validly signed) manifest copied into this one's directory.
    require_root!();
    let s = Sandbox::new();
    let a = s.enroll();
    repoch_tests_native::clear_append_only(&s.srv);
    std::fs::remove_file(s.srv.join("journal")).unwrap();
    let b = s.enroll();
    std::fs::copy(
        s.state_dir(&b).join("manifest.cbor"),
        s.state_dir(&a).join("manifest.cbor"),
    )
    .unwrap();
    assert_eq!(
        refusal(&s, &a),
        (Exit::of(Outcome::Refused), "state-replaced".into())
    );
    // ...and a log copied from the other deployment is another inode (replaced).
    let s2 = Sandbox::new();
    let c = s2.enroll();
    repoch_tests_native::clear_append_only(&s2.root);
    std::fs::copy(s.log(&b), s2.log(&c)).unwrap();
    // Copying content keeps the inode; the log, signed by another sandbox's (host's)
    // issuer key, classifies as forged, and status exits 2. (A log of another deployment
    // of the same host is foreign: bounded::a_log_copied_from_another_deployment_reads_as_foreign.)
    let st = s2.status(&c);
    assert_eq!(st.code, Outcome::Refused, "{}{}", st.stdout, st.stderr);
    assert_eq!(st.json()["epoch"], "forged");
    assert_eq!(st.json()["refusal"], "epoch-forged");
}

#[test]
#[ignore = "needs root"]
fn torn_tail_and_flipped_byte_classify_and_refuse() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let log = s.log(&id);
    // A torn tail: an append of half a frame (O_APPEND works on an append-only file).
    {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        f.write_all(&[0, 0, 1, 0, 0xaa]).unwrap();
    }
    let j = s.status(&id).json();
    assert_eq!(j["epoch"], "torn");
    assert_eq!(j["refusal"], "epoch-torn");
    assert_eq!(
        j["records"].as_array().unwrap().len(),
        1,
        "the valid prefix is still read"
    );
    // A flipped byte inside the genesis (well formed, its signature fails): forged.
    let s = Sandbox::new();
    let id = s.enroll();
    let log = s.log(&id);
    unset_append_only(&log);
    let mut b = std::fs::read(&log).unwrap();
    b[20] ^= 0x40;
    std::fs::write(&log, &b).unwrap();
    let j = s.status(&id).json();
    assert_eq!(j["epoch"], "forged");
    assert_eq!(j["refusal"], "epoch-forged");
    assert_eq!(j["problem"]["offset"], 0);
}

fn spawn_holder(s: &Sandbox, mode: &str, path: &std::path::Path) -> (std::process::Child, u32) {
    let mut c = s
        .cmd("repoch-test-helper")
        .args([mode, path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (c, line.trim().parse().unwrap())
}

fn kill(pid: u32) {
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    );
}

#[test]
#[ignore = "needs root"]
fn busy_issuer_lock_names_the_holder_even_after_fork_and_exit() {
    // A helper takes the issuer lock, hands the fd to a child and exits: /proc/locks names
    // the dead parent, and the refusal must name the live child found through fdinfo.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let lock = s.state_dir(&id).join("issuer.lock");
    for mode in ["flock", "flock-fork"] {
        let (mut parent, holder) = spawn_holder(&s, mode, &lock);
        if mode == "flock-fork" {
            parent.wait().unwrap();
            assert_ne!(holder, parent.id());
        }
        let d = s.deployment(&id);
        let r = d.lock_issuer().unwrap_err();
        assert_eq!(r.reason, repoch_protocol::Reason::IssuerBusy);
        assert!(
            r.observed.contains(&format!("pid {holder} ")),
            "{mode}: {}",
            r.observed
        );
        if mode == "flock-fork" {
            assert!(
                !r.observed.contains(&format!("pid {} ", parent.id())),
                "named the dead locker: {}",
                r.observed
            );
        }
        kill(holder);
        let _ = parent.kill();
        let _ = parent.wait();
        // Once the holder is gone the lock is free again.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(d.lock_issuer().is_ok());
    }
}

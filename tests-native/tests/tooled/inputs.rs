//! Inputs on a file system that is read-only or dies (the rest of inputs:
//! tests/native/inputs.rs).

use std::process::Stdio;

use repoch_tests_native::*;

/// How long `repoch journal append` may take to reach its barrier.
const COMMAND_SECONDS_MAX: u64 = 20;

pub(crate) fn a_read_only_state_directory_is_refused_before_anything_is_written() {
    // The state root's file system remounted read-only: `status` still reads the epoch
    // (before: `observe-failed`, the log was opened for writing), and a recovery is refused
    // `state-read-only` with the cause named, exit 2, before any observation or write.
    require_root!();
    let _no_namespaces = no_mount_namespaces_guard();
    let fs = Ext4::new();
    let s = Sandbox::within(Some(&fs.mnt));
    let id = s.enroll();
    let d = s.daemon();
    let st = std::process::Command::new("mount")
        .args(["-o", "remount,ro"])
        .arg(&fs.mnt)
        .status()
        .unwrap();
    assert!(st.success());
    let r = s.status(&id);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.json()["epoch"], "enrolled");
    let rec = run(s.recover(&id[..6], 1, &[]));
    assert_eq!(rec.code, Outcome::Refused, "{}{}", rec.stdout, rec.stderr);
    assert_eq!(rec.reasons(), ["state-read-only"]);
    assert!(
        rec.stdout.contains("Read-only file system"),
        "the cause must be named: {}",
        rec.stdout
    );
    drop(d);
    let st = std::process::Command::new("mount")
        .args(["-o", "remount,rw"])
        .arg(&fs.mnt)
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(records(&s, &id), ["genesis"]);
}

pub(crate) fn a_journal_append_whose_write_fails_is_uncertain_exit_3() {
    // The producer's journal lives on a loop-mounted ext4 (the rest of the sandbox does not).
    // `repoch journal append` stops at the barrier right before its write (the journal read
    // and verified); the file system dies (EXT4_IOC_SHUTDOWN); the append continues. It
    // cannot know whether its record reached the disk: uncertain, exit 3, naming the cause
    // (docs/EXIT-CODES.md). Before, a failed write(2) was exit 70, "a bug".
    require_root!();
    let _no_namespaces = no_mount_namespaces_guard();
    let fs = Ext4::new();
    let s = Sandbox::new();
    let j = fs.mnt.join("journal");
    let m = s.manifest("").replacen(
        &format!("path = \"{}/journal\"", s.srv.display()),
        &format!("path = \"{}\"", j.display()),
        1,
    );
    let id = s.enroll_with(&m);
    let key = s.path("producer.key");
    let mut c = s.cmd("repoch");
    c.args(["--json", "journal", "append", "--journal"])
        .arg(&j)
        .arg("--key")
        .arg(&key)
        .args(["--deployment", &id[..6], "root-start"])
        .env("REPOCH_BARRIER", "journal-before-write")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    let pid = child.id();
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
        st.rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('T'))
    }) {
        assert!(
            start.elapsed().as_secs() < COMMAND_SECONDS_MAX,
            "repoch journal append never reached its barrier"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    fs.cut_power();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::CONT,
    )
    .unwrap();
    let r = finish(child);
    assert_eq!(r.code, Outcome::Uncertain, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("not retried"), "{}", r.stdout);
    clear_append_only(&fs.mnt);
}

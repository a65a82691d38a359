//! Hostile inputs that reach the records: whatever a peer or a file brings must be refused
//! with a reason before anything is written, never turned into an unreadable record.

use std::process::Stdio;

use repoch_tests_native::*;

use super::e2e::{finish, records, recover_bg};

#[test]
fn a_consumer_in_a_cgroup_path_over_the_bound_is_rejected_and_nothing_is_written() {
    // The consumer's cgroup path goes into the intent and consume records, whose decoder
    // bounds it (PATH_BYTES_MAX). A consumer in a deeper cgroup (four nested names of 100
    // bytes) must be rejected at authentication, before the intent: the recovery ends
    // consumer-absent, the log holds only its genesis, and the daemon keeps issuing.
    // (Before: the intent was written, could not be read back, and the epoch was lost.)
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = s.daemon();
    let cg0 = Cgroup::new(&format!("repoch-deep-{}", s.tag));
    let cg1 = cg0.child(&"a".repeat(100));
    let cg2 = cg1.child(&"b".repeat(100));
    let cg = cg2.child(&"c".repeat(100));
    let rec = recover_bg(&s, &id[..6], 3);
    let mut c = std::process::Command::new("sh");
    c.arg("-c")
        .arg(format!(
            "echo $$ > '{}/cgroup.procs' && exec \"$0\" \"$@\"",
            cg.path().display()
        ))
        .arg(bin("repoch-consume"))
        .env("REPOCH_ROOT", &s.root)
        .args(["--json", "receive", "--deployment", &id[..6], "--key"])
        .arg(s.path("consumer.key"))
        .arg("--issuer-key")
        .arg(s.issuer_pub())
        .arg("--out")
        .arg(s.path("grant.cbor"))
        .arg("--socket")
        .arg(s.grant_socket())
        .args(["--wait", "10"]);
    let consumer = c.stdout(Stdio::piped()).spawn().unwrap();
    let r = finish(rec);
    assert_eq!(r.reasons(), ["consumer-absent"], "{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, 2);
    let c = finish(consumer);
    assert_eq!(c.code, 2, "{}", c.stdout);
    assert!(c.stdout.contains("consumer-rejected"), "{}", c.stdout);
    assert!(c.stdout.contains("cgroup"), "{}", c.stdout);
    assert_eq!(records(&s, &id), ["genesis"]);
    drop(d);
    assert!(!s.path("grant.cbor").exists());
}

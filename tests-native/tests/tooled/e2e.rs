//! An issuance whose append fails on a dying ext4 (the rest of the end-to-end tests:
//! tests/native/e2e.rs).

use std::process::Stdio;

use repoch_tests_native::*;

pub(crate) fn a_failed_append_is_uncertain_never_retried_and_repochd_stops_issuing() {
    // The deployment's state lives on a loop-mounted ext4. Barrier: repochd has observed
    // everything, its consumer is connected and the world observed again right before the
    // intent. Then the file system dies (EXT4_IOC_SHUTDOWN) and the intent's write or
    // fdatasync fails: the outcome is uncertain (exit 3), the consumer is told, and
    // repochd refuses every later recovery with store-poisoned until restarted.
    require_root!();
    let _no_namespaces = no_mount_namespaces_guard();
    let fs = Ext4::new();
    let s = Sandbox::within(Some(&fs.mnt));
    let id = s.enroll();
    let d = AtBarrier::start(&s, "before-intent");
    // The consumer's pinned key lives with it, not on the dying file system.
    std::fs::copy(s.issuer_pub(), s.path("issuer.pub")).unwrap();
    let mut c = s.cmd("repoch-consume");
    c.args(["--json", "receive", "--deployment", &id[..6], "--key"])
        .arg(s.path("consumer.key"))
        .arg("--issuer-key")
        .arg(s.path("issuer.pub"));
    c.arg("--out")
        .arg(s.path("grant.cbor"))
        .arg("--socket")
        .arg(s.grant_socket())
        .args(["--wait", "30"]);
    let consumer = c.stdout(Stdio::piped()).spawn().unwrap();
    let rec = recover_bg(&s, &id[..6], 20);
    d.reached();
    fs.cut_power();
    d.signal(rustix::process::Signal::CONT);
    let r = finish(rec);
    let c = finish(consumer);
    assert_eq!(r.code, Outcome::Uncertain, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.outcome()["outcome"], "uncertain");
    assert_eq!(r.reasons(), ["store-poisoned"]);
    assert_eq!(c.code, Outcome::Refused, "{}", c.stdout);
    assert!(c.stdout.contains("store-poisoned"), "{}", c.stdout);
    assert!(!s.path("grant.cbor").exists());
    // The daemon stops issuing: the next request is refused before anything is touched.
    let again = run(s.recover(&id[..6], 1, &[]));
    assert_eq!(again.code, Outcome::Refused, "{}", again.stdout);
    assert_eq!(again.reasons(), ["store-poisoned"]);
    let log = d.text();
    assert!(log.contains("no further issuance until restart"), "{log}");
    drop(d);
    drop(s);
}

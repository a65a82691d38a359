//! Cross-deployment: two deployments on one host, one repochd. What one deployment's
//! consumer holds (its enrolled key, its grant) buys nothing in the other's epoch.

use std::process::Stdio;

use repoch_tests_native::*;

use crate::e2e::{finish, records, recover_bg, run};

/// A second deployment in the same sandbox: its own fence, store, READY, journal and
/// consumer key (`consumer-b.key`), the same consumer uid and executable.
fn enroll_second(s: &Sandbox) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let srv2 = s.path("srv2");
    std::fs::create_dir_all(&srv2).unwrap();
    std::fs::write(srv2.join("lock"), b"").unwrap();
    std::fs::set_permissions(srv2.join("lock"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(srv2.join("data"), b"the other store").unwrap();
    std::fs::write(srv2.join("READY"), b"v1\n").unwrap();
    s.keygen("consumer-b");
    let m = s
        .manifest("")
        .replace(&s.srv.display().to_string(), &srv2.display().to_string())
        .replace("consumer.key.pub", "consumer-b.key.pub")
        .replace(
            &format!("label = \"test-{}\"", s.tag),
            &format!("label = \"test-{}-b\"", s.tag),
        );
    let p = s.path("manifest-b.toml");
    std::fs::write(&p, m).unwrap();
    let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
    assert_eq!(
        r.code,
        Outcome::Success,
        "enroll B: {}{}",
        r.stdout,
        r.stderr
    );
    r.json()["deployment"].as_str().unwrap().to_owned()
}

#[test]
#[ignore = "needs root"]
fn the_consumer_enrolled_for_another_deployment_is_rejected_and_burns_nothing() {
    // B's consumer, with B's enrolled key, asks for A's grant while A recovers: rejected
    // (the key is not A's), nothing written for A or B; A's own consumer then gets A's
    // grant, and B still recovers once, to B's consumer only.
    require_root!();
    let s = Sandbox::new();
    let a = s.enroll();
    let b = enroll_second(&s);
    assert_ne!(a, b);
    let d = s.daemon();
    let imp = s
        .consumer(&a, "consumer-b.key", "stolen.cbor", &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    d.wait_log(&format!("pid={}", imp.id()));
    let rec = recover_bg(&s, &a, 20);
    let imp = finish(imp);
    assert_eq!(imp.code, Outcome::Refused, "{}{}", imp.stdout, imp.stderr);
    assert!(
        imp.stdout.contains("consumer-rejected") && imp.stdout.contains("key"),
        "{}",
        imp.stdout
    );
    assert!(!s.path("stolen.cbor").exists());
    assert_eq!(
        records(&s, &a),
        ["genesis"],
        "B's consumer burned A's epoch"
    );
    assert_eq!(records(&s, &b), ["genesis"]);
    let real = run(s.consumer(&a, "consumer.key", "grant-a.cbor", &[]));
    assert_eq!(
        real.code,
        Outcome::Success,
        "{}{}",
        real.stdout,
        real.stderr
    );
    assert_eq!(finish(rec).code, Outcome::Success);
    assert_eq!(records(&s, &a).len(), 4);
    // A's consumer key asks for B: rejected the same way; B is untouched.
    let imp = s
        .consumer(&b, "consumer.key", "stolen-b.cbor", &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    d.wait_log(&format!("pid={}", imp.id()));
    let rec = recover_bg(&s, &b, 20);
    let imp = finish(imp);
    assert_eq!(imp.code, Outcome::Refused, "{}{}", imp.stdout, imp.stderr);
    assert_eq!(
        records(&s, &b),
        ["genesis"],
        "A's consumer burned B's epoch"
    );
    let real = run(s.consumer(&b, "consumer-b.key", "grant-b.cbor", &[]));
    assert_eq!(
        real.code,
        Outcome::Success,
        "{}{}",
        real.stdout,
        real.stderr
    );
    assert_eq!(finish(rec).code, Outcome::Success);
    // Each grant names its own deployment and verifies under the one issuer key.
    for (id, file) in [(&a, "grant-a.cbor"), (&b, "grant-b.cbor")] {
        let v = s.run(
            "repoch-consume",
            &[
                "--json",
                "verify",
                "--issuer-key",
                s.issuer_pub().to_str().unwrap(),
                s.path(file).to_str().unwrap(),
            ],
        );
        assert_eq!(v.code, Outcome::Success, "{}", v.stdout);
        assert_eq!(v.json()["grant"]["deployment"], id.as_str());
    }
    assert_eq!(records(&s, &b).len(), 4);
}

#[test]
#[ignore = "needs root"]
fn a_consumer_waiting_for_one_deployment_is_not_taken_by_another_recovery() {
    // B's consumer waits for B; A is recovered with no consumer of its own: A is refused
    // consumer-absent (B's consumer is not A's), nothing written anywhere, and B's consumer
    // is still there for B's own recovery.
    require_root!();
    let s = Sandbox::new();
    let a = s.enroll();
    let b = enroll_second(&s);
    let d = s.daemon();
    let waiting = s
        .consumer(&b, "consumer-b.key", "grant-b.cbor", &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    d.wait_log(&format!("pid={}", waiting.id()));
    let r = run(s.recover(&a, 2, &[]));
    assert_eq!(r.code, Outcome::Refused, "{}", r.stdout);
    assert_eq!(r.reasons(), ["consumer-absent"]);
    assert_eq!(records(&s, &a), ["genesis"]);
    assert_eq!(records(&s, &b), ["genesis"]);
    let r = run(s.recover(&b, 20, &[]));
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    let got = finish(waiting);
    assert_eq!(got.code, Outcome::Success, "{}{}", got.stdout, got.stderr);
    assert_eq!(got.json()["grant"]["deployment"], b.as_str());
    assert_eq!(records(&s, &a), ["genesis"]);
}

//! TCP and UDP listeners in a network namespace (the rest of the observers:
//! tests/native/observers.rs).

use repoch_tests_native::*;

use crate::{assert_holds, assert_refused};

pub(crate) fn tcp_and_udp_ports_bound_in_a_network_namespace_are_listener_present() {
    // A per-test network namespace holds the listeners and runs the observer, so the test
    // needs no free port on the host.
    require_root!();
    let s = Sandbox::new();
    let ns = Netns::new(&s.tag);
    let id =
        s.enroll_with(&s.manifest("[containment]\nlisteners = [\"tcp:*:7070\", \"udp:*:5353\"]"));
    let obs = || -> Run { ns.wrap(&s.observe_cmd(&id, &[])).output().unwrap().into() };
    assert_holds(&obs());
    let t = spawn_ready(ns.wrap(&helper(&["listen-tcp", "7070"])));
    let r = obs();
    assert_refused(&r, "listener-present");
    assert!(
        observed(&r, "listener").contains(&t.pid().to_string()),
        "{}",
        r.stdout
    );
    drop(t);
    let _u = spawn_ready(ns.wrap(&helper(&["listen-udp", "5353"])));
    assert_refused(&obs(), "listener-present");
    // The host's own namespace does not see the namespace's sockets.
    assert_holds(&s.observe(&id));
}

/// The subjects of the facts of `kind` that failed, in order.
fn failed_subjects(r: &Run, kind: &str) -> Vec<String> {
    r.json()["facts"]
        .as_array()
        .unwrap_or_else(|| panic!("no facts: {}", r.stdout))
        .iter()
        .filter(|f| f["kind"] == kind && f["holds"] == false)
        .map(|f| f["subject"].as_str().unwrap().to_owned())
        .collect()
}

pub(crate) fn of_several_enrolled_ports_only_the_bound_one_is_listener_present() {
    // The net tables are read once per observation for every enrolled port: each port's
    // fact must be judged by its own port and protocol. Only the later port of each
    // protocol is bound, and the same number is enrolled for the other protocol.
    require_root!();
    let s = Sandbox::new();
    let ns = Netns::new(&s.tag);
    let id = s.enroll_with(&s.manifest(
        "[containment]\nlisteners = [\"tcp:*:7070\", \"udp:*:7071\", \"tcp:*:7071\", \"udp:*:5353\"]",
    ));
    let obs = || -> Run { ns.wrap(&s.observe_cmd(&id, &[])).output().unwrap().into() };
    assert_holds(&obs());
    let t = spawn_ready(ns.wrap(&helper(&["listen-tcp", "7071"])));
    let r = obs();
    assert_refused(&r, "listener-present");
    assert_eq!(
        failed_subjects(&r, "listener"),
        ["tcp:*:7071"],
        "{}",
        r.stdout
    );
    assert!(
        observed(&r, "listener").contains(&t.pid().to_string()),
        "{}",
        r.stdout
    );
    drop(t);
    let u = spawn_ready(ns.wrap(&helper(&["listen-udp", "5353"])));
    let r = obs();
    assert_refused(&r, "listener-present");
    assert_eq!(
        failed_subjects(&r, "listener"),
        ["udp:*:5353"],
        "{}",
        r.stdout
    );
    assert!(
        observed(&r, "listener").contains(&u.pid().to_string()),
        "{}",
        r.stdout
    );
    drop(u);
    assert_holds(&obs());
}

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
    let id = s.enroll_with(&s.manifest("[containment]\nlisteners = [\"tcp:7070\", \"udp:5353\"]"));
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

//! The fleet registry against a real etcd cluster of the test's own (three members on
//! loopback, mutual TLS): `repoch_tests_native::Etcd`.

use std::time::Duration;

use repoch_registry::{Claimed, Client, Spec};
use repoch_tests_native::*;

fn spec(etcd: &Etcd) -> Spec {
    Spec {
        endpoints: etcd.endpoints(),
        ca: etcd.ca(),
        cert: etcd.client_cert(),
        key: etcd.client_key(),
    }
}

pub fn the_client_creates_a_key_once_and_reads_whose_it_is() {
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let mut a = Client::connect(&spec(&etcd), Duration::from_secs(5)).unwrap();
    let mut b = Client::connect(&spec(&etcd), Duration::from_secs(5)).unwrap();
    let key = b"/t/epochs/fleet-1";
    let Claimed::Ours {
        cluster,
        entry: won,
    } = a.claim(key, b"host a", 3).unwrap()
    else {
        panic!("the first claim did not win");
    };
    assert!(won.create_revision > 0 && cluster != 0);
    // The other host's claim finds the first one's value, untouched.
    match b.claim(key, b"host b", 3).unwrap() {
        Claimed::Theirs { cluster: c, entry } => {
            assert_eq!((c, entry.value.as_slice()), (cluster, &b"host a"[..]));
            assert_eq!(entry.create_revision, won.create_revision);
            assert_eq!(entry.mod_revision, won.create_revision, "never modified");
        }
        other => panic!("the second claim: {other:?}"),
    }
    // The same value again (an answer lost, then retried) is still ours, at the same
    // revision: a retry never makes a second claim.
    match a.claim(key, b"host a", 3).unwrap() {
        Claimed::Ours { entry, .. } => assert_eq!(entry.create_revision, won.create_revision),
        other => panic!("the retried claim: {other:?}"),
    }
    let got = etcd.get("/t/epochs/fleet-1").expect("etcdctl sees the key");
    assert_eq!(got["create_revision"].as_i64(), Some(won.create_revision));
    let (_, listed) = b.list(b"/t/epochs/").unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].value, b"host a");
}

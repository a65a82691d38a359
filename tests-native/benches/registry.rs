//! Issuance with and without a fleet registry, in the same run (docs/BENCHMARKS.md, "The
//! fleet registry"): real recoveries of a profile of 1 object of each kind, interleaved,
//! one without a registry then one with (a three-member etcd cluster of the bench's own on
//! loopback, mutual TLS), against the issuance floor (common::Floor) plus the registry's
//! own floor measured on the same cluster: a read of each endpoint alone and one
//! create-if-absent transaction (the issuance reads each endpoint alone twice, right
//! before the intent and right before the dispatch, and claims once).

mod common;

use std::time::{Duration, Instant};

use common::*;
use repoch_tests_native::bench::{self, ratio, Samples};
use repoch_tests_native::*;

fn main() {
    if !bench::under_cargo_bench("registry") {
        return;
    }
    require_root!();
    let systemd = Systemd::None;
    let n = bench::iterations(50, 3);
    let mut w = World::new(systemd);
    let etcd = Etcd::start(&w.s.path("etcd"));
    let prefix = format!(
        "/bench-{}",
        w.s.tag.replace(|c: char| !c.is_ascii_alphanumeric(), "")
    );
    let p = Profile::of(1, systemd);
    // The bench host's user may write its host record of each fleet deployment the run
    // enrolls (`fleet-1`, `fleet-2`, ...: one per recovery), and nothing more.
    for k in 1..=2 * n + 2 {
        etcd.grant_host(&prefix, &format!("fleet-{k}"), "bench-host");
    }
    // One of each not measured: caches warm, the sizes appended.
    let warm = w.issue(&p);
    let sizes = w.appended_sizes(&warm.id);
    w.registry = Some(etcd.registry_toml("{FLEET}", "bench-host", &prefix));
    w.issue(&p);
    let exe = bin("repoch-consume");
    let floor_file = w.s.path("floor.dat");
    let mut floor = Floor::default();
    let mut client =
        repoch_registry::Client::connect(&etcd.spec(), Duration::from_secs(5)).unwrap();
    let (mut read, mut txn, mut both) = (Samples::new(), Samples::new(), Samples::new());
    let (mut without, mut with) = (Samples::new(), Samples::new());
    for i in 0..n {
        w.registry = None;
        without.push(w.issue(&p).dispatched);
        w.registry = Some(etcd.registry_toml("{FLEET}", "bench-host", &prefix));
        with.push(w.issue(&p).dispatched);
        floor.sample(&floor_file, &sizes, &exe);
        let key = format!("{prefix}/floor/{i}");
        let t0 = Instant::now();
        let each = client.get_each(key.as_bytes());
        let t1 = Instant::now();
        assert!(each.iter().all(|(_, a)| a.is_ok()), "{each:?}");
        let created = client.create(key.as_bytes(), b"floor").unwrap();
        let t2 = Instant::now();
        assert!(matches!(created, repoch_registry::Created::Won { .. }));
        read.push(t1 - t0);
        txn.push(t2 - t1);
        // Two rounds of reads (before the intent, before the dispatch) and the claim.
        both.push(floor.total.last() + 2 * (t1 - t0) + (t2 - t1));
    }
    let mut md = String::from("### Issuance with and without a fleet registry\n\n");
    md.push_str(&bench::machine(&w.s.root));
    md.push_str(&format!(
        " repochd barriers={}. etcd: three members on loopback, mutual TLS.\n\n",
        w.barriers()
    ));
    md.push_str(&format!(
        "{n} pairs of recoveries (profile 1), each of a new deployment, its consumer already \
         waiting, interleaved without then with a registry; issuance = spawn of `repoch --json \
         recover` to the grant sent. Each pair is followed by one floor sample and one registry \
         floor sample (a read of each endpoint alone, then a create-if-absent transaction, of a \
         new key).\n\n"
    ));
    md.push_str("| what | n | median ms | p99 ms |\n| --- | ---: | ---: | ---: |\n");
    for (what, s) in [
        ("issuance without a registry", &without),
        ("issuance with a registry", &with),
        (
            "floor (common::Floor: appends, /proc scans, sha256, process start)",
            &floor.total,
        ),
        (
            "registry floor: a linearizable read of each of the 3 endpoints alone",
            &read,
        ),
        ("registry floor: one create-if-absent transaction", &txn),
        (
            "**floor with the registry**: the floor + two reads of each endpoint + one transaction",
            &both,
        ),
    ] {
        md.push_str(&format!("| {what} | {} | {} |\n", s.len(), s.cells()));
    }
    md.push_str("\n| ratio | median | p99 |\n| --- | ---: | ---: |\n");
    md.push_str(&format!(
        "| with a registry / without | {} | {} |\n",
        ratio(with.median(), without.median()),
        ratio(with.p99(), without.p99())
    ));
    md.push_str(&format!(
        "| with a registry / the floor with the registry | {} | {} |\n",
        ratio(with.median(), both.median()),
        ratio(with.p99(), both.p99())
    ));
    md.push_str(&format!(
        "| without a registry / the floor | {} | {} |\n",
        ratio(without.median(), floor.total.median()),
        ratio(without.p99(), floor.total.p99())
    ));
    bench::emit("registry", &md);
}

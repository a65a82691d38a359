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

// ---- two hosts, one fleet deployment ----

/// One host of a fleet: its own sandbox (state root, fixtures, keys), enrolled for the
/// fleet under its own host name.
struct Host {
    s: Sandbox,
    id: String,
}

/// The key prefix of one test: its own, so tests can share nothing in etcd by name.
fn prefix(s: &Sandbox) -> String {
    format!(
        "/t-{}",
        s.tag.replace(|c: char| !c.is_ascii_alphanumeric(), "")
    )
}

fn enroll_host(etcd: &Etcd, prefix: &str, fleet: &str, host: &str) -> (Host, Run) {
    let s = Sandbox::new();
    let m = s.manifest(&etcd.registry_toml(fleet, host, prefix));
    let p = s.path("manifest.toml");
    std::fs::write(&p, &m).unwrap();
    let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
    assert_eq!(
        r.code,
        Outcome::Success,
        "enroll {host}: {}{}",
        r.stdout,
        r.stderr
    );
    let id = r.json()["deployment"].as_str().unwrap().to_owned();
    (Host { s, id }, r)
}

/// A consumer that, once granted, runs a shell writing the fencing token it was given.
fn consumer_writing_token(h: &Host) -> std::process::Child {
    let out = h.s.path("token.txt");
    let script = format!(
        "printf '%s %s' \"${{REPOCH_FENCING_TOKEN-unset}}\" \"${{REPOCH_FENCING_CLUSTER-unset}}\" > {}",
        out.display()
    );
    h.s.consumer(
        &h.id,
        "consumer.key",
        "grant.cbor",
        &["/bin/sh", "-c", &script],
    )
    .env("REPOCH_FENCING_TOKEN", "inherited")
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap()
}

/// `repoch recover` of the host's deployment with a consumer; the two results.
fn recover(h: &Host) -> (Run, Run) {
    let c = consumer_writing_token(h);
    let r = run(h.s.recover(&h.id, 20, &[]));
    let got: Run = c.wait_with_output().unwrap().into();
    (r, got)
}

fn epoch_of(h: &Host) -> String {
    h.s.status(&h.id).json()["epoch"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The registry's claim of `fleet`, as etcdctl reads it.
fn registered(etcd: &Etcd, prefix: &str, fleet: &str) -> Option<(i64, String)> {
    let kv = etcd.get(&format!("{prefix}/epochs/{fleet}"))?;
    use base64::Engine as _;
    let value = base64::engine::general_purpose::STANDARD
        .decode(kv["value"].as_str().unwrap())
        .unwrap();
    let claim =
        <repoch_protocol::fleet::FleetClaim as repoch_protocol::Canonical>::from_bytes(&value)
            .unwrap();
    Some((kv["create_revision"].as_i64().unwrap(), claim.host))
}

fn assert_granted_with_token(etcd: &Etcd, prefix: &str, h: &Host, r: &Run, got: &Run) -> u64 {
    assert_eq!(
        r.code,
        Outcome::Success,
        "recover: {}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(
        got.code,
        Outcome::Success,
        "consumer: {}{}",
        got.stdout,
        got.stderr
    );
    let revision = got.json()["grant"]["fencing"]["revision"].as_u64().unwrap();
    let cluster = got.json()["grant"]["fencing"]["cluster"]
        .as_str()
        .unwrap()
        .to_owned();
    let (created, _) = registered(etcd, prefix, "billing").expect("the claim is registered");
    assert_eq!(
        revision as i64, created,
        "the token is the key's create revision"
    );
    // The new root was given exactly the grant's token, not the caller's.
    let told = std::fs::read_to_string(h.s.path("token.txt")).unwrap();
    assert_eq!(told, format!("{revision} {cluster}"));
    revision
}

pub fn two_hosts_of_one_fleet_recover_once_and_the_loser_writes_nothing() {
    // Proves: two hosts enrolled for one fleet deployment (each its own local deployment);
    // the first recovery is granted with the registry's fencing token (in the consume
    // record, the grant, and the new root's environment); the second host is refused
    // epoch-consumed naming the winner, before its intent: nothing written there.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let (b, enrolled_b) = enroll_host(&etcd, &px, "billing", "host-b");
    // Enrollment says which hosts are candidates.
    let hosts = enrolled_b.json()["fleet"]["hosts"].clone();
    let names: Vec<&str> = hosts
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["host"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["host-a", "host-b"]);
    assert!(enrolled_b.json()["fleet"]["epoch_key"]
        .as_str()
        .unwrap()
        .ends_with("/epochs/billing"));

    let _da = a.s.daemon();
    let (r, got) = recover(&a);
    let token = assert_granted_with_token(&etcd, &px, &a, &r, &got);
    assert_eq!(registered(&etcd, &px, "billing").unwrap().1, "host-a");
    assert!(token > 0);

    let _db = b.s.daemon();
    let (r, got) = recover(&b);
    assert_eq!(
        r.code,
        Outcome::Refused,
        "recover b: {}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(r.reasons(), ["epoch-consumed"]);
    assert!(
        r.stdout.contains("host-a"),
        "the refusal names the winner: {}",
        r.stdout
    );
    assert_ne!(got.code, Outcome::Success);
    assert!(!b.s.path("grant.cbor").exists());
    assert_eq!(epoch_of(&b), "enrolled", "the loser wrote nothing");
}

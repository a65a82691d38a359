//! The fleet registry against a real etcd cluster of the test's own (three members on
//! loopback, mutual TLS): `repoch_tests_native::Etcd`.

use std::time::Duration;

use repoch_registry::{Claimed, Client};
use repoch_tests_native::*;

pub(crate) fn the_client_creates_a_key_once_and_reads_whose_it_is() {
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let mut a = Client::connect(&etcd.spec(), Duration::from_secs(5)).unwrap();
    let mut b = Client::connect(&etcd.spec(), Duration::from_secs(5)).unwrap();
    let key = b"/t/epochs/fleet-1";
    let Claimed::Ours {
        cluster,
        entry: won,
    } = a.claim(key, b"host a", 3, Duration::from_secs(10)).unwrap()
    else {
        panic!("the first claim did not win");
    };
    assert!(won.create_revision > 0 && cluster != 0);
    // The other host's claim finds the first one's value, untouched.
    match b.claim(key, b"host b", 3, Duration::from_secs(10)).unwrap() {
        Claimed::Theirs { cluster: c, entry } => {
            assert_eq!((c, entry.value.as_slice()), (cluster, &b"host a"[..]));
            assert_eq!(entry.create_revision, won.create_revision);
            assert_eq!(entry.mod_revision, won.create_revision, "never modified");
        }
        other => panic!("the second claim: {other:?}"),
    }
    // The same value again (an answer lost, then retried) is still ours, at the same
    // revision: a retry never makes a second claim.
    match a.claim(key, b"host a", 3, Duration::from_secs(10)).unwrap() {
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
pub(crate) struct Host {
    pub(crate) s: Sandbox,
    pub(crate) id: String,
}

/// The key prefix of one test: its own, so tests can share nothing in etcd by name.
pub(crate) fn prefix(s: &Sandbox) -> String {
    format!(
        "/t-{}",
        s.tag.replace(|c: char| !c.is_ascii_alphanumeric(), "")
    )
}

pub(crate) fn enroll_host(etcd: &Etcd, prefix: &str, fleet: &str, host: &str) -> (Host, Run) {
    enroll_host_in(None, etcd, prefix, fleet, host)
}

/// A process the test started: killed and reaped on drop, its output read on finish.
pub(crate) struct Bg(Option<std::process::Child>);

impl Bg {
    pub(crate) fn spawn(mut c: std::process::Command) -> Bg {
        Bg(Some(
            c.stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn"),
        ))
    }
    pub(crate) fn signal(&self, sig: rustix::process::Signal) {
        let pid = self.0.as_ref().expect("running").id();
        rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), sig)
            .unwrap();
    }
    pub(crate) fn finish(mut self) -> Run {
        self.0.take().unwrap().wait_with_output().unwrap().into()
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A consumer that, once granted, runs a shell writing the fencing token it was given.
pub(crate) fn consumer_writing_token(h: &Host) -> Bg {
    let out = h.s.path("token.txt");
    let script = format!(
        "printf '%s %s' \"${{REPOCH_FENCING_TOKEN-unset}}\" \"${{REPOCH_FENCING_CLUSTER-unset}}\" > {}",
        out.display()
    );
    let mut c = h.s.consumer(
        &h.id,
        "consumer.key",
        "grant.cbor",
        &["/bin/sh", "-c", &script],
    );
    c.env("REPOCH_FENCING_TOKEN", "inherited");
    Bg::spawn(c)
}

/// `repoch recover` of the host's deployment with a consumer; the two results.
pub(crate) fn recover(h: &Host) -> (Run, Run) {
    let c = consumer_writing_token(h);
    let r = run(h.s.recover(&h.id, 20, &[]));
    (r, c.finish())
}

pub(crate) fn epoch_of(h: &Host) -> String {
    h.s.status(&h.id).json()["epoch"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The registry's claim of `fleet`, as etcdctl reads it: its create revision and value.
fn claim_of(
    etcd: &Etcd,
    prefix: &str,
    fleet: &str,
) -> Option<(i64, repoch_protocol::fleet::FleetClaim)> {
    let (created, value) = etcd.value(&format!("{prefix}/epochs/{fleet}"))?;
    let claim =
        <repoch_protocol::fleet::FleetClaim as repoch_protocol::Canonical>::from_bytes(&value)
            .unwrap();
    Some((created, claim))
}

/// The same: its create revision and the host it names.
pub(crate) fn registered(etcd: &Etcd, prefix: &str, fleet: &str) -> Option<(i64, String)> {
    claim_of(etcd, prefix, fleet).map(|(revision, claim)| (revision, claim.host))
}

/// Removes the grant and its kept checkpoint from sandbox `s`.
fn forget_grant(s: &Sandbox) {
    // The consumer's own kept checkpoint would refuse a rollback by itself (its own test:
    // tests/native/checkpoint.rs): the grant and its checkpoint go, as on a reverted or a
    // new machine.
    for e in std::fs::read_dir(s.dir.path()).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().starts_with("grant.cbor") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
}

/// `repoch --json audit --registry MANIFEST LOG` of a host's deployment.
pub(crate) fn audit_registry(h: &Host) -> Run {
    h.s.repoch(&[
        "--json",
        "audit",
        "--registry",
        h.s.path("manifest.toml").to_str().unwrap(),
        h.s.log(&h.id).to_str().unwrap(),
    ])
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

pub(crate) fn two_hosts_of_one_fleet_recover_once_and_the_loser_writes_nothing() {
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
    // Asked again, the same repochd asks the registry again and says the same: the fleet
    // epoch's verdict is the registry's, not kept as if b's own epoch were used (its
    // consumer was turned away at its handshake, and the recovery read consumer-absent).
    let (r, got) = recover(&b);
    assert_eq!(r.reasons(), ["epoch-consumed"], "{}", r.stdout);
    assert!(r.stdout.contains("host-a"), "{}", r.stdout);
    assert_ne!(got.code, Outcome::Success);
    assert_eq!(epoch_of(&b), "enrolled");
}

/// Whether a recovery's pair of results is a grant (both sides say so).
pub(crate) fn granted(r: &Run, got: &Run) -> bool {
    let both = r.code == Outcome::Success && got.code == Outcome::Success;
    assert!(
        both || (r.code != Outcome::Success && got.code != Outcome::Success),
        "repoch and the consumer disagree: {}{} / {}{}",
        r.stdout,
        r.stderr,
        got.stdout,
        got.stderr
    );
    both
}

const BARRIERS: &[&str] = &[
    "after-reserve",
    "after-observe",
    "after-connect",
    "before-intent",
    "after-intent",
    "after-custody",
    "after-final-1",
    "after-claim",
    "after-consume",
    "after-receipt",
    "after-final-2",
    "after-dispatch",
    "after-acknowledgement",
];

pub(crate) fn two_hosts_recovering_at_once_with_one_stopped_at_every_barrier_grant_once() {
    // Proves: host A's repochd stopped at each barrier in turn while host B recovers the
    // same fleet deployment in full, then A continued: exactly one grant, ever, and it is
    // the host the registry names. Before A's claim, B wins and A is refused (nothing
    // written before A's intent; withheld epoch-consumed after it); from A's claim on, A
    // wins and B is refused before its intent.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    for (n, barrier) in BARRIERS.iter().enumerate() {
        let fleet = format!("billing-{n}");
        let (a, _) = enroll_host(&etcd, &px, &fleet, "host-a");
        let (b, _) = enroll_host(&etcd, &px, &fleet, "host-b");
        let da = AtBarrier::start(&a.s, barrier);
        let ca = consumer_writing_token(&a);
        let ra = Bg::spawn(a.s.recover(&a.id, 30, &[]));
        da.reached();
        let _db = b.s.daemon();
        let (rb, gb) = recover(&b);
        da.signal(rustix::process::Signal::CONT);
        let (ra, ga) = (ra.finish(), ca.finish());
        let (won_a, won_b) = (granted(&ra, &ga), granted(&rb, &gb));
        assert!(
            won_a ^ won_b,
            "{barrier}: exactly one grant: A {}{} / B {}{}",
            ra.stdout,
            ra.stderr,
            rb.stdout,
            rb.stderr
        );
        let (_, claim) = claim_of(&etcd, &px, &fleet).expect("claimed");
        let a_first = BARRIERS.iter().position(|b| *b == "after-claim").unwrap() <= n;
        assert_eq!(won_a, a_first, "{barrier}: who wins");
        let (winner, loser, lost) = if won_a { (&a, &b, &rb) } else { (&b, &a, &ra) };
        assert_eq!(
            claim.deployment.to_hex(),
            winner.id,
            "{barrier}: the registry names the winner"
        );
        assert_eq!(
            lost.reasons(),
            ["epoch-consumed"],
            "{barrier}: {}{}",
            lost.stdout,
            lost.stderr
        );
        // From before-intent on, A has looked (the key was unclaimed then): it writes its
        // intent, and its claim finds B's.
        let written = BARRIERS.iter().position(|b| *b == "before-intent").unwrap() <= n;
        let expect = if won_a || !written {
            "enrolled"
        } else {
            "withheld"
        };
        assert_eq!(epoch_of(loser), expect, "{barrier}: the loser's epoch");
        assert_eq!(epoch_of(winner), "receipted");
    }
}

pub(crate) fn a_log_reverted_to_before_the_grant_is_refused_by_the_registry() {
    // Proves: host A's epoch log reverted after its grant to what it was before (as a VM
    // snapshot revert or a restored block device does: the same file, its old bytes; a
    // root's truncation is the same), repochd restarted: the log says `enrolled` again,
    // but the registry refuses (epoch-consumed naming A's own earlier claim) before the
    // intent: nothing written, nothing granted.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let log = a.s.log(&a.id);
    let before = std::fs::read(&log).unwrap();
    // A backup of the whole state directory too, taken before the grant (restored last).
    let state = a.s.root.join("var/lib/repoch");
    let backup = a.s.path("backup");
    let cp = |from: &std::path::Path, to: &std::path::Path| {
        let o = std::process::Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(to)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "cp: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    cp(&state, &backup);
    {
        let _d = a.s.daemon();
        let (r, got) = recover(&a);
        assert_granted_with_token(&etcd, &px, &a, &r, &got);
    }
    // The fleet audit: A's log holds the claim the registry recorded.
    let r = audit_registry(&a);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    let j = r.json();
    assert_eq!(j["registry"]["logs"][0]["verdict"], "consistent");
    assert_eq!(j["registry"]["fleets"][0]["host"], "host-a");
    assert_eq!(j["registry"]["fleets"][0]["deployment"], a.id.as_str());
    unset_append_only(&log);
    let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    f.set_len(before.len() as u64).unwrap();
    drop(f);
    assert_eq!(std::fs::read(&log).unwrap(), before);
    forget_grant(&a.s);
    assert_eq!(
        epoch_of(&a),
        "enrolled",
        "the reverted log forgot the grant"
    );
    // The fleet audit catches the revert: the registry recorded A's intent, the log has
    // only its genesis (exit 5, the evidence pair).
    let r = audit_registry(&a);
    assert_eq!(r.code, Outcome::Inconsistent, "{}{}", r.stdout, r.stderr);
    // The report, then the refusal.
    let j = r.json_lines()[0].clone();
    assert_eq!(
        r.json()["refusals"][0]["reason"],
        "registry-rollback",
        "{}",
        r.stdout
    );
    assert_eq!(j["registry"]["logs"][0]["verdict"], "rollback");
    let evidence = &j["registry"]["logs"][0]["evidence"];
    assert!(
        evidence["registry"]
            .as_str()
            .unwrap()
            .contains("/epochs/billing"),
        "{evidence}"
    );
    assert!(
        evidence["log"]
            .as_str()
            .unwrap()
            .starts_with("no such intent: 1 record(s)"),
        "{evidence}"
    );
    let _d = a.s.daemon();
    let (r, got) = recover(&a);
    assert!(!granted(&r, &got));
    assert_eq!(
        r.reasons(),
        ["epoch-consumed"],
        "{}{}\nconsumer: {}{}",
        r.stdout,
        r.stderr,
        got.stdout,
        got.stderr
    );
    assert!(r.stdout.contains("host-a"), "{}", r.stdout);
    assert_eq!(
        epoch_of(&a),
        "enrolled",
        "refused before the intent: nothing written"
    );
    assert!(!a.s.path("grant.cbor").exists());
    drop(_d);
    // The state directory restored from its backup (new inodes: the host itself refuses
    // it as replaced, before the registry is asked): still nothing granted.
    clear_append_only(&state);
    std::fs::remove_dir_all(&state).unwrap();
    cp(&backup, &state);
    let _d = a.s.daemon();
    let (r, got) = recover(&a);
    assert!(!granted(&r, &got), "{}{}", r.stdout, r.stderr);
    assert!(!r.reasons().is_empty(), "{}{}", r.stdout, r.stderr);
    assert!(!a.s.path("grant.cbor").exists());
    assert_eq!(registered(&etcd, &px, "billing").unwrap().1, "host-a");
}

pub(crate) fn members_killed_stopped_and_restarted_never_give_a_grant_without_the_registrys_win() {
    // Proves, on one cluster, each a separate fleet deployment:
    // 1. one member killed (-9) while A is stopped right before its claim: granted, the
    //    token registered;
    // 2. two members killed: recovery refused registry-unavailable before the intent,
    //    nothing written; the members restarted from their data directories, the same
    //    recovery is granted;
    // 3. two members killed while A is stopped right before its claim: not granted
    //    (withheld, uncertain), and no key names another host;
    // 4. the leader SIGSTOPped while A is stopped right before its claim, then A
    //    continued: granted with a registered token, or not granted; never both;
    // 5. every member killed and restarted from its data directory: the claims persist,
    //    and a second host of the first fleet deployment is refused.
    require_root!();
    let sb = Sandbox::new();
    let mut etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let all = [0, 1, 2];

    // 1.
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let da = AtBarrier::start(&a.s, "after-final-1");
    let ca = consumer_writing_token(&a);
    let ra = Bg::spawn(a.s.recover(&a.id, 30, &[]));
    da.reached();
    let leader = etcd.leader(&all);
    etcd.kill(leader);
    da.signal(rustix::process::Signal::CONT);
    let (r, got) = (ra.finish(), ca.finish());
    assert_granted_with_token(&etcd, &px, &a, &r, &got);
    drop(da);
    etcd.restart(leader);
    etcd.wait_ready(&all);

    // 2.
    let (c, _) = enroll_host(&etcd, &px, "billing-2", "host-c");
    etcd.kill(0);
    etcd.kill(1);
    {
        let _d = c.s.daemon();
        let (r, got) = recover(&c);
        assert!(!granted(&r, &got));
        assert_eq!(
            r.reasons(),
            ["registry-unavailable"],
            "{}{}",
            r.stdout,
            r.stderr
        );
        assert_eq!(
            epoch_of(&c),
            "enrolled",
            "refused before the intent: nothing written"
        );
        etcd.restart(0);
        etcd.restart(1);
        etcd.wait_ready(&all);
        let (r, got) = recover(&c);
        assert!(granted(&r, &got), "{}{}", r.stdout, r.stderr);
    }

    // 3.
    let (d, _) = enroll_host(&etcd, &px, "billing-3", "host-d");
    {
        let dd = AtBarrier::start(&d.s, "after-final-1");
        let cd = consumer_writing_token(&d);
        let rd = Bg::spawn(d.s.recover(&d.id, 30, &[]));
        dd.reached();
        etcd.kill(1);
        etcd.kill(2);
        dd.signal(rustix::process::Signal::CONT);
        let (r, got) = (rd.finish(), cd.finish());
        assert!(!granted(&r, &got));
        assert_eq!(
            r.reasons(),
            ["registry-unavailable"],
            "{}{}",
            r.stdout,
            r.stderr
        );
        assert_eq!(r.code, Outcome::Uncertain, "{}{}", r.stdout, r.stderr);
        assert_eq!(epoch_of(&d), "withheld");
        etcd.restart(1);
        etcd.restart(2);
        etcd.wait_ready(&all);
        if let Some((_, host)) = registered(&etcd, &px, "billing-3") {
            assert_eq!(host, "host-d", "only this host's claim can be there");
        }
    }

    // 4.
    let (e, _) = enroll_host(&etcd, &px, "billing-4", "host-e");
    {
        let de = AtBarrier::start(&e.s, "after-final-1");
        let ce = consumer_writing_token(&e);
        let re = Bg::spawn(e.s.recover(&e.id, 30, &[]));
        de.reached();
        let leader = etcd.leader(&all);
        etcd.signal(leader, rustix::process::Signal::STOP);
        de.signal(rustix::process::Signal::CONT);
        let (r, got) = (re.finish(), ce.finish());
        etcd.signal(leader, rustix::process::Signal::CONT);
        etcd.wait_ready(&all);
        if granted(&r, &got) {
            let revision = got.json()["grant"]["fencing"]["revision"].as_u64().unwrap();
            let (created, host) = registered(&etcd, &px, "billing-4").expect("registered");
            assert_eq!((created as u64, host.as_str()), (revision, "host-e"));
        } else {
            assert_eq!(
                r.reasons(),
                ["registry-unavailable"],
                "{}{}",
                r.stdout,
                r.stderr
            );
        }
    }

    // 5.
    for i in all {
        etcd.kill(i);
    }
    for i in all {
        etcd.restart(i);
    }
    etcd.wait_ready(&all);
    assert_eq!(registered(&etcd, &px, "billing").unwrap().1, "host-a");
    assert_eq!(registered(&etcd, &px, "billing-2").unwrap().1, "host-c");
    let (b, _) = {
        // The fleet epoch is used: a new host cannot even enroll for it.
        let s = Sandbox::new();
        let m = s.manifest(&etcd.registry_toml("billing", "host-b", &px));
        let p = s.path("manifest.toml");
        std::fs::write(&p, &m).unwrap();
        let r = s.enroll_manifest(&p);
        assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
        assert!(
            r.stdout.contains("is used") || r.stderr.contains("is used"),
            "{}{}",
            r.stdout,
            r.stderr
        );
        (s, r)
    };
    drop(b);
}

pub(crate) fn a_successors_fencing_token_is_larger_than_its_predecessors() {
    // Proves: a deployment recovered with a registry, then its successor (enrolled with
    // `predecessor`, a new fleet name, on the same cluster) recovered too: the successor's
    // fencing token has the same cluster and a larger revision, so storage that keeps the
    // largest token refuses the predecessor's root. The successor's enrollment refuses a
    // token floor below the token its predecessor's log consumed with (found by attacking
    // the release binaries: a successor enrolled with floor 5 after a predecessor's 44 got
    // token 9, and enroll, recover and the audit all exited 0).
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (first, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let t1 = {
        let _d = first.s.daemon();
        let (r, got) = recover(&first);
        assert_granted_with_token(&etcd, &px, &first, &r, &got);
        got.json()["grant"]["fencing"].clone()
    };
    forget_grant(&first.s);
    let Host { s, id } = first;
    let p = s.path("successor.toml");
    let successor = |floor: u64| {
        let m = s
            .manifest(&format!(
                "predecessor = {id:?}\n{}token_floor = {floor}\n",
                etcd.registry_toml("billing-next", "host-a", &px)
            ))
            .replace(
                &format!("{}/journal", s.srv.display()),
                &format!("{}/journal-next", s.srv.display()),
            );
        std::fs::write(&p, &m).unwrap();
        s.enroll_manifest(&p)
    };
    // A floor below the token the predecessor's log consumed with: refused, naming it
    // (once enrolled: a cluster rebuilt in between gave the successor a smaller token).
    let t1_revision = t1["revision"].as_u64().unwrap();
    let r = successor(t1_revision - 1);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(&format!(
            "below the fencing token {t1_revision} (cluster {})",
            t1["cluster"].as_str().unwrap()
        )),
        "{}",
        r.stdout
    );
    let r = successor(t1_revision);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    let next = Host {
        id: r.json()["deployment"].as_str().unwrap().to_owned(),
        s,
    };
    let _d = next.s.daemon();
    let (r, got) = recover(&next);
    assert!(granted(&r, &got), "{}{}", r.stdout, r.stderr);
    let t2 = got.json()["grant"]["fencing"].clone();
    assert_eq!(t2["cluster"], t1["cluster"]);
    assert!(
        t2["revision"].as_u64().unwrap() > t1["revision"].as_u64().unwrap(),
        "{t1} then {t2}"
    );
}

// ---- a partition between repochd and the majority ----

/// `cmd` in network namespace `ns`, or here.
pub(crate) fn within(ns: Option<&Netns>, cmd: std::process::Command) -> std::process::Command {
    match ns {
        Some(n) => n.wrap(&cmd),
        None => cmd,
    }
}

/// repochd of `h` started in network namespace `ns`, stopped at `barrier` if one is named.
pub(crate) fn daemon_in(h: &Host, ns: &Netns, barrier: Option<&str>) -> Daemon {
    let log = h.s.path("repochd.log");
    let mut c = h.s.cmd("repochd");
    if let Some(b) = barrier {
        c.env("REPOCH_BARRIER", b);
    }
    let child = ns
        .wrap(&c)
        .stderr(std::fs::File::create(&log).unwrap())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("repochd");
    let d = Daemon { child, log };
    d.wait_log("repochd ready");
    d
}

/// A new host of `fleet`: its own sandbox, enrolled (from network namespace `ns`, or here)
/// under host name `host`; the enrollment's output.
pub(crate) fn enroll_host_in(
    ns: Option<&Netns>,
    etcd: &Etcd,
    prefix: &str,
    fleet: &str,
    host: &str,
) -> (Host, Run) {
    let s = Sandbox::new();
    let m = s.manifest(&etcd.registry_toml(fleet, host, prefix));
    let p = s.path("manifest.toml");
    std::fs::write(&p, &m).unwrap();
    let c = s.enroll_cmd(&p);
    let r = run(within(ns, c));
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

pub(crate) fn a_partition_between_repochd_and_the_majority_never_grants_without_the_registrys_win()
{
    // Proves: repochd and one etcd member in a network namespace of the test's (R), the two
    // other members in another (E), joined by a veth pair. With the veth down (repochd
    // reaches only the minority): a recovery is refused registry-unavailable before its
    // intent, nothing written, and is granted once the veth is up again; a recovery whose
    // claim is cut off by the partition (repochd stopped right before its claim, the veth
    // taken down, repochd continued) is not granted: uncertain, withheld, and no key names
    // another host.
    require_root!();
    let sb = Sandbox::new();
    let r = Netns::new(&format!("{}r", sb.tag));
    let e = Netns::another(&format!("{}e", sb.tag));
    let dev = r.veth_to(&e, "10.231.0.1/24", "10.231.0.2/24");
    let mut etcd = Etcd::start_placed(
        &sb.path("etcd"),
        &[
            ("10.231.0.1", Some(r.name.as_str())),
            ("10.231.0.2", Some(e.name.as_str())),
            ("10.231.0.2", Some(e.name.as_str())),
        ],
        Some(e.name.as_str()),
    );
    let all = [0, 1, 2];
    let px = prefix(&sb);

    // 1. Partitioned before the recovery, then healed.
    let (a, _) = enroll_host_in(Some(&r), &etcd, &px, "billing", "host-a");
    {
        let _d = daemon_in(&a, &r, None);
        r.link(&dev, false);
        let (res, got) = recover(&a);
        assert!(!granted(&res, &got));
        assert_eq!(
            res.reasons(),
            ["registry-unavailable"],
            "{}{}",
            res.stdout,
            res.stderr
        );
        assert_eq!(epoch_of(&a), "enrolled", "nothing written");
        r.link(&dev, true);
        etcd.wait_ready(&all);
        let (res, got) = recover(&a);
        assert!(granted(&res, &got), "{}{}", res.stdout, res.stderr);
        assert_eq!(registered(&etcd, &px, "billing").unwrap().1, "host-a");
    }

    // 2. The claim cut off by the partition.
    let (b, _) = enroll_host_in(Some(&r), &etcd, &px, "billing-2", "host-b");
    {
        let d = daemon_in(&b, &r, Some("after-final-1"));
        let c = consumer_writing_token(&b);
        let rec = Bg::spawn(b.s.recover(&b.id, 60, &[]));
        stopped_at(&d.log, d.child.id(), "after-final-1", "repochd");
        r.link(&dev, false);
        let pid = rustix::process::Pid::from_raw(d.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
        let (res, got) = (rec.finish(), c.finish());
        assert!(!granted(&res, &got));
        assert_eq!(res.code, Outcome::Uncertain, "{}{}", res.stdout, res.stderr);
        assert_eq!(
            res.reasons(),
            ["registry-unavailable"],
            "{}{}",
            res.stdout,
            res.stderr
        );
        assert_eq!(epoch_of(&b), "withheld");
        r.link(&dev, true);
        etcd.wait_ready(&all);
        if let Some((_, host)) = registered(&etcd, &px, "billing-2") {
            assert_eq!(host, "host-b", "only this host's claim can be there");
        }
    }
    // Members first, then the namespaces they run in.
    for i in all {
        etcd.kill(i);
    }
}

// ---- a history of recoveries with random faults ----

/// Recoveries in the history checker (`REPOCH_FLEET_RUNS` overrides: a longer history on
/// demand). 120 in CI's budget (200 took 430 s of a loaded run): each run draws a new seed,
/// so the histories add up run after run.
const HISTORY_RUNS: usize = 120;
/// Clusters the history's recoveries are shared between, run at once.
const HISTORY_LANES: usize = 2;

/// `toml` (a `[registry]` table of `etcd`) with `https://127.0.0.1:PORT` listed before the
/// members.
pub(crate) fn listing_first(etcd: &Etcd, toml: &str, port: u16) -> String {
    let m0 = etcd.members[0].endpoint();
    toml.replacen(
        &format!("[{m0:?}"),
        &format!("[\"https://127.0.0.1:{port}\", {m0:?}"),
        1,
    )
}

/// A new local deployment in `s` for fleet `fleet` as host `host`, its journal of its own;
/// `https://127.0.0.1:FIRST` listed before the members when `first` is given.
fn enroll_again(
    s: &Sandbox,
    etcd: &Etcd,
    (prefix, fleet, host): (&str, &str, &str),
    n: usize,
    first: Option<u16>,
) -> String {
    let mut toml = etcd.registry_toml(fleet, host, prefix);
    if let Some(port) = first {
        toml = listing_first(etcd, &toml, port);
    }
    let m = s.manifest(&toml).replace(
        &format!("{}/journal", s.srv.display()),
        &format!("{}/journal-{n}", s.srv.display()),
    );
    let p = s.path(&format!("manifest-{n}.toml"));
    std::fs::write(&p, &m).unwrap();
    let r = s.enroll_manifest(&p);
    assert_eq!(
        r.code,
        Outcome::Success,
        "enroll {host} #{n}: {}{}",
        r.stdout,
        r.stderr
    );
    r.json()["deployment"].as_str().unwrap().to_owned()
}

/// One recovery of `id` in `s`, started: (recover, consumer).
fn start_recovery(s: &Sandbox, id: &str, out: &str) -> (Bg, Bg) {
    let c = Bg::spawn(s.consumer(id, "consumer.key", out, &[]));
    let r = Bg::spawn(s.recover(id, 40, &[]));
    (r, c)
}

/// A registry client holding host `host`'s credential alone.
pub(crate) fn writer_as(etcd: &Etcd, host: &str) -> repoch_registry::Client {
    repoch_registry::Client::connect(&etcd.spec_as(host), std::time::Duration::from_secs(5))
        .unwrap()
}

/// Whether `client`'s write of `key` is refused by etcd for its permissions.
pub(crate) fn denied(client: &mut repoch_registry::Client, key: &str) -> bool {
    match client.create(key.as_bytes(), b"planted") {
        Err(repoch_registry::Error::Refused(why)) => why.starts_with("PermissionDenied"),
        other => panic!("{key}: {other:?}"),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    KillOne,
    StopLeader,
    KillTwo,
    RevertWinner,
    /// One member's data copied and started alone where host a looks first.
    Fork,
    /// The cluster's space quota exceeded (NOSPACE) before the recoveries start.
    Alarm,
    /// Host b's credential, held by a writer, during the recoveries: the fleet record and
    /// host a's record (refused it), then junk at the fleet epoch or host a's claim copied
    /// to another key under the fleet epochs.
    Writer,
}

/// What the holder of host b's etcd credential writes during a history's recoveries of
/// `fleet`: the fleet record and host a's record, each refused it by etcd; then junk
/// created at the fleet epoch (`junk`), or whatever the fleet epoch holds copied to
/// another key under the fleet epochs.
fn write_as_host_b(etcd: &Etcd, px: &str, fleet: &str, junk: bool) {
    let mut w = writer_as(etcd, "host-b");
    for key in [
        format!("{px}/fleets/{fleet}"),
        format!("{px}/hosts/{fleet}/host-a"),
    ] {
        assert!(denied(&mut w, &key), "{key}: host b's credential wrote it");
    }
    let epoch = format!("{px}/epochs/{fleet}");
    let (key, value) = match (junk, etcd.value(&epoch)) {
        (true, _) | (false, None) => (epoch, b"junk".to_vec()),
        (false, Some((_, held))) => (format!("{epoch}.copy"), held),
    };
    let _ = w.create(key.as_bytes(), &value);
}

pub(crate) fn a_history_of_recoveries_with_random_faults_grants_at_most_once_per_fleet_deployment()
{
    // Proves, over 120 fleet deployments (REPOCH_FLEET_RUNS), each recovered by two hosts
    // at once while a fault chosen at random (REPOCH_FLEET_SEED replays it) strikes the
    // cluster at a random moment (none; one member killed; the leader stopped for up to
    // 1.5 s; two members killed; the winner's log reverted and recovered again; host b's
    // credential writing what it may and may not) or before the recoveries start (one
    // member's data started alone where host a looks first; the space quota exceeded): at
    // most one grant per fleet deployment, every grant's token
    // the registered create revision of the key naming the granted host, no token given
    // twice, and with the cluster full nothing written on either host. The deployments are
    // shared between HISTORY_LANES lanes, each with a cluster and two hosts of its own, run
    // at once: a run mostly waits on etcd and the hosts (its faults' pauses among them).
    require_root!();
    let seed = std::env::var("REPOCH_FLEET_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let runs = std::env::var("REPOCH_FLEET_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(HISTORY_RUNS);
    eprintln!("fleet history: {runs} runs in {HISTORY_LANES} lanes, REPOCH_FLEET_SEED={seed}");
    let counts = std::thread::scope(|scope| {
        let lanes: Vec<_> = (0..HISTORY_LANES)
            .map(|lane| {
                let share = runs / HISTORY_LANES + usize::from(lane < runs % HISTORY_LANES);
                scope.spawn(move || history_lane(seed, lane, share))
            })
            .collect();
        let mut counts = std::collections::BTreeMap::<String, usize>::new();
        for lane in lanes {
            let lane = lane
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            for (k, n) in lane {
                *counts.entry(k).or_default() += n;
            }
        }
        counts
    });
    eprintln!("fleet history (seed {seed}): {counts:?}");
    assert!(
        counts.iter().any(|(k, _)| k.contains("granted to")),
        "no run granted at all: {counts:?}"
    );
}

/// One lane of the history: `runs` fleet deployments on a cluster of its own, its faults
/// drawn from `seed` and the lane's number. Returns how many runs ended how, by fault.
fn history_lane(seed: u64, lane: usize, runs: usize) -> std::collections::BTreeMap<String, usize> {
    let mut rng = fastrand::Rng::with_seed(seed.wrapping_add(lane as u64));
    let sb = Sandbox::new();
    let mut etcd = Etcd::start(&sb.path("etcd")).with_flags(&["--quota-backend-bytes", "4194304"]);
    let px = prefix(&sb);
    let fork_port = free_port(false);
    let (ha, hb) = (Sandbox::new(), Sandbox::new());
    let (mut da, _db) = (Some(ha.daemon()), hb.daemon());
    let mut tokens = std::collections::HashSet::new();
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for n in 0..runs {
        let fleet = format!("f{n}");
        let ida = enroll_again(&ha, &etcd, (&px, &fleet, "host-a"), n, Some(fork_port));
        let idb = enroll_again(&hb, &etcd, (&px, &fleet, "host-b"), n, None);
        let fault = match rng.u32(0..13) {
            0..=2 => Fault::None,
            3 | 4 => Fault::KillOne,
            5 | 6 => Fault::StopLeader,
            7 => Fault::KillTwo,
            8 => Fault::RevertWinner,
            9 | 10 => Fault::Fork,
            11 => Fault::Alarm,
            _ => Fault::Writer,
        };
        // Started before the recoveries: a copy of one member's data answering alone where
        // host a looks first; the cluster out of space.
        let fork = (fault == Fault::Fork)
            .then(|| etcd.fork_member(rng.usize(0..3), &sb.path(&format!("fork-{n}")), fork_port));
        let filler = format!("/filler-{n}/");
        if fault == Fault::Alarm {
            etcd.fill_until_nospace(&filler);
        }
        let what = format!("lane {lane} run {n} (seed {seed}), {fault:?}");
        let log_a = ha.log(&ida);
        let before_a = std::fs::read(&log_a).unwrap();
        let out = format!("grant-{n}.cbor");
        let (ra, ca) = start_recovery(&ha, &ida, &out);
        let (rb, cb) = start_recovery(&hb, &idb, &out);
        std::thread::sleep(std::time::Duration::from_millis(rng.u64(0..400)));
        let killed = strike(&mut etcd, fault, &mut rng, (&px, &fleet));
        let (ra, ca, rb, cb) = (ra.finish(), ca.finish(), rb.finish(), cb.finish());
        drop(fork);
        for i in killed {
            etcd.restart(i);
        }
        if fault == Fault::Alarm {
            // Refused before the intent on both hosts: nothing written, nothing claimed.
            for (s, id, r) in [(&ha, &ida, &ra), (&hb, &idb, &rb)] {
                assert_eq!(
                    s.status(id).json()["epoch"],
                    "enrolled",
                    "{what}: {}{}",
                    r.stdout,
                    r.stderr
                );
            }
            assert!(registered(&etcd, &px, &fleet).is_none(), "{what}");
            etcd.clear_nospace(&filler);
        }
        etcd.wait_ready(&[0, 1, 2]);
        let mut grants = Vec::new();
        for (host, r, c) in [("host-a", &ra, &ca), ("host-b", &rb, &cb)] {
            if granted(r, c) {
                grants.push((host, c.json()["grant"]["fencing"].clone()));
            }
        }
        // The winner's log reverted to before its recovery (a snapshot revert: repochd
        // restarted, forgetting the epoch it saw used), recovered again: refused.
        if fault == Fault::RevertWinner && grants.iter().any(|g| g.0 == "host-a") {
            drop(da.take());
            revert(&log_a, before_a.len());
            da = Some(ha.daemon());
            let again = format!("again-{n}.cbor");
            let (r, c) = start_recovery(&ha, &ida, &again);
            let (r, c) = (r.finish(), c.finish());
            if granted(&r, &c) {
                grants.push(("host-a", c.json()["grant"]["fencing"].clone()));
            } else {
                assert_eq!(
                    r.reasons(),
                    ["epoch-consumed"],
                    "{what}: {}{}",
                    r.stdout,
                    r.stderr
                );
            }
        }
        let outcome = judge_grants(&grants, (&etcd, &px, &fleet), &mut tokens, &what);
        *counts.entry(format!("{fault:?}: {outcome}")).or_default() += 1;
    }
    counts
}

/// The fault of a history run that strikes while the recoveries run (the others are set
/// up before them): the members it killed, to be restarted once the recoveries end.
fn strike(
    etcd: &mut Etcd,
    fault: Fault,
    rng: &mut fastrand::Rng,
    (px, fleet): (&str, &str),
) -> Vec<usize> {
    let mut killed = Vec::new();
    match fault {
        Fault::KillOne => {
            let i = rng.usize(0..3);
            etcd.kill(i);
            killed.push(i);
        }
        Fault::KillTwo => {
            let i = rng.usize(0..3);
            for j in [i, (i + 1) % 3] {
                etcd.kill(j);
                killed.push(j);
            }
        }
        Fault::StopLeader => {
            let l = etcd.leader(&[0, 1, 2]);
            etcd.signal(l, rustix::process::Signal::STOP);
            std::thread::sleep(std::time::Duration::from_millis(rng.u64(200..1500)));
            etcd.signal(l, rustix::process::Signal::CONT);
        }
        Fault::Writer => write_as_host_b(etcd, px, fleet, rng.bool()),
        Fault::None | Fault::RevertWinner | Fault::Fork | Fault::Alarm => {}
    }
    killed
}

/// `log` cut back to its first `len` bytes, as a snapshot taken before would have it.
fn revert(log: &std::path::Path, len: usize) {
    unset_append_only(log);
    let f = std::fs::OpenOptions::new().write(true).open(log).unwrap();
    f.set_len(len as u64).unwrap();
}

/// A history run's grants judged: at most one, its token the create revision of the
/// registered key naming the granted host, never a token given before in this cluster.
/// Returns how the run ended.
fn judge_grants(
    grants: &[(&str, serde_json::Value)],
    (etcd, px, fleet): (&Etcd, &str, &str),
    tokens: &mut std::collections::HashSet<u64>,
    what: &str,
) -> String {
    assert!(
        grants.len() <= 1,
        "{what}: {} grants: {grants:?}",
        grants.len()
    );
    let Some((host, token)) = grants.first() else {
        return "not granted".into();
    };
    let (created, named) = registered(etcd, px, fleet).expect("a grant's claim is registered");
    assert_eq!(named, *host, "{what}: the key names the granted host");
    let revision = token["revision"].as_u64().unwrap();
    assert_eq!(
        revision as i64, created,
        "{what}: the token is the create revision"
    );
    assert!(
        tokens.insert(revision),
        "{what}: token {revision} given twice"
    );
    format!("granted to {host}")
}

pub(crate) fn a_fleet_key_rewritten_before_the_dispatch_withholds_and_a_deleted_one_is_caught_by_the_audit(
) {
    // Proves: (1) host A stopped after its second final verification (claimed, consumed,
    // receipted), the fleet epoch's key rewritten by someone with write access to etcd,
    // A continued: withheld registry-changed, no grant sent; (2) a granted deployment whose
    // key is then deleted (or lost to an older etcd snapshot): `repoch audit --registry`
    // reports the log's token as unregistered, registry-rollback, exit 5.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let all = [0, 1, 2];

    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    {
        let d = AtBarrier::start(&a.s, "after-final-2");
        let c = consumer_writing_token(&a);
        let rec = Bg::spawn(a.s.recover(&a.id, 30, &[]));
        d.reached();
        let key = format!("{px}/epochs/billing");
        let out = etcd.etcdctl(&all, &["put", &key, "rewritten"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        d.signal(rustix::process::Signal::CONT);
        let (r, got) = (rec.finish(), c.finish());
        assert!(!granted(&r, &got));
        assert_eq!(
            r.reasons(),
            ["registry-changed"],
            "{}{}",
            r.stdout,
            r.stderr
        );
        assert_eq!(epoch_of(&a), "withheld");
        assert!(!a.s.path("grant.cbor").exists(), "no grant was sent");
    }

    let (b, _) = enroll_host(&etcd, &px, "billing-2", "host-b");
    {
        let _d = b.s.daemon();
        let (r, got) = recover(&b);
        assert!(granted(&r, &got), "{}{}", r.stdout, r.stderr);
    }
    let out = etcd.etcdctl(&all, &["del", &format!("{px}/epochs/billing-2")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = audit_registry(&b);
    assert_eq!(r.code, Outcome::Inconsistent, "{}{}", r.stdout, r.stderr);
    let report = r.json_lines()[0].clone();
    assert_eq!(
        report["registry"]["logs"][0]["verdict"], "unregistered",
        "{report}"
    );
    assert_eq!(r.json()["refusals"][0]["reason"], "registry-rollback");
}

pub(crate) fn registry_credentials_others_can_write_are_refused_at_enrollment_and_at_recovery() {
    // Proves: the [registry]'s CA, certificate and key are read as root's own: a CA in a
    // directory others can write, a CA file others can write, a FIFO in its place (never
    // blocking), each refused at enrollment naming the field (exit 64, nothing kept); a
    // client key made readable by others after enrollment refuses the recovery
    // registry-unprotected before anything is written, and the same recovery is granted
    // once the key is 0600 again. (Whoever can replace the CA can stand up a registry of
    // their own and win any claim: found by attacking the release binaries.)
    require_root!();
    use std::os::unix::fs::PermissionsExt as _;
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let s = Sandbox::new();
    let toml = etcd.registry_toml("billing", "host-a", &px);
    let ca = etcd.ca().display().to_string();
    let enroll_with_ca = |path: &std::path::Path| {
        let m = s.manifest(&toml.replace(&ca, &path.display().to_string()));
        let p = s.path("manifest.toml");
        std::fs::write(&p, &m).unwrap();
        let start = std::time::Instant::now();
        let r = s.enroll_manifest(&p);
        assert!(start.elapsed().as_secs() < 10, "enrollment blocked");
        r
    };
    let open_dir = s.path("open");
    std::fs::create_dir(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::copy(etcd.ca(), open_dir.join("ca.pem")).unwrap();
    let r = enroll_with_ca(&open_dir.join("ca.pem"));
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("only root may write there"),
        "{}",
        r.stdout
    );

    let dir = s.path("creds");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(etcd.ca(), dir.join("ca.pem")).unwrap();
    std::fs::set_permissions(dir.join("ca.pem"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let r = enroll_with_ca(&dir.join("ca.pem"));
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("mode 666"), "{}", r.stdout);

    nix::unistd::mkfifo(
        &dir.join("fifo.pem"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let r = enroll_with_ca(&dir.join("fifo.pem"));
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("not a regular file"), "{}", r.stdout);
    assert!(
        std::fs::read_dir(s.root.join("var/lib/repoch/deployments"))
            .map(|d| d.count())
            .unwrap_or(0)
            == 0,
        "nothing kept"
    );

    // A key others can read, after enrollment.
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let _d = a.s.daemon();
    let host_key = etcd.host_credential("host-a").1;
    std::fs::set_permissions(&host_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (r, got) = recover(&a);
    assert!(!granted(&r, &got));
    assert_eq!(
        r.reasons(),
        ["registry-unprotected"],
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(epoch_of(&a), "enrolled", "nothing written");
    std::fs::set_permissions(&host_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (r, got) = recover(&a);
    assert!(granted(&r, &got), "{}{}", r.stdout, r.stderr);
}

pub(crate) fn a_value_planted_over_the_bound_neither_hides_a_claim_nor_blinds_the_audit() {
    // Proves: someone with etcd write access plants a value over the client's bound at the
    // fleet epoch's key (a recovery is refused registry-forged, not registry-unavailable:
    // the key exists, and holds what no recovery writes) and another beside the claims (the audit still gives each log its
    // verdict, the planted key listed as no claim). Found by attacking the release
    // binaries.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let all = [0, 1, 2];
    let big = sb.path("big");
    std::fs::write(&big, vec![b'x'; 5000]).unwrap();
    let put_big = |key: &str| {
        let o = etcd.put_file(key, &big);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let (b, _) = enroll_host(&etcd, &px, "billing-2", "host-b");
    put_big(&format!("{px}/epochs/billing"));
    put_big(&format!("{px}/epochs/zzz-planted"));
    {
        let _d = a.s.daemon();
        let (r, got) = recover(&a);
        assert!(!granted(&r, &got));
        assert_eq!(r.reasons(), ["registry-forged"], "{}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains("5000 bytes"), "{}", r.stdout);
        assert_eq!(epoch_of(&a), "enrolled", "nothing written");
    }
    {
        let _d = b.s.daemon();
        let (r, got) = recover(&b);
        assert!(granted(&r, &got), "{}{}", r.stdout, r.stderr);
    }
    let r = audit_registry(&b);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    let j = r.json();
    assert_eq!(j["registry"]["logs"][0]["verdict"], "consistent");
    let fleets = j["registry"]["fleets"].as_array().unwrap();
    assert_eq!(fleets.len(), 3, "{j}");
    assert!(
        fleets.iter().filter(|f| f["error"].is_string()).count() == 2,
        "{j}"
    );
    let _ = all;
}

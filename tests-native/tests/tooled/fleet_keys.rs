//! Once per fleet against the holder of one host's etcd credential: the fleet record is
//! signed by the key its id names and written with an administrator's credential, and
//! each host proves, at enrollment and before every intent, that its own credential cannot
//! write it, another host's record, or a key outside the prefix (docs/OPERATOR.md, "A fleet registry", "Roles first";
//! docs/THREAT-MODEL.md, "The fleet registry"). Real three-member etcd clusters with
//! authentication on and a user per host, as OPERATOR.md sets them up.

use repoch_protocol::Canonical as _;
use repoch_tests_native::*;

use crate::fleet::{
    audit_registry, daemon_in, denied, enroll_host, epoch_of, granted, prefix, recover, writer_as,
    Host,
};

/// The refusal's detail of an outcome (`--json`'s outcome line).
fn detail(r: &Run) -> String {
    r.outcome()["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Recovery of `h` refused `registry-overprivileged` naming `key`, nothing written.
fn assert_overprivileged(h: &Host, key: &str) {
    let (res, got) = recover(h);
    assert!(!granted(&res, &got), "{}{}", res.stdout, res.stderr);
    assert_eq!(
        res.reasons(),
        ["registry-overprivileged"],
        "{}{}",
        res.stdout,
        res.stderr
    );
    assert!(
        detail(&res).contains(&format!("etcd would take its write of {key}")),
        "{}",
        res.stdout
    );
    assert_eq!(epoch_of(h), "enrolled", "nothing written");
}

/// A recovery of `h` refused `reason` before its intent: nothing written.
fn refused_before_the_intent(h: &Host, reason: &str) {
    let (res, got) = recover(h);
    assert!(!granted(&res, &got), "{}{}", res.stdout, res.stderr);
    assert_eq!(res.reasons(), [reason], "{}{}", res.stdout, res.stderr);
    assert_eq!(epoch_of(h), "enrolled", "nothing written");
}

pub(crate) fn a_credential_that_could_write_what_no_hosts_may_is_refused_before_the_intent() {
    // Proves: a host whose etcd user is granted more than OPERATOR.md's least privilege
    // (write on the fleet records, or on every host record of the fleet), or a cluster whose
    // authentication is off, is refused registry-overprivileged naming the key it could
    // write, before the intent (nothing written); enrollment refuses the same (exit 64,
    // field registry.cert, nothing kept); back to least privilege, the same recovery is
    // granted. Found by attacking the release binaries: one host's credential planted,
    // copied and replayed the fleet record, and nothing asked what it could write.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let _d = a.s.daemon();
    let role = "repoch-host-a";
    let fleets = format!("{px}/fleets/");
    let hosts = format!("{px}/hosts/billing/");
    for (granted_key, named) in [
        (&fleets, format!("{px}/fleets/billing")),
        (&hosts, format!("{px}/hosts/billing/!")),
    ] {
        let widen = [
            "role",
            "grant-permission",
            role,
            "readwrite",
            granted_key,
            "--prefix",
        ];
        assert!(etcd.etcdctl_live(&widen).status.success());
        assert_overprivileged(&a, &named);
        let narrow = ["role", "revoke-permission", role, granted_key, "--prefix"];
        assert!(etcd.etcdctl_live(&narrow).status.success());
    }

    // Another host's own record, granted exactly (no fixed key of the proof names it):
    // found by listing the fleet's hosts. Found by attacking the release binaries: such a
    // role enrolled and recovered, and wrote host b's record.
    let _b = enroll_host(&etcd, &px, "billing", "host-b");
    let host_b = format!("{px}/hosts/billing/host-b");
    let widen = ["role", "grant-permission", role, "readwrite", &host_b];
    assert!(etcd.etcdctl_live(&widen).status.success());
    assert_overprivileged(&a, &host_b);
    let narrow = ["role", "revoke-permission", role, &host_b];
    assert!(etcd.etcdctl_live(&narrow).status.success());

    // Authentication off: any credential writes anything; so would this one.
    assert!(etcd.etcdctl_live(&["auth", "disable"]).status.success());
    assert_overprivileged(&a, &format!("{px}/fleets/billing"));
    let s = Sandbox::new();
    let p = s.path("manifest.toml");
    std::fs::write(
        &p,
        s.manifest(&etcd.registry_toml("billing", "host-c", &px)),
    )
    .unwrap();
    let r = s.enroll_manifest(&p);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("registry.cert")
            && r.stdout.contains("registry-overprivileged")
            && r.stdout.contains(&format!("write of {px}/fleets/billing")),
        "{}",
        r.stdout
    );
    assert!(
        etcd.get(&format!("{px}/hosts/billing/host-c")).is_none(),
        "nothing kept"
    );
    assert!(etcd.etcdctl_live(&["auth", "enable"]).status.success());
    let (res, got) = recover(&a);
    assert!(granted(&res, &got), "{}{}", res.stdout, res.stderr);
}

pub(crate) fn no_host_credential_can_plant_copy_or_replay_a_fleet_record() {
    // Proves: with OPERATOR.md's roles, the holder of host b's credential cannot write a
    // fleet record (planting one before a fleet's first enrollment, with any floor; copying
    // the record under a prefix spelt otherwise; rewriting it), nor host a's record; and a
    // record an administrator copied under another spelling of the prefix, or re-encoded
    // with another floor, is no record of the fleet's id: a host naming that id is refused
    // at enrollment, nothing kept. Found by attacking the release binaries: a record
    // planted with floor 2^62 set every token of the fleet, and a record copied under
    // `/repoch/Prod` was joined with the right fleet id: two grants on one cluster.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = format!("{}/prod", prefix(&sb));
    let (_a, first) = enroll_host(&etcd, &px, "billing", "host-a");
    let id = first.json()["fleet"]["id"].as_str().unwrap().to_owned();
    let _ = etcd.registry_toml_as("billing", "host-b", &px, Some(&id));
    let typo = px.replace("/prod", "/Prod");
    let mut b = writer_as(&etcd, "host-b");
    for key in [
        format!("{px}/fleets/pay"),
        format!("{px}/fleets/billing"),
        format!("{typo}/fleets/billing"),
        format!("{px}/hosts/billing/host-a"),
        format!("{px}/hosts/billing/host-c"),
    ] {
        assert!(denied(&mut b, &key), "{key}: host b's credential wrote it");
    }

    // What an administrator's copy makes: the record's bytes under the other spelling, and
    // the record re-encoded with another floor under it. Neither is fleet `id` there.
    let (_, bytes) = etcd.value(&format!("{px}/fleets/billing")).unwrap();
    let mut rec = repoch_protocol::fleet::FleetRecord::from_bytes(&bytes).unwrap();
    rec.prefix = typo.clone();
    rec.pin.floor = 1 << 62;
    for (n, planted) in [bytes.clone(), rec.to_bytes()].into_iter().enumerate() {
        let file = sb.path(&format!("record-{n}"));
        std::fs::write(&file, &planted).unwrap();
        let key = format!("{typo}/fleets/billing");
        assert!(etcd.etcdctl_live(&["del", &key]).status.success());
        assert!(etcd.put_file(&key, &file).status.success());
        let s = Sandbox::new();
        let p = s.path("manifest.toml");
        let toml = etcd.registry_toml_as("billing", "host-b", &typo, Some(&id));
        std::fs::write(&p, s.manifest(&toml)).unwrap();
        let r = s.enroll_manifest(&p);
        assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
        let why = [
            format!("holds the record of fleet \\\"billing\\\" under prefix \\\"{px}\\\""),
            "not the id of its key, prefix and name".to_owned(),
        ];
        assert!(r.stdout.contains(&why[n]), "{}: {}", why[n], r.stdout);
        assert!(
            etcd.get(&format!("{typo}/hosts/billing/host-b")).is_none(),
            "nothing kept"
        );
    }
}

pub(crate) fn a_cluster_rebuilt_from_its_template_never_accepts_the_old_fleet_again() {
    // Proves: host a granted; the cluster rebuilt from its template after a data loss (the
    // same cluster and member ids, revisions from the start). With the template's users
    // and roles, host b's credential cannot put the fleet record back at its revision, and
    // host b is refused registry-mismatch (no record). From a template without them, a
    // writer puts the record back at its revision, and host b is refused
    // registry-overprivileged: nothing written, no second token. Found by attacking the
    // release binaries: host b granted with token 3 after host a's 45.
    require_root!();
    let sb = Sandbox::new();
    let mut etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let (b, _) = enroll_host(&etcd, &px, "billing", "host-b");
    let key = format!("{px}/fleets/billing");
    let (created, bytes) = etcd.value(&key).unwrap();
    std::fs::write(sb.path("record"), &bytes).unwrap();
    {
        let _da = a.s.daemon();
        let (res, got) = recover(&a);
        assert!(granted(&res, &got), "{}{}", res.stdout, res.stderr);
    }
    let _db = b.s.daemon();
    let replant = |etcd: &Etcd| etcd.fill_to_revision(&px, created);

    etcd.rebuild();
    replant(&etcd);
    assert!(
        denied(&mut writer_as(&etcd, "host-b"), &key),
        "host b's credential put the record back"
    );
    refused_before_the_intent(&b, "registry-mismatch");

    etcd.rebuild_bare();
    replant(&etcd);
    assert!(etcd.put_file(&key, &sb.path("record")).status.success());
    assert_eq!(
        etcd.get(&key).unwrap()["create_revision"].as_i64(),
        Some(created),
        "the premise: the record back at its revision"
    );
    refused_before_the_intent(&b, "registry-overprivileged");
}

pub(crate) fn a_template_twin_holding_the_copied_fleet_record_is_never_joined() {
    // Proves: host a granted by the fleet's cluster; a twin built from the same template
    // (the same cluster and member ids, member certificates, users and roles) runs beside
    // it, and host b's repochd reaches the twin. Host b's credential cannot put the fleet
    // record there at its revision (PermissionDenied): host b is refused registry-mismatch,
    // no record. A twin without authentication takes a plain put of the record's bytes at
    // its revision: host b is refused registry-overprivileged. Nothing written either way,
    // no second token. Found by attacking the release binaries: the twin's copied record
    // was joined, and hosts a and b were both granted the identical token (C, 4).
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let (b, _) = enroll_host(&etcd, &px, "billing", "host-b");
    let key = format!("{px}/fleets/billing");
    let (created, bytes) = etcd.value(&key).unwrap();
    let record = sb.path("record");
    std::fs::write(&record, &bytes).unwrap();
    {
        let _da = a.s.daemon();
        let (res, got) = recover(&a);
        assert!(granted(&res, &got), "{}{}", res.stdout, res.stderr);
    }
    let ns = Netns::new(&sb.tag);
    let twin = etcd.start_twin(&sb.path("twin"), &ns.name);
    assert_eq!(
        twin.cluster_id(0),
        etcd.cluster_id(0),
        "the premise: one id"
    );
    twin.fill_to_revision(&px, created);
    let put = twin.put_file_as("host-b", &key, &record);
    assert!(
        String::from_utf8_lossy(&put.stderr).contains("permission denied"),
        "host b's credential put the record into the twin: {put:?}"
    );
    let _db = daemon_in(&b, &ns, None);
    refused_before_the_intent(&b, "registry-mismatch");

    assert!(twin.etcdctl_live(&["auth", "disable"]).status.success());
    assert!(twin.put_file(&key, &record).status.success());
    assert_eq!(
        twin.get(&key).unwrap()["create_revision"].as_i64(),
        Some(created),
        "the premise: the record copied at its revision"
    );
    refused_before_the_intent(&b, "registry-overprivileged");
}

pub(crate) fn a_claim_copied_to_another_key_is_planted_and_never_makes_the_audit_consistent() {
    // Proves: host a granted, then the cluster rebuilt (a's claim gone): the audit of a's
    // log says unregistered, exit 5. Host b's credential (readwrite on the fleet epochs, as
    // OPERATOR.md grants) puts a's claim bytes at another key under epochs/, created at
    // a's token's revision: the audit still exits 5, the log's verdict `planted`, naming
    // the key; a claim counts only at its own key. Found by attacking the release
    // binaries: one such put turned both hosts' audits into exit 0, consistent.
    require_root!();
    let sb = Sandbox::new();
    let mut etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let _ = etcd.registry_toml("billing", "host-b", &px);
    {
        let _da = a.s.daemon();
        let (res, got) = recover(&a);
        assert!(granted(&res, &got), "{}{}", res.stdout, res.stderr);
    }
    let (token, bytes) = etcd.value(&format!("{px}/epochs/billing")).unwrap();
    etcd.rebuild();
    let r = audit_registry(&a);
    assert_eq!(r.code, Outcome::Inconsistent, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        r.json_lines()[0]["registry"]["logs"][0]["verdict"],
        "unregistered"
    );

    let mut b = writer_as(&etcd, "host-b");
    // A key holding a NUL: escaped once, alike in the row and in the refusal.
    let planted = format!("{px}/epochs/billing\u{0}.0");
    let shown = format!("{px}/epochs/billing\\u{{0000}}.0");
    for n in 0.. {
        let filler = format!("{px}/epochs/filler-{n}");
        match b.create(filler.as_bytes(), b"x").unwrap() {
            repoch_registry::Created::Won { header } if header.revision >= token - 1 => break,
            _ => {}
        }
    }
    match b.create(planted.as_bytes(), &bytes).unwrap() {
        repoch_registry::Created::Won { header } => assert_eq!(
            header.revision, token,
            "the premise: the copy at the token's revision"
        ),
        other => panic!("{other:?}"),
    }
    let r = audit_registry(&a);
    assert_eq!(r.code, Outcome::Inconsistent, "{}{}", r.stdout, r.stderr);
    let j = r.json_lines()[0].clone();
    assert_eq!(j["registry"]["logs"][0]["verdict"], "planted", "{j}");
    assert!(
        j["registry"]["logs"][0]["evidence"]["registry"]
            .as_str()
            .unwrap()
            .starts_with(&shown),
        "{j}"
    );
    let last = r.json_lines().last().cloned().unwrap();
    let refusal = last["refusals"][0]["expected"].as_str().unwrap_or_default();
    assert!(
        refusal.contains(&shown) && !refusal.contains("\\\\u{"),
        "escaped once: {refusal}"
    );
}

//! Once per fleet, whatever cluster answers: the attacks of an operator's honest mistake
//! (a prefix spelt another way, a cluster rebuilt from its template) and of whoever holds
//! one member's disk (a copy started alone), each against real etcd clusters of the
//! test's own. Each ends with at most one grant per fleet deployment, the other host
//! refused before its intent with nothing written (docs/THREAT-MODEL.md, "The fleet
//! registry").

use repoch_tests_native::*;

use crate::fleet::{
    daemon_in, enroll_host, epoch_of, granted, listing_first, prefix, recover, registered, within,
    Host,
};

/// Enrolls a new host from `toml` (a `[registry]` table), from network namespace `ns` or
/// here, without asserting the outcome: (its sandbox, the run).
fn enroll_toml(ns: Option<&Netns>, toml: &str) -> (Sandbox, Run) {
    let s = Sandbox::new();
    let p = s.path("manifest.toml");
    std::fs::write(&p, s.manifest(toml)).unwrap();
    let c = s.enroll_cmd(&p);
    let r = run(within(ns, c));
    (s, r)
}

/// A new host enrolled from `toml`, which must enroll.
fn enrolled(toml: &str) -> Host {
    let (s, r) = enroll_toml(None, toml);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    Host {
        id: r.json()["deployment"].as_str().unwrap().to_owned(),
        s,
    }
}

/// The outcome's detail of a `--json` recovery.
fn detail(r: &Run) -> String {
    r.outcome()["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Host `h`'s recovery is refused `registry-mismatch` before its intent: nothing written,
/// no grant.
fn assert_mismatch(h: &Host, res: &Run, got: &Run, why: &str) {
    assert!(
        !granted(res, got),
        "a second grant: {}{}",
        res.stdout,
        res.stderr
    );
    assert_eq!(res.code, Outcome::Refused, "{}{}", res.stdout, res.stderr);
    assert_eq!(res.reasons(), ["registry-mismatch"], "{}", res.stdout);
    assert!(
        detail(res).contains(why),
        "the refusal says {why:?}: {}",
        res.stdout
    );
    assert_eq!(epoch_of(h), "enrolled", "nothing written");
    assert!(!h.s.path("grant.cbor").exists());
}

pub(crate) fn a_fleet_is_established_once_and_joined_only_by_its_id_under_its_exact_prefix() {
    // Proves: the first enrollment of a fleet establishes it and prints its id; a second
    // host without the id is refused naming it; a host whose prefix differs by one
    // letter's case, or that names another id, is refused at enrollment (nothing kept);
    // the host that names the id under the same prefix joins and pins the same fleet.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = format!("{}/prod", prefix(&sb));
    let (_a, first) = enroll_host(&etcd, &px, "billing", "host-a");
    let fleet = &first.json()["fleet"];
    assert_eq!(fleet["established"], true, "{}", first.stdout);
    let id = fleet["id"].as_str().unwrap().to_owned();
    assert_eq!(etcd.fleet_id(&px, "billing").as_deref(), Some(id.as_str()));

    // Without the id: refused, naming the record's id and its key, and never telling the
    // operator to join it (a record planted before the first enrollment reads the same).
    let (s, r) = enroll_toml(None, &etcd.registry_toml_as("billing", "host-b", &px, None));
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains(&format!("already has a record under {px} (id {id}"))
            && r.stdout
                .contains("only if that host's own enrollment printed this id"),
        "{}",
        r.stdout
    );
    assert!(std::fs::read_dir(s.root.join("var/lib/repoch/deployments"))
        .map_or(true, |mut d| d.next().is_none()));

    // Another spelling of the prefix, with the right id: no such fleet there.
    let typo = px.replace("/prod", "/Prod");
    let (_, r) = enroll_toml(
        None,
        &etcd.registry_toml_as("billing", "host-b", &typo, Some(&id)),
    );
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("no fleet record at"), "{}", r.stdout);
    assert!(
        etcd.get(&format!("{typo}/hosts/billing/host-b")).is_none(),
        "nothing kept"
    );

    // Another id under the right prefix.
    let other = "0".repeat(32);
    let (_, r) = enroll_toml(
        None,
        &etcd.registry_toml_as("billing", "host-b", &px, Some(&other)),
    );
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains(&format!("fleet id {id}")), "{}", r.stdout);
    // Not an id at all.
    let (_, r) = enroll_toml(
        None,
        &etcd.registry_toml_as("billing", "host-b", &px, Some("abc")),
    );
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("registry.fleet_id"), "{}", r.stdout);

    // The id, exactly: joined, the same fleet.
    let (_, joined) = enroll_host(&etcd, &px, "billing", "host-b");
    assert_eq!(joined.json()["fleet"]["established"], false);
    assert_eq!(joined.json()["fleet"]["id"], id.as_str());
}

pub(crate) fn a_second_cluster_from_the_same_template_is_refused_although_its_ids_are_the_same() {
    // Proves: a second cluster started from the first one's template (member names, ports,
    // token, certificates) answers with the same cluster id and member ids; a host whose
    // repochd reaches it instead of the fleet's cluster is refused registry-mismatch (no
    // fleet record there) before its intent, while the host that reaches the fleet's
    // cluster is granted: one grant.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let (b, _) = enroll_host(&etcd, &px, "billing", "host-b");
    let ns = Netns::new(&sb.tag);
    let twin = etcd.start_twin(&sb.path("twin"), &ns.name);
    assert_eq!(
        twin.cluster_id(0),
        etcd.cluster_id(0),
        "the premise: one cluster id"
    );

    {
        let _db = daemon_in(&b, &ns, None);
        let (res, got) = recover(&b);
        assert_mismatch(&b, &res, &got, "no fleet record at");
    }
    let _da = a.s.daemon();
    let (res, got) = recover(&a);
    assert!(granted(&res, &got), "{}{}", res.stdout, res.stderr);
    assert_eq!(registered(&etcd, &px, "billing").unwrap().1, "host-a");
    drop(twin);
}

pub(crate) fn a_members_data_started_alone_is_passed_over_and_never_grants() {
    // Proves: a copy of one member's data started with --force-new-cluster answers with
    // the cluster's id, that member's id and the fleet record; listed first in a host's
    // endpoints, it is passed over (its member list holds no majority of the pinned
    // members) and the claim is made in the fleet's cluster, so the two hosts together get
    // one grant. With only the fork answering, a recovery is refused before its intent,
    // nothing written.
    require_root!();
    let sb = Sandbox::new();
    let mut etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    // Hosts b (fleet billing) and d (fleet billing-2) list a port first where the fork
    // will answer, then the fleet's members; enrolled before it does.
    let port = free_port(false);
    let listing_fork_first = |fleet: &str, host: &str| {
        enrolled(&listing_first(
            &etcd,
            &etcd.registry_toml(fleet, host, &px),
            port,
        ))
    };
    let b = listing_fork_first("billing", "host-b");
    let d = listing_fork_first("billing-2", "host-d");
    let fork = etcd.fork_member(0, &sb.path("fork"), port);
    assert_eq!(
        fork.cluster_id(0),
        etcd.cluster_id(0),
        "the premise: one cluster id"
    );
    assert!(
        fork.fleet_id(&px, "billing").is_some(),
        "the premise: the record copied"
    );

    let _db = b.s.daemon();
    let (rb, gb) = recover(&b);
    let _da = a.s.daemon();
    let (ra, ga) = recover(&a);
    assert_eq!(
        [granted(&rb, &gb), granted(&ra, &ga)],
        [true, false],
        "b (the fork first): {}{}; a: {}{}",
        rb.stdout,
        rb.stderr,
        ra.stdout,
        ra.stderr
    );
    assert_eq!(ra.reasons(), ["epoch-consumed"]);
    assert_eq!(registered(&etcd, &px, "billing").unwrap().1, "host-b");
    assert!(
        fork.get(&format!("{px}/epochs/billing")).is_none(),
        "nothing claimed in the fork"
    );

    // Only the fork answers: no grant, nothing written.
    let members: Vec<usize> = (0..etcd.members.len()).collect();
    for &i in &members {
        etcd.kill(i);
    }
    let _dd = d.s.daemon();
    let (rd, gd) = recover(&d);
    assert!(!granted(&rd, &gd), "{}{}", rd.stdout, rd.stderr);
    assert_eq!(rd.code, Outcome::Refused, "{}{}", rd.stdout, rd.stderr);
    assert!(
        detail(&rd).contains("no majority of the pinned"),
        "the fork is named: {}",
        rd.stdout
    );
    assert_eq!(epoch_of(&d), "enrolled", "nothing written");
    assert!(fork.get(&format!("{px}/epochs/billing-2")).is_none());
}

pub(crate) fn a_cluster_rebuilt_from_its_template_refuses_every_recovery_of_the_old_fleet() {
    // Proves: after host a's grant, the cluster is wiped and rebuilt from its template (the
    // same cluster id, revisions from the start); host b of the same fleet is refused
    // registry-mismatch (the fleet record is gone) before its intent, not granted with a
    // smaller token.
    require_root!();
    let sb = Sandbox::new();
    let mut etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let (b, _) = enroll_host(&etcd, &px, "billing", "host-b");
    let before = etcd.cluster_id(0);
    {
        let _da = a.s.daemon();
        let (res, got) = recover(&a);
        assert!(granted(&res, &got), "{}{}", res.stdout, res.stderr);
    }
    etcd.rebuild();
    assert_eq!(
        etcd.cluster_id(0),
        before,
        "the premise: the same cluster id"
    );
    let _db = b.s.daemon();
    let (res, got) = recover(&b);
    assert_mismatch(&b, &res, &got, "no fleet record at");
}

/// A tmpfs of one page mounted over a directory: the first file written fills it (the
/// manifest), the next write (the genesis) meets `ENOSPC`. Unmounted on drop.
struct OnePage(std::path::PathBuf);

impl OnePage {
    fn over(dir: &std::path::Path) -> OnePage {
        std::fs::create_dir_all(dir).unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4k,mode=0755", "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(ok.success(), "mount tmpfs over {}", dir.display());
        OnePage(dir.to_path_buf())
    }
}

impl Drop for OnePage {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

pub(crate) fn a_failed_enrollment_leaves_no_record_in_the_registry() {
    // Proves: an enrollment that fails after it wrote its registry keys (its state
    // directory full when the genesis is appended) removes them: establishing, the fleet
    // record and the host record; joining, its host record (the fleet's record stays).
    // Each retry once the disk has room enrolls.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    // Host `host` enrolled on a full state directory: refused enroll-failed. Then the
    // retry, once it has room.
    let enroll_full = |host: &str| {
        let toml = etcd.registry_toml("billing", host, &px);
        let s = Sandbox::new();
        let p = s.path("manifest.toml");
        std::fs::write(&p, s.manifest(&toml)).unwrap();
        let full = OnePage::over(&s.root.join("var/lib/repoch/deployments"));
        let r = s.enroll_manifest(&p);
        drop(full);
        assert_first_refusal(&r, "enroll-failed");
        move || s.enroll_manifest(&p)
    };
    let (fleet_key, host_a) = (
        format!("{px}/fleets/billing"),
        format!("{px}/hosts/billing/host-a"),
    );
    let retry = enroll_full("host-a");
    assert!(etcd.get(&fleet_key).is_none(), "the fleet record removed");
    assert!(etcd.get(&host_a).is_none(), "the host record removed");
    let again = retry();
    assert_eq!(
        again.code,
        Outcome::Success,
        "{}{}",
        again.stdout,
        again.stderr
    );
    assert_eq!(
        again.json()["fleet"]["established"],
        true,
        "the retry establishes it"
    );
    let id = etcd.fleet_id(&px, "billing").unwrap();

    // Joining: only the host record was this enrollment's.
    let host_b = format!("{px}/hosts/billing/host-b");
    let retry = enroll_full("host-b");
    assert!(etcd.get(&host_b).is_none(), "the host record removed");
    assert_eq!(
        etcd.fleet_id(&px, "billing"),
        Some(id.clone()),
        "the fleet's stays"
    );
    let again = retry();
    assert_eq!(
        again.code,
        Outcome::Success,
        "{}{}",
        again.stdout,
        again.stderr
    );
    assert_eq!(again.json()["fleet"]["id"], id.as_str());
    assert!(etcd.get(&host_b).is_some());
}

pub(crate) fn planted_keys_neither_blind_the_audit_nor_block_an_enrollment_and_print_escaped() {
    // Proves: an etcd writer's 4,097 keys under PREFIX/epochs/ and as many under a fleet's
    // PREFIX/hosts/FLEET/ (one more than a page) neither turn the audit's finding (a
    // granted log whose claim was deleted: unregistered, exit 5) into registry-unavailable
    // nor block that fleet's enrollment; a key holding ESC and newlines is printed escaped
    // by the audit (no raw control byte on its stdout; --json carries its exact bytes in
    // hex).
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    {
        let _d = a.s.daemon();
        let (res, got) = recover(&a);
        assert!(granted(&res, &got), "{}{}", res.stdout, res.stderr);
    }
    let del = etcd.etcdctl(&[0, 1, 2], &["del", &format!("{px}/epochs/billing")]);
    assert!(del.status.success());
    let mut writer =
        repoch_registry::Client::connect(&etcd.spec(), std::time::Duration::from_secs(5)).unwrap();
    for i in 0..=repoch_registry::LIST_MAX {
        for dir in ["epochs", "hosts/billing-2"] {
            let key = format!("{px}/{dir}/planted-{i:05}");
            writer.create(key.as_bytes(), b"planted").unwrap();
        }
    }
    let forged = format!("{px}/epochs/x\x1b[8m\naudit: verified\n");
    writer.create(forged.as_bytes(), b"\x1b[2J").unwrap();

    let r = crate::fleet::audit_registry(&a);
    assert_eq!(r.code, Outcome::Inconsistent, "{}{}", r.stdout, r.stderr);
    let j = r.json_lines()[0].clone();
    assert_eq!(j["registry"]["logs"][0]["verdict"], "unregistered", "{j}");
    let fleets = j["registry"]["fleets"].as_array().unwrap();
    assert_eq!(
        fleets.len(),
        repoch_registry::LIST_MAX + 2,
        "every key, none hidden"
    );
    let hex: String = forged.bytes().map(|b| format!("{b:02x}")).collect();
    assert!(fleets.iter().any(|f| f["key_hex"] == hex.as_str()), "exact");

    let mut text = a.s.cmd("repoch");
    text.args([
        "audit",
        "--registry",
        a.s.path("manifest.toml").to_str().unwrap(),
        a.s.log(&a.id).to_str().unwrap(),
    ]);
    let t = run(text);
    assert_eq!(t.code, Outcome::Inconsistent, "{}{}", t.stdout, t.stderr);
    assert!(
        !t.stdout.contains('\x1b') && !t.stderr.contains('\x1b'),
        "{}",
        t.stdout
    );
    assert!(
        t.stdout
            .contains("x\\u{001b}[8m\\u{000a}audit: verified\\u{000a} holds no fleet claim"),
        "{}",
        t.stdout
    );
    assert!(
        t.stdout.trim_end().ends_with("audit: FAILED"),
        "{}",
        t.stdout
    );

    let (_, enrolled) = enroll_host(&etcd, &px, "billing-2", "host-b");
    assert_eq!(enrolled.json()["fleet"]["established"], true);
}

/// Keys an etcd writer plants: one more than the audit once read under a directory.
const PLANTED: usize = 200_001;
/// The audit's peak resident set however many keys it reads: a page of them, the
/// client and the runtime (22 MiB measured for 200,001 keys), with room; keeping each
/// key, as the audit once did, takes 1.8 KiB a key.
const AUDIT_PEAK_KIB_MAX: u64 = 64 * 1024;

pub(crate) fn more_planted_keys_than_any_bound_neither_blind_the_audit_nor_grow_its_memory() {
    // Proves: an etcd writer's 200,001 keys under PREFIX/epochs/ (the audit once kept every
    // key in memory and read at most 200,000: exit 2, registry-unavailable) neither hide
    // the audit's finding (a granted log whose claim was deleted: unregistered, exit 5) nor
    // any key (each is listed), and the audit's peak memory is a page's, not the keys'.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd")).with_flags(&["--max-txn-ops=10000"]);
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    {
        let _d = a.s.daemon();
        let (res, got) = recover(&a);
        assert!(granted(&res, &got), "{}{}", res.stdout, res.stderr);
    }
    let del = etcd.etcdctl(&[0, 1, 2], &["del", &format!("{px}/epochs/billing")]);
    assert!(del.status.success());
    let keys: Vec<String> = (0..PLANTED)
        .map(|i| format!("{px}/epochs/planted-{i:06}"))
        .collect();
    etcd.put_many(&keys, "planted");

    let mut audit = a.s.cmd("repoch");
    audit.args([
        "--json",
        "audit",
        "--registry",
        a.s.path("manifest.toml").to_str().unwrap(),
        a.s.log(&a.id).to_str().unwrap(),
    ]);
    let (r, peak_kib) = run_with_peak(audit);
    assert_eq!(r.code, Outcome::Inconsistent, "{}", r.stderr);
    let j = r.json_lines()[0].clone();
    assert_eq!(j["registry"]["logs"][0]["verdict"], "unregistered");
    let fleets = j["registry"]["fleets"].as_array().unwrap();
    assert_eq!(fleets.len(), PLANTED, "every key, none hidden");
    assert_eq!(fleets[PLANTED - 1]["key"], keys[PLANTED - 1].as_str());
    assert!(
        peak_kib <= AUDIT_PEAK_KIB_MAX,
        "the audit of {PLANTED} keys peaked at {peak_kib} KiB, over {AUDIT_PEAK_KIB_MAX} KiB"
    );
    eprintln!("audit of {PLANTED} planted keys: peak {peak_kib} KiB");
}

pub(crate) fn a_fleet_record_rewritten_or_huge_values_planted_never_hide_a_replaced_claim() {
    // Proves: an etcd writer deletes a granted host's claim and puts its bytes back (a new
    // create revision, so the token the registry stands for is no longer the one the log
    // consumed with), then rewrites the fleet record's token floor so that floor and new
    // revision add up to the log's token, and plants 16 values of 1.45 MB (more than the
    // client decodes in one answer) and a key of 2 KiB: the audit still reports the log's
    // claim `rollback` (exit 5), its floor the one the host signed into the claim, and
    // lists each planted key as no claim. Before: `consistent`, exit 0 (the floor was the
    // record's); the huge values made it exit 2, registry-unavailable.
    require_root!();
    use repoch_protocol::Canonical as _;
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let toml = etcd.registry_toml("billing", "host-a", &px);
    let a = enrolled(&format!("{toml}token_floor = 1000\n"));
    let got = {
        let _d = a.s.daemon();
        let (res, got) = recover(&a);
        assert!(granted(&res, &got), "{}{}", res.stdout, res.stderr);
        got
    };
    let token = got.json()["grant"]["fencing"]["revision"].as_u64().unwrap();
    let value = |key: &str| etcd.value(key).unwrap().1;
    let put = |key: &str, bytes: &[u8]| {
        let file = sb.path("value.bin");
        std::fs::write(&file, bytes).unwrap();
        assert!(etcd.put_file(key, &file).status.success());
    };
    let claim_key = format!("{px}/epochs/billing");
    let claim = value(&claim_key);
    assert!(etcd
        .etcdctl(&[0, 1, 2], &["del", &claim_key])
        .status
        .success());
    put(&claim_key, &claim);
    let (again, _) = registered(&etcd, &px, "billing").unwrap();
    let fleet_key = format!("{px}/fleets/billing");
    let mut record = repoch_protocol::fleet::FleetRecord::from_bytes(&value(&fleet_key)).unwrap();
    record.pin.floor = token - again as u64;
    put(&fleet_key, &record.to_bytes());
    for i in 0..16 {
        put(&format!("{px}/epochs/zbig{i:02}"), &vec![1u8; 1_450_000]);
    }
    put(&format!("{px}/epochs/{}", "k".repeat(2048)), b"x");

    let r = crate::fleet::audit_registry(&a);
    assert_eq!(r.code, Outcome::Inconsistent, "{}{}", r.stdout, r.stderr);
    let j = r.json_lines()[0].clone();
    assert_eq!(j["registry"]["logs"][0]["verdict"], "rollback", "{j}");
    let fleets = j["registry"]["fleets"].as_array().unwrap();
    let ours = fleets
        .iter()
        .find(|f| f["key"] == claim_key.as_str())
        .unwrap();
    assert_eq!(ours["floor"], 1000, "the floor its host signed");
    let planted: Vec<&serde_json::Value> =
        fleets.iter().filter(|f| f["error"].is_string()).collect();
    assert_eq!(planted.len(), 17, "{planted:?}");
    assert!(planted.iter().any(|f| f["error"]
        .as_str()
        .unwrap()
        .contains("a value of 1450000 bytes, over 4096")));
    assert!(planted
        .iter()
        .any(|f| f["error"].as_str().unwrap().starts_with("a key of")));
}

pub(crate) fn a_full_cluster_refuses_the_recovery_before_its_intent_and_it_is_granted_once_cleared()
{
    // Proves: with etcd's space quota exceeded (the NOSPACE alarm raised by a writer
    // filling a small --quota-backend-bytes), a recovery is refused registry-unavailable
    // before its intent, nothing written and nothing claimed (it used to pass the look,
    // fail the claim and burn the epoch: withheld); once the operator frees space and
    // disarms the alarm, the same deployment is granted.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd")).with_flags(&["--quota-backend-bytes", "4194304"]);
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let filler = format!("/filler-{}/", sb.tag);
    etcd.fill_until_nospace(&filler);

    let _d = a.s.daemon();
    let (res, got) = recover(&a);
    assert!(!granted(&res, &got));
    assert_eq!(res.code, Outcome::Refused, "{}{}", res.stdout, res.stderr);
    assert_eq!(res.reasons(), ["registry-unavailable"], "{}", res.stdout);
    assert!(res.stdout.contains("space exceeded"), "{}", res.stdout);
    assert_eq!(epoch_of(&a), "enrolled", "nothing written");
    assert!(
        registered(&etcd, &px, "billing").is_none(),
        "nothing claimed"
    );

    // The operator frees space: deletes, compacts, defragments, disarms.
    etcd.clear_nospace(&filler);
    let (res, got) = recover(&a);
    assert!(granted(&res, &got), "{}{}", res.stdout, res.stderr);
    assert_eq!(registered(&etcd, &px, "billing").unwrap().1, "host-a");
}

pub(crate) fn unusable_registry_credentials_are_named_at_enrollment_and_at_recovery() {
    // Proves: a CA, certificate or key file that is no PEM of its kind, and a key that is
    // not the certificate's, are refused at enrollment naming the field and the file
    // (exit 64), not reported as a TLS transport error, and so is an endpoint whose host
    // no certificate can name; a CA replaced by garbage after
    // enrollment refuses the recovery registry-unavailable naming the file, before its
    // intent.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let toml = etcd.registry_toml("billing", "host-a", &px);
    let member_key = std::fs::read(etcd.dir.join("tls/member.key")).unwrap();
    let (host_cert, host_key) = etcd.host_credential("host-a");
    let cases: [(&str, std::path::PathBuf, &[u8], &str); 4] = [
        ("ca", etcd.ca(), b"garbage", "no PEM certificate"),
        ("cert", host_cert, b"garbage", "no PEM certificate"),
        ("key", host_key.clone(), b"garbage", "no PEM private key"),
        (
            "key",
            host_key,
            &member_key,
            "not the key of the certificate",
        ),
    ];
    for (i, (field, real, bytes, why)) in cases.iter().enumerate() {
        let bad = sb.path(&format!("bad-{i}.pem"));
        std::fs::write(&bad, bytes).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).unwrap();
        let t = toml.replace(
            &format!("{:?}", real.display().to_string()),
            &format!("{:?}", bad.display().to_string()),
        );
        let (_, r) = enroll_toml(None, &t);
        assert_eq!(r.code, Outcome::Usage, "{field}: {}{}", r.stdout, r.stderr);
        let named = format!("registry.{field} {}", bad.display());
        assert!(r.stdout.contains(&named), "{named}: {}", r.stdout);
        assert!(r.stdout.contains(why), "{why}: {}", r.stdout);
    }

    // An endpoint spelt so that no certificate can name it: the field named (it read
    // "expected usable credentials ... TLS: transport error").
    let (_, r) = enroll_toml(None, &toml.replace("https://127.0.0.1:", "https://127.1:"));
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("registry.endpoints") && r.stdout.contains("127.1 is no DNS name"),
        "{}",
        r.stdout
    );

    // A copy of the CA, enrolled, then replaced by garbage.
    let ca = sb.path("ca-copy.pem");
    std::fs::copy(etcd.ca(), &ca).unwrap();
    let t = toml.replace(
        &format!("{:?}", etcd.ca().display().to_string()),
        &format!("{:?}", ca.display().to_string()),
    );
    let a = enrolled(&t);
    std::fs::write(
        &ca,
        b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    let _d = a.s.daemon();
    let (res, got) = recover(&a);
    assert!(!granted(&res, &got));
    assert_eq!(res.reasons(), ["registry-unavailable"], "{}", res.stdout);
    assert!(
        detail(&res).contains(&format!("registry.ca {}", ca.display())),
        "{}",
        res.stdout
    );
    assert_eq!(epoch_of(&a), "enrolled", "nothing written");
}

pub(crate) fn a_claim_an_etcd_writer_planted_naming_a_host_is_reported_forged_not_a_rollback() {
    // Proves: a claim naming host a's deployment, written by someone with etcd write access
    // but without host a's issuer key, blocks the fleet epoch, and both host a's recovery
    // (refused registry-forged, nothing written, where it read epoch-consumed) and the
    // audit of host a's untouched log (registry-forged, exit 5, where it reported a
    // rollback of an intent host a never wrote) say it is forged. A claim naming host b,
    // which its host record does not enroll, is forged too.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let forger = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
    let claim = repoch_protocol::fleet::FleetClaim {
        fleet: "billing".into(),
        fleet_id: etcd.fleet_id(&px, "billing").unwrap().parse().unwrap(),
        host: "host-a".into(),
        deployment: repoch_protocol::DeploymentId::from_hex(&a.id).unwrap(),
        intent: repoch_protocol::Hash([1; 32]),
        evidence: repoch_protocol::Hash([2; 32]),
        nonce: [3; 32],
        floor: 0,
        signature: [0; 64],
    }
    .signed(&forger);
    let mut writer =
        repoch_registry::Client::connect(&etcd.spec(), std::time::Duration::from_secs(5)).unwrap();
    use repoch_protocol::Canonical as _;
    let key = format!("{px}/epochs/billing");
    writer.create(key.as_bytes(), &claim.to_bytes()).unwrap();

    let _d = a.s.daemon();
    let (res, got) = recover(&a);
    assert!(!granted(&res, &got));
    assert_eq!(res.reasons(), ["registry-forged"], "{}", res.stdout);
    assert!(
        detail(&res).contains("it names this host, whose issuer key did not sign it"),
        "{}",
        res.stdout
    );
    assert_eq!(epoch_of(&a), "enrolled", "nothing written");

    let r = crate::fleet::audit_registry(&a);
    assert_eq!(r.code, Outcome::Inconsistent, "{}{}", r.stdout, r.stderr);
    let j = r.json_lines()[0].clone();
    assert_eq!(j["registry"]["logs"][0]["verdict"], "forged", "{j}");
    assert_eq!(j["registry"]["fleets"][0]["signed"], false, "{j}");
    assert_eq!(
        r.json()["refusals"][0]["reason"],
        "registry-forged",
        "{}",
        r.stdout
    );
}

/// A TCP relay on 127.0.0.1: every connection to `first` until [`Relay::switch`], which
/// cuts those and sends every later one to `then`. Bytes are copied, never read: TLS runs
/// end to end. Stops accepting when dropped.
struct Relay {
    port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    switched: std::sync::Arc<std::sync::atomic::AtomicBool>,
    live: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Relay {
    fn start(first: String, then: String) -> Relay {
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let switched = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let live = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (stopping, to_then, open) = (stop.clone(), switched.clone(), live.clone());
        std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                let to = if to_then.load(Ordering::Relaxed) {
                    &then
                } else {
                    &first
                };
                let Ok(server) = std::net::TcpStream::connect(to) else {
                    continue;
                };
                let pipe = |mut a: std::net::TcpStream, mut b: std::net::TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut a, &mut b);
                        let _ = b.shutdown(std::net::Shutdown::Both);
                    })
                };
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server.try_clone().unwrap(), client.try_clone().unwrap());
                open.lock().unwrap().extend([client, server]);
            }
        });
        Relay {
            port,
            stop,
            switched,
            live,
        }
    }

    /// Cuts every connection made so far; the next ones go to `then`.
    fn switch(&self) {
        self.switched
            .store(true, std::sync::atomic::Ordering::Relaxed);
        for c in self.live.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.switch();
    }
}

/// `toml` (a `[registry]` table) with `https://127.0.0.1:PORT` as its first endpoint, in
/// place of the first member's, and the next `others` members' after it.
fn through(port: u16, toml: &str, others: usize) -> String {
    let start = toml.find("endpoints = [").unwrap() + "endpoints = [".len();
    let end = start + toml[start..].find(']').unwrap();
    let mut eps = vec![format!("\"https://127.0.0.1:{port}\"")];
    eps.extend(
        toml[start..end]
            .split(", ")
            .skip(1)
            .take(others)
            .map(str::to_owned),
    );
    format!("{}{}{}", &toml[..start], eps.join(", "), &toml[end..])
}

/// Host `h`'s recovery with repochd stopped at `barrier`, `relay` switched there, and
/// repochd continued: (recover, consumer).
fn recover_switching_at(h: &Host, relay: &Relay, barrier: &str) -> (Run, Run) {
    let d = AtBarrier::start(&h.s, barrier);
    let c = crate::fleet::consumer_writing_token(h);
    let rec = crate::fleet::Bg::spawn(h.s.recover(&h.id, 60, &[]));
    d.reached();
    relay.switch();
    d.signal(rustix::process::Signal::CONT);
    (rec.finish(), c.finish())
}

/// A veth pair between this network namespace (`here`) and `ns` (`there`), addresses
/// `HERE/24` and `THERE/24`; gone with `ns`.
fn veth_into(ns: &Netns, tag: &str, here: &str, there: &str) {
    let (a, b) = (format!("vh{tag}"), format!("vn{tag}"));
    let ip = |args: &[&str]| {
        let o = std::process::Command::new("ip")
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "ip {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    ip(&["link", "add", &a, "type", "veth", "peer", "name", &b]);
    ip(&["link", "set", &b, "netns", &ns.name]);
    ip(&["addr", "add", &format!("{here}/24"), "dev", &a]);
    ip(&["link", "set", &a, "up"]);
    ip(&[
        "-n",
        &ns.name,
        "addr",
        "add",
        &format!("{there}/24"),
        "dev",
        &b,
    ]);
    ip(&["-n", &ns.name, "link", "set", &b, "up"]);
}

pub(crate) fn a_relay_switched_to_a_twin_mid_recovery_never_grants() {
    // Proves: host b's first endpoint is a relay that copies bytes to a member of the
    // fleet's cluster (the other two are the fleet's); with b's recovery stopped right
    // after its intent (barrier after-final-1), the relay cuts its connections and sends
    // every later one to a cluster started from the same template (same cluster and member
    // ids, same certificates). Every read and write of a recovery is guarded in its own
    // transaction by the fleet record at its pinned revision, which the twin lacks: nothing
    // applies there, b's claim goes to the fleet's members, and of b and host a (on the
    // fleet's cluster) exactly one is granted, the one the registry names. Found by
    // attacking the release binaries: the record was checked once per endpoint, and b (then
    // with the relay as its one endpoint) was granted from the twin beside a.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let ns = Netns::new(&sb.tag);
    let short: String = sb
        .tag
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    veth_into(&ns, &short, "10.213.0.1", "10.213.0.2");
    let twin = etcd.start_twin_serving(&sb.path("twin"), &ns.name, Some("10.213.0.2"));
    assert_eq!(
        twin.cluster_id(0),
        etcd.cluster_id(0),
        "the premise: one cluster id"
    );
    let relay = Relay::start(
        format!("127.0.0.1:{}", etcd.members[0].client_port),
        format!("10.213.0.2:{}", twin.members[0].client_port),
    );
    let b = enrolled(&through(
        relay.port,
        &etcd.registry_toml("billing", "host-b", &px),
        2,
    ));
    let (rb, gb) = recover_switching_at(&b, &relay, "after-final-1");
    assert!(
        twin.get(&format!("{px}/epochs/billing")).is_none(),
        "nothing claimed in the twin"
    );
    let _da = a.s.daemon();
    let (ra, ga) = recover(&a);
    let (a_won, b_won) = (granted(&ra, &ga), granted(&rb, &gb));
    assert!(a_won != b_won, "a: {}\nb: {}", ra.stdout, rb.stdout);
    let winner = if a_won { "host-a" } else { "host-b" };
    assert_eq!(registered(&etcd, &px, "billing").unwrap().1, winner);
    drop(relay);
}

pub(crate) fn a_fleet_record_planted_with_a_minority_of_the_members_cannot_be_joined() {
    // Proves: an etcd writer who plants a fleet record before the first enrollment, pinning
    // one member of three, steers the operator to its id, but no host can join it: the
    // record's members hold no majority of the cluster's voting members (a fleet pinned so
    // would let one member's copy answer for it alone). Found by attacking the release
    // binaries: two hosts joined, and a fork of that member granted beside the cluster,
    // with the same fencing token.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    // The member a host's first endpoint answers as.
    let status = etcd.etcdctl(&[0], &["endpoint", "status", "-w", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let one = v[0]["Status"]["header"]["member_id"].as_u64().unwrap();
    let planted = repoch_protocol::fleet::FleetRecord {
        fleet: "pay".into(),
        prefix: px.clone(),
        pin: repoch_protocol::fleet::FleetPin {
            id: repoch_protocol::fleet::FleetId([0x11; 16]),
            cluster: etcd.cluster_id(0),
            members: vec![one],
            floor: 0,
        },
        host: "ghost".into(),
        established: 0,
        key: repoch_protocol::PublicKey([0; 32]),
        signature: [0; 64],
    }
    .signed(&ed25519_dalek::SigningKey::from_bytes(&[7; 32]));
    let mut writer =
        repoch_registry::Client::connect(&etcd.spec(), std::time::Duration::from_secs(5)).unwrap();
    use repoch_protocol::Canonical as _;
    writer
        .create(format!("{px}/fleets/pay").as_bytes(), &planted.to_bytes())
        .unwrap();
    let id = planted.pin.id.to_string();
    let (_, r) = enroll_toml(
        None,
        &etcd.registry_toml_as("pay", "host-c", &px, Some(&id)),
    );
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("no majority of the cluster's voting members"),
        "{}",
        r.stdout
    );
    assert!(
        etcd.get(&format!("{px}/hosts/pay/host-c")).is_none(),
        "nothing kept"
    );
}

pub(crate) fn a_connection_dropped_after_the_claim_is_dialled_again_and_granted() {
    // Proves: a host whose one endpoint's connection drops after its claim (a relay to a
    // member of the fleet's cluster cutting every connection while repochd is stopped
    // right after the claim) dials again within the call and is granted: a dropped
    // connection is not "no answer". Found by attacking the release binaries: the check
    // before the dispatch read the broken connection as no answer, withheld the recovery
    // after the claim had applied, and the fleet deployment could never be recovered.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let member = format!("127.0.0.1:{}", etcd.members[0].client_port);
    let relay = Relay::start(member.clone(), member);
    // The relay and one member: the two a majority needs, each asked alone.
    let a = enrolled(&through(
        relay.port,
        &etcd.registry_toml("billing", "host-a", &px),
        1,
    ));
    let (ra, ga) = recover_switching_at(&a, &relay, "after-claim");
    assert!(granted(&ra, &ga), "{}{}", ra.stdout, ra.stderr);
    assert_eq!(registered(&etcd, &px, "billing").unwrap().1, "host-a");
    drop(relay);
}

pub(crate) fn a_fleet_established_after_a_rebuild_with_a_floor_gives_a_larger_token() {
    // Proves: host a of fleet billing is granted with token T; the cluster is wiped and
    // rebuilt from its template (its revisions start again); the operator reads T from a's
    // log (`repoch audit --json`: logs[].fencing) and establishes the successor fleet
    // billing-2 with registry.token_floor = T; its grant's token is above T (without the
    // floor it was below: a storage fence keeping the largest token would refuse the
    // legitimate new root). A joining host's floor is a least one: a record below it is
    // refused.
    require_root!();
    let sb = Sandbox::new();
    let mut etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    {
        let _d = a.s.daemon();
        let (r, got) = recover(&a);
        assert!(granted(&r, &got), "{}{}", r.stdout, r.stderr);
    }
    let audit =
        a.s.repoch(&["--json", "audit", a.s.log(&a.id).to_str().unwrap()]);
    assert_eq!(
        audit.code,
        Outcome::Success,
        "{}{}",
        audit.stdout,
        audit.stderr
    );
    let before = audit.json()["logs"][0]["fencing"]["revision"]
        .as_u64()
        .unwrap();
    etcd.rebuild();

    let floor = format!("token_floor = {before}\n");
    let toml = etcd.registry_toml("billing-2", "host-c", &px);
    let c = enrolled(&format!("{toml}{floor}"));
    // A joining host's own floor is a least one: the record's floor may not be below it
    // (no record overrules the operator's floor); at it, the host joins.
    let toml = etcd.registry_toml("billing-2", "host-d", &px);
    let above = format!("token_floor = {}\n", before + 1000);
    let (_, r) = enroll_toml(None, &format!("{toml}{above}"));
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(&format!(
            "holds the token floor {before}, below this host's {}",
            before + 1000
        )),
        "{}",
        r.stdout
    );
    enrolled(&format!("{toml}{floor}"));
    let _d = c.s.daemon();
    let (r, got) = recover(&c);
    assert!(granted(&r, &got), "{}{}", r.stdout, r.stderr);
    let after = got.json()["grant"]["fencing"]["revision"].as_u64().unwrap();
    assert!(
        after > before,
        "the successor's token {after} is above {before}"
    );
    let (created, _) = registered(&etcd, &px, "billing-2").unwrap();
    assert_eq!(
        after,
        before + created as u64,
        "the create revision above the floor"
    );
    let told = std::fs::read_to_string(c.s.path("token.txt")).unwrap();
    assert!(told.starts_with(&format!("{after} ")), "{told}");
    // The audit of c's log against the registry agrees: the floor is the record's.
    let r = crate::fleet::audit_registry(&c);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.json()["registry"]["logs"][0]["verdict"], "consistent");
}

pub(crate) fn an_interrupted_recover_claims_nothing_and_another_host_recovers_the_fleet() {
    // Proves: an operator's `repoch recover` interrupted (SIGINT, as Ctrl-C) while repochd
    // is stopped right before the intent, the registry looked at and the consumer
    // connected, is cancelled there: refused recover-cancelled, nothing written on host a,
    // nothing claimed in etcd; the fleet epoch stays free, and host b's recovery is
    // granted with the fleet's token. Once the interrupted recover wrote its intent and
    // claimed the fleet epoch when its consumer connected: every host refused after.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let (b, _) = enroll_host(&etcd, &px, "billing", "host-b");
    let d = AtBarrier::start(&a.s, "before-intent");
    let c = crate::fleet::consumer_writing_token(&a);
    let rec = crate::fleet::Bg::spawn(a.s.recover(&a.id, 60, &[]));
    d.reached();
    rec.signal(rustix::process::Signal::INT);
    let r = rec.finish();
    assert!(
        r.code.interrupted(),
        "{:?} {}{}",
        r.code,
        r.stdout,
        r.stderr
    );
    d.signal(rustix::process::Signal::CONT);
    let told = c.finish();
    assert_eq!(
        told.code,
        Outcome::Refused,
        "{}{}",
        told.stdout,
        told.stderr
    );
    assert_eq!(
        told.json()["reason"],
        "recover-cancelled",
        "{}",
        told.stdout
    );
    assert_eq!(epoch_of(&a), "enrolled", "nothing written on host a");
    assert_eq!(registered(&etcd, &px, "billing"), None, "nothing claimed");
    drop(d);

    let _db = b.s.daemon();
    let (r, got) = recover(&b);
    assert!(granted(&r, &got), "{}{}", r.stdout, r.stderr);
    assert_eq!(registered(&etcd, &px, "billing").unwrap().1, "host-b");
}

pub(crate) fn a_replaced_member_keeps_the_fleet_and_a_second_replaced_is_a_mismatch() {
    // Proves: membership is pinned by majority, not by name. One of three members replaced
    // as etcd's runbook does (member remove, member add: a new member id, other ports)
    // leaves two of the three pinned members, and host a's recovery is granted. A second
    // replaced leaves one: host b's (another fleet, enrolled beside a's) is refused
    // registry-mismatch before its intent, nothing written, although the endpoints of the
    // removed members do not answer at all (that read registry-unavailable, whose advice,
    // to retry once a majority is back, never helps).
    require_root!();
    let sb = Sandbox::new();
    let mut etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let (b, _) = enroll_host(&etcd, &px, "payroll", "host-b");
    etcd.replace(0);
    {
        let _d = a.s.daemon();
        let (r, got) = recover(&a);
        assert!(granted(&r, &got), "{}{}", r.stdout, r.stderr);
    }
    etcd.replace(1);
    let _d = b.s.daemon();
    let (r, got) = recover(&b);
    assert_mismatch(&b, &r, &got, "no majority of the pinned");
}

/// The revision of `etcd`'s store now, as its first member answers.
fn revision(etcd: &Etcd) -> i64 {
    let out = etcd.etcdctl(&[0], &["get", "/", "-w", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["header"]["revision"].as_i64().unwrap()
}

pub(crate) fn a_copy_of_the_fleet_one_members_key_serves_is_outvoted_by_the_other_members() {
    // Proves: whoever holds one member's TLS key, reads the cluster and routes one of a
    // host's endpoints can serve a copy of the fleet: a cluster from the same template (the
    // same ids and certificates) holding the fleet record at the same revision (keys written
    // up to it, then the record's bytes). Host b enrolled with its first endpoint relayed
    // to the fleet's first member; the relay then switched to the copy. Host a is granted on
    // the fleet's cluster; host b asks each endpoint alone: the copy says unclaimed, the
    // fleet's two other members name a's claim, and b is refused registry-mismatch (the
    // members disagree) before its intent: nothing written, nothing claimed in the copy.
    // Hosts enrolling through the copy are refused, nothing kept: c, whose host record
    // lands in the copy alone; e, the same with junk an etcd writer put at that key in
    // the fleet at the same revision; d, after a's grant, which the copy does not hold. Found by attacking the release binaries: a host that asked
    // one endpoint was granted from the copy beside a's, with the larger token; an
    // enrollment through the copy wrote its records into the copy alone and exited 0.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (a, _) = enroll_host(&etcd, &px, "billing", "host-a");
    let ns = Netns::new(&sb.tag);
    let short: String = sb
        .tag
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    veth_into(&ns, &short, "10.214.0.1", "10.214.0.2");
    let copy = etcd.start_twin_serving(&sb.path("copy"), &ns.name, Some("10.214.0.2"));
    let key = format!("{px}/fleets/billing");
    let (created, bytes) = etcd.value(&key).unwrap();
    for n in 0.. {
        if revision(&copy) >= created - 1 {
            break;
        }
        let o = copy.etcdctl(&[0], &["put", &format!("/filler/{n}"), "x"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    std::fs::write(sb.path("record"), &bytes).unwrap();
    assert!(copy.put_file(&key, &sb.path("record")).status.success());
    assert_eq!(
        copy.get(&key).unwrap()["create_revision"].as_i64(),
        Some(created),
        "the premise: the record copied at its revision"
    );
    let relay = Relay::start(
        format!("127.0.0.1:{}", etcd.members[0].client_port),
        format!("10.214.0.2:{}", copy.members[0].client_port),
    );
    let via_relay = |host: &str| through(relay.port, &etcd.registry_toml("billing", host, &px), 2);
    // The copy's maker gives each host its user there (the copy answers as the fleet).
    copy.grant_host(&px, "billing", "host-b");
    let b = enrolled(&via_relay("host-b"));
    relay.switch();
    // Enrolling through the copy: the host record lands there alone.
    let refused = |host: &str, why: &str| {
        // The copy's maker gives the host its user there too.
        copy.grant_host(&px, "billing", host);
        let (_s, r) = enroll_toml(None, &via_relay(host));
        assert_ne!(r.code, Outcome::Success, "{host}: {}{}", r.stdout, r.stderr);
        assert!(r.stdout.contains(why), "{host}: {}{}", r.stdout, r.stderr);
        assert!(
            etcd.get(&format!("{px}/hosts/billing/{host}")).is_none() || host == "host-e",
            "{host}: nothing kept in the fleet"
        );
    };
    refused("host-c", "each endpoint asked alone");
    // The same, with an etcd writer's junk at that key in the fleet, at the very revision
    // the copy gives the host record: a majority holds the key at that revision, but not
    // the record.
    while revision(&copy) < revision(&etcd) {
        let o = copy.etcdctl(&[0], &["put", "/filler/align", "x"]);
        assert!(o.status.success());
    }
    while revision(&etcd) < revision(&copy) {
        let o = etcd.etcdctl(&[0], &["put", "/filler/align", "x"]);
        assert!(o.status.success());
    }
    let o = etcd.etcdctl(
        &[0],
        &["put", &format!("{px}/hosts/billing/host-e"), "junk"],
    );
    assert!(o.status.success());
    refused("host-e", "each endpoint asked alone");
    {
        let _da = a.s.daemon();
        let (ra, ga) = recover(&a);
        assert!(granted(&ra, &ga), "{}{}", ra.stdout, ra.stderr);
    }
    let _db = b.s.daemon();
    let (rb, gb) = recover(&b);
    assert!(
        !granted(&rb, &gb),
        "a second grant, from the copy: {}{}",
        rb.stdout,
        rb.stderr
    );
    assert_eq!(rb.reasons(), ["registry-mismatch"], "{}", rb.stdout);
    assert!(
        detail(&rb).contains("the members disagree"),
        "{}",
        rb.stdout
    );
    assert!(detail(&rb).contains("host-a"), "{}", rb.stdout);
    assert_eq!(epoch_of(&b), "enrolled", "nothing written");
    assert!(
        copy.get(&format!("{px}/epochs/billing")).is_none(),
        "nothing claimed in the copy"
    );
    // The copy says the fleet epoch is unused, the fleet names a's claim: an enrollment
    // is told so, not that the epoch is used or free.
    refused("host-d", "the members disagree about the fleet epoch");
    drop(relay);
}

pub(crate) fn a_host_listing_fewer_than_a_majority_of_the_members_is_refused_at_enrollment() {
    // Proves: a recovery needs a majority of the pinned members, each at an endpoint of its
    // own, to say the fleet epoch is unclaimed and then that it holds this host's claim; a
    // host whose endpoints reach fewer (one member of three, or two spellings of one) could
    // never recover, and its enrollment is refused (exit 64, registry.endpoints), nothing
    // kept in the registry.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let one = through(
        etcd.members[0].client_port,
        &etcd.registry_toml("billing", "host-a", &px),
        0,
    );
    let (_s, r) = enroll_toml(None, &one);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("registry.endpoints")
            && r.stdout
                .contains("the endpoints answer as 1 of the cluster's 3 voting members"),
        "{}",
        r.stdout
    );
    assert!(
        etcd.get(&format!("{px}/fleets/billing")).is_none(),
        "nothing kept"
    );
    // Two spellings of one member are one member.
    let twice = one.replace(
        "endpoints = [",
        &format!(
            "endpoints = [\"https://localhost:{}\", ",
            etcd.members[0].client_port
        ),
    );
    let (_s, r) = enroll_toml(None, &twice);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("1 of the cluster's 3"), "{}", r.stdout);
}

pub(crate) fn a_claim_and_host_record_copied_from_another_fleet_of_the_same_name_are_forged() {
    // Proves: fleets named alike under two prefixes of one cluster (or two clusters) are
    // two fleets. Host c of /P0's fleet billing is granted; an etcd writer copies its
    // claim and its host record into /P1, where host a's fleet billing (another fleet id)
    // lives: host a is refused registry-forged before its intent, naming the claim's fleet
    // id, nothing written. Found by attacking the release binaries: the claim did not name
    // its fleet, and host a read it as its fleet's epoch consumed by a host never enrolled.
    require_root!();
    let sb = Sandbox::new();
    let etcd = Etcd::start(&sb.path("etcd"));
    let px = prefix(&sb);
    let (p0, p1) = (format!("{px}0"), format!("{px}1"));
    let (c, _) = enroll_host(&etcd, &p0, "billing", "host-c");
    let (a, _) = enroll_host(&etcd, &p1, "billing", "host-a");
    {
        let _d = c.s.daemon();
        let (r, got) = recover(&c);
        assert!(granted(&r, &got), "{}{}", r.stdout, r.stderr);
    }
    for (from, to) in [
        (
            format!("{p0}/epochs/billing"),
            format!("{p1}/epochs/billing"),
        ),
        (
            format!("{p0}/hosts/billing/host-c"),
            format!("{p1}/hosts/billing/host-c"),
        ),
    ] {
        let (_, bytes) = etcd.value(&from).unwrap();
        std::fs::write(sb.path("copied"), bytes).unwrap();
        assert!(etcd.put_file(&to, &sb.path("copied")).status.success());
    }
    let _d = a.s.daemon();
    let (r, got) = recover(&a);
    assert!(!granted(&r, &got));
    assert_eq!(r.reasons(), ["registry-forged"], "{}", r.stdout);
    let ids = (
        etcd.fleet_id(&p0, "billing").unwrap(),
        etcd.fleet_id(&p1, "billing").unwrap(),
    );
    assert!(
        detail(&r).contains(&format!(
            "a claim for fleet id {}, not the pinned {}",
            ids.0, ids.1
        )),
        "{}",
        r.stdout
    );
    assert_eq!(epoch_of(&a), "enrolled", "nothing written");
}

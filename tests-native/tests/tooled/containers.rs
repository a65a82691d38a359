//! Container engines as controllers (docs/OPERATOR.md, "Containers"): an old root in a
//! container that its engine could start again is not contained. Each trial runs a
//! dockerd of its own (tests-native/src/engines.rs) with containers of a busybox image
//! made offline, and recovers through the real binaries.

use std::process::Stdio;

use repoch_tests_native::*;

/// A sandbox enrolled with the containers named (`docker:NAME` each) on `d`.
fn enrolled(d: &Dockerd, names: &[&str]) -> (Sandbox, String) {
    let refs: Vec<String> = names.iter().map(|n| format!("docker:{n}")).collect();
    enrolled_on(&d.engines_toml(), &refs)
}

/// A sandbox enrolled with `refs` (`ENGINE:NAME`) and `engines` as its
/// `[containment.engines]`.
fn enrolled_on(engines: &str, refs: &[String]) -> (Sandbox, String) {
    let s = Sandbox::new();
    let list: Vec<String> = refs.iter().map(|n| format!("\"{n}\"")).collect();
    let id = s.enroll_with(&s.manifest(&format!(
        "[containment]\ncontainers = [{}]\n[containment.engines]\n{engines}",
        list.join(", "),
    )));
    (s, id)
}

/// A recovery with repochd and the consumer: (recover's run, the consumer's run).
fn recover(s: &Sandbox, id: &str) -> (Run, Run) {
    let _d = s.daemon();
    let consumer = s
        .consumer(&id[..6], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let r = finish(recover_bg(s, &id[..6], 20));
    let c = finish(consumer);
    (r, c)
}

pub(crate) fn a_docker_container_its_engine_could_start_again_is_refused_until_its_policy_is_no() {
    // Proves: an old root in a container with --restart=always is refused while it runs
    // (container-running) and once stopped (container-restartable, naming the policy);
    // the harm refused: dockerd restarted (an upgrade, a reboot) starts it again within
    // seconds. With its policy set to no (docker update --restart=no) and stopped, the
    // recovery is granted. Before, a manifest naming the container's cgroup observed
    // "contained" once it was stopped, and granted.
    require_root!();
    let sb = Sandbox::new();
    let mut d = Dockerd::start(&sb.path("docker"));
    d.import_busybox();
    let full = d.run_sleeping("old-root", "always");
    let (s, id) = enrolled(&d, &["old-root"]);
    assert_refused(&s.observe(&id), "container-running");

    d.ok(&["stop", "-t", "1", "old-root"]);
    let r = s.observe(&id);
    assert_refused(&r, "container-restartable");
    assert!(r.stdout.contains("restart policy always"), "{}", r.stdout);

    // What the refusal prevents: the engine starts it again when it restarts.
    d.restart();
    let again = d.inspect("old-root");
    assert_eq!(again["State"]["Running"], true, "{again}");
    assert_eq!(again["Id"], full.as_str());
    assert_refused(&s.observe(&id), "container-running");

    d.ok(&["update", "--restart=no", "old-root"]);
    d.ok(&["stop", "-t", "1", "old-root"]);
    assert_holds(&s.observe(&id));
    let (r, c) = recover(&s, &id);
    assert_eq!(
        r.outcome()["outcome"],
        "granted",
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(c.code, Outcome::Success, "{}", c.stdout);
    // And a removed container is contained too.
    d.ok(&["rm", "old-root"]);
    let (s2, id2) = enrolled(&d, &["old-root"]);
    let o = s2.observe(&id2);
    assert_holds(&o);
    assert!(o.stdout.contains("absent"), "{}", o.stdout);
}

pub(crate) fn a_docker_container_started_or_recreated_while_repochd_waits_is_never_granted() {
    // Proves: the container stopped with policy no, repochd stopped at a barrier: started
    // again before the observation that precedes the intent, the recovery is refused
    // there, nothing written; started after the intent, it is withheld; removed and
    // created again under its name after the first observation (a stopped container,
    // another id), refused; renamed away, its policy set to always and started under the
    // new name (found by attacking the release binaries: granted, as nothing named
    // "old-root" was left and the engine's events were filtered by the current name):
    // refused before the intent, withheld after it. Never granted.
    require_root!();
    let sb = Sandbox::new();
    let d = Dockerd::start(&sb.path("docker"));
    d.import_busybox();
    for (barrier, act, epoch) in [
        ("after-connect", "start", "enrolled"),
        ("after-intent", "start", "withheld"),
        ("after-observe", "recreate", "enrolled"),
        ("after-connect", "rename", "enrolled"),
        ("after-intent", "rename", "withheld"),
    ] {
        d.run_sleeping("old-root", "no");
        d.ok(&["stop", "-t", "1", "old-root"]);
        let (s, id) = enrolled(&d, &["old-root"]);
        let (r, c) = recover_acting_at(&s, &id, barrier, || match act {
            "start" => {
                d.ok(&["start", "old-root"]);
            }
            // Renamed away, armed and started: no event of it names "old-root" now.
            "rename" => {
                d.ok(&["rename", "old-root", "hidden"]);
                d.ok(&["update", "--restart=always", "hidden"]);
                d.ok(&["start", "hidden"]);
            }
            _ => {
                d.ok(&["rm", "old-root"]);
                let created = ["create", "--name", "old-root", "--network", "none"];
                d.ok(&[&created[..], &[BUSYBOX_IMAGE, "true"]].concat());
            }
        });
        let what = format!("{act} at {barrier}");
        assert_never_granted(&s, &id, (&r, &c), &["container-changed"], epoch, &what);
        let _ = d.docker(&["rm", "-f", "old-root", "hidden"]);
    }
}

/// A recovery of `id` with repochd stopped at `barrier`, `act` done there, then let go:
/// (recover's run, the consumer's run).
fn recover_acting_at(s: &Sandbox, id: &str, barrier: &str, act: impl FnOnce()) -> (Run, Run) {
    let at = AtBarrier::start(s, barrier);
    let consumer = s
        .consumer(&id[..6], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rec = recover_bg(s, &id[..6], 20);
    at.reached();
    act();
    at.signal(rustix::process::Signal::CONT);
    (finish(rec), finish(consumer))
}

/// Refused with one of `reasons` named, the consumer given nothing, and the epoch
/// `epoch` after (`enrolled`: nothing written; `withheld`: after the intent).
fn assert_never_granted(
    s: &Sandbox,
    id: &str,
    (r, c): (&Run, &Run),
    reasons: &[&str],
    epoch: &str,
    what: &str,
) {
    assert_eq!(
        r.outcome()["outcome"],
        "refused",
        "{what}: {}{}",
        r.stdout,
        r.stderr
    );
    assert_ne!(c.code, Outcome::Success, "{what}: {}", c.stdout);
    assert!(
        reasons.iter().any(|n| r.stdout.contains(n)),
        "{what}: {reasons:?}: {}",
        r.stdout
    );
    assert_eq!(s.status(id).json()["epoch"], epoch, "{what}");
}

pub(crate) fn an_unreachable_docker_engine_refuses_the_recovery_with_nothing_written() {
    // Proves: dockerd stopped (its socket gone), or its socket replaced by a listener
    // that is no engine: refused controller-unknown, nothing written. A socket another
    // user owns: container-engine-unprotected.
    require_root!();
    let sb = Sandbox::new();
    let mut d = Dockerd::start(&sb.path("docker"));
    d.import_busybox();
    d.run_sleeping("old-root", "no");
    d.ok(&["stop", "-t", "1", "old-root"]);
    let (s, id) = enrolled(&d, &["old-root"]);
    assert_holds(&s.observe(&id));
    d.stop();
    let (r, _) = recover(&s, &id);
    assert_eq!(r.outcome()["outcome"], "refused", "{}", r.stdout);
    assert!(r.stdout.contains("controller-unknown"), "{}", r.stdout);
    assert_eq!(records(&s, &id), ["genesis"], "nothing written");

    // A listener in its place that answers no HTTP.
    let _ = std::fs::remove_file(&d.socket);
    let fake = std::os::unix::net::UnixListener::bind(&d.socket).unwrap();
    let silent = std::thread::spawn(move || {
        for c in fake.incoming().take(4) {
            drop(c);
        }
    });
    let r = s.observe(&id);
    assert_refused(&r, "controller-unknown");
    std::os::unix::fs::chown(&d.socket, Some(65534), None).unwrap();
    assert_refused(&s.observe(&id), "container-engine-unprotected");
    drop(silent);
}

pub(crate) fn containers_the_manifest_does_not_name_do_not_matter() {
    // Proves: the engine runs other containers, one of them restarting in a loop
    // (--restart=always, exiting at once): a recovery naming only the old root's stopped
    // container is granted.
    require_root!();
    let sb = Sandbox::new();
    let d = Dockerd::start(&sb.path("docker"));
    d.import_busybox();
    d.run_sleeping("old-root", "no");
    d.ok(&["stop", "-t", "1", "old-root"]);
    d.run_sleeping("bystander", "always");
    d.ok(&[
        "run",
        "-d",
        "--name",
        "flapping",
        "--network",
        "none",
        "--restart=always",
        BUSYBOX_IMAGE,
        "sh",
        "-c",
        "exit 1",
    ]);
    let (s, id) = enrolled(&d, &["old-root"]);
    let (r, c) = recover(&s, &id);
    assert_eq!(
        r.outcome()["outcome"],
        "granted",
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(c.code, Outcome::Success, "{}", c.stdout);
}

pub(crate) fn containers_are_checked_at_enrollment() {
    // Proves: enrollment refuses (exit 64, naming the field) a container that is no
    // `docker:NAME` or `podman:NAME` (containerd's among them, not observed by this
    // version), an engine endpoint that is not `unix:///PATH`, and an engine socket that
    // is missing, another user's or writable by everyone; one listed twice.
    require_root!();
    use std::os::unix::fs::PermissionsExt as _;
    let s = Sandbox::new();
    let sock = s.path("engine.sock");
    let _engine = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let enroll = |containers: &str, engines: &str| {
        let m = s.manifest(&format!(
            "[containment]\ncontainers = [{containers}]\n[containment.engines]\n{engines}"
        ));
        std::fs::write(s.path("manifest.toml"), m).unwrap();
        s.repoch(&[
            "--json",
            "enroll",
            s.path("manifest.toml").to_str().unwrap(),
        ])
    };
    let ours = format!("docker = \"unix://{}\"", sock.display());
    let refused = |containers: &str, engines: &str, field: &str, why: &str| {
        let r = enroll(containers, engines);
        assert_eq!(
            r.code,
            Outcome::Usage,
            "{containers} {engines}: {}{}",
            r.stdout,
            r.stderr
        );
        let text = format!("{}{}", r.stdout, r.stderr);
        assert!(
            text.contains(field) && text.contains(why),
            "{field} {why}: {text}"
        );
    };
    refused(
        "\"containerd:default/old\"",
        &ours,
        "containment.containers[0]",
        "containerd",
    );
    refused(
        "\"old-root\"",
        &ours,
        "containment.containers[0]",
        "ENGINE:NAME",
    );
    refused(
        "\"lxc:old\"",
        &ours,
        "containment.containers[0]",
        "one of docker, podman",
    );
    refused(
        "\"docker:-old\"",
        &ours,
        "containment.containers[0]",
        "a container name",
    );
    refused(
        "\"docker:a/b\"",
        &ours,
        "containment.containers[0]",
        "a container name",
    );
    refused(
        "\"docker:old\"",
        "docker = \"tcp://127.0.0.1:2375\"",
        "containment.engines.docker",
        "only unix:///PATH",
    );
    let missing = format!("docker = \"unix://{}\"", s.path("none.sock").display());
    refused(
        "\"docker:old\"",
        &missing,
        "containment.engines.docker",
        "No such file",
    );
    refused(
        "\"docker:old\", \"docker:old\"",
        &ours,
        "containment.containers",
        "listed twice",
    );
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    refused(
        "\"docker:old\"",
        &ours,
        "containment.engines.docker",
        "mode 777",
    );
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o660)).unwrap();
    let r = enroll("\"docker:old\"", &ours);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
}

pub(crate) fn a_podman_container_its_restart_at_boot_would_start_is_refused_until_created_without_it(
) {
    // Proves: through podman's service (the Docker API it also speaks), a container run
    // with --restart=always is refused while it runs (container-running) and once stopped
    // (container-restartable); the harm refused: what podman-restart.service runs at boot
    // (podman start --all --filter restart-policy=always) starts it again. Created again
    // without --restart and stopped (podman 4.3 cannot update a policy), granted.
    require_root!();
    let sb = Sandbox::new();
    let p = Podman::start(&sb.path("podman"));
    p.import_busybox();
    let full = p.run_sleeping("old-root", "always");
    let refs = ["podman:old-root".to_owned()];
    let (s, id) = enrolled_on(&p.engines_toml(), &refs);
    assert_refused(&s.observe(&id), "container-running");
    p.ok(&["stop", "-t", "1", "old-root"]);
    let r = s.observe(&id);
    assert_refused(&r, "container-restartable");
    assert!(r.stdout.contains("restart policy always"), "{}", r.stdout);

    p.restart_at_boot();
    let again = p.inspect("old-root");
    assert_eq!(again["State"]["Running"], true, "{again}");
    assert_eq!(again["Id"], full.as_str());
    assert_refused(&s.observe(&id), "container-running");

    p.ok(&["rm", "-f", "-t", "0", "old-root"]);
    p.run_sleeping("old-root", "no");
    p.ok(&["stop", "-t", "1", "old-root"]);
    let (s, id) = enrolled_on(&p.engines_toml(), &refs);
    let (r, c) = recover(&s, &id);
    assert_eq!(
        r.outcome()["outcome"],
        "granted",
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(c.code, Outcome::Success, "{}", c.stdout);
}

pub(crate) fn a_podman_container_started_while_repochd_waits_or_its_service_gone_is_never_granted()
{
    // Proves: the container stopped with policy no, started through podman with repochd
    // at after-connect: refused, nothing written (container-changed, or container-running
    // when podman's event log is read after the look); started and stopped again there:
    // refused container-changed (its last start moved, whether or not the event was
    // delivered yet); started at after-intent: withheld. Podman's service stopped (its
    // socket left): refused controller-unknown, nothing written.
    require_root!();
    let sb = Sandbox::new();
    let mut p = Podman::start(&sb.path("podman"));
    p.import_busybox();
    let refs = ["podman:old-root".to_owned()];
    for (barrier, blink, epoch) in [
        ("after-connect", false, "enrolled"),
        ("after-connect", true, "enrolled"),
        ("after-intent", false, "withheld"),
    ] {
        p.run_sleeping("old-root", "no");
        p.ok(&["stop", "-t", "1", "old-root"]);
        let (s, id) = enrolled_on(&p.engines_toml(), &refs);
        let (r, c) = recover_acting_at(&s, &id, barrier, || {
            p.ok(&["start", "old-root"]);
            if blink {
                // Started and stopped again before repochd looks: its last start moved.
                p.ok(&["stop", "-t", "0", "old-root"]);
            }
        });
        // The event, or the state itself when podman's event log is read after the look.
        let reasons: &[&str] = match blink {
            true => &["container-changed"],
            false => &["container-changed", "container-running"],
        };
        assert_never_granted(&s, &id, (&r, &c), reasons, epoch, barrier);
        p.ok(&["rm", "-f", "-t", "0", "old-root"]);
    }
    p.run_sleeping("old-root", "no");
    p.ok(&["stop", "-t", "1", "old-root"]);
    let (s, id) = enrolled_on(&p.engines_toml(), &refs);
    p.stop();
    let (r, _) = recover(&s, &id);
    assert_eq!(r.outcome()["outcome"], "refused", "{}", r.stdout);
    assert!(r.stdout.contains("controller-unknown"), "{}", r.stdout);
    assert_eq!(s.status(&id).json()["epoch"], "enrolled", "nothing written");
}

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
    // refused before the intent, withheld after it. Started after final verification #2,
    // before the dispatch (found by attacking the release binaries: granted, the stream
    // not read again after that verification): withheld. Never granted.
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
        ("after-final-2", "start", "withheld"),
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
    // `docker:NAME`, `podman:NAME` or `containerd:NAMESPACE/ID`, an engine endpoint that is
    // not `unix:///PATH`, and an engine socket that is missing, another user's or writable
    // by everyone; one listed twice. It takes `docker:old` and `containerd:default/old`.
    require_root!();
    use std::os::unix::fs::PermissionsExt as _;
    let s = Sandbox::new();
    let sock = s.path("engine.sock");
    let _engine = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let ours = format!("docker = \"unix://{}\"", sock.display());
    let containerd = format!("containerd = \"unix://{}\"", sock.display());
    let missing = format!("docker = \"unix://{}\"", s.path("none.sock").display());
    let cases = refusals(&ours, &containerd, &missing);
    for (containers, engines, field, why) in &cases {
        assert_enrollment_refused(&s, containers, engines, field, why);
    }
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_enrollment_refused(
        &s,
        "\"docker:old\"",
        &ours,
        "containment.engines.docker",
        "mode 777",
    );
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o660)).unwrap();
    // Each taken in a sandbox of its own (enrollment writes its files once).
    for (containers, engines) in [
        ("\"docker:old\"", &ours),
        ("\"containerd:default/old\"", &containerd),
    ] {
        let s = Sandbox::new();
        let r = enroll_manifest(&s, containers, engines);
        assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    }
}

/// Enrollments refused for their containers or engines: (containers, engines, the field
/// named, why), with `ours` and `containerd` engine lines naming a root socket and
/// `missing` one naming none.
fn refusals(
    ours: &str,
    containerd: &str,
    missing: &str,
) -> Vec<(String, String, &'static str, &'static str)> {
    const FIRST: &str = "containment.containers[0]";
    const DOCKER: &str = "containment.engines.docker";
    let tcp = "docker = \"tcp://127.0.0.1:2375\"";
    let mut out: Vec<_> = ["old", "default/", "default/old/x", "de--fault/old"]
        .iter()
        .map(|bad| {
            (
                format!("\"containerd:{bad}\""),
                containerd,
                FIRST,
                "NAMESPACE/ID",
            )
        })
        .collect();
    out.extend([
        ("\"old-root\"".into(), ours, FIRST, "ENGINE:NAME"),
        (
            "\"lxc:old\"".into(),
            ours,
            FIRST,
            "one of docker, podman, containerd",
        ),
        ("\"docker:-old\"".into(), ours, FIRST, "a container name"),
        ("\"docker:a/b\"".into(), ours, FIRST, "a container name"),
        ("\"docker:old\"".into(), tcp, DOCKER, "only unix:///PATH"),
        ("\"docker:old\"".into(), missing, DOCKER, "No such file"),
        (
            "\"docker:old\", \"docker:old\"".into(),
            ours,
            "containment.containers",
            "listed twice",
        ),
    ]);
    out.into_iter()
        .map(|(c, e, f, w)| (c, e.to_owned(), f, w))
        .collect()
}

/// `repoch --json enroll` of a manifest naming `containers` with `engines` as its
/// `[containment.engines]`.
fn enroll_manifest(s: &Sandbox, containers: &str, engines: &str) -> Run {
    let m = s.manifest(&format!(
        "[containment]\ncontainers = [{containers}]\n[containment.engines]\n{engines}"
    ));
    std::fs::write(s.path("manifest.toml"), m).unwrap();
    s.repoch(&[
        "--json",
        "enroll",
        s.path("manifest.toml").to_str().unwrap(),
    ])
}

/// Enrollment refused with exit 64, naming `field` and saying `why`.
fn assert_enrollment_refused(s: &Sandbox, containers: &str, engines: &str, field: &str, why: &str) {
    let r = enroll_manifest(s, containers, engines);
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
}

pub(crate) fn a_podman_container_its_restart_at_boot_would_start_is_refused_until_created_without_it(
) {
    // Proves: through podman's service (the Docker API it also speaks), a container run
    // with --restart=always is refused while it runs (container-running) and once stopped
    // (container-restartable); the harm refused: what podman-restart.service runs at boot
    // (podman start --all --filter restart-policy=always) starts it again. Created again
    // without --restart and stopped (podman 4.3 cannot update a policy), granted, while a
    // container it was not told about restarts in a loop.
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
    // Beside it, one the engine restarts in a loop: not named, it changes nothing.
    p.ok(&[
        "run",
        "-d",
        "--name",
        "flapping",
        "--network",
        "none",
        "--restart=always",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
        BUSYBOX_IMAGE,
        "sh",
        "-c",
        "exit 1",
    ]);
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

pub(crate) fn a_podman_container_a_systemd_unit_runs_is_refused_unless_its_unit_is_named() {
    // Proves: a container of restart policy `no` that a systemd unit runs (podman's own
    // label PODMAN_SYSTEMD_UNIT names it, as `podman generate systemd` and Quadlet set it),
    // stopped, the manifest naming the container alone: refused at enrollment naming
    // `containment.units`; waived there, refused container-restartable at observation,
    // naming the unit (its next start brings the old root back). Found by attacking the
    // release binaries: granted.
    require_root!();
    let sb = Sandbox::new();
    let p = Podman::start(&sb.path("podman"));
    p.import_busybox();
    p.ok(&[
        "run",
        "-d",
        "--name",
        "old-root",
        "--network",
        "none",
        "--restart=no",
        "--label",
        "PODMAN_SYSTEMD_UNIT=container-old-root.service",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
        BUSYBOX_IMAGE,
        "sleep",
        "1000000",
    ]);
    p.ok(&["stop", "-t", "1", "old-root"]);
    // Enrollment asks the engine: the unit it names is left out, refused (exit 64) naming
    // the line to add or the waiver (enrolled before).
    let s = Sandbox::new();
    let r = enroll_manifest(&s, "\"podman:old-root\"", &p.engines_toml());
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    let said = r.json()["message"].as_str().unwrap().to_owned();
    assert!(
        said.contains("containment.units")
            && said.contains("[waive] \"unit:container-old-root.service\""),
        "{said}"
    );
    // Waived (say, to be removed before the recovery), observation still refuses it.
    let id = s.enroll_with(&s.manifest(&format!(
        "[containment]\ncontainers = [\"podman:old-root\"]\n[containment.engines]\n{}\n\
         [waive]\n\"unit:container-old-root.service\" = \"removed before the recovery\"\n",
        p.engines_toml()
    )));
    let r = s.observe(&id);
    assert_refused(&r, "container-restartable");
    assert!(
        r.stdout
            .contains("run by systemd unit container-old-root.service"),
        "{}",
        r.stdout
    );
}

/// What the podman trial does to `old-root` while repochd waits (see its arms).
fn podman_act(p: &Podman, act: &str) {
    match act {
        "start" => {
            p.ok(&["start", "old-root"]);
        }
        // Started and stopped again before repochd looks: its last start moved.
        "blink" => {
            p.ok(&["start", "old-root"]);
            p.ok(&["stop", "-t", "0", "old-root"]);
        }
        // Absent at the first look, run and removed before the next: only its events
        // say so, and podman's service reads them from its log a while later (found by
        // attacking the release binaries: granted 1 in 14 with the stream alone); the
        // log is read up to each look.
        "run-rm" => {
            p.run_sleeping("old-root", "no");
            p.ok(&["rm", "-f", "-t", "0", "old-root"]);
        }
        // Started by a client that writes no event, and left running: no event says so;
        // only a look does (found by attacking the release binaries: started after final
        // verification #2, granted).
        "start-unlogged" => {
            p.ok(&["--events-backend", "none", "start", "old-root"]);
        }
        // Removed and created again under its name (stopped: another id).
        "recreate" => {
            p.ok(&["rm", "-f", "-t", "0", "old-root"]);
            let created = ["create", "--name", "old-root", "--network", "none"];
            p.ok(&[&created[..], &[BUSYBOX_IMAGE, "true"]].concat());
        }
        // Started and removed by a client that writes no event: nothing is left to
        // look at, and no event says so (found by attacking the release binaries:
        // granted).
        _ => {
            p.ok(&["--events-backend", "none", "start", "old-root"]);
            p.ok(&[
                "--events-backend",
                "none",
                "rm",
                "-f",
                "-t",
                "0",
                "old-root",
            ]);
        }
    }
}

pub(crate) fn a_podman_container_started_while_repochd_waits_or_its_service_gone_is_never_granted()
{
    // Proves: the container stopped with policy no, started through podman with repochd
    // at after-connect: refused, nothing written (container-changed, or container-running
    // when podman's event log is read after the look); started and stopped again there:
    // refused container-changed (its last start moved, whether or not the event was
    // delivered yet); started and removed there by a client that writes no event:
    // refused controller-unknown (gone, and no removal reported); started at after-intent:
    // withheld, and after final verification #2, before the dispatch, withheld. Podman's
    // service stopped (its socket left): refused controller-unknown,
    // nothing written.
    require_root!();
    let sb = Sandbox::new();
    let mut p = Podman::start(&sb.path("podman"));
    p.import_busybox();
    let refs = ["podman:old-root".to_owned()];
    for (barrier, act, epoch) in [
        ("after-connect", "start", "enrolled"),
        ("after-connect", "blink", "enrolled"),
        ("after-connect", "start-rm-unlogged", "enrolled"),
        ("after-connect", "run-rm", "enrolled"),
        ("after-observe", "recreate", "enrolled"),
        ("after-intent", "start", "withheld"),
        ("after-final-2", "start", "withheld"),
        ("after-final-2", "start-unlogged", "withheld"),
    ] {
        if act != "run-rm" {
            p.run_sleeping("old-root", "no");
            p.ok(&["stop", "-t", "1", "old-root"]);
        }
        let (s, id) = enrolled_on(&p.engines_toml(), &refs);
        let (r, c) = recover_acting_at(&s, &id, barrier, || podman_act(&p, act));
        // The event, or the state itself when podman's event log is read after the look.
        let reasons: &[&str] = match act {
            "blink" => &["container-changed"],
            "start" => &["container-changed", "container-running"],
            "start-unlogged" => &["container-running", "container-changed"],
            "run-rm" => &["container-changed"],
            "recreate" => &["container-changed", "container-replaced"],
            _ => &["controller-unknown", "container-changed"],
        };
        assert_never_granted(
            &s,
            &id,
            (&r, &c),
            reasons,
            epoch,
            &format!("{act} at {barrier}"),
        );
        let _ = p.podman(&["rm", "-f", "-t", "0", "old-root"]);
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

pub(crate) fn a_containerd_container_its_restart_monitor_would_start_is_refused_until_unlabelled_and_its_task_deleted(
) {
    // Proves: through containerd's own API, a container labelled for its restart monitor
    // (containerd.io/restart.status=running) is refused while its task runs
    // (container-running) and once its task is deleted (container-restartable, naming the
    // label); the harm refused: containerd restarted (an upgrade, a reboot) starts it
    // again. Unlabelled and its task deleted (what OPERATOR.md says to do), granted, while
    // a labelled bystander runs in the same namespace; a process left in (or moved into)
    // the cgroup its spec names, refused container-running; removed, contained too. A
    // misspelt name is named at enrollment (its engine has none).
    require_root!();
    let sb = Sandbox::new();
    let mut c = Containerd::start(&sb.path("containerd"));
    c.run_sleeping("old-root", true);
    let refs = [c.spelled("old-root")];
    assert_a_misspelt_name_is_named_at_enrollment(&c, &refs[0]);
    let (s, id) = enrolled_on(&c.engines_toml(), &refs);
    assert_refused(&s.observe(&id), "container-running");

    let (_, pid) = c.task("old-root").expect("its task runs");
    c.delete_task("old-root");
    let r = s.observe(&id);
    assert_refused(&r, "container-restartable");
    assert!(
        r.stdout.contains("containerd.io/restart.status=running"),
        "{}",
        r.stdout
    );

    // What the refusal prevents: containerd restarted, its restart monitor starts it.
    c.restart();
    let start = std::time::Instant::now();
    let again = loop {
        match c.task("old-root") {
            Some((status, p)) if status == "RUNNING" => break p,
            _ if start.elapsed() > std::time::Duration::from_secs(30) => {
                panic!("the restart monitor did not start old-root again")
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    };
    assert_ne!(again, pid, "a new task");
    assert_refused(&s.observe(&id), "container-running");

    c.ok(&[
        "container",
        "label",
        "old-root",
        "containerd.io/restart.status=",
    ]);
    c.delete_task("old-root");
    c.run_sleeping("bystander", true);
    let o = s.observe(&id);
    assert_holds(&o);
    assert!(o.stdout.contains("no task"), "{}", o.stdout);
    let (r, consumer) = recover(&s, &id);
    assert_eq!(
        r.outcome()["outcome"],
        "granted",
        "{}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(consumer.code, Outcome::Success, "{}", consumer.stdout);
    assert_a_process_in_its_cgroup_is_running(&c, &refs[0]);
    c.ok(&["container", "rm", "old-root"]);
    let (s2, id2) = enrolled_on(&c.engines_toml(), &refs);
    let o = s2.observe(&id2);
    assert_holds(&o);
    assert!(o.stdout.contains("absent"), "{}", o.stdout);
}

/// A sandbox enrolled with containerd's container `id`, whose task runs in a cgroup its
/// record does not name (the record deleted, or made again naming another): enrollment's
/// cross-check would have that cgroup named and the task's shim waived; waived here, the
/// container's fact is observed alone.
fn enrolled_past_its_engine(c: &Containerd, id: &str) -> (Sandbox, String) {
    let (_, task) = c.task(id).expect("the task");
    let shim = repoch_sys::procfs::parent(task).expect("its shim");
    let s = Sandbox::new();
    let dep = s.enroll_with(&s.manifest(&format!(
        "[containment]\ncontainers = [\"{}\"]\n[containment.engines]\n{}\n\
         [waive]\n\"cgroup:/{}/{id}\" = \"the container's fact alone is observed\"\n\
         \"starter:{shim} containerd-shim-runc-v2\" = \"its shim\"\n",
        c.spelled(id),
        c.engines_toml(),
        c.namespace
    )));
    (s, dep)
}

/// A process in the cgroup containerd's spec names for `old-root` (stopped, no task: the
/// old root left in it, or moved into it): the container is running, whatever its engine
/// says.
fn assert_a_process_in_its_cgroup_is_running(c: &Containerd, spelled: &str) {
    let cg = Cgroup::new(&format!("{}/old-root", c.namespace));
    let mut left = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    cg.add(left.id());
    let (s, id) = enrolled_on(&c.engines_toml(), &[spelled.to_owned()]);
    let o = s.observe(&id);
    drop(cg);
    let _ = left.wait();
    assert_refused(&o, "container-running");
    let named = format!("its cgroup /{}/old-root", c.namespace);
    assert!(o.stdout.contains(&named), "{named}: {}", o.stdout);
}

/// A container whose spec names its cgroup other than by a clean absolute path (runc
/// cleans `..` away; a relative path, systemd's form among them, lies below runc's own
/// cgroup): which cgroup would hold the old root is unknown, and so is the container
/// (found by attacking the release binaries: `/nonexist/../X/old` was read as absent,
/// empty, while runc used `/X/old`; granted).
fn assert_an_unclean_cgroup_path_is_unknown(c: &Containerd) {
    let rootfs = c.dir.join("rootfs");
    for (id, path) in [
        ("odd", format!("/nonexist/../{}/odd", c.namespace)),
        ("slice", "repoch-x.slice:repoch:odd".to_owned()),
    ] {
        c.ok(&[
            "run",
            "-d",
            "--cgroup",
            &path,
            "--rootfs",
            rootfs.to_str().unwrap(),
            id,
            "/bin/sleep",
            "1000000",
        ]);
        c.delete_task(id);
        let (s, dep) = enrolled_on(&c.engines_toml(), &[c.spelled(id)]);
        let o = s.observe(&dep);
        assert_refused(&o, "controller-unknown");
        assert!(
            o.stdout.contains("cgroupsPath is no clean absolute path"),
            "{path}: {}",
            o.stdout
        );
        c.ok(&["container", "rm", id]);
    }
}

/// A misspelt name (containerd's ids are case-sensitive) would be observed absent,
/// contained: enrollment, done while the old root runs, names it; `real` not.
fn assert_a_misspelt_name_is_named_at_enrollment(c: &Containerd, real: &str) {
    let m = Sandbox::new();
    let misspelt = c.spelled("Old-root");
    let r = enroll_manifest(
        &m,
        &format!("\"{misspelt}\", \"{real}\""),
        &c.engines_toml(),
    );
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        r.json()["absent_at_enrollment"],
        serde_json::json!([{"kind": "container", "path": misspelt, "observed": "does not exist now"}]),
        "{}",
        r.stdout
    );
}

pub(crate) fn a_containerd_container_started_while_repochd_waits_or_containerd_gone_is_never_granted(
) {
    // Proves: a container without a task or a restart label, repochd stopped at a barrier:
    // its task started before the observation that precedes the intent, refused, nothing
    // written; started and deleted again there (no later look can see it: containerd
    // keeps no start time; only its events service, subscribed before the first look,
    // can), refused container-changed; removed and created again under its id (another
    // creation time), refused; started after the intent, or after final verification #2,
    // withheld. A task whose container
    // record was deleted under it, or whose record was created again naming another
    // runtime and an empty cgroup: container-running. A spec naming its cgroup by no clean
    // absolute path: controller-unknown. containerd stopped: refused controller-unknown,
    // nothing written.
    require_root!();
    let sb = Sandbox::new();
    let mut c = Containerd::start(&sb.path("containerd"));
    let refs = [c.spelled("old-root")];
    for (barrier, act, epoch) in [
        ("after-connect", "start", "enrolled"),
        ("after-connect", "blink", "enrolled"),
        ("after-observe", "recreate", "enrolled"),
        ("after-intent", "start", "withheld"),
        ("after-final-2", "start", "withheld"),
    ] {
        c.create_sleeping("old-root");
        let (s, id) = enrolled_on(&c.engines_toml(), &refs);
        let (r, consumer) = recover_acting_at(&s, &id, barrier, || match act {
            "start" => {
                c.ok(&["task", "start", "-d", "old-root"]);
            }
            "blink" => {
                c.ok(&["task", "start", "-d", "old-root"]);
                c.delete_task("old-root");
            }
            _ => {
                c.ok(&["container", "rm", "old-root"]);
                c.create_sleeping("old-root");
            }
        });
        let what = format!("{act} at {barrier}");
        let reasons = ["container-changed", "container-replaced"];
        assert_never_granted(&s, &id, (&r, &consumer), &reasons, epoch, &what);
        if act == "blink" {
            assert!(r.stdout.contains("/tasks/create"), "{what}: {}", r.stdout);
        }
        c.delete_task("old-root");
        c.ok(&["container", "rm", "old-root"]);
    }
    // A container record deleted under its running task (containerd's containers service
    // does not look; ctr refuses, another client need not): a container still, running.
    // Found by attacking the release binaries: observed absent, and granted.
    c.run_sleeping("orphan", false);
    c.delete_record("orphan");
    let (s, id) = enrolled_past_its_engine(&c, "orphan");
    assert_refused(&s.observe(&id), "container-running");
    // Its record deleted under its running task and created again naming containerd's
    // legacy runtime and an empty cgroup: tasks.Get asks that runtime, which has no such
    // task. Found by attacking the release binaries: "no task", and granted.
    c.run_sleeping("moved", false);
    let decoy = format!("/{}/decoy", c.namespace);
    c.recreate_record("moved", "io.containerd.runtime.v1.linux", &decoy);
    let (s, id) = enrolled_past_its_engine(&c, "moved");
    assert_refused(&s.observe(&id), "container-running");

    assert_an_unclean_cgroup_path_is_unknown(&c);

    c.create_sleeping("old-root");
    let (s, id) = enrolled_on(&c.engines_toml(), &refs);
    assert_holds(&s.observe(&id));
    c.stop();
    let (r, _) = recover(&s, &id);
    assert_eq!(r.outcome()["outcome"], "refused", "{}", r.stdout);
    assert!(r.stdout.contains("controller-unknown"), "{}", r.stdout);
    assert_eq!(s.status(&id).json()["epoch"], "enrolled", "nothing written");
}

pub(crate) fn podman_s_event_stream_is_caught_up_by_a_volume_of_repochs_own() {
    // Proves: podman's service reads its events from a file a while after they happened
    // (measured up to a quarter second), so what its stream delivered right after a
    // `podman start` returned may lack the start; `Engine::caught_up` creates and removes a
    // volume of repoch's own and waits for its event, after which every earlier event is
    // in the stream's `Seen`, each time. Its volumes are gone after.
    require_root!();
    let sb = Sandbox::new();
    let p = Podman::start(&sb.path("podman"));
    p.import_busybox();
    p.run_sleeping("old-root", "no");
    p.ok(&["stop", "-t", "0", "old-root"]);
    let engine = repoch_engines::Engine::new(&p.socket, std::time::Duration::from_secs(5)).unwrap();
    let names = ["old-root".to_owned()];
    for round in 0..5 {
        let watch = engine.watch(&names, std::time::SystemTime::now()).unwrap();
        p.ok(&["start", "old-root"]);
        engine.caught_up(&watch).unwrap();
        let seen = watch.seen();
        assert!(
            seen.events.iter().any(|e| e.action == "start"),
            "round {round}: {seen:?}"
        );
        p.ok(&["stop", "-t", "0", "old-root"]);
    }
    let volumes = p.ok(&["volume", "ls", "-q"]);
    assert!(volumes.is_empty(), "repoch's volumes left: {volumes}");
}

pub(crate) fn a_docker_short_id_another_container_took_as_its_name_is_refused() {
    // Proves: see `assert_a_taken_short_id_is_ambiguous`, with Docker.
    require_root!();
    let sb = Sandbox::new();
    let d = Dockerd::start(&sb.path("docker"));
    assert_a_taken_short_id_is_ambiguous(&d);
}

pub(crate) fn a_podman_short_id_another_container_took_as_its_name_is_refused() {
    // Proves: see `assert_a_taken_short_id_is_ambiguous`, with podman.
    require_root!();
    let sb = Sandbox::new();
    let p = Podman::start(&sb.path("podman"));
    assert_a_taken_short_id_is_ambiguous(&p);
}

/// Docker and podman take a reference as a full id, then a name, then an id prefix. The old
/// root, running, enrolled by its short id: pinned to its full id, refused
/// container-running. A stopped container then created with that short id as its name,
/// which the engine answers for the reference (found by attacking the release binaries:
/// granted while the old root ran): the pinned old root is still judged, refused
/// container-running. Enrolled by the short id once it is taken: not pinned (enrollment
/// says it could not be asked: ambiguous), and refused controller-unknown, naming both.
/// Enrolled by its full id: still the old root.
fn assert_a_taken_short_id_is_ambiguous(e: &impl Engine) {
    e.import_busybox();
    let full = e.run_sleeping("old-root", "always");
    let short = &full[..12];
    let spelled = format!("{}:{short}", e.name());
    let (pinned, pinned_id) = enrolled_on(&e.engines_toml(), std::slice::from_ref(&spelled));
    assert_refused(&pinned.observe(&pinned_id), "container-running");
    e.ok(&[
        "create",
        "--name",
        short,
        "--network",
        "none",
        BUSYBOX_IMAGE,
        "true",
    ]);
    let r = pinned.observe(&pinned_id);
    assert_refused(&r, "container-running");
    assert!(r.stdout.contains(short), "{}", r.stdout);

    let s = Sandbox::new();
    let r = enroll_manifest(&s, &format!("\"{spelled}\""), &e.engines_toml());
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    let absent = &r.json()["absent_at_enrollment"][0];
    assert!(
        absent["observed"]
            .as_str()
            .unwrap_or_default()
            .contains("ambiguous"),
        "{}",
        r.stdout
    );
    assert_eq!(r.json()["containers"][0]["pinned"], serde_json::Value::Null);
    let id = r.json()["deployment"].as_str().unwrap().to_owned();
    let r = s.observe(&id);
    assert_refused(&r, "controller-unknown");
    assert!(
        r.stdout.contains("ambiguous: ") && r.stdout.contains(&format!(", {short}'s id")),
        "{}",
        r.stdout
    );
    let (s, id) = enrolled_on(&e.engines_toml(), &[format!("{}:{full}", e.name())]);
    assert_refused(&s.observe(&id), "container-running");
}

pub(crate) fn a_container_renamed_away_before_the_first_observation_is_still_the_one_judged() {
    // Proves: enrollment pins each named container to its full id (`repoch --json enroll`
    // says which), and observation judges that container whatever it is named since. The
    // old root's container renamed away and another created, stopped, under its name
    // before any observation (found by attacking the release binaries: the one under the
    // name was judged, contained, while the old root ran by another name): refused
    // container-changed ("renamed hidden"), running or stopped.
    require_root!();
    let sb = Sandbox::new();
    let d = Dockerd::start(&sb.path("docker"));
    d.import_busybox();
    let full = d.run_sleeping("old-root", "no");
    let s = Sandbox::new();
    let r = enroll_manifest(&s, "\"docker:old-root\"", &d.engines_toml());
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        r.json()["containers"][0]["pinned"],
        full.as_str(),
        "{}",
        r.stdout
    );
    let id = r.json()["deployment"].as_str().unwrap().to_owned();

    d.ok(&["rename", "old-root", "hidden"]);
    d.ok(&[
        "create",
        "--name",
        "old-root",
        "--network",
        "none",
        BUSYBOX_IMAGE,
        "true",
    ]);
    let o = s.observe(&id);
    assert_refused(&o, "container-changed");
    assert!(
        o.stdout
            .contains(&format!("container {} renamed hidden", &full[..12])),
        "{}",
        o.stdout
    );
    d.ok(&["stop", "-t", "1", "hidden"]);
    assert_refused(&s.observe(&id), "container-changed");
}

pub(crate) fn a_bystander_whose_id_begins_with_the_named_containers_name_changes_nothing() {
    // Proves: the old root's container `d` (a name of one hex digit: podman takes it,
    // Docker wants two), enrolled and pinned, then removed: contained. Containers nobody
    // named are created while repochd waits at `after-connect` until one's random id
    // begins with `d`: the engine answers that container for the name `d`, and its
    // events' ids begin with it; neither is the named container's (found by attacking the
    // release binaries: refused, the epoch burnt by a container nobody named). Granted.
    require_root!();
    let sb = Sandbox::new();
    let p = Podman::start(&sb.path("podman"));
    p.import_busybox();
    p.run_sleeping("d", "no");
    let (s, id) = enrolled_on(&p.engines_toml(), &["podman:d".to_owned()]);
    p.ok(&["rm", "-f", "-t", "0", "d"]);
    let mut bystander = String::new();
    let (r, c) = recover_acting_at(&s, &id, "after-connect", || {
        // 1 in 16 creates: 128 tries miss once in 3,800 runs.
        for _ in 0..128 {
            let made = p.ok(&["create", "--network", "none", BUSYBOX_IMAGE, "true"]);
            if made.starts_with('d') {
                bystander = made;
                break;
            }
        }
    });
    assert!(!bystander.is_empty(), "no container id began with d");
    assert_eq!(
        r.outcome()["outcome"],
        "granted",
        "bystander {bystander}: {}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(c.code, Outcome::Success, "{}", c.stdout);
}

pub(crate) fn a_process_in_a_stopped_containers_cgroup_is_a_running_container() {
    // Proves: the cgroup Docker's and podman's drivers make for a named container (as the
    // container's own process showed it while it ran) holds no process once the engine
    // says the container is stopped. A process run into that cgroup behind the engine's
    // back (the old root left in it, or moved into it, as `runc run` with the container's
    // cgroup does): container-running, whatever the engine reports (observed contained
    // before: only containerd's spec named a cgroup repoch checked); the container removed
    // since, the same.
    require_root!();
    let sb = Sandbox::new();
    let d = Dockerd::start(&sb.path("docker"));
    let p = Podman::start(&sb.path("podman"));
    assert_a_process_in_the_engines_cgroup_is_running(&d);
    assert_a_process_in_the_engines_cgroup_is_running(&p);
}

/// See `a_process_in_a_stopped_containers_cgroup_is_a_running_container`, with `e`.
fn assert_a_process_in_the_engines_cgroup_is_running(e: &impl Engine) {
    e.import_busybox();
    e.run_sleeping("old-root", "no");
    let pid = e.inspect("old-root")["State"]["Pid"].as_u64().unwrap();
    let cg = repoch_sys::cgroup::of_pid(u32::try_from(pid).unwrap()).unwrap();
    let (s, id) = enrolled_on(&e.engines_toml(), &[format!("{}:old-root", e.name())]);
    e.ok(&["stop", "-t", "1", "old-root"]);
    assert_holds(&s.observe(&id));
    let taken = Cgroup::new(cg.trim_start_matches('/'));
    let mut left = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    taken.add(left.id());
    let o = s.observe(&id);
    // (A fact's text is bounded: the path's beginning is enough.)
    let named = format!("its cgroup {}", &cg[..cg.len().min(48)]);
    assert_refused(&o, "container-running");
    assert!(o.stdout.contains(&named), "{cg}: {}", o.stdout);
    // The container removed, the process still there: its pinned id names the cgroup
    // (found by attacking the release binaries: observed absent, granted).
    e.ok(&["rm", "old-root"]);
    let o = s.observe(&id);
    drop(taken);
    let _ = left.wait();
    assert_refused(&o, "container-running");
    assert!(o.stdout.contains(&named), "{cg}: {}", o.stdout);
}

pub(crate) fn a_short_name_only_a_bystanders_id_begins_with_pins_nothing() {
    // Proves: a manifest naming `docker:XY` (two hex digits) when no container is named
    // so, and a bystander's id begins with them: the engine answers the bystander for the
    // reference (Docker takes a reference as an id prefix too), but a reference shorter
    // than a short id (12 digits) is a name: nothing is pinned and enrollment names it in
    // `absent_at_enrollment` (found by attacking the release binaries: the bystander was
    // pinned and judged, and the recovery granted while a container of that very name,
    // started after enrollment with --restart=always, ran). That container is then
    // refused container-running.
    require_root!();
    let sb = Sandbox::new();
    let d = Dockerd::start(&sb.path("docker"));
    d.import_busybox();
    let bystander = d.ok(&[
        "create",
        "--name",
        "bystander",
        "--network",
        "none",
        BUSYBOX_IMAGE,
        "true",
    ]);
    let short = &bystander[..2];
    let s = Sandbox::new();
    let r = enroll_manifest(&s, &format!("\"docker:{short}\""), &d.engines_toml());
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    assert_eq!(
        r.json()["containers"][0]["pinned"],
        serde_json::Value::Null,
        "{}",
        r.stdout
    );
    assert_eq!(
        r.json()["absent_at_enrollment"][0]["path"],
        format!("docker:{short}").as_str(),
        "{}",
        r.stdout
    );
    let id = r.json()["deployment"].as_str().unwrap().to_owned();
    assert_holds(&s.observe(&id));
    d.run_sleeping(short, "always");
    assert_refused(&s.observe(&id), "container-running");
}

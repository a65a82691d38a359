//! `repoch discover` and enrollment's cross-check against old roots a container engine
//! starts: a container with `--restart=always`, on a Docker and a podman of the test's own
//! (tests-native/src/engines.rs). Discovered from its process, refused at enrollment while
//! a manifest leaves it out, and its draft, enrolled as printed, recovers once the old root
//! is contained as docs/OPERATOR.md says.

use std::process::Stdio;

use repoch_tests_native::*;

pub(crate) fn a_docker_container_that_restarts_is_discovered_and_refused_at_enrollment_until_named()
{
    // Proves: see `assert_a_restarting_container_is_discovered`, with Docker.
    require_root!();
    let sb = Sandbox::new();
    let d = Dockerd::start(&sb.path("docker"));
    assert_a_restarting_container_is_discovered(&d);
}

pub(crate) fn a_podman_container_that_restarts_is_discovered_and_refused_at_enrollment_until_named()
{
    // Proves: see `assert_a_restarting_container_is_discovered`, with podman.
    require_root!();
    let sb = Sandbox::new();
    let p = Podman::start(&sb.path("podman"));
    assert_a_restarting_container_is_discovered(&p);
}

/// The old root is a container with `--restart=always`. `repoch discover --pid` from its
/// process names the container by engine and full id (from the cgroup its engine made),
/// with its restart policy as its engine (`--engine`) says it,
/// and its runtime's shim as the starter. A manifest naming its cgroup only is refused
/// while it runs (exit 64), naming `containment.containers` and the waiver key (before
/// containers were cross-checked: enrolled). The draft, with the engine's socket and what
/// no process shows, enrolls while it runs (the container pinned to its full id); once
/// contained (`--restart=no` and stopped, or removed), the recovery is granted with a real consumer.
fn assert_a_restarting_container_is_discovered(e: &impl Engine) {
    e.import_busybox();
    let full = e.run_sleeping("old-root", "always");
    let pid = e.inspect("old-root")["State"]["Pid"].to_string();
    let s = Sandbox::new();
    let engine = format!("{}=unix://{}", e.name(), e.socket().display());
    let (found, draft) = discovered(&s, &["--pid", &pid, "--engine", &engine]);
    let spelled = format!("{}:{full}", e.name());
    assert_eq!(found["containers"][0]["value"], spelled.as_str(), "{found}");
    // Its engine, asked, says what starts it again.
    let why = found["containers"][0]["why"].as_str().unwrap();
    assert!(why.contains("restart policy always"), "{found}");
    let starter = found["starters"][0]["why"].as_str().unwrap_or_default();
    assert!(starter.contains("shim"), "{found}");
    let cgroup = found["cgroups"][0]["value"].as_str().unwrap().to_owned();

    // Left out: refused while it runs, naming the line and the waiver.
    let engines = format!("[containment.engines]\n{}\n", e.engines_toml());
    let p = s.path("manifest.toml");
    std::fs::write(
        &p,
        s.manifest(&format!(
            "[containment]\ncgroups = [\"{cgroup}\"]\n{engines}"
        )),
    )
    .unwrap();
    let r = s.enroll_manifest(&p);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    let said = r.json()["message"].as_str().unwrap().to_owned();
    assert!(
        said.contains("containment.containers")
            && said.contains(&format!("[waive] \"container:{spelled}\"")),
        "{said}"
    );

    // The draft as printed, completed: enrolls while the old root runs, pinned.
    std::fs::write(&p, completed_draft(&s, &draft, &engines)).unwrap();
    let r = s.enroll_manifest(&p);
    assert_eq!(
        r.code,
        Outcome::Success,
        "{}{}\n{draft}",
        r.stdout,
        r.stderr
    );
    let v = r.json();
    assert_eq!(v["cross_check"]["ran"], true, "{v}");
    assert_eq!(v["containers"][0]["pinned"], full.as_str(), "{v}");
    let id = v["deployment"].as_str().unwrap().to_owned();

    // Contained as OPERATOR.md says (podman 4.3 cannot change a policy: removed), then
    // recovered.
    if e.name() == "podman" {
        e.ok(&["rm", "-f", "-t", "0", "old-root"]);
    } else {
        e.ok(&["update", "--restart=no", "old-root"]);
        e.ok(&["stop", "-t", "1", "old-root"]);
    }
    recovers(&s, &id, &[], &draft);
}

pub(crate) fn a_timer_and_an_activating_socket_are_discovered_and_refused_at_enrollment_until_named(
) {
    // Proves, under a real systemd (the nspawn container of units.rs, repochd installed
    // as its shipped units run it): the old root is a service a timer starts, holding the
    // deployment's lock, beside a sidecar service its socket unit activated, holding that
    // socket (a listener the sidecar inherited). `repoch discover --unit` from both
    // services names the services, the timer and the socket unit that would start them
    // again (`TriggeredBy=`), the sidecar's listener and the lock. A manifest naming the
    // two services only is refused while they run (exit 64), naming the starter left out.
    // The draft, completed with what no process shows, enrolls while they run; once
    // contained (all four units stopped and masked), the recovery is granted to a real
    // consumer unit.
    require_root!();
    let s = Sandbox::new();
    let c = Container::boot(&s.tag);
    crate::systemd_recovery::install_built(&c);
    let (uid, gid) = crate::systemd_recovery::fixtures(&c);
    let run = |script: &str| crate::systemd_recovery::run_in(&c, script);
    // The old root's own program: the helper with bytes of its own (nothing else runs it).
    c.sh("cp /usr/bin/repoch-test-helper /srv/billing/old-root && echo old-root >> /srv/billing/old-root \
          && mkdir -p /run/billing");
    let units = [
        (
            "billing-old.service",
            "[Service]\\nExecStart=/srv/billing/old-root flock /srv/billing/lock\\n",
        ),
        (
            "billing-old.timer",
            "[Timer]\\nOnCalendar=*-*-* 03:00\\n[Install]\\nWantedBy=timers.target\\n",
        ),
        (
            "billing-ctl.socket",
            "[Socket]\\nListenStream=/run/billing/ctl.sock\\n[Install]\\nWantedBy=sockets.target\\n",
        ),
        (
            "billing-ctl.service",
            "[Service]\\nExecStart=/srv/billing/old-root sleep\\n",
        ),
    ];
    for (unit, text) in units {
        c.sh(&format!(
            "printf '[Unit]\\nDescription={unit}\\n{text}' > /usr/lib/systemd/system/{unit}"
        ));
    }
    c.sh(
        "systemctl daemon-reload && systemctl enable --now billing-old.timer billing-ctl.socket \
          && systemctl start billing-old.service billing-ctl.service",
    );

    let d = run("repoch --json discover --unit billing-old.service --unit billing-ctl.service");
    assert_eq!(d.code, Outcome::Success, "{}{}", d.stdout, d.stderr);
    let (found, draft) = (
        &d.json()["found"],
        d.json()["draft"].as_str().unwrap().to_owned(),
    );
    let values = |key: &str| found_values(found, key);
    let mut starters = values("unit_starters");
    starters.sort();
    assert_eq!(
        starters,
        ["billing-ctl.socket", "billing-old.timer"],
        "{found}"
    );
    assert!(
        values("units").contains(&"billing-old.service".to_owned()),
        "{found}"
    );
    assert_eq!(
        values("listeners"),
        ["unix:/run/billing/ctl.sock"],
        "{found}"
    );
    assert_eq!(values("locks"), ["/srv/billing/lock"], "{found}");

    use crate::systemd_recovery::{write_manifest, FENCE};
    // Left out: the timer and the socket unit (and the listener).
    write_manifest(
        &c,
        (&uid, &gid),
        &format!(
            "{FENCE}\n[containment]\nunits = [\"billing-old.service\", \"billing-ctl.service\"]\n"
        ),
    );
    let r = run("repoch --json enroll /etc/billing/billing.toml");
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    let said = r.json()["message"].as_str().unwrap().to_owned();
    assert!(
        said.contains("containment.units")
            && (said.contains("[waive] \"unit:billing-old.timer\"")
                || said.contains("[waive] \"unit:billing-ctl.socket\"")),
        "{said}"
    );

    // The draft as printed, completed: enrolls while the old root runs.
    write_manifest(&c, (&uid, &gid), &draft);
    let e = run("repoch --json enroll /etc/billing/billing.toml");
    assert_eq!(
        e.code,
        Outcome::Success,
        "{}{}\n{draft}",
        e.stdout,
        e.stderr
    );
    assert_eq!(e.json()["cross_check"]["ran"], true, "{}", e.stdout);
    let id = e.json()["deployment"].as_str().unwrap().to_owned();

    // Contained as OPERATOR.md says, then recovered.
    c.sh("systemctl stop billing-old.timer billing-ctl.socket billing-old.service billing-ctl.service \
          && systemctl mask billing-old.timer billing-ctl.socket billing-old.service billing-ctl.service \
          && rm -f /run/billing/ctl.sock");
    let r = crate::systemd_recovery::recover_with_consumer_unit(&c, &id);
    assert_eq!(
        r.outcome()["outcome"],
        "granted",
        "{}{}\n{draft}",
        r.stdout,
        r.stderr
    );
    c.sh("systemctl stop billing-new.service");
}

pub(crate) fn a_containerd_container_its_restart_monitor_starts_is_discovered_and_refused_until_named(
) {
    // Proves: the old root is a containerd container labelled for the restart monitor
    // (containerd.io/restart.status=running), on a containerd of the test's own. `repoch
    // discover --pid` from its task names the container (`containerd:NS/ID`, read from its
    // shim's arguments: containerd's cgroups are whatever its spec says, so no cgroup
    // names it; found by nothing before). A manifest naming its cgroup only is refused
    // while it runs (exit 64) naming `containment.containers` and the waiver. The draft,
    // completed, enrolls while it runs; once contained (the label removed, the task
    // deleted), the recovery is granted with a real consumer.
    require_root!();
    let sb = Sandbox::new();
    let c = Containerd::start(&sb.path("containerd"));
    c.run_sleeping("old-root", true);
    let (_, pid) = c.task("old-root").expect("its task");
    let s = Sandbox::new();
    let (found, draft) = discovered(&s, &["--pid", &pid.to_string()]);
    let spelled = c.spelled("old-root");
    assert_eq!(found["containers"][0]["value"], spelled.as_str(), "{found}");
    let cgroup = found["cgroups"][0]["value"].as_str().unwrap().to_owned();

    let engines = format!("[containment.engines]\n{}\n", c.engines_toml());
    let p = s.path("manifest.toml");
    std::fs::write(
        &p,
        s.manifest(&format!(
            "[containment]\ncgroups = [\"{cgroup}\"]\n{engines}"
        )),
    )
    .unwrap();
    let r = s.enroll_manifest(&p);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    let said = r.json()["message"].as_str().unwrap().to_owned();
    assert!(
        said.contains("containment.containers")
            && said.contains(&format!("[waive] \"container:{spelled}\"")),
        "{said}"
    );

    std::fs::write(&p, completed_draft(&s, &draft, &engines)).unwrap();
    let r = s.enroll_manifest(&p);
    assert_eq!(
        r.code,
        Outcome::Success,
        "{}{}\n{draft}",
        r.stdout,
        r.stderr
    );
    assert_eq!(r.json()["cross_check"]["ran"], true, "{}", r.stdout);
    let id = r.json()["deployment"].as_str().unwrap().to_owned();

    c.ok(&[
        "container",
        "label",
        "old-root",
        "containerd.io/restart.status=",
    ]);
    c.delete_task("old-root");
    recovers(&s, &id, &[], &draft);
}

pub(crate) fn a_containers_process_in_a_child_of_its_cgroup_is_still_the_containers() {
    // Proves: a Docker container whose process sits in a child of the cgroup dockerd made
    // for it (cgroup v2 moves every process to a leaf once a container enables controllers
    // for its subtree): discovery still names the container (found by attacking the
    // release binaries: no container found, its cgroup only; a manifest leaving the
    // container out enrolled with the shim waived, and was granted with the container's
    // policy still `always`), and a manifest naming the container enrolls while it runs
    // (refused before, asking for the child cgroup).
    require_root!();
    let sb = Sandbox::new();
    let d = Dockerd::start(&sb.path("docker"));
    d.import_busybox();
    let full = d.run_sleeping("old-root", "always");
    let pid = d.inspect("old-root")["State"]["Pid"].as_u64().unwrap() as u32;
    let cg = repoch_sys::cgroup::of_pid(pid).unwrap();
    let child = Cgroup::new(&format!("{}/sub", cg.trim_start_matches('/')));
    child.add(pid);
    let s = Sandbox::new();
    let (found, _) = discovered(&s, &["--pid", &pid.to_string()]);
    assert_eq!(
        found["containers"][0]["value"],
        format!("docker:{full}").as_str(),
        "{found}"
    );
    let engines = format!("[containment.engines]\n{}\n", d.engines_toml());
    let p = s.path("manifest.toml");
    std::fs::write(
        &p,
        s.manifest(&format!(
            "[containment]\ncontainers = [\"docker:old-root\"]\n{engines}"
        )),
    )
    .unwrap();
    let r = s.enroll_manifest(&p);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    d.ok(&["rm", "-f", "old-root"]);
    drop(child);
}

pub(crate) fn a_process_an_exec_session_started_in_a_named_container_is_cross_checked() {
    // Proves: a process `docker exec -d` started in the old root's container (no
    // descendant of its main process: its parent is the runtime's shim) listening on a
    // port in the container's network namespace. Enrolling a manifest that names the
    // container alone is refused (exit 64) naming the listener (found by attacking the
    // release binaries: the cross-check followed the container's main process only, and
    // enrolled).
    require_root!();
    let sb = Sandbox::new();
    let d = Dockerd::start(&sb.path("docker"));
    d.import_busybox();
    d.run_sleeping("old-root", "no");
    let pid = d.inspect("old-root")["State"]["Pid"].as_u64().unwrap();
    d.ok(&[
        "exec",
        "-d",
        "old-root",
        "/bin/busybox",
        "httpd",
        "-f",
        "-p",
        "127.0.0.1:7071",
    ]);
    // Listening (port 7071 is 1B9F in the container's table, state 0A).
    let start = std::time::Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/net/tcp"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.contains(":1B9F 00000000:0000 0A"))
    {
        assert!(
            start.elapsed().as_secs() < 10,
            "httpd never listened: {}\n{:?}",
            std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default(),
            d.docker(&["exec", "old-root", "/bin/busybox", "ps"])
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let s = Sandbox::new();
    let p = s.path("manifest.toml");
    std::fs::write(
        &p,
        s.manifest(&format!(
            "[containment]\ncontainers = [\"docker:old-root\"]\n[containment.engines]\n{}\n",
            d.engines_toml()
        )),
    )
    .unwrap();
    let r = s.enroll_manifest(&p);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    let said = r.json()["message"].as_str().unwrap().to_owned();
    assert!(
        said.contains("containment.listeners") && said.contains("tcp:127.0.0.1:7071"),
        "{said}"
    );
    d.ok(&["rm", "-f", "old-root"]);
}

pub(crate) fn a_podman_container_its_generated_unit_runs_is_discovered_and_held_by_that_unit() {
    // Proves, with a real systemd (the nspawn container of units.rs) and a podman of the
    // test's own: the old root is a podman container run as `podman generate systemd`'s
    // unit runs it (`Environment=PODMAN_SYSTEMD_UNIT=%n`: podman labels the container with
    // its unit), the unit file as podman generated it installed and enabled in systemd.
    // `repoch discover --pid --engine` names that unit as what would start the container
    // again (it did not ask the engine before). Enrolling the container without the unit
    // is refused (exit 64, naming containment.units); with it, it enrolls; observed, the
    // enabled unit is `unit-not-masked`; masked, with the container stopped, it holds, and
    // the recovery is granted with a real consumer.
    require_root!();
    let sb = Sandbox::new();
    let p = Podman::start(&sb.path("podman"));
    p.import_busybox();
    let c = Container::boot(&sb.tag);
    let unit = "container-old-root.service";
    let o = p.cli_with_env(
        ("PODMAN_SYSTEMD_UNIT", unit),
        &[
            "run",
            "-d",
            "--name",
            "old-root",
            "--network",
            "none",
            "--restart=no",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            BUSYBOX_IMAGE,
            "sleep",
            "1000000",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let generated = p.ok(&["generate", "systemd", "--name", "old-root"]);
    assert!(generated.contains("PODMAN_SYSTEMD_UNIT=%n"), "{generated}");
    std::fs::write(
        format!("/proc/{}/root/etc/systemd/system/{unit}", c.leader),
        &generated,
    )
    .unwrap();
    c.sh(&format!(
        "systemctl daemon-reload && systemctl enable {unit}"
    ));

    let pid = p.inspect("old-root")["State"]["Pid"].to_string();
    let s = Sandbox::new();
    let engine = format!("podman=unix://{}", p.socket().display());
    let (found, _) = discovered(&s, &["--pid", &pid, "--engine", &engine]);
    assert_eq!(found["unit_starters"][0]["value"], unit, "{found}");

    let engines = format!("[containment.engines]\n{}\n", p.engines_toml());
    let with_systemd = |mut cmd: std::process::Command| -> Run {
        cmd.env("REPOCH_SYSTEMCTL", c.systemctl());
        cmd.output().unwrap().into()
    };
    let enroll = |units: &str| {
        let path = s.path("manifest.toml");
        std::fs::write(
            &path,
            s.manifest(&format!(
                "[containment]\ncontainers = [\"podman:old-root\"]\n{units}{engines}"
            )),
        )
        .unwrap();
        with_systemd(s.enroll_cmd(&path))
    };
    let r = enroll("");
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("containment.units"), "{}", r.stdout);
    let r = enroll(&format!("units = [\"{unit}\"]\n"));
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    let id = r.json()["deployment"].as_str().unwrap().to_owned();
    p.ok(&["stop", "-t", "1", "old-root"]);
    assert_refused(&with_systemd(s.observe_cmd(&id, &[])), "unit-not-masked");
    // (A unit file in /etc cannot be masked over: removed, then masked.)
    c.sh(&format!(
        "systemctl disable {unit} && rm /etc/systemd/system/{unit} && systemctl mask {unit}"
    ));
    assert_holds(&with_systemd(s.observe_cmd(&id, &[])));
    // And recovered, repochd asking the same systemd.
    recovers(&s, &id, &[("REPOCH_SYSTEMCTL", &c.systemctl())], "");
}

pub(crate) fn a_fake_shim_in_a_look_alike_container_cgroup_is_no_named_containers() {
    // Proves: the manifest names a Docker container by a full id its engine has none of,
    // and the old root's executable. The old root runs as the child of a shell copied under
    // the name `conmon`, both in a cgroup only named like that container's
    // (`/X/docker-ID.scope`). Enrolling is refused (exit 64): that cgroup is no named
    // container's (no engine said so) and the loop is a starter to name or waive (found
    // by attacking the release binaries: a program's name made it a shim, a cgroup's name
    // made it the container's, and the restart loop enrolled unseen).
    require_root!();
    let sb = Sandbox::new();
    let d = Dockerd::start(&sb.path("docker"));
    let id = "ab".repeat(32);
    let s = Sandbox::new();
    let lookalike = Cgroup::new(&format!("repoch-fakeshim-{}/docker-{id}.scope", s.tag));
    let exe = own_copy_of_the_helper(&s);
    let conmon = s.srv.join("conmon");
    std::fs::copy("/bin/sh", &conmon).unwrap();
    let sock = s.srv.join("a.sock");
    let mut c = std::process::Command::new(&conmon);
    c.arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && {} listen-unix {}; true",
            lookalike.path().display(),
            exe.display(),
            sock.display()
        ))
        .stderr(Stdio::null());
    let _loop = spawn_ready(c);
    let p = s.path("manifest.toml");
    std::fs::write(
        &p,
        s.manifest(&format!(
            "[containment]\ncontainers = [\"docker:{id}\"]\nexecutables = [\"{}\"]\n\
             listeners = [\"unix:{}\"]\n[containment.engines]\n{}\n",
            exe.display(),
            sock.display(),
            d.engines_toml()
        )),
    )
    .unwrap();
    let r = s.enroll_manifest(&p);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    let said = r.json()["message"].as_str().unwrap().to_owned();
    assert!(
        said.contains(&format!("docker-{id}.scope")) || said.contains(" conmon\""),
        "{said}"
    );
}

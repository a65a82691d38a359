//! Units are observed through a real systemd: a container booted with `systemd-nspawn`
//! from a minimal Debian rootfs (built once per run with mmdebstrap, cached in target/),
//! asked through `nsenter -t LEADER -a systemctl` (`REPOCH_SYSTEMCTL`).

use repoch_tests_native::*;

const UNIT: &str = "[Unit]\nDescription=old root\n[Service]\nExecStart=/bin/sleep infinity\n";

fn observe_in(s: &Sandbox, id: &str, c: &Container) -> Run {
    let mut cmd = s.observe_cmd(id, &[]);
    cmd.env("REPOCH_SYSTEMCTL", c.systemctl());
    cmd.output().unwrap().into()
}

/// An observer of sandbox `s`'s manifest `m`, in this process, asking container `c`'s
/// systemd.
fn observer_in(
    s: &Sandbox,
    m: repoch_protocol::manifest::Manifest,
    c: &Container,
) -> repoch_issuer::observe::Observer {
    let layout = repoch_issuer::Layout::new(Some(&s.root));
    let mut obs = repoch_issuer::observe::Observer::new(m, layout, None);
    obs.systemctl = c
        .systemctl()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    obs
}

fn reasons(r: &Run) -> Vec<String> {
    failed(r).into_iter().map(|(_, reason)| reason).collect()
}

pub(crate) fn units_masked_active_reload_pending_and_absent_systemd() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll_with(&s.manifest("[containment]\nunits = [\"oldroot.service\"]"));
    // No systemd reachable (this host runs none as PID 1, or the command fails): unknown.
    let mut cmd = s.observe_cmd(&id, &[]);
    cmd.env("REPOCH_SYSTEMCTL", "false");
    let r: Run = cmd.output().unwrap().into();
    assert_eq!(reasons(&r), ["controller-unknown"], "{}", r.stdout);

    let c = Container::boot(&s.tag);
    c.sh(&format!(
        "printf '{UNIT}' > /usr/lib/systemd/system/oldroot.service && systemctl daemon-reload"
    ));
    // Loaded but not masked.
    assert_eq!(reasons(&observe_in(&s, &id, &c)), ["unit-not-masked"]);
    // Masked and inactive: holds.
    // A mask in /run is gone at the next boot, and the unit starts again then (found by
    // attacking the release binaries: held).
    c.sh("systemctl mask --runtime oldroot.service");
    let r = observe_in(&s, &id, &c);
    assert_eq!(reasons(&r), ["unit-not-masked"], "{}", r.stdout);
    assert!(
        observed(&r, "unit").contains("masked-runtime"),
        "{}",
        r.stdout
    );
    c.sh("systemctl unmask --runtime oldroot.service && systemctl mask oldroot.service");
    let r = observe_in(&s, &id, &c);
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    // Running, then masked: masked but active.
    c.sh("systemctl unmask oldroot.service && systemctl start oldroot.service && systemctl mask oldroot.service");
    let r = observe_in(&s, &id, &c);
    assert_eq!(reasons(&r), ["unit-active"], "{}", r.stdout);
    c.sh("systemctl stop oldroot.service");
    assert_eq!(observe_in(&s, &id, &c).code, Outcome::Success);
    // A changed unit file systemd has not reloaded (the unit is kept loaded by running it;
    // an inactive unit is unloaded and would simply be loaded afresh).
    c.sh("systemctl unmask oldroot.service && systemctl start oldroot.service && sleep 1 && echo '# changed' >> /usr/lib/systemd/system/oldroot.service");
    let r = observe_in(&s, &id, &c);
    assert_eq!(reasons(&r), ["unit-reload-pending"], "{}", r.stdout);
}

/// A template named under `containment.units` is held whole: its unit file masked (no
/// instance can start) and every instance loaded now inactive. An instance named alone is
/// that instance only: another instance of its template ran beside it and the recovery was
/// granted (a known gap); templates were refused at enrollment.
pub(crate) fn a_template_is_held_whole_masked_with_every_instance_inactive() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll_with(&s.manifest("[containment]\nunits = [\"old@.service\"]"));
    let c = Container::boot(&s.tag);
    c.sh(&format!(
        "printf '{UNIT}' > /usr/lib/systemd/system/old@.service && systemctl daemon-reload \
         && systemctl start old@a.service"
    ));
    let r = observe_in(&s, &id, &c);
    assert_eq!(reasons(&r), ["unit-not-masked"], "{}", r.stdout);
    assert!(
        observed(&r, "unit").contains("template static"),
        "{}",
        r.stdout
    );
    c.sh("systemctl mask old@.service");
    let r = observe_in(&s, &id, &c);
    assert_eq!(reasons(&r), ["unit-active"], "{}", r.stdout);
    assert!(
        observed(&r, "unit").contains("old@a.service active/running"),
        "{}",
        r.stdout
    );
    c.sh("systemctl stop old@a.service");
    let r = observe_in(&s, &id, &c);
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    // An instance with a unit file of its own is not covered by the template's mask: it
    // starts (found by attacking the release binaries: held, then started).
    c.sh(&format!(
        "printf '{UNIT}' > /etc/systemd/system/old@c.service && systemctl daemon-reload"
    ));
    let r = observe_in(&s, &id, &c);
    assert_eq!(reasons(&r), ["unit-not-masked"], "{}", r.stdout);
    assert!(
        observed(&r, "unit").contains("old@c.service static"),
        "{}",
        r.stdout
    );
    c.sh("rm /etc/systemd/system/old@c.service && systemctl daemon-reload");
    let r = observe_in(&s, &id, &c);
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    // Masked, no instance starts; a template with no unit file is unknown.
    let start = c.exec(&["systemctl", "start", "old@b.service"]);
    assert!(!start.status.success());
    assert_eq!(observe_in(&s, &id, &c).code, Outcome::Success);
    c.sh("rm /etc/systemd/system/old@.service /usr/lib/systemd/system/old@.service && systemctl daemon-reload");
    assert_eq!(reasons(&observe_in(&s, &id, &c)), ["controller-unknown"]);
}

/// One observation through a real systemd, each unit's state named exactly: masked and
/// inactive holds; loaded and not masked, masked but running (its main pid named), a
/// changed unit file not reloaded, a unit no file defines, and a pattern (systemctl would
/// expand it to the units it matches: no unit's state) each refuse with their reason.
pub(crate) fn each_units_state_is_named_exactly_in_one_observation() {
    use repoch_issuer::observe::Fences;
    use repoch_protocol::Reason;
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let c = Container::boot(&s.tag);
    // Unit files in /run (a masked unit is a symlink to /dev/null in /etc).
    c.sh(
        "mkdir -p /run/systemd/system && for u in masked loaded busy stale; do \
           printf '[Service]\\nExecStart=/bin/sleep infinity\\n' \
             > /run/systemd/system/$u.service; done && systemctl daemon-reload && \
         systemctl mask masked.service && \
         systemctl start busy.service && systemctl mask busy.service && \
         systemctl start stale.service && sleep 1 && \
         echo '# changed' >> /run/systemd/system/stale.service",
    );
    let mut m = s.deployment(&id).manifest.clone();
    m.containment.units = ["masked", "loaded", "busy", "stale", "absent", "mask*"]
        .map(|u| format!("{u}.service"))
        .to_vec();
    let mut obs = observer_in(&s, m, &c);
    let o = obs.observe(&mut Fences::default());
    let fact = |unit: &str| {
        o.facts
            .iter()
            .find(|f| f.kind.as_str() == "unit" && f.subject == unit)
            .unwrap_or_else(|| panic!("no unit fact for {unit}: {:?}", o.facts))
            .clone()
    };
    let f = fact("masked.service");
    assert!(f.holds(), "{f:?}");
    assert_eq!(f.observed, "masked inactive");
    let f = fact("loaded.service");
    assert_eq!(f.reason, Some(Reason::UnitNotMasked), "{f:?}");
    assert_eq!(f.observed, "loaded inactive/dead MainPID 0 reload no");
    let f = fact("busy.service");
    assert_eq!(f.reason, Some(Reason::UnitActive), "{f:?}");
    let pid = c.exec(&[
        "systemctl",
        "show",
        "-p",
        "MainPID",
        "--value",
        "busy.service",
    ]);
    let pid = String::from_utf8_lossy(&pid.stdout).trim().to_owned();
    assert_eq!(
        f.observed,
        format!("masked active/running MainPID {pid} reload no")
    );
    let f = fact("stale.service");
    assert_eq!(f.reason, Some(Reason::UnitReloadPending), "{f:?}");
    assert!(f.observed.ends_with("reload pending"), "{f:?}");
    let f = fact("absent.service");
    assert_eq!(f.reason, Some(Reason::UnitNotMasked), "{f:?}");
    assert!(f.observed.starts_with("not-found inactive/dead"), "{f:?}");
    let f = fact("mask*.service");
    assert_eq!(f.reason, Some(Reason::ControllerUnknown), "{f:?}");
    assert!(f.observed.contains("a pattern"), "{f:?}");
}

/// The old root's executable run by a service the manifest leaves out is found and refused:
/// a loaded service (enabled, stopped) whose ExecStart names the enrolled file, by its path
/// or by a link to it, is `controller-unnamed`: after the grant, its next start (a boot, a
/// dependency, a socket) brings the old root back. Named under `containment.units` and
/// masked, it holds; a service running something else changes nothing.
pub(crate) fn a_service_that_runs_the_old_roots_executable_must_be_named() {
    require_root!();
    let s = Sandbox::new();
    let exe = s.srv.join("old-root");
    unique_copy(&bin("repoch-test-helper"), &exe, &s.tag);
    let link = s.srv.join("old-root-link");
    std::os::unix::fs::symlink(&exe, &link).unwrap();
    let id = s.enroll_with(&s.manifest(&format!(
        "[containment]\nexecutables = [\"{}\"]",
        exe.display()
    )));
    let c = Container::boot(&s.tag);
    let unit = |name: &str, exec: &str| {
        format!(
            "printf '[Service]\\nExecStart={exec} live-ms 5\\n\
             [Install]\\nWantedBy=multi-user.target\\n' > /usr/lib/systemd/system/{name} && \
             systemctl daemon-reload && systemctl enable {name}"
        )
    };
    c.sh(&unit("bystander.service", "/bin/sleep"));
    let r = observe_in(&s, &id, &c);
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert!(
        observed_any(&r, "unit-search").starts_with("none unnamed of"),
        "{}",
        r.stdout
    );
    c.sh(&unit("oldroot.service", &exe.display().to_string()));
    let r = observe_in(&s, &id, &c);
    assert_eq!(reasons(&r), ["controller-unnamed"], "{}", r.stdout);
    assert!(
        observed(&r, "unit-search").contains(&format!("ExecStart runs {}", exe.display())),
        "{}",
        r.stdout
    );
    // Enrollment finds it too: the manifest that leaves it out is refused, naming it.
    let p = s.path("unnamed.toml");
    std::fs::write(
        &p,
        s.manifest(&format!(
            "[containment]\nexecutables = [\"{}\"]",
            exe.display()
        )),
    )
    .unwrap();
    let mut enroll = s.enroll_cmd(&p);
    enroll.env("REPOCH_SYSTEMCTL", c.systemctl());
    let r: Run = enroll.output().unwrap().into();
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(
        (r.stdout.clone() + &r.stderr).contains("oldroot.service ExecStart runs"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    // Another spelling of the same file: its identity is the enrolled one.
    c.sh(&format!(
        "systemctl disable oldroot.service && rm /usr/lib/systemd/system/oldroot.service && {}",
        unit("spelled.service", &link.display().to_string())
    ));
    let r = observe_in(&s, &id, &c);
    assert_eq!(reasons(&r), ["controller-unnamed"], "{}", r.stdout);
    // Found by attacking the release binaries, each granted: the file reached through the
    // service's root directory, through a bind mount, and a copy of it at another path.
    c.sh("systemctl disable spelled.service && rm /usr/lib/systemd/system/spelled.service");
    let copy = s.srv.join("billing");
    std::fs::copy(&exe, &copy).unwrap();
    // A link inside a root directory leads where the root leads it, not where the host
    // would (found by attacking the release binaries: resolved on the host, it led nowhere).
    let jail = s.srv.join("jail");
    std::fs::create_dir_all(jail.join("usr/bin")).unwrap();
    std::fs::copy(&exe, jail.join("old-root")).unwrap();
    std::os::unix::fs::symlink("/old-root", jail.join("usr/bin/app")).unwrap();
    let ext = s.srv.join("ext");
    std::fs::create_dir_all(ext.join("usr/bin")).unwrap();
    std::fs::copy(&exe, ext.join("usr/bin/app")).unwrap();
    // An argument holding a space: systemctl joins the arguments with one.
    std::fs::copy(&exe, s.srv.join("old root")).unwrap();
    let srv = s.srv.display();
    for (name, exec, more) in [
        (
            "rooted.service",
            "/old-root".to_owned(),
            format!("RootDirectory={srv}"),
        ),
        (
            "bound.service",
            "/usr/local/bin/billing".to_owned(),
            format!("BindReadOnlyPaths={}:/usr/local/bin/billing", exe.display()),
        ),
        ("copied.service", copy.display().to_string(), String::new()),
        (
            "spaced.service",
            format!("/bin/sh \"{srv}/old root\""),
            String::new(),
        ),
        // Found by attacking the release binaries, each held before: a command named
        // without a `/` (found on its search path), a path inside an option, a relative
        // path from the working directory, an optional extension directory, and the host's
        // path beside a root directory (RootDirectoryStartOnly= runs the others there).
        (
            "searched.service",
            "old-root".to_owned(),
            format!("ExecSearchPath={srv}"),
        ),
        (
            "optioned.service",
            format!("/usr/bin/env -S{srv}/old-root"),
            String::new(),
        ),
        (
            "relative.service",
            "/usr/bin/env ./old-root".to_owned(),
            format!("WorkingDirectory={srv}"),
        ),
        (
            "extended.service",
            "/usr/bin/app".to_owned(),
            format!("ExtensionDirectories=-{}", ext.display()),
        ),
        (
            "startonly.service",
            format!("{srv}/old-root"),
            format!(
                "RootDirectory={}\\nRootDirectoryStartOnly=yes",
                jail.display()
            ),
        ),
        // Found by the second attack, each held: a relative path with no working
        // directory (systemd's is /), and a command's path through a link (/bin on a
        // merged /usr) into a bind mount's destination.
        (
            "rootrel.service",
            format!(
                "/usr/bin/env {}/old-root",
                srv.to_string().trim_start_matches('/')
            ),
            String::new(),
        ),
        (
            "merged.service",
            "/bin/rtapp".to_owned(),
            format!("BindReadOnlyPaths={}:/usr/bin/rtapp", exe.display()),
        ),
        (
            "linked.service",
            "/usr/bin/app".to_owned(),
            format!("RootDirectory={}", jail.display()),
        ),
    ] {
        c.sh(&format!(
            "printf '[Service]\\n{more}\\nExecStart={exec} live-ms 5\\n' \
             > /usr/lib/systemd/system/{name} && systemctl daemon-reload"
        ));
        let r = observe_in(&s, &id, &c);
        assert_eq!(reasons(&r), ["controller-unnamed"], "{name}: {}", r.stdout);
        assert!(
            observed(&r, "unit-search").contains("ExecStart runs"),
            "{}",
            r.stdout
        );
        c.sh(&format!(
            "rm /usr/lib/systemd/system/{name} && systemctl daemon-reload"
        ));
    }
    // A bind source holding a colon (`\\:` in the unit file) is printed raw: the search
    // cannot read it, and says so (it read another source before, and found nothing).
    let unreadable = |name: &str, service: &str| {
        c.sh(&format!(
            "printf '[Service]\\n{service}\\n' > /usr/lib/systemd/system/{name} && systemctl daemon-reload"
        ));
        let r = observe_in(&s, &id, &c);
        assert_eq!(reasons(&r), ["controller-unknown"], "{name}: {}", r.stdout);
        assert!(
            observed(&r, "unit-search").contains("cannot be read"),
            "{name}: {}",
            r.stdout
        );
        c.sh(&format!(
            "rm /usr/lib/systemd/system/{name} && systemctl daemon-reload"
        ));
    };
    unreadable(
        "escaped.service",
        &format!("BindReadOnlyPaths={srv}/old\\\\:root:/usr/bin/app\\nExecStart=/usr/bin/app"),
    );
    // A path holding ` ; argv[]=` cannot be told from its arguments: said, not guessed (it
    // read another path before, and found nothing).
    std::fs::copy(&exe, s.srv.join("c ; argv[]=z")).unwrap();
    unreadable(
        "split.service",
        &format!("ExecStart=\"{srv}/c ; argv[]=z\" live-ms 5"),
    );
    // A service masked in /run only is one systemd starts at the next boot, and its
    // commands are not loaded: the search cannot read it, and says so.
    c.sh(&format!(
        "printf '[Service]\\nExecStart={} live-ms 5\\n[Install]\\nWantedBy=multi-user.target\\n' \
         > /usr/lib/systemd/system/runmask.service && systemctl daemon-reload \
         && systemctl enable runmask.service && systemctl mask --runtime runmask.service",
        exe.display()
    ));
    let r = observe_in(&s, &id, &c);
    assert_eq!(reasons(&r), ["controller-unknown"], "{}", r.stdout);
    assert!(
        observed(&r, "unit-search").contains("masked-runtime"),
        "{}",
        r.stdout
    );
    c.sh(
        "systemctl unmask --runtime runmask.service && systemctl disable runmask.service \
          && rm /usr/lib/systemd/system/runmask.service && systemctl daemon-reload",
    );
    // A service whose file changed without a reload is not what it would run: unknown
    // (its loaded commands were searched, and the new ones ran the old root).
    c.sh("printf '[Service]\\nExecStart=/bin/sleep infinity\\n' > /usr/lib/systemd/system/changed.service \
          && systemctl daemon-reload && systemctl start changed.service && sleep 1 \
          && echo '# changed' >> /usr/lib/systemd/system/changed.service");
    let r = observe_in(&s, &id, &c);
    assert_eq!(reasons(&r), ["controller-unknown"], "{}", r.stdout);
    assert!(
        observed(&r, "unit-search").contains("not reloaded"),
        "{}",
        r.stdout
    );
    c.sh("systemctl stop changed.service && rm /usr/lib/systemd/system/changed.service && systemctl daemon-reload");
    c.sh(&unit("spelled.service", &link.display().to_string()));
    // Named and masked: the unit's own fact holds it, and the search names none.
    use repoch_issuer::observe::Fences;
    c.sh("systemctl mask spelled.service");
    let mut m = s.deployment(&id).manifest.clone();
    m.containment.units = vec!["spelled.service".into()];
    let mut obs = observer_in(&s, m, &c);
    // An argument holding a newline prints a line of its own in systemctl's answer: here a
    // second `Id=` naming the named unit, which would have hidden the unit that runs it.
    c.sh(&format!(
        "printf '[Service]\\nExecStart={} \"x\\\\nId=spelled.service\\\\ny\"\\n' \
         > /usr/lib/systemd/system/forger.service && systemctl daemon-reload",
        exe.display()
    ));
    let o = obs.observe(&mut Fences::default());
    let searched: Vec<_> = o.facts.iter().filter(|f| f.kind == "unit-search").collect();
    assert!(
        !searched.is_empty() && searched.iter().all(|f| !f.holds()),
        "{searched:?}"
    );
    c.sh("rm /usr/lib/systemd/system/forger.service && systemctl daemon-reload");
    let o = obs.observe(&mut Fences::default());
    let searched: Vec<_> = o.facts.iter().filter(|f| f.kind == "unit-search").collect();
    assert_eq!(searched.len(), 1, "{searched:?}");
    assert!(searched[0].holds(), "{searched:?}");
    let unit = o
        .facts
        .iter()
        .find(|f| f.kind == "unit")
        .expect("the unit's fact");
    assert!(unit.holds(), "{unit:?}");
}

pub(crate) fn a_unit_stopped_with_a_process_left_in_its_cgroup_is_active() {
    // Proves, under a real systemd with repoch inside it (so that systemd's cgroup paths
    // are repoch's): a service with `KillMode=process` whose main process started a
    // watchdog; stopped and masked, systemd reports it inactive while the watchdog still
    // runs in its cgroup, ready to start the old root again. Observed: `unit-active`,
    // naming the cgroup (found by attacking the release binaries: held, and the watchdog
    // exec'd the old root after the grant). The watchdog gone: the unit holds.
    require_root!();
    let s = Sandbox::new();
    let c = Container::boot(&s.tag);
    crate::systemd_recovery::install_built(&c);
    let (uid, gid) = crate::systemd_recovery::fixtures(&c);
    let run = |script: &str| crate::systemd_recovery::run_in(&c, script);
    c.sh("cp /usr/bin/repoch-test-helper /srv/billing/old-root && echo old-root >> /srv/billing/old-root \
          && cp /usr/bin/repoch-test-helper /srv/billing/watchdog && echo watchdog >> /srv/billing/watchdog \
          && printf '[Unit]\\nDescription=old root\\n[Service]\\nKillMode=process\\n\
          ExecStart=/bin/sh -c \"/srv/billing/watchdog sleep & exec /srv/billing/old-root flock /srv/billing/lock\"\\n' \
          > /usr/lib/systemd/system/billing-old.service \
          && systemctl daemon-reload && systemctl start billing-old.service");
    crate::systemd_recovery::write_manifest(
        &c,
        (&uid, &gid),
        &format!(
            "{}\n[containment]\nunits = [\"billing-old.service\"]\n\
             executables = [\"/srv/billing/old-root\"]\n",
            crate::systemd_recovery::FENCE
        ),
    );
    let e = run("repoch --json enroll /etc/billing/billing.toml");
    assert_eq!(e.code, Outcome::Success, "{}{}", e.stdout, e.stderr);
    let id = e.json()["deployment"].as_str().unwrap().to_owned();
    c.sh("systemctl stop billing-old.service && systemctl mask billing-old.service");
    let left = run("systemctl show -p ActiveState --value billing-old.service");
    assert_eq!(left.stdout.trim(), "inactive", "{}", left.stdout);
    let o = run(&format!("repoch --json observe {id}"));
    assert_eq!(reasons(&o), ["unit-active"], "{}", o.stdout);
    assert!(
        o.stdout
            .contains("inactive, its cgroup /system.slice/billing-old.service"),
        "{}",
        o.stdout
    );
    c.sh("systemctl kill --signal=KILL billing-old.service; sleep 0.5");
    let o = run(&format!("repoch --json observe {id}"));
    assert!(
        !reasons(&o).contains(&"unit-active".to_owned()),
        "{}",
        o.stdout
    );
    assert_eq!(o.code, Outcome::Success, "{}", o.stdout);
}

pub(crate) fn timers_templates_and_another_cgroup_view_are_held_not_skipped() {
    // Proves, under a real systemd (found by attacking the release binaries, each held or
    // enrolled before):
    // 1. A manifest naming a service and its timer is cross-checked: its unnamed second
    //    lock is refused at enrollment (exit 64). Before, asking systemd for a timer's
    //    cgroup failed, was swallowed, and enrollment said nothing was cross-checked.
    // 2. A template stopped and masked whose instance (`KillMode=process`) left a
    //    watchdog in its cgroup: `unit-active`, naming the instance (held "every instance
    //    inactive", and granted).
    // 3. Observed from outside the container (another cgroup view than systemd's), a unit
    //    whose cgroup systemd names and repoch cannot see: `controller-unknown`, never
    //    empty (held).
    require_root!();
    let s = Sandbox::new();
    let c = Container::boot(&s.tag);
    crate::systemd_recovery::install_built(&c);
    let (uid, gid) = crate::systemd_recovery::fixtures(&c);
    let run = |script: &str| crate::systemd_recovery::run_in(&c, script);
    c.sh("cp /usr/bin/repoch-test-helper /srv/billing/old-root && echo old-root >> /srv/billing/old-root \
          && cp /usr/bin/repoch-test-helper /srv/billing/watchdog && echo watchdog >> /srv/billing/watchdog \
          && cp /usr/bin/repoch-test-helper /srv/billing/old3 && echo old3 >> /srv/billing/old3 \
          && : > /srv/billing/lock3 && chmod 600 /srv/billing/lock3 \
          && printf '[Service]\\nExecStart=/srv/billing/old3 flock /srv/billing/lock3\\n' \
             > /usr/lib/systemd/system/billing3.service \
          && printf '[Timer]\\nOnCalendar=*-*-* 03:00\\n[Install]\\nWantedBy=timers.target\\n' \
             > /usr/lib/systemd/system/billing3.timer \
          && printf '[Service]\\nKillMode=process\\n\
          ExecStart=/bin/sh -c \"/srv/billing/watchdog sleep & exec /srv/billing/old-root sleep\"\\n' \
             > /usr/lib/systemd/system/billing@.service \
          && systemctl daemon-reload && systemctl enable --now billing3.timer \
          && systemctl start billing3.service billing@1.service");
    let manifest = |containment: &str| {
        let body = format!(
            "{}\n[containment]\n{containment}",
            crate::systemd_recovery::FENCE
        );
        crate::systemd_recovery::write_manifest(&c, (&uid, &gid), &body);
    };
    // 1.
    manifest("units = [\"billing3.service\", \"billing3.timer\"]\n");
    let e = run("repoch --json enroll /etc/billing/billing.toml");
    assert_eq!(e.code, Outcome::Usage, "{}{}", e.stdout, e.stderr);
    assert!(e.stdout.contains("lock:/srv/billing/lock3"), "{}", e.stdout);
    c.sh("systemctl stop billing3.timer billing3.service");
    // 2.
    manifest("units = [\"billing@.service\"]\nexecutables = [\"/srv/billing/old-root\"]\n");
    let e = run("repoch --json enroll /etc/billing/billing.toml");
    assert_eq!(e.code, Outcome::Success, "{}{}", e.stdout, e.stderr);
    assert_eq!(e.json()["cross_check"]["ran"], true, "{}", e.stdout);
    let id = e.json()["deployment"].as_str().unwrap().to_owned();
    c.sh("systemctl stop billing@1.service && systemctl mask billing@.service");
    let o = run(&format!("repoch --json observe {id}"));
    assert_eq!(reasons(&o), ["unit-active"], "{}", o.stdout);
    assert!(
        o.stdout.contains("billing@1.service inactive, its cgroup"),
        "{}",
        o.stdout
    );
    // 3. The same systemd asked from the host, whose cgroup view is not the container's.
    let host = Sandbox::new();
    let hid = host.enroll_with(&host.manifest("[containment]\nunits = [\"billing@1.service\"]"));
    let r = observe_in(&host, &hid, &c);
    assert!(
        reasons(&r).contains(&"controller-unknown".to_owned()),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("not in this cgroup view"), "{}", r.stdout);
    c.sh("systemctl kill --signal=KILL billing@1.service; sleep 0.5");
    let o = run(&format!("repoch --json observe {id}"));
    assert!(
        !reasons(&o).contains(&"unit-active".to_owned()),
        "{}",
        o.stdout
    );
}

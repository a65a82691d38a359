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
    c.sh("systemctl mask oldroot.service");
    let r = observe_in(&s, &id, &c);
    assert_eq!(r.code, 0, "{}", r.stdout);
    // Running, then masked: masked but active.
    c.sh("systemctl unmask oldroot.service && systemctl start oldroot.service && systemctl mask oldroot.service");
    let r = observe_in(&s, &id, &c);
    assert_eq!(reasons(&r), ["unit-active"], "{}", r.stdout);
    c.sh("systemctl stop oldroot.service");
    assert_eq!(observe_in(&s, &id, &c).code, 0);
    // A changed unit file systemd has not reloaded (the unit is kept loaded by running it;
    // an inactive unit is unloaded and would simply be loaded afresh).
    c.sh("systemctl unmask oldroot.service && systemctl start oldroot.service && sleep 1 && echo '# changed' >> /usr/lib/systemd/system/oldroot.service");
    let r = observe_in(&s, &id, &c);
    assert_eq!(reasons(&r), ["unit-reload-pending"], "{}", r.stdout);
}

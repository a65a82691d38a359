//! Stopping, restarting and upgrading repochd under a real systemd mid-recovery
//! (docs/ARCHITECTURE.md, "Stopping"), in the nspawn container of `units.rs` with the
//! shipped units: at every issuance barrier, `systemctl stop` or `systemctl restart` (in
//! turn) while repochd is stopped there; and, from the installed Debian package, an upgrade
//! (`apt-get install --reinstall` of the package over itself) while a recovery waits for its
//! consumer. Each time the operator's outcome equals what `repoch status` says afterwards,
//! and the repochd that runs next is never `issuer-busy`.

use std::time::{Duration, Instant};

use repoch_tests_native::*;

use crate::systemd_recovery::{install_built, install_package, run_in};

/// Longest wait for a recovery, a consumer or a barrier in the container.
const WAIT_SECONDS_MAX: u64 = 60;

fn journal(c: &Container) -> String {
    run_in(
        c,
        "journalctl --no-pager -o cat -u repochd.service | tail -n 40",
    )
    .stdout
}

/// Polls `script` in the container until it exits 0; its output.
fn until(c: &Container, script: &str, what: &str) -> String {
    let start = Instant::now();
    loop {
        let r = run_in(c, script);
        if r.code == Exit(0) {
            return r.stdout;
        }
        assert!(
            start.elapsed().as_secs() < WAIT_SECONDS_MAX,
            "{what} never happened\n--- repochd's journal:\n{}",
            journal(c)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The consumer's user and keys (shared by every deployment of the test), the fixtures
/// on a tmpfs (see `systemd_recovery::recover_under_systemd` for why not the overlay).
fn prepare(c: &Container) {
    c.sh(
        "mount -t tmpfs -o mode=0755 srv /srv && mkdir -p /etc/sysusers.d /etc/billing \
          && echo 'u billing - \"billing root\" /var/lib/billing' > /etc/sysusers.d/billing.conf \
          && systemd-sysusers \
          && repoch journal keygen /etc/billing/producer.key \
          && repoch-consume keygen /etc/billing/consumer.key \
          && chown billing /etc/billing/consumer.key",
    );
}

/// Enrolls deployment `n` (its own fence, store, READY and journal under /srv/dN).
fn enroll(c: &Container, n: usize) -> String {
    let uid = run_in(c, "id -u billing").stdout.trim().to_owned();
    let gid = run_in(c, "id -g billing").stdout.trim().to_owned();
    c.sh(&format!(
        "mkdir -p /srv/d{n} && cd /srv/d{n} && : > lock && chmod 600 lock && echo store > data \
         && echo v1 > READY"
    ));
    let manifest = format!(
        "label = \"d{n}\"\nfences = [\"/srv/d{n}/lock\"]\nstores = [\"/srv/d{n}/data\"]\n\
         ready = \"/srv/d{n}/READY\"\n\n[journal]\npath = \"/srv/d{n}/journal\"\n\
         producer_key_file = \"/etc/billing/producer.key.pub\"\n\n[consumer]\nuid = {uid}\n\
         gid = {gid}\nexecutable = \"/usr/bin/repoch-consume\"\n\
         key_file = \"/etc/billing/consumer.key.pub\"\n"
    );
    std::fs::write(
        format!("/proc/{}/root/etc/billing/d{n}.toml", c.leader),
        manifest,
    )
    .unwrap();
    let e = run_in(c, &format!("repoch --json enroll /etc/billing/d{n}.toml"));
    assert_eq!(e.code, Outcome::Success, "enroll: {}{}", e.stdout, e.stderr);
    e.json()["deployment"].as_str().unwrap().to_owned()
}

/// Starts the consumer of deployment `id` as a transient unit `name` of user billing; its
/// JSON and exit code go to /tmp/NAME.out and /tmp/NAME.rc. Returns once repochd has
/// registered it as waiting.
fn consumer(c: &Container, id: &str, name: &str) {
    c.sh(&format!(
        "systemd-run -q --unit {name} -p User=billing -p SupplementaryGroups=repoch-consumer \
         -p StateDirectory=billing sh -c 'repoch-consume --json receive --deployment {short} \
         --key /etc/billing/consumer.key --issuer-key /etc/repoch/issuer.pub \
         --out /var/lib/billing/{name}.cbor > /tmp/{name}.out; echo $? > /tmp/{name}.rc'",
        short = &id[..8]
    ));
    until(
        c,
        &format!(
            "journalctl --no-pager -o json -u repochd.service | grep 'waiting for a recovery' | grep -q {id}"
        ),
        &format!("the consumer {name} waiting"),
    );
}

/// Starts `repoch recover` of `id` as a transient unit `name`; its output and exit code go
/// to /tmp/NAME.out and /tmp/NAME.rc.
fn recover_bg(c: &Container, id: &str, name: &str, wait: u64) {
    c.sh(&format!(
        "systemd-run -q --unit {name} sh -c 'repoch --json recover {id} --consumer-wait {wait} \
         > /tmp/{name}.out 2>&1; echo $? > /tmp/{name}.rc'"
    ));
}

/// The exit code and output of a transient unit started by [`consumer`] or [`recover_bg`].
fn ended(c: &Container, name: &str) -> Run {
    let code = until(c, &format!("cat /tmp/{name}.rc"), &format!("{name} ending"));
    Run {
        code: Exit(code.trim().parse().unwrap()),
        stdout: run_in(c, &format!("cat /tmp/{name}.out")).stdout,
        stderr: String::new(),
    }
}

fn records(c: &Container, id: &str) -> Vec<String> {
    let st = run_in(c, &format!("repoch --json status {id}"));
    st.json()["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_owned())
        .collect()
}

fn epoch(c: &Container, id: &str) -> String {
    run_in(c, &format!("repoch --json status {id}")).json()["epoch"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The operator's outcome equals the log: before the intent refused `daemon-stopping`
/// (the consumer told the same) and the epoch recoverable by the repochd that runs next;
/// from the intent on granted, receipted, and the next recovery refused `epoch-consumed`
/// (never busy).
fn outcome_equals_the_log(c: &Container, id: &str, what: &str, rec: &str, cons: &str) {
    let r = ended(c, rec);
    let k = ended(c, cons);
    let written = records(c, id);
    if written == ["genesis"] {
        assert_eq!(
            r.code,
            Outcome::Refused,
            "{what}: {}\n{}",
            r.stdout,
            journal(c)
        );
        assert_eq!(r.reasons(), ["daemon-stopping"], "{what}: {}", r.stdout);
        assert_eq!(epoch(c, id), "enrolled", "{what}");
        assert_eq!(
            k.code,
            Outcome::Refused,
            "{what}: the consumer: {}",
            k.stdout
        );
        assert_eq!(k.json()["reason"], "daemon-stopping", "{what}");
        consumer(c, id, &format!("{cons}-again"));
        let again = run_in(c, &format!("repoch --json recover {id} --consumer-wait 20"));
        assert_eq!(
            again.code,
            Outcome::Success,
            "{what}: the recovery after: {}",
            again.stdout
        );
        assert_eq!(
            ended(c, &format!("{cons}-again")).code,
            Outcome::Success,
            "{what}"
        );
        assert_eq!(epoch(c, id), "receipted", "{what}");
    } else {
        assert_eq!(
            r.code,
            Outcome::Success,
            "{what}: {}\n{}",
            r.stdout,
            journal(c)
        );
        assert_eq!(r.outcome()["outcome"], "granted", "{what}");
        assert_eq!(
            written,
            ["genesis", "intent", "consume", "receipt"],
            "{what}"
        );
        assert_eq!(epoch(c, id), "receipted", "{what}");
        assert_eq!(
            k.code,
            Outcome::Success,
            "{what}: the consumer: {}",
            k.stdout
        );
        let again = run_in(c, &format!("repoch --json recover {id} --consumer-wait 1"));
        assert_eq!(again.code, Outcome::Refused, "{what}: {}", again.stdout);
        assert_eq!(again.reasons(), ["epoch-consumed"], "{what}");
    }
}

pub(crate) fn stop_and_restart_at_every_barrier_under_systemd() {
    require_root!();
    let s = Sandbox::new();
    let c = Container::boot(&s.tag);
    install_built(&c);
    prepare(&c);
    let barriers: Vec<&str> = repoch_issuer::barrier::BARRIERS
        .iter()
        .copied()
        .take_while(|b| *b != "enroll-after-successor-check")
        .collect();
    let intent = barriers.iter().position(|b| *b == "before-intent").unwrap();
    for (n, barrier) in barriers.iter().enumerate() {
        let how = if n % 2 == 0 { "stop" } else { "restart" };
        let what = format!("systemctl {how} at {barrier}");
        let id = enroll(&c, n);
        // The barrier for the next repochd only (it starts on the consumer's connection;
        // the one the previous case left running is stopped first).
        c.sh(&format!(
            "systemctl stop repochd.service && mkdir -p /run/systemd/system/repochd.service.d && printf '[Service]\\nEnvironment=REPOCH_BARRIER={barrier}\\n' \
             > /run/systemd/system/repochd.service.d/barrier.conf && systemctl daemon-reload"
        ));
        let (rec, cons) = (format!("rec{n}"), format!("cons{n}"));
        consumer(&c, &id, &cons);
        recover_bg(&c, &id, &rec, 20);
        until(
            &c,
            &format!(
                "journalctl --no-pager -o cat -u repochd.service | grep -q 'barrier {barrier} reached' \
                 && p=$(systemctl show -p MainPID --value repochd.service) \
                 && awk '{{print $3}}' /proc/$p/stat | grep -q T"
            ),
            &format!("repochd stopped at {barrier}"),
        );
        c.sh("rm /run/systemd/system/repochd.service.d/barrier.conf && systemctl daemon-reload");
        let done = run_in(&c, &format!("systemctl {how} repochd.service"));
        assert_eq!(
            done.code,
            Outcome::Success,
            "{what}: {}{}",
            done.stdout,
            done.stderr
        );
        let show = run_in(&c, "systemctl show repochd.service -p Result").stdout;
        assert!(
            show.contains("Result=success"),
            "{what}: {show}\n{}",
            journal(&c)
        );
        outcome_equals_the_log(&c, &id, &what, &rec, &cons);
        if n < intent {
            assert_eq!(
                records(&c, &id),
                ["genesis", "intent", "consume", "receipt"],
                "{what}: the recovery after the stop"
            );
            let r = ended(&c, &rec);
            assert_eq!(r.reasons(), ["daemon-stopping"], "{what}: {}", r.stdout);
        } else if n > intent {
            let r = ended(&c, &rec);
            assert_eq!(r.code, Outcome::Success, "{what}: {}", r.stdout);
        }
    }
}

pub(crate) fn an_upgrade_mid_recovery_refuses_it_daemon_stopping_and_the_next_one_grants() {
    require_root!();
    let s = Sandbox::new();
    let c = Container::boot(&s.tag);
    install_package(&c);
    prepare(&c);
    let id = enroll(&c, 0);
    recover_bg(&c, &id, "rec", 600);
    until(
        &c,
        "journalctl --no-pager -o cat -u repochd.service | grep -q 'waiting for the consumer'",
        "the recovery waiting for its consumer",
    );
    let before = run_in(&c, "systemctl show -p MainPID --value repochd.service").stdout;
    let up = run_in(&c, "apt-get install -y -q --reinstall /tmp/repoch.deb 2>&1");
    assert_eq!(up.code, Outcome::Success, "the upgrade: {}", up.stdout);
    let r = ended(&c, "rec");
    assert_eq!(r.code, Outcome::Refused, "{}\n{}", r.stdout, journal(&c));
    assert_eq!(r.reasons(), ["daemon-stopping"], "{}", r.stdout);
    assert_eq!(epoch(&c, &id), "enrolled");
    let after = run_in(&c, "systemctl show -p MainPID --value repochd.service").stdout;
    assert_ne!(before, after, "the upgrade did not restart repochd");
    // The upgraded repochd takes the next recovery at once: granted, never busy.
    consumer(&c, &id, "cons");
    let again = run_in(
        &c,
        &format!("repoch --json recover {id} --consumer-wait 20"),
    );
    assert_eq!(
        again.code,
        Outcome::Success,
        "{}\n{}",
        again.stdout,
        journal(&c)
    );
    assert_eq!(ended(&c, "cons").code, Outcome::Success);
    assert_eq!(
        records(&c, &id),
        ["genesis", "intent", "consume", "receipt"]
    );
}

//! repochd under its own shipped unit's sandbox, in a real systemd (the nspawn container of
//! `units.rs`): the shipped units, tmpfiles and sysusers entries installed, the sockets
//! enabled, and a complete recovery through socket activation: the fence under `/srv`,
//! the old root a real unit that is stopped and masked, the consumer a real service unit
//! (its own user, in `repoch-consumer`) that receives the grant and its fences. Then
//! `systemctl stop repochd` ends cleanly, a second recovery is refused, and
//! `systemd-analyze verify` passes on every unit. Twice: with the workspace's binaries and
//! the shipped files copied in, and from the Debian package as installed by `dpkg -i`.

use std::path::{Path, PathBuf};

use repoch_tests_native::*;

/// The workspace's `systemd/` directory: the shipped units.
fn shipped() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd")
}

/// Runs `script` in the container; its output as a [`Run`].
pub(crate) fn run_in(c: &Container, script: &str) -> Run {
    c.exec(&["sh", "-c", script]).into()
}

/// What systemd logged about the units of this test (for failure messages).
fn journal(c: &Container) -> String {
    run_in(
        c,
        "journalctl --no-pager -o cat -u repochd.service -u billing-new.service -u billing-old.service | tail -n 60",
    )
    .stdout
}

/// Installs the workspace's binaries and the shipped units, tmpfiles and sysusers entries
/// at the places the package puts them, then enables the sockets.
pub(crate) fn install_built(c: &Container) {
    let root = PathBuf::from(format!("/proc/{}/root", c.leader));
    for b in ["repoch", "repochd", "repoch-consume", "repoch-test-helper"] {
        copy_executable(&bin(b), &root.join("usr/bin").join(b), "");
    }
    let units = root.join("usr/lib/systemd/system");
    for u in [
        "repochd.service",
        "repochd-admin.socket",
        "repochd-grant.socket",
    ] {
        std::fs::copy(shipped().join(u), units.join(u)).unwrap();
    }
    std::fs::copy(
        shipped().join("repoch.tmpfiles.conf"),
        root.join("usr/lib/tmpfiles.d/repoch.conf"),
    )
    .unwrap();
    std::fs::copy(
        shipped().join("repoch.sysusers.conf"),
        root.join("usr/lib/sysusers.d/repoch.conf"),
    )
    .unwrap();
    c.sh(
        "systemd-sysusers && systemd-tmpfiles --create repoch.conf && systemctl daemon-reload \
          && systemctl enable --now repochd-admin.socket repochd-grant.socket",
    );
}

/// The deployment's fixtures: the consumer's user `billing` (a member of repoch-consumer
/// through its unit), the lock, store and READY under /srv/billing, keys under
/// /etc/billing; the user's uid and gid. /srv is a tmpfs: the container's root is an
/// overlay, where a flock shows in /proc/locks under the overlay's device while stat names
/// the upper file system's, so a fence there is refused `fence-custody` (real deployments
/// live on ext4, xfs, btrfs or tmpfs: docs/OPERATOR.md).
pub(crate) fn fixtures(c: &Container) -> (String, String) {
    c.sh("mount -t tmpfs -o mode=0755 srv /srv && mkdir -p /etc/sysusers.d && echo 'u billing - \"billing root\" /var/lib/billing' > /etc/sysusers.d/billing.conf \
          && systemd-sysusers \
          && mkdir -p /srv/billing /etc/billing && cd /srv/billing \
          && : > lock && chmod 600 lock && echo store > data && echo v1 > READY \
          && cp /usr/bin/true /srv/billing/old-tool \
          && repoch journal keygen /etc/billing/producer.key \
          && repoch-consume keygen /etc/billing/consumer.key \
          && chown billing /etc/billing/consumer.key");
    let uid = run_in(c, "id -u billing").stdout.trim().to_owned();
    let gid = run_in(c, "id -g billing").stdout.trim().to_owned();
    (uid, gid)
}

/// The deployment's fence, as a manifest's top level names it.
pub(crate) const FENCE: &str = "fences = [\"/srv/billing/lock\"]";

/// Writes the deployment's manifest in the container (`/etc/billing/billing.toml`): its
/// label, store and READY ([`fixtures`]), then `body` (its fences and `[containment]`,
/// or a draft), then its journal and its consumer, the user `billing` (`uid`, `gid`).
pub(crate) fn write_manifest(c: &Container, (uid, gid): (&str, &str), body: &str) {
    let text = format!(
        "label = \"billing\"\nstores = [\"/srv/billing/data\"]\nready = \"/srv/billing/READY\"\n\
         {body}\n\n[journal]\npath = \"/srv/billing/journal\"\n\
         producer_key_file = \"/etc/billing/producer.key.pub\"\n\n\
         [consumer]\nuid = {uid}\ngid = {gid}\nexecutable = \"/usr/bin/repoch-consume\"\n\
         key_file = \"/etc/billing/consumer.key.pub\"\n"
    );
    std::fs::write(
        format!("/proc/{}/root/etc/billing/billing.toml", c.leader),
        text,
    )
    .unwrap();
}

/// The recovery of `id` with its consumer a real service unit as `billing`, waiting on the
/// grant socket (which activates repochd), then exec'ing the new root that holds the
/// fences: `repoch recover`'s run.
pub(crate) fn recover_with_consumer_unit(c: &Container, id: &str) -> Run {
    c.sh(&format!(
        "printf '[Unit]\\nDescription=billing new root\\n[Service]\\nUser=billing\\n\
         SupplementaryGroups=repoch-consumer\\nStateDirectory=billing\\n\
         ExecStart=/usr/bin/repoch-consume --json receive --deployment {short} \
         --key /etc/billing/consumer.key --issuer-key /etc/repoch/issuer.pub \
         --out /var/lib/billing/grant.cbor -- /usr/bin/repoch-test-helper hold-fences \
         /var/lib/billing/held.txt\\n' > /etc/systemd/system/billing-new.service \
         && systemctl daemon-reload && systemctl start billing-new.service",
        short = &id[..8]
    ));
    run_in(
        c,
        &format!(
            "repoch --json recover {id} --consumer-wait 20 --approve-ready \
             $(sha256sum /srv/billing/READY | cut -d' ' -f1)"
        ),
    )
}

/// The recovery, against whatever `install` put in the container.
pub(crate) fn recover_under_systemd(c: &Container) {
    let j = |r: &Run| format!("{}\n{}\n--- journal:\n{}", r.stdout, r.stderr, journal(c));
    let (uid, gid) = fixtures(c);
    // The old root: a real unit holding the fence, listening on its port (in the
    // container's network namespace, which is the host's) and on its unix socket, running.
    c.sh("mkdir -p /run/billing && printf '[Unit]\\nDescription=billing old root\\n[Service]\\n\
          ExecStart=/bin/sh -c \"/usr/bin/repoch-test-helper listen-unix /run/billing/old.sock & \
          exec /usr/bin/flock --exclusive /srv/billing/lock /usr/bin/repoch-test-helper listen-tcp 7071\"\\n' \
          > /usr/lib/systemd/system/billing-old.service \
          && systemctl daemon-reload && systemctl start billing-old.service");
    write_manifest(
        c,
        (&uid, &gid),
        &format!(
            "{FENCE}\n[containment]\nunits = [\"billing-old.service\"]\n\
             executables = [\"/srv/billing/old-tool\"]\n\
             listeners = [\"tcp:*:7071\", \"unix:/run/billing/old.sock\"]\n"
        ),
    );
    let e = run_in(c, "repoch --json enroll /etc/billing/billing.toml");
    assert_eq!(e.code, Outcome::Success, "enroll: {}", j(&e));
    let id = e.json()["deployment"].as_str().unwrap().to_owned();

    // `repoch observe` (the CLI's own observation): the old root still runs and holds the
    // fence.
    let o = run_in(c, &format!("repoch --json observe {id}"));
    assert_eq!(o.code, Outcome::Refused, "{}", j(&o));
    let kinds: Vec<String> = failed(&o).into_iter().map(|(k, _)| k).collect();
    assert!(
        kinds.contains(&"fence".to_owned()),
        "{kinds:?} {}",
        o.stdout
    );
    // In the container's own pid namespace the kernel gives no process events: the walk
    // and its chase hold the process space, and the observation says so.
    let held = observed_any(&o, "process-space");
    assert!(
        held.starts_with(
            "walks of /proc and their chase (no process events: outside the initial pid namespace"
        ),
        "{held}"
    );
    // repochd (activated by the admin socket) sees the same: the recovery is refused
    // before anything is written. Its own network namespace is not the one the port is
    // bound in, yet the port is found taken there (it binds in the host's).
    let r = run_in(c, &format!("repoch --json recover {id} --consumer-wait 1"));
    assert_eq!(r.code, Outcome::Refused, "{}", j(&r));
    let mut reasons = r.reasons();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            "fence-busy",
            "listener-present",
            "listener-present",
            "unit-not-masked"
        ],
        "{}",
        j(&r)
    );
    // Contain it: stop and mask the unit, remove its stale socket file.
    c.sh(
        "systemctl stop billing-old.service && systemctl mask billing-old.service \
          && rm /run/billing/old.sock",
    );

    let r = recover_with_consumer_unit(c, &id);
    assert_eq!(r.code, Outcome::Success, "recover: {}", j(&r));
    assert_eq!(r.outcome()["outcome"], "granted", "{}", j(&r));
    // repochd under its real unit holds every exec of the enrolled executable (its
    // system-call filter lets fanotify's two calls through, CAP_SYS_ADMIN is kept).
    assert!(
        r.stdout
            .contains(r#""kind":"exec-hold","observed":"held (fanotify permission events)""#),
        "{}",
        j(&r)
    );
    let st = run_in(c, &format!("repoch --json status {id}"));
    let kinds: Vec<String> = st.json()["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds, ["genesis", "intent", "consume", "receipt"]);
    // The new root (exec'd by the consumer in its unit) holds the enrolled fence.
    let fence = run_in(c, "stat -c %d:%i /srv/billing/lock").stdout;
    let start = std::time::Instant::now();
    let held = loop {
        let h = run_in(c, "cat /var/lib/billing/held.txt");
        if h.code == Exit(0) {
            break h.stdout;
        }
        assert!(
            start.elapsed().as_secs() < DAEMON_WAIT_SECONDS_MAX,
            "the new root never started\n{}",
            journal(c)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(held.contains(&format!(":{}", fence.trim())), "{held}");
    // The port repochd held, in the host's network namespace from its own empty one, is
    // the new root's now and takes connections (no filter of repochd's unit drops them).
    let connect = run_in(c, "timeout 10 bash -c ': > /dev/tcp/127.0.0.1/7071'");
    assert_eq!(
        connect.code,
        Exit(0),
        "port 7071 does not take connections: {}",
        j(&connect)
    );
    let holder = run_in(c, "ss -Hltnp 'sport = :7071'").stdout;
    assert!(
        holder.contains("repoch-test-he"),
        "7071 is not the new root's: {holder}"
    );
    assert_ne!(
        run_in(c, "flock --nonblock /srv/billing/lock true").code,
        Exit(0),
        "the fence was free while the new root runs"
    );
    let v = run_in(
        c,
        "repoch-consume --json verify --issuer-key /etc/repoch/issuer.pub /var/lib/billing/grant.cbor",
    );
    assert_eq!(v.code, Outcome::Success, "{}", j(&v));
    assert_eq!(v.json()["grant"]["deployment"], id.as_str());

    // It ran as the unit says: its own user, its own network namespace.
    let pid = run_in(c, "systemctl show -p MainPID --value repochd.service").stdout;
    let who = run_in(
        c,
        &format!(
            "stat -c %U /proc/{p} && readlink /proc/{p}/ns/net /proc/1/ns/net",
            p = pid.trim()
        ),
    )
    .stdout;
    let who: Vec<&str> = who.lines().collect();
    assert_eq!(who.len(), 3, "{who:?}");
    assert_eq!(who[0], "repoch", "{who:?}");
    assert_ne!(
        who[1], who[2],
        "repochd in systemd's network namespace: {who:?}"
    );
    // A clean stop.
    c.sh("systemctl stop repochd.service");
    let show = run_in(
        c,
        "systemctl show repochd.service -p Result -p ExecMainStatus -p ActiveState",
    )
    .stdout;
    assert!(
        show.contains("Result=success")
            && show.contains("ExecMainStatus=0")
            && show.contains("ActiveState=inactive"),
        "{show}\n{}",
        journal(c)
    );
    // A second recovery (activating repochd again) is refused and writes nothing.
    let again = run_in(c, &format!("repoch --json recover {id} --consumer-wait 1"));
    assert_eq!(again.code, Outcome::Refused, "{}", j(&again));
    assert_eq!(again.reasons(), ["epoch-consumed"]);
    let st = run_in(c, &format!("repoch --json status {id}"));
    assert_eq!(st.json()["records"].as_array().unwrap().len(), 4);
    c.sh("systemctl stop billing-new.service");
}

/// `systemd-analyze verify` on every shipped unit, as installed.
pub(crate) fn verify_units(c: &Container) {
    let v = run_in(
        c,
        "cd /usr/lib/systemd/system && systemd-analyze verify repochd.service \
         repochd-admin.socket repochd-grant.socket 2>&1",
    );
    assert_eq!(v.code, Outcome::Success, "{}", v.stdout);
    assert_eq!(v.stdout.trim(), "", "systemd-analyze verify warned");
}

/// The Debian package ([`debian_package`]); the `tooled` harness skips this test when
/// there is none.
fn package() -> PathBuf {
    debian_package().unwrap_or_else(|| {
        panic!(
            "no repoch_*.deb in target/debian: build it with `cargo build --release -p \
             repoch-daemon -p repoch-cli -p repoch-consumer && cargo deb -p repoch-daemon --no-build` (or \
             set REPOCH_DEB)"
        )
    })
}

/// Installs the package with `dpkg -i` (its maintainer scripts create the user and group,
/// the directories, and enable and start the sockets); the test helper beside it.
pub(crate) fn install_package(c: &Container) {
    let root = PathBuf::from(format!("/proc/{}/root", c.leader));
    std::fs::copy(package(), root.join("tmp/repoch.deb")).unwrap();
    std::fs::copy(
        bin("repoch-test-helper"),
        root.join("usr/bin/repoch-test-helper"),
    )
    .unwrap();
    let r = run_in(c, "dpkg -i /tmp/repoch.deb 2>&1");
    assert_eq!(r.code, Outcome::Success, "dpkg -i: {}", r.stdout);
    let l = run_in(
        c,
        "dpkg -L repoch && systemctl is-enabled repochd-admin.socket repochd-grant.socket \
         && systemctl is-active repochd-admin.socket repochd-grant.socket && id repoch",
    );
    assert_eq!(l.code, Outcome::Success, "{}{}", l.stdout, l.stderr);
    for f in [
        "/usr/bin/repoch",
        "/usr/bin/repochd",
        "/usr/bin/repoch-consume",
        "/usr/lib/systemd/system/repochd.service",
        "/usr/lib/tmpfiles.d/repoch.conf",
        "/usr/lib/sysusers.d/repoch.conf",
        "/usr/share/doc/repoch/OPERATOR.md",
    ] {
        assert!(
            l.stdout.lines().any(|x| x == f),
            "{f} not in the package:\n{}",
            l.stdout
        );
    }
}

pub(crate) fn a_recovery_from_the_installed_package() {
    require_root!();
    let s = Sandbox::new();
    let c = Container::boot(&s.tag);
    install_package(&c);
    verify_units(&c);
    recover_under_systemd(&c);
    // Removing the package stops repochd and its sockets and keeps the state.
    let r = run_in(
        &c,
        "dpkg -r repoch 2>&1 && ls /var/lib/repoch/deployments | wc -l",
    );
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert_eq!(r.stdout.lines().last(), Some("1"), "{}", r.stdout);
    assert_ne!(
        run_in(&c, "systemctl is-active repochd-admin.socket")
            .stdout
            .trim(),
        "active"
    );
}

pub(crate) fn a_recovery_through_socket_activation_under_the_shipped_unit() {
    require_root!();
    let s = Sandbox::new();
    let c = Container::boot(&s.tag);
    install_built(&c);
    verify_units(&c);
    recover_under_systemd(&c);
}

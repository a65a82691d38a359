//! Fences on btrfs. `stat` names a subvolume's own anonymous device; the kernel names a
//! lock (fdinfo `lock:` lines, `/proc/locks`) by the file system's superblock device. A
//! fence there is held and proven by the device of its descriptor's mount
//! (`procfs::lock_device`), so it is held, granted and handed over like one on ext4, and a
//! lock of another on it is `fence-busy` naming its holder. Before, it was refused
//! `fence-custody` at every recovery.

use std::process::Stdio;

use repoch_tests_native::*;

pub(crate) fn a_fence_on_a_btrfs_subvolume_is_held_granted_and_its_holder_named() {
    require_root!();
    let _no_namespaces = no_mount_namespaces_guard();
    let fs = Ext4::btrfs();
    let sub = fs.mnt.join("sub");
    sh(
        "btrfs",
        &["-q", "subvolume", "create", sub.to_str().unwrap()],
    );
    let s = Sandbox::within(Some(&sub));
    let id = s.enroll();
    let fence = s.srv.join("lock");
    // stat's device (the subvolume's) is not the file system's.
    let stat_dev = sh("stat", &["-c", "%d", fence.to_str().unwrap()]);
    let fs_dev = sh("mountpoint", &["-d", fs.mnt.to_str().unwrap()]);
    assert_ne!(
        format!(
            "{}:{}",
            rustix::fs::major(stat_dev.trim().parse().unwrap()),
            rustix::fs::minor(stat_dev.trim().parse().unwrap())
        ),
        fs_dev.trim(),
        "no subvolume device: this test proves nothing"
    );
    let o = s.observe(&id);
    assert_eq!(o.code, Outcome::Success, "{}", o.stdout);
    let fence_fact = o.json()["facts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "fence")
        .cloned()
        .unwrap();
    assert_eq!(fence_fact["observed"], "held", "{}", o.stdout);

    // Another process's flock on it: fence-busy, its holder named.
    let holder = spawn_ready(helper(&["flock", fence.to_str().unwrap()]));
    let o = s.observe(&id);
    assert_eq!(
        failed(&o),
        [("fence".into(), "fence-busy".into())],
        "{}",
        o.stdout
    );
    let said = observed(&o, "fence");
    assert!(
        said.contains(&format!("pid {}", holder.pid())),
        "the holder is not named: {said}"
    );
    drop(holder);

    // A whole recovery: granted, the new root holding the fence.
    let _d = s.daemon();
    let held = s.path("held.txt");
    let mut c = s
        .consumer(
            &id[..6],
            "consumer.key",
            "grant.cbor",
            &[
                bin("repoch-test-helper").to_str().unwrap(),
                "hold-fences",
                held.to_str().unwrap(),
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let r = run(s.recover(&id[..6], 20, &[]));
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert_eq!(r.outcome()["outcome"], "granted");
    let start = std::time::Instant::now();
    while !held.exists() {
        assert!(
            start.elapsed().as_secs() < DAEMON_WAIT_SECONDS_MAX,
            "the new root never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let free = std::process::Command::new("flock")
        .args(["--nonblock", fence.to_str().unwrap(), "true"])
        .status()
        .unwrap();
    assert!(
        !free.success(),
        "the fence was free while the new root runs"
    );
    let _ = c.kill();
    let _ = c.wait();
}

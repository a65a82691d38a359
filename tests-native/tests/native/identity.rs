//! Identity of enrolled objects and the custody of lock fences (issue 8 items 3, 4, 9):
//! an inode number handed out again after a delete is not "the enrolled inode"; held fences
//! are matched to their manifest entry, never by position; a fence that others can open
//! (and so hold shared) is refused at enrollment and reported when its mode widens later.
//! Every test drives the real `repoch` binary (or the real observer) against real files on
//! a real ext4 file system, and real processes holding real locks.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;
use std::process::Command;

use repoch_tests_native::*;

// ---- item 3: inode numbers reused ----

// ---- item 4: fences matched by entry ----

#[test]
#[ignore = "needs root"]
fn a_busy_first_fence_is_the_only_fence_named_and_the_others_are_not_custody_failures() {
    // Three fences, the first held by a helper process: exactly one failed fact, for the
    // first entry (fence-busy naming the helper), and no fence-custody for the two fences
    // that were acquired (through the real binary, and through the library observer).
    require_root!();
    let s = Sandbox::new();
    for n in ["lock1", "lock2"] {
        let p = s.srv.join(n);
        std::fs::write(&p, b"").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let srv = s.srv.display().to_string();
    let m = s.manifest("").replace(
        &format!("fences = [\"{srv}/lock\"]"),
        &format!("fences = [\"{srv}/lock\", \"{srv}/lock1\", \"{srv}/lock2\"]"),
    );
    let id = s.enroll_with(&m);
    let lock = s.srv.join("lock");
    let h = spawn_ready(helper(&["flock", lock.to_str().unwrap()]));
    let r = s.observe(&id);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    let fails: Vec<(String, String)> = r.json()["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["holds"] == false)
        .map(|f| {
            (
                f["subject"].as_str().unwrap().to_owned(),
                f["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        fails,
        vec![(lock.display().to_string(), "fence-busy".to_owned())],
        "{}",
        r.stdout
    );
    assert!(
        observed(&r, "fence").contains(&format!("pid {} ", h.pid())),
        "{}",
        r.stdout
    );
    // In-process: a partial set is released, never kept; once the holder is gone the
    // whole set is acquired and re-verified entry by entry.
    let (mut obs, mut fences) = s.observer(&id);
    let first = obs.observe(&mut fences);
    let failed_first: Vec<_> = first.failed().map(|f| f.reason).collect();
    assert_eq!(
        failed_first,
        vec![Some(repoch_protocol::Reason::FenceBusy)],
        "{:?}",
        first.facts
    );
    assert!(fences.is_empty(), "a partial fence set was kept");
    drop(h);
    let second = obs.observe(&mut fences);
    assert!(second.holds(), "{:?}", second.failed().collect::<Vec<_>>());
    assert_eq!(fences.len(), 3);
    let third = obs.observe(&mut fences);
    assert!(third.holds(), "{:?}", third.failed().collect::<Vec<_>>());
    let granted: Vec<String> = fences.grant_fences().into_iter().map(|g| g.path).collect();
    assert_eq!(
        granted,
        ["lock", "lock1", "lock2"]
            .iter()
            .map(|n| s.srv.join(n).display().to_string())
            .collect::<Vec<_>>()
    );
}

// ---- item 9: fences others can open ----

#[test]
#[ignore = "needs root"]
fn enroll_refuses_a_fence_others_can_open_and_names_its_mode() {
    // A fence readable by others can be opened and held shared by any user: enrollment
    // refuses it (exit 64, like every manifest error), naming the path and the mode.
    require_root!();
    let s = Sandbox::new();
    let lock = s.srv.join("lock");
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o644)).unwrap();
    let p = s.path("manifest.toml");
    std::fs::write(&p, s.manifest("")).unwrap();
    let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    let msg = r.json()["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("fences[0]"), "{msg}");
    assert!(msg.contains(&lock.display().to_string()), "{msg}");
    assert!(msg.contains("644"), "{msg}");
    assert!(
        std::fs::read_dir(s.root.join("var/lib/repoch/deployments"))
            .map(|d| d.count())
            .unwrap_or(0)
            == 0,
        "a refused enrollment left a deployment"
    );
    // 0640 (group only) is accepted.
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o640)).unwrap();
    s.enroll();
}

#[test]
#[ignore = "needs root"]
fn a_fence_made_readable_by_others_after_enrollment_is_fence_unprotected() {
    // chmod o+r after enrollment: observation reports the widened mode (enrolled vs
    // observed), before trying to lock it.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let lock = s.srv.join("lock");
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o604)).unwrap();
    let r = s.observe(&id);
    assert_refused(&r, "fence-unprotected");
    assert!(observed(&r, "fence").contains("604"), "{}", r.stdout);
}

#[test]
#[ignore = "needs root"]
fn a_shared_lock_taken_by_nobody_on_a_widened_fence_is_fence_unprotected_and_blames_no_one() {
    // The attack: the fence's mode is widened to 0644, then user nobody (setpriv, no
    // groups) opens it read-only and holds `flock -s`. Observation says the fence is
    // unprotected; it never reports fence-busy, never names nobody's process.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    // Let nobody traverse to the fence (the sandbox directory is 0700).
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let lock = s.srv.join("lock");
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "flock",
        "-s",
        lock.to_str().unwrap(),
        "sh",
        "-c",
        "echo $$; exec sleep 30",
    ]);
    let nobody = spawn_ready(cmd);
    let holder = nobody.pid();
    // The shared lock is really held.
    let o = helper(&["try-flock", lock.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "nobody's shared lock is not held");
    let r = s.observe(&id);
    assert_refused(&r, "fence-unprotected");
    assert!(
        !r.stdout.contains(&format!("pid {holder}")),
        "blamed nobody's process: {}",
        r.stdout
    );
}

/// Gives user `uid` read access to `path` through a POSIX access ACL (what `setfacl -m
/// u:UID:r` writes), keeping owner rw, group r, mask r, others none: the mode stays 0640.
fn grant_read_by_acl(path: &Path, uid: u32) {
    // struct posix_acl_xattr_header { u32 version = 2 } then entries { u16 tag, u16 perm,
    // u32 id }, sorted by tag: USER_OBJ 1, USER 2, GROUP_OBJ 4, MASK 0x10, OTHER 0x20.
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (0x01u16, 6u16, u32::MAX),
        (0x02, 4, uid),
        (0x04, 4, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    rustix::fs::setxattr(
        path,
        "system.posix_acl_access",
        &acl,
        rustix::fs::XattrFlags::empty(),
    )
    .expect("setting an access ACL");
    assert_eq!(std::fs::metadata(path).unwrap().mode() & 0o7777, 0o640);
}

#[test]
#[ignore = "needs root"]
fn a_fence_opened_to_nobody_by_an_acl_is_refused_at_enrollment_and_after_it() {
    // The mode bits are not the whole answer: a named-user ACL entry lets nobody open a
    // 0640 fence and hold it shared. Enrollment refuses a fence with an access ACL; an ACL
    // added after enrollment is fence-unprotected (checked before locking), and nobody's
    // shared lock is never blamed.
    require_root!();
    let s = Sandbox::new();
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let lock = s.srv.join("lock");
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o640)).unwrap();
    grant_read_by_acl(&lock, 65534);
    let p = s.path("manifest.toml");
    std::fs::write(&p, s.manifest("")).unwrap();
    let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    let msg = r.json()["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("fences[0]") && msg.contains("ACL"), "{msg}");
    // Without the ACL it enrolls; then the ACL comes back and nobody holds it shared.
    rustix::fs::removexattr(&lock, "system.posix_acl_access").unwrap();
    let id = s.enroll();
    grant_read_by_acl(&lock, 65534);
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "flock",
        "-s",
        lock.to_str().unwrap(),
        "sh",
        "-c",
        "echo $$; exec sleep 30",
    ]);
    let nobody = spawn_ready(cmd);
    let r = s.observe(&id);
    assert_refused(&r, "fence-unprotected");
    assert!(
        !r.stdout.contains(&format!("pid {}", nobody.pid())),
        "blamed nobody's process: {}",
        r.stdout
    );
    assert!(observed(&r, "fence").contains("ACL"), "{}", r.stdout);
}

/// Attempts to unmount a read-only bind mount, 20 ms apart.
const RO_UMOUNT_TRIES_MAX: u32 = 250;

/// A read-only bind mount of a file over itself, unmounted on drop.
struct ReadOnlyBind<'a>(&'a Path);

impl<'a> ReadOnlyBind<'a> {
    fn new(p: &'a Path) -> ReadOnlyBind<'a> {
        let s = p.to_str().unwrap();
        sh("mount", &["--bind", s, s]);
        let b = ReadOnlyBind(p);
        sh("mount", &["-o", "remount,bind,ro", s]);
        b
    }
}

impl Drop for ReadOnlyBind<'_> {
    fn drop(&mut self) {
        for _ in 0..RO_UMOUNT_TRIES_MAX {
            if Command::new("umount")
                .arg(self.0)
                .status()
                .is_ok_and(|s| s.success())
            {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

#[test]
#[ignore = "needs root"]
fn a_fence_on_a_read_only_mount_is_still_acquired_and_held() {
    // flock needs no write access, so fences are opened read-only: with the fence under a
    // read-only bind mount (same device, inode and birth time), observation still acquires
    // it, and a helper cannot take it meanwhile (through the in-process observer).
    require_root!();
    let _no_namespaces = no_mount_namespaces_guard();
    let s = Sandbox::new();
    let id = s.enroll();
    let lock = s.srv.join("lock");
    let _ro = ReadOnlyBind::new(&lock);
    assert!(std::fs::OpenOptions::new().write(true).open(&lock).is_err());
    let r = s.observe(&id);
    assert_eq!(r.code, Outcome::Success, "{:?}\n{}", failed(&r), r.stdout);
    let (mut obs, mut fences) = s.observer(&id);
    let o = obs.observe(&mut fences);
    assert!(o.holds(), "{:?}", o.failed().collect::<Vec<_>>());
    let busy = helper(&["try-flock", lock.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(busy.status.code(), Some(4), "the fence was not held");
}

//! Inode numbers reused on a fresh ext4 (the rest of identity: tests/native/identity.rs).

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;

use repoch_tests_native::*;

use crate::assert_refused;

/// Files created while waiting for a freed inode number to be handed out again.
const REUSE_TRIES_MAX: u32 = 256;

/// Deletes `path` and creates files beside it until one gets the deleted inode number
/// back (ext4 hands out the lowest free number of the group), then renames that one to
/// `path`: "rm store && cp backup store" with the number reused. Panics when the number
/// does not come back within `REUSE_TRIES_MAX` files.
fn recreate_with_same_inode(path: &Path, content: &[u8], mode: u32) {
    let old = std::fs::metadata(path).unwrap();
    std::fs::remove_file(path).unwrap();
    let mut spares = Vec::new();
    for n in 0..REUSE_TRIES_MAX {
        let p = path.with_extension(format!("reuse{n}"));
        std::fs::write(&p, content).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        if std::fs::metadata(&p).unwrap().ino() == old.ino() {
            std::fs::rename(&p, path).unwrap();
            for s in spares {
                let _ = std::fs::remove_file(s);
            }
            let new = std::fs::metadata(path).unwrap();
            assert_eq!((new.dev(), new.ino()), (old.dev(), old.ino()));
            return;
        }
        spares.push(p);
    }
    panic!(
        "inode {} was not handed out again within {REUSE_TRIES_MAX} files",
        old.ino()
    );
}

pub(crate) fn a_store_deleted_and_recreated_on_the_same_inode_number_is_store_replaced() {
    // On a fresh loop-mounted ext4, the enrolled store is deleted and a copy is created
    // until ext4 hands the same inode number out again (same st_dev, same st_ino, same
    // content): the birth time tells the new file apart, and observation refuses it.
    require_root!();
    let _no_namespaces = no_mount_namespaces_guard();
    let fs = Ext4::new();
    let s = Sandbox::within(Some(&fs.mnt));
    let id = s.enroll();
    let data = s.srv.join("data");
    recreate_with_same_inode(&data, b"the store", 0o644);
    let r = s.observe(&id);
    assert_refused(&r, "store-replaced");
    assert!(observed(&r, "store").contains("born"), "{}", r.stdout);
}

pub(crate) fn a_fence_deleted_and_recreated_on_the_same_inode_number_is_fence_replaced() {
    // The same with the lock fence: a new fence on the old number gives no exclusion over
    // whoever still holds the old (unlinked) one, so it must read as replaced.
    require_root!();
    let _no_namespaces = no_mount_namespaces_guard();
    let fs = Ext4::new();
    let s = Sandbox::within(Some(&fs.mnt));
    let id = s.enroll();
    recreate_with_same_inode(&s.srv.join("lock"), b"", 0o600);
    assert_refused(&s.observe(&id), "fence-replaced");
}

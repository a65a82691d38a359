//! A loop-mounted ext4 (or btrfs) image: power loss by `EXT4_IOC_SHUTDOWN`, full disks.

use std::path::PathBuf;
use std::process::Command;

use crate::*;

/// Attempts to unmount, 20 ms apart.
const UMOUNT_TRIES_MAX: u32 = 250;

/// A loop-mounted ext4 image, unmounted and detached on drop.
#[derive(Debug)]
pub struct Ext4 {
    pub image: PathBuf,
    pub mnt: PathBuf,
    dev: String,
    /// `ext4`, or `btrfs` ([`Ext4::btrfs`]).
    fstype: &'static str,
    _dir: tempfile::TempDir,
}

impl Ext4 {
    /// The same fixture formatted btrfs (128 MiB sparse: mkfs.btrfs's smallest default),
    /// for what btrfs does differently (a subvolume's own device in `stat`).
    pub fn btrfs() -> Ext4 {
        Ext4::formatted("btrfs", 128 << 20, &["mkfs.btrfs", "-q", "-f"])
    }
    pub fn new() -> Ext4 {
        Ext4::formatted("ext4", 32 << 20, &["mkfs.ext4", "-q", "-F"])
    }
    /// A sparse image of `bytes`, formatted by `mkfs` (the program, then its options; the
    /// image path is appended), on a loop device, mounted as `fstype`.
    fn formatted(fstype: &'static str, bytes: u64, mkfs: &[&str]) -> Ext4 {
        let dir = tempfile::Builder::new()
            .prefix(&format!("repoch-{fstype}-"))
            .tempdir()
            .unwrap();
        let image = dir.path().join("image");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::File::create(&image)
            .unwrap()
            .set_len(bytes)
            .unwrap();
        let mut args = mkfs[1..].to_vec();
        args.push(image.to_str().unwrap());
        sh(mkfs[0], &args);
        let dev = sh("losetup", &["--find", "--show", image.to_str().unwrap()]);
        let e = Ext4 {
            image,
            mnt,
            dev,
            fstype,
            _dir: dir,
        };
        e.mount();
        e
    }
    pub fn mount(&self) {
        sh(
            "mount",
            &["-t", self.fstype, &self.dev, self.mnt.to_str().unwrap()],
        );
    }
    /// Unmounts. A child that another test thread forked while this one had files open on
    /// the mount keeps them until its exec: "target is busy" for a moment. Retry, bounded.
    pub fn umount(&self) {
        for _ in 0..UMOUNT_TRIES_MAX {
            let o = Command::new("umount").arg(&self.mnt).output().unwrap();
            if o.status.success() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        sh("umount", &[self.mnt.to_str().unwrap()]);
    }
    pub fn cut_power(&self) {
        let fd = std::fs::File::open(&self.mnt).unwrap();
        crate::sys::ext4_shutdown(&fd, crate::sys::EXT4_GOING_FLAGS_NOLOGFLUSH)
            .expect("EXT4_IOC_SHUTDOWN");
    }
    /// Unmounts and mounts again: a fresh superblock that reads only what reached the
    /// image. (The same loop device keeps st_dev, so identities still match.)
    pub fn remount_after_power_loss(&self) {
        self.umount();
        self.mount();
    }
    /// Whether the image is mounted at `mnt` now (a test may fail between the unmount and
    /// the mount of a remount).
    fn mounted(&self) -> bool {
        let mnt = self.mnt.to_string_lossy();
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(&*mnt))
    }
}

impl Drop for Ext4 {
    /// Unmounts (bounded retries while a forked child lets go of the mount, then a lazy
    /// unmount so the mount point never outlives the test), detaches the loop device and
    /// removes the image, also when the test failed. Never panics: it may run while
    /// unwinding.
    fn drop(&mut self) {
        if self.mounted() {
            let mut tries = 0;
            while tries < UMOUNT_TRIES_MAX
                && !Command::new("umount")
                    .arg(&self.mnt)
                    .output()
                    .is_ok_and(|o| o.status.success())
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if self.mounted() {
                eprintln!(
                    "{}: still busy after {UMOUNT_TRIES_MAX} tries; unmounting lazily",
                    self.mnt.display()
                );
                let _ = Command::new("umount").arg("-l").arg(&self.mnt).output();
            }
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).output();
        let _ = std::fs::remove_file(&self.image);
    }
}

impl Default for Ext4 {
    fn default() -> Self {
        Ext4::new()
    }
}

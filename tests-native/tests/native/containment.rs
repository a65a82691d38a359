//! Containment judged by the object, never by its name (issue 8 items 1 and 2): a unix
//! listener is whatever socket is bound to the enrolled path's inode, however it was bound
//! (relative path, rename onto the path, another network namespace, a path with a space);
//! a process runs a contained executable if the executable's inode is its `exe` or is
//! mapped into it (started through the dynamic loader). Real processes, real sockets,
//! real namespaces; observations through the real `repoch observe` and `repoch recover`.

use repoch_tests_native::*;

// ---- the sock_diag module against real sockets ----

#[test]
fn sock_diag_reports_the_bound_inode_and_device_as_stat_does() {
    // A socket bound on the test's file system (ext4 on a block device, so the kernel's
    // device encoding differs from stat's): the dump lists it by its socket inode, with
    // the (st_dev, st_ino) that stat() gives for the path, and its bound name.
    require_root!();
    use repoch_issuer::os::sockdiag;
    use std::os::unix::fs::MetadataExt as _;
    let s = Sandbox::new();
    let path = s.path("diag.sock");
    let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let sock_ino = std::fs::metadata(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&l)
    ))
    .unwrap()
    .ino();
    let st = std::fs::symlink_metadata(&path).unwrap();
    let all = sockdiag::unix_sockets().unwrap();
    let me = all
        .iter()
        .find(|u| u.inode == sock_ino)
        .unwrap_or_else(|| panic!("socket inode {sock_ino} not in the dump"));
    let vfs = me.vfs.expect("a bound socket has a vfs attribute");
    assert_eq!((vfs.dev, vfs.ino), (st.dev(), st.ino() & 0xffff_ffff));
    assert_eq!(
        me.name.as_deref(),
        Some(path.as_os_str().as_encoded_bytes())
    );
    assert_eq!(me.state, sockdiag::TCP_LISTEN);
    // The single lookup finds the same socket.
    let one = sockdiag::unix_socket(sock_ino, None).unwrap().unwrap();
    assert_eq!(one.vfs, me.vfs);
}

#[test]
fn sock_diag_names_the_peer_of_a_connected_socket() {
    // A connected pair: the peer of each end is the other end's socket inode.
    require_root!();
    use repoch_issuer::os::sockdiag;
    use std::os::unix::fs::MetadataExt as _;
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let ino = |fd: i32| {
        std::fs::metadata(format!("/proc/self/fd/{fd}"))
            .unwrap()
            .ino()
    };
    use std::os::fd::AsRawFd as _;
    let (ia, ib) = (ino(a.as_raw_fd()), ino(b.as_raw_fd()));
    assert_eq!(sockdiag::peer_of(ia).unwrap(), Some(ib));
    assert_eq!(sockdiag::peer_of(ib).unwrap(), Some(ia));
    // A socket inode nobody has is no socket, not an error.
    assert_eq!(
        sockdiag::unix_socket(u64::from(u32::MAX) - 7, None).unwrap(),
        None
    );
}

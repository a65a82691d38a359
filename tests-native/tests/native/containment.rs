//! Containment judged by the object, never by its name (issue 8 items 1 and 2): a unix
//! listener is whatever socket is bound to the enrolled path's inode, however it was bound
//! (relative path, rename onto the path, another network namespace, a path with a space);
//! a process runs a contained executable if the executable's inode is its `exe` or is
//! mapped into it (started through the dynamic loader). Real processes, real sockets,
//! real namespaces; observations through the real `repoch observe` and `repoch recover`.

use std::process::{Command, Stdio};

use repoch_tests_native::*;

/// Enrolls the sandbox with `path` as its one contained unix listener.
fn enroll_listener(s: &Sandbox, path: &std::path::Path) -> String {
    s.enroll_with(&s.manifest(&format!(
        "[containment]\nlisteners = [\"unix:{}\"]",
        path.display()
    )))
}

// ---- the sock_diag module against real sockets ----

#[test]
#[ignore = "needs root"]
fn sock_diag_reports_the_bound_inode_and_device_as_stat_does() {
    // A socket bound on the test's file system (ext4 on a block device, so the kernel's
    // device encoding differs from stat's): the dump lists it by its socket inode, with
    // the (st_dev, st_ino) that stat() gives for the path, and its bound name.
    require_root!();
    use repoch_sys::sockdiag;
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
#[ignore = "needs root"]
fn sock_diag_names_the_peer_of_a_connected_socket() {
    // A connected pair: the peer of each end is the other end's socket inode.
    require_root!();
    use repoch_sys::sockdiag;
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let (ia, ib) = (
        sockdiag::inode_of(&a).unwrap(),
        sockdiag::inode_of(&b).unwrap(),
    );
    // The same number /proc shows as socket:[N].
    let link = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&a)
    ))
    .unwrap();
    assert_eq!(link.to_str().unwrap(), format!("socket:[{ia}]"));
    assert_eq!(sockdiag::peer_of(ia).unwrap(), Some(ib));
    assert_eq!(sockdiag::peer_of(ib).unwrap(), Some(ia));
    // A socket inode nobody has is no socket, not an error.
    assert_eq!(
        sockdiag::unix_socket(u64::from(u32::MAX) - 7, None).unwrap(),
        None
    );
}

// ---- item 1: unix listeners by the bound inode ----

#[test]
#[ignore = "needs root"]
fn a_unix_listener_bound_by_a_relative_path_is_listener_present() {
    // `cd DIR && bind("old.sock")`: /proc/net/unix shows "old.sock", not the enrolled
    // absolute path. The socket is bound to the enrolled path's inode all the same.
    require_root!();
    let s = Sandbox::new();
    let sock = s.path("old.sock");
    let id = enroll_listener(&s, &sock);
    assert_holds(&s.observe(&id));
    let mut c = helper(&["listen-unix", "old.sock"]);
    c.current_dir(s.path(""));
    let l = spawn_ready(c);
    let r = s.observe(&id);
    assert_refused(&r, "listener-present");
    assert!(
        observed(&r, "listener").contains(&l.pid().to_string()),
        "{}",
        r.stdout
    );
}

#[test]
#[ignore = "needs root"]
fn a_socket_renamed_onto_the_enrolled_path_is_listener_present() {
    // Bound elsewhere, then rename()d onto the enrolled path: the kernel still reports the
    // first name; the path now leads clients to the old root.
    require_root!();
    let s = Sandbox::new();
    let sock = s.path("old.sock");
    let id = enroll_listener(&s, &sock);
    let elsewhere = s.path("elsewhere.sock");
    let l = spawn_ready(helper(&["listen-unix", elsewhere.to_str().unwrap()]));
    assert_holds(&s.observe(&id));
    std::fs::rename(&elsewhere, &sock).unwrap();
    let r = s.observe(&id);
    assert_refused(&r, "listener-present");
    assert!(
        observed(&r, "listener").contains(&l.pid().to_string()),
        "{}",
        r.stdout
    );
}

#[test]
#[ignore = "needs root"]
fn an_enrolled_unix_path_with_a_space_is_seen_when_bound() {
    // /proc/net/unix is split on whitespace: a path with a space was never matched.
    require_root!();
    let s = Sandbox::new();
    std::fs::create_dir(s.path("old root")).unwrap();
    let sock = s.path("old root/old.sock");
    let id = enroll_listener(&s, &sock);
    assert_holds(&s.observe(&id));
    let l = spawn_ready(helper(&["listen-unix", sock.to_str().unwrap()]));
    let r = s.observe(&id);
    assert_refused(&r, "listener-present");
    assert!(
        observed(&r, "listener").contains(&l.pid().to_string()),
        "{}",
        r.stdout
    );
}

#[test]
#[ignore = "needs root"]
fn a_stale_socket_file_is_refused_until_removed() {
    // The old root died and left its socket file: nobody can be shown bound to that inode
    // and a connect() is refused. That is also what a socket bound (not listening yet) in a
    // network namespace no task is in looks like, so the file is refused, named as such,
    // until the operator removes it; with no file at the path nothing can be bound there.
    require_root!();
    let s = Sandbox::new();
    let sock = s.path("old.sock");
    let id = enroll_listener(&s, &sock);
    let l = spawn_ready(helper(&["listen-unix", sock.to_str().unwrap()]));
    assert_refused(&s.observe(&id), "listener-present");
    drop(l);
    assert!(sock.exists(), "the socket file stays behind");
    let r = s.observe(&id);
    assert_refused(&r, "listener-present");
    assert!(
        observed(&r, "listener").contains("remove if stale"),
        "{}",
        r.stdout
    );
    std::fs::remove_file(&sock).unwrap();
    assert_holds(&s.observe(&id));
}

#[test]
#[ignore = "needs root"]
fn a_symlink_at_the_enrolled_path_is_listener_present() {
    // A symlink at the enrolled path redirects clients (connect() follows it) to wherever
    // the old root listens now. It is refused whatever it points to: the enrolled path
    // must name the socket itself or nothing.
    require_root!();
    let s = Sandbox::new();
    let sock = s.path("old.sock");
    let id = enroll_listener(&s, &sock);
    let elsewhere = s.path("elsewhere.sock");
    let _l = spawn_ready(helper(&["listen-unix", elsewhere.to_str().unwrap()]));
    assert_holds(&s.observe(&id));
    std::os::unix::fs::symlink(&elsewhere, &sock).unwrap();
    let r = s.observe(&id);
    assert_refused(&r, "listener-present");
    assert!(observed(&r, "listener").contains("symlink"), "{}", r.stdout);
}

#[test]
#[ignore = "needs root"]
fn recover_is_refused_listener_present_for_a_relative_path_listener() {
    // End to end: repochd observes; the old root still answers on the enrolled path,
    // bound by a relative name. No grant, nothing written.
    require_root!();
    let s = Sandbox::new();
    let sock = s.path("old.sock");
    let id = enroll_listener(&s, &sock);
    let _d = s.daemon();
    let mut c = helper(&["listen-unix", "old.sock"]);
    c.current_dir(s.path(""));
    let _l = spawn_ready(c);
    let r: Run = s
        .recover(&id, 1, &[])
        .stdin(Stdio::null())
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, Outcome::Refused, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.reasons(), ["listener-present"]);
    let records = s.status(&id).json()["records"].as_array().unwrap().len();
    assert_eq!(records, 1, "only the genesis record");
}

// ---- item 2: executables by identity, mapped or exec'd ----

/// The dynamic loader this test binary was started by, from its own maps.
fn dynamic_loader() -> Option<std::path::PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            let name = p.rsplit('/').next().unwrap_or_default();
            name.starts_with("ld-linux") || name.starts_with("ld-musl") || name == "ld.so"
        })
        .map(std::path::PathBuf::from)
}

#[test]
#[ignore = "needs root"]
fn a_contained_executable_started_through_the_dynamic_loader_is_an_escaped_task() {
    // `ld-linux-x86-64.so.2 /srv/old-root 600`: the task's exe is the loader, the
    // contained executable is only mapped into it. It is an escaped task all the same.
    require_root!();
    // Never a silent pass: a test binary without a loader (a static build) cannot run it.
    let loader = dynamic_loader()
        .expect("this test binary has no dynamic loader mapped (a static build?): cannot run");
    let s = Sandbox::new();
    let exe = s.srv.join("old-root");
    unique_copy(std::path::Path::new("/bin/sleep"), &exe, &s.tag);
    let id = s.enroll_with(&s.manifest(&format!(
        "[containment]\nexecutables = [\"{}\"]",
        exe.display()
    )));
    assert_holds(&s.observe(&id));
    // sh prints its pid, then exec()s the loader in place.
    let p = spawn_ready({
        let mut c = Command::new("sh");
        c.args([
            "-c",
            "echo $$; exec \"$0\" \"$1\" 600",
            loader.to_str().unwrap(),
            exe.to_str().unwrap(),
        ]);
        c
    });
    let pid = p.pid();
    // Bounded wait until the loader has mapped the program.
    let mapped = (0..500).any(|_| {
        let m = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        m.contains(exe.to_str().unwrap()) || {
            std::thread::sleep(std::time::Duration::from_millis(10));
            false
        }
    });
    assert!(mapped, "the loader never mapped {}", exe.display());
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/exe")).unwrap(),
        std::fs::canonicalize(&loader).unwrap(),
        "its exe is the loader"
    );
    let r = s.observe(&id);
    assert_refused(&r, "escaped-task");
    assert!(
        observed(&r, "process").contains(&format!("pid {pid}")),
        "{}",
        r.stdout
    );
    drop(p);
    assert_holds(&s.observe(&id));
}

/// An engine's socket is root's or refused naming why: owned by another user, writable by
/// everyone, in a directory others can write, or no socket at all (what enrollment and
/// every observation of a container ask of it).
#[test]
#[ignore = "needs root"]
fn an_engine_socket_is_root_only_or_named() {
    require_root!();
    use repoch_issuer::observe::containers::root_only;
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("engine.sock");
    let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let path = sock.to_str().unwrap();
    assert_eq!(root_only(path), Ok(()));
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(root_only(path)
        .unwrap_err()
        .to_string()
        .contains("mode 777"));
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o660)).unwrap();
    std::os::unix::fs::chown(&sock, Some(65534), None).unwrap();
    assert!(root_only(path)
        .unwrap_err()
        .to_string()
        .contains("uid 65534"));
    std::os::unix::fs::chown(&sock, Some(0), None).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert!(root_only(path)
        .unwrap_err()
        .to_string()
        .contains("mode 777"));
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    assert!(root_only(file.to_str().unwrap())
        .unwrap_err()
        .to_string()
        .contains("not a socket"));
    assert!(root_only("relative.sock").is_err());
}

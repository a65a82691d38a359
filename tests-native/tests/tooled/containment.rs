//! Containment across network namespaces and with sockets Python binds (the rest of
//! containment: tests/native/containment.rs).

use std::process::Command;

use repoch_tests_native::*;

use crate::assert_refused;

/// Enrolls the sandbox with `path` as its one contained unix listener.
fn enroll_listener(s: &Sandbox, path: &std::path::Path) -> String {
    s.enroll_with(&s.manifest(&format!(
        "[containment]\nlisteners = [\"unix:{}\"]",
        path.display()
    )))
}

/// Binds a unix socket to `path` from a network namespace it then leaves empty (the child
/// that made it exits; the socket, passed back over `SCM_RIGHTS`, keeps the namespace
/// alive with no task in it), without listening; listens on SIGUSR1. Prints its pid.
const ORPHAN_BINDER: &str = r#"
import array, ctypes, os, signal, socket, sys, time
path = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
a, b = socket.socketpair()
pid = os.fork()
if pid == 0:
    if libc.unshare(0x40000000) != 0:
        os._exit(1)
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    b.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [s.fileno()]))])
    os._exit(0)
msg, anc, flags, addr = a.recvmsg(1, socket.CMSG_LEN(4))
fds = array.array("i")
fds.frombytes(anc[0][2][:4])
s = socket.socket(fileno=fds[0])
os.waitpid(pid, 0)
signal.signal(signal.SIGUSR1, lambda *_: s.listen())
print(os.getpid(), flush=True)
while True:
    time.sleep(1)
"#;

pub(crate) fn a_unix_listener_bound_in_another_network_namespace_is_listener_present() {
    // The old root binds the enrolled path from inside another network namespace: the
    // host's /proc/net/unix does not list it, yet host clients reach it through the file
    // system. The observer runs on the host.
    require_root!();
    let s = Sandbox::new();
    let sock = s.path("old.sock");
    let id = enroll_listener(&s, &sock);
    let ns = Netns::new(&s.tag);
    let l = spawn_ready(ns.wrap(&helper(&["listen-unix", sock.to_str().unwrap()])));
    let r = s.observe(&id);
    assert_refused(&r, "listener-present");
    let o = observed(&r, "listener");
    assert!(o.contains(&l.pid().to_string()), "{}", r.stdout);
    assert!(o.contains(" in net:["), "names the namespace: {o}");
}

pub(crate) fn a_listener_in_a_namespace_no_process_is_in_is_found_by_connecting() {
    // The old root unshare()s a fresh network namespace, binds and listens there, then
    // setns()es back: no process is in that namespace, so no dump can be asked there. A
    // connect() to the path is accepted: listener-present, holder unknown.
    require_root!();
    let s = Sandbox::new();
    let sock = s.path("old.sock");
    let id = enroll_listener(&s, &sock);
    let script = "import ctypes,os,socket,sys,time\n\
        libc=ctypes.CDLL(None,use_errno=True)\n\
        host=os.open('/proc/self/ns/net',os.O_RDONLY)\n\
        assert libc.unshare(0x40000000)==0\n\
        s=socket.socket(socket.AF_UNIX);s.bind(sys.argv[1]);s.listen()\n\
        assert libc.setns(host,0x40000000)==0\n\
        print(os.getpid(),flush=True);time.sleep(600)\n";
    let mut c = Command::new("/usr/bin/python3");
    c.args(["-c", script, sock.to_str().unwrap()]);
    let _l = spawn_ready(c);
    let r = s.observe(&id);
    assert_refused(&r, "listener-present");
    assert!(
        observed(&r, "listener").contains("accepts connections (stream), holder unknown"),
        "{}",
        r.stdout
    );
}

pub(crate) fn a_network_namespace_the_observer_cannot_enter_is_still_listener_present() {
    // The socket file at the enrolled path is bound in another network namespace; the
    // observer runs without CAP_SYS_ADMIN (setpriv drops it from the bounding set), so
    // setns() into that namespace is refused. Unknown is never fine: the file is refused
    // (listener-present) and the observation says the search was incomplete, never
    // "nothing bound". (A search failure refuses by itself no more: any user can make one.)
    require_root!();
    let s = Sandbox::new();
    let sock = s.path("old.sock");
    let id = enroll_listener(&s, &sock);
    let ns = Netns::new(&s.tag);
    let _l = spawn_ready(ns.wrap(&helper(&["listen-unix", sock.to_str().unwrap()])));
    let obs = s.observe_cmd(&id, &[]);
    let mut c = Command::new("setpriv");
    c.args(["--bounding-set", "-sys_admin", "--"])
        .arg(obs.get_program())
        .args(obs.get_args());
    for (k, v) in obs.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    let r: Run = c.output().unwrap().into();
    assert_refused(&r, "listener-present");
    let o = observed(&r, "listener");
    assert!(o.contains("not every namespace searched"), "{o}");
}

pub(crate) fn a_datagram_socket_bound_to_the_enrolled_path_is_listener_present() {
    // A bound datagram socket receives whatever is sent to the path: it is a listener.
    require_root!();
    let s = Sandbox::new();
    let sock = s.path("old.sock");
    let id = enroll_listener(&s, &sock);
    let script = "import os,socket,sys,time\n\
        s=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM);s.bind(sys.argv[1])\n\
        print(os.getpid(),flush=True);time.sleep(600)\n";
    let mut c = Command::new("/usr/bin/python3");
    c.args(["-c", script, sock.to_str().unwrap()]);
    let l = spawn_ready(c);
    let r = s.observe(&id);
    assert_refused(&r, "listener-present");
    assert!(
        observed(&r, "listener").contains(&l.pid().to_string()),
        "{}",
        r.stdout
    );
}

pub(crate) fn a_socket_bound_in_a_namespace_no_task_is_in_and_listening_later_is_refused() {
    // The old root binds the enrolled path from a network namespace that no task is left
    // in, and does not listen: no sock_diag search can reach that namespace and connect()
    // is refused, exactly like a stale file. After the grant it would listen. (Before:
    // "nothing bound (a stale socket file)", granted.) The file is refused.
    require_root!();
    let s = Sandbox::new();
    let sock = s.path("old.sock");
    let id = enroll_listener(&s, &sock);
    let script = s.path("orphan.py");
    std::fs::write(&script, ORPHAN_BINDER).unwrap();
    let mut c = std::process::Command::new("/usr/bin/python3");
    c.arg(&script).arg(&sock);
    let _binder = spawn_ready(c);
    let r = s.observe(&id);
    assert_refused(&r, "listener-present");
}

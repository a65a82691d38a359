//! Listener endpoints are held, not looked at (docs/THREAT-MODEL.md, "Who can change a
//! fact"): repochd binds every enrolled TCP and UDP port (every address, both families)
//! and unix path at the first observation and holds them through the dispatch, so no one
//! can take one in the window and burn the epoch; the grant hands them to the new root,
//! which `repoch-consume -- CMD` starts in systemd's socket-activation convention. Real
//! sockets, a real uid 65534, a real new root that answers on each.

use std::io::{BufRead as _, Read as _};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};

use repoch_tests_native::*;

/// Enrolls a TCP port, a UDP port and a unix path (in the sandbox, a directory only root
/// can write).
fn enroll_listeners(s: &Sandbox) -> (String, u16, u16, std::path::PathBuf) {
    let (tcp, udp, unix) = (free_port(false), free_port(true), s.path("control.sock"));
    let id = s.enroll_with(&s.manifest(&format!(
        "[containment]\nlisteners = [\"tcp:*:{tcp}\", \"udp:*:{udp}\", \"unix:{}\"]",
        unix.display()
    )));
    (id, tcp, udp, unix)
}

/// What uid 65534 gets binding the ports on every address of both families.
fn binds_by_nobody(tcp: u16, udp: u16) -> Vec<String> {
    let addrs: Vec<String> = ["0.0.0.0", "127.0.0.1", "[::]", "[::1]"]
        .iter()
        .flat_map(|h| [format!("tcp:{h}:{tcp}"), format!("udp:{h}:{udp}")])
        .collect();
    let mut c = Command::new(bin("repoch-test-helper"));
    c.arg("try-bind").args(&addrs).uid(65534).gid(65534);
    let out = c.output().unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    j["binds"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&addrs)
        .map(|(r, a)| format!("{a} {}", r.as_str().unwrap()))
        .collect()
}

#[test]
#[ignore = "needs root"]
fn another_user_cannot_take_an_enrolled_port_while_a_recovery_holds_it() {
    // repochd stopped right after its first observation, the consumer waiting: uid 65534
    // binds each enrolled port on every address. Each bind fails; the recovery is granted.
    require_root!();
    let s = Sandbox::new();
    let (id, tcp, udp, unix) = enroll_listeners(&s);
    assert!(
        binds_by_nobody(tcp, udp)
            .iter()
            .all(|b| b.ends_with(" bound")),
        "the ports are free before the recovery"
    );
    let d = AtBarrier::start(&s, "after-observe");
    let consumer = s
        .consumer(&id[..6], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rec = recover_bg(&s, &id[..6], 20);
    d.reached();
    let got = binds_by_nobody(tcp, udp);
    assert!(
        got.iter().all(|b| b.ends_with(" address in use")),
        "another user took a held port: {got:?}"
    );
    // Nor can anyone take the unix path: its name exists, a socket repochd listens on.
    assert!(std::os::unix::net::UnixListener::bind(&unix).is_err());
    d.signal(rustix::process::Signal::CONT);
    let r = finish(rec);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.outcome()["outcome"], "granted");
    let c = finish(consumer);
    assert_eq!(c.code, Outcome::Success, "{}", c.stdout);
}

#[test]
#[ignore = "needs root"]
fn a_recovery_that_ends_without_a_grant_frees_every_port_and_leaves_no_socket_file() {
    // No consumer comes: consumer-absent, nothing written. What repochd held is released:
    // the ports can be bound again and its socket file is gone (a stale one would be
    // refused at the next recovery).
    require_root!();
    let s = Sandbox::new();
    let (id, tcp, udp, unix) = enroll_listeners(&s);
    let _d = s.daemon();
    let r = run(s.recover(&id[..6], 1, &[]));
    assert_eq!(r.reasons(), ["consumer-absent"], "{}", r.stdout);
    assert!(!unix.exists(), "the socket file stayed");
    assert!(binds_by_nobody(tcp, udp)
        .iter()
        .all(|b| b.ends_with(" bound")));
    // And so the next recovery takes them again.
    let r = run(s.recover(&id[..6], 1, &[]));
    assert_eq!(r.reasons(), ["consumer-absent"], "{}", r.stdout);
}

/// The new root served what it was handed and exited 0.
fn served(mut new_root: Proc) {
    let st = new_root.child.wait().unwrap();
    assert!(st.success(), "the new root: {st}");
}

/// Recovers `id` with `repoch-consume -- repoch-test-helper serve-activated` as the new
/// root; once granted, the new root's report (its first line: what it was handed) and the
/// consumer (the new root it exec'd), still running, killed on drop (a failing test
/// leaves no new root serving).
fn activated_new_root(s: &Sandbox, id: &str) -> (serde_json::Value, Proc) {
    let report = s.path("activated.json");
    let helper_bin = bin("repoch-test-helper");
    let consumer = s
        .consumer(
            &id[..6],
            "consumer.key",
            "grant.cbor",
            &[
                helper_bin.to_str().unwrap(),
                "serve-activated",
                report.to_str().unwrap(),
            ],
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let consumer = Proc {
        child: consumer,
        line: String::new(),
    };
    let r = run(s.recover(&id[..6], 20, &[]));
    assert_eq!(r.outcome()["outcome"], "granted", "{}", r.stdout);
    // The report's first line, once whole (the file is made, then written).
    let started = std::time::Instant::now();
    let first = loop {
        let text = std::fs::read_to_string(&report).unwrap_or_default();
        if let Some((first, _)) = text.split_once('\n') {
            break first.to_owned();
        }
        assert!(
            started.elapsed().as_secs() < 20,
            "the new root never reported"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let j = serde_json::from_str(&first).unwrap();
    (j, consumer)
}

#[test]
#[ignore = "needs root"]
fn the_new_root_accepts_on_every_handed_over_listener_right_after_the_grant() {
    // `repoch-consume -- repoch-test-helper serve-activated` after the grant: the new root
    // finds the listeners at 3, 4, 5 (LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID its own pid)
    // and answers a TCP connection, a UDP datagram and a unix connection on them.
    require_root!();
    let s = Sandbox::new();
    let (id, tcp, udp, unix) = enroll_listeners(&s);
    let _d = s.daemon();
    let (j, consumer) = activated_new_root(&s, &id);
    let names = [
        format!("tcp-{tcp}"),
        format!("udp-{udp}"),
        "unix-control.sock".to_owned(),
    ];
    assert_eq!(j["names"], serde_json::json!(names), "{j}");
    let line = |r: &mut dyn std::io::Read| {
        let mut l = String::new();
        std::io::BufReader::new(r).read_line(&mut l).unwrap();
        l
    };
    let mut t = std::net::TcpStream::connect(("127.0.0.1", tcp)).unwrap();
    assert_eq!(line(&mut t), format!("{} ok\n", names[0]));
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    u.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    u.send_to(b"hi", ("127.0.0.1", udp)).unwrap();
    let mut buf = [0u8; 64];
    let n = u.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], format!("{} ok\n", names[1]).as_bytes());
    let mut x = std::os::unix::net::UnixStream::connect(&unix).unwrap();
    let mut got = String::new();
    x.read_to_string(&mut got).unwrap();
    assert_eq!(got, format!("{} ok\n", names[2]));
    served(consumer);
}

#[test]
#[ignore = "needs root"]
fn a_port_enrolled_on_loopback_is_handed_over_on_loopback_only() {
    // An old root that served 127.0.0.1:P only: enrolled as tcp:127.0.0.1:P, it is held
    // and handed over bound there, not on every address. After the grant the new root
    // answers on 127.0.0.1:P, and a connection to another address of the host (127.0.0.2,
    // ::1) is refused; the same port enrolled as tcp:*:P answers on each (what every port
    // was before addresses were enrolled: a loopback-only service exposed everywhere).
    require_root!();
    for (written, exposed) in [("127.0.0.1", false), ("*", true)] {
        let s = Sandbox::new();
        let tcp = free_port(false);
        let id = s.enroll_with(&s.manifest(&format!(
            "[containment]\nlisteners = [\"tcp:{written}:{tcp}\"]"
        )));
        let _d = s.daemon();
        let (j, consumer) = activated_new_root(&s, &id);
        assert_eq!(j["names"], serde_json::json!([format!("tcp-{tcp}")]), "{j}");
        // The new root answers one connection per listener, then exits: as `*` it answers
        // one from 127.0.0.2; on loopback only, 127.0.0.2 and ::1 are refused, and it
        // answers 127.0.0.1.
        let line = |mut t: std::net::TcpStream| {
            let mut l = String::new();
            std::io::BufReader::new(&mut t).read_line(&mut l).unwrap();
            l
        };
        if exposed {
            let t = std::net::TcpStream::connect(("127.0.0.2", tcp)).unwrap();
            assert_eq!(line(t), format!("tcp-{tcp} ok\n"));
        } else {
            for other in ["127.0.0.2", "::1"] {
                let got = std::net::TcpStream::connect((other, tcp));
                assert_eq!(
                    got.map(|_| ()).map_err(|e| e.kind()),
                    Err(std::io::ErrorKind::ConnectionRefused),
                    "tcp:{written}:{tcp} from {other}"
                );
            }
            let t = std::net::TcpStream::connect(("127.0.0.1", tcp)).unwrap();
            assert_eq!(line(t), format!("tcp-{tcp} ok\n"));
        }
        served(consumer);
    }
}

#[test]
#[ignore = "needs root"]
fn a_client_of_another_uid_reaches_the_new_root_over_the_handed_over_unix_socket() {
    // The old root's clients (uid 65534 here) connect to its unix socket. The socket file
    // repochd binds and hands over is made with the enrolled mode (systemd's default 0666
    // when the manifest names none and no socket is there at enrollment): the new root
    // answers uid 65534 on it. (Before: repochd's umask made it 0755, or 0700 under the
    // unit's UMask=0077: connect failed with EACCES.) A mode named in the manifest is the
    // file's, and one that shuts others out does so.
    require_root!();
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    for (named, mode, reached) in [("", 0o666, true), ("mode = 0o600", 0o600, false)] {
        let s = Sandbox::new();
        std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let run = s.path("run");
        std::fs::create_dir(&run).unwrap();
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        let sock = run.join("control.sock");
        let files = match named {
            "" => String::new(),
            n => format!("\n[containment.socket_files.\"{}\"]\n{n}\n", sock.display()),
        };
        let id = s.enroll_with(&s.manifest(&format!(
            "[containment]\nlisteners = [\"unix:{}\"]{files}",
            sock.display()
        )));
        let _d = s.daemon();
        let (_j, consumer) = activated_new_root(&s, &id);
        assert_eq!(
            std::fs::symlink_metadata(&sock).unwrap().mode() & 0o7777,
            mode,
            "{named:?}"
        );
        let mut c = Command::new(bin("repoch-test-helper"));
        c.arg("connect-unix").arg(&sock).uid(65534).gid(65534);
        let out = String::from_utf8(c.output().unwrap().stdout).unwrap();
        if reached {
            assert_eq!(out, "unix-control.sock ok\n", "{named:?}");
            served(consumer);
        } else {
            assert!(out.contains("Permission denied"), "{named:?}: {out}");
            // The new root still serves its own uid.
            let mut x = std::os::unix::net::UnixStream::connect(&sock).unwrap();
            let mut got = String::new();
            x.read_to_string(&mut got).unwrap();
            assert_eq!(got, "unix-control.sock ok\n");
            served(consumer);
        }
    }
}

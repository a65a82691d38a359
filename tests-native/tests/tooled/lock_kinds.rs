//! A fence excludes the old root whatever advisory lock it uses (docs/THREAT-MODEL.md,
//! "Who can change a fact"): `flock`, POSIX record locks (`fcntl(F_SETLK)`, `lockf`, what
//! SQLite takes) and OFD locks. Another process's lock of any kind on a fence is
//! `fence-busy` naming it; once repochd holds a fence (flock and an OFD lock on the same
//! open file, which travel together to the new root), no process can take a lock of any
//! exclusive kind on it. Real processes (python3's `fcntl` and `sqlite3` modules, util-linux
//! `flock(1)`), observed through the real `repoch observe` and a real recovery.

use std::process::Command;

use repoch_tests_native::*;

/// A python3 process that runs `body` on the open fence `f` (opened `r+`), prints its pid
/// once it holds its lock, and sleeps.
fn python_holding(fence: &std::path::Path, body: &str) -> Proc {
    let script = format!(
        "import fcntl, os, struct, sys, time, sqlite3\nf = open(sys.argv[1], 'r+')\n{body}\nprint(os.getpid(), flush=True)\ntime.sleep(600)\n"
    );
    let mut c = Command::new("/usr/bin/python3");
    c.args(["-c", &script]).arg(fence);
    spawn_ready(c)
}

/// `struct flock` for an OFD write lock on the whole file (x86_64 and aarch64 layout:
/// type, whence, 4 bytes of padding, start, len, pid, 4 bytes of padding).
const OFD_WRITE_LOCK: &str =
    "fcntl.fcntl(f, 37, struct.pack('hhxxxxqqixxxx', fcntl.F_WRLCK, 0, 0, 0, 0))";

fn assert_busy_naming(s: &Sandbox, id: &str, pid: u32, what: &str) {
    let r = s.observe(id);
    assert_eq!(
        r.code,
        Outcome::Refused,
        "{what}: expected fence-busy: {}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(
        failed(&r),
        vec![("fence".to_owned(), "fence-busy".to_owned())],
        "{what}: {}",
        r.stdout
    );
    assert!(
        observed(&r, "fence").contains(&format!("pid {pid} ")),
        "{what}: the holder named: {}",
        r.stdout
    );
}

pub(crate) fn a_lock_of_every_kind_on_a_fence_is_fence_busy_naming_its_holder() {
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let fence = s.srv.join("lock");
    for (what, body) in [
        ("lockf", "fcntl.lockf(f, fcntl.LOCK_EX)"),
        (
            "a POSIX read lock on one byte",
            "fcntl.lockf(f, fcntl.LOCK_SH, 1, 100)",
        ),
        ("an OFD lock", OFD_WRITE_LOCK),
        (
            "sqlite3 BEGIN EXCLUSIVE",
            "db = sqlite3.connect(sys.argv[1], isolation_level=None)\ndb.execute('BEGIN EXCLUSIVE')",
        ),
    ] {
        let p = python_holding(&fence, body);
        assert_busy_naming(&s, &id, p.pid(), what);
    }
    // flock(1): the lock is flock's, shared by the command it runs.
    let p = spawn_ready({
        let mut c = Command::new("flock");
        c.arg("-x")
            .arg(&fence)
            .args(["sh", "-c", "echo $$; exec sleep 600"]);
        c
    });
    assert_busy_naming(&s, &id, p.pid(), "flock(1)");
    // The lock is also held by the command flock(1) runs: stop both.
    kill_pid(p.pid());
    drop(p);
    let r = s.observe(&id);
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
}

pub(crate) fn no_process_can_take_a_lock_of_any_kind_on_a_fence_repochd_holds() {
    // The old root, as root, tries every lock kind on the fence while a recovery holds it
    // (stopped after the first observation): each attempt is refused at once.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let fence = s.srv.join("lock");
    let d = AtBarrier::start(&s, "after-observe");
    let consumer = s
        .consumer(&id[..6], "consumer.key", "grant.cbor", &[])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let rec = recover_bg(&s, &id[..6], 20);
    d.reached();
    // Each attempt on a file of its own, released after (an attempt that took its lock
    // would otherwise make the next one conflict with this very process).
    let script = r#"
import errno, fcntl, struct, sys, sqlite3
def sq():
    db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0)
    try:
        db.execute('BEGIN EXCLUSIVE')
    finally:
        db.close()
tries = [
    ('lockf', lambda f: fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)),
    ('ofd', lambda f: fcntl.fcntl(f, 37, struct.pack('hhxxxxqqixxxx', fcntl.F_WRLCK, 0, 0, 0, 0))),
    ('flock', lambda f: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)),
    ('sqlite', lambda f: sq()),
]
for name, t in tries:
    with open(sys.argv[1], 'r+') as f:
        try:
            t(f)
            print(name, 'taken')
        except OSError as e:
            print(name, 'refused' if e.errno in (errno.EAGAIN, errno.EACCES) else e)
        except sqlite3.OperationalError as e:
            print(name, 'refused' if 'locked' in str(e) else e)
"#;
    let o = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(&fence)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    d.signal(rustix::process::Signal::CONT);
    let r = finish(rec);
    let c = finish(consumer);
    assert_eq!(
        out,
        "lockf refused\nofd refused\nflock refused\nsqlite refused\n",
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        r.outcome()["outcome"],
        "granted",
        "{}\n{}",
        r.stdout,
        c.stdout
    );
}

pub(crate) fn a_write_lease_on_a_fence_is_fence_busy_naming_its_holder() {
    // A write lease makes repochd's read-only, non-blocking open fail (the holder is asked
    // to give it up): that is a holder busy with the fence, named, not an unreadable fence.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let fence = s.srv.join("lock");
    // SIGIO (the lease break) would end it: it ignores it and keeps the lease.
    let p = python_holding(
        &fence,
        "import signal\nsignal.signal(signal.SIGIO, signal.SIG_IGN)\nfcntl.fcntl(f, fcntl.F_SETLEASE, fcntl.F_WRLCK)",
    );
    assert_busy_naming(&s, &id, p.pid(), "a write lease");
}

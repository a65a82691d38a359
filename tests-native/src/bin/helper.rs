//! `repoch-test-helper`: small real processes the native tests need as OS objects.
//!
//! * `flock PATH` — takes an exclusive flock on PATH, prints its pid, sleeps.
//! * `flock-fork PATH` — takes the flock, hands the locked fd to a child (`sleep`) that
//!   inherits it, prints the child's pid and exits: `/proc/locks` then names a dead pid
//!   and only fdinfo names the real holder.
//! * `try-flock PATH` — one attempt: exit 0 if the lock was free, 4 if it is held.
//! * `sleep` — sleeps until killed.
//! * `steal-fds PID` — copies each of PID's descriptors 0..64 with `pidfd_getfd` and prints
//!   `{"stolen": [what each copy names], "errors": [errno numbers]}`.
//! * `audit-logs DIR N` — writes `DIR/issuer.pub` and N signed epoch logs of granted
//!   recoveries, one deployment each (`repoch_tests_native::audit_logs`; docs/BENCHMARKS.md,
//!   "Audit throughput"); prints how many and how long it took.
//! * `listen-unix PATH`, `listen-tcp PORT`, `listen-udp PORT` — binds, prints its pid, sleeps.
//! * `zombie-leader` — spawns a thread, then the leader thread exits alone.
//! * `reaped PROCS BIN ARGS...` — becomes a child subreaper, starts BIN ARGS in the cgroup
//!   whose `cgroup.procs` is PROCS, and reaps every process orphaned below it; at the end
//!   of its stdin it kills that cgroup, reaps the rest and exits (an orphan that died
//!   under a pid 1 that does not reap would stay a zombie, holding its pid, for good).
//! * `fork-chain` — prints its pid, then forks and exits at once, each child doing the
//!   same: a chain of short-lived processes, one alive at a time, never the same pid for
//!   long (run it under `reaped`).
//! * `sleepers N` — forks N children that sleep, prints its pid once they exist, sleeps
//!   (run it under `reaped`).
//! * `threads` — spawns two threads, prints `PID TID,TID,TID`, sleeps.
//! * `drip-consumer SOCKET PREFIX KEY MILLIS` — speaks the consumer protocol with the
//!   enrolled key, then sends its custody frame one byte every MILLIS ms (a slow peer).
//! * `serve-long-refusal SOCKET` — a fake repochd: reads a hello, answers a refusal
//!   (consumer-rejected) whose detail is longer than receivers accept.
//! * `serve-grant SOCKET ROOT DEPLOYMENT FENCE SENT` — a fake repochd that speaks the whole
//!   consumer protocol (prove, accepted, challenge) and dispatches a grant signed with ROOT's
//!   issuer key naming FENCE, but passes the fd of SENT with it (SENT = FENCE: a faithful
//!   dispatch).
//! * `serve-drip SOCKET` — a fake repochd: reads a hello, declares a 64 KiB frame and sends
//!   one byte a second.
//! * `fork-hello SOCKET PREFIX PUBKEY OUTFILE CONSUMER ARGS...` — connects to SOCKET, starts
//!   `hello-on-fd` holding that connection, then execs CONSUMER ARGS (so the connection's
//!   SO_PEERCRED pid runs the real consumer while another process speaks on it).
//! * `hello-on-fd FD PREFIX PUBKEY OUTFILE PARENT EXE` — once PARENT runs EXE, sends `hello`
//!   with the enrolled PUBLIC key on FD and answers everything with a stranger's key.
//! * `exec-after-hello SOCKET PREFIX KEY` — a consumer with the real key that, once accepted,
//!   execs `/bin/sleep` keeping the connection.
//! * `flood SOCKET IDLE DEAD LIVE` — as an unprivileged user: DEAD processes that send `hello`
//!   with a bogus prefix and exit, LIVE connections with such hellos and IDLE silent ones,
//!   re-opened whenever repochd closes one, until killed.
//! * `hello-exit SOCKET PREFIX` — sends `hello`, waits a moment, exits.
//! * `peek-consumer SOCKET PREFIX KEY REPORT [answer|wrong-key|half-close]` — a consumer
//!   with the enrolled key (run it as the enrolled executable) that answers the challenge
//!   (`answer`), signs it with a stranger's key (`wrong-key`) or shuts its sending side
//!   instead (`half-close`). Then, before reading anything more, it waits until bytes are
//!   queued and peeks them (non-blocking `MSG_PEEK`): the kind of every whole frame queued;
//!   then reads to EOF with `recvmsg`, counting any `SCM_RIGHTS` fds. Writes one JSON line
//!   to REPORT: `{"peeked": [kinds], "frames": [kinds], "reason", "bytes", "fds"}`.
//! * `hello-then-share SOCKET PREFIX KEY OUTFILE` — connects, lets a child (`sleep`) inherit
//!   the connection, then speaks the consumer protocol with the real key, logging each
//!   message to OUTFILE.
//! * `share-on-cue SOCKET PREFIX KEY OUTFILE CUE` — the same, but the child inherits the
//!   connection only once the file CUE exists (polled every 10 ms, at most 10 s).
#![deny(unsafe_code)]

use std::io::Write as _;

use std::os::fd::AsRawFd;
use std::process::Command;

/// Descriptors of another process `steal-fds` tries to copy.
const STEAL_FDS_MAX: i32 = 64;
/// Attempts to take a lock, 10 ms apart.
const LOCK_TRIES_MAX: u32 = 300;
/// Polls (10 ms apart) for a parent to exec the consumer.
const EXEC_WAIT_TRIES_MAX: u32 = 1000;
/// How long the flood's dead peers stay alive after their `hello`.
const DEAD_PEER_MILLISECONDS: u64 = 500;
/// The flood re-opens closed connections this often.
const FLOOD_ROUND_MILLISECONDS: u64 = 50;

/// The peek consumer's longest wait for repochd's answer after the challenge (a barrier
/// test holds repochd stopped meanwhile).
const PEEK_WAIT_SECONDS_MAX: u64 = 60;
/// The most bytes the peek consumer peeks or reads after the challenge.
const PEEK_BYTES_MAX: usize = 1 << 20;

/// A prefix no deployment has (all-zero ids are never minted by enrollment's getrandom in
/// any test's lifetime; the flood only needs "unknown").
const BOGUS_PREFIX: &str = "00000000000000000000000000000000";

fn stranger_key() -> ed25519_dalek::SigningKey {
    let mut b = [0u8; 32];
    rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).unwrap();
    ed25519_dalek::SigningKey::from_bytes(&b)
}

/// The consumer's side up to its `hello`: the secret key read from `keyfile`, a
/// connection to `socket`, `hello` for `prefix` with the key's public half sent.
fn connect_as_consumer(
    socket: &str,
    prefix: &str,
    keyfile: &str,
) -> (std::os::unix::net::UnixStream, ed25519_dalek::SigningKey) {
    let key =
        repoch_protocol::sign::signing_key_from_hex(&std::fs::read_to_string(keyfile).unwrap())
            .unwrap();
    let mut s = std::os::unix::net::UnixStream::connect(socket).expect("connect");
    hello(
        &mut s,
        prefix,
        repoch_protocol::PublicKey::from(&key.verifying_key()),
    )
    .unwrap();
    (s, key)
}

fn hello(
    s: &mut std::os::unix::net::UnixStream,
    prefix: &str,
    key: repoch_protocol::PublicKey,
) -> std::io::Result<()> {
    repoch_protocol::wire::write_msg(
        s,
        &repoch_protocol::wire::GrantMsg::Hello {
            deployment: prefix.to_owned(),
            key,
        },
    )
}

fn append(path: &str, line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    writeln!(f, "{line}").unwrap();
}

/// Whether the daemon closed `s` (EOF or an error on a non-blocking peek).
fn closed(s: &std::os::unix::net::UnixStream) -> bool {
    let mut b = [0u8; 1];
    match rustix::net::recv(
        s,
        &mut b,
        rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
    ) {
        Ok((0, _)) => true,
        Ok(_) => false,
        Err(e) => e != rustix::io::Errno::AGAIN,
    }
}

fn lock(path: &str, cloexec: bool) -> std::os::fd::OwnedFd {
    let mut flags = rustix::fs::OFlags::RDWR;
    if cloexec {
        flags |= rustix::fs::OFlags::CLOEXEC;
    }
    let fd = rustix::fs::open(path, flags, rustix::fs::Mode::empty()).expect("open");
    // A lock the test process just released can stay held for a moment by a child another
    // test thread forked before its exec closed the inherited fd: retry, bounded.
    for _ in 0..LOCK_TRIES_MAX {
        if rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok() {
            return fd;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    eprintln!("repoch-test-helper: {path} stayed locked");
    std::process::exit(4);
}

/// The kind of every whole frame at the start of `b`: `refused`, `grant`, ... (a partial
/// frame at the end is left out).
fn frame_kinds(b: &[u8]) -> Vec<String> {
    use repoch_protocol::cbor::Canonical as _;
    use repoch_protocol::wire::GrantMsg;
    let mut out = Vec::new();
    let mut at = 0;
    while b.len() >= at + 4 {
        let len = u32::from_be_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        let Some(body) = b.get(at + 4..at + 4 + len) else {
            break;
        };
        out.push(match GrantMsg::from_bytes(body) {
            Ok(GrantMsg::Refused { .. }) => "refused".to_owned(),
            Ok(GrantMsg::Grant { .. }) => "grant".to_owned(),
            Ok(m) => format!("{m:?}")
                .split([' ', '(', '{'])
                .next()
                .unwrap()
                .to_owned(),
            Err(e) => format!("undecodable: {e}"),
        });
        at += 4 + len;
    }
    out
}

/// After the challenge: peek what is queued (every whole frame), then read to EOF with
/// recvmsg, counting fds passed. Returns the report line.
fn peek_then_drain(s: &std::os::unix::net::UnixStream) -> serde_json::Value {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let start = std::time::Instant::now();
    let mut buf = vec![0u8; PEEK_BYTES_MAX];
    // Wait until something is queued, then until the first frame is whole (or EOF).
    let peeked = loop {
        assert!(
            start.elapsed().as_secs() < PEEK_WAIT_SECONDS_MAX,
            "nothing from repochd within {PEEK_WAIT_SECONDS_MAX}s"
        );
        match rustix::net::recv(s, &mut buf, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
            Ok((0, _)) => break Vec::new(),
            Ok((n, _)) => {
                let kinds = frame_kinds(&buf[..n]);
                if !kinds.is_empty() {
                    break kinds;
                }
            }
            Err(e) if e == rustix::io::Errno::AGAIN => {}
            Err(e) => panic!("peek: {e}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    // Now read everything, to EOF, through recvmsg: any fd passed is seen here.
    s.set_read_timeout(Some(std::time::Duration::from_secs(PEEK_WAIT_SECONDS_MAX)))
        .unwrap();
    let mut got = Vec::new();
    let mut fds = 0usize;
    loop {
        let mut space = vec![
            std::mem::MaybeUninit::uninit();
            rustix::cmsg_space!(ScmRights(repoch_protocol::limits::FENCES_MAX))
        ];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        let r = rustix::net::recvmsg(
            s,
            &mut [std::io::IoSliceMut::new(&mut buf)],
            &mut anc,
            RecvFlags::CMSG_CLOEXEC,
        );
        for m in anc.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = m {
                fds += rights.count();
            }
        }
        match r {
            Ok(r) if r.bytes == 0 => break,
            Ok(r) => got.extend_from_slice(&buf[..r.bytes]),
            Err(e) if e == rustix::io::Errno::CONNRESET => break,
            Err(e) => panic!("recvmsg: {e}"),
        }
        assert!(
            got.len() <= PEEK_BYTES_MAX,
            "more than {PEEK_BYTES_MAX} bytes"
        );
    }
    let reason = match got.get(4..).map(|b| {
        <repoch_protocol::wire::GrantMsg as repoch_protocol::cbor::Canonical>::from_bytes(b)
    }) {
        Some(Ok(repoch_protocol::wire::GrantMsg::Refused { reason, .. })) => {
            reason.as_str().to_owned()
        }
        _ => String::new(),
    };
    serde_json::json!({"peeked": peeked, "frames": frame_kinds(&got), "reason": reason,
        "bytes": got.len(), "fds": fds})
}

fn ready() {
    println!("{}", std::process::id());
    std::io::stdout().flush().unwrap();
}

fn sleep_forever() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

/// Whether a wait status is a normal exit (`WIFEXITED`).
fn libc_exited(status: i32) -> bool {
    status & 0x7f == 0
}

/// Lets a child (`sleep`) hold the connection `s` (as its stdin) from now on, and logs its
/// pid to `out` (`sharing with pid N`).
fn share_connection(s: &std::os::unix::net::UnixStream, out: &str) {
    #[allow(clippy::zombie_processes)]
    let child = Command::new(std::env::current_exe().unwrap())
        .arg("sleep")
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            s.try_clone().unwrap(),
        )))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    append(out, &format!("sharing with pid {}", child.id()));
    std::mem::forget(child);
}

/// The consumer protocol after `hello` with `key`, each message logged to `out`: proves
/// the key, answers the challenge, logs a grant (`grant`) without acknowledging it, and
/// sleeps once refused or cut off.
fn speak_and_log(
    s: &mut std::os::unix::net::UnixStream,
    key: &ed25519_dalek::SigningKey,
    out: &str,
) -> ! {
    use repoch_protocol::wire::{read_msg, write_msg, GrantMsg};
    loop {
        match read_msg::<GrantMsg>(s) {
            Ok(GrantMsg::Prove(p)) => {
                append(out, "asked for a key proof");
                write_msg(s, &GrantMsg::Proof(p.answer(key))).unwrap();
            }
            Ok(GrantMsg::Challenge(c)) => {
                append(out, "challenged");
                write_msg(s, &GrantMsg::Custody(c.answer(key))).unwrap();
            }
            Ok(GrantMsg::Refused { reason, detail }) => {
                append(out, &format!("refused {reason}: {detail}"));
                sleep_forever();
            }
            Ok(GrantMsg::Grant { .. }) => append(out, "grant"),
            Ok(m) => append(out, &format!("{m:?}")),
            Err(e) => {
                append(out, &format!("error {e}"));
                sleep_forever();
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("flock") => {
            let _fd = lock(&args[2], true);
            println!("{}", std::process::id());
            std::io::stdout().flush().unwrap();
            sleep_forever();
        }
        Some("try-flock") => {
            // One attempt: exit 0 if the lock was free (then released), 4 if held. Read-only:
            // flock needs no write access (and the fence may be on a read-only mount).
            let fd = rustix::fs::open(
                args[2].as_str(),
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .expect("open");
            let free = rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive)
                .is_ok();
            std::process::exit(if free { 0 } else { 4 });
        }
        Some("flock-fork") => {
            let fd = lock(&args[2], false);
            #[allow(clippy::zombie_processes)]
            let child = Command::new(std::env::current_exe().unwrap())
                .arg("sleep")
                .arg(fd.as_raw_fd().to_string())
                .spawn()
                .expect("spawn");
            println!("{}", child.id());
            std::io::stdout().flush().unwrap();
            // Exit without waiting: the child is reparented and keeps the lock.
            std::mem::forget(child);
        }
        Some("sleep") => sleep_forever(),
        Some("peak") => {
            // `peak FILE PROGRAM ARGS…`: runs PROGRAM with this process's stdio and writes its
            // peak resident set (KiB) to FILE. A child's `ru_maxrss` counts the memory of the
            // process it was forked from (exec records the old address space's peak), so the
            // program is forked from this small process, never from a test's large one.
            #[allow(clippy::zombie_processes, reason = "waited for by wait4")]
            let child = Command::new(&args[3])
                .args(&args[4..])
                .spawn()
                .expect("spawn");
            let (status, peak) = repoch_tests_native::sys::wait_with_peak(child.id());
            std::fs::write(&args[2], peak.to_string()).expect("write the peak");
            let code = if libc_exited(status) {
                (status >> 8) & 0xff
            } else {
                128 + (status & 0x7f)
            };
            std::process::exit(code);
        }
        Some("steal-fds") => {
            // Takes a copy of each descriptor 0..STEAL_FDS_MAX of PID with pidfd_getfd (the
            // kernel allows it to a process of the same uid when PID is dumpable). Prints
            // one JSON line: what each copy names, and the errors met.
            let pid: i32 = args[2].parse().expect("PID");
            let pidfd = rustix::process::pidfd_open(
                rustix::process::Pid::from_raw(pid).expect("a pid"),
                rustix::process::PidfdFlags::empty(),
            )
            .expect("pidfd_open");
            let (mut stolen, mut errors) = (Vec::new(), std::collections::BTreeSet::new());
            for n in 0..STEAL_FDS_MAX {
                match rustix::process::pidfd_getfd(
                    &pidfd,
                    n,
                    rustix::process::PidfdGetfdFlags::empty(),
                ) {
                    Ok(fd) => stolen.push(
                        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
                            .unwrap()
                            .display()
                            .to_string(),
                    ),
                    Err(e) if e == rustix::io::Errno::BADF => {}
                    Err(e) => {
                        errors.insert(e.raw_os_error());
                    }
                }
            }
            println!(
                "{}",
                serde_json::json!({ "stolen": stolen, "errors": errors })
            );
        }
        Some("audit-logs") => {
            let n: u64 = args[3].parse().expect("N: a count of logs");
            let start = std::time::Instant::now();
            let paths = repoch_tests_native::audit_logs::write(std::path::Path::new(&args[2]), n)
                .unwrap_or_else(|e| panic!("{}: {e}", args[2]));
            println!("{} logs in {:.1?}", paths.len(), start.elapsed());
        }
        Some("hold-fences") => {
            // Exec'd by repoch-consume: report the inherited fence fds, then hold them.
            let fds = std::env::var("REPOCH_FENCE_FDS").unwrap_or_default();
            let mut out = format!("{}", std::process::id());
            for n in fds.split(',').filter(|s| !s.is_empty()) {
                let st =
                    rustix::fs::stat(format!("/proc/self/fd/{n}")).expect("inherited fence fd");
                out.push_str(&format!(" {n}:{}:{}", st.st_dev, st.st_ino));
            }
            std::fs::write(&args[2], out + "\n").unwrap();
            sleep_forever();
        }
        Some("rogue-consumer") => {
            // Speaks the consumer protocol correctly, then shuts its receiving side right
            // after answering the challenge: the grant's dispatch fails (a lost reply). With a
            // fifth argument `exit` it exits instead; with `wrong-ack` it reads the grant and
            // acknowledges it `persisted` naming another sha256, then lives on; with
            // `child-ack LOG` it reads the grant and exits, and a child it forked
            // acknowledges it.
            use repoch_protocol::wire::{read_msg, write_msg, GrantMsg};
            let (mut s, key) = connect_as_consumer(&args[2], &args[3], &args[4]);
            ready();
            loop {
                match read_msg::<GrantMsg>(&mut s) {
                    Ok(GrantMsg::Prove(p)) => {
                        write_msg(&mut s, &GrantMsg::Proof(p.answer(&key))).unwrap();
                    }
                    Ok(GrantMsg::Challenge(c)) => {
                        // Answer, then stop receiving but keep the connection and live on:
                        // the peer is still the one described and its sole holder, and the
                        // dispatch's send fails (EPIPE).
                        write_msg(&mut s, &GrantMsg::Custody(c.answer(&key))).unwrap();
                        if args.get(5).map(String::as_str) == Some("exit") {
                            std::process::exit(0);
                        }
                        if args.get(5).map(String::as_str) == Some("child-ack") {
                            // Reads the grant, forks, and exits: its child, holding the
                            // connection (and the key), acknowledges once the parent is gone,
                            // then logs (to args[6]) what repochd answers.
                            let Ok(GrantMsg::Grant { grant: g, .. }) = read_msg::<GrantMsg>(&mut s)
                            else {
                                std::process::exit(1)
                            };
                            let parent = std::process::id();
                            if !repoch_tests_native::sys::fork_is_child() {
                                repoch_tests_native::sys::exit_now();
                            }
                            // Reparented once the parent exited (its zombie may linger).
                            while nix::unistd::getppid().as_raw() as u32 == parent {
                                std::thread::sleep(std::time::Duration::from_millis(5));
                            }
                            let log = &args[6];
                            append(log, &format!("child {} acknowledging", std::process::id()));
                            let ack = GrantMsg::Persisted {
                                grant_sha256: repoch_protocol::Hash::of(&g),
                            };
                            if let Err(e) = write_msg(&mut s, &ack) {
                                append(log, &format!("ack failed: {e}"));
                                sleep_forever();
                            }
                            match read_msg::<GrantMsg>(&mut s) {
                                Ok(m) => append(log, &format!("answer {m:?}")),
                                Err(e) => append(log, &format!("answer error {e}")),
                            }
                            sleep_forever();
                        }
                        if args.get(5).map(String::as_str) == Some("wrong-ack") {
                            let Ok(GrantMsg::Grant { grant: g, .. }) = read_msg::<GrantMsg>(&mut s)
                            else {
                                std::process::exit(1)
                            };
                            let mut other = repoch_protocol::Hash::of(&g);
                            other.0[0] ^= 1;
                            write_msg(
                                &mut s,
                                &GrantMsg::Persisted {
                                    grant_sha256: other,
                                },
                            )
                            .unwrap();
                            sleep_forever();
                        }
                        s.shutdown(std::net::Shutdown::Read).unwrap();
                        sleep_forever();
                    }
                    Ok(_) => continue,
                    Err(e) => {
                        eprintln!("rogue-consumer: {e}");
                        std::process::exit(1);
                    }
                }
            }
        }
        Some("peek-consumer") => {
            use repoch_protocol::wire::{read_msg, write_msg, GrantMsg};
            let report = &args[5];
            let mode = args.get(6).map_or("answer", String::as_str);
            let (mut s, key) = connect_as_consumer(&args[2], &args[3], &args[4]);
            ready();
            // Until the challenge, read_msg (exact frames: nothing after it is consumed).
            loop {
                match read_msg::<GrantMsg>(&mut s) {
                    Ok(GrantMsg::Prove(p)) => {
                        write_msg(&mut s, &GrantMsg::Proof(p.answer(&key))).unwrap();
                    }
                    Ok(GrantMsg::Challenge(c)) => {
                        match mode {
                            "answer" => write_msg(&mut s, &GrantMsg::Custody(c.answer(&key))),
                            "wrong-key" => {
                                write_msg(&mut s, &GrantMsg::Custody(c.answer(&stranger_key())))
                            }
                            "half-close" => s.shutdown(std::net::Shutdown::Write),
                            m => panic!("peek-consumer: unknown mode {m}"),
                        }
                        .unwrap();
                        break;
                    }
                    Ok(GrantMsg::Accepted) => {}
                    Ok(m) => {
                        append(
                            report,
                            &serde_json::json!({"before-challenge": format!("{m:?}")}).to_string(),
                        );
                        std::process::exit(1);
                    }
                    Err(e) => {
                        append(
                            report,
                            &serde_json::json!({"before-challenge": e.to_string()}).to_string(),
                        );
                        std::process::exit(1);
                    }
                }
            }
            append(report, &peek_then_drain(&s).to_string());
        }
        Some("drip-consumer") => {
            // A correct consumer that drip-feeds its custody answer: each byte arrives well
            // within any per-read timeout, the whole frame takes far longer than any deadline.
            use repoch_protocol::cbor::Canonical as _;
            use repoch_protocol::wire::{frame, read_msg, write_msg, GrantMsg};
            let every = std::time::Duration::from_millis(args[5].parse().unwrap());
            let (mut s, key) = connect_as_consumer(&args[2], &args[3], &args[4]);
            ready();
            loop {
                match read_msg::<GrantMsg>(&mut s) {
                    Ok(GrantMsg::Prove(p)) => {
                        write_msg(&mut s, &GrantMsg::Proof(p.answer(&key))).unwrap();
                    }
                    Ok(GrantMsg::Challenge(c)) => {
                        let bytes = frame(&GrantMsg::Custody(c.answer(&key)).to_bytes());
                        for b in bytes {
                            if s.write_all(&[b]).is_err() {
                                std::process::exit(3);
                            }
                            std::thread::sleep(every);
                        }
                    }
                    Ok(_) => continue,
                    Err(e) => {
                        eprintln!("drip-consumer: {e}");
                        std::process::exit(1);
                    }
                }
            }
        }
        Some("fork-hello") => {
            // The connection's SO_PEERCRED pid will run the real consumer executable; the
            // process that speaks on it is a child with only the public key.
            let s = std::os::unix::net::UnixStream::connect(&args[2]).expect("connect");
            // The child gets the connection as its stdin; ours is close-on-exec, so the
            // child is the connection's only holder once we exec.
            #[allow(clippy::zombie_processes)]
            let child = Command::new(std::env::current_exe().unwrap())
                .args(["hello-on-fd", "0", &args[3], &args[4], &args[5]])
                .arg(std::process::id().to_string())
                .arg(&args[6])
                .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(s)))
                .spawn()
                .expect("spawn");
            std::mem::forget(child);
            use std::os::unix::process::CommandExt as _;
            let err = Command::new(&args[6]).args(&args[7..]).exec();
            panic!("exec: {err}");
        }
        Some("hello-on-fd") => {
            use repoch_protocol::wire::{read_msg, write_msg, GrantMsg};
            // FD is 0: fork-hello passes the connection as our stdin.
            assert_eq!(args[2], "0");
            let out = args[5].clone();
            let (parent, exe) = (&args[6], &args[7]);
            let fd = std::os::fd::AsFd::as_fd(&std::io::stdin())
                .try_clone_to_owned()
                .unwrap();
            let mut s = std::os::unix::net::UnixStream::from(fd);
            let mut tries = 0;
            while std::fs::read_link(format!("/proc/{parent}/exe"))
                .ok()
                .as_deref()
                != Some(std::path::Path::new(exe))
            {
                tries += 1;
                assert!(tries < EXEC_WAIT_TRIES_MAX, "the parent never exec'd {exe}");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let public = repoch_protocol::PublicKey::from_hex(
                std::fs::read_to_string(&args[4]).unwrap().trim(),
            )
            .unwrap();
            hello(&mut s, &args[3], public).unwrap();
            append(&out, "hello sent");
            let stranger = stranger_key();
            loop {
                match read_msg::<GrantMsg>(&mut s) {
                    Ok(GrantMsg::Refused { reason, detail }) => {
                        append(&out, &format!("refused {reason}: {detail}"));
                        std::process::exit(2);
                    }
                    Ok(GrantMsg::Prove(p)) => {
                        // It has only the public key: all it can do is sign with another.
                        append(&out, "asked for a key proof");
                        let _ = write_msg(&mut s, &GrantMsg::Proof(p.answer(&stranger)));
                    }
                    Ok(GrantMsg::Challenge(c)) => {
                        append(&out, "challenged");
                        let _ = write_msg(&mut s, &GrantMsg::Custody(c.answer(&stranger)));
                    }
                    Ok(GrantMsg::Grant { .. }) => {
                        append(&out, "granted");
                        std::process::exit(0);
                    }
                    Ok(m) => append(&out, &format!("{m:?}")),
                    Err(e) => {
                        append(&out, &format!("error {e}"));
                        std::process::exit(1);
                    }
                }
            }
        }
        Some("serve-long-refusal") => {
            use repoch_protocol::cbor::Canonical as _;
            use repoch_protocol::wire::{frame, read_frame, GrantMsg};
            let _ = std::fs::remove_file(&args[2]);
            let l = std::os::unix::net::UnixListener::bind(&args[2]).expect("bind");
            ready();
            let (mut c, _) = l.accept().unwrap();
            let _ = read_frame(&mut c);
            let m = GrantMsg::Refused {
                reason: repoch_protocol::Reason::ConsumerRejected,
                detail: format!("cgroup /{}", "x/".repeat(1000)),
            };
            c.write_all(&frame(&m.to_bytes())).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        Some("serve-grant") => {
            use repoch_protocol::cbor::Canonical as _;
            use repoch_protocol::grant::{Challenge, Grant, GrantFence, KeyProof, SignedGrant};
            use repoch_protocol::wire::{frame, read_msg, write_msg, GrantMsg};
            use repoch_protocol::{DeploymentId, Hash};
            let layout = repoch_issuer::Layout::new(Some(std::path::Path::new(&args[3])));
            let issuer = repoch_issuer::enroll::issuer_key(&layout, false).expect("issuer key");
            let deployment = DeploymentId::from_hex(&args[4]).expect("deployment id");
            let fence = std::fs::File::open(&args[5]).expect("fence");
            let sent = std::fs::File::open(&args[6]).expect("sent");
            let _ = std::fs::remove_file(&args[2]);
            let l = std::os::unix::net::UnixListener::bind(&args[2]).expect("bind");
            ready();
            let (mut c, _) = l.accept().unwrap();
            let Ok(GrantMsg::Hello { key, .. }) = read_msg::<GrantMsg>(&mut c) else {
                std::process::exit(1)
            };
            let proof = KeyProof {
                deployment,
                nonce: [7; 32],
                pid: 1,
                start_ticks: 1,
            };
            write_msg(&mut c, &GrantMsg::Prove(proof)).unwrap();
            let _ = read_msg::<GrantMsg>(&mut c);
            write_msg(&mut c, &GrantMsg::Accepted).unwrap();
            let challenge = Challenge {
                deployment,
                intent: Hash([1; 32]),
                nonce: [2; 32],
            };
            write_msg(&mut c, &GrantMsg::Challenge(challenge)).unwrap();
            let _ = read_msg::<GrantMsg>(&mut c);
            let mut fence_identity = repoch_sys::fs::fstat_identity(&fence).unwrap();
            // args[7] "fence-born-another-time": the grant names the fence's device and inode
            // with another birth time, as a fence deleted and recreated on the same inode
            // number would show.
            if args.get(7).map(String::as_str) == Some("fence-born-another-time") {
                let b = fence_identity.birth.as_mut().expect("a birth time");
                b.sec = b.sec.saturating_sub(1);
            }
            let grant = Grant {
                deployment,
                intent: Hash([1; 32]),
                consume: Hash([3; 32]),
                evidence: Hash([4; 32]),
                consumer_key: key,
                ready_path: "/READY".into(),
                ready_sha256: Hash([5; 32]),
                fences: vec![GrantFence {
                    path: args[5].clone(),
                    identity: fence_identity,
                }],
                frontier_seq: 0,
                frontier_hash: Hash([6; 32]),
                unknown_ops: vec![],
                issued_at: 0,
                listeners: vec![],
                fencing: None,
            };
            let bytes = SignedGrant::sign(grant, &issuer).to_bytes();
            // args[7], optional: a checkpoint the consumer must refuse.
            let mut cp = repoch_protocol::checkpoint::Checkpoint {
                origin: repoch_protocol::checkpoint::origin(&deployment),
                size: 4,
                head: Hash([7; 32]),
            };
            let mut signer = issuer.clone();
            match args.get(7).map(String::as_str) {
                None | Some("fence-born-another-time") => {}
                Some("checkpoint-by-another-key") => {
                    signer = ed25519_dalek::SigningKey::from_bytes(&[0x42; 32]);
                }
                Some("checkpoint-of-another-log") => {
                    cp.origin = repoch_protocol::checkpoint::origin(&DeploymentId([0x42; 16]));
                }
                Some("checkpoint-before-the-receipt") => cp.size = 3,
                Some(other) => panic!("serve-grant: unknown variant {other}"),
            }
            let checkpoint = cp.sign(repoch_protocol::checkpoint::KEY_NAME, &signer);
            let payload = frame(
                &GrantMsg::Grant {
                    grant: bytes,
                    checkpoint,
                }
                .to_bytes(),
            );
            use std::os::fd::AsFd as _;
            let fds = [sent.as_fd()];
            let mut space =
                vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut anc = rustix::net::SendAncillaryBuffer::new(&mut space);
            assert!(anc.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
            let n = rustix::net::sendmsg(
                &c,
                &[std::io::IoSlice::new(&payload)],
                &mut anc,
                rustix::net::SendFlags::NOSIGNAL,
            )
            .unwrap();
            c.write_all(&payload[n..]).unwrap();
            // Stay until the consumer has judged the grant; an acknowledgement gets the
            // last word, as from repochd.
            if let Ok(GrantMsg::Persisted { grant_sha256 }) = read_msg::<GrantMsg>(&mut c) {
                let _ = write_msg(&mut c, &GrantMsg::Granted { grant_sha256 });
            }
        }
        Some("serve-drip") => {
            let _ = std::fs::remove_file(&args[2]);
            let l = std::os::unix::net::UnixListener::bind(&args[2]).expect("bind");
            ready();
            let (mut c, _) = l.accept().unwrap();
            let _ = repoch_protocol::wire::read_frame(&mut c);
            if c.write_all(&(64u32 * 1024).to_be_bytes()).is_err() {
                return;
            }
            loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                if c.write_all(&[0]).is_err() {
                    return;
                }
            }
        }
        Some("exec-after-hello") => {
            use repoch_protocol::wire::{read_msg, write_msg, GrantMsg};
            let (mut s, key) = connect_as_consumer(&args[2], &args[3], &args[4]);
            ready();
            loop {
                match read_msg::<GrantMsg>(&mut s) {
                    Ok(GrantMsg::Accepted) => break,
                    Ok(GrantMsg::Prove(p)) => {
                        write_msg(&mut s, &GrantMsg::Proof(p.answer(&key))).unwrap();
                    }
                    Ok(m) => eprintln!("exec-after-hello: {m:?}"),
                    Err(e) => {
                        eprintln!("exec-after-hello: {e}");
                        std::process::exit(1);
                    }
                }
            }
            // Keep the connection across the exec: now another binary holds it.
            rustix::io::fcntl_setfd(&s, rustix::io::FdFlags::empty()).unwrap();
            use std::os::unix::process::CommandExt as _;
            let err = Command::new("/bin/sleep").arg("3600").exec();
            panic!("exec: {err}");
        }
        Some("hello-then-share") => {
            let key = repoch_protocol::sign::signing_key_from_hex(
                &std::fs::read_to_string(&args[4]).unwrap(),
            )
            .unwrap();
            let out = &args[5];
            let mut s = std::os::unix::net::UnixStream::connect(&args[2]).expect("connect");
            // Another process holds the same connection (as its stdin) from now on.
            share_connection(&s, out);
            hello(
                &mut s,
                &args[3],
                repoch_protocol::PublicKey::from(&key.verifying_key()),
            )
            .unwrap();
            ready();
            speak_and_log(&mut s, &key, out)
        }
        Some("share-on-cue") => {
            let key = repoch_protocol::sign::signing_key_from_hex(
                &std::fs::read_to_string(&args[4]).unwrap(),
            )
            .unwrap();
            let (out, cue) = (args[5].clone(), std::path::PathBuf::from(&args[6]));
            let mut s = std::os::unix::net::UnixStream::connect(&args[2]).expect("connect");
            hello(
                &mut s,
                &args[3],
                repoch_protocol::PublicKey::from(&key.verifying_key()),
            )
            .unwrap();
            let shared = s.try_clone().unwrap();
            let log = out.clone();
            std::thread::spawn(move || {
                for _ in 0..EXEC_WAIT_TRIES_MAX {
                    if cue.exists() {
                        return share_connection(&shared, &log);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            });
            ready();
            speak_and_log(&mut s, &key, &out)
        }
        Some("drip-proof") => {
            // drip-proof SOCKET PREFIX KEYFILE MILLIS: hello, then the key proof's frame one
            // byte every MILLIS ms; prints what repochd answers next (or the error).
            use repoch_protocol::cbor::Canonical as _;
            use repoch_protocol::wire::{frame, read_msg, GrantMsg};
            let pause = std::time::Duration::from_millis(args[5].parse().unwrap());
            let (mut s, key) = connect_as_consumer(&args[2], &args[3], &args[4]);
            ready();
            let Ok(GrantMsg::Prove(p)) = read_msg::<GrantMsg>(&mut s) else {
                println!("no prove");
                return;
            };
            for b in frame(&GrantMsg::Proof(p.answer(&key)).to_bytes()) {
                std::thread::sleep(pause);
                if s.write_all(&[b]).is_err() {
                    println!("closed while dripping");
                    return;
                }
            }
            match read_msg::<GrantMsg>(&mut s) {
                Ok(m) => println!("answer {m:?}"),
                Err(e) => println!("error {e}"),
            }
        }
        Some("hello-exit") => {
            let mut s = std::os::unix::net::UnixStream::connect(&args[2]).expect("connect");
            let _ = hello(
                &mut s,
                &args[3],
                repoch_protocol::PublicKey::from(&stranger_key().verifying_key()),
            );
            std::thread::sleep(std::time::Duration::from_millis(DEAD_PEER_MILLISECONDS));
        }
        Some("flood") => {
            use std::os::unix::net::UnixStream;
            let sock = &args[2];
            let n = |i: usize| args[i].parse::<usize>().unwrap();
            let (idle, dead, live) = (n(3), n(4), n(5));
            let key = repoch_protocol::PublicKey::from(&stranger_key().verifying_key());
            let me = std::env::current_exe().unwrap();
            let dead: Vec<_> = (0..dead)
                .filter_map(|_| {
                    Command::new(&me)
                        .args(["hello-exit", sock, BOGUS_PREFIX])
                        .spawn()
                        .ok()
                })
                .collect();
            for mut d in dead {
                let _ = d.wait();
            }
            let open = |with_hello: bool| -> Option<UnixStream> {
                let mut s = UnixStream::connect(sock).ok()?;
                if with_hello {
                    hello(&mut s, BOGUS_PREFIX, key).ok()?;
                }
                Some(s)
            };
            let mut idles: Vec<Option<UnixStream>> = (0..idle).map(|_| open(false)).collect();
            let mut lives: Vec<Option<UnixStream>> = (0..live).map(|_| open(true)).collect();
            ready();
            loop {
                for (conns, with_hello) in [(&mut idles, false), (&mut lives, true)] {
                    for c in conns.iter_mut() {
                        if c.as_ref().is_none_or(closed) {
                            *c = open(with_hello);
                        }
                    }
                }
                // And peers that hang up right after their hello.
                for _ in 0..4 {
                    drop(open(true));
                }
                std::thread::sleep(std::time::Duration::from_millis(FLOOD_ROUND_MILLISECONDS));
            }
        }
        Some("serve-garbage") => {
            // A fake repochd that answers any request with a well-framed, malformed message.
            let _ = std::fs::remove_file(&args[2]);
            let l = std::os::unix::net::UnixListener::bind(&args[2]).expect("bind");
            ready();
            let (mut c, _) = l.accept().unwrap();
            let _ = repoch_protocol::wire::read_frame(&mut c);
            c.write_all(&repoch_protocol::wire::frame(&[0xa1, 0x01, 0x02]))
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        Some("connect-unix") => {
            // Connects to the unix socket at PATH and prints its first line, or the error
            // (connect-unix PATH): a client of whatever uid this runs as.
            use std::io::BufRead as _;
            match std::os::unix::net::UnixStream::connect(&args[2]) {
                Ok(c) => {
                    let mut l = String::new();
                    std::io::BufReader::new(c).read_line(&mut l).expect("read");
                    print!("{l}");
                }
                Err(e) => println!("error: {e}"),
            }
        }
        Some("listen-unix") => {
            let _l = std::os::unix::net::UnixListener::bind(&args[2]).expect("bind");
            ready();
            sleep_forever();
        }
        Some("listen-tcp") => {
            let _l = std::net::TcpListener::bind(("127.0.0.1", args[2].parse::<u16>().unwrap()))
                .expect("bind");
            ready();
            sleep_forever();
        }
        Some("listen-udp") => {
            let _s = std::net::UdpSocket::bind(("127.0.0.1", args[2].parse::<u16>().unwrap()))
                .expect("bind");
            ready();
            sleep_forever();
        }
        Some("try-bind") => {
            // Binds each ADDR (tcp:HOST:PORT or udp:HOST:PORT) and reports what each got,
            // as JSON: what another user can or cannot take. With --hold first, keeps
            // what it bound (a TCP one listening) until killed.
            let hold = args.get(2).is_some_and(|a| a == "--hold");
            let mut kept: Vec<Box<dyn std::any::Any>> = Vec::new();
            let got: Vec<String> = args[if hold { 3 } else { 2 }..]
                .iter()
                .map(|a| {
                    let (proto, addr) = a.split_once(':').unwrap();
                    // Without --hold each socket is closed at once: the next address is
                    // tried on its own, not against this process's previous bind.
                    let mut keep = |s: Box<dyn std::any::Any>| {
                        if hold {
                            kept.push(s);
                        }
                    };
                    let r = match proto {
                        "tcp" => std::net::TcpListener::bind(addr).map(|s| keep(Box::new(s))),
                        _ => std::net::UdpSocket::bind(addr).map(|s| keep(Box::new(s))),
                    };
                    match r {
                        Ok(()) => "bound".to_owned(),
                        Err(e) => e.kind().to_string(),
                    }
                })
                .collect();
            println!("{}", serde_json::json!({ "binds": got }));
            std::io::stdout().flush().unwrap();
            if hold {
                sleep_forever();
            }
            drop(kept);
        }
        Some("serve-activated") => {
            // A new root started by `repoch-consume -- CMD`: takes the descriptors of
            // systemd's socket-activation convention and answers once on each with its
            // name (a TCP or unix connection accepted, a UDP datagram replied to).
            use std::io::Write as _;
            let n: i32 = std::env::var("LISTEN_FDS").unwrap().parse().unwrap();
            let pid: u32 = std::env::var("LISTEN_PID").unwrap().parse().unwrap();
            assert_eq!(pid, std::process::id(), "LISTEN_PID is not this process");
            let names: Vec<String> = std::env::var("LISTEN_FDNAMES")
                .unwrap()
                .split(':')
                .map(str::to_owned)
                .collect();
            assert_eq!(names.len(), n as usize);
            let mut report = std::fs::File::create(&args[2]).unwrap();
            writeln!(
                report,
                "{}",
                serde_json::json!({ "names": names, "pid": pid })
            )
            .unwrap();
            report.flush().unwrap();
            let mut threads = Vec::new();
            for (i, name) in names.into_iter().enumerate() {
                let fd = repoch_tests_native::sys::inherited(3 + i as i32);
                threads.push(std::thread::spawn(move || {
                    let answer = format!("{name} ok\n");
                    match rustix::net::sockopt::socket_type(&fd).unwrap() {
                        rustix::net::SocketType::DGRAM => {
                            let s = std::net::UdpSocket::from(fd);
                            let mut buf = [0u8; 64];
                            let (_, from) = s.recv_from(&mut buf).unwrap();
                            s.send_to(answer.as_bytes(), from).unwrap();
                        }
                        _ if name.starts_with("unix-") => {
                            let l = std::os::unix::net::UnixListener::from(fd);
                            let (mut c, _) = l.accept().unwrap();
                            c.write_all(answer.as_bytes()).unwrap();
                        }
                        _ => {
                            let l = std::net::TcpListener::from(fd);
                            let (mut c, _) = l.accept().unwrap();
                            c.write_all(answer.as_bytes()).unwrap();
                        }
                    }
                }));
            }
            for t in threads {
                t.join().unwrap();
            }
        }
        Some("map") => {
            // Maps FILE read-only without executing it: what any reader can do.
            let f = std::fs::File::open(&args[2]).unwrap();
            let len = f.metadata().unwrap().len() as usize;
            repoch_tests_native::sys::map_readonly(&f, len).unwrap();
            ready();
            sleep_forever();
        }
        Some("map-as-nobody-with-caps") => {
            // Root that gives up every uid (65534, all four) but keeps its capabilities
            // (PR_SET_KEEPCAPS, then the permitted set made effective again), then maps
            // FILE: root's power under another user's uids.
            rustix::thread::set_keep_capabilities(true).unwrap();
            let nobody_g = nix::unistd::Gid::from_raw(65534);
            let nobody_u = nix::unistd::Uid::from_raw(65534);
            nix::unistd::setgroups(&[]).unwrap();
            nix::unistd::setresgid(nobody_g, nobody_g, nobody_g).unwrap();
            nix::unistd::setresuid(nobody_u, nobody_u, nobody_u).unwrap();
            let mut caps = rustix::thread::capabilities(None).unwrap();
            caps.effective = caps.permitted;
            rustix::thread::set_capabilities(None, caps).unwrap();
            let f = std::fs::File::open(&args[2]).unwrap();
            let len = f.metadata().unwrap().len() as usize;
            repoch_tests_native::sys::map_readonly(&f, len).unwrap();
            ready();
            sleep_forever();
        }
        Some("map-deep") => {
            // Under DIR, DEPTH directories of 200-byte names made by relative mkdir and
            // chdir (each path stays under PATH_MAX; the whole is not), then a file
            // there mapped: a maps line far longer than any enrolled path.
            std::env::set_current_dir(&args[2]).unwrap();
            let depth: usize = args[3].parse().unwrap();
            let name = "d".repeat(200);
            for _ in 0..depth {
                std::fs::create_dir(&name).unwrap();
                std::env::set_current_dir(&name).unwrap();
            }
            std::fs::write("f", b"mapped").unwrap();
            let f = std::fs::File::open("f").unwrap();
            repoch_tests_native::sys::map_readonly(&f, 6).unwrap();
            ready();
            sleep_forever();
        }
        Some("reaped") => {
            nix::sys::prctl::set_child_subreaper(true).expect("PR_SET_CHILD_SUBREAPER");
            let procs = std::path::PathBuf::from(&args[2]);
            if repoch_tests_native::sys::fork_is_child() {
                std::fs::write(&procs, "0").expect("join the cgroup");
                let e = std::os::unix::process::CommandExt::exec(
                    Command::new(&args[3]).args(&args[4..]),
                );
                panic!("exec {}: {e}", args[3]);
            }
            let kill = procs.with_file_name("cgroup.kill");
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
                std::fs::write(&kill, "1").expect("kill the cgroup");
            });
            // Until the cgroup is killed there is always a child: the command, or the
            // chain's live member (an orphan, reparented here).
            while nix::sys::wait::waitpid(None, None) != Err(nix::errno::Errno::ECHILD) {}
        }
        // Ends at once: a process that lives only between two observations.
        Some("exit") => repoch_tests_native::sys::exit_now(),
        // Lives MS milliseconds, then ends.
        Some("live-ms") => {
            let ms: u64 = args[2].parse().expect("MS: milliseconds");
            std::thread::sleep(std::time::Duration::from_millis(ms));
            repoch_tests_native::sys::exit_now()
        }
        // Forks as fast as it can, each child ending at once and reaped.
        Some("fork-flood") => {
            println!("{}", std::process::id());
            std::io::stdout().flush().unwrap();
            loop {
                if repoch_tests_native::sys::fork_is_child() {
                    repoch_tests_native::sys::exit_now();
                }
                let _ = nix::sys::wait::wait();
            }
        }
        // Runs /bin/true as fast as it can: a fork and an exec each time.
        Some("exec-flood") => {
            println!("{}", std::process::id());
            std::io::stdout().flush().unwrap();
            loop {
                let _ = std::process::Command::new("/bin/true").status();
            }
        }
        Some("fork-chain") => {
            println!("{}", std::process::id());
            std::io::stdout().flush().unwrap();
            loop {
                if !repoch_tests_native::sys::fork_is_child() {
                    repoch_tests_native::sys::exit_now();
                }
            }
        }
        Some("sleepers") => {
            let n: usize = args[2].parse().expect("N: a count of sleepers");
            for _ in 0..n {
                if repoch_tests_native::sys::fork_is_child() {
                    sleep_forever();
                }
            }
            println!("{}", std::process::id());
            std::io::stdout().flush().unwrap();
            sleep_forever();
        }
        Some("zombie-leader") => {
            // A thread lives on; the leader exits alone and stays a zombie in its cgroup.
            std::thread::spawn(sleep_forever);
            ready();
            repoch_tests_native::sys::exit_this_thread_only();
        }
        Some("threads") => {
            for _ in 0..2 {
                std::thread::spawn(sleep_forever);
            }
            let tids: Vec<String> = std::fs::read_dir("/proc/self/task")
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            println!("{} {}", std::process::id(), tids.join(","));
            std::io::stdout().flush().unwrap();
            sleep_forever();
        }
        _ => {
            eprintln!("usage: repoch-test-helper flock PATH | flock-fork PATH | sleep");
            std::process::exit(64);
        }
    }
}

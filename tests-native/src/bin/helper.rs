//! `repoch-test-helper`: small real processes the native tests need as OS objects.
//!
//! * `flock PATH` — takes an exclusive flock on PATH, prints its pid, sleeps.
//! * `flock-fork PATH` — takes the flock, hands the locked fd to a child (`sleep`) that
//!   inherits it, prints the child's pid and exits: `/proc/locks` then names a dead pid
//!   and only fdinfo names the real holder.
//! * `try-flock PATH` — one attempt: exit 0 if the lock was free, 4 if it is held.
//! * `sleep` — sleeps until killed.
//! * `listen-unix PATH`, `listen-tcp PORT`, `listen-udp PORT` — binds, prints its pid, sleeps.
//! * `zombie-leader` — spawns a thread, then the leader thread exits alone.
//! * `threads` — spawns two threads, prints `PID TID,TID,TID`, sleeps.
//! * `drip-consumer SOCKET PREFIX KEY MILLIS` — speaks the consumer protocol with the
//!   enrolled key, then sends its custody frame one byte every MILLIS ms (a slow peer).
//! * `serve-long-refusal SOCKET` — a fake repochd: reads a hello, answers a refusal
//!   (consumer-rejected) whose detail is longer than receivers accept.
//! * `serve-drip SOCKET` — a fake repochd: reads a hello, declares a 64 KiB frame and sends
//!   one byte a second.
#![deny(unsafe_code)]

use std::io::Write as _;

use std::os::fd::AsRawFd;
use std::process::Command;

/// Attempts to take a lock, 10 ms apart.
const LOCK_TRIES_MAX: u32 = 300;

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

fn ready() {
    println!("{}", std::process::id());
    std::io::stdout().flush().unwrap();
}

fn sleep_forever() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
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
            // Speaks the consumer protocol correctly, then vanishes right after answering
            // the challenge: the grant's dispatch meets a closed socket (a lost reply).
            use repoch_protocol::wire::{read_msg, write_msg, GrantMsg};
            let key = repoch_protocol::sign::signing_key_from_hex(
                &std::fs::read_to_string(&args[4]).unwrap(),
            )
            .unwrap();
            let mut s = std::os::unix::net::UnixStream::connect(&args[2]).expect("connect");
            write_msg(
                &mut s,
                &GrantMsg::Hello {
                    deployment: args[3].clone(),
                    key: repoch_protocol::PublicKey::from(&key.verifying_key()),
                },
            )
            .unwrap();
            ready();
            loop {
                match read_msg::<GrantMsg>(&mut s) {
                    Ok(GrantMsg::Challenge(c)) => {
                        write_msg(&mut s, &GrantMsg::Custody(c.answer(&key))).unwrap();
                        std::process::exit(0);
                    }
                    Ok(_) => continue,
                    Err(e) => {
                        eprintln!("rogue-consumer: {e}");
                        std::process::exit(1);
                    }
                }
            }
        }
        Some("drip-consumer") => {
            // A correct consumer that drip-feeds its custody answer: each byte arrives well
            // within any per-read timeout, the whole frame takes far longer than any deadline.
            use repoch_protocol::cbor::Canonical as _;
            use repoch_protocol::wire::{frame, read_msg, write_msg, GrantMsg};
            let key = repoch_protocol::sign::signing_key_from_hex(
                &std::fs::read_to_string(&args[4]).unwrap(),
            )
            .unwrap();
            let every = std::time::Duration::from_millis(args[5].parse().unwrap());
            let mut s = std::os::unix::net::UnixStream::connect(&args[2]).expect("connect");
            write_msg(
                &mut s,
                &GrantMsg::Hello {
                    deployment: args[3].clone(),
                    key: repoch_protocol::PublicKey::from(&key.verifying_key()),
                },
            )
            .unwrap();
            ready();
            loop {
                match read_msg::<GrantMsg>(&mut s) {
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

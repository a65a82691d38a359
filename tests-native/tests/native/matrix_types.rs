//! The issuance's claims about its consumer and its fences, against real processes:
//! a consumer that died after the first or second final verification is never consumed for
//! nor dispatched to (`withheld{consumer-lost}`), and repochd holds no fence once the
//! grant left or the issuance was refused (docs/ARCHITECTURE.md, "Issuance").

use std::os::unix::fs::MetadataExt as _;
use std::process::Stdio;

use repoch_tests_native::*;

use crate::e2e::{finish, records, recover_bg};

/// repochd started with `REPOCH_BARRIER`: it stops itself right after the named step.
struct Stopped {
    d: Daemon,
    barrier: String,
}

impl Stopped {
    fn start(s: &Sandbox, barrier: &str) -> Stopped {
        let log = s.path("repochd.log");
        let child = s
            .cmd("repochd")
            .env("REPOCH_BARRIER", barrier)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let d = Daemon { child, log };
        let text = d.wait_log("repochd ready");
        assert!(
            text.contains("barriers=true"),
            "this repochd was built without barriers: build it with `cargo test --workspace`"
        );
        Stopped {
            d,
            barrier: barrier.to_owned(),
        }
    }
    fn pid(&self) -> u32 {
        self.d.child.id()
    }
    /// The barrier was logged and repochd is stopped there (state T).
    fn reached(&self) {
        self.d
            .wait_log(&format!("barrier {} reached", self.barrier));
        let start = std::time::Instant::now();
        while !stopped(self.pid()) {
            assert!(
                start.elapsed().as_secs() < DAEMON_WAIT_SECONDS_MAX,
                "repochd did not stop at {}",
                self.barrier
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    fn cont(&self) {
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(self.pid() as i32).unwrap(),
            rustix::process::Signal::CONT,
        )
        .unwrap();
    }
}

/// Every fd of `pid` that names the sandbox's fence: by link target (the path) or by the
/// object it opens (device and inode), so a renamed fence is found too.
fn fence_fds(s: &Sandbox, pid: u32) -> Vec<String> {
    let fence = s.srv.join("lock");
    let path = std::fs::canonicalize(&fence).unwrap();
    let st = std::fs::metadata(&fence).unwrap();
    let mut found = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
        let e = e.unwrap();
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue; // closed meanwhile
        };
        let same_object =
            std::fs::metadata(e.path()).is_ok_and(|m| m.dev() == st.dev() && m.ino() == st.ino());
        if target == path || same_object {
            found.push(format!(
                "fd {} -> {}",
                e.file_name().to_string_lossy(),
                target.display()
            ));
        }
    }
    found
}

/// repochd stopped at `barrier`; the consumer is SIGKILLed and reaped; repochd continues.
/// It must end `withheld{consumer-lost}` after `kept`, without consuming for or dispatching
/// to the dead peer; the client is refused (exit 2, docs/EXIT-CODES.md).
fn consumer_killed_at(barrier: &str, kept: &[&str]) {
    let s = Sandbox::new();
    let id = s.enroll();
    let d = Stopped::start(&s, barrier);
    let mut consumer = s
        .consumer(&id[..6], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rec = recover_bg(&s, &id[..6], 20);
    d.reached();
    let pid = consumer.id();
    consumer.kill().unwrap();
    consumer.wait().unwrap(); // reaped: the pid is gone
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "{barrier}: the consumer is still there"
    );
    d.cont();
    let r = finish(rec);
    assert_eq!(
        r.code,
        Outcome::Refused,
        "{barrier}: {}\n{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(r.outcome()["outcome"], "refused", "{barrier}");
    assert_eq!(r.reasons(), ["consumer-lost"], "{barrier}: {}", r.stdout);
    let steps: Vec<String> = r
        .json_lines()
        .iter()
        .filter(|j| j["event"] == "progress")
        .map(|j| j["step"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        !steps.iter().any(|s| s == "dispatch"),
        "{barrier}: a dispatch was attempted: {steps:?}"
    );
    let mut want: Vec<&str> = kept.to_vec();
    want.push("withheld");
    assert_eq!(records(&s, &id), want, "{barrier}");
    let st = s.status(&id);
    assert_eq!(st.code, Outcome::Success, "{}", st.stdout);
    assert_eq!(st.json()["epoch"], "withheld", "{}", st.stdout);
    let last = st.json()["records"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["reason"], "consumer-lost", "{last}");
    assert!(!s.path("grant.cbor").exists());
    // The refusal released the fences.
    assert_eq!(fence_fds(&s, d.pid()), Vec::<String>::new(), "{barrier}");
}

#[test]
#[ignore = "needs root"]
fn a_consumer_killed_after_the_first_final_verification_is_withheld_consumer_lost_before_consume() {
    require_root!();
    consumer_killed_at("after-final-1", &["genesis", "intent"]);
}

#[test]
#[ignore = "needs root"]
fn a_consumer_killed_after_the_second_final_verification_is_withheld_consumer_lost_and_sent_nothing(
) {
    require_root!();
    consumer_killed_at(
        "after-final-2",
        &["genesis", "intent", "consume", "receipt"],
    );
}

#[test]
#[ignore = "needs root"]
fn repochd_holds_no_fence_once_the_grant_left() {
    // Stopped right after the dispatch: the fence fds went to the consumer in SCM_RIGHTS and
    // repochd's own copies are closed (the consumer, not repochd, now holds the locks).
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = Stopped::start(&s, "after-dispatch");
    let consumer = s
        .consumer(&id[..6], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rec = recover_bg(&s, &id[..6], 20);
    d.reached();
    assert_eq!(fence_fds(&s, d.pid()), Vec::<String>::new());
    d.cont();
    let r = finish(rec);
    assert_eq!(r.code, Outcome::Success, "{}", r.stdout);
    assert_eq!(finish(consumer).code, Outcome::Success);
    assert_eq!(fence_fds(&s, d.pid()), Vec::<String>::new());
}

#[test]
#[ignore = "needs root"]
fn repochd_holds_no_fence_after_a_refusal() {
    // Two refusals that held the fences: consumer-absent (fences acquired at observe, nothing
    // written) and a late mutation withheld at the second final verification. Once the client
    // has its answer, none of repochd's fds names the fence.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = s.daemon();
    let r = crate::e2e::run(s.recover(&id, 1, &[]));
    assert_eq!(r.code, Outcome::Refused, "{}", r.stdout);
    assert_eq!(r.reasons(), ["consumer-absent"]);
    assert_eq!(
        fence_fds(&s, d.child.id()),
        Vec::<String>::new(),
        "consumer-absent"
    );
    drop(d);

    let d = Stopped::start(&s, "after-receipt");
    let consumer = s
        .consumer(&id[..6], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let rec = recover_bg(&s, &id[..6], 20);
    d.reached();
    assert_eq!(
        fence_fds(&s, d.pid()).len(),
        1,
        "the fence is held until then"
    );
    std::fs::write(s.srv.join("READY"), b"tampered\n").unwrap();
    d.cont();
    let r = finish(rec);
    assert_eq!(r.code, Outcome::Refused, "{}", r.stdout);
    assert_eq!(r.reasons(), ["evidence-changed"]);
    assert_eq!(finish(consumer).code, Outcome::Refused);
    assert_eq!(
        records(&s, &id),
        ["genesis", "intent", "consume", "receipt", "withheld"]
    );
    assert_eq!(fence_fds(&s, d.pid()), Vec::<String>::new(), "withheld");
}

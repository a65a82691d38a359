//! Hostile inputs that reach the records: whatever a peer or a file brings must be refused
//! with a reason before anything is written, never turned into an unreadable record.

use std::process::Stdio;

use repoch_tests_native::*;

use super::e2e::{finish, records, recover_bg};

/// How long a refusal of a bad input may take: it must come at once, never hang.
const COMMAND_SECONDS_MAX: u64 = 20;

/// Runs `c` to its end; a command still running after `seconds` is killed and fails the test.
fn run_within(mut c: std::process::Command, seconds: u64) -> Run {
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = std::time::Instant::now();
    let p = std::path::PathBuf::from(format!("/proc/{pid}/stat"));
    loop {
        // A zombie (state Z) has exited; reap it through wait_with_output below.
        let state = std::fs::read_to_string(&p).unwrap_or_default();
        if state.is_empty()
            || state
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        {
            break;
        }
        if start.elapsed().as_secs() >= seconds {
            kill_pid(pid);
            panic!("{c:?} still ran after {seconds}s");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    finish(child)
}

/// A consumer run in cgroup `cg` (a shell writes itself into it, then execs the consumer)
/// against a recovery of `id`; both outcomes, then the log's records.
fn consume_from_cgroup(s: &Sandbox, id: &str, cg: &Cgroup) -> (Run, Run) {
    let rec = recover_bg(s, &id[..6], 3);
    let mut c = std::process::Command::new("sh");
    c.arg("-c")
        .arg("echo $$ > \"$1/cgroup.procs\" && shift && exec \"$0\" \"$@\"")
        .arg(bin("repoch-consume"))
        .arg(cg.path())
        .env("REPOCH_ROOT", &s.root)
        .args(["--json", "receive", "--deployment", &id[..6], "--key"])
        .arg(s.path("consumer.key"))
        .arg("--issuer-key")
        .arg(s.issuer_pub())
        .arg("--out")
        .arg(s.path("grant.cbor"))
        .arg("--socket")
        .arg(s.grant_socket())
        .args(["--wait", "10"]);
    let consumer = c.stdout(Stdio::piped()).spawn().unwrap();
    (finish(rec), finish(consumer))
}

#[test]
#[ignore = "needs root"]
fn a_consumer_in_a_cgroup_path_over_the_bound_is_rejected_and_nothing_is_written() {
    // The consumer's cgroup path goes into the intent and consume records, whose decoder
    // bounds it (PATH_BYTES_MAX). A consumer in a deeper cgroup (four nested names of 100
    // bytes) must be rejected at authentication, before the intent: the recovery ends
    // consumer-absent, the log holds only its genesis, and the daemon keeps issuing.
    // (Before: the intent was written, could not be read back, and the epoch was lost.)
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = s.daemon();
    let cg0 = Cgroup::new(&format!("repoch-deep-{}", s.tag));
    let cg1 = cg0.child(&"a".repeat(100));
    let cg2 = cg1.child(&"b".repeat(100));
    let cg = cg2.child(&"c".repeat(100));
    let (r, c) = consume_from_cgroup(&s, &id, &cg);
    assert_eq!(r.reasons(), ["consumer-absent"], "{}{}", r.stdout, r.stderr);
    assert_eq!(r.code, Outcome::Refused);
    assert_eq!(c.code, Outcome::Refused, "{}", c.stdout);
    assert!(c.stdout.contains("consumer-rejected"), "{}", c.stdout);
    assert!(c.stdout.contains("cgroup"), "{}", c.stdout);
    assert_eq!(records(&s, &id), ["genesis"]);
    drop(d);
    assert!(!s.path("grant.cbor").exists());
}

#[test]
#[ignore = "needs root"]
fn a_consumer_in_a_cgroup_whose_name_forges_a_line_is_rejected_and_the_log_stays_valid() {
    // The texts of an epoch record hold no forging character (docs/PROTOCOL.md, "The epoch
    // log"): a log holding one is corrupt. A consumer in a cgroup whose name holds ESC
    // must be rejected before the intent, the log holding only its genesis, still
    // `enrolled`; written raw, that intent would have made the deployment's own log corrupt.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let d = s.daemon();
    let cg = Cgroup::new(&format!("repoch-esc-{}\u{1b}[8m", s.tag));
    let (r, c) = consume_from_cgroup(&s, &id, &cg);
    assert_eq!(r.reasons(), ["consumer-absent"], "{}{}", r.stdout, r.stderr);
    assert_eq!(c.code, Outcome::Refused, "{}", c.stdout);
    assert!(c.stdout.contains("consumer-rejected"), "{}", c.stdout);
    assert!(c.stdout.contains("U+001B"), "{}", c.stdout);
    assert!(!c.stdout.contains('\u{1b}'), "{}", c.stdout);
    assert_eq!(records(&s, &id), ["genesis"]);
    assert_eq!(s.status(&id).json()["epoch"], "enrolled");
    drop(d);
}

#[test]
#[ignore = "needs root"]
fn a_manifest_that_is_a_fifo_huge_or_not_text_is_refused_at_once_as_usage() {
    // `repoch enroll` reads an operator's file, but the path may name anything: a FIFO
    // (read would block forever), a sparse file of a gigabyte (read whole into memory), a
    // directory, binary bytes. Each is a usage error (exit 64) naming why, before anything
    // is created. (Before: the FIFO hung; a 3 GB file took 41 s and 6 GB of memory.)
    require_root!();
    let s = Sandbox::new();
    let fifo = s.path("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let huge = s.path("huge.toml");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let binary = s.path("binary.toml");
    std::fs::write(&binary, [0xff, 0xfe, 0x00, 0x80]).unwrap();
    for (path, why) in [
        (&fifo, "not a regular file"),
        (&huge, "1073741824 bytes, over its bound of"),
        (&s.path(""), "not a regular file"),
        (&binary, "not UTF-8"),
    ] {
        let mut c = s.cmd("repoch");
        c.args(["--json", "enroll"]).arg(path);
        let r = run_within(c, COMMAND_SECONDS_MAX);
        assert_eq!(
            r.code,
            Outcome::Usage,
            "{}: {}{}",
            path.display(),
            r.stdout,
            r.stderr
        );
        assert!(
            r.stdout.contains(why),
            "{}: expected {why:?}: {}",
            path.display(),
            r.stdout
        );
    }
    assert!(
        std::fs::read_dir(s.root.join("var/lib/repoch/deployments"))
            .map_or(true, |mut d| d.next().is_none()),
        "a refused enrollment left a deployment"
    );
}

/// Appends `bytes` to the deployment's journal (O_APPEND works on an append-only file).
fn append_to_journal(s: &Sandbox, bytes: &[u8]) {
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .append(true)
        .open(s.srv.join("journal"))
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

/// The lineage fact's reason from `repoch observe`, which must end on its own, promptly.
fn lineage_reason(s: &Sandbox, id: &str) -> String {
    let r = run_within(s.observe_cmd(id, &[]), COMMAND_SECONDS_MAX);
    assert!(
        r.code == Outcome::Success || r.code == Outcome::Refused,
        "observe must refuse, never crash: exit {}: {}",
        r.code,
        r.stderr
    );
    r.json()["facts"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["kind"] == "lineage"))
        .and_then(|f| f["reason"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("no failed lineage fact: {}", r.stdout))
}

#[test]
#[ignore = "needs root"]
fn a_journal_with_hostile_frames_is_refused_with_a_reason_never_a_crash() {
    // The old root writes its journal: its bytes are adversarial. After a valid genesis,
    // a frame of deeply nested CBOR arrays, a frame that declares 4 GiB, a frame of NUL
    // bytes, and one of a 4 KiB text each read as a lineage refusal (torn where a crash
    // could have produced it, mutated otherwise), promptly, never a crash.
    require_root!();
    let nested = {
        let body = [vec![0x81u8; 100_000], vec![0x00]].concat();
        let len = (body.len() as u32).to_be_bytes();
        [len.to_vec(), body].concat()
    };
    let text = {
        let mut body = vec![0x79, 0x10, 0x00];
        body.extend(std::iter::repeat_n(b'a', 4096));
        let len = (body.len() as u32).to_be_bytes();
        [len.to_vec(), body].concat()
    };
    let cases: [(&str, Vec<u8>); 4] = [
        ("nested", nested),
        ("declares 4 GiB", vec![0xff, 0xff, 0xff, 0xff, 0x81]),
        ("NUL bytes", vec![0u8; 64]),
        ("a 4 KiB text", text),
    ];
    for (what, bytes) in cases {
        let s = Sandbox::new();
        let id = s.enroll();
        append_to_journal(&s, &bytes);
        let reason = lineage_reason(&s, &id);
        assert!(
            reason == "lineage-torn" || reason == "lineage-mutated",
            "{what}: {reason}"
        );
    }
}

#[test]
#[ignore = "needs root"]
fn a_state_directory_made_group_writable_after_enrollment_is_refused() {
    // A group-writable state directory lets that group swap the epoch log or the manifest:
    // every command that opens the deployment refuses it (state-unprotected), naming the mode.
    require_root!();
    use std::os::unix::fs::PermissionsExt as _;
    let s = Sandbox::new();
    let id = s.enroll();
    std::fs::set_permissions(s.state_dir(&id), std::fs::Permissions::from_mode(0o770)).unwrap();
    let r = s.status(&id);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("state-unprotected"), "{}", r.stdout);
    assert!(
        r.stdout.contains("770"),
        "the refusal names the mode: {}",
        r.stdout
    );
    let _d = s.daemon();
    let rec = super::e2e::run(s.recover(&id[..6], 1, &[]));
    assert_eq!(rec.code, Outcome::Refused, "{}", rec.stdout);
    assert_eq!(rec.reasons(), ["state-unprotected"]);
    std::fs::set_permissions(s.state_dir(&id), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(records(&s, &id), ["genesis"]);
}

#[test]
#[ignore = "needs root"]
fn a_symlink_in_any_component_of_an_enrolled_path_is_refused_at_enrollment() {
    // The inventory is opened without following symlinks in any component: a fence, store
    // or READY reached through a symlinked directory is refused at enrollment (exit 64 or 2,
    // naming the path), so no later swap of that link can redirect an observation.
    require_root!();
    let s = Sandbox::new();
    let real = s.path("real");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("lock"), b"").unwrap();
    std::os::unix::fs::symlink(&real, s.path("link")).unwrap();
    let link_lock = s.path("link").join("lock");
    let m = s.manifest("").replacen(
        &format!("fences = [\"{}/lock\"]", s.srv.display()),
        &format!("fences = [\"{}\"]", link_lock.display()),
        1,
    );
    let p = s.path("m.toml");
    std::fs::write(&p, m).unwrap();
    let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
    assert_ne!(r.code, Outcome::Success, "{}", r.stdout);
    assert!(
        r.stdout.contains("symlink") || r.stdout.contains("Too many levels"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("link/lock"), "{}", r.stdout);
}

#[test]
#[ignore = "needs root"]
fn repochd_without_a_usable_run_directory_says_why_and_exits() {
    // The run directory's parent is a regular file: repochd cannot bind its sockets. It
    // must exit non-zero at once with the path and the cause, not hang or panic.
    require_root!();
    let s = Sandbox::new();
    std::fs::create_dir_all(s.root.join("run")).unwrap();
    std::fs::write(s.root.join("run/repoch"), b"not a directory").unwrap();
    let r = run_within(s.cmd("repochd"), COMMAND_SECONDS_MAX);
    assert_eq!(
        r.code,
        Outcome::Internal,
        "could not start is 70 (docs/EXIT-CODES.md): {}",
        r.stderr
    );
    assert!(r.stderr.contains("run/repoch"), "{}", r.stderr);
}

#[test]
#[ignore = "needs root"]
fn repochd_exits_64_on_bad_arguments_and_0_on_sigterm() {
    // The documented codes of the daemon itself (docs/EXIT-CODES.md): a usage error is 64
    // (systemd must not restart it: RestartPreventExitStatus), a clean stop on SIGTERM is 0.
    require_root!();
    let s = Sandbox::new();
    let r = run_within(
        {
            let mut c = s.cmd("repochd");
            c.arg("--no-such-option");
            c
        },
        COMMAND_SECONDS_MAX,
    );
    assert_eq!(r.code, Outcome::Usage, "{}", r.stderr);
    let d = s.daemon();
    d.wait_log("repochd ready");
    let pid = rustix::process::Pid::from_raw(d.child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let mut d = d;
    let status = d.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

#[test]
#[ignore = "needs root"]
fn a_fifo_given_to_audit_or_journal_append_is_refused_at_once() {
    // An auditor's or producer's path may name a FIFO: `repoch audit FIFO` hung, and
    // `repoch journal append --journal FIFO` exited 70 ("Illegal seek", a bug). Both refuse
    // at once naming the file type (audit: exit 64; journal append: exit 2).
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let fifo = s.path("log.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut c = s.cmd("repoch");
    c.args(["--json", "audit"]).arg(&fifo);
    let r = run_within(c, COMMAND_SECONDS_MAX);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("a fifo"), "{}", r.stdout);
    let mut c = s.cmd("repoch");
    c.args(["--json", "journal", "append", "--journal"])
        .arg(&fifo)
        .arg("--key")
        .arg(s.path("producer.key"))
        .args(["--deployment", &id[..6], "root-start"]);
    let r = run_within(c, COMMAND_SECONDS_MAX);
    assert_eq!(r.code, Outcome::Refused, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("a fifo"), "{}", r.stdout);
}

#[test]
#[ignore = "needs root"]
fn a_fifo_given_as_a_key_file_or_repochd_config_is_refused_at_once() {
    // `repoch audit --issuer-key FIFO` and `repochd --config FIFO` blocked forever in
    // open(2) (found by attacking the release binaries); both refuse at once, naming the
    // file type: audit exit 64 (usage), repochd exit 64 (a bad configuration).
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let fifo = s.path("key.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut c = s.cmd("repoch");
    c.args(["--json", "audit", "--issuer-key"])
        .arg(&fifo)
        .arg(s.state_dir(&id));
    let r = run_within(c, COMMAND_SECONDS_MAX);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("a fifo"), "{}", r.stdout);
    let mut c = s.cmd("repochd");
    c.arg("--config").arg(&fifo);
    let r = run_within(c, COMMAND_SECONDS_MAX);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("a fifo"), "{}", r.stderr);
}

#[test]
#[ignore = "needs root"]
fn enroll_names_the_containment_objects_that_do_not_exist_now() {
    // A cgroup or executable path that does not exist is observed as absent: contained,
    // checking nothing if it was misspelt. Enrollment (done while the old root runs) says
    // which ones it could not find, in --json and as a warning.
    require_root!();
    let s = Sandbox::new();
    let here = bin("repoch-test-helper").display().to_string();
    let cg = Cgroup::new(&format!("repoch-there-{}", s.tag));
    // A dangling symlink reads as missing (observation follows it); a directory is no
    // executable.
    let dangling = s.path("dangling");
    std::os::unix::fs::symlink(s.path("nowhere"), &dangling).unwrap();
    let m = s.manifest(&format!(
        "[containment]\ncgroups = [\"/repoch-misspelt-{t}.service\", \"{there}\"]\nexecutables = [\"/usr/local/bin/repoch-misspelt-{t}\", \"{here}\", \"{d}\", \"/usr/bin\"]\n",
        t = s.tag,
        there = cg.rel,
        d = dangling.display()
    ));
    let p = s.path("manifest.toml");
    std::fs::write(&p, &m).unwrap();
    let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    let absent = r.json()["absent_at_enrollment"].clone();
    assert_eq!(
        absent,
        serde_json::json!([
            {"kind": "cgroup", "path": format!("/repoch-misspelt-{}.service", s.tag), "observed": "does not exist now"},
            {"kind": "executable", "path": format!("/usr/local/bin/repoch-misspelt-{}", s.tag), "observed": "does not exist now"},
            {"kind": "executable", "path": s.path("dangling").display().to_string(), "observed": "does not exist now"},
            {"kind": "executable", "path": "/usr/bin", "observed": "is not a regular file"},
        ]),
        "{}",
        r.stdout
    );
    // In human form: the id alone on stdout, one warning per object on stderr.
    let s2 = Sandbox::new();
    let m2 = s2.manifest(&format!(
        "[containment]\ncgroups = [\"/repoch-misspelt-{t}.service\"]\n",
        t = s2.tag
    ));
    let p2 = s2.path("manifest.toml");
    std::fs::write(&p2, &m2).unwrap();
    let r = s2.repoch(&["enroll", p2.to_str().unwrap()]);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    assert_eq!(r.stdout.trim().len(), 32, "{}", r.stdout);
    assert!(
        r.stderr.contains(&format!(
            "warning: cgroup /repoch-misspelt-{}.service does not exist now",
            s2.tag
        )),
        "{}",
        r.stderr
    );
}

/// A socket at `path` that answers every HTTP request with a 500 whose JSON `message` is
/// `message`, as an engine's error does, until the test ends.
fn engine_answering_500(path: &std::path::Path, message: &str) {
    use std::io::{Read as _, Write as _};
    let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    let body = serde_json::json!({ "message": message }).to_string();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            // The request head, bounded: then one answer, and the connection closed.
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while head.len() < 64 * 1024 && !head.ends_with(b"\r\n\r\n") {
                match conn.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let _ = write!(
                conn,
                "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
}

#[test]
#[ignore = "needs root"]
fn enroll_escapes_an_engines_error_text_in_json_as_in_its_warning() {
    // An engine's answer is another program's text: printed raw, U+202E reorders what a
    // terminal shows and U+009B starts a control sequence. Enrollment names a container it
    // could not ask of its engine, in --json as in the human warning: escaped in both.
    require_root!();
    let s = Sandbox::new();
    let sock = s.path("engine.sock");
    engine_answering_500(&sock, "bad \u{202e}txet\u{9b}2J");
    let extra = format!(
        "[containment]\ncontainers = [\"docker:billing\"]\n[containment.engines]\ndocker = \"unix://{}\"\n",
        sock.display()
    );
    let m = s.manifest(&extra);
    let p = s.path("manifest.toml");
    std::fs::write(&p, &m).unwrap();
    let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    let observed = r.json()["absent_at_enrollment"][0]["observed"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        observed.contains("bad \\u{202e}txet\\u{009b}2J"),
        "the engine's text escaped: {observed:?}"
    );
    assert!(
        !observed.contains('\u{202e}') && !observed.contains('\u{9b}'),
        "raw in --json: {observed:?}"
    );
    // The same in the human warning, of another deployment of the same manifest.
    let s2 = Sandbox::new();
    let p2 = s2.path("manifest.toml");
    std::fs::write(&p2, s2.manifest(&extra)).unwrap();
    let r = s2.repoch(&["enroll", p2.to_str().unwrap()]);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("bad \\u{202e}txet\\u{009b}2J")
            && !r.stderr.contains('\u{202e}')
            && !r.stderr.contains('\u{9b}'),
        "the warning: {:?}",
        r.stderr
    );
}

#[test]
#[ignore = "needs root"]
fn a_path_given_back_in_a_usage_error_is_escaped() {
    // The operator's path, holding U+202E and U+009B, read back in the error of a manifest
    // that is not there: escaped in --json and on stderr, as refusals are (found by
    // attacking the release binaries: both raw).
    require_root!();
    let s = Sandbox::new();
    let p = s.path("m\u{202e}lmot.\u{9b}2J");
    let shown = "m\\u{202e}lmot.\\u{009b}2J";
    for json in [true, false] {
        let mut args = vec!["enroll", p.to_str().unwrap()];
        if json {
            args.insert(0, "--json");
        }
        let r = s.repoch(&args);
        assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
        let said = match json {
            true => r.json()["message"].as_str().unwrap_or_default().to_owned(),
            false => r.stderr.clone(),
        };
        assert!(
            said.contains(shown) && !said.contains('\u{202e}') && !said.contains('\u{9b}'),
            "json {json}: {said:?}"
        );
    }
}

#[test]
#[ignore = "needs root"]
fn enroll_refuses_a_path_with_control_characters() {
    // A path is printed back (facts, warnings, refusals): an escape sequence or a newline in
    // it could forge a line of output. Refused at enrollment, naming the field.
    require_root!();
    for (section, entry) in [
        (
            "[containment]\nexecutables",
            "/usr/local/bin/old\\nrepoch: warning: none",
        ),
        (
            "[containment]\ncgroups",
            "/system.slice/\\u001b[2Kold.service",
        ),
        ("[containment]\nlisteners", "unix:/run/old\\r.sock"),
        // Not control characters, yet they forge what a line shows: a right-to-left
        // override, a zero-width space, a line separator.
        ("[containment]\nexecutables", "/usr/local/bin/old\\u202e.sh"),
        (
            "[containment]\ncgroups",
            "/system.slice/da\\u200bta.service",
        ),
        ("[containment]\nexecutables", "/usr/local/bin/old\\u2028x"),
        // A unit name and a path holding the Arabic letter mark or a tag character.
        ("[containment]\nunits", "old\\u061c.service"),
        (
            "[containment]\nexecutables",
            "/usr/local/bin/old\\U000E0041",
        ),
    ] {
        let s = Sandbox::new();
        let m = s.manifest(&format!("{section} = [\"{entry}\"]\n"));
        let p = s.path("manifest.toml");
        std::fs::write(&p, &m).unwrap();
        let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
        assert_eq!(r.code, Outcome::Usage, "{entry}: {}{}", r.stdout, r.stderr);
        let msg = r.json()["message"].as_str().unwrap_or_default().to_owned();
        assert!(
            msg.contains("control character") || msg.contains("format character"),
            "{entry}: {msg}"
        );
    }
    // The label too: every format character of the text rule (docs/PROTOCOL.md, "Text"),
    // a bidi override as well as the Arabic letter mark, a tag character, a soft hyphen.
    for (label, named) in [
        ("billing\\u202e", "U+202E"),
        ("billing\\u061c", "U+061C"),
        ("billing\\U000E0041", "U+E0041"),
        ("bill\\u00ading", "U+00AD"),
    ] {
        let s = Sandbox::new();
        let m = s.manifest("").replace(
            &format!("label = \"test-{}\"", s.tag),
            &format!("label = \"{label}\""),
        );
        let p = s.path("manifest.toml");
        std::fs::write(&p, &m).unwrap();
        let r = s.repoch(&["--json", "enroll", p.to_str().unwrap()]);
        assert_eq!(r.code, Outcome::Usage, "{label}: {}{}", r.stdout, r.stderr);
        let msg = r.json()["message"].as_str().unwrap_or_default().to_owned();
        assert!(
            msg.contains("label") && msg.contains(&format!("format character {named}")),
            "{label}: {msg}"
        );
    }
}

#[test]
fn audit_gives_each_log_its_own_report_in_the_order_given_with_any_number_of_threads() {
    // `repoch audit --jobs N` verifies the logs in N shares at once: the reports must be
    // the same, each at its own path, in the order given, whatever N (a share boundary
    // falls between a damaged log and its neighbours for some N).
    let s = Sandbox::new();
    let dir = s.path("logs");
    let paths = repoch_tests_native::audit_logs::write(&dir, 300).unwrap();
    // A flipped byte in one record's signature, and a log cut in its third record.
    let mut b = std::fs::read(&paths[37]).unwrap();
    let n = b.len();
    b[n - 10] ^= 0x40;
    std::fs::write(&paths[37], b).unwrap();
    let b = std::fs::read(&paths[250]).unwrap();
    std::fs::write(&paths[250], &b[..b.len() * 2 / 3]).unwrap();
    let key = dir.join("issuer.pub");
    let audit = |jobs: Option<&str>| {
        let mut c = s.cmd("repoch");
        c.args(["--json", "audit", "--issuer-key"]).arg(&key);
        if let Some(j) = jobs {
            c.args(["--jobs", j]);
        }
        c.args(&paths);
        // Its output is over a pipe's buffer: read as it runs (`run_within` reads at the end).
        let r = run(c);
        assert_eq!(r.code, Outcome::Refused, "{}", r.stderr);
        // The report, then the refusal naming the first log that does not verify.
        let lines = r.json_lines();
        assert_eq!(lines.len(), 2, "{}", r.stdout);
        assert_eq!(
            lines[1]["refusals"][0]["subject"],
            paths[37].display().to_string()
        );
        lines[0].clone()
    };
    let one = audit(Some("1"));
    let logs = one["logs"].as_array().unwrap();
    assert_eq!(logs.len(), 300);
    for (i, l) in logs.iter().enumerate() {
        assert_eq!(l["path"], paths[i].display().to_string(), "row {i}");
        let bad = i == 37 || i == 250;
        assert_eq!(!l["problem"].is_null(), bad, "row {i}: {l}");
    }
    assert_eq!(logs[37]["records"], 3, "{}", logs[37]);
    for jobs in [Some("2"), Some("7"), Some("64"), None] {
        assert_eq!(audit(jobs), one, "--jobs {jobs:?}");
    }
    // Out of its range: a usage error.
    for bad in ["0", "65"] {
        let mut c = s.cmd("repoch");
        c.args(["audit", "--jobs", bad, "--issuer-key"])
            .arg(&key)
            .arg(&paths[0]);
        let r = run_within(c, COMMAND_SECONDS_MAX);
        assert_eq!(
            r.code,
            Outcome::Usage,
            "--jobs {bad}: {}{}",
            r.stdout,
            r.stderr
        );
    }
}

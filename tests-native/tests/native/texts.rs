//! Output an attacker cannot forge (docs/PROTOCOL.md, "Text"): text that comes from outside
//! (a process name, a symlink target) is escaped wherever a fact is made, so neither the
//! human output, nor `--json`, nor the record it is signed into, nor repochd's log carry
//! an ESC, a CR or a newline of someone else's choosing. Real processes, a real symlink,
//! the real `repoch observe`.

use std::process::Command;

use repoch_tests_native::*;

#[test]
#[ignore = "needs root"]
fn a_fence_holders_name_and_a_symlink_target_are_printed_escaped_never_raw() {
    require_root!();
    let s = Sandbox::new();
    let sock = s.path("control.sock");
    let id = s.enroll_with(&s.manifest(&format!(
        "[containment]\nlisteners = [\"unix:{}\"]",
        sock.display()
    )));
    // The holder's name (its comm, from its file name) sets a terminal title and colour.
    let evil = s.path("\u{1b}]0;x\u{7}\u{1b}[31m");
    unique_copy(&bin("repoch-test-helper"), &evil, &s.tag);
    let fence = s.srv.join("lock");
    let _holder = spawn_ready({
        let mut c = Command::new(&evil);
        c.args(["flock", fence.to_str().unwrap()]);
        c
    });
    // A symlink whose target would rewrite its FAIL line as "ok" and forge a log line.
    let forged = "\r\u{1b}[2K  ok    listener all fine\nrepochd: granted";
    std::os::unix::fs::symlink(forged, &sock).unwrap();
    let human = s.repoch(&["observe", &id]);
    assert_eq!(
        human.code,
        Outcome::Refused,
        "{}{}",
        human.stdout,
        human.stderr
    );
    for (what, text) in [("stdout", &human.stdout), ("stderr", &human.stderr)] {
        assert!(
            !text.contains(['\u{1b}', '\r', '\u{7}']),
            "{what} carries a raw control character: {text:?}"
        );
    }
    assert!(
        !human
            .stdout
            .lines()
            .any(|l| l.starts_with("repochd: granted")),
        "a forged line: {:?}",
        human.stdout
    );
    let json = s.observe(&id);
    let fence_fact = observed(&json, "fence");
    assert!(
        fence_fact.contains("\\u{001b}]0;x\\u{0007}"),
        "{fence_fact}"
    );
    let listener = observed(&json, "listener");
    assert!(
        listener.contains("\\u{000d}\\u{001b}[2K") && listener.contains("\\u{000a}repochd"),
        "{listener}"
    );
}

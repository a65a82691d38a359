//! What the discovery trials share (tests/native/discover.rs, tests/tooled/discover.rs):
//! `repoch --json discover` run and read, its draft completed with what no process shows,
//! and a recovery with a real consumer once the old root is contained.

use std::process::Stdio;

use std::os::unix::fs::PermissionsExt as _;

use crate::{bin, run, Outcome, Sandbox};

/// `repoch --json discover ARGS` as root, which must succeed: its `found` object and its
/// draft.
pub fn discovered(s: &Sandbox, args: &[&str]) -> (serde_json::Value, String) {
    let mut all = vec!["--json", "discover"];
    all.extend_from_slice(args);
    let r = s.repoch(&all);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    let v = r.json();
    (v["found"].clone(), v["draft"].as_str().unwrap().to_owned())
}

/// The values of list `key` of a discovery's `found`.
pub fn found_values(found: &serde_json::Value, key: &str) -> Vec<String> {
    found[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {found}"))
        .iter()
        .map(|f| f["value"].as_str().unwrap().to_owned())
        .collect()
}

/// `draft` with what no process shows, taken from the sandbox's own manifest: its top
/// level (label, stores, READY, and its fences when the draft names none: an old root that
/// holds no lock has no fence in its draft) before, `tables` (more of `[containment]`,
/// such as `[containment.engines]`) right after the draft, and the sandbox's `[journal]`
/// and `[consumer]` tables at the end.
pub fn completed_draft(s: &Sandbox, draft: &str, tables: &str) -> String {
    let own = s.manifest("");
    let (top, own_tables) = own.split_at(own.find("[journal]").unwrap());
    let drafted = draft.contains("\nfences = [");
    let top: String = top
        .lines()
        .filter(|l| !(drafted && l.starts_with("fences")))
        .map(|l| format!("{l}\n"))
        .collect();
    format!("{top}{draft}\n{tables}\n{own_tables}")
}

/// The recovery of `id` with repochd (given `env`) and a real consumer: both must succeed
/// (`context` is shown when they do not).
pub fn recovers(s: &Sandbox, id: &str, env: &[(&str, &str)], context: &str) {
    let _d = s.daemon_env(env);
    let consumer = s
        .consumer(&id[..8], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let r = run(s.recover(id, 20, &[]));
    assert_eq!(r.code, Outcome::Success, "{}\n{context}", r.stdout);
    let c = consumer.wait_with_output().unwrap();
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stdout));
}

/// A copy of the test helper with bytes of its own appended (it still runs): no other
/// process on the host runs a file with its content, so it can be enrolled as the old
/// root's executable while other tests run the helper.
pub fn own_copy_of_the_helper(s: &Sandbox) -> std::path::PathBuf {
    let exe = s.srv.join("old-root");
    let mut bytes = std::fs::read(bin("repoch-test-helper")).unwrap();
    bytes.extend_from_slice(s.tag.as_bytes());
    std::fs::write(&exe, bytes).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    exe
}

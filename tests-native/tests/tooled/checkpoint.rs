//! Checkpoints checked by an independent verifier: Go's golang.org/x/mod/sumdb/note
//! (the rest of checkpoints: tests/native/checkpoint.rs).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use repoch_tests_native::*;

/// Builds tests-native/go/noteverify with the system Go against Debian's packaged sources
/// (GOPATH=/usr/share/gocode, modules off: no network). Fails loudly without them.
fn noteverify(out_dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("go/noteverify/main.go");
    let exe = out_dir.join("noteverify");
    let o = Command::new("go")
        .arg("build")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .env("GO111MODULE", "off")
        .env("GOPATH", "/usr/share/gocode")
        .env("GOFLAGS", "")
        .env("GOPROXY", "off")
        .env("GOCACHE", out_dir.join("gocache"))
        .output()
        .expect("go (Debian: apt-get install golang-go golang-golang-x-mod-dev)");
    assert!(
        o.status.success(),
        "go build noteverify: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    exe
}

fn issuer_pub_hex(s: &Sandbox) -> String {
    std::fs::read_to_string(s.issuer_pub())
        .unwrap()
        .trim()
        .to_owned()
}

/// `noteverify repoch-issuer PUBKEY NOTE`: its exit code and stdout.
fn go_verify(exe: &Path, s: &Sandbox, note: &Path) -> (i32, String) {
    let o = Command::new(exe)
        .args(["repoch-issuer", &issuer_pub_hex(s)])
        .arg(note)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

pub(crate) fn a_checkpoint_verifies_with_go_sumdb_note_and_a_tampered_one_does_not() {
    // Proves: `repoch checkpoint` prints a C2SP signed note that Go's sumdb/note accepts
    // under the issuer key (origin, size 1, the genesis hash as base64), and rejects once
    // a byte of its text changes.
    require_root!();
    let s = Sandbox::new();
    let id = s.enroll();
    let r = s.repoch(&["checkpoint", &id[..6]]);
    assert_eq!(r.code, Outcome::Success, "{}\n{}", r.stdout, r.stderr);
    let note = format!("{}\n", r.stdout.trim_end());
    let good = s.path("good.note");
    std::fs::write(&good, &note).unwrap();
    let j = s.repoch(&["--json", "checkpoint", &id]).json();
    assert_eq!(j["size"], 1);
    assert_eq!(j["origin"], format!("repoch/epoch-log/{id}"));
    let exe = noteverify(s.dir.path());
    let (code, text) = go_verify(&exe, &s, &good);
    assert_eq!(code, 0, "Go rejected repoch's note:\n{note}");
    let head = s.status(&id).json()["records"][0]["hash"]
        .as_str()
        .unwrap()
        .to_owned();
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(hex::decode(&head).unwrap());
    assert_eq!(text, format!("repoch/epoch-log/{id}\n1\n{b64}\n"));
    let bad = s.path("tampered.note");
    std::fs::write(&bad, note.replacen("\n1\n", "\n2\n", 1)).unwrap();
    assert_eq!(
        go_verify(&exe, &s, &bad).0,
        1,
        "Go accepted a tampered note"
    );
}

/// The notes of protocol/tests/protocol/notes.rs (their rules checked there).
#[path = "../../../protocol/tests/protocol/notes.rs"]
#[allow(dead_code)]
mod notes;

/// Go's `golang.org/x/mod/sumdb/note` is the oracle for the note layer, in both
/// directions: every note of `notes` that Go accepts repoch accepts,
/// and every note Go refuses repoch refuses, but for the tlog-checkpoint body rules that
/// Go's note layer does not read (a size with a sign or a leading zero, an empty line in
/// the text), which repoch refuses and Go, not reading a body, accepts.
pub(crate) fn every_note_is_judged_as_go_sumdb_note_judges_it() {
    use repoch_protocol::checkpoint::{Checkpoint, KEY_NAME};
    let dir = tempfile::tempdir().unwrap();
    let exe = noteverify(dir.path());
    let key = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
    let public = repoch_protocol::PublicKey::from(&key.verifying_key());
    for (n, c) in notes::note_cases(&key).into_iter().enumerate() {
        let path = dir.path().join(format!("{n}.note"));
        std::fs::write(&path, &c.note).unwrap();
        let o = Command::new(&exe)
            .args([KEY_NAME, &hex::encode(public.0)])
            .arg(&path)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let go = o.status.code() == Some(0);
        assert_eq!(
            go,
            c.go,
            "{}: Go said {}{}",
            c.what,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let ours = Checkpoint::verify(&c.note, KEY_NAME, &public).is_ok();
        assert_eq!(ours, c.repoch, "{}", c.what);
        if go != ours {
            assert!(go && !ours, "{}: repoch accepts a note Go refuses", c.what);
        }
    }
}

//! Signed notes that C2SP signed-note and tlog-checkpoint accept or refuse, for checking
//! `repoch_protocol::checkpoint::Checkpoint::verify` against the rules (the test below)
//! and against Go's `golang.org/x/mod/sumdb/note` in both directions
//! (`tests-native/tests/tooled/checkpoint.rs`, which includes this file).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};
use repoch_protocol::checkpoint::KEY_NAME;
use repoch_protocol::{Hash, PublicKey};

/// One case: what it is, the note, whether repoch accepts it, whether Go's note layer
/// (signatures only; it does not read a checkpoint's body) accepts it.
#[derive(Debug, Clone)]
pub struct NoteCase {
    pub what: &'static str,
    pub note: String,
    pub repoch: bool,
    pub go: bool,
}

/// `— NAME BASE64(key id || signature of text)` for `key` under `name`.
pub fn signature_line(name: &str, key: &SigningKey, text: &str) -> String {
    format!("\u{2014} {name} {}", B64.encode(blob(name, key, text)))
}

fn blob(name: &str, key: &SigningKey, text: &str) -> Vec<u8> {
    let mut m = name.as_bytes().to_vec();
    m.push(b'\n');
    m.push(0x01);
    m.extend_from_slice(&PublicKey::from(&key.verifying_key()).0);
    let mut b = Hash::of(&m).0[..4].to_vec();
    b.extend_from_slice(&key.sign(text.as_bytes()).to_bytes());
    b
}

/// Every case, signed by `key` as `repoch-issuer` (and by a stranger's key where said).
pub fn note_cases(key: &SigningKey) -> Vec<NoteCase> {
    let head = B64.encode([7u8; 32]);
    let text = |size: &str| format!("repoch/epoch-log/x\n{size}\n{head}\n");
    let ours = |t: &str| signature_line(KEY_NAME, key, t);
    let stranger = SigningKey::from_bytes(&[0x42; 32]);
    let theirs = |t: &str| signature_line("someone-else", &stranger, t);
    let good = text("4");
    let note = |t: &str, sigs: &[String]| format!("{t}\n{}\n", sigs.join("\n"));
    let case = |what, note: String, repoch, go| NoteCase {
        what,
        note,
        repoch,
        go,
    };
    let mut bad_sig = blob(KEY_NAME, key, &good);
    bad_sig[10] ^= 1;
    let bad_line = format!("\u{2014} {KEY_NAME} {}", B64.encode(&bad_sig));
    // Base64 of the 68-byte blob ends in one character carrying 2 unused bits, then `=`:
    // set them (Go's StdEncoding decodes it to the same bytes).
    let loose = {
        let mut l = ours(&good).into_bytes();
        let at = l.len() - 2;
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let v = alphabet.iter().position(|c| *c == l[at]).unwrap();
        l[at] = alphabet[v | 1];
        String::from_utf8(l).unwrap()
    };
    let with_ext = format!("{good}extension one\nextension two\n");
    let blank_inside = format!("{good}\nafter a blank line\n");
    let crlf = good.replace('\n', "\r\n");
    let hundred: Vec<String> = (0..100).map(|_| theirs(&good)).collect();
    let mut too_many = hundred.clone();
    too_many.push(ours(&good));
    // `good` with one more extension line, signed.
    let with_line = |line: &str| {
        let t = format!("{good}{line}\n");
        note(&t, &[ours(&t)])
    };
    // A signed note of exactly `len` bytes: its extension line is as long as it must be.
    let padded = |len: usize| {
        let bare = with_line("").len();
        with_line(&"p".repeat(len - bare))
    };
    vec![
        case(
            "a signed checkpoint",
            note(&good, &[ours(&good)]),
            true,
            true,
        ),
        case("size 0", note(&text("0"), &[ours(&text("0"))]), true, true),
        case(
            "extension lines after the head",
            note(&with_ext, &[ours(&with_ext)]),
            true,
            true,
        ),
        case(
            "another key's line first",
            note(&good, &[theirs(&good), ours(&good)]),
            true,
            true,
        ),
        case(
            "a second line of this key that does not verify (the first decides)",
            note(&good, &[ours(&good), bad_line.clone()]),
            true,
            true,
        ),
        case(
            "signature base64 with unused bits set",
            note(&good, &[loose]),
            true,
            true,
        ),
        case(
            "100 other keys' lines, then ours (over CHECKPOINT_BYTES_MAX)",
            note(&good, &[hundred[..99].to_vec(), vec![ours(&good)]].concat()),
            false,
            true,
        ),
        // tlog-checkpoint's body rules, which Go's note layer does not read.
        case(
            "size 04",
            note(&text("04"), &[ours(&text("04"))]),
            false,
            true,
        ),
        case(
            "size +4",
            note(&text("+4"), &[ours(&text("+4"))]),
            false,
            true,
        ),
        case(
            "an empty line inside the text",
            note(&blank_inside, &[ours(&blank_inside)]),
            false,
            true,
        ),
        // Malformed or unverified notes: both refuse.
        case(
            "no final newline",
            note(&good, &[ours(&good)]).trim_end().to_owned(),
            false,
            false,
        ),
        case(
            "CRLF line ends",
            note(&crlf, &[ours(&crlf)]).replace('\n', "\r\n"),
            false,
            false,
        ),
        case(
            "a tab in the origin",
            note(
                &good.replacen("x", "\tx", 1),
                &[ours(&good.replacen("x", "\tx", 1))],
            ),
            false,
            false,
        ),
        case(
            "no blank line",
            format!("{good}{}\n", ours(&good)),
            false,
            false,
        ),
        case(
            "this key's line does not verify",
            note(&good, &[bad_line.clone(), ours(&good)]),
            false,
            false,
        ),
        case(
            "only another key's line",
            note(&good, &[theirs(&good)]),
            false,
            false,
        ),
        case(
            "a name with a plus",
            note(
                &good,
                &[signature_line("repoch+issuer", key, &good), ours(&good)],
            ),
            false,
            false,
        ),
        case(
            "an empty name",
            note(
                &good,
                &[
                    format!("\u{2014}  {}", B64.encode(blob(KEY_NAME, key, &good))),
                    ours(&good),
                ],
            ),
            false,
            false,
        ),
        case(
            "a name with a Unicode space",
            note(
                &good,
                &[
                    signature_line("repoch\u{2003}issuer", key, &good),
                    ours(&good),
                ],
            ),
            false,
            false,
        ),
        case(
            "a signature of 4 bytes",
            note(
                &good,
                &[
                    format!("\u{2014} x {}", B64.encode([1u8, 2, 3, 4])),
                    ours(&good),
                ],
            ),
            false,
            false,
        ),
        case(
            "a line without the dash",
            note(&good, &[ours(&good).replacen('\u{2014}', "-", 1)]),
            false,
            false,
        ),
        case("101 signature lines", note(&good, &too_many), false, false),
        // repoch's size bound, at it and one byte over (an extension line pads the text).
        case("exactly 1024 bytes", padded(1024), true, true),
        case("1025 bytes", padded(1025), false, true),
        // The text rule (docs/PROTOCOL.md, "Text"), which Go's note layer applies to C0
        // controls only.
        case(
            "DEL in an extension line",
            with_line("a\u{7f}b"),
            false,
            true,
        ),
        case(
            "a C1 control (NEL) in an extension line",
            with_line("a\u{85}b"),
            false,
            true,
        ),
        case(
            "a right-to-left override in an extension line",
            with_line("a\u{202e}b"),
            false,
            true,
        ),
        case(
            "the Arabic letter mark in an extension line",
            with_line("a\u{61c}b"),
            false,
            true,
        ),
        case(
            "a tag character in an extension line",
            with_line("a\u{e0041}b"),
            false,
            true,
        ),
        case(
            "a right-to-left override in a signature name",
            note(
                &good,
                &[signature_line("x\u{202e}y", &stranger, &good), ours(&good)],
            ),
            false,
            true,
        ),
    ]
}

/// Every case as the rules say (docs/AUDITOR.md, "Checkpoints").
#[test]
fn checkpoint_notes_are_read_as_c2sp_says() {
    use repoch_protocol::checkpoint::{Checkpoint, CheckpointError};
    let key = SigningKey::from_bytes(&[9; 32]);
    let public = PublicKey::from(&key.verifying_key());
    for c in note_cases(&key) {
        // The table itself: repoch never accepts a note Go's note layer refuses.
        assert!(c.go || !c.repoch, "{}", c.what);
        let got = Checkpoint::verify(&c.note, KEY_NAME, &public);
        assert_eq!(got.is_ok(), c.repoch, "{}: {got:?}\n{}", c.what, c.note);
        match got {
            Ok(cp) => {
                assert_eq!(cp.origin, "repoch/epoch-log/x", "{}", c.what);
                assert_eq!(cp.head, Hash([7; 32]), "{}", c.what);
            }
            // A refusal says which: malformed, or no line of the key verifies.
            Err(CheckpointError::Malformed(_)) | Err(CheckpointError::Unverified(_)) => {}
        }
    }
    // The size as written.
    let head = B64.encode([7u8; 32]);
    for (size, want) in [("0", 0), ("4", 4), ("18446744073709551615", u64::MAX)] {
        let t = format!("o\n{size}\n{head}\n");
        let note = format!("{t}\n{}\n", signature_line(KEY_NAME, &key, &t));
        assert_eq!(
            Checkpoint::verify(&note, KEY_NAME, &public).unwrap().size,
            want
        );
    }
    for size in ["18446744073709551616", "-1", "4 ", " 4", "0x4", "", "00"] {
        let t = format!("o\n{size}\n{head}\n");
        let note = format!("{t}\n{}\n", signature_line(KEY_NAME, &key, &t));
        assert_eq!(
            Checkpoint::verify(&note, KEY_NAME, &public),
            Err(CheckpointError::Malformed(if size.is_empty() {
                "an empty line in the text"
            } else {
                "size"
            })),
            "size {size:?}"
        );
    }
}

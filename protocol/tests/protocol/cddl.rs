//! Every structure's canonical encoding is valid against the CDDL in docs/PROTOCOL.md.

use crate::common::samples;

fn spec() -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/PROTOCOL.md"))
        .unwrap();
    let start = doc.find("```cddl\n").expect("PROTOCOL.md has a cddl block") + 8;
    let end = start + doc[start..].find("```").unwrap();
    doc[start..end].to_string()
}

pub fn validate(rule: &str, bytes: &[u8]) -> Result<(), String> {
    // cddl-rs validates against the first rule: put the one under test first.
    let cddl = format!("root = {rule}\n{}", spec());
    cddl::validate_cbor_from_slice(&cddl, bytes, None).map_err(|e| e.to_string())
}

#[test]
fn cddl_accepts_every_sample() {
    for (rule, bytes) in samples() {
        validate(rule, &bytes).unwrap_or_else(|e| panic!("{rule}: {e}"));
    }
}

#[test]
fn cddl_rejects_a_sample_under_the_wrong_rule() {
    // The validator is not vacuous: a grant is not a manifest, a challenge is not a grant.
    let s = samples();
    let grant = &s.iter().find(|(r, _)| *r == "signed-grant").unwrap().1;
    assert!(validate("signed-manifest", grant).is_err());
    let challenge = &s.iter().find(|(r, _)| *r == "challenge").unwrap().1;
    assert!(validate("signed-grant", challenge).is_err());
}

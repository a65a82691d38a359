//! docs/ACCEPTANCE.md maps every acceptance scenario to a test name: those names must stay
//! real, or the matrix would vouch for tests that no longer exist.

use std::path::Path;

/// Every `fn NAME(` in the Rust files directly under `dir`.
fn fns_in(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") {
            let module = p.file_stem().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&p).unwrap();
            for part in text.split("fn ").skip(1) {
                let name: String = part
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                out.push((module.clone(), name));
            }
        }
    }
    out
}

#[test]
fn docs_name_real_tests() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(top.join("docs/ACCEPTANCE.md")).unwrap();
    // Both native test binaries: a trial of tests/tooled keeps its `module::name`.
    let mut native = fns_in(&top.join("tests-native/tests/native"));
    native.extend(fns_in(&top.join("tests-native/tests/tooled")));
    let mut others = fns_in(&top.join("issuer/tests"));
    others.extend(fns_in(&top.join("protocol/tests/protocol")));
    let mut checked = 0;
    let mut missing = Vec::new();
    for (i, tok) in doc.split('`').enumerate() {
        if i % 2 == 0 {
            continue; // outside backticks
        }
        let ident = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        };
        if let Some((module, name)) = tok.split_once("::") {
            if !ident(module) || !(ident(name) || name == "*") {
                continue;
            }
            checked += 1;
            let found = native
                .iter()
                .any(|(m, n)| m == module && (name == "*" || n == name));
            if !found {
                missing.push(tok.to_owned());
            }
        } else if ident(tok) && tok.matches('_').count() >= 3 {
            checked += 1;
            if !others.iter().chain(native.iter()).any(|(_, n)| n == tok) {
                missing.push(tok.to_owned());
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} test names found in docs/ACCEPTANCE.md"
    );
    assert!(
        missing.is_empty(),
        "docs/ACCEPTANCE.md names tests that do not exist: {missing:?}"
    );
}

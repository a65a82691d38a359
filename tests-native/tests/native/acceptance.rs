//! The docs name tests (docs/ACCEPTANCE.md maps every acceptance scenario to one; the threat
//! model, the auditor's guide and the others cite the tests that pin a claim): every name
//! they cite must stay real, or a document would vouch for a test that does not exist.

use std::path::{Path, PathBuf};

/// Every `fn NAME(` in the Rust files directly under `dir`, with the file's stem.
fn fns_in(dir: &Path) -> Vec<(String, String)> {
    fns_of(&rs_files(dir, false))
}

/// Every `fn NAME(` in `files`, with the file's stem.
fn fns_of(files: &[PathBuf]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in files {
        let module = p.file_stem().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(p).unwrap();
        for part in text.split("fn ").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            out.push((module.clone(), name));
        }
    }
    out
}

/// The `.rs` files under `dir`: directly, or in every subdirectory too (never `target`).
fn rs_files(dir: &Path, deep: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd {
        let p = e.unwrap().path();
        if p.is_dir() && deep && p.file_name().is_some_and(|n| n != "target" && n != "fuzz") {
            out.extend(rs_files(&p, true));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

/// Every `.md` file of `docs/`, however deep.
fn docs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(docs(&p));
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The test names `doc` cites that nothing defines: a backticked `module::name` whose
/// module is a Rust file's stem in the workspace (a test module's, or code's:
/// `store::read_epoch_log`) and no file of that stem has that function, or a backticked
/// name of three underscores or more (the way tests are named here) that no function of
/// the workspace has. `all` holds every function with its file's stem. Returns how many
/// names it checked, and the missing ones.
fn missing_in(doc: &str, all: &[(String, String)]) -> (usize, Vec<String>) {
    let mut checked = 0;
    let mut missing = Vec::new();
    for (i, tok) in doc.split('`').enumerate() {
        if i % 2 == 0 {
            continue; // outside backticks
        }
        if let Some((module, name)) = tok.split_once("::") {
            // `repoch_protocol::text` names a crate's module, no file's stem: not checked.
            if !all.iter().any(|(m, _)| m == module) || !(ident(name) || name == "*") {
                continue;
            }
            checked += 1;
            let found = all
                .iter()
                .any(|(m, n)| m == module && (name == "*" || n == name));
            if !found {
                missing.push(tok.to_owned());
            }
        } else if ident(tok) && tok.matches('_').count() >= 3 {
            checked += 1;
            if !all.iter().any(|(_, n)| n == tok) {
                missing.push(tok.to_owned());
            }
        }
    }
    (checked, missing)
}

#[test]
fn docs_name_real_tests() {
    let top = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    // Both native test binaries (a trial of tests/tooled keeps its `module::name`), and
    // every crate's sources and tests.
    let mut all = fns_in(&top.join("tests-native/tests/native"));
    all.extend(fns_in(&top.join("tests-native/tests/tooled")));
    for crate_dir in std::fs::read_dir(&top).unwrap() {
        let d = crate_dir.unwrap().path();
        if d.join("Cargo.toml").is_file() && d != top.join("tests-native") {
            all.extend(fns_of(&rs_files(&d, true)));
        }
    }
    let mut checked = 0;
    let mut missing = Vec::new();
    let files = docs(&top.join("docs"));
    for f in &files {
        let (n, m) = missing_in(&std::fs::read_to_string(f).unwrap(), &all);
        checked += n;
        let name = f.strip_prefix(&top).unwrap().display().to_string();
        missing.extend(m.into_iter().map(|t| format!("{name}: {t}")));
    }
    assert!(
        files.iter().any(|f| f.ends_with("docs/THREAT-MODEL.md")) && checked > 50,
        "only {checked} test names found in {} files of docs/",
        files.len()
    );
    assert!(
        missing.is_empty(),
        "docs/ names tests that do not exist: {missing:#?}"
    );
}

/// The checker itself: a cited name that no test defines is reported, in a document other
/// than ACCEPTANCE.md as well, by either form.
#[test]
fn a_cited_test_that_does_not_exist_is_reported() {
    let all = vec![
        ("units".to_owned(), "units_masked_active".to_owned()),
        (
            "observe".to_owned(),
            "an_answer_without_one_block".to_owned(),
        ),
    ];
    let doc = "pinned by `units::units_masked_gone`, `an_answer_without_one_block`, \
               `no_such_test_of_ours`, `repoch_protocol::text`, `units::*`";
    let (checked, missing) = missing_in(doc, &all);
    assert_eq!(checked, 4);
    assert_eq!(
        missing,
        ["units::units_masked_gone", "no_such_test_of_ours"]
    );
}

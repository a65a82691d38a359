//! The suite's own rules, checked on its source: a test that needs root is listed as
//! ignored when it cannot run, never reported as passed (README.md, "Test it"), in both
//! test binaries (tests/native, and tests/tooled with its own harness).

use std::path::Path;

/// A test function's name, attribute lines and body.
type TestFn = (String, Vec<String>, String);

/// A line that calls the macro (as a statement, the only way the suite uses it).
fn calls_require_root(line: &str) -> bool {
    line.trim() == "require_root!();"
}

/// Every `#[test]` function of `src` (rustfmt layout: attributes, then `fn`, then a body
/// closed by `}` at the attribute's indentation): (name, attribute lines, body), and every
/// line that calls `require_root!` outside any test body.
fn tests_of(src: &str) -> (Vec<TestFn>, Vec<usize>) {
    let lines: Vec<&str> = src.lines().collect();
    let mut tests = Vec::new();
    let mut in_test = vec![false; lines.len()];
    for (k, l) in lines.iter().enumerate() {
        if l.trim() != "#[test]" {
            continue;
        }
        let indent = &l[..l.len() - l.trim_start().len()];
        let close = format!("{indent}}}");
        let mut attrs = Vec::new();
        let mut m = k + 1;
        while lines[m].trim_start().starts_with("#[") {
            attrs.push(lines[m].trim().to_owned());
            m += 1;
        }
        let name = lines[m]
            .trim()
            .trim_start_matches("fn ")
            .split('(')
            .next()
            .unwrap()
            .to_owned();
        let end = (m..lines.len())
            .find(|&j| lines[j] == close)
            .unwrap_or_else(|| panic!("{name}: no closing brace at its indentation"));
        for f in in_test.iter_mut().take(end + 1).skip(k) {
            *f = true;
        }
        tests.push((name, attrs, lines[m..=end].join("\n")));
    }
    let stray = lines
        .iter()
        .enumerate()
        .filter(|(k, l)| !in_test[*k] && calls_require_root(l))
        .map(|(k, _)| k + 1)
        .collect();
    (tests, stray)
}

#[test]
fn every_test_that_needs_root_is_marked_ignored() {
    // A test that calls `require_root!` must carry `#[ignore = "needs root"]`: as another
    // user `cargo test` then lists it as ignored, and `--include-ignored` runs it (as
    // another user it fails, naming root). Without the attribute a plain run would fail as
    // a user; with an early return instead it would read as passed without having run.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/native");
    let mut files = Vec::new();
    repoch_tests_native::rust_sources(&dir, &mut files);
    files.sort();
    let mut missing = Vec::new();
    let mut stray = Vec::new();
    let mut marked = 0;
    for f in &files {
        let src = std::fs::read_to_string(f).unwrap();
        let (tests, outside) = tests_of(&src);
        for (name, attrs, body) in tests {
            if !body.lines().any(calls_require_root) {
                continue;
            }
            if attrs.iter().any(|a| a == "#[ignore = \"needs root\"]") {
                marked += 1;
            } else {
                missing.push(format!("{}: {name}", f.display()));
            }
        }
        stray.extend(outside.iter().map(|l| format!("{}:{l}", f.display())));
    }
    assert!(
        missing.is_empty(),
        "tests that call require_root! without #[ignore = \"needs root\"]:\n{}",
        missing.join("\n")
    );
    assert!(
        stray.is_empty(),
        "require_root! called outside a test's body (its callers cannot be checked): {stray:?}"
    );
    // The scan found the root tests at all (a layout it cannot parse would find none).
    assert!(marked > 100, "only {marked} root tests found");
}

/// Every top-level `pub(crate) fn` of `src` (rustfmt layout: `fn` at column 0, closed by
/// `}` at column 0): (name, body), and every line that calls `require_root!` outside them.
fn trial_fns_of(src: &str) -> (Vec<(String, String)>, Vec<usize>) {
    let lines: Vec<&str> = src.lines().collect();
    let mut fns = Vec::new();
    let mut in_fn = vec![false; lines.len()];
    for (k, l) in lines.iter().enumerate() {
        let Some(rest) = l.strip_prefix("pub(crate) fn ") else {
            continue;
        };
        let name = rest.split('(').next().unwrap().to_owned();
        let end = (k..lines.len())
            .find(|&j| lines[j] == "}")
            .unwrap_or_else(|| panic!("{name}: no closing brace at column 0"));
        for f in in_fn.iter_mut().take(end + 1).skip(k) {
            *f = true;
        }
        fns.push((name, lines[k..=end].join("\n")));
    }
    let stray = lines
        .iter()
        .enumerate()
        .filter(|(k, l)| !in_fn[*k] && calls_require_root(l))
        .map(|(k, _)| k + 1)
        .collect();
    (fns, stray)
}

#[test]
fn every_tooled_trial_that_needs_root_is_declared_root() {
    // tests/tooled has its own harness: a trial is ignored unless asked for when it is
    // declared `trial!(root, module::name, …)` in its main.rs. A function there that calls
    // `require_root!` must be declared so (declared `plain`, or not at all, it would fail
    // as another user, or never run).
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tooled");
    let main: String = std::fs::read_to_string(dir.join("main.rs"))
        .unwrap()
        .split_whitespace()
        .collect();
    let mut files = Vec::new();
    repoch_tests_native::rust_sources(&dir, &mut files);
    files.sort();
    let mut missing = Vec::new();
    let mut stray = Vec::new();
    let mut marked = 0;
    for f in files.iter().filter(|f| !f.ends_with("main.rs")) {
        let module = f.file_stem().unwrap().to_string_lossy();
        let (fns, outside) = trial_fns_of(&std::fs::read_to_string(f).unwrap());
        for (name, body) in fns {
            if !body.lines().any(calls_require_root) {
                continue;
            }
            if main.contains(&format!("trial!(root,{module}::{name},")) {
                marked += 1;
            } else {
                missing.push(format!("{module}::{name}"));
            }
        }
        stray.extend(outside.iter().map(|l| format!("{}:{l}", f.display())));
    }
    assert!(
        missing.is_empty(),
        "functions in tests/tooled that call require_root! without trial!(root, …) in its \
         main.rs:\n{}",
        missing.join("\n")
    );
    assert!(
        stray.is_empty(),
        "require_root! called outside a trial's body in tests/tooled: {stray:?}"
    );
    assert!(marked > 30, "only {marked} root trials found");
}

/// A copy of an executable runs right after it is made while other threads fork and exec
/// at the same time, as the suite's tests do in parallel: `copy_executable` leaves no
/// descriptor open for writing that a fork could carry (with `std::fs::copy` the exec
/// fails `ETXTBSY`, "Text file busy", within a few hundred copies).
#[test]
fn a_copied_executable_runs_at_once_while_other_threads_fork() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const COPIES: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let stop = AtomicBool::new(false);
    let busy = std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::process::Command::new("true").status();
                }
            });
        }
        let mut busy = Vec::new();
        for k in 0..COPIES {
            let exe = dir.path().join(format!("true-{k}"));
            repoch_tests_native::copy_executable(Path::new("/bin/true"), &exe, "");
            if let Err(e) = std::process::Command::new(&exe).status() {
                busy.push((k, e));
            }
        }
        stop.store(true, Ordering::Relaxed);
        busy
    });
    assert!(
        busy.is_empty(),
        "{} of {COPIES} copies failed to run: {busy:?}",
        busy.len()
    );
}

/// Memory the test process holds while it measures another program's peak.
const TEST_HOLDS_KIB: usize = 256 * 1024;

#[test]
fn a_measured_peak_is_the_programs_not_the_tests_that_started_it() {
    // Proves: `run_with_peak` reports the program's own peak resident set. A child's
    // `ru_maxrss` also holds the peak of the address space it was forked from (exec records
    // it), so a test process running trials beside each other (hundreds of MiB) once read
    // as the audit's peak: 239,052 KiB for an audit of 22 MiB.
    let mut held = vec![0u8; TEST_HOLDS_KIB * 1024];
    for page in held.chunks_mut(4096) {
        page[0] = 1;
    }
    let (r, peak) = repoch_tests_native::run_with_peak(std::process::Command::new("true"));
    assert_eq!(r.code.0, 0);
    assert!(
        peak < (TEST_HOLDS_KIB / 4) as u64,
        "`true` peaked at {peak} KiB while the test held {TEST_HOLDS_KIB} KiB"
    );
    std::hint::black_box(&held);
}

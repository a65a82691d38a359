//! Shared harness for the native tests: a per-test sandbox (its own temporary directory,
//! state root, fixture files, keys and ids) and helpers to run the real binaries.
#![deny(unsafe_code)]

pub mod audit_logs;
pub mod bench;
pub mod sys;

mod cgroup;
mod container;
mod daemon;
mod discovered;
mod disk;
mod engines;
mod etcd;
mod netns;
mod process;
mod run;
mod sandbox;

pub use cgroup::*;
pub use container::*;
pub use daemon::*;
pub use discovered::*;
pub use disk::*;
pub use engines::*;
pub use etcd::*;
pub use netns::*;
pub use process::*;
pub use run::*;
pub use sandbox::*;

use std::path::PathBuf;

pub use repoch_protocol::Outcome;

/// Names the directory of the binaries to drive instead of the one this executable was
/// built into (the benchmarks: docs/BENCHMARKS.md).
pub const BIN_DIR_ENV: &str = "REPOCH_BIN_DIR";

/// The directory holding the workspace's built binaries: `$REPOCH_BIN_DIR` when set, else
/// the profile directory this executable was built into (`target/debug` for the tests,
/// `target/release` for `cargo bench`).
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(BIN_DIR_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    let dir = if deps.ends_with("deps") {
        deps.parent().unwrap().to_path_buf()
    } else {
        deps.to_path_buf()
    };
    dir
}

pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} is not built: run `cargo test --workspace` (it builds every binary)",
        p.display()
    );
    p
}

pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The first statement of every test that needs root. Such a test is also marked
/// `#[ignore = "needs root"]`, so a plain `cargo test` lists it as ignored (never as
/// passed); `cargo test --workspace -- --include-ignored` runs it, and then, as another
/// user, it fails here rather than passing without having run. The `root_tests_are_ignored`
/// test holds every test that calls this to the attribute.
#[macro_export]
macro_rules! require_root {
    () => {
        assert!(
            $crate::is_root(),
            "needs root: run as root, or run without --include-ignored to skip it"
        );
    };
}

/// Source files a test of the tree reads (a bound on the walk, far above the tree's size).
pub const SOURCE_FILES_MAX: usize = 1000;

/// Appends every `.rs` file under `dir` to `out` (the suite's own rules and the
/// architecture's read the sources: `tests/native/{hygiene,architecture}.rs`).
pub fn rust_sources(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
        assert!(
            out.len() <= SOURCE_FILES_MAX,
            "more than {SOURCE_FILES_MAX} files"
        );
    }
}

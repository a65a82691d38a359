//! The invariants of docs/ARCHITECTURE.md ("Invariants"), each kept by one test here: the
//! crate graph as `cargo tree` prints it, and what the production sources may name. A
//! change that breaks one fails its test; none of them needs root.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .into()
}

/// The packages `package` depends on to build and run (normal dependencies, transitively,
/// for this host): `cargo tree -e normal`'s names.
fn normal_dependencies(package: &str, pruned: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut c = Command::new(cargo);
    c.current_dir(repo())
        .args(["tree", "-e", "normal", "--prefix", "none", "-p", package]);
    for p in pruned {
        c.args(["--prune", p]);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut names: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Fails naming every package of `forbidden` that `package` depends on.
fn assert_without(package: &str, forbidden: &[&str]) {
    assert_without_pruning(package, &[], forbidden);
}

/// The same, not counting what `package` reaches only through `pruned` (`cargo tree
/// --prune`).
fn assert_without_pruning(package: &str, pruned: &[&str], forbidden: &[&str]) {
    let deps = normal_dependencies(package, pruned);
    assert!(deps.iter().any(|d| d == package), "{package}: {deps:?}");
    let found: Vec<&&str> = forbidden
        .iter()
        .filter(|f| deps.iter().any(|d| d == *f))
        .collect();
    assert!(found.is_empty(), "{package} depends on {found:?}");
}

/// The protocol is pure: what auditors and supervisors verify with links no OS crate, no
/// runtime, and none of repoch's other crates.
#[test]
fn the_protocol_links_no_other_repoch_crate_and_no_runtime() {
    assert_without(
        "repoch-protocol",
        &[
            "repoch-sys",
            "repoch-registry",
            "repoch-issuer",
            "repoch-daemon",
            "repoch-cli",
            "repoch-consumer",
            "tokio",
            "rustix",
            "nix",
        ],
    );
}

/// `repoch-sys` receives no fact from above it: the protocol's types only.
#[test]
fn sys_depends_on_the_protocol_alone() {
    assert_without(
        "repoch-sys",
        &[
            "repoch-registry",
            "repoch-issuer",
            "repoch-daemon",
            "repoch-cli",
            "repoch-consumer",
            "tokio",
        ],
    );
}

/// The issuance is synchronous: one thread of control, driven by the daemon. Its only
/// paths to a runtime are the registry client's and the engines' client's blocking
/// facades.
#[test]
fn the_issuer_is_synchronous_and_knows_no_daemon() {
    assert_without(
        "repoch-issuer",
        &["repoch-daemon", "repoch-cli", "repoch-consumer"],
    );
    assert_without_pruning(
        "repoch-issuer",
        &["repoch-registry", "repoch-engines"],
        &["tokio", "tonic", "hyper"],
    );
}

/// The CLI runs no async runtime of its own and does not link the daemon; it reaches the
/// fleet registry and the container engines through the clients' blocking facades alone.
#[test]
fn the_cli_has_no_runtime_and_no_daemon() {
    assert_without("repoch-cli", &["repoch-daemon", "repoch-consumer"]);
    assert_without_pruning(
        "repoch-cli",
        &["repoch-registry", "repoch-engines"],
        &["tokio", "tonic", "hyper"],
    );
}

/// The registry client is a client of etcd alone: it names no repoch crate (what it
/// stores is the protocol's, encoded by its callers).
#[test]
fn the_registry_client_knows_no_repoch_crate() {
    assert_without(
        "repoch-registry",
        &[
            "repoch-protocol",
            "repoch-sys",
            "repoch-issuer",
            "repoch-daemon",
            "repoch-cli",
            "repoch-consumer",
        ],
    );
}

/// Only the registry client speaks to the network (gRPC to etcd), and only the engines'
/// client to a container engine (HTTP, or containerd's gRPC, over the engine's unix
/// socket, through a connector that opens nothing else).
#[test]
fn only_the_registry_client_reaches_the_network() {
    let found = offenders(
        &[
            "TcpStream",
            "connect_lazy",
            ".connect()",
            "Endpoint::from_shared",
        ],
        &["registry/src/"],
    );
    assert!(
        found.is_empty(),
        "network outside repoch-registry:\n{}",
        found.join("\n")
    );
    let found = offenders(
        &["hyper::", "hyper_util::", "tonic::"],
        &["registry/src/", "engines/src/"],
    );
    assert!(
        found.is_empty(),
        "HTTP or gRPC outside repoch-registry and repoch-engines:\n{}",
        found.join("\n")
    );
}

/// The engines' client is a client of the engines' API alone: it names no repoch crate
/// (what a container's state means is the issuer's to judge).
#[test]
fn the_engines_client_knows_no_repoch_crate() {
    assert_without(
        "repoch-engines",
        &[
            "repoch-protocol",
            "repoch-sys",
            "repoch-registry",
            "repoch-issuer",
            "repoch-daemon",
            "repoch-cli",
            "repoch-consumer",
        ],
    );
}

/// The consumer verifies with the protocol and reads files with `repoch-sys`: it never
/// links the issuer (it could not then be told apart from the side it checks).
#[test]
fn the_consumer_never_links_the_issuer() {
    assert_without(
        "repoch-consumer",
        &[
            "repoch-issuer",
            "repoch-registry",
            "repoch-daemon",
            "repoch-cli",
            "tokio",
        ],
    );
}

/// Production sources: every crate's `src/` but the tests' fixtures.
fn production_sources() -> Vec<(String, String)> {
    let mut files = Vec::new();
    for krate in [
        "protocol", "sys", "registry", "engines", "issuer", "daemon", "cli", "consumer",
    ] {
        repoch_tests_native::rust_sources(&repo().join(krate).join("src"), &mut files);
    }
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(repo()).unwrap().display().to_string();
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The code of a source line: what precedes a `//` comment (a comment may name anything).
fn code(line: &str) -> &str {
    let t = line.trim_start();
    if t.starts_with("//") {
        return "";
    }
    line
}

/// Lines of production sources outside `allowed` (path prefixes) that contain any of
/// `needles` in code: (file:line, line).
fn offenders(needles: &[&str], allowed: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, text) in production_sources() {
        if allowed.iter().any(|a| rel.starts_with(a)) {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let c = code(line);
            if needles.iter().any(|x| c.contains(x)) {
                out.push(format!("{rel}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    out
}

/// Only `repoch-sys` reads procfs or cgroupfs, opens netlink (the process connector
/// included), takes a pidfd, asks `statx`
/// or systemd, or touches an inode flag.
#[test]
fn only_sys_touches_the_kernels_views() {
    let found = offenders(
        &[
            "\"/proc",
            "/sys/fs/cgroup",
            "\"cgroup.procs\"",
            "\"cgroup.events\"",
            "\"cgroup.kill\"",
            "\"cgroup.freeze\"",
            "NETLINK_",
            "AddressFamily::NETLINK",
            "netlink::CONNECTOR",
            "CN_IDX_PROC",
            "process::pidfd_open",
            "fs::statx(",
            "ioctl_getflags",
            "ioctl_setflags",
            "\"systemctl\"",
        ],
        &["sys/src/"],
    );
    assert!(
        found.is_empty(),
        "outside repoch-sys:\n{}",
        found.join("\n")
    );
}

/// Only repochd serves a socket (the admin and grant sockets), and only `repoch-sys` binds
/// the listener endpoints repochd holds for a recovery; the CLI and the consumer connect.
#[test]
fn only_the_daemon_and_sys_listen() {
    let found = offenders(
        &[
            "UnixListener",
            "TcpListener",
            "UdpSocket",
            "net::bind",
            "::listen(",
        ],
        &["daemon/src/", "sys/src/"],
    );
    assert!(
        found.is_empty(),
        "a listener outside repochd:\n{}",
        found.join("\n")
    );
}

/// The only async code is repochd's, the registry client's and the engines' client's
/// (each behind its blocking facade).
#[test]
fn only_the_daemon_and_the_registry_client_are_async() {
    let found = offenders(
        &["async fn", "tokio::", ".await"],
        &["daemon/src/", "registry/src/", "engines/src/"],
    );
    assert!(
        found.is_empty(),
        "async outside repochd:\n{}",
        found.join("\n")
    );
}

/// `repoch audit`'s verification (`cli/src/audit.rs`) uses the protocol and the bounded
/// reader alone: it names no issuer item (an auditor's verdict cannot depend on the code it
/// audits). The command around it (`cmd/audit.rs`) finds the issuer's key where enrollment
/// put it and reports refusals as every command does.
#[test]
fn the_audit_uses_the_protocol_alone() {
    let found: Vec<String> = production_sources()
        .into_iter()
        .filter(|(rel, _)| rel == "cli/src/audit.rs")
        .flat_map(|(rel, text)| {
            text.lines()
                .enumerate()
                .filter(|(_, l)| code(l).contains("repoch_issuer"))
                .map(|(n, l)| format!("{rel}:{}: {}", n + 1, l.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        found.is_empty(),
        "the audit names the issuer:\n{}",
        found.join("\n")
    );
}

/// `unsafe` is written in one place of production code: `sys/src/kernel.rs`, the calls no
/// crate offers safely.
#[test]
fn unsafe_is_written_once() {
    let found = offenders(&["unsafe {", "unsafe fn", "allow(unsafe_code)"], &[]);
    assert_eq!(
        found
            .iter()
            .filter(|l| l.starts_with("sys/src/kernel.rs:"))
            .count(),
        found.len(),
        "unsafe outside sys/src/kernel.rs:\n{}",
        found.join("\n")
    );
}

/// No circle among a crate's modules: no module names (`crate::m`) one that, directly or
/// through others, names it back. A newcomer reads the modules in an order where each
/// uses only what came before (`daemon/src/admin.rs` and `server.rs` once imported each
/// other; what both need is `frames.rs`'s).
#[test]
fn no_circle_among_a_crates_modules() {
    use std::collections::{BTreeMap, BTreeSet};
    // crate -> module -> the modules of the same crate it names.
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (rel, text) in production_sources() {
        let mut parts = rel.split('/');
        let (krate, _src, top) = (parts.next().unwrap(), parts.next(), parts.next().unwrap());
        let module = top.trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" || module == "bin" {
            continue;
        }
        let names = graphs
            .entry(krate.to_owned())
            .or_default()
            .entry(module.clone())
            .or_default();
        // Production code only: a file's test module may reach anywhere.
        let production = text.split("#[cfg(test)]").next().unwrap_or_default();
        for line in production.lines().map(code) {
            for (i, _) in line.match_indices("crate::") {
                let name: String = line[i + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    names.insert(name);
                }
            }
        }
    }
    let mut circles = Vec::new();
    for (krate, graph) in &graphs {
        for start in graph.keys() {
            // Every module reachable from `start`; a circle when `start` is among them.
            let mut seen = BTreeSet::new();
            let mut todo: Vec<&String> = graph[start].iter().collect();
            while let Some(m) = todo.pop() {
                if seen.insert(m.clone()) {
                    todo.extend(graph.get(m).into_iter().flatten());
                }
            }
            if seen.contains(start) {
                circles.push(format!("{krate}: {start}"));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "modules on a circle of imports:\n{}",
        circles.join("\n")
    );
}

//! `repoch discover` and enrollment's cross-check against old roots a container engine
//! starts: a container with `--restart=always`, on a Docker and a podman of the test's own
//! (tests-native/src/engines.rs). Discovered from its process, refused at enrollment while
//! a manifest leaves it out, and its draft, enrolled as printed, recovers once the old root
//! is contained as docs/OPERATOR.md says.

use std::process::Stdio;

use repoch_tests_native::*;

pub(crate) fn a_docker_container_that_restarts_is_discovered_and_refused_at_enrollment_until_named()
{
    // Proves: see `assert_a_restarting_container_is_discovered`, with Docker.
    require_root!();
    let sb = Sandbox::new();
    let d = Dockerd::start(&sb.path("docker"));
    assert_a_restarting_container_is_discovered(&d);
}

pub(crate) fn a_podman_container_that_restarts_is_discovered_and_refused_at_enrollment_until_named()
{
    // Proves: see `assert_a_restarting_container_is_discovered`, with podman.
    require_root!();
    let sb = Sandbox::new();
    let p = Podman::start(&sb.path("podman"));
    assert_a_restarting_container_is_discovered(&p);
}

/// The old root is a container with `--restart=always`. `repoch discover --pid` from its
/// process names the container by engine and full id (from the cgroup its engine made)
/// and its runtime's shim as the starter. A manifest naming its cgroup only is refused
/// while it runs (exit 64), naming `containment.containers` and the waiver key (before
/// containers were cross-checked: enrolled). The draft, with the engine's socket and what
/// no process shows, enrolls while it runs (the container pinned to its full id); once
/// contained (`--restart=no` and stopped, or removed), the recovery is granted with a real consumer.
fn assert_a_restarting_container_is_discovered(e: &impl Engine) {
    e.import_busybox();
    let full = e.run_sleeping("old-root", "always");
    let pid = e.inspect("old-root")["State"]["Pid"].to_string();
    let s = Sandbox::new();
    let r = s.repoch(&["--json", "discover", "--pid", &pid]);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    let (found, draft) = (
        &r.json()["found"],
        r.json()["draft"].as_str().unwrap().to_owned(),
    );
    let spelled = format!("{}:{full}", e.name());
    assert_eq!(found["containers"][0]["value"], spelled.as_str(), "{found}");
    let starter = found["starters"][0]["why"].as_str().unwrap_or_default();
    assert!(starter.contains("shim"), "{found}");
    let cgroup = found["cgroups"][0]["value"].as_str().unwrap().to_owned();

    // Left out: refused while it runs, naming the line and the waiver.
    let engines = format!("[containment.engines]\n{}\n", e.engines_toml());
    let p = s.path("manifest.toml");
    std::fs::write(
        &p,
        s.manifest(&format!(
            "[containment]\ncgroups = [\"{cgroup}\"]\n{engines}"
        )),
    )
    .unwrap();
    let r = s.enroll_manifest(&p);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    let said = r.json()["message"].as_str().unwrap().to_owned();
    assert!(
        said.contains("containment.containers")
            && said.contains(&format!("[waive] \"container:{spelled}\"")),
        "{said}"
    );

    // The draft as printed, completed: enrolls while the old root runs, pinned.
    std::fs::write(&p, completed(&s, &draft, &engines)).unwrap();
    let r = s.enroll_manifest(&p);
    assert_eq!(
        r.code,
        Outcome::Success,
        "{}{}\n{draft}",
        r.stdout,
        r.stderr
    );
    let v = r.json();
    assert_eq!(v["cross_check"]["ran"], true, "{v}");
    assert_eq!(v["containers"][0]["pinned"], full.as_str(), "{v}");
    let id = v["deployment"].as_str().unwrap().to_owned();

    // Contained as OPERATOR.md says (podman 4.3 cannot change a policy: removed), then
    // recovered.
    if e.name() == "podman" {
        e.ok(&["rm", "-f", "-t", "0", "old-root"]);
    } else {
        e.ok(&["update", "--restart=no", "old-root"]);
        e.ok(&["stop", "-t", "1", "old-root"]);
    }
    let _d = s.daemon();
    let consumer = s
        .consumer(&id[..8], "consumer.key", "grant.cbor", &[])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let r = run(s.recover(&id, 20, &[]));
    assert_eq!(r.code, Outcome::Success, "{}\n{draft}", r.stdout);
    let c = consumer.wait_with_output().unwrap();
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stdout));
}

/// `draft` with what no process shows, taken from the sandbox's own manifest (its label,
/// stores, READY and, when the draft names none, fences before; its `[journal]` and
/// `[consumer]` after), and `engines` (the `[containment.engines]` table) after the
/// draft's `[containment]`.
fn completed(s: &Sandbox, draft: &str, engines: &str) -> String {
    let own = s.manifest("");
    let (top, tables) = own.split_at(own.find("[journal]").unwrap());
    // A container that holds no lock has no fence in its draft: the deployment's own is
    // kept.
    let drafted = draft.contains("\nfences = [");
    let top: String = top
        .lines()
        .filter(|l| !(drafted && l.starts_with("fences")))
        .map(|l| format!("{l}\n"))
        .collect();
    format!("{top}{draft}\n{engines}\n{tables}")
}

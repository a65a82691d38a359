//! `repoch discover` against real old roots: processes in a cgroup of the test's own
//! holding a lock and a listener, a loop in a shell on a terminal, a user namespace made by
//! another user, a cron line; the draft enrolled as printed and recovered.

use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Stdio};

use repoch_tests_native::*;

/// `exe args…` started in cgroup `cg` (a shell moves itself there, then execs it).
fn in_cgroup(cg: &Cgroup, exe: &std::path::Path, args: &[&str]) -> Proc {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec \"$0\" \"$@\"",
            cg.path().display()
        ))
        .arg(exe)
        .args(args)
        .stderr(Stdio::null());
    spawn_ready(c)
}

#[test]
#[ignore = "needs root"]
fn an_old_root_in_its_cgroup_with_a_lock_and_a_sidecars_listener_is_discovered_and_its_draft_recovers(
) {
    // The old root: its own program (a copy of the helper) holding the deployment's lock
    // and a second one, and a sidecar of the same program holding a unix listener, all in
    // a cgroup of their own. Discovered from the cgroup: the cgroup, the executable, the
    // listener as a manifest spells it, both locks as fence candidates. The draft (both
    // fences), completed with what
    // no process shows (label, stores, READY, journal, consumer), enrolls once the old
    // root is contained, and recovers with a real consumer.
    require_root!();
    let s = Sandbox::new();
    let cg = Cgroup::new(&format!("repoch-discover-{}", s.tag));
    let exe = own_copy_of_the_helper(&s);
    let lock = s.srv.join("lock");
    let sock = s.srv.join("old-root.sock");
    // A second lock the old root holds: a second fence candidate.
    let lock2 = s.srv.join("lock2");
    std::fs::write(&lock2, "").unwrap();
    std::fs::set_permissions(&lock2, std::fs::Permissions::from_mode(0o600)).unwrap();
    let holder = in_cgroup(&cg, &exe, &["flock", lock.to_str().unwrap()]);
    let sidecar = in_cgroup(&cg, &exe, &["listen-unix", sock.to_str().unwrap()]);
    let holder2 = in_cgroup(&cg, &exe, &["flock", lock2.to_str().unwrap()]);
    let (found, draft) = discovered(&s, &["--cgroup", &cg.rel]);
    assert_eq!(
        found_values(&found, "cgroups"),
        std::slice::from_ref(&cg.rel)
    );
    assert_eq!(
        found_values(&found, "executables"),
        [exe.display().to_string()]
    );
    assert_eq!(
        found_values(&found, "listeners"),
        [format!("unix:{}", sock.display())]
    );
    let mut locks = found_values(&found, "locks");
    locks.sort();
    assert_eq!(
        locks,
        [lock.display().to_string(), lock2.display().to_string()]
    );
    let first = found["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["value"] == lock.display().to_string())
        .unwrap();
    let why = first["why"].as_str().unwrap();
    assert!(why.starts_with("FLOCK WRITE"), "{why}");
    assert_eq!(first["pids"], serde_json::json!([holder.pid()]));
    assert_eq!(
        found["listeners"][0]["pids"],
        serde_json::json!([sidecar.pid()])
    );
    // Contained as OPERATOR.md says: nothing of it runs any more.
    drop((holder, sidecar, holder2));
    cg.kill_all();
    let _ = std::fs::remove_file(&sock);
    let id = s.enroll_with(&completed_draft(&s, &draft, ""));
    recovers(&s, &id, &[], &draft);
}

#[test]
#[ignore = "needs root"]
fn a_loop_in_a_shell_on_a_terminal_is_named_as_its_starter() {
    // The old root is restarted by a shell loop run on a terminal (`script` gives it a
    // pty): discovered from the old root's own process, its starter is that shell, on a
    // terminal, which starts it again.
    require_root!();
    let s = Sandbox::new();
    let exe = own_copy_of_the_helper(&s);
    let mut term = Command::new("script")
        .args([
            "-qfc",
            &format!("while :; do {} sleep; done", exe.display()),
            "/dev/null",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let exe_name = exe.display().to_string();
    crate::hostile::wait_until("the loop to run the old root", || {
        !pids_running(&exe_name).is_empty()
    });
    let pid = pids_running(&exe_name)[0];
    let (found, draft) = discovered(&s, &["--pid", &pid.to_string()]);
    // The loop first (the old root's parent), then what it ran.
    if let Some(shell) = repoch_sys::procfs::parent(pid) {
        kill_pid(shell);
    }
    let _ = term.kill();
    let _ = term.wait();
    for p in pids_running(&exe_name) {
        kill_pid(p);
    }
    let starters = found["starters"].as_array().unwrap();
    assert_eq!(starters.len(), 1, "{found}");
    let why = starters[0]["why"].as_str().unwrap();
    assert!(
        why.starts_with("a shell (") && why.contains("on a terminal"),
        "{why}\n{draft}"
    );
    assert!(
        draft.contains("What started the old root's processes"),
        "{draft}"
    );
}

/// The pids whose executable is `exe`.
fn pids_running(exe: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        if std::fs::read_link(e.path().join("exe")).is_ok_and(|p| p.to_string_lossy() == exe) {
            out.push(pid);
        }
    }
    out
}

#[test]
#[ignore = "needs root"]
fn a_user_namespace_another_uid_made_names_that_uid_and_a_cron_line_is_found() {
    // The old root run by uid 65534 in a user namespace of its own (root inside it): the
    // uid that owns the namespace is found with why. A crontab line that runs its
    // executable is found (a crontab of a mount namespace of the test's own: a tmpfs over
    // /var/spool), and enrolling while it runs with the line left out is refused, naming
    // its waiver.
    require_root!();
    let s = Sandbox::new();
    let exe = own_copy_of_the_helper(&s);
    let lockable = s.dir.path().join("nobody.lock");
    std::fs::write(&lockable, "").unwrap();
    std::fs::set_permissions(&lockable, std::fs::Permissions::from_mode(0o666)).unwrap();
    let old = spawn_ready({
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            "65534",
            "--regid",
            "65534",
            "--clear-groups",
            "unshare",
            "-Ur",
        ])
        .arg(&exe)
        .args(["flock", lockable.to_str().unwrap()]);
        c
    });
    let pid = old.pid().to_string();
    let script = format!(
        "mount -t tmpfs repoch-test /var/spool && mkdir -p /var/spool/cron/crontabs && \
         echo '* * * * * {exe} --once' > /var/spool/cron/crontabs/root && \
         \"$0\" --json discover --pid {pid} > {found} && \
         exec \"$0\" --json enroll {manifest}",
        exe = exe.display(),
        found = s.path("found.json").display(),
        manifest = s.path("manifest.toml").display(),
    );
    // A manifest naming the executable and the namespace's owner, waiving its lock and
    // its starter (this test): the cron line is left out.
    let me = std::process::id();
    let program = std::env::current_exe().unwrap();
    let program = program.file_name().unwrap().to_string_lossy().into_owned();
    std::fs::write(
        s.path("manifest.toml"),
        s.manifest(&format!(
            "[containment]\nexecutables = [\"{}\"]\nold_root_uids = [65534]\n\
             [waive]\n\"lock:{}\" = \"the test's\"\n\"starter:{me} {program}\" = \"the test\"\n",
            exe.display(),
            lockable.display()
        )),
    )
    .unwrap();
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .arg(bin("repoch"))
        .env("REPOCH_ROOT", &s.root)
        .output()
        .unwrap();
    // Enrolling while it runs is refused, naming the cron line's waiver.
    let enrolled = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(64), "{enrolled}");
    assert!(
        enrolled.contains("[waive] \\\"scheduled:/var/spool/cron/crontabs/root:1\\\""),
        "{enrolled}"
    );
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.path("found.json")).unwrap()).unwrap();
    let found = &v["found"];
    let uids = found["uids"].as_array().unwrap();
    let owner = uids
        .iter()
        .find(|u| u["value"] == "65534")
        .unwrap_or_else(|| panic!("{found}"));
    assert!(
        owner["why"].as_str().unwrap().contains("user namespace"),
        "{owner}"
    );
    let scheduled = found_values(found, "scheduled");
    assert_eq!(scheduled, ["/var/spool/cron/crontabs/root:1"], "{found}");
}

#[test]
#[ignore = "needs root"]
fn enrolling_while_the_old_root_runs_refuses_what_the_manifest_leaves_out_until_named_or_waived() {
    // The old root runs in its cgroup: its own program holding the deployment's fence,
    // and a sidecar of it holding a unix listener. A manifest naming only the cgroup is
    // refused naming the listener (the line to add, the waiver to write); with the
    // listener waived, refused naming the old root's starter (this test); with both
    // waived, each with a reason, it enrolls, the waivers kept in the signed manifest.
    // Nothing is created by a refused enrollment.
    require_root!();
    let s = Sandbox::new();
    let cg = Cgroup::new(&format!("repoch-crosscheck-{}", s.tag));
    let exe = own_copy_of_the_helper(&s);
    let sock = s.srv.join("old-root.sock");
    let _holder = in_cgroup(&cg, &exe, &["flock", s.srv.join("lock").to_str().unwrap()]);
    let _sidecar = in_cgroup(&cg, &exe, &["listen-unix", sock.to_str().unwrap()]);
    let enroll = |extra: &str| {
        let p = s.path("manifest.toml");
        std::fs::write(&p, s.manifest(extra)).unwrap();
        s.enroll_manifest(&p)
    };
    let only_cgroup = format!("[containment]\ncgroups = [\"{}\"]\n", cg.rel);
    // Its executable runs inside the named cgroup only: the cgroup holds it. Its listener
    // is named nowhere.
    let r = enroll(&only_cgroup);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    let said = r.json()["message"].as_str().unwrap().to_owned();
    let listener = format!("listener:unix:{}", sock.display());
    assert!(
        said.contains("containment.listeners") && said.contains(&format!("[waive] \"{listener}\"")),
        "{said}"
    );
    assert!(
        !s.srv.join("journal").exists(),
        "a refused enrollment created the journal"
    );
    // The listener waived: this test, which started the old root, is its starter.
    let me = std::process::id();
    let program = std::env::current_exe().unwrap();
    let program = program.file_name().unwrap().to_string_lossy().into_owned();
    let starter = format!("starter:{me} {program}");
    let listener_waived = format!(
        "{only_cgroup}\n[waive]\n\"{listener}\" = \"a debug socket, gone with the old root\"\n"
    );
    let r = enroll(&listener_waived);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    let said = r.json()["message"].as_str().unwrap().to_owned();
    assert!(said.contains(&format!("[waive] \"{starter}\"")), "{said}");
    let waived = format!(
        "{listener_waived}\"{starter}\" = \"the test that started it, which does not again\"\n"
    );
    let r = enroll(&waived);
    assert_eq!(r.code, Outcome::Success, "{}{}", r.stdout, r.stderr);
    let v = r.json();
    assert_eq!(v["cross_check"]["ran"], true, "{v}");
    let id = v["deployment"].as_str().unwrap();
    let bytes = std::fs::read(s.state_dir(id).join("manifest.cbor")).unwrap();
    use repoch_protocol::cbor::Canonical as _;
    let signed = repoch_protocol::manifest::SignedManifest::from_bytes(&bytes).unwrap();
    let kept: Vec<&str> = signed
        .manifest
        .containment
        .waived
        .iter()
        .map(|w| w.what.as_str())
        .collect();
    assert_eq!(
        kept,
        [listener.as_str(), &format!("starter:{me} {program}")]
    );
}

#[test]
#[ignore = "needs root"]
fn a_unix_socket_name_that_forges_a_line_of_the_kernels_table_names_no_listener() {
    // The old root listens on a unix socket, and a sidecar of it binds one whose name holds
    // a newline and then a whole line of /proc/net/unix naming the first socket's inode at
    // another path (the kernel prints a name raw). Read from the table, the first socket
    // was listed at the forged path too, and the second at the name's first line, a path
    // that does not exist: a manifest naming those would hold neither. Each socket's name
    // is now the kernel's own answer for its inode (sock_diag): the real listener alone,
    // and the forging name an unknown (no manifest can name it).
    require_root!();
    let s = Sandbox::new();
    let cg = Cgroup::new(&format!("repoch-forge-{}", s.tag));
    let exe = own_copy_of_the_helper(&s);
    // Short paths: a unix name holds at most 107 bytes.
    let dir = std::path::PathBuf::from(format!("/tmp/rf{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let real = dir.join("r.sock");
    let holder = in_cgroup(&cg, &exe, &["listen-unix", real.to_str().unwrap()]);
    let inode = std::fs::read_dir(format!("/proc/{}/fd", holder.pid()))
        .unwrap()
        .flatten()
        .find_map(|e| {
            let l = std::fs::read_link(e.path()).ok()?;
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')
                .map(str::to_owned)
        })
        .expect("its socket");
    let forged = dir.join("f");
    // (The table's first field is the kernel's address of the socket; any word reads as
    // one.)
    let forging = format!(
        "{}/x\n0: 00000002 00000000 00010000 0001 01 {inode} {}",
        dir.display(),
        forged.display()
    );
    // (Its slashes are directories: made, so that it can be bound.)
    std::fs::create_dir_all(std::path::Path::new(&forging).parent().unwrap()).unwrap();
    let _sidecar = in_cgroup(&cg, &exe, &["listen-unix", &forging]);
    let (found, _) = discovered(&s, &["--cgroup", &cg.rel]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        found_values(&found, "listeners"),
        [format!("unix:{}", real.display())],
        "{found}"
    );
    let unknown = found_values(&found, "unknown");
    assert!(
        unknown
            .iter()
            .any(|u| u.contains("\\u{000a}0: 00000002") && u.contains(&inode)),
        "the forging name is not an unknown: {found}"
    );
}

#[test]
#[ignore = "needs root"]
fn a_zombie_of_the_old_root_is_no_unknown() {
    // The old root has a child that exited and that it never reaps (a zombie): it runs
    // nothing and holds nothing. Discovery left it out; it listed it as an unknown before
    // ("pid N's executable": unreadable), which only a waiver naming its pid could clear
    // (found by attacking the release binaries).
    require_root!();
    let s = Sandbox::new();
    let cg = Cgroup::new(&format!("repoch-zombie-{}", s.tag));
    let exe = own_copy_of_the_helper(&s);
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && /bin/true & exec \"$0\" listen-unix {}",
            cg.path().display(),
            s.srv.join("z.sock").display()
        ))
        .arg(&exe)
        .stderr(Stdio::null());
    let old = spawn_ready(c);
    crate::hostile::wait_until("its child to be a zombie", || {
        std::fs::read_to_string(format!("/proc/{}/task/{}/children", old.pid(), old.pid()))
            .unwrap_or_default()
            .split_whitespace()
            .any(|kid| {
                std::fs::read_to_string(format!("/proc/{kid}/stat")).is_ok_and(|st| {
                    st.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z'))
                })
            })
    });
    let (found, _) = discovered(&s, &["--cgroup", &cg.rel]);
    assert_eq!(
        found_values(&found, "unknown"),
        Vec::<String>::new(),
        "{found}"
    );
    assert_eq!(found["processes"].as_array().unwrap().len(), 1, "{found}");
    // The root cgroup is no seed: it holds every process of the host.
    let r = s.repoch(&["--json", "discover", "--cgroup", "/"]);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("the root cgroup"), "{}", r.stdout);
}

#[test]
#[ignore = "needs root"]
fn a_loop_in_a_tmux_session_is_named_as_its_starter_and_refused_until_waived() {
    // The old root restarted by a shell loop in a tmux session (a server of the test's own
    // socket): discovered from the old root's process, its starter is that shell, in a
    // terminal session (tmux). Enrolling a manifest naming the old root's executable while
    // it runs is refused (exit 64) naming the starter's waiver: the loop would start it
    // again after the grant. The session ended, its draft enrolls and recovers.
    require_root!();
    let s = Sandbox::new();
    let exe = own_copy_of_the_helper(&s);
    let socket = format!("repoch-{}", s.tag);
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .args(["-L", &socket])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    struct Server<F: Fn(&[&str]) -> std::process::Output>(F);
    impl<F: Fn(&[&str]) -> std::process::Output> Drop for Server<F> {
        fn drop(&mut self) {
            let _ = (self.0)(&["kill-server"]);
        }
    }
    let loop_ = format!("while :; do {} sleep; done", exe.display());
    let o = tmux(&["new-session", "-d", "sh", "-c", &loop_]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let _server = Server(tmux);
    let exe_name = exe.display().to_string();
    crate::hostile::wait_until("the loop to run the old root", || {
        !pids_running(&exe_name).is_empty()
    });
    let pid = pids_running(&exe_name)[0];
    let (found, draft) = discovered(&s, &["--pid", &pid.to_string()]);
    let why = found["starters"][0]["why"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("a shell (") && why.contains("terminal session (tmux"),
        "{found}"
    );
    let p = s.path("manifest.toml");
    std::fs::write(
        &p,
        s.manifest(&format!("[containment]\nexecutables = [\"{exe_name}\"]\n")),
    )
    .unwrap();
    let r = s.enroll_manifest(&p);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    let said = r.json()["message"].as_str().unwrap().to_owned();
    assert!(said.contains("[waive] \"starter:"), "{said}");
    // Contained as OPERATOR.md says (the session ended, nothing of it runs), its draft
    // enrolls and recovers.
    drop(_server);
    for p in pids_running(&exe_name) {
        kill_pid(p);
    }
    let id = s.enroll_with(&completed_draft(&s, &draft, ""));
    recovers(&s, &id, &[], &draft);
}

#[test]
#[ignore = "needs root"]
fn a_cgroup_only_named_like_a_named_unit_is_no_units() {
    // The manifest names the unit `billing.service` and the old root's cgroup; a process
    // of the old root runs in a plain cgroup that is only named `billing.service` (systemd
    // knows nothing of it: this host runs no systemd). Enrolling is refused naming that
    // cgroup (found by attacking the release binaries: a cgroup whose last component
    // was a named unit's name counted as that unit's, and enrolled).
    require_root!();
    let s = Sandbox::new();
    let top = format!("repoch-lookalike-{}", s.tag);
    let own = Cgroup::new(&format!("{top}/root"));
    let lookalike = Cgroup::new(&format!("{top}/billing.service"));
    let exe = own_copy_of_the_helper(&s);
    let _a = in_cgroup(
        &own,
        &exe,
        &["listen-unix", s.srv.join("a.sock").to_str().unwrap()],
    );
    let _b = in_cgroup(
        &lookalike,
        &exe,
        &["listen-unix", s.srv.join("b.sock").to_str().unwrap()],
    );
    let me = std::process::id();
    let program = std::env::current_exe().unwrap();
    let program = program.file_name().unwrap().to_string_lossy().into_owned();
    let p = s.path("manifest.toml");
    std::fs::write(
        &p,
        s.manifest(&format!(
            "[containment]\nunits = [\"billing.service\"]\ncgroups = [\"{}\"]\n\
             executables = [\"{}\"]\nlisteners = [\"unix:{}\", \"unix:{}\"]\n\
             [waive]\n\"starter:{me} {program}\" = \"the test that started it\"\n\
             \"unknown:what starts billing.service\" = \"no systemd on this host\"\n",
            own.rel,
            exe.display(),
            s.srv.join("a.sock").display(),
            s.srv.join("b.sock").display(),
        )),
    )
    .unwrap();
    let r = s.enroll_manifest(&p);
    assert_eq!(r.code, Outcome::Usage, "{}{}", r.stdout, r.stderr);
    let said = r.json()["message"].as_str().unwrap().to_owned();
    assert!(
        said.contains("containment.cgroups") && said.contains(&lookalike.rel),
        "{said}"
    );
}

//! `repoch-demo`: a complete recovery in a sandbox, end to end, with the real binaries
//! (README.md, "Try it"). A fixture, not part of the package: it makes a cgroup and a
//! stand-in old root as the tests do, and drives `repoch`'s own commands.
//!
//! Sets up fixture objects (a lock fence, a store, a producer journal with an operation of
//! unknown outcome, a READY file; as root also a real cgroup and a unix listener held by a
//! stand-in "old root" that also holds the fence), enrolls, starts repochd on sandbox
//! sockets, shows the recovery refused while the old root lives, contains it, recovers
//! with a real repoch-consume process, shows that a second recovery is refused and that
//! `repoch audit` verifies the chain. Cleans up unless `--keep`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use repoch_protocol::journal::{next_frame, JournalBody, OpOutcome};
use repoch_protocol::Outcome;
use serde_json::json;

use clap::Parser;
use repoch_cli::cmd::common::{say, Ctx};
use repoch_cli::cmd::CmdResult;
use repoch_cli::exit::{Failure, Why};

/// Run a complete sandboxed recovery, end to end, and clean up.
///
/// Needs root for the recovery itself (root-owned state, READY and consumer executable, a
/// real cgroup); as another user it runs the offline parts and says what it skipped. Needs
/// repoch, repochd and repoch-consume built next to it (`cargo build --release`).
#[derive(Parser, Debug)]
#[command(name = "repoch-demo", version)]
struct Args {
    /// One JSON object per line on stdout instead of text.
    #[arg(long)]
    json: bool,
    /// Keep the sandbox directory and print its path.
    #[arg(long)]
    keep: bool,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(clap::Subcommand, Debug)]
enum Cmd {
    /// The stand-in old root (internal).
    #[command(hide = true)]
    OldRoot {
        #[arg(long)]
        fence: PathBuf,
        #[arg(long)]
        socket: PathBuf,
    },
}

/// The demo's outcome is `repoch`'s (docs/EXIT-CODES.md).
fn main() -> std::process::ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            let o = if e.use_stderr() {
                Outcome::Usage
            } else {
                Outcome::Success
            };
            return std::process::ExitCode::from(o.code());
        }
    };
    let outcome = match &args.cmd {
        Some(Cmd::OldRoot { fence, socket }) => old_root(fence, socket),
        None => {
            let ctx = Ctx::new(None, args.json);
            run(&ctx, args.keep).unwrap_or_else(|f| f.report(args.json))
        }
    };
    std::process::ExitCode::from(outcome.code())
}

/// Longest wait for repochd to come up, or for the old root to stop.
pub const DEMO_WAIT_SECONDS_MAX: u64 = 15;

fn step(ctx: &Ctx, title: &str) {
    if !ctx.json {
        say(&format!("\n== {title}"));
    }
}

fn sibling(name: &str) -> Result<PathBuf, Failure> {
    let me = std::env::current_exe().map_err(|e| Failure::Internal(Why::of("current_exe", e)))?;
    let p = me.parent().unwrap_or(Path::new(".")).join(name);
    if !p.exists() {
        return Err(Failure::Usage(
            format!(
                "{} is not built next to repoch; build everything first: cargo build --release",
                p.display()
            )
            .into(),
        ));
    }
    Ok(p)
}

struct Cleanup {
    dir: Option<tempfile::TempDir>,
    keep: bool,
    children: Vec<Child>,
    cgroup: Option<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &mut self.children {
            if let Some(pid) = rustix::process::Pid::from_raw(c.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let _ = c.wait();
        }
        if let Some(cg) = &self.cgroup {
            let _ = std::fs::write(cg.join("cgroup.kill"), "1");
            for _ in 0..100 {
                if std::fs::remove_dir(cg).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if let Some(dir) = self.dir.take() {
            repoch_tests_native::clear_append_only(dir.path());
            if self.keep {
                let p = dir.keep();
                eprintln!("repoch-demo: kept the sandbox at {}", p.display());
            }
        }
    }
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) -> Result<(), Failure> {
    let start = Instant::now();
    while !ok() {
        if start.elapsed() > Duration::from_secs(DEMO_WAIT_SECONDS_MAX) {
            return Err(Failure::Internal(
                format!("demo: {what} did not happen within {DEMO_WAIT_SECONDS_MAX}s").into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The stand-in old root (hidden subcommand): holds the fence and a listener, sleeps.
fn old_root(fence: &Path, socket: &Path) -> Outcome {
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(fence)
    else {
        return Outcome::Internal;
    };
    if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return Outcome::Busy;
    }
    let Ok(_l) = std::os::unix::net::UnixListener::bind(socket) else {
        return Outcome::Internal;
    };
    println!("{}", std::process::id());
    let _ = std::io::stdout().flush();
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn run(ctx0: &Ctx, keep: bool) -> CmdResult {
    let root_user = rustix::process::geteuid().is_root();
    let dir = tempfile::Builder::new()
        .prefix("repoch-demo-")
        .tempdir()
        .map_err(|e| Failure::Internal(Why::of("tempdir", e)))?;
    let base = dir.path().to_path_buf();
    let mut guard = Cleanup {
        dir: Some(dir),
        keep,
        children: vec![],
        cgroup: None,
    };
    let ctx = Ctx::new(Some(&base.join("root")), ctx0.json);
    let srv = base.join("srv");
    std::fs::create_dir_all(&srv).map_err(|e| Failure::Internal(Why::error(e)))?;
    step(&ctx, &format!("sandbox {}", base.display()));
    for (name, content) in [
        ("lock", &b""[..]),
        ("store", b"ledger v41\n"),
        ("READY", b"billing-root v42\n"),
    ] {
        std::fs::write(srv.join(name), content).map_err(|e| Failure::Internal(Why::error(e)))?;
    }
    // The fence keeps others out: anyone who can open it could hold it shared (enrollment
    // refuses a fence with any bit for others).
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(srv.join("lock"), std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Failure::Internal(Why::error(e)))?;
    }
    let producer = repoch_issuer::keys::generate().map_err(|e| Failure::Internal(Why::error(e)))?;
    let consumer_key = base.join("consumer.key");
    repoch_issuer::keys::write_pair(
        &consumer_key,
        &base.join("consumer.key.pub"),
        &repoch_issuer::keys::generate().map_err(|e| Failure::Internal(Why::error(e)))?,
    )
    .map_err(|e| Failure::Internal(Why::error(e)))?;
    if !root_user {
        return offline_demo(&ctx, &producer);
    }
    let repochd = sibling("repochd")?;
    let consume = sibling("repoch-consume")?;

    // A real cgroup and a listener for the old controller, which also holds the fence.
    let cg_rel = format!("/repoch-demo-{}", std::process::id());
    let cg_root =
        repoch_sys::cgroup::mount_point().map_err(|e| Failure::Internal(Why::error(e)))?;
    let cg = cg_root.join(cg_rel.trim_start_matches('/'));
    std::fs::create_dir(&cg)
        .map_err(|e| Failure::Internal(Why::of(format_args!("{}", cg.display()), e)))?;
    guard.cgroup = Some(cg.clone());
    let sock = base.join("old-root.sock");
    let manifest = format!(
        "label = \"billing-root (demo)\"\nfences = [\"{s}/lock\"]\nstores = [\"{s}/store\"]\nready = \"{s}/READY\"\n\n\
         [journal]\npath = \"{s}/journal\"\nproducer_key = \"{pk}\"\n\n\
         [containment]\ncgroups = [\"{cg_rel}\"]\nlisteners = [\"unix:{sock}\"]\n\n\
         [consumer]\nuid = 0\ngid = 0\nexecutable = \"{exe}\"\nkey_file = \"{b}/consumer.key.pub\"\n",
        s = srv.display(),
        pk = hex::encode(producer.verifying_key().to_bytes()),
        sock = sock.display(),
        exe = consume.display(),
        b = base.display(),
    );
    let mpath = base.join("billing.toml");
    std::fs::write(&mpath, &manifest).map_err(|e| Failure::Internal(Why::error(e)))?;
    step(&ctx, "enroll (once per deployment)");
    let v =
        repoch_issuer::enroll::validate(&manifest).map_err(|e| Failure::Internal(Why::error(e)))?;
    let e = repoch_issuer::enroll::enroll(&ctx.layout, &v, 0)
        .map_err(|e| Failure::Internal(Why::error(e)))?;
    let id = e.id.to_hex();
    ctx.out(json!({"event": "enrolled", "deployment": id}), || {
        format!("deployment {id}\nmanifest   {}", mpath.display())
    });

    step(
        &ctx,
        "the old root runs, writes its journal, and loses its exclusion mid-operation",
    );
    let mut frontier = {
        let b = std::fs::read(srv.join("journal")).map_err(|e| Failure::Internal(Why::error(e)))?;
        let issuer = repoch_issuer::store::issuer_public(&ctx.layout)?;
        let pk = repoch_protocol::PublicKey::from(&producer.verifying_key());
        let f = repoch_protocol::journal::verify_journal(
            &b,
            repoch_protocol::journal::JournalPins {
                deployment: e.id,
                issuer: &issuer,
                producer: &pk,
                genesis: None,
            },
        )
        .map_err(|e| Failure::Internal(e.detail.into()))?;
        (f.last_seq, f.last_hash)
    };
    let mut journal = std::fs::OpenOptions::new()
        .append(true)
        .open(srv.join("journal"))
        .map_err(|e| Failure::Internal(Why::error(e)))?;
    for body in [
        JournalBody::RootStart { pid: 4242 },
        JournalBody::OpBegin {
            op: 0,
            name: "rotate ledger".into(),
        },
        JournalBody::OpEnd {
            op: 0,
            outcome: OpOutcome::Succeeded,
        },
        JournalBody::OpBegin {
            op: 1,
            name: "charge batch 17".into(),
        },
        JournalBody::OpEnd {
            op: 1,
            outcome: OpOutcome::Unknown,
        },
    ] {
        let kind = body.kind();
        let (frame, hash) = next_frame(e.id, Some(frontier), body, &producer);
        journal
            .write_all(&frame)
            .and_then(|_| journal.sync_data())
            .map_err(|e| Failure::Internal(Why::error(e)))?;
        frontier = (frontier.0 + 1, hash);
        ctx.out(json!({"event": "journal", "kind": kind}), || {
            format!("journal    {kind}")
        });
    }
    let me = std::env::current_exe().map_err(|e| Failure::Internal(Why::error(e)))?;
    let mut old = Command::new(&me)
        .args(["old-root", "--fence"])
        .arg(srv.join("lock"))
        .arg("--socket")
        .arg(&sock)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| Failure::Internal(Why::error(e)))?;
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(old.stdout.take().expect("piped")),
        &mut line,
    )
    .map_err(|e| Failure::Internal(Why::error(e)))?;
    std::fs::write(cg.join("cgroup.procs"), line.trim())
        .map_err(|e| Failure::Internal(Why::of("moving the old root into its cgroup", e)))?;
    guard.children.push(old);
    ctx.out(json!({"event": "old-root", "pid": line.trim()}), || {
        format!(
            "old root   pid {} in cgroup {cg_rel}, holding the fence and {}",
            line.trim(),
            sock.display()
        )
    });

    step(&ctx, "repochd starts on the sandbox's sockets");
    let log = std::fs::File::create(base.join("repochd.log"))
        .map_err(|e| Failure::Internal(Why::error(e)))?;
    let d = Command::new(&repochd)
        .arg("--root")
        .arg(base.join("root"))
        .stderr(log)
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| Failure::Internal(Why::error(e)))?;
    guard.children.push(d);
    let admin = ctx.layout.admin_socket();
    wait_for("repochd listening", || {
        std::os::unix::net::UnixStream::connect(&admin).is_ok()
    })?;
    ctx.out(json!({"event": "repochd", "admin": admin}), || {
        format!("listening  {}", admin.display())
    });

    step(
        &ctx,
        "recovery while the old root still lives: refused, nothing written",
    );
    let first = repoch_cli::cmd::recover::run(&ctx, &id[..6], None, 1);
    let refused_first = matches!(first, Ok(Outcome::Refused));

    step(
        &ctx,
        "contain the old root (cgroup.kill), then recover with a real repoch-consume",
    );
    std::fs::write(cg.join("cgroup.kill"), "1").map_err(|e| Failure::Internal(Why::error(e)))?;
    wait_for("the old root's cgroup to empty", || {
        std::fs::read_to_string(cg.join("cgroup.events")).is_ok_and(|s| s.contains("populated 0"))
    })?;
    let _ = std::fs::remove_file(&sock);
    let grant = base.join("grant.cbor");
    let consumer = Command::new(&consume)
        .args(["--json", "receive", "--deployment", &id[..8], "--key"])
        .arg(&consumer_key)
        .arg("--issuer-key")
        .arg(ctx.layout.issuer_pub())
        .arg("--out")
        .arg(&grant)
        .arg("--socket")
        .arg(ctx.layout.grant_socket())
        .args(["--wait", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Failure::Internal(Why::error(e)))?;
    let granted = repoch_cli::cmd::recover::run(&ctx, &id[..6], None, 20);
    let out = consumer
        .wait_with_output()
        .map_err(|e| Failure::Internal(Why::error(e)))?;
    let consumer_said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or(json!({}));
    let granted_ok = matches!(granted, Ok(Outcome::Success)) && out.status.success();
    ctx.out(json!({"event": "consumer", "result": consumer_said}), || {
        format!(
            "repoch-consume: {} grant persisted at {}\n  unknown operations carried to the new root: {}",
            consumer_said["outcome"].as_str().unwrap_or("failed"),
            grant.display(),
            consumer_said["grant"]["unknown_ops"]
        )
    });

    step(&ctx, "a second recovery of the same deployment");
    let second = repoch_cli::cmd::recover::run(&ctx, &id[..6], None, 1);
    let refused_second = matches!(second, Ok(Outcome::Refused));

    step(&ctx, "the auditor verifies the epoch log offline");
    let audit = repoch_cli::cmd::audit::run(
        &ctx,
        Some(&ctx.layout.issuer_pub()),
        None,
        None,
        &[ctx.layout.state_dir(&e.id)],
        false,
        1,
    );
    let audited = matches!(audit, Ok(Outcome::Success));

    let ok = refused_first && granted_ok && refused_second && audited;
    step(&ctx, "summary");
    ctx.out(
        json!({"demo": if ok { "ok" } else { "failed" }, "deployment": id, "refused_while_old_root_lived": refused_first, "granted": granted_ok, "second_recovery_refused": refused_second, "audit_verified": audited}),
        || {
            let mark = |b: bool| if b { "yes" } else { "NO" };
            format!(
                "refused while the old root lived: {}\ngranted once, grant persisted:      {}\nsecond recovery refused:            {}\naudit verified:                     {}",
                mark(refused_first), mark(granted_ok), mark(refused_second), mark(audited)
            )
        },
    );
    if ok {
        Ok(Outcome::Success)
    } else {
        Err(Failure::Internal(
            "the demo did not behave as designed (see above)".into(),
        ))
    }
}

/// Without root: the parts that need no privilege. A producer journal written through the
/// journal writer and verified (frontier, the operation of unknown outcome carried
/// forward), then one flipped byte refused, and a checkpoint signed and verified.
fn offline_demo(ctx: &Ctx, producer: &ed25519_dalek::SigningKey) -> CmdResult {
    use repoch_protocol::journal::{verify_journal, JournalPins};
    let err = |e: String| Failure::Internal(e.into());
    step(
        ctx,
        "not root: the offline parts (journal, verification, checkpoint)",
    );
    let issuer = repoch_issuer::keys::generate().map_err(|e| err(e.to_string()))?;
    let issuer_pk = repoch_protocol::PublicKey::from(&issuer.verifying_key());
    let producer_pk = repoch_protocol::PublicKey::from(&producer.verifying_key());
    let dep = repoch_protocol::DeploymentId(
        repoch_issuer::keys::random().map_err(|e| err(e.to_string()))?,
    );
    let mut bytes = Vec::new();
    let mut frontier = None;
    let bodies = [
        JournalBody::Genesis {
            producer_key: producer_pk,
        },
        JournalBody::RootStart { pid: 4242 },
        JournalBody::OpBegin {
            op: 0,
            name: "charge batch 17".into(),
        },
        JournalBody::OpEnd {
            op: 0,
            outcome: OpOutcome::Unknown,
        },
    ];
    for body in bodies {
        let key = if matches!(body, JournalBody::Genesis { .. }) {
            &issuer
        } else {
            producer
        };
        let (frame, hash) = next_frame(dep, frontier, body, key);
        bytes.extend_from_slice(&frame);
        frontier = Some((frontier.map_or(0, |(s, _)| s + 1), hash));
    }
    let pins = JournalPins {
        deployment: dep,
        issuer: &issuer_pk,
        producer: &producer_pk,
        genesis: None,
    };
    let f = verify_journal(&bytes, pins).map_err(|e| err(e.detail))?;
    let mut flipped = bytes.clone();
    // One bit of the operation's name, inside a signed record.
    let at = flipped.windows(6).position(|w| w == b"charge").unwrap_or(0);
    flipped[at] ^= 1;
    let refused = verify_journal(&flipped, pins)
        .err()
        .map(|e| e.reason.as_str())
        .unwrap_or("accepted (a bug)");
    let note = repoch_protocol::checkpoint::Checkpoint {
        origin: format!("repoch/{dep}"),
        size: f.records,
        head: f.last_hash,
    }
    .sign("repoch-issuer", &issuer);
    let checked =
        repoch_protocol::checkpoint::Checkpoint::verify(&note, "repoch-issuer", &issuer_pk).is_ok();
    ctx.out(
        json!({"demo": "offline", "why": "not root", "journal_records": f.records, "unknown_ops": f.unknown_ops.len(), "flipped_byte": refused, "checkpoint_verified": checked,
               "skipped": ["enroll", "repochd", "recover", "cgroup", "listener"]}),
        || {
            format!(
                "journal    {} records verified; frontier seq {}; unknown operations carried: {:?}\n\
                 tampered   one flipped byte is refused as {refused}\n\
                 checkpoint {}\n\
                 skipped (need root): enrollment (root-owned state), repochd, the recovery (READY and\n\
                 the consumer executable must be root-owned), the cgroup and listener to contain.\n\
                 Run `sudo repoch-demo` for the whole recovery.",
                f.records,
                f.last_seq,
                f.unknown_ops.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(),
                if checked { "signed and verified (C2SP signed note)" } else { "NOT verified" }
            )
        },
    );
    if checked && refused != "accepted (a bug)" {
        Ok(Outcome::Success)
    } else {
        Err(Failure::Internal(
            "the offline demo did not behave as designed".into(),
        ))
    }
}

//! The cost of a container engine's check per observation (docs/BENCHMARKS.md,
//! "Containers"): `repoch observe` of a deployment naming one stopped container on a
//! dockerd of the bench's own (the engine's version, the container's inspect, and on the
//! first look the event stream opened), against the same deployment without it, in turn
//! in the same run, with 1 and with 50 other containers running on the engine; and the
//! same through a podman service and a containerd of the bench's own. Medians and p99 of each, and the
//! difference of the medians: what one engine's check adds to an observation.

use std::process::Command;

use repoch_tests_native::bench::{self, ms, ratio, Samples};
use repoch_tests_native::*;

/// One timed `repoch observe` of `id`; it must hold.
fn observe(s: &Sandbox, id: &str, samples: &mut Samples) {
    let mut c = Command::new(bin("repoch"));
    c.env("REPOCH_ROOT", &s.root).args(["observe", id]);
    let o = samples.time(|| c.output().expect("repoch observe"));
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Rows of the table for `e`: 1 and 50 other containers running.
fn rows(e: &dyn Engine, n: usize, md: &mut String) {
    e.ok(&[
        "create",
        "--name",
        "old-root",
        "--network",
        "none",
        BUSYBOX_IMAGE,
        "true",
    ]);
    let named = Named {
        engine: e.name(),
        spelled: format!("{}:old-root", e.name()),
        toml: e.engines_toml(),
    };
    measure(&named, &|other| drop(e.run_sleeping(other, "no")), n, md);
}

/// The same for containerd: its container without a task, the others `ctr run`.
fn containerd_rows(c: &Containerd, n: usize, md: &mut String) {
    c.create_sleeping("old-root");
    let named = Named {
        engine: "containerd",
        spelled: c.spelled("old-root"),
        toml: c.engines_toml(),
    };
    measure(&named, &|other| c.run_sleeping(other, false), n, md);
}

/// The container a deployment names: its engine, `ENGINE:NAME`, and the engine's line.
struct Named {
    engine: &'static str,
    spelled: String,
    toml: String,
}

/// With and without `named`, in turn, `n` runs each, with 1 and 50 others (`run_other`
/// starts one) running.
fn measure(named: &Named, run_other: &dyn Fn(&str), n: usize, md: &mut String) {
    let plain = Sandbox::new();
    let without = plain.enroll_with(&plain.manifest(""));
    let with_it = Sandbox::new();
    let with = with_it.enroll_with(&with_it.manifest(&format!(
        "[containment]\ncontainers = [\"{}\"]\n[containment.engines]\n{}",
        named.spelled, named.toml
    )));
    let mut running = 0;
    for others in [1, 50] {
        while running < others {
            run_other(&format!("other-{running}"));
            running += 1;
        }
        let (mut a, mut b) = (Samples::new(), Samples::new());
        for _ in 0..n {
            observe(&with_it, &with, &mut a);
            observe(&plain, &without, &mut b);
        }
        let added = a.median().saturating_sub(b.median());
        md.push_str(&format!(
            "| {} | {others} | {} | {} | {} | {} | {} | {} |\n",
            named.engine,
            ms(a.median()),
            ms(a.p99()),
            ms(b.median()),
            ms(b.p99()),
            ms(added),
            ratio(a.median(), b.median()),
        ));
    }
}

fn main() {
    if !bench::under_cargo_bench("containers") {
        return;
    }
    require_root!();
    let sb = Sandbox::new();
    let n = bench::iterations(30, 5);
    let mut md = format!(
        "### Containers\n\n{}\n\n`repoch observe` of a deployment naming one stopped container (`containment.containers`), and of the same deployment without it, in turn, {n} runs each, with 1 and with 50 other containers running on the engine (busybox `sleep`). The engine's check: whether it answers (`GET /_ping`; containerd: its version service), the container's inspect (containerd: the container, and its task through it and in the task list), the event stream opened (containerd: until an event of repoch's own came back through it), and the events caught up to the looks (Docker: `GET /events` until now; podman: a volume of repoch's own created and removed, its event awaited; containerd: another event of its own) (every observation of `repoch observe` is a first one).\n\n| engine | other containers | with median ms | with p99 ms | without median ms | without p99 ms | added (median) ms | with/without (median) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        bench::machine(&sb.root),
    );
    {
        let d = Dockerd::start(&sb.path("docker"));
        d.import_busybox();
        rows(&d, n, &mut md);
    }
    {
        let p = Podman::start(&sb.path("podman"));
        p.import_busybox();
        rows(&p, n, &mut md);
    }
    {
        let c = Containerd::start(&sb.path("containerd"));
        containerd_rows(&c, n, &mut md);
    }
    bench::emit("containers", &md);
}

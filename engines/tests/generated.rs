//! The containerd API code in `src/gen/` is generated from containerd's own protos
//! (`proto/`, the API as containerd-client vendors it) and committed, so that building
//! repoch needs no `protoc`. This test generates it again with protox (a protobuf compiler
//! written in Rust) and tonic-prost-build, and compares: a proto or generator change that
//! was not committed fails here. `REPOCH_REGENERATE=1` writes the new code instead.

use std::path::Path;

const API: &str = "github.com/containerd/containerd/api";
const PROTOS: &[&str] = &[
    "services/containers/v1/containers.proto",
    "services/tasks/v1/tasks.proto",
    "services/events/v1/events.proto",
    "services/version/v1/version.proto",
    "events/task.proto",
    "events/container.proto",
];

#[test]
fn the_committed_containerd_api_code_is_what_the_protos_generate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let protos: Vec<String> = PROTOS.iter().map(|p| format!("{API}/{p}")).collect();
    let fds = protox::compile(&protos, [root.join("proto")]).expect("containerd's protos compile");
    let out = tempfile::tempdir().unwrap();
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .out_dir(out.path())
        .compile_fds(fds)
        .expect("the code generates");
    let committed = root.join("src/gen");
    let mut generated: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".rs"))
        .collect();
    generated.sort();
    let regenerate = std::env::var_os("REPOCH_REGENERATE").is_some();
    for name in &generated {
        let fresh = std::fs::read_to_string(out.path().join(name)).unwrap();
        let path = committed.join(name);
        if regenerate {
            std::fs::write(&path, &fresh).unwrap();
            continue;
        }
        let old = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (REPOCH_REGENERATE=1 writes it)", path.display()));
        assert!(
            old == fresh,
            "{} differs from what {PROTOS:?} generate (REPOCH_REGENERATE=1 writes it)",
            path.display()
        );
    }
    assert!(!generated.is_empty(), "nothing was generated");
}

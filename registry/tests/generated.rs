//! The etcd API code in `src/gen/` is generated from etcd's own protos (`proto/`) and
//! committed, so that building repoch needs no `protoc`. This test generates it again with
//! protox (a protobuf compiler written in Rust) and tonic-prost-build, and compares: a
//! proto or generator change that was not committed fails here. `REPOCH_REGENERATE=1`
//! writes the new code instead.

use std::path::Path;

const PROTOS: &[&str] = &[
    "etcd/api/etcdserverpb/rpc.proto",
    "etcd/api/mvccpb/kv.proto",
    "etcd/api/authpb/auth.proto",
];

#[test]
fn the_committed_etcd_api_code_is_what_the_protos_generate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fds = protox::compile(PROTOS, [root.join("proto")]).expect("etcd's protos compile");
    let out = tempfile::tempdir().unwrap();
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(true)
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

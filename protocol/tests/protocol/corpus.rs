//! Every committed fuzz corpus input runs through its decoders on every `cargo test`,
//! whether or not a fuzzer is available.

#[test]
fn committed_fuzz_corpus_replays_without_panic() {
    let base = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus");
    type Target = (&'static str, fn(&[u8]));
    let targets: [Target; 7] = [
        ("epoch_log", repoch_protocol::fuzz::epoch_log),
        ("journal", repoch_protocol::fuzz::journal),
        ("grant", repoch_protocol::fuzz::grant),
        ("wire", repoch_protocol::fuzz::wire),
        ("signed_journal", repoch_protocol::fuzz::signed_journal),
        ("signed_epoch", repoch_protocol::fuzz::signed_epoch),
        ("signed_grant", repoch_protocol::fuzz::signed_grant),
    ];
    let mut n = 0;
    for (t, f) in targets {
        let mut here = 0;
        for e in std::fs::read_dir(format!("{base}/{t}")).unwrap() {
            let data = std::fs::read(e.unwrap().path()).unwrap();
            f(&data);
            here += 1;
        }
        assert!(here > 0, "no corpus for {t}");
        n += here;
    }
    eprintln!("replayed {n} corpus inputs");
}

//! The issuance's type-level claims (docs/ARCHITECTURE.md, "Issuance"), shown by programs
//! that must not compile: skipping or reusing a final verification, connecting a consumer
//! that `Expected::authenticate` did not accept, and reaching into the held fences. Each
//! `.rs` under `tests/compile-fail/` is compiled by trybuild and its errors compared with
//! the `.stderr` beside it (`TRYBUILD=overwrite` regenerates them after a deliberate change).

#[test]
fn misuse_of_the_issuance_states_does_not_compile() {
    trybuild::TestCases::new().compile_fail("tests/compile-fail/*.rs");
}

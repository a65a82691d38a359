//! Fuzzed records re-signed with the fixed test keys: the verifier past the signature.
//! Must never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| repoch_protocol::fuzz::signed_journal(data));

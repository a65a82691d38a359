//! Producer-journal verification. Must never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| repoch_protocol::fuzz::journal(data));

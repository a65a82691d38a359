//! Socket frames: grant-socket and admin-socket messages. Must never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| repoch_protocol::fuzz::wire(data));

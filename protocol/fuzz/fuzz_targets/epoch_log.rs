//! Epoch-log reading: whole logs and single records. Must never panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use repoch_protocol::cbor::Canonical;

fuzz_target!(|data: &[u8]| {
    repoch_protocol::fuzz::epoch_log(data);
    let _ = repoch_protocol::epoch::SignedEpochRecord::from_bytes(data);
});

//! Arbitrary packets into a live RNIC (see `roce_rnic::fuzzing`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = roce_rnic::fuzzing::run_packets(data);
});

//! Fuzz target: arbitrary bytes as Diameter messages through the Sy
//! handler (`Sy::handle_sy`, an OCS's SNRs) of an in-process node
//! (`pcrf::fuzz::sy_handler`, also replayed by tests/suite/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    pcrf::fuzz::sy_handler(data);
});

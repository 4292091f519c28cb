//! Fuzz target: arbitrary bytes as an AF's request body through the N5
//! decoders (`pcrf::fuzz::n5_decoder`, also replayed by tests/suite/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    pcrf::fuzz::n5_decoder(data);
});

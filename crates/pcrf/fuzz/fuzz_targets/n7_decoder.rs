//! Fuzz target: arbitrary bytes as an SMF's request body through the N7
//! decoders (`pcrf::fuzz::n7_decoder`, also replayed by tests/suite/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    pcrf::fuzz::n7_decoder(data);
});

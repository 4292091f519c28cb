//! Fuzz target: arbitrary bytes through framing, parsing, validation,
//! selective extraction, the dump and the error answer
//! (`diameter_tools::fuzz::decode_one`, also replayed by tests/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    diameter_tools::fuzz::decode_one(data);
});

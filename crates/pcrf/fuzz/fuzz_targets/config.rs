//! Fuzz target: arbitrary text through the main configuration loader
//! (`pcrf::fuzz::config`, also replayed by tests/suite/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    pcrf::fuzz::config(data);
});

//! Fuzz target: arbitrary text through the usage file loader
//! (`pcrf::fuzz::usage_file`, also replayed by tests/suite/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    pcrf::fuzz::usage_file(data);
});

//! Fuzz target: arbitrary text as a Lua policy script in the sandbox, loaded
//! and run on the sample inputs under the instruction and memory limits
//! (`pcrf::fuzz::policy_script`, also replayed by tests/suite/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    pcrf::fuzz::policy_script(data);
});

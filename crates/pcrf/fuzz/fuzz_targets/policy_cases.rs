//! Fuzz target: arbitrary text as a policy test-case file run against the
//! default policy
//! (`pcrf::fuzz::policy_cases`, also replayed by tests/suite/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    pcrf::fuzz::policy_cases(data);
});

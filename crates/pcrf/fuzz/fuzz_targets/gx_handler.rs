//! Fuzz target: arbitrary bytes as Diameter messages through the whole Gx
//! handler (`Gx::handle_gx`) of an in-process node on the embedded store
//! (`pcrf::fuzz::gx_handler`, also replayed by tests/suite/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    pcrf::fuzz::gx_handler(data);
});

//! Fuzz target: arbitrary bytes as Diameter messages through the node's
//! Gx and Rx handlers (`Gx::handle_gx`, `Rx::handle_rx`) of an
//! in-process node on the embedded store (`pcrf::fuzz::rx_handler`, also
//! replayed by tests/suite/fuzz_corpus.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    pcrf::fuzz::rx_handler(data);
});

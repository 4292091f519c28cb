//! Every integration test of the `diameter` crate but `zero_alloc` (which
//! installs a counting global allocator of its own), in one test binary:
//! one link of the crate and its dependencies instead of one per file.
//! Each file is a module named as its test file was; nextest still runs
//! every test in a process of its own, so tests share no state (`cargo
//! nextest run -p pcrf-diameter --test suite freediameter::` runs one
//! file's tests). `support` and `tls_certs` are what several share.

mod support;
mod tls_certs;

mod erlang_gx;
mod freediameter;
mod freediameter_tls;
mod fuzz_corpus;
mod live_capture;
mod peer_machine;
mod transport_election;
mod transport_in_memory;
mod transport_loopback;
mod transport_throughput;
mod transport_tls;
mod tshark;
mod wireshark_dictionary;

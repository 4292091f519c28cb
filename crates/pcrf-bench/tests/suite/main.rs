//! Every integration test of `pcrf-bench`, in one test binary: one link
//! of the crate and its dependencies instead of one per file. Each file is
//! a module named as its test file was; nextest still runs every test in
//! a process of its own, so tests share no state (`cargo nextest run -p
//! pcrf-bench --test suite volte_e2e::` runs one file's tests). `support`
//! is what the tests that run the real `pcrf serve` share.

mod support;

mod drain;
mod echo_e2e;
mod ocs_e2e;
mod rar_release;
mod tdf_e2e;
mod tshark_gx;
mod tshark_roles;
mod verify_e2e;
mod volte_e2e;
mod volte_pcrf;

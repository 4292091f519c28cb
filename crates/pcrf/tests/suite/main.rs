//! Every integration test of the `pcrf` crate, in one test binary: one
//! link of the crate and its dependencies instead of one per file, which
//! on a two-core machine was most of the suite's build time. Each file is
//! a module named as its test file was; nextest still runs every test in
//! a process of its own, so tests share no state (`cargo nextest run -p
//! pcrf --test suite gx_process::` runs one file's tests).

mod support;
#[path = "../../../diameter/tests/suite/tls_certs.rs"]
mod tls_certs;

mod api_http;
mod api_metrics;
mod api_profile;
mod api_tls;
mod bench_e2e;
mod check_config;
mod client_gx;
mod client_n7;
mod cluster_bind;
mod cluster_dra;
mod cluster_process;
mod cluster_race;
mod cluster_sy_sd;
mod console_browser;
mod debug_record;
mod decision_log;
mod deploy_files;
mod diameter_hostile;
mod erlang_pcrf;
mod erlang_sy;
mod fuzz_corpus;
mod gx_process;
mod hostile_input;
mod n7_sessions;
mod notifications_amqp;
mod notifications_webhook;
mod overload_burst;
mod patroni_files;
mod peer_doic_api;
mod peer_identity;
mod policy_cluster;
mod policy_output;
mod policy_versions;
mod postgres_failover;
mod postgres_process;
mod postgres_store;
mod readme_tour;
mod relay_process;
mod rx_process;
mod sandbox_escape;
mod sbi_hostile;
mod sbi_interop;
mod sbi_nrf;
mod sd_process;
mod session_ownership;
mod shipped_files;
mod slow_clients;
mod store_files;
mod subscribers_import;
mod sy_process;
mod tls_process;
mod tshark_gx_usage;
mod tshark_rx;
mod tshark_sd;
mod tshark_sy;
mod usage_cluster;
mod usage_process;
mod usage_reset;
mod usage_restarts;

//! pcrf-bench: a load generator that emulates the network in front of a
//! PCRF (P-GWs as Gx PCEFs, P-CSCFs as Rx AFs, SMFs on N7), finds zero-loss throughput, and reports
//! latency from intended send times, Apdex per command and the server's CPU
//! per transaction. A library as well as a binary so that the PCRF's own
//! tests can build realistic Gx requests with [`gx`].

pub mod af;
pub mod alarm;
pub mod apdex;
pub mod client_peers;
pub mod closed_loop;
pub mod cpu;
pub mod delivery;
pub mod duration;
pub mod echo_server;
pub mod exchange;
pub mod failover;
pub mod gx;
pub mod http_client;
pub mod latency;
pub mod misbehave;
pub mod ocs;
pub mod open_loop;
pub mod pcef;
pub mod plan;
pub mod population;
pub mod progress;
pub mod provision;
pub mod report;
pub mod run_result;
pub mod runner;
pub mod rx;
pub mod scenario;
pub mod schedule;
pub mod sd;
pub mod series;
pub mod server_counters;
pub mod session;
pub mod smf;
pub mod stats;
pub mod tdf;
pub mod verify;
pub mod volte;
pub mod vonr;
pub mod zero_loss;
pub mod zero_loss_run;

//! pcrf-bench: a load generator that emulates the network in front of a
//! PCRF (P-GWs as Gx PCEFs), finds zero-loss throughput, and reports
//! latency from intended send times, Apdex per command and the server's CPU
//! per transaction. A library as well as a binary so that the PCRF's own
//! tests can build realistic Gx requests with [`gx`].

pub mod apdex;
pub mod cpu;
pub mod duration;
pub mod gx;
pub mod http_client;
pub mod latency;
pub mod plan;
pub mod population;
pub mod provision;
pub mod scenario;
pub mod schedule;
pub mod zero_loss;

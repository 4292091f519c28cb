//! The 5G service-based interface (SBI): an HTTP/2 listener apart from the
//! REST API ([`server`]), the Npcf_SMPolicyControl routes on it
//! ([`routes`]), problem details for every error ([`problem`]), its
//! metrics ([`stats`]), its configuration ([`config`]) and the NRF
//! registration ([`nrf`]). The N7 data model and decoder are in
//! `crate::n7`.

pub mod body;
pub mod bsf;
pub mod client;
pub mod config;
pub mod nrf;
pub mod problem;
pub mod routes;
pub mod server;
pub mod stats;

pub use config::{SbiConfig, SbiTls};

//! Rx (TS 29.214): application functions (IMS P-CSCFs) asking for media
//! QoS. `wire.rs` decodes AAR and STR and encodes AAA, STA, RAR and ASR;
//! `service.rs` binds each AF session to its Gx session, installs its media
//! rules there, and tells the AF when the bearer changes or ends.

pub mod service;
pub mod state;
mod wire;

pub use wire::*;

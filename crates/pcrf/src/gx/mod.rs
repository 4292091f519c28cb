//! Gx (TS 29.212): the PCEF's IP-CAN sessions. `wire.rs` decodes CCR and RAA
//! and encodes CCA and RAR; `service.rs` answers each CCR (apply to the
//! session, decide, persist, answer) and pushes re-decisions in RARs;
//! `pushes.rs` re-decides many sessions over time (congestion, top-ups,
//! period resets); `rar.rs` sends the RARs the node composes; `state.rs` holds its counters.

pub mod pushes;
mod rar;
pub mod service;
pub mod state;
mod wire;

pub use wire::*;

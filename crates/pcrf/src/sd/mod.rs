//! Sd (TS 29.212 §5b): traffic detection functions. `wire.rs` decodes the
//! TDF's CCR and encodes CCA, TSR and RAR; `service.rs` binds each TDF
//! session to its Gx session and keeps the TDF's ADC rules in step with the
//! Gx decision.

pub mod service;
pub mod state;
mod wire;

pub use wire::*;

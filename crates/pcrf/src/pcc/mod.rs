//! Policy and charging control (PCC) as every application shares it: the
//! CC-Request-Type of a Credit-Control request, usage monitoring
//! (`usage_monitoring.rs`: reports in, grants and report requests out, the
//! same AVPs on Gx and Sd) and why sessions are decided again (`push.rs`).
//! It sits below the applications (gx, rx, sd, sy), the node and the
//! operations, so none of them imports another application's module for
//! these.

pub mod charging_id;
pub mod operation;
pub mod push;
pub mod reauth_answer;
pub mod usage_monitoring;

pub use push::{PushReason, PushSummary};
pub use usage_monitoring::{
    decode_usage_instructions, key_bytes, key_text, UsageGrant, UsageInstructions, UsageReport,
    MAX_REPORTED_OCTETS, MAX_REPORTED_SECONDS,
};

/// CC-Request-Type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestType {
    Initial,
    Update,
    Termination,
}

impl RequestType {
    pub fn label(self) -> &'static str {
        match self {
            RequestType::Initial => "CCR-I",
            RequestType::Update => "CCR-U",
            RequestType::Termination => "CCR-T",
        }
    }
}

//! What an operation on a session returns, below the layers that run it:
//! the node re-authorizes sessions for the operations (control) above it,
//! so the outcome and the error type live here, where both can use them.

use serde::{Deserialize, Serialize};

/// Why an operation failed; each maps to one HTTP status.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// 404.
    #[error("{0}")]
    NotFound(String),
    /// 400: the request is well-formed but not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// 409: e.g. re-authorizing a closed session.
    #[error("{0}")]
    Conflict(String),
    /// 502: the PCEF is not connected, or answered the RAR with an error.
    #[error("{0}")]
    Peer(String),
    /// 504: no answer from the PCEF in time.
    #[error("{0}")]
    Timeout(String),
    /// 503: the store cannot be written, or the node is shutting down.
    #[error("{0}")]
    Unavailable(String),
    /// 500.
    #[error("{0}")]
    Internal(String),
}

/// What a re-authorization did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReauthOutcome {
    /// False when the new decision equals what is installed: nothing sent.
    pub rar_sent: bool,
    /// The RAA's Result-Code or Experimental-Result-Code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_code: Option<u32>,
    /// Rule names the RAR installed and removed.
    #[serde(default)]
    pub installed: Vec<String>,
    #[serde(default)]
    pub removed: Vec<String>,
    /// Script version of the decision (a hash of the script; JSON: 16 hex
    /// digits, as logged).
    #[serde(with = "crate::policy::record::hex_u64")]
    pub script_version: u64,
}

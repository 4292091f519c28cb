//! The one HTTP/2 client of every request this node sends on the SBI:
//! pushes to SMFs, notifications to AFs, PCF bindings at the BSF. h2c with
//! prior knowledge, or TLS with ALPN h2 for an `https` URI; connections
//! are kept and shared between requests to one peer. Each caller sets its
//! own timeout and retries. Below every SBI module (imports nothing of
//! the crate), so any of them may use it.

use std::sync::OnceLock;
use std::time::Duration;

/// The default time a peer has to answer (as a PCEF has for an RAA).
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// The client, built once; why it could not be, if so.
pub fn client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .http2_prior_knowledge()
                .timeout(TIMEOUT)
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| format!("no HTTP/2 client: {e}"))
}

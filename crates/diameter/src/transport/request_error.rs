//! Why a request we originated got no answer.

/// The failure of [`super::PeerHandle::request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// No connection to the peer right now.
    #[error("peer not connected")]
    NotConnected,
    /// The connection is not open (capabilities not exchanged, or closing).
    #[error("peer connection not open")]
    NotOpen,
    /// The application was not negotiated with this peer.
    #[error("application {0} not negotiated with the peer")]
    ApplicationNotNegotiated(u32),
    /// No answer within the request timeout.
    #[error("no answer within the request timeout")]
    Timeout,
    /// The connection closed before the answer arrived.
    #[error("connection closed before the answer")]
    Disconnected,
    /// The request was longer than the maximum message size (the
    /// configured one, or the 24-bit Diameter length): not sent.
    #[error("request of {len} bytes exceeds the maximum message size ({max} bytes); not sent")]
    TooLarge { len: usize, max: usize },
}

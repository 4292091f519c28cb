//! The tokio transport: moves bytes and timers for the sans-IO
//! [`crate::peer::PeerMachine`], one task per connection.
//!
//! - Reads drain every complete message in the buffer ([`crate::codec::frame_len`],
//!   a configurable maximum size); an untrustworthy length closes the connection.
//! - Requests from the peer run concurrently (a task each), up to
//!   `max_in_flight`; beyond it they are answered 3004 DIAMETER_TOO_BUSY.
//! - Every answer ready goes out in one write: a writer task drains its
//!   queue into one buffer per wakeup.
//! - Requests we originate ([`PeerHandle::request`]) are matched to their
//!   answers by hop-by-hop id, with a timeout.
//! - Generic over `AsyncRead + AsyncWrite`, so TLS can be layered later.
//!
//! Start with [`Node`]: [`Node::listen`] for a server, [`Node::connect`]
//! for an initiator that reconnects with backoff.

mod connection;
mod counters;
mod error_answer;
mod handler;
mod initiator;
mod node;
mod peer_handle;
mod peer_table;
mod request_error;
mod server;
mod writer;

pub use counters::{PeerCounters, PeerCountersSnapshot};
pub use handler::{Handler, ServesNothing};
pub use initiator::Initiator;
pub use node::Node;
pub use peer_handle::PeerHandle;
pub use peer_table::PeerTable;
pub use request_error::RequestError;
pub use server::Server;

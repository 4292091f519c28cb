//! The Diameter peer (RFC 6733 §5, RFC 3539) as a sans-IO state machine:
//! events (a received message, a timer, a local close) go in, actions (send
//! these bytes, the peer is open, close the connection) come out. No sockets
//! and no clock: the caller passes `now`, so every timing rule is unit-tested.
//!
//! The tokio transport in [`crate::transport`] drives one [`PeerMachine`]
//! per connection.

mod application;
mod backoff;
mod capabilities;
mod disconnect_cause;
mod election;
mod jitter;
mod local_node;
mod machine;
mod settings;
mod watchdog;

pub use application::{Application, NegotiatedApps};
pub use backoff::Backoff;
pub use capabilities::{encode_capabilities, PeerCapabilities};
pub use disconnect_cause::DisconnectCause;
pub use election::{wins_election, Election};
pub use jitter::Jitter;
pub use local_node::LocalNode;
pub use machine::{Action, CloseReason, Inbound, PeerMachine, PeerState, Role};
pub use settings::{AllowedPeer, PeerSettings};
pub use watchdog::{Watchdog, WatchdogState};

//! The tokio transport: moves bytes and timers for the sans-IO
//! [`crate::peer::PeerMachine`], one task per connection.
//!
//! - Reads drain every complete message in the buffer ([`crate::codec::frame_len`],
//!   a configurable maximum size); an untrustworthy length closes the connection.
//! - Requests from the peer run concurrently (a task each), up to
//!   `max_in_flight`; beyond it they are answered 3004 DIAMETER_TOO_BUSY.
//!   A handler learns when its request was read with
//!   [`request_received_at`] (its queueing delay is the time since).
//!   Requests for applications not negotiated get 3007, commands the
//!   [`Handler`] does not serve 3001, bad top-level AVP framing 5014 with
//!   Failed-AVP, a request with the E bit 3008.
//! - Every answer ready goes out in one write: a writer task drains its
//!   queue into one buffer per wakeup.
//! - Requests we originate ([`PeerHandle::request`]) are matched to their
//!   answers by hop-by-hop id, with a timeout.
//! - Generic over `AsyncRead + AsyncWrite` inside: TLS on connect (RFC 6733
//!   §13) is [`Node::listen_tls`] / [`Node::connect_tls`] with a [`TlsConfig`].
//!
//! A server (the PCRF) and a client (a load generator, an emulated PCEF):
//!
//! ```no_run
//! use bytes::{Bytes, BytesMut};
//! use diameter::dict::avp;
//! use diameter::peer::{Application, DisconnectCause, LocalNode, PeerSettings};
//! use diameter::transport::{Handler, Node, PeerHandle, Server, ServesNothing};
//! use diameter::{DiameterError, Message, MessageBuilder};
//! use std::time::Duration;
//!
//! const GX: u32 = 16_777_238;
//!
//! struct Pcrf;
//! impl Handler for Pcrf {
//!     fn serves(&self, app_id: u32, cmd: u32) -> bool {
//!         app_id == GX && cmd == 272
//!     }
//!     async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
//!         let mut out = BytesMut::new();
//!         let mut b = MessageBuilder::answer(&mut out, &req);
//!         b.result_code(2001)
//!             .origin(&peer.local().origin_host, &peer.local().origin_realm);
//!         b.finish();
//!         Ok(out.freeze())
//!     }
//! }
//!
//! # async fn demo() -> std::io::Result<()> {
//! // Server: bind, then run until the shutdown future completes (DPR to all).
//! let local = LocalNode::new("pcrf.test.local", "test.local")
//!     .with_application(Application::auth_vendor(GX, 10415));
//! let server = Server::bind("127.0.0.1:3868", local, PeerSettings::default(), Pcrf).await?;
//! let peers = server.peer_table(); // Origin-Host -> PeerHandle, for RAR
//! tokio::spawn(server.run(async { let _ = tokio::signal::ctrl_c().await; }));
//!
//! // Initiator: keeps a connection (reconnects with backoff).
//! let client = Node::new(
//!     LocalNode::new("pgw.test.local", "test.local")
//!         .with_application(Application::auth_vendor(GX, 10415)),
//!     PeerSettings::default(),
//!     ServesNothing,
//! );
//! let init = client.connect("127.0.0.1:3868".parse().expect("addr"), Some("pcrf.test.local"));
//! init.wait_open(Duration::from_secs(5)).await;
//! let cca = init
//!     .handle()
//!     .request(GX, 272, |b| {
//!         b.str(avp::SESSION_ID, "pgw.test.local;1;1")
//!             .origin("pgw.test.local", "test.local")
//!             .str(avp::DESTINATION_REALM, "test.local")
//!             .u32(avp::AUTH_APPLICATION_ID, GX);
//!     })
//!     .await;
//! init.shutdown(DisconnectCause::Rebooting).await;
//! # let _ = (cca, peers);
//! # Ok(()) }
//! ```

mod awaiting_cer;
mod connection;
mod counters;
mod error_answer;
mod handler;
mod initiator;
mod node;
mod peer_handle;
mod peer_table;
mod received;
mod request_error;
mod server;
mod tls;
mod writer;

pub use awaiting_cer::ErrorAwaitingCer;
pub use counters::{LastError, PeerCounters, PeerCountersSnapshot};
pub use handler::{Handler, ServesNothing};
pub use initiator::Initiator;
pub use node::Node;
pub use peer_handle::PeerHandle;
pub use peer_table::PeerTable;
pub use received::request_received_at;
pub use request_error::RequestError;
pub use server::Server;
pub use tls::{TlsConfig, TlsError};

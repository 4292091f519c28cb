//! A Diameter (RFC 6733) stack built for servers that answer many thousands
//! of requests per second: zero-copy decoding with one-pass selective
//! extraction, an in-place encoder, the 3GPP Gx/Rx/Sd/Sy dictionary compiled
//! from data, a sans-IO peer state machine and a tokio transport.
//!
//! It knows nothing of any particular application: the PCRF is one user.

pub mod codec;
pub mod dict;
pub mod doic;
pub mod log_limit;
pub mod peer;
pub mod result_code;
pub mod transport;

pub use codec::{Avp, AvpCode, AvpIter, DiameterError, Message, MessageBuilder};

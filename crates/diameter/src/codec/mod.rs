//! The wire format (RFC 6733 §3, §4): framing, a zero-copy view of a received
//! message, typed AVP values and a builder that writes straight into an
//! output buffer.
//!
//! Decoding never copies: a [`Message`] owns the received [`bytes::Bytes`]
//! and every [`Avp`] borrows from it. Handlers pick only the AVPs they need in
//! one pass ([`Message::pick`]), and grouped AVPs are walked only when asked.

mod avp;
mod builder;
mod error;
mod failed_avp;
mod frame;
mod header;
mod message;
mod missing;
mod value;

pub use avp::{Avp, AvpCode, AvpIter, AVP_FLAG_M, AVP_FLAG_P, AVP_FLAG_V};
pub use builder::{GroupMark, MessageBuilder, TooLong, MAX_MESSAGE_LEN};
pub use error::DiameterError;
pub use failed_avp::{shorten_failed_avp, FAILED_AVP_MAX_LEN};
pub use frame::{frame_len, FrameError};
pub use header::{Header, FLAG_E, FLAG_P, FLAG_R, FLAG_T, HEADER_LEN, RESERVED_FLAGS, VERSION};
pub use message::Message;
pub use missing::missing_avp;
pub use value::{ntp_to_unix, unix_to_ntp, NTP_UNIX_OFFSET};

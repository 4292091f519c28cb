//! Error answers the transport itself sends (RFC 6733 §7): for requests it
//! cannot hand to the application (unsupported command or application, too
//! busy, malformed AVPs) and for requests whose header `Message::parse`
//! refused (E bit set: 3008), where no `Message` view exists.

use crate::codec::{
    AvpIter, DiameterError, Header, Message, MessageBuilder, FLAG_E, FLAG_P, HEADER_LEN,
};
use crate::dict::avp;
use crate::peer::LocalNode;
use bytes::{Bytes, BytesMut};

/// The error answer to a parsed request.
pub(crate) fn for_message(req: &Message, local: &LocalNode, err: &DiameterError) -> Bytes {
    let mut out = BytesMut::with_capacity(256);
    MessageBuilder::error_answer(&mut out, req, &local.origin_host, &local.origin_realm, err);
    out.freeze()
}

/// The error answer to a request whose header is readable but that
/// `Message::parse` refused. `None` when the frame is not a request (never
/// answer an answer) or is too short to have a header.
pub(crate) fn for_frame(frame: &[u8], local: &LocalNode, err: &DiameterError) -> Option<Bytes> {
    let h = Header::decode(frame)?;
    if !h.is_request() {
        return None;
    }
    let mut out = BytesMut::with_capacity(256);
    let mut flags = h.flags & FLAG_P;
    if err.is_protocol_error() {
        flags |= FLAG_E;
    }
    let mut b = MessageBuilder::new(
        &mut out,
        flags,
        h.command_code,
        h.application_id,
        h.hop_by_hop,
        h.end_to_end,
    );
    let body = frame.get(HEADER_LEN..).unwrap_or_default();
    if let Ok(Some(sid)) = AvpIter::new(body).find(avp::SESSION_ID) {
        b.raw_avp(sid.raw());
    }
    b.result_code(err.result_code)
        .origin(&local.origin_host, &local.origin_realm);
    if !err.message.is_empty() {
        b.str(avp::ERROR_MESSAGE, &err.message);
    }
    if let Some(f) = &err.failed_avp {
        b.failed_avp(f);
    }
    b.finish();
    Some(out.freeze())
}

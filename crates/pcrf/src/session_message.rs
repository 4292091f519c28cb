//! What the PCRF's session messages have in common whatever the application
//! (Gx, Rx, Sd, Sy): the head of a request it sends inside a session
//! (Session-Id, Auth-Application-Id, our origin, the peer's destination),
//! the result it writes into an answer, and the result it reads from the
//! answers it gets. No state and no IO; the application codecs (`gx/wire.rs`,
//! `rx/wire.rs`, `sd/wire.rs`, `sy/wire.rs`) add what is theirs around it.

use crate::limits;
use diameter::codec::{missing_avp, Avp, DiameterError, MessageBuilder};
use diameter::dict::{avp, vendor};

/// 3GPP vendor id.
pub const TGPP: u32 = vendor::_3GPP;

/// Who we are on the wire.
#[derive(Clone, Debug)]
pub struct Identity {
    pub origin_host: String,
    pub origin_realm: String,
}

/// The result part of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A base Result-Code.
    Result(u32),
    /// A 3GPP Experimental-Result-Code.
    Experimental(u32),
}

/// Session-Id, Auth-Application-Id, Origin-Host/Realm,
/// Destination-Realm/Host: the head in the order of the 3GPP command
/// layouts (TS 29.212 Gx RAR, Sd TSR and RAR; TS 29.219 SLR).
pub fn application_first<'m, 'b>(
    b: &'m mut MessageBuilder<'b>,
    application_id: u32,
    session_id: &str,
    me: &Identity,
    dest_host: &str,
    dest_realm: &str,
) -> &'m mut MessageBuilder<'b> {
    b.str(avp::SESSION_ID, session_id)
        .u32(avp::AUTH_APPLICATION_ID, application_id)
        .origin(&me.origin_host, &me.origin_realm)
        .str(avp::DESTINATION_REALM, dest_realm)
        .str(avp::DESTINATION_HOST, dest_host)
}

/// Session-Id, Origin-Host/Realm, Destination-Realm/Host, then
/// Auth-Application-Id: the head in the order of RFC 6733's base commands,
/// which TS 29.214 (Rx RAR, ASR) and TS 29.219 (Sy STR) keep.
pub fn application_last<'m, 'b>(
    b: &'m mut MessageBuilder<'b>,
    application_id: u32,
    session_id: &str,
    me: &Identity,
    dest_host: &str,
    dest_realm: &str,
) -> &'m mut MessageBuilder<'b> {
    b.str(avp::SESSION_ID, session_id)
        .origin(&me.origin_host, &me.origin_realm)
        .str(avp::DESTINATION_REALM, dest_realm)
        .str(avp::DESTINATION_HOST, dest_host)
        .u32(avp::AUTH_APPLICATION_ID, application_id)
}

/// Writes an answer's result: a Result-Code, or a 3GPP Experimental-Result.
pub fn encode_outcome(b: &mut MessageBuilder<'_>, outcome: Outcome) {
    match outcome {
        Outcome::Result(rc) => {
            b.result_code(rc);
        }
        Outcome::Experimental(code) => {
            b.experimental_result(TGPP, code);
        }
    }
}

/// The result a top-level AVP of an answer carries: its Result-Code, or
/// the Experimental-Result-Code inside an Experimental-Result. None for any
/// other AVP, and for an Experimental-Result without a code.
pub fn decode_outcome(a: &Avp<'_>) -> Result<Option<Outcome>, DiameterError> {
    if a.is(avp::RESULT_CODE) {
        return Ok(Some(Outcome::Result(a.as_u32()?)));
    }
    if a.is(avp::EXPERIMENTAL_RESULT) {
        if let Some(code) = a.grouped().find(avp::EXPERIMENTAL_RESULT_CODE)? {
            return Ok(Some(Outcome::Experimental(code.as_u32()?)));
        }
    }
    Ok(None)
}

/// Subscription-Id-Type values (RFC 4006 §8.47).
pub(crate) const END_USER_E164: i32 = 0;
pub(crate) const END_USER_IMSI: i32 = 1;

/// A CCR's Subscription-Id (RFC 4006 §8.46): its type and data; 5005
/// naming whichever is missing.
pub(crate) fn decode_subscription_id<'a>(a: &Avp<'a>) -> Result<(i32, &'a str), DiameterError> {
    let mut ty = None;
    let mut data = None;
    for g in a.grouped() {
        let g = g?;
        if g.is(avp::SUBSCRIPTION_ID_TYPE) {
            ty = Some(g.as_enum()?);
        } else if g.is(avp::SUBSCRIPTION_ID_DATA) {
            data = Some((g, g.as_str()?));
        }
    }
    match (ty, data) {
        (Some(t), Some((a, d))) => {
            match t {
                END_USER_IMSI => {
                    limits::at_most(&a, limits::MAX_IMSI, "Subscription-Id-Data (IMSI)")?
                }
                END_USER_E164 => {
                    limits::at_most(&a, limits::MAX_MSISDN, "Subscription-Id-Data (E.164)")?
                }
                _ => {}
            }
            Ok((t, d))
        }
        (None, _) => Err(missing_avp(
            avp::SUBSCRIPTION_ID_TYPE,
            "Subscription-Id-Type",
        )),
        (_, None) => Err(missing_avp(
            avp::SUBSCRIPTION_ID_DATA,
            "Subscription-Id-Data",
        )),
    }
}

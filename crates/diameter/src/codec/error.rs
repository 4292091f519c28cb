//! A protocol error that becomes an error answer (RFC 6733 §7): its
//! Result-Code, the offending AVP for Failed-AVP, and a text for
//! Error-Message and the logs.

use bytes::Bytes;
use std::borrow::Cow;

/// An error to answer with. Building one allocates; decoding that succeeds
/// never does.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (Result-Code {result_code})")]
pub struct DiameterError {
    pub result_code: u32,
    /// The encoded AVP (no padding needed) to place inside Failed-AVP.
    pub failed_avp: Option<Bytes>,
    pub message: Cow<'static, str>,
}

impl DiameterError {
    pub fn new(result_code: u32, message: impl Into<Cow<'static, str>>) -> DiameterError {
        DiameterError {
            result_code,
            failed_avp: None,
            message: message.into(),
        }
    }

    pub fn with_failed_avp(
        result_code: u32,
        failed_avp: impl Into<Bytes>,
        message: impl Into<Cow<'static, str>>,
    ) -> DiameterError {
        DiameterError {
            result_code,
            failed_avp: Some(failed_avp.into()),
            message: message.into(),
        }
    }

    /// Whether the answer must carry the E bit (protocol errors, 3xxx).
    pub fn is_protocol_error(&self) -> bool {
        crate::result_code::is_protocol_error(self.result_code)
    }
}

/// 5005 DIAMETER_MISSING_AVP for a required AVP. RFC 6733 §7.1.5 asks for a
/// Failed-AVP holding an example of the missing AVP: its header with a
/// zero-filled payload of the minimum size of its type.
pub fn missing_avp(code: super::AvpCode, name: &'static str) -> DiameterError {
    let min = crate::dict::avp(code.code, code.vendor)
        .and_then(|d| d.ty.fixed_len())
        .unwrap_or(0);
    let hl = if code.vendor != 0 { 12 } else { 8 };
    let mut v = Vec::with_capacity(hl + min);
    v.extend_from_slice(&code.code.to_be_bytes());
    v.push(code.flags());
    v.extend_from_slice(&((hl + min) as u32).to_be_bytes()[1..]);
    if code.vendor != 0 {
        v.extend_from_slice(&code.vendor.to_be_bytes());
    }
    v.resize(hl + min, 0);
    DiameterError::with_failed_avp(
        crate::result_code::DIAMETER_MISSING_AVP,
        v,
        format!("missing AVP {name}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dict::avp;

    #[test]
    fn missing_avp_has_example_payload() {
        let e = missing_avp(avp::RESULT_CODE, "Result-Code");
        assert_eq!(e.result_code, 5005);
        let f = e.failed_avp.clone().expect("failed avp");
        assert_eq!(f.len(), 12);
        assert_eq!(&f[..4], &268u32.to_be_bytes());
        assert!(!e.is_protocol_error());
        assert!(DiameterError::new(3001, "x").is_protocol_error());
    }
}

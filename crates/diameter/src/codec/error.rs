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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_errors_are_the_3xxx_codes() {
        assert!(DiameterError::new(3001, "x").is_protocol_error());
        assert!(!DiameterError::new(5005, "x").is_protocol_error());
    }
}

//! The DIAMETER_MISSING_AVP error (RFC 6733 §7.1.5), whose Failed-AVP is an
//! example of the missing AVP sized by its type. Sizing it needs the
//! dictionary, which itself is built on `AvpCode` and `DiameterError`; so
//! this error lives here, above the dictionary, rather than in `error.rs`
//! beside `DiameterError`, which is below it.

use super::avp::AvpCode;
use super::error::DiameterError;
use crate::dict;
use crate::result_code;

/// 5005 DIAMETER_MISSING_AVP for a required AVP. RFC 6733 §7.1.5 asks for a
/// Failed-AVP holding an example of the missing AVP: its header with a
/// zero-filled payload of the minimum size of its type.
pub fn missing_avp(code: AvpCode, name: &'static str) -> DiameterError {
    let min = dict::avp(code.code, code.vendor)
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
        result_code::DIAMETER_MISSING_AVP,
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
    }
}

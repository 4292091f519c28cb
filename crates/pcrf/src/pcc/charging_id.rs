//! Access-Network-Charging-Identifier-Gx as the PCEF reports it (in a CCR
//! or an RAA) and as Rx hands it to the AF for charging correlation: it
//! lives below both applications so Rx need not import Gx's codec for it.

use diameter::codec::{missing_avp, Avp, DiameterError};
use diameter::dict::avp;

/// One Access-Network-Charging-Identifier-Gx (TS 29.212 §5.3.43): the
/// access network's charging id and the rules it applies to (none: the
/// whole IP-CAN session).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChargingId {
    pub value: Vec<u8>,
    pub rules: Vec<String>,
}

pub(crate) fn decode_charging_id(a: &Avp<'_>) -> Result<ChargingId, DiameterError> {
    let mut c = ChargingId::default();
    let mut have = false;
    for g in a.grouped() {
        let g = g?;
        if g.is(avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_VALUE) {
            c.value = g.as_octets().to_vec();
            have = true;
        } else if g.is(avp::CHARGING_RULE_NAME) || g.is(avp::CHARGING_RULE_BASE_NAME) {
            c.rules
                .push(String::from_utf8_lossy(g.as_octets()).into_owned());
        }
    }
    if !have {
        return Err(missing_avp(
            avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_VALUE,
            "Access-Network-Charging-Identifier-Value",
        ));
    }
    Ok(c)
}

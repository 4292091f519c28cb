//! Usage monitoring on the wire (TS 29.212 §4.5.17), the same on Gx and
//! Sd: a report the PCEF or TDF sends in a CCR (Used-Service-Unit per
//! Monitoring-Key), and what a CCA or RAR tells it back (grants, keys whose
//! monitoring stops, report requests). Both applications encode and decode
//! these with the functions here.

use crate::usage::{MonitoringLevel, ServiceUnits};
use diameter::codec::{missing_avp, Avp, DiameterError, Message, MessageBuilder};
use diameter::dict::{avp, enums};
use std::borrow::Cow;

/// The most octets one report may claim for one key: 2^50 (1 PiB). More is
/// not traffic but a bug, typically a PCEF encoding a negative number,
/// which arrives with the top bit set; counting it would exhaust any quota.
pub const MAX_REPORTED_OCTETS: u64 = 1 << 50;

/// The longest CC-Time one report may claim: ten years (3653 days).
pub const MAX_REPORTED_SECONDS: u32 = 3653 * 86_400;

/// One Usage-Monitoring-Information with Used-Service-Unit (TS 29.212
/// §4.5.17.3): what the PCEF counted for `key` since its last report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageReport<'a> {
    /// Monitoring-Key, an OctetString (see [`key_text`]).
    pub key: &'a [u8],
    /// Usage-Monitoring-Level as sent, if sent.
    pub level: Option<i32>,
    /// The Used-Service-Units of the report, summed.
    pub used: ServiceUnits,
}

/// Decodes one Usage-Monitoring-Information of a CCR. `None` when it
/// carries no Used-Service-Unit (nothing was counted).
pub(crate) fn decode_usage_report<'a>(
    a: &Avp<'a>,
) -> Result<Option<UsageReport<'a>>, DiameterError> {
    let mut key = None;
    let mut level = None;
    let mut used: Option<ServiceUnits> = None;
    for g in a.grouped() {
        let g = g?;
        if g.is(avp::MONITORING_KEY) {
            key.get_or_insert(g.as_octets());
        } else if g.is(avp::USAGE_MONITORING_LEVEL) {
            level = Some(g.as_enum()?);
        } else if g.is(avp::USED_SERVICE_UNIT) {
            // The grammar allows two (before and after a tariff change);
            // both are usage, so they add up. A third is out of grammar but
            // still usage, so it is counted rather than refused.
            let u = decode_used_units(&g)?;
            used = Some(match used {
                Some(prev) => add_units(prev, u),
                None => u,
            });
        }
    }
    let Some(used) = used else {
        return Ok(None);
    };
    let Some(key) = key else {
        return Err(missing_avp(avp::MONITORING_KEY, "Monitoring-Key"));
    };
    Ok(Some(UsageReport { key, level, used }))
}

/// The units of one Used-Service-Unit, refusing absurd amounts (5004 with
/// the offending AVP as Failed-AVP).
fn decode_used_units(usu: &Avp<'_>) -> Result<ServiceUnits, DiameterError> {
    let mut u = ServiceUnits::default();
    for g in usu.grouped() {
        let g = g?;
        let octets = |g: &Avp<'_>| -> Result<u64, DiameterError> {
            let v = g.as_u64()?;
            if v > MAX_REPORTED_OCTETS {
                return Err(g.invalid_value("reported octets above 2^50 (1 PiB)"));
            }
            Ok(v)
        };
        if g.is(avp::CC_TOTAL_OCTETS) {
            u.total = Some(octets(&g)?);
        } else if g.is(avp::CC_INPUT_OCTETS) {
            u.input = Some(octets(&g)?);
        } else if g.is(avp::CC_OUTPUT_OCTETS) {
            u.output = Some(octets(&g)?);
        } else if g.is(avp::CC_TIME) {
            let v = g.as_u32()?;
            if v > MAX_REPORTED_SECONDS {
                return Err(g.invalid_value("reported CC-Time above ten years"));
            }
            u.time = Some(v);
        }
    }
    Ok(u)
}

/// Sum of two amounts; a unit present in either is present in the sum.
pub(crate) fn add_units(a: ServiceUnits, b: ServiceUnits) -> ServiceUnits {
    fn add<T: Copy + Default>(x: Option<T>, y: Option<T>, sat: fn(T, T) -> T) -> Option<T> {
        match (x, y) {
            (None, None) => None,
            (x, y) => Some(sat(x.unwrap_or_default(), y.unwrap_or_default())),
        }
    }
    // `octets()` prefers the total: when only one part has CC-Total-Octets,
    // the other part's directions must enter the summed total, not vanish.
    let total =
        (a.total.is_some() || b.total.is_some()).then(|| a.octets().saturating_add(b.octets()));
    ServiceUnits {
        total,
        input: add(a.input, b.input, u64::saturating_add),
        output: add(a.output, b.output, u64::saturating_add),
        time: add(a.time, b.time, u32::saturating_add),
    }
}

const HEX_KEY: &str = "hex:";

/// A Monitoring-Key as text, to use as a map key and in logs: the key
/// itself when it is UTF-8, otherwise `hex:` and its bytes in lowercase
/// hex. A UTF-8 key that itself starts with `hex:` is written in hex too,
/// so that [`key_bytes`] gives back exactly the bytes received.
pub fn key_text(key: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(key) {
        Ok(s) if !s.starts_with(HEX_KEY) => Cow::Borrowed(s),
        _ => Cow::Owned(format!("{HEX_KEY}{}", hex::encode(key))),
    }
}

/// The bytes of a Monitoring-Key written by [`key_text`]: `hex:` followed
/// by an even number of hex digits is decoded, anything else is the text's
/// own bytes.
pub fn key_bytes(text: &str) -> Cow<'_, [u8]> {
    match text.strip_prefix(HEX_KEY).map(hex::decode) {
        Some(Ok(v)) => Cow::Owned(v),
        _ => Cow::Borrowed(text.as_bytes()),
    }
}

/// One Monitoring-Key granted to the PCEF (TS 29.212 §4.5.17.1): the
/// threshold after which it reports, incremental from its last report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageGrant {
    /// The key as [`key_text`] writes it (`hex:` keys go out as bytes).
    pub key: String,
    pub level: MonitoringLevel,
    /// Written as Granted-Service-Unit with the units present.
    pub units: ServiceUnits,
}

/// What a CCA or RAR tells the PCEF about usage monitoring, each as its own
/// Usage-Monitoring-Information.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageInstructions {
    pub grants: Vec<UsageGrant>,
    /// Keys whose monitoring stops (Usage-Monitoring-Support =
    /// USAGE_MONITORING_DISABLED); the PCEF answers with a last report.
    pub disable: Vec<String>,
    /// Ask for a report now (Usage-Monitoring-Report =
    /// USAGE_MONITORING_REPORT_REQUIRED): of these keys, or of every key
    /// when the list is empty.
    pub report: Option<Vec<String>>,
}

impl UsageInstructions {
    /// Nothing to say about usage monitoring (no AVP is written).
    pub fn is_empty(&self) -> bool {
        self.grants.is_empty() && self.disable.is_empty() && self.report.is_none()
    }
}

/// Writes one Usage-Monitoring-Information per grant, disabled key and
/// report request (shared by CCA and RAR).
pub(crate) fn encode_usage(b: &mut MessageBuilder<'_>, u: &UsageInstructions) {
    for grant in &u.grants {
        b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
            g.bytes(avp::MONITORING_KEY, &key_bytes(&grant.key));
            g.group(avp::GRANTED_SERVICE_UNIT, |s| {
                // RFC 4006 §8.17 order: CC-Time, then the octet counts.
                let units = &grant.units;
                if let Some(v) = units.time {
                    s.u32(avp::CC_TIME, v);
                }
                if let Some(v) = units.total {
                    s.u64(avp::CC_TOTAL_OCTETS, v);
                }
                if let Some(v) = units.input {
                    s.u64(avp::CC_INPUT_OCTETS, v);
                }
                if let Some(v) = units.output {
                    s.u64(avp::CC_OUTPUT_OCTETS, v);
                }
            });
            g.i32(avp::USAGE_MONITORING_LEVEL, grant.level.code());
        });
    }
    for key in &u.disable {
        b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
            g.bytes(avp::MONITORING_KEY, &key_bytes(key)).i32(
                avp::USAGE_MONITORING_SUPPORT,
                enums::USAGE_MONITORING_SUPPORT::USAGE_MONITORING_DISABLED,
            );
        });
    }
    let required = enums::USAGE_MONITORING_REPORT::USAGE_MONITORING_REPORT_REQUIRED;
    match u.report.as_deref() {
        None => {}
        // Without Monitoring-Key the request covers every key (§5.3.59).
        Some([]) => {
            b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.i32(avp::USAGE_MONITORING_REPORT, required);
            });
        }
        Some(keys) => {
            for key in keys {
                b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
                    g.bytes(avp::MONITORING_KEY, &key_bytes(key))
                        .i32(avp::USAGE_MONITORING_REPORT, required);
                });
            }
        }
    }
}

/// Reads back the usage-monitoring instructions of a CCA or RAR, as a PCEF
/// would: the inverse of what Gx's [`encode_cca`](crate::gx::encode_cca) and
/// [`encode_rar`](crate::gx::encode_rar) write (and Sd's encoders).
/// Keys come back through [`key_text`]. A Usage-Monitoring-Level other than
/// session or rule level gives 5004.
pub fn decode_usage_instructions(msg: &Message) -> Result<UsageInstructions, DiameterError> {
    let mut u = UsageInstructions::default();
    for a in msg.avps().filter_code(avp::USAGE_MONITORING_INFORMATION) {
        let a = a?;
        let mut key = None;
        let mut granted = None;
        let mut level = MonitoringLevel::default();
        let mut disabled = false;
        let mut report = false;
        for g in a.grouped() {
            let g = g?;
            if g.is(avp::MONITORING_KEY) {
                key.get_or_insert(key_text(g.as_octets()).into_owned());
            } else if g.is(avp::GRANTED_SERVICE_UNIT) {
                granted = Some(decode_used_units(&g)?);
            } else if g.is(avp::USAGE_MONITORING_LEVEL) {
                level = match g.as_enum()? {
                    0 => MonitoringLevel::Session,
                    1 => MonitoringLevel::Rule,
                    _ => return Err(g.invalid_value("Usage-Monitoring-Level not 0 or 1")),
                };
            } else if g.is(avp::USAGE_MONITORING_SUPPORT) {
                disabled =
                    g.as_enum()? == enums::USAGE_MONITORING_SUPPORT::USAGE_MONITORING_DISABLED;
            } else if g.is(avp::USAGE_MONITORING_REPORT) {
                report = g.as_enum()?
                    == enums::USAGE_MONITORING_REPORT::USAGE_MONITORING_REPORT_REQUIRED;
            }
        }
        if report {
            let keys = u.report.get_or_insert_with(Vec::new);
            keys.extend(key.clone());
        }
        match (key, granted, disabled) {
            (Some(key), _, true) => u.disable.push(key),
            (Some(key), Some(units), false) => u.grants.push(UsageGrant { key, level, units }),
            (None, Some(_), _) | (None, _, true) => {
                return Err(missing_avp(avp::MONITORING_KEY, "Monitoring-Key"))
            }
            _ => {}
        }
    }
    Ok(u)
}

//! The Diameter dictionary: AVP, application and command definitions
//! compiled at build time from `dict/*.dict` (see `dict/README.md`).
//!
//! Constants (`dict::avp::SESSION_ID`, `dict::app::GX`, `dict::cmd::CREDIT_CONTROL`,
//! `dict::enums::CC_REQUEST_TYPE::INITIAL_REQUEST`) let code name what it means;
//! the lookup functions serve the human-readable dump and the error checks
//! (is this M-flagged AVP one we know?).

mod index;

use index::{Index, Slot};
use std::sync::OnceLock;

include!(concat!(env!("OUT_DIR"), "/dict.rs"));

/// The data type of an AVP (RFC 6733 §4.2, §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AvpType {
    OctetString,
    Integer32,
    Integer64,
    Unsigned32,
    Unsigned64,
    Float32,
    Float64,
    Grouped,
    Address,
    Time,
    UTF8String,
    DiameterIdentity,
    DiameterURI,
    Enumerated,
    IPFilterRule,
    QoSFilterRule,
}

impl AvpType {
    /// The RFC's name of the type, as Wireshark's dictionary also spells it.
    pub fn name(self) -> &'static str {
        match self {
            AvpType::OctetString => "OctetString",
            AvpType::Integer32 => "Integer32",
            AvpType::Integer64 => "Integer64",
            AvpType::Unsigned32 => "Unsigned32",
            AvpType::Unsigned64 => "Unsigned64",
            AvpType::Float32 => "Float32",
            AvpType::Float64 => "Float64",
            AvpType::Grouped => "Grouped",
            AvpType::Address => "Address",
            AvpType::Time => "Time",
            AvpType::UTF8String => "UTF8String",
            AvpType::DiameterIdentity => "DiameterIdentity",
            AvpType::DiameterURI => "DiameterURI",
            AvpType::Enumerated => "Enumerated",
            AvpType::IPFilterRule => "IPFilterRule",
            AvpType::QoSFilterRule => "QoSFilterRule",
        }
    }

    /// Data length fixed by the type, if any (RFC 6733 §4.2).
    pub fn fixed_len(self) -> Option<usize> {
        match self {
            AvpType::Integer32
            | AvpType::Unsigned32
            | AvpType::Float32
            | AvpType::Enumerated
            | AvpType::Time => Some(4),
            AvpType::Integer64 | AvpType::Unsigned64 | AvpType::Float64 => Some(8),
            _ => None,
        }
    }
}

/// One AVP definition.
#[derive(Debug)]
pub struct AvpDef {
    pub name: &'static str,
    pub code: u32,
    pub vendor: u32,
    pub ty: AvpType,
    /// The M flag is set when we send it.
    pub m: bool,
    /// The V flag is set when we send it (vendor != 0).
    pub v: bool,
    /// Named values, sorted by value.
    pub enums: &'static [(i64, &'static str)],
}

impl AvpDef {
    /// The name of an enumerated value, if the dictionary has one.
    pub fn enum_name(&self, value: i64) -> Option<&'static str> {
        self.enums
            .binary_search_by_key(&value, |(v, _)| *v)
            .ok()
            .map(|i| self.enums[i].1)
    }
}

/// One application definition.
#[derive(Debug)]
pub struct ApplicationDef {
    pub id: u32,
    pub name: &'static str,
    pub accounting: bool,
}

/// One command definition.
#[derive(Debug)]
pub struct CommandDef {
    pub code: u32,
    pub name: &'static str,
    pub request: &'static str,
    pub answer: &'static str,
}

/// The direct index of `AVPS`, built once, on first use, inside a static:
/// no heap allocation.
static INDEX: OnceLock<Index> = OnceLock::new();

/// Finds an AVP by code and vendor id: one array load for IETF and 3GPP
/// codes (the decoder's `validate()` looks up every AVP it visits), a
/// binary search for other vendors.
#[inline]
pub fn avp(code: u32, vendor: u32) -> Option<&'static AvpDef> {
    let ix = INDEX.get_or_init(|| Index::build(AVPS.iter().map(|d| (d.vendor, d.code))));
    match ix.get(code, vendor) {
        Slot::At(pos) => AVPS.get(pos),
        Slot::Absent => None,
        Slot::NotIndexed => avp_by_search(code, vendor),
    }
}

/// Binary search of the sorted table: the fallback of the direct index
/// for rare vendors, and the independent answer its test compares with.
fn avp_by_search(code: u32, vendor: u32) -> Option<&'static AvpDef> {
    AVPS.binary_search_by(|d| (d.vendor, d.code).cmp(&(vendor, code)))
        .ok()
        .map(|i| &AVPS[i])
}

/// Finds an AVP by its specification name (linear; for tools, not hot paths).
pub fn avp_by_name(name: &str) -> Option<&'static AvpDef> {
    AVPS.iter().find(|d| d.name == name)
}

/// Every AVP the dictionary knows, sorted by (vendor, code).
pub fn avps() -> &'static [AvpDef] {
    AVPS
}

/// Every application the dictionary knows, sorted by id.
pub fn applications() -> &'static [ApplicationDef] {
    APPLICATIONS
}

/// Every command the dictionary knows, sorted by code.
pub fn commands() -> &'static [CommandDef] {
    COMMANDS
}

/// Finds an application by id.
pub fn application(id: u32) -> Option<&'static ApplicationDef> {
    APPLICATIONS.iter().find(|a| a.id == id)
}

/// Finds a command by code.
pub fn command(code: u32) -> Option<&'static CommandDef> {
    COMMANDS.iter().find(|c| c.code == code)
}

/// The name of a vendor id.
pub fn vendor_name(id: u32) -> Option<&'static str> {
    VENDORS.iter().find(|(v, _)| *v == id).map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_for_binary_search() {
        assert!(AVPS
            .windows(2)
            .all(|w| (w[0].vendor, w[0].code) < (w[1].vendor, w[1].code)));
    }

    #[test]
    fn lookups_agree_with_constants() {
        let d = avp(avp::SESSION_ID.code, avp::SESSION_ID.vendor).expect("Session-Id");
        assert_eq!(d.name, "Session-Id");
        assert_eq!(d.ty, AvpType::UTF8String);
        assert!(d.m);
        assert_eq!(avp_by_name("Origin-Host").map(|d| d.code), Some(264));
        assert_eq!(
            avp(273, 0).and_then(|d| d.enum_name(2)),
            Some("DO_NOT_WANT_TO_TALK_TO_YOU")
        );
        assert_eq!(
            command(cmd::CAPABILITIES_EXCHANGE).map(|c| c.request),
            Some("CER")
        );
        assert!(avp(999_999, 0).is_none());
    }

    #[test]
    fn the_index_agrees_with_the_search_for_every_code() {
        for vendor in [0, 10415, 13019, 5535] {
            for code in 0..5000 {
                let fast = avp(code, vendor).map(|d| (d.code, d.vendor, d.name));
                let slow = avp_by_search(code, vendor).map(|d| (d.code, d.vendor, d.name));
                assert_eq!(fast, slow, "code {code} vendor {vendor}");
            }
        }
        assert!(avp(u32::MAX, 0).is_none());
        assert!(avp(1005, 10415).is_some_and(|d| d.name == "Charging-Rule-Name"));
    }

    #[test]
    fn every_definition_fits_the_index() {
        // If a dictionary grows past these bounds lookups stay correct
        // (they fall back to the binary search) but lose their speed.
        for d in AVPS {
            match d.vendor {
                0 => assert!((d.code as usize) < index::IETF_CODES, "{}", d.name),
                10415 => assert!((d.code as usize) < index::TGPP_CODES, "{}", d.name),
                _ => {}
            }
        }
    }
}

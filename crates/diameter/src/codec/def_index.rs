//! A direct-indexed view of the dictionary for the decoder's hot path:
//! `validate()` looks up every AVP it visits, and a binary search over the
//! ~400 definitions cost more instructions than everything else it does per
//! AVP. Here an IETF (vendor 0) or 3GPP code is one array load. Built once,
//! on first use, inside a static: no heap allocation.

use crate::dict::{self, AvpDef};
use std::sync::OnceLock;

/// Vendor 0 codes below this are indexed (the highest known is 485).
const IETF_CODES: usize = 1024;
/// 3GPP codes below this are indexed (the highest known is 2907).
const TGPP_CODES: usize = 4096;
const TGPP: u32 = 10415;

/// Position in `dict::avps()` plus one; 0 for a code the dictionary lacks.
struct Index {
    ietf: [u16; IETF_CODES],
    tgpp: [u16; TGPP_CODES],
}

static INDEX: OnceLock<Index> = OnceLock::new();

fn build() -> Index {
    let mut ix = Index {
        ietf: [0; IETF_CODES],
        tgpp: [0; TGPP_CODES],
    };
    for (i, d) in dict::avps().iter().enumerate() {
        let slot = match d.vendor {
            0 => ix.ietf.get_mut(d.code as usize),
            TGPP => ix.tgpp.get_mut(d.code as usize),
            _ => None,
        };
        // The table has a few hundred entries; u16 cannot overflow.
        if let (Some(slot), Ok(pos)) = (slot, u16::try_from(i + 1)) {
            *slot = pos;
        }
    }
    ix
}

/// The answer of a binary search of the dictionary, in one array index for
/// the vendors messages carry (IETF and 3GPP).
#[inline]
pub(crate) fn avp_def(code: u32, vendor: u32) -> Option<&'static AvpDef> {
    let ix = INDEX.get_or_init(build);
    let slot = match vendor {
        0 => ix.ietf.get(code as usize),
        TGPP => ix.tgpp.get(code as usize),
        _ => None,
    };
    match slot {
        Some(0) => None,
        Some(&pos) => dict::avps().get(usize::from(pos) - 1),
        None => dict::avp_by_search(code, vendor),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_the_dictionary_for_every_code() {
        for vendor in [0, TGPP, 13019, 5535] {
            for code in 0..5000 {
                let fast = avp_def(code, vendor).map(|d| (d.code, d.vendor, d.name));
                let slow = dict::avp_by_search(code, vendor).map(|d| (d.code, d.vendor, d.name));
                assert_eq!(fast, slow, "code {code} vendor {vendor}");
            }
        }
        assert!(avp_def(u32::MAX, 0).is_none());
        assert!(avp_def(1005, TGPP).is_some_and(|d| d.name == "Charging-Rule-Name"));
    }

    #[test]
    fn every_definition_fits_the_tables() {
        // If a dictionary grows past these bounds lookups stay correct
        // (they fall back to the binary search) but lose their speed.
        for d in dict::avps() {
            match d.vendor {
                0 => assert!((d.code as usize) < IETF_CODES, "{}", d.name),
                TGPP => assert!((d.code as usize) < TGPP_CODES, "{}", d.name),
                _ => {}
            }
        }
    }
}

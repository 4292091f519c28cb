//! A direct-indexed map from (vendor, code) to a position in the AVP table,
//! for the decoder's hot path: `validate()` looks up every AVP it visits,
//! and a binary search over the ~400 definitions cost more instructions
//! than everything else it does per AVP. Here an IETF (vendor 0) or 3GPP
//! code is one array load. It is built from the keys it is given, not from
//! the table itself, so the dictionary that owns it stays the one module
//! that knows the table.

/// Vendor 0 codes below this are indexed (the highest known is 485).
pub(super) const IETF_CODES: usize = 1024;
/// 3GPP codes below this are indexed (the highest known is 2907).
pub(super) const TGPP_CODES: usize = 4096;
const TGPP: u32 = 10415;

/// Position in the table plus one; 0 for a code the table lacks.
pub(super) struct Index {
    ietf: [u16; IETF_CODES],
    tgpp: [u16; TGPP_CODES],
}

/// What the index knows of one (vendor, code).
pub(super) enum Slot {
    /// At this position of the table.
    At(usize),
    /// Indexed, and not in the table.
    Absent,
    /// Outside the index (another vendor, or a code beyond its bounds):
    /// only a search of the table can tell.
    NotIndexed,
}

impl Index {
    /// Indexes `keys`, the (vendor, code) of each table entry in table order.
    pub(super) fn build(keys: impl IntoIterator<Item = (u32, u32)>) -> Index {
        let mut ix = Index {
            ietf: [0; IETF_CODES],
            tgpp: [0; TGPP_CODES],
        };
        for (i, (vendor, code)) in keys.into_iter().enumerate() {
            let slot = match vendor {
                0 => ix.ietf.get_mut(code as usize),
                TGPP => ix.tgpp.get_mut(code as usize),
                _ => None,
            };
            // The table has a few hundred entries; u16 cannot overflow.
            if let (Some(slot), Ok(pos)) = (slot, u16::try_from(i + 1)) {
                *slot = pos;
            }
        }
        ix
    }

    /// Where (vendor, code) is in the table, in one array index for the
    /// vendors messages carry (IETF and 3GPP).
    #[inline]
    pub(super) fn get(&self, code: u32, vendor: u32) -> Slot {
        let slot = match vendor {
            0 => self.ietf.get(code as usize),
            TGPP => self.tgpp.get(code as usize),
            _ => None,
        };
        match slot {
            Some(0) => Slot::Absent,
            Some(&pos) => Slot::At(usize::from(pos) - 1),
            None => Slot::NotIndexed,
        }
    }
}

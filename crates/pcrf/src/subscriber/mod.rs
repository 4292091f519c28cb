//! Provisioned subscribers: the profile (`profile.rs`: identities, plan,
//! services, attributes, checked on the way in) and the sharded in-memory
//! table of every profile (`table.rs`).

mod profile;
mod table;

pub use profile::*;
pub use table::SubscriberTable;

//! Maps that nearly always hold one entry or a few (a session's monitored
//! keys, a subscriber's accumulators and last reports) are sorted vectors
//! keyed by the node's shared texts: their first entry gets exactly the
//! room it takes, and a stored record's names are shared when read back.

use std::sync::Arc;

/// A stored map read back with its names shared (`session::shared_text`),
/// as a new entry's are: every record holding `total` holds the one
/// `total`.
pub(crate) fn shared_names<'de, D, V>(d: D) -> Result<litemap::LiteMap<Arc<str>, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    V: serde::Deserialize<'de>,
{
    let read = <litemap::LiteMap<String, V> as serde::Deserialize>::deserialize(d)?;
    Ok(read
        .into_iter()
        .map(|(k, v)| (crate::session::shared_text::shared(&k), v))
        .collect())
}

/// Inserts into a map that nearly always holds one entry (a session's
/// monitored keys, a subscriber's last reports): the first entry gets a
/// vector of exactly one, where a `Vec` makes room for four at its first
/// insert. Three empty slots were 288 bytes for each session holding one
/// grant, and 336 for each subscriber with one reported key, until the
/// next copy of the record (which allocates only what it holds).
pub(crate) fn insert_lean<K: Ord, V>(
    map: &mut litemap::LiteMap<K, V>,
    key: K,
    value: V,
) -> Option<V> {
    if map.is_empty() {
        *map = litemap::LiteMap::with_capacity(1);
    }
    map.insert(key, value)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_first_entry_gets_room_for_one() {
        let mut lean = litemap::LiteMap::new();
        assert_eq!(super::insert_lean(&mut lean, "total", 1), None);
        assert_eq!(lean.into_tuple_vec().capacity(), 1);
        let mut plain = litemap::LiteMap::new();
        plain.insert("total", 1);
        assert!(plain.into_tuple_vec().capacity() > 1);
        // Later entries grow it as usual.
        let mut lean = litemap::LiteMap::new();
        super::insert_lean(&mut lean, "b", 1);
        assert_eq!(super::insert_lean(&mut lean, "a", 2), None);
        assert_eq!(super::insert_lean(&mut lean, "a", 3), Some(2));
        assert_eq!(lean.into_tuple_vec(), vec![("a", 3), ("b", 1)]);
    }
}

//! A set of Session-Ids as the session table's indexes keep them (the
//! sessions of one subscriber, the sessions holding one UE address).
//! Nearly always one: that one is held as it is, without the hash table
//! and entry vector a general set allocates even for a single element
//! (about 250 bytes per open session across the two indexes). Several
//! sessions sharing a key grow it into an insertion-ordered hash set, so
//! adding and removing stay O(1) however many there are (a PCEF reporting
//! one address for every session must not make start-up quadratic).

use indexmap::IndexSet;
use std::sync::Arc;

/// Session-Ids under one key of an index.
#[derive(Debug, Default)]
pub enum IdSet {
    #[default]
    Empty,
    One(Arc<str>),
    Many(Box<IndexSet<Arc<str>>>),
}

impl IdSet {
    /// Adds `id` if it is not there yet, sharing the caller's allocation
    /// (the session record's own Session-Id).
    pub fn insert(&mut self, id: &Arc<str>) {
        match self {
            IdSet::Empty => *self = IdSet::One(id.clone()),
            IdSet::One(one) if **one == **id => {}
            IdSet::One(one) => {
                let mut set = IndexSet::with_capacity(2);
                set.insert(one.clone());
                set.insert(id.clone());
                *self = IdSet::Many(Box::new(set));
            }
            IdSet::Many(set) => {
                if !set.contains(&**id) {
                    set.insert(id.clone());
                }
            }
        }
    }

    /// Removes `id` if it is there (O(1): the last id takes its place).
    pub fn remove(&mut self, id: &str) {
        match self {
            IdSet::One(one) if **one == *id => *self = IdSet::Empty,
            IdSet::Many(set) => {
                set.swap_remove(id);
                if set.len() == 1 {
                    if let Some(last) = set.pop() {
                        *self = IdSet::One(last);
                    }
                } else if set.is_empty() {
                    *self = IdSet::Empty;
                }
            }
            _ => {}
        }
    }

    pub fn is_empty(&self) -> bool {
        match self {
            IdSet::Empty => true,
            IdSet::One(_) => false,
            IdSet::Many(set) => set.is_empty(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            IdSet::Empty => 0,
            IdSet::One(_) => 1,
            IdSet::Many(set) => set.len(),
        }
    }

    /// The ids, in the order they were added (while no id is removed).
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        let (one, many) = match self {
            IdSet::Empty => (None, None),
            IdSet::One(id) => (Some(&**id), None),
            IdSet::Many(set) => (None, Some(set.iter().map(|id| &**id))),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(s: &IdSet) -> Vec<&str> {
        s.iter().collect()
    }

    #[test]
    fn grows_from_one_and_shrinks_back() {
        let mut s = IdSet::default();
        assert!(s.is_empty());
        let id = |s: &str| -> Arc<str> { s.into() };
        s.insert(&id("a"));
        s.insert(&id("a"));
        assert!(matches!(s, IdSet::One(_)));
        assert_eq!(ids(&s), ["a"]);
        s.insert(&id("b"));
        s.insert(&id("c"));
        s.insert(&id("b"));
        assert_eq!(ids(&s), ["a", "b", "c"]);
        assert_eq!(s.len(), 3);
        s.remove("a");
        s.remove("x");
        assert_eq!(ids(&s), ["c", "b"]);
        s.remove("c");
        assert!(matches!(s, IdSet::One(_)), "{s:?}");
        assert_eq!(ids(&s), ["b"]);
        s.remove("z");
        assert_eq!(s.len(), 1);
        s.remove("b");
        assert!(s.is_empty() && ids(&s).is_empty());
        assert!(matches!(s, IdSet::Empty));
    }
}

//! The binding index: which open Gx sessions hold a UE address. An AF (Rx)
//! or a TDF (Sd, unsolicited mode) names the IP-CAN session only by the
//! UE's IPv4 address or IPv6 address (TS 29.213 §8.2); this finds it
//! without walking the table. The session table keeps it on insert,
//! publish and remove, so it stays right as sessions come, change address
//! (UE_IP_ADDRESS_ALLOCATE/RELEASE) and go.
//!
//! Several sessions may hold one address (private IPv4 pools per APN or
//! per gateway), so a key maps to a set of ids (id_set.rs: one inline,
//! several in an insertion-ordered set, so adding and removing cost the
//! same however many sessions share the address: a PCEF reporting one
//! address for every session must not make start-up quadratic) and
//! callers narrow by APN or subscriber. IPv6 is indexed by the session's prefix; a look-up by a
//! full address tries every prefix length in use (usually only /64).

use super::id_set::IdSet;
use super::record::{GxSession, SessionState};
use dashmap::DashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// An indexed address: a whole IPv4 address, or an IPv6 prefix (masked
/// address and length).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    V4(u32),
    V6(u128, u8),
}

/// UE address → ids of the open sessions holding it.
#[derive(Default)]
pub struct Bindings {
    ids: DashMap<Key, IdSet>,
    /// Bit n set: some session holds an IPv6 prefix of length n (0..=128).
    v6_lengths: [AtomicU64; 3],
}

/// The IPv6 prefix of Framed-IPv6-Prefix data (RFC 3162 §2.3: reserved,
/// prefix length, then the prefix's significant octets).
pub fn ipv6_prefix(data: &[u8]) -> Option<(Ipv6Addr, u8)> {
    let (&len, rest) = data.get(1..)?.split_first()?;
    if len > 128 || rest.len() < usize::from(len).div_ceil(8) || rest.len() > 16 {
        return None;
    }
    let mut octets = [0u8; 16];
    octets[..rest.len()].copy_from_slice(rest);
    Some((Ipv6Addr::from(mask(u128::from_be_bytes(octets), len)), len))
}

/// The IPv6 prefix of a session record (stored as hex of the AVP data).
fn session_prefix(text: &str) -> Option<(Ipv6Addr, u8)> {
    if text.len() > 36 {
        return None;
    }
    ipv6_prefix(&hex::decode(text).ok()?)
}

fn mask(v: u128, len: u8) -> u128 {
    match len {
        0 => 0,
        l if l >= 128 => v,
        l => v & !(u128::MAX >> l),
    }
}

/// The keys a session is indexed under (none once it is closed).
fn keys_of(s: &GxSession) -> Vec<Key> {
    if s.state != SessionState::Open {
        return Vec::new();
    }
    let mut keys = Vec::new();
    if let Some(v4) = s.ue_ipv4 {
        keys.push(Key::V4(u32::from(v4)));
    }
    if let Some((p, len)) = s.ue_ipv6_prefix.as_deref().and_then(session_prefix) {
        keys.push(Key::V6(u128::from(p), len));
    }
    keys
}

impl Bindings {
    fn add(&self, k: Key, id: &std::sync::Arc<str>) {
        if let Key::V6(_, len) = k {
            let len = usize::from(len);
            self.v6_lengths[len / 64].fetch_or(1 << (len % 64), Relaxed);
        }
        self.ids.entry(k).or_default().insert(id);
    }

    fn drop_key(&self, k: Key, id: &str) {
        self.ids.remove_if_mut(&k, |_, ids| {
            // O(1); the last id takes the removed one's place.
            ids.remove(id);
            ids.is_empty()
        });
    }

    /// Indexes a session that entered the table.
    pub fn bind(&self, s: &GxSession) {
        for k in keys_of(s) {
            self.add(k, &s.id);
        }
    }

    /// Forgets a session that left the table.
    pub fn unbind(&self, s: &GxSession) {
        for k in keys_of(s) {
            self.drop_key(k, &s.id);
        }
    }

    /// Follows a session from one record to the next (address or state
    /// changed); costs two small comparisons when nothing did.
    pub fn moved(&self, old: &GxSession, new: &GxSession) {
        if old.state == new.state
            && old.ue_ipv4 == new.ue_ipv4
            && old.ue_ipv6_prefix == new.ue_ipv6_prefix
        {
            return;
        }
        let before = keys_of(old);
        let after = keys_of(new);
        for k in before.iter().filter(|k| !after.contains(k)) {
            self.drop_key(*k, &old.id);
        }
        for k in after.iter().filter(|k| !before.contains(k)) {
            self.add(*k, &new.id);
        }
    }

    /// Ids of the open sessions holding `addr`: the IPv4 address itself,
    /// or an IPv6 prefix containing the address (an AF sends the UE's
    /// full IPv6 address, the PCEF the prefix it delegated).
    pub fn find(&self, addr: IpAddr) -> Vec<String> {
        match addr {
            IpAddr::V4(v4) => self.lookup(Key::V4(u32::from(v4))),
            IpAddr::V6(v6) => {
                let a = u128::from(v6);
                let lengths: [u64; 3] = std::array::from_fn(|i| self.v6_lengths[i].load(Relaxed));
                let mut out = Vec::new();
                // Longest prefix first: the most specific binding comes first.
                for len in (0..=128u8).rev() {
                    let l = usize::from(len);
                    if lengths[l / 64] & (1 << (l % 64)) == 0 {
                        continue;
                    }
                    for id in self.lookup(Key::V6(mask(a, len), len)) {
                        if !out.contains(&id) {
                            out.push(id);
                        }
                    }
                }
                out
            }
        }
    }

    /// Ids under the address of an IPv6 prefix as an AF sends it
    /// (Framed-IPv6-Prefix data).
    pub fn find_prefix(&self, data: &[u8]) -> Vec<String> {
        match ipv6_prefix(data) {
            Some((p, _)) => self.find(IpAddr::V6(p)),
            None => Vec::new(),
        }
    }

    fn lookup(&self, k: Key) -> Vec<String> {
        self.ids
            .get(&k)
            .map(|ids| ids.iter().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Addresses indexed (a gauge for tests and metrics).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The text a store shared by several nodes indexes a session's IPv6
/// prefix under (the masked prefix and its length, "2001:db8:1:2::/64"),
/// so that another node finds it as `find` does here: see
/// `stored_prefixes_containing`. None when the session has no (valid) prefix.
pub fn stored_prefix(s: &GxSession) -> Option<String> {
    let (p, len) = s.ue_ipv6_prefix.as_deref().and_then(session_prefix)?;
    Some(format!("{p}/{len}"))
}

/// The stored prefixes (`stored_prefix`) that contain the address of a
/// Framed-IPv6-Prefix an AF or a TDF sent, one per prefix length, longest
/// first: the keys `find_prefix` tries in memory, for a look-up in the
/// store. Empty for malformed data.
pub fn stored_prefixes_containing(data: &[u8]) -> Vec<String> {
    let Some((p, _)) = ipv6_prefix(data) else {
        return Vec::new();
    };
    let a = u128::from(p);
    (0..=128u8)
        .rev()
        .map(|len| format!("{}/{len}", Ipv6Addr::from(mask(a, len))))
        .collect()
}

/// An IPv4 address from Framed-IP-Address data.
pub fn ipv4(data: &[u8]) -> Option<Ipv4Addr> {
    <[u8; 4]>::try_from(data).ok().map(Ipv4Addr::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str, v4: Option<[u8; 4]>, v6_hex: Option<&str>) -> GxSession {
        let mut s = GxSession::new(id, "001", "pgw", "realm", 1);
        s.ue_ipv4 = v4.map(Ipv4Addr::from);
        s.ue_ipv6_prefix = v6_hex.map(Into::into);
        s
    }

    // 2001:db8:1:2::/64 as Framed-IPv6-Prefix data.
    const P64: &str = "004020010db800010002";

    #[test]
    fn many_sessions_on_one_address_are_each_bound_once_and_unbound_alone() {
        let b = Bindings::default();
        let all: Vec<GxSession> = (0..5000)
            .map(|i| session(&format!("s{i}"), Some([10, 0, 0, 9]), None))
            .collect();
        for s in &all {
            b.bind(s);
            b.bind(s); // again: still once
        }
        for s in all.iter().step_by(2) {
            b.unbind(s);
        }
        let mut found = b.find("10.0.0.9".parse().unwrap());
        found.sort();
        let mut expect: Vec<String> = all
            .iter()
            .skip(1)
            .step_by(2)
            .map(|s| s.id.to_string())
            .collect();
        expect.sort();
        assert_eq!(found, expect);
        for s in all.iter().skip(1).step_by(2) {
            b.unbind(s);
        }
        assert!(b.is_empty());
    }

    #[test]
    fn finds_by_ipv4_and_by_an_address_inside_the_ipv6_prefix() {
        let b = Bindings::default();
        b.bind(&session("a", Some([10, 0, 0, 1]), Some(P64)));
        assert_eq!(b.find("10.0.0.1".parse().unwrap()), vec!["a"]);
        assert!(b.find("10.0.0.2".parse().unwrap()).is_empty());
        assert_eq!(b.find("2001:db8:1:2::77".parse().unwrap()), vec!["a"]);
        assert!(b.find("2001:db8:1:3::77".parse().unwrap()).is_empty());
        // An AF's Framed-IPv6-Prefix with the full address (/128).
        let mut af = vec![0u8, 128];
        af.extend_from_slice(&"2001:db8:1:2::9".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(b.find_prefix(&af), vec!["a"]);
    }

    #[test]
    fn shared_addresses_list_every_session_and_unbind_forgets_one() {
        let b = Bindings::default();
        let x = session("x", Some([10, 0, 0, 1]), None);
        b.bind(&x);
        b.bind(&session("y", Some([10, 0, 0, 1]), None));
        let mut found = b.find("10.0.0.1".parse().unwrap());
        found.sort();
        assert_eq!(found, vec!["x", "y"]);
        b.unbind(&x);
        assert_eq!(b.find("10.0.0.1".parse().unwrap()), vec!["y"]);
    }

    #[test]
    fn follows_address_changes_and_closing() {
        let b = Bindings::default();
        let s1 = session("a", Some([10, 0, 0, 1]), None);
        b.bind(&s1);
        let s2 = session("a", Some([10, 0, 0, 9]), Some(P64));
        b.moved(&s1, &s2);
        assert!(b.find("10.0.0.1".parse().unwrap()).is_empty());
        assert_eq!(b.find("10.0.0.9".parse().unwrap()), vec!["a"]);
        let mut closed = s2.clone();
        closed.state = SessionState::Closed;
        b.moved(&s2, &closed);
        assert!(b.is_empty(), "a closed session is bound to nothing");
    }

    #[test]
    fn bad_prefix_data_is_ignored() {
        assert_eq!(ipv6_prefix(&[]), None);
        assert_eq!(ipv6_prefix(&[0, 129]), None);
        assert_eq!(ipv6_prefix(&[0, 64, 1, 2]), None, "too short for /64");
        assert_eq!(session_prefix("zz40"), None);
        let b = Bindings::default();
        b.bind(&session("a", None, Some("0040ab")));
        assert!(b.is_empty());
    }

    #[test]
    fn stored_prefixes_match_what_memory_finds() {
        let af = |addr: &str, len: u8| {
            let mut d = vec![0u8, len];
            d.extend_from_slice(&addr.parse::<Ipv6Addr>().unwrap().octets());
            d
        };
        for (session_hex, af_data, found) in [
            (P64, af("2001:db8:1:2::9", 128), true),
            (P64, af("2001:db8:1:2::", 64), true),
            (P64, af("2001:db8:1:3::9", 128), false),
            ("002820010db801", af("2001:db8:1ff:ffff::1", 128), true),
            ("002820010db801", af("2001:db8:200::1", 128), false),
        ] {
            let s = session("a", None, Some(session_hex));
            let b = Bindings::default();
            b.bind(&s);
            assert_eq!(!b.find_prefix(&af_data).is_empty(), found, "{session_hex}");
            let key = stored_prefix(&s).expect("a prefix");
            let keys = stored_prefixes_containing(&af_data);
            assert_eq!(keys.len(), 129);
            assert_eq!(keys.contains(&key), found, "{key} in {keys:?}");
        }
        assert_eq!(
            stored_prefix(&session("a", None, Some(P64))).as_deref(),
            Some("2001:db8:1:2::/64")
        );
        assert_eq!(stored_prefix(&session("a", None, Some("0040ab"))), None);
        assert!(stored_prefixes_containing(&[0, 129]).is_empty());
    }

    #[test]
    fn shorter_prefixes_are_found_too() {
        let b = Bindings::default();
        // 2001:db8:100::/40 delegated.
        b.bind(&session("d", None, Some("002820010db801")));
        assert_eq!(b.find("2001:db8:1ff:ffff::1".parse().unwrap()), vec!["d"]);
        assert!(b.find("2001:db8:200::1".parse().unwrap()).is_empty());
    }
}

//! The subscriber population S: a contiguous IMSI range with matching
//! MSISDNs and UE addresses, and which subscribers have a session open.
//!
//! A subscriber has at most one emulated session at a time (one PDN
//! connection), as the server would otherwise see a second CCR-I for the same
//! APN; new sessions take the next idle subscriber in round-robin order so
//! the whole range is exercised.

use std::net::Ipv4Addr;

/// The identities of S subscribers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Population {
    imsi_first: u64,
    imsi_digits: usize,
    msisdn_first: u64,
    msisdn_digits: usize,
    count: u64,
}

/// UE addresses come from 10.0.0.0/8, one per subscriber.
pub const MAX_SUBSCRIBERS: u64 = (1 << 24) - 2;

impl Population {
    /// `imsi_first` and `msisdn_first` are digit strings; the range keeps
    /// their width (leading zeros included).
    pub fn new(imsi_first: &str, msisdn_first: &str, count: u64) -> Result<Population, String> {
        let digits = |what: &str, s: &str, min: usize, max: usize| -> Result<u64, String> {
            if !(min..=max).contains(&s.len()) || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("{what} {s:?} must be {min} to {max} digits"));
            }
            s.parse::<u64>().map_err(|e| format!("{what} {s:?}: {e}"))
        };
        let imsi = digits("imsi_first", imsi_first, 6, 15)?;
        let msisdn = digits("msisdn_first", msisdn_first, 5, 15)?;
        if count == 0 || count > MAX_SUBSCRIBERS {
            return Err(format!(
                "population count must be between 1 and {MAX_SUBSCRIBERS}, not {count}"
            ));
        }
        let fits = |first: u64, width: usize| first + (count - 1) < 10u64.pow(width as u32);
        if !fits(imsi, imsi_first.len()) {
            return Err(format!(
                "imsi_first {imsi_first} + {count} subscribers overflows {} digits",
                imsi_first.len()
            ));
        }
        if !fits(msisdn, msisdn_first.len()) {
            return Err(format!(
                "msisdn_first {msisdn_first} + {count} subscribers overflows {} digits",
                msisdn_first.len()
            ));
        }
        Ok(Population {
            imsi_first: imsi,
            imsi_digits: imsi_first.len(),
            msisdn_first: msisdn,
            msisdn_digits: msisdn_first.len(),
            count,
        })
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The same range resized to `count` subscribers.
    pub fn with_count(&self, count: u64) -> Result<Population, String> {
        Population::new(
            &format!("{:0w$}", self.imsi_first, w = self.imsi_digits),
            &format!("{:0w$}", self.msisdn_first, w = self.msisdn_digits),
            count,
        )
    }

    /// The IMSI of subscriber `i` (0-based).
    pub fn imsi(&self, i: u64) -> String {
        format!("{:0w$}", self.imsi_first + i, w = self.imsi_digits)
    }

    pub fn msisdn(&self, i: u64) -> String {
        format!("{:0w$}", self.msisdn_first + i, w = self.msisdn_digits)
    }

    /// The UE's IPv4 address (Framed-IP-Address) of subscriber `i`.
    pub fn ue_ip(&self, i: u64) -> Ipv4Addr {
        let n = (i % MAX_SUBSCRIBERS) as u32 + 1;
        Ipv4Addr::from(0x0a00_0000 | n)
    }
}

/// Which subscribers have a session open; hands out idle ones round-robin.
#[derive(Clone, Debug)]
pub struct Occupancy {
    busy: Vec<u64>,
    count: u64,
    next: u64,
    in_use: u64,
}

impl Occupancy {
    pub fn new(count: u64) -> Occupancy {
        Occupancy {
            busy: vec![0; count.div_ceil(64) as usize],
            count,
            next: 0,
            in_use: 0,
        }
    }

    fn is_busy(&self, i: u64) -> bool {
        self.busy[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// The next idle subscriber, now marked busy; `None` if all are busy.
    pub fn acquire(&mut self) -> Option<u64> {
        if self.in_use >= self.count {
            return None;
        }
        // Terminates: at least one subscriber is idle.
        loop {
            let i = self.next;
            self.next = (self.next + 1) % self.count;
            if !self.is_busy(i) {
                self.busy[(i / 64) as usize] |= 1 << (i % 64);
                self.in_use += 1;
                return Some(i);
            }
        }
    }

    /// Marks subscriber `i` idle again (releasing an idle one is a no-op).
    pub fn release(&mut self, i: u64) {
        if i < self.count && self.is_busy(i) {
            self.busy[(i / 64) as usize] &= !(1 << (i % 64));
            self.in_use -= 1;
        }
    }

    pub fn in_use(&self) -> u64 {
        self.in_use
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_keep_width() {
        let p = Population::new("001010000000001", "0790000001", 1000).expect("valid");
        assert_eq!(p.imsi(0), "001010000000001");
        assert_eq!(p.imsi(999), "001010000001000");
        assert_eq!(p.msisdn(9), "0790000010");
        assert_eq!(p.ue_ip(0), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.ue_ip(256), Ipv4Addr::new(10, 0, 1, 1));
        let q = p.with_count(5).expect("resized");
        assert_eq!((q.count(), q.imsi(4)), (5, "001010000000005".to_string()));
        assert!(p.with_count(0).is_err());
    }

    #[test]
    fn rejects_bad_ranges() {
        assert!(Population::new("00101x", "79000000000", 10).is_err());
        assert!(Population::new("999999999999999", "79000000000", 2).is_err());
        assert!(Population::new("001010000000001", "99999", 2).is_err());
        assert!(Population::new("001010000000001", "79000000000", 0).is_err());
        assert!(Population::new("001010000000001", "79000000000", MAX_SUBSCRIBERS + 1).is_err());
        assert!(Population::new("999999999999999", "79000000000", 1).is_ok());
    }

    #[test]
    fn occupancy_round_robin_skips_busy_and_exhausts() {
        let mut o = Occupancy::new(3);
        assert_eq!(o.acquire(), Some(0));
        assert_eq!(o.acquire(), Some(1));
        o.release(0);
        assert_eq!(o.acquire(), Some(2));
        assert_eq!(o.acquire(), Some(0));
        assert_eq!(o.acquire(), None);
        assert_eq!(o.in_use(), 3);
        o.release(1);
        o.release(1);
        assert_eq!(o.in_use(), 2);
        assert_eq!(o.acquire(), Some(1));
    }

    #[test]
    fn occupancy_spans_words() {
        let mut o = Occupancy::new(130);
        for i in 0..130 {
            assert_eq!(o.acquire(), Some(i));
        }
        assert_eq!(o.acquire(), None);
        o.release(129);
        assert_eq!(o.acquire(), Some(129));
    }
}

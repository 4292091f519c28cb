//! One Gx IP-CAN session as the PCRF keeps it: what the PCEF told us, what
//! we installed, and the last decision with the inputs that made it. This
//! is the unit the store persists (one row, one blob) and recovers after a
//! restart.

use crate::policy::input::RuleFailure;
pub use crate::policy::record::{DecisionInputs, DecisionRecord};
use crate::policy::shared_decision::SharedDecision;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Open or closed (closed records are kept for the configured retention).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    Open,
    Closed,
}

/// A Gx session.
///
/// What the PCEF reports once or rarely (its host and realm, the APN, the
/// IPv6 prefix, location, time zone, device) is held as `Arc<str>`: every
/// request copies its session before changing it, and that copy then
/// shares these strings instead of allocating each anew. The host, realm
/// and APN are shared by every session that names them (`shared_text`). Serialised as
/// plain strings, so the stored record and the API output are unchanged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GxSession {
    /// Session-Id; the session table's indexes hold this same allocation.
    pub id: Arc<str>,
    pub state: SessionState,
    /// The subscriber key: IMSI, or MSISDN when no IMSI was sent.
    pub subscriber: Arc<str>,
    pub imsi: Option<Arc<str>>,
    pub msisdn: Option<Arc<str>>,
    /// The PCEF's Origin-Host and Origin-Realm (where RARs go).
    #[serde(deserialize_with = "super::shared_text::deserialize")]
    pub pcef_host: Arc<str>,
    #[serde(deserialize_with = "super::shared_text::deserialize")]
    pub pcef_realm: Arc<str>,
    #[serde(default, deserialize_with = "super::shared_text::deserialize_opt")]
    pub apn: Option<Arc<str>>,
    pub ue_ipv4: Option<std::net::Ipv4Addr>,
    /// Framed-IPv6-Prefix as hex of the AVP data.
    pub ue_ipv6_prefix: Option<Arc<str>>,
    pub rat_type: Option<i32>,
    pub ip_can_type: Option<i32>,
    /// 3GPP-User-Location-Info, hex.
    pub location: Option<Arc<str>>,
    /// 3GPP-MS-TimeZone, hex.
    pub ms_timezone: Option<Arc<str>>,
    /// IMEISV.
    pub device: Option<Arc<str>>,
    /// Supported-Features (Feature-List-ID, Feature-List) the PCEF offered.
    pub supported_features: Vec<(u32, u32)>,
    /// What the PCEF has installed now (our view after the last answer);
    /// shared with every equal decision alive, the last decision's most often.
    pub installed: SharedDecision,
    pub rule_failures: Vec<RuleFailure>,
    /// Usage monitoring at the PCEF: keys and their grants (one blob with
    /// the session: one row and one commit for both).
    #[serde(
        default,
        skip_serializing_if = "crate::usage::SessionMonitoring::is_idle"
    )]
    pub monitoring: crate::usage::SessionMonitoring,
    /// The TDF session (Sd) bound to this one, if any: in the same record
    /// so an Sd change is one write under this session's lock. Boxed: most
    /// sessions have none, and inline it took 150 bytes of every session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tdf: Option<Box<super::tdf::TdfSession>>,
    /// The subscriber's Sy session as of this record's last write (the
    /// newest copy among the subscriber's records wins at start-up).
    /// Boxed: most sessions have none, and inline it took 136 bytes of
    /// every session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sy: Option<Box<crate::session::spending::SySession>>,
    /// CC-Request-Number of the last CCR applied (retransmission detection).
    pub last_request_number: u32,
    /// When the PCEF was told to come back (Revalidation-Time), Unix ms; a
    /// new decision asking for (about) the same instant is not re-sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revalidation_at_ms: Option<i64>,
    pub last_decision: Option<std::sync::Arc<DecisionRecord>>,
    /// The encoded answer to the last CCR applied, replayed (with the new
    /// hop-by-hop and end-to-end ids) when that CCR is retransmitted, so a
    /// retransmission is answered again but never applied twice.
    /// The same bytes as the answer sent (shared, not copied).
    #[serde(default, with = "answer_text", skip_serializing_if = "Option::is_none")]
    pub last_answer: Option<bytes::Bytes>,
    /// Rx (AF) sessions bound to this one, with the rules they installed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub af: Vec<super::af::AfSession>,
    /// Policy notifications already emitted for this session (those whose
    /// period is the session: see docs/notifications.md), so each is
    /// emitted once per session, even across restarts.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub notified: std::collections::BTreeSet<String>,
    /// For a 5G PDU session served over N7: the SMF's context as it created
    /// the SM policy and as its Updates changed it (what a Get answers and
    /// the policy reads). `None` for a Gx session. The session's id is then
    /// the SM policy id, and `pcef_host` the SMF's notification authority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n7: Option<Box<crate::n7::model::SmPolicyContextData>>,
    /// The id of this session's PCF binding at the BSF (N7 sessions with
    /// `[sbi.bsf]`), removed there when the session ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bsf_binding: Option<String>,
    /// Unix milliseconds.
    pub created_ms: i64,
    pub updated_ms: i64,
    pub closed_ms: Option<i64>,
    /// The version of its row in a shared store (compare-and-set writes;
    /// not part of the record, never serialised).
    #[serde(skip)]
    pub version: crate::store::RowVersion,
}

impl GxSession {
    /// A new open session with nothing reported or installed yet.
    pub fn new(
        id: impl Into<Arc<str>>,
        subscriber: impl Into<Arc<str>>,
        pcef_host: &str,
        pcef_realm: &str,
        now_ms: i64,
    ) -> GxSession {
        GxSession {
            id: id.into(),
            state: SessionState::Open,
            subscriber: subscriber.into(),
            imsi: None,
            msisdn: None,
            pcef_host: super::shared_text::shared(pcef_host),
            pcef_realm: super::shared_text::shared(pcef_realm),
            apn: None,
            ue_ipv4: None,
            ue_ipv6_prefix: None,
            rat_type: None,
            ip_can_type: None,
            location: None,
            ms_timezone: None,
            device: None,
            supported_features: Vec::new(),
            installed: SharedDecision::default(),
            rule_failures: Vec::new(),
            monitoring: Default::default(),
            tdf: None,
            sy: None,
            last_request_number: 0,
            revalidation_at_ms: None,
            last_decision: None,
            last_answer: None,
            af: Vec::new(),
            notified: Default::default(),
            n7: None,
            bsf_binding: None,
            created_ms: now_ms,
            updated_ms: now_ms,
            closed_ms: None,
            version: Default::default(),
        }
    }
}

impl GxSession {
    /// Sets the IMSI and MSISDN the peer sent. One equal to the subscriber
    /// key (the IMSI nearly always is) shares the key's allocation.
    pub fn set_identity(&mut self, imsi: Option<&str>, msisdn: Option<&str>) {
        let key = &self.subscriber;
        let share = |v: &str| -> Arc<str> {
            if **key == *v {
                key.clone()
            } else {
                v.into()
            }
        };
        let (imsi, msisdn) = (imsi.map(share), msisdn.map(share));
        self.imsi = imsi;
        self.msisdn = msisdn;
    }

    /// Shares the subscriber key's allocation with an equal IMSI or MSISDN
    /// (a record read back from the store holds the same text twice
    /// otherwise).
    pub fn share_identity(&mut self) {
        let (imsi, msisdn) = (self.imsi.take(), self.msisdn.take());
        self.set_identity(imsi.as_deref(), msisdn.as_deref());
    }
}

impl GxSession {
    /// Equal in everything the store must keep: bookkeeping that is only
    /// needed while the process lives (the last request number and answer,
    /// the update time, the memo key and input snapshot of an unchanged
    /// decision) is ignored, so a CCR-U that changes nothing else
    /// causes no write: a published commercial PCRF went from 12,006 to
    /// 1,199 commits/s at 3000 TPS by writing only durable changes.
    pub fn durably_equal(&self, other: &GxSession) -> bool {
        // Destructured so that a new field must be placed on one side or
        // the other here; compared in place (no clones on the hot path).
        let GxSession {
            id,
            state,
            subscriber,
            imsi,
            msisdn,
            pcef_host,
            pcef_realm,
            apn,
            ue_ipv4,
            ue_ipv6_prefix,
            rat_type,
            ip_can_type,
            location,
            ms_timezone,
            device,
            supported_features,
            installed,
            rule_failures,
            monitoring,
            tdf,
            sy,
            last_request_number: _,
            revalidation_at_ms,
            last_decision,
            last_answer: _,
            af,
            notified,
            n7,
            bsf_binding,
            created_ms,
            updated_ms: _,
            closed_ms,
            version: _,
        } = self;
        *id == other.id
            && *state == other.state
            && *subscriber == other.subscriber
            && *imsi == other.imsi
            && *msisdn == other.msisdn
            && *pcef_host == other.pcef_host
            && *pcef_realm == other.pcef_realm
            && *apn == other.apn
            && *ue_ipv4 == other.ue_ipv4
            && *ue_ipv6_prefix == other.ue_ipv6_prefix
            && *rat_type == other.rat_type
            && *ip_can_type == other.ip_can_type
            && *location == other.location
            && *ms_timezone == other.ms_timezone
            && *device == other.device
            && *supported_features == other.supported_features
            && *installed == other.installed
            && *rule_failures == other.rule_failures
            && *monitoring == other.monitoring
            && match (tdf, &other.tdf) {
                (Some(a), Some(b)) => a.durably_equal(b),
                (None, None) => true,
                _ => false,
            }
            && *sy == other.sy
            && *revalidation_at_ms == other.revalidation_at_ms
            // The decision is durable; the memo key and input snapshot that
            // came with it are not (after a restart the memo misses once).
            && last_decision.as_ref().map(|d| &d.decision)
                == other.last_decision.as_ref().map(|d| &d.decision)
            && *af == other.af
            && *notified == other.notified
            && *n7 == other.n7
            && *bsf_binding == other.bsf_binding
            && *created_ms == other.created_ms
            && *closed_ms == other.closed_ms
    }
}

/// The stored answer: in JSON (the API, records written before the binary
/// form) base64 after a `b64:` tag (a third shorter than hex, and fewer
/// characters for a JSON writer to scan); JSON records older than that hold
/// plain hex, still read. In a binary record (`store/blob.rs`) the bytes
/// themselves.
mod answer_text {
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    use bytes::Bytes;
    use serde::de::{self, Deserializer, Visitor};
    use serde::{Deserialize, Serializer};

    const TAG: &str = "b64:";

    pub fn serialize<S: Serializer>(v: &Option<Bytes>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) if !s.is_human_readable() => s.serialize_bytes(b),
            Some(b) => s.serialize_str(&encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Bytes>, D::Error> {
        if !d.is_human_readable() {
            return Option::<Raw>::deserialize(d).map(|b| b.map(|Raw(b)| Bytes::from(b)));
        }
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        let bytes = match text.strip_prefix(TAG) {
            Some(b64) => STANDARD.decode(b64).ok(),
            None => hex::decode(&text).ok(),
        };
        bytes
            .map(|b| Some(Bytes::from(b)))
            .ok_or_else(|| de::Error::custom("bad stored answer text"))
    }

    /// The answer's bytes in a binary record.
    struct Raw(Vec<u8>);

    impl<'de> Deserialize<'de> for Raw {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Raw, D::Error> {
            struct RawVisitor;
            impl<'de> Visitor<'de> for RawVisitor {
                type Value = Raw;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("the answer's bytes")
                }
                fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Raw, E> {
                    Ok(Raw(v.to_vec()))
                }
                fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Raw, E> {
                    Ok(Raw(v))
                }
            }
            d.deserialize_bytes(RawVisitor)
        }
    }

    /// `b64:` and standard base64 with padding, in one allocation.
    pub(super) fn encode(b: &[u8]) -> String {
        let mut text = String::with_capacity(TAG.len() + b.len().div_ceil(3) * 4);
        text.push_str(TAG);
        STANDARD.encode_string(b, &mut text);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_imsi_equal_to_the_subscriber_key_is_one_allocation() {
        let mut s = GxSession::new("s", "001010000000001", "pgw", "r", 1);
        s.set_identity(Some("001010000000001"), Some("4915112345678"));
        let imsi = s.imsi.clone().expect("imsi");
        assert!(Arc::ptr_eq(&imsi, &s.subscriber));
        let msisdn = s.msisdn.clone().expect("msisdn");
        assert_eq!(&*msisdn, "4915112345678");
        assert!(!Arc::ptr_eq(&msisdn, &s.subscriber));
        // As a record read back from the store has it: separate texts.
        let mut read: GxSession =
            serde_json::from_value(serde_json::to_value(&s).expect("json")).expect("read");
        assert!(!Arc::ptr_eq(
            read.imsi.as_ref().expect("imsi"),
            &read.subscriber
        ));
        read.share_identity();
        assert!(Arc::ptr_eq(
            read.imsi.as_ref().expect("imsi"),
            &read.subscriber
        ));
        assert_eq!(read.msisdn.as_deref(), Some("4915112345678"));
        // A session keyed by its MSISDN (no IMSI sent) shares that one.
        let mut by_msisdn = GxSession::new("t", "4915112345678", "pgw", "r", 1);
        by_msisdn.set_identity(None, Some("4915112345678"));
        assert!(by_msisdn.imsi.is_none());
        assert!(Arc::ptr_eq(
            by_msisdn.msisdn.as_ref().expect("msisdn"),
            &by_msisdn.subscriber
        ));
    }

    #[test]
    fn bookkeeping_is_not_a_durable_change() {
        let a = GxSession::new("s", "001", "pgw", "r", 1);
        let mut b = a.clone();
        b.last_request_number = 7;
        b.last_answer = Some(vec![1, 2, 3].into());
        b.updated_ms = 99;
        assert!(a.durably_equal(&b));
        b.apn = Some("ims".into());
        assert!(!a.durably_equal(&b));
        let mut c = a.clone();
        c.installed.rules.push("internet".into());
        assert!(!a.durably_equal(&c));
        // The same decision reached from other inputs is not a write...
        let record = |hash: u64, rules: Vec<String>| DecisionRecord {
            input_hash: hash,
            script_version: 1,
            policy_version: 0,
            decision: crate::policy::Decision {
                rules,
                ..Default::default()
            }
            .into(),
            inputs: DecisionInputs::none(),
            at_ms: hash as i64,
            bounds: None,
        };
        let mut d = a.clone();
        d.last_decision = Some(std::sync::Arc::new(record(1, vec!["internet".into()])));
        let mut e = a.clone();
        e.last_decision = Some(std::sync::Arc::new(record(2, vec!["internet".into()])));
        assert!(d.durably_equal(&e));
        // ...a different decision is.
        e.last_decision = Some(std::sync::Arc::new(record(2, vec!["throttled".into()])));
        assert!(!d.durably_equal(&e));
    }

    /// The struct every open session holds whatever it has: what most
    /// sessions lack (a TDF session) is boxed, not reserved inline, and the
    /// decisions are shared (784 bytes with both inline).
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn an_open_session_struct_stays_small() {
        let size = std::mem::size_of::<GxSession>();
        assert!(size <= 480, "{size} bytes");
    }

    #[test]
    fn stored_answer_is_base64_and_old_hex_still_reads() {
        for len in 0..=7u8 {
            let bytes: Vec<u8> = (0..len).map(|i| i.wrapping_mul(97) ^ 0xf0).collect();
            let mut s = GxSession::new("s", "001", "pgw", "r", 1);
            s.last_answer = Some(bytes.clone().into());
            let json = serde_json::to_string(&s).expect("serialises");
            let back: GxSession = serde_json::from_str(&json).expect("deserialises");
            assert_eq!(back.last_answer.as_deref(), Some(&bytes[..]), "{json}");
        }
        assert_eq!(answer_text::encode(b"Man"), "b64:TWFu");
        assert_eq!(answer_text::encode(b"Ma"), "b64:TWE=");
        assert_eq!(answer_text::encode(b"M"), "b64:TQ==");
        let read = |text: &str| {
            let s = GxSession::new("s", "001", "pgw", "r", 1);
            let mut json = serde_json::to_value(&s).expect("serialises");
            json["last_answer"] = text.into();
            serde_json::from_value::<GxSession>(json).map(|s| s.last_answer)
        };
        assert_eq!(
            read("00abff").ok().flatten().as_deref(),
            Some(&[0, 0xab, 0xff][..])
        );
        assert_eq!(
            read("b64:AKv/").ok().flatten().as_deref(),
            Some(&[0, 0xab, 0xff][..])
        );
        for bad in [
            "0ab",
            "zz",
            "b64:AKv",
            "b64:A=Kv",
            "b64:TQ==TWFu",
            "b64:TW*u",
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hex_fields_round_trip_through_json() {
        let mut s = GxSession::new("s", "001", "pgw", "r", 1);
        s.last_answer = Some(vec![0, 0xab, 0xff].into());
        s.last_decision = Some(std::sync::Arc::new(DecisionRecord {
            input_hash: u64::MAX,
            script_version: 0x0123_4567_89ab_cdef,
            policy_version: 0,
            decision: SharedDecision::default(),
            inputs: DecisionInputs::none(),
            at_ms: 5,
            bounds: None,
        }));
        let json = serde_json::to_value(&s).expect("serialises");
        assert_eq!(json["last_answer"], "b64:AKv/");
        assert_eq!(json["last_decision"]["script_version"], "0123456789abcdef");
        let back: GxSession = serde_json::from_value(json).expect("deserialises");
        assert_eq!(back, s);
    }
}

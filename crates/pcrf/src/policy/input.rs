//! Everything the policy can see, gathered into one structure: the
//! engine hashes it, and when the hash and the
//! script version are unchanged since the last decision, Lua is not run.
//! Anything the script may read MUST be in here, or the memo would be wrong.
//! Deserialize (every field defaulted) lets policy test cases give a partial input.

use crate::policy::shared_decision::SharedDecision;
use crate::subscriber::Subscriber;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::sync::Arc;

/// The subscriber as the policy sees it.
///
/// A provisioned subscriber's input is its profile as the subscriber table
/// holds it, shared rather than copied: it is made once per profile change
/// (a new profile is a new `Arc`), not once per request. Any other input
/// (a subscriber the PCEF named but nobody provisioned, a test case, a
/// dry run's stored input) is described field by field. Both look the
/// same to the policy, the memo's hash and the API: [`SubscriberView`].
#[derive(Clone, Debug)]
pub enum SubscriberInput {
    Provisioned(Arc<Subscriber>),
    Described(SubscriberFields),
}

/// A subscriber input given field by field. `known` is false when the
/// PCEF's subscriber is not provisioned and config says to apply the
/// default policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubscriberFields {
    pub known: bool,
    pub imsi: Option<String>,
    pub msisdn: Option<String>,
    pub plan: Option<String>,
    pub services: Vec<String>,
    pub attributes: BTreeMap<String, serde_json::Value>,
}

/// What the policy reads of a subscriber, borrowed from either form (and
/// serialized as the input's `subscriber` part: the same names, in the
/// same order, as [`SubscriberFields`]).
#[derive(Debug, PartialEq, Serialize)]
pub struct SubscriberView<'a> {
    pub known: bool,
    pub imsi: Option<&'a str>,
    pub msisdn: Option<&'a str>,
    pub plan: Option<&'a str>,
    pub services: &'a [String],
    pub attributes: &'a BTreeMap<String, serde_json::Value>,
}

impl SubscriberInput {
    pub fn from_profile(s: &Arc<Subscriber>) -> SubscriberInput {
        SubscriberInput::Provisioned(s.clone())
    }

    pub fn view(&self) -> SubscriberView<'_> {
        match self {
            SubscriberInput::Provisioned(p) => SubscriberView {
                known: true,
                imsi: Some(&p.imsi),
                msisdn: p.msisdn.as_deref(),
                plan: p.plan.as_deref(),
                services: &p.services,
                attributes: &p.attributes,
            },
            SubscriberInput::Described(f) => SubscriberView {
                known: f.known,
                imsi: f.imsi.as_deref(),
                msisdn: f.msisdn.as_deref(),
                plan: f.plan.as_deref(),
                services: &f.services,
                attributes: &f.attributes,
            },
        }
    }

    /// The fields to change in a test's variation of an input, a
    /// provisioned profile's copied out first.
    #[cfg(test)]
    pub fn fields_mut(&mut self) -> &mut SubscriberFields {
        if let SubscriberInput::Provisioned(_) = self {
            *self = SubscriberInput::Described(self.view().to_fields());
        }
        match self {
            SubscriberInput::Described(f) => f,
            SubscriberInput::Provisioned(_) => unreachable!("copied out above"),
        }
    }
}

impl SubscriberView<'_> {
    /// An owned copy, to vary.
    pub fn to_fields(&self) -> SubscriberFields {
        SubscriberFields {
            known: self.known,
            imsi: self.imsi.map(str::to_owned),
            msisdn: self.msisdn.map(str::to_owned),
            plan: self.plan.map(str::to_owned),
            services: self.services.to_vec(),
            attributes: self.attributes.clone(),
        }
    }
}

impl Default for SubscriberInput {
    fn default() -> SubscriberInput {
        SubscriberInput::Described(SubscriberFields::default())
    }
}

impl From<SubscriberFields> for SubscriberInput {
    fn from(f: SubscriberFields) -> SubscriberInput {
        SubscriberInput::Described(f)
    }
}

/// Equal when the policy would see the same subscriber, whichever form.
impl PartialEq for SubscriberInput {
    fn eq(&self, other: &SubscriberInput) -> bool {
        self.view() == other.view()
    }
}

impl Serialize for SubscriberInput {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.view().serialize(s)
    }
}

impl<'de> Deserialize<'de> for SubscriberInput {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SubscriberInput, D::Error> {
        SubscriberFields::deserialize(d).map(SubscriberInput::Described)
    }
}

/// A rule the PCEF reported as failed (Charging-Rule-Report).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RuleFailure {
    pub rule: String,
    /// PCC-Rule-Status (0 ACTIVE, 1 INACTIVE, 2 TEMPORARILY_INACTIVE).
    pub status: u32,
    /// Rule-Failure-Code (TS 29.212 §5.3.38), when given.
    pub code: Option<u32>,
}

/// What a protocol adapter keeps in a session record in its own terms (an
/// N7 SM policy context) and how the policy sees that session. The
/// adapter implements it, so the node builds a policy input for any
/// session without knowing the protocol that opened it.
pub trait SessionContext {
    /// The session as the policy sees it, before the node adds what
    /// every session has (the installed rules, the rule failures).
    fn session_input(&self) -> SessionInput;
}

/// The names of the rules an enforcement point has installed (predefined,
/// base and dynamic), as the policy sees them: sorted.
///
/// The node hands over the session's installed decision itself (shared,
/// so building the input copies no name) and the names are read from it
/// where they are written out: the memo's hash, the input table, the API.
/// A test case or a stored input lists them.
#[derive(Clone, Debug)]
pub enum InstalledRules {
    Decision(SharedDecision),
    Listed(Vec<String>),
}

/// Up to this many names are sorted on the stack.
const SORTED_ON_STACK: usize = 16;

impl InstalledRules {
    /// Runs `f` on the names in order: a decision's sorted, a list's as
    /// listed.
    pub fn with_names<R>(&self, f: impl FnOnce(&[&str]) -> R) -> R {
        match self {
            InstalledRules::Listed(names) => {
                as_slice(names.iter().map(String::as_str), names.len(), false, f)
            }
            InstalledRules::Decision(d) => {
                let names = d
                    .rules
                    .iter()
                    .chain(&d.base_names)
                    .map(String::as_str)
                    .chain(d.definitions.iter().map(|r| r.name.as_str()));
                let count = d.rules.len() + d.base_names.len() + d.definitions.len();
                as_slice(names, count, true, f)
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.with_names(|n| n.is_empty())
    }
}

/// Runs `f` on the `count` `names` as one slice, sorted when `sort`: on
/// the stack up to `SORTED_ON_STACK` of them, in a vector past that.
fn as_slice<'a, R>(
    names: impl Iterator<Item = &'a str>,
    count: usize,
    sort: bool,
    f: impl FnOnce(&[&str]) -> R,
) -> R {
    let mut on_stack = [""; SORTED_ON_STACK];
    let mut on_heap = Vec::new();
    let slice: &mut [&str] = if count <= SORTED_ON_STACK {
        for (slot, n) in on_stack.iter_mut().zip(names) {
            *slot = n;
        }
        &mut on_stack[..count]
    } else {
        on_heap.extend(names);
        &mut on_heap
    };
    if sort {
        slice.sort_unstable();
    }
    f(slice)
}

impl Default for InstalledRules {
    fn default() -> InstalledRules {
        InstalledRules::Listed(Vec::new())
    }
}

impl From<Vec<String>> for InstalledRules {
    fn from(names: Vec<String>) -> InstalledRules {
        InstalledRules::Listed(names)
    }
}

/// Equal when the policy would see the same names in the same order.
impl PartialEq for InstalledRules {
    fn eq(&self, other: &InstalledRules) -> bool {
        self.with_names(|a| other.with_names(|b| a == b))
    }
}

impl Serialize for InstalledRules {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.with_names(|names| names.serialize(s))
    }
}

impl<'de> Deserialize<'de> for InstalledRules {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<InstalledRules, D::Error> {
        Vec::<String>::deserialize(d).map(InstalledRules::Listed)
    }
}

/// The UE's IPv4 address as the policy sees it: dotted text. A Gx
/// session hands over the address itself, written out as text where the
/// input is written out (the memo's hash, the input table, the API), so
/// building the input writes no text; an SMF's address that does not
/// read back as the same text, a test case or a stored input gives the
/// text.
#[derive(Clone, Debug)]
pub enum Ipv4Input {
    Address(Ipv4Addr),
    Text(String),
}

impl Ipv4Input {
    /// An SMF's address: kept as an address when it reads back as the
    /// same text, else as given.
    pub fn of_text(text: &str) -> Ipv4Input {
        match text.parse::<Ipv4Addr>() {
            Ok(a) if Ipv4Input::Address(a).with_text(|t| t == text) => Ipv4Input::Address(a),
            _ => Ipv4Input::Text(text.to_owned()),
        }
    }

    /// Runs `f` on the text (an address written on the stack).
    pub fn with_text<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        match self {
            Ipv4Input::Text(t) => f(t),
            Ipv4Input::Address(a) => {
                let mut text = DottedQuad::default();
                // 15 bytes hold any IPv4 address; past them nothing is written.
                let _ = write!(text, "{a}");
                f(text.as_str())
            }
        }
    }
}

/// An IPv4 address's text, on the stack.
#[derive(Default)]
struct DottedQuad {
    bytes: [u8; 15],
    len: usize,
}

impl DottedQuad {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl std::fmt::Write for DottedQuad {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let room = self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        room.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

impl From<&str> for Ipv4Input {
    fn from(text: &str) -> Ipv4Input {
        Ipv4Input::Text(text.to_owned())
    }
}

/// Equal when the policy would see the same text.
impl PartialEq for Ipv4Input {
    fn eq(&self, other: &Ipv4Input) -> bool {
        self.with_text(|a| other.with_text(|b| a == b))
    }
}

impl Serialize for Ipv4Input {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.with_text(|t| s.serialize_str(t))
    }
}

impl<'de> Deserialize<'de> for Ipv4Input {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Ipv4Input, D::Error> {
        String::deserialize(d).map(Ipv4Input::Text)
    }
}

/// The IP-CAN session as the policy sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionInput {
    // The texts are the session record's own (`Arc<str>`) and the
    // dictionary's names: building the input for each request (the memo
    // hashes it even when the policy does not run) copies none of them.
    pub apn: Option<Arc<str>>,
    /// RAT-Type name from the dictionary (e.g. "EUTRAN"), or the number.
    pub rat: Option<Cow<'static, str>>,
    pub ip_can_type: Option<Cow<'static, str>>,
    pub ue_ipv4: Option<Ipv4Input>,
    pub ue_ipv6_prefix: Option<Arc<str>>,
    /// 3GPP-User-Location-Info as hex.
    pub location: Option<Arc<str>>,
    /// 3GPP-MS-TimeZone as hex.
    pub ms_timezone: Option<Arc<str>>,
    /// IMEISV from User-Equipment-Info.
    pub device: Option<Arc<str>>,
    /// The PCEF's Origin-Host.
    pub pcef: Arc<str>,
    /// Names of rules installed now (predefined, base and dynamic).
    pub installed: InstalledRules,
    pub rule_failures: Vec<RuleFailure>,
    /// What only a 5G PDU session has (N7, TS 29.512); absent on Gx, so a
    /// script tells N7 from Gx by `session.n7 ~= nil`. On N7 the common
    /// fields above are filled as well (`apn` holds the DNN, `rat` the
    /// RatType, `location` the UserLocation as JSON text, `ms_timezone`
    /// the time zone as the SMF wrote it, `device` the PEI, `pcef` the
    /// SMF's notification URI host), so a policy written for Gx decides
    /// 5G sessions unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n7: Option<N7SessionInput>,
}

/// A PDU session's own facts (SmPolicyContextData, TS 29.512 §5.6.2.3).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct N7SessionInput {
    /// "3GPP_ACCESS" or "NON_3GPP_ACCESS", when the SMF sent it.
    pub access_type: Option<String>,
    pub supi: String,
    pub gpsi: Option<String>,
    /// 0..=255.
    pub pdu_session_id: u8,
    /// "IPV4", "IPV6", "IPV4V6", "UNSTRUCTURED", "ETHERNET" (or another
    /// value a newer SMF sends).
    pub pdu_session_type: String,
    pub dnn: String,
    /// Slice/Service Type, 0..=255.
    pub sst: u8,
    /// Slice Differentiator, six hex digits.
    pub sd: Option<String>,
    /// Serving network as "mcc-mnc".
    pub serving_network: Option<String>,
    /// The subscribed session AMBR, bit/s, as the SMF sent it.
    pub subscribed_ambr_ul: Option<u64>,
    pub subscribed_ambr_dl: Option<u64>,
    /// The subscribed default QoS's 5QI.
    pub subscribed_5qi: Option<u32>,
}

/// Local time in the policy's configured time zone.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeInput {
    /// 0..=23.
    pub hour: u8,
    /// 0..=59. Minute granularity keeps the memo effective within a minute.
    pub minute: u8,
    /// 1 = Monday ..= 7 = Sunday (ISO 8601).
    pub weekday: u8,
    /// "YYYY-MM-DD". Shared by the requests of a day on a thread
    /// (`clock.rs`): the text is made once a day, not on every request.
    pub date: Arc<str>,
    /// The instant the fields above were read, Unix ms (0 when unknown, as
    /// in policy test cases). Not shown to the policy nor hashed: the memo
    /// checks a decision's time bound (`valid.secs`) against it.
    #[serde(skip)]
    pub at_ms: i64,
    /// The start of the local minute `at_ms` falls in, Unix ms: where a
    /// decision's `valid.secs` counts from.
    #[serde(skip)]
    pub minute_ms: i64,
}

/// Network state the operator sets through the API.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkInput {
    /// Congestion level of the subscriber's cell, 0 = none.
    pub congestion: u32,
}

/// One accumulator as the policy sees it. Whole megabytes (10^6 octets)
/// and whole percent, not octets: the input hash then changes only when a
/// figure the policy can act on changes, so most usage reports are decided
/// from the memo. Exact octets are in the API.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccumulatorInput {
    /// Used in the current period, MB (floor).
    pub used_mb: u64,
    /// The period's allowance (quota + top-ups), MB (floor); absent when
    /// the subscriber has no quota on this accumulator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_mb: Option<u64>,
    /// used / allowance, whole percent (floor; may exceed 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent: Option<u64>,
    /// The allowance is used up (exact, in octets).
    pub exhausted: bool,
}

/// Usage per accumulator (named in the usage file).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UsageInput {
    pub accumulators: BTreeMap<Arc<str>, AccumulatorInput>,
    /// Monitoring-Keys reported in this request that the usage file does
    /// not know (counted nowhere; the policy may react).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_keys: Vec<String>,
}

/// The whole input of one policy run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyInput {
    pub subscriber: SubscriberInput,
    pub session: SessionInput,
    pub time: TimeInput,
    pub network: NetworkInput,
    pub usage: UsageInput,
    /// TDF-Application-Identifiers the TDF reports running now (started,
    /// not stopped; Sd), sorted. Empty without a TDF.
    pub applications: Vec<String>,
    /// Sy policy counter statuses by Policy-Counter-Identifier, as the OCS
    /// reports them ("unknown" when the OCS could not be asked).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub spending: BTreeMap<String, String>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An input with every field set (an N7 session, attributes of each
    /// JSON kind, accumulators with and without a quota).
    pub(crate) fn every_field_filled() -> PolicyInput {
        let mut p = PolicyInput::default();
        let sub = p.subscriber.fields_mut();
        sub.known = true;
        sub.imsi = Some("001010000000001".into());
        sub.msisdn = Some("79000000001".into());
        sub.plan = Some("plus".into());
        sub.services = vec!["internet".into(), "vip".into()];
        sub.attributes.insert(
            "profile".into(),
            serde_json::json!({"blocked": false, "tier": 3, "tags": ["a", "b"], "none": null}),
        );
        p.session = SessionInput {
            apn: Some("internet".into()),
            rat: Some("EUTRAN".into()),
            ip_can_type: Some("3GPP-EPS".into()),
            ue_ipv4: Some("10.0.0.1".into()),
            ue_ipv6_prefix: Some("0040200100000000".into()),
            location: Some("8200f110000100f1100001a2b3c4".into()),
            ms_timezone: Some("4000".into()),
            device: Some("3534210112345601".into()),
            pcef: "pgw-1.bench.test".into(),
            installed: vec!["internet".to_owned(), "vip-video".to_owned()].into(),
            rule_failures: vec![
                RuleFailure {
                    rule: "vip-video".into(),
                    status: 1,
                    code: Some(4),
                },
                RuleFailure {
                    rule: "other".into(),
                    status: 2,
                    code: None,
                },
            ],
            n7: None,
        };
        p.session.n7 = Some(crate::policy::input::N7SessionInput {
            access_type: Some("3GPP_ACCESS".into()),
            supi: "imsi-001010000000001".into(),
            gpsi: Some("msisdn-79000000001".into()),
            pdu_session_id: 5,
            pdu_session_type: "IPV4".into(),
            dnn: "internet".into(),
            sst: 1,
            sd: Some("000001".into()),
            serving_network: Some("001-01".into()),
            subscribed_ambr_ul: Some(1_000_000_000),
            subscribed_ambr_dl: Some(u64::MAX),
            subscribed_5qi: Some(9),
        });
        p.time = TimeInput {
            hour: 23,
            minute: 59,
            weekday: 7,
            date: "2026-11-22".into(),
            ..TimeInput::default()
        };
        p.network = NetworkInput { congestion: 2 };
        p.usage.accumulators.insert(
            "monthly".into(),
            AccumulatorInput {
                used_mb: 1234,
                quota_mb: Some(10_000),
                percent: Some(12),
                exhausted: false,
            },
        );
        p.usage.accumulators.insert(
            "daily".into(),
            AccumulatorInput {
                used_mb: 7,
                quota_mb: None,
                percent: None,
                exhausted: true,
            },
        );
        p.usage.unknown_keys = vec!["mystery".into()];
        p.applications = vec!["video-streaming".into()];
        p.spending.insert("monthly-data".into(), "exhausted".into());
        p
    }

    /// A provisioned subscriber's input shares the profile the table
    /// holds (nothing is copied per request), and it looks to the memo's
    /// hash, the API and a stored input's reader exactly as the same
    /// subscriber given field by field, without the profile's usage
    /// settings (not policy input).
    #[test]
    fn a_provisioned_subscriber_is_shared_and_looks_as_described() {
        let every = every_field_filled();
        let fields = every.subscriber.view().to_fields();
        let profile = Arc::new(Subscriber {
            imsi: fields.imsi.clone().unwrap_or_default(),
            msisdn: fields.msisdn.clone(),
            plan: fields.plan.clone(),
            services: fields.services.clone(),
            attributes: fields.attributes.clone(),
            billing_day: Some(9),
            quotas: BTreeMap::from([("monthly".to_owned(), 1 << 30)]),
        });
        let shared = PolicyInput {
            subscriber: SubscriberInput::from_profile(&profile),
            ..every.clone()
        };
        match &shared.subscriber {
            SubscriberInput::Provisioned(p) => assert!(Arc::ptr_eq(p, &profile)),
            SubscriberInput::Described(_) => panic!("copied: {:?}", shared.subscriber),
        }
        assert_eq!(shared, every);
        let hash =
            |i: &PolicyInput| crate::policy::memo::hash_input(i, |h, bytes| (h, bytes.to_vec()));
        assert_eq!(hash(&shared), hash(&every));
        let json = serde_json::to_value(&shared).expect("json");
        assert_eq!(json, serde_json::to_value(&every).expect("json"));
        assert_eq!(json["subscriber"]["known"], serde_json::json!(true));
        assert!(json["subscriber"].get("quotas").is_none());
        let back: PolicyInput = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, shared);
        assert!(matches!(back.subscriber, SubscriberInput::Described(_)));
        // An unknown subscriber with a profile's fields is another input.
        let mut unknown = every.clone();
        unknown.subscriber.fields_mut().known = false;
        assert_ne!(unknown, shared);
        assert_ne!(hash(&unknown), hash(&shared));
    }

    /// The installed rules are read from the session's decision, not
    /// copied, and show sorted, exactly as the sorted list would: to the
    /// memo's hash, the API, a stored input's reader. Past the names
    /// sorted on the stack too.
    #[test]
    fn installed_rules_read_from_the_decision_look_as_listed() {
        use crate::policy::decision::{Decision, RuleDefinition};
        for count in [0usize, 3, SORTED_ON_STACK, SORTED_ON_STACK + 5] {
            let mut d = Decision::default();
            for n in 0..count {
                let name = format!("r{:02}", (n * 7) % 100);
                match n % 3 {
                    0 => d.rules.push(name),
                    1 => d.base_names.push(name),
                    _ => d.definitions.push(RuleDefinition {
                        name,
                        ..RuleDefinition::default()
                    }),
                }
            }
            let mut sorted: Vec<String> = d
                .rules
                .iter()
                .chain(&d.base_names)
                .cloned()
                .chain(d.definitions.iter().map(|r| r.name.clone()))
                .collect();
            sorted.sort();
            let mut read = every_field_filled();
            read.session.installed = InstalledRules::Decision(d.into());
            let mut listed = every_field_filled();
            listed.session.installed = sorted.clone().into();
            assert_eq!(read, listed, "{count}");
            let hash = |i: &PolicyInput| crate::policy::memo::hash_input(i, |h, b| (h, b.to_vec()));
            assert_eq!(hash(&read), hash(&listed), "{count}");
            let json = serde_json::to_value(&read).expect("json");
            assert_eq!(json["session"]["installed"], serde_json::json!(sorted));
            let back: PolicyInput = serde_json::from_value(json).expect("reads back");
            assert_eq!(back, read);
            assert_eq!(read.session.installed.is_empty(), count == 0);
        }
        // A list keeps its order: it is what a test case gave.
        let given: InstalledRules = vec!["b".to_owned(), "a".to_owned()].into();
        given.with_names(|n| assert_eq!(n, ["b", "a"]));
        assert_ne!(
            given,
            InstalledRules::from(vec!["a".to_owned(), "b".to_owned()])
        );
    }

    /// A session's address is written out as the text the policy always
    /// saw, for the widest address too, and hashes and shows as that text
    /// given; an SMF's text that an address would write otherwise is kept.
    #[test]
    fn an_address_is_written_as_its_text() {
        let hash = |i: &PolicyInput| crate::policy::memo::hash_input(i, |h, b| (h, b.to_vec()));
        for text in ["10.0.0.1", "255.255.255.255", "0.0.0.0"] {
            let address: Ipv4Addr = text.parse().expect("an address");
            let mut written = every_field_filled();
            written.session.ue_ipv4 = Some(Ipv4Input::Address(address));
            let mut given = every_field_filled();
            given.session.ue_ipv4 = Some(text.into());
            assert_eq!(written, given, "{text}");
            assert_eq!(hash(&written), hash(&given), "{text}");
            let json = serde_json::to_value(&written).expect("json");
            assert_eq!(json["session"]["ue_ipv4"], serde_json::json!(text));
            let back: PolicyInput = serde_json::from_value(json).expect("reads back");
            assert_eq!(back, written);
            assert!(matches!(Ipv4Input::of_text(text), Ipv4Input::Address(a) if a == address));
        }
        for odd in ["10.0.0.01", "not an address", ""] {
            let kept = Ipv4Input::of_text(odd);
            assert!(matches!(&kept, Ipv4Input::Text(t) if t == odd), "{odd}");
            kept.with_text(|t| assert_eq!(t, odd));
        }
    }
}

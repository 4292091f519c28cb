//! The Rx policy hook: how the media an AF describes become dynamic PCC
//! rules. The policy script may define `authorize_media(input)`; when it
//! does not, the prelude's `default_authorize_media` (TS 29.213 §6.3
//! mapping, readable in `sandbox.lua`) applies. Same sandbox and limits as
//! `decide`; no memo (an AAR is rare next to CCRs).

use super::decision::RuleDefinition;
use super::input::{SessionInput, SubscriberInput};
use super::{PolicyEngine, PolicyError};
use serde::{Deserialize, Serialize};

/// One Media-Sub-Component (TS 29.214 §5.3.21): one flow of a media
/// component, its IP filters and what it is used for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MediaSubComponent {
    pub flow_number: u32,
    /// Flow-Description IPFilterRules, as received (validated).
    pub flows: Vec<String>,
    /// Flow-Usage: 0 NO_INFORMATION, 1 RTCP, 2 AF_SIGNALLING.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_usage: Option<u32>,
    /// Flow-Status: 0 ENABLED-UPLINK .. 3 DISABLED, 4 REMOVED.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_status: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ul: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_dl: Option<u32>,
}

/// One Media-Component-Description (TS 29.214 §5.3.16).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MediaComponent {
    pub number: u32,
    /// Media-Type as the dictionary names it ("AUDIO", "VIDEO", ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Max-Requested-Bandwidth-UL/DL, bit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ul: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_dl: Option<u32>,
    /// RR-Bandwidth and RS-Bandwidth (RTCP), bit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rr_bandwidth: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rs_bandwidth: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow_status: Option<u32>,
    /// Codec-Data, as text (SDP lines).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub codec_data: Vec<String>,
    pub sub_components: Vec<MediaSubComponent>,
}

/// The AF session as the hook sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AfInput {
    /// The Rx Session-Id.
    pub session: String,
    /// 8 hex digits derived from the Rx Session-Id, for short rule names.
    pub tag: String,
    /// The AF's Origin-Host.
    pub host: String,
    pub application: Option<String>,
    pub service_urn: Option<String>,
    pub specific_actions: Vec<u32>,
}

/// Everything `authorize_media` sees.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MediaInput {
    pub af: AfInput,
    /// All media of the AF session (after merging a modification).
    pub media: Vec<MediaComponent>,
    /// The Gx session the AF session is bound to.
    pub session: SessionInput,
    pub subscriber: SubscriberInput,
}

/// What `authorize_media` returns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MediaDecision {
    /// The dynamic rules of this AF session (all of them, not a change).
    pub rules: Vec<RuleDefinition>,
    /// Set to refuse the service (answered 5063 REQUESTED_SERVICE_NOT_AUTHORIZED).
    pub reject: Option<String>,
}

/// The rule-name tag of an Rx session: FNV-1a of its Session-Id, 8 hex digits.
pub fn af_tag(rx_session: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in rx_session.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

impl PolicyEngine {
    /// Runs the media hook of the current script.
    pub fn authorize_media(&self, input: &MediaInput) -> Result<MediaDecision, PolicyError> {
        self.call_hook("authorize_media", input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::engine::EngineConfig;
    use crate::policy::Limits;

    fn engine(source: &str) -> (PolicyEngine, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "pcrf-media-{}-{}",
            std::process::id(),
            af_tag(source)
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("policy.lua");
        std::fs::write(&path, source).expect("write");
        let e = PolicyEngine::load(EngineConfig {
            path: path.clone(),
            limits: Limits::default(),
            fallback: Default::default(),
        })
        .expect("loads");
        (e, dir)
    }

    fn voice_input() -> MediaInput {
        let sub = |n: u32, usage: Option<u32>| MediaSubComponent {
            flow_number: n,
            flows: vec![
                "permit out 17 from 192.0.2.9 5000 to 10.45.0.2 4000".into(),
                "permit in 17 from 10.45.0.2 4000 to 192.0.2.9 5000".into(),
            ],
            flow_usage: usage,
            ..Default::default()
        };
        MediaInput {
            af: AfInput {
                session: "pcscf;1".into(),
                tag: af_tag("pcscf;1"),
                host: "pcscf".into(),
                ..Default::default()
            },
            media: vec![
                MediaComponent {
                    number: 1,
                    media_type: Some("AUDIO".into()),
                    max_ul: Some(64_000),
                    max_dl: Some(48_000),
                    sub_components: vec![sub(1, None), sub(2, Some(1))],
                    ..Default::default()
                },
                MediaComponent {
                    number: 2,
                    media_type: Some("VIDEO".into()),
                    max_ul: Some(1_000_000),
                    max_dl: Some(1_000_000),
                    sub_components: vec![sub(1, None)],
                    ..Default::default()
                },
                MediaComponent {
                    number: 3,
                    media_type: Some("CONTROL".into()),
                    sub_components: vec![sub(1, Some(2))],
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn default_maps_media_as_ts_29_213_does() {
        let (e, dir) = engine("function decide(input) return {} end");
        let d = e.authorize_media(&voice_input()).expect("decides");
        let tag = af_tag("pcscf;1");
        let got: Vec<(String, u32, Option<u32>)> = d
            .rules
            .iter()
            .map(|r| {
                let q = r.qos.as_ref().expect("qos");
                (r.name.clone(), q.qci, q.gbr_dl)
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (format!("af-{tag}-1-1"), 1, Some(48_000)),
                (format!("af-{tag}-1-2"), 1, Some(48_000)),
                (format!("af-{tag}-2-1"), 2, Some(1_000_000)),
                (format!("af-{tag}-3-1"), 5, None),
            ]
        );
        assert_eq!(d.rules[0].flows.len(), 2);
        assert_eq!(d.reject, None);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_script_overrides_and_may_refuse() {
        let (e, dir) = engine(
            r#"
function decide(input) return {} end
function authorize_media(input)
  if input.af.service_urn == "blocked" then return { reject = "not here" } end
  local d = default_authorize_media(input)
  d.rules[1].precedence = 7
  return d
end
"#,
        );
        let mut input = voice_input();
        let d = e.authorize_media(&input).expect("decides");
        assert_eq!(d.rules[0].precedence, Some(7));
        input.af.service_urn = Some("blocked".into());
        let d = e.authorize_media(&input).expect("decides");
        assert_eq!(d.reject.as_deref(), Some("not here"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_bad_hook_is_an_error_not_a_panic() {
        let (e, dir) = engine(
            "function decide(input) return {} end\nfunction authorize_media(input) return { rules = 5 } end",
        );
        assert!(e.authorize_media(&voice_input()).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn no_media_is_no_rules_not_an_error() {
        // An empty Lua table must read as an empty list (found by the
        // media cases of policies/default.cases.toml).
        let (e, dir) = engine("function decide(input) return {} end");
        let d = e.authorize_media(&MediaInput::default()).expect("decides");
        assert_eq!(d, MediaDecision::default());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn tags_are_short_and_stable() {
        assert_eq!(af_tag("pcscf;1").len(), 8);
        assert_eq!(af_tag("pcscf;1"), af_tag("pcscf;1"));
        assert_ne!(af_tag("pcscf;1"), af_tag("pcscf;2"));
    }
}

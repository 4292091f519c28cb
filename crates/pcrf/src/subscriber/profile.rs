//! A subscriber's provisioned profile: who they are and what they bought.
//! Provisioned through the REST API, persisted by the store, read by the
//! policy. Sessions refer to it by IMSI (or MSISDN when the PCEF sends only that).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One subscriber's profile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Subscriber {
    /// IMSI, the primary key (digits only, 5..15).
    pub imsi: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msisdn: Option<String>,
    /// The commercial plan name the policy keys on (e.g. "basic", "unlimited").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Extra services bought (e.g. "vip", "video-boost").
    #[serde(default)]
    pub services: Vec<String>,
    /// Free-form operator attributes the policy may read (e.g. "blocked": true).
    #[serde(default)]
    pub attributes: BTreeMap<String, serde_json::Value>,
    /// Day of the month (1..=28) on which monthly accumulators reset;
    /// the usage file's default when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub billing_day: Option<u8>,
    /// Quotas by accumulator name, octets per period; override the plan's
    /// quotas from the usage file.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub quotas: BTreeMap<String, u64>,
}

/// Why a subscriber profile was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubscriberError {
    #[error("imsi must be 5 to 15 digits, got {0:?}")]
    BadImsi(String),
    #[error("msisdn must be 5 to 15 digits, got {0:?}")]
    BadMsisdn(String),
    #[error("billing_day must be 1 to 28, got {0}")]
    BadBillingDay(u8),
}

fn digits(s: &str) -> bool {
    (5..=15).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())
}

impl Subscriber {
    /// Checks identifiers; the API answers 400 with this message.
    pub fn validate(&self) -> Result<(), SubscriberError> {
        if !digits(&self.imsi) {
            return Err(SubscriberError::BadImsi(self.imsi.clone()));
        }
        if let Some(m) = &self.msisdn {
            if !digits(m) {
                return Err(SubscriberError::BadMsisdn(m.clone()));
            }
        }
        if let Some(d) = self.billing_day {
            if !(1..=28).contains(&d) {
                return Err(SubscriberError::BadBillingDay(d));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_identifiers() {
        let mut s = Subscriber {
            imsi: "001010123456789".into(),
            ..Default::default()
        };
        assert_eq!(s.validate(), Ok(()));
        s.msisdn = Some("+4912".into());
        assert!(matches!(s.validate(), Err(SubscriberError::BadMsisdn(_))));
        s.imsi = "12ab".into();
        assert!(matches!(s.validate(), Err(SubscriberError::BadImsi(_))));
    }

    #[test]
    fn json_shape() {
        let s: Subscriber = serde_json::from_str(
            r#"{"imsi":"001010000000001","plan":"basic","services":["vip"],"attributes":{"blocked":false}}"#,
        )
        .expect("valid json");
        assert_eq!(s.services, vec!["vip".to_string()]);
        assert!(serde_json::from_str::<Subscriber>(r#"{"imsi":"1","bogus":1}"#).is_err());
    }
}

//! A subscriber's provisioned profile: who they are and what they bought.
//! Provisioned through the REST API, persisted by the store, read by the
//! policy. Sessions refer to it by IMSI (or MSISDN when the PCEF sends only that).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most bytes one profile may take as compact JSON. The same bound holds
/// whichever way a profile comes in (`PUT`, `POST /v1/subscribers/batch`,
/// `pcrf subscribers import`): every profile is kept in memory, written to
/// the store and turned into the policy's input table on every decision, so
/// one oversized profile would cost memory and time on each of its requests.
pub const MAX_PROFILE_BYTES: usize = 64 * 1024;

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
    #[error(
        "profile is {size} bytes as JSON, more than the {max} allowed; the largest field is {field} ({field_size} bytes)",
        max = MAX_PROFILE_BYTES
    )]
    TooLarge {
        size: usize,
        /// The biggest part, e.g. `attribute "blob"`.
        field: String,
        field_size: usize,
    },
}

/// Bytes `v` takes as compact JSON.
fn json_len<T: Serialize + ?Sized>(v: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    // Serializing maps with string keys and JSON values cannot fail.
    let _ = serde_json::to_writer(&mut c, v);
    c.0
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
        let size = json_len(self);
        if size > MAX_PROFILE_BYTES {
            let mut parts: Vec<(String, usize)> = self
                .attributes
                .iter()
                .map(|(k, v)| (format!("attribute {k:?}"), json_len(k) + json_len(v)))
                .collect();
            parts.push(("services".into(), json_len(&self.services)));
            parts.push(("quotas".into(), json_len(&self.quotas)));
            let (field, field_size) = parts
                .into_iter()
                .max_by_key(|(_, n)| *n)
                .unwrap_or_default();
            return Err(SubscriberError::TooLarge {
                size,
                field,
                field_size,
            });
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
    fn oversized_profile_is_refused_naming_the_field() {
        let mut s = Subscriber {
            imsi: "001010123456789".into(),
            ..Default::default()
        };
        s.attributes
            .insert("note".into(), serde_json::json!("x".repeat(60 * 1024)));
        assert_eq!(s.validate(), Ok(()));
        s.attributes
            .insert("blob".into(), serde_json::json!("y".repeat(100 * 1024)));
        let e = s.validate().expect_err("too large").to_string();
        assert!(
            e.contains("attribute \"blob\"") && e.contains("65536"),
            "{e}"
        );
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

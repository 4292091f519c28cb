//! A batch's changes encoded into row values before its transaction starts,
//! so that an encoding failure never leaves a transaction open.

use crate::session::SessionState;
use crate::store::blob;
use crate::store::{Change, StoreError};

/// A change encoded before the transaction starts (so an encoding failure
/// never leaves a transaction open).
pub(super) enum Encoded<'a> {
    Session {
        id: &'a str,
        subscriber: &'a str,
        state: &'static str,
        pcef_host: &'a str,
        updated_ms: i64,
        closed_ms: Option<i64>,
        data: Vec<u8>,
        /// The UE's IPv4 address (Rx and Sd binding through the store).
        ue_ipv4: Option<String>,
        /// The UE's IPv6 prefix as the store indexes it
        /// (`session::binding::stored_prefix`).
        ue_ipv6: Option<String>,
        /// The Rx and Sd Session-Ids the session holds, as a PostgreSQL
        /// array literal (each row's array travels as one text: `unnest`
        /// cannot take an array per row).
        sub_sessions: Option<String>,
        /// The row version the record was read or last written at: the
        /// write succeeds only if the row is still there (compare-and-set).
        version: i64,
    },
    DeleteSession(&'a str),
    Subscriber {
        imsi: &'a str,
        msisdn: Option<&'a str>,
        data: Vec<u8>,
    },
    DeleteSubscriber(&'a str),
    Usage {
        subscriber: &'a str,
        data: Vec<u8>,
        /// As for sessions.
        version: i64,
    },
    DeleteUsage(&'a str),
    /// One row per sink.
    Event {
        seq: i64,
        sinks: &'a [std::sync::Arc<str>],
        subscriber: &'a str,
        data: &'a [u8],
    },
    AckEvent {
        seq: i64,
        sink: &'a str,
    },
}

pub(super) fn encode(change: &Change) -> Result<Encoded<'_>, StoreError> {
    Ok(match change {
        Change::PutSession(s) => Encoded::Session {
            id: &s.id,
            subscriber: &s.subscriber,
            state: match s.state {
                SessionState::Open => "open",
                SessionState::Closed => "closed",
            },
            pcef_host: &s.pcef_host,
            updated_ms: s.updated_ms,
            closed_ms: s.closed_ms,
            data: blob::encode_session(s)?,
            ue_ipv4: s.ue_ipv4.map(|a| a.to_string()),
            ue_ipv6: crate::session::binding::stored_prefix(s),
            sub_sessions: array_literal(sub_session_ids(s)),
            version: s.version.get() as i64,
        },
        Change::DeleteSession { id, .. } => Encoded::DeleteSession(id),
        Change::PutSubscriber(s) => Encoded::Subscriber {
            imsi: &s.imsi,
            msisdn: s.msisdn.as_deref(),
            data: blob::encode_subscriber(s)?,
        },
        Change::DeleteSubscriber(imsi) => Encoded::DeleteSubscriber(imsi),
        Change::PutUsage(u) => Encoded::Usage {
            subscriber: &u.subscriber,
            data: blob::encode_usage(u)?,
            version: u.version.get() as i64,
        },
        Change::DeleteUsage(subscriber) => Encoded::DeleteUsage(subscriber),
        Change::PutEvent(e) => Encoded::Event {
            seq: e.seq as i64,
            sinks: &e.sinks,
            subscriber: e.subscriber_key(),
            data: &e.body,
        },
        Change::AckEvent { seq, sink, .. } => Encoded::AckEvent {
            seq: *seq as i64,
            sink,
        },
    })
}

/// The Rx (AF) and Sd (TDF) Session-Ids a Gx session holds: what finds it
/// when an AAR update, an STR or a TDF's CCR names only those.
pub(super) fn sub_session_ids(s: &crate::session::GxSession) -> impl Iterator<Item = &str> {
    s.af.iter()
        .map(|a| a.id.as_str())
        .chain(s.tdf.iter().map(|t| t.id.as_str()))
}

/// A PostgreSQL array literal of texts (`{"a","b"}`: every element quoted,
/// `"` and `\` escaped), None for no element (the column stays NULL).
pub(super) fn array_literal<'a>(items: impl Iterator<Item = &'a str>) -> Option<String> {
    let mut out = String::from("{");
    for item in items {
        if out.len() > 1 {
            out.push(',');
        }
        out.push('"');
        for ch in item.chars() {
            if ch == '"' || ch == '\\' {
                out.push('\\');
            }
            out.push(ch);
        }
        out.push('"');
    }
    (out.len() > 1).then(|| out + "}")
}

#[cfg(test)]
mod tests {
    use super::array_literal;

    #[test]
    fn array_literals_quote_and_escape_every_element() {
        assert_eq!(array_literal(std::iter::empty()), None);
        assert_eq!(
            array_literal(["a;1", "b,{c}"].into_iter()).as_deref(),
            Some(r#"{"a;1","b,{c}"}"#)
        );
        assert_eq!(
            array_literal([r#"x"y\z"#].into_iter()).as_deref(),
            Some(r#"{"x\"y\\z"}"#)
        );
    }
}

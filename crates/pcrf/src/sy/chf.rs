//! The CHF as the spending-limit peer (N28, Nchf_SpendingLimitControl, TS
//! 29.594), instead of an OCS: `[sy].chf` is its `{apiRoot}`. A subscribe
//! is `POST /subscriptions` (201, the id in `Location`), a modify `PUT
//! /subscriptions/{id}` with the whole list (200; a 404 there means the
//! CHF lost the subscription, which is then made anew with a POST in the
//! same exchange), an unsubscribe `DELETE
//! /subscriptions/{id}` (204), each over the shared SBI client and bounded
//! by `[sy].timeout_ms`. Answers become the neutral ones of `exchange.rs`;
//! the CHF's notifications come in on the SBI listener (`sbi/routes.rs`).

use crate::sbi::client::client;
use crate::session::spending::SySession;
use crate::sy::exchange::{Answer, NoAnswer, SubscribeRequest, Subscribed};
use crate::sy::n28::{self, SpendingLimitContext, SpendingLimitStatus};
use reqwest::header::{CONTENT_TYPE, LOCATION};
use reqwest::StatusCode;
use std::time::Duration;

/// Result codes counted for CHF answers, as a Diameter answer would carry
/// them (the metrics count Sy and N28 exchanges alike).
const SUCCESS: u32 = 2001;
const UNKNOWN_SESSION: u32 = 5002;
const UNABLE_TO_COMPLY: u32 = 5012;
const UNKNOWN_POLICY_COUNTERS: u32 = 5570;
/// The longest subscription id taken from a `Location`.
const MAX_SUBSCRIPTION_ID_BYTES: usize = 256;
/// The largest answer body read.
const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// One CHF.
pub struct Chf {
    /// `{apiRoot}` without a trailing `/`.
    root: String,
    timeout: Duration,
}

/// A problem answer's fields this client reads.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Problem {
    #[serde(default)]
    cause: Option<String>,
    #[serde(default)]
    invalid_params: Vec<InvalidParam>,
}

#[derive(serde::Deserialize)]
struct InvalidParam {
    param: String,
}

impl Chf {
    pub fn new(api_root: &str, timeout_ms: u64) -> Chf {
        Chf {
            root: api_root.trim_end_matches('/').to_owned(),
            timeout: Duration::from_millis(timeout_ms.max(1)),
        }
    }

    fn collection(&self) -> String {
        format!("{}{}{}", self.root, n28::API, n28::SUBSCRIPTIONS)
    }

    /// POST (no subscription yet) or PUT (the whole list replaces it).
    pub async fn subscribe(
        &self,
        req: &SubscribeRequest<'_>,
    ) -> Result<Answer<Subscribed>, NoAnswer> {
        let body = SpendingLimitContext {
            supi: req.imsi.map(|i| format!("imsi-{i}")),
            gpsi: req.msisdn.map(|m| format!("msisdn-{m}")),
            policy_counter_ids: req.counters,
            notif_uri: req.notify_uri,
        };
        let body = serde_json::to_vec(&body).map_err(|e| NoAnswer(e.to_string()))?;
        let client = client().map_err(NoAnswer)?;
        let modify = req
            .session
            .subscription
            .as_deref()
            .filter(|_| req.session.open);
        let body = bytes::Bytes::from(body);
        let send = |modify: Option<&str>| {
            let request = match modify {
                Some(id) => client.put(format!("{}/{id}", self.collection())),
                None => client.post(self.collection()),
            };
            let request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone());
            async move {
                let r = request.send().await.map_err(|e| e.to_string())?;
                let status = r.status();
                let location = r
                    .headers()
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let body = read_body(r).await?;
                Ok::<_, String>((status, location, body))
            }
        };
        let exchange = async {
            let first = send(modify).await?;
            if modify.is_some() && first.0 == StatusCode::NOT_FOUND {
                // The CHF does not hold the subscription (it restarted, or
                // cleaned it up): subscribe anew, within the same bound.
                tracing::info!(chf = %self.root, subscription = modify.unwrap_or(""), "the CHF does not know the subscription; subscribing anew");
                return Ok((None, send(None).await?));
            }
            Ok((modify, first))
        };
        let (modify, (status, location, body)) = self.bounded(exchange).await?;
        let expected = if modify.is_some() {
            StatusCode::OK
        } else {
            StatusCode::CREATED
        };
        let answer = |code, outcome| Answer {
            peer: self.root.clone(),
            code,
            outcome,
        };
        if status == expected {
            let subscription = match modify {
                Some(_) => None,
                None => match location.as_deref().and_then(subscription_id) {
                    Some(id) => Some(id),
                    None => {
                        return Ok(answer(
                            UNABLE_TO_COMPLY,
                            Subscribed::Refused(format!(
                                "201 without a usable Location ({location:?})"
                            )),
                        ))
                    }
                },
            };
            let reports = serde_json::from_slice::<SpendingLimitStatus>(&body)
                .map_err(|e| e.to_string())
                .and_then(|s| s.reports());
            return Ok(match reports {
                Ok(reports) => answer(
                    SUCCESS,
                    Subscribed::Accepted {
                        reports,
                        subscription,
                    },
                ),
                Err(e) => answer(
                    UNABLE_TO_COMPLY,
                    Subscribed::Refused(format!("bad SpendingLimitStatus: {e}")),
                ),
            });
        }
        let problem: Problem = serde_json::from_slice(&body).unwrap_or_default();
        if status == StatusCode::BAD_REQUEST
            && problem.cause.as_deref() == Some(n28::UNKNOWN_POLICY_COUNTERS)
        {
            let named = named_counters(&problem, req.counters);
            return Ok(answer(
                UNKNOWN_POLICY_COUNTERS,
                Subscribed::UnknownCounters(named),
            ));
        }
        let code = if status == StatusCode::NOT_FOUND {
            UNKNOWN_SESSION
        } else {
            UNABLE_TO_COMPLY
        };
        Ok(answer(
            code,
            Subscribed::Refused(format!(
                "the CHF answered {}{}",
                status.as_u16(),
                problem.cause.map(|c| format!(" ({c})")).unwrap_or_default()
            )),
        ))
    }

    /// DELETE of the session's subscription (nothing to end without one).
    pub async fn unsubscribe(&self, session: &SySession) -> Result<Answer<()>, NoAnswer> {
        let Some(id) = session.subscription.as_deref() else {
            return Err(NoAnswer("no subscription id to delete".into()));
        };
        let client = client().map_err(NoAnswer)?;
        let request = client.delete(format!("{}/{id}", self.collection()));
        let status = self
            .bounded(async { Ok(request.send().await.map_err(|e| e.to_string())?.status()) })
            .await?;
        let code = if status.is_success() {
            SUCCESS
        } else if status == StatusCode::NOT_FOUND {
            UNKNOWN_SESSION
        } else {
            UNABLE_TO_COMPLY
        };
        Ok(Answer {
            peer: self.root.clone(),
            code,
            outcome: (),
        })
    }

    /// `exchange` within the timeout; no answer when it fails or is late.
    async fn bounded<T>(
        &self,
        exchange: impl std::future::Future<Output = Result<T, String>>,
    ) -> Result<T, NoAnswer> {
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(NoAnswer(format!("CHF request failed: {e}"))),
            Err(_) => Err(NoAnswer(format!(
                "no CHF answer within {} ms",
                self.timeout.as_millis()
            ))),
        }
    }
}

/// The body, at most [`MAX_ANSWER_BYTES`].
async fn read_body(mut r: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(chunk) = r.chunk().await.map_err(|e| e.to_string())? {
        if out.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!("answer larger than {MAX_ANSWER_BYTES} bytes"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// The subscription id a `Location` ends with (after `/subscriptions/`):
/// letters, digits, `-`, `_`, `.`, `~`, at most
/// [`MAX_SUBSCRIPTION_ID_BYTES`].
fn subscription_id(location: &str) -> Option<String> {
    let (_, id) = location.rsplit_once("/subscriptions/")?;
    let id = id.trim_end_matches('/');
    let ok = !id.is_empty()
        && id.len() <= MAX_SUBSCRIPTION_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'));
    ok.then(|| id.to_owned())
}

/// The counters a 400 UNKNOWN_POLICY_COUNTERS names in `invalidParams`
/// (`/policyCounterIds/{index}` into what was sent, or the id itself);
/// empty when it names none of them.
fn named_counters(problem: &Problem, sent: &[String]) -> Vec<String> {
    let mut named: Vec<String> = problem
        .invalid_params
        .iter()
        .filter_map(|p| match p.param.strip_prefix("/policyCounterIds/") {
            Some(i) => i.parse::<usize>().ok().and_then(|i| sent.get(i)).cloned(),
            None => sent.iter().find(|c| **c == p.param).cloned(),
        })
        .collect();
    named.sort();
    named.dedup();
    named
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subscription_id_is_read_from_location() {
        assert_eq!(
            subscription_id("http://chf:9000/nchf-spendinglimitcontrol/v1/subscriptions/s-17"),
            Some("s-17".into())
        );
        assert_eq!(
            subscription_id("/nchf-spendinglimitcontrol/v1/subscriptions/a.b/"),
            Some("a.b".into())
        );
        assert_eq!(subscription_id("http://chf/subscriptions/"), None);
        assert_eq!(subscription_id("http://chf/subscriptions/a b"), None);
        assert_eq!(subscription_id("http://chf/other/1"), None);
    }

    #[test]
    fn unknown_counters_are_read_from_invalid_params() {
        let sent = vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
        let p: Problem = serde_json::from_str(
            r#"{"status": 400, "cause": "UNKNOWN_POLICY_COUNTERS",
                "invalidParams": [{"param": "/policyCounterIds/2"}, {"param": "a"},
                                  {"param": "/policyCounterIds/9"}, {"param": "/supi"}]}"#,
        )
        .expect("parse");
        assert_eq!(named_counters(&p, &sent), ["a", "c"]);
        assert!(named_counters(&Problem::default(), &sent).is_empty());
    }
}

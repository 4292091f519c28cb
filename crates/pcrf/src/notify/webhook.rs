//! The HTTP webhook sink: each event is POSTed as its JSON document, signed
//! with `X-Pcrf-Signature: sha256=<hex HMAC-SHA256 of the body>` under the
//! sink's shared secret, so the receiver can tell it came from us unchanged.
//! A 2xx answer is a delivery; anything else (or no answer in time) is a
//! failure, retried by the delivery loop. A redirect is not followed: a
//! client following a 302 sends a GET whose 200 would count as delivered
//! with the event lost, and a 307 would send the signed body to a URL the
//! operator never configured; a 3xx is a failed attempt, reported with its
//! `Location`. An `https://` receiver is
//! trusted through the CA certificates of the sink's `ca_file` only.

use super::config::SinkConfig;
use super::event::Event;
use super::sink::{Delivery, Sink, SinkError};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Header carrying the body's signature.
pub const SIGNATURE_HEADER: &str = "X-Pcrf-Signature";

/// `sha256=<hex>` of `body` under `secret`: what the header holds.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    // HMAC takes a key of any length.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// reqwest's message with its causes: alone it only names the step ("error
/// sending request"), the causes say why (refused, a certificate not trusted).
fn causes(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// A webhook receiver.
pub struct Webhook {
    client: reqwest::Client,
    url: reqwest::Url,
    secret: Vec<u8>,
}

impl Webhook {
    pub fn new(cfg: &SinkConfig) -> Result<Webhook, String> {
        let url = reqwest::Url::parse(&cfg.url).map_err(|e| format!("bad URL: {e}"))?;
        let builder = reqwest::Client::builder()
            .timeout(cfg.timeout())
            .connect_timeout(cfg.timeout())
            .redirect(reqwest::redirect::Policy::none())
            .pool_max_idle_per_host(cfg.concurrency);
        let builder = match &cfg.ca_file {
            None => builder,
            Some(path) => {
                let bad = |e: String| format!("ca_file {}: {e}", path.display());
                let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
                let certs =
                    reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| bad(e.to_string()))?;
                if certs.is_empty() {
                    return Err(bad("no PEM certificate found".into()));
                }
                certs
                    .into_iter()
                    .fold(builder.use_rustls_tls(), |b, c| b.add_root_certificate(c))
            }
        };
        let client = builder
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Webhook {
            client,
            url,
            secret: cfg.secret.clone().unwrap_or_default().into_bytes(),
        })
    }
}

impl Sink for Webhook {
    fn deliver<'a>(&'a self, event: &'a Event) -> Delivery<'a> {
        Box::pin(async move {
            let answer = self
                .client
                .post(self.url.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header(SIGNATURE_HEADER, signature(&self.secret, &event.body))
                .header("X-Pcrf-Event", event.name.as_str())
                .header("X-Pcrf-Idempotency-Key", event.key.as_str())
                .body(event.body.clone())
                .send()
                .await
                .map_err(|e| SinkError(format!("POST {}: {}", self.url, causes(&e))))?;
            let status = answer.status();
            if status.is_success() {
                Ok(())
            } else if status.is_redirection() {
                let location: String = answer
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .map(|v| {
                        String::from_utf8_lossy(v.as_bytes())
                            .chars()
                            .take(256)
                            .collect()
                    })
                    .unwrap_or_else(|| "none".into());
                Err(SinkError(format!(
                    "POST {}: answered {status}, redirect to {location:?} not followed                      (configure the receiver's final URL)",
                    self.url
                )))
            } else {
                Err(SinkError(format!("POST {}: answered {status}", self.url)))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_the_rfc_4231_hmac() {
        // RFC 4231 test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}

//! Keeps web pages away from the API. An operator's browser on the PCRF's
//! machine, or one reaching it through an SSH tunnel, can reach a loopback
//! API without a token; without these checks any page it opens could use
//! it:
//!
//! - by DNS rebinding: a name of the attacker's site that resolves to
//!   127.0.0.1 makes the API the page's own origin, so it may read and
//!   change everything. Such requests carry the attacker's name in `Host`:
//!   an API without a token answers only a `Host` that is an IP address,
//!   `localhost` or a name in `api.allowed_hosts` (421 otherwise). With a
//!   token any `Host` is served: a page cannot know the token.
//! - by a cross-site request (a form, or a `fetch` the browser sends
//!   without asking first): a request that changes something must carry a
//!   `Content-Type` that a form cannot send (415 otherwise), with or
//!   without a body, and a request whose `Origin` is not the API's own is
//!   refused (403).
//!
//! Non-browser clients (curl, scripts, the load generator) send no `Origin`
//! and name the API by its address, so only the content-type rule asks
//! anything of them; the console is served from the API itself, so its
//! requests are same-origin and it always sends JSON.
//!
//! The same layer marks every answer `Cache-Control: no-store` (unless the
//! route set its own) and `X-Content-Type-Options: nosniff`: subscriber
//! data must not stay in a browser's or a proxy's cache, and an answer must
//! never be run as a script or page whatever its bytes look like.

use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;
use std::sync::Arc;

/// What the checks need from `[api]`.
#[derive(Clone, Debug)]
pub struct BrowserRules {
    /// The API has a bearer token: no `Host` or content-type rule then.
    pub token: bool,
    /// Lowercase names besides IP addresses and `localhost`.
    pub allowed_hosts: Arc<[String]>,
}

/// Middleware: refuses what a foreign web page could make a browser send,
/// and adds the caching and sniffing headers to every answer.
pub async fn guard(State(rules): State<BrowserRules>, req: Request, next: Next) -> Response {
    let mut resp = match refusal(&rules, req.method(), req.headers()) {
        Some(e) => {
            tracing::info!(
                method = %req.method(),
                path = req.uri().path(),
                reason = %e.message,
                "HTTP API request refused"
            );
            e.into_response()
        }
        None => next.run(req).await,
    };
    let h = resp.headers_mut();
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// Why the request is refused, if it is.
fn refusal(rules: &BrowserRules, method: &Method, headers: &HeaderMap) -> Option<ApiError> {
    let host = headers.get(header::HOST).map(HeaderValue::as_bytes);
    if !rules.token {
        if let Some(host) = host {
            if !host_allowed(host, &rules.allowed_hosts) {
                return Some(ApiError::new(
                    StatusCode::MISDIRECTED_REQUEST,
                    format!(
                        "Host {:?} is not a name of this API: use its IP address or localhost, or list the name in api.allowed_hosts",
                        String::from_utf8_lossy(host)
                    ),
                ));
            }
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        if !same_origin(origin.as_bytes(), host) {
            return Some(ApiError::new(
                StatusCode::FORBIDDEN,
                format!(
                    "cross-origin request refused: Origin {:?} is not this API",
                    String::from_utf8_lossy(origin.as_bytes())
                ),
            ));
        }
    }
    let changes = matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    if changes && !rules.token && !content_type_no_form_can_send(headers) {
        return Some(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "a request that changes something needs Content-Type: application/json, also without a body (e.g. curl -H 'content-type: application/json')",
        ));
    }
    None
}

/// `host` (a `Host` value: name or address, maybe a port) is an IP
/// address, `localhost`, or one of `allowed` (lowercase). A DNS rebinding
/// attack needs a name of its own, so every IP address is safe, whatever
/// address or port forwarding (an SSH tunnel, a NAT) led to the listener.
fn host_allowed(host: &[u8], allowed: &[String]) -> bool {
    let Ok(host) = std::str::from_utf8(host) else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        // An IPv6 literal, `[::1]` or `[::1]:8080`.
        Some(rest) => {
            return rest
                .split_once(']')
                .is_some_and(|(ip, port)| ip.parse::<IpAddr>().is_ok() && valid_port(port));
        }
        None => match host.rsplit_once(':') {
            Some((name, port)) if valid_port(&format!(":{port}")) => name,
            Some(_) => return false,
            None => host,
        },
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    name.parse::<IpAddr>().is_ok() || name == "localhost" || allowed.contains(&name)
}

/// Empty, or `:` and 1 to 5 digits.
fn valid_port(port: &str) -> bool {
    port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `origin` (`scheme://host[:port]`) names the host and port the request
/// was sent to. Browsers send `Origin` with every cross-origin request and
/// with same-origin ones that change something; `null` (a sandboxed or
/// local page) is never this API.
fn same_origin(origin: &[u8], host: Option<&[u8]>) -> bool {
    let Some(host) = host else {
        return false;
    };
    let authority = origin
        .strip_prefix(b"http://")
        .or_else(|| origin.strip_prefix(b"https://"));
    authority.is_some_and(|a| a.eq_ignore_ascii_case(host))
}

/// A `Content-Type` is present and is none of the three a cross-site form
/// can send (`application/x-www-form-urlencoded`, `multipart/form-data`,
/// `text/plain`): a page may send another only after asking the API first
/// (a CORS preflight), which this API never grants. JSON and NDJSON pass;
/// the handlers check their own type.
fn content_type_no_form_can_send(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return false;
    };
    let Ok(value) = value.to_str() else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    !essence.is_empty()
        && !matches!(
            essence.as_str(),
            "application/x-www-form-urlencoded" | "multipart/form-data" | "text/plain"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let allowed = ["pcrf.example.net".to_string()];
        for ok in [
            "127.0.0.1",
            "127.0.0.1:8080",
            "10.1.2.3:18080",
            "[::1]",
            "[::1]:8080",
            "localhost",
            "LOCALHOST:8080",
            "localhost.:8080",
            "pcrf.example.net",
            "PCRF.example.net:8443",
        ] {
            assert!(host_allowed(ok.as_bytes(), &allowed), "{ok}");
        }
        for bad in [
            "attacker.example",
            "attacker.example:8080",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "[::1",
            "[::1]x",
            "[evil]:80",
            "localhost:80:80",
            "localhost:abc",
            "localhost:123456",
            "",
        ] {
            assert!(!host_allowed(bad.as_bytes(), &allowed), "{bad}");
        }
    }

    #[test]
    fn origins() {
        assert!(same_origin(
            b"http://127.0.0.1:8080",
            Some(b"127.0.0.1:8080")
        ));
        assert!(same_origin(
            b"https://LOCALHOST:8443",
            Some(b"localhost:8443")
        ));
        assert!(!same_origin(
            b"http://127.0.0.1:3000",
            Some(b"127.0.0.1:8080")
        ));
        assert!(!same_origin(
            b"http://attacker.example",
            Some(b"localhost:8080")
        ));
        assert!(!same_origin(b"null", Some(b"localhost:8080")));
        assert!(!same_origin(b"http://localhost:8080", None));
    }

    #[test]
    fn content_types() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_str(v).expect("value"),
            );
            content_type_no_form_can_send(&h)
        };
        assert!(with("application/json"));
        assert!(with("application/json; charset=utf-8"));
        assert!(with("application/x-ndjson"));
        assert!(!with("text/plain"));
        assert!(!with("Text/Plain; charset=utf-8"));
        assert!(!with("application/x-www-form-urlencoded"));
        assert!(!with("multipart/form-data; boundary=x"));
        assert!(!with(""));
        assert!(!content_type_no_form_can_send(&HeaderMap::new()));
    }
}

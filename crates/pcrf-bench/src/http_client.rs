//! The generator's client of the PCRF's REST API (provisioning before a
//! run, verification after it, the RARs `misbehave` asks for): reqwest,
//! one client per job whose keep-alive pool every task of the job shares.
//! This module only adds what all of them need: the base URL, the bearer
//! token, a bound on the answer's size and error messages that say why.

use reqwest::{Method, RequestBuilder};
use std::error::Error as _;

/// Largest response body accepted.
const MAX_BODY: usize = 1 << 20;

/// Why an HTTP exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("invalid URL {0:?}: only http://host[:port][/path] is supported")]
    Url(String),
    #[error("cannot reach the API at {authority}: {detail}")]
    Connect { authority: String, detail: String },
    #[error("request to {authority}: {detail}")]
    Exchange { authority: String, detail: String },
    #[error("answer from {0} longer than {MAX_BODY} bytes")]
    TooLong(String),
}

/// An http:// base URL; request paths are appended to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseUrl {
    /// The URL without a trailing slash.
    url: String,
    /// host:port, for messages.
    pub authority: String,
}

impl BaseUrl {
    pub fn parse(url: &str) -> Result<BaseUrl, HttpError> {
        let bad = || HttpError::Url(url.to_string());
        let u = reqwest::Url::parse(url).map_err(|_| bad())?;
        let plain = u.scheme() == "http"
            && u.username().is_empty()
            && u.password().is_none()
            && u.query().is_none()
            && u.fragment().is_none();
        let (Some(host), Some(port), true) = (u.host_str(), u.port_or_known_default(), plain)
        else {
            return Err(bad());
        };
        Ok(BaseUrl {
            authority: format!("{host}:{port}"),
            url: u.as_str().trim_end_matches('/').to_string(),
        })
    }

    /// The URL of `path` (which starts with a slash) under this base.
    pub fn join(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }
}

/// A response: status and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// A client of one API; clones share the connection pool.
#[derive(Clone, Debug)]
pub struct ApiClient {
    http: reqwest::Client,
    base: BaseUrl,
    token: Option<String>,
}

impl ApiClient {
    pub fn new(base: &BaseUrl, token: Option<&str>) -> Result<ApiClient, HttpError> {
        let http = reqwest::Client::builder()
            // The generator talks to the server it measures, never through
            // a proxy named in the environment.
            .no_proxy()
            .tcp_nodelay(true)
            .build()
            .map_err(|e| HttpError::Exchange {
                authority: base.authority.clone(),
                detail: error_chain(&e),
            })?;
        Ok(ApiClient {
            http,
            base: base.clone(),
            token: token.map(str::to_string),
        })
    }

    /// A request for `path` under the base URL, with the token if any.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let r = self.http.request(method, self.base.join(path));
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    /// A request with a JSON body.
    pub fn json(&self, method: Method, path: &str, body: Vec<u8>) -> RequestBuilder {
        self.request(method, path)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
    }

    /// Sends `request` and reads the whole answer.
    pub async fn send(&self, request: RequestBuilder) -> Result<Response, HttpError> {
        let why = |e: reqwest::Error| {
            let (authority, detail) = (self.base.authority.clone(), error_chain(&e));
            if e.is_connect() {
                HttpError::Connect { authority, detail }
            } else {
                HttpError::Exchange { authority, detail }
            }
        };
        let mut r = request.send().await.map_err(why)?;
        let status = r.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = r.chunk().await.map_err(why)? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(HttpError::TooLong(self.base.authority.clone()));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Response { status, body })
    }
}

/// What went wrong, from an error's causes: reqwest's own message only
/// names the step and the URL ("error sending request for url ..."), its
/// causes say why.
pub fn error_chain(e: &reqwest::Error) -> String {
    let mut causes = Vec::new();
    let mut cause = e.source();
    while let Some(c) = cause {
        causes.push(c.to_string());
        cause = c.source();
    }
    if causes.is_empty() {
        e.to_string()
    } else {
        causes.join(": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[test]
    fn parses_base_urls() {
        let b = BaseUrl::parse("http://127.0.0.1:8080").expect("url");
        assert_eq!(b.authority, "127.0.0.1:8080");
        assert_eq!(b.join("/x"), "http://127.0.0.1:8080/x");
        let b = BaseUrl::parse("http://localhost/api/").expect("url");
        assert_eq!(b.authority, "localhost:80");
        assert_eq!(b.join("/v1"), "http://localhost/api/v1");
        let b = BaseUrl::parse("http://[::1]:9000").expect("v6");
        assert_eq!(b.authority, "[::1]:9000");
        assert!(BaseUrl::parse("https://x:1").is_err());
        assert!(BaseUrl::parse("http://").is_err());
        assert!(BaseUrl::parse("http://user@host:1").is_err());
        assert!(BaseUrl::parse("127.0.0.1:8080").is_err());
    }

    /// What the client sends (path, token, JSON body) and what it makes of
    /// a chunked answer.
    #[tokio::test]
    async fn sends_token_and_json_and_reads_chunked_answers() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.ends_with(b"{\"a\":1}") {
                let n = s.read(&mut buf).await.expect("read");
                assert!(n > 0, "client closed early");
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(
                b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n\
                  3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
            )
            .await
            .expect("write");
            String::from_utf8(got).expect("utf8").to_ascii_lowercase()
        });
        let base = BaseUrl::parse(&format!("http://{addr}/api")).expect("url");
        let c = ApiClient::new(&base, Some("secret")).expect("client");
        let r = c
            .send(c.json(Method::PUT, "/v1/subscribers/1", b"{\"a\":1}".to_vec()))
            .await
            .expect("answer");
        assert_eq!((r.status, r.body.as_slice()), (201, &b"abcde"[..]));
        let seen = server.await.expect("server");
        assert!(seen.starts_with("put /api/v1/subscribers/1 http/1.1\r\n"));
        assert!(seen.contains("authorization: bearer secret\r\n"));
        assert!(seen.contains("content-type: application/json\r\n"));
    }

    #[tokio::test]
    async fn garbage_and_refusal_are_errors_not_panics() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            s.write_all(b"SMTP ready\r\n").await.expect("write");
        });
        let base = BaseUrl::parse(&format!("http://{addr}")).expect("url");
        let c = ApiClient::new(&base, None).expect("client");
        assert!(matches!(
            c.send(c.request(Method::GET, "/")).await,
            Err(HttpError::Exchange { .. })
        ));
        listener_closed(addr).await;
        let e = c
            .send(c.request(Method::GET, "/"))
            .await
            .expect_err("refused");
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("cannot reach the API at {addr}: ")),
            "{text}"
        );
    }

    /// Waits until nothing listens on `addr` any more.
    async fn listener_closed(addr: std::net::SocketAddr) {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

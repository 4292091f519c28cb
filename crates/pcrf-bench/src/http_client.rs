//! A small HTTP/1.1 client over one tokio TcpStream, for provisioning
//! subscribers through the PCRF's REST API before a run.
//!
//! Requests are pipelined (written in batches, answers read in order), which
//! is what makes bulk provisioning of 10^5 subscribers take seconds. Only
//! what that needs is here: plain http://, Content-Length and chunked
//! bodies, keep-alive. A heavier client crate would be more code than this.

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Largest response body or header section accepted.
const MAX_BODY: usize = 1 << 20;
const MAX_HEADER_LINES: usize = 100;

/// Why an HTTP exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("invalid URL {0:?}: only http://host:port[/path] is supported")]
    Url(String),
    #[error("connection to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("the server closed the connection")]
    Closed,
    #[error("malformed response: {0}")]
    Malformed(String),
}

/// An http:// base URL split into what a request needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseUrl {
    /// host:port to connect to.
    pub authority: String,
    /// Path prefix without a trailing slash ("" for the root).
    pub path: String,
}

impl BaseUrl {
    pub fn parse(url: &str) -> Result<BaseUrl, HttpError> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| HttpError::Url(url.to_string()))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains(['@', ' ', '?', '#']) {
            return Err(HttpError::Url(url.to_string()));
        }
        let authority = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            && !authority.ends_with(']')
        {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        Ok(BaseUrl {
            authority,
            path: path.trim_end_matches('/').to_string(),
        })
    }
}

/// A response: status and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
    /// The server asked to close the connection after this response.
    pub close: bool,
}

/// One keep-alive connection.
pub struct HttpConnection {
    stream: BufReader<TcpStream>,
    host: String,
}

impl HttpConnection {
    pub async fn connect(base: &BaseUrl) -> Result<HttpConnection, HttpError> {
        let s = TcpStream::connect(&base.authority)
            .await
            .map_err(|source| HttpError::Connect {
                addr: base.authority.clone(),
                source,
            })?;
        s.set_nodelay(true)?;
        Ok(HttpConnection {
            stream: BufReader::new(s),
            host: base.authority.clone(),
        })
    }

    /// Appends one request to `out` (send several with [`send`](Self::send)).
    pub fn encode(&self, out: &mut Vec<u8>, method: &str, path: &str, json: Option<&[u8]>) {
        self.encode_with(out, method, path, None, json)
    }

    /// [`encode`](Self::encode) with an optional bearer token.
    pub fn encode_with(
        &self,
        out: &mut Vec<u8>,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        json: Option<&[u8]>,
    ) {
        out.extend_from_slice(
            format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host).as_bytes(),
        );
        if let Some(t) = bearer {
            out.extend_from_slice(format!("Authorization: Bearer {t}\r\n").as_bytes());
        }
        match json {
            Some(b) => {
                out.extend_from_slice(
                    format!(
                        "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                        b.len()
                    )
                    .as_bytes(),
                );
                out.extend_from_slice(b);
            }
            None => out.extend_from_slice(b"Content-Length: 0\r\n\r\n"),
        }
    }

    /// Writes encoded requests.
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), HttpError> {
        self.stream.get_mut().write_all(bytes).await?;
        Ok(())
    }

    /// Reads the next response.
    pub async fn read_response(&mut self) -> Result<Response, HttpError> {
        let mut line = String::new();
        if self.stream.read_line(&mut line).await? == 0 {
            return Err(HttpError::Closed);
        }
        let mut parts = line.trim_end().splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        if !version.starts_with("HTTP/1.") {
            return Err(HttpError::Malformed(format!("status line {line:?}")));
        }
        let status: u16 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| HttpError::Malformed(format!("status line {line:?}")))?;
        let mut length: Option<usize> = None;
        let mut chunked = false;
        let mut close = version == "HTTP/1.0";
        for _ in 0..MAX_HEADER_LINES {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                return Err(HttpError::Closed);
            }
            let h = line.trim_end();
            if h.is_empty() {
                let body = if chunked {
                    self.read_chunked().await?
                } else if let Some(n) = length {
                    if n > MAX_BODY {
                        return Err(HttpError::Malformed(format!("body of {n} bytes")));
                    }
                    let mut b = vec![0; n];
                    self.stream.read_exact(&mut b).await?;
                    b
                } else if status == 204 || status == 304 || (100..200).contains(&status) {
                    Vec::new()
                } else {
                    // Body until close: read it, the connection is then finished.
                    let mut b = Vec::new();
                    (&mut self.stream)
                        .take(MAX_BODY as u64)
                        .read_to_end(&mut b)
                        .await?;
                    close = true;
                    b
                };
                return Ok(Response {
                    status,
                    body,
                    close,
                });
            }
            let Some((name, value)) = h.split_once(':') else {
                return Err(HttpError::Malformed(format!("header {h:?}")));
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(
                    value
                        .parse()
                        .map_err(|_| HttpError::Malformed(format!("Content-Length {value:?}")))?,
                );
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().contains("chunked");
            } else if name.eq_ignore_ascii_case("connection") {
                close = value.eq_ignore_ascii_case("close");
            }
        }
        Err(HttpError::Malformed("too many header lines".into()))
    }

    async fn read_chunked(&mut self) -> Result<Vec<u8>, HttpError> {
        let mut body = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            if self.stream.read_line(&mut line).await? == 0 {
                return Err(HttpError::Closed);
            }
            let size_hex = line.trim_end().split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_hex, 16)
                .map_err(|_| HttpError::Malformed(format!("chunk size {size_hex:?}")))?;
            if body.len() + size > MAX_BODY {
                return Err(HttpError::Malformed("chunked body too long".into()));
            }
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    line.clear();
                    if self.stream.read_line(&mut line).await? == 0 || line.trim_end().is_empty() {
                        return Ok(body);
                    }
                }
            }
            let start = body.len();
            body.resize(start + size, 0);
            self.stream.read_exact(&mut body[start..]).await?;
            let mut crlf = [0u8; 2];
            self.stream.read_exact(&mut crlf).await?;
            if &crlf != b"\r\n" {
                return Err(HttpError::Malformed("chunk not followed by CRLF".into()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[test]
    fn parses_base_urls() {
        let b = BaseUrl::parse("http://127.0.0.1:8080").expect("url");
        assert_eq!(b.authority, "127.0.0.1:8080");
        assert_eq!(b.path, "");
        let b = BaseUrl::parse("http://localhost/api/").expect("url");
        assert_eq!(b.authority, "localhost:80");
        assert_eq!(b.path, "/api");
        assert!(BaseUrl::parse("https://x:1").is_err());
        assert!(BaseUrl::parse("http://").is_err());
        assert!(BaseUrl::parse("http://user@host:1").is_err());
    }

    /// A loopback server that answers three pipelined requests with a
    /// Content-Length body, a chunked body and a 204, then checks what it got.
    #[tokio::test]
    async fn pipelined_requests_and_body_framings() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while got.windows(4).filter(|w| *w == b"\r\n\r\n").count() < 3
                || !got.ends_with(b"{\"a\":2}")
            {
                let n = s.read(&mut buf).await.expect("read");
                assert!(n > 0, "client closed early");
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello\
                  HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n\
                  HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
            )
            .await
            .expect("write");
            String::from_utf8(got).expect("utf8")
        });
        let base = BaseUrl::parse(&format!("http://{addr}")).expect("url");
        let mut c = HttpConnection::connect(&base).await.expect("connect");
        let mut out = Vec::new();
        c.encode(&mut out, "GET", "/x", None);
        c.encode(&mut out, "PUT", "/v1/subscribers/1", Some(b"{\"a\":1}"));
        c.encode(&mut out, "PUT", "/v1/subscribers/2", Some(b"{\"a\":2}"));
        c.send(&out).await.expect("send");
        let r1 = c.read_response().await.expect("r1");
        assert_eq!(
            (r1.status, r1.body.as_slice(), r1.close),
            (200, &b"hello"[..], false)
        );
        let r2 = c.read_response().await.expect("r2");
        assert_eq!((r2.status, r2.body.as_slice()), (201, &b"abcde"[..]));
        let r3 = c.read_response().await.expect("r3");
        assert_eq!((r3.status, r3.body.len(), r3.close), (204, 0, true));
        assert!(matches!(c.read_response().await, Err(HttpError::Closed)));
        let seen = server.await.expect("server");
        assert!(seen.contains("PUT /v1/subscribers/2 HTTP/1.1\r\n"));
        assert!(seen.contains("Content-Length: 7\r\n"));
        assert!(seen.contains(&format!("Host: {addr}\r\n")));
    }

    #[tokio::test]
    async fn garbage_is_an_error_not_a_panic() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            s.write_all(b"SMTP ready\r\n").await.expect("write");
        });
        let base = BaseUrl::parse(&format!("http://{addr}")).expect("url");
        let mut c = HttpConnection::connect(&base).await.expect("connect");
        assert!(matches!(
            c.read_response().await,
            Err(HttpError::Malformed(_))
        ));
    }
}

//! Bearer-token check for the protected routes: `Authorization: Bearer
//! <token>` compared in constant time, 401 with `WWW-Authenticate` otherwise.

use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;

/// The configured token.
#[derive(Clone)]
pub struct Token(pub Arc<[u8]>);

/// Who made a request that passed the token check (a request extension):
/// there is one token, so "token". Absent when the API has no token.
#[derive(Clone, Copy, Debug)]
pub struct Caller(pub &'static str);

/// Middleware: passes the request on only with the right token.
pub async fn require_token(
    State(token): State<Token>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer_credentials(v.as_bytes()));
    match given {
        Some(g) if constant_time_eq(g, &token.0) => {
            let mut req = req;
            req.extensions_mut().insert(Caller("token"));
            Ok(next.run(req).await)
        }
        _ => {
            tracing::info!(
                method = %req.method(),
                path = req.uri().path(),
                "HTTP API request refused: missing or wrong bearer token"
            );
            Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "missing or invalid bearer token",
            ))
        }
    }
}

/// The token of an `Authorization: Bearer <token>` value. The scheme name
/// is case-insensitive (RFC 7235 section 2.1), so `bearer` and `BEARER`
/// are the same scheme; one or more spaces separate it from the token.
fn bearer_credentials(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"Bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let token = rest.trim_ascii_start();
    (!token.is_empty()).then_some(token)
}

/// Equal in time independent of where the first difference is (the time
/// depends only on the expected token's length).
pub fn constant_time_eq(given: &[u8], expected: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != expected.len());
    for (i, e) in expected.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(!*e);
        diff |= std::hint::black_box(g ^ e);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::{bearer_credentials, constant_time_eq};

    #[test]
    fn scheme_is_case_insensitive() {
        for v in ["Bearer t0k", "bearer t0k", "BEARER t0k", "bEaReR  t0k"] {
            assert_eq!(bearer_credentials(v.as_bytes()), Some(&b"t0k"[..]), "{v}");
        }
        for v in ["Bearert0k", "Basic t0k", "Bearer ", "Bear t0k", ""] {
            assert_eq!(bearer_credentials(v.as_bytes()), None, "{v}");
        }
    }

    #[test]
    fn compares() {
        assert!(constant_time_eq(b"secret-token", b"secret-token"));
        assert!(!constant_time_eq(b"secret-tokeN", b"secret-token"));
        assert!(!constant_time_eq(b"secret-token-and-more", b"secret-token"));
        assert!(!constant_time_eq(b"secret", b"secret-token"));
        assert!(!constant_time_eq(b"", b"secret-token"));
    }
}

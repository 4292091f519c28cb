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

/// Middleware: passes the request on only with the right token.
pub async fn require_token(
    State(token): State<Token>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    match given {
        Some(g) if constant_time_eq(g, &token.0) => Ok(next.run(req).await),
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
    use super::constant_time_eq;

    #[test]
    fn compares() {
        assert!(constant_time_eq(b"secret-token", b"secret-token"));
        assert!(!constant_time_eq(b"secret-tokeN", b"secret-token"));
        assert!(!constant_time_eq(b"secret-token-and-more", b"secret-token"));
        assert!(!constant_time_eq(b"secret", b"secret-token"));
        assert!(!constant_time_eq(b"", b"secret-token"));
    }
}

//! Every API error is JSON `{"error": "..."}` with the right status, including
//! the ones axum would answer in plain text (malformed JSON, wrong content
//! type, bad path or query, body too large, unknown route or method).

use crate::control::{ControlError, ReloadError};
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Script line, for a refused policy reload.
    pub line: Option<u32>,
}

/// The body of every error answer.
#[derive(Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody<'a> {
    error: &'a str,
    /// Policy script line, for a refused reload.
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            line: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: &self.message,
            line: self.line,
        };
        // Serializing a str and an integer cannot fail; keep a fallback anyway.
        let bytes = serde_json::to_vec(&body).unwrap_or_else(|_| b"{\"error\":\"\"}".to_vec());
        let mut r = (self.status, bytes).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

impl From<ControlError> for ApiError {
    fn from(e: ControlError) -> ApiError {
        let status = match &e {
            ControlError::NotFound(_) => StatusCode::NOT_FOUND,
            ControlError::Invalid(_) => StatusCode::BAD_REQUEST,
            ControlError::Conflict(_) => StatusCode::CONFLICT,
            ControlError::Peer(_) => StatusCode::BAD_GATEWAY,
            ControlError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            ControlError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ControlError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

impl From<crate::control::DeployFailure> for ApiError {
    fn from(e: crate::control::DeployFailure) -> ApiError {
        match e {
            crate::control::DeployFailure::Refused(r) => r.into(),
            crate::control::DeployFailure::Failed(c) => c.into(),
        }
    }
}

impl From<ReloadError> for ApiError {
    fn from(e: ReloadError) -> ApiError {
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message: e.error,
            line: e.line,
        }
    }
}

/// axum's own status for each rejection (400 syntax, 415 content type,
/// 422 data, 413 too large), with its text as the JSON message.
impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> ApiError {
        ApiError::new(r.status(), r.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> ApiError {
        ApiError::new(r.status(), r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, r.body_text())
    }
}

/// Fallback for paths no route matches.
pub async fn no_route() -> ApiError {
    ApiError::not_found("no such route")
}

/// Fallback for a known path with a method it does not serve.
pub async fn wrong_method() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed on this route",
    )
}

//! ProblemDetails (TS 29.571 §5.2.4.1): the one shape every SBI error takes,
//! sent as `application/problem+json` with the 3GPP `cause` and, for a bad
//! field, `invalidParams` naming it. Kept apart from the routes so the N7
//! decoder can build its errors without depending on the listener.

use serde::{Deserialize, Serialize};

/// `Content-Type` of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// One field at fault (TS 29.571 InvalidParam).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvalidParam {
    /// JSON pointer style path of the field, e.g. `/sliceInfo/sst`.
    pub param: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// TS 29.571 ProblemDetails.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProblemDetails {
    pub status: u16,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The 3GPP application error (TS 29.500 Table 5.2.7.2-1, TS 29.512
    /// Table 5.2.7.2-1), e.g. `MANDATORY_IE_MISSING`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalid_params: Vec<InvalidParam>,
}

impl ProblemDetails {
    pub fn new(status: u16, title: &str, cause: &str, detail: impl Into<String>) -> ProblemDetails {
        ProblemDetails {
            status,
            title: title.to_owned(),
            detail: Some(detail.into()),
            cause: Some(cause.to_owned()),
            invalid_params: Vec::new(),
        }
    }

    /// A 400 naming one field.
    pub fn field(cause: &str, param: &str, reason: impl Into<String>) -> ProblemDetails {
        let reason = reason.into();
        ProblemDetails {
            status: 400,
            title: "Bad Request".to_owned(),
            detail: Some(format!("{param}: {reason}")),
            cause: Some(cause.to_owned()),
            invalid_params: vec![InvalidParam {
                param: param.to_owned(),
                reason: Some(reason),
            }],
        }
    }

    /// A mandatory field is absent.
    pub fn missing(param: &str) -> ProblemDetails {
        ProblemDetails::field(cause::MANDATORY_IE_MISSING, param, "mandatory, absent")
    }

    /// A mandatory field is present but wrong.
    pub fn incorrect(param: &str, reason: impl Into<String>) -> ProblemDetails {
        ProblemDetails::field(cause::MANDATORY_IE_INCORRECT, param, reason)
    }

    /// An optional field is wrong.
    pub fn optional_incorrect(param: &str, reason: impl Into<String>) -> ProblemDetails {
        ProblemDetails::field(cause::OPTIONAL_IE_INCORRECT, param, reason)
    }

    /// The body is not JSON of the expected shape.
    pub fn invalid_format(detail: impl Into<String>) -> ProblemDetails {
        ProblemDetails::new(400, "Bad Request", cause::INVALID_MSG_FORMAT, detail)
    }

    /// 500 SYSTEM_FAILURE: what a Diameter request would get 5012 for
    /// (the store did not commit, a subscriber's usage stayed locked).
    pub fn system_failure(detail: impl Into<String>) -> ProblemDetails {
        ProblemDetails::new(500, "Internal Server Error", cause::SYSTEM_FAILURE, detail)
    }

    /// 503 NF_CONGESTION: shed by admission control.
    pub fn congestion() -> ProblemDetails {
        ProblemDetails::new(
            503,
            "Service Unavailable",
            cause::NF_CONGESTION,
            "the PCF is overloaded; retry later",
        )
    }

    /// The body as sent.
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising a struct of strings and numbers cannot fail; an empty
        // object is still valid problem+json if it ever did.
        serde_json::to_vec(self).unwrap_or_else(|_| b"{}".to_vec())
    }
}

/// The 3GPP causes this node sends (TS 29.500 Table 5.2.7.2-1).
pub mod cause {
    pub const INVALID_MSG_FORMAT: &str = "INVALID_MSG_FORMAT";
    pub const MANDATORY_IE_INCORRECT: &str = "MANDATORY_IE_INCORRECT";
    pub const OPTIONAL_IE_INCORRECT: &str = "OPTIONAL_IE_INCORRECT";
    pub const MANDATORY_IE_MISSING: &str = "MANDATORY_IE_MISSING";
    pub const RESOURCE_URI_STRUCTURE_NOT_FOUND: &str = "RESOURCE_URI_STRUCTURE_NOT_FOUND";
    pub const CONTEXT_NOT_FOUND: &str = "CONTEXT_NOT_FOUND";
    pub const METHOD_NOT_ALLOWED: &str = "METHOD_NOT_ALLOWED";
    pub const UNSUPPORTED_MEDIA_TYPE: &str = "UNSUPPORTED_MEDIA_TYPE";
    pub const REQUEST_TOO_LARGE: &str = "REQUEST_TOO_LARGE";
    pub const SYSTEM_FAILURE: &str = "SYSTEM_FAILURE";
    pub const NF_CONGESTION: &str = "NF_CONGESTION";
    pub const TIMED_OUT_REQUEST: &str = "TIMED_OUT_REQUEST";
    pub const USER_UNKNOWN: &str = "USER_UNKNOWN";
    pub const POLICY_CONTEXT_DENIED: &str = "POLICY_CONTEXT_DENIED";
    /// TS 29.514 Table 5.7.3-1 (N5).
    pub const PDU_SESSION_NOT_AVAILABLE: &str = "PDU_SESSION_NOT_AVAILABLE";
    pub const REQUESTED_SERVICE_NOT_AUTHORIZED: &str = "REQUESTED_SERVICE_NOT_AUTHORIZED";
    pub const APPLICATION_SESSION_CONTEXT_NOT_FOUND: &str = "APPLICATION_SESSION_CONTEXT_NOT_FOUND";
}

//! `PUT/GET/DELETE /v1/subscribers/{imsi}`: provisioning of subscriber
//! profiles. The body is the profile without the IMSI, which the path gives.

use super::control::Control;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath};
use crate::subscriber::Subscriber;
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Bounds that keep one profile (and the policy input built from it) small.
const MAX_SERVICES: usize = 256;
const MAX_ATTRIBUTES: usize = 256;
const MAX_NAME_LEN: usize = 128;

/// The request body of `PUT /v1/subscribers/{imsi}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriberBody {
    /// Optional; when given it must equal the path's IMSI.
    #[serde(default)]
    pub imsi: Option<String>,
    #[serde(default)]
    pub msisdn: Option<String>,
    #[serde(default)]
    pub plan: Option<String>,
    #[serde(default)]
    pub services: Vec<String>,
    #[serde(default)]
    pub attributes: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    pub billing_day: Option<u8>,
    /// Octets per period by accumulator name.
    #[serde(default)]
    pub quotas: BTreeMap<String, u64>,
}

fn check_name(what: &str, s: &str) -> Result<(), ApiError> {
    if s.is_empty() || s.len() > MAX_NAME_LEN || s.chars().any(char::is_control) {
        return Err(ApiError::bad_request(format!(
            "{what} must be 1 to {MAX_NAME_LEN} characters without control characters, got {s:?}"
        )));
    }
    Ok(())
}

/// Builds and validates the profile; 400 with the reason on bad input.
pub fn profile(imsi: String, body: SubscriberBody) -> Result<Subscriber, ApiError> {
    if let Some(b) = &body.imsi {
        if *b != imsi {
            return Err(ApiError::bad_request(format!(
                "imsi in the body ({b:?}) differs from the path ({imsi:?})"
            )));
        }
    }
    if let Some(p) = &body.plan {
        check_name("plan", p)?;
    }
    if body.services.len() > MAX_SERVICES {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_SERVICES} services"
        )));
    }
    for s in &body.services {
        check_name("service", s)?;
    }
    if body.attributes.len() > MAX_ATTRIBUTES {
        return Err(ApiError::bad_request(format!(
            "at most {MAX_ATTRIBUTES} attributes"
        )));
    }
    for k in body.attributes.keys() {
        check_name("attribute name", k)?;
    }
    for k in body.quotas.keys() {
        check_name("accumulator name", k)?;
    }
    let mut services = body.services;
    services.sort();
    services.dedup();
    let s = Subscriber {
        imsi,
        msisdn: body.msisdn,
        plan: body.plan,
        services,
        attributes: body.attributes,
        billing_day: body.billing_day,
        quotas: body.quotas,
    };
    s.validate()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(s)
}

fn check_imsi(imsi: &str) -> Result<(), ApiError> {
    Subscriber {
        imsi: imsi.to_string(),
        ..Default::default()
    }
    .validate()
    .map_err(|e| ApiError::bad_request(e.to_string()))
}

pub async fn put<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(imsi): ApiPath<String>,
    ApiJson(body): ApiJson<SubscriberBody>,
) -> Result<Response, ApiError> {
    let s = profile(imsi, body)?;
    let location = format!("/v1/subscribers/{}", s.imsi);
    let created = ctl.put_subscriber(s.clone()).await?;
    if created {
        let mut r = (StatusCode::CREATED, Json(s)).into_response();
        if let Ok(v) = HeaderValue::from_str(&location) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        Ok(r)
    } else {
        Ok((StatusCode::OK, Json(s)).into_response())
    }
}

pub async fn get<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(imsi): ApiPath<String>,
) -> Result<Response, ApiError> {
    check_imsi(&imsi)?;
    match ctl.subscriber(&imsi) {
        Some(s) => Ok(Json(&*s).into_response()),
        None => Err(ApiError::not_found(format!("no subscriber {imsi}"))),
    }
}

pub async fn delete<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(imsi): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    check_imsi(&imsi)?;
    if ctl.delete_subscriber(&imsi).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!("no subscriber {imsi}")))
    }
}

//! `PUT/GET/DELETE /v1/subscribers/{imsi}`: provisioning of subscriber
//! profiles. The body is the profile without the IMSI, which the path gives.
//! `GET /v1/subscribers?q=`: search (the console's), a page at a time.
//! `POST /v1/subscribers/batch`: many profiles (each with its IMSI) in one
//! durable change, for bulk provisioning (`pcrf subscribers import`).

use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use crate::control::console::{SubscriberPage, SubscriberQuery, MAX_PAGE};
use crate::control::{BatchOutcome, Control};
use crate::subscriber::Subscriber;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use utoipa::ToSchema;

/// Bounds that keep one profile (and the policy input built from it) small.
const MAX_SERVICES: usize = 256;
const MAX_ATTRIBUTES: usize = 256;
const MAX_NAME_LEN: usize = 128;
/// Most profiles in one batch request: one batch is one transaction, and
/// every Gx write queued behind it waits for it.
pub const MAX_BATCH_ENTRIES: usize = 100_000;
/// The batch body as JSON lines, one profile per line.
pub const NDJSON: &str = "application/x-ndjson";

/// The request body of `PUT /v1/subscribers/{imsi}`.
#[derive(Debug, Deserialize, ToSchema)]
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
    /// Day of the month monthly accumulators reset; the usage file's
    /// default when absent.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 28)]
    pub billing_day: Option<u8>,
    /// Octets per period by accumulator name; overrides the plan's quota.
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

pub(crate) fn check_imsi(imsi: &str) -> Result<(), ApiError> {
    Subscriber {
        imsi: imsi.to_string(),
        ..Default::default()
    }
    .validate()
    .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// Create or replace a subscriber profile.
#[utoipa::path(put, path = "/v1/subscribers/{imsi}", operation_id = "putSubscriber",
    params(("imsi" = String, Path, description = "IMSI, 5 to 15 digits")),
    request_body = SubscriberBody,
    responses(
        (status = 200, description = "Replaced", body = Subscriber),
        (status = 201, description = "Created", body = Subscriber),
        (status = 400, description = "Invalid input", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "JSON of the wrong shape (unknown field, wrong type)", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody),
    ))]
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

/// Read a subscriber profile.
#[utoipa::path(get, path = "/v1/subscribers/{imsi}", operation_id = "getSubscriber",
    params(("imsi" = String, Path, description = "IMSI, 5 to 15 digits")),
    responses(
        (status = 200, description = "The profile", body = Subscriber),
        (status = 400, description = "Invalid IMSI", body = ErrorBody),
        (status = 404, description = "No such subscriber", body = ErrorBody),
    ))]
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

/// Delete a subscriber profile.
#[utoipa::path(delete, path = "/v1/subscribers/{imsi}", operation_id = "deleteSubscriber",
    params(("imsi" = String, Path, description = "IMSI, 5 to 15 digits")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Invalid IMSI", body = ErrorBody),
        (status = 404, description = "No such subscriber", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody),
    ))]
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

/// A batch entry: the body of a PUT that must name its IMSI.
pub fn batch_entry(body: SubscriberBody) -> Result<Subscriber, ApiError> {
    let Some(imsi) = body.imsi.clone() else {
        return Err(ApiError::bad_request("imsi is required"));
    };
    profile(imsi, body)
}

/// How the batch body is framed, from its content type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BatchFormat {
    Array,
    Lines,
}

fn batch_format(headers: &HeaderMap) -> Result<BatchFormat, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim();
    if mime.eq_ignore_ascii_case("application/json") {
        Ok(BatchFormat::Array)
    } else if mime.eq_ignore_ascii_case(NDJSON) {
        Ok(BatchFormat::Lines)
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "content-type must be application/json (an array of profiles) or {NDJSON} \
                 (one profile per line), got {ct:?}"
            ),
        ))
    }
}

fn too_many() -> ApiError {
    ApiError::bad_request(format!("at most {MAX_BATCH_ENTRIES} profiles per batch"))
}

/// Parses and validates every entry; the first bad one refuses the batch,
/// named by its index (0-based; JSON lines also give the line).
fn parse_batch(body: &[u8], format: BatchFormat) -> Result<Vec<Subscriber>, ApiError> {
    let mut out = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut add = |index: usize, where_: String, s: Subscriber| -> Result<(), ApiError> {
        if let Some(first) = seen.insert(s.imsi.clone(), index) {
            return Err(ApiError::bad_request(format!(
                "{where_}: imsi {} repeats entry {first}",
                s.imsi
            )));
        }
        out.push(s);
        Ok(())
    };
    match format {
        BatchFormat::Array => {
            let entries: Vec<serde_json::Value> = serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("body must be a JSON array of profiles: {e}"))
            })?;
            if entries.len() > MAX_BATCH_ENTRIES {
                return Err(too_many());
            }
            for (i, v) in entries.into_iter().enumerate() {
                let where_ = format!("entry {i}");
                let s = serde_json::from_value::<SubscriberBody>(v)
                    .map_err(|e| ApiError::bad_request(format!("{where_}: {e}")))
                    .and_then(|b| {
                        batch_entry(b)
                            .map_err(|e| ApiError::bad_request(format!("{where_}: {}", e.message)))
                    })?;
                add(i, where_, s)?;
            }
        }
        BatchFormat::Lines => {
            let mut i = 0;
            for (n, line) in body.split(|b| *b == b'\n').enumerate() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                if i == MAX_BATCH_ENTRIES {
                    return Err(too_many());
                }
                let where_ = format!("entry {i} (line {})", n + 1);
                let s = serde_json::from_slice::<SubscriberBody>(line)
                    .map_err(|e| ApiError::bad_request(format!("{where_}: {e}")))
                    .and_then(|b| {
                        batch_entry(b)
                            .map_err(|e| ApiError::bad_request(format!("{where_}: {}", e.message)))
                    })?;
                add(i, where_, s)?;
                i += 1;
            }
        }
    }
    Ok(out)
}

/// Create or replace many subscriber profiles in one durable change.
#[utoipa::path(post, path = "/v1/subscribers/batch", operation_id = "putSubscribersBatch",
    description = format!(
        "Every entry is validated as PUT /v1/subscribers/{{imsi}} validates its body, and must name its imsi; IMSIs must be distinct. The body is a JSON array of profiles, or one profile as JSON per line (blank lines skipped). The first bad entry refuses the whole batch (400, the message starts with \"entry N\", 0-based, and for JSON lines gives the line); otherwise all profiles are written in one store transaction (all or none). At most {MAX_BATCH_ENTRIES} entries; the body limit is [api].max_batch_bytes (default 16 MiB)."
    ),
    request_body(content(
        ([SubscriberBody] = "application/json"),
        (String = "application/x-ndjson"),
    )),
    responses(
        (status = 200, description = "Every profile written", body = BatchOutcome),
        (status = 400, description = "An entry is invalid (named by index), repeats an IMSI, the body is not JSON, or more than the maximum entries", body = ErrorBody),
        (status = 413, description = "Body larger than [api].max_batch_bytes", body = ErrorBody),
        (status = 415, description = "Content-Type is neither application/json nor application/x-ndjson", body = ErrorBody),
        (status = 503, description = "Store unavailable: nothing was written", body = ErrorBody),
    ))]
pub async fn put_batch<C: Control>(
    State(ctl): State<Arc<C>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<BatchOutcome>, ApiError> {
    let format = batch_format(&headers)?;
    let body = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                r.status(),
                "batch body larger than [api].max_batch_bytes: send fewer profiles per request",
            )
        } else {
            ApiError::new(r.status(), r.body_text())
        }
    })?;
    let subscribers = parse_batch(&body, format)?;
    Ok(Json(ctl.put_subscribers(subscribers).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(body: &str) -> Result<Vec<Subscriber>, String> {
        parse_batch(body.as_bytes(), BatchFormat::Lines).map_err(|e| e.message)
    }

    fn array(body: &str) -> Result<Vec<Subscriber>, String> {
        parse_batch(body.as_bytes(), BatchFormat::Array).map_err(|e| e.message)
    }

    #[test]
    fn batch_entries_are_validated_like_put_and_named() {
        let ok = array(
            r#"[{"imsi":"001010000000001","services":["b","a","a"]},
                {"imsi":"001010000000002","quotas":{"monthly":5}}]"#,
        )
        .expect("valid");
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[0].services, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(ok[1].quotas.get("monthly"), Some(&5));
        let e = array(r#"[{"imsi":"001010000000001"},{"msisdn":"123456"}]"#).expect_err("no imsi");
        assert!(
            e.starts_with("entry 1: ") && e.contains("imsi is required"),
            "{e}"
        );
        let e = array(r#"[{"imsi":"001010000000001"},{"imsi":"12"}]"#).expect_err("bad imsi");
        assert!(
            e.starts_with("entry 1: ") && e.contains("5 to 15 digits"),
            "{e}"
        );
        let e = array(r#"[{"imsi":"001010000000001","colour":"red"}]"#).expect_err("unknown");
        assert!(e.starts_with("entry 0: ") && e.contains("colour"), "{e}");
        let e = array(r#"[{"imsi":"001010000000001"},{"imsi":"001010000000001"}]"#)
            .expect_err("duplicate");
        assert!(
            e.contains("entry 1: imsi 001010000000001 repeats entry 0"),
            "{e}"
        );
        let e = array(r#"{"imsi":"001010000000001"}"#).expect_err("not an array");
        assert!(e.contains("JSON array"), "{e}");
        assert_eq!(array("[]").expect("empty"), vec![]);
    }

    #[test]
    fn json_lines_skip_blank_lines_and_name_the_line() {
        let ok = lines("{\"imsi\":\"001010000000001\"}\n\n{\"imsi\":\"001010000000002\"}\n")
            .expect("valid");
        assert_eq!(ok.len(), 2);
        let e = lines(
            "{\"imsi\":\"001010000000001\"}\n\n{\"imsi\":\"001010000000002\",\"billing_day\":31}",
        )
        .expect_err("bad billing day");
        assert!(
            e.starts_with("entry 1 (line 3): ") && e.contains("billing_day"),
            "{e}"
        );
        let e = lines("{\"imsi\":").expect_err("syntax");
        assert!(e.starts_with("entry 0 (line 1): "), "{e}");
    }

    #[test]
    fn more_than_the_maximum_is_refused() {
        let body: String = (0..=MAX_BATCH_ENTRIES)
            .map(|i| format!("{{\"imsi\":\"{i:015}\"}}\n"))
            .collect();
        let e = lines(&body).expect_err("too many");
        assert!(e.contains("at most 100000"), "{e}");
    }
}

/// `GET /v1/subscribers` query (the console's search box).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
struct SearchParams {
    /// An IMSI or MSISDN (exact, or leading digits), or a UE address of an
    /// open session; empty or absent lists every subscriber.
    q: Option<String>,
    /// The last IMSI of the previous page (`next` of its answer).
    after: Option<String>,
    /// Subscribers per page (default 20).
    #[param(minimum = 1, maximum = 200)]
    limit: Option<usize>,
}

/// Search subscribers by IMSI, MSISDN (exact or prefix) or UE address; a
/// page at a time in IMSI order. Exact IMSI, MSISDN and UE address are
/// index look-ups; a prefix scans the table once per page.
#[utoipa::path(get, path = "/v1/subscribers", operation_id = "searchSubscribers",
    params(SearchParams),
    responses(
        (status = 200, description = "A page of subscribers", body = SubscriberPage),
        (status = 400, description = "Invalid query", body = ErrorBody),
    ))]
pub async fn search<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiQuery(query): ApiQuery<SubscriberQuery>,
) -> Result<Json<SubscriberPage>, ApiError> {
    if query.limit == 0 || query.limit > MAX_PAGE {
        return Err(ApiError::bad_request(format!(
            "limit must be 1 to {MAX_PAGE}"
        )));
    }
    if query.q.len() > 64 {
        return Err(ApiError::bad_request("q must be at most 64 characters"));
    }
    Ok(Json(ctl.search_subscribers(&query)))
}

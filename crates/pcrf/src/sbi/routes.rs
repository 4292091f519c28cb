//! The Npcf_SMPolicyControl routes: one request in, one answer out. The
//! path and method pick the operation (404 and 405 otherwise), the
//! Content-Type and size are checked (415, 413), the body is decoded and
//! checked by `n7::decode`, the operation runs on the [`SmPolicyService`]
//! within the request timeout (504 after it), and the answer is JSON, or
//! `application/problem+json` for every error. Each request is counted
//! by operation and status. Beside them, the callback a CHF notifies
//! spending-limit changes to (N28, `n28::CALLBACK_ROOT`), handed to the
//! Sy service through [`SpendingNotifications`].

use super::problem::{cause, ProblemDetails, PROBLEM_JSON};
use super::stats::{Operation, SbiStats};
use crate::n5::app_sessions::AppSessions;
use crate::n7::decode::{decode_create, decode_delete, decode_update};
use crate::n7::repeat;
use crate::n7::service::{SmPolicyService, MAX_POLICY_ID_BYTES};
use crate::sbi::body::DecodeLimits;
use crate::sy::n28::{
    self, NotifyOutcome, SpendingLimitStatus, SpendingNotifications, SubscriptionTerminationInfo,
};
use bytes::{Bytes, BytesMut};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use hyper::{Method, Request, Response, StatusCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::n5::model::N5_SERVICE_ROOT;
pub use crate::n7::service::SERVICE_ROOT;
/// The collection of SM policies.
const COLLECTION: &str = "/npcf-smpolicycontrol/v1/sm-policies";
/// The collection of application sessions.
const APP_SESSIONS: &str = "/npcf-policyauthorization/v1/app-sessions";
/// The media type of every request body but a PATCH's.
const JSON: &str = "application/json";
/// The media type of a PATCH's body (RFC 7396).
const MERGE_PATCH_JSON: &str = "application/merge-patch+json";

/// A response body: the whole answer in one buffer.
pub type AnswerBody = full_body::FullBody;

/// What the routes need besides the service.
#[derive(Clone)]
pub struct Routes {
    pub service: Arc<dyn SmPolicyService>,
    /// N5, when the node serves it (the listener then has both APIs).
    pub app_sessions: Option<Arc<AppSessions>>,
    /// Where a CHF's notifications go (N28).
    pub spending: Option<Arc<dyn SpendingNotifications>>,
    pub stats: Arc<SbiStats>,
    pub max_body_bytes: usize,
    pub decode_limits: DecodeLimits,
    pub request_timeout: Duration,
    /// `http` or `https`: the scheme of the `Location` of a created policy.
    pub scheme: &'static str,
    /// The authority written in `Location` when the request's own is
    /// missing or not a plain host[:port].
    pub fallback_authority: String,
}

/// Which operation a path and method name, or why none does.
enum Route {
    Create,
    Get(String),
    Update(String),
    Delete(String),
    AppCreate,
    AppGet(String),
    AppPatch(String),
    AppDelete(String),
    /// A CHF's notify or terminate, for the session id the path names.
    SpendingNotify(String),
    SpendingTerminate(String),
    /// The path exists but not with this method.
    WrongMethod(&'static str),
    NotFound,
}

/// An id from a path: ASCII letters, digits, `-`, `_`, `.`, at most
/// [`MAX_POLICY_ID_BYTES`].
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_POLICY_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// What a path names below a collection: the collection itself, or a
/// resource's id with at most one action segment after it.
enum Below<'a> {
    Collection,
    Resource(String, Option<&'a str>),
    Nothing,
}

fn below(rest: &str) -> Below<'_> {
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Below::Collection;
    }
    let Some(rest) = rest.strip_prefix('/') else {
        return Below::Nothing;
    };
    let mut parts = rest.split('/');
    let id = parts.next().unwrap_or("");
    let action = parts.next();
    if !valid_id(id) || parts.next().is_some() {
        return Below::Nothing;
    }
    Below::Resource(id.to_owned(), action)
}

/// The N5 routes: the collection, an application session (GET, PATCH),
/// and its `delete` (POST).
fn app_route(method: &Method, rest: &str) -> Route {
    let (id, action) = match below(rest) {
        Below::Collection if method == Method::POST => return Route::AppCreate,
        Below::Collection => return Route::WrongMethod("POST"),
        Below::Nothing => return Route::NotFound,
        Below::Resource(id, action) => (id, action),
    };
    match (action, method) {
        (None, &Method::GET) => Route::AppGet(id),
        (None, &Method::PATCH) => Route::AppPatch(id),
        (None, _) => Route::WrongMethod("GET, PATCH"),
        (Some("delete"), &Method::POST) => Route::AppDelete(id),
        (Some("delete"), _) => Route::WrongMethod("POST"),
        _ => Route::NotFound,
    }
}

/// The N28 callback: `{session}/notify` and `{session}/terminate` (POST).
fn spending_route(method: &Method, rest: &str) -> Route {
    match n28::parse_callback(rest) {
        Some((id, "notify")) if method == Method::POST => Route::SpendingNotify(id),
        Some((id, "terminate")) if method == Method::POST => Route::SpendingTerminate(id),
        Some((_, "notify" | "terminate")) => Route::WrongMethod("POST"),
        _ => Route::NotFound,
    }
}

fn route(method: &Method, path: &str) -> Route {
    if let Some(rest) = path.strip_prefix(n28::CALLBACK_ROOT) {
        return spending_route(method, rest);
    }
    if let Some(rest) = path.strip_prefix(APP_SESSIONS) {
        return app_route(method, rest);
    }
    let Some(rest) = path.strip_prefix(COLLECTION) else {
        return Route::NotFound;
    };
    let (id, action) = match below(rest) {
        Below::Collection if method == Method::POST => return Route::Create,
        Below::Collection => return Route::WrongMethod("POST"),
        Below::Nothing => return Route::NotFound,
        Below::Resource(id, action) => (id, action),
    };
    match (action, method) {
        (None, &Method::GET) => Route::Get(id),
        (None, _) => Route::WrongMethod("GET"),
        (Some("update"), &Method::POST) => Route::Update(id),
        (Some("delete"), &Method::POST) => Route::Delete(id),
        (Some("update" | "delete"), _) => Route::WrongMethod("POST"),
        _ => Route::NotFound,
    }
}

impl Routes {
    /// Answers one request (never fails: every error is a problem answer).
    pub async fn handle(&self, req: Request<Incoming>) -> Response<AnswerBody> {
        let start = Instant::now();
        let (op, response) = match route(req.method(), req.uri().path()) {
            Route::Create => (Operation::Create, self.timed(self.create(req)).await),
            Route::Get(id) => (Operation::Get, self.timed(self.get(id)).await),
            Route::Update(id) => (Operation::Update, self.timed(self.update(id, req)).await),
            Route::Delete(id) => (Operation::Delete, self.timed(self.delete(id, req)).await),
            Route::AppCreate => (Operation::AppCreate, self.timed(self.app_create(req)).await),
            Route::AppGet(id) => (Operation::AppGet, self.timed(self.app_get(id)).await),
            Route::AppPatch(id) => (
                Operation::AppUpdate,
                self.timed(self.app_patch(id, req)).await,
            ),
            Route::AppDelete(id) => (
                Operation::AppDelete,
                self.timed(self.app_delete(id, req)).await,
            ),
            Route::SpendingNotify(id) => (
                Operation::SpendingNotify,
                self.timed(self.spending_notify(id, req)).await,
            ),
            Route::SpendingTerminate(id) => (
                Operation::SpendingTerminate,
                self.timed(self.spending_terminate(id, req)).await,
            ),
            Route::WrongMethod(allowed) => {
                let mut r = problem(&ProblemDetails::new(
                    405,
                    "Method Not Allowed",
                    cause::METHOD_NOT_ALLOWED,
                    format!("{} is not allowed here; allowed: {allowed}", req.method()),
                ));
                r.headers_mut()
                    .insert(ALLOW, HeaderValue::from_static(allowed));
                (Operation::Other, r)
            }
            Route::NotFound => (
                Operation::Other,
                problem(&ProblemDetails::new(
                    404,
                    "Not Found",
                    cause::RESOURCE_URI_STRUCTURE_NOT_FOUND,
                    "no such resource",
                )),
            ),
        };
        self.stats
            .record(op, response.status().as_u16(), start.elapsed());
        response
    }

    async fn timed(
        &self,
        f: impl std::future::Future<Output = Result<Response<AnswerBody>, ProblemDetails>>,
    ) -> Response<AnswerBody> {
        match tokio::time::timeout(self.request_timeout, f).await {
            Ok(Ok(r)) => r,
            Ok(Err(p)) => problem(&p),
            Err(_) => problem(&ProblemDetails::new(
                504,
                "Gateway Timeout",
                cause::TIMED_OUT_REQUEST,
                format!("not answered within {:?}", self.request_timeout),
            )),
        }
    }

    async fn create(&self, req: Request<Incoming>) -> Result<Response<AnswerBody>, ProblemDetails> {
        let authority = self.authority(&req);
        let body = self.json_body(req, false, JSON).await?;
        let ctx = decode_create(&body, &self.decode_limits)?;
        let created = self.service.create(ctx).await?;
        let mut r = json(StatusCode::CREATED, &created.decision);
        let location = format!("{}://{authority}{COLLECTION}/{}", self.scheme, created.id);
        match HeaderValue::from_str(&location) {
            Ok(v) => {
                r.headers_mut().insert(LOCATION, v);
                Ok(r)
            }
            Err(_) => Err(ProblemDetails::new(
                500,
                "Internal Server Error",
                cause::SYSTEM_FAILURE,
                "the created policy's id cannot be written in a Location header",
            )),
        }
    }

    async fn get(&self, id: String) -> Result<Response<AnswerBody>, ProblemDetails> {
        let control = self.service.get(&id).await?;
        Ok(json(StatusCode::OK, &control))
    }

    async fn update(
        &self,
        id: String,
        req: Request<Incoming>,
    ) -> Result<Response<AnswerBody>, ProblemDetails> {
        let stamp = req
            .headers()
            .get(repeat::ORIGINATION_TIMESTAMP)
            .map(|v| v.as_bytes().to_vec());
        let body = self.json_body(req, false, JSON).await?;
        let up = decode_update(&body, &self.decode_limits)?;
        let digest = repeat::RequestDigest::of(stamp.as_deref(), &body);
        let decision = self.service.update(&id, up, digest).await?;
        Ok(json(StatusCode::OK, &decision))
    }

    async fn delete(
        &self,
        id: String,
        req: Request<Incoming>,
    ) -> Result<Response<AnswerBody>, ProblemDetails> {
        let body = self.json_body(req, true, JSON).await?;
        let del = decode_delete(&body, &self.decode_limits)?;
        self.service.delete(&id, del).await?;
        let mut r = Response::new(AnswerBody::new(Bytes::new()));
        *r.status_mut() = StatusCode::NO_CONTENT;
        Ok(r)
    }

    fn n5(&self) -> Result<&AppSessions, ProblemDetails> {
        self.app_sessions.as_deref().ok_or_else(|| {
            ProblemDetails::new(
                404,
                "Not Found",
                cause::RESOURCE_URI_STRUCTURE_NOT_FOUND,
                "this node does not serve Npcf_PolicyAuthorization",
            )
        })
    }

    async fn app_create(
        &self,
        req: Request<Incoming>,
    ) -> Result<Response<AnswerBody>, ProblemDetails> {
        let n5 = self.n5()?;
        let authority = self.authority(&req);
        let body = self.json_body(req, false, JSON).await?;
        let asc = crate::n5::decode::decode_create(&body, &self.decode_limits)?;
        let (id, context) = n5.create(asc).await?;
        let mut r = json(StatusCode::CREATED, &context);
        let location = format!("{}://{authority}{APP_SESSIONS}/{id}", self.scheme);
        let v = HeaderValue::from_str(&location).map_err(|_| {
            ProblemDetails::new(
                500,
                "Internal Server Error",
                cause::SYSTEM_FAILURE,
                "the session's id cannot be written in a Location header",
            )
        })?;
        r.headers_mut().insert(LOCATION, v);
        Ok(r)
    }

    async fn app_get(&self, id: String) -> Result<Response<AnswerBody>, ProblemDetails> {
        let context = self.n5()?.get(&id).await?;
        Ok(json(StatusCode::OK, &context))
    }

    async fn app_patch(
        &self,
        id: String,
        req: Request<Incoming>,
    ) -> Result<Response<AnswerBody>, ProblemDetails> {
        let n5 = self.n5()?;
        // TS 29.514 §5.3: a PATCH is a JSON merge patch (RFC 7396), and
        // says so; a plain JSON body is refused, not guessed at.
        let body = self.json_body(req, false, MERGE_PATCH_JSON).await?;
        let up = crate::n5::decode::decode_patch(&body, &self.decode_limits)?;
        let context = n5.update(&id, up).await?;
        Ok(json(StatusCode::OK, &context))
    }

    async fn app_delete(
        &self,
        id: String,
        req: Request<Incoming>,
    ) -> Result<Response<AnswerBody>, ProblemDetails> {
        let n5 = self.n5()?;
        // The body (EventsSubscReqData for a last report) may be empty;
        // one that is there is checked like any other.
        let body = self.json_body(req, true, JSON).await?;
        crate::n5::decode::decode_delete(&body, &self.decode_limits)?;
        n5.delete(&id).await?;
        let mut r = Response::new(AnswerBody::new(Bytes::new()));
        *r.status_mut() = StatusCode::NO_CONTENT;
        Ok(r)
    }

    fn spending(&self) -> Result<&dyn SpendingNotifications, ProblemDetails> {
        self.spending.as_deref().ok_or_else(|| {
            ProblemDetails::new(
                404,
                "Not Found",
                cause::RESOURCE_URI_STRUCTURE_NOT_FOUND,
                "this node takes no spending-limit notifications",
            )
        })
    }

    /// `POST {notifUri}/notify`: a SpendingLimitStatus (TS 29.594
    /// §5.2.2.4), 204 once stored, 404 for a subscription not held here.
    async fn spending_notify(
        &self,
        id: String,
        req: Request<Incoming>,
    ) -> Result<Response<AnswerBody>, ProblemDetails> {
        let to = self.spending()?;
        let body = self.json_body(req, false, JSON).await?;
        let status: SpendingLimitStatus = serde_json::from_slice(&body).map_err(|e| {
            ProblemDetails::invalid_format(format!("not a SpendingLimitStatus: {e}"))
        })?;
        if let Err(e) = status.reports() {
            return Err(ProblemDetails::invalid_format(e));
        }
        notified(to.notify(id, status).await)
    }

    /// `POST {notifUri}/terminate`: SubscriptionTerminationInfo (§5.2.2.5);
    /// the counters become unknown.
    async fn spending_terminate(
        &self,
        id: String,
        req: Request<Incoming>,
    ) -> Result<Response<AnswerBody>, ProblemDetails> {
        let to = self.spending()?;
        let body = self.json_body(req, false, JSON).await?;
        let info: SubscriptionTerminationInfo = serde_json::from_slice(&body).map_err(|e| {
            ProblemDetails::invalid_format(format!("not a SubscriptionTerminationInfo: {e}"))
        })?;
        notified(to.terminate(id, info).await)
    }

    /// The request's authority when it is a plain host[:port], else the
    /// listener's.
    fn authority(&self, req: &Request<Incoming>) -> String {
        let given = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_owned())
            .or_else(|| {
                req.headers()
                    .get(hyper::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .map(str::to_owned)
            });
        match given {
            Some(a)
                if !a.is_empty()
                    && a.len() <= 255
                    && a.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']')
                    }) =>
            {
                a
            }
            _ => self.fallback_authority.clone(),
        }
    }

    /// The body, once its Content-Type is `media_type` and its size within
    /// the limit. With `may_be_empty`, an empty body needs no Content-Type.
    async fn json_body(
        &self,
        req: Request<Incoming>,
        may_be_empty: bool,
        media_type: &'static str,
    ) -> Result<Bytes, ProblemDetails> {
        let too_large = || {
            ProblemDetails::new(
                413,
                "Payload Too Large",
                cause::REQUEST_TOO_LARGE,
                format!("the body is larger than {} bytes", self.max_body_bytes),
            )
        };
        let declared = req
            .headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.max_body_bytes as u64) {
            return Err(too_large());
        }
        let content_type = req
            .headers()
            .get(CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or("").to_owned());
        let mut body = req.into_body();
        let mut buf = BytesMut::new();
        while let Some(frame) =
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
        {
            let frame = frame.map_err(|e| {
                ProblemDetails::invalid_format(format!("the body could not be read: {e}"))
            })?;
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.len() > self.max_body_bytes {
                    return Err(too_large());
                }
                buf.extend_from_slice(&data);
            }
        }
        if buf.is_empty() && may_be_empty {
            return Ok(buf.freeze());
        }
        let is_json = content_type.as_deref().is_some_and(|t| {
            let essence = t.split(';').next().unwrap_or("").trim();
            essence.eq_ignore_ascii_case(media_type)
        });
        if !is_json {
            return Err(ProblemDetails::new(
                415,
                "Unsupported Media Type",
                cause::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "the body must be {media_type}, not {}",
                    content_type.as_deref().unwrap_or("(none)")
                ),
            ));
        }
        Ok(buf.freeze())
    }
}

/// The answer to a CHF's notification.
fn notified(outcome: NotifyOutcome) -> Result<Response<AnswerBody>, ProblemDetails> {
    match outcome {
        NotifyOutcome::Applied => {
            let mut r = Response::new(AnswerBody::new(Bytes::new()));
            *r.status_mut() = StatusCode::NO_CONTENT;
            Ok(r)
        }
        NotifyOutcome::Unknown => Err(ProblemDetails::new(
            404,
            "Not Found",
            cause::CONTEXT_NOT_FOUND,
            "no such spending-limit subscription",
        )),
        NotifyOutcome::Busy => Err(ProblemDetails::congestion()),
        NotifyOutcome::Failed(why) => Err(ProblemDetails::system_failure(why)),
    }
}

fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response<AnswerBody> {
    match serde_json::to_vec(value) {
        Ok(body) => {
            let mut r = Response::new(AnswerBody::new(Bytes::from(body)));
            *r.status_mut() = status;
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        Err(e) => problem(&ProblemDetails::new(
            500,
            "Internal Server Error",
            cause::SYSTEM_FAILURE,
            format!("the answer could not be written: {e}"),
        )),
    }
}

/// A problem answer.
pub fn problem(p: &ProblemDetails) -> Response<AnswerBody> {
    let mut r = Response::new(AnswerBody::new(Bytes::from(p.to_json())));
    *r.status_mut() = StatusCode::from_u16(p.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    r
}

/// A whole-buffer response body (one DATA frame), without pulling in
/// http-body-util for its `Full`.
pub mod full_body {
    use bytes::Bytes;
    use http_body::{Frame, SizeHint};
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    pub struct FullBody(Option<Bytes>);

    impl FullBody {
        pub fn new(b: Bytes) -> FullBody {
            FullBody((!b.is_empty()).then_some(b))
        }
    }

    impl http_body::Body for FullBody {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            Poll::Ready(self.get_mut().0.take().map(|b| Ok(Frame::data(b))))
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_none()
        }

        fn size_hint(&self) -> SizeHint {
            SizeHint::with_exact(self.0.as_ref().map_or(0, |b| b.len() as u64))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_methods_pick_the_operation() {
        let p = COLLECTION;
        assert!(matches!(route(&Method::POST, p), Route::Create));
        assert!(matches!(route(&Method::GET, p), Route::WrongMethod("POST")));
        assert!(matches!(route(&Method::GET, &format!("{p}/abc")), Route::Get(id) if id == "abc"));
        assert!(matches!(
            route(&Method::POST, &format!("{p}/abc/update")),
            Route::Update(_)
        ));
        assert!(matches!(
            route(&Method::POST, &format!("{p}/abc/delete")),
            Route::Delete(_)
        ));
        assert!(matches!(
            route(&Method::GET, &format!("{p}/abc/delete")),
            Route::WrongMethod("POST")
        ));
        assert!(matches!(
            route(&Method::POST, &format!("{p}/abc/other")),
            Route::NotFound
        ));
        assert!(matches!(
            route(&Method::POST, &format!("{p}/a/b/c")),
            Route::NotFound
        ));
        assert!(matches!(
            route(&Method::POST, "/npcf-smpolicycontrol/v2/sm-policies"),
            Route::NotFound
        ));
        assert!(matches!(
            route(&Method::POST, &format!("{p}x")),
            Route::NotFound
        ));
        let a = APP_SESSIONS;
        assert!(matches!(route(&Method::POST, a), Route::AppCreate));
        assert!(
            matches!(route(&Method::PATCH, &format!("{a}/x1")), Route::AppPatch(id) if id == "x1")
        );
        assert!(matches!(
            route(&Method::GET, &format!("{a}/x1")),
            Route::AppGet(_)
        ));
        assert!(matches!(
            route(&Method::POST, &format!("{a}/x1/delete")),
            Route::AppDelete(_)
        ));
        assert!(matches!(
            route(&Method::POST, &format!("{a}/x1")),
            Route::WrongMethod("GET, PATCH")
        ));
        assert!(matches!(
            route(&Method::POST, &format!("{a}/x/y/z")),
            Route::NotFound
        ));
        let n = n28::CALLBACK_ROOT;
        assert!(
            matches!(route(&Method::POST, &format!("{n}/a%3Bsy%3B1/notify")), Route::SpendingNotify(id) if id == "a;sy;1")
        );
        assert!(matches!(
            route(&Method::POST, &format!("{n}/a/terminate")),
            Route::SpendingTerminate(_)
        ));
        assert!(matches!(
            route(&Method::GET, &format!("{n}/a/notify")),
            Route::WrongMethod("POST")
        ));
        assert!(matches!(
            route(&Method::POST, &format!("{n}/a/other")),
            Route::NotFound
        ));
        assert!(matches!(route(&Method::POST, n), Route::NotFound));
        let long = "a".repeat(MAX_POLICY_ID_BYTES + 1);
        assert!(matches!(
            route(&Method::GET, &format!("{p}/{long}")),
            Route::NotFound
        ));
    }
}

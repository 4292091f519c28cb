//! `GET /v1/debug/profile?seconds=N&format=svg|pprof`: a CPU profile of
//! the running node, for finding where the time goes under real traffic
//! without restarting it under a profiler. A sampling profiler (`pprof`,
//! SIGPROF at 99 Hz on every thread) runs only for the seconds asked, then
//! stops: nothing samples while nobody asks. One profile at a time (a
//! second request meanwhile gets 409), at most 60 seconds.
//!
//! `svg` (the default) is a flame graph to open in a browser; `pprof` is
//! the gzip-compressed protobuf that `go tool pprof` and other pprof
//! viewers read.

use super::error::{ApiError, ErrorBody};
use super::extract::ApiQuery;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use utoipa::{IntoParams, ToSchema};

/// Samples per second: prime-ish, so sampling does not run in lockstep
/// with the node's own periodic work.
const FREQUENCY_HZ: i32 = 99;

/// The profiler is process-wide (one SIGPROF timer): one profile at a time.
static BUSY: AtomicBool = AtomicBool::new(false);

#[derive(Clone, Copy, Debug, Default, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// A flame graph (image/svg+xml).
    #[default]
    Svg,
    /// pprof's protobuf, gzip-compressed (application/octet-stream).
    Pprof,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ProfileQuery {
    /// How long to sample, 1 to 60 seconds.
    #[serde(default = "ten")]
    #[param(minimum = 1, maximum = 60, default = 10)]
    pub seconds: u64,
    /// `svg` (flame graph) or `pprof` (gzip-compressed protobuf).
    #[serde(default)]
    #[param(inline)]
    pub format: Format,
}

fn ten() -> u64 {
    10
}

/// Releases the one-at-a-time flag however the profile ends.
struct Running;

impl Running {
    fn start() -> Option<Running> {
        BUSY.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| Running)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        BUSY.store(false, Ordering::Release);
    }
}

/// A CPU profile of the node over the next `seconds`: a flame graph (SVG)
/// or pprof's protobuf (gzip). One at a time.
#[utoipa::path(get, path = "/v1/debug/profile", operation_id = "profile",
    params(ProfileQuery),
    responses(
        (status = 200, description = "The profile: a flame graph (format=svg) or gzip-compressed pprof protobuf (format=pprof)",
            content(
                (String = "image/svg+xml"),
                (Vec<u8> = "application/octet-stream"),
            )),
        (status = 400, description = "seconds out of 1..60 or an unknown format", body = ErrorBody),
        (status = 409, description = "Another profile is being taken", body = ErrorBody),
        (status = 500, description = "The profiler could not start or report", body = ErrorBody),
    ))]
pub async fn profile(ApiQuery(q): ApiQuery<ProfileQuery>) -> Result<Response, ApiError> {
    if !(1..=60).contains(&q.seconds) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("seconds must be between 1 and 60, not {}", q.seconds),
        ));
    }
    let running = Running::start().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "a profile is being taken; try again when it is done",
        )
    })?;
    tracing::info!(seconds = q.seconds, format = ?q.format, "CPU profile started by API");
    let seconds = q.seconds;
    let format = q.format;
    // The sampling and the symbolisation block: off the runtime's workers.
    let body = tokio::task::spawn_blocking(move || {
        let _running = running;
        take(Duration::from_secs(seconds), format)
    })
    .await
    .map_err(|e| internal(format!("the profiling task failed: {e}")))??;
    let content_type = match format {
        Format::Svg => "image/svg+xml",
        Format::Pprof => "application/octet-stream",
    };
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

fn internal(message: String) -> ApiError {
    tracing::warn!(error = %message, "CPU profile failed");
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
}

/// Samples for `d`, then renders the report.
fn take(d: Duration, format: Format) -> Result<Vec<u8>, ApiError> {
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(FREQUENCY_HZ)
        // Unwinding through these from a signal handler can deadlock.
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
        .map_err(|e| internal(format!("the profiler did not start: {e}")))?;
    std::thread::sleep(d);
    let report = guard
        .report()
        .build()
        .map_err(|e| internal(format!("no report: {e}")))?;
    drop(guard);
    match format {
        // An idle node gets no SIGPROF (it counts CPU time): no samples,
        // and no flame graph to draw. Say so in an SVG all the same.
        Format::Svg if report.data.is_empty() => Ok(idle_svg(d).into_bytes()),
        Format::Svg => {
            let mut svg = Vec::new();
            let mut options = pprof::flamegraph::Options::default();
            options.title = format!("pcrf: CPU over {} s", d.as_secs());
            report
                .flamegraph_with_options(&mut svg, &mut options)
                .map_err(|e| internal(format!("no flame graph: {e}")))?;
            Ok(svg)
        }
        Format::Pprof => {
            use pprof::protos::Message;
            let raw = report
                .pprof()
                .map_err(|e| internal(format!("no pprof profile: {e}")))?
                .write_to_bytes()
                .map_err(|e| internal(format!("pprof encoding: {e}")))?;
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(&raw)
                .and_then(|_| gz.finish())
                .map_err(|e| internal(format!("gzip: {e}")))
        }
    }
}

/// The SVG for a profile without a single sample.
fn idle_svg(d: Duration) -> String {
    format!(
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"1200\" height=\"60\" xmlns=\"http://www.w3.org/2000/svg\">\
         <text x=\"20\" y=\"35\" font-family=\"Verdana\" font-size=\"14\">\
         pcrf: no CPU samples over {} s (the node was idle)</text></svg>\n",
        d.as_secs()
    )
}

//! Counters of the API's own traffic, appended to `/metrics`: requests by
//! route template, method and status, so an operator sees provisioning
//! errors and auth failures. API traffic is light, so one mutex is enough;
//! label values are bounded (route templates, standard methods, statuses).

use crate::metrics::{Exposition, Kind, MetricsSource};
use axum::http::Method;
use parking_lot::Mutex;
use std::collections::BTreeMap;

/// Requests seen by the API.
#[derive(Default)]
pub struct HttpStats {
    counts: Mutex<BTreeMap<(String, &'static str, u16), u64>>,
}

fn method_label(m: &Method) -> &'static str {
    match *m {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

impl HttpStats {
    /// `route` is the matched template (`/v1/sessions/{id}`), or None when
    /// no route matched.
    pub fn record(&self, route: Option<&str>, method: &Method, status: u16) {
        let key = (
            route.unwrap_or("unmatched").to_string(),
            method_label(method),
            status,
        );
        *self.counts.lock().entry(key).or_insert(0) += 1;
    }
}

impl MetricsSource for HttpStats {
    fn write(&self, out: &mut Exposition) {
        let counts = self.counts.lock().clone();
        let mut f = out.family(
            "pcrf_api_requests_total",
            "HTTP API requests by route template, method and status.",
            Kind::Counter,
        );
        for ((route, method, status), n) in counts {
            let status = status.to_string();
            f.sample(
                &[("route", &route), ("method", method), ("status", &status)],
                n,
            );
        }
    }
}

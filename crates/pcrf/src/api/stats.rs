//! `GET /v1/stats`: the scrape of `/metrics` as JSON, for the console's
//! live dashboard. The numbers are the same rendering of the same
//! registry (the node's families and the API's own), read back into
//! `{family: [{labels, value}]}` so a browser gets JSON instead of having
//! to parse the Prometheus text format; rates, percentiles and Apdex are
//! computed by the client from two successive snapshots.
//!
//! The text read here is only ever our own encoder's output (format
//! 0.0.4: `name{label="value",...} number`), so the reader handles
//! exactly that grammar: label values with `\\`, `\"` and `\n` escapes,
//! and the float spellings Prometheus uses (`+Inf`, `NaN`).

use super::http_stats::HttpStats;
use crate::control::Control;
use crate::metrics::render_source;
use axum::extract::State;
use axum::Extension;
use axum::Json;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use utoipa::ToSchema;

/// One sample of a family.
#[derive(Debug, PartialEq, Serialize, ToSchema)]
pub struct Sample {
    /// Label name to value; `le` for a histogram bucket.
    pub labels: BTreeMap<String, String>,
    /// `null` for NaN; `Infinity` never occurs in a value we write.
    pub value: Option<f64>,
}

/// The scrape as JSON.
#[derive(Debug, Serialize, ToSchema)]
pub struct Stats {
    /// When the scrape was taken, Unix milliseconds (rates divide by the
    /// difference of two of these).
    pub at_ms: i64,
    /// Samples by metric name as the text format spells it (counters end
    /// in `_total`; a histogram gives `_bucket`, `_sum` and `_count`).
    /// The Diameter peers are the `pcrf_peer_*` families, one sample per
    /// peer labelled `peer`: state, counters, last error and DOIC state
    /// (`pcrf_peer_doic_supported` 0/1; for a DOIC peer while an overload
    /// report is sent, `pcrf_peer_doic_reduction_percent`,
    /// `pcrf_peer_doic_validity_seconds`, `pcrf_peer_doic_sequence`).
    pub metrics: BTreeMap<String, Vec<Sample>>,
}

/// Every metric of `/metrics`, as JSON.
#[utoipa::path(get, path = "/v1/stats", operation_id = "stats",
    responses((status = 200, description = "The scrape as JSON", body = Stats)))]
pub async fn get<C: Control>(
    State(ctl): State<Arc<C>>,
    Extension(http): Extension<Arc<HttpStats>>,
) -> Json<Stats> {
    let mut text = ctl.render_metrics();
    text.push_str(&render_source(http));
    Json(Stats {
        at_ms: crate::node::now_ms(),
        metrics: parse(&text),
    })
}

/// Reads the sample lines of a text-format scrape; comments and lines
/// that do not parse are skipped.
pub fn parse(text: &str) -> BTreeMap<String, Vec<Sample>> {
    let mut out: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if let Some((name, sample)) = sample_line(line) {
            out.entry(name).or_default().push(sample);
        }
    }
    out
}

fn sample_line(line: &str) -> Option<(String, Sample)> {
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(body) = rest.strip_prefix('{') {
        let (parsed, after) = label_set(body)?;
        labels = parsed;
        rest = after;
    }
    // The value, then an optional timestamp (we never write one).
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "NaN" => None,
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        v => Some(v.parse::<f64>().ok()?),
    };
    Some((name.to_string(), Sample { labels, value }))
}

/// `name="value",...}` → the labels and what follows the `}`.
fn label_set(mut s: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if let Some(after) = s.strip_prefix('}') {
            return Some((labels, after));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_string();
        s = s[eq + 1..].strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '"' => break i,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                c => value.push(c),
            }
        };
        labels.insert(key, value);
        s = &s[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn reads_samples_labels_and_escapes() {
        let text = "# HELP pcrf_x_total x\n# TYPE pcrf_x_total counter\n\
            pcrf_x_total{command=\"CCR-I\",result_code=\"2001\"} 12\n\
            pcrf_peer_state{peer=\"a\\\"b\\\\c\\nd\",state=\"open\"} 1\n\
            pcrf_d_bucket{command=\"CCR-I\",le=\"+Inf\"} 3\n\
            pcrf_up 0.5\n\
            pcrf_nan NaN\n\
            garbage{ 1\n";
        let m = parse(text);
        let x = &m["pcrf_x_total"][0];
        assert_eq!(x.labels["command"], "CCR-I");
        assert_eq!(x.labels["result_code"], "2001");
        assert_eq!(x.value, Some(12.0));
        assert_eq!(m["pcrf_peer_state"][0].labels["peer"], "a\"b\\c\nd");
        assert_eq!(m["pcrf_d_bucket"][0].labels["le"], "+Inf");
        assert_eq!(m["pcrf_up"][0].value, Some(0.5));
        assert_eq!(m["pcrf_nan"][0].value, None);
        assert!(!m.contains_key("garbage"));
    }

    #[test]
    fn reads_the_real_scrape() {
        let metrics = crate::metrics::Metrics::new();
        metrics.request(
            crate::metrics::Command::CcrInitial,
            2001,
            std::time::Duration::from_millis(2),
        );
        let m = parse(&metrics.render());
        let req = &m["pcrf_requests_total"];
        assert!(req
            .iter()
            .any(|s| s.labels["command"] == "CCR-I" && s.value == Some(1.0)));
        assert!(m["pcrf_request_duration_seconds_bucket"]
            .iter()
            .any(|s| s.labels["le"] == "0.0025" && s.value == Some(1.0)));
    }
}

//! `GET /metrics` must be a scrape Prometheus accepts. This test parses the
//! registry's output with an independent validator of the text exposition
//! format 0.0.4 (written from the format's specification, not from our
//! writer) and checks the families the issue asks for.

use diameter::transport::PeerCountersSnapshot;
use pcrf::metrics::{
    write_peers, Command, CommitStats, Exposition, Histogram, Kind, Metrics, PeerStat, PeerState,
    PolicyStats, SessionStats, NO_ANSWER,
};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// One parsed sample line.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed scrape: family name -> (type, samples).
type Families = BTreeMap<String, (String, Vec<Sample>)>;

fn is_name(s: &str, colon: bool) -> bool {
    let mut it = s.chars();
    match it.next() {
        Some(c) if c.is_ascii_alphabetic() || c == '_' || (colon && c == ':') => {}
        _ => return false,
    }
    it.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
}

fn parse_value(s: &str) -> Result<f64, String> {
    match s {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        _ => s.parse::<f64>().map_err(|_| format!("bad value {s:?}")),
    }
}

/// Parses `{a="x",b="y"}` starting at `s` (after the name); returns labels
/// and the rest of the line.
fn parse_labels(s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    let Some(mut rest) = s.strip_prefix('{') else {
        return Ok((labels, s));
    };
    loop {
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let eq = rest.find('=').ok_or("label without =")?;
        let name = &rest[..eq];
        if !is_name(name, false) {
            return Err(format!("bad label name {name:?}"));
        }
        rest = rest[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                Some((_, '\n')) => return Err("raw newline in label value".into()),
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("label {name} repeated"));
        }
        rest = &rest[end + 1..];
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return Err("expected , or }".into());
        }
    }
}

/// Validates a whole scrape; returns the families.
fn validate(text: &str) -> Result<Families, String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("scrape must end with a newline".into());
    }
    let mut families: Families = BTreeMap::new();
    let mut helps = HashSet::new();
    let mut current: Option<String> = None;
    let mut closed = HashSet::new();
    let mut series = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap_or("");
            if !is_name(name, true) || !helps.insert(name.to_string()) {
                return Err(at("bad or repeated HELP".into()));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let (name, kind) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if parts.next().is_some()
                || !is_name(name, true)
                || !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind)
            {
                return Err(at("bad TYPE".into()));
            }
            if families.contains_key(name) {
                return Err(at("TYPE repeated".into()));
            }
            if let Some(prev) = current.replace(name.to_string()) {
                closed.insert(prev);
            }
            families.insert(name.to_string(), (kind.to_string(), Vec::new()));
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let name_end = line.find(['{', ' ']).ok_or_else(|| at("no value".into()))?;
        let name = &line[..name_end];
        if !is_name(name, true) {
            return Err(at("bad metric name".into()));
        }
        let (labels, rest) = parse_labels(&line[name_end..]).map_err(at)?;
        let rest = rest
            .strip_prefix(' ')
            .ok_or_else(|| at("no space before value".into()))?;
        let mut parts = rest.split(' ');
        let value = parse_value(parts.next().unwrap_or("")).map_err(at)?;
        if let Some(ts) = parts.next() {
            ts.parse::<i64>().map_err(|_| at("bad timestamp".into()))?;
        }
        let family = families
            .keys()
            .filter(|f| {
                name == f.as_str()
                    || ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|s| name.strip_suffix(s) == Some(f.as_str()))
            })
            .max_by_key(|f| f.len())
            .cloned()
            .ok_or_else(|| at("sample before its TYPE".into()))?;
        if closed.contains(&family) || current.as_deref() != Some(family.as_str()) {
            return Err(at("family lines not contiguous".into()));
        }
        let kind = families[&family].0.clone();
        if kind == "histogram" && name == family {
            return Err(at("histogram sample without suffix".into()));
        }
        if kind != "histogram" && name != family {
            return Err(at("suffix on a non-histogram".into()));
        }
        if kind == "counter" && (value.is_nan() || value < 0.0) {
            return Err(at("negative or NaN counter".into()));
        }
        let key = format!("{name}{labels:?}");
        if !series.insert(key) {
            return Err(at("duplicate series".into()));
        }
        if let Some(f) = families.get_mut(&family) {
            f.1.push(Sample {
                name: name.to_string(),
                labels,
                value,
            });
        }
    }
    for (family, (kind, samples)) in &families {
        if kind == "histogram" {
            check_histogram(family, samples)?;
        }
    }
    Ok(families)
}

/// Buckets cumulative with increasing `le`, `+Inf` present and equal to
/// `_count`, `_sum` present, per label set.
fn check_histogram(family: &str, samples: &[Sample]) -> Result<(), String> {
    let mut groups: BTreeMap<String, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        let mut key = s.labels.clone();
        key.remove("le");
        groups.entry(format!("{key:?}")).or_default().push(s);
    }
    for (key, g) in groups {
        let buckets: Vec<(f64, f64)> = g
            .iter()
            .filter(|s| s.name.ends_with("_bucket"))
            .map(|s| {
                let le = s
                    .labels
                    .get("le")
                    .ok_or(format!("{family}{key}: bucket without le"))?;
                Ok((parse_value(le)?, s.value))
            })
            .collect::<Result<_, String>>()?;
        if !buckets
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1)
        {
            return Err(format!("{family}{key}: buckets not increasing/cumulative"));
        }
        let last = buckets.last().ok_or(format!("{family}{key}: no buckets"))?;
        if last.0 != f64::INFINITY {
            return Err(format!("{family}{key}: no +Inf bucket"));
        }
        let count = g.iter().find(|s| s.name.ends_with("_count"));
        if count.map(|c| c.value) != Some(last.1) {
            return Err(format!("{family}{key}: _count missing or != +Inf bucket"));
        }
        if !g.iter().any(|s| s.name.ends_with("_sum")) {
            return Err(format!("{family}{key}: no _sum"));
        }
    }
    Ok(())
}

fn value(f: &Families, family: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    f.get(family)?
        .1
        .iter()
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

#[test]
fn validator_rejects_broken_scrapes() {
    let bad = [
        "x 1",                                          // no newline at end
        "# TYPE x counter\nx{a=\"b} 1\n",               // unterminated
        "# TYPE x counter\nx -1\n",                     // negative counter
        "# TYPE x gauge\n# TYPE y gauge\nx 1\n",        // not contiguous
        "y 1\n",                                        // no TYPE
        "# TYPE x gauge\nx{a=\"1\"} 1\nx{a=\"1\"} 2\n", // duplicate
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n", // no +Inf
        "# TYPE x gauge\nx{a=\"\\t\"} 1\n",                               // bad escape
        "# TYPE 1x gauge\n",                                              // bad name
    ];
    for b in bad {
        assert!(validate(b).is_err(), "accepted {b:?}");
    }
    assert!(validate("# HELP x y\n# TYPE x gauge\nx{a=\"q\\\"\\n\"} NaN\n").is_ok());
}

#[test]
fn full_scrape_is_valid_and_complete() {
    let m = Metrics::new();
    m.request(Command::CcrInitial, 2001, Duration::from_micros(700));
    m.request(Command::CcrInitial, 5030, Duration::from_millis(3));
    m.request(Command::CcrUpdate, 2001, Duration::from_micros(90));
    m.request(Command::Rar, NO_ANSWER, Duration::from_secs(10));

    m.register(Arc::new(|out: &mut Exposition| {
        SessionStats {
            open_sessions: 3,
            closed_sessions: 1,
            cached_subscribers: 7,
        }
        .write(out)
    }));
    m.register(Arc::new(|out: &mut Exposition| {
        write_peers(
            out,
            &[
                PeerStat {
                    host: "pgw1.\"lab\"".into(),
                    state: PeerState::Open,
                    counters: PeerCountersSnapshot {
                        messages_in: 10,
                        messages_out: 12,
                        writes: 4,
                        ..Default::default()
                    },
                    last_error: Some(diameter::transport::LastError {
                        at_ms: 1_700_000_000_500,
                        text: "command 272 answered 3004: too \"busy\"".into(),
                    }),
                    doic_supported: true,
                },
                PeerStat {
                    host: "pgw2".into(),
                    state: PeerState::Suspect,
                    counters: PeerCountersSnapshot::default(),
                    last_error: None,
                    doic_supported: false,
                },
            ],
            Some(diameter::doic::ReportSent {
                sequence: 1_700_000_000_123,
                reduction_percentage: 30,
                validity: Duration::from_millis(9_500),
            }),
        )
    }));
    m.register(Arc::new(|out: &mut Exposition| {
        PolicyStats {
            runs: 10,
            skips: 90,
            skips_within_bounds: 40,
            errors: 1,
            reloads_ok: 2,
            reloads_failed: 1,
            script_version: 3,
            log_dropped: 0,
        }
        .write(out)
    }));
    let batches = Histogram::batch_sizes();
    for n in [1, 3, 40, 5000] {
        batches.observe(n);
    }
    // Apply times in microseconds, rendered in seconds.
    let apply_times = Histogram::new(&[100, 1_000], 6);
    for micros in [50, 2_500] {
        apply_times.observe(micros);
    }
    let commits = CommitStats {
        batches: 6,
        commits: 4,
        skipped: 2,
        rows: 5044,
        coalesced: 3,
        errors: 0,
        purged: 0,
        queued: 1,
        apply_micros: 1_500_250,
        batch_sizes: batches.snapshot(),
        apply_times: apply_times.snapshot(),
    };
    m.register(Arc::new(move |out: &mut Exposition| commits.write(out)));
    m.register(Arc::new(|out: &mut Exposition| {
        out.family("pcrf_custom", "Odd \\ help\nline", Kind::Gauge)
            .sample(&[("x", "back\\slash")], -1.5f64)
            .sample(&[("x", "inf")], f64::INFINITY);
    }));

    let text = m.render();
    let f = validate(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));

    let req = |cmd, rc| {
        value(
            &f,
            "pcrf_requests_total",
            "pcrf_requests_total",
            &[("command", cmd), ("result_code", rc)],
        )
    };
    assert_eq!(req("CCR-I", "2001"), Some(1.0));
    assert_eq!(req("CCR-I", "5030"), Some(1.0));
    assert_eq!(req("RAR", "none"), Some(1.0));
    assert_eq!(req("CCR-T", "2001"), None);
    let h = "pcrf_request_duration_seconds";
    assert_eq!(
        value(
            &f,
            h,
            "pcrf_request_duration_seconds_bucket",
            &[("command", "CCR-I"), ("le", "0.001")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &f,
            h,
            "pcrf_request_duration_seconds_count",
            &[("command", "CCR-I")]
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &f,
            h,
            "pcrf_request_duration_seconds_sum",
            &[("command", "CCR-I")]
        ),
        Some(0.0037)
    );
    assert_eq!(
        value(
            &f,
            h,
            "pcrf_request_duration_seconds_bucket",
            &[("command", "RAR"), ("le", "5")]
        ),
        Some(0.0)
    );
    assert_eq!(
        value(&f, "pcrf_sessions", "pcrf_sessions", &[("state", "open")]),
        Some(3.0)
    );
    assert_eq!(
        value(
            &f,
            "pcrf_subscribers_cached",
            "pcrf_subscribers_cached",
            &[]
        ),
        Some(7.0)
    );
    assert_eq!(
        value(&f, "pcrf_peers", "pcrf_peers", &[("state", "open")]),
        Some(1.0)
    );
    assert_eq!(
        value(&f, "pcrf_peers", "pcrf_peers", &[("state", "closed")]),
        Some(0.0)
    );
    assert_eq!(
        value(
            &f,
            "pcrf_peer_state",
            "pcrf_peer_state",
            &[("peer", "pgw1.\"lab\""), ("state", "open")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &f,
            "pcrf_peer_last_error_time_seconds",
            "pcrf_peer_last_error_time_seconds",
            &[
                ("peer", "pgw1.\"lab\""),
                ("error", "command 272 answered 3004: too \"busy\"")
            ]
        ),
        Some(1_700_000_000.5)
    );
    for (peer, supported) in [("pgw1.\"lab\"", 1.0), ("pgw2", 0.0)] {
        let doic = "pcrf_peer_doic_supported";
        assert_eq!(value(&f, doic, doic, &[("peer", peer)]), Some(supported));
    }
    // The report goes only to the peer that speaks DOIC.
    let reduction = "pcrf_peer_doic_reduction_percent";
    assert_eq!(
        value(&f, reduction, reduction, &[("peer", "pgw1.\"lab\"")]),
        Some(30.0)
    );
    assert_eq!(value(&f, reduction, reduction, &[("peer", "pgw2")]), None);
    let validity = "pcrf_peer_doic_validity_seconds";
    assert_eq!(
        value(&f, validity, validity, &[("peer", "pgw1.\"lab\"")]),
        Some(9.5)
    );
    let sequence = "pcrf_peer_doic_sequence";
    assert_eq!(
        value(&f, sequence, sequence, &[("peer", "pgw1.\"lab\"")]),
        Some(1_700_000_000_123.0)
    );
    assert_eq!(
        value(
            &f,
            "pcrf_policy_skips_total",
            "pcrf_policy_skips_total",
            &[]
        ),
        Some(90.0)
    );
    assert_eq!(
        value(
            &f,
            "pcrf_policy_skips_within_bounds_total",
            "pcrf_policy_skips_within_bounds_total",
            &[]
        ),
        Some(40.0)
    );
    assert_eq!(
        value(
            &f,
            "pcrf_policy_reloads_total",
            "pcrf_policy_reloads_total",
            &[("outcome", "failed")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &f,
            "pcrf_policy_script_info",
            "pcrf_policy_script_info",
            &[("version", "0000000000000003")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &f,
            "pcrf_store_commits_total",
            "pcrf_store_commits_total",
            &[]
        ),
        Some(4.0)
    );
    let b = "pcrf_store_batch_size";
    assert_eq!(
        value(&f, b, "pcrf_store_batch_size_bucket", &[("le", "4")]),
        Some(2.0)
    );
    assert_eq!(
        value(&f, b, "pcrf_store_batch_size_bucket", &[("le", "+Inf")]),
        Some(4.0)
    );
    assert_eq!(value(&f, b, "pcrf_store_batch_size_sum", &[]), Some(5044.0));
    let a = "pcrf_store_apply_duration_seconds";
    let bucket = "pcrf_store_apply_duration_seconds_bucket";
    assert_eq!(value(&f, a, bucket, &[("le", "0.0001")]), Some(1.0));
    assert_eq!(value(&f, a, bucket, &[("le", "0.001")]), Some(1.0));
    assert_eq!(value(&f, a, bucket, &[("le", "+Inf")]), Some(2.0));
    assert_eq!(
        value(&f, a, "pcrf_store_apply_duration_seconds_sum", &[]),
        Some(0.00255)
    );
    assert_eq!(
        value(&f, "pcrf_custom", "pcrf_custom", &[("x", "back\\slash")]),
        Some(-1.5)
    );
    for family in [
        "pcrf_build_info",
        "pcrf_start_time_seconds",
        "pcrf_store_apply_seconds_total",
        "pcrf_peer_bytes_total",
        "pcrf_peer_in_flight",
        "pcrf_policy_runs_total",
        "pcrf_policy_errors_total",
        "pcrf_policy_script_info",
    ] {
        assert!(f.contains_key(family), "{family} missing");
    }
}

#[test]
fn empty_registry_is_valid() {
    let text = Metrics::new().render();
    let f = validate(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(f["pcrf_requests_total"].1.len(), 0);
}

#[test]
fn a_repeated_or_misnamed_family_is_dropped_not_corrupting() {
    let m = Metrics::new();
    m.register(Arc::new(|out: &mut Exposition| {
        out.gauge("pcrf_thing", "first", 1u64);
    }));
    m.register(Arc::new(|out: &mut Exposition| {
        out.gauge("pcrf_thing", "duplicate-help", 2u64);
        out.gauge("pcrf-bad name", "bad", 3u64);
        out.gauge("pcrf_after", "still written", 4u64);
    }));
    let text = m.render();
    let f = validate(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(value(&f, "pcrf_thing", "pcrf_thing", &[]), Some(1.0));
    assert_eq!(value(&f, "pcrf_after", "pcrf_after", &[]), Some(4.0));
    assert!(!text.contains("bad name") && !text.contains("duplicate-help"));
}

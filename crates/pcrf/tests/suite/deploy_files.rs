//! The monitoring files shipped in deploy/ must work with the server as it
//! is: the alert rules pass `promtool check rules` and their unit tests
//! (`promtool test rules`), every alert has a test that fires it and one
//! that does not, the Grafana dashboard is well formed, and every metric
//! name that a rule, a rule test's series or a dashboard query reads is in
//! a real scrape of `pcrf serve`. Renaming a metric without updating the
//! files fails here.

use crate::support;

use crate::tls_certs;

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use support::*;
use yaml_rust2::{Yaml, YamlLoader};

const IMSI: &str = "001010000000042";

fn rules_path() -> PathBuf {
    repo_root().join("deploy/prometheus/pcrf-alerts.yml")
}

fn rule_tests_path() -> PathBuf {
    repo_root().join("deploy/prometheus/pcrf-alerts.test.yml")
}

fn dashboard_path() -> PathBuf {
    repo_root().join("deploy/grafana/pcrf-dashboard.json")
}

fn yaml(path: &PathBuf) -> Yaml {
    let text = std::fs::read_to_string(path).expect("read YAML");
    let mut docs = YamlLoader::load_from_str(&text).expect("valid YAML");
    assert_eq!(docs.len(), 1, "{}: one document", path.display());
    docs.remove(0)
}

fn dashboard() -> serde_json::Value {
    let text = std::fs::read_to_string(dashboard_path()).expect("read dashboard");
    serde_json::from_str(&text).expect("dashboard is JSON")
}

/// Runs promtool (installed by scripts/install-test-deps.sh).
fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run promtool ({e}); scripts/install-test-deps.sh installs it")
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

// ---------------------------------------------------------------------------
// PromQL: the metric names an expression reads

/// Keywords that take a parenthesised list of label names.
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
/// Other words of PromQL that are not metric names: operators, modifiers,
/// literals, and the aggregations (followed by `by (...)` rather than `(`).
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "atan2",
    "inf",
    "nan",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// The end of the string literal opening at `i` (the index after it).
fn skip_string(s: &[char], i: usize) -> Result<usize, String> {
    let quote = s[i];
    let mut j = i + 1;
    while j < s.len() {
        match s[j] {
            '\\' if quote != '`' => j += 2,
            c if c == quote => return Ok(j + 1),
            _ => j += 1,
        }
    }
    Err("unterminated string".into())
}

/// The index after the `close` that ends the group opening at `i`,
/// strings skipped (matchers and label lists do not nest).
fn skip_group(s: &[char], i: usize, close: char) -> Result<usize, String> {
    let mut j = i + 1;
    while j < s.len() {
        match s[j] {
            '"' | '\'' | '`' => j = skip_string(s, j)?,
            c if c == close => return Ok(j + 1),
            _ => j += 1,
        }
    }
    Err(format!("unclosed {:?}", s[i]))
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The string value of `__name__="x"` inside a matcher list `{...}`.
fn name_matcher(inner: &str) -> Option<String> {
    let rest = inner.split("__name__").nth(1)?.trim_start();
    let rest = rest.strip_prefix('=')?.trim_start();
    let quote = rest.chars().next()?;
    let body = &rest[1..];
    Some(body[..body.find(quote)?].to_string())
}

/// Every metric name `expr` selects. Not a PromQL parser: a tokenizer
/// that skips strings, label matchers `{...}`, ranges `[...]`, numbers
/// and durations, Grafana variables (`$x`, `${x}`), function names (an
/// identifier before `(`), keywords, and the label lists after `by`,
/// `without`, `on`, `ignoring`, `group_left` and `group_right`.
fn metric_names(expr: &str) -> Result<BTreeSet<String>, String> {
    let s: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&s, i)?;
        } else if c == '{' {
            let end = skip_group(&s, i, '}')?;
            let inner: String = s[i + 1..end - 1].iter().collect();
            names.extend(name_matcher(&inner));
            i = end;
        } else if c == '[' {
            i = skip_group(&s, i, ']')?;
        } else if c == '#' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '$' {
            i += 1;
            if i < s.len() && s[i] == '{' {
                i = skip_group(&s, i, '}')?;
            } else {
                while i < s.len() && is_ident(s[i]) {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() || (c == '.' && s.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            // A number or a duration: 0.99, 1e-3, 0x1f, 5m, 1h30m.
            i += 1;
            while i < s.len()
                && (s[i].is_ascii_alphanumeric()
                    || s[i] == '.'
                    || s[i] == '_'
                    || ((s[i] == '+' || s[i] == '-') && matches!(s[i - 1], 'e' | 'E')))
            {
                i += 1;
            }
        } else if is_ident_start(c) {
            let start = i;
            while i < s.len() && is_ident(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            let lower = word.to_ascii_lowercase();
            let mut next = i;
            while next < s.len() && s[next].is_whitespace() {
                next += 1;
            }
            let paren = s.get(next) == Some(&'(');
            if GROUPING.contains(&lower.as_str()) {
                if paren {
                    i = skip_group(&s, next, ')')?;
                }
            } else if KEYWORDS.contains(&lower.as_str()) || paren {
                // A keyword, or a function or aggregation name.
            } else {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    Ok(names)
}

/// The metric names a Grafana variable query reads: `label_values(m, l)`
/// reads `m` only; any other query is PromQL.
fn variable_query_names(query: &str) -> Result<BTreeSet<String>, String> {
    let q = query.trim();
    match q
        .strip_prefix("label_values(")
        .and_then(|r| r.strip_suffix(')'))
    {
        Some(args) => match args.rsplit_once(',') {
            Some((selector, _label)) => metric_names(selector),
            None => Ok(BTreeSet::new()),
        },
        None => metric_names(q),
    }
}

#[test]
fn the_tokenizer_finds_metric_names_and_nothing_else() {
    let names = |e: &str| -> Vec<String> {
        metric_names(e)
            .unwrap_or_else(|err| panic!("{e}: {err}"))
            .into_iter()
            .collect()
    };
    assert_eq!(names("rate(x_total[5m])"), ["x_total"]);
    assert_eq!(names("sum by (a, b) (rate(x_total[5m]))"), ["x_total"]);
    assert_eq!(names("sum(rate(x_total[5m:1m])) without (le)"), ["x_total"]);
    assert_eq!(
        names("topk by (a) (3, x) or max without (b) (y)"),
        ["x", "y"]
    );
    assert_eq!(
        names("histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m])))"),
        ["x_bucket"]
    );
    assert_eq!(
        names(r#"a{state!="open", peer=~"p(g|w)[0-9]+ \"}"} == 1 and on (peer) b offset 1h"#),
        ["a", "b"]
    );
    assert_eq!(
        names(
            r#"label_replace(c, "application", "gx", "command", "CCR-.|RAR") / ignoring (x) group_left (y) d"#
        ),
        ["c", "d"]
    );
    assert_eq!(names("e - time() < 14 * 86400 and 1e-3 > bool 0x1f"), ["e"]);
    assert_eq!(names(r#"{__name__="f", job="x"}"#), ["f"]);
    assert_eq!(
        names(r#"sum(rate(g{instance=~"$instance"}[$__rate_interval])) / ${scale}"#),
        ["g"]
    );
    assert_eq!(names("rec:rate5m{application=\"gx\"}"), ["rec:rate5m"]);
    assert!(metric_names("rate(x[5m)").is_err());
    assert!(metric_names("x{a=\"b}").is_err());
    assert_eq!(
        variable_query_names("label_values(pcrf_build_info, instance)")
            .expect("query")
            .into_iter()
            .collect::<Vec<_>>(),
        ["pcrf_build_info"]
    );
}

// ---------------------------------------------------------------------------
// What the files ask for

/// A PromQL expression (or a Grafana variable query) and where it came from.
struct Query {
    at: String,
    expr: String,
    /// A Grafana variable query (`label_values(...)`), not PromQL.
    variable: bool,
}

/// Every expression of the rules file, and the recording rules' names.
fn rule_queries() -> (Vec<Query>, BTreeSet<String>) {
    let doc = yaml(&rules_path());
    let mut queries = Vec::new();
    let mut recorded = BTreeSet::new();
    let groups = doc["groups"].as_vec().expect("groups");
    for g in groups {
        for r in g["rules"].as_vec().expect("rules") {
            let name = r["alert"]
                .as_str()
                .or(r["record"].as_str())
                .expect("alert or record");
            if let Some(rec) = r["record"].as_str() {
                recorded.insert(rec.to_string());
            }
            queries.push(Query {
                at: format!("rule {name}"),
                expr: r["expr"].as_str().expect("expr").to_string(),
                variable: false,
            });
        }
    }
    (queries, recorded)
}

/// The input series and expressions of the rule tests.
fn rule_test_queries() -> Vec<Query> {
    let doc = yaml(&rule_tests_path());
    let mut queries = Vec::new();
    for t in doc["tests"].as_vec().expect("tests") {
        let name = t["name"].as_str().unwrap_or("?");
        for s in t["input_series"].as_vec().into_iter().flatten() {
            queries.push(Query {
                at: format!("test {name:?} series"),
                expr: s["series"].as_str().expect("series").to_string(),
                variable: false,
            });
        }
        for e in t["promql_expr_test"].as_vec().into_iter().flatten() {
            queries.push(Query {
                at: format!("test {name:?} expression"),
                expr: e["expr"].as_str().expect("expr").to_string(),
                variable: false,
            });
        }
    }
    queries
}

/// Every target expression and variable query of the dashboard.
fn dashboard_queries() -> Vec<Query> {
    fn walk(v: &serde_json::Value, title: &str, out: &mut Vec<Query>) {
        match v {
            serde_json::Value::Object(m) => {
                let title = m.get("title").and_then(|t| t.as_str()).unwrap_or(title);
                if let Some(targets) = m.get("targets").and_then(|t| t.as_array()) {
                    for t in targets {
                        out.push(Query {
                            at: format!("dashboard panel {title:?}"),
                            expr: t["expr"].as_str().expect("target expr").to_string(),
                            variable: false,
                        });
                    }
                }
                for (k, child) in m {
                    if k != "targets" && k != "templating" {
                        walk(child, title, out);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|c| walk(c, title, out)),
            _ => {}
        }
    }
    let d = dashboard();
    let mut out = Vec::new();
    walk(&d["panels"], "", &mut out);
    for var in d["templating"]["list"].as_array().expect("templating") {
        if var["type"] == "query" {
            let q = var["query"]["query"]
                .as_str()
                .or(var["query"].as_str())
                .expect("variable query");
            out.push(Query {
                at: format!("dashboard variable {}", var["name"]),
                expr: q.to_string(),
                variable: true,
            });
        }
    }
    out
}

/// The names each query reads that `exposed` lacks, as messages.
fn missing(queries: &[Query], exposed: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    for q in queries {
        let names = if q.variable {
            variable_query_names(&q.expr)
        } else {
            metric_names(&q.expr)
        };
        match names {
            Ok(names) if names.is_empty() => {
                problems.push(format!("{}: no metric in {:?}", q.at, q.expr))
            }
            Ok(names) => {
                for n in names.difference(exposed) {
                    problems.push(format!("{}: {n} is not in the scrape", q.at));
                }
            }
            Err(e) => problems.push(format!("{}: {e} in {:?}", q.at, q.expr)),
        }
    }
    problems
}

/// The names a scrape lets PromQL select: each sample's name, and for
/// the families without samples the names their TYPE implies (counters
/// `_total`, histograms `_bucket`, `_sum`, `_count`).
fn exposed_names(scrape: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split_whitespace();
            let (Some(name), Some(kind)) = (it.next(), it.next()) else {
                continue;
            };
            match kind {
                "counter" if name.ends_with("_total") => {
                    names.insert(name.to_string());
                }
                "counter" => {
                    names.insert(format!("{name}_total"));
                }
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                "summary" => {
                    for suffix in ["", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                _ => {
                    names.insert(name.to_string());
                }
            }
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

// ---------------------------------------------------------------------------
// The tests

#[test]
fn the_rules_pass_promtool_check_and_their_unit_tests() {
    let rules = rules_path();
    let (ok, out) = promtool(&["check", "rules", rules.to_str().expect("path")]);
    assert!(ok, "promtool check rules failed:\n{out}");
    let tests = rule_tests_path();
    let (ok, out) = promtool(&["test", "rules", tests.to_str().expect("path")]);
    assert!(ok, "promtool test rules failed:\n{out}");
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn every_alert_is_documented_and_tested_firing_and_not_firing() {
    let doc = yaml(&rules_path());
    let mut alerts = Vec::new();
    for g in doc["groups"].as_vec().expect("groups") {
        for r in g["rules"].as_vec().expect("rules") {
            let Some(name) = r["alert"].as_str() else {
                continue;
            };
            let severity = r["labels"]["severity"].as_str();
            assert!(
                matches!(severity, Some("critical" | "warning")),
                "{name}: severity label critical or warning, got {severity:?}"
            );
            for a in ["summary", "description"] {
                let text = r["annotations"][a].as_str().unwrap_or("");
                assert!(text.len() > 20, "{name}: annotation {a} missing or terse");
            }
            alerts.push(name.to_string());
        }
    }
    assert!(alerts.len() >= 7, "alerts: {alerts:?}");
    let tests = yaml(&rule_tests_path());
    let mut fired = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for t in tests["tests"].as_vec().expect("tests") {
        for a in t["alert_rule_test"].as_vec().into_iter().flatten() {
            let name = a["alertname"].as_str().expect("alertname").to_string();
            match a["exp_alerts"].as_vec() {
                Some(v) if !v.is_empty() => fired.insert(name),
                _ => silent.insert(name),
            };
        }
    }
    for a in &alerts {
        assert!(fired.contains(a), "{a}: no test where it fires");
        assert!(silent.contains(a), "{a}: no test where it stays silent");
    }
}

#[test]
fn the_dashboard_takes_its_data_source_from_a_variable() {
    let d = dashboard();
    let vars = d["templating"]["list"].as_array().expect("templating");
    assert!(
        vars.iter().any(|v| v["type"] == "datasource"
            && v["name"] == "datasource"
            && v["query"] == "prometheus"),
        "a Prometheus data source variable named datasource"
    );
    let mut ids = BTreeSet::new();
    let mut panels_with_targets = 0;
    for p in d["panels"].as_array().expect("panels") {
        let id = p["id"].as_u64().expect("panel id");
        assert!(ids.insert(id), "panel id {id} twice");
        if p["type"] == "row" {
            continue;
        }
        let title = p["title"].as_str().expect("title");
        assert_eq!(p["datasource"]["uid"], "${datasource}", "panel {title:?}");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title:?} has no query");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "panel {title:?}");
            let expr = t["expr"].as_str().expect("expr");
            if expr.contains("pcrf_") {
                assert!(
                    expr.contains(r#"instance=~"$instance""#),
                    "panel {title:?}: {expr} ignores the instance variable"
                );
            }
        }
        panels_with_targets += 1;
    }
    assert!(panels_with_targets >= 10);
}

/// Starts the server with every optional part that adds families (Sy with
/// an OCS, Diameter over TLS), answers a Gx session so the request
/// families have samples, scrapes it, and checks every name the files
/// read against the scrape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_rules_and_dashboard_read_is_in_a_scrape() {
    let ca = tls_certs::Ca::new("operator CA");
    let dir = scratch_dir("deploy-files-certs");
    let leaf = ca.leaf(&["pcrf.test.local"]);
    let (cert, key, ca_path) = (
        dir.join("pcrf.pem"),
        dir.join("pcrf.key"),
        dir.join("ca.pem"),
    );
    std::fs::write(&cert, &leaf.cert).expect("write cert");
    std::fs::write(&key, &leaf.key).expect("write key");
    std::fs::write(&ca_path, &ca.pem).expect("write ca");
    let free = || {
        TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
    };
    // Nothing listens for the OCS: it stays down, its families are there.
    let (tls_addr, ocs_addr) = (free(), free());
    let p = Pcrf::start(&format!(
        r#"
[diameter.tls]
listen = "{tls_addr}"
certificate = "{cert}"
private_key = "{key}"
ca = "{ca}"

[sy]
timeout_ms = 500
ocs = [ {{ origin_host = "ocs.test.local", address = "{ocs_addr}" }} ]
"#,
        cert = cert.display(),
        key = key.display(),
        ca = ca_path.display(),
    ));
    p.provision(IMSI, r#"{"msisdn":"491700000042","plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;42;1";
    assert_eq!(result_of(&pcef.ccr_i(sid, IMSI).await), 2001);
    assert_eq!(result_of(&pcef.ccr_t(sid, 1).await), 2001);
    let scrape = p.metrics();
    pcef.close().await;

    let exposed = exposed_names(&scrape);
    assert!(
        exposed.contains("pcrf_requests_total")
            && exposed.contains("pcrf_request_duration_seconds_bucket")
            && exposed.contains("pcrf_sy_ocs_up"),
        "{scrape}"
    );
    let (rules, recorded) = rule_queries();
    let mut known = exposed.clone();
    known.extend(recorded);
    let mut queries = rules;
    queries.extend(rule_test_queries());
    queries.extend(dashboard_queries());
    let problems = missing(&queries, &known);
    assert!(
        problems.is_empty(),
        "metric names the deploy files read but the server does not expose:\n{}\n\nscrape:\n{scrape}",
        problems.join("\n")
    );

    // The check itself catches a renamed metric.
    let renamed = [Query {
        at: "renamed".into(),
        expr: "increase(pcrf_store_error_total[5m]) > 0".into(),
        variable: false,
    }];
    assert_eq!(
        missing(&renamed, &known),
        ["renamed: pcrf_store_error_total is not in the scrape"]
    );

    // The certificate gauge carries the served certificate's notAfter
    // (rcgen's default, 4096-01-01).
    let not_after = jiff::civil::date(4096, 1, 1)
        .to_zoned(jiff::tz::TimeZone::UTC)
        .expect("date")
        .timestamp()
        .as_second();
    assert!(
        scrape.contains(&format!(
            "pcrf_tls_certificate_expiry_timestamp_seconds{{listener=\"diameter\"}} {not_after}\n"
        )),
        "{scrape}"
    );
    assert!(
        !scrape.contains("listener=\"api\""),
        "the API serves plain HTTP here"
    );
}

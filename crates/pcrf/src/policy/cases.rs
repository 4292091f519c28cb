//! `pcrf policy test POLICY CASES.toml`: runs a policy offline against test
//! cases and reports pass/fail per case with a diff of the fields that
//! differ. Operators run it before deploying a script.
//!
//! Case file format (TOML):
//! ```toml
//! [defaults.input.subscriber]   # merged under every case's input (optional)
//! known = true
//! plan = "basic"
//!
//! [[case]]
//! name = "night boost"
//! input.time = { hour = 3, minute = 0, weekday = 2, date = "2026-01-06" }
//! expect.apn_ambr = { ul = 5000000, dl = 50000000 }
//! expect_absent = ["reject"]
//! ```
//! `input` is a partial PolicyInput (everything else defaulted); `expect` a
//! partial Decision: only the fields given are compared, tables field by
//! field, lists element by element with the same length.
//!
//! `[[media_case]]` tests the Rx hook `authorize_media` the same way:
//! `input` is a partial MediaInput (`af`, `media`; `session` and
//! `subscriber` default to those of `[defaults.input]`), `expect` a partial
//! `{ rules = [...], reject = "..." }`.

use super::decision::Decision;
use super::engine::{EngineConfig, PolicyEngine};
use super::error::PolicyError;
use super::input::PolicyInput;
use super::media::MediaInput;
use super::sandbox::Limits;
use serde_json::Value as Json;
use std::fmt;
use std::path::{Path, PathBuf};

/// One field whose value differs from the expectation.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldDiff {
    /// Dotted path, e.g. `apn_ambr.dl` or `definitions[0].qos.qci`.
    pub field: String,
    pub expected: Json,
    /// `null` when the decision has no such field.
    pub actual: Json,
}

/// The result of one case.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseResult {
    pub name: String,
    pub diffs: Vec<FieldDiff>,
    /// The script failed on this input (error text with traceback).
    pub error: Option<String>,
}

impl CaseResult {
    pub fn passed(&self) -> bool {
        self.error.is_none() && self.diffs.is_empty()
    }
}

/// The result of a whole case file.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub policy: PathBuf,
    pub script_version: u64,
    pub cases: Vec<CaseResult>,
}

impl Report {
    pub fn failed(&self) -> usize {
        self.cases.iter().filter(|c| !c.passed()).count()
    }

    /// True when every case passed (the CLI exits 0).
    pub fn passed(&self) -> bool {
        self.failed() == 0
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "policy {} (version {:016x})",
            self.policy.display(),
            self.script_version
        )?;
        for case in &self.cases {
            let verdict = if case.passed() { "PASS" } else { "FAIL" };
            writeln!(f, "{verdict} {}", case.name)?;
            if let Some(e) = &case.error {
                for line in e.lines() {
                    writeln!(f, "    {line}")?;
                }
            }
            for d in &case.diffs {
                writeln!(f, "    {}:", d.field)?;
                writeln!(f, "      expected {}", d.expected)?;
                writeln!(f, "      actual   {}", d.actual)?;
            }
        }
        let total = self.cases.len();
        let failed = self.failed();
        write!(
            f,
            "{} passed, {failed} failed, {total} total",
            total - failed
        )
    }
}

/// What a case runs: `decide` or the Rx media hook.
enum CaseInput {
    Decide(Box<PolicyInput>),
    Media(Box<MediaInput>),
}

/// A parsed case.
struct Case {
    name: String,
    input: CaseInput,
    expect: Json,
    absent: Vec<String>,
}

/// Runs every case of `cases` against the policy at `policy`. Errors only
/// when the policy does not load or the case file is malformed; failing
/// cases are in the report.
pub fn run(policy: &Path, cases: &Path) -> Result<Report, PolicyError> {
    let engine = PolicyEngine::load(EngineConfig {
        path: policy.to_path_buf(),
        limits: Limits::default(),
        fallback: Decision::default(),
    })?;
    run_on(&engine, cases)
}

/// The case file next to a policy: `NAME.cases.toml` beside `NAME.lua`.
pub fn file_of(policy: &Path) -> PathBuf {
    let stem = policy
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    policy.with_file_name(format!("{stem}.cases.toml"))
}

/// Runs every case of `cases` against a loaded engine (the running
/// script, or a draft in the console).
pub fn run_on(engine: &PolicyEngine, cases: &Path) -> Result<Report, PolicyError> {
    let policy = engine.path();
    let parsed = parse(cases)?;
    let results = parsed
        .into_iter()
        .map(|case| match evaluate(engine, &case.input) {
            Ok(decision) => CaseResult {
                diffs: compare(&case.expect, &decision, &case.absent),
                name: case.name,
                error: None,
            },
            Err(e) => CaseResult {
                name: case.name,
                diffs: Vec::new(),
                error: Some(e.to_string()),
            },
        })
        .collect();
    Ok(Report {
        policy: policy.to_path_buf(),
        script_version: engine.version(),
        cases: results,
    })
}

/// The case's output as JSON, to compare with its expectation.
fn evaluate(engine: &PolicyEngine, input: &CaseInput) -> Result<Json, PolicyError> {
    let json = |v: Result<Json, serde_json::Error>| v.unwrap_or(Json::Null);
    Ok(match input {
        CaseInput::Decide(i) => {
            // The notifications the decision asked for appear as `notify`.
            let (decision, notes) = engine.evaluate_with_notifications(i)?;
            let mut out = json(serde_json::to_value(decision));
            if let (Json::Object(m), false) = (&mut out, notes.is_empty()) {
                let notes = notes
                    .into_iter()
                    .map(|n| serde_json::json!({ "name": n.name, "payload": n.payload }))
                    .collect();
                m.insert("notify".into(), Json::Array(notes));
            }
            out
        }
        CaseInput::Media(i) => json(serde_json::to_value(engine.authorize_media(i)?)),
    })
}

fn parse(path: &Path) -> Result<Vec<Case>, PolicyError> {
    let bad = |message: String| PolicyError::Cases {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let mut doc: toml::Table = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let defaults = match doc.remove("defaults") {
        None => toml::Table::new(),
        Some(toml::Value::Table(mut t)) => {
            let input = match t.remove("input") {
                None => toml::Table::new(),
                Some(toml::Value::Table(i)) => i,
                Some(_) => return Err(bad("defaults.input must be a table".into())),
            };
            if let Some(k) = t.keys().next() {
                return Err(bad(format!(
                    "unknown key defaults.{k} (only defaults.input)"
                )));
            }
            input
        }
        Some(_) => return Err(bad("defaults must be a table".into())),
    };
    let mut list = Vec::new();
    for kind in ["case", "media_case"] {
        match doc.remove(kind) {
            Some(toml::Value::Array(a)) => list.extend(a.into_iter().map(|c| (kind, c))),
            Some(_) => {
                return Err(bad(format!(
                    "{kind} must be an array of tables ([[{kind}]])"
                )))
            }
            None => {}
        }
    }
    if list.is_empty() {
        return Err(bad("no [[case]] or [[media_case]] in the file".into()));
    }
    if let Some(k) = doc.keys().next() {
        return Err(bad(format!(
            "unknown top-level key {k:?} (expected defaults, case, media_case)"
        )));
    }
    let mut cases = Vec::with_capacity(list.len());
    for (i, (kind, item)) in list.into_iter().enumerate() {
        let toml::Value::Table(mut t) = item else {
            return Err(bad(format!("case #{} is not a table", i + 1)));
        };
        let name = match t.remove("name") {
            Some(toml::Value::String(s)) => s,
            None => format!("case #{}", i + 1),
            Some(_) => return Err(bad(format!("case #{}: name must be a string", i + 1))),
        };
        let at = |m: String| bad(format!("case {name:?}: {m}"));
        let mut input = defaults.clone();
        if kind == "media_case" {
            // The media hook sees the Gx session and subscriber only.
            input.retain(|k, _| k == "session" || k == "subscriber");
        }
        match t.remove("input") {
            None => {}
            Some(toml::Value::Table(over)) => merge(&mut input, over),
            Some(_) => return Err(at("input must be a table".into())),
        }
        let input = toml::Value::Table(input);
        let input = if kind == "media_case" {
            CaseInput::Media(Box::new(
                input.try_into().map_err(|e| at(format!("input: {e}")))?,
            ))
        } else {
            CaseInput::Decide(Box::new(
                input.try_into().map_err(|e| at(format!("input: {e}")))?,
            ))
        };
        let expect = match t.remove("expect") {
            None => toml::Table::new(),
            Some(toml::Value::Table(e)) => e,
            Some(_) => return Err(at("expect must be a table".into())),
        };
        let expect = serde_json::to_value(&expect).map_err(|e| at(format!("expect: {e}")))?;
        let absent = match t.remove("expect_absent") {
            None => Vec::new(),
            Some(v) => v
                .try_into::<Vec<String>>()
                .map_err(|e| at(format!("expect_absent: {e}")))?,
        };
        if let Some(k) = t.keys().next() {
            return Err(at(format!(
                "unknown key {k:?} (expected name, input, expect, expect_absent)"
            )));
        }
        if expect.as_object().is_some_and(|o| o.is_empty()) && absent.is_empty() {
            return Err(at("nothing to check: give expect or expect_absent".into()));
        }
        cases.push(Case {
            name,
            input,
            expect,
            absent,
        });
    }
    Ok(cases)
}

/// Deep merge: tables merge key by key, anything else in `over` replaces.
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

fn compare(expect: &Json, actual: &Json, absent: &[String]) -> Vec<FieldDiff> {
    let mut diffs = Vec::new();
    subset("", expect, actual, &mut diffs);
    for field in absent {
        let v = actual.get(field).cloned().unwrap_or(Json::Null);
        let empty = match &v {
            Json::Null => true,
            Json::Array(a) => a.is_empty(),
            Json::Object(o) => o.is_empty(),
            _ => false,
        };
        if !empty {
            diffs.push(FieldDiff {
                field: field.clone(),
                expected: Json::String("(absent)".into()),
                actual: v,
            });
        }
    }
    diffs
}

/// Records where `actual` does not contain `expected`.
fn subset(at: &str, expected: &Json, actual: &Json, diffs: &mut Vec<FieldDiff>) {
    match (expected, actual) {
        (Json::Object(e), Json::Object(a)) => {
            for (k, ev) in e {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                subset(&path, ev, a.get(k).unwrap_or(&Json::Null), diffs);
            }
        }
        (Json::Array(e), Json::Array(a)) if e.len() == a.len() => {
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                subset(&format!("{at}[{i}]"), ev, av, diffs);
            }
        }
        (e, a) if e == a => {}
        (e, a) => diffs.push(FieldDiff {
            field: at.to_string(),
            expected: e.clone(),
            actual: a.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(path: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join(path)
    }

    #[test]
    fn default_policy_passes_its_cases() {
        let report = run(
            &repo("policies/default.lua"),
            &repo("policies/default.cases.toml"),
        )
        .expect("policy and cases load");
        assert!(report.cases.len() >= 10, "{report}");
        assert!(report.passed(), "{report}");
    }

    #[test]
    fn a_wrong_expectation_fails_with_a_diff() {
        let dir = std::env::temp_dir().join(format!("pcrf-cases-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let policy = dir.join("p.lua");
        std::fs::write(
            &policy,
            "function decide(input)\n  if input.subscriber.plan == 'boom' then error('boom') end\n  return { rules = { 'internet' }, apn_ambr = { ul = 1, dl = 2 } }\nend\n",
        )
        .expect("write policy");
        let cases = dir.join("c.toml");
        std::fs::write(
            &cases,
            r#"
[defaults.input.subscriber]
known = true
[[case]]
name = "right"
expect = { rules = ["internet"], apn_ambr = { dl = 2 } }
expect_absent = ["reject", "definitions"]
[[case]]
name = "wrong"
expect.apn_ambr.dl = 3
expect.rules = ["internet", "extra"]
expect_absent = ["apn_ambr"]
[[case]]
name = "errors"
input.subscriber.plan = "boom"
expect.rules = ["internet"]
"#,
        )
        .expect("write cases");
        let report = run(&policy, &cases).expect("runs");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(report.failed(), 2, "{report}");
        assert!(report.cases[0].passed(), "{report}");
        let wrong = &report.cases[1];
        let fields: Vec<&str> = wrong.diffs.iter().map(|d| d.field.as_str()).collect();
        assert_eq!(fields, vec!["apn_ambr.dl", "rules", "apn_ambr"], "{report}");
        assert!(report.cases[2]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("boom")));
        let text = report.to_string();
        assert!(
            text.contains("FAIL wrong") && text.contains("1 passed, 2 failed"),
            "{text}"
        );
    }

    #[test]
    fn malformed_cases_are_refused() {
        let dir = std::env::temp_dir().join(format!("pcrf-cases-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let policy = dir.join("p.lua");
        std::fs::write(&policy, "function decide() return {} end").expect("write");
        let cases = dir.join("c.toml");
        for bad in [
            "[[case]]\nname = 'x'\ninput.subscriber.plann = 'a'\nexpect.rules = []\n",
            "[[case]]\nname = 'x'\n",
            "[[case]]\nname = 'x'\nexpekt.rules = []\n",
            "cases = 1\n",
        ] {
            std::fs::write(&cases, bad).expect("write");
            assert!(
                matches!(run(&policy, &cases), Err(PolicyError::Cases { .. })),
                "{bad}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

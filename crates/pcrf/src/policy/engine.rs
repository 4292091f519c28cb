//! The policy engine shared by every request task: the current script (an
//! ArcSwap, swapped only after the new script passed validation), one VM per
//! worker thread rebuilt lazily when the script changes, the checksum memo,
//! the fallback decision on runtime errors, and the counters.

use super::decision::Decision;
use super::error::PolicyError;
use super::input::{PolicyInput, SessionInput, SubscriberInput, TimeInput};
use super::memo;
use super::sandbox::{Limits, Vm};
use super::stats::{PolicyStats, StatsSnapshot};
use crate::session::record::DecisionRecord;
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the engine needs from the configuration.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// The policy script.
    pub path: PathBuf,
    pub limits: Limits,
    /// Answered when the script fails at run time (e.g. the default
    /// internet rule), so a script bug never takes sessions down.
    pub fallback: Decision,
}

/// How a decision was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ran {
    /// The script ran.
    Lua,
    /// Inputs and script unchanged since `prev`: its decision, Lua not run.
    Memo,
    /// The script failed; the configured fallback decision.
    Fallback,
}

/// The result of one `decide`.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub decision: Decision,
    pub ran: Ran,
    /// xxh3 of every input (the memo key with `script_version`).
    pub input_hash: u64,
    /// The script version that decided; 0 when the fallback answered, so a
    /// fallback is never reused by the memo and is retried next time.
    pub script_version: u64,
    /// With `Ran::Fallback`: the Lua error and traceback (log it with the
    /// Session-Id).
    pub error: Option<String>,
}

impl Outcome {
    /// The per-session memo to keep after applying this outcome (for
    /// `Ran::Memo` the previous record is still valid and may be kept as is).
    pub fn record(&self, input: &PolicyInput, at_ms: i64) -> DecisionRecord {
        DecisionRecord {
            input_hash: self.input_hash,
            script_version: self.script_version,
            decision: self.decision.clone(),
            inputs: serde_json::to_value(input).unwrap_or(serde_json::Value::Null),
            at_ms,
        }
    }
}

/// The script serving now.
struct Script {
    version: u64,
    source: Arc<str>,
}

static NEXT_ENGINE: AtomicU64 = AtomicU64::new(1);

/// VMs kept per engine on this thread; bounded because engines dropped in
/// other threads cannot clear this one (production has a single engine).
const VMS_PER_THREAD: usize = 4;

thread_local! {
    static VMS: RefCell<Vec<(u64, Vm)>> = const { RefCell::new(Vec::new()) };
}

/// The Lua policy engine. Send + Sync: share it in an `Arc`.
pub struct PolicyEngine {
    id: u64,
    path: PathBuf,
    chunk: String,
    limits: Limits,
    fallback: Decision,
    script: ArcSwap<Script>,
    reload_lock: Mutex<()>,
    stats: PolicyStats,
}

impl PolicyEngine {
    /// Loads and validates the script at `config.path`.
    pub fn load(config: EngineConfig) -> Result<PolicyEngine, PolicyError> {
        let chunk = config
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "policy".to_string());
        let source = read(&config.path)?;
        let version = memo::script_version(&source);
        validate(&source, &chunk, config.limits, version)?;
        tracing::info!(path = %config.path.display(), version = format_args!("{version:016x}"), "policy loaded");
        Ok(PolicyEngine {
            id: NEXT_ENGINE.fetch_add(1, Ordering::Relaxed),
            path: config.path,
            chunk,
            limits: config.limits,
            fallback: config.fallback,
            script: ArcSwap::from_pointee(Script {
                version,
                source: source.into(),
            }),
            reload_lock: Mutex::new(()),
            stats: PolicyStats::default(),
        })
    }

    /// Decides for `input`, or reuses `prev` when neither the input nor the
    /// script changed since it was made. Never fails: a script error yields
    /// the fallback decision with the error text.
    pub fn decide(&self, input: &PolicyInput, prev: Option<&DecisionRecord>) -> Outcome {
        let script = self.script.load();
        let input_hash = memo::input_hash(input);
        if let Some(prev) = prev.filter(|_| memo::unchanged(prev, input_hash, script.version)) {
            PolicyStats::bump(&self.stats.skips);
            return Outcome {
                decision: prev.decision.clone(),
                ran: Ran::Memo,
                input_hash,
                script_version: script.version,
                error: None,
            };
        }
        PolicyStats::bump(&self.stats.runs);
        match self.run(&script, input) {
            Ok(decision) => Outcome {
                decision,
                ran: Ran::Lua,
                input_hash,
                script_version: script.version,
                error: None,
            },
            Err(e) => {
                PolicyStats::bump(&self.stats.errors);
                Outcome {
                    decision: self.fallback.clone(),
                    ran: Ran::Fallback,
                    input_hash,
                    script_version: 0,
                    error: Some(format!("script {:016x}: {e}", script.version)),
                }
            }
        }
    }

    /// Runs the current script on `input`: no memo, no fallback, no
    /// counters (policy test cases, dry runs).
    pub fn evaluate(&self, input: &PolicyInput) -> Result<Decision, PolicyError> {
        let script = self.script.load();
        self.run(&script, input)
    }

    /// Re-reads the file, validates it, and only then makes it current. On
    /// any error the old script keeps serving. Returns the version now serving.
    pub fn reload(&self) -> Result<u64, PolicyError> {
        let _one_at_a_time = self.reload_lock.lock();
        let result = read(&self.path).and_then(|source| {
            let version = memo::script_version(&source);
            if version != self.script.load().version {
                validate(&source, &self.chunk, self.limits, version)?;
                self.script.store(Arc::new(Script {
                    version,
                    source: source.into(),
                }));
            }
            Ok(version)
        });
        match &result {
            Ok(version) => {
                PolicyStats::bump(&self.stats.reloads);
                tracing::info!(path = %self.path.display(), version = format_args!("{version:016x}"), "policy reloaded");
            }
            Err(e) => {
                PolicyStats::bump(&self.stats.reload_failures);
                tracing::error!(path = %self.path.display(), error = %e, "policy reload refused, previous script keeps serving");
            }
        }
        result
    }

    /// Version of the script serving now.
    pub fn version(&self) -> u64 {
        self.script.load().version
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The decision answered when the script fails.
    pub fn fallback(&self) -> &Decision {
        &self.fallback
    }

    /// Counters for /metrics.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot(self.version())
    }

    /// Runs `script` on this thread's VM, building it when missing or stale.
    /// A VM that failed is dropped so the next call starts clean.
    fn run(&self, script: &Script, input: &PolicyInput) -> Result<Decision, PolicyError> {
        VMS.with(|cell| {
            let mut vms = cell.borrow_mut();
            let at = match vms.iter().position(|(id, _)| *id == self.id) {
                Some(at) if vms[at].1.version() == script.version => at,
                found => {
                    if let Some(at) = found {
                        vms.swap_remove(at);
                    }
                    let vm = Vm::build(&script.source, &self.chunk, self.limits, script.version)?;
                    if vms.len() >= VMS_PER_THREAD {
                        vms.remove(0);
                    }
                    vms.push((self.id, vm));
                    vms.len() - 1
                }
            };
            let result = vms[at].1.decide(input);
            if result.is_err() {
                vms.swap_remove(at);
            }
            result
        })
    }
}

fn read(path: &Path) -> Result<String, PolicyError> {
    std::fs::read_to_string(path).map_err(|source| PolicyError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Compiles `source` in a fresh VM and runs `decide` on the built-in sample
/// inputs: a script that cannot answer them never becomes current.
fn validate(source: &str, chunk: &str, limits: Limits, version: u64) -> Result<(), PolicyError> {
    let vm = Vm::build(source, chunk, limits, version)?;
    for (what, input) in sample_inputs() {
        vm.decide(&input).map_err(|e| PolicyError::Invalid {
            line: e.line(),
            message: format!("decide failed on the built-in sample input ({what}): {e}"),
        })?;
    }
    Ok(())
}

/// Typical inputs every policy must handle: a provisioned subscriber on LTE
/// and an unknown one (when config applies the default policy to those).
pub fn sample_inputs() -> Vec<(&'static str, PolicyInput)> {
    let session = SessionInput {
        apn: Some("internet".into()),
        rat: Some("EUTRAN".into()),
        ip_can_type: Some("3GPP-EPS".into()),
        ue_ipv4: Some("10.45.0.2".into()),
        pcef: "pgw.localdomain".into(),
        ..SessionInput::default()
    };
    let time = TimeInput {
        hour: 12,
        minute: 0,
        weekday: 3,
        date: "2026-01-07".into(),
    };
    let known = PolicyInput {
        subscriber: SubscriberInput {
            known: true,
            imsi: Some("001010000000001".into()),
            msisdn: Some("491700000001".into()),
            plan: Some("basic".into()),
            ..SubscriberInput::default()
        },
        session: session.clone(),
        time: time.clone(),
        ..PolicyInput::default()
    };
    let unknown = PolicyInput {
        subscriber: SubscriberInput {
            known: false,
            imsi: Some("001010000009999".into()),
            ..SubscriberInput::default()
        },
        session,
        time,
        ..PolicyInput::default()
    };
    vec![("known subscriber", known), ("unknown subscriber", unknown)]
}

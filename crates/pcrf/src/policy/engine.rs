//! The policy engine shared by every request task: the current script (an
//! ArcSwap, swapped only after the new script passed validation) and, while
//! a rollout runs, the canary script deciding for its subscribers
//! (`policy::rollout`); one VM per script and worker thread built lazily,
//! the checksum memo, the fallback decision on runtime errors, and the
//! counters, also by deployed version.

use super::decision::Decision;
use super::error::PolicyError;
use super::input::{PolicyInput, SessionInput, SubscriberFields, SubscriberInput, TimeInput};
use super::memo;
use super::rollout::Rollout;
use super::sandbox::{Limits, Notification, Vm};
use super::shared_decision::SharedDecision;
use super::stats::{PolicyStats, StatsSnapshot};
use crate::policy::record::{self, DecisionInputs, DecisionRecord};
use arc_swap::{ArcSwap, ArcSwapOption};
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
    /// Shared with the record it was reused from (a memo hit copies
    /// nothing) or interned with every equal decision alive; its
    /// `revalidation_secs` as when it was made: apply `decision()`.
    pub decision: SharedDecision,
    /// Seconds since a decision reused beyond its minute was made, taken
    /// off its revalidation by `decision()` (the same instant); 0 otherwise.
    pub revalidation_spent_secs: u64,
    pub ran: Ran,
    /// xxh3 of every input (the memo key with `script_version`).
    pub input_hash: u64,
    /// The script version that decided; 0 when the fallback answered, so a
    /// fallback is never reused by the memo and is retried next time.
    pub script_version: u64,
    /// The deployed version (the store's number, see `policy::versions`)
    /// that decided: the stable one, or the canary for its subscribers
    /// while a rollout runs; 0 before the first is recorded.
    pub policy_version: u64,
    /// With `Ran::Fallback`: the Lua error and traceback (log it with the
    /// Session-Id).
    pub error: Option<String>,
    /// The inputs, for the record; `None` with `Ran::Memo`.
    pub inputs: Option<DecisionInputs>,
    /// Where the decision holds beyond identical inputs (the script's
    /// `valid`); kept in the record. `None` with `Ran::Memo`.
    pub bounds: Option<Box<memo::Bounds>>,
    /// What the script asked to notify with this decision (`notify()`);
    /// none when Lua did not run.
    pub notifications: Vec<Notification>,
}

impl Outcome {
    /// The decision to apply, a copy of its own: the revalidation it asks
    /// for counted from now.
    pub fn decision(&self) -> Decision {
        let mut d = Decision::clone(&self.decision);
        if self.revalidation_spent_secs > 0 {
            if let Some(r) = d.revalidation_secs {
                d.revalidation_secs = Some(r.saturating_sub(self.revalidation_spent_secs));
            }
        }
        d
    }

    /// The per-session memo to keep after applying this outcome (for
    /// `Ran::Memo` the previous record is still valid and may be kept as is).
    pub fn into_record(self, input: &PolicyInput, at_ms: i64) -> DecisionRecord {
        DecisionRecord {
            input_hash: self.input_hash,
            script_version: self.script_version,
            policy_version: self.policy_version,
            decision: self.decision,
            inputs: match self.inputs {
                Some(inputs) => inputs,
                None => DecisionInputs::of(input),
            },
            at_ms,
            bounds: self.bounds,
        }
    }
}

/// The script serving now.
struct Script {
    /// Its hash.
    version: u64,
    /// The deployed version it is (`policy::versions`); 0 until one is
    /// recorded.
    id: u64,
    source: Arc<str>,
    /// Its decisions, for the metrics by version.
    counters: Arc<VersionCounters>,
}

/// Decisions and fallbacks of one deployed version, and the latency and
/// error answers of the requests it decided.
pub struct VersionCounters {
    decisions: AtomicU64,
    fallbacks: AtomicU64,
    errors: AtomicU64,
    latency: crate::metrics::Histogram,
}

impl Default for VersionCounters {
    fn default() -> Self {
        VersionCounters {
            decisions: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            latency: crate::metrics::Histogram::latency(),
        }
    }
}

impl std::fmt::Debug for VersionCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionCounters")
            .field("decisions", &self.decisions)
            .field("fallbacks", &self.fallbacks)
            .field("errors", &self.errors)
            .finish_non_exhaustive()
    }
}

/// What one deployed version decided since start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionSnapshot {
    /// The stored version (`policy::versions`).
    pub id: u64,
    /// Every decision it answered (Lua, memo or fallback).
    pub decisions: u64,
    /// Of them, script errors answered with the fallback decision.
    pub fallbacks: u64,
    /// Requests it decided that were answered with an error (a rejection,
    /// an answer too large to send).
    pub errors: u64,
    /// The latency of the requests it decided, read to answer.
    pub latency: crate::metrics::HistogramSnapshot,
}

/// The versions whose counters are kept (the newest deployed).
const COUNTED_VERSIONS: usize = 8;

/// A rollout serving here: the canary's script and who it decides for.
struct Canary {
    script: Arc<Script>,
    rollout: Rollout,
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
    /// The canary while a rollout runs; its subscribers are decided by it.
    canary: ArcSwapOption<Canary>,
    /// Counters by deployed version, newest last.
    by_version: Mutex<Vec<(u64, Arc<VersionCounters>)>>,
    reload_lock: Mutex<()>,
    stats: PolicyStats,
}

impl PolicyEngine {
    /// Loads and validates the script at `config.path`.
    pub fn load(config: EngineConfig) -> Result<PolicyEngine, PolicyError> {
        let source = read(&config.path)?;
        let engine = PolicyEngine::from_source(config, source)?;
        let version = engine.version();
        tracing::info!(path = %engine.path.display(), version = format_args!("{version:016x}"), "policy loaded");
        Ok(engine)
    }

    /// An engine over `source` (validated), named after `config.path` but
    /// never reading it.
    fn from_source(config: EngineConfig, source: String) -> Result<PolicyEngine, PolicyError> {
        let chunk = config
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "policy".to_string());
        let version = memo::script_version(&source);
        validate(&source, &chunk, config.limits, version)?;
        Ok(PolicyEngine {
            id: NEXT_ENGINE.fetch_add(1, Ordering::Relaxed),
            path: config.path,
            chunk,
            limits: config.limits,
            // Never reused by the memo: a `valid` in it means nothing.
            fallback: Decision {
                valid: None,
                ..config.fallback
            },
            script: ArcSwap::from_pointee(Script {
                version,
                id: 0,
                source: source.into(),
                counters: Arc::new(VersionCounters::default()),
            }),
            canary: ArcSwapOption::empty(),
            by_version: Mutex::new(Vec::new()),
            reload_lock: Mutex::new(()),
            stats: PolicyStats::default(),
        })
    }

    /// A draft: `source` compiled and checked as a reload would (same
    /// chunk name, so error lines read alike, same limits and fallback),
    /// in an engine of its own that serves nothing. For checking an edit,
    /// running the test cases on it, or a dry run beside the running
    /// script.
    pub fn draft(&self, source: String) -> Result<PolicyEngine, PolicyError> {
        PolicyEngine::from_source(
            EngineConfig {
                path: self.path.clone(),
                limits: self.limits,
                fallback: self.fallback.clone(),
            },
            source,
        )
    }

    /// Makes `source` the running script as deployed version `id`, and
    /// writes it to the policy file (whole, through a rename, so the file
    /// watcher never reads half of it; the reload that follows finds the
    /// script unchanged). Checked first: a script that does not compile or
    /// fails the sample inputs changes neither the file nor the script
    /// serving. Returns its hash.
    pub fn install(&self, source: String, id: u64) -> Result<u64, PolicyError> {
        let _one_at_a_time = self.reload_lock.lock();
        let version = memo::script_version(&source);
        let current = self.script.load();
        if version != current.version {
            if let Err(e) = validate(&source, &self.chunk, self.limits, version) {
                PolicyStats::bump(&self.stats.reload_failures);
                return Err(e);
            }
        }
        if self.read_file().ok().as_deref() != Some(source.as_str()) {
            let tmp = self.path.with_extension("lua.deploying");
            let io = |source| PolicyError::Io {
                path: self.path.clone(),
                source,
            };
            std::fs::write(&tmp, &source).map_err(io)?;
            std::fs::rename(&tmp, &self.path).map_err(io)?;
        }
        if version != current.version || id != current.id {
            self.script.store(Arc::new(Script {
                version,
                id,
                source: source.into(),
                counters: self.counters_of(id),
            }));
        }
        if version != current.version {
            PolicyStats::bump(&self.stats.reloads);
        }
        tracing::info!(path = %self.path.display(), version = format_args!("{version:016x}"), id, "policy installed");
        Ok(version)
    }

    /// Makes `source`, deployed version `rollout.canary`, decide for the
    /// subscribers `rollout` assigns to it (see [`Rollout::assigns_canary`]);
    /// the stable script keeps deciding for the others and stays in the
    /// policy file. Checked first as `install` checks.
    pub fn install_canary(&self, source: String, rollout: Rollout) -> Result<(), PolicyError> {
        let _one_at_a_time = self.reload_lock.lock();
        let version = memo::script_version(&source);
        let id = u64::try_from(rollout.canary).unwrap_or(0);
        let script = match self.canary.load().as_deref() {
            Some(c) if c.script.version == version && c.script.id == id => c.script.clone(),
            _ => {
                if let Err(e) = validate(&source, &self.chunk, self.limits, version) {
                    PolicyStats::bump(&self.stats.reload_failures);
                    return Err(e);
                }
                Arc::new(Script {
                    version,
                    id,
                    source: source.into(),
                    counters: self.counters_of(id),
                })
            }
        };
        tracing::info!(
            version = format_args!("{version:016x}"),
            id,
            stable = self.id(),
            share_basis_points = rollout.share_basis_points,
            listed = rollout.subscribers.len(),
            "policy canary installed"
        );
        self.canary
            .store(Some(Arc::new(Canary { script, rollout })));
        Ok(())
    }

    /// Ends the rollout here: the stable script decides for everyone.
    pub fn clear_canary(&self) {
        if self.canary.swap(None).is_some() {
            tracing::info!(stable = self.id(), "policy canary withdrawn");
        }
    }

    /// The rollout serving here, if one runs.
    pub fn rollout(&self) -> Option<Rollout> {
        self.canary.load().as_deref().map(|c| c.rollout.clone())
    }

    /// The text of the canary's script while a rollout runs.
    pub fn canary_source(&self) -> Option<Arc<str>> {
        self.canary
            .load()
            .as_deref()
            .map(|c| c.script.source.clone())
    }

    /// The deployed version that decides for the subscriber with these
    /// keys now: the canary's or the stable one's.
    pub fn assigned_id(&self, imsi: Option<&str>, msisdn: Option<&str>) -> u64 {
        match self.canary.load().as_deref() {
            Some(c) if c.rollout.assigns_canary(imsi, msisdn) => c.script.id,
            _ => self.id(),
        }
    }

    /// The script deciding for `subscriber`.
    fn script_for(&self, subscriber: &SubscriberInput) -> Arc<Script> {
        if let Some(c) = self.canary.load().as_deref() {
            let subscriber = subscriber.view();
            if c.rollout.assigns_canary(subscriber.imsi, subscriber.msisdn) {
                return c.script.clone();
            }
        }
        self.script.load_full()
    }

    /// The counters of deployed version `id`, kept for the newest
    /// [`COUNTED_VERSIONS`] versions.
    fn counters_of(&self, id: u64) -> Arc<VersionCounters> {
        let mut all = self.by_version.lock();
        if let Some((_, c)) = all.iter().find(|(v, _)| *v == id) {
            return c.clone();
        }
        let c = Arc::new(VersionCounters::default());
        all.push((id, c.clone()));
        all.sort_by_key(|(v, _)| *v);
        if all.len() > COUNTED_VERSIONS {
            all.remove(0);
        }
        c
    }

    /// Decisions and fallbacks by deployed version, oldest first.
    pub fn version_stats(&self) -> Vec<VersionSnapshot> {
        self.by_version
            .lock()
            .iter()
            .map(|(id, c)| VersionSnapshot {
                id: *id,
                decisions: c.decisions.load(Ordering::Relaxed),
                fallbacks: c.fallbacks.load(Ordering::Relaxed),
                errors: c.errors.load(Ordering::Relaxed),
                latency: c.latency.snapshot(),
            })
            .collect()
    }

    /// Counts one answered request that version `id` decided: its latency
    /// and, when `success` is false, an error.
    pub fn count_answer(&self, id: u64, success: bool, elapsed: std::time::Duration) {
        let count = |c: &VersionCounters| {
            c.latency.observe_duration(elapsed);
            if !success {
                c.errors.fetch_add(1, Ordering::Relaxed);
            }
        };
        // The serving and canary scripts hold their counters: neither a
        // lock nor a shared reference count on the request path, unless a
        // version was replaced meanwhile.
        let serving = self.script.load();
        if serving.id == id {
            return count(&serving.counters);
        }
        if let Some(c) = self.canary.load().as_deref().filter(|c| c.script.id == id) {
            return count(&c.script.counters);
        }
        count(&self.counters_of(id));
    }

    /// The policy file's text now.
    pub fn read_file(&self) -> Result<String, PolicyError> {
        read(&self.path)
    }

    /// Counts a script refused before it reached `install` (its test
    /// cases failed), with the refused reloads.
    pub(crate) fn count_refusal(&self) {
        PolicyStats::bump(&self.stats.reload_failures);
    }

    /// The text of the script serving now.
    pub fn source(&self) -> Arc<str> {
        self.script.load().source.clone()
    }

    /// The deployed version serving now (`policy::versions`); 0 until
    /// one is recorded.
    pub fn id(&self) -> u64 {
        self.script.load().id
    }

    /// Decides for `input`, or reuses `prev` when neither the input nor the
    /// script changed since it was made, or when the input changed only
    /// within the bounds `prev`'s decision stated. Never fails: a script
    /// error yields the fallback decision with the error text.
    pub fn decide(&self, input: &PolicyInput, prev: Option<&DecisionRecord>) -> Outcome {
        let script = self.script_for(&input.subscriber);
        PolicyStats::bump(&script.counters.decisions);
        let prev = prev.filter(|p| p.script_version == script.version);
        // Tried first: when it holds, the whole input need not be written
        // out as text at all.
        if let Some((prev, bounds)) = prev.and_then(|p| Some((p, p.bounds.as_deref()?))) {
            if bounds.hold_for(input) {
                PolicyStats::bump(&self.stats.skips);
                PolicyStats::bump(&self.stats.skips_within_bounds);
                return Outcome {
                    decision: prev.decision.clone(),
                    revalidation_spent_secs: bounds.spent_secs(input),
                    ran: Ran::Memo,
                    input_hash: prev.input_hash,
                    script_version: script.version,
                    policy_version: script.id,
                    error: None,
                    inputs: None,
                    bounds: None,
                    notifications: Vec::new(),
                };
            }
        }
        // The serialization hashed is kept as the inputs when Lua runs.
        let (input_hash, inputs) = memo::hash_input(input, |hash, packed| {
            let reused = prev.is_some_and(|p| record::unchanged(p, hash, script.version));
            (hash, (!reused).then(|| DecisionInputs::packed(packed)))
        });
        if let (Some(prev), None) = (prev, &inputs) {
            PolicyStats::bump(&self.stats.skips);
            return Outcome {
                decision: prev.decision.clone(),
                revalidation_spent_secs: 0,
                ran: Ran::Memo,
                input_hash,
                script_version: script.version,
                policy_version: script.id,
                error: None,
                inputs: None,
                bounds: None,
                notifications: Vec::new(),
            };
        }
        PolicyStats::bump(&self.stats.runs);
        match self.run(&script, input) {
            Ok((mut decision, notifications)) => {
                let bounds = decision
                    .valid
                    .take()
                    .and_then(|v| memo::bounds(input, &v, decision.revalidation_secs))
                    .map(Box::new);
                Outcome {
                    decision: decision.into(),
                    revalidation_spent_secs: 0,
                    ran: Ran::Lua,
                    input_hash,
                    script_version: script.version,
                    policy_version: script.id,
                    error: None,
                    inputs,
                    bounds,
                    notifications,
                }
            }
            Err(e) => {
                PolicyStats::bump(&self.stats.errors);
                PolicyStats::bump(&script.counters.fallbacks);
                Outcome {
                    decision: self.fallback.clone().into(),
                    revalidation_spent_secs: 0,
                    ran: Ran::Fallback,
                    input_hash,
                    script_version: 0,
                    policy_version: script.id,
                    error: Some(format!("script {:016x}: {e}", script.version)),
                    inputs,
                    bounds: None,
                    notifications: Vec::new(),
                }
            }
        }
    }

    /// Runs the current script on `input`: no memo, no fallback, no
    /// counters (policy test cases, dry runs).
    pub fn evaluate(&self, input: &PolicyInput) -> Result<Decision, PolicyError> {
        self.evaluate_with_notifications(input).map(|(d, _)| d)
    }

    /// `evaluate`, with the notifications the script asked for.
    pub fn evaluate_with_notifications(
        &self,
        input: &PolicyInput,
    ) -> Result<(Decision, Vec<Notification>), PolicyError> {
        let script = self.script.load();
        self.run(&script, input)
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
    fn run(
        &self,
        script: &Script,
        input: &PolicyInput,
    ) -> Result<(Decision, Vec<Notification>), PolicyError> {
        self.on_vm(script, |vm| {
            let d = vm.decide(input)?;
            Ok((d, vm.take_notifications()?))
        })
    }

    /// Runs the optional hook `name` of the current script (or the
    /// prelude's default for it) on `input`; see `Vm::call_hook`.
    pub fn call_hook<I: serde::Serialize, O: serde::de::DeserializeOwned>(
        &self,
        name: &str,
        input: &I,
    ) -> Result<O, PolicyError> {
        let script = self.script.load();
        self.on_vm(&script, |vm| vm.call_hook(name, input))
    }

    /// Runs `f` on this thread's VM for `script`, building it when missing
    /// or stale; a VM that failed is dropped so the next call starts clean.
    fn on_vm<R>(
        &self,
        script: &Script,
        f: impl FnOnce(&Vm) -> Result<R, PolicyError>,
    ) -> Result<R, PolicyError> {
        VMS.with(|cell| {
            let mut vms = cell.borrow_mut();
            let found = vms
                .iter()
                .position(|(id, vm)| *id == self.id && vm.version() == script.version);
            let at = match found {
                Some(at) => at,
                None => {
                    // A rollout serves two scripts: keep the VM of the
                    // other one, drop those of scripts no longer serving.
                    let stable = self.script.load().version;
                    let canary = self.canary.load().as_deref().map(|c| c.script.version);
                    vms.retain(|(id, vm)| {
                        *id != self.id || vm.version() == stable || Some(vm.version()) == canary
                    });
                    let vm = Vm::build(&script.source, &self.chunk, self.limits, script.version)?;
                    if vms.len() >= VMS_PER_THREAD {
                        vms.remove(0);
                    }
                    vms.push((self.id, vm));
                    vms.len() - 1
                }
            };
            let result = f(&vms[at].1);
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
        ..TimeInput::default()
    };
    let known = PolicyInput {
        subscriber: SubscriberFields {
            known: true,
            imsi: Some("001010000000001".into()),
            msisdn: Some("491700000001".into()),
            plan: Some("basic".into()),
            ..SubscriberFields::default()
        }
        .into(),
        session: session.clone(),
        time: time.clone(),
        ..PolicyInput::default()
    };
    let unknown = PolicyInput {
        subscriber: SubscriberFields {
            known: false,
            imsi: Some("001010000009999".into()),
            ..SubscriberFields::default()
        }
        .into(),
        session,
        time,
        ..PolicyInput::default()
    };
    vec![("known subscriber", known), ("unknown subscriber", unknown)]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A policy file in its own temp dir, removed on drop.
    struct Script {
        dir: PathBuf,
        path: PathBuf,
    }

    impl Script {
        fn new(tag: &str, source: &str) -> Script {
            let dir =
                std::env::temp_dir().join(format!("pcrf-engine-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("tmp dir");
            let path = dir.join("policy.lua");
            std::fs::write(&path, source).expect("write policy");
            Script { dir, path }
        }
    }

    impl Drop for Script {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn rule_is(name: &str) -> String {
        format!("function decide(input)\n  return {{ rules = {{ '{name}' }} }}\nend\n")
    }

    fn fallback() -> Decision {
        Decision {
            rules: vec!["fallback-internet".into()],
            ..Decision::default()
        }
    }

    fn engine(s: &Script) -> PolicyEngine {
        PolicyEngine::load(EngineConfig {
            path: s.path.clone(),
            limits: Limits::default(),
            fallback: fallback(),
        })
        .expect("loads")
    }

    fn input() -> PolicyInput {
        sample_inputs().remove(0).1
    }

    #[test]
    fn memo_skips_unchanged_and_runs_on_change() {
        let s = Script::new("memo", &rule_is("a"));
        let e = engine(&s);
        let mut i = input();
        let first = e.decide(&i, None);
        assert_eq!(first.ran, Ran::Lua);
        assert_eq!(first.decision.rules, vec!["a".to_string()]);
        let rec = first.clone().into_record(&i, 1);
        let again = e.decide(&i, Some(&rec));
        assert_eq!(again.ran, Ran::Memo);
        assert_eq!(again.decision, first.decision);
        i.network.congestion = 3;
        assert_eq!(e.decide(&i, Some(&rec)).ran, Ran::Lua);
        let st = e.stats();
        assert_eq!((st.runs, st.skips, st.errors), (2, 1, 0));
        // A record made by another script version is not reused.
        let mut other = rec.clone();
        other.script_version ^= 1;
        assert_eq!(e.decide(&input(), Some(&other)).ran, Ran::Lua);
    }

    fn with_monthly(mut i: PolicyInput, used_mb: u64) -> PolicyInput {
        i.usage.accumulators.insert(
            "monthly".into(),
            crate::policy::input::AccumulatorInput {
                used_mb,
                quota_mb: Some(1000),
                percent: Some(used_mb / 10),
                exhausted: false,
            },
        );
        i
    }

    /// A decision that bounds the amount it read is reused while the
    /// amount stays in the range, and decided again once it leaves it;
    /// any other change still runs the script.
    #[test]
    fn usage_bounds_reuse_within_the_range_only() {
        let src = "function decide(input)\n\
                   local used = (input.usage.accumulators.monthly or { used_mb = 0 }).used_mb\n\
                   local over = used >= 100\n\
                   return { rules = { over and 'slow' or 'fast' },\n\
                   valid = { usage = { monthly = over and { at_least = 100 } or { below = 100 } } } }\nend\n";
        let s = Script::new("bounds", src);
        let e = engine(&s);
        let first = e.decide(&with_monthly(input(), 10), None);
        assert_eq!(
            (first.ran, first.decision.rules[0].as_str()),
            (Ran::Lua, "fast")
        );
        assert!(
            first.decision.valid.is_none(),
            "valid is the memo's, not sent"
        );
        let rec = first.into_record(&with_monthly(input(), 10), 1);
        assert!(rec.bounds.is_some());
        for used in [11, 50, 99] {
            let out = e.decide(&with_monthly(input(), used), Some(&rec));
            assert_eq!(out.ran, Ran::Memo, "{used} MB");
            assert_eq!(out.decision.rules, vec!["fast".to_string()]);
        }
        let out = e.decide(&with_monthly(input(), 100), Some(&rec));
        assert_eq!(
            (out.ran, out.decision.rules[0].as_str()),
            (Ran::Lua, "slow")
        );
        // Within the range, but something else changed.
        let mut other = with_monthly(input(), 20);
        other.network.congestion = 2;
        assert_eq!(e.decide(&other, Some(&rec)).ran, Ran::Lua);
        // An accumulator the bounds do not name must keep its amount.
        let mut daily = with_monthly(input(), 20);
        daily
            .usage
            .accumulators
            .insert("daily".into(), Default::default());
        let rec2 = e.decide(&daily, None).into_record(&daily, 2);
        daily.usage.accumulators.insert(
            "daily".into(),
            crate::policy::input::AccumulatorInput {
                used_mb: 1,
                ..Default::default()
            },
        );
        assert_eq!(e.decide(&daily, Some(&rec2)).ran, Ran::Lua);
        // Exhaustion stays compared even within the range.
        let mut gone = with_monthly(input(), 20);
        if let Some(m) = gone.usage.accumulators.get_mut("monthly") {
            m.exhausted = true;
        }
        assert_eq!(e.decide(&gone, Some(&rec)).ran, Ran::Lua);
        let st = e.stats();
        assert_eq!((st.skips, st.skips_within_bounds), (3, 3));
    }

    /// `installed = "any"` lets the installed rules change (the update
    /// after the rules a decision installed are in place); without it, or
    /// when anything else changes, the script runs again.
    #[test]
    fn installed_bound_reuses_across_installed_rules_only() {
        let src = "function decide(input)\n\
                   return { rules = { 'r' }, valid = { installed = 'any' } }\nend\n";
        let s = Script::new("installed", src);
        let e = engine(&s);
        let made = input();
        let rec = e.decide(&made, None).into_record(&made, 1);
        assert!(rec.bounds.is_some());
        let mut after = input();
        after.session.installed = vec!["r".to_owned(), "other".to_owned()].into();
        let out = e.decide(&after, Some(&rec));
        assert_eq!(out.ran, Ran::Memo);
        assert_eq!(out.decision.rules, vec!["r".to_string()]);
        after
            .session
            .rule_failures
            .push(crate::policy::input::RuleFailure {
                rule: "r".into(),
                status: 1,
                code: None,
            });
        assert_eq!(e.decide(&after, Some(&rec)).ran, Ran::Lua);
        // Without the statement the installed rules stay compared.
        let s = Script::new("installed-compared", &rule_is("r"));
        let e = engine(&s);
        let rec = e.decide(&made, None).into_record(&made, 1);
        let mut after = input();
        after.session.installed = vec!["r".to_owned()].into();
        assert_eq!(e.decide(&after, Some(&rec)).ran, Ran::Lua);
        assert_eq!(e.decide(&made, Some(&rec)).ran, Ran::Memo);
    }

    /// Correctness first: a decision that read an amount and stated no
    /// bound is decided again whenever the amount changes.
    #[test]
    fn without_valid_every_amount_change_runs_the_script() {
        let src = "function decide(input)\n\
                   return { rules = { (input.usage.accumulators.monthly or { used_mb = 0 }).used_mb < 100 and 'fast' or 'slow' } }\nend\n";
        let s = Script::new("nobounds", src);
        let e = engine(&s);
        let rec = e
            .decide(&with_monthly(input(), 10), None)
            .into_record(&with_monthly(input(), 10), 1);
        assert!(rec.bounds.is_none());
        assert_eq!(
            e.decide(&with_monthly(input(), 11), Some(&rec)).ran,
            Ran::Lua
        );
        assert_eq!(
            e.decide(&with_monthly(input(), 10), Some(&rec)).ran,
            Ran::Memo
        );
        // A range that leaves out the amount decided on is ignored.
        let src = "function decide(input) return { rules = { 'x' }, valid = { usage = { monthly = { below = 5 } } } } end";
        let s = Script::new("badrange", src);
        let e = engine(&s);
        let out = e.decide(&with_monthly(input(), 10), None);
        assert!(out.bounds.is_none());
    }

    fn at(mut i: PolicyInput, minute_ms: i64, secs_into: i64) -> PolicyInput {
        i.time.minute_ms = minute_ms;
        i.time.at_ms = minute_ms + secs_into * 1000;
        i.time.minute = ((minute_ms / 60_000) % 60) as u8;
        i
    }

    /// `valid.secs` lets the time change until its end (counted from the
    /// decided minute's start), never past the decision's revalidation; a
    /// reused revalidation keeps its instant.
    #[test]
    fn time_bounds_hold_until_their_end() {
        // A minute's start (a multiple of 60,000 ms).
        let m0 = 1_800_000_000_000;
        let src = "function decide(input)\n\
                   return { rules = { 'r' }, revalidation_secs = 600, valid = { secs = 300 } }\nend\n";
        let s = Script::new("time", src);
        let e = engine(&s);
        let made = at(input(), m0, 30);
        let rec = e.decide(&made, None).into_record(&made, 1);
        let later = e.decide(&at(input(), m0 + 120_000, 10), Some(&rec));
        assert_eq!(later.ran, Ran::Memo);
        // 600 s from m0 + 30 s, asked at m0 + 130 s: 500 s left.
        assert_eq!(later.decision().revalidation_secs, Some(500));
        assert_eq!(
            e.decide(&at(input(), m0 + 240_000, 59), Some(&rec)).ran,
            Ran::Memo
        );
        assert_eq!(
            e.decide(&at(input(), m0 + 300_000, 0), Some(&rec)).ran,
            Ran::Lua
        );
        // Without secs the minute stays compared (the amounts are free).
        let src =
            "function decide(input) return { rules = { 'r' }, valid = { usage = 'any' } } end";
        let s = Script::new("notime", src);
        let e = engine(&s);
        let made = at(with_monthly(input(), 1), m0, 30);
        let rec = e.decide(&made, None).into_record(&made, 1);
        let same_minute = at(with_monthly(input(), 7), m0, 50);
        let out = e.decide(&same_minute, Some(&rec));
        assert_eq!(out.ran, Ran::Memo);
        assert_eq!(
            e.decide(&at(with_monthly(input(), 7), m0 + 60_000, 0), Some(&rec))
                .ran,
            Ran::Lua
        );
        // The revalidation ends a longer validity.
        let src = "function decide(input)\n\
                   return { rules = { 'r' }, revalidation_secs = 60, valid = { secs = 3600 } }\nend\n";
        let s = Script::new("reval", src);
        let e = engine(&s);
        let made = at(input(), m0, 30);
        let rec = e.decide(&made, None).into_record(&made, 1);
        assert_eq!(
            e.decide(&at(input(), m0 + 60_000, 29), Some(&rec)).ran,
            Ran::Memo
        );
        assert_eq!(
            e.decide(&at(input(), m0 + 60_000, 30), Some(&rec)).ran,
            Ran::Lua
        );
    }

    /// A script that loops forever on some input is stopped by the
    /// watchdog's hook; that session gets the fallback and the engine keeps
    /// deciding the others.
    #[test]
    fn a_runaway_call_is_stopped_and_the_engine_keeps_serving() {
        let src = "function decide(input)\n\
                   if input.network.congestion == 9 then while true do end end\n\
                   return { rules = { 'ok' } }\nend\n";
        let s = Script::new("runaway", src);
        let e = engine(&s);
        let mut bad = input();
        bad.network.congestion = 9;
        let out = e.decide(&bad, None);
        assert_eq!(out.ran, Ran::Fallback);
        assert!(
            out.error
                .as_deref()
                .unwrap_or("")
                .contains("instruction budget"),
            "{:?}",
            out.error
        );
        assert_eq!(
            e.decide(&input(), None).decision.rules,
            vec!["ok".to_string()]
        );
    }

    #[test]
    fn runtime_error_answers_the_fallback_and_is_retried() {
        let src = "function decide(input)\n  if input.network.congestion > 0 then\n    error('no capacity table')\n  end\n  return { rules = { 'ok' } }\nend\n";
        let s = Script::new("fallback", src);
        let e = engine(&s);
        let mut i = input();
        i.network.congestion = 1;
        let out = e.decide(&i, None);
        assert_eq!(out.ran, Ran::Fallback);
        assert_eq!(out.decision, fallback());
        assert_eq!(out.script_version, 0);
        let err = out.error.clone().expect("error text");
        assert!(err.contains("policy.lua:3: no capacity table"), "{err}");
        assert!(err.contains("stack traceback"), "{err}");
        // A fallback record never satisfies the memo.
        let rec = out.clone().into_record(&i, 1);
        assert_eq!(e.decide(&i, Some(&rec)).ran, Ran::Fallback);
        assert_eq!(e.stats().errors, 2);
        // The VM was rebuilt and serves the next good input.
        i.network.congestion = 0;
        assert_eq!(e.decide(&i, None).decision.rules, vec!["ok".to_string()]);
    }

    #[test]
    fn install_swaps_good_and_refuses_broken() {
        let s = Script::new("reload", &rule_is("v1"));
        let e = engine(&s);
        let v1 = e.version();
        assert_eq!(e.id(), 0, "no deployed version yet");
        assert_eq!(
            e.decide(&input(), None).decision.rules,
            vec!["v1".to_string()]
        );

        let v2 = e.install(rule_is("v2"), 2).expect("good script installs");
        assert_ne!(v1, v2);
        assert_eq!((e.version(), e.id()), (v2, 2));
        assert_eq!(
            std::fs::read_to_string(&s.path).expect("file"),
            rule_is("v2")
        );
        let out = e.decide(&input(), None);
        assert_eq!(out.decision.rules, vec!["v2".to_string()]);
        assert_eq!(out.policy_version, 2, "the decision names its version");

        // Syntax error: refused with its line, v2 keeps serving.
        let err = e
            .install("function decide(input)\n  return {\nend\n".into(), 3)
            .expect_err("broken script refused");
        assert_eq!(err.line(), Some(3), "{err}");
        assert_eq!((e.version(), e.id()), (v2, 2));
        assert_eq!(
            std::fs::read_to_string(&s.path).expect("file"),
            rule_is("v2")
        );

        // Runtime error on the sample input: refused too.
        let err = e
            .install(
                "function decide(input)\n  return { rules = { input.nothing.here } }\nend\n".into(),
                3,
            )
            .expect_err("script failing the sample refused");
        assert!(err.to_string().contains("sample input"), "{err}");
        assert_eq!(err.line(), Some(2), "{err}");

        // No decide at all.
        assert!(e
            .install("function decid(input) return {} end\n".into(), 3)
            .is_err());
        assert_eq!(
            e.decide(&input(), None).decision.rules,
            vec!["v2".to_string()]
        );

        // The same script under a new number (a rollback to it) only
        // renames what serves.
        assert_eq!(e.install(rule_is("v2"), 4).expect("same"), v2);
        assert_eq!(e.id(), 4);

        let st = e.stats();
        assert_eq!((st.reloads, st.reload_failures), (1, 3));
        assert_eq!(st.script_version, v2);
    }

    #[test]
    fn load_refuses_a_broken_script() {
        let s = Script::new("load", "function decide(input)\n  return 1 +\nend\n");
        let err = PolicyEngine::load(EngineConfig {
            path: s.path.clone(),
            limits: Limits::default(),
            fallback: fallback(),
        })
        .err()
        .expect("refused");
        assert!(
            matches!(err, PolicyError::Syntax { line: Some(3), .. }),
            "{err}"
        );
    }

    #[test]
    fn no_request_fails_during_reloads() {
        let s = Script::new("swap", &rule_is("a"));
        let e = Arc::new(engine(&s));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let e = e.clone();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let out = e.decide(&input(), None);
                        assert_eq!(out.ran, Ran::Lua, "{:?}", out.error);
                        let r = &out.decision.rules[0];
                        assert!(r == "a" || r == "b", "{r}");
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        for i in 0..20 {
            e.install(rule_is(if i % 2 == 0 { "b" } else { "a" }), i)
                .expect("install");
            if i % 5 == 0 {
                // A broken one in between changes nothing.
                assert!(e.install("function decide(".into(), i).is_err());
            }
        }
        stop.store(true, Ordering::Relaxed);
        for w in workers {
            assert!(w.join().expect("worker ran") > 0);
        }
        assert_eq!(e.stats().errors, 0);
    }
}

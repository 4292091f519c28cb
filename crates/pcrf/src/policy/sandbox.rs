//! One sandboxed Lua VM holding one compiled policy script: a whitelist
//! environment (see sandbox.lua), read-only globals once loaded, text chunks
//! only, an instruction budget and a CPU-time limit per call (counted by a
//! hook that watchdog.rs arms only when a call runs long) and a memory limit
//! (mlua's allocator). Not Send: each worker thread owns its own (see
//! engine.rs).

use super::cpu_clock::thread_cpu;
use super::decision::Decision;
use super::decision_table::read_decision;
use super::error::{line_in, PolicyError};
use super::input::PolicyInput;
use super::input_table;
use super::watchdog::{self, Armed};
use mlua::chunk::ChunkMode;
use mlua::serde::{DeserializeOptions, SerializeOptions};
use mlua::state::{GcGenParams, GcMode};
use mlua::{Function, HookTriggers, Lua, LuaOptions, LuaSerdeExt, StdLib, Table, Value, VmState};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Resource limits of one VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Lua VM instructions one call (or the script's top level) may execute.
    pub instructions: u64,
    /// Bytes the VM may hold in total (0 = unlimited; Lua 5.4 build only).
    pub memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            instructions: 1_000_000,
            memory_bytes: 16 * 1024 * 1024,
        }
    }
}

/// How often the budget hook runs once armed, in instructions: often
/// enough to stop a loop within microseconds.
const HOOK_EVERY: u32 = 1000;

const PRELUDE: &str = include_str!("sandbox.lua");

/// CPU time one call (or the script's top level) may use, on its thread's
/// CPU clock (cpu_clock.rs). The instruction budget bounds Lua code, but
/// one instruction (a `..` of two 8 MB strings, a C function such as
/// `table.insert` on a big table) can take milliseconds: this bounds what
/// many of them add up to. Far above what a real policy needs (tens of
/// microseconds), so only a runaway script ever meets it; CPU time, not
/// wall-clock time, so that a busy machine does not stop a call that only
/// waited for a core.
pub const TIME_LIMIT: Duration = Duration::from_secs(1);

/// Lines `log()` may write in one call (or the script's top level); the
/// rest of that call's lines are dropped. A policy that logs in a loop
/// otherwise spends its whole time limit writing (hundreds of MB).
pub const MAX_LOG_LINES_PER_CALL: u32 = 100;
/// Bytes of one `log()` line; longer lines are cut and end with `...`.
pub const MAX_LOG_LINE_BYTES: usize = 1024;
/// Lines `log()` may write per second, all VMs of the process together, so
/// that many sessions each logging their allowance cannot flood the log.
pub const MAX_LOG_LINES_PER_SECOND: u64 = 1000;

/// `log()` lines dropped since start (for `pcrf_policy_log_dropped_total`).
static LOG_DROPPED: AtomicU64 = AtomicU64::new(0);
/// The second (since `log_epoch`) the global count is for, and the count.
static LOG_SECOND: AtomicU64 = AtomicU64::new(0);
static LOG_IN_SECOND: AtomicU64 = AtomicU64::new(0);

fn log_epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// `log()` lines dropped since the process started.
pub fn log_dropped() -> u64 {
    LOG_DROPPED.load(Relaxed)
}

/// Takes one line from the process-wide allowance of this second; `Err`
/// with `true` for the first line refused in this second.
fn take_global_log_line() -> Result<(), bool> {
    let second = log_epoch().elapsed().as_secs() + 1;
    let current = LOG_SECOND.load(Relaxed);
    if current != second
        && LOG_SECOND
            .compare_exchange(current, second, Relaxed, Relaxed)
            .is_ok()
    {
        LOG_IN_SECOND.store(0, Relaxed);
    }
    let n = LOG_IN_SECOND.fetch_add(1, Relaxed) + 1;
    if n <= MAX_LOG_LINES_PER_SECOND {
        Ok(())
    } else {
        Err(n == MAX_LOG_LINES_PER_SECOND + 1)
    }
}

/// The text of one `log()` line: the arguments joined by tabs, cut at
/// `MAX_LOG_LINE_BYTES` without converting more of a long string than that.
fn log_line(args: &[Value]) -> String {
    let mut line = Vec::with_capacity(128);
    for (n, v) in args.iter().enumerate() {
        if n > 0 {
            line.push(b'\t');
        }
        let room = MAX_LOG_LINE_BYTES + 1 - line.len().min(MAX_LOG_LINE_BYTES + 1);
        match v {
            Value::String(s) => {
                let b = s.as_bytes();
                line.extend_from_slice(&b[..b.len().min(room)]);
            }
            other => {
                let t = other.to_string().unwrap_or_default();
                line.extend_from_slice(&t.as_bytes()[..t.len().min(room)]);
            }
        }
        if line.len() > MAX_LOG_LINE_BYTES {
            break;
        }
    }
    if line.len() > MAX_LOG_LINE_BYTES {
        line.truncate(MAX_LOG_LINE_BYTES);
        let mut text = String::from_utf8_lossy(&line).into_owned();
        text.push_str("...");
        text
    } else {
        String::from_utf8_lossy(&line).into_owned()
    }
}

/// Why a call was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Instructions,
    Time,
}

/// The budget shared by the hook and the `pcall` wrappers.
struct Budget {
    left: Cell<i64>,
    /// On this thread's CPU clock (`thread_cpu`).
    deadline: Cell<Duration>,
    exceeded: Cell<Option<Stop>>,
    limit: u64,
    /// `log()` lines this call wrote or dropped.
    logged: Cell<u32>,
}

impl Budget {
    /// A full budget for the call starting now.
    fn reset(&self) {
        self.left.set(self.limit as i64);
        self.deadline.set(thread_cpu() + TIME_LIMIT);
        self.exceeded.set(None);
        self.logged.set(0);
    }

    fn message(&self) -> Option<String> {
        self.exceeded.get().map(|stop| match stop {
            Stop::Instructions => budget_message(self.limit),
            Stop::Time => format!(
                "time limit of {} ms of CPU exceeded",
                TIME_LIMIT.as_millis()
            ),
        })
    }
}

/// Largest payload of one policy notification, as JSON.
pub const MAX_NOTIFICATION_BYTES: usize = 16 * 1024;

/// A notification a decision asked for with `notify(name, payload)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Notification {
    pub name: String,
    pub payload: serde_json::Value,
}

/// A VM with the script loaded and sealed, ready for `decide` calls.
pub struct Vm {
    lua: Lua,
    decide: Function,
    /// What the script's top level defined, over the prelude's library
    /// (optional hooks such as `authorize_media` are looked up here).
    defs: Table,
    /// Hands over what `notify()` collected since the last call.
    take_notes: Function,
    budget: Rc<Budget>,
    /// The budget hook, off until the watchdog arms it during a long call.
    armed: Box<Armed>,
    chunk: String,
    version: u64,
    memory_bytes: usize,
}

pub(super) fn serialize_options() -> SerializeOptions {
    SerializeOptions::new()
        .set_array_metatable(false)
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false)
}

pub(super) fn deserialize_options() -> DeserializeOptions {
    DeserializeOptions::new()
        .deny_recursive_tables(true)
        .deny_unsupported_types(true)
}

impl Vm {
    /// Compiles `source` (named `chunk` in messages) and runs its top level
    /// in a fresh sandbox. Fails on syntax errors, top-level errors, a
    /// missing `decide`, or limits that this Lua build cannot enforce.
    pub fn build(
        source: &str,
        chunk: &str,
        limits: Limits,
        version: u64,
    ) -> Result<Vm, PolicyError> {
        let libs =
            StdLib::ALL_SAFE & !(StdLib::IO | StdLib::OS | StdLib::PACKAGE | StdLib::COROUTINE);
        let lua = Lua::new_with(libs, LuaOptions::new())
            .map_err(|e| PolicyError::Setup(e.to_string()))?;
        let budget = Rc::new(Budget {
            left: Cell::new(limits.instructions as i64),
            deadline: Cell::new(thread_cpu() + TIME_LIMIT),
            exceeded: Cell::new(None),
            limit: limits.instructions,
            logged: Cell::new(0),
        });
        let setup = |e: mlua::Error| PolicyError::Setup(e.to_string());

        let hook_budget = budget.clone();
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| {
                let left = hook_budget.left.get() - i64::from(HOOK_EVERY);
                hook_budget.left.set(left);
                if left < 0 {
                    hook_budget.exceeded.set(Some(Stop::Instructions));
                } else if thread_cpu() > hook_budget.deadline.get() {
                    hook_budget.exceeded.set(Some(Stop::Time));
                }
                match hook_budget.message() {
                    Some(m) => Err(mlua::Error::RuntimeError(m)),
                    None => Ok(VmState::Continue),
                }
            },
        )
        .map_err(setup)?;
        let armed = watchdog::take_over(&lua, HOOK_EVERY).map_err(setup)?;

        let flag_budget = budget.clone();
        let exceeded = lua
            .create_function(move |_, ()| Ok(flag_budget.message()))
            .map_err(setup)?;
        let chunk_for_log = chunk.to_string();
        let log_budget = budget.clone();
        let log = lua
            .create_function(move |_, args: mlua::Variadic<Value>| {
                let n = log_budget.logged.get().saturating_add(1);
                log_budget.logged.set(n);
                if n > MAX_LOG_LINES_PER_CALL {
                    LOG_DROPPED.fetch_add(1, Relaxed);
                    if n == MAX_LOG_LINES_PER_CALL + 1 {
                        tracing::warn!(target: "pcrf::policy::script", policy = %chunk_for_log,
                            "policy log(): more than {MAX_LOG_LINES_PER_CALL} lines in one call, \
                             the rest of this call's lines are dropped \
                             (counted in pcrf_policy_log_dropped_total)");
                    }
                    return Ok(());
                }
                if let Err(first) = take_global_log_line() {
                    LOG_DROPPED.fetch_add(1, Relaxed);
                    if first {
                        tracing::warn!(target: "pcrf::policy::script", policy = %chunk_for_log,
                            "policy log(): more than {MAX_LOG_LINES_PER_SECOND} lines this second, \
                             the rest of this second's lines are dropped \
                             (counted in pcrf_policy_log_dropped_total)");
                    }
                    return Ok(());
                }
                tracing::info!(target: "pcrf::policy::script", policy = %chunk_for_log, "{}", log_line(&args));
                Ok(())
            })
            .map_err(setup)?;
        let (env, defs, seal, take_notes): (Table, Table, Function, Function) = lua
            .load(PRELUDE)
            .set_name("=sandbox")
            .call((exceeded, log))
            .map_err(setup)?;

        // The limit is on while operator code runs: here for the top level,
        // in `decide` around the call. Checked now so an unsupported build
        // fails at load, not per call.
        if limits.memory_bytes > 0 {
            lua.set_memory_limit(limits.memory_bytes).map_err(|e| {
                PolicyError::Setup(format!("memory limit not available in this Lua build: {e}"))
            })?;
        }

        let name = format!("={chunk}");
        let main = lua
            .load(source)
            .set_name(name)
            .set_mode(ChunkMode::Text)
            .set_environment(env)
            .into_function()
            .map_err(|e| {
                let message = lua_message(&e);
                PolicyError::Syntax {
                    line: line_in(&message, chunk),
                    message,
                }
            })?;
        budget.reset();
        let watch = watchdog::watch(&armed);
        let ran = main.call::<()>(());
        drop(watch);
        ran.map_err(|e| {
            let message = lua_message(&e);
            PolicyError::Invalid {
                line: line_in(&message, chunk),
                message: format!("top-level code failed: {message}"),
            }
        })?;
        seal.call::<()>(()).map_err(setup)?;
        lift_memory_limit(&lua);
        let decide = match defs.raw_get::<Value>("decide").map_err(setup)? {
            Value::Function(f) => f,
            other => {
                return Err(PolicyError::Invalid {
                    message: format!(
                        "the policy must define a global function decide(input), found {}",
                        other.type_name()
                    ),
                    line: None,
                })
            }
        };
        // Every decision makes a dozen tables that die when it returns:
        // the generational collector frees them in minor collections
        // instead of marking the whole heap (the script's own tables) in
        // each incremental cycle.
        lua.gc_set_mode(GcMode::Generational(GcGenParams::default()));
        Ok(Vm {
            lua,
            decide,
            defs,
            take_notes,
            budget,
            armed,
            chunk: chunk.to_string(),
            version,
            memory_bytes: limits.memory_bytes,
        })
    }

    /// The script version this VM was built from.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Runs `decide(input)` with a fresh input table and a full budget.
    /// Any failure (Lua error, budget, memory, a return value that is not a
    /// Decision, or a decision with a field out of range: see
    /// `Decision::check`) is a `PolicyError::Runtime`.
    pub fn decide(&self, input: &PolicyInput) -> Result<Decision, PolicyError> {
        // The input table is built with the memory limit off (see
        // `call_table`): bound it here, so that an oversized profile is an
        // error that names it rather than a script that fails for want of
        // memory on its first allocation.
        let attributes = input.subscriber.view().attributes;
        if !attributes.is_empty() {
            let cost = input_table::attributes_cost(attributes);
            let bound = self.input_bound();
            if cost > bound {
                return Err(PolicyError::Runtime {
                    message: format!(
                        "input too large: the subscriber's attributes would take about {cost} bytes \
                         in Lua, more than the {bound} allowed (a quarter of the policy memory \
                         limit); shrink the profile's attributes"
                    ),
                    line: None,
                });
            }
        }
        // Whatever an earlier call (that failed, or a hook) collected is not
        // this decision's.
        let _ = self.take_notes.call::<Value>(());
        let d: Decision = self.call_table(
            &self.decide,
            "decide",
            "decision",
            |lua| input_table::build(lua, input, serialize_options()),
            read_decision,
        )?;
        d.check().map_err(|e| PolicyError::Runtime {
            message: format!("decide returned an unusable decision: {e}"),
            line: None,
        })?;
        Ok(d)
    }

    /// The notifications `notify()` asked for during the last `decide`
    /// (call right after it): names checked, payloads as JSON objects.
    pub fn take_notifications(&self) -> Result<Vec<Notification>, PolicyError> {
        let taken: Value = self.take_notes.call(()).map_err(|e| self.runtime(e))?;
        let Value::Table(list) = taken else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for note in list.sequence_values::<Table>() {
            let note = note.map_err(|e| self.runtime(e))?;
            let name: String = note.get("name").map_err(|e| self.runtime(e))?;
            if !crate::notify::event::valid_policy_name(&name) {
                return Err(PolicyError::Runtime {
                    message: format!(
                        "notify: name {name:?} must be 1 to 64 letters, digits, '-', '_' or '.'"
                    ),
                    line: None,
                });
            }
            let payload: Value = note.get("payload").map_err(|e| self.runtime(e))?;
            let payload = match payload {
                Value::Nil => serde_json::Value::Object(Default::default()),
                v => {
                    let json: serde_json::Value = self
                        .lua
                        .from_value_with(v, deserialize_options())
                        .map_err(|e| PolicyError::Runtime {
                            message: format!(
                                "notify {name:?}: payload is not JSON: {}",
                                lua_message(&e)
                            ),
                            line: None,
                        })?;
                    match whole_floats_to_integers(json) {
                        // An empty Lua table reads as a list.
                        serde_json::Value::Array(a) if a.is_empty() => {
                            serde_json::Value::Object(Default::default())
                        }
                        other => other,
                    }
                }
            };
            if serde_json::to_vec(&payload).map_or(0, |b| b.len()) > MAX_NOTIFICATION_BYTES {
                return Err(PolicyError::Runtime {
                    message: format!(
                        "notify {name:?}: payload larger than {MAX_NOTIFICATION_BYTES} bytes"
                    ),
                    line: None,
                });
            }
            out.push(Notification { name, payload });
        }
        Ok(out)
    }

    /// Runs the optional hook `name(input)` the script defines, or the
    /// prelude's `default_<name>` when it does not, under the same budget
    /// and memory limit as `decide`; the returned table is read as `O`.
    pub fn call_hook<I: serde::Serialize, O: serde::de::DeserializeOwned>(
        &self,
        name: &str,
        input: &I,
    ) -> Result<O, PolicyError> {
        let f = match self
            .defs
            .raw_get::<Value>(name)
            .map_err(|e| self.runtime(e))?
        {
            Value::Function(f) => f,
            Value::Nil => self
                .defs
                .get::<Function>(format!("default_{name}"))
                .map_err(|e| self.runtime(e))?,
            other => {
                return Err(PolicyError::Runtime {
                    message: format!("{name} must be a function, found {}", other.type_name()),
                    line: None,
                })
            }
        };
        self.call_table(
            &f,
            name,
            "value",
            |lua| lua.to_value_with(input, serialize_options()),
            |_, _| None,
        )
    }

    /// Most bytes the input's subscriber attributes may take in Lua: a
    /// quarter of the memory limit leaves the script the rest; without a
    /// limit, that of the default one.
    fn input_bound(&self) -> usize {
        let memory = match self.memory_bytes {
            0 => Limits::default().memory_bytes,
            m => m,
        };
        memory / 4
    }

    /// A Lua error as a runtime error, with the script line it names.
    fn runtime(&self, e: mlua::Error) -> PolicyError {
        let message = lua_message(&e);
        PolicyError::Runtime {
            line: line_in(&message, &self.chunk),
            message,
        }
    }

    /// Calls `f(input)` with a full budget and the memory limit, and reads
    /// the table it returns as `O` (`name` and `what` word the errors);
    /// `input` makes the argument; `plain` reads the common shape of `O`
    /// without serde, or answers `None` for serde to read it.
    fn call_table<O: serde::de::DeserializeOwned>(
        &self,
        f: &Function,
        name: &str,
        what: &str,
        input: impl FnOnce(&Lua) -> mlua::Result<Value>,
        plain: impl FnOnce(&Lua, &Value) -> Option<O>,
    ) -> Result<O, PolicyError> {
        self.budget.reset();
        let arg = input(&self.lua).map_err(|e| self.runtime(e))?;
        // The memory limit applies to the script only. With a limit set,
        // mlua makes every table write from Rust a protected call: the
        // conversions in and out cost 40% more per decision. Their size is
        // bounded by the server's input and by what the script already built.
        if self.memory_bytes > 0 {
            let _ = self.lua.set_memory_limit(self.memory_bytes);
        }
        let watch = watchdog::watch(&self.armed);
        let ret = f.call::<Value>(arg);
        drop(watch);
        lift_memory_limit(&self.lua);
        let ret = ret.map_err(|e| self.runtime(e))?;
        if !ret.is_table() {
            return Err(PolicyError::Runtime {
                message: format!("{name} must return a table, returned {}", ret.type_name()),
                line: None,
            });
        }
        if let Some(v) = plain(&self.lua, &ret) {
            return Ok(v);
        }
        let invalid = |message: String| PolicyError::Runtime {
            message: format!("{name} returned an invalid {what}: {message}"),
            line: None,
        };
        match self
            .lua
            .from_value_with::<O>(ret.clone(), deserialize_options())
        {
            Ok(v) => Ok(v),
            // Slow path, only for a value the fast path refused: Lua 5.4
            // arithmetic such as `dl * 1.5` yields floats, and a whole
            // number must not fail a session just for being a float (an
            // empty table stays an empty list on the fast path).
            Err(first) => {
                let json: serde_json::Value = self
                    .lua
                    .from_value_with(ret, deserialize_options())
                    .map_err(|_| invalid(lua_message(&first)))?;
                serde_json::from_value(whole_floats_to_integers(json))
                    .map_err(|e| invalid(e.to_string()))
            }
        }
    }

    /// Bytes the VM holds now.
    pub fn used_memory(&self) -> usize {
        self.lua.used_memory()
    }
}

fn lift_memory_limit(lua: &Lua) {
    // Only fails on builds without memory control, where no limit was set.
    let _ = lua.set_memory_limit(0);
}

/// Turns every float with no fractional part into an integer.
fn whole_floats_to_integers(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        J::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f >= 0.0 && f < u64::MAX as f64 => {
                J::from(f as u64)
            }
            Some(f) if n.is_f64() && f.fract() == 0.0 && f < 0.0 && f >= i64::MIN as f64 => {
                J::from(f as i64)
            }
            _ => J::Number(n),
        },
        J::Array(a) => J::Array(a.into_iter().map(whole_floats_to_integers).collect()),
        J::Object(o) => J::Object(
            o.into_iter()
                .map(|(k, v)| (k, whole_floats_to_integers(v)))
                .collect(),
        ),
        other => other,
    }
}

fn budget_message(limit: u64) -> String {
    format!("instruction budget of {limit} exceeded")
}

/// The message of a Lua error with its traceback, without mlua's wrapping.
fn lua_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::RuntimeError(m) | mlua::Error::MemoryError(m) => m.clone(),
        mlua::Error::CallbackError { traceback, cause } => {
            format!("{}\n{traceback}", lua_message(cause))
        }
        mlua::Error::WithContext { context, cause } => format!("{context}: {}", lua_message(cause)),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = "function decide(input) return { rules = { 'internet' } } end\n";

    fn vm(source: &str) -> Result<Vm, PolicyError> {
        Vm::build(source, "t.lua", Limits::default(), 7)
    }

    /// Builds a VM whose decide runs `body` and returns its error text.
    fn run_err(body: &str) -> String {
        let src = format!("function decide(input)\n{body}\nreturn {{}}\nend\n");
        let vm = vm(&src).expect("script loads");
        match vm.decide(&PolicyInput::default()) {
            Err(e) => e.to_string(),
            Ok(d) => panic!("expected an error from {body:?}, got {d:?}"),
        }
    }

    /// Evaluates a Lua expression inside decide and returns it as a string.
    fn eval(expr: &str) -> String {
        let src =
            format!("function decide(input)\nreturn {{ rules = {{ tostring({expr}) }} }}\nend\n");
        let d = vm(&src)
            .expect("loads")
            .decide(&PolicyInput::default())
            .expect("runs");
        d.rules[0].clone()
    }

    #[test]
    fn decides_and_sees_input() {
        let src = "function decide(input)\n\
                   return { rules = { input.subscriber.plan, input.session.apn or 'none' },\n\
                   apn_ambr = { ul = 1000, dl = 2000 }, event_triggers = { 2, 13 } }\nend\n";
        let mut input = PolicyInput::default();
        input.subscriber.fields_mut().plan = Some("gold".into());
        let d = vm(src).expect("loads").decide(&input).expect("runs");
        assert_eq!(d.rules, vec!["gold".to_string(), "none".to_string()]);
        assert_eq!(d.apn_ambr.map(|a| (a.ul, a.dl)), Some((1000, 2000)));
        assert_eq!(d.event_triggers, vec![2, 13]);
    }

    #[test]
    fn whole_floats_are_integers_fractions_are_errors() {
        let src = "function decide(input)\n  return { apn_ambr = { ul = 2e6, dl = 20000000 * 1.5 }, revalidation_secs = 3600.0 }\nend\n";
        let d = vm(src)
            .expect("loads")
            .decide(&PolicyInput::default())
            .expect("runs");
        assert_eq!(
            d.apn_ambr.map(|a| (a.ul, a.dl)),
            Some((2_000_000, 30_000_000))
        );
        assert_eq!(d.revalidation_secs, Some(3600));
        let src = "function decide(input) return { apn_ambr = { ul = 2.5, dl = 1 } } end";
        let err = vm(src)
            .expect("loads")
            .decide(&PolicyInput::default())
            .expect_err("fraction");
        assert!(err.to_string().contains("invalid decision"), "{err}");
    }

    #[test]
    fn empty_tables_and_nil_fields_deserialize() {
        let src = "function decide(input) return { rules = {}, definitions = {}, event_triggers = {} } end";
        let d = vm(src)
            .expect("loads")
            .decide(&PolicyInput::default())
            .expect("runs");
        assert_eq!(d, Decision::default());
    }

    #[test]
    fn syntax_error_reports_line() {
        let err = vm("function decide(input)\n  local x = \n  return {}\nend\n")
            .err()
            .expect("error");
        assert!(
            matches!(err, PolicyError::Syntax { line: Some(3), .. }),
            "{err}"
        );
        assert!(err.to_string().contains("t.lua:3:"), "{err}");
    }

    #[test]
    fn missing_decide_is_refused() {
        let err = vm("local x = 1\n").err().expect("error");
        assert!(err.to_string().contains("decide(input)"), "{err}");
        let err = vm("decide = 5\n").err().expect("error");
        assert!(err.to_string().contains("found integer"), "{err}");
    }

    #[test]
    fn runtime_error_has_line_and_traceback() {
        let src = "local function helper(x)\n  return x.missing.field\nend\nfunction decide(input)\n  local d = helper(input)\n  return d\nend\n";
        let err = vm(src)
            .expect("loads")
            .decide(&PolicyInput::default())
            .expect_err("error");
        assert_eq!(err.line(), Some(2), "{err}");
        let text = err.to_string();
        assert!(text.contains("stack traceback"), "{text}");
        assert!(text.contains("t.lua:5"), "{text}");
    }

    #[test]
    fn bad_return_value_is_an_error() {
        let e = vm("function decide() return 5 end")
            .expect("loads")
            .decide(&PolicyInput::default());
        assert!(e
            .expect_err("error")
            .to_string()
            .contains("must return a table"));
        let e = vm("function decide() return { rulez = {} } end")
            .expect("loads")
            .decide(&PolicyInput::default());
        assert!(e.expect_err("error").to_string().contains("rulez"));
        let e = vm("function decide() return { apn_ambr = { ul = -1, dl = 1 } } end")
            .expect("loads")
            .decide(&PolicyInput::default());
        assert!(e.is_err());
    }

    #[test]
    fn no_io_os_package_debug_or_loaders() {
        for name in [
            "io",
            "os",
            "package",
            "require",
            "debug",
            "load",
            "loadstring",
            "dofile",
            "loadfile",
            "collectgarbage",
            "print",
            "coroutine",
            "setfenv",
            "getfenv",
            "module",
        ] {
            assert_eq!(eval(&format!("type({name})")), "nil", "{name} is reachable");
        }
        assert!(run_err("os.execute('touch /tmp/pwned')").contains("attempt to index a nil value"));
        assert!(run_err("io.open('/etc/passwd')").contains("nil"));
        assert!(run_err("require('os')").contains("nil"));
        // Nothing in the whitelist leads back to the real globals.
        assert_eq!(eval("_G == _ENV"), "true");
        assert_eq!(eval("type(_G.io)"), "nil");
        assert_eq!(eval("math.random"), "nil");
    }

    #[test]
    fn no_bytecode() {
        assert_eq!(eval("string.dump"), "nil");
        assert_eq!(eval("('').dump"), "nil");
        // A binary chunk given as the script itself is refused.
        let lua = Lua::new();
        let f = lua.load("return 1").into_function().expect("compiles");
        let bytes = f.dump(false);
        let src = String::from_utf8_lossy(&bytes).into_owned();
        assert!(vm(&src).is_err());
    }

    #[test]
    fn shared_metatables_are_locked() {
        assert_eq!(eval("getmetatable('')"), "locked");
        assert!(run_err("getmetatable('').__index.upper = nil")
            .contains("attempt to index a nil value"));
        assert!(run_err("string.upper = function() return 'x' end")
            .contains("read-only library 'string'"));
        assert!(run_err("rawset(string, 'upper', 1)").contains("read-only"));
        assert!(run_err("setmetatable(string, {})").contains("protected metatable"));
        assert!(run_err("math.pi = 3").contains("read-only library 'math'"));
        // Iteration works and still hides the real table.
        assert_eq!(eval("(function() local n = 0 for _ in pairs(string) do n = n + 1 end return n > 10 end)()"), "true");
        assert_eq!(eval("select(2, pairs(string)) == string"), "true");
    }

    #[test]
    fn globals_are_read_only_after_load() {
        let src =
            "counter = 0\nfunction decide(input)\n  counter = counter + 1\n  return {}\nend\n";
        let err = vm(src)
            .expect("loads")
            .decide(&PolicyInput::default())
            .expect_err("error");
        assert!(
            err.to_string().contains("assignment to global 'counter'"),
            "{err}"
        );
        assert!(run_err("newglobal = 1").contains("assignment to global 'newglobal'"));
        assert!(run_err("rawset(_ENV, 'x', 1)").contains("read-only"));
        assert!(run_err("decide = nil").contains("assignment to global 'decide'"));
        assert_eq!(eval("getmetatable(_ENV)"), "locked");
    }

    #[test]
    fn input_table_is_fresh_each_call() {
        let src = "function decide(input)\n\
                   local seen = input.session.installed[1] or 'clean'\n\
                   input.session.installed[1] = 'dirty'\n\
                   input.subscriber.plan = 'hacked'\n\
                   return { rules = { seen } }\nend\n";
        let vm = vm(src).expect("loads");
        let input = PolicyInput::default();
        for _ in 0..2 {
            assert_eq!(
                vm.decide(&input).expect("runs").rules,
                vec!["clean".to_string()]
            );
        }
    }

    #[test]
    fn infinite_loop_is_stopped() {
        assert!(run_err("while true do end").contains("instruction budget"));
        // pcall cannot swallow the budget error.
        assert!(
            run_err("while true do pcall(function() while true do end end) end")
                .contains("instruction budget")
        );
        assert!(run_err(
            "while true do xpcall(function() while true do end end, function(e) return e end) end"
        )
        .contains("instruction budget"));
        // The next call has a fresh budget.
        let vm = vm("n = 0\nfunction decide(input) local i = 0 while i < 100000 do i = i + 1 end return {} end").expect("loads");
        for _ in 0..3 {
            assert!(vm.decide(&PolicyInput::default()).is_ok());
        }
    }

    /// A VM for `src` whose script may call `hooked()`: whether the
    /// budget hook is armed at that moment.
    fn probed(src: &str) -> Vm {
        let vm = vm(src).expect("loads");
        let armed: *const Armed = &*vm.armed;
        let hooked = vm
            .lua
            // SAFETY (test): the VM, and so `armed`, outlives every call.
            .create_function(move |_, ()| Ok(unsafe { (*armed).is_armed() }))
            .expect("function");
        vm.defs.raw_set("hooked", hooked).expect("set");
        vm
    }

    /// The budget hook is off while a short call runs and after it.
    #[test]
    fn short_calls_run_without_the_hook() {
        let vm = probed("function decide(input) return { rules = { tostring(hooked()) } } end");
        assert!(!vm.armed.is_armed());
        for _ in 0..3 {
            let d = vm.decide(&PolicyInput::default()).expect("runs");
            assert_eq!(d.rules, vec!["false".to_string()]);
            assert!(!vm.armed.is_armed());
        }
    }

    /// A call that runs past `ARM_AFTER` gets the hook armed by the
    /// watchdog while it runs (not at its start), and it is off again
    /// once the call returns.
    #[test]
    fn the_watchdog_arms_the_hook_in_a_long_call() {
        let vm = probed(
            "function decide(input)\n\
             local spins = 0\n\
             while not hooked() do spins = spins + 1 end\n\
             return { rules = { tostring(spins) } }\nend\n",
        );
        let d = vm.decide(&PolicyInput::default()).expect("runs");
        let spins: u64 = d.rules[0].parse().expect("a count");
        assert!(
            spins > 0,
            "armed at the start of the call: no per-thread timer?"
        );
        assert!(!vm.armed.is_armed());
        // The next short call runs without it.
        let vm2 = probed("function decide(input) return { rules = { tostring(hooked()) } } end");
        assert_eq!(
            vm2.decide(&PolicyInput::default()).expect("runs").rules,
            vec!["false".to_string()]
        );
    }

    /// Loops that make no call and allocate nothing are stopped too: the
    /// armed hook reaches a running loop (jumps and tail calls check it).
    #[test]
    fn loops_without_calls_are_stopped_by_the_watchdog() {
        for body in [
            "while true do end",
            "repeat local x = 1 until false",
            "for i = 1, math.maxinteger do end",
            "::again:: goto again",
            "local function f(n) return f(n + 1) end\ndo return f(1) end",
        ] {
            let err = run_err(body);
            assert!(err.contains("instruction budget"), "{body}: {err}");
        }
        // The VM serves a good call after each (the engine drops a failed
        // VM; the sandbox itself stays usable too).
        let vm = vm("function decide(input) if input.network.congestion > 0 then while true do end end return { rules = { 'ok' } } end").expect("loads");
        let mut busy = PolicyInput::default();
        busy.network.congestion = 1;
        assert!(vm.decide(&busy).is_err());
        assert_eq!(
            vm.decide(&PolicyInput::default()).expect("runs").rules,
            vec!["ok".to_string()]
        );
    }

    #[test]
    fn top_level_infinite_loop_is_stopped() {
        let err = vm("while true do end\nfunction decide() return {} end")
            .err()
            .expect("error");
        assert!(err.to_string().contains("instruction budget"), "{err}");
    }

    #[test]
    fn runaway_memory_is_stopped() {
        // Large pieces, so that the limit is met in a few hundred steps
        // even in a slow (debug) build, well before the CPU-time limit
        // (which a loaded machine does not bring closer: it counts CPU).
        let err = run_err("local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 100000) .. i end");
        assert!(
            err.contains("memory") || err.contains("instruction budget"),
            "{err}"
        );
        let err = run_err("local s = string.rep('x', 64 * 1024 * 1024)");
        assert!(err.contains("memory"), "{err}");
    }

    /// A profile as large as provisioning accepts, in the shape that makes
    /// the most Lua values per byte, is still decided by the script.
    #[test]
    fn largest_accepted_profile_is_decided() {
        use crate::subscriber::{Subscriber, MAX_PROFILE_BYTES};
        let mut s = Subscriber {
            imsi: "001010123456789".into(),
            ..Default::default()
        };
        let zeros = vec![serde_json::json!(0); MAX_PROFILE_BYTES / 2 - 64];
        s.attributes.insert("list".into(), serde_json::json!(zeros));
        s.validate().expect("within the profile limit");
        let mut input = PolicyInput::default();
        input.subscriber.fields_mut().attributes = s.attributes;
        let src = "function decide(input)\n\
                   return { rules = { tostring(#input.subscriber.attributes.list) } }\nend\n";
        let d = vm(src).expect("loads").decide(&input).expect("decided");
        assert_eq!(d.rules, vec![(MAX_PROFILE_BYTES / 2 - 64).to_string()]);
    }

    /// An attribute larger than the script's memory could hold is an
    /// error naming the attributes, not an out-of-memory in the script.
    #[test]
    fn oversized_input_is_a_clear_error() {
        let mut input = PolicyInput::default();
        input
            .subscriber
            .fields_mut()
            .attributes
            .insert("blob".into(), serde_json::json!("x".repeat(16 << 20)));
        let vm = vm(OK).expect("loads");
        let started = Instant::now();
        let err = vm.decide(&input).expect_err("too large").to_string();
        eprintln!("oversized input refused in {:?}", started.elapsed());
        assert!(
            err.contains("input too large") && err.contains("attributes"),
            "{err}"
        );
    }

    /// Collects what a tracing subscriber writes.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut v) = self.0.lock() {
                v.extend_from_slice(buf);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    impl Captured {
        fn text(&self) -> String {
            self.0
                .lock()
                .map(|v| String::from_utf8_lossy(&v).into_owned())
                .unwrap_or_default()
        }
    }

    /// `log()` in an endless loop writes at most its per-call allowance of
    /// short lines, says once that it dropped the rest, counts them, and the
    /// loop still ends on the instruction budget, well within the CPU-time
    /// limit (the call is not spent writing); many such calls together stay
    /// within the per-second allowance.
    #[test]
    fn log_flood_is_bounded() {
        let cap = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(cap.clone())
            .with_ansi(false)
            .finish();
        let src = "local big = string.rep('y', 100000)\n\
                   function decide(input)\n\
                   local i = 0 while true do i = i + 1 log('line', i, big) end\nend\n";
        let vm_of = |src: &str| vm(src).expect("loads");
        let vm = vm_of(src);
        let dropped = log_dropped();
        tracing::subscriber::with_default(subscriber, || {
            // The CPU this thread used, as the sandbox's time limit counts
            // it: wall-clock time would count whatever else the machine runs.
            let started = thread_cpu();
            let err = vm.decide(&PolicyInput::default()).expect_err("stopped");
            assert!(err.to_string().contains("instruction budget"), "{err}");
            let took = thread_cpu() - started;
            let text = cap.text();
            let lines: Vec<&str> = text.lines().filter(|l| l.contains(": line\t")).collect();
            eprintln!(
                "log flood: {} lines, {} bytes written in {took:?} of CPU",
                lines.len(),
                text.len()
            );
            assert!(took < TIME_LIMIT, "{took:?}");
            assert!(
                !lines.is_empty() && lines.len() <= MAX_LOG_LINES_PER_CALL as usize,
                "{} lines",
                lines.len()
            );
            assert!(lines.iter().all(|l| l.len() < MAX_LOG_LINE_BYTES + 256));
            assert!(lines[0].contains("yyy... "), "{}", lines[0]);
            assert_eq!(text.matches("lines in one call").count(), 1, "{text}");
            assert!(log_dropped() - dropped > 1000);

            // Calls that each log just over their allowance, quickly: 30
            // calls could write 3000 lines; those that fall within two
            // one-second windows of the allowance write at most two
            // windows' worth. The windows are wall-clock seconds, so a
            // try whose calls a busy machine spread over more is repeated.
            let burst = vm_of(
                "function decide(input) for i = 1, 150 do log('line', i) end return {} end\n",
            );
            let written = || {
                cap.text()
                    .lines()
                    .filter(|l| l.contains(": line\t"))
                    .count()
            };
            let mut checked = false;
            for _ in 0..10 {
                let before = written();
                let first_second = log_epoch().elapsed().as_secs();
                for _ in 0..30 {
                    burst.decide(&PolicyInput::default()).expect("decides");
                }
                if log_epoch().elapsed().as_secs() > first_second + 1 {
                    continue;
                }
                let n = written() - before;
                assert!(
                    n <= 2 * MAX_LOG_LINES_PER_SECOND as usize + MAX_LOG_LINES_PER_CALL as usize,
                    "{n} lines"
                );
                checked = true;
                break;
            }
            assert!(checked, "no try of 30 calls fitted in two seconds");
        });
    }

    #[test]
    fn finalizers_and_weak_tables_are_refused() {
        assert!(run_err("setmetatable({}, { __gc = function() end })").contains("__gc"));
        assert!(run_err("setmetatable({}, { __mode = 'k' })").contains("__mode"));
        // Ordinary metatables still work.
        assert_eq!(
            eval("setmetatable({}, { __index = function() return 4 end }).x"),
            "4"
        );
    }

    #[test]
    fn default_policy_vm_is_small() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/default.lua");
        let src = std::fs::read_to_string(path).expect("default.lua");
        let vm = Vm::build(&src, "default.lua", Limits::default(), 1).expect("loads");
        vm.decide(&PolicyInput::default()).expect("runs");
        let used = vm.used_memory();
        println!("default.lua VM: {used} bytes");
        assert!(used < 512 * 1024, "{used} bytes");
    }

    #[test]
    fn ok_script_runs() {
        let d = vm(OK)
            .expect("loads")
            .decide(&PolicyInput::default())
            .expect("runs");
        assert_eq!(d.rules, vec!["internet".to_string()]);
    }
}

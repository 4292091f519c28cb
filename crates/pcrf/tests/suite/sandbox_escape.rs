//! Attempts to escape the policy sandbox or exhaust the host, each through
//! the path the server loads a script by (`PolicyEngine::load` on a file,
//! which runs the top level and `decide` on the sample inputs): every one
//! must be refused with an error that says what was refused, quickly, and
//! leave the host untouched (no file created, a good policy still loads and
//! decides in the same process). The unit tests in `policy/sandbox.rs`
//! check what the environment contains; these check what an attacker does.

use pcrf::policy::{EngineConfig, Limits, PolicyEngine, PolicyError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Far above what the limits allow (the instruction budget stops a loop in
/// milliseconds); a load that takes this long was not stopped by them.
const HANG: Duration = Duration::from_secs(20);

static N: AtomicU64 = AtomicU64::new(0);

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "pcrf-sandbox-escape-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Loads `source` as the server does, on another thread so that a hang
/// fails this test instead of stalling the suite.
fn load(source: &str) -> Result<PolicyEngine, PolicyError> {
    let dir = scratch();
    let path = dir.join("policy.lua");
    std::fs::write(&path, source).expect("write policy");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let started = Instant::now();
        let r = PolicyEngine::load(EngineConfig {
            path,
            limits: Limits::default(),
            fallback: Default::default(),
        });
        let _ = tx.send((r, started.elapsed()));
    });
    let (r, took) = rx
        .recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("loading did not return within {HANG:?}:\n{source}"));
    assert!(took < HANG, "took {took:?}");
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// The script must be refused with an error containing `expect`, and the
/// process must still load and run a good policy.
fn refused(source: &str, expect: &str) -> String {
    let err = match load(source) {
        Ok(_) => panic!("loaded, expected a refusal mentioning {expect:?}:\n{source}"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains(expect),
        "error does not mention {expect:?}: {err}\n--- script:\n{source}"
    );
    host_still_works();
    err
}

/// `body` runs inside decide (so at validation, on the sample inputs).
fn refused_in_decide(body: &str, expect: &str) -> String {
    refused(
        &format!(
            "function decide(input)\ndo\n{body}\nend\nreturn {{ rules = {{ 'internet' }} }}\nend\n"
        ),
        expect,
    )
}

fn host_still_works() {
    let engine =
        load("function decide(input) return { rules = { 'internet', string.upper('x') } } end\n")
            .expect("a good policy still loads");
    let d = engine
        .evaluate(&pcrf::policy::PolicyInput::default())
        .expect("and decides");
    assert_eq!(d.rules, vec!["internet".to_string(), "X".to_string()]);
}

fn lua_str(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

#[test]
fn io_open_cannot_create_a_file() {
    let dir = scratch();
    let target = dir.join("pwned");
    refused(
        &format!(
            "local f = io.open({}, 'w')\nfunction decide() return {{}} end\n",
            lua_str(&target)
        ),
        "attempt to index a nil value (global 'io')",
    );
    refused_in_decide(
        &format!("io.open({}, 'w'):write('x')", lua_str(&target)),
        "global 'io'",
    );
    assert!(!target.exists(), "the script created a file");
}

#[test]
fn os_execute_cannot_run_a_command() {
    let dir = scratch();
    let target = dir.join("pwned");
    refused_in_decide(
        &format!("os.execute('touch ' .. {})", lua_str(&target)),
        "attempt to index a nil value (global 'os')",
    );
    refused_in_decide("os.exit(1)", "global 'os'");
    refused_in_decide("return os.getenv('HOME')", "global 'os'");
    assert!(!target.exists(), "the script ran a command");
}

#[test]
fn no_module_or_file_loaders() {
    refused_in_decide(
        "require('os')",
        "attempt to call a nil value (global 'require')",
    );
    refused_in_decide(
        "dofile('/etc/passwd')",
        "attempt to call a nil value (global 'dofile')",
    );
    refused_in_decide(
        "loadfile('/etc/passwd')",
        "attempt to call a nil value (global 'loadfile')",
    );
    refused_in_decide("package.loadlib('libc.so.6', 'system')", "global 'package'");
}

#[test]
fn no_bytecode_by_any_route() {
    refused_in_decide(
        "string.dump(decide)",
        "attempt to call a nil value (field 'dump')",
    );
    refused_in_decide("local s = (''):dump()", "method 'dump'");
    refused_in_decide(
        "load('\\27Lua', 'x', 'b')",
        "attempt to call a nil value (global 'load')",
    );
    refused_in_decide("load('return 1', 'x', 't')", "global 'load'");
    // A binary chunk as the script file itself: refused before it runs.
    let lua = mlua::Lua::new();
    let f = lua
        .load("function decide() return {} end")
        .into_function()
        .expect("compiles");
    let chunk = f.dump(false);
    let dir = scratch();
    let path = dir.join("policy.luac");
    std::fs::write(&path, &chunk).expect("write chunk");
    let err = PolicyEngine::load(EngineConfig {
        path,
        limits: Limits::default(),
        fallback: Default::default(),
    })
    .err()
    .expect("a binary chunk is refused")
    .to_string();
    assert!(
        err.contains("UTF-8") || err.contains("binary") || err.contains("attempt to load"),
        "{err}"
    );
}

#[test]
fn no_debug_library() {
    refused_in_decide(
        "debug.sethook()",
        "attempt to index a nil value (global 'debug')",
    );
    refused_in_decide("return debug.getregistry()", "global 'debug'");
    refused_in_decide("debug.setmetatable('', nil)", "global 'debug'");
}

#[test]
fn shared_metatables_cannot_be_changed() {
    // The string metatable is hidden behind "locked": its __index (the real
    // string library) is out of reach, so string methods stay intact.
    refused_in_decide(
        "getmetatable('').__index.upper = function() return 'pwned' end",
        "attempt to index a nil value",
    );
    refused_in_decide("setmetatable('', {})", "table expected, got string");
    refused_in_decide(
        "setmetatable(string, nil)",
        "cannot change a protected metatable",
    );
    refused_in_decide(
        "setmetatable(_G, {})",
        "cannot change a protected metatable",
    );
    refused_in_decide(
        "setmetatable(math, {})",
        "cannot change a protected metatable",
    );
    refused_in_decide("string.upper = nil", "read-only library 'string'");
    refused_in_decide("table.insert = print", "read-only library 'table'");
}

#[test]
fn rawset_cannot_write_globals_or_libraries() {
    refused_in_decide("rawset(_G, 'io', {})", "read-only");
    refused_in_decide("rawset(_ENV, 'decide', nil)", "read-only");
    refused_in_decide("rawset(string, 'upper', print)", "read-only");
    refused(
        "rawset(_G, 'x', 1)\nfunction decide() return {} end\n",
        "read-only",
    );
}

#[test]
fn no_collectgarbage_or_coroutines() {
    refused_in_decide("collectgarbage('stop')", "global 'collectgarbage'");
    // Coroutines are not in the sandbox, so they cannot be used to run a
    // loop the budget hook would not see.
    refused_in_decide(
        "coroutine.wrap(function() while true do end end)()",
        "attempt to index a nil value (global 'coroutine')",
    );
}

#[test]
fn env_tricks_reach_nothing() {
    // A new _ENV only holds what the script put there.
    refused_in_decide(
        "local _ENV = { x = 1 }\nreturn io.open('/etc/passwd')",
        "global 'io'",
    );
    // The environment's metatable is locked; its fields are a string's.
    refused_in_decide(
        "local real = getmetatable(_ENV).__index\nreturn real.io.open('/etc/passwd')",
        "attempt to index a nil value",
    );
    refused_in_decide("return _G._G._G.os.exit()", "field 'os'");
    // Replacing the chunk's _ENV upvalue leaves it with nothing.
    refused_in_decide("_ENV = nil\nreturn string.rep('x', 2)", "upvalue '_ENV'");
    refused_in_decide(
        "setmetatable(_ENV, nil)",
        "cannot change a protected metatable",
    );
}

#[test]
fn cpu_and_memory_bombs_are_stopped() {
    refused_in_decide("while true do end", "instruction budget");
    // Lua refuses a string of 2 GiB and more outright; below that, the
    // memory limit stops it.
    refused_in_decide(
        "local s = string.rep('x', 1 << 40)",
        "policy.lua:3: resulting string too large",
    );
    refused_in_decide(
        "local s = string.rep(string.rep('x', 1 << 20), 1 << 10)",
        "not enough memory",
    );
    let err = refused_in_decide(
        "local function f(n) return 1 + f(n + 1) end\nreturn f(1)",
        "",
    );
    assert!(
        err.contains("stack overflow")
            || err.contains("not enough memory")
            || err.contains("instruction budget"),
        "{err}"
    );
    // Recursion through C (gsub calling back into Lua).
    let err = refused_in_decide(
        "local function f() return (string.gsub('x', 'x', f)) end\nreturn f()",
        "",
    );
    assert!(
        err.contains("stack overflow") || err.contains("C stack"),
        "{err}"
    );
}

/// The budget hook is off until a call has run for a while (the watchdog
/// arms it): loops that call nothing and allocate nothing, which only that
/// hook can stop, are stopped all the same, and so is a loop that keeps
/// swallowing memory errors.
#[test]
fn loops_only_the_watchdog_can_reach_are_stopped() {
    refused_in_decide(
        "local function f(n) return f(n + 1) end\nreturn f(1)",
        "instruction budget",
    );
    refused_in_decide("::again:: goto again", "instruction budget");
    refused_in_decide(
        "local x = 0 repeat x = x + 1 until false",
        "instruction budget",
    );
    refused_in_decide(
        "while true do pcall(string.rep, 'x', 1 << 30) end",
        "instruction budget",
    );
}

#[test]
fn c_functions_cannot_loop_without_the_budget() {
    // Exponential backtracking in one string.find call: no instruction
    // runs while the matcher backtracks, so the budget hook never fires.
    refused_in_decide(
        "return string.find(string.rep('a', 30), ('a*'):rep(30) .. 'b')",
        "pattern too complex",
    );
    refused_in_decide(
        "return ('a'):rep(30):match(('a-'):rep(30) .. 'b')",
        "pattern too complex",
    );
    refused_in_decide(
        "for w in string.gmatch(string.rep('a', 40), ('a?'):rep(40) .. 'b') do end",
        "pattern too complex",
    );
    refused_in_decide(
        "return (string.gsub(string.rep('a', 30), ('a*'):rep(30) .. 'b', ''))",
        "pattern too complex",
    );
    // Quadratic plain search over megabytes.
    refused_in_decide(
        "local s = string.rep('a', 4000000)\nreturn s:find(string.rep('a', 2000000) .. 'b', 1, true)",
        "too complex",
    );
    // string.rep of an empty string loops n times in C, allocating nothing.
    let started = Instant::now();
    let engine = load(
        "function decide() return { rules = { 'r' .. string.rep('', 1 << 62) .. string.rep('', 1 << 62, '') } } end\n",
    )
    .expect("an empty repetition is an empty string");
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(engine);
    // table.move over a huge range of nils.
    refused_in_decide(
        "table.move({}, 1, math.maxinteger - 1, 1, {})",
        "table.move",
    );
    // Many calls each doing bounded C work add up: the time limit ends them.
    refused_in_decide(
        "local s = string.rep('x', 4000000)\nfor i = 1, 1e9 do local t = s .. i end",
        "time limit of 1000 ms of CPU exceeded",
    );
}

#[test]
fn ordinary_string_use_is_not_refused() {
    let engine = load(
        "function decide(input)\n\
         local apn = input.session.apn or ''\n\
         local a = apn:match('^(%w+)$') or 'none'\n\
         local n = select(2, ('10.45.0.2'):gsub('%d+', ''))\n\
         local first = string.find('pgw.localdomain', '.', 1, true)\n\
         local parts = {}\n\
         for p in ('a.b.c'):gmatch('[^.]+') do parts[#parts + 1] = p end\n\
         return { rules = { a, tostring(n), tostring(first), table.concat(parts, '-'), (string.rep('ab', 3, ',')) } }\n\
         end\n",
    )
    .expect("loads");
    let mut input = pcrf::policy::PolicyInput::default();
    input.session.apn = Some("internet".into());
    let d = engine.evaluate(&input).expect("decides");
    assert_eq!(
        d.rules,
        vec!["internet", "4", "4", "a-b-c", "ab,ab,ab"]
            .into_iter()
            .map(String::from)
            .collect::<Vec<_>>()
    );
}

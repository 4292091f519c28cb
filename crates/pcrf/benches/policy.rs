//! One policy decision with the shipped policy: Lua run vs memo skip. The
//! numbers in docs/policy.md (and the Lua 5.4 vs LuaJIT choice) come from here.

use criterion::{criterion_group, criterion_main, Criterion};
use pcrf::policy::engine::sample_inputs;
use pcrf::policy::{Decision, EngineConfig, Limits, PolicyEngine};
use std::hint::black_box;
use std::path::Path;

fn load(limits: Limits) -> Result<PolicyEngine, pcrf::policy::PolicyError> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/default.lua");
    PolicyEngine::load(EngineConfig {
        path,
        limits,
        fallback: Decision::default(),
    })
}

fn decide(c: &mut Criterion) {
    // The LuaJIT build cannot limit memory (see docs/policy.md); to compare
    // interpreters the main figures run without the limit.
    let engine = load(Limits {
        memory_bytes: 0,
        ..Limits::default()
    })
    .expect("policies/default.lua loads");
    let (_, mut input) = sample_inputs().remove(0);
    let mut subscriber = input.subscriber.view().to_fields();
    subscriber.services = vec!["vip".into()];
    input.subscriber = subscriber.into();
    let first = engine.decide(&input, None);
    assert!(first.error.is_none(), "{:?}", first.error);
    let prev = first.into_record(&input, 0);

    c.bench_function("decide/lua_run", |b| {
        b.iter(|| engine.decide(black_box(&input), None))
    });
    c.bench_function("decide/memo_skip", |b| {
        b.iter(|| engine.decide(black_box(&input), Some(black_box(&prev))))
    });
    // The production setting: with a memory limit every table write is a
    // protected call. Skipped where the limit is unavailable (LuaJIT).
    if let Ok(limited) = load(Limits::default()) {
        c.bench_function("decide/lua_run_memory_limit", |b| {
            b.iter(|| limited.decide(black_box(&input), None))
        });
    }
    // The fixed cost of any run (input tables in, decision out, budget):
    // a script that does nothing.
    let dir = std::env::temp_dir().join(format!("pcrf-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let trivial = dir.join("trivial.lua");
    std::fs::write(&trivial, "function decide(input) return {} end\n").expect("write");
    let bare = PolicyEngine::load(EngineConfig {
        path: trivial,
        limits: Limits {
            memory_bytes: 0,
            ..Limits::default()
        },
        fallback: Decision::default(),
    })
    .expect("trivial script loads");
    c.bench_function("decide/lua_run_trivial_script", |b| {
        b.iter(|| bare.decide(black_box(&input), None))
    });
    let _ = std::fs::remove_dir_all(&dir);
    c.bench_function("input_hash", |b| {
        b.iter(|| pcrf::policy::memo::input_hash(black_box(&input)))
    });
}

criterion_group!(benches, decide);
criterion_main!(benches);

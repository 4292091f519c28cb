//! What one open session costs in heap memory, counted (not timed): a
//! counting global allocator measures the bytes live after N sessions of
//! the shape a CCR-U leaves (benches/shared) are put in the session table,
//! each with its own subscriber, Session-Id and UE address as on a live
//! node, and splits them into the record and the table's indexes. Bytes
//! requested from the allocator, so the allocator's own rounding (a few
//! percent with mimalloc) comes on top; bench/goals.sh measures the whole
//! process's resident memory per open session.
//!
//!   cargo bench -p pcrf --bench session_memory            # N = 20000
//!   cargo bench --profile dev -p pcrf --bench session_memory  # same counts, quicker build
//!   PCRF_BENCH_SESSIONS=100000 cargo bench -p pcrf --bench session_memory

mod shared;
use pcrf::policy::validity::{AnyWord, UsageRange, UsageValidity};
use pcrf::session::{GxSession, SessionTable};
use pcrf::usage::{KeyGrant, MonitoringLevel, ServiceUnits};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::sync::Arc;

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Relaxed);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.load(Relaxed)
}

/// The size of the answer a session keeps after a CCR-U of the seed
/// scenario (what `cargo bench --bench gx_allocations` prints).
const CCA_U_BYTES: usize = 216;

/// The i-th session: its own subscriber, Session-Id and UE address.
fn session(i: u32) -> GxSession {
    let imsi = format!("00101{:010}", i);
    let mut s = shared::ccr_u_session(
        format!("pgw-1.bench.test;{};{}", 1_763_000_000 + i, i),
        imsi,
        1_763_000_000_000 + i64::from(i),
    );
    s.ue_ipv4 = Some(std::net::Ipv4Addr::from(0x0a00_0000 + i));
    // The answer as the server keeps it: in an allocation of its own size
    // (gx/service.rs copies it out of the larger buffer it was encoded in),
    // of the size of the CCA-U that answers the seed scenario's CCR-U
    // (216 bytes: `gx_allocations` prints it; a session that has had only
    // its CCR-I keeps the 584-byte CCA-I).
    s.last_answer = Some(bytes::Bytes::copy_from_slice(&[0x5a; CCA_U_BYTES]));
    // The session-level key a CCR-I is granted (config/usage.toml), its
    // name shared by every session as the server shares it.
    s.monitoring.keys.insert(
        pcrf::session::shared_text::shared("total"),
        KeyGrant {
            granted: ServiceUnits {
                total: Some(1_000_000_000),
                ..Default::default()
            },
            level: MonitoringLevel::Session,
            granted_ms: 1_763_000_000_000,
            reported_octets: 0,
        },
    );
    // As a CCR-U leaves it: the record is a clone of the one before, and a
    // clone holds the keys without the room an insert reserved.
    s.monitoring = s.monitoring.clone();
    s
}

/// Heap bytes `make` allocates and keeps in what it returns.
fn heap_of<T>(make: impl FnOnce() -> T) -> isize {
    let before = live();
    let kept = make();
    let bytes = live() - before;
    drop(kept);
    bytes
}

fn main() {
    let n: u32 = std::env::var("PCRF_BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let per = |bytes: isize| bytes as f64 / f64::from(n);

    // The records alone.
    let before = live();
    let records: Vec<Arc<GxSession>> = (0..n).map(|i| Arc::new(session(i))).collect();
    let records_bytes = live() - before - (records.capacity() * 8) as isize;

    // The same records in the table (which holds them and its indexes).
    let before = live();
    let table = SessionTable::default();
    for r in &records {
        if table.insert(r.clone()).is_err() {
            eprintln!("session_memory: duplicate Session-Id");
            std::process::exit(1);
        }
    }
    let table_bytes = live() - before;
    assert_eq!(table.counts(), (n as usize, 0));

    let one = &records[0];
    // The ranges a decision of the default policy states (`valid`) below
    // 80% of a monthly allowance, as its memo keeps them.
    let ranges = r#"{"monthly": {"below": 8000}, "*": "any"}"#;
    let validity = heap_of(|| serde_json::from_str::<UsageValidity>(ranges).ok());
    let as_btree = heap_of(|| {
        serde_json::from_str::<std::collections::BTreeMap<String, serde_json::Value>>(ranges)
            .ok()
            .map(|m| {
                m.into_keys()
                    .map(|k| (k, UsageRange::Any(AnyWord::Any)))
                    .collect::<std::collections::BTreeMap<_, _>>()
            })
    });
    let answer = one.last_answer.as_ref().map_or(0, |a| a.len());
    // The record by part, per session: the struct in its Arc, the strings
    // it owns, the kept answer, usage monitoring, and what is left: the
    // last decision's record with its inputs, and the decisions themselves
    // (shared by every equal one, so their share per session is small).
    let part_struct = std::mem::size_of::<GxSession>() + 16;
    let part_strings: usize = records
        .iter()
        .map(|s| {
            // An Arc<str> holds its two counts beside the text.
            let shared = |a: &std::sync::Arc<str>| a.len() + 16;
            let opt_shared = |o: &Option<std::sync::Arc<str>>| o.as_ref().map_or(0, shared);
            // The PCEF's host and realm and the APN are one allocation
            // for every session (session::shared_text): nothing per session.
            // The Session-Id and the subscriber key are the allocations the
            // table's indexes hold too; an IMSI that is the subscriber key
            // is that same allocation.
            let imsi = match &s.imsi {
                Some(i) if std::sync::Arc::ptr_eq(i, &s.subscriber) => 0,
                other => opt_shared(other),
            };
            shared(&s.id)
                + shared(&s.subscriber)
                + imsi
                + opt_shared(&s.msisdn)
                + opt_shared(&s.ue_ipv6_prefix)
                + opt_shared(&s.location)
                + opt_shared(&s.ms_timezone)
                + opt_shared(&s.device)
        })
        .sum();
    let part_strings = part_strings as f64 / f64::from(n);
    let part_monitoring = heap_of(|| one.monitoring.clone());
    let part_decision = per(records_bytes)
        - part_struct as f64
        - part_strings
        - answer as f64
        - part_monitoring as f64;
    let inputs = one
        .last_decision
        .as_ref()
        .map_or(0, |d| d.inputs.bytes_held());
    println!("sessions: {n}");
    println!(
        "size_of::<GxSession>(): {} bytes (in its Arc: +16)",
        std::mem::size_of::<GxSession>()
    );
    println!(
        "size_of::<DecisionRecord>(): {} bytes, of which the Decision {}",
        std::mem::size_of::<pcrf::session::DecisionRecord>(),
        std::mem::size_of::<pcrf::policy::Decision>()
    );
    println!(
        "record (Arc<GxSession> and everything it owns): {:.0} bytes per session",
        per(records_bytes)
    );
    println!("  the last answer: {answer} bytes");
    println!("  the last decision's inputs (MessagePack): {inputs} bytes");
    let record = one.last_decision.as_deref().cloned();
    println!(
        "  the last decision (DecisionRecord in its Arc): {} bytes",
        heap_of(|| record.clone())
            + std::mem::size_of::<pcrf::session::DecisionRecord>() as isize
            + 16
    );
    println!(
        "  the installed rules (Decision, heap, were it not shared): {} bytes; \
         one allocation with the last decision's: {}; with the next session's: {}",
        heap_of(|| pcrf::policy::Decision::clone(&one.installed)),
        one.last_decision
            .as_ref()
            .is_some_and(|d| d.decision.same_as(&one.installed)),
        records[1 % records.len()].installed.same_as(&one.installed)
    );
    println!(
        "  usage monitoring (one key, heap): {} bytes",
        heap_of(|| one.monitoring.clone())
    );
    println!(
        "  with the decision's stated validity (memo bounds), its usage ranges: \
         {validity} bytes (in a BTreeMap: {as_btree})"
    );
    println!(
        "session table and its indexes: {:.0} bytes per session",
        per(table_bytes)
    );
    println!("by part, bytes per session:");
    println!("  struct (GxSession in its Arc): {part_struct}");
    println!("  strings (Session-Id, subscriber, IMSI, MSISDN, location...; hosts and APN shared): {part_strings:.0}");
    println!("  decision (last decision record, its inputs, shared decisions): {part_decision:.0}");
    println!("  monitoring: {part_monitoring}");
    println!("  kept answer: {answer}");
    println!("  indexes (session table): {:.0}", per(table_bytes));
    println!(
        "total: {:.0} bytes per session ({:.2} KiB)",
        per(records_bytes + table_bytes),
        per(records_bytes + table_bytes) / 1024.0
    );
    drop(table);
    drop(records);
}

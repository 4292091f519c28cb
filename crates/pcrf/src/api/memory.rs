//! `GET /v1/debug/memory`: what holds this process's memory, each holder
//! and its bytes, so an operator can tell the sessions' share of resident
//! memory from what caches and the allocator keep: the process's resident
//! and peak resident memory (the kernel's count), what the allocator has
//! committed, SQLite's heap (page caches and prepared statements of the
//! embedded store), and the table of shared decisions.

use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

/// The process's memory and its holders.
#[derive(Debug, Serialize, ToSchema)]
pub struct Memory {
    /// Resident memory now (VmRSS), bytes; `null` where the kernel does not
    /// say (not Linux).
    pub resident_bytes: Option<u64>,
    /// The most resident memory the process has had (VmHWM), bytes.
    pub peak_resident_bytes: Option<u64>,
    /// Each holder and its bytes.
    pub holders: Vec<Holder>,
}

/// One holder of memory.
#[derive(Debug, Serialize, ToSchema)]
pub struct Holder {
    /// `allocator_committed`, `sqlite` or `shared_decisions_table`.
    pub name: &'static str,
    pub bytes: u64,
    /// What it holds.
    pub what: &'static str,
}

/// The process's memory and what holds it.
#[utoipa::path(get, path = "/v1/debug/memory", operation_id = "memory",
    responses(
        (status = 200, description = "Resident memory and its holders", body = Memory),
    ))]
pub async fn memory() -> Json<Memory> {
    Json(now())
}

/// The figures now.
pub fn now() -> Memory {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mut holders = vec![Holder {
        name: "sqlite",
        bytes: sqlite_bytes(),
        what: "SQLite's heap: the embedded store's page caches (one budget \
               shared by its writers) and prepared statements",
    }];
    if let Some(committed) = crate::allocator::committed_bytes() {
        holders.insert(
            0,
            Holder {
                name: "allocator_committed",
                bytes: committed,
                what: "memory the allocator (mimalloc) has committed: every heap \
                       object, sessions included, and freed memory not yet returned",
            },
        );
    }
    holders.push(Holder {
        name: "shared_decisions_table",
        bytes: crate::policy::shared_decision::table_bytes() as u64,
        what: "the table through which equal decisions are shared and the \
               table of their checked forms, with the blocks of dropped \
               decisions they keep until swept (the decisions alive are in the \
               sessions' share of the heap)",
    });
    Memory {
        resident_bytes: kib_field(&status, "VmRSS:"),
        peak_resident_bytes: kib_field(&status, "VmHWM:"),
        holders,
    }
}

/// A `Name:   1234 kB` line of /proc/self/status, in bytes.
fn kib_field(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line[name.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Bytes SQLite has allocated and not freed, all connections together.
fn sqlite_bytes() -> u64 {
    // SAFETY: a read of SQLite's own counter; callable from any thread at
    // any time, before or after initialisation.
    let used = unsafe { rusqlite::ffi::sqlite3_memory_used() };
    u64::try_from(used).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_kernels_figures() {
        let status = "Name:\tpcrf\nVmHWM:\t  204800 kB\nVmRSS:\t   61440 kB\n";
        assert_eq!(kib_field(status, "VmRSS:"), Some(61440 * 1024));
        assert_eq!(kib_field(status, "VmHWM:"), Some(204800 * 1024));
        assert_eq!(kib_field(status, "VmSwap:"), None);
        let m = now();
        if cfg!(target_os = "linux") {
            assert!(m.resident_bytes.is_some_and(|b| b > 0));
            assert!(m.peak_resident_bytes >= m.resident_bytes);
        }
        assert!(m.holders.iter().any(|h| h.name == "sqlite"));
    }

    #[test]
    fn sqlite_memory_is_counted() {
        let before = sqlite_bytes();
        let db = rusqlite::Connection::open_in_memory().expect("opens");
        db.execute_batch(
            "CREATE TABLE t(x); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL \
             SELECT i + 1 FROM n WHERE i < 4000) INSERT INTO t SELECT randomblob(500) FROM n;",
        )
        .expect("fills");
        assert!(
            sqlite_bytes() > before + 1_000_000,
            "{before} {}",
            sqlite_bytes()
        );
    }
}

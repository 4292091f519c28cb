//! Opening the store the configuration names, creating and migrating it:
//! one store per shard (`[store] writers`), and what start-up recovers
//! from them.

use crate::session::GxSession;
use crate::store::config::{StoreConfig, StoreKind};
use crate::store::postgres::{self, ConnectionMonitor, PostgresHandles, QueryProfiler};
use crate::store::{sqlite, sqlite_layout};
use crate::store::{Store, StoreError};
use crate::subscriber::Subscriber;
use crate::usage::SubscriberUsage;

/// The stores of every shard, opened, before their writers start.
pub struct OpenedStore {
    /// Shard i at index i (at least one).
    pub shards: Vec<Box<dyn Store>>,
    /// Every shard is a connection to one database (PostgreSQL): read it
    /// once, not once per shard.
    pub shared: bool,
    /// PostgreSQL: the query profiler the shards share, their connections'
    /// health as one (for `/v1/ready`).
    pub pg: Option<PostgresHandles>,
}

/// What start-up reads from the store.
#[derive(Debug, Default)]
pub struct Recovered {
    pub subscribers: Vec<Subscriber>,
    pub sessions: Vec<GxSession>,
    pub usage: Vec<SubscriberUsage>,
    /// Notifications still owed to a sink (one per event and sink).
    pub events: Vec<crate::notify::Event>,
    /// Records found undecodable (each logged with its key) and skipped.
    pub corrupt: u64,
}

impl OpenedStore {
    /// Names this node on every shard (see `Store::set_owner`): call it
    /// before `recover`.
    pub fn set_owner(&mut self, node: &str) {
        for s in &mut self.shards {
            s.set_owner(node);
        }
    }

    /// Reads every subscriber, open session, usage row and undelivered
    /// notification. From a database shared by several nodes: this node's
    /// open sessions only, and no usage rows (each is read when its
    /// subscriber is first served, see `usage::table`).
    pub fn recover(&mut self) -> Result<Recovered, StoreError> {
        let mut out = Recovered::default();
        let readers = if self.shared { 1 } else { self.shards.len() };
        for store in self.shards.iter_mut().take(readers) {
            // skipped_corrupt() reports the last load only: add up all three.
            out.subscribers.extend(store.subscribers()?);
            out.corrupt += store.skipped_corrupt();
            out.sessions.extend(store.open_sessions()?);
            out.corrupt += store.skipped_corrupt();
            if !self.shared {
                out.usage.extend(store.usage_records()?);
                out.corrupt += store.skipped_corrupt();
            }
            out.events.extend(store.pending_events()?);
            out.corrupt += store.skipped_corrupt();
        }
        Ok(out)
    }
}

/// Opens the store of every shard the configuration asks for (creating
/// and migrating; the embedded store's directory is laid out for that
/// number of shards first, see `sqlite_layout`).
pub fn open_shards(config: &StoreConfig) -> Result<OpenedStore, StoreError> {
    let n = config.writers();
    match config.kind {
        StoreKind::Sqlite => {
            let (stores, _) = sqlite_layout::open_shards(
                &config.path,
                n,
                config.durability,
                config.accept_missing_shards,
            )?;
            let mut shards: Vec<Box<dyn Store>> = Vec::with_capacity(stores.len());
            for mut store in stores {
                // One page-cache budget for the store, not one per writer:
                // each file holds its shard's rows only.
                store.set_page_cache_kib(sqlite::PAGE_CACHE_KIB / n as u64)?;
                if let Some(mb) = config.max_size_mb {
                    // The cap is for the directory: each file gets its share.
                    let each = mb.saturating_mul(1024 * 1024) / n as u64;
                    store.limit_size(each)?;
                }
                shards.push(Box::new(store));
            }
            Ok(OpenedStore {
                shards,
                shared: false,
                pg: None,
            })
        }
        StoreKind::Postgres => {
            let profiler = QueryProfiler::new();
            let mut shards: Vec<Box<dyn Store>> = Vec::with_capacity(n);
            let mut monitors = Vec::with_capacity(n);
            // One after the other: the first applies the migrations.
            for _ in 0..n {
                let store = postgres::PostgresStore::open_with_profiler(
                    config.postgres_options()?,
                    profiler.clone(),
                )?;
                monitors.push(store.handles().connection);
                shards.push(Box::new(store));
            }
            Ok(OpenedStore {
                shards,
                shared: true,
                pg: Some(PostgresHandles {
                    profiler,
                    connection: ConnectionMonitor::combine(&monitors),
                }),
            })
        }
    }
}

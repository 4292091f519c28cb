//! Opening the store the configuration names, creating and migrating it.

use crate::store::config::{StoreConfig, StoreKind};
use crate::store::postgres;
use crate::store::sqlite::SqliteStore;
use crate::store::{Store, StoreError};

/// Opens the store like `open_store`, also returning the handles the API
/// holds when the store has them (PostgreSQL: query profiler, connection
/// health for `/v1/ready`).
pub fn open_store_with_handles(
    config: &StoreConfig,
) -> Result<(Box<dyn Store>, Option<postgres::PostgresHandles>), StoreError> {
    match config.kind {
        StoreKind::Postgres => {
            let store = postgres::PostgresStore::open(config.postgres_options()?)?;
            let handles = store.handles();
            Ok((Box::new(store), Some(handles)))
        }
        StoreKind::Sqlite => Ok((open_store(config)?, None)),
    }
}

/// Opens the store the configuration names (creating and migrating it).
pub fn open_store(config: &StoreConfig) -> Result<Box<dyn Store>, StoreError> {
    match config.kind {
        StoreKind::Sqlite => {
            let mut store = SqliteStore::open(&config.path, config.durability)?;
            if let Some(mb) = config.max_size_mb {
                store.limit_size(mb.saturating_mul(1024 * 1024))?;
            }
            Ok(Box::new(store))
        }
        StoreKind::Postgres => Ok(Box::new(postgres::PostgresStore::open(
            config.postgres_options()?,
        )?)),
    }
}

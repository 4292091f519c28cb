//! `pcrf debug session|usage|subscriber KEY`: one record read straight from
//! the store the configuration names and printed as JSON, whatever form it
//! is stored in (the binary records are not meant to be read by hand). It
//! opens the store as `pcrf serve` does: the embedded store only while no
//! server holds it; PostgreSQL at any time.

use pcrf::config::Config;
use pcrf::store::{open_shards, StoreKind};
use std::path::Path;

/// Which record to print.
#[derive(Clone, Copy, Debug)]
pub enum Which {
    Session,
    Usage,
    Subscriber,
}

impl Which {
    fn what(self) -> &'static str {
        match self {
            Which::Session => "session",
            Which::Usage => "usage record",
            Which::Subscriber => "subscriber",
        }
    }
}

/// The record as pretty JSON; `Ok(None)` when no shard holds it.
pub fn read(config: Option<&Path>, which: Which, key: &str) -> Result<Option<String>, String> {
    let cfg = match config {
        Some(p) => Config::load(p).map_err(|e| format!("invalid configuration:\n{e}"))?,
        None => Config::zero_config(),
    };
    // Opening would create an empty embedded store where none is.
    if cfg.store.kind == StoreKind::Sqlite && !cfg.store.path.is_dir() {
        return Err(format!("no store at {}", cfg.store.path.display()));
    }
    let mut opened = open_shards(&cfg.store).map_err(|e| format!("opening the store: {e}"))?;
    let readers = if opened.shared {
        1
    } else {
        opened.shards.len()
    };
    for store in opened.shards.iter_mut().take(readers) {
        let found = match which {
            Which::Session => store
                .session(key)
                .map(|r| r.map(|s| serde_json::to_string_pretty(&s))),
            Which::Usage => store
                .usage(key)
                .map(|r| r.map(|u| serde_json::to_string_pretty(&u))),
            Which::Subscriber => store
                .subscriber(key)
                .map(|r| r.map(|s| serde_json::to_string_pretty(&s))),
        }
        .map_err(|e| format!("reading {} {key:?}: {e}", which.what()))?;
        if let Some(json) = found {
            return json
                .map(Some)
                .map_err(|e| format!("{} {key:?} as JSON: {e}", which.what()));
        }
    }
    Ok(None)
}

/// Prints the record; exit status 0 when it was found.
pub fn print(config: Option<&Path>, which: Which, key: &str) -> std::process::ExitCode {
    match read(config, which, key) {
        Ok(Some(json)) => {
            println!("{json}");
            std::process::ExitCode::SUCCESS
        }
        Ok(None) => {
            eprintln!("error: no {} {key:?} in the store", which.what());
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

//! Reloads the policy when its file changes (see `file_watch.rs` for how
//! changes are seen and debounced).

use super::engine::PolicyEngine;
use super::error::PolicyError;
use crate::file_watch::watch_file;
pub use crate::file_watch::WatcherGuard;
use std::sync::Arc;

impl PolicyEngine {
    /// Starts reloading this engine whenever its file changes.
    pub fn watch(self: Arc<Self>) -> Result<WatcherGuard, PolicyError> {
        let path = self.path().to_path_buf();
        watch_file(&path, "policy-watch", move || {
            // reload() logs and counts both outcomes.
            let _ = self.reload();
        })
        .map_err(|message| PolicyError::Watch { path, message })
    }
}

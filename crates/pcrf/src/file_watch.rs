//! Calls back when a file changes, for the files an operator edits on a
//! running node (the policy script, the usage file). Watches the directory,
//! not the file, because editors and deploy tools replace files by rename;
//! bursts of events are debounced into one call.

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Quiet time after the last change before calling back.
const DEBOUNCE: Duration = Duration::from_millis(250);

/// Keeps the watch alive; dropping it stops watching and joins the thread.
pub struct WatcherGuard {
    watcher: Option<RecommendedWatcher>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for WatcherGuard {
    fn drop(&mut self) {
        // Dropping the watcher closes the channel, which ends the thread.
        drop(self.watcher.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn relevant(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Create(_)
            | EventKind::Modify(_)
            | EventKind::Remove(_)
            | EventKind::Access(AccessKind::Close(AccessMode::Write))
    )
}

/// Calls `changed` on a thread named `name` each time `path` settles after
/// a change.
pub fn watch_file(
    path: &Path,
    name: &str,
    mut changed: impl FnMut() + Send + 'static,
) -> Result<WatcherGuard, String> {
    let file = path.file_name().map(|n| n.to_os_string());
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let (tx, rx) = mpsc::channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
        if let Ok(event) = event {
            let ours = event
                .paths
                .iter()
                .any(|p| p.file_name().map(|n| n.to_os_string()) == file);
            if ours && relevant(&event.kind) {
                let _ = tx.send(());
            }
        }
    })
    .map_err(|e| e.to_string())?;
    watcher
        .watch(&dir, RecursiveMode::NonRecursive)
        .map_err(|e| e.to_string())?;
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            while rx.recv().is_ok() {
                // Wait for the writes to settle.
                loop {
                    match rx.recv_timeout(DEBOUNCE) {
                        Ok(()) => continue,
                        Err(mpsc::RecvTimeoutError::Timeout) => break,
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
                changed();
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(WatcherGuard {
        watcher: Some(watcher),
        thread: Some(thread),
    })
}

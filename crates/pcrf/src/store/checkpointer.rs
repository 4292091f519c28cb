//! WAL checkpoints of one SQLite database file, off the writer's path.
//!
//! SQLite checkpoints by default inside the commit that pushes the WAL past
//! 1000 pages: that commit, and every answer waiting on it, then also copies
//! the WAL into the database file and fsyncs it (multi-millisecond stalls
//! in `durability = "relaxed"`). The store turns that off
//! (`wal_autocheckpoint = 0`) and this thread, on its own connection, runs a
//! PASSIVE checkpoint at a fixed interval instead: PASSIVE never takes the
//! writer's lock and never waits for it, so commits go on meanwhile.
//!
//! The WAL starts over from its beginning only at a commit that finds it
//! wholly copied. Under steady load the writer commits while this thread
//! copies (a checkpoint takes milliseconds, commits come every
//! millisecond), so that never happens on its own: the WAL grew by the
//! whole load (hundreds of MB in minutes), and when it did start over,
//! SQLite cut it back to `journal_size_limit`, a truncate of that size
//! that held the writer, and the disk's cache flush of every other store
//! file, for 20-60 ms. So once a checkpoint finds the WAL past
//! `CATCH_UP_FRAMES`, this thread asks the writer to catch up
//! ([`Checkpointer::take_catch_up`]): between two batches the writer
//! copies the few frames committed meanwhile on its own connection (no
//! commit can race it there), and its next commit starts the WAL over.
//! The file then stays near that size (16 MiB) plus one interval's writes.

use super::StoreError;
use rusqlite::Connection;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the WAL is checkpointed. In `durability = "relaxed"` the
/// changes acknowledged since the last checkpoint are what an OS crash or
/// power loss may lose: this bounds that window in time.
pub const CHECKPOINT_EVERY: Duration = Duration::from_millis(500);

/// The WAL size, in frames (pages), from which the writer is asked to
/// catch up: each catch-up holds the writer for two or three syncs, so it
/// comes only once the WAL holds this much (16 MiB of 4 KiB pages), which
/// also bounds the file.
#[cfg(not(test))]
const CATCH_UP_FRAMES: i64 = 4096;
/// In unit tests any WAL: they build the race with a few frames.
#[cfg(test)]
const CATCH_UP_FRAMES: i64 = 1;

/// The checkpointing thread of one database file; stops when dropped.
pub(crate) struct Checkpointer {
    stop: Arc<(Mutex<bool>, Condvar)>,
    done: Arc<AtomicU64>,
    /// Set after a checkpoint found the WAL past `CATCH_UP_FRAMES`: the
    /// writer should catch up.
    catch_up: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts checkpointing `path` every `every`, syncing as `synchronous`
    /// (the store's own setting) says.
    pub(crate) fn start(
        path: &Path,
        synchronous: &str,
        every: Duration,
    ) -> Result<Self, StoreError> {
        let ctx = format!("opening the checkpoint connection to {}", path.display());
        let conn = Connection::open(path)
            .and_then(|c| {
                c.execute_batch(&format!("PRAGMA synchronous = {synchronous};"))?;
                Ok(c)
            })
            .map_err(|e| StoreError::Unavailable(format!("{ctx}: {e}")))?;
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let done = Arc::new(AtomicU64::new(0));
        let catch_up = Arc::new(AtomicBool::new(false));
        let (stop2, done2, path2) = (stop.clone(), done.clone(), path.to_path_buf());
        let catch_up2 = catch_up.clone();
        let thread = std::thread::Builder::new()
            .name("pcrf-checkpoint".into())
            .spawn(move || run(conn, path2, &stop2, &done2, &catch_up2, every))
            .map_err(|e| StoreError::Unavailable(format!("cannot start {ctx}: {e}")))?;
        Ok(Checkpointer {
            stop,
            done,
            catch_up,
            thread: Some(thread),
        })
    }

    /// Checkpoints run on a WAL holding frames, since start.
    pub(crate) fn checkpoints(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Whether a checkpoint found the WAL past `CATCH_UP_FRAMES` since the
    /// last call: the writer should then copy what was committed during it,
    /// so that its next commit starts the WAL over.
    pub(crate) fn take_catch_up(&self) -> bool {
        self.catch_up.swap(false, Ordering::AcqRel)
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        let (lock, wake) = &*self.stop;
        if let Ok(mut stopped) = lock.lock() {
            *stopped = true;
        }
        wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    conn: Connection,
    path: PathBuf,
    stop: &(Mutex<bool>, Condvar),
    done: &AtomicU64,
    catch_up: &AtomicBool,
    every: Duration,
) {
    let (lock, wake) = stop;
    let mut failing = false;
    loop {
        {
            let Ok(stopped) = lock.lock() else { return };
            let Ok((stopped, _)) = wake.wait_timeout_while(stopped, every, |s| !*s) else {
                return;
            };
            if *stopped {
                return;
            }
        }
        // (busy, frames in the WAL, frames copied into the database).
        let r = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        });
        match r {
            Ok((_, frames, _)) => {
                if frames > 0 {
                    done.fetch_add(1, Ordering::Relaxed);
                }
                if frames >= CATCH_UP_FRAMES {
                    catch_up.store(true, Ordering::Release);
                }
                if failing {
                    tracing::info!(path = %path.display(), "WAL checkpoints work again");
                    failing = false;
                }
            }
            Err(e) => {
                // Logged once per failing spell: the writer reports the
                // store's state to the requests itself.
                if !failing {
                    tracing::warn!(path = %path.display(), error = %e, "WAL checkpoint failed");
                    failing = true;
                }
            }
        }
    }
}

//! The group-commit writer: one thread owns the store and turns everything
//! queued since its last transaction into the next transaction, so many
//! requests share one commit (and one fsync). Each request's future resolves
//! only after the transaction holding its changes committed: the Gx answer
//! leaves after that.

use super::{Change, OpenSessionsBy, Store, StoreError};
use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Upper bounds of the batch-size histogram (requests per transaction);
/// the last bucket (+Inf) is `GroupCommitStats::batches`.
pub const BATCH_SIZE_BOUNDS: [u64; 7] = [1, 2, 4, 16, 64, 256, 1024];

/// Upper bounds of the apply-time histogram (microseconds per batch, from
/// BEGIN to COMMIT or ROLLBACK, fsync included); +Inf is `batches`.
pub const APPLY_MICROS_BOUNDS: [u64; 9] =
    [100, 250, 500, 1_000, 2_500, 5_000, 10_000, 50_000, 250_000];

/// Tuning of the writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupCommitOptions {
    /// Requests queued before `submit`/`reserve` wait (backpressure).
    pub queue_depth: usize,
    /// A batch stops draining the queue once it holds this many changes,
    /// bounding one transaction's size and time.
    pub max_batch_changes: usize,
    /// Closed sessions deleted per purge transaction; batches of requests
    /// run between chunks, so a large purge never stalls the answers.
    pub purge_chunk: usize,
    /// Once a batch has its first change, wait up to this long for more
    /// before committing (zero: commit what is queued at once), when that
    /// change came within this long of the previous batch's end (under
    /// load; see `Writer::drain_into`).
    pub commit_window: std::time::Duration,
    /// When no job came for this long, the store gives back the memory it
    /// holds only for speed (SQLite's page cache) and the writer thread its
    /// allocator's free pages, once per quiet spell: after a burst the
    /// process does not stay at its peak.
    pub idle_release: std::time::Duration,
}

impl Default for GroupCommitOptions {
    fn default() -> Self {
        GroupCommitOptions {
            queue_depth: 4096,
            max_batch_changes: 8192,
            purge_chunk: 2000,
            commit_window: std::time::Duration::ZERO,
            idle_release: std::time::Duration::from_secs(5),
        }
    }
}

/// Counters since start, for `/metrics` (rendered elsewhere).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupCommitStats {
    /// `submit`/`Slot::send` requests taken by the writer.
    pub requests: u64,
    /// Changes in those requests, before coalescing.
    pub changes: u64,
    /// Changes dropped because a later change in the same batch wrote the same row.
    pub coalesced: u64,
    /// Transactions attempted (one per batch).
    pub batches: u64,
    /// Transactions committed (at least one row changed).
    pub commits: u64,
    /// Batches where no row changed: rolled back, no commit, no fsync.
    pub skipped_commits: u64,
    /// Rows inserted, updated or deleted by committed batches.
    pub rows_changed: u64,
    /// Batches that failed (every request in them got the error).
    pub errors: u64,
    /// Rows another node had written since this node read them (a
    /// compare-and-set failed; only their requests failed, to be retried).
    pub conflicts: u64,
    /// Closed sessions purged.
    pub purged: u64,
    /// Time spent in the store applying batches, microseconds.
    pub apply_micros: u64,
    /// Applications of a batch to the store: `batches` plus the second
    /// tries of batches that met a conflict (the apply-time histogram's count).
    pub applies: u64,
    /// Cumulative histogram of apply time per batch: `apply_micros_le[i]`
    /// batches took at most `APPLY_MICROS_BOUNDS[i]` µs.
    pub apply_micros_le: [u64; APPLY_MICROS_BOUNDS.len()],
    /// Cumulative histogram of requests per batch: `batch_size_le[i]`
    /// batches had at most `BATCH_SIZE_BOUNDS[i]` requests.
    pub batch_size_le: [u64; BATCH_SIZE_BOUNDS.len()],
    /// Requests waiting in the queue now.
    pub queued: u64,
}

impl GroupCommitStats {
    /// Adds another writer's counters (the shards' total).
    pub fn add(&mut self, o: &GroupCommitStats) {
        self.requests += o.requests;
        self.changes += o.changes;
        self.coalesced += o.coalesced;
        self.batches += o.batches;
        self.commits += o.commits;
        self.skipped_commits += o.skipped_commits;
        self.rows_changed += o.rows_changed;
        self.errors += o.errors;
        self.conflicts += o.conflicts;
        self.purged += o.purged;
        self.apply_micros += o.apply_micros;
        self.applies += o.applies;
        for (a, b) in self.apply_micros_le.iter_mut().zip(o.apply_micros_le) {
            *a += b;
        }
        for (a, b) in self.batch_size_le.iter_mut().zip(o.batch_size_le) {
            *a += b;
        }
        self.queued += o.queued;
    }
}

#[derive(Default)]
struct Metrics {
    requests: AtomicU64,
    changes: AtomicU64,
    coalesced: AtomicU64,
    batches: AtomicU64,
    commits: AtomicU64,
    skipped_commits: AtomicU64,
    rows_changed: AtomicU64,
    errors: AtomicU64,
    conflicts: AtomicU64,
    purged: AtomicU64,
    apply_micros: AtomicU64,
    // Non-cumulative counts per bucket; the last is "above every bound".
    batch_size: [AtomicU64; BATCH_SIZE_BOUNDS.len() + 1],
    apply_time: [AtomicU64; APPLY_MICROS_BOUNDS.len() + 1],
}

impl Metrics {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn observe(buckets: &[AtomicU64], bounds: &[u64], value: u64) {
        let i = bounds
            .iter()
            .position(|&b| value <= b)
            .unwrap_or(bounds.len());
        Self::add(&buckets[i], 1);
    }

    /// Per-bucket counts turned cumulative (Prometheus `le`), without +Inf.
    fn cumulative<const N: usize>(buckets: &[AtomicU64]) -> [u64; N] {
        let mut out = [0; N];
        let mut acc = 0;
        for (slot, c) in out.iter_mut().zip(buckets) {
            acc += c.load(Ordering::Relaxed);
            *slot = acc;
        }
        out
    }
}

type Ack<T> = oneshot::Sender<Result<T, StoreError>>;

/// A batch's requesters and its outcome, sent to each when dropped.
struct Answers {
    acks: Vec<Ack<()>>,
    outcome: Result<(), StoreError>,
}

impl Drop for Answers {
    fn drop(&mut self) {
        for ack in self.acks.drain(..) {
            // A requester that went away no longer needs the answer.
            let _ = ack.send(self.outcome.clone());
        }
    }
}

enum Job {
    /// With the time it was queued: the commit window runs from the oldest
    /// change of a batch, so a change that waited behind the previous batch
    /// does not wait a whole window more.
    Changes(Vec<Change>, Ack<()>, Instant),
    Purge(i64, Ack<usize>),
    Flush(Ack<()>),
    /// Whether writes succeed now (readiness): the store's probe, and the
    /// last batch's outcome.
    Probe(Ack<()>),
    /// A session no longer in memory (a closed one after a restart).
    ReadSession(String, Ack<Option<crate::session::GxSession>>),
    /// The open sessions holding a UE IPv4 address (a shared store).
    OpenSessionIds(OpenSessionsBy, Ack<Vec<String>>),
    /// A subscriber's usage row, read when first needed (a shared store).
    ReadUsage(String, Ack<Option<crate::usage::SubscriberUsage>>),
    Stop(oneshot::Sender<Box<dyn Store>>),
}

/// How the writer, waiting out a commit window, learns that it should not
/// wait longer: the queue holds a full batch, or a job that is not a change.
/// A change does not wake it otherwise: waking the writer thread for each
/// request (to find the window still open) cost a futex wake and two
/// context switches per request, the most of the writer's CPU at 3000 TPS.
///
/// A condition variable, not a timer of the writer's tokio clock: that
/// clock counts whole milliseconds, so a 500 µs window waited 1-2 ms
/// (p50 1.9 ms instead of 0.7 at 3000 TPS); the condition variable's
/// timeout is the kernel's, to within tens of microseconds.
///
/// The window's time (when a change was queued, when a batch ended, when
/// the window closes) is read through `now`, which the window tests step
/// by hand (`tests::SteppedTime`), so that no test waits on real time.
#[derive(Default)]
struct Wake {
    /// Changes sent and not yet committed (the batch being drained included).
    changes: AtomicUsize,
    /// Set by `wake`, cleared by the writer when its wait ends: a wake
    /// that comes before the writer waits is not lost.
    woken: Mutex<bool>,
    signal: Condvar,
    #[cfg(test)]
    stepped: Option<tests::SteppedTime>,
}

impl Wake {
    /// The window's clock: the kernel's monotonic one.
    fn now(&self) -> Instant {
        #[cfg(test)]
        if let Some(t) = &self.stepped {
            return t.now();
        }
        Instant::now()
    }

    /// Ends the writer's wait for its window now (or its next one).
    fn wake(&self) {
        *self.woken.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.signal.notify_one();
    }

    /// Waits until `deadline`, or until `wake` is called.
    fn wait_until(&self, deadline: Instant) {
        let woken = self.woken.lock().unwrap_or_else(|e| e.into_inner());
        #[cfg(test)]
        if let Some(t) = &self.stepped {
            t.wait_until(&self.signal, woken, deadline);
            return;
        }
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return;
        };
        let mut woken = match self.signal.wait_timeout_while(woken, left, |w| !*w) {
            Ok((w, _)) => w,
            Err(e) => e.into_inner().0,
        };
        *woken = false;
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the group-commit writer has stopped".into())
}

/// Handle to the writer thread; clone it freely (all clones feed one writer).
/// The writer stops after `shutdown`, or when every handle is dropped and
/// the queue is drained.
#[derive(Clone)]
pub struct GroupCommit {
    tx: mpsc::Sender<Job>,
    metrics: Arc<Metrics>,
    wake: Arc<Wake>,
    max_batch_changes: usize,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("stats", &self.stats())
            .finish()
    }
}

/// A place in the writer's queue, reserved ahead (waiting for room if the
/// queue is full) so that filling it never waits: take the slot, then lock
/// the subscriber, mutate, `send` the change and unlock; changes to one row
/// thus reach the writer in the order they were made, and no lock is held
/// across an await.
pub struct Slot {
    permit: mpsc::OwnedPermit<Job>,
    wake: Arc<Wake>,
    max_batch_changes: usize,
}

impl Slot {
    /// Queues the changes; the returned future resolves once they are
    /// committed (or with the batch's error).
    pub fn send(self, changes: Vec<Change>) -> Pending {
        let (ack, rx) = oneshot::channel();
        let n = changes.len();
        let before = self.wake.changes.fetch_add(n, Ordering::Relaxed);
        self.permit
            .send(Job::Changes(changes, ack, self.wake.now()));
        if before < self.max_batch_changes && before + n >= self.max_batch_changes {
            self.wake.wake();
        }
        Pending(rx)
    }
}

/// Resolves when the changes of one request are durable.
#[must_use = "the changes are durable only when this resolves Ok"]
pub struct Pending(oneshot::Receiver<Result<(), StoreError>>);

impl Future for Pending {
    type Output = Result<(), StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or_else(|_| Err(stopped())))
    }
}

impl GroupCommit {
    /// Starts the writer thread with default options. Read what start-up
    /// needs (`open_sessions`, `subscribers`) from the store before this:
    /// afterwards only the writer touches it.
    pub fn start(store: Box<dyn Store>) -> Result<Self, StoreError> {
        Self::start_with(store, GroupCommitOptions::default())
    }

    /// Starts the writer thread.
    pub fn start_with(store: Box<dyn Store>, opts: GroupCommitOptions) -> Result<Self, StoreError> {
        Self::start_waking(store, opts, Wake::default())
    }

    fn start_waking(
        store: Box<dyn Store>,
        opts: GroupCommitOptions,
        wake: Wake,
    ) -> Result<Self, StoreError> {
        let (tx, rx) = mpsc::channel(opts.queue_depth.max(1));
        let compare_and_set = store.compare_and_set();
        let metrics = Arc::new(Metrics::default());
        let wake = Arc::new(wake);
        let clock = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| {
                StoreError::Unavailable(format!("cannot start the store writer's timer: {e}"))
            })?;
        let writer = Writer {
            store,
            rx,
            metrics: metrics.clone(),
            opts,
            purge: None,
            clock,
            released: false,
            last_batch_end: wake.now(),
            wake: wake.clone(),
            requesters: tokio::runtime::Handle::try_current().ok(),
            compare_and_set,
            last_failure: None,
        };
        std::thread::Builder::new()
            .name("pcrf-store-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| {
                StoreError::Unavailable(format!("cannot start the store writer thread: {e}"))
            })?;
        Ok(GroupCommit {
            tx,
            metrics,
            wake,
            max_batch_changes: opts.max_batch_changes,
        })
    }

    /// Persists `changes`; returns once the transaction holding them
    /// committed, or with the error that made it fail (answer 5012).
    pub async fn submit(&self, changes: Vec<Change>) -> Result<(), StoreError> {
        self.reserve().await?.send(changes).await
    }

    /// Reserves a place in the queue (waits while it is full).
    pub async fn reserve(&self) -> Result<Slot, StoreError> {
        let permit = self
            .tx
            .clone()
            .reserve_owned()
            .await
            .map_err(|_| stopped())?;
        Ok(Slot {
            permit,
            wake: self.wake.clone(),
            max_batch_changes: self.max_batch_changes,
        })
    }

    /// Queues a job that is not a change, and ends a commit window being
    /// waited out so that it runs without waiting for the window.
    async fn send_now(&self, job: Job) -> Result<(), StoreError> {
        self.tx.send(job).await.map_err(|_| stopped())?;
        self.wake.wake();
        Ok(())
    }

    /// Deletes sessions closed before `before_ms` (in chunks between
    /// batches); returns how many. The server calls it periodically.
    pub async fn purge_closed(&self, before_ms: i64) -> Result<usize, StoreError> {
        let (ack, rx) = oneshot::channel();
        self.send_now(Job::Purge(before_ms, ack)).await?;
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Returns once everything queued before it has been written (or has
    /// failed, which its own submitter was told).
    pub async fn flush(&self) -> Result<(), StoreError> {
        let (ack, rx) = oneshot::channel();
        self.send_now(Job::Flush(ack)).await?;
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Reads one session from the store, after everything queued before
    /// it was written: the cold path for a record no longer in memory.
    pub async fn read_session(
        &self,
        id: &str,
    ) -> Result<Option<crate::session::GxSession>, StoreError> {
        let (ack, rx) = oneshot::channel();
        self.send_now(Job::ReadSession(id.to_owned(), ack)).await?;
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// The ids of the open sessions `by` finds in the store (after
    /// everything queued before it was written).
    pub async fn open_session_ids(&self, by: OpenSessionsBy) -> Result<Vec<String>, StoreError> {
        let (ack, rx) = oneshot::channel();
        self.send_now(Job::OpenSessionIds(by, ack)).await?;
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Reads one subscriber's usage row, after everything queued before it
    /// was written.
    pub async fn read_usage(
        &self,
        subscriber: &str,
    ) -> Result<Option<crate::usage::SubscriberUsage>, StoreError> {
        let (ack, rx) = oneshot::channel();
        self.send_now(Job::ReadUsage(subscriber.to_owned(), ack))
            .await?;
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Writes everything queued before it, stops the writer and hands the
    /// store back (to close it, or to read from it). Later requests get
    /// `Unavailable`.
    pub async fn shutdown(&self) -> Result<Box<dyn Store>, StoreError> {
        let (ack, rx) = oneshot::channel();
        self.send_now(Job::Stop(ack)).await?;
        rx.await.map_err(|_| stopped())
    }

    /// Ok while the store takes writes: its probe succeeds and no batch
    /// failed in the last `FAILURE_HOLDS_READINESS` (none since succeeded).
    pub async fn probe(&self) -> Result<(), StoreError> {
        let (ack, rx) = oneshot::channel();
        self.send_now(Job::Probe(ack)).await?;
        rx.await.map_err(|_| stopped())?
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> GroupCommitStats {
        let m = &self.metrics;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        GroupCommitStats {
            requests: get(&m.requests),
            changes: get(&m.changes),
            coalesced: get(&m.coalesced),
            batches: get(&m.batches),
            commits: get(&m.commits),
            skipped_commits: get(&m.skipped_commits),
            rows_changed: get(&m.rows_changed),
            errors: get(&m.errors),
            conflicts: get(&m.conflicts),
            purged: get(&m.purged),
            apply_micros: get(&m.apply_micros),
            applies: m.apply_time.iter().map(get).sum(),
            apply_micros_le: Metrics::cumulative(&m.apply_time),
            batch_size_le: Metrics::cumulative(&m.batch_size),
            queued: (self.tx.max_capacity() - self.tx.capacity()) as u64,
        }
    }
}

/// A purge in progress: chunks run between batches until one comes back short.
struct PurgeJob {
    before_ms: i64,
    deleted: usize,
    acks: Vec<Ack<usize>>,
}

struct Writer {
    store: Box<dyn Store>,
    rx: mpsc::Receiver<Job>,
    metrics: Arc<Metrics>,
    opts: GroupCommitOptions,
    purge: Option<PurgeJob>,
    /// A timer-only runtime for noticing a quiet spell (the writer is a
    /// plain thread; its commit window is waited on `Wake`).
    clock: tokio::runtime::Runtime,
    /// Idle memory was given back since the last job.
    released: bool,
    /// When the last batch was committed (the writer's start before the
    /// first): whether the next one is under load (see `drain_into`).
    last_batch_end: Instant,
    wake: Arc<Wake>,
    /// The runtime of the requesters, when started inside one: a batch's
    /// answers are delivered from a task there (see `answer`).
    requesters: Option<tokio::runtime::Handle>,
    /// The store's session and usage writes are compare-and-set (see
    /// `one_writer_per_row`).
    compare_and_set: bool,
    /// The last batch that failed for want of a writable store (not a
    /// conflict), and when; cleared by a batch that commits.
    last_failure: Option<(Instant, StoreError)>,
}

/// How long a failed batch keeps the probe failing when no batch has
/// succeeded since. A probe's small write may succeed where a batch fails
/// (a full disk still rewrites a page in place; a size cap), so a failure
/// counts too; it expires so that a node taken out of service for it, and
/// so getting no requests, is ready again once its probe succeeds.
const FAILURE_HOLDS_READINESS: Duration = Duration::from_secs(10);

impl Writer {
    fn run(mut self) {
        // A job that ended the previous drain (not a change) waits here.
        let mut held: Option<Job> = None;
        loop {
            let job = match held.take() {
                Some(job) => job,
                None if self.purge.is_some() => match self.rx.try_recv() {
                    Ok(job) => job,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        self.purge_chunk();
                        continue;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        while self.purge.is_some() {
                            self.purge_chunk();
                        }
                        return;
                    }
                },
                None => match self.next_job() {
                    Some(job) => job,
                    None => return,
                },
            };
            match job {
                Job::Changes(changes, ack, queued) => {
                    let mut batch = vec![(changes, ack)];
                    held = self.drain_into(&mut batch, queued);
                    self.commit(batch);
                    self.last_batch_end = self.wake.now();
                    self.store.after_batch();
                    if self.purge.is_some() {
                        self.purge_chunk();
                    }
                }
                Job::Purge(before_ms, ack) => match &mut self.purge {
                    // One running purge serves both: the later cut-off covers the earlier.
                    Some(p) => {
                        p.before_ms = p.before_ms.max(before_ms);
                        p.acks.push(ack);
                    }
                    None => {
                        self.purge = Some(PurgeJob {
                            before_ms,
                            deleted: 0,
                            acks: vec![ack],
                        })
                    }
                },
                Job::Flush(ack) => {
                    let _ = ack.send(Ok(()));
                }
                Job::Probe(ack) => {
                    let got =
                        guard("probing a write", || self.store.probe()).and_then(|()| match &self
                            .last_failure
                        {
                            Some((at, e)) if at.elapsed() < FAILURE_HOLDS_READINESS => {
                                Err(e.clone())
                            }
                            _ => Ok(()),
                        });
                    let _ = ack.send(got);
                }
                Job::ReadSession(id, ack) => {
                    let got = guard("reading a session", || self.store.session(&id));
                    let _ = ack.send(got);
                }
                Job::OpenSessionIds(by, ack) => {
                    let got = guard("finding open sessions", || self.store.open_session_ids(&by));
                    let _ = ack.send(got);
                }
                Job::ReadUsage(subscriber, ack) => {
                    let got = guard("reading usage", || self.store.usage(&subscriber));
                    let _ = ack.send(got);
                }
                Job::Stop(ack) => {
                    let _ = ack.send(self.store);
                    return;
                }
            }
        }
    }

    /// The next job, waiting as long as it takes; `None` once every sender
    /// is gone. A quiet spell of `idle_release` first gives back idle
    /// memory (once, until the next job).
    fn next_job(&mut self) -> Option<Job> {
        if !self.released {
            let (quiet, rx) = (self.opts.idle_release, &mut self.rx);
            // The timer must be made inside the clock's runtime.
            let next = self
                .clock
                .block_on(async move { tokio::time::timeout(quiet, rx.recv()).await });
            match next {
                Ok(job) => return job,
                Err(_) => {
                    self.store.release_memory();
                    crate::allocator::return_idle_memory();
                    self.released = true;
                }
            }
        }
        let job = self.rx.blocking_recv();
        self.released = false;
        job
    }

    /// Takes every change request already queued, and with a commit window
    /// those arriving until the window after the first one's queueing
    /// (`oldest`) closes, up to the batch limit; returns a non-change job
    /// met on the way (handled after this batch). Timing the window from the
    /// queueing, not from now, bounds what it adds to any answer by the
    /// window itself, however long the previous batch took.
    ///
    /// The window opens only under load: when the first change came
    /// within a window of the previous batch's end. Changes that come
    /// further apart have no later ones to gather, and waiting for them
    /// only delays the answer: at 1000 TPS a fixed 500 µs window doubled
    /// the median answer and saved no CPU, where at 3000 TPS it saved 17%.
    fn drain_into(
        &mut self,
        batch: &mut Vec<(Vec<Change>, Ack<()>)>,
        oldest: Instant,
    ) -> Option<Job> {
        let mut n: usize = batch.iter().map(|(c, _)| c.len()).sum();
        let window = self.opts.commit_window;
        let under_load = oldest <= self.last_batch_end + window;
        let deadline = if under_load { oldest + window } else { oldest };
        while n < self.opts.max_batch_changes {
            let next = match self.rx.try_recv() {
                Ok(job) => Some(job),
                Err(mpsc::error::TryRecvError::Disconnected) => None,
                // Nothing queued: sleep until the window closes (never,
                // without a window: its deadline is the first queueing) or
                // a full batch (or another job) is queued, then drain.
                Err(mpsc::error::TryRecvError::Empty) if self.wake.now() < deadline => {
                    self.wake.wait_until(deadline);
                    continue;
                }
                Err(mpsc::error::TryRecvError::Empty) => None,
            };
            match next {
                Some(Job::Changes(changes, ack, _)) => {
                    n += changes.len();
                    batch.push((changes, ack));
                }
                Some(other) => return Some(other),
                None => return None,
            }
        }
        None
    }

    fn commit(&mut self, mut batch: Vec<(Vec<Change>, Ack<()>)>) {
        let m = self.metrics.clone();
        let requests = batch.len() as u64;
        let submitted: usize = batch.iter().map(|(c, _)| c.len()).sum();
        Metrics::add(&m.requests, requests);
        Metrics::add(&m.changes, submitted as u64);
        Metrics::add(&m.batches, 1);
        Metrics::observe(&m.batch_size, &BATCH_SIZE_BOUNDS, requests);
        self.wake.changes.fetch_sub(submitted, Ordering::Relaxed);
        if self.compare_and_set {
            batch = self.one_writer_per_row(batch);
        }
        let mut coalesced_once = false;
        let (changes, result) = loop {
            let changes = coalesce(batch.iter().flat_map(|(c, _)| c.iter().cloned()).collect());
            if !coalesced_once {
                let kept: usize = batch.iter().map(|(c, _)| c.len()).sum();
                Metrics::add(&m.coalesced, (kept - changes.len()) as u64);
                coalesced_once = true;
            }
            let started = Instant::now();
            let result = guard("applying a batch", || self.store.apply(&changes));
            let micros = started.elapsed().as_micros() as u64;
            Metrics::add(&m.apply_micros, micros);
            Metrics::observe(&m.apply_time, &APPLY_MICROS_BOUNDS, micros);
            // Rows another node wrote: the batch rolled back. Only the
            // requests that wrote those rows fail (with the rows they
            // wrote); the rest are applied again without them.
            let Err(StoreError::Conflict(rows)) = &result else {
                break (changes, result);
            };
            Metrics::add(&m.conflicts, rows.len() as u64);
            let before = batch.len();
            let mut innocent = Vec::with_capacity(before);
            for (c, ack) in batch {
                let mine: Vec<_> = rows
                    .iter()
                    .filter(|r| c.iter().any(|ch| r.is(&ch.key())))
                    .cloned()
                    .collect();
                if mine.is_empty() {
                    innocent.push((c, ack));
                } else {
                    let _ = ack.send(Err(StoreError::Conflict(mine)));
                }
            }
            batch = innocent;
            if batch.is_empty() || batch.len() == before {
                break (changes, result);
            }
        };
        let acks: Vec<Ack<()>> = batch.into_iter().map(|(_, ack)| ack).collect();
        let outcome = match result {
            Ok(0) => {
                Metrics::add(&m.skipped_commits, 1);
                Ok(())
            }
            Ok(rows) => {
                Metrics::add(&m.commits, 1);
                Metrics::add(&m.rows_changed, rows as u64);
                self.last_failure = None;
                Ok(())
            }
            Err(e @ StoreError::Conflict(_)) => Err(e),
            Err(e) => {
                self.last_failure = Some((Instant::now(), e.clone()));
                Metrics::add(&m.errors, 1);
                tracing::error!(error = %e, requests, changes = changes.len(),
                    "store batch failed; its requests are answered with the error");
                Err(e)
            }
        };
        self.answer(acks, outcome);
    }

    /// On a store whose writes are compare-and-set: of two requests that
    /// write the same session or usage row in one batch, only the one
    /// holding the newer copy (the later, if equal) stays; the others fail
    /// with a conflict and are handled again on a fresh copy. Coalescing
    /// would otherwise drop the earlier write unseen while acknowledging
    /// its request. A node serialises the writers of one row, so this
    /// happens only when a stale copy met a fresh one after a conflict.
    fn one_writer_per_row(
        &self,
        batch: Vec<(Vec<Change>, Ack<()>)>,
    ) -> Vec<(Vec<Change>, Ack<()>)> {
        use super::{ChangeKey, Conflicted};
        use std::collections::HashMap;
        /// The version a versioned (session or usage) write read.
        fn versioned(c: &Change) -> Option<u64> {
            match c {
                Change::PutSession(s) => Some(s.version.get()),
                Change::PutUsage(u) => Some(u.version.get()),
                _ => None,
            }
        }
        /// The row, owned, for the error (only when a request loses).
        fn row(key: ChangeKey<'_>) -> Vec<Conflicted> {
            match key {
                ChangeKey::Session(id) => vec![Conflicted::Session(id.to_owned())],
                ChangeKey::Usage(k) => vec![Conflicted::Usage(k.to_owned())],
                _ => Vec::new(),
            }
        }
        if batch.len() < 2 {
            return batch;
        }
        let mut winner: HashMap<ChangeKey<'_>, (usize, u64)> = HashMap::new();
        let mut lost: HashMap<usize, Vec<Conflicted>> = HashMap::new();
        for (i, (changes, _)) in batch.iter().enumerate() {
            for c in changes {
                let Some(v) = versioned(c) else {
                    continue;
                };
                let key = c.key();
                match winner.get(&key).copied() {
                    Some((j, _)) if j == i => {
                        winner.insert(key, (i, v));
                    }
                    Some((j, w)) if v >= w => {
                        lost.entry(j).or_default().extend(row(key));
                        winner.insert(key, (i, v));
                    }
                    Some(_) => lost.entry(i).or_default().extend(row(key)),
                    None => {
                        winner.insert(key, (i, v));
                    }
                }
            }
        }
        if lost.is_empty() {
            return batch;
        }
        let mut kept = Vec::with_capacity(batch.len());
        for (i, (changes, ack)) in batch.into_iter().enumerate() {
            match lost.remove(&i) {
                Some(rows) => {
                    Metrics::add(&self.metrics.conflicts, rows.len() as u64);
                    let _ = ack.send(Err(StoreError::Conflict(rows)));
                }
                None => kept.push((changes, ack)),
            }
        }
        kept
    }

    /// Tells a batch's requesters its outcome. From this thread each wakeup
    /// is a remote one, and the runtime's workers, parking between them,
    /// were woken up to once per request (5-7 futex wakes per batch at 3000
    /// TPS); one task in their runtime wakes them all from there instead.
    fn answer(&self, acks: Vec<Ack<()>>, outcome: Result<(), StoreError>) {
        let answers = Answers { acks, outcome };
        match &self.requesters {
            // Sent when the task drops them, or when a runtime that is
            // shutting down drops the task unrun.
            Some(rt) if answers.acks.len() > 1 => {
                rt.spawn(async move { drop(answers) });
            }
            _ => drop(answers),
        }
    }

    fn purge_chunk(&mut self) {
        let Some(before_ms) = self.purge.as_ref().map(|p| p.before_ms) else {
            return;
        };
        let limit = self.opts.purge_chunk.max(1);
        let result = guard("purging closed sessions", || {
            self.store.purge_closed(before_ms, limit)
        });
        let Some(p) = &mut self.purge else { return };
        match result {
            Ok(n) => {
                p.deleted += n;
                Metrics::add(&self.metrics.purged, n as u64);
                if n < limit {
                    if let Some(p) = self.purge.take() {
                        for ack in p.acks {
                            let _ = ack.send(Ok(p.deleted));
                        }
                    }
                }
            }
            Err(e) => {
                Metrics::add(&self.metrics.errors, 1);
                tracing::error!(error = %e, "purging closed sessions failed");
                if let Some(p) = self.purge.take() {
                    for ack in p.acks {
                        let _ = ack.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}

/// Runs a store call, turning a panic inside it (a bug) into an error for
/// the batch: the writer thread, and every later request, survive it.
fn guard<T>(what: &str, f: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(StoreError::Unavailable(format!(
            "{what}: store panicked: {msg}"
        )))
    })
}

/// Keeps only the last change to each row, in the order of those last
/// changes: one transaction writes each row once.
fn coalesce(changes: Vec<Change>) -> Vec<Change> {
    if changes.len() < 2 {
        return changes;
    }
    let mut keep = vec![false; changes.len()];
    {
        let mut seen = HashSet::with_capacity(changes.len());
        for (i, c) in changes.iter().enumerate().rev() {
            keep[i] = seen.insert(c.key());
        }
    }
    changes
        .into_iter()
        .zip(keep)
        .filter_map(|(c, k)| k.then_some(c))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionState;
    use crate::store::config::Durability;
    use crate::store::fixtures::{session, until, TestDir};
    use crate::store::sqlite::{SqliteStore, DB_FILE};
    use rusqlite::{Connection, OptionalExtension};
    use std::time::Duration;

    fn start(dir: &TestDir, durability: Durability) -> GroupCommit {
        let store = SqliteStore::open(dir.path(), durability).expect("open");
        GroupCommit::start(Box::new(store)).expect("start")
    }

    /// Queues one session write; resolves when it is committed.
    async fn put(gc: &GroupCommit, id: &str, updated_ms: i64) -> Pending {
        let s = session(id, "1", updated_ms);
        let slot = gc.reserve().await.expect("slot");
        slot.send(vec![Change::PutSession(Arc::new(s))])
    }

    /// The commit window's time in these tests: it moves only when a test
    /// steps it (`advance`), and wakes the writer when it does.
    pub(super) struct SteppedTime {
        start: Instant,
        elapsed: Mutex<Duration>,
        /// The deadline the writer is waiting for, while it waits.
        waiting: Mutex<Option<Instant>>,
    }

    impl SteppedTime {
        pub(super) fn now(&self) -> Instant {
            self.start + *self.elapsed.lock().expect("elapsed")
        }

        /// The writer's wait for its window: until `deadline` on this
        /// clock, or a wake.
        pub(super) fn wait_until(
            &self,
            signal: &Condvar,
            woken: std::sync::MutexGuard<'_, bool>,
            deadline: Instant,
        ) {
            *self.waiting.lock().expect("waiting") = Some(deadline);
            let mut woken = signal
                .wait_while(woken, |w| !*w && self.now() < deadline)
                .expect("woken");
            *woken = false;
            *self.waiting.lock().expect("waiting") = None;
        }
    }

    /// A writer with a commit window (and a batch limit, when given), on
    /// stepped time.
    fn start_windowed(dir: &TestDir, window: Duration, max_batch: Option<usize>) -> GroupCommit {
        let store = SqliteStore::open(dir.path(), Durability::Relaxed).expect("open");
        let defaults = GroupCommitOptions::default();
        let opts = GroupCommitOptions {
            commit_window: window,
            max_batch_changes: max_batch.unwrap_or(defaults.max_batch_changes),
            ..defaults
        };
        let stepped = SteppedTime {
            start: Instant::now(),
            elapsed: Mutex::new(Duration::ZERO),
            waiting: Mutex::new(None),
        };
        let wake = Wake {
            stepped: Some(stepped),
            ..Wake::default()
        };
        GroupCommit::start_waking(Box::new(store), opts, wake).expect("start")
    }

    fn stepped(gc: &GroupCommit) -> &SteppedTime {
        gc.wake.stepped.as_ref().expect("a writer on stepped time")
    }

    /// Moves the window's time on by `by`, and wakes the writer to look.
    fn advance(gc: &GroupCommit, by: Duration) {
        *stepped(gc).elapsed.lock().expect("elapsed") += by;
        let _woken = gc.wake.woken.lock().expect("woken");
        gc.wake.signal.notify_all();
    }

    /// Waits until the writer waits for its commit window to close.
    async fn until_waiting(gc: &GroupCommit) {
        until("the writer waits for its window", || {
            stepped(gc).waiting.lock().expect("waiting").is_some()
        })
        .await;
    }

    /// Resolves `p`, which must not need the window's time to move.
    async fn at_once(p: Pending, what: &str) {
        tokio::time::timeout(Duration::from_secs(5), p)
            .await
            .unwrap_or_else(|_| panic!("{what} waited for the window"))
            .expect("committed");
    }

    fn stored_updated_ms(conn: &Connection, id: &str) -> Option<i64> {
        conn.query_row("SELECT updated_ms FROM sessions WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .optional()
        .expect("read")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_submitters_share_commits_and_wait_for_them() {
        let dir = TestDir::new("gc-concurrent");
        let gc = start(&dir, Durability::Full);
        const TASKS: usize = 32;
        const EACH: i64 = 20;
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let gc = gc.clone();
            let db = dir.path().join(DB_FILE);
            tasks.push(tokio::spawn(async move {
                // A second connection sees only committed data.
                let reader = Connection::open(&db).expect("reader");
                let id = format!("gx;task{t}");
                for i in 1..=EACH {
                    let s = session(&id, "001010000000001", i);
                    gc.submit(vec![Change::PutSession(Arc::new(s))])
                        .await
                        .expect("submit");
                    assert_eq!(stored_updated_ms(&reader, &id), Some(i), "{id} #{i}");
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        let st = gc.stats();
        let submits = TASKS as u64 * EACH as u64;
        assert_eq!(st.requests, submits);
        assert_eq!(st.changes, submits);
        assert_eq!(st.rows_changed + st.coalesced, submits);
        assert!(st.batches < submits, "no sharing: {st:?}");
        assert_eq!(st.commits, st.batches);
        assert_eq!(st.errors, 0);
        assert!(
            st.batch_size_le[0] < st.batches,
            "every batch had one request: {st:?}"
        );
        assert_eq!(st.queued, 0);
    }

    #[test]
    fn a_batch_is_answered_even_after_the_starting_runtime_is_gone() {
        let dir = TestDir::new("gc-runtime-gone");
        let starter = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        // Started inside a runtime, which answers the writer's batches...
        let gc = starter.block_on(async { start_windowed(&dir, Duration::from_millis(300), None) });
        // ...until it is gone: its answering task is dropped unrun.
        drop(starter);
        let requesters = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        requesters.block_on(async {
            let a = put(&gc, "gx;gone-a", 1).await;
            let b = put(&gc, "gx;gone-b", 1).await;
            advance(&gc, Duration::from_millis(300));
            assert!(matches!(a.await, Ok(())));
            assert!(matches!(b.await, Ok(())));
        });
        // Both shared one batch, so they took the runtime's path.
        assert_eq!(gc.stats().requests, 2);
        assert_eq!(gc.stats().batches, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_commit_window_gathers_later_requests_into_one_commit() {
        // Without a window nobody waits for later requests.
        let dir = TestDir::new("gc-window-0");
        let gc = start_windowed(&dir, Duration::ZERO, None);
        at_once(put(&gc, "gx;0", 1).await, "a change without a window").await;

        // With one, the first request waits for the window, and the nine
        // that came 30 ms later share its commit.
        let dir = TestDir::new("gc-window-3s");
        let gc = start_windowed(&dir, Duration::from_secs(3), None);
        let first = put(&gc, "gx;0", 1).await;
        until_waiting(&gc).await;
        advance(&gc, Duration::from_millis(30));
        let mut later = Vec::new();
        for i in 1..10 {
            later.push(put(&gc, &format!("gx;{i}"), 1).await);
        }
        advance(&gc, Duration::from_millis(2969));
        assert_eq!(gc.stats().commits, 0, "committed before the window closed");
        advance(&gc, Duration::from_millis(1));
        first.await.expect("first");
        for p in later {
            p.await.expect("later");
        }
        let st = gc.stats();
        assert_eq!((st.commits, st.requests), (1, 10), "{st:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_window_opens_only_when_changes_come_close_together() {
        let dir = TestDir::new("gc-window-under-load");
        let window = Duration::from_secs(1);
        let gc = start_windowed(&dir, window, None);
        // Long after the writer's last batch (its start): nothing to
        // gather, so it is committed at once.
        advance(&gc, window + Duration::from_millis(300));
        at_once(put(&gc, "alone", 1).await, "a lone change").await;
        // Right after that batch: changes come close together, the window
        // opens.
        let close = put(&gc, "close", 1).await;
        until_waiting(&gc).await;
        advance(&gc, window);
        close.await.expect("close");
        assert_eq!(gc.stats().commits, 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_window_runs_from_queueing_not_from_the_end_of_the_previous_batch() {
        // A's window closes at 2 s, then its batch waits for SQLite's lock
        // until 4.6 s; B, queued at 2.3 s meanwhile, is older than the 2 s
        // window by then, so it is committed at once, not a window later.
        let dir = TestDir::new("gc-window-from-queueing");
        let gc = start_windowed(&dir, Duration::from_secs(2), None);
        let blocker = Connection::open(dir.path().join(DB_FILE)).expect("blocker");
        blocker.execute_batch("BEGIN IMMEDIATE").expect("lock");
        let a = put(&gc, "a", 1).await;
        until_waiting(&gc).await;
        advance(&gc, Duration::from_secs(2));
        until("A's batch started", || gc.stats().batches == 1).await;
        advance(&gc, Duration::from_millis(300));
        let b = put(&gc, "b", 1).await;
        advance(&gc, Duration::from_millis(2300));
        blocker.execute_batch("COMMIT").expect("unlock");
        a.await.expect("a");
        at_once(b, "B, queued during A's commit,").await;
        let st = gc.stats();
        assert_eq!((st.batches, st.commits), (2, 2), "{st:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_batch_or_a_flush_ends_the_window_early() {
        // The writer no longer wakes for each change within the window;
        // these are the two things that must still wake it. The window's
        // time never moves here.
        let dir = TestDir::new("gc-window-ends-early");
        let gc = start_windowed(&dir, Duration::from_secs(30), Some(3));
        let a = put(&gc, "a", 1).await;
        until_waiting(&gc).await;
        let mut pending = vec![a];
        for id in ["b", "c"] {
            pending.push(put(&gc, id, 1).await);
        }
        for p in pending {
            at_once(p, "a full batch").await;
        }
        let d = put(&gc, "d", 1).await;
        until_waiting(&gc).await;
        tokio::time::timeout(Duration::from_secs(5), gc.flush())
            .await
            .expect("a flush waited for the window")
            .expect("flush");
        at_once(d, "the change before the flush").await;
        assert_eq!(gc.stats().batches, 2, "{:?}", gc.stats());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn changes_to_one_row_in_a_batch_coalesce_to_the_last() {
        let dir = TestDir::new("gc-coalesce");
        let gc = start(&dir, Durability::Full);
        // Hold SQLite's write lock so the writer's first batch waits and
        // the next requests pile up into one batch.
        let blocker = Connection::open(dir.path().join(DB_FILE)).expect("blocker");
        blocker.execute_batch("BEGIN IMMEDIATE").expect("lock");
        let first = put(&gc, "a", 1).await;
        until("the first batch started", || gc.stats().batches == 1).await;
        let mut pending = Vec::new();
        for i in 1..=3 {
            let slot = gc.reserve().await.expect("slot");
            pending.push(slot.send(vec![Change::PutSession(Arc::new(session("b", "1", i)))]));
        }
        pending.push(
            gc.reserve()
                .await
                .expect("slot")
                .send(vec![Change::delete_session("a", "1")]),
        );
        blocker.execute_batch("COMMIT").expect("unlock");
        first.await.expect("first");
        for p in pending {
            p.await.expect("coalesced request");
        }
        let st = gc.stats();
        assert_eq!(st.batches, 2, "{st:?}");
        assert_eq!(st.coalesced, 2, "{st:?}");
        assert_eq!(st.rows_changed, 3, "{st:?}");
        assert_eq!(stored_updated_ms(&blocker, "b"), Some(3));
        assert_eq!(stored_updated_ms(&blocker, "a"), None);
    }

    #[tokio::test]
    async fn unchanged_submit_skips_the_commit() {
        let dir = TestDir::new("gc-unchanged");
        let gc = start(&dir, Durability::Full);
        let s = Arc::new(session("gx;1", "1", 1));
        gc.submit(vec![Change::PutSession(s.clone())])
            .await
            .expect("first");
        gc.submit(vec![Change::PutSession(s.clone())])
            .await
            .expect("unchanged");
        gc.submit(vec![]).await.expect("empty");
        let st = gc.stats();
        assert_eq!((st.commits, st.skipped_commits, st.rows_changed), (1, 2, 1));
    }

    #[tokio::test]
    async fn a_failed_batch_fails_its_requests_and_the_writer_goes_on() {
        let dir = TestDir::new("gc-error");
        let mut store = SqliteStore::open(dir.path(), Durability::Full).expect("open");
        store
            .apply(&[Change::PutSession(Arc::new(session("keep", "1", 1)))])
            .expect("seed");
        store.limit_size(0).expect("cap");
        let gc = GroupCommit::start(Box::new(store)).expect("start");
        let big: Vec<Change> = (0..300)
            .map(|i| Change::PutSession(Arc::new(session(&format!("big{i}"), "1", i))))
            .collect();
        match gc.submit(big).await {
            Err(StoreError::Unavailable(m)) => assert!(m.contains("disk full"), "{m}"),
            other => panic!("expected disk full, got {other:?}"),
        }
        // The next batch (fits: a delete frees space) is written.
        gc.submit(vec![Change::delete_session("keep", "1")])
            .await
            .expect("writer still running");
        let st = gc.stats();
        assert_eq!((st.errors, st.commits), (1, 1), "{st:?}");
        let mut store = gc.shutdown().await.expect("shutdown");
        assert!(store.session("keep").expect("read").is_none());
        assert!(store.session("big0").expect("read").is_none());
    }

    #[tokio::test]
    async fn a_failed_batch_fails_the_probe_until_a_batch_commits() {
        let dir = TestDir::new("gc-probe");
        let mut store = SqliteStore::open(dir.path(), Durability::Full).expect("open");
        store
            .apply(&[Change::PutSession(Arc::new(session("a", "1", 1)))])
            .expect("first");
        store.limit_size(0).expect("cap at the current size");
        let gc = GroupCommit::start(Box::new(store)).expect("start");
        gc.probe().await.expect("a page rewritten in place fits");
        let big: Vec<Change> = (0..200)
            .map(|i| Change::PutSession(Arc::new(session(&format!("big{i}"), "1", i))))
            .collect();
        assert!(gc.submit(big).await.is_err());
        match gc.probe().await {
            Err(StoreError::Unavailable(m)) => assert!(m.contains("disk full"), "{m}"),
            other => panic!("expected the batch's failure, got {other:?}"),
        }
        gc.submit(vec![Change::delete_session("a", "1")])
            .await
            .expect("a delete fits");
        gc.probe().await.expect("ready once a batch committed");
    }

    #[tokio::test]
    async fn every_waiter_of_a_failed_batch_gets_the_error() {
        let dir = TestDir::new("gc-removed");
        let store = SqliteStore::open(dir.path(), Durability::Full).expect("open");
        let gc = GroupCommit::start(Box::new(store)).expect("start");
        gc.submit(vec![Change::PutSession(Arc::new(session("a", "1", 1)))])
            .await
            .expect("before removal");
        std::fs::remove_dir_all(dir.path()).expect("remove");
        let mut tasks = Vec::new();
        for i in 0..20 {
            let gc = gc.clone();
            tasks.push(tokio::spawn(async move {
                let s = session(&format!("s{i}"), "1", i);
                gc.submit(vec![Change::PutSession(Arc::new(s))]).await
            }));
        }
        for t in tasks {
            match t.await.expect("task") {
                Err(StoreError::Unavailable(m)) => assert!(m.contains("is gone"), "{m}"),
                other => panic!("expected unavailable, got {other:?}"),
            }
        }
        let st = gc.stats();
        assert_eq!(st.commits, 1);
        assert!(st.errors >= 1 && st.errors == st.batches - 1, "{st:?}");
    }

    #[tokio::test]
    async fn purge_runs_in_chunks_through_the_writer() {
        let dir = TestDir::new("gc-purge");
        let store = SqliteStore::open(dir.path(), Durability::Relaxed).expect("open");
        let gc = GroupCommit::start_with(
            Box::new(store),
            GroupCommitOptions {
                purge_chunk: 4,
                ..Default::default()
            },
        )
        .expect("start");
        let changes = (0..11)
            .map(|i| {
                let mut s = session(&format!("c{i}"), "1", i);
                s.state = SessionState::Closed;
                s.closed_ms = Some(1000 + i);
                Change::PutSession(Arc::new(s))
            })
            .collect();
        gc.submit(changes).await.expect("seed");
        assert_eq!(gc.purge_closed(1010).await.expect("purge"), 10);
        assert_eq!(gc.purge_closed(1010).await.expect("purge again"), 0);
        assert_eq!(gc.stats().purged, 10);
        let mut store = gc.shutdown().await.expect("shutdown");
        assert!(store.session("c10").expect("read").is_some());
    }

    #[tokio::test]
    async fn after_shutdown_requests_are_refused_not_lost_silently() {
        let dir = TestDir::new("gc-shutdown");
        let gc = start(&dir, Durability::Full);
        let slot = gc.reserve().await.expect("slot");
        let before = slot.send(vec![Change::PutSession(Arc::new(session("x", "1", 1)))]);
        gc.flush().await.expect("flush");
        before.await.expect("written before the flush returned");
        let mut store = gc.shutdown().await.expect("shutdown");
        assert!(store.session("x").expect("read").is_some());
        match gc.submit(vec![Change::delete_session("x", "1")]).await {
            Err(StoreError::Unavailable(m)) => assert!(m.contains("stopped"), "{m}"),
            other => panic!("expected stopped, got {other:?}"),
        }
        assert!(gc.flush().await.is_err());
    }

    /// A store with a bug: panics on a session named "boom". Stands in for
    /// no real part; it injects the fault the writer must survive.
    struct PanicsOnBoom(SqliteStore);

    impl Store for PanicsOnBoom {
        fn apply(&mut self, changes: &[Change]) -> Result<usize, StoreError> {
            if changes
                .iter()
                .any(|c| c.key() == crate::store::ChangeKey::Session("boom"))
            {
                panic!("injected bug");
            }
            self.0.apply(changes)
        }
        fn open_sessions(&mut self) -> Result<Vec<crate::session::GxSession>, StoreError> {
            self.0.open_sessions()
        }
        fn subscribers(&mut self) -> Result<Vec<crate::subscriber::Subscriber>, StoreError> {
            self.0.subscribers()
        }
        fn session(&mut self, id: &str) -> Result<Option<crate::session::GxSession>, StoreError> {
            self.0.session(id)
        }
        fn subscriber(
            &mut self,
            imsi: &str,
        ) -> Result<Option<crate::subscriber::Subscriber>, StoreError> {
            self.0.subscriber(imsi)
        }
        fn usage_records(&mut self) -> Result<Vec<crate::usage::SubscriberUsage>, StoreError> {
            self.0.usage_records()
        }
        fn usage(
            &mut self,
            subscriber: &str,
        ) -> Result<Option<crate::usage::SubscriberUsage>, StoreError> {
            self.0.usage(subscriber)
        }
        fn pending_events(&mut self) -> Result<Vec<crate::notify::Event>, StoreError> {
            self.0.pending_events()
        }
        fn purge_closed(&mut self, before_ms: i64, limit: usize) -> Result<usize, StoreError> {
            self.0.purge_closed(before_ms, limit)
        }
        fn probe(&mut self) -> Result<(), StoreError> {
            Ok(())
        }
        fn skipped_corrupt(&self) -> u64 {
            self.0.skipped_corrupt()
        }
    }

    #[tokio::test]
    async fn a_panicking_store_fails_the_batch_not_the_writer() {
        let dir = TestDir::new("gc-panic");
        let store = SqliteStore::open(dir.path(), Durability::Full).expect("open");
        let gc = GroupCommit::start(Box::new(PanicsOnBoom(store))).expect("start");
        match gc
            .submit(vec![Change::PutSession(Arc::new(session("boom", "1", 1)))])
            .await
        {
            Err(StoreError::Unavailable(m)) => assert!(m.contains("injected bug"), "{m}"),
            other => panic!("expected the panic as an error, got {other:?}"),
        }
        gc.submit(vec![Change::PutSession(Arc::new(session("fine", "1", 1)))])
            .await
            .expect("the writer survived");
        let mut store = gc.shutdown().await.expect("shutdown");
        assert!(store.session("fine").expect("read").is_some());
        assert!(store.session("boom").expect("read").is_none());
    }

    #[test]
    fn histograms_are_cumulative_with_overflow_left_to_the_total() {
        let m = Metrics::default();
        for v in [1, 2, 3, 1024, 1025, 1_000_000] {
            Metrics::observe(&m.batch_size, &BATCH_SIZE_BOUNDS, v);
        }
        let le: [u64; BATCH_SIZE_BOUNDS.len()] = Metrics::cumulative(&m.batch_size);
        // Bounds 1, 2, 4, 16, 64, 256, 1024; two values above every bound.
        assert_eq!(le, [1, 2, 3, 3, 3, 3, 4]);
    }

    #[test]
    fn coalesce_keeps_the_last_change_per_row() {
        let a1 = Change::PutSession(Arc::new(session("a", "1", 1)));
        let b = Change::PutSubscriber(Arc::new(crate::store::fixtures::subscriber("a")));
        let a2 = Change::delete_session("a", "1");
        let out = coalesce(vec![a1, b, a2]);
        assert_eq!(out.len(), 2);
        assert!(
            matches!(&out[0], Change::PutSubscriber(_)),
            "session and subscriber keys differ"
        );
        assert!(matches!(&out[1], Change::DeleteSession { id, .. } if id == "a"));
    }

    /// After a burst, a quiet spell gives the page cache back (it is read
    /// from disk again as needed); a writer not yet idle that long keeps it.
    #[tokio::test]
    async fn a_quiet_writer_gives_its_page_cache_back() {
        for (tag, quiet) in [
            ("gc-busy-cache", Duration::from_secs(3600)),
            ("gc-quiet-cache", Duration::from_millis(100)),
        ] {
            let dir = TestDir::new(tag);
            let store = SqliteStore::open(dir.path(), Durability::Relaxed).expect("open");
            let opts = GroupCommitOptions {
                idle_release: quiet,
                ..Default::default()
            };
            let gc = GroupCommit::start_with(Box::new(store), opts).expect("start");
            let changes = (0..4000)
                .map(|i| Change::PutSession(Arc::new(session(&format!("q{i}"), "1", i))))
                .collect();
            gc.submit(changes).await.expect("commits");
            // Deliberate: a quiet spell longer than the short idle_release
            // (and shorter than the long one, whose cache must stay).
            tokio::time::sleep(Duration::from_millis(600)).await;
            let cache = gc.shutdown().await.expect("stops").cache_bytes();
            if quiet > Duration::from_secs(1) {
                assert!(cache > 1_000_000, "{tag}: {cache} bytes cached");
            } else {
                assert!(cache < 64 * 1024, "{tag}: {cache} bytes cached");
            }
        }
    }
}

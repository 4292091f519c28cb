//! Precise wake-ups for generator tasks that measure latency from their
//! intended times.
//!
//! tokio's timer has a resolution of one millisecond and rounds every
//! sleep up to its next tick, so a request whose task sleeps until its
//! intended time leaves up to a millisecond late (more when the runtime is
//! busy), and that lateness counts in the request's latency: measured side
//! by side with the Gx generator (whose scheduler thread sleeps with a
//! 1 µs timer slack, see `open_loop`), it made the N7 twin look about a
//! millisecond slower at every percentile. An alarm is one thread with
//! the same 1 µs timer slack that keeps the pending wake-ups in order and
//! wakes each task at its time; a task awaits [`Alarm::until`].

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::Thread;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// The longest the alarm thread sleeps with nothing due (a new, earlier
/// wake-up unparks it at once).
const IDLE_SLEEP: Duration = Duration::from_millis(100);

/// One pending wake-up; the heap's top is the earliest.
struct Due {
    at: Instant,
    seq: u64,
    wake: oneshot::Sender<()>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

struct Inner {
    due: Mutex<BinaryHeap<Due>>,
    next_seq: AtomicU64,
    stop: AtomicBool,
    thread: Thread,
}

/// The alarm thread's handle; dropping it stops the thread.
pub struct Alarm {
    inner: Arc<Inner>,
}

impl Alarm {
    /// Starts the alarm thread.
    pub fn start() -> Result<Alarm, String> {
        let (tx, rx) = std::sync::mpsc::channel::<Arc<Inner>>();
        let handle = std::thread::Builder::new()
            .name("alarm".into())
            .spawn(move || {
                // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this
                // thread's timer slack.
                unsafe {
                    libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong, 0, 0, 0);
                }
                let Ok(inner) = rx.recv() else {
                    return;
                };
                run(&inner);
            })
            .map_err(|e| format!("alarm thread: {e}"))?;
        let inner = Arc::new(Inner {
            due: Mutex::new(BinaryHeap::new()),
            next_seq: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            thread: handle.thread().clone(),
        });
        tx.send(inner.clone())
            .map_err(|_| "alarm thread ended at start".to_owned())?;
        Ok(Alarm { inner })
    }

    /// Resolves at `at` (at once when it is past).
    pub async fn until(&self, at: Instant) {
        if at <= Instant::now() {
            return;
        }
        let (wake, woken) = oneshot::channel();
        let seq = self.inner.next_seq.fetch_add(1, Relaxed);
        {
            let mut due = self.inner.due.lock().unwrap_or_else(|e| e.into_inner());
            let earliest = due.peek().map(|d| d.at);
            due.push(Due { at, seq, wake });
            if earliest.is_none_or(|e| at < e) {
                // The thread sleeps until the old earliest: wake it to
                // sleep until this one instead.
                self.inner.thread.unpark();
            }
        }
        let _ = woken.await;
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        self.inner.stop.store(true, Relaxed);
        self.inner.thread.unpark();
    }
}

fn run(inner: &Inner) {
    while !inner.stop.load(Relaxed) {
        let now = Instant::now();
        let mut next = None;
        {
            let mut due = inner.due.lock().unwrap_or_else(|e| e.into_inner());
            while let Some(d) = due.peek() {
                if d.at > now {
                    next = Some(d.at);
                    break;
                }
                if let Some(d) = due.pop() {
                    let _ = d.wake.send(());
                }
            }
        }
        let sleep = next.map_or(IDLE_SLEEP, |at| at - now).min(IDLE_SLEEP);
        std::thread::park_timeout(sleep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_wake_in_order_and_not_early() {
        let alarm = Arc::new(Alarm::start().expect("alarm"));
        let start = Instant::now() + Duration::from_millis(20);
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // Registered out of order; each wakes at (or after) its own time.
        for i in [3u32, 0, 2, 1] {
            let (alarm, order) = (alarm.clone(), order.clone());
            let at = start + Duration::from_millis(5) * i;
            tasks.push(tokio::spawn(async move {
                alarm.until(at).await;
                assert!(Instant::now() >= at, "woken early");
                order.lock().expect("lock").push(i);
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(*order.lock().expect("lock"), vec![0, 1, 2, 3]);
        // A time already past resolves at once.
        alarm.until(Instant::now()).await;
    }
}

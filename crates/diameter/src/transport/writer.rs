//! The writer task of one connection: drains every encoded message queued
//! since its last wakeup into one buffer and writes it with one call, so a
//! burst of answers costs one send (a system call per answer would
//! otherwise dominate the transport's CPU at tens of thousands of answers
//! a second).

use super::counters::PeerCounters;
use super::peer_handle::PeerShared;
use bytes::{Bytes, BytesMut};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Most messages taken from the queue per write.
const BATCH: usize = 512;
/// Keep the buffer's allocation up to this size between writes.
const KEEP_CAPACITY: usize = 256 * 1024;

/// A write this soon after the previous one means messages are arriving
/// faster than one per wakeup: worth waiting a turn for the next ones.
const BUSY_GAP: Duration = Duration::from_micros(100);

/// Whether more messages are about to be queued: several were already
/// waiting, the previous write was moments ago, or requests other than the
/// `queued` answers are still being handled on this connection (a handler
/// counts as in flight until just after its answer is queued).
fn more_coming(c: &PeerCounters, queued: usize, last_write: Instant) -> bool {
    queued > 1
        || last_write.elapsed() < BUSY_GAP
        || c.in_flight.load(Ordering::Relaxed) > queued as u64
}

/// Writes until the queue closes (every sender dropped) or the socket fails;
/// then shuts the write side down.
pub(crate) async fn write_loop<W: AsyncWrite + Unpin>(
    mut w: W,
    mut rx: mpsc::Receiver<Bytes>,
    shared: Arc<PeerShared>,
) {
    let mut batch: Vec<Bytes> = Vec::with_capacity(BATCH);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let c = &shared.counters;
    let mut last_write = Instant::now();
    loop {
        if rx.recv_many(&mut batch, BATCH).await == 0 {
            break;
        }
        if batch.len() < BATCH && more_coming(c, batch.len(), last_write) {
            // Let the tasks about to send run first, then take what they
            // queued: one write for the lot instead of one each. Only under
            // load: a yield wakes the runtime's other worker, which at low
            // load costs more than the write it would save (echo server at
            // 3000 TPS: 0.79 of the CPU without it, BENCHMARKS.md).
            tokio::task::yield_now().await;
            while batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(m) => batch.push(m),
                    Err(_) => break,
                }
            }
        }
        let n = batch.len();
        if batch.len() == 1 {
            // One message: write it as it is, no copy.
            let m = batch.pop().unwrap_or_default();
            if w.write_all(&m).await.is_err() {
                break;
            }
            PeerCounters::add(&c.bytes_out, m.len() as u64);
        } else {
            for m in batch.drain(..) {
                buf.extend_from_slice(&m);
            }
            if w.write_all(&buf).await.is_err() {
                break;
            }
            PeerCounters::add(&c.bytes_out, buf.len() as u64);
            buf.clear();
            if buf.capacity() > KEEP_CAPACITY {
                buf = BytesMut::with_capacity(64 * 1024);
            }
        }
        PeerCounters::add(&c.messages_out, n as u64);
        PeerCounters::add(&c.writes, 1);
        if w.flush().await.is_err() {
            break;
        }
        last_write = Instant::now();
    }
    rx.close();
    let _ = w.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_a_turn_only_when_more_are_coming() {
        let c = PeerCounters::default();
        let long_ago = Instant::now() - Duration::from_millis(5);
        // One answer, its own handler the only one in flight, idle link.
        c.in_flight.store(1, Ordering::Relaxed);
        assert!(!more_coming(&c, 1, long_ago));
        // Several answers were already waiting.
        assert!(more_coming(&c, 2, long_ago));
        // Other handlers are still running.
        c.in_flight.store(3, Ordering::Relaxed);
        assert!(more_coming(&c, 1, long_ago));
        // Nothing in flight (a client's requests), but writes are back to back.
        c.in_flight.store(0, Ordering::Relaxed);
        assert!(more_coming(&c, 1, Instant::now()));
        assert!(!more_coming(&c, 1, long_ago));
    }
}

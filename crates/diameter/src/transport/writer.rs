//! The writer task of one connection: drains every encoded message queued
//! since its last wakeup into one buffer and writes it with one call, so a
//! burst of answers costs one send (the batching lesson of the brief).

use super::counters::PeerCounters;
use super::peer_handle::PeerShared;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Most messages taken from the queue per write.
const BATCH: usize = 512;
/// Keep the buffer's allocation up to this size between writes.
const KEEP_CAPACITY: usize = 256 * 1024;

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
    loop {
        if rx.recv_many(&mut batch, BATCH).await == 0 {
            break;
        }
        if batch.len() < BATCH {
            // Let the tasks that are about to answer run first, then take
            // what they queued: one write for the lot instead of one each.
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
    }
    rx.close();
    let _ = w.shutdown().await;
}

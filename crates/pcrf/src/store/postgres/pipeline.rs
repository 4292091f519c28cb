//! Runs many tokio-postgres requests concurrently on one connection, which
//! is what makes them one round trip: each request is written to the socket
//! when its future is first polled, so polling them all before waiting
//! sends BEGIN and every statement of a batch in one flush, and the answers
//! come back in order.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Instant;

/// A request in flight, borrowing the client and its parameters.
pub(super) type Request<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Drives every request to completion and returns their outputs in the
/// order given, each with the instant it completed when `timed` (for the
/// profiler; no clock is read otherwise).
pub(super) async fn run_all<T>(
    requests: Vec<Request<'_, T>>,
    timed: bool,
) -> Vec<(T, Option<Instant>)> {
    let mut pending: Vec<Option<Request<'_, T>>> = requests.into_iter().map(Some).collect();
    let mut done: Vec<Option<(T, Option<Instant>)>> = pending.iter().map(|_| None).collect();
    // Every request must be polled once (sent) before any is waited on.
    let mut sent = false;
    // Answers arrive in request order: everything before `first` is done.
    let mut first = 0;
    std::future::poll_fn(|cx| {
        let mut i = first;
        while i < pending.len() {
            if let Some(fut) = pending[i].as_mut() {
                match fut.as_mut().poll(cx) {
                    Poll::Ready(out) => {
                        done[i] = Some((out, timed.then(Instant::now)));
                        pending[i] = None;
                    }
                    // Once all are sent, a pending answer means the later
                    // ones are pending too: its waker brings us back.
                    Poll::Pending if sent => return Poll::Pending,
                    Poll::Pending => {}
                }
            }
            if pending[i].is_none() && i == first {
                first += 1;
            }
            i += 1;
        }
        sent = true;
        if first == pending.len() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    done.into_iter().flatten().collect()
}

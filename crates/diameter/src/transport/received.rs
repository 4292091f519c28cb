//! When the transport read the request a handler is answering. Requests
//! run as tasks of their own, so the time between reading one and its
//! handler starting is the node's queueing delay: what an application
//! needs to tell a burst it is absorbing from an overload it must shed
//! (the PCRF's admission control). Kept in a task-local so that the
//! [`super::Handler`] signature stays as it is.

use std::time::Instant;

tokio::task_local! {
    static RECEIVED_AT: Instant;
}

/// When the request being handled on this task was read off its
/// connection; `None` outside a handler the transport started.
pub fn request_received_at() -> Option<Instant> {
    RECEIVED_AT.try_with(|t| *t).ok()
}

/// Runs `fut` (a handler's task) with `at` as its request's read time.
pub(crate) async fn scope<F: std::future::Future>(at: Instant, fut: F) -> F::Output {
    RECEIVED_AT.scope(at, fut).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_read_time_is_seen_inside_the_scope_only() {
        assert_eq!(request_received_at(), None);
        let at = Instant::now();
        let seen = scope(at, async {
            tokio::task::yield_now().await;
            request_received_at()
        })
        .await;
        assert_eq!(seen, Some(at));
        assert_eq!(request_received_at(), None);
    }
}

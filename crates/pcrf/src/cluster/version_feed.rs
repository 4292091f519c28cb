//! A policy or usage file version deployed through any node, served by
//! every node. The insert of a version NOTIFYs `pcrf_versions` in its
//! transaction (schema 12), so it is heard when it commits; each node then
//! checks the newest stored version (the policy: compile, sample inputs,
//! test cases; the usage file: validation, and the grants its own open
//! sessions hold) and installs it, or keeps its own and says why
//! (`GET /v1/cluster`, its heartbeat row, `pcrf_policy_version_refused`,
//! `pcrf_usage_version_refused`). As with the provisioning feed, a
//! notification sent while the connection was down is lost: after every
//! (re)connection, and every `POLL` while listening (a database without
//! NOTIFY), the newest versions are compared with those serving. A canary
//! rollout is a record beside the versions (`policy::rollout`), notified
//! and adopted alike.

use crate::cluster::provisioning_feed::Listener;
use crate::control::versions::Deployer;
use std::time::Duration;

/// The channel the versions' trigger notifies.
pub const CHANNEL: &str = "pcrf_versions";

/// How often the newest version is compared while nothing is notified.
pub const POLL: Duration = Duration::from_secs(10);

/// Compares the newest stored versions of the policy and of the usage
/// file with those serving (off the async workers: the checks run Lua and
/// read the sessions).
/// When a rollout started, changed or ended here, or a rollback withdrew
/// a version, the sessions it moved are decided again.
async fn adopt(deployer: &Deployer) {
    let host = deployer.usage.clone();
    let usage = deployer.policy.runner().usage_versions().clone();
    match tokio::task::spawn_blocking(move || usage.adopt_newest(&host)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "reading the newest usage file version failed"),
        Err(e) => tracing::error!(error = %e, "usage file adoption task failed"),
    }
    let versions = deployer.policy.runner().policy_versions().clone();
    let rollout_before = versions.rollout();
    match tokio::task::spawn_blocking(move || versions.adopt_newest()).await {
        Ok(Ok(true)) => {
            let rollout = rollout_before.is_some()
                || deployer
                    .policy
                    .runner()
                    .policy_versions()
                    .rollout()
                    .is_some();
            let versions = deployer.policy.runner().policy_versions().clone();
            let withdraws = matches!(
                tokio::task::spawn_blocking(move || versions.serving_withdraws()).await,
                Ok(Ok(true))
            );
            if rollout || withdraws {
                crate::control::versions::redecide_reassigned(deployer);
            }
        }
        Ok(Ok(false)) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "reading the newest policy version failed"),
        Err(e) => tracing::error!(error = %e, "policy adoption task failed"),
    }
}

/// Adopts versions as they are deployed until `stop`; reconnects with a
/// backoff of up to 5 s when the connection is lost.
pub async fn run(
    deployer: Deployer,
    url: String,
    timeout: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        match Listener::open_on(
            &url,
            timeout,
            &deployer.signalling.me().origin_host,
            CHANNEL,
        )
        .await
        {
            Ok(mut l) => {
                backoff = Duration::from_millis(100);
                adopt(&deployer).await;
                loop {
                    tokio::select! {
                        note = l.notes.recv() => {
                            if note.is_none() {
                                tracing::warn!("policy version feed lost; reconnecting");
                                break;
                            }
                            // Whatever else is queued is covered by this read.
                            while l.notes.try_recv().is_ok() {}
                            adopt(&deployer).await;
                        }
                        _ = tokio::time::sleep(POLL) => adopt(&deployer).await,
                        changed = stop.changed() => {
                            if changed.is_err() || *stop.borrow() {
                                return;
                            }
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(error = %e, "policy version feed: cannot listen; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

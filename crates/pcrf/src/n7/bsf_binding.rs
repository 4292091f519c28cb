//! Keeping the BSF's PCF bindings in step with the N7 sessions through
//! crashes: each open PDU session served here has exactly one binding
//! naming this node, and an ended one none (see `sbi::bsf` for the
//! protocol).
//!
//! A binding is registered after the Create is answered, and its id (the
//! BSF chooses it) is then written to the session's record. A `kill -9`
//! can fall between any two of those steps, and a BSF can be down when a
//! session starts, so:
//! - **no binding lost:** a session left without a binding id (the node
//!   died before registering, or the BSF refused or was unreachable) gets
//!   one from the sweep that runs once the node has recovered its
//!   sessions and then every [`SWEEP_EVERY`];
//! - **none left behind at a Delete:** the binding is removed *before*
//!   the closing commit. A node that dies between the two still holds the
//!   session open, with the (now removed) id: the SMF, which got no
//!   answer, sends its Delete again, and the BSF's 404 counts as removed;
//! - **none registered twice:** a session being registered (by its
//!   Create's task, a take-over or the sweep) is not registered again
//!   meanwhile.
//!
//! What this cannot close is the BSF's own step: the id exists only in
//! the BSF's 201. A node that dies after the BSF made the binding and
//! before the id reached the store registers the session again at its
//! restart, and the first binding is left at a BSF that keeps both (one
//! that keeps one binding per UE address and DNN replaces it). The window
//! is one answer's way back plus one store commit.

use crate::node::{Capabilities, Sessions, Settings};
use crate::session::{GxSession, SessionState};
use crate::txn::{self, Runner};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// How often sessions without a binding are looked for after the first
/// sweep.
pub const SWEEP_EVERY: Duration = Duration::from_secs(30);

/// Registers and sweeps the PCF bindings of the node's N7 sessions.
pub struct BindingKeeper {
    sessions: Sessions,
    settings: Settings,
    txn: Runner,
    /// The ids of the sessions whose binding is being registered now.
    registering: Mutex<HashSet<Arc<str>>>,
}

impl BindingKeeper {
    pub fn new(caps: &Capabilities) -> Arc<BindingKeeper> {
        Arc::new(BindingKeeper {
            sessions: caps.sessions.clone(),
            settings: caps.settings.clone(),
            txn: Runner::new(caps),
            registering: Mutex::new(HashSet::new()),
        })
    }

    /// With `[sbi.bsf]`: registers the session's PCF binding, naming this
    /// node, in the background and records its id in the session; a
    /// binding the session held before (registered by the node that served
    /// it until now) is removed once the new one is stored. Nothing when
    /// a registration for the session runs already.
    pub fn bind(self: &Arc<Self>, s: &GxSession) {
        let live = self.settings.live();
        let (Some(sbi), Some(ctx)) = (live.cfg.sbi.as_ref(), s.n7.as_deref()) else {
            return;
        };
        let Some(bsf) = sbi.bsf() else {
            return;
        };
        if !self.registering.lock().insert(s.id.clone()) {
            return;
        }
        let pcf = bsf.cfg.pcf_address.unwrap_or(sbi.listen);
        let body = crate::sbi::bsf::binding(ctx, pcf, bsf.cfg.pcf_fqdn.as_deref());
        let id = s.id.clone();
        let this = self.clone();
        tokio::spawn(async move {
            register(&this, &bsf, &body, &id).await;
            this.registering.lock().remove(&id);
        });
    }

    /// Registers a binding for each open N7 session held here that has
    /// none: once now, then every [`SWEEP_EVERY`] until `stop`. Started
    /// after the node has recovered its sessions.
    pub async fn run(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            let missing = self.sessions_without_binding();
            if !missing.is_empty() {
                tracing::info!(
                    sessions = missing.len(),
                    "N7 sessions without a PCF binding at the BSF; registering"
                );
            }
            for s in missing {
                self.bind(&s);
            }
            tokio::select! {
                _ = tokio::time::sleep(SWEEP_EVERY) => {}
                _ = stop.wait_for(|v| *v) => return,
            }
        }
    }

    /// Open N7 sessions held here with no binding id, none of them being
    /// registered now; none without `[sbi.bsf]`.
    fn sessions_without_binding(&self) -> Vec<Arc<GxSession>> {
        let bsf_on = self
            .settings
            .live()
            .cfg
            .sbi
            .as_ref()
            .is_some_and(|s| s.bsf().is_some());
        if !bsf_on {
            return Vec::new();
        }
        self.sessions.table().list(
            None,
            |s| {
                s.state == SessionState::Open
                    && s.n7.is_some()
                    && s.bsf_binding.is_none()
                    && !self.registering.lock().contains(&s.id)
            },
            usize::MAX,
        )
    }
}

/// One registration of session `id`'s binding `body`, and its id stored
/// under the session's lock; the binding is removed again when the
/// session ended meanwhile or the id could not be stored.
async fn register(
    keeper: &BindingKeeper,
    bsf: &crate::sbi::bsf::Bsf,
    body: &serde_json::Value,
    id: &str,
) {
    let binding = match bsf.register(body).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(session = %id, error = %e, "PCF binding not registered at the BSF; tried again by the next sweep");
            return;
        }
    };
    let Some(slot) = keeper.sessions.table().get(id) else {
        // Deleted meanwhile: the binding goes too.
        let _ = bsf.deregister(&binding).await;
        return;
    };
    let stored = txn::holding(&slot, async |cur| {
        if cur.state != SessionState::Open {
            return None;
        }
        let mut next = (*cur).clone();
        let replaced = next.bsf_binding.replace(binding.clone());
        Some(
            txn::commit_record(&keeper.txn, &slot, Arc::new(next))
                .await
                .map(|()| replaced),
        )
    })
    .await;
    let Some(done) = stored else {
        let _ = bsf.deregister(&binding).await;
        return;
    };
    match done {
        Ok(replaced) => {
            if let Some(old) = replaced {
                if let Err(e) = bsf.deregister(&old).await {
                    tracing::warn!(binding = %old, error = %e, "replaced PCF binding not removed at the BSF");
                }
            }
        }
        Err(e) => {
            // Not in the record (another node wrote it meanwhile, or the
            // store failed): nobody would remove it later.
            tracing::warn!(session = %id, error = %e, "the BSF binding's id was not stored; it is removed again");
            let _ = bsf.deregister(&binding).await;
        }
    }
}

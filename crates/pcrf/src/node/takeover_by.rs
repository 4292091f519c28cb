//! Taking over the sessions a request names only by what they hold: an Rx
//! AAR or a TDF's CCR-I names the UE address, an AAR update, an STR or a
//! TDF's CCR-U/T names the Rx or Sd session bound to the Gx session. On a
//! node that holds none of them, the ids are read from the store's indexed
//! columns (`OpenSessionsBy`) and each session is taken over as a Gx
//! request would take it over (takeover.rs). Only on a miss: never on the
//! path of a session that stays on its node.

use super::takeover::read_in_time;
use super::Sessions;
use crate::session::SessionSlot;
use crate::store::OpenSessionsBy;
use diameter::codec::DiameterError;
use std::sync::Arc;

impl Sessions {
    /// On a store shared with other nodes: the slots of the open sessions
    /// `by` finds in the store, each held here from now on (taken over, or
    /// read afresh when another node wrote the copy held here since). None
    /// on the embedded store. A store that cannot be read is an error
    /// (5012), not an unknown session.
    pub(crate) async fn take_over_by(
        &self,
        by: OpenSessionsBy,
    ) -> Result<Vec<Arc<SessionSlot>>, DiameterError> {
        if !self.node.persistence.writer.is_shared() {
            return Ok(Vec::new());
        }
        let ids = read_in_time(
            &by,
            self.node.persistence.writer.open_session_ids(by.clone()),
        )
        .await?;
        let mut slots = Vec::with_capacity(ids.len());
        for id in ids {
            // A copy held here that does not hold what the store says it
            // does is stale: read afresh.
            self.moved_away(&id).await;
            if let Some(slot) = self.find_or_take_over(&id).await? {
                slots.push(slot);
            }
        }
        Ok(slots)
    }
}

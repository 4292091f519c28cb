//! What the PCF tells an N5 AF (TS 29.514 §4.2.5): an event it subscribed
//! to (`{notifUri}/notify`, EventsNotification) and the end of its
//! application session when the PDU session it was bound to ends
//! (`{notifUri}/terminate`, TerminationInfo). The Rx flows ask for these
//! through `AfSignalling`, which the N5 service implements, for an AF
//! session that came over N5, where an Rx AF gets an RAR or an ASR.
//! Over the same HTTP/2 client as the pushes to SMFs.

use super::app_sessions::AppSessions;
use super::decode::af_event;
use crate::node::{BoxFuture, Signalling};
use crate::rx::service::AfSignalling;
use crate::session::af::AfSession;
use serde_json::json;

impl AfSignalling for AppSessions {
    fn event<'a>(&'a self, af: &'a AfSession, action: i32) -> BoxFuture<'a, Result<u16, String>> {
        Box::pin(async move {
            let uri = af.notification_uri.as_deref().unwrap_or_default();
            event(uri, &app_session_uri(self.signalling(), &af.id), action).await
        })
    }

    fn terminate<'a>(&'a self, af: &'a AfSession) -> BoxFuture<'a, Result<u16, String>> {
        Box::pin(async move {
            let uri = af.notification_uri.as_deref().unwrap_or_default();
            terminate(uri, &app_session_uri(self.signalling(), &af.id)).await
        })
    }
}

/// The resource URI of the N5 application session `id` (what its
/// notifications name).
fn app_session_uri(signalling: &Signalling, id: &str) -> String {
    format!(
        "{}{}/app-sessions/{id}",
        signalling.sbi_root(),
        super::model::N5_SERVICE_ROOT
    )
}

/// The status the AF answered with, or why there was none.
async fn post(uri: &str, suffix: &str, body: serde_json::Value) -> Result<u16, String> {
    let client = crate::sbi::client::client()?;
    let base = uri.strip_suffix('/').unwrap_or(uri);
    let url = format!("{base}/{suffix}");
    let answer = client
        .post(&url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    Ok(answer.status().as_u16())
}

/// An event of the AF session at `resource_uri` (an Rx Specific-Action,
/// told as its AfEvent).
async fn event(uri: &str, resource_uri: &str, action: i32) -> Result<u16, String> {
    let body = json!({
        "evSubsUri": format!("{resource_uri}/events-subscription"),
        "evNotifs": [{ "event": af_event(action) }],
    });
    post(uri, "notify", body).await
}

/// The AF session at `resource_uri` ends with its PDU session.
async fn terminate(uri: &str, resource_uri: &str) -> Result<u16, String> {
    let body = json!({
        "termCause": "PDU_SESSION_TERMINATION",
        "resUri": resource_uri,
    });
    post(uri, "terminate", body).await
}

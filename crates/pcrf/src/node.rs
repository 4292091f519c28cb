//! The running PCRF node: what every application's service shares (the
//! configuration in force, the subscriber, session and usage tables, the
//! policy engine, the store writer, the Diameter peers, the metrics),
//! handed out as capabilities. `Node` itself is private to this module:
//! start-up assembles it and gets back [`Capabilities`], one cheap handle
//! per part (`Sessions`, `Subscribers`, `UsageLedger`, `Policy`,
//! `Signalling`, `Persistence`, `Events`, `Telemetry`, `Settings`), each
//! in its own file below with the steps that belong to it. An application
//! service holds only the handles it uses, so what it may reach is named
//! in its struct; the transaction runner (`txn::Runner`) is built from
//! the handles the request envelope and the commit need.

pub(crate) mod doic;
mod enforcement;
pub(crate) mod events;
mod monitoring;
pub(crate) mod ownership;
mod persistence;
mod policy;
mod policy_runner;
mod sessions;
mod settings;
mod signalling;
mod state;
mod subscribers;
pub(crate) mod takeover;
pub(crate) mod takeover_by;
mod telemetry;
mod usage_ledger;

pub(crate) use crate::usage::step::{billing_day, UsageStep};
pub use crate::usage::table::UsageCounters;
pub use enforcement::{BoxFuture, GxSignalling, SmfSignalling};
pub use events::Events;
pub use persistence::Persistence;
pub use policy::Policy;
pub use policy_runner::PolicyRunner;
pub use sessions::Sessions;
pub use settings::Settings;
pub use signalling::Signalling;
pub(crate) use state::{ecgi_of_location, now_ms, replay, usage_change, Answered, COMMIT_WAIT};
pub use state::{NodeCounters, NodeParts, USER_UNKNOWN};
pub use subscribers::Subscribers;
pub use telemetry::Telemetry;
pub use usage_ledger::UsageLedger;

use state::Node;

/// The node's capabilities, one handle each; start-up hands each service
/// the ones it uses. Cloning one is cloning a pointer.
#[derive(Clone)]
pub struct Capabilities {
    pub sessions: Sessions,
    pub subscribers: Subscribers,
    pub usage: UsageLedger,
    pub policy: Policy,
    pub signalling: Signalling,
    pub persistence: Persistence,
    pub events: Events,
    pub telemetry: Telemetry,
    pub settings: Settings,
}

impl Capabilities {
    /// Assembles a node from what start-up loaded and hands out its
    /// capabilities.
    pub fn new(p: NodeParts) -> Capabilities {
        let node = Node::new(p);
        Capabilities {
            sessions: Sessions { node: node.clone() },
            subscribers: Subscribers { node: node.clone() },
            usage: UsageLedger { node: node.clone() },
            policy: Policy { node: node.clone() },
            signalling: Signalling { node: node.clone() },
            persistence: Persistence { node: node.clone() },
            events: Events { node: node.clone() },
            telemetry: Telemetry { node: node.clone() },
            settings: Settings { node },
        }
    }
}

//! Several nodes on one PostgreSQL store: which nodes there are and whether
//! they are alive (`membership`, written and read by this node's
//! `heartbeat` task), the provisioning changes every node must see at
//! once (`provisioning_feed`), and the policy version every node serves
//! (`version_feed`). The embedded SQLite store is
//! single-node: there these answer for this node alone.

pub mod config;
pub mod heartbeat;
pub mod membership;
pub mod provisioning_feed;
pub mod version_feed;

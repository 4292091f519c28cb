//! Several nodes on one PostgreSQL store: which nodes there are and whether
//! they are alive (`membership`, written and read by this node's
//! `heartbeat` task), and the provisioning changes every node must see at
//! once (`provisioning_feed`). The embedded SQLite store is
//! single-node: there these answer for this node alone.

pub mod config;
pub mod heartbeat;
pub mod membership;
pub mod provisioning_feed;

//! The PCRF: Gx (and later Rx, Sd, Sy) sessions decided by a hot-reloadable
//! Lua policy, kept in memory, made durable through a group-commit writer.

pub mod admission;
pub mod allocator;
pub mod api;
pub mod certificate_expiry;
pub mod client;
pub mod client_n7;
pub mod cluster;
pub mod config;
pub mod control;
pub mod dispatch;
pub mod file_watch;
pub mod fuzz;
pub mod gx;
pub mod http_listener;
pub mod limits;
pub mod logging;
pub mod metrics;
pub mod n5;
pub mod n7;
pub mod node;
pub mod notify;
pub mod pcc;
pub mod policy;
pub mod rx;
pub mod sbi;
pub mod sd;
pub mod server;
pub mod services;
pub mod session;
pub mod session_message;
pub mod store;
pub mod subscriber;
pub mod sy;
pub mod txn;
pub mod usage;

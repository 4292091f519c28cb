//! The operations an operator drives (provisioning, session control,
//! policy reload, usage changes): `interface.rs` states them as one trait
//! with its result types, `operations.rs` carries them out over the node and
//! the Gx service, `usage.rs` is what a subscriber's usage looks like. The
//! REST API depends on this, so it can be tested on its own and the node
//! and the services know nothing of HTTP.

pub mod console;
mod interface;
mod operations;
pub mod usage;
pub mod version_views;
pub mod versions;

pub use interface::*;
pub use operations::Operations;
pub use usage::{AccumulatorView, ReportView, UsageChange, UsageView};

//! The Lua policy engine: the operator's script decides each session's rules
//! and QoS. Sandboxed, hot-reloaded, and run only when its inputs changed.

pub mod decision;
pub mod input;

pub use decision::Decision;
pub use input::PolicyInput;

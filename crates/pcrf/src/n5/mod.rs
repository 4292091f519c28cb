//! Npcf_PolicyAuthorization (N5, TS 29.514): an AF (the IMS P-CSCF for a
//! voice call) asks the PCF for its media's QoS over HTTP/2. The data model
//! ([`model`]) and decoder ([`decode`]) are N5's own; the flows are Rx's
//! (`rx::service`: binding by UE address, the media policy hook, pushing
//! the rules to the session's enforcement point, ending), reached by
//! [`app_sessions`], so an AF session is the same record whether it came
//! over Rx or N5. The routes are on the SBI listener (`crate::sbi`).

pub mod app_sessions;
pub mod decode;
pub mod model;
pub mod notify;

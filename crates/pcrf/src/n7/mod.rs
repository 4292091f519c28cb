//! Npcf_SMPolicyControl (N7, TS 29.512): the SMF asks for a PDU session's
//! policy over HTTP/2. This module is the protocol's wire half: the data
//! model ([`model`]), the validating decoder ([`decode`]), the policy's
//! view of a PDU session ([`session_input`]), the decision written as an
//! SmPolicyDecision ([`decision_map`]), and the seam the SBI routes call
//! ([`service`]); the four operations on the node's sessions
//! ([`sessions`]), an Update sent again recognised ([`repeat`]), and the
//! pushes to the SMF ([`notify`]). The listener is
//! in `crate::sbi`.

pub mod bsf_binding;
pub mod decision_map;
pub mod decode;
pub mod held;
pub mod model;
pub mod notify;
pub mod repeat;
pub mod service;
pub mod session_input;
pub mod sessions;

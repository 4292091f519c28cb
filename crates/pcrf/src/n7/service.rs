//! The seam between the SBI routes and whatever decides: the four
//! Npcf_SMPolicyControl operations on already decoded bodies. The routes
//! (`sbi::routes`) decode, call one of these, and write the answer; the
//! policy core implements them. Errors are ProblemDetails, sent as they are.

use super::model::{
    SmPolicyContextData, SmPolicyControl, SmPolicyDecision, SmPolicyDeleteData,
    SmPolicyUpdateContextData,
};
use super::repeat::RequestDigest;
use crate::sbi::problem::ProblemDetails;
use std::future::Future;
use std::pin::Pin;

/// The API root of the service (TS 29.512 §5.1).
pub const SERVICE_ROOT: &str = "/npcf-smpolicycontrol/v1";

/// A boxed future of one operation.
pub type OpFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ProblemDetails>> + Send + 'a>>;

/// A created SM policy: its id (the last segment of the `Location` the
/// answer carries) and the whole decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Created {
    pub id: String,
    pub decision: SmPolicyDecision,
}

/// Most bytes of an SM policy id a route accepts from a path; longer ones
/// are answered 404 without reaching the service.
pub const MAX_POLICY_ID_BYTES: usize = 128;

/// The four operations (TS 29.512 §4.2.2 to §4.2.5).
pub trait SmPolicyService: Send + Sync + 'static {
    /// Create: decide the new PDU session.
    fn create(&self, ctx: SmPolicyContextData) -> OpFuture<'_, Created>;
    /// Get: the context and the decision in force (404
    /// CONTEXT_NOT_FOUND for an unknown id).
    fn get(&self, id: &str) -> OpFuture<'_, SmPolicyControl>;
    /// Update: what changed, decided again; the answer carries only what
    /// the SMF must change (possibly nothing). `digest` tells the request
    /// apart from others (see `n7::repeat`): one that repeats the last
    /// Update applied is answered again, not applied twice.
    fn update(
        &self,
        id: &str,
        update: SmPolicyUpdateContextData,
        digest: RequestDigest,
    ) -> OpFuture<'_, SmPolicyDecision>;
    /// Delete: the session ends.
    fn delete(&self, id: &str, delete: SmPolicyDeleteData) -> OpFuture<'_, ()>;
}

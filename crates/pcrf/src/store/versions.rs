//! Versions of the files an operator deploys to every node (the Lua
//! policy, the records of its rollouts, `policy::rollout`, and the usage
//! file, `usage::versions`), kept in
//! the store: every node of a shared store serves the newest one, a
//! restart keeps the history, and an old version can be deployed again. The store keeps the bytes and the facts handed to it
//! (who, when, why, the hash the caller computed, the version it
//! replaced); what the bytes mean is the caller's business.

use crate::store::StoreError;

/// The artifact name of the Lua policy script.
pub const POLICY: &str = "policy";

/// The artifact name of the usage file (keys, accumulators, plans).
pub const USAGE: &str = "usage";

/// The newest stored version of an artifact this node could not load,
/// and why; it keeps serving the version it had.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Refusal {
    pub version: i64,
    pub reason: String,
}

/// One stored version. Listings leave `content` empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredVersion {
    /// 1, 2, 3... per artifact, in the order they were deployed.
    pub id: i64,
    /// The version that was newest when this one was deployed; none for
    /// the first.
    pub parent: Option<i64>,
    /// The caller's hash of `content` (the policy's 16 hex digits).
    pub hash: String,
    /// Who deployed it: "file", "start-up", "token", "local".
    pub by: String,
    /// Unix milliseconds.
    pub at_ms: i64,
    pub comment: String,
    pub content: Vec<u8>,
}

/// What to append: the version after `parent`.
#[derive(Clone, Debug)]
pub struct NewVersion<'a> {
    pub artifact: &'a str,
    pub parent: Option<i64>,
    pub hash: &'a str,
    pub by: &'a str,
    pub at_ms: i64,
    pub comment: &'a str,
    pub content: &'a [u8],
}

impl NewVersion<'_> {
    /// The id this version gets: one past its parent.
    pub fn id(&self) -> i64 {
        self.parent.unwrap_or(0) + 1
    }

    /// The version as stored once appended.
    pub fn stored(&self) -> StoredVersion {
        StoredVersion {
            id: self.id(),
            parent: self.parent,
            hash: self.hash.to_owned(),
            by: self.by.to_owned(),
            at_ms: self.at_ms,
            comment: self.comment.to_owned(),
            content: self.content.to_vec(),
        }
    }
}

/// The versions of every artifact. Blocking: call it off the async
/// workers (start-up, `spawn_blocking`).
pub trait VersionStore: Send + Sync {
    /// Appends `v` as version `v.id()`, unless a version with that id is
    /// there already (another deployment came first: its parent is no
    /// longer the newest). `Ok(None)` then, and nothing is written. On a
    /// shared store the other nodes are notified when it commits.
    fn append(&self, v: &NewVersion<'_>) -> Result<Option<StoredVersion>, StoreError>;
    /// Up to `limit` versions older than `before` (all when `None`),
    /// newest first, without their content.
    fn list(
        &self,
        artifact: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<StoredVersion>, StoreError>;
    /// One version with its content.
    fn get(&self, artifact: &str, id: i64) -> Result<Option<StoredVersion>, StoreError>;
    /// The newest version with its content.
    fn latest(&self, artifact: &str) -> Result<Option<StoredVersion>, StoreError>;
    /// Whether some version holds content of this hash.
    fn has_hash(&self, artifact: &str, hash: &str) -> Result<bool, StoreError>;
}

/// The checks both stores' tests run on a fresh store (the PostgreSQL
/// one from an integration test, hence public).
#[doc(hidden)]
pub mod conformance {
    use super::*;

    fn new<'a>(parent: Option<i64>, content: &'a [u8], hash: &'a str) -> NewVersion<'a> {
        NewVersion {
            artifact: POLICY,
            parent,
            hash,
            by: "token",
            at_ms: 1_700_000_000_000 + parent.unwrap_or(0),
            comment: "why",
            content,
        }
    }

    /// Appends, lists, reads back and refuses a second child of one parent.
    pub fn versions_append_in_order_and_refuse_a_stale_parent(store: &dyn VersionStore) {
        assert_eq!(store.latest(POLICY).expect("latest"), None);
        let v1 = store
            .append(&new(None, b"one", "h1"))
            .expect("append")
            .expect("first");
        assert_eq!((v1.id, v1.parent), (1, None));
        let v2 = store
            .append(&new(Some(1), b"two", "h2"))
            .expect("append")
            .expect("second");
        assert_eq!((v2.id, v2.parent), (2, Some(1)));
        // Another deployer that still saw version 1 as the newest.
        assert_eq!(
            store.append(&new(Some(1), b"other", "h3")).expect("append"),
            None
        );
        let latest = store.latest(POLICY).expect("latest").expect("some");
        assert_eq!(latest.content, b"two");
        assert_eq!(
            (latest.by.as_str(), latest.comment.as_str(), latest.at_ms),
            ("token", "why", 1_700_000_000_001)
        );
        let listed = store.list(POLICY, None, 10).expect("list");
        assert_eq!(
            listed.iter().map(|v| v.id).collect::<Vec<_>>(),
            vec![2, 1],
            "newest first"
        );
        assert!(listed.iter().all(|v| v.content.is_empty()));
        assert_eq!(store.list(POLICY, Some(2), 10).expect("page").len(), 1);
        let one = store.get(POLICY, 1).expect("get").expect("v1");
        assert_eq!(
            (one.content.as_slice(), one.hash.as_str()),
            (&b"one"[..], "h1")
        );
        assert_eq!(store.get(POLICY, 9).expect("get"), None);
        assert!(store.has_hash(POLICY, "h1").expect("hash"));
        assert!(!store.has_hash(POLICY, "h3").expect("hash"));
        // Another artifact has versions of its own.
        assert_eq!(store.latest("usage").expect("latest"), None);
    }
}

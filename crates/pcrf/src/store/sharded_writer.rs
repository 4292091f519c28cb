//! Durable writes in parallel: one group-commit writer per store shard,
//! each with its own queue, transaction and fsync, so that throughput grows
//! with cores instead of stopping at what one writer thread commits.
//!
//! A request goes to the shard of its rows (`shard`): a subscriber's
//! sessions and usage always to the same one, so the changes of one request
//! still commit in one transaction, in the order they were made. Requests
//! the services make never span shards (a session with its subscriber's
//! usage; a usage reset; provisioning, which is all in shard 0). Should one
//! span shards anyway, each shard's part commits atomically on its own and
//! the request succeeds only if every part did: it is not atomic as a
//! whole, and no caller relies on it.

use super::group_commit::{GroupCommit, GroupCommitOptions, GroupCommitStats, Slot};
use super::{shard, Change, OpenSessionsBy, Store, StoreError};
use crate::session::GxSession;

/// Handle to the writers of every shard; clone it freely.
#[derive(Clone, Debug)]
pub struct ShardedWriter {
    shards: Vec<GroupCommit>,
    /// Every shard sees the same database (PostgreSQL): recovery reads,
    /// purges and cold reads go to one shard instead of each.
    shared: bool,
}

impl ShardedWriter {
    /// Starts one writer per store, shard i on `stores[i]` (at least one).
    /// `shared`: the stores are connections to one database.
    pub fn start(
        stores: Vec<Box<dyn Store>>,
        shared: bool,
        opts: GroupCommitOptions,
    ) -> Result<Self, StoreError> {
        if stores.is_empty() {
            return Err(StoreError::Unavailable("no store shard to write to".into()));
        }
        let shards = stores
            .into_iter()
            .map(|s| GroupCommit::start_with(s, opts))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ShardedWriter { shards, shared })
    }

    /// One writer on one store (tests, tools).
    pub fn single(store: Box<dyn Store>) -> Result<Self, StoreError> {
        Self::start(vec![store], false, GroupCommitOptions::default())
    }

    /// The number of shards (writers).
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The writer of shard `i`.
    pub fn shard(&self, i: usize) -> Option<&GroupCommit> {
        self.shards.get(i)
    }

    /// A place in the queue of the shard that `change` goes to, for a
    /// caller that sends it without waiting for its commit (a delivered
    /// notification's acknowledgement).
    pub async fn reserve_for(&self, change: &Change) -> Result<Slot, StoreError> {
        self.shards[shard::of_change(change, self.shards.len())]
            .reserve()
            .await
    }

    /// Persists `changes`; returns once the transaction holding them
    /// committed, or with the error that made it fail (answer 5012).
    pub async fn submit(&self, changes: Vec<Change>) -> Result<(), StoreError> {
        let n = self.shards.len();
        let first = changes.first().map_or(0, |c| shard::of_change(c, n));
        if n == 1 || changes.iter().all(|c| shard::of_change(c, n) == first) {
            return self.shards[first].submit(changes).await;
        }
        // Spans shards (see the module's comment): every part is queued
        // before any is awaited, so the parts commit in parallel.
        let mut parts: Vec<Vec<Change>> = vec![Vec::new(); n];
        for c in changes {
            parts[shard::of_change(&c, n)].push(c);
        }
        let mut pending = Vec::new();
        for (writer, part) in self.shards.iter().zip(parts) {
            if !part.is_empty() {
                pending.push(writer.reserve().await?.send(part));
            }
        }
        let mut outcome = Ok(());
        for p in pending {
            if let (Err(e), Ok(())) = (p.await, &outcome) {
                outcome = Err(e);
            }
        }
        outcome
    }

    /// Ok while every shard takes writes (see `GroupCommit::probe`); the
    /// first shard's error otherwise. One shard for a shared database.
    pub async fn probe(&self) -> Result<(), StoreError> {
        let writers = if self.shared { 1 } else { self.shards.len() };
        for w in self.shards.iter().take(writers) {
            w.probe().await?;
        }
        Ok(())
    }

    /// Deletes sessions closed before `before_ms` in every shard (in chunks
    /// between batches); returns how many.
    pub async fn purge_closed(&self, before_ms: i64) -> Result<usize, StoreError> {
        if self.shared {
            return self.shards[0].purge_closed(before_ms).await;
        }
        let mut tasks = tokio::task::JoinSet::new();
        for w in &self.shards {
            let w = w.clone();
            tasks.spawn(async move { w.purge_closed(before_ms).await });
        }
        let mut total = 0;
        let mut outcome = Ok(());
        while let Some(r) = tasks.join_next().await {
            match r {
                Ok(Ok(n)) => total += n,
                Ok(Err(e)) => outcome = Err(e),
                Err(e) => outcome = Err(StoreError::Unavailable(format!("purge task: {e}"))),
            }
        }
        outcome.map(|()| total)
    }

    /// Returns once everything queued before it, in every shard, has been
    /// written (or has failed, which its own submitter was told).
    pub async fn flush(&self) -> Result<(), StoreError> {
        for w in &self.shards {
            w.flush().await?;
        }
        Ok(())
    }

    /// Reads one session from the store, after everything queued before it
    /// was written: the cold path for a record no longer in memory. Only
    /// its id is known, not its subscriber, so every shard is asked.
    pub async fn read_session(&self, id: &str) -> Result<Option<GxSession>, StoreError> {
        if self.shared || self.shards.len() == 1 {
            return self.shards[0].read_session(id).await;
        }
        let mut tasks = tokio::task::JoinSet::new();
        for w in &self.shards {
            let (w, id) = (w.clone(), id.to_owned());
            tasks.spawn(async move { w.read_session(&id).await });
        }
        let mut outcome = Ok(None);
        while let Some(r) = tasks.join_next().await {
            match r {
                Ok(Ok(Some(s))) => return Ok(Some(s)),
                Ok(Ok(None)) => {}
                Ok(Err(e)) => outcome = Err(e),
                Err(e) => outcome = Err(StoreError::Unavailable(format!("read task: {e}"))),
            }
        }
        outcome
    }

    /// Reads one subscriber's usage row, from the shard that writes it
    /// (after what is queued there).
    pub async fn read_usage(
        &self,
        subscriber: &str,
    ) -> Result<Option<crate::usage::SubscriberUsage>, StoreError> {
        self.shards[shard::of_subscriber(subscriber, self.shards.len())]
            .read_usage(subscriber)
            .await
    }

    /// The ids of the open sessions `by` finds in a shared store (none in
    /// the embedded one).
    pub async fn open_session_ids(&self, by: OpenSessionsBy) -> Result<Vec<String>, StoreError> {
        if !self.shared {
            return Ok(Vec::new());
        }
        self.shards[0].open_session_ids(by).await
    }

    /// The ids of subscriber `key`'s open sessions in a shared store (none
    /// in the embedded one).
    pub async fn sessions_of(&self, key: &str) -> Result<Vec<String>, StoreError> {
        self.open_session_ids(OpenSessionsBy::Subscriber(key.to_owned()))
            .await
    }

    /// Whether every shard is a connection to one database shared with
    /// other nodes (PostgreSQL): what memory holds may be stale there.
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// Writes everything queued, stops every writer and hands the stores
    /// back, shard i at index i.
    pub async fn shutdown(&self) -> Result<Vec<Box<dyn Store>>, StoreError> {
        let mut out = Vec::with_capacity(self.shards.len());
        for w in &self.shards {
            out.push(w.shutdown().await?);
        }
        Ok(out)
    }

    /// The counters of every writer added up.
    pub fn stats(&self) -> GroupCommitStats {
        let mut total = GroupCommitStats::default();
        for w in &self.shards {
            total.add(&w.stats());
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::config::Durability;
    use crate::store::fixtures::{session, subscriber, until, usage, TestDir};
    use crate::store::sqlite_layout::{open_shards, shard_file};
    use rusqlite::Connection;
    use std::sync::Arc;
    use std::time::Duration;

    fn start(dir: &TestDir, shards: usize) -> ShardedWriter {
        let (stores, _) = open_shards(dir.path(), shards, Durability::Full, false).expect("open");
        let stores = stores
            .into_iter()
            .map(|s| Box::new(s) as Box<dyn Store>)
            .collect();
        ShardedWriter::start(stores, false, GroupCommitOptions::default()).expect("start")
    }

    /// A subscriber key of shard `want` among `shards`.
    fn key_in(want: usize, shards: usize, skip: usize) -> String {
        (0..)
            .map(|i| format!("0010100000{i:05}"))
            .filter(|k| shard::of_subscriber(k, shards) == want)
            .nth(skip)
            .expect("some key hashes there")
    }

    fn put(id: &str, subscriber: &str, at: i64) -> Vec<Change> {
        vec![
            Change::PutSession(Arc::new(session(id, subscriber, at))),
            Change::PutUsage(Arc::new(usage(subscriber, at as u64))),
        ]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shards_commit_in_parallel_one_blocked_shard_holds_up_no_other() {
        let dir = TestDir::new("sharded-parallel");
        let w = start(&dir, 2);
        let (a, b) = (key_in(0, 2, 0), key_in(1, 2, 0));
        // Shard 0's file is locked by another connection: its writer waits.
        let blocker = Connection::open(dir.path().join(shard_file(0))).expect("blocker");
        blocker.execute_batch("BEGIN IMMEDIATE").expect("lock");
        let held = {
            let w = w.clone();
            let a = a.clone();
            tokio::spawn(async move { w.submit(put("gx;a", &a, 1)).await })
        };
        let shard0 = w.shard(0).expect("shard 0");
        until("shard 0's batch started", || shard0.stats().batches == 1).await;
        // Shard 1 commits meanwhile, several times.
        for at in 1..=5 {
            tokio::time::timeout(Duration::from_secs(3), w.submit(put("gx;b", &b, at)))
                .await
                .expect("shard 1 waited for shard 0")
                .expect("committed");
        }
        assert!(!held.is_finished(), "shard 0 committed through the lock?");
        blocker.execute_batch("COMMIT").expect("unlock");
        held.await.expect("task").expect("committed after the lock");
        let st = w.stats();
        assert_eq!((st.requests, st.commits, st.errors), (6, 6, 0), "{st:?}");
        assert_eq!(w.shard(1).expect("shard 1").stats().commits, 5);
        // Each subscriber's rows are in its shard's file only.
        let mut stores = w.shutdown().await.expect("shutdown");
        assert!(stores[0].session("gx;a").expect("read").is_some());
        assert!(stores[0].usage(&a).expect("read").is_some());
        assert!(stores[1].session("gx;a").expect("read").is_none());
        assert_eq!(
            stores[1]
                .session("gx;b")
                .expect("read")
                .map(|s| s.updated_ms),
            Some(5)
        );
        assert!(stores[0].usage(&b).expect("read").is_none());
    }

    #[tokio::test]
    async fn reads_purges_and_provisioning_reach_the_right_shards() {
        let dir = TestDir::new("sharded-routing");
        let w = start(&dir, 3);
        let mut keys = Vec::new();
        for shard in 0..3 {
            let k = key_in(shard, 3, 1);
            let mut s = session(&format!("gx;closed{shard}"), &k, 1);
            s.state = crate::session::SessionState::Closed;
            s.closed_ms = Some(100);
            w.submit(vec![Change::PutSession(Arc::new(s))])
                .await
                .expect("closed session");
            w.submit(put(&format!("gx;open{shard}"), &k, 2))
                .await
                .expect("open session");
            keys.push(k);
        }
        // A cold read finds a session whatever its shard.
        for (shard, key) in keys.iter().enumerate() {
            let id = format!("gx;open{shard}");
            let s = w.read_session(&id).await.expect("read").expect("found");
            assert_eq!(*s.subscriber, **key);
        }
        assert_eq!(w.read_session("gx;nowhere").await.expect("read"), None);
        // The purge covers every shard.
        assert_eq!(w.purge_closed(200).await.expect("purge"), 3);
        // Bulk provisioning spans subscribers of every shard: one request,
        // one transaction, in shard 0.
        let profiles = keys
            .iter()
            .map(|k| Change::PutSubscriber(Arc::new(subscriber(k))))
            .collect();
        w.submit(profiles).await.expect("provisioning");
        assert_eq!(w.shard(0).expect("shard 0").stats().commits, 3);
        // A delete goes to the session's shard.
        w.submit(vec![Change::delete_session("gx;open2", keys[2].clone())])
            .await
            .expect("delete");
        assert_eq!(w.read_session("gx;open2").await.expect("read"), None);
        let mut stores = w.shutdown().await.expect("shutdown");
        assert_eq!(stores[0].subscribers().expect("profiles").len(), 3);
        for store in &mut stores[1..] {
            assert!(store.subscribers().expect("profiles").is_empty());
        }
    }

    #[tokio::test]
    async fn a_request_spanning_shards_commits_every_part() {
        let dir = TestDir::new("sharded-span");
        let w = start(&dir, 2);
        let (a, b) = (key_in(0, 2, 2), key_in(1, 2, 2));
        let mut changes = put("gx;a", &a, 3);
        changes.extend(put("gx;b", &b, 3));
        w.submit(changes).await.expect("both parts");
        let st = w.stats();
        assert_eq!(
            (st.requests, st.commits),
            (2, 2),
            "one part per shard: {st:?}"
        );
        for id in ["gx;a", "gx;b"] {
            assert!(w.read_session(id).await.expect("read").is_some());
        }
    }
}

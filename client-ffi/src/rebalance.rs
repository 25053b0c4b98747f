//! [`RebalanceLog`]: assignment changes recorded by the client core's
//! membership task, handed to the host language's rebalance callbacks by the
//! binding on its own thread (after a poll), never from the core's threads.

use std::sync::Mutex;

/// Partitions as (topic, partition).
pub type Partitions = Vec<(String, i32)>;

/// See the module docs. Give it to `subscribe` as the listener.
#[derive(Debug, Default)]
pub struct RebalanceLog {
    events: Mutex<Vec<(&'static str, Partitions)>>,
}

impl RebalanceLog {
    /// `("assigned" | "revoked", partitions)` in the order they happened,
    /// since the last call.
    pub fn drain(&self) -> Vec<(&'static str, Partitions)> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Runs `store` (storing an offset of `(topic, partition)` to commit)
    /// unless a revocation of the partition is recorded and not drained yet,
    /// and returns what it returned (false when skipped). A binding that
    /// handles revocations between its drains and its stores hands out no
    /// record of a partition revoked in between, even one given back since:
    /// the revocation is recorded after the partition left the consumer and
    /// before it can come back, and a store made before that covered the
    /// record in the commit on revoke.
    pub fn unless_revoked(&self, topic: &str, partition: i32, store: impl FnOnce() -> bool) -> bool {
        let events = self.events.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let revoked = events.iter().any(|(kind, partitions)| {
            *kind == "revoked" && partitions.iter().any(|(name, number)| name == topic && *number == partition)
        });
        // Held while storing: a revocation recorded meanwhile waits, so the
        // store lands before it (the commit on revoke covered it) or is seen.
        let stored = !revoked && store();
        drop(events);
        stored
    }

    fn record(&self, kind: &'static str, partitions: &[(String, i32)]) {
        self.events.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push((kind, partitions.to_vec()));
    }
}

impl client::RebalanceListener for RebalanceLog {
    fn on_assigned(&self, partitions: &[(String, i32)]) {
        self.record("assigned", partitions);
    }

    fn on_revoked(&self, partitions: &[(String, i32)]) {
        self.record("revoked", partitions);
    }
}

#[cfg(test)]
mod tests {
    use client::RebalanceListener;

    use super::*;

    #[test]
    fn a_store_of_a_partition_revoked_and_not_drained_is_skipped() {
        let log = RebalanceLog::default();
        assert!(log.unless_revoked("t", 0, || true));
        log.on_revoked(&[("t".to_owned(), 0)]);
        log.on_assigned(&[("t".to_owned(), 0)]);
        assert!(!log.unless_revoked("t", 0, || panic!("stored a revoked partition")));
        assert!(log.unless_revoked("t", 1, || true));
        assert!(!log.unless_revoked("t", 1, || false), "a failed store counts as stored");
        assert_eq!(log.drain().len(), 2);
        assert!(log.unless_revoked("t", 0, || true));
    }
}

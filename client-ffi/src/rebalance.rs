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

//! [`HighWatermark`]: the offset below which a partition's records are committed —
//! visible to consumers and safe to acknowledge with `acks=all`.
//!
//! The rule (DESIGN §3, replication):
//! 1. each in-sync replica counts the offsets it holds by the topic's
//!    `flush.policy`: its durable offset under `always` (on disk), its log end
//!    offset under `interval` (in the page cache, Kafka's behaviour);
//! 2. the candidate is the minimum over the ISR (the leader included);
//! 3. it is taken only while the ISR has at least `min.insync.replicas` members;
//! 4. the high watermark never goes backwards on a leader: a smaller candidate
//!    (a follower that restarted with less) leaves it where it is.
//!
//! Owned by the partition's leader; on one node the ISR is the leader alone.

use crate::log::FlushPolicy;

/// Offsets one in-sync replica reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaOffsets {
    pub log_end_offset: u64,
    /// Everything below it is on the replica's disk; at most `log_end_offset`.
    pub durable_offset: u64,
}

impl ReplicaOffsets {
    /// Step 1: the offsets this replica counts under `policy`.
    pub fn counted(&self, policy: FlushPolicy) -> u64 {
        assert!(
            self.durable_offset <= self.log_end_offset,
            "durable offset {} past the log end {}",
            self.durable_offset,
            self.log_end_offset
        );
        match policy {
            FlushPolicy::Always => self.durable_offset,
            FlushPolicy::Interval => self.log_end_offset,
        }
    }
}

/// See the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HighWatermark {
    offset: u64,
}

impl HighWatermark {
    pub fn new(offset: u64) -> HighWatermark {
        HighWatermark { offset }
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Steps 2–4 over the ISR's offsets; returns the new high watermark when it
    /// moved forward.
    pub fn advance(&mut self, policy: FlushPolicy, isr: &[ReplicaOffsets], min_insync_replicas: usize) -> Option<u64> {
        if isr.is_empty() || isr.len() < min_insync_replicas {
            return None;
        }
        let candidate = isr.iter().map(|replica| replica.counted(policy)).min()?;
        if candidate <= self.offset {
            return None;
        }
        self.offset = candidate;
        Some(candidate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(log_end_offset: u64, durable_offset: u64) -> ReplicaOffsets {
        ReplicaOffsets { log_end_offset, durable_offset }
    }

    #[test]
    fn the_minimum_of_the_isr_by_policy_never_backwards_and_only_with_enough_replicas() {
        let mut high_watermark = HighWatermark::new(0);
        let isr = [replica(10, 6), replica(8, 8)];
        assert_eq!(high_watermark.advance(FlushPolicy::Always, &isr, 1), Some(6));
        assert_eq!(high_watermark.advance(FlushPolicy::Interval, &isr, 1), Some(8));
        // A follower that restarted with less does not move it back.
        assert_eq!(high_watermark.advance(FlushPolicy::Interval, &[replica(10, 10), replica(3, 3)], 1), None);
        assert_eq!(high_watermark.offset(), 8);
        // Below min.insync.replicas nothing advances.
        assert_eq!(high_watermark.advance(FlushPolicy::Always, &[replica(20, 20)], 2), None);
        assert_eq!(high_watermark.advance(FlushPolicy::Always, &[replica(20, 20), replica(20, 12)], 2), Some(12));
        assert_eq!(high_watermark.advance(FlushPolicy::Always, &[], 0), None);
    }

    #[test]
    #[should_panic(expected = "past the log end")]
    fn a_durable_offset_past_the_log_end_is_a_bug() {
        HighWatermark::new(0).advance(FlushPolicy::Always, &[replica(1, 2)], 1);
    }
}

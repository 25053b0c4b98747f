//! [`LeaderReplicas`]: what the leader of a partition knows of its followers —
//! the offsets each reported with its last fetch, when each was last caught up —
//! and what follows from it: the high watermark over the ISR and the ISR changes
//! to ask the controller for.
//!
//! The rules (DESIGN §3, replication; Kafka's, with the durable twist):
//! 1. a follower is *caught up* at a fetch from at least the leader's log end,
//!    or from at least the log end the leader had at its previous fetch (then
//!    it was caught up at that previous fetch);
//! 2. an ISR member not caught up for `replica.lag.time.max.ms` is proposed
//!    out; a replica outside the ISR that holds, as the flush policy counts
//!    (on disk under `always`), everything up to the high watermark and the
//!    start of this leader's epoch is proposed in. Counting its log end under
//!    `always` lost acknowledged records in the simulation: a follower admitted
//!    with committed records still in its page cache crashed, lost them, and
//!    was elected;
//! 3. one ISR change is asked at a time (asked again after a pause while this
//!    leader has not learned an outcome); until it learns the partition's next
//!    state, the high watermark counts the *maximal* ISR — the one it knows
//!    plus every member any change asked since then adds — because the
//!    controller may have applied any of them without this leader hearing of
//!    it (a lost answer), or may still apply one that arrives late. Counting
//!    only the latest request's members lost acknowledged records in the
//!    simulation: an expansion applied unheard, then a retry without that
//!    member, then a failover to it. Only a new partition state settles them:
//!    while members are unsettled the leader keeps asking (the known ISR, if
//!    nothing else), and the controller bumps the partition epoch even for an
//!    unchanged ISR, which fences every older request. Answers are not trusted
//!    to settle anything (a refusal of one request says nothing of an older
//!    one still in flight), so a member that never joins holds the high
//!    watermark only until that bump is learned;
//! 4. the high watermark is [`HighWatermark::advance`] over that ISR.
//!
//! IO-free: the server feeds fetches, the clock and the controller's partition
//! state; the simulator does the same.

use std::collections::BTreeMap;

use super::high_watermark::{HighWatermark, ReplicaOffsets};
use crate::cluster::{BrokerId, PartitionState};
use crate::log::FlushPolicy;

/// How long an ISR change may stay unapplied before it is asked again.
pub const ISR_CHANGE_RETRY_MS: u64 = 2_000;

/// What the leader knows of one follower.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowerProgress {
    pub log_end_offset: u64,
    pub durable_offset: u64,
    /// When it last fetched (ms; 0: not since this leader took over).
    pub last_fetch_ms: u64,
    /// When it was last caught up (rule 1).
    pub last_caught_up_ms: u64,
    /// The leader's log end at its last fetch.
    leader_end_at_last_fetch: u64,
}

/// A fetch from a broker that is not a follower of this partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("broker {0} is not a follower of this partition")]
pub struct NotAFollower(pub BrokerId);

/// See the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderReplicas {
    leader: BrokerId,
    leader_epoch: i32,
    partition_epoch: i32,
    replicas: Vec<BrokerId>,
    /// The ISR the controller applied last.
    isr: Vec<BrokerId>,
    /// The ISR change asked of the controller last, and when.
    pending: Option<(Vec<BrokerId>, u64)>,
    /// Members that changes asked since the last known state add (rule 3).
    maybe_added: Vec<BrokerId>,
    followers: BTreeMap<BrokerId, FollowerProgress>,
    high_watermark: HighWatermark,
    /// The first offset of this leader's epoch.
    epoch_start_offset: u64,
}

impl LeaderReplicas {
    /// `leader` takes over `state` (whose leader it is) with its log ending at
    /// `log_end_offset` and `high_watermark` as it knew it. The ISR's followers
    /// count as caught up now (they get a full lag period to fetch), and as
    /// holding nothing until they report, so the high watermark waits for them.
    pub fn new(
        leader: BrokerId,
        state: &PartitionState,
        high_watermark: u64,
        log_end_offset: u64,
        now_ms: u64,
    ) -> LeaderReplicas {
        assert_eq!(state.leader, leader, "broker {leader} takes over a partition led by {}", state.leader);
        let followers = state
            .replicas
            .iter()
            .filter(|replica| **replica != leader)
            .map(|&replica| (replica, FollowerProgress::new(now_ms)))
            .collect();
        LeaderReplicas {
            leader,
            leader_epoch: state.leader_epoch,
            partition_epoch: state.partition_epoch,
            replicas: state.replicas.clone(),
            isr: state.isr.clone(),
            pending: None,
            maybe_added: Vec::new(),
            followers,
            high_watermark: HighWatermark::new(high_watermark.min(log_end_offset)),
            epoch_start_offset: log_end_offset,
        }
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    pub fn high_watermark(&self) -> u64 {
        self.high_watermark.offset()
    }

    /// The ISR the controller applied last.
    pub fn isr(&self) -> &[BrokerId] {
        &self.isr
    }

    pub fn follower(&self, broker: BrokerId) -> Option<&FollowerProgress> {
        self.followers.get(&broker)
    }

    /// The known ISR plus every member a change asked since adds (rule 3).
    pub fn maximal_isr(&self) -> Vec<BrokerId> {
        let mut isr = self.isr.clone();
        isr.extend(self.maybe_added.iter().copied());
        isr
    }

    /// A follower fetched from `fetch_offset` (so its log ends there) with
    /// everything below `durable_offset` on its disk, while the leader's log
    /// ended at `leader_log_end`.
    pub fn on_fetch(
        &mut self,
        follower: BrokerId,
        fetch_offset: u64,
        durable_offset: u64,
        leader_log_end: u64,
        now_ms: u64,
    ) -> Result<(), NotAFollower> {
        let progress = self.followers.get_mut(&follower).ok_or(NotAFollower(follower))?;
        if fetch_offset >= leader_log_end {
            progress.last_caught_up_ms = now_ms;
        } else if fetch_offset >= progress.leader_end_at_last_fetch && progress.last_fetch_ms > 0 {
            progress.last_caught_up_ms = progress.last_caught_up_ms.max(progress.last_fetch_ms);
        }
        progress.log_end_offset = fetch_offset;
        progress.durable_offset = durable_offset.min(fetch_offset);
        progress.last_fetch_ms = now_ms;
        progress.leader_end_at_last_fetch = leader_log_end;
        Ok(())
    }

    /// Rule 4, with the leader's own offsets; returns the new high watermark
    /// when it moved.
    pub fn advance_high_watermark(
        &mut self,
        policy: FlushPolicy,
        leader: ReplicaOffsets,
        min_insync_replicas: usize,
    ) -> Option<u64> {
        let offsets: Vec<ReplicaOffsets> = self
            .maximal_isr()
            .iter()
            .map(|member| match self.followers.get(member) {
                Some(progress) => {
                    ReplicaOffsets { log_end_offset: progress.log_end_offset, durable_offset: progress.durable_offset }
                }
                None => leader,
            })
            .collect();
        let advanced = self.high_watermark.advance(policy, &offsets, min_insync_replicas);
        assert!(
            self.high_watermark.offset() <= leader.log_end_offset,
            "high watermark {} past the leader's log end {}",
            self.high_watermark.offset(),
            leader.log_end_offset
        );
        advanced
    }

    /// Rule 2: the ISR to ask the controller for, if it should change (and no
    /// change is in flight, or the one in flight is older than the retry pause).
    /// Only replicas `can_join` says may join are proposed (the controller
    /// refuses a whole request that adds a fenced broker, which would block the
    /// shrink asked with it).
    pub fn isr_change(
        &self,
        policy: FlushPolicy,
        now_ms: u64,
        lag_max_ms: u64,
        can_join: impl Fn(BrokerId) -> bool,
    ) -> Option<Vec<BrokerId>> {
        if let Some((_, asked_ms)) = &self.pending {
            if now_ms.saturating_sub(*asked_ms) < ISR_CHANGE_RETRY_MS {
                return None;
            }
        }
        let lagging = |member: &BrokerId| {
            self.followers
                .get(member)
                .is_some_and(|progress| now_ms.saturating_sub(progress.last_caught_up_ms) > lag_max_ms)
        };
        let joining = |replica: &BrokerId| {
            can_join(*replica)
                && self.followers.get(replica).is_some_and(|progress| {
                    progress.last_fetch_ms > 0
                        && now_ms.saturating_sub(progress.last_caught_up_ms) <= lag_max_ms
                        && progress.offsets().counted(policy)
                            >= self.high_watermark.offset().max(self.epoch_start_offset)
                })
        };
        let mut next: Vec<BrokerId> = self.isr.iter().copied().filter(|member| !lagging(member)).collect();
        next.extend(self.replicas.iter().filter(|replica| !self.isr.contains(replica) && joining(replica)));
        // Members asked for and never settled hold the high watermark: asking
        // for the known ISR again makes the controller bump the partition
        // epoch, and learning that state frees them (rule 3).
        (next != self.isr || !self.maybe_added.is_empty()).then_some(next)
    }

    /// An ISR change was sent to the controller.
    pub fn asked(&mut self, isr: Vec<BrokerId>, now_ms: u64) {
        assert!(isr.contains(&self.leader), "an ISR {isr:?} without its leader {}", self.leader);
        for member in &isr {
            if !self.isr.contains(member) && !self.maybe_added.contains(member) {
                self.maybe_added.push(*member);
            }
        }
        self.pending = Some((isr, now_ms));
    }

    /// The controller's current state of the partition: whether this broker
    /// still leads it in the same epoch (if not, the caller drops this state
    /// and follows the new leader). A newer partition epoch brings the applied
    /// ISR and replica set; the change in flight, if any, is settled.
    pub fn on_partition_state(&mut self, state: &PartitionState, now_ms: u64) -> bool {
        if state.leader != self.leader || state.leader_epoch != self.leader_epoch {
            return false;
        }
        if state.partition_epoch > self.partition_epoch {
            self.partition_epoch = state.partition_epoch;
            self.isr = state.isr.clone();
            self.pending = None;
            self.maybe_added.clear();
            self.replicas = state.replicas.clone();
            self.followers.retain(|broker, _| state.replicas.contains(broker));
            for replica in state.replicas.iter().filter(|replica| **replica != self.leader) {
                self.followers.entry(*replica).or_insert_with(|| FollowerProgress::new(now_ms));
            }
            // What a follower outside the ISR reported before this change is
            // forgotten: a replica moved away and back by reassignments (maybe
            // merged into one change seen here) holds an empty log now, so it
            // joins only on what it reports from here on.
            for (broker, progress) in &mut self.followers {
                if !self.isr.contains(broker) {
                    *progress = FollowerProgress::new(now_ms);
                }
            }
        }
        true
    }
}

impl FollowerProgress {
    /// The offsets it reported.
    pub fn offsets(&self) -> ReplicaOffsets {
        ReplicaOffsets { log_end_offset: self.log_end_offset, durable_offset: self.durable_offset }
    }

    fn new(now_ms: u64) -> FollowerProgress {
        FollowerProgress {
            log_end_offset: 0,
            durable_offset: 0,
            last_fetch_ms: 0,
            last_caught_up_ms: now_ms,
            leader_end_at_last_fetch: u64::MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(isr: &[BrokerId]) -> PartitionState {
        PartitionState {
            replicas: vec![1, 2, 3],
            isr: isr.to_vec(),
            leader: 1,
            leader_epoch: 4,
            partition_epoch: 7,
            target_replicas: None,
        }
    }

    fn leader_at(log_end_offset: u64) -> ReplicaOffsets {
        ReplicaOffsets { log_end_offset, durable_offset: log_end_offset }
    }

    #[test]
    fn the_high_watermark_waits_for_every_isr_member_and_counts_durable_offsets() {
        let mut replicas = LeaderReplicas::new(1, &state(&[1, 2, 3]), 0, 10, 1_000);
        assert_eq!(replicas.advance_high_watermark(FlushPolicy::Always, leader_at(10), 2), None);
        replicas.on_fetch(2, 10, 10, 10, 1_010).unwrap();
        assert_eq!(replicas.advance_high_watermark(FlushPolicy::Always, leader_at(10), 2), None, "3 has not reported");
        replicas.on_fetch(3, 8, 6, 10, 1_020).unwrap();
        assert_eq!(replicas.advance_high_watermark(FlushPolicy::Always, leader_at(10), 2), Some(6));
        assert_eq!(replicas.advance_high_watermark(FlushPolicy::Interval, leader_at(10), 2), Some(8));
        assert_eq!(replicas.on_fetch(9, 0, 0, 10, 1_030), Err(NotAFollower(9)));
    }

    #[test]
    fn a_lagging_member_is_proposed_out_and_a_caught_up_replica_back_in() {
        let mut replicas = LeaderReplicas::new(1, &state(&[1, 2, 3]), 0, 10, 1_000);
        replicas.on_fetch(2, 10, 10, 10, 1_100).unwrap();
        replicas.on_fetch(3, 4, 4, 10, 1_100).unwrap();
        assert_eq!(replicas.isr_change(FlushPolicy::Always, 5_000, 30_000, |_| true), None);
        // 3 never catches up; 2 keeps fetching at the end.
        replicas.on_fetch(2, 10, 10, 10, 31_500).unwrap();
        assert_eq!(replicas.isr_change(FlushPolicy::Always, 31_500, 30_000, |_| true), Some(vec![1, 2]));
        replicas.asked(vec![1, 2], 31_500);
        assert_eq!(replicas.isr_change(FlushPolicy::Always, 31_600, 30_000, |_| true), None, "one change in flight");
        assert_eq!(
            replicas.isr_change(FlushPolicy::Always, 34_000, 30_000, |_| true),
            Some(vec![1, 2]),
            "asked again after the pause"
        );
        let mut shrunk = state(&[1, 2]);
        shrunk.partition_epoch = 8;
        assert!(replicas.on_partition_state(&shrunk, 34_000));
        assert_eq!(replicas.isr(), [1, 2]);
        // 3 catches up (to the high watermark and this epoch's start), first
        // only in its page cache: under `always` it joins once that is on disk.
        replicas.advance_high_watermark(FlushPolicy::Always, leader_at(10), 2);
        replicas.on_fetch(3, 10, 4, 10, 35_000).unwrap();
        assert_eq!(replicas.isr_change(FlushPolicy::Always, 35_000, 30_000, |_| true), None);
        assert_eq!(replicas.isr_change(FlushPolicy::Interval, 35_000, 30_000, |_| true), Some(vec![1, 2, 3]));
        replicas.on_fetch(3, 10, 10, 10, 35_000).unwrap();
        assert_eq!(replicas.isr_change(FlushPolicy::Always, 35_000, 30_000, |_| true), Some(vec![1, 2, 3]));
        let fenced = |broker| broker != 3;
        assert_eq!(
            replicas.isr_change(FlushPolicy::Always, 35_000, 30_000, fenced),
            None,
            "a fenced replica stays out"
        );
        replicas.asked(vec![1, 2, 3], 35_000);
        assert_eq!(replicas.maximal_isr(), [1, 2, 3], "the high watermark counts the member being added");
        // Asked again without 3 (it lagged meanwhile): the first request may
        // have been applied unheard, so 3 still counts.
        replicas.asked(vec![1, 2], 38_000);
        assert_eq!(replicas.maximal_isr(), [1, 2, 3]);
        // The second request applied (the first, however late, never can): 3
        // no longer counts.
        let mut settled = state(&[1, 2]);
        settled.partition_epoch = 9;
        assert!(replicas.on_partition_state(&settled, 38_100));
        assert_eq!(replicas.maximal_isr(), [1, 2]);
        replicas.asked(vec![1, 2, 3], 38_500);
        // Another leader took over: this state is done.
        let mut moved = state(&[2, 3]);
        (moved.leader, moved.leader_epoch, moved.partition_epoch) = (2, 5, 9);
        assert!(!replicas.on_partition_state(&moved, 36_000));
    }

    #[test]
    fn a_replica_outside_the_isr_joins_only_on_what_it_reports_after_a_change() {
        let mut replicas = LeaderReplicas::new(1, &state(&[1, 2]), 0, 10, 1_000);
        replicas.advance_high_watermark(FlushPolicy::Always, leader_at(10), 1);
        // 3 reports a full log, then is moved away and back (one change seen
        // here): its log is empty now, whatever it said before.
        replicas.on_fetch(3, 10, 10, 10, 1_100).unwrap();
        let moved_back = PartitionState { partition_epoch: 9, ..state(&[1, 2]) };
        assert!(replicas.on_partition_state(&moved_back, 1_200));
        assert_eq!(replicas.isr_change(FlushPolicy::Always, 1_300, 30_000, |_| true), None, "nothing reported since");
        replicas.on_fetch(3, 0, 0, 10, 1_400).unwrap();
        assert_eq!(replicas.isr_change(FlushPolicy::Always, 1_400, 30_000, |_| true), None, "behind");
        replicas.on_fetch(3, 10, 10, 10, 1_500).unwrap();
        assert_eq!(replicas.isr_change(FlushPolicy::Always, 1_500, 30_000, |_| true), Some(vec![1, 2, 3]));
    }

    #[test]
    fn an_expansion_never_answered_is_settled_by_asking_for_the_known_isr_again() {
        let mut alone = state(&[1]);
        alone.replicas = vec![1, 2];
        let mut replicas = LeaderReplicas::new(1, &alone, 0, 10, 1_000);
        replicas.on_fetch(2, 10, 10, 10, 1_100).unwrap();
        assert_eq!(replicas.isr_change(FlushPolicy::Always, 1_100, 30_000, |_| true), Some(vec![1, 2]));
        replicas.asked(vec![1, 2], 1_100);
        // No answer comes, and 2 dies: the maximal ISR holds the high watermark
        // at what 2 last reported.
        assert_eq!(replicas.advance_high_watermark(FlushPolicy::Always, leader_at(20), 1), Some(10));
        assert_eq!(replicas.advance_high_watermark(FlushPolicy::Always, leader_at(30), 1), None);
        assert_eq!(replicas.isr_change(FlushPolicy::Always, 2_000, 30_000, |_| true), None, "within the retry pause");
        // After the pause the known ISR is asked for again...
        assert_eq!(replicas.isr_change(FlushPolicy::Always, 3_200, 1_000, |_| true), Some(vec![1]));
        replicas.asked(vec![1], 3_200);
        assert_eq!(replicas.maximal_isr(), [1, 2], "an answer alone settles nothing");
        // ...and the epoch the controller bumped for it frees the high watermark.
        alone.partition_epoch += 1;
        assert!(replicas.on_partition_state(&alone, 3_300));
        assert_eq!(replicas.maximal_isr(), [1]);
        assert_eq!(replicas.advance_high_watermark(FlushPolicy::Always, leader_at(30), 1), Some(30));
        assert_eq!(replicas.isr_change(FlushPolicy::Always, 3_300, 1_000, |_| true), None, "nothing left to ask");
    }

    #[test]
    fn a_follower_behind_a_moving_leader_is_caught_up_as_of_its_previous_fetch() {
        let mut replicas = LeaderReplicas::new(1, &state(&[1, 2]), 0, 10, 0);
        replicas.on_fetch(2, 10, 10, 12, 100).unwrap(); // behind: the leader took 2 more
        assert_eq!(replicas.follower(2).unwrap().last_caught_up_ms, 0);
        replicas.on_fetch(2, 12, 12, 15, 200).unwrap(); // reached where the leader was at 100
        assert_eq!(replicas.follower(2).unwrap().last_caught_up_ms, 100);
    }
}

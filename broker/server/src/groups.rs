//! [`GroupCoordinators`]: the broker side of consumer groups — one
//! `broker_core::group::Coordinator` per partition of the internal
//! `__consumer_offsets` topic, fed and persisted through that partition's log.
//!
//! A group lives on partition `crc32(group id) % partition count` (stable across
//! restarts). Every write goes: lock the shard's coordinator → handler → encode its
//! records as one batch (key/value records; a null value is a tombstone) → append →
//! replay into the coordinator → unlock → wait until the batch (and so
//! everything before it) is committed: durable here, then on every in-sync
//! replica of the partition → answer. A request that writes nothing still waits
//! until the shard's log is committed up to its end, so no answer ever reports
//! state a crash or a failover could take back. A shard taken up (at start-up,
//! or when this broker becomes the partition's leader) replays its partition
//! from the log start; if the log ends inside a torn snapshot it first writes a
//! whole one.
//!
//! Compaction by snapshot (Weir has no key compaction yet): once a shard's log
//! holds more than [`SNAPSHOT_AFTER_BYTES`], the shard rolls its segment, appends
//! its whole state between snapshot markers (one append, under the coordinator's
//! lock, so nothing interleaves), waits until that is committed, and drops every
//! segment before it (followers drop theirs when their leader's log start passes
//! them). Replay honours a snapshot only once its end marker is read,
//! so a crash midway leaves the old records in charge.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use abi::batch::{BatchBuilder, BatchView, RecordBatch};
use abi::ErrorCode;
use broker_core::clock::Clock;
use broker_core::group::assignor::TopicPartition;
use broker_core::group::coordinator::{
    CommitRequest, Coordinator, CoordinatorConfig, GroupDescription, GroupError, GroupState, HeartbeatRequest,
    HeartbeatResponse,
};
use broker_core::group::record::{GroupRecord, OffsetValue};
use broker_core::log::LogError;

use crate::error::ApiError;
use crate::partition::{lock, Partition};

/// The internal topic holding every group's records.
pub const CONSUMER_OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Its partition count (fixed once created).
pub const CONSUMER_OFFSETS_PARTITIONS: u32 = 8;
/// Replicas of each `__consumer_offsets` partition, at most (fewer brokers: one each).
pub const CONSUMER_OFFSETS_REPLICATION_FACTOR: usize = 3;
/// How long a group write waits to be committed (on every in-sync replica).
const GROUP_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// A shard's log size past which it is rewritten as a snapshot.
pub const SNAPSHOT_AFTER_BYTES: u64 = 32 << 20;
/// Largest batch a snapshot is cut into (below `max.message.bytes`).
const SNAPSHOT_BATCH_BYTES: usize = 512 << 10;
/// Bytes read per step while replaying a shard at start-up.
const REPLAY_READ_BYTES: usize = 4 << 20;

#[derive(Debug)]
struct Shard {
    partition: Partition,
    /// The leader epoch this broker took the shard up in: leading the partition
    /// again in another epoch means replaying it again (it followed meanwhile).
    leader_epoch: Option<i32>,
    coordinator: Mutex<Coordinator>,
    /// Size of the last snapshot: the next waits until the log doubled it, so a
    /// large state is not rewritten over and over.
    snapshot_bytes: std::sync::atomic::AtomicU64,
    /// Set (under the coordinator's lock) when this broker stops leading the
    /// partition: a write that still holds the shard appends nothing after that,
    /// so a later replay of the partition misses no acknowledged write.
    retired: std::sync::atomic::AtomicBool,
}

/// See the module docs.
#[derive(Debug)]
pub struct GroupCoordinators {
    /// Index = partition of `__consumer_offsets`; a shard exists while this broker
    /// leads that partition.
    shards: RwLock<Vec<Option<Arc<Shard>>>>,
    config: CoordinatorConfig,
    clock: Arc<dyn Clock>,
    /// A partition led here could not be taken up (its replay failed): the
    /// next reconciliation tries again.
    wants_retry: std::sync::atomic::AtomicBool,
}

/// The partition of `__consumer_offsets` that holds `group_id` (stable: the
/// partition count never changes).
pub fn coordinator_partition(group_id: &str) -> u32 {
    crc32fast::hash(group_id.as_bytes()) % CONSUMER_OFFSETS_PARTITIONS
}

impl From<GroupError> for ApiError {
    fn from(error: GroupError) -> ApiError {
        let code = match &error {
            GroupError::InvalidGroupId => ErrorCode::InvalidGroupId,
            GroupError::UnknownMemberId { .. } => ErrorCode::UnknownMemberId,
            GroupError::FencedMemberEpoch { .. } => ErrorCode::FencedMemberEpoch,
            GroupError::StaleMemberEpoch { .. } => ErrorCode::StaleMemberEpoch,
            GroupError::GroupIdNotFound(_) => ErrorCode::GroupIdNotFound,
            GroupError::NonEmptyGroup(_) => ErrorCode::NonEmptyGroup,
            GroupError::InvalidRequest(_) => ErrorCode::InvalidRequest,
            GroupError::TooManyGroups(_) => ErrorCode::ResourceExhausted,
            GroupError::FencedLeaderEpoch { .. } => ErrorCode::FencedLeaderEpoch,
        };
        ApiError::new(code, error.to_string())
    }
}

impl GroupCoordinators {
    /// No shards yet: see [`GroupCoordinators::lead`].
    pub fn new(config: CoordinatorConfig, clock: Arc<dyn Clock>) -> GroupCoordinators {
        let shards = RwLock::new(vec![None; CONSUMER_OFFSETS_PARTITIONS as usize]);
        GroupCoordinators { shards, config, clock, wants_retry: std::sync::atomic::AtomicBool::new(false) }
    }

    /// Takes up the shards of the `__consumer_offsets` partitions this broker now
    /// leads (replaying each new one from its log) and drops the others.
    pub fn lead(&self, led: Vec<(u32, Partition)>) -> Result<(), ApiError> {
        let current: Vec<Option<Arc<Shard>>> = self.shards.read().unwrap_or_else(|p| p.into_inner()).clone();
        let mut next = vec![None; CONSUMER_OFFSETS_PARTITIONS as usize];
        let mut first_error = None;
        for (index, partition) in led {
            let Some(slot) = next.get_mut(index as usize) else { continue };
            let leader_epoch = partition.leader_epoch();
            let kept = current[index as usize]
                .as_ref()
                .filter(|shard| shard.partition.name() == partition.name() && shard.leader_epoch == leader_epoch);
            match kept {
                Some(shard) => *slot = Some(shard.clone()),
                // One partition that cannot be taken up holds up no other.
                None => match self.take_up(partition.clone(), leader_epoch) {
                    Ok(shard) => *slot = Some(Arc::new(shard)),
                    Err(error) => {
                        tracing::error!(partition = %partition.name(), %error, "groups of this partition not taken up");
                        first_error.get_or_insert(error);
                    }
                },
            }
        }
        self.wants_retry.store(first_error.is_some(), std::sync::atomic::Ordering::Relaxed);
        for (old, new) in current.iter().zip(&next) {
            if let Some(old) = old.as_ref().filter(|old| !new.as_ref().is_some_and(|new| Arc::ptr_eq(old, new))) {
                let _coordinator = lock(&old.coordinator);
                old.retired.store(true, std::sync::atomic::Ordering::Release);
            }
        }
        *self.shards.write().unwrap_or_else(|p| p.into_inner()) = next;
        first_error.map_or(Ok(()), Err)
    }

    /// Whether a led partition could not be taken up at the last `lead`.
    pub fn wants_retry(&self) -> bool {
        self.wants_retry.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Replays `partition` into a new shard, led in `leader_epoch`.
    fn take_up(&self, partition: Partition, leader_epoch: Option<i32>) -> Result<Shard, ApiError> {
        let mut coordinator = Coordinator::new(self.config.clone());
        if replay_partition(&partition, &mut coordinator)? {
            // A snapshot torn by a crash of the previous owner (or copied only
            // in part before a failover): a whole one closes it before any
            // other record follows.
            partition.roll()?;
            let mut bytes = snapshot_batches(&coordinator.snapshot_records(), self.clock.now_ms());
            partition.append_as_leader(&mut bytes).map_err(as_coordinator)?;
            tracing::info!(partition = %partition.name(), "a torn group snapshot closed by a whole one");
        }
        tracing::info!(partition = %partition.name(), "coordinating the groups of this partition");
        Ok(Shard {
            partition,
            leader_epoch,
            coordinator: Mutex::new(coordinator),
            snapshot_bytes: std::sync::atomic::AtomicU64::new(0),
            retired: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The shards this broker coordinates now.
    fn led_shards(&self) -> Vec<Arc<Shard>> {
        self.shards.read().unwrap_or_else(|p| p.into_inner()).iter().flatten().cloned().collect()
    }

    fn shard(&self, group_id: &str) -> Result<Arc<Shard>, ApiError> {
        let partition = coordinator_partition(group_id);
        let shard = self.shards.read().unwrap_or_else(|p| p.into_inner())[partition as usize].clone();
        shard.ok_or_else(|| {
            let message = format!(
                "this broker does not coordinate group {group_id:?} (the leader of {CONSUMER_OFFSETS_TOPIC}-{partition} does)"
            );
            ApiError::new(ErrorCode::NotCoordinator, message)
        })
    }

    /// Runs `handler` on the group's coordinator and persists its records (see the
    /// module docs).
    async fn write<T>(
        &self,
        group_id: &str,
        handler: impl FnOnce(&mut Coordinator) -> Result<(Vec<GroupRecord>, T), GroupError>,
    ) -> Result<T, ApiError> {
        let shard = self.shard(group_id)?;
        let (durable_needed, value) = {
            let mut coordinator = lock(&shard.coordinator);
            if shard.retired.load(std::sync::atomic::Ordering::Acquire) {
                let message = format!("this broker stopped coordinating group {group_id:?}");
                return Err(ApiError::new(ErrorCode::NotCoordinator, message));
            }
            let (records, value) = handler(&mut coordinator)?;
            let end = append(&shard.partition, &records, self.clock.now_ms())?;
            records.iter().for_each(|record| coordinator.replay(record));
            (end, value)
        };
        wait_committed(&shard.partition, durable_needed).await?;
        Ok(value)
    }

    pub async fn heartbeat(
        &self,
        request: &HeartbeatRequest,
        partition_counts: &BTreeMap<String, u32>,
    ) -> Result<HeartbeatResponse, ApiError> {
        let response = self
            .write(&request.group_id, |coordinator| {
                let (records, response) = coordinator.heartbeat(request, partition_counts)?;
                Ok((records, response))
            })
            .await?;
        if response.member_epoch >= 0 {
            lock(&self.shard(&request.group_id)?.coordinator).seen(
                &request.group_id,
                &response.member_id,
                self.clock.now_ms(),
            );
        }
        Ok(response)
    }

    pub async fn commit(&self, request: &CommitRequest) -> Result<(), ApiError> {
        let now_ms = self.clock.now_ms();
        self.write(&request.group_id, |coordinator| Ok((coordinator.commit_offsets(request, now_ms)?, ()))).await
    }

    /// Claims `partition`'s offset of `group_id` for `leader_epoch`: returns
    /// what is committed (if anything) and, in the same step, commits it again
    /// under that epoch (an empty offset 0 when nothing is), so a commit from
    /// an older epoch is refused from now on (`FencedLeaderEpoch` if a newer
    /// one claimed it already). A transform task's first step.
    pub async fn claim_offset(
        &self,
        group_id: &str,
        partition: TopicPartition,
        leader_epoch: i32,
    ) -> Result<Option<OffsetValue>, ApiError> {
        let now_ms = self.clock.now_ms();
        self.write(group_id, |coordinator| {
            let partitions = std::slice::from_ref(&partition);
            let stored = coordinator.fetch_offsets(group_id, Some(partitions))?.into_iter().next().map(|(_, v)| v);
            if stored.as_ref().is_some_and(|stored| stored.leader_epoch == Some(leader_epoch)) {
                return Ok((Vec::new(), stored));
            }
            let (offset, metadata) = stored.as_ref().map_or((0, String::new()), |v| (v.offset, v.metadata.clone()));
            let request = CommitRequest {
                group_id: group_id.to_owned(),
                member_id: String::new(),
                member_epoch: -1,
                offsets: vec![(partition.clone(), offset, metadata)],
                leader_epoch: Some(leader_epoch),
            };
            Ok((coordinator.commit_offsets(&request, now_ms)?, stored))
        })
        .await
    }

    pub async fn reset_offsets(&self, group_id: &str, offsets: &[(TopicPartition, i64)]) -> Result<(), ApiError> {
        let now_ms = self.clock.now_ms();
        self.write(group_id, |coordinator| Ok((coordinator.reset_offsets(group_id, offsets, now_ms)?, ()))).await
    }

    /// Deletes `group_id` if no offset of it was committed in the last
    /// `idle_ms` (checked and deleted in one step); whether it did.
    pub async fn delete_group_if_idle(&self, group_id: &str, idle_ms: i64) -> Result<bool, ApiError> {
        let now_ms = self.clock.now_ms();
        self.write(group_id, |coordinator| {
            let offsets = coordinator.fetch_offsets(group_id, None)?;
            let newest = offsets.iter().map(|(_, value)| value.commit_timestamp_ms).max().unwrap_or(i64::MIN);
            match now_ms.saturating_sub(newest) > idle_ms {
                true => Ok((coordinator.delete_group(group_id)?, true)),
                false => Ok((Vec::new(), false)),
            }
        })
        .await
    }

    pub async fn delete_group(&self, group_id: &str) -> Result<(), ApiError> {
        self.write(group_id, |coordinator| Ok((coordinator.delete_group(group_id)?, ()))).await
    }

    pub async fn fetch_offsets(
        &self,
        group_id: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<Vec<(TopicPartition, OffsetValue)>, ApiError> {
        self.write(group_id, |coordinator| Ok((Vec::new(), coordinator.fetch_offsets(group_id, partitions)?))).await
    }

    pub async fn describe_group(&self, group_id: &str) -> Result<GroupDescription, ApiError> {
        self.write(group_id, |coordinator| Ok((Vec::new(), coordinator.describe_group(group_id)?))).await
    }

    pub fn list_groups(&self) -> Vec<(String, GroupState, usize)> {
        let mut groups: Vec<_> =
            self.led_shards().iter().flat_map(|shard| lock(&shard.coordinator).list_groups()).collect();
        groups.sort_by(|left, right| left.0.cmp(&right.0));
        groups
    }

    /// Rewrites every shard whose log holds at least `min_bytes` as a snapshot and
    /// drops the segments before it (see the module docs). Returns how many
    /// segments went.
    pub async fn compact(&self, min_bytes: u64) -> Result<usize, ApiError> {
        let mut retired = 0;
        for shard in &self.led_shards() {
            let size_bytes = shard.partition.with_log(|log| Ok(log.size_bytes()))?;
            let last_snapshot = shard.snapshot_bytes.load(std::sync::atomic::Ordering::Relaxed);
            if size_bytes < min_bytes.max(1) || size_bytes < 2 * last_snapshot {
                continue;
            }
            let (snapshot_offset, end) = {
                let coordinator = lock(&shard.coordinator);
                if shard.retired.load(std::sync::atomic::Ordering::Acquire) {
                    continue;
                }
                shard.partition.roll()?;
                let mut bytes = snapshot_batches(&coordinator.snapshot_records(), self.clock.now_ms());
                shard.snapshot_bytes.store(bytes.len() as u64, std::sync::atomic::Ordering::Relaxed);
                let (info, _) = shard.partition.append_as_leader(&mut bytes).map_err(as_coordinator)?;
                (info.base_offset, info.last_offset + 1)
            };
            wait_committed(&shard.partition, end).await?;
            let count = shard.partition.retire_segments_below(snapshot_offset)?;
            tracing::info!(partition = %shard.partition.name(), segments = count, size_bytes, "group state snapshot written");
            retired += count;
        }
        Ok(retired)
    }

    /// Fences timed-out members and expires old offsets on every shard.
    pub async fn expire(&self, partition_counts: &BTreeMap<String, u32>) {
        for shard in &self.led_shards() {
            let outcome = {
                let mut coordinator = lock(&shard.coordinator);
                if shard.retired.load(std::sync::atomic::Ordering::Acquire) {
                    continue;
                }
                let now_ms = self.clock.now_ms();
                let records = coordinator.expire(now_ms, partition_counts);
                append(&shard.partition, &records, now_ms).map(|end| {
                    records.iter().for_each(|record| coordinator.replay(record));
                    (end, records.len())
                })
            };
            match outcome {
                Ok((end, count)) if count > 0 => {
                    tracing::info!(partition = %shard.partition.name(), record_count = count, "group sessions expired");
                    if let Err(error) = wait_committed(&shard.partition, end).await {
                        tracing::warn!(%error, "group expiry not durable");
                    }
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(%error, "group expiry failed"),
            }
        }
    }
}

/// Waits until everything below `end` is committed — durable here, then on every
/// in-sync replica, in the leader epoch this broker leads now — so a group's
/// state survives its partition's failover.
async fn wait_committed(partition: &Partition, end: u64) -> Result<(), ApiError> {
    let leader_epoch = partition.leader_epoch().ok_or_else(|| {
        ApiError::new(ErrorCode::NotCoordinator, format!("this broker no longer leads {}", partition.name()))
    })?;
    let deadline = tokio::time::Instant::now() + GROUP_WRITE_TIMEOUT;
    let timed_out = || {
        let message = format!("the group write to {} was not on every in-sync replica in time", partition.name());
        ApiError::new(ErrorCode::RequestTimedOut, message)
    };
    tokio::time::timeout_at(deadline, partition.wait_durable(end)).await.map_err(|_| timed_out())??;
    match partition.wait_committed(end, leader_epoch, deadline).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(timed_out()),
        Err(error) => Err(ApiError::new(ErrorCode::NotCoordinator, error.to_string())),
    }
}

/// Appends `records` as one batch; returns the offset everything up to which must
/// be committed before answering (the log end when there is nothing to append).
fn append(partition: &Partition, records: &[GroupRecord], now: i64) -> Result<u64, ApiError> {
    if records.is_empty() {
        return Ok(partition.with_log(|log| Ok(log.log_end_offset()))?);
    }
    let mut builder = BatchBuilder::new(now);
    for record in records {
        let (key, value) = record.encode();
        builder.push(now, Some(&key), value.as_deref(), &[]);
    }
    let (info, _) = partition.append_as_leader(&mut builder.encode()).map_err(as_coordinator)?;
    Ok(info.last_offset + 1)
}

/// A write refused because this broker no longer leads the partition is
/// `NotCoordinator` to clients (they look for the new coordinator).
fn as_coordinator(error: crate::partition::ReplicaError) -> ApiError {
    match error {
        crate::partition::ReplicaError::Role(message) => ApiError::new(ErrorCode::NotCoordinator, message),
        other => other.into(),
    }
}

/// Encodes `records` as back-to-back batches of at most `SNAPSHOT_BATCH_BYTES`.
fn snapshot_batches(records: &[GroupRecord], now: i64) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut builder = BatchBuilder::new(now);
    let mut batch_bytes = 0;
    for record in records {
        let (key, value) = record.encode();
        let record_bytes = key.len() + value.as_ref().map_or(0, Vec::len) + 32;
        if batch_bytes + record_bytes > SNAPSHOT_BATCH_BYTES && !builder.is_empty() {
            bytes.extend(builder.encode());
            builder = BatchBuilder::new(now);
            batch_bytes = 0;
        }
        builder.push(now, Some(&key), value.as_deref(), &[]);
        batch_bytes += record_bytes;
    }
    if !builder.is_empty() {
        bytes.extend(builder.encode());
    }
    bytes
}

/// Replays every record of `partition` into `coordinator`.
/// Replays `partition` into `coordinator`; returns whether the log ends inside
/// a torn snapshot (see [`Coordinator::finish_replay`]).
fn replay_partition(partition: &Partition, coordinator: &mut Coordinator) -> Result<bool, LogError> {
    let (mut offset, end) = partition.with_log(|log| Ok((log.log_start_offset(), log.log_end_offset())))?;
    let mut buffer = Vec::new();
    while offset < end {
        let info = partition.read(offset, REPLAY_READ_BYTES, &mut buffer)?;
        if info.next_offset <= offset {
            break;
        }
        let mut rest = &buffer[..];
        while !rest.is_empty() {
            let Ok((view, tail)) = BatchView::split_first(rest) else { break };
            rest = tail;
            match RecordBatch::decode(view.as_bytes()) {
                Ok(batch) => {
                    for record in batch.records {
                        let decoded =
                            record.key.as_deref().ok_or_else(|| "a record without a key".to_owned()).and_then(|key| {
                                GroupRecord::decode(key, record.value.as_deref()).map_err(|error| error.to_string())
                            });
                        match decoded {
                            Ok(group_record) => coordinator.replay(&group_record),
                            Err(reason) => {
                                tracing::error!(partition = %partition.name(), %reason, "skipping an unreadable group record")
                            }
                        }
                    }
                }
                Err(error) => tracing::error!(partition = %partition.name(), %error, "skipping an unreadable batch"),
            }
        }
        offset = info.next_offset;
    }
    Ok(coordinator.finish_replay())
}

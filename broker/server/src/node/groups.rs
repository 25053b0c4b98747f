//! Consumer groups on [`Node`]: the coordinators of `__consumer_offsets`, loaded
//! (replayed) at start-up, and the group requests, which need the topics'
//! partition counts for assignment.

use super::*;

impl Node {
    /// Coordinates the groups of the `__consumer_offsets` partitions this broker
    /// leads (after leadership moved, or at start-up).
    pub(super) fn lead_groups(&self) -> Result<(), ApiError> {
        let topic = self.topics().get(CONSUMER_OFFSETS_TOPIC).cloned();
        let led: Vec<(u32, Partition)> = topic
            .iter()
            .flat_map(|topic| topic.slots.iter().enumerate())
            .filter_map(|(index, slot)| slot.led().ok().map(|(partition, _, _)| (index as u32, partition.clone())))
            .collect();
        self.groups.lead(led)
    }

    /// The broker that coordinates `group_id`: the leader of its partition of
    /// `__consumer_offsets`.
    pub fn find_coordinator(&self, group_id: &str) -> Result<BrokerEntry, ApiError> {
        let partition = crate::groups::coordinator_partition(group_id);
        let leader = self.controller.read(|image| {
            let state = image.partition(CONSUMER_OFFSETS_TOPIC, partition).ok()?;
            let broker = image.brokers.get(&state.leader)?;
            Some(BrokerEntry {
                id: broker.registration.broker_id,
                host: broker.registration.host.clone(),
                port: broker.registration.port,
            })
        });
        leader.ok_or_else(|| {
            let message = format!("{CONSUMER_OFFSETS_TOPIC}-{partition} has no leader now; the group is not available");
            ApiError::new(ErrorCode::NotCoordinator, message)
        })
    }

    pub(super) fn groups(&self) -> &GroupCoordinators {
        &self.groups
    }

    /// Partition count of every topic (the assignors' input).
    pub(super) fn partition_counts(&self) -> BTreeMap<String, u32> {
        self.topics()
            .iter()
            .filter(|(name, _)| !is_internal(name))
            .map(|(name, topic)| (name.clone(), topic.slots.len() as u32))
            .collect()
    }

    pub async fn group_heartbeat(&self, request: &HeartbeatRequest) -> Result<HeartbeatResponse, ApiError> {
        refuse_checkpoint_group(&request.group_id)?;
        self.groups().heartbeat(request, &self.partition_counts()).await
    }

    pub async fn commit_offsets(&self, request: &CommitRequest) -> Result<(), ApiError> {
        refuse_checkpoint_group(&request.group_id)?;
        self.groups().commit(request).await
    }

    pub async fn fetch_offsets(
        &self,
        group_id: &str,
        partitions: Option<&[GroupPartition]>,
    ) -> Result<Vec<(GroupPartition, OffsetValue)>, ApiError> {
        self.groups().fetch_offsets(group_id, partitions).await
    }

    pub fn list_groups(&self) -> Vec<(String, GroupState, usize)> {
        self.groups().list_groups()
    }

    pub async fn describe_group(&self, group_id: &str) -> Result<GroupDescription, ApiError> {
        self.groups().describe_group(group_id).await
    }

    pub async fn delete_group(&self, group_id: &str) -> Result<(), ApiError> {
        refuse_checkpoint_group(group_id)?;
        self.groups().delete_group(group_id).await
    }

    pub async fn reset_group_offsets(&self, group_id: &str, offsets: &[(GroupPartition, i64)]) -> Result<(), ApiError> {
        refuse_checkpoint_group(group_id)?;
        self.groups().reset_offsets(group_id, offsets).await
    }

    /// Fences members whose sessions timed out (called about once a second), and
    /// rewrites `__consumer_offsets` shards that grew past their snapshot size.
    pub async fn expire_groups(&self) {
        self.groups().expire(&self.partition_counts()).await;
        self.delete_orphaned_checkpoints().await;
        if let Err(error) = self.groups().compact(crate::groups::SNAPSHOT_AFTER_BYTES).await {
            tracing::warn!(%error, "group state snapshot failed");
        }
    }

    /// Deletes the checkpoint groups of transforms that are no longer deployed
    /// and were not committed to for `ORPHANED_CHECKPOINTS_MS`: the brokers
    /// that ran a deleted deployment delete its group, but one that was down
    /// then, or a late commit of a task that had not stopped yet, leaves it
    /// (such offsets never expire on their own). The quiet time keeps a group
    /// whose deployment this broker has not applied yet.
    async fn delete_orphaned_checkpoints(&self) {
        let prefix = crate::transforms::CHECKPOINT_GROUP_PREFIX;
        let candidates: Vec<String> = self
            .groups()
            .list_groups()
            .into_iter()
            .map(|(group_id, _, _)| group_id)
            .filter(|group_id| group_id.starts_with(prefix))
            .collect();
        if candidates.is_empty() {
            return;
        }
        let deployed: std::collections::BTreeSet<String> = self.controller.read(|image| {
            image.transforms.values().map(|transform| crate::transforms::checkpoint_group(&transform.entry)).collect()
        });
        for group_id in candidates.into_iter().filter(|group_id| !deployed.contains(group_id)) {
            match self.groups().delete_group_if_idle(&group_id, ORPHANED_CHECKPOINTS_MS).await {
                Ok(true) => tracing::info!(group = %group_id, "checkpoints of a transform no longer deployed deleted"),
                Ok(false) => {}
                Err(error) => tracing::debug!(group = %group_id, %error, "orphaned checkpoints not deleted yet"),
            }
        }
    }

    /// Rewrites every `__consumer_offsets` shard holding at least `min_bytes` as a
    /// snapshot now (tests and operators); returns how many segments went.
    pub async fn compact_groups(&self, min_bytes: u64) -> Result<usize, ApiError> {
        self.groups().compact(min_bytes).await
    }
}

/// How long the checkpoint group of a transform that is no longer deployed
/// stays idle before its coordinator deletes it (far longer than a broker's
/// metadata can lag behind while it still coordinates anything).
const ORPHANED_CHECKPOINTS_MS: i64 = 60 * 60 * 1000;

/// Groups that hold transform checkpoints are written by their transform
/// tasks only (clients may read them: `weir group describe` shows a
/// transform's lag); `weir transform replay` moves a transform.
fn refuse_checkpoint_group(group_id: &str) -> Result<(), ApiError> {
    match group_id.starts_with(crate::transforms::CHECKPOINT_GROUP_PREFIX) {
        true => Err(ApiError::new(
            ErrorCode::InvalidGroupId,
            format!("group {group_id:?} holds transform checkpoints; only its transform writes it (see `weir transform replay`)"),
        )),
        false => Ok(()),
    }
}

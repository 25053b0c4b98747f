//! Consumer groups on [`Node`]: the coordinators of `__consumer_offsets`, loaded
//! (replayed) at start-up, and the group requests, which need the topics'
//! partition counts for assignment.

use super::*;

impl Node {
    /// Loads a coordinator per partition of `__consumer_offsets` (replaying it).
    pub(super) fn load_group_coordinators(&self) -> Result<GroupCoordinators, NodeError> {
        let topic = self.topic(CONSUMER_OFFSETS_TOPIC).map_err(|error| NodeError::TopicConfig {
            topic: CONSUMER_OFFSETS_TOPIC.to_owned(),
            reason: error.to_string(),
        })?;
        let mut partitions = Vec::new();
        for slot in &topic.slots {
            let (partition, _, _) = slot.led().map_err(|error| NodeError::TopicConfig {
                topic: CONSUMER_OFFSETS_TOPIC.to_owned(),
                reason: format!("a partition is offline: {}", error.message),
            })?;
            partitions.push(partition.clone());
        }
        Ok(GroupCoordinators::load(partitions, &CoordinatorConfig::default(), self.clock.clone())?)
    }

    pub(super) fn groups(&self) -> &GroupCoordinators {
        self.groups.as_ref().expect("Node::open loads the group coordinators before returning")
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
        self.groups().heartbeat(request, &self.partition_counts()).await
    }

    pub async fn commit_offsets(&self, request: &CommitRequest) -> Result<(), ApiError> {
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
        self.groups().delete_group(group_id).await
    }

    pub async fn reset_group_offsets(&self, group_id: &str, offsets: &[(GroupPartition, i64)]) -> Result<(), ApiError> {
        self.groups().reset_offsets(group_id, offsets).await
    }

    /// Fences members whose sessions timed out (called about once a second), and
    /// rewrites `__consumer_offsets` shards that grew past their snapshot size.
    pub async fn expire_groups(&self) {
        self.groups().expire(&self.partition_counts()).await;
        if let Err(error) = self.groups().compact(crate::groups::SNAPSHOT_AFTER_BYTES).await {
            tracing::warn!(%error, "group state snapshot failed");
        }
    }

    /// Rewrites every `__consumer_offsets` shard holding at least `min_bytes` as a
    /// snapshot now (tests and operators); returns how many segments went.
    pub async fn compact_groups(&self, min_bytes: u64) -> Result<usize, ApiError> {
        self.groups().compact(min_bytes).await
    }
}

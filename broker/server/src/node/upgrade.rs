//! The upgrade of a data directory written by the single-node broker that kept its
//! metadata in `cluster-metadata.json` (before the controller): on the first
//! start with the controller, every topic of that file becomes a `CreateTopic`
//! (led by this broker, configs kept), its producer-id block a `ProducerIdBlock`,
//! its partition directories are adopted (given `partition.metadata`) and its
//! recorded deletions are finished. Then the file is renamed to
//! `cluster-metadata.json.upgraded`.
//!
//! Each step can be repeated: a crash before the rename repeats the upgrade, which
//! skips topics the metadata already has and ids already handed out. Records,
//! group offsets, plugins and transforms live in files the upgrade does not touch.

use std::collections::BTreeSet;

use super::reconcile::PartitionMetadata;
use super::*;
use crate::metadata_store::{MetadataStore, METADATA_FILE_NAME};

/// What the upgrade found, for opening the data directory and finishing it.
#[derive(Debug, Default)]
pub(super) struct LegacyUpgrade {
    /// Partition directories of the file's topics.
    adopted: BTreeSet<String>,
    /// Partition directories of deletions the file recorded.
    doomed: BTreeSet<String>,
    /// Whether there was a file to upgrade.
    found: bool,
}

impl LegacyUpgrade {
    pub(super) fn adopts(&self, directory: &str) -> bool {
        self.adopted.contains(directory)
    }

    pub(super) fn dooms(&self, directory: &str) -> bool {
        self.doomed.contains(directory)
    }

    /// After the partitions were opened (and given `partition.metadata`): sets the
    /// file aside so the upgrade never runs again.
    pub(super) fn finish(&self, node: &Node) -> Result<(), NodeError> {
        if !self.found {
            return Ok(());
        }
        let storage = &*node.environment.storage;
        let from = node.data_dir.join(METADATA_FILE_NAME);
        let to = node.data_dir.join(format!("{METADATA_FILE_NAME}.upgraded"));
        storage
            .rename(&from, &to)
            .and_then(|()| storage.sync_dir(&node.data_dir))
            .map_err(|error| NodeError::Storage(format!("rename {}: {error}", from.display())))?;
        tracing::info!(file = %to.display(), "upgraded a single-node data directory to the controller's metadata");
        Ok(())
    }
}

impl Node {
    /// Carries the single-node metadata file over into the controller's metadata
    /// (see the module docs).
    pub(super) async fn upgrade_legacy_metadata(&self) -> Result<LegacyUpgrade, NodeError> {
        let storage = self.environment.storage.clone();
        if !storage.exists(&self.data_dir.join(METADATA_FILE_NAME)) {
            return Ok(LegacyUpgrade::default());
        }
        let legacy = MetadataStore::open(storage, &self.data_dir)?.metadata().clone();
        let failed =
            |error: ApiError| NodeError::Controller(format!("upgrading {METADATA_FILE_NAME}: {}", error.message));
        let mut upgrade = LegacyUpgrade { found: true, ..LegacyUpgrade::default() };
        for (name, topic) in &legacy.topics {
            if self.controller.read(|image| image.topics.contains_key(name)) {
                // Adopted by an upgrade a crash interrupted (checked below), or a
                // topic of the cluster that merely shares the name.
                continue;
            }
            let request = ControllerRequest::AdoptTopic {
                name: name.clone(),
                partition_count: topic.partition_count,
                configs: topic.configs.clone(),
                broker_id: self.broker.id,
            };
            self.request(&request).await.map_err(failed)?;
            tracing::info!(topic = %name, "topic carried over from {METADATA_FILE_NAME}");
        }
        let next_producer_id = self.controller.read(|image| image.next_producer_id);
        if legacy.producer_id_block_end > next_producer_id {
            let count = legacy.producer_id_block_end - next_producer_id;
            let request = ControllerRequest::AllocateProducerIds { broker_id: self.broker.id, count };
            self.request(&request).await.map_err(failed)?;
        }
        upgrade.doomed = legacy.pending_deletions.clone();
        // Every adopted directory gets its `partition.metadata` now, whether or not
        // its log opens later (an offline partition stays this topic's).
        let (cluster_id, topics) = self.controller.read(|image| (image.cluster_id.clone(), image.topics.clone()));
        let cluster_id = cluster_id.unwrap_or_default();
        for (name, legacy_topic) in &legacy.topics {
            let Some(topic) = topics.get(name) else { continue };
            let ours = topic.partitions.len() == legacy_topic.partition_count as usize
                && topic.partitions.iter().all(|state| state.replicas == [self.broker.id]);
            if !ours {
                tracing::warn!(topic = %name, "a topic of that name exists in the cluster; its old directories are left untouched");
                continue;
            }
            for partition in 0..legacy_topic.partition_count {
                let directory = format!("{name}-{partition}");
                if !self.environment.storage.exists(&self.data_dir.join(&directory)) {
                    continue;
                }
                let metadata = PartitionMetadata::of(&cluster_id, name, topic.topic_id, partition);
                self.write_partition_metadata(&directory, &metadata).map_err(failed)?;
                upgrade.adopted.insert(directory);
            }
        }
        Ok(upgrade)
    }
}

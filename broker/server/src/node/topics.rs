//! Topics on [`Node`]: create (durable in the metadata before the logs change),
//! delete, configs, listings and the metadata clients route by.

use super::*;

impl Node {
    /// Creates a topic: durable in the metadata first, then its partition logs.
    pub fn create_topic(
        &self,
        name: &str,
        partition_count: i32,
        replication_factor: i16,
        configs: &[(String, String)],
    ) -> Result<(), ApiError> {
        validate_topic_name(name)?;
        if name.starts_with("__") {
            return Err(ApiError::new(ErrorCode::InvalidTopic, "names starting with \"__\" are reserved"));
        }
        let partitions_max = self.limits.topic_partitions_max;
        if partition_count < 1 || partition_count as u32 > partitions_max {
            let message = format!("partition count must be in [1, {partitions_max}], got {partition_count}");
            return Err(ApiError::new(ErrorCode::InvalidPartitions, message));
        }
        let replication_factor = if replication_factor == -1 { 1 } else { replication_factor };
        if replication_factor != 1 {
            let message =
                format!("replication factor {replication_factor} needs that many brokers; this cluster has 1");
            return Err(ApiError::new(ErrorCode::InvalidReplicationFactor, message));
        }
        self.create_topic_unchecked(name, partition_count as u32, replication_factor, configs)
    }

    /// Creates a topic whose name, partition count and replication factor are
    /// already checked (or internal).
    pub(super) fn create_topic_unchecked(
        &self,
        name: &str,
        partition_count: u32,
        replication_factor: i16,
        configs: &[(String, String)],
    ) -> Result<(), ApiError> {
        let log_config = self.topic_log_config(configs)?;
        let mut metadata = lock(&self.metadata);
        if metadata.metadata().topics.contains_key(name) {
            return Err(ApiError::new(ErrorCode::TopicAlreadyExists, format!("topic {name:?} already exists")));
        }
        let record = TopicRecord { partition_count, replication_factor, configs: configs.iter().cloned().collect() };
        let log_dir = lock(&self.log_dir);
        let log_dir = log_dir.as_ref().ok_or_else(shutting_down)?;
        self.clear_partition_dirs(&mut metadata, log_dir, name, record.partition_count)?;
        metadata.update(|metadata| metadata.topics.insert(name.to_owned(), record.clone())).map_err(storage_error)?;
        let slots = {
            (0..record.partition_count)
                .map(|partition| open_slot(log_dir, &HashMap::new(), name, partition, &log_config))
                .collect()
        };
        self.topics_mut().insert(name.to_owned(), Arc::new(Topic { slots }));
        tracing::info!(topic = %name, partition_count, "topic created");
        Ok(())
    }

    /// A new topic's partition directories must not exist: leftovers of a deletion
    /// that did not finish are deleted now; anything else is refused (never adopt
    /// or destroy data no topic owns).
    pub(super) fn clear_partition_dirs(
        &self,
        metadata: &mut MetadataStore,
        log_dir: &LogDir,
        topic: &str,
        partition_count: u32,
    ) -> Result<(), ApiError> {
        for partition in 0..partition_count {
            let directory = format!("{topic}-{partition}");
            if metadata.metadata().pending_deletions.contains(&directory) {
                log_dir.delete_partition(&directory)?;
                metadata.update(|metadata| metadata.pending_deletions.remove(&directory)).map_err(storage_error)?;
            } else if log_dir.holds(&directory) {
                let message = format!(
                    "{} exists but belongs to no topic; move it out of the data directory first",
                    log_dir.path().join(&directory).display()
                );
                return Err(ApiError::new(ErrorCode::TopicAlreadyExists, message));
            }
        }
        Ok(())
    }

    /// Deletes a topic: gone from the metadata (its directories recorded as
    /// pending deletions) first, then its partitions' files, then the record.
    pub fn delete_topic(&self, name: &str) -> Result<(), ApiError> {
        if name.starts_with("__") {
            return Err(ApiError::new(ErrorCode::InvalidTopic, format!("{name:?} is an internal topic")));
        }
        let mut metadata = lock(&self.metadata);
        let Some(record) = metadata.metadata().topics.get(name).cloned() else {
            return Err(ApiError::unknown_topic(name));
        };
        let directories: Vec<String> =
            (0..record.partition_count).map(|partition| format!("{name}-{partition}")).collect();
        metadata
            .update(|metadata| {
                metadata.topics.remove(name);
                metadata.pending_deletions.extend(directories.iter().cloned());
            })
            .map_err(storage_error)?;
        self.topics_mut().remove(name);
        if let Some(log_dir) = lock(&self.log_dir).as_ref() {
            for directory in &directories {
                log_dir.delete_partition(directory)?;
            }
        }
        metadata
            .update(|metadata| metadata.pending_deletions.retain(|directory| !directories.contains(directory)))
            .map_err(storage_error)?;
        drop(metadata);
        self.plugins.topic_deleted(name)?;
        tracing::info!(topic = %name, "topic deleted");
        Ok(())
    }

    /// Topic names, without internal ones (`__consumer_offsets`).
    pub fn list_topics(&self) -> Vec<String> {
        self.topics().keys().filter(|name| !is_internal(name)).cloned().collect()
    }

    pub fn describe_topic(&self, name: &str) -> Result<TopicDescription, ApiError> {
        let topic = self.topic(name)?;
        let configs = match topic.slots.iter().find_map(Slot::partition) {
            Some(partition) => effective_topic_configs(&partition.config()),
            None => {
                let overrides = lock(&self.metadata).metadata().topics.get(name).map(entries).unwrap_or_default();
                effective_topic_configs(&self.topic_log_config(&overrides)?)
            }
        };
        Ok(TopicDescription { name: name.to_owned(), partitions: self.partition_infos(&topic), configs })
    }

    /// Sets config overrides; an empty value removes the override (back to the
    /// broker default). Validated as a whole before anything changes.
    pub fn alter_topic_config(&self, name: &str, changes: &[(String, String)]) -> Result<(), ApiError> {
        let mut metadata = lock(&self.metadata);
        let topic = self.topic(name)?;
        let mut overrides =
            metadata.metadata().topics.get(name).map(|record| record.configs.clone()).unwrap_or_default();
        for (key, value) in changes {
            match value.is_empty() {
                true => overrides.remove(key),
                false => overrides.insert(key.clone(), value.clone()),
            };
        }
        let log_config = self.topic_log_config(&overrides.clone().into_iter().collect::<Vec<_>>())?;
        metadata
            .update(|metadata| {
                if let Some(record) = metadata.topics.get_mut(name) {
                    record.configs = overrides.clone();
                }
            })
            .map_err(storage_error)?;
        for partition in topic.slots.iter().filter_map(Slot::partition) {
            partition.set_config(log_config.clone())?;
        }
        tracing::info!(topic = %name, ?changes, "topic configs altered");
        Ok(())
    }

    pub(super) fn topic_log_config(&self, configs: &[(String, String)]) -> Result<LogConfig, ApiError> {
        apply_topic_configs(&self.log_defaults, configs)
            .map_err(|error| ApiError::new(ErrorCode::InvalidConfig, error.problems.join("; ")))
    }

    /// Brokers and the given topics (all when `names` is empty).
    pub fn metadata(&self, names: &[String]) -> ClusterInfo {
        let topics = self.topics();
        let infos = if names.is_empty() {
            topics
                .iter()
                .filter(|(name, _)| !is_internal(name))
                .map(|(name, topic)| self.topic_info(name, topic))
                .collect()
        } else {
            names
                .iter()
                .map(|name| match topics.get(name) {
                    Some(topic) => self.topic_info(name, topic),
                    None => TopicInfo {
                        name: name.clone(),
                        partitions: Vec::new(),
                        error: Some(ApiError::unknown_topic(name)),
                        partitioner: None,
                    },
                })
                .collect()
        };
        ClusterInfo { brokers: vec![self.broker.clone()], controller_id: self.broker.id, topics: infos }
    }

    pub(super) fn topic_info(&self, name: &str, topic: &Topic) -> TopicInfo {
        TopicInfo {
            name: name.to_owned(),
            partitions: self.partition_infos(topic),
            error: None,
            partitioner: self.plugins.partitioner_of(name),
        }
    }

    pub(super) fn partition_infos(&self, topic: &Topic) -> Vec<PartitionInfo> {
        let id = self.broker.id;
        let info = |(index, slot): (usize, &Slot)| PartitionInfo {
            partition: index as i32,
            leader: id,
            leader_epoch: LEADER_EPOCH,
            replicas: vec![id],
            isr: vec![id],
            error: match slot {
                Slot::Online { .. } => None,
                Slot::Offline { reason } => Some(ApiError::new(ErrorCode::StorageError, reason.clone())),
            },
        };
        topic.slots.iter().enumerate().map(info).collect()
    }
}

pub(super) fn entries(record: &TopicRecord) -> Vec<(String, String)> {
    record.configs.clone().into_iter().collect()
}

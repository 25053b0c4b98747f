//! Topics on [`Node`]: create, delete and alter go to the active controller (as
//! `ControllerRequest`s, forwarded when this broker is not it); once this broker's
//! image has applied the change, its partitions follow (`reconcile.rs`).
//! Listings, descriptions and the metadata clients route by are read from the
//! applied image.

use super::*;

impl Node {
    /// Creates a topic: validated here, committed by the controller, then opened
    /// on the brokers that hold its replicas.
    pub async fn create_topic(
        self: &Arc<Self>,
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
            let message = format!(
                "partition count must be in [1, {partitions_max}] (the broker's `[limits] topic_partitions_max`), got \
                 {partition_count}"
            );
            return Err(ApiError::new(ErrorCode::InvalidPartitions, message));
        }
        let replication_factor = if replication_factor == -1 { 1 } else { replication_factor };
        if !(1..=i16::from(u8::MAX)).contains(&replication_factor) {
            let message = format!("replication factor must be at least 1, got {replication_factor}");
            return Err(ApiError::new(ErrorCode::InvalidReplicationFactor, message));
        }
        self.topic_log_config(configs)?;
        let foreign = self.foreign_directories(name, partition_count as u32);
        if let Some(directory) = foreign.first() {
            let message = format!(
                "{} exists but belongs to no topic; move it out of the data directory first",
                self.data_dir.join(directory).display()
            );
            return Err(ApiError::new(ErrorCode::TopicAlreadyExists, message));
        }
        let request = ControllerRequest::CreateTopic {
            name: name.to_owned(),
            partition_count: partition_count as u32,
            replication_factor: replication_factor as u16,
            configs: configs.iter().cloned().collect(),
            // Every replica is empty, so every replica is in sync.
            initial_isr: IsrChoice::AllReplicas,
        };
        self.request(&request).await?;
        self.reconcile_off_thread().await?;
        tracing::info!(topic = %name, partition_count, replication_factor, "topic created");
        Ok(())
    }

    /// Deletes a topic: gone from the cluster metadata first, then each broker
    /// deletes its partitions' files.
    pub async fn delete_topic(self: &Arc<Self>, name: &str) -> Result<(), ApiError> {
        if name.starts_with("__") {
            return Err(ApiError::new(ErrorCode::InvalidTopic, format!("{name:?} is an internal topic")));
        }
        self.request(&ControllerRequest::DeleteTopic { name: name.to_owned() }).await?;
        self.reconcile_off_thread().await
    }

    /// Runs [`Node::reconcile`] on the blocking pool (it opens and deletes files).
    pub(super) async fn reconcile_off_thread(self: &Arc<Self>) -> Result<(), ApiError> {
        let node = self.clone();
        tokio::task::spawn_blocking(move || node.reconcile()).await.unwrap_or_else(|error| {
            Err(ApiError::new(ErrorCode::UnknownServerError, format!("reconciling partitions failed: {error}")))
        })
    }

    /// Topic names, without internal ones (`__consumer_offsets`).
    pub fn list_topics(&self) -> Vec<String> {
        self.controller.read(|image| image.topics.keys().filter(|name| !is_internal(name)).cloned().collect())
    }

    pub fn describe_topic(&self, name: &str) -> Result<TopicDescription, ApiError> {
        let image = self.controller.read(|image| image.topics.get(name).cloned());
        let image = image.ok_or_else(|| ApiError::unknown_topic(name))?;
        let local = self.topics().get(name).cloned();
        let configs = match local.as_ref().and_then(|topic| topic.slots.iter().find_map(Slot::partition)) {
            Some(partition) => effective_topic_configs(&partition.config()),
            None => {
                let overrides: Vec<(String, String)> = image.configs.clone().into_iter().collect();
                effective_topic_configs(&self.topic_log_config(&overrides)?)
            }
        };
        let partitions = self.partition_infos(&image, local.as_deref());
        Ok(TopicDescription { name: name.to_owned(), partitions, configs })
    }

    /// Sets config overrides; an empty value removes the override (back to the
    /// broker default). Validated as a whole before anything changes.
    pub async fn alter_topic_config(
        self: &Arc<Self>,
        name: &str,
        changes: &[(String, String)],
    ) -> Result<(), ApiError> {
        let current = self.controller.read(|image| image.topics.get(name).map(|topic| topic.configs.clone()));
        let mut overrides = current.ok_or_else(|| ApiError::unknown_topic(name))?;
        for (key, value) in changes {
            match value.is_empty() {
                true => overrides.remove(key),
                false => overrides.insert(key.clone(), value.clone()),
            };
        }
        self.topic_log_config(&overrides.into_iter().collect::<Vec<_>>())?;
        let changes =
            changes.iter().map(|(key, value)| (key.clone(), (!value.is_empty()).then(|| value.clone()))).collect();
        self.request(&ControllerRequest::AlterConfigs { topic: name.to_owned(), changes }).await?;
        self.reconcile_off_thread().await?;
        tracing::info!(topic = %name, "topic configs altered");
        Ok(())
    }

    pub(super) fn topic_log_config(&self, configs: &[(String, String)]) -> Result<LogConfig, ApiError> {
        apply_topic_configs(&self.log_defaults, configs)
            .map_err(|error| ApiError::new(ErrorCode::InvalidConfig, error.problems.join("; ")))
    }

    /// Brokers and the given topics (all when `names` is empty).
    pub fn metadata(&self, names: &[String]) -> ClusterInfo {
        let (brokers, topics) = self.controller.read(|image| {
            let brokers: Vec<BrokerEntry> = image
                .brokers
                .values()
                .filter(|broker| !broker.fenced)
                .map(|broker| BrokerEntry {
                    id: broker.registration.broker_id,
                    host: broker.registration.host.clone(),
                    port: broker.registration.port,
                })
                .collect();
            let topics: Vec<(String, Option<TopicImage>)> = match names.is_empty() {
                true => image
                    .topics
                    .iter()
                    .filter(|(name, _)| !is_internal(name))
                    .map(|(name, topic)| (name.clone(), Some(topic.clone())))
                    .collect(),
                false => names.iter().map(|name| (name.clone(), image.topics.get(name).cloned())).collect(),
            };
            (brokers, topics)
        });
        let local = self.topics();
        let infos = topics
            .into_iter()
            .map(|(name, image)| match image {
                Some(image) => TopicInfo {
                    partitions: self.partition_infos(&image, local.get(&name).map(|topic| &**topic)),
                    error: None,
                    partitioner: self.plugins.partitioner_of(&name),
                    name,
                },
                None => TopicInfo {
                    error: Some(ApiError::unknown_topic(&name)),
                    name,
                    partitions: Vec::new(),
                    partitioner: None,
                },
            })
            .collect();
        let controller_id = self.controller.active_controller().map_or(-1, |id| id as i32);
        ClusterInfo { brokers, controller_id, topics: infos }
    }

    /// Each partition's leadership from the image; a partition this broker holds
    /// but could not open reports why.
    fn partition_infos(&self, image: &TopicImage, local: Option<&Topic>) -> Vec<PartitionInfo> {
        image
            .partitions
            .iter()
            .enumerate()
            .map(|(index, state)| PartitionInfo {
                partition: index as i32,
                leader: state.leader,
                leader_epoch: state.leader_epoch,
                replicas: state.replicas.clone(),
                isr: state.isr.clone(),
                target_replicas: state.target_replicas.clone(),
                error: match local.and_then(|topic| topic.slots.get(index)) {
                    Some(Slot::Offline { reason }) => Some(ApiError::new(ErrorCode::StorageError, reason.clone())),
                    _ => None,
                },
            })
            .collect()
    }
}

//! Local partitions follow the cluster metadata: [`Node::reconcile`] compares the
//! applied image with what this broker holds and opens, deletes or re-leads
//! partitions to match. It runs at start-up, after every admin request this broker
//! made, and whenever the image moves (a change made on another broker).
//!
//! Each partition directory carries `partition.metadata` (JSON: cluster id, topic
//! id, topic, partition), written before its log is created. It is how start-up
//! tells, without guessing by name:
//! 1. a partition of a live topic (same cluster, same topic id) — opened;
//! 2. a partition of a topic this cluster deleted (same cluster, a topic id the
//!    image no longer has) — deleted, finishing a deletion a crash interrupted;
//! 3. anything else (another cluster's data, a backup, a directory without the
//!    file) — left untouched, with a warning, and a topic never takes it over.
//!
//! A live topic's replica that the image places on other brokers (a
//! reassignment moved it away) is left alone at start-up — the image may be
//! behind a move that brought it back — and deleted once the image holds this
//! start's registration, if it still places it elsewhere. While running, a
//! reassignment's replicas are opened (empty) or deleted as the image moves.
//!
//! Directories of a single-node data directory written before the controller
//! existed have no `partition.metadata`; the upgrade (`upgrade.rs`) adopts them.

use serde::{Deserialize, Serialize};

use super::*;

/// File inside each partition directory.
pub(super) const PARTITION_METADATA_FILE: &str = "partition.metadata";
pub(super) const PARTITION_METADATA_VERSION: u32 = 1;

/// `partition.metadata`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct PartitionMetadata {
    pub version: u32,
    pub cluster_id: String,
    pub topic_id: u64,
    pub topic: String,
    pub partition: u32,
}

impl PartitionMetadata {
    /// The file of `topic`'s `partition` in cluster `cluster_id`.
    pub(super) fn of(cluster_id: &str, topic: &str, topic_id: u64, partition: u32) -> PartitionMetadata {
        PartitionMetadata {
            version: PARTITION_METADATA_VERSION,
            cluster_id: cluster_id.to_owned(),
            topic_id,
            topic: topic.to_owned(),
            partition,
        }
    }
}

impl Node {
    fn read_partition_metadata(&self, directory: &str) -> Option<PartitionMetadata> {
        let path = self.data_dir.join(directory).join(PARTITION_METADATA_FILE);
        let bytes = broker_core::storage::read_file(&*self.environment.storage, &path).ok()??;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes `partition.metadata` into `directory` (created when missing).
    pub(super) fn write_partition_metadata(
        &self,
        directory: &str,
        metadata: &PartitionMetadata,
    ) -> Result<(), ApiError> {
        let dir = self.data_dir.join(directory);
        let storage = &*self.environment.storage;
        let failed = |error: std::io::Error| {
            ApiError::new(
                ErrorCode::StorageError,
                format!("write {}/{PARTITION_METADATA_FILE}: {error}", dir.display()),
            )
        };
        storage.create_dir_all(&dir).map_err(failed)?;
        let bytes = serde_json::to_vec(metadata).map_err(|error| failed(std::io::Error::other(error)))?;
        broker_core::storage::replace_file(storage, &dir.join(PARTITION_METADATA_FILE), &bytes).map_err(failed)?;
        storage.sync_dir(&self.data_dir).map_err(failed)
    }

    /// Opens the data directory, deciding each partition directory's fate as the
    /// module docs say (`adopted`: directories the upgrade takes over; `doomed`:
    /// deletions it finishes).
    pub(super) fn open_log_dir(
        &self,
        config: &BrokerConfig,
        upgrade: &upgrade::LegacyUpgrade,
    ) -> Result<(), NodeError> {
        let (cluster_id, topics, applied_offset) =
            self.controller.read(|image| (image.cluster_id.clone(), image.topics.clone(), image.applied_offset));
        let mut log_configs = HashMap::new();
        for (name, topic) in &topics {
            let entries: Vec<(String, String)> = topic.configs.clone().into_iter().collect();
            let log_config = apply_topic_configs(&config.log, &entries)
                .map_err(|error| NodeError::TopicConfig { topic: name.clone(), reason: error.to_string() })?;
            log_configs.insert(name.clone(), log_config);
        }
        let log_dir_config = LogDirConfig { environment: self.environment.clone(), ..config.log_dir_config() };
        let broker_id = self.broker.id;
        let moved_away = Mutex::new(Vec::new());
        let log_dir = LogDir::open_with(log_dir_config, |directory| {
            let Some((topic_name, partition)) = parse_partition_dir(directory) else { return PartitionDirFate::Leave };
            let local = topics.get(topic_name).and_then(|topic| {
                let state = topic.partitions.get(partition as usize)?;
                state.replicas.contains(&broker_id).then_some(topic.topic_id)
            });
            match self.read_partition_metadata(directory) {
                Some(metadata) if Some(&metadata.cluster_id) == cluster_id.as_ref() => {
                    let live = topics.get(topic_name).map(|topic| topic.topic_id) == Some(metadata.topic_id);
                    match local == Some(metadata.topic_id) {
                        true => PartitionDirFate::Open(log_configs[topic_name].clone()),
                        // A live topic's replica placed elsewhere: moved away by a
                        // reassignment, or the image is behind one that moved it
                        // back. Deleted once the image is known current.
                        false if live => {
                            lock(&moved_away).push(directory.to_owned());
                            PartitionDirFate::Leave
                        }
                        // Topic ids are metadata offsets: a directory of a topic
                        // created past what this image applied means the image is
                        // behind (a damaged or foreign metadata log), not that the
                        // topic was deleted. Never delete on a stale image.
                        false if Some(metadata.topic_id) > applied_offset => {
                            tracing::error!(
                                directory,
                                topic_id = metadata.topic_id,
                                ?applied_offset,
                                "a partition of a topic newer than the cluster metadata; left untouched"
                            );
                            PartitionDirFate::Leave
                        }
                        false => PartitionDirFate::Delete,
                    }
                }
                Some(metadata) => {
                    tracing::warn!(directory, cluster = %metadata.cluster_id, "a partition of another cluster; left untouched");
                    PartitionDirFate::Leave
                }
                None if upgrade.adopts(directory) && local.is_some() => {
                    PartitionDirFate::Open(log_configs[topic_name].clone())
                }
                None if upgrade.dooms(directory) => PartitionDirFate::Delete,
                None => PartitionDirFate::Leave,
            }
        })?;
        *lock(&self.moved_away) = moved_away.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
        *lock(&self.log_dir) = Some(log_dir);
        Ok(())
    }

    /// Reconciles whenever the applied image moves (changes made on other
    /// brokers, leadership moved by the controller); runs until aborted.
    /// Plugins and transforms follow too (plugin bytes are fetched apart, by
    /// `fetch_plugins`).
    pub async fn follow_metadata(self: Arc<Self>) {
        const TRANSFORM_RETRY: Duration = Duration::from_secs(5);
        let mut applied_index = self.controller.applied().applied_index.clone();
        self.follow_plugins().await;
        self.follow_transforms().await;
        loop {
            // A transform that failed to start (its plugin refused its config,
            // or is not here yet), or a group partition that could not be taken
            // up, is tried again every few seconds.
            match tokio::time::timeout(TRANSFORM_RETRY, applied_index.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return,
                Err(_) if self.groups().wants_retry() => {}
                Err(_) if self.transforms_want_retry() => {
                    self.follow_transforms().await;
                    continue;
                }
                Err(_) => continue,
            }
            if let Err(error) = self.reconcile_off_thread().await {
                tracing::error!(%error, "local partitions do not follow the cluster metadata");
            }
            self.follow_plugins().await;
            self.follow_transforms().await;
        }
    }

    /// Makes the local partitions match the applied image (see the module docs).
    /// A topic that cannot follow (a config this broker refuses, a directory it
    /// cannot delete) is logged and skipped, never holding up the others; the
    /// first such error is returned once every topic was tried.
    pub(super) fn reconcile(&self) -> Result<(), ApiError> {
        let _one_at_a_time = lock(&self.reconciling);
        let broker_epoch = self.broker_epoch.load(std::sync::atomic::Ordering::Acquire);
        let (cluster_id, wanted, registered) = self.controller.read(|image| {
            let registered = image.brokers.get(&self.broker.id).map(|broker| broker.epoch) == Some(broker_epoch);
            (image.cluster_id.clone(), image.topics.clone(), registered)
        });
        // Lead only under this start's own registration.
        self.registration_current.store(registered, std::sync::atomic::Ordering::Release);
        let cluster_id = cluster_id.unwrap_or_default();
        let log_dir = lock(&self.log_dir);
        let Some(log_dir) = log_dir.as_ref() else { return Ok(()) };
        let mut first_error = None;
        let mut note = |topic: &str, outcome: Result<(), ApiError>| {
            if let Err(error) = outcome {
                tracing::error!(topic, %error, "a topic does not follow the cluster metadata");
                first_error.get_or_insert(error);
            }
        };
        let current = self.topics().clone();
        for (name, topic) in &current {
            if wanted.get(name).map(|wanted| wanted.topic_id) != Some(topic.topic_id) {
                note(name, self.remove_topic(log_dir, name, topic));
            }
        }
        let offline: HashMap<String, String> = log_dir.offline().into_iter().collect();
        for (name, image) in &wanted {
            match current.get(name).filter(|topic| topic.topic_id == image.topic_id) {
                Some(topic) => {
                    let topic = match self.moves_replicas(topic, image) {
                        true => self.move_replicas(log_dir, &offline, &cluster_id, name, topic, image),
                        false => topic.clone(),
                    };
                    note(name, self.update_topic(name, &topic, image))
                }
                None => match self.open_topic(log_dir, &offline, &cluster_id, name, image) {
                    Ok(topic) => {
                        self.topics_mut().insert(name.clone(), Arc::new(topic));
                        tracing::info!(topic = %name, topic_id = image.topic_id, "topic opened");
                    }
                    Err(error) => note(name, Err(error)),
                },
            }
        }
        note(CONSUMER_OFFSETS_TOPIC, self.lead_groups());
        if registered {
            self.delete_moved_away(log_dir, &wanted);
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Deletes the replica directories start-up left alone as placed elsewhere
    /// (see `Node::moved_away`), now that the image holds this broker's own
    /// registration — and so every change made before this start — if the
    /// image still places them elsewhere.
    fn delete_moved_away(&self, log_dir: &LogDir, wanted: &BTreeMap<String, TopicImage>) {
        let directories = std::mem::take(&mut *lock(&self.moved_away));
        for directory in directories {
            let here = parse_partition_dir(&directory).is_some_and(|(topic, partition)| {
                wanted
                    .get(topic)
                    .and_then(|image| image.partitions.get(partition as usize))
                    .is_some_and(|state| state.replicas.contains(&self.broker.id))
            });
            if here || log_dir.partition(&directory).is_some() {
                continue; // placed here again: the topic opened it
            }
            match log_dir.delete_partition(&directory) {
                Ok(()) => tracing::info!(%directory, "a replica moved away by a reassignment; deleted"),
                Err(error) => tracing::error!(%directory, %error, "a replica moved away could not be deleted"),
            }
        }
    }

    /// Whether this broker leads a partition in `state`.
    fn leads(&self, state: &broker_core::cluster::PartitionState) -> bool {
        state.leader == self.broker.id && self.registration_current.load(std::sync::atomic::Ordering::Acquire)
    }

    fn remove_topic(&self, log_dir: &LogDir, name: &str, topic: &Topic) -> Result<(), ApiError> {
        self.topics_mut().remove(name);
        for (index, slot) in topic.slots.iter().enumerate() {
            if !matches!(slot, Slot::Remote) {
                log_dir.delete_partition(&format!("{name}-{index}"))?;
            }
        }
        tracing::info!(topic = %name, topic_id = topic.topic_id, "topic deleted");
        Ok(())
    }

    /// Whether a reassignment added this broker to a partition of `topic` it
    /// holds no replica of, or removed it from one it does.
    fn moves_replicas(&self, topic: &Topic, image: &TopicImage) -> bool {
        topic
            .slots
            .iter()
            .zip(&image.partitions)
            .any(|(slot, state)| matches!(slot, Slot::Remote) == state.replicas.contains(&self.broker.id))
    }

    /// Follows a reassignment: opens (empty, to be filled by replication) the
    /// replicas this broker was given and deletes those it no longer holds;
    /// the topic is replaced by one with the new slots (the others shared).
    fn move_replicas(
        &self,
        log_dir: &LogDir,
        offline: &HashMap<String, String>,
        cluster_id: &str,
        name: &str,
        topic: &Topic,
        image: &TopicImage,
    ) -> Arc<Topic> {
        let log_config = lock(&topic.configs).clone().into_iter().collect::<Vec<_>>();
        let log_config = self.topic_log_config(&log_config).unwrap_or_else(|_| self.log_defaults.clone());
        let mut slots = Vec::with_capacity(topic.slots.len());
        let mut removed = Vec::new();
        for (index, (slot, state)) in topic.slots.iter().zip(&image.partitions).enumerate() {
            let wanted = state.replicas.contains(&self.broker.id);
            slots.push(match (slot, wanted) {
                (Slot::Remote, true) => {
                    let metadata = PartitionMetadata::of(cluster_id, name, image.topic_id, index as u32);
                    tracing::info!(topic = %name, partition = index, "a reassignment adds a replica here");
                    self.open_slot(log_dir, offline, &metadata, &log_config)
                }
                (Slot::Online { .. } | Slot::Offline { .. }, false) => {
                    removed.push(index);
                    Slot::Remote
                }
                (slot, _) => slot.clone(),
            });
        }
        let moved =
            Arc::new(Topic { topic_id: topic.topic_id, configs: Mutex::new(lock(&topic.configs).clone()), slots });
        self.topics_mut().insert(name.to_owned(), moved.clone());
        for index in removed {
            let partition = format!("{name}-{index}");
            match log_dir.delete_partition(&partition) {
                Ok(()) => tracing::info!(%partition, "a reassignment moved this replica away; deleted"),
                Err(error) => tracing::error!(%partition, %error, "a replica moved away could not be deleted"),
            }
        }
        moved
    }

    fn update_topic(&self, name: &str, topic: &Topic, image: &TopicImage) -> Result<(), ApiError> {
        // Roles first: a config this broker refuses must not keep a deposed
        // leader leading.
        let now_ms = self.replication_now_ms();
        for (slot, state) in topic.slots.iter().zip(&image.partitions) {
            if let Some(partition) = slot.partition() {
                partition.take_role(self.broker.id, state, self.leads(state), now_ms);
            }
        }
        let mut configs = lock(&topic.configs);
        if *configs != image.configs {
            let entries: Vec<(String, String)> = image.configs.clone().into_iter().collect();
            let log_config = self.topic_log_config(&entries)?;
            for partition in topic.slots.iter().filter_map(Slot::partition) {
                partition.set_config(log_config.clone())?;
            }
            *configs = image.configs.clone();
            tracing::info!(topic = %name, "topic configs applied");
            // min.insync.replicas may have changed: the leaders take it up.
            for (slot, state) in topic.slots.iter().zip(&image.partitions) {
                if let Some(partition) = slot.partition() {
                    partition.take_role(self.broker.id, state, self.leads(state), now_ms);
                }
            }
        }
        Ok(())
    }

    fn open_topic(
        &self,
        log_dir: &LogDir,
        offline: &HashMap<String, String>,
        cluster_id: &str,
        name: &str,
        image: &TopicImage,
    ) -> Result<Topic, ApiError> {
        let entries: Vec<(String, String)> = image.configs.clone().into_iter().collect();
        let log_config = self.topic_log_config(&entries)?;
        let mut slots = Vec::with_capacity(image.partitions.len());
        for (index, state) in image.partitions.iter().enumerate() {
            if !state.replicas.contains(&self.broker.id) {
                slots.push(Slot::Remote);
                continue;
            }
            let metadata = PartitionMetadata::of(cluster_id, name, image.topic_id, index as u32);
            let slot = self.open_slot(log_dir, offline, &metadata, &log_config);
            if let Some(partition) = slot.partition() {
                partition.take_role(self.broker.id, state, self.leads(state), self.replication_now_ms());
            }
            slots.push(slot);
        }
        Ok(Topic { topic_id: image.topic_id, configs: Mutex::new(image.configs.clone()), slots })
    }

    /// Opens (or creates) one local partition; never takes over a directory that
    /// belongs to something else.
    fn open_slot(
        &self,
        log_dir: &LogDir,
        offline: &HashMap<String, String>,
        metadata: &PartitionMetadata,
        config: &LogConfig,
    ) -> Slot {
        let name = format!("{}-{}", metadata.topic, metadata.partition);
        if let Some(reason) = offline.get(&name) {
            return Slot::Offline { reason: format!("partition {name} is offline: {reason}") };
        }
        let opened = match log_dir.partition(&name) {
            Some(open) => {
                // Opened at start-up: adopted by the upgrade when it has no file yet.
                if self.read_partition_metadata(&name).is_none() {
                    if let Err(error) = self.write_partition_metadata(&name, metadata) {
                        return Slot::Offline { reason: error.message };
                    }
                }
                Ok(open)
            }
            None if log_dir.holds(&name) && self.read_partition_metadata(&name).as_ref() != Some(metadata) => {
                let reason = format!(
                    "{} exists but belongs to no topic of this cluster; move it out of the data directory",
                    self.data_dir.join(&name).display()
                );
                tracing::error!(partition = %name, %reason, "partition offline");
                return Slot::Offline { reason };
            }
            None => self.write_partition_metadata(&name, metadata).and_then(|()| {
                Ok(log_dir.create_partition_with(&metadata.topic, metadata.partition, config.clone())?)
            }),
        };
        match opened.and_then(|partition| Ok((rebuild_producer_states(&partition)?, partition))) {
            Ok((producers, partition)) => {
                Slot::Online { partition, producers: Arc::new(Mutex::new(producers)), produce_order: Arc::default() }
            }
            Err(error) => {
                tracing::error!(partition = %name, %error, "partition offline");
                Slot::Offline { reason: format!("partition {name} is offline: {error}") }
            }
        }
    }

    /// Local directories a new topic's partitions would take that hold something
    /// else: such a topic is refused (never adopt data no topic owns).
    pub(super) fn foreign_directories(&self, name: &str, partition_count: u32) -> Vec<String> {
        let storage = &*self.environment.storage;
        (0..partition_count)
            .map(|partition| format!("{name}-{partition}"))
            .filter(|directory| storage.exists(&self.data_dir.join(directory)))
            .filter(|directory| self.read_partition_metadata(directory).is_none())
            .collect()
    }
}

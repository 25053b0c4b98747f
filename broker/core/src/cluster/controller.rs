//! The controller's decisions, as handlers over a [`ClusterImage`]: each takes a
//! request and returns the records that carry it out, and changes nothing. The
//! owner appends the records to the metadata log and applies them; the records a
//! handler returns apply cleanly, in order, to the image it was given.
//!
//! 1. **Registration.** A broker registers at start-up with a fresh incarnation.
//!    The same incarnation again is a retry (no records). A new incarnation of a
//!    known broker is a restart: its old incarnation is fenced first (leadership
//!    moved away), then the new registration starts fenced.
//! 2. **Fencing** (missed heartbeats, or a controlled shutdown): every partition
//!    it leads gets a new leader from the rest of its ISR, or none; it leaves every
//!    ISR it is not the last member of (the last member stays, so the partition can
//!    come back with it); then the broker is fenced.
//! 3. **Unfencing** (heartbeats with the metadata log caught up): the broker is
//!    unfenced, then leads every leaderless partition whose ISR holds it.
//! 4. **Placement** of a new topic over the active brokers: the first replica
//!    (preferred leader) of partition `p` is broker `(start + p) mod n`, where
//!    `start` is the number of partitions that exist already, so leadership stays
//!    balanced across topics; followers follow it in the broker order, which
//!    interleaves racks, skipping racks already used while unused ones remain.
//! 5. **ISR changes** (AlterPartition) come from the partition's leader, in its
//!    current leader and partition epochs; members added must be active.
//! 6. **Preferred leaders**: a partition whose first replica is active and in the
//!    ISR, but led by another broker, is moved back to it.
//! 7. **Plugins**: a plugin is registered by name (replacing the code of that
//!    name, unless it is attached as another hook) and removed only when attached
//!    nowhere; an attachment needs the topic and a plugin of its hook, and a new
//!    partitioner replaces the topic's previous one.
//! 8. **Transforms**: deployed once per name, over existing topics, with a
//!    registered transform plugin and one producer id per input partition;
//!    neither the plugin they run (removed, or given another hook) nor the
//!    topics they read and write (deleted) go away under them.

use std::collections::{BTreeMap, BTreeSet};

use super::image::{
    check_attachment_entry, check_plugin_entry, check_transform_entry, ClusterImage, PARTITIONER_HOOK, TRANSFORM_HOOK,
};
use super::record::{
    AttachmentEntry, BrokerId, BrokerRegistration, MetadataRecord, PartitionState, PluginEntry, TransformEntry,
    NO_LEADER,
};

/// Why the controller refuses a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum ControllerError {
    #[error("topic {0:?} already exists")]
    TopicExists(String),
    #[error("topic {0:?} does not exist")]
    UnknownTopic(String),
    #[error("partition count must be at least 1, got {0}")]
    InvalidPartitions(i64),
    #[error("replication factor {requested} needs that many active brokers; {available} are active")]
    InvalidReplicationFactor { requested: i64, available: usize },
    #[error("broker {0} is not registered")]
    UnknownBroker(BrokerId),
    #[error("broker {broker_id} epoch {broker_epoch} is stale (current {current})")]
    StaleBrokerEpoch { broker_id: BrokerId, broker_epoch: u64, current: u64 },
    #[error("no plugin {0:?}")]
    UnknownPlugin(String),
    /// Attached (or, for a new hook, attached as the old one) where the request
    /// needs it not to be.
    #[error("{0}")]
    PluginInUse(String),
    /// A plugin of another hook than the attachment asks for.
    #[error("{0}")]
    PluginHookMismatch(String),
    /// Attached already, or not attached.
    #[error("{0}")]
    AttachmentConflict(String),
    #[error("{0}")]
    NotAttached(String),
    /// A plugin name, digest, hook or policy the registry does not take.
    #[error("{0}")]
    InvalidPluginEntry(String),
    #[error("no transform named {0:?}")]
    UnknownTransform(String),
    /// A topic a transform reads or writes cannot be deleted under it.
    #[error("{0}")]
    TopicInUse(String),
    /// An ISR change from a broker that does not lead the partition in the
    /// epoch it names (a deposed leader).
    #[error("{0}")]
    StaleLeader(String),
    /// An ISR change made against an older partition epoch: the leader must
    /// learn the current state first.
    #[error("{0}")]
    StalePartitionEpoch(String),
    /// An ISR that is not a set of the partition's replicas with its leader,
    /// or that adds a fenced broker.
    #[error("{0}")]
    InvalidIsr(String),
    /// A malformed deployment, or a name deployed already.
    #[error("{0}")]
    InvalidTransform(String),
    /// A reassignment target that is not a non-empty list of distinct,
    /// registered brokers, or names a partition the topic does not have.
    #[error("{0}")]
    InvalidReplicaAssignment(String),
}

/// Which replicas start in the ISR of a new partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitialIsr {
    /// Every replica (followers replicate from the start, all empty alike).
    AllReplicas,
    /// The leader alone: while followers do not replicate, nobody else holds the
    /// data, so nobody else may be elected.
    LeaderOnly,
}

impl ClusterImage {
    /// The record that gives a new cluster its id (none once it has one).
    pub fn init_cluster(&self, cluster_id: &str) -> Vec<MetadataRecord> {
        match self.cluster_id {
            Some(_) => Vec::new(),
            None => vec![MetadataRecord::InitCluster { cluster_id: cluster_id.to_owned() }],
        }
    }

    /// Step 1: the records that register `registration`.
    pub fn register_broker(&self, registration: &BrokerRegistration) -> Vec<MetadataRecord> {
        let mut records = Vec::new();
        if let Some(existing) = self.brokers.get(&registration.broker_id) {
            if existing.registration.incarnation == registration.incarnation {
                return records;
            }
            records = self.fence_records(registration.broker_id, existing.epoch);
        }
        records.push(MetadataRecord::RegisterBroker(registration.clone()));
        records
    }

    /// Step 2: the records that fence `broker_id` at `broker_epoch`.
    pub fn fence_broker(&self, broker_id: BrokerId, broker_epoch: u64) -> Result<Vec<MetadataRecord>, ControllerError> {
        self.check_broker_epoch(broker_id, broker_epoch)?;
        Ok(self.fence_records(broker_id, broker_epoch))
    }

    fn fence_records(&self, broker_id: BrokerId, broker_epoch: u64) -> Vec<MetadataRecord> {
        let mut records = Vec::new();
        for (topic, partition, state) in self.partitions() {
            if !state.isr.contains(&broker_id) && state.leader != broker_id {
                continue;
            }
            let mut isr = state.isr.clone();
            if isr.len() > 1 {
                isr.retain(|member| *member != broker_id);
            }
            let leader = match state.leader == broker_id {
                true => first_active(self, &state.replicas, &isr, Some(broker_id)),
                false => state.leader,
            };
            let (leader, isr) = match (leader, self.unclean_replica(topic, state, Some(broker_id))) {
                (NO_LEADER, Some(replica)) => (replica, vec![replica]),
                (leader, _) => (leader, isr),
            };
            if let Some(next) = changed(state, leader, isr) {
                self.push_change(&mut records, topic, partition, next, Some(broker_id));
            }
        }
        let fenced = self.brokers.get(&broker_id).is_some_and(|broker| broker.fenced);
        if !fenced {
            records.push(MetadataRecord::FenceBroker { broker_id, broker_epoch });
        }
        records
    }

    /// Step 3: the records that unfence `broker_id` at `broker_epoch`.
    pub fn unfence_broker(
        &self,
        broker_id: BrokerId,
        broker_epoch: u64,
    ) -> Result<Vec<MetadataRecord>, ControllerError> {
        let broker = self.check_broker_epoch(broker_id, broker_epoch)?;
        let mut records = Vec::new();
        if broker.fenced {
            records.push(MetadataRecord::UnfenceBroker { broker_id, broker_epoch });
        }
        for (topic, partition, state) in self.partitions().filter(|(_, _, state)| state.leader == NO_LEADER) {
            let isr = match state.isr.contains(&broker_id) {
                true => state.isr.clone(),
                // Unclean: no in-sync replica is active (else it would lead).
                false
                    if state.replicas.contains(&broker_id)
                        && self.unclean_election_enabled(topic)
                        && !state.isr.iter().any(|member| self.is_active(*member)) =>
                {
                    vec![broker_id]
                }
                false => continue,
            };
            if let Some(next) = changed(state, broker_id, isr) {
                self.push_change(&mut records, topic, partition, next, None);
            }
        }
        Ok(records)
    }

    /// Pushes the change of `topic`-`partition` to `next`, and after it the
    /// change that completes its reassignment if `next` allows that (an
    /// election may have made the target's replica the ISR) — unless it would
    /// make `except` (a broker being fenced) lead.
    fn push_change(
        &self,
        records: &mut Vec<MetadataRecord>,
        topic: &str,
        partition: u32,
        next: PartitionState,
        except: Option<BrokerId>,
    ) {
        let finished = self.finish_reassignment(&next).filter(|done| Some(done.leader) != except);
        records.push(partition_change(topic, partition, next));
        records.extend(finished.map(|done| partition_change(topic, partition, done)));
    }

    /// Whether `topic` lets an out-of-sync replica lead when no in-sync one can
    /// (`unclean.leader.election.enable=true`: availability over the records
    /// only the lost ISR held).
    pub fn unclean_election_enabled(&self, topic: &str) -> bool {
        self.topics
            .get(topic)
            .and_then(|image| image.configs.get(UNCLEAN_LEADER_ELECTION))
            .is_some_and(|value| is_true(value))
    }

    /// The replica an unclean election would choose for `state` of `topic`, when
    /// the topic allows them: see [`ClusterImage::out_of_sync_candidate`].
    fn unclean_replica(&self, topic: &str, state: &PartitionState, except: Option<BrokerId>) -> Option<BrokerId> {
        match self.unclean_election_enabled(topic) {
            true => self.out_of_sync_candidate(state, except),
            false => None,
        }
    }

    /// The first active replica of `state` other than `except`, when no in-sync
    /// replica other than `except` is active.
    /// A replica a reassignment is adding comes last: it may hold nothing yet.
    fn out_of_sync_candidate(&self, state: &PartitionState, except: Option<BrokerId>) -> Option<BrokerId> {
        let usable = |broker: &BrokerId| Some(*broker) != except && self.is_active(*broker);
        if state.isr.iter().any(usable) {
            return None;
        }
        let adding = |broker: &BrokerId| state.target_replicas.as_ref().is_some_and(|target| target.contains(broker));
        let mut candidates: Vec<BrokerId> = state.replicas.iter().copied().filter(usable).collect();
        candidates.sort_by_key(adding); // stable: replica order kept within each group
        candidates.first().copied()
    }

    /// Whether `record` makes a replica outside the ISR a partition's leader (an
    /// unclean election: the records only the old ISR held are given up).
    pub fn is_unclean_election(&self, record: &MetadataRecord) -> bool {
        let MetadataRecord::PartitionChange { topic, partition, state: next } = record else { return false };
        self.partition(topic, *partition).is_ok_and(|current| {
            next.leader != NO_LEADER && next.leader != current.leader && !current.isr.contains(&next.leader)
        })
    }

    /// Step 4: the records that create `name`.
    pub fn create_topic(
        &self,
        name: &str,
        partition_count: u32,
        replication_factor: u16,
        configs: BTreeMap<String, String>,
        initial_isr: InitialIsr,
    ) -> Result<Vec<MetadataRecord>, ControllerError> {
        if self.topics.contains_key(name) {
            return Err(ControllerError::TopicExists(name.to_owned()));
        }
        if partition_count == 0 {
            return Err(ControllerError::InvalidPartitions(0));
        }
        let brokers = self.placement_order();
        let replication_factor = usize::from(replication_factor);
        if replication_factor == 0 || replication_factor > brokers.len() {
            let requested = replication_factor as i64;
            return Err(ControllerError::InvalidReplicationFactor { requested, available: brokers.len() });
        }
        let start = self.partitions().count();
        let partitions = (0..partition_count as usize)
            .map(|partition| {
                let replicas = place(&brokers, start + partition, replication_factor);
                let leader = replicas[0];
                let isr = match initial_isr {
                    InitialIsr::AllReplicas => replicas.clone(),
                    InitialIsr::LeaderOnly => vec![leader],
                };
                PartitionState { isr, replicas, leader, leader_epoch: 0, partition_epoch: 0, target_replicas: None }
            })
            .collect();
        Ok(vec![MetadataRecord::CreateTopic { name: name.to_owned(), partitions, configs }])
    }

    /// The records that create `name` with every partition's only replica on
    /// `broker_id`, which must be registered (the upgrade of a single-node data
    /// directory, whose partitions are there already). Led by it when it is
    /// active; leaderless until it is unfenced otherwise.
    pub fn adopt_topic(
        &self,
        name: &str,
        partition_count: u32,
        configs: BTreeMap<String, String>,
        broker_id: BrokerId,
    ) -> Result<Vec<MetadataRecord>, ControllerError> {
        if self.topics.contains_key(name) {
            return Err(ControllerError::TopicExists(name.to_owned()));
        }
        if partition_count == 0 {
            return Err(ControllerError::InvalidPartitions(0));
        }
        if !self.brokers.contains_key(&broker_id) {
            return Err(ControllerError::UnknownBroker(broker_id));
        }
        let leader = if self.is_active(broker_id) { broker_id } else { NO_LEADER };
        let state = PartitionState {
            replicas: vec![broker_id],
            isr: vec![broker_id],
            leader,
            leader_epoch: 0,
            partition_epoch: 0,
            target_replicas: None,
        };
        let partitions = vec![state; partition_count as usize];
        Ok(vec![MetadataRecord::CreateTopic { name: name.to_owned(), partitions, configs }])
    }

    pub fn delete_topic(&self, name: &str) -> Result<Vec<MetadataRecord>, ControllerError> {
        if !self.topics.contains_key(name) {
            return Err(ControllerError::UnknownTopic(name.to_owned()));
        }
        let users: Vec<&str> = self.transforms_using_topic(name).collect();
        if !users.is_empty() {
            return Err(ControllerError::TopicInUse(format!(
                "topic {name:?} is read or written by transform(s) {users:?}; delete them first"
            )));
        }
        Ok(vec![MetadataRecord::DeleteTopic { name: name.to_owned() }])
    }

    /// Registers `entry` (a new plugin, or new code under a known name).
    pub fn register_plugin(&self, entry: &PluginEntry) -> Result<Vec<MetadataRecord>, ControllerError> {
        check_plugin_entry(entry).map_err(ControllerError::InvalidPluginEntry)?;
        if let Some(attachment) = self.attached_to(&entry.name).find(|attachment| attachment.hook != entry.hook) {
            return Err(ControllerError::PluginInUse(format!(
                "{:?} is attached to {:?} as a {}; detach it to change its hook",
                entry.name, attachment.topic, attachment.hook
            )));
        }
        if entry.hook != TRANSFORM_HOOK {
            if let Some(transform) = self.transforms_running(&entry.name).next() {
                return Err(ControllerError::PluginInUse(format!(
                    "{:?} runs in transform {transform:?}; delete it to change the plugin's hook",
                    entry.name
                )));
            }
        }
        Ok(vec![MetadataRecord::RegisterPlugin(entry.clone())])
    }

    /// Removes plugin `name`, which must be attached nowhere and run by no transform.
    pub fn remove_plugin(&self, name: &str) -> Result<Vec<MetadataRecord>, ControllerError> {
        if !self.plugins.contains_key(name) {
            return Err(ControllerError::UnknownPlugin(name.to_owned()));
        }
        let transforms: Vec<&str> = self.transforms_running(name).collect();
        if !transforms.is_empty() {
            return Err(ControllerError::PluginInUse(format!(
                "plugin {name:?} runs in transform(s) {transforms:?}; delete them first"
            )));
        }
        let topics: Vec<&str> = self.attached_to(name).map(|attachment| attachment.topic.as_str()).collect();
        if !topics.is_empty() {
            return Err(ControllerError::PluginInUse(format!(
                "plugin {name:?} is attached to {topics:?}; detach it first"
            )));
        }
        Ok(vec![MetadataRecord::RemovePlugin { name: name.to_owned() }])
    }

    /// Attaches `entry`; a partitioner replaces the topic's previous one.
    pub fn attach_plugin(&self, entry: &AttachmentEntry) -> Result<Vec<MetadataRecord>, ControllerError> {
        check_attachment_entry(entry).map_err(ControllerError::InvalidPluginEntry)?;
        if !self.topics.contains_key(&entry.topic) {
            return Err(ControllerError::UnknownTopic(entry.topic.clone()));
        }
        let plugin =
            self.plugins.get(&entry.plugin).ok_or_else(|| ControllerError::UnknownPlugin(entry.plugin.clone()))?;
        if plugin.hook != entry.hook {
            return Err(ControllerError::PluginHookMismatch(format!(
                "plugin {:?} is a {}, not a {}",
                entry.plugin, plugin.hook, entry.hook
            )));
        }
        let attached = self.attachments.get(&entry.topic).map(Vec::as_slice).unwrap_or_default();
        let mut records = Vec::new();
        for previous in attached.iter().filter(|previous| previous.hook == entry.hook) {
            if previous.plugin == entry.plugin && entry.hook != PARTITIONER_HOOK {
                return Err(ControllerError::AttachmentConflict(format!(
                    "plugin {:?} is already attached to {:?} as a {}",
                    entry.plugin, entry.topic, entry.hook
                )));
            }
            if entry.hook == PARTITIONER_HOOK {
                records.push(MetadataRecord::DetachPlugin {
                    topic: entry.topic.clone(),
                    hook: previous.hook.clone(),
                    plugin: previous.plugin.clone(),
                });
            }
        }
        records.push(MetadataRecord::AttachPlugin(entry.clone()));
        Ok(records)
    }

    /// Detaches plugin `plugin` attached to `topic` as a `hook`.
    pub fn detach_plugin(&self, topic: &str, hook: &str, plugin: &str) -> Result<Vec<MetadataRecord>, ControllerError> {
        let attached = self
            .attachments
            .get(topic)
            .is_some_and(|list| list.iter().any(|attachment| attachment.hook == hook && attachment.plugin == plugin));
        if !attached {
            return Err(ControllerError::NotAttached(format!(
                "plugin {plugin:?} is not attached to {topic:?} as a {hook}"
            )));
        }
        Ok(vec![MetadataRecord::DetachPlugin {
            topic: topic.to_owned(),
            hook: hook.to_owned(),
            plugin: plugin.to_owned(),
        }])
    }

    /// An ISR change asked by the leader of `topic-partition` (AlterPartition):
    /// only the current leader in the current leader and partition epochs may
    /// change it; the ISR holds the leader, only replicas, each once, and the
    /// members it adds are active brokers. The same ISR again still bumps the
    /// partition epoch: that is how a leader settles an earlier request it never
    /// heard back from (once the epoch moved, no request at the old one can
    /// apply, however late it arrives).
    pub fn alter_partition(
        &self,
        topic: &str,
        partition: u32,
        leader: BrokerId,
        epochs: (i32, i32),
        isr: &[BrokerId],
    ) -> Result<Vec<MetadataRecord>, ControllerError> {
        let (leader_epoch, partition_epoch) = epochs;
        let state = self.partition(topic, partition).map_err(|_| ControllerError::UnknownTopic(topic.to_owned()))?;
        if state.leader != leader || state.leader_epoch != leader_epoch {
            return Err(ControllerError::StaleLeader(format!(
                "{topic}-{partition} is led by {} in epoch {}, not by {leader} in epoch {leader_epoch}",
                state.leader, state.leader_epoch
            )));
        }
        if state.partition_epoch != partition_epoch {
            return Err(ControllerError::StalePartitionEpoch(format!(
                "{topic}-{partition} is at partition epoch {}, not {partition_epoch}",
                state.partition_epoch
            )));
        }
        let distinct: BTreeSet<BrokerId> = isr.iter().copied().collect();
        if !distinct.contains(&leader)
            || distinct.len() != isr.len()
            || !isr.iter().all(|member| state.replicas.contains(member))
        {
            return Err(ControllerError::InvalidIsr(format!(
                "ISR {isr:?} must hold leader {leader} and distinct replicas of {:?}",
                state.replicas
            )));
        }
        if let Some(fenced) = isr.iter().find(|member| !state.isr.contains(member) && !self.is_active(**member)) {
            return Err(ControllerError::InvalidIsr(format!("broker {fenced} is fenced: it cannot join the ISR")));
        }
        let next = changed(state, leader, isr.to_vec())
            .unwrap_or_else(|| PartitionState { partition_epoch: state.partition_epoch + 1, ..state.clone() });
        let finished = self.finish_reassignment(&next);
        let mut records = vec![partition_change(topic, partition, next)];
        records.extend(finished.map(|done| partition_change(topic, partition, done)));
        Ok(records)
    }

    /// Starts moving partitions of `topic` to new replicas (`weir topic
    /// reassign`): `assignments` holds (partition, target replicas). The
    /// partition keeps its leader and ISR and gains the target replicas it
    /// lacks, which start copying the leader's log; once every target replica
    /// is in the ISR, the reassignment completes ([`ClusterImage::finish_reassignment`],
    /// from the leader's AlterPartition that brings the last one in).
    /// A target that is in the ISR already (fewer replicas, another order)
    /// completes at once. A new target replaces one still running; the
    /// original replicas as a target cancel it.
    pub fn reassign_partitions(
        &self,
        topic: &str,
        assignments: &[(u32, Vec<BrokerId>)],
    ) -> Result<Vec<MetadataRecord>, ControllerError> {
        let image = self.topics.get(topic).ok_or_else(|| ControllerError::UnknownTopic(topic.to_owned()))?;
        let invalid = ControllerError::InvalidReplicaAssignment;
        let mut records = Vec::new();
        let mut seen = BTreeSet::new();
        for (partition, target) in assignments {
            let state = image.partitions.get(*partition as usize).ok_or_else(|| {
                invalid(format!("{topic} has no partition {partition} (it has {})", image.partitions.len()))
            })?;
            if !seen.insert(*partition) {
                return Err(invalid(format!("partition {partition} is named more than once")));
            }
            let distinct: BTreeSet<BrokerId> = target.iter().copied().collect();
            if target.is_empty() || distinct.len() != target.len() {
                return Err(invalid(format!(
                    "replicas {target:?} of partition {partition} must be distinct, at least one"
                )));
            }
            if let Some(unknown) = target.iter().find(|broker| !self.brokers.contains_key(broker)) {
                return Err(invalid(format!("broker {unknown} is not registered")));
            }
            let min_insync: usize =
                image.configs.get("min.insync.replicas").and_then(|value| value.trim().parse().ok()).unwrap_or(1);
            if target.len() < min_insync {
                return Err(invalid(format!(
                    "{} replica(s) for partition {partition} are fewer than the topic's min.insync.replicas={min_insync}: \
                     nothing could be committed",
                    target.len()
                )));
            }
            if *target == state.replicas {
                // The replicas it has: nothing to move (a running reassignment
                // to elsewhere is cancelled).
                if state.target_replicas.is_some() {
                    let next = PartitionState {
                        partition_epoch: state.partition_epoch + 1,
                        target_replicas: None,
                        ..state.clone()
                    };
                    records.push(partition_change(topic, *partition, next));
                }
                continue;
            }
            if state.target_replicas.as_ref() == Some(target) {
                continue; // this move is running already
            }
            let mut replicas = target.clone();
            replicas.extend(state.replicas.iter().copied().filter(|replica| !target.contains(replica)));
            let next = PartitionState {
                replicas,
                partition_epoch: state.partition_epoch + 1,
                target_replicas: Some(target.clone()),
                ..state.clone()
            };
            // Done at once when the target is in the ISR already (a second
            // record: a leader comes from the ISR the image holds).
            let finished = self.finish_reassignment(&next);
            records.push(partition_change(topic, *partition, next));
            records.extend(finished.map(|done| partition_change(topic, *partition, done)));
        }
        Ok(records)
    }

    /// The state after `state` that completes its reassignment, when every
    /// target replica is in its ISR and one of them can lead: the replicas
    /// become the target, the ISR keeps only target replicas, and a leader
    /// being removed hands over to the first active in-sync target replica (a
    /// new leader epoch). `None` while the reassignment cannot complete.
    pub fn finish_reassignment(&self, state: &PartitionState) -> Option<PartitionState> {
        let target = state.target_replicas.as_ref()?;
        if !target.iter().all(|replica| state.isr.contains(replica)) {
            return None;
        }
        let isr: Vec<BrokerId> = state.isr.iter().copied().filter(|member| target.contains(member)).collect();
        let leader = match target.contains(&state.leader) {
            true => state.leader,
            false => first_active(self, target, &isr, None),
        };
        if leader == NO_LEADER && state.leader != NO_LEADER {
            return None; // no target replica can lead yet: keep the current leader
        }
        Some(PartitionState {
            replicas: target.clone(),
            isr,
            leader,
            leader_epoch: state.leader_epoch + i32::from(leader != state.leader),
            partition_epoch: state.partition_epoch + 1,
            target_replicas: None,
        })
    }

    /// Deploys transform `entry`: its topics exist, its plugin is a transform,
    /// and it has one producer id for each partition of its input.
    pub fn deploy_transform(&self, entry: &TransformEntry) -> Result<Vec<MetadataRecord>, ControllerError> {
        check_transform_entry(entry).map_err(ControllerError::InvalidTransform)?;
        if self.transforms.contains_key(&entry.name) {
            return Err(ControllerError::InvalidTransform(format!(
                "a transform named {:?} exists; delete it first",
                entry.name
            )));
        }
        for topic in std::iter::once(&entry.input_topic).chain(&entry.output_topics).chain(&entry.dead_letter_topic) {
            if !self.topics.contains_key(topic) {
                return Err(ControllerError::UnknownTopic(topic.clone()));
            }
        }
        let plugin =
            self.plugins.get(&entry.plugin).ok_or_else(|| ControllerError::UnknownPlugin(entry.plugin.clone()))?;
        if plugin.hook != TRANSFORM_HOOK {
            return Err(ControllerError::PluginHookMismatch(format!(
                "plugin {:?} is a {}, not a {TRANSFORM_HOOK}",
                entry.plugin, plugin.hook
            )));
        }
        let partitions = self.topics[&entry.input_topic].partitions.len();
        if entry.producer_ids.len() != partitions {
            return Err(ControllerError::InvalidTransform(format!(
                "transform {:?} needs a producer id for each of the {partitions} partitions of {:?}",
                entry.name, entry.input_topic
            )));
        }
        Ok(vec![MetadataRecord::DeployTransform(entry.clone())])
    }

    /// Pauses, resumes, replays (from `offset`) or deletes transform `name`.
    pub fn control_transform(
        &self,
        name: &str,
        action: &str,
        offset: i64,
    ) -> Result<Vec<MetadataRecord>, ControllerError> {
        if !self.transforms.contains_key(name) {
            return Err(ControllerError::UnknownTransform(name.to_owned()));
        }
        let name = name.to_owned();
        let record = match action {
            "pause" | "resume" => MetadataRecord::PauseTransform { name, paused: action == "pause" },
            "replay" if offset >= -2 => MetadataRecord::ReplayTransform { name, from: offset },
            "replay" => {
                return Err(ControllerError::InvalidTransform(format!(
                    "replay offset {offset} (use -2 earliest, -1 latest, or an offset)"
                )))
            }
            "delete" => MetadataRecord::DeleteTransform { name },
            other => {
                return Err(ControllerError::InvalidTransform(format!(
                    "transform action {other:?}: use pause, resume, replay or delete"
                )))
            }
        };
        Ok(vec![record])
    }

    /// Sets (`Some`) or removes (`None`) config overrides of `topic`.
    pub fn alter_configs(
        &self,
        topic: &str,
        changes: &[(String, Option<String>)],
    ) -> Result<Vec<MetadataRecord>, ControllerError> {
        if !self.topics.contains_key(topic) {
            return Err(ControllerError::UnknownTopic(topic.to_owned()));
        }
        let mut records: Vec<MetadataRecord> = changes
            .iter()
            .map(|(key, value)| MetadataRecord::ConfigChange {
                topic: topic.to_owned(),
                key: key.clone(),
                value: value.clone(),
            })
            .collect();
        // Allowing unclean elections brings offline partitions back at once, as
        // Kafka's controller does, when an out-of-sync replica is active.
        // The last change of the key is the one that stays.
        let enables_unclean = changes
            .iter()
            .rev()
            .find(|(key, _)| key == UNCLEAN_LEADER_ELECTION)
            .is_some_and(|(_, value)| value.as_deref().is_some_and(is_true));
        if enables_unclean && !self.unclean_election_enabled(topic) {
            for (name, partition, state) in self.partitions() {
                if name != topic || state.leader != NO_LEADER {
                    continue;
                }
                if let Some(replica) = self.out_of_sync_candidate(state, None) {
                    if let Some(next) = changed(state, replica, vec![replica]) {
                        self.push_change(&mut records, name, partition, next, None);
                    }
                }
            }
        }
        Ok(records)
    }

    /// The next block of `count` producer ids, for `broker_id`.
    pub fn allocate_producer_ids(
        &self,
        broker_id: BrokerId,
        count: i64,
    ) -> Result<Vec<MetadataRecord>, ControllerError> {
        if !self.brokers.contains_key(&broker_id) {
            return Err(ControllerError::UnknownBroker(broker_id));
        }
        Ok(vec![MetadataRecord::ProducerIdBlock { broker_id, first: self.next_producer_id, count }])
    }

    /// Step 6: the records that move every partition back to its preferred leader
    /// where that broker can lead.
    pub fn elect_preferred_leaders(&self) -> Vec<MetadataRecord> {
        let mut records = Vec::new();
        for (topic, partition, state) in self.partitions() {
            let preferred = state.replicas[0];
            if state.leader != preferred && self.is_active(preferred) && state.isr.contains(&preferred) {
                if let Some(next) = changed(state, preferred, state.isr.clone()) {
                    records.push(partition_change(topic, partition, next));
                }
            }
        }
        records
    }

    fn check_broker_epoch(
        &self,
        broker_id: BrokerId,
        broker_epoch: u64,
    ) -> Result<&super::image::BrokerState, ControllerError> {
        let broker = self.brokers.get(&broker_id).ok_or(ControllerError::UnknownBroker(broker_id))?;
        if broker.epoch != broker_epoch {
            return Err(ControllerError::StaleBrokerEpoch { broker_id, broker_epoch, current: broker.epoch });
        }
        Ok(broker)
    }

    /// Active brokers, interleaved by rack (one of each rack in turn, racks and
    /// brokers in id order); brokers without a rack form one rack of their own.
    fn placement_order(&self) -> Vec<(BrokerId, Option<String>)> {
        let mut racks: BTreeMap<Option<String>, Vec<BrokerId>> = BTreeMap::new();
        for (broker_id, broker) in &self.brokers {
            if !broker.fenced {
                racks.entry(broker.registration.rack.clone()).or_default().push(*broker_id);
            }
        }
        let mut order = Vec::new();
        for round in 0.. {
            let before = order.len();
            for (rack, brokers) in &racks {
                if let Some(broker_id) = brokers.get(round) {
                    order.push((*broker_id, rack.clone()));
                }
            }
            if order.len() == before {
                break;
            }
        }
        order
    }
}

/// The replicas of the partition with placement index `index` (step 4).
fn place(brokers: &[(BrokerId, Option<String>)], index: usize, replication_factor: usize) -> Vec<BrokerId> {
    let count = brokers.len();
    let first = index % count;
    let mut replicas = vec![brokers[first].0];
    let mut racks = BTreeSet::from([brokers[first].1.clone()]);
    let rack_count = brokers.iter().map(|(_, rack)| rack).collect::<BTreeSet<_>>().len();
    // Spread followers too: shift where they start every `count` partitions.
    let shift = index / count;
    let candidates: Vec<usize> =
        (1..count).map(|step| (first + 1 + (shift + step - 1) % (count - 1).max(1)) % count).collect();
    while replicas.len() < replication_factor {
        let fresh_rack = racks.len() < rack_count;
        let chosen = candidates
            .iter()
            .map(|position| &brokers[*position])
            .find(|(broker_id, rack)| !replicas.contains(broker_id) && (!fresh_rack || !racks.contains(rack)))
            .or_else(|| brokers.iter().find(|(broker_id, _)| !replicas.contains(broker_id)))
            .expect("replication_factor <= broker count, checked by the caller");
        replicas.push(chosen.0);
        racks.insert(chosen.1.clone());
    }
    replicas
}

/// The topic config that allows unclean leader elections (Kafka's name).
pub const UNCLEAN_LEADER_ELECTION: &str = "unclean.leader.election.enable";

/// A boolean config value, as Kafka reads one (case-insensitive `true`).
fn is_true(value: &str) -> bool {
    value.trim().eq_ignore_ascii_case("true")
}

/// The first broker of `replicas` that is in `isr`, active, and not `except`.
fn first_active(image: &ClusterImage, replicas: &[BrokerId], isr: &[BrokerId], except: Option<BrokerId>) -> BrokerId {
    replicas
        .iter()
        .copied()
        .find(|broker| Some(*broker) != except && isr.contains(broker) && image.is_active(*broker))
        .unwrap_or(NO_LEADER)
}

/// The next state with `leader` and `isr`, epochs bumped; `None` if nothing changes.
fn changed(state: &PartitionState, leader: BrokerId, isr: Vec<BrokerId>) -> Option<PartitionState> {
    if leader == state.leader && isr == state.isr {
        return None;
    }
    Some(PartitionState {
        replicas: state.replicas.clone(),
        isr,
        leader,
        leader_epoch: state.leader_epoch + i32::from(leader != state.leader),
        partition_epoch: state.partition_epoch + 1,
        target_replicas: state.target_replicas.clone(),
    })
}

fn partition_change(topic: &str, partition: u32, state: PartitionState) -> MetadataRecord {
    MetadataRecord::PartitionChange { topic: topic.to_owned(), partition, state }
}

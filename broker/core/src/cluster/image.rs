//! [`ClusterImage`]: the cluster metadata as of some offset of the metadata log —
//! brokers, topics with their partitions' leadership, producer-id blocks, plugins.
//!
//! State changes only by [`ClusterImage::apply`]`(offset, record)`, in log order, so
//! every broker that applied the same prefix of the log holds the same image, and
//! a broker that restarts rebuilds it by replaying its snapshot and the log after
//! it. `apply` checks a record against the image before changing anything: a
//! record that does not fit (unknown topic, a fenced broker made leader, epochs
//! that go backwards) changes nothing and returns [`ApplyError`]. The controller
//! only appends records that fit (see `controller.rs`), so such an error means a
//! damaged or foreign log.
//!
//! Invariants, checked by [`ClusterImage::check_invariants`] (tests and the
//! simulator call it after every record):
//! 1. every partition's replicas are distinct registered brokers, its ISR a
//!    non-empty subset of them, and its leader a member of the ISR or none;
//! 2. a fenced broker leads nothing;
//! 3. leader and partition epochs never go backwards (checked in `apply`);
//! 4. every attachment names an existing topic and a registered plugin of its
//!    hook, at most once per (plugin, hook), and a topic has at most one
//!    partitioner; plugin entries have valid names, digests and hooks;
//! 5. every transform runs a registered plugin of the `transform` hook, reads
//!    and writes existing topics, has a valid name and 1 to 8 output topics
//!    other than its input, and one distinct producer id per input partition.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::record::{
    AttachmentEntry, BrokerId, BrokerRegistration, MetadataRecord, PartitionState, PluginEntry, TransformEntry,
    NO_LEADER, TRANSFORM_OUTPUTS_MAX,
};

/// One registered broker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerState {
    pub registration: BrokerRegistration,
    /// Offset of its latest `RegisterBroker`.
    pub epoch: u64,
    pub fenced: bool,
}

/// One topic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicImage {
    /// Offset of its `CreateTopic`: a topic deleted and created again under the
    /// same name has a new id.
    pub topic_id: u64,
    pub partitions: Vec<PartitionState>,
    /// Config overrides (Kafka keys).
    pub configs: BTreeMap<String, String>,
}

/// One deployed transform.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransformImage {
    pub entry: TransformEntry,
    pub paused: bool,
    /// The latest replay: the offset of its `ReplayTransform` record (0: none
    /// yet) and where it restarts the input partitions from.
    pub replay: (u64, i64),
}

/// See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterImage {
    /// Offset of the last record applied; `None` before the first.
    pub applied_offset: Option<u64>,
    /// Set once, by `InitCluster`.
    #[serde(default)]
    pub cluster_id: Option<String>,
    pub brokers: BTreeMap<BrokerId, BrokerState>,
    pub topics: BTreeMap<String, TopicImage>,
    /// The first producer id not handed out yet.
    pub next_producer_id: i64,
    pub plugins: BTreeMap<String, PluginEntry>,
    /// Topic → its interceptors and partitioner, in attach order.
    #[serde(default)]
    pub attachments: BTreeMap<String, Vec<AttachmentEntry>>,
    /// Transform deployments by name.
    #[serde(default)]
    pub transforms: BTreeMap<String, TransformImage>,
}

/// The hook name of a partitioner plugin (a topic has at most one).
pub const PARTITIONER_HOOK: &str = "partitioner";

/// The hooks a plugin can export.
pub const PLUGIN_HOOKS: [&str; 4] = ["partitioner", "produce-interceptor", "consume-interceptor", "transform"];
/// The hooks attached to a topic (a transform is deployed instead).
pub const ATTACHED_HOOKS: [&str; 3] = ["partitioner", "produce-interceptor", "consume-interceptor"];
/// Longest plugin name.
pub const PLUGIN_NAME_BYTES_MAX: usize = 128;

/// A registry entry the metadata takes: a name of 1–128 of `a-z A-Z 0-9 . _ -`,
/// a sha256 digest as 64 lowercase hex digits (never a path), a known hook.
pub fn check_plugin_entry(entry: &PluginEntry) -> Result<(), String> {
    check_plugin_name(&entry.name)?;
    if !is_plugin_digest(&entry.digest) {
        return Err(format!("plugin digest {:?} is not a sha256 in lowercase hex", entry.digest));
    }
    if !PLUGIN_HOOKS.contains(&entry.hook.as_str()) {
        return Err(format!("hook {:?} is not one of {PLUGIN_HOOKS:?}", entry.hook));
    }
    Ok(())
}

/// A plugin name: 1–128 of `a-z A-Z 0-9 . _ -`.
pub fn check_plugin_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= PLUGIN_NAME_BYTES_MAX
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._-".contains(&byte));
    match valid {
        true => Ok(()),
        false => Err(format!("plugin name {name:?}: use 1 to {PLUGIN_NAME_BYTES_MAX} of a-z A-Z 0-9 . _ -")),
    }
}

/// A sha256 digest as plugins are named by content: 64 lowercase hex digits
/// (and so never a path).
pub fn is_plugin_digest(digest: &str) -> bool {
    digest.len() == 64 && digest.bytes().all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
}

/// The hook of a transform plugin (deployed, not attached).
pub const TRANSFORM_HOOK: &str = "transform";

/// A transform the metadata takes: a valid name, 1 to 8 outputs other than the
/// input, distinct producer ids (see invariant 5; the plugin is checked apart).
pub fn check_transform_entry(entry: &TransformEntry) -> Result<(), String> {
    let name = &entry.name;
    let name_ok = !name.is_empty()
        && name.len() <= PLUGIN_NAME_BYTES_MAX
        && name.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._-".contains(&byte));
    if !name_ok {
        return Err(format!("transform name {name:?}: use 1 to {PLUGIN_NAME_BYTES_MAX} of a-z A-Z 0-9 . _ -"));
    }
    if entry.output_topics.is_empty() || entry.output_topics.len() > TRANSFORM_OUTPUTS_MAX {
        return Err(format!("a transform has 1 to {TRANSFORM_OUTPUTS_MAX} output topics"));
    }
    if entry.output_topics.contains(&entry.input_topic) {
        return Err("a transform's output topic cannot be its input topic".to_owned());
    }
    if let Some(dead_letter) = &entry.dead_letter_topic {
        if *dead_letter == entry.input_topic || entry.output_topics.contains(dead_letter) {
            return Err("a transform's dead-letter topic must be neither its input nor an output topic".to_owned());
        }
    }
    if entry.start < -2 {
        return Err(format!("start offset {} (use -2 earliest, -1 latest, or an offset)", entry.start));
    }
    let ids: BTreeSet<i64> = entry.producer_ids.iter().copied().collect();
    if entry.producer_ids.is_empty() || ids.len() != entry.producer_ids.len() || ids.iter().any(|id| *id < 0) {
        return Err(format!("transform {name:?} needs one distinct producer id per input partition"));
    }
    Ok(())
}

/// An attachment the metadata takes: an attachable hook and a known failure
/// policy.
pub fn check_attachment_entry(entry: &AttachmentEntry) -> Result<(), String> {
    if !ATTACHED_HOOKS.contains(&entry.hook.as_str()) {
        return Err(format!("hook {:?} is not attached to topics (one of {ATTACHED_HOOKS:?})", entry.hook));
    }
    if !["fail-closed", "fail-open"].contains(&entry.policy.as_str()) {
        return Err(format!("failure policy {:?} is not fail-closed or fail-open", entry.policy));
    }
    Ok(())
}

/// Why a record does not fit the image.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("record at offset {offset} does not follow the last applied offset {applied}")]
    OutOfOrder { offset: u64, applied: u64 },
    #[error("{kind} at offset {offset}: {reason}")]
    Invalid { offset: u64, kind: &'static str, reason: String },
}

impl ClusterImage {
    /// Applies the record at `offset` (greater than every offset applied before).
    /// On error nothing changed.
    pub fn apply(&mut self, offset: u64, record: &MetadataRecord) -> Result<(), ApplyError> {
        if let Some(applied) = self.applied_offset {
            if offset <= applied {
                return Err(ApplyError::OutOfOrder { offset, applied });
            }
        }
        let invalid = |reason: String| ApplyError::Invalid { offset, kind: record.kind(), reason };
        self.apply_record(offset, record).map_err(invalid)?;
        self.applied_offset = Some(offset);
        Ok(())
    }

    /// Applies `records` as one unit, at the offsets that follow the last applied
    /// one: all of them, or (on error) none. Returns the offset of the first.
    pub fn apply_all(&mut self, records: &[MetadataRecord]) -> Result<u64, ApplyError> {
        let first = self.applied_offset.map_or(0, |offset| offset + 1);
        // One record is applied all-or-nothing by `apply` itself.
        let backup = (records.len() > 1).then(|| self.clone());
        for (index, record) in records.iter().enumerate() {
            if let Err(error) = self.apply(first + index as u64, record) {
                if let Some(backup) = backup {
                    *self = backup;
                }
                return Err(error);
            }
        }
        Ok(first)
    }

    fn apply_record(&mut self, offset: u64, record: &MetadataRecord) -> Result<(), String> {
        match record {
            MetadataRecord::InitCluster { cluster_id } => {
                if let Some(existing) = &self.cluster_id {
                    return Err(format!("the cluster already has id {existing}"));
                }
                self.cluster_id = Some(cluster_id.clone());
            }
            MetadataRecord::RegisterBroker(registration) => {
                if registration.broker_id < 0 {
                    return Err(format!("broker id {} is negative", registration.broker_id));
                }
                if self.leads_anything(registration.broker_id) {
                    return Err(format!("broker {} registers again while it leads partitions", registration.broker_id));
                }
                let state = BrokerState { registration: registration.clone(), epoch: offset, fenced: true };
                self.brokers.insert(registration.broker_id, state);
            }
            MetadataRecord::FenceBroker { broker_id, broker_epoch } => {
                self.current_broker(*broker_id, *broker_epoch)?;
                if self.leads_anything(*broker_id) {
                    return Err(format!("broker {broker_id} still leads partitions"));
                }
                self.broker_mut(*broker_id)?.fenced = true;
            }
            MetadataRecord::UnfenceBroker { broker_id, broker_epoch } => {
                self.current_broker(*broker_id, *broker_epoch)?;
                self.broker_mut(*broker_id)?.fenced = false;
            }
            MetadataRecord::CreateTopic { name, partitions, configs } => {
                if self.topics.contains_key(name) {
                    return Err(format!("topic {name:?} exists"));
                }
                if partitions.is_empty() {
                    return Err(format!("topic {name:?} has no partitions"));
                }
                for (index, state) in partitions.iter().enumerate() {
                    self.check_partition_state(state).map_err(|reason| format!("partition {index}: {reason}"))?;
                }
                let topic = TopicImage { topic_id: offset, partitions: partitions.clone(), configs: configs.clone() };
                self.topics.insert(name.clone(), topic);
            }
            MetadataRecord::DeleteTopic { name } => {
                if let Some(transform) = self.transforms_using_topic(name).next() {
                    return Err(format!("topic {name:?} is used by transform {transform:?}"));
                }
                self.topics.remove(name).ok_or_else(|| format!("no topic {name:?}"))?;
                self.attachments.remove(name);
            }
            MetadataRecord::PartitionChange { topic, partition, state } => {
                let current = self.partition(topic, *partition)?.clone();
                self.check_partition_state(state)?;
                check_epochs(&current, state)?;
                // Leaders come from the ISR; only a topic that allows unclean
                // elections may take one from outside it, alone in its new ISR.
                let from_outside = state.leader != NO_LEADER && !current.isr.contains(&state.leader);
                if from_outside && (!self.unclean_election_enabled(topic) || state.isr != [state.leader]) {
                    return Err(format!(
                        "leader {} is not in the ISR {:?} (unclean elections are off, or the ISR is not the leader alone)",
                        state.leader, current.isr
                    ));
                }
                *self.partition_mut(topic, *partition)? = state.clone();
            }
            MetadataRecord::ConfigChange { topic, key, value } => {
                let configs = &mut self.topics.get_mut(topic).ok_or_else(|| format!("no topic {topic:?}"))?.configs;
                match value {
                    Some(value) => configs.insert(key.clone(), value.clone()),
                    None => configs.remove(key),
                };
            }
            MetadataRecord::ProducerIdBlock { broker_id, first, count } => {
                self.broker(*broker_id)?;
                if *first != self.next_producer_id || *count <= 0 {
                    let next = self.next_producer_id;
                    return Err(format!("block [{first}, +{count}) does not start at the next id {next}"));
                }
                self.next_producer_id = first.checked_add(*count).ok_or("producer ids overflow")?;
            }
            MetadataRecord::RegisterPlugin(entry) => {
                check_plugin_entry(entry)?;
                if let Some(topic) = self.attached_to(&entry.name).find(|attachment| attachment.hook != entry.hook) {
                    return Err(format!(
                        "plugin {:?} is attached to {:?} as a {}",
                        entry.name, topic.topic, topic.hook
                    ));
                }
                if entry.hook != TRANSFORM_HOOK {
                    if let Some(transform) = self.transforms_running(&entry.name).next() {
                        return Err(format!("plugin {:?} runs in transform {transform:?}", entry.name));
                    }
                }
                self.plugins.insert(entry.name.clone(), entry.clone());
            }
            MetadataRecord::RemovePlugin { name } => {
                if let Some(attachment) = self.attached_to(name).next() {
                    return Err(format!("plugin {name:?} is attached to {:?}", attachment.topic));
                }
                if let Some(transform) = self.transforms_running(name).next() {
                    return Err(format!("plugin {name:?} runs in transform {transform:?}"));
                }
                self.plugins.remove(name).ok_or_else(|| format!("no plugin {name:?}"))?;
            }
            MetadataRecord::AttachPlugin(entry) => {
                check_attachment_entry(entry)?;
                if !self.topics.contains_key(&entry.topic) {
                    return Err(format!("no topic {:?}", entry.topic));
                }
                let plugin = self.plugins.get(&entry.plugin).ok_or_else(|| format!("no plugin {:?}", entry.plugin))?;
                if plugin.hook != entry.hook {
                    return Err(format!("plugin {:?} is a {}, not a {}", entry.plugin, plugin.hook, entry.hook));
                }
                let list = self.attachments.entry(entry.topic.clone()).or_default();
                let clash = list.iter().any(|attached| {
                    attached.hook == entry.hook && (attached.plugin == entry.plugin || entry.hook == PARTITIONER_HOOK)
                });
                if clash {
                    return Err(format!("topic {:?} already has that {}", entry.topic, entry.hook));
                }
                list.push(entry.clone());
            }
            MetadataRecord::DetachPlugin { topic, hook, plugin } => {
                let list = self.attachments.get_mut(topic).ok_or_else(|| format!("nothing attached to {topic:?}"))?;
                let before = list.len();
                list.retain(|attached| !(attached.hook == *hook && attached.plugin == *plugin));
                if list.len() == before {
                    return Err(format!("plugin {plugin:?} is not attached to {topic:?} as a {hook}"));
                }
                if list.is_empty() {
                    self.attachments.remove(topic);
                }
            }
            MetadataRecord::DeployTransform(entry) => {
                check_transform_entry(entry)?;
                if self.transforms.contains_key(&entry.name) {
                    return Err(format!("transform {:?} exists", entry.name));
                }
                let hook = self.plugins.get(&entry.plugin).map(|plugin| plugin.hook.as_str());
                if hook != Some(TRANSFORM_HOOK) {
                    return Err(format!("no transform plugin {:?}", entry.plugin));
                }
                if let Some(topic) = transform_topics(entry).find(|topic| !self.topics.contains_key(*topic)) {
                    return Err(format!("no topic {topic:?}"));
                }
                let transform =
                    TransformImage { entry: entry.clone(), paused: entry.start_paused, replay: (0, entry.start) };
                self.transforms.insert(entry.name.clone(), transform);
            }
            MetadataRecord::PauseTransform { name, paused } => {
                self.transforms.get_mut(name).ok_or_else(|| format!("no transform {name:?}"))?.paused = *paused;
            }
            MetadataRecord::ReplayTransform { name, from } => {
                if *from < -2 {
                    return Err(format!("replay offset {from}"));
                }
                self.transforms.get_mut(name).ok_or_else(|| format!("no transform {name:?}"))?.replay = (offset, *from);
            }
            MetadataRecord::DeleteTransform { name } => {
                self.transforms.remove(name).ok_or_else(|| format!("no transform {name:?}"))?;
            }
        }
        Ok(())
    }

    /// The transforms that read or write topic `name`.
    pub fn transforms_using_topic<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.transforms
            .values()
            .filter(move |t| transform_topics(&t.entry).any(|topic| topic == name))
            .map(|t| t.entry.name.as_str())
    }

    /// The transforms that run plugin `name`.
    pub fn transforms_running<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.transforms.values().filter(move |t| t.entry.plugin == name).map(|t| t.entry.name.as_str())
    }

    /// The registered broker `broker_id`.
    pub fn broker(&self, broker_id: BrokerId) -> Result<&BrokerState, String> {
        self.brokers.get(&broker_id).ok_or_else(|| format!("broker {broker_id} is not registered"))
    }

    fn broker_mut(&mut self, broker_id: BrokerId) -> Result<&mut BrokerState, String> {
        self.brokers.get_mut(&broker_id).ok_or_else(|| format!("broker {broker_id} is not registered"))
    }

    /// The broker, if `broker_epoch` is its current epoch.
    fn current_broker(&self, broker_id: BrokerId, broker_epoch: u64) -> Result<&BrokerState, String> {
        let broker = self.broker(broker_id)?;
        if broker.epoch != broker_epoch {
            return Err(format!("broker {broker_id} epoch {broker_epoch} is stale (current {})", broker.epoch));
        }
        Ok(broker)
    }

    /// Whether `broker_id` may lead: registered and not fenced.
    pub fn is_active(&self, broker_id: BrokerId) -> bool {
        self.brokers.get(&broker_id).is_some_and(|broker| !broker.fenced)
    }

    /// The state of `topic`'s `partition`.
    pub fn partition(&self, topic: &str, partition: u32) -> Result<&PartitionState, String> {
        let image = self.topics.get(topic).ok_or_else(|| format!("no topic {topic:?}"))?;
        image.partitions.get(partition as usize).ok_or_else(|| format!("no partition {topic}-{partition}"))
    }

    fn partition_mut(&mut self, topic: &str, partition: u32) -> Result<&mut PartitionState, String> {
        let image = self.topics.get_mut(topic).ok_or_else(|| format!("no topic {topic:?}"))?;
        image.partitions.get_mut(partition as usize).ok_or_else(|| format!("no partition {topic}-{partition}"))
    }

    /// Every partition, as (topic, partition, state).
    pub fn partitions(&self) -> impl Iterator<Item = (&str, u32, &PartitionState)> {
        self.topics.iter().flat_map(|(name, topic)| {
            topic.partitions.iter().enumerate().map(move |(index, state)| (name.as_str(), index as u32, state))
        })
    }

    /// Whether `broker_id` leads any partition.
    pub fn leads_anything(&self, broker_id: BrokerId) -> bool {
        self.partitions().any(|(_, _, state)| state.leader == broker_id)
    }

    /// Invariant 1 for one partition state, plus: a new leader must be active.
    fn check_partition_state(&self, state: &PartitionState) -> Result<(), String> {
        check_replica_sets(state)?;
        if let Some(unknown) = state.replicas.iter().find(|broker| !self.brokers.contains_key(broker)) {
            return Err(format!("replica {unknown} is not a registered broker"));
        }
        if state.leader != NO_LEADER && !self.is_active(state.leader) {
            return Err(format!("leader {} is fenced", state.leader));
        }
        Ok(())
    }

    /// The attachments of plugin `name`, on every topic.
    pub fn attached_to<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a AttachmentEntry> + 'a {
        self.attachments.values().flatten().filter(move |attachment| attachment.plugin == name)
    }

    /// Checks the invariants in the module docs; returns the first broken one.
    pub fn check_invariants(&self) -> Result<(), String> {
        for entry in self.plugins.values() {
            check_plugin_entry(entry)?;
        }
        for (topic, list) in &self.attachments {
            if !self.topics.contains_key(topic) || list.is_empty() {
                return Err(format!("attachments of {topic:?}: no such topic, or an empty list"));
            }
            for attachment in list {
                let hook = self.plugins.get(&attachment.plugin).map(|plugin| plugin.hook.as_str());
                if hook != Some(attachment.hook.as_str()) || attachment.topic != *topic {
                    return Err(format!("attachment {attachment:?} does not match a stored plugin of its hook"));
                }
                let twins =
                    list.iter().filter(|other| other.plugin == attachment.plugin && other.hook == attachment.hook);
                if twins.count() > 1 {
                    return Err(format!(
                        "{:?} is attached to {topic:?} twice as a {}",
                        attachment.plugin, attachment.hook
                    ));
                }
            }
            if list.iter().filter(|attachment| attachment.hook == PARTITIONER_HOOK).count() > 1 {
                return Err(format!("topic {topic:?} has more than one partitioner"));
            }
        }
        for (name, transform) in &self.transforms {
            check_transform_entry(&transform.entry)?;
            let hook = self.plugins.get(&transform.entry.plugin).map(|plugin| plugin.hook.as_str());
            if *name != transform.entry.name || hook != Some(TRANSFORM_HOOK) {
                return Err(format!("transform {name:?} does not run a stored transform plugin"));
            }
            if let Some(topic) = transform_topics(&transform.entry).find(|topic| !self.topics.contains_key(*topic)) {
                return Err(format!("transform {name:?} uses topic {topic:?}, which does not exist"));
            }
        }
        for (topic, partition, state) in self.partitions() {
            let context = |reason: String| format!("{topic}-{partition}: {reason}");
            check_replica_sets(state).map_err(context)?;
            if state.replicas.iter().any(|broker| !self.brokers.contains_key(broker)) {
                return Err(context(format!("replicas {:?} include an unregistered broker", state.replicas)));
            }
            if state.leader != NO_LEADER && !self.is_active(state.leader) {
                return Err(context(format!("fenced broker {} leads", state.leader)));
            }
        }
        Ok(())
    }
}

/// The input, output and dead-letter topics of a transform.
fn transform_topics(entry: &TransformEntry) -> impl Iterator<Item = &str> {
    std::iter::once(entry.input_topic.as_str())
        .chain(entry.output_topics.iter().map(String::as_str))
        .chain(entry.dead_letter_topic.as_deref())
}

/// Replicas distinct and non-empty, ISR a non-empty subset, leader in the ISR.
fn check_replica_sets(state: &PartitionState) -> Result<(), String> {
    if let Some(target) = &state.target_replicas {
        let distinct: BTreeSet<BrokerId> = target.iter().copied().collect();
        let prefix = target.len() <= state.replicas.len() && target[..] == state.replicas[..target.len()];
        if target.is_empty() || distinct.len() != target.len() || !prefix {
            return Err(format!(
                "target replicas {target:?} must be distinct and lead the replicas {:?}",
                state.replicas
            ));
        }
    }
    let replicas: BTreeSet<BrokerId> = state.replicas.iter().copied().collect();
    if replicas.is_empty() || replicas.len() != state.replicas.len() {
        return Err(format!("replicas {:?} must be distinct and non-empty", state.replicas));
    }
    let isr: BTreeSet<BrokerId> = state.isr.iter().copied().collect();
    if isr.is_empty() || isr.len() != state.isr.len() || !isr.is_subset(&replicas) {
        return Err(format!("ISR {:?} must be a distinct, non-empty subset of {:?}", state.isr, state.replicas));
    }
    if state.leader != NO_LEADER && !isr.contains(&state.leader) {
        return Err(format!("leader {} is not in the ISR {:?}", state.leader, state.isr));
    }
    Ok(())
}

/// Invariant 3: the partition epoch moves by one per change; the leader epoch
/// moves by one when the leader changes and stays otherwise.
fn check_epochs(current: &PartitionState, next: &PartitionState) -> Result<(), String> {
    if next.partition_epoch != current.partition_epoch + 1 {
        return Err(format!("partition epoch {} does not follow {}", next.partition_epoch, current.partition_epoch));
    }
    let expected_leader_epoch = current.leader_epoch + i32::from(next.leader != current.leader);
    if next.leader_epoch != expected_leader_epoch {
        return Err(format!(
            "leader epoch {} should be {expected_leader_epoch} (leader {} -> {})",
            next.leader_epoch, current.leader, next.leader
        ));
    }
    Ok(())
}

//! [`Node`]: one broker's state and every request it serves, as plain Rust values.
//!
//! The RPC edge ([`crate::rpc`]) decodes Cap'n Proto into the request types here and
//! encodes the answers back; nothing below this line knows about Cap'n Proto. `Node`
//! is `Send + Sync` and shared by every connection thread.
//!
//! State: the durable [`MetadataStore`] (topics and producer-id blocks), the
//! [`LogDir`] with every partition log, and per partition an idempotent-producer
//! table. Admin changes are serialised by one mutex and written to the metadata
//! store *before* the logs change, so a crash in between leaves metadata the next
//! start reconciles (missing partition directories are created, directories of
//! deleted topics are deleted).
//!
//! Produce: validate the batch headers (CRC, size, codec), run the idempotence
//! check and append under the partition's producer lock, then wait for durability
//! as `acks` asks. Fetch: read committed batches (below the high watermark); long-
//! poll until `min_bytes` are there or `max_wait` passed.
//!
//! Single node: this broker is the leader of every partition, leader epoch 0,
//! replicas = ISR = [this broker]. The metadata shapes already carry a cluster.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use abi::batch::{BatchView, Compression};
use abi::ErrorCode;
use broker_core::log::topic_config::{apply_topic_configs, effective_topic_configs};
use broker_core::log::{FlushPolicy, LogConfig};
use broker_core::producer_state::{ProducerBatch, ProducerStates, SequenceCheck};

use crate::config::{BrokerConfig, Limits};
use crate::data_dir_lock::{DataDirLock, DataDirLockError};
use crate::environment::Environment;
use crate::error::ApiError;
use crate::groups::{GroupCoordinators, CONSUMER_OFFSETS_PARTITIONS, CONSUMER_OFFSETS_TOPIC};
use crate::log_dir::{parse_partition_dir, validate_topic_name, LogDir, LogDirConfig, PartitionDirFate};
use crate::metadata_store::{MetadataError, MetadataStore, TopicRecord, PRODUCER_ID_BLOCK_SIZE};
use crate::partition::{lock, Partition};
use crate::plugins::{AttachmentSummary, FailurePolicy, PluginSummary, Plugins};
use crate::transforms::{TransformSpec, TransformStatus, Transforms};
use broker_core::group::assignor::TopicPartition as GroupPartition;
use broker_core::group::coordinator::{
    CommitRequest, CoordinatorConfig, GroupDescription, GroupState, HeartbeatRequest, HeartbeatResponse,
};
use broker_core::group::record::OffsetValue;

/// Leader epoch of every partition until the controller hands out epochs.
const LEADER_EPOCH: i32 = 0;
/// Idempotent producers remembered per partition (least recently used go first).
const PRODUCERS_PER_PARTITION_MAX: usize = 10_000;
/// How much of each partition's log tail is scanned at start-up to rebuild the
/// idempotent-producer table (headers only, one small read per batch). A retry of
/// a batch older than this is not recognised as a duplicate.
const PRODUCER_STATE_REBUILD_BYTES_MAX: u64 = 256 << 20;
/// Produce wait when the request gives no timeout.
const PRODUCE_TIMEOUT_MS_DEFAULT: u32 = 30_000;

/// When a produce is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acks {
    /// At once, after the append (the answer carries no offset).
    None,
    /// After the leader's append is durable as the topic's `flush.policy` says
    /// (`always`: fdatasync'ed; `interval`: in the page cache).
    Leader,
    /// After every in-sync replica's durable append (the leader alone, on one node).
    All,
}

#[derive(Clone, Debug)]
pub struct ProduceRequest {
    pub topic: String,
    pub partition: i32,
    pub acks: Acks,
    pub timeout_ms: u32,
    /// One or more RecordBatch v2, back to back; stamped in place.
    pub batches: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Produced {
    /// Offset of the first record; -1 for `acks=none`.
    pub base_offset: i64,
    pub log_start_offset: i64,
}

/// Where the broker placed each record of a `partition = -1` produce, in order:
/// (partition, offset; -1 with `acks=none`).
pub type Placements = Vec<(i32, i64)>;

#[derive(Clone, Copy, Debug)]
pub struct FetchRequest<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: u32,
    pub min_bytes: u32,
    pub max_wait_ms: u32,
}

/// What a fetch read: the first `size_bytes` of the caller's buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fetched {
    pub size_bytes: usize,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

/// One partition of a [`Node::fetch_many`].
#[derive(Clone, Debug)]
pub struct PartitionFetch {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: u32,
}

/// Which offset `list_offset` looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetQuery {
    Earliest,
    Latest,
    /// The first record with a timestamp at or after this (ms).
    Timestamp(i64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerEntry {
    pub id: i32,
    pub host: String,
    pub port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionInfo {
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    pub error: Option<ApiError>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub partitions: Vec<PartitionInfo>,
    pub error: Option<ApiError>,
    /// The partitioner plugin set on the topic.
    pub partitioner: Option<crate::plugins::PartitionerSetting>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterInfo {
    pub brokers: Vec<BrokerEntry>,
    pub controller_id: i32,
    pub topics: Vec<TopicInfo>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicDescription {
    pub name: String,
    pub partitions: Vec<PartitionInfo>,
    /// Every effective config, sorted by key.
    pub configs: Vec<(String, String)>,
}

/// Why the node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    DataDir(#[from] DataDirLockError),
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error(transparent)]
    Log(#[from] broker_core::log::LogError),
    #[error("topic {topic:?} has configs the broker no longer accepts: {reason}")]
    TopicConfig { topic: String, reason: String },
    #[error("plugins: {0}")]
    Plugins(String),
}

/// One partition slot of a topic.
#[derive(Debug)]
enum Slot {
    Online {
        partition: Partition,
        producers: Mutex<ProducerStates>,
    },
    /// Recovery found corruption (or the directory could not be created).
    Offline {
        reason: String,
    },
}

/// A topic's partitions; its configs live in the metadata store and in each
/// partition's log config.
#[derive(Debug)]
struct Topic {
    slots: Vec<Slot>,
}

/// Producer ids handed out from the current durable block.
#[derive(Debug, Default)]
struct ProducerIdBlock {
    next: i64,
    end: i64,
}

/// See the module docs.
#[derive(Debug)]
pub struct Node {
    broker: BrokerEntry,
    limits: Limits,
    log_defaults: LogConfig,
    log_dir: Mutex<Option<LogDir>>,
    /// Serialises admin changes; taken before `metadata`.
    metadata: Mutex<MetadataStore>,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    producer_ids: Mutex<ProducerIdBlock>,
    /// Set once by `open`.
    groups: Option<GroupCoordinators>,
    plugins: Plugins,
    transforms: Transforms,
    /// Picks the partition of keyless records in `partition = -1` produces.
    round_robin: std::sync::atomic::AtomicU64,
    /// Held from `open` until `shutdown` has closed every partition (or the node
    /// is dropped): no other process may open the data directory meanwhile.
    data_dir_lock: Mutex<Option<DataDirLock>>,
    clock: Arc<dyn broker_core::clock::Clock>,
}

impl Node {
    /// Opens the data directory on real files with the system clock: metadata,
    /// then every partition of every topic.
    pub fn open(config: &BrokerConfig) -> Result<Node, NodeError> {
        Node::open_in(config, Environment::real())
    }

    /// [`Node::open`] on the given storage and clock (a simulated broker runs on
    /// `MemStorage` and a `ManualClock`). Only real files are locked against a
    /// second process.
    pub fn open_in(config: &BrokerConfig, environment: Environment) -> Result<Node, NodeError> {
        let data_dir_lock = match environment.is_real() {
            true => Some(DataDirLock::acquire(&config.data_dir)?),
            false => None,
        };
        let metadata = MetadataStore::open(environment.storage.clone(), &config.data_dir)?;
        let mut log_configs = HashMap::new();
        for (name, record) in &metadata.metadata().topics {
            let entries: Vec<(String, String)> = record.configs.clone().into_iter().collect();
            let log_config = apply_topic_configs(&config.log, &entries)
                .map_err(|error| NodeError::TopicConfig { topic: name.clone(), reason: error.to_string() })?;
            log_configs.insert(name.clone(), log_config);
        }
        let pending_deletions = metadata.metadata().pending_deletions.clone();
        let log_dir_config = LogDirConfig { environment: environment.clone(), ..config.log_dir_config() };
        let log_dir = LogDir::open_with(log_dir_config, |directory| {
            let topic = parse_partition_dir(directory).map_or("", |(topic, _)| topic);
            match log_configs.get(topic) {
                Some(log_config) => PartitionDirFate::Open(log_config.clone()),
                None if pending_deletions.contains(directory) => PartitionDirFate::Delete,
                None => PartitionDirFate::Leave,
            }
        })?;
        let mut metadata = metadata;
        if !pending_deletions.is_empty() {
            metadata.update(|metadata| metadata.pending_deletions.clear())?;
        }
        let offline: HashMap<String, String> = log_dir.offline().into_iter().collect();
        let mut topics = BTreeMap::new();
        for (name, record) in &metadata.metadata().topics {
            let slots = (0..record.partition_count)
                .map(|partition| open_slot(&log_dir, &offline, name, partition, &log_configs[name]))
                .collect();
            topics.insert(name.clone(), Arc::new(Topic { slots }));
        }
        let (host, port) = split_host_port(config.advertised_listener.as_deref().unwrap_or(&config.listen));
        let mut node = Node {
            broker: BrokerEntry { id: config.broker_id, host, port },
            limits: config.limits.clone(),
            log_defaults: config.log.clone(),
            log_dir: Mutex::new(Some(log_dir)),
            metadata: Mutex::new(metadata),
            topics: RwLock::new(topics),
            producer_ids: Mutex::new(ProducerIdBlock::default()),
            groups: None,
            plugins: Plugins::open(&config.data_dir.join("plugins"), config.plugin_limits(), environment.clone())
                .map_err(|error| NodeError::Plugins(error.message))?,
            transforms: Transforms::open(&config.data_dir.join("plugins").join("transforms"), environment.clone())
                .map_err(|error| NodeError::Plugins(error.message))?,
            round_robin: std::sync::atomic::AtomicU64::new(0),
            data_dir_lock: Mutex::new(data_dir_lock),
            clock: environment.clock.clone(),
        };
        node.groups = Some(node.load_group_coordinators()?);
        Ok(node)
    }

    /// Creates `__consumer_offsets` on first start, then loads a coordinator per
    /// partition (replaying it).
    fn load_group_coordinators(&self) -> Result<GroupCoordinators, NodeError> {
        if !lock(&self.metadata).metadata().topics.contains_key(CONSUMER_OFFSETS_TOPIC) {
            let configs = [("flush.policy", "always"), ("retention.ms", "-1"), ("segment.bytes", "67108864")]
                .map(|(key, value)| (key.to_owned(), value.to_owned()));
            self.create_topic_unchecked(CONSUMER_OFFSETS_TOPIC, CONSUMER_OFFSETS_PARTITIONS, 1, &configs).map_err(
                |error| NodeError::TopicConfig { topic: CONSUMER_OFFSETS_TOPIC.to_owned(), reason: error.to_string() },
            )?;
        }
        let topic = self.topic(CONSUMER_OFFSETS_TOPIC).map_err(|error| NodeError::TopicConfig {
            topic: CONSUMER_OFFSETS_TOPIC.to_owned(),
            reason: error.to_string(),
        })?;
        let mut partitions = Vec::new();
        for slot in &topic.slots {
            let (partition, _) = slot.online().map_err(|error| NodeError::TopicConfig {
                topic: CONSUMER_OFFSETS_TOPIC.to_owned(),
                reason: format!("a partition is offline: {}", error.message),
            })?;
            partitions.push(partition.clone());
        }
        Ok(GroupCoordinators::load(partitions, &CoordinatorConfig::default(), self.clock.clone())?)
    }

    fn groups(&self) -> &GroupCoordinators {
        self.groups.as_ref().expect("Node::open loads the group coordinators before returning")
    }

    /// Partition count of every topic (the assignors' input).
    fn partition_counts(&self) -> BTreeMap<String, u32> {
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

    /// Sets the address clients are told to use (after binding port 0).
    pub fn set_advertised(&mut self, host: String, port: u16) {
        self.broker.host = host;
        self.broker.port = port;
    }

    /// Closes every partition cleanly (flush, checkpoint, clean-shutdown marker).
    pub fn shutdown(&self) {
        self.topics_mut().clear();
        if let Some(log_dir) = lock(&self.log_dir).take() {
            for (partition, error) in log_dir.shutdown() {
                tracing::error!(%partition, %error, "partition did not close cleanly");
            }
        }
        // Everything is closed: another process (or a restarted node) may open it.
        drop(lock(&self.data_dir_lock).take());
    }

    fn topics(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Topic>>> {
        self.topics.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn topics_mut(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Topic>>> {
        self.topics.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn topic(&self, name: &str) -> Result<Arc<Topic>, ApiError> {
        self.topics().get(name).cloned().ok_or_else(|| ApiError::unknown_topic(name))
    }

    // ---- admin ----

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
    fn create_topic_unchecked(
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
    fn clear_partition_dirs(
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
            } else if log_dir.path().join(&directory).exists() {
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

    /// Stores and registers a plugin (see [`Plugins::upload`]).
    pub fn upload_plugin(&self, name: &str, hook: &str, wasm: &[u8]) -> Result<PluginSummary, ApiError> {
        self.plugins.upload(name, hook, wasm)
    }

    pub fn list_plugins(&self) -> Vec<PluginSummary> {
        self.plugins.list()
    }

    pub fn delete_plugin(&self, name: &str) -> Result<(), ApiError> {
        let users = self.transforms.uses_plugin(name);
        if !users.is_empty() {
            let message = format!("plugin {name:?} runs in transform(s) {users:?}; delete them first");
            return Err(ApiError::new(ErrorCode::PluginInUse, message));
        }
        self.plugins.delete(name)
    }

    /// The bytes of an uploaded plugin (clients fetch partitioners).
    pub fn plugin_wasm(&self, digest: &str) -> Result<Vec<u8>, ApiError> {
        self.plugins.wasm(digest)
    }

    /// The partition a topic's partitioner plugin picks for a record, if it has one.
    pub fn plugin_partition(
        &self,
        topic: &str,
        partition_count: u32,
        record: &plugin_host::PackedRecord<'_>,
    ) -> Result<Option<u32>, ApiError> {
        self.plugins.partition(topic, partition_count, record)
    }

    /// Partitions of a topic.
    pub fn partition_count(&self, topic: &str) -> Result<u32, ApiError> {
        Ok(self.topic(topic)?.slots.len() as u32)
    }

    /// A fresh instance of a transform plugin (its `init` ran).
    pub fn start_transform_plugin(
        &self,
        plugin: &str,
        config: Vec<(String, String)>,
    ) -> Result<plugin_host::Plugin, ApiError> {
        self.plugins.start_transform(plugin, config)
    }

    /// Deploys a transform (see [`crate::transforms`]).
    pub fn deploy_transform(self: &Arc<Self>, spec: TransformSpec) -> Result<(), ApiError> {
        for topic in std::iter::once(&spec.input_topic).chain(&spec.output_topics) {
            if is_internal(topic) {
                return Err(ApiError::new(ErrorCode::InvalidTopic, format!("{topic:?} is an internal topic")));
            }
            self.topic(topic)?;
        }
        let partitions = self.partition_count(&spec.input_topic)? as i32;
        self.transforms.deploy(self, spec, partitions)
    }

    pub fn list_transforms(&self) -> Vec<TransformStatus> {
        self.transforms.list(self)
    }

    pub fn control_transform(&self, name: &str, action: &str, offset: i64) -> Result<(), ApiError> {
        self.transforms.control(name, action, offset)
    }

    /// Stops the transforms' tasks (before the partitions close).
    pub fn stop_transforms(&self) {
        self.transforms.stop_all();
    }

    /// Starts the deployed transforms' tasks on `runtime` (the server does, at serve).
    pub fn start_transforms(self: &Arc<Self>, runtime: tokio::runtime::Handle) {
        self.transforms.start_all(self, runtime);
    }

    pub fn plugin_logs(&self, name: &str) -> Result<Vec<plugin_host::LogEntry>, ApiError> {
        self.plugins.logs(name)
    }

    /// Attaches an interceptor to an existing, non-internal topic.
    pub fn attach_plugin(
        &self,
        topic: &str,
        hook: &str,
        plugin: &str,
        config: Vec<(String, String)>,
        policy: &str,
    ) -> Result<(), ApiError> {
        if is_internal(topic) {
            return Err(ApiError::new(ErrorCode::InvalidTopic, format!("{topic:?} is an internal topic")));
        }
        self.topic(topic)?;
        self.plugins.attach(topic, hook, plugin, config, FailurePolicy::parse(policy)?)
    }

    pub fn detach_plugin(&self, topic: &str, hook: &str, plugin: &str) -> Result<(), ApiError> {
        self.plugins.detach(topic, hook, plugin)
    }

    pub fn list_attachments(&self, topic: Option<&str>) -> Vec<AttachmentSummary> {
        self.plugins.attachments(topic)
    }

    /// Runs consume interceptors over fetched answers (`buffers[i]` holds
    /// partition `i`'s bytes); a failure becomes that partition's answer.
    pub fn intercept_fetched(
        &self,
        partitions: &[PartitionFetch],
        group: Option<&str>,
        answers: &mut [Result<Fetched, ApiError>],
        buffers: &mut [Vec<u8>],
    ) {
        for ((fetch, answer), buffer) in partitions.iter().zip(answers.iter_mut()).zip(buffers.iter_mut()) {
            let Ok(fetched) = answer else { continue };
            if fetched.size_bytes == 0 || !self.plugins.intercepts_fetches(&fetch.topic) {
                continue;
            }
            match self.plugins.intercept_fetch(&fetch.topic, fetch.partition, group, &buffer[..fetched.size_bytes]) {
                Ok(Some(rewritten)) => {
                    fetched.size_bytes = rewritten.len();
                    buffer.clear();
                    buffer.extend_from_slice(&rewritten);
                }
                Ok(None) => {}
                Err(error) => *answer = Err(error),
            }
        }
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

    fn topic_log_config(&self, configs: &[(String, String)]) -> Result<LogConfig, ApiError> {
        apply_topic_configs(&self.log_defaults, configs)
            .map_err(|error| ApiError::new(ErrorCode::InvalidConfig, error.problems.join("; ")))
    }

    // ---- metadata ----

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

    fn topic_info(&self, name: &str, topic: &Topic) -> TopicInfo {
        TopicInfo {
            name: name.to_owned(),
            partitions: self.partition_infos(topic),
            error: None,
            partitioner: self.plugins.partitioner_of(name),
        }
    }

    fn partition_infos(&self, topic: &Topic) -> Vec<PartitionInfo> {
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

    // ---- data ----

    fn slot(&self, topic_name: &str, partition: i32) -> Result<(Arc<Topic>, usize), ApiError> {
        let topic = self.topic(topic_name)?;
        let count = topic.slots.len();
        if partition < 0 || partition as usize >= count {
            return Err(ApiError::unknown_partition(topic_name, partition, count));
        }
        Ok((topic, partition as usize))
    }

    /// A produce that leaves the partitions to the broker (`partition = -1`):
    /// each record goes where the topic's partitioner plugin says, else to
    /// Kafka's murmur2 partition of its key, else (no key) to one partition per
    /// request in round-robin order — the choices a producer makes. Records are
    /// regrouped into one batch per partition and appended like any produce.
    pub async fn produce_placed(&self, request: ProduceRequest) -> Result<(Produced, Placements), ApiError> {
        let count = self.partition_count(&request.topic)?;
        let corrupt = |error: abi::batch::BatchError| ApiError::new(ErrorCode::CorruptMessage, error.to_string());
        let keyless = (self.round_robin.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % count as u64) as i32;
        let mut groups: BTreeMap<i32, Vec<abi::batch::RecordBatch>> = BTreeMap::new();
        let mut order = Vec::new();
        for view in abi::BatchIter::new(&request.batches) {
            let view = view.map_err(corrupt)?;
            if view.producer_id() >= 0 {
                let message =
                    "an idempotent batch needs an explicit partition (its sequence numbers are per partition)";
                return Err(ApiError::new(ErrorCode::InvalidRequest, message));
            }
            let batch = abi::batch::RecordBatch::decode(view.as_bytes()).map_err(corrupt)?;
            let packed = crate::plugins::pack_view(&view, -1)?;
            let records = packed.records().map_err(|error| ApiError::new(ErrorCode::CorruptMessage, error))?;
            for (record, decoded) in records.iter().zip(&batch.records) {
                let partition = match (self.plugin_partition(&request.topic, count, record)?, record.key) {
                    (Some(partition), _) => partition as i32,
                    (None, Some(key)) => abi::partitioner::partition_for_key(key, count) as i32,
                    (None, None) => keyless,
                };
                let group = groups.entry(partition).or_default();
                if group.last().is_none_or(|last| last.base_timestamp != batch.base_timestamp) {
                    group.push(abi::batch::RecordBatch { records: Vec::new(), ..batch.clone() });
                }
                let target = group.last_mut().expect("pushed above");
                let mut decoded = decoded.clone();
                decoded.offset_delta = target.records.len() as i32;
                target.records.push(decoded);
                order.push((partition, group.iter().map(|batch| batch.records.len()).sum::<usize>() - 1));
            }
        }
        let mut base_offsets = BTreeMap::new();
        let mut log_start_offset = -1;
        for (partition, batches) in groups {
            let mut bytes = Vec::new();
            for mut batch in batches {
                batch.last_offset_delta = batch.records.len() as i32 - 1;
                batch.encode_into(&mut bytes).map_err(corrupt)?;
            }
            let single = ProduceRequest { partition, batches: bytes, ..request.clone() };
            let produced = self.produce(single).await?;
            log_start_offset = produced.log_start_offset;
            base_offsets.insert(partition, produced.base_offset);
        }
        let placed = order
            .into_iter()
            .map(|(partition, index)| {
                let base = base_offsets.get(&partition).copied().unwrap_or(-1);
                (partition, if base < 0 { -1 } else { base + index as i64 })
            })
            .collect();
        Ok((Produced { base_offset: -1, log_start_offset }, placed))
    }

    /// Appends the request's batches and answers as `acks` asks.
    pub async fn produce(&self, mut request: ProduceRequest) -> Result<Produced, ApiError> {
        if request.topic.starts_with("__") {
            let message = format!("{:?} is an internal topic; only the broker writes it", request.topic);
            return Err(ApiError::new(ErrorCode::InvalidTopic, message));
        }
        let (topic, index) = self.slot(&request.topic, request.partition)?;
        let (partition, producers) = topic.slots[index].online()?;
        let producer = check_batches(&request.batches)?;
        self.plugins.intercept_produce(&request.topic, request.partition, &mut request.batches)?;
        let (base_offset, last_offset) = match producer {
            None => {
                let info = partition.append(&mut request.batches, LEADER_EPOCH)?;
                (info.base_offset, info.last_offset)
            }
            Some(producer) => {
                let mut producers = lock(producers);
                match producers.check(&producer)? {
                    SequenceCheck::Duplicate { base_offset, last_offset } => (base_offset, last_offset),
                    SequenceCheck::Append => {
                        let info = partition.append(&mut request.batches, LEADER_EPOCH)?;
                        producers.record(&producer, info.base_offset, info.last_offset);
                        (info.base_offset, info.last_offset)
                    }
                }
            }
        };
        if request.acks == Acks::None {
            return Ok(Produced { base_offset: -1, log_start_offset: -1 });
        }
        if partition.config().flush_policy == FlushPolicy::Always {
            let timeout_ms = match request.timeout_ms {
                0 => PRODUCE_TIMEOUT_MS_DEFAULT,
                timeout_ms => timeout_ms,
            }
            .min(self.limits.produce_timeout_ms_max);
            let waited =
                tokio::time::timeout(Duration::from_millis(timeout_ms as u64), partition.wait_durable(last_offset + 1));
            match waited.await {
                Ok(durable) => {
                    durable?;
                }
                Err(_) => {
                    let message = format!("offsets {base_offset}..={last_offset} not durable within {timeout_ms} ms");
                    return Err(ApiError::new(ErrorCode::RequestTimedOut, message));
                }
            }
        }
        let (log_start_offset, _) = partition.offsets()?;
        Ok(Produced { base_offset: base_offset as i64, log_start_offset: log_start_offset as i64 })
    }

    /// The most bytes one fetch answer holds (`limits.fetch_bytes_max`).
    pub fn fetch_bytes_max(&self) -> u32 {
        self.limits.fetch_bytes_max
    }

    /// Reads committed batches from `offset` into the start of `buffer` (which only
    /// grows, so a reused buffer is never zeroed again), waiting up to
    /// `max_wait_ms` for at least `min_bytes`: [`Node::fetch_many`] of one partition.
    pub async fn fetch(&self, request: FetchRequest<'_>, buffer: &mut Vec<u8>) -> Result<Fetched, ApiError> {
        let partition = PartitionFetch {
            topic: request.topic.to_owned(),
            partition: request.partition,
            offset: request.offset,
            max_bytes: request.max_bytes,
        };
        let mut buffers = vec![std::mem::take(buffer)];
        let answers = self
            .fetch_many(
                std::slice::from_ref(&partition),
                request.min_bytes,
                request.max_wait_ms,
                request.max_bytes,
                &mut buffers,
            )
            .await;
        let mut answers = answers;
        self.intercept_fetched(std::slice::from_ref(&partition), None, &mut answers, &mut buffers);
        *buffer = buffers.pop().unwrap_or_default();
        answers.into_iter().next().expect("fetch_many answers every partition it is given")
    }

    /// Reads committed batches of several partitions, partition `i` into the start
    /// of `buffers[i]` (grown as needed, never shrunk), at most `max_bytes` in
    /// total, waiting up to `max_wait_ms` until at least `min_bytes` in total are
    /// there. A partition's error is its own answer and ends the wait at once.
    pub async fn fetch_many(
        &self,
        partitions: &[PartitionFetch],
        min_bytes: u32,
        max_wait_ms: u32,
        max_bytes: u32,
        buffers: &mut Vec<Vec<u8>>,
    ) -> Vec<Result<Fetched, ApiError>> {
        buffers.resize_with(partitions.len(), Vec::new);
        let max_wait = Duration::from_millis(max_wait_ms.min(self.limits.fetch_wait_ms_max) as u64);
        let deadline = tokio::time::Instant::now() + max_wait;
        let total_max = max_bytes.clamp(1, self.limits.fetch_bytes_max) as usize;
        let slots: Vec<Result<(Partition, u64), ApiError>> =
            partitions.iter().map(|fetch| self.fetch_slot(fetch)).collect();
        loop {
            let mut total = 0;
            let mut answers = Vec::with_capacity(partitions.len());
            let mut seen = Vec::with_capacity(partitions.len());
            for ((fetch, slot), buffer) in partitions.iter().zip(&slots).zip(buffers.iter_mut()) {
                let answer = slot.clone().and_then(|(partition, offset)| {
                    let budget = (fetch.max_bytes.max(1) as usize).min(total_max.saturating_sub(total));
                    // Past the total, a partition is answered empty (its watermarks only).
                    let (size_bytes, log_start_offset, high_watermark) = match budget {
                        0 => (0, partition.offsets()?.0, partition.high_watermark()),
                        budget => {
                            // A first batch bigger than what is left of the total is only
                            // sent when nothing else is (so a consumer always progresses);
                            // otherwise it is not even read, so entries past a full answer
                            // cost no reads and no buffers.
                            let (_, size_bytes, log_start_offset, high_watermark) =
                                partition.read_committed_prefix(offset, budget, total == 0, buffer)?;
                            (size_bytes, log_start_offset, high_watermark)
                        }
                    };
                    total += size_bytes;
                    seen.push((partition, high_watermark));
                    let (high_watermark, log_start_offset) = (high_watermark as i64, log_start_offset as i64);
                    Ok(Fetched { size_bytes, high_watermark, log_start_offset })
                });
                answers.push(answer);
            }
            let any_error = answers.iter().any(Result::is_err);
            if total >= min_bytes as usize || any_error || tokio::time::Instant::now() >= deadline || seen.is_empty() {
                return answers;
            }
            let waits = seen.iter().map(|(partition, high_watermark)| {
                Box::pin(partition.wait_high_watermark_above(*high_watermark, deadline))
            });
            futures::future::select_all(waits).await;
        }
    }

    fn fetch_slot(&self, fetch: &PartitionFetch) -> Result<(Partition, u64), ApiError> {
        let (topic, index) = self.slot(&fetch.topic, fetch.partition)?;
        let (partition, _) = topic.slots[index].online()?;
        let offset = u64::try_from(fetch.offset)
            .map_err(|_| ApiError::new(ErrorCode::OffsetOutOfRange, format!("offset {} is negative", fetch.offset)))?;
        Ok((partition.clone(), offset))
    }

    /// The earliest or latest offset, or the first at or after a timestamp (the
    /// high watermark when every record is older). Returns (offset, timestamp ms;
    /// -1 when not known).
    pub fn list_offset(&self, topic_name: &str, partition: i32, query: OffsetQuery) -> Result<(i64, i64), ApiError> {
        let (topic, index) = self.slot(topic_name, partition)?;
        let (partition, _) = topic.slots[index].online()?;
        let (log_start_offset, high_watermark) = partition.offsets()?;
        let offset = match query {
            OffsetQuery::Earliest => log_start_offset,
            OffsetQuery::Latest => high_watermark,
            OffsetQuery::Timestamp(timestamp_ms) => partition
                .with_log(|log| log.offset_for_timestamp(timestamp_ms))?
                .map_or(high_watermark, |offset| offset.min(high_watermark)),
        };
        Ok((offset as i64, -1))
    }

    /// A fresh idempotent producer id (epoch 0). Ids come from durable blocks, so
    /// a restarted broker never hands one out twice.
    pub fn init_producer_id(&self) -> Result<(i64, i16), ApiError> {
        let mut block = lock(&self.producer_ids);
        if block.next >= block.end {
            let first = lock(&self.metadata).allocate_producer_id_block().map_err(storage_error)?;
            *block = ProducerIdBlock { next: first, end: first + PRODUCER_ID_BLOCK_SIZE };
        }
        let producer_id = block.next;
        block.next += 1;
        Ok((producer_id, 0))
    }
}

impl Slot {
    fn partition(&self) -> Option<&Partition> {
        match self {
            Slot::Online { partition, .. } => Some(partition),
            Slot::Offline { .. } => None,
        }
    }

    fn online(&self) -> Result<(&Partition, &Mutex<ProducerStates>), ApiError> {
        match self {
            Slot::Online { partition, producers } => Ok((partition, producers)),
            Slot::Offline { reason } => Err(ApiError::new(ErrorCode::StorageError, reason.clone())),
        }
    }
}

/// The idempotent-producer table as the log's tail left it (the table itself is
/// kept in memory only).
fn rebuild_producer_states(partition: &Partition) -> Result<ProducerStates, ApiError> {
    let mut producers = ProducerStates::new(PRODUCERS_PER_PARTITION_MAX);
    partition.with_log(|log| {
        log.visit_tail_batch_headers(PRODUCER_STATE_REBUILD_BYTES_MAX, |header| replay_header(&mut producers, header))
    })?;
    Ok(producers)
}

/// Records one stored batch header in the producer table (if it has a producer).
fn replay_header(producers: &mut ProducerStates, header: &[u8; abi::batch::BATCH_HEADER_BYTES]) {
    use abi::batch::field;
    let producer_id = i64::from_be_bytes(header_field(header, field::PRODUCER_ID));
    if producer_id >= 0 {
        let batch = ProducerBatch {
            producer_id,
            producer_epoch: i16::from_be_bytes(header_field(header, field::PRODUCER_EPOCH)),
            base_sequence: i32::from_be_bytes(header_field(header, field::BASE_SEQUENCE)),
            last_offset_delta: i32::from_be_bytes(header_field(header, field::LAST_OFFSET_DELTA)),
        };
        let base_offset = i64::from_be_bytes(header_field(header, field::BASE_OFFSET)).max(0) as u64;
        producers.record(&batch, base_offset, base_offset + batch.last_offset_delta.max(0) as u64);
    }
}

/// `N` bytes of a batch header at `at` (a field of `abi::batch::field`).
fn header_field<const N: usize>(header: &[u8; abi::batch::BATCH_HEADER_BYTES], at: usize) -> [u8; N] {
    let mut bytes = [0u8; N];
    bytes.copy_from_slice(&header[at..at + N]);
    bytes
}

fn entries(record: &TopicRecord) -> Vec<(String, String)> {
    record.configs.clone().into_iter().collect()
}

fn open_slot(
    log_dir: &LogDir,
    offline: &HashMap<String, String>,
    topic: &str,
    partition: u32,
    config: &LogConfig,
) -> Slot {
    let name = format!("{topic}-{partition}");
    if let Some(reason) = offline.get(&name) {
        return Slot::Offline { reason: format!("partition {name} is offline: {reason}") };
    }
    let opened = match log_dir.partition(&name) {
        Some(open) => Ok(open),
        None => log_dir.create_partition_with(topic, partition, config.clone()),
    };
    match opened.map_err(ApiError::from).and_then(|partition| Ok((rebuild_producer_states(&partition)?, partition))) {
        Ok((producers, partition)) => Slot::Online { partition, producers: Mutex::new(producers) },
        Err(error) => {
            tracing::error!(partition = %name, %error, "partition offline");
            Slot::Offline { reason: format!("partition {name} is offline: {error}") }
        }
    }
}

/// Checks every batch header (the CRC is checked by the append) and returns the
/// producer fields when the request comes from an idempotent producer, which
/// must send exactly one batch per request.
fn check_batches(bytes: &[u8]) -> Result<Option<ProducerBatch>, ApiError> {
    let corrupt = |error: abi::batch::BatchError| ApiError::new(ErrorCode::CorruptMessage, error.to_string());
    let (first, mut rest) = BatchView::split_first(bytes).map_err(corrupt)?;
    let mut batch = first;
    loop {
        match batch.attributes().compression() {
            Ok(Compression::None | Compression::Lz4 | Compression::Zstd) => {}
            Ok(other) => {
                let message = format!("{} compression is not supported (use none, lz4 or zstd)", other.name());
                return Err(ApiError::new(ErrorCode::UnsupportedCompression, message));
            }
            Err(error) => return Err(corrupt(error)),
        }
        if rest.is_empty() {
            break;
        }
        (batch, rest) = BatchView::split_first(rest).map_err(corrupt)?;
    }
    if first.producer_id() < 0 {
        return Ok(None);
    }
    if first.size_bytes() != bytes.len() {
        let message = "an idempotent produce request must carry exactly one batch";
        return Err(ApiError::new(ErrorCode::InvalidRequest, message));
    }
    Ok(Some(ProducerBatch {
        producer_id: first.producer_id(),
        producer_epoch: first.producer_epoch(),
        base_sequence: first.base_sequence(),
        last_offset_delta: first.last_offset_delta(),
    }))
}

/// Internal topics (`__…`): written by the broker only, left out of listings.
fn is_internal(topic: &str) -> bool {
    topic.starts_with("__")
}

fn storage_error(error: MetadataError) -> ApiError {
    ApiError::new(ErrorCode::StorageError, error.to_string())
}

fn shutting_down() -> ApiError {
    ApiError::new(ErrorCode::NotLeaderOrFollower, "the broker is shutting down")
}

/// `host:port` → parts (validated by the config already; port 0 until bound).
fn split_host_port(address: &str) -> (String, u16) {
    match address.rsplit_once(':') {
        Some((host, port)) => (host.trim_matches(['[', ']']).to_owned(), port.parse().unwrap_or(0)),
        None => (address.to_owned(), 0),
    }
}

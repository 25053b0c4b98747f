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
//!
//! By concern, one file each: [`requests`] (the values served), `topics`
//! (topics, configs, metadata), `data` (produce, fetch, list offsets),
//! `producer_ids`, `groups` (consumer groups), `plugins` (plugins and transforms).

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
use crate::plugins::{FailurePolicy, Plugins};
use crate::transforms::{TransformHost, TransformSpec, TransformStatus, Transforms};
use broker_core::group::assignor::TopicPartition as GroupPartition;
use broker_core::group::coordinator::{
    CommitRequest, CoordinatorConfig, GroupDescription, GroupState, HeartbeatRequest, HeartbeatResponse,
};
use broker_core::group::record::OffsetValue;

mod data;
mod groups;
mod plugins;
mod producer_ids;
pub mod requests;
mod topics;

pub use requests::*;

use data::rebuild_producer_states;
use producer_ids::ProducerIdBlock;

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

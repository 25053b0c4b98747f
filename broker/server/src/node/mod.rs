//! [`Node`]: one broker's state and every request it serves, as plain Rust values.
//!
//! The RPC edge ([`crate::rpc`]) decodes Cap'n Proto into the request types here and
//! encodes the answers back; nothing below this line knows about Cap'n Proto. `Node`
//! is `Send + Sync` and shared by every connection thread.
//!
//! State: this broker's member of the controller quorum ([`Controller`]), whose
//! applied image says which topics exist, where their partitions live and who
//! leads them; the [`LogDir`] with every local partition log; per partition an
//! idempotent-producer table. Admin changes go to the active controller first and
//! the local partitions follow the applied image (`reconcile.rs`), so a crash in
//! between leaves metadata the next start reconciles.
//!
//! Produce: validate the batch headers (CRC, size, codec), run the idempotence
//! check and append under the partition's producer lock, then wait for durability
//! as `acks` asks. Fetch: read committed batches (below the high watermark); long-
//! poll until `min_bytes` are there or `max_wait` passed.
//!
//! Produce, fetch and list offsets are served by a partition's leader only (others
//! answer `NotLeaderOrFollower`), stamping the leader epoch the controller gave.
//! Without replication, a partition's ISR is its leader alone.
//!
//! By concern, one file each: [`requests`] (the values served), `topics`
//! (topics, configs, metadata), `data` (produce, fetch, list offsets),
//! `producer_ids`, `groups` (consumer groups), `plugins` (plugins and transforms),
//! [`membership`] (registration, heartbeats, controlled shutdown, cluster
//! status), `reconcile` (local partitions follow the image), `upgrade` (a
//! single-node data directory from before the controller).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use abi::batch::{BatchView, Compression};
use abi::ErrorCode;
use broker_core::log::topic_config::{apply_topic_configs, effective_topic_configs};
use broker_core::log::{FlushPolicy, LogConfig};
use broker_core::producer_state::{ProducerBatch, ProducerStates, SequenceCheck};

use crate::config::{BrokerConfig, Limits};
use crate::controller::membership::BrokerHeartbeat;
use crate::controller::network::{RaftCallKind, RaftTransport};
use crate::controller::{Controller, ControllerStartError, NodeId, RaftTiming, SubmitError};
use crate::data_dir_lock::{DataDirLock, DataDirLockError};
use crate::environment::Environment;
use crate::error::ApiError;
use crate::groups::{
    GroupCoordinators, CONSUMER_OFFSETS_PARTITIONS, CONSUMER_OFFSETS_REPLICATION_FACTOR, CONSUMER_OFFSETS_TOPIC,
};
use crate::log_dir::{parse_partition_dir, validate_topic_name, LogDir, LogDirConfig, PartitionDirFate};
use crate::metadata_store::MetadataError;
use crate::partition::{lock, Partition};
use crate::plugins::{hook_name, validate_name, CodeState, FailurePolicy, PluginSummary, Plugins, StoredUpload};
use crate::transforms::{
    CheckpointCall, LocalStatus, PartitionProgress, TransformHost, TransformSpec, TransformStatus, Transforms, Wanted,
};
use broker_core::cluster::{
    AttachmentEntry, BrokerRegistration, ControllerError, ControllerRequest, ControllerResponse, IsrChoice,
    PluginEntry, TopicImage, TransformEntry, TransformImage,
};
use broker_core::group::assignor::TopicPartition as GroupPartition;
use broker_core::group::coordinator::{
    CommitRequest, CoordinatorConfig, GroupDescription, GroupState, HeartbeatRequest, HeartbeatResponse,
};
use broker_core::group::record::OffsetValue;

mod data;
mod groups;
pub mod membership;
mod plugins;
pub use plugins::BeginUpload;
mod producer_ids;
mod reconcile;
mod replication;
pub mod requests;
mod topics;
mod upgrade;
pub mod uploads;

pub use membership::{BrokerStatus, ClusterStatus};
pub use requests::*;

use data::rebuild_producer_states;
use producer_ids::ProducerIdBlock;

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
    Plugins(#[from] crate::plugins::PluginsError),
    #[error("transforms: {0}")]
    Transforms(crate::transforms::TransformsError),
    #[error(transparent)]
    ControllerStart(#[from] ControllerStartError),
    #[error("the controller quorum did not answer: {0}")]
    Controller(String),
    #[error("storage: {0}")]
    Storage(String),
}

/// One partition slot of a topic, as this broker holds it (a clone shares the
/// partition and its producer table).
#[derive(Clone, Debug)]
enum Slot {
    /// A replica here, with its log.
    /// Whether this broker leads it, and in which leader epoch, is the
    /// partition's role (`Partition::take_role`, from the cluster metadata).
    Online {
        partition: Partition,
        producers: Arc<Mutex<ProducerStates>>,
        /// Held by every produce from before its produce interceptors run
        /// until it is appended: requests for the partition append in the
        /// order they arrived although plugin calls run off this thread.
        produce_order: Arc<tokio::sync::Mutex<()>>,
    },
    /// A replica here whose log could not be opened (recovery found corruption,
    /// or its directory belongs to no topic).
    Offline { reason: String },
    /// Not a replica here.
    Remote,
}

/// A topic as this broker holds it: the cluster's topic id and configs, and a
/// slot per partition.
#[derive(Debug)]
struct Topic {
    topic_id: u64,
    configs: Mutex<BTreeMap<String, String>>,
    slots: Vec<Slot>,
}

/// See the module docs.
#[derive(Debug)]
pub struct Node {
    broker: BrokerEntry,
    /// Unique per start: tells the controller a restart from a retry.
    incarnation: String,
    /// `broker.rack`, told to the controller at registration.
    rack: Option<String>,
    /// This broker's epoch (the offset of its registration).
    broker_epoch: std::sync::atomic::AtomicU64,
    /// Set by a controlled shutdown: no more heartbeats or unfencing.
    stopping: std::sync::atomic::AtomicBool,
    /// Whether the image's registration of this broker id is this start's own
    /// (another process registering the id makes this one lead nothing).
    registration_current: std::sync::atomic::AtomicBool,
    limits: Limits,
    log_defaults: LogConfig,
    environment: Environment,
    data_dir: std::path::PathBuf,
    log_dir: Mutex<Option<LogDir>>,
    controller: Controller,
    topics: RwLock<BTreeMap<String, Arc<Topic>>>,
    /// One reconciliation at a time.
    reconciling: Mutex<()>,
    /// Replica directories of live topics that the image applied at start-up
    /// does not place here (a reassignment moved them away — or the image is
    /// behind): left alone until this broker's registration is applied, then
    /// deleted if the image still places them elsewhere.
    moved_away: Mutex<Vec<String>>,
    producer_ids: tokio::sync::Mutex<ProducerIdBlock>,
    /// The consumer groups of the `__consumer_offsets` partitions led here.
    groups: GroupCoordinators,
    plugins: Arc<Plugins>,
    /// Wakes `fetch_plugins` when a registered plugin's bytes are missing.
    plugins_wanted: tokio::sync::Notify,
    /// Plugin uploads arriving in chunks.
    uploads: Mutex<uploads::PendingUploads>,
    transforms: Transforms,
    /// Picks the partition of keyless records in `partition = -1` produces.
    round_robin: std::sync::atomic::AtomicU64,
    /// Held from `open` until `shutdown` has closed every partition (or the node
    /// is dropped): no other process may open the data directory meanwhile.
    data_dir_lock: Mutex<Option<DataDirLock>>,
    clock: Arc<dyn broker_core::clock::Clock>,
    /// Calls to other brokers on the data path (see [`Node::call_peer`]),
    /// started at the first one.
    data_links: std::sync::OnceLock<Option<crate::controller::broker_link::BrokerLinks>>,
    /// Replication's time base (monotonic: a wall-clock step must not push
    /// followers out of ISRs); see [`Node::replication_now_ms`].
    started: std::time::Instant,
    /// `replication.replica_lag_time_max_ms`.
    replica_lag_time_max_ms: u64,
}

/// How long start-up waits for the controller quorum (an election among voters
/// that start one by one).
const CONTROLLER_START_TIMEOUT: Duration = Duration::from_secs(120);
/// How often a broker retries fetching a registered plugin it lacks.
const PLUGIN_FETCH_RETRY: Duration = Duration::from_secs(1);
/// How long an admin request waits for the controller quorum.
const CONTROLLER_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl Node {
    /// Opens the data directory on real files with the system clock: see
    /// [`Node::open_in`].
    pub async fn open(config: &BrokerConfig) -> Result<Node, NodeError> {
        // Even a quorum of one reaches other brokers: those that are not voters
        // join it as learners, and it replicates the metadata log to them.
        let links = crate::controller::broker_link::BrokerLinks::start()
            .map_err(|error| NodeError::Storage(format!("starting the broker link thread: {error}")))?;
        let transport: Arc<dyn RaftTransport> = Arc::new(links);
        Node::open_in(config, Environment::real(), transport).await
    }

    /// Opens the node on the given storage and clock (a simulated broker runs on
    /// `MemStorage` and a `ManualClock`), reaching other voters through
    /// `transport`: the controller first (initialising a new quorum once), this
    /// broker's registration, the upgrade of a single-node data directory, then
    /// every local partition as the cluster metadata says. Only real files are
    /// locked against a second process.
    pub async fn open_in(
        config: &BrokerConfig,
        environment: Environment,
        transport: Arc<dyn RaftTransport>,
    ) -> Result<Node, NodeError> {
        let data_dir_lock = Node::lock_data_dir(config, &environment)?;
        let controller = Node::open_controller(config, &environment, transport).await?;
        Node::start(config, environment, controller, data_dir_lock).await
    }

    /// Locks the data directory against a second process (real files only), and
    /// checks it belongs to this broker id (`broker.json`, written on first use):
    /// the Raft log and partitions of one broker never start under another's id.
    pub fn lock_data_dir(config: &BrokerConfig, environment: &Environment) -> Result<Option<DataDirLock>, NodeError> {
        let lock = match environment.is_real() {
            true => Some(DataDirLock::acquire(&config.data_dir)?),
            false => None,
        };
        check_identity(&*environment.storage, &config.data_dir, config.broker_id)?;
        Ok(lock)
    }

    /// Opens this broker's member of the controller quorum (its Raft log and
    /// state machine). It takes part in elections at once, before the rest of
    /// the broker opens: in a cluster, the other voters need it to elect.
    pub async fn open_controller(
        config: &BrokerConfig,
        environment: &Environment,
        transport: Arc<dyn RaftTransport>,
    ) -> Result<Controller, NodeError> {
        let advertised = config.advertised_listener.clone().unwrap_or_else(|| config.listen.clone());
        let voters: BTreeMap<NodeId, String> = match config.controller.voters.is_empty() {
            true => BTreeMap::from([(config.broker_id as NodeId, advertised)]),
            false => config.controller.voters.iter().map(|voter| (voter.id as NodeId, voter.address.clone())).collect(),
        };
        let timing = RaftTiming {
            heartbeat_ms: config.controller.raft_heartbeat_ms,
            election_timeout_ms: (
                config.controller.raft_election_timeout_ms,
                2 * config.controller.raft_election_timeout_ms,
            ),
            ..RaftTiming::default()
        };
        let storage = environment.storage.clone();
        Ok(Controller::open(storage, &config.data_dir, config.broker_id as NodeId, voters, timing, transport).await?)
    }

    /// Opens the rest of the broker on its `controller` (see [`Node::open_in`]).
    pub async fn start(
        config: &BrokerConfig,
        environment: Environment,
        controller: Controller,
        data_dir_lock: Option<DataDirLock>,
    ) -> Result<Node, NodeError> {
        let advertised = config.advertised_listener.clone().unwrap_or_else(|| config.listen.clone());
        let (host, port) = split_host_port(&advertised);
        let node = Node {
            broker: BrokerEntry { id: config.broker_id, host, port },
            incarnation: incarnation(&*environment.clock),
            rack: config.controller.rack.clone(),
            broker_epoch: std::sync::atomic::AtomicU64::new(0),
            stopping: std::sync::atomic::AtomicBool::new(false),
            registration_current: std::sync::atomic::AtomicBool::new(false),
            limits: config.limits.clone(),
            log_defaults: config.log.clone(),
            data_dir: config.data_dir.clone(),
            log_dir: Mutex::new(None),
            controller,
            topics: RwLock::new(BTreeMap::new()),
            reconciling: Mutex::new(()),
            moved_away: Mutex::new(Vec::new()),
            producer_ids: tokio::sync::Mutex::new(ProducerIdBlock::default()),
            groups: GroupCoordinators::new(CoordinatorConfig::default(), environment.clock.clone()),
            plugins: Arc::new(Plugins::open(
                &config.data_dir.join("plugins"),
                config.plugin_limits(),
                environment.clone(),
            )?),
            plugins_wanted: tokio::sync::Notify::new(),
            uploads: Mutex::new(uploads::PendingUploads::new(config.plugins.upload_bytes_max)),
            transforms: Transforms::open(&config.data_dir.join("plugins").join("transforms"), environment.clone())
                .map_err(NodeError::Transforms)?,
            round_robin: std::sync::atomic::AtomicU64::new(0),
            data_dir_lock: Mutex::new(data_dir_lock),
            clock: environment.clock.clone(),
            data_links: std::sync::OnceLock::new(),
            started: std::time::Instant::now(),
            replica_lag_time_max_ms: config.replication.replica_lag_time_max_ms,
            environment,
        };
        node.join_cluster().await?;
        let legacy = node.upgrade_legacy_metadata().await?;
        node.open_log_dir(config, &legacy)?;
        // A topic that cannot follow is logged and skipped: it never keeps the
        // broker (and every other topic) from starting.
        node.reconcile_logged();
        legacy.finish(&node)?;
        node.upgrade_plugin_registry().await?;
        node.follow_plugins().await;
        node.upgrade_transforms().await?;
        // Partitions open: now this broker may lead, and the cluster's internal
        // topics can be placed over the brokers that may.
        node.unfence().await?;
        node.ensure_internal_topics().await?;
        Ok(node)
    }

    /// [`Node::reconcile`], its error logged (the topics that could follow did).
    fn reconcile_logged(&self) {
        if let Err(error) = self.reconcile() {
            tracing::error!(%error, "a topic does not follow the cluster metadata; the others do");
        }
    }

    /// The controller quorum member of this broker.
    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    /// This broker's id.
    pub fn broker_id(&self) -> i32 {
        self.broker.id
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

    /// Stops the controller's Raft node (after [`Node::shutdown`]).
    pub async fn stop_controller(&self) {
        self.controller.shutdown().await;
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

    /// Carries a request out on the active controller and waits until this
    /// broker's image has applied it.
    async fn request(&self, request: &ControllerRequest) -> Result<ControllerResponse, ApiError> {
        let response =
            self.controller.request_until(request, CONTROLLER_REQUEST_TIMEOUT).await.map_err(controller_error)?;
        if let Some(offset) = response.last_offset {
            if !self.controller.wait_applied_offset(offset, CONTROLLER_REQUEST_TIMEOUT).await {
                let message = format!("this broker did not apply metadata offset {offset} in time");
                return Err(ApiError::new(ErrorCode::RequestTimedOut, message));
            }
        }
        Ok(response)
    }
}

impl Node {
    /// One call to another broker on the data path (plugin bytes, transforms'
    /// forwarded produces and status): over links of its own (a thread and a
    /// connection per peer), so data never queues behind, or cuts the
    /// connections of, the controller quorum's calls. A broker on simulated
    /// storage uses the controller's transport.
    pub(super) async fn call_peer(
        &self,
        broker_id: i32,
        address: &str,
        kind: RaftCallKind,
        payload: Vec<u8>,
    ) -> Result<Vec<u8>, crate::controller::network::TransportError> {
        let links = self.data_links.get_or_init(|| match self.environment.is_real() {
            true => crate::controller::broker_link::BrokerLinks::start()
                .inspect_err(|error| tracing::warn!(%error, "data links not started; using the controller's"))
                .ok(),
            false => None,
        });
        match links {
            Some(links) => links.call(broker_id as NodeId, address, kind, payload).await,
            None => self.controller.call_broker(broker_id as NodeId, address, kind, payload).await,
        }
    }
}

/// A peer call's payload with bytes after its header:
/// `[u32 LE header length][header JSON][body]` (forwarded produces, replica
/// fetch answers).
fn frame(header: &impl serde::Serialize, body: &[u8]) -> Vec<u8> {
    let header = serde_json::to_vec(header).unwrap_or_default();
    let mut bytes = Vec::with_capacity(4 + header.len() + body.len());
    bytes.extend_from_slice(&(header.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&header);
    bytes.extend_from_slice(body);
    bytes
}

/// [`frame`] read back: the header and the body; `None` when malformed.
fn unframe<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Option<(T, &[u8])> {
    let length = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let header = serde_json::from_slice(bytes.get(4..4usize.checked_add(length)?)?).ok()?;
    Some((header, &bytes[4 + length..]))
}

/// An `ApiError` carried in a peer call's answer: its code number and message.
type PeerError = (u16, String);

fn to_peer_error(error: &ApiError) -> PeerError {
    (error.code as u16, error.message.clone())
}

fn from_peer_error((code, message): PeerError) -> ApiError {
    ApiError::new(ErrorCode::from_u16(code).unwrap_or(ErrorCode::UnknownServerError), message)
}

impl Node {
    /// Answers a call another broker makes to this broker rather than to its
    /// controller (`RaftCallKind::is_broker_call`): plugin bytes, a forwarded
    /// produce, a follower's fetch or epoch lookup, transform status.
    pub async fn answer_broker_call(&self, kind: RaftCallKind, payload: Vec<u8>) -> Result<Vec<u8>, ApiError> {
        match kind {
            RaftCallKind::FetchPlugin => {
                let (plugins, digest) = (self.plugins.clone(), String::from_utf8_lossy(&payload).into_owned());
                plugins::blocking(move || plugins.wasm(&digest)).await
            }
            RaftCallKind::Produce => Ok(self.produce_forwarded(&payload).await),
            RaftCallKind::ReplicaFetch => Ok(self.replica_fetch(&payload).await),
            RaftCallKind::EpochEndOffset => Ok(self.epoch_end_offset(&payload)),
            RaftCallKind::Checkpoint => Ok(self.checkpoint_forwarded(&payload).await),
            // In-memory progress and high watermarks: cheap enough inline.
            RaftCallKind::TransformStatus => {
                Ok(serde_json::to_vec(&self.transforms.local_status(self)).unwrap_or_default())
            }
            other => Err(ApiError::new(ErrorCode::InvalidRequest, format!("{} is a controller call", other.name()))),
        }
    }
}

/// The broker id a data directory belongs to.
const IDENTITY_FILE: &str = "broker.json";

#[derive(serde::Serialize, serde::Deserialize)]
struct Identity {
    node_id: i32,
}

fn check_identity(
    storage: &dyn broker_core::storage::Storage,
    data_dir: &std::path::Path,
    node_id: i32,
) -> Result<(), NodeError> {
    let path = data_dir.join(IDENTITY_FILE);
    let failed = |error: String| NodeError::Storage(format!("{}: {error}", path.display()));
    storage.create_dir_all(data_dir).map_err(|error| failed(error.to_string()))?;
    match broker_core::storage::read_file(storage, &path).map_err(|error| failed(error.to_string()))? {
        Some(bytes) => {
            let identity: Identity = serde_json::from_slice(&bytes).map_err(|error| failed(error.to_string()))?;
            if identity.node_id != node_id {
                return Err(NodeError::Storage(format!(
                    "{} belongs to broker {}, not to broker {node_id} (--node-id): start broker {} on it, or \
                     give this broker its own data directory",
                    data_dir.display(),
                    identity.node_id,
                    identity.node_id
                )));
            }
            Ok(())
        }
        None => {
            let bytes = serde_json::to_vec(&Identity { node_id }).map_err(|error| failed(error.to_string()))?;
            broker_core::storage::replace_file(storage, &path, &bytes).map_err(|error| failed(error.to_string()))
        }
    }
}

/// A value unique to this start of the process.
fn incarnation(clock: &dyn broker_core::clock::Clock) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STARTS: AtomicU64 = AtomicU64::new(0);
    let count = STARTS.fetch_add(1, Ordering::Relaxed);
    format!("{}-{}-{count}", clock.now_ms(), std::process::id())
}

/// A controller answer as the client is told it.
fn controller_error(error: SubmitError<ControllerError>) -> ApiError {
    match error {
        SubmitError::Refused(refused) => {
            let code = match &refused {
                ControllerError::TopicExists(_) => ErrorCode::TopicAlreadyExists,
                ControllerError::UnknownTopic(_) => ErrorCode::UnknownTopicOrPartition,
                ControllerError::InvalidPartitions(_) => ErrorCode::InvalidPartitions,
                ControllerError::InvalidReplicationFactor { .. } => ErrorCode::InvalidReplicationFactor,
                ControllerError::UnknownBroker(_) | ControllerError::StaleBrokerEpoch { .. } => {
                    ErrorCode::InvalidRequest
                }
                ControllerError::UnknownPlugin(_) | ControllerError::NotAttached(_) => ErrorCode::PluginNotFound,
                ControllerError::PluginInUse(_) => ErrorCode::PluginInUse,
                ControllerError::PluginHookMismatch(_) => ErrorCode::InvalidPlugin,
                ControllerError::AttachmentConflict(_)
                | ControllerError::InvalidPluginEntry(_)
                | ControllerError::InvalidTransform(_)
                | ControllerError::TopicInUse(_)
                | ControllerError::InvalidIsr(_)
                | ControllerError::InvalidReplicaAssignment(_) => ErrorCode::InvalidRequest,
                ControllerError::StaleLeader(_) | ControllerError::StalePartitionEpoch(_) => {
                    ErrorCode::NotLeaderOrFollower
                }
                ControllerError::UnknownTransform(_) => ErrorCode::PluginNotFound,
            };
            ApiError::new(code, refused.to_string())
        }
        SubmitError::NotController { .. } | SubmitError::Failed(_) => {
            ApiError::new(ErrorCode::RequestTimedOut, error.to_string())
        }
        SubmitError::Rejected(_) => ApiError::new(ErrorCode::InvalidRequest, error.to_string()),
    }
}

impl Node {
    /// Milliseconds since this node started, from 1 (replication's clock).
    fn replication_now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64 + 1
    }
}

impl Slot {
    fn partition(&self) -> Option<&Partition> {
        match self {
            Slot::Online { partition, .. } => Some(partition),
            Slot::Offline { .. } | Slot::Remote => None,
        }
    }

    /// See `Slot::Online::produce_order`.
    fn produce_order(&self) -> Option<&Arc<tokio::sync::Mutex<()>>> {
        match self {
            Slot::Online { produce_order, .. } => Some(produce_order),
            Slot::Offline { .. } | Slot::Remote => None,
        }
    }

    /// The partition and its producer table, when this broker leads it, with the
    /// leader epoch to stamp; else why not.
    fn led(&self) -> Result<(&Partition, &Mutex<ProducerStates>, i32), ApiError> {
        match self {
            Slot::Online { partition, producers, .. } => match partition.leader_epoch() {
                Some(leader_epoch) => Ok((partition, producers, leader_epoch)),
                None => Err(not_leader(partition.name())),
            },
            Slot::Offline { reason } => Err(ApiError::new(ErrorCode::StorageError, reason.clone())),
            Slot::Remote => Err(ApiError::new(ErrorCode::NotLeaderOrFollower, "this broker holds no replica of it")),
        }
    }
}

fn not_leader(partition: &str) -> ApiError {
    ApiError::new(ErrorCode::NotLeaderOrFollower, format!("this broker does not lead {partition}"))
}

/// Internal topics (`__…`): written by the broker only, left out of listings.
fn is_internal(topic: &str) -> bool {
    topic.starts_with("__")
}

/// `host:port` → parts (validated by the config already; port 0 until bound).
fn split_host_port(address: &str) -> (String, u16) {
    match address.rsplit_once(':') {
        Some((host, port)) => (host.trim_matches(['[', ']']).to_owned(), port.parse().unwrap_or(0)),
        None => (address.to_owned(), 0),
    }
}

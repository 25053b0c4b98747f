//! Transforms: a transform plugin run by the broker over every committed record
//! of an input topic, one task per input partition, producing to up to 8 output
//! topics.
//!
//! Deployments live in the cluster metadata (`DeployTransform` and friends);
//! every broker follows them ([`Transforms::follow`]) and runs the tasks of the
//! input partitions it leads. A task reads its partition here and writes each
//! output batch to the leader of its output partition, here or on another
//! broker (`Node` forwards it).
//!
//! Exactly once, across restarts and failovers: each (deployment, input
//! partition) produces with its own idempotent producer id (in the
//! deployment), one batch per output partition per input batch, and commits a
//! checkpoint of the next input offset together with the next sequence number
//! of every output partition after the outputs are acknowledged; it goes on
//! only once that commit succeeded. Where it starts, replays or jumps to (over
//! input deleted by retention, or past a log end) is committed before it
//! produces from there; a replay or a jump is a new run, with the producer
//! epoch one higher and the sequences from 0, so no batch of an earlier run
//! (by this task before a crash, or by a deposed leader's) is ever taken for
//! one of the new run, and the earlier run's stragglers are refused
//! (`InvalidProducerEpoch`). After a crash or a failover the task
//! resumes from the last checkpoint; plugins are deterministic (no clock or
//! randomness) and replicas hold the same committed records at the same
//! offsets, so the batch it re-runs is the same, with the same sequence
//! numbers, and the output leaders answer it as a cached duplicate. Anything
//! else an output leader refuses (`DuplicateSequence` included) holds the
//! partition with an error instead of being taken as written.
//!
//! Checkpoints live in replicated storage: each is the offset committed by
//! group [`checkpoint_group`] for the input partition, in `__consumer_offsets`,
//! with the sequences in its metadata, written through the group's
//! coordinator (on this broker or forwarded to it). A task starts by claiming
//! its checkpoint for the input partition's leader epoch it runs under
//! (`CheckpointCall::Load`), and every commit carries that epoch; the
//! coordinator refuses one older than the stored one (`FencedLeaderEpoch`). So
//! a task left on a deposed leader commits nothing after its successor
//! started, and stops at its next commit (or, when its outputs are refused,
//! at the commit of its last checkpoint it then retries): it can have produced
//! at most the one batch in flight past the successor's starting point, which
//! the successor re-runs as a duplicate. A checkpoint names the producer id it belongs to, and the
//! group is named after the deployment's producer ids, so one left by an older
//! deployment of the same name is never taken for this one's. Brokers before
//! replication kept checkpoints as files; a task with no replicated
//! checkpoint takes its file's, once.
//!
//! Output partitions come from the output topic's partitioner: its partitioner
//! plugin if it has one, else Kafka murmur2 of the output key — so a transform
//! can re-key records; records without a key (and no plugin's choice) go to the
//! input partition's number modulo the output's partition count.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use abi::batch::{BatchBuilder, BatchView};
use abi::ErrorCode;
use broker_core::cluster::{TransformEntry, TransformImage};
use plugin_host::{PackedBatch, Plugin, PluginError, TransformOutcome};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::environment::Environment;
use crate::error::ApiError;
use crate::node::{Acks, Fetched, OffsetQuery, PartitionFetch, ProduceRequest, Produced};
use crate::partition::lock;
use crate::plugin_pool::{PluginPool, PoolLimits};
use crate::plugins::{pack_view, read_whole, write_atomically};

/// Where single-node brokers kept their deployments, before the cluster metadata.
const LEGACY_RECORD_FILE: &str = "transforms.json";
const FETCH_BYTES: u32 = 1 << 20;
const FETCH_WAIT_MS: u32 = 500;
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// `start`/replay values: the earliest offset, or the high watermark.
pub const EARLIEST: i64 = -2;
pub const LATEST: i64 = -1;

/// What a deployment is asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransformSpec {
    pub name: String,
    pub plugin: String,
    pub input_topic: String,
    pub output_topics: Vec<String>,
    pub start: i64,
    pub config: Vec<(String, String)>,
    /// See [`TransformEntry::dead_letter_topic`].
    pub dead_letter_topic: Option<String>,
}

/// A deployment as a single-node broker kept it (`transforms.json`), moved
/// into the cluster metadata at the first start after the upgrade.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LegacyDeployment {
    pub name: String,
    pub plugin: String,
    pub input_topic: String,
    pub output_topics: Vec<String>,
    pub start: i64,
    pub config: Vec<(String, String)>,
    pub paused: bool,
    /// Input partition → its producer id.
    pub producer_ids: BTreeMap<i32, i64>,
}

/// Where a task is: the next input offset, and the next sequence number of
/// each output partition it wrote to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Checkpoint {
    next_offset: i64,
    /// (output topic, partition) → the next sequence number.
    sequences: BTreeMap<(String, i32), i32>,
    /// The latest replay this partition carried out (see `TransformImage::replay`).
    replay_generation: u64,
    /// The producer epoch of its outputs: one more at every replay and every
    /// jump over missing input, with the sequences starting over, so batches
    /// of the run before (by this task before a crash, or by a deposed
    /// leader's) are never taken for the new run's.
    producer_epoch: i16,
    /// Input records processed and output records produced since the
    /// deployment (replays included): kept with the checkpoint, so they
    /// survive restarts and failovers.
    processed: u64,
    emitted: u64,
    dead_lettered: u64,
}

/// A checkpoint as committed: the metadata of the group's offset (the offset
/// is `next_offset`), kept small (it is bounded by the coordinator).
#[derive(Debug, Serialize, Deserialize)]
struct StoredCheckpoint {
    producer_id: i64,
    replay_generation: u64,
    #[serde(default)]
    producer_epoch: i16,
    /// Output topic → (partition, next sequence number).
    sequences: BTreeMap<String, Vec<(i32, i32)>>,
    #[serde(default)]
    processed: u64,
    #[serde(default)]
    emitted: u64,
    #[serde(default)]
    dead_lettered: u64,
}

/// A checkpoint file of a broker from before replication.
#[derive(Debug, Default, Serialize, Deserialize)]
struct LegacyCheckpoint {
    next_offset: i64,
    /// "topic/partition" → the next sequence number.
    sequences: BTreeMap<String, i32>,
    /// The producer id of the deployment it belongs to (none: written before
    /// the upgrade, and rewritten by it).
    #[serde(default)]
    producer_id: Option<i64>,
    #[serde(default)]
    replay_generation: u64,
}

impl Checkpoint {
    fn to_metadata(&self, producer_id: i64) -> String {
        let mut sequences: BTreeMap<String, Vec<(i32, i32)>> = BTreeMap::new();
        for ((topic, partition), sequence) in &self.sequences {
            sequences.entry(topic.clone()).or_default().push((*partition, *sequence));
        }
        let stored = StoredCheckpoint {
            producer_id,
            replay_generation: self.replay_generation,
            producer_epoch: self.producer_epoch,
            sequences,
            processed: self.processed,
            emitted: self.emitted,
            dead_lettered: self.dead_lettered,
        };
        serde_json::to_string(&stored).unwrap_or_default()
    }

    /// The checkpoint committed as `offset` with `metadata`, if it belongs to
    /// `producer_id`.
    fn from_stored(offset: i64, metadata: &str, producer_id: i64) -> Option<Checkpoint> {
        let stored: StoredCheckpoint = serde_json::from_str(metadata).ok()?;
        let sequences = stored.sequences.into_iter().flat_map(|(topic, partitions)| {
            partitions.into_iter().map(move |(partition, sequence)| ((topic.clone(), partition), sequence))
        });
        (stored.producer_id == producer_id).then(|| Checkpoint {
            next_offset: offset,
            sequences: sequences.collect(),
            replay_generation: stored.replay_generation,
            producer_epoch: stored.producer_epoch,
            processed: stored.processed,
            emitted: stored.emitted,
            dead_lettered: stored.dead_lettered,
        })
    }

    fn from_legacy(legacy: LegacyCheckpoint, producer_id: i64) -> Option<Checkpoint> {
        let sequences = legacy.sequences.into_iter().filter_map(|(key, sequence)| {
            let (topic, partition) = key.rsplit_once('/')?;
            Some(((topic.to_owned(), partition.parse().ok()?), sequence))
        });
        (legacy.producer_id == Some(producer_id)).then(|| Checkpoint {
            next_offset: legacy.next_offset,
            sequences: sequences.collect(),
            replay_generation: legacy.replay_generation,
            producer_epoch: 0,
            processed: 0,
            emitted: 0,
            dead_lettered: 0,
        })
    }

    /// Goes on from `offset` as a new run (see `producer_epoch`).
    fn restart_at(&mut self, offset: i64) -> Result<(), TransformsError> {
        self.producer_epoch = self.producer_epoch.checked_add(1).ok_or_else(|| {
            invalid("this input partition was replayed 32,767 times; deploy the transform again to go on")
        })?;
        self.next_offset = offset;
        self.sequences.clear();
        Ok(())
    }
}

/// What a task found to resume from.
enum Loaded {
    Committed(Checkpoint),
    /// A checkpoint file of a broker from before replication.
    Legacy(Checkpoint),
    Nothing,
}

/// The group whose committed offsets are the checkpoints of deployment
/// `entry` (readable with `weir group describe`, refused to clients' writes).
pub fn checkpoint_group(entry: &TransformEntry) -> String {
    format!("{CHECKPOINT_GROUP_PREFIX}{}.{}", entry.name, entry.producer_ids.first().copied().unwrap_or(-1))
}

/// Groups named so hold transform checkpoints.
pub const CHECKPOINT_GROUP_PREFIX: &str = "__transform.";

/// A checkpoint operation, carried out by the coordinator of its group (see
/// [`TransformHost::checkpoint`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckpointCall {
    /// The offset and metadata committed for `topic`-`partition`, if any,
    /// claimed for `leader_epoch`: commits of older epochs are refused from
    /// then on (`GroupCoordinators::claim_offset`).
    Load { group_id: String, topic: String, partition: u32, leader_epoch: i32 },
    /// Commits them, fenced by `leader_epoch`.
    Save { group_id: String, topic: String, partition: u32, offset: i64, metadata: String, leader_epoch: i32 },
    /// Deletes the group (its deployment is gone); no group is no error.
    Delete { group_id: String },
}

/// Progress of one input partition, shared with its task.
#[derive(Debug, Default)]
struct Progress {
    next_offset: AtomicI64,
    processed: AtomicU64,
    emitted: AtomicU64,
    dead_lettered: AtomicU64,
}

/// Pause, and the latest replay (its generation and offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Control {
    paused: bool,
    generation: u64,
    replay_from: i64,
}

impl Control {
    fn of(transform: &TransformImage) -> Control {
        Control { paused: transform.paused, generation: transform.replay.0, replay_from: transform.replay.1 }
    }
}

/// A deployment this broker runs tasks of.
struct Running {
    entry: TransformEntry,
    control: watch::Sender<Control>,
    state: Arc<Mutex<String>>,
    /// Input partitions led here → their task.
    tasks: BTreeMap<i32, Task>,
}

/// One running partition task.
struct Task {
    handle: tokio::task::AbortHandle,
    /// The input partition's leader epoch it started under.
    leader_epoch: i32,
    progress: Arc<Progress>,
    /// Whether the task may still write its checkpoint; see [`Task::stop`].
    alive: Arc<Mutex<bool>>,
}

impl Task {
    /// Stops the task. Once this returns the task starts no checkpoint write
    /// again (one already sent may still land: it holds what the task's
    /// outputs hold, so its successor, which re-runs from an older one, only
    /// meets its own duplicates).
    fn stop(&self) {
        *lock(&self.alive) = false;
        self.handle.abort();
    }
}

/// A deployed transform, and the input partitions this broker leads (each
/// with its leader epoch).
#[derive(Clone, Debug)]
pub struct Wanted {
    pub transform: TransformImage,
    pub led: BTreeMap<i32, i32>,
}

/// What one broker reports of a deployment: its state there and the input
/// partitions it runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalStatus {
    pub name: String,
    pub producer_ids: Vec<i64>,
    pub state: String,
    pub partitions: Vec<PartitionProgress>,
}

/// Where one input partition of a deployment is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionProgress {
    pub partition: i32,
    /// The next input offset (-1: not known).
    pub next_offset: i64,
    /// Input high watermark minus `next_offset` (-1: not known).
    pub lag: i64,
    /// Since the deployment (kept with the checkpoint).
    pub processed: u64,
    pub emitted: u64,
    pub dead_lettered: u64,
}

impl PartitionProgress {
    /// A partition no broker reported.
    pub fn unknown(partition: i32) -> PartitionProgress {
        PartitionProgress { partition, next_offset: -1, lag: -1, processed: 0, emitted: 0, dead_lettered: 0 }
    }
}

/// A deployment as `listTransforms` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransformStatus {
    pub name: String,
    pub plugin: String,
    pub input_topic: String,
    pub output_topics: Vec<String>,
    pub dead_letter_topic: Option<String>,
    pub state: String,
    pub partitions: Vec<PartitionProgress>,
}

/// See the module docs.
pub struct Transforms {
    dir: PathBuf,
    environment: Environment,
    running: Mutex<BTreeMap<String, Running>>,
    runtime: Mutex<Option<tokio::runtime::Handle>>,
    /// One `follow` at a time, from reading the image to starting tasks, so an
    /// older image is never followed after a newer one.
    following: Mutex<()>,
}

impl std::fmt::Debug for Transforms {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Transforms").field("dir", &self.dir).finish_non_exhaustive()
    }
}

/// Why a transform request or a transform task failed. Typed here, converted
/// to the client's `ApiError` once, at the edge.
#[derive(Debug, thiserror::Error)]
pub enum TransformsError {
    /// A malformed deployment or control request (`InvalidRequest`).
    #[error("{0}")]
    BadRequest(String),
    /// The task was stopped (its partition is led elsewhere now, or the
    /// deployment changed); it writes nothing more.
    #[error("the task was stopped")]
    Stopped,
    /// A stored batch that does not decode (`CorruptMessage`).
    #[error("{0}")]
    Corrupt(String),
    /// The transform's plugin failed on a batch (`PluginFailed`).
    #[error("{0}")]
    PluginFailed(String),
    /// Deployments or checkpoints could not be read or written (`StorageError`).
    #[error("{context}: {message}")]
    Storage { context: String, message: String },
    /// What the broker answered the transform (a fetch, a produce, a plugin).
    #[error(transparent)]
    Broker(#[from] ApiError),
}

impl From<TransformsError> for ApiError {
    fn from(error: TransformsError) -> ApiError {
        let code = match &error {
            TransformsError::BadRequest(_) => ErrorCode::InvalidRequest,
            TransformsError::Stopped => ErrorCode::NotLeaderOrFollower,
            TransformsError::Corrupt(_) => ErrorCode::CorruptMessage,
            TransformsError::PluginFailed(_) => ErrorCode::PluginFailed,
            TransformsError::Storage { .. } => ErrorCode::StorageError,
            TransformsError::Broker(error) => return error.clone(),
        };
        ApiError::new(code, error.to_string())
    }
}

impl TransformsError {
    /// Whether the task must end: a task of the partition's next leader
    /// claimed its checkpoint, or the task was stopped.
    fn ends_task(&self) -> bool {
        match self {
            TransformsError::Broker(error) => error.code == ErrorCode::FencedLeaderEpoch,
            TransformsError::Stopped => true,
            _ => false,
        }
    }

    /// The reason alone (a transform's status line shows it).
    pub fn message(&self) -> String {
        match self {
            TransformsError::Broker(error) => error.message.clone(),
            other => other.to_string(),
        }
    }
}

impl From<crate::plugins::PluginsError> for TransformsError {
    fn from(error: crate::plugins::PluginsError) -> TransformsError {
        TransformsError::Broker(error.into())
    }
}

fn storage(context: &str, error: impl std::fmt::Display) -> TransformsError {
    TransformsError::Storage { context: context.to_owned(), message: error.to_string() }
}

fn invalid(message: impl Into<String>) -> TransformsError {
    TransformsError::BadRequest(message.into())
}

/// What transforms need from the broker they run in: start plugin instances,
/// offsets, reads and writes (producer ids come with the deployment). `Node` implements it; nothing else of
/// the broker is reachable from a transform task.
pub trait TransformHost: Send + Sync + 'static {
    /// A fresh instance of transform plugin `plugin`, `init`ed with `config`.
    fn start_transform_plugin(&self, plugin: &str, config: Vec<(String, String)>) -> Result<Plugin, ApiError>;
    /// (offset, timestamp ms) as `listOffsets` answers.
    fn list_offset(&self, topic: &str, partition: i32, query: OffsetQuery) -> Result<(i64, i64), ApiError>;
    fn partition_count(&self, topic: &str) -> Result<u32, ApiError>;
    /// The partitions `topic`'s partitioner plugin picks for `records` (one
    /// call), if it has one.
    fn plugin_partitions(
        &self,
        topic: &str,
        partition_count: u32,
        records: &[&plugin_host::PackedRecord<'_>],
    ) -> impl std::future::Future<Output = Result<Option<Vec<Option<u32>>>, ApiError>> + Send;
    /// Committed batches of `partitions` (see `Node::fetch_many`).
    fn fetch_many(
        &self,
        partitions: &[PartitionFetch],
        min_bytes: u32,
        max_wait_ms: u32,
        max_bytes: u32,
        buffers: &mut Vec<Vec<u8>>,
    ) -> impl std::future::Future<Output = Vec<Result<Fetched, ApiError>>> + Send;
    fn produce(&self, request: ProduceRequest) -> impl std::future::Future<Output = Result<Produced, ApiError>> + Send;
    /// Carries out `call` at the coordinator of its group: the committed
    /// (offset, metadata) for `Load`, `None` otherwise.
    fn checkpoint(
        &self,
        call: CheckpointCall,
    ) -> impl std::future::Future<Output = Result<Option<(i64, String)>, ApiError>> + Send;
}

impl Transforms {
    /// Transforms kept under `dir` (checkpoints; tasks start with [`Transforms::start`]).
    pub fn open(dir: &Path, environment: Environment) -> Result<Transforms, TransformsError> {
        environment
            .storage
            .create_dir_all(dir)
            .map_err(|error| storage(&format!("create {}", dir.display()), error))?;
        Ok(Transforms {
            dir: dir.to_path_buf(),
            environment,
            running: Mutex::new(BTreeMap::new()),
            runtime: Mutex::new(None),
            following: Mutex::new(()),
        })
    }

    /// The deployments a single-node broker kept before the cluster metadata
    /// (`transforms.json`), if it has not been moved yet.
    pub fn legacy_deployments(&self) -> Result<Option<Vec<LegacyDeployment>>, TransformsError> {
        match read_whole(&self.environment, &self.dir.join(LEGACY_RECORD_FILE)) {
            Ok(Some(bytes)) => {
                serde_json::from_slice(&bytes).map(Some).map_err(|error| storage("read transforms.json", error))
            }
            Ok(None) => Ok(None),
            Err(error) => Err(storage("read transforms.json", error)),
        }
    }

    /// Stamps the checkpoints of a moved deployment with their producer ids,
    /// so the tasks take them as their own.
    pub fn adopt_legacy_checkpoints(&self, deployment: &LegacyDeployment) -> Result<(), TransformsError> {
        for (&partition, &producer_id) in &deployment.producer_ids {
            let path = self.checkpoint_path(&deployment.name, partition);
            let Ok(Some(bytes)) = read_whole(&self.environment, &path) else { continue };
            let Ok(mut checkpoint) = serde_json::from_slice::<LegacyCheckpoint>(&bytes) else { continue };
            if checkpoint.producer_id.is_none() {
                checkpoint.producer_id = Some(producer_id);
                write_checkpoint(&self.environment, &path, &checkpoint)?;
            }
        }
        Ok(())
    }

    /// Sets `transforms.json` aside once the metadata holds its deployments.
    pub fn legacy_upgraded(&self) -> Result<(), TransformsError> {
        let path = self.dir.join(LEGACY_RECORD_FILE);
        let aside = self.dir.join(format!("{LEGACY_RECORD_FILE}.upgraded"));
        let storage_error = |error| storage("set transforms.json aside", error);
        self.environment.storage.rename(&path, &aside).map_err(storage_error)?;
        self.environment.storage.sync_dir(&self.dir).map_err(storage_error)
    }

    fn checkpoint_path(&self, name: &str, partition: i32) -> PathBuf {
        self.dir.join(format!("{name}-{partition}.checkpoint.json"))
    }

    /// Lets tasks run on `runtime` (the broker's, at serve); the next
    /// [`Transforms::follow`] starts them.
    pub fn start(&self, runtime: tokio::runtime::Handle) {
        *lock(&self.runtime) = Some(runtime);
    }

    /// Stops every task (broker shutdown); nothing runs until the next `start`.
    pub fn stop_all(&self) {
        *lock(&self.runtime) = None;
        for running in lock(&self.running).values_mut() {
            running.tasks.values().for_each(Task::stop);
            running.tasks.clear();
        }
    }

    /// Whether a deployment this broker should run failed to start (a plugin
    /// not here yet, or refusing its config): the caller follows again later.
    pub fn wants_retry(&self) -> bool {
        lock(&self.running).values().any(|running| lock(&running.state).starts_with("failed"))
    }

    /// Runs the tasks of `wanted()` (every deployment, with the input
    /// partitions this broker leads, read from the image under this follow's
    /// turn) and nothing else: tasks of deleted deployments and of partitions
    /// led elsewhere stop, pauses and replays reach the tasks, and partitions
    /// led here start. Plugin instances start outside the lock that listings
    /// take; blocking (it instantiates plugins): call it off the async workers.
    pub fn follow<H: TransformHost>(&self, node: &Arc<H>, wanted: impl FnOnce() -> Vec<Wanted>) {
        let _one_at_a_time = lock(&self.following);
        if lock(&self.runtime).is_none() {
            return;
        }
        let wanted: BTreeMap<String, Wanted> =
            wanted().into_iter().map(|wanted| (wanted.transform.entry.name.clone(), wanted)).collect();
        // Under the lock: stop what must stop, pass controls on, list what to start.
        let mut to_start = Vec::new();
        {
            let mut running = lock(&self.running);
            let gone: Vec<String> = running
                .iter()
                .filter(|(name, old)| wanted.get(*name).is_none_or(|new| new.transform.entry != old.entry))
                .map(|(name, _)| name.clone())
                .collect();
            for name in gone {
                let old = running.remove(&name).expect("listed above");
                old.tasks.values().for_each(Task::stop);
                if !wanted.contains_key(&name) {
                    for partition in 0..old.entry.producer_ids.len() as i32 {
                        let _ = self.environment.storage.remove_file(&self.checkpoint_path(&name, partition));
                    }
                }
                // The brokers that ran its tasks delete its checkpoints, unless
                // a redeployment of the name keeps them (same producer ids).
                let group_id = checkpoint_group(&old.entry);
                let kept = wanted.get(&name).is_some_and(|new| checkpoint_group(&new.transform.entry) == group_id);
                if !kept && !old.tasks.is_empty() {
                    if let Some(runtime) = lock(&self.runtime).as_ref() {
                        let node = node.clone();
                        runtime.spawn(async move {
                            if let Err(error) = node.checkpoint(CheckpointCall::Delete { group_id }).await {
                                tracing::warn!(%error, transform = %name, "checkpoints of a deleted transform left");
                            }
                        });
                    }
                }
            }
            for (name, wanted) in &wanted {
                let control = Control::of(&wanted.transform);
                let deployment = running.entry(name.clone()).or_insert_with(|| Running {
                    entry: wanted.transform.entry.clone(),
                    control: watch::channel(control).0,
                    state: Arc::new(Mutex::new("starting".to_owned())),
                    tasks: BTreeMap::new(),
                });
                deployment.control.send_if_modified(|current| std::mem::replace(current, control) != control);
                // A task whose partition's leader epoch moved on (it was led
                // elsewhere in between) restarts under the new one.
                deployment.tasks.retain(|partition, task| {
                    let keep = wanted.led.get(partition) == Some(&task.leader_epoch) && !task.handle.is_finished();
                    if !keep {
                        task.stop();
                    }
                    keep
                });
                let missing = wanted.led.iter().filter(|(partition, _)| !deployment.tasks.contains_key(partition));
                to_start.extend(missing.map(|(&partition, &epoch)| (name.clone(), partition, epoch)));
            }
        }
        // Outside it: start the plugin instances.
        let started: Vec<(String, i32, i32, Result<Plugin, ApiError>)> = to_start
            .into_iter()
            .map(|(name, partition, epoch)| {
                let entry = &wanted[&name].transform.entry;
                let plugin = node.start_transform_plugin(&entry.plugin, entry.config.clone());
                (name, partition, epoch, plugin)
            })
            .collect();
        // Under the lock again: spawn them (unless the broker stopped meanwhile).
        let runtime = lock(&self.runtime).clone();
        let mut running = lock(&self.running);
        for (name, partition, leader_epoch, plugin) in started {
            let Some(deployment) = running.get_mut(&name) else { continue };
            match (plugin, &runtime) {
                (Ok(plugin), Some(runtime)) => {
                    let task = self.spawn(node, deployment, (partition, leader_epoch), plugin, runtime);
                    deployment.tasks.insert(partition, task);
                }
                (Ok(_), None) => {}
                (Err(error), _) => *lock(&deployment.state) = format!("failed: {}", error.message),
            }
        }
        for (name, wanted) in &wanted {
            let Some(deployment) = running.get(name) else { continue };
            let mut state = lock(&deployment.state);
            let all_started = deployment.tasks.len() == wanted.led.len();
            if wanted.transform.paused {
                *state = "paused".to_owned();
            } else if all_started && (*state == "paused" || *state == "starting" || state.starts_with("failed")) {
                *state = "running".to_owned();
            }
        }
    }

    fn spawn<H: TransformHost>(
        &self,
        node: &Arc<H>,
        deployment: &Running,
        (partition, leader_epoch): (i32, i32),
        plugin: Plugin,
        runtime: &tokio::runtime::Handle,
    ) -> Task {
        let entry = &deployment.entry;
        let progress = Arc::new(Progress { next_offset: AtomicI64::new(-1), ..Progress::default() });
        let alive = Arc::new(Mutex::new(true));
        let task = PartitionTask {
            node: node.clone(),
            entry: entry.clone(),
            partition,
            producer_id: entry.producer_ids[partition as usize],
            plugin: PluginPool::new(plugin, PoolLimits { lanes_max: 1, ..PoolLimits::default() }),
            chunk_records_max: usize::MAX,
            progress: progress.clone(),
            control: deployment.control.subscribe(),
            state: deployment.state.clone(),
            group_id: checkpoint_group(entry),
            leader_epoch,
            legacy_path: self.checkpoint_path(&entry.name, partition),
            legacy_left: true,
            environment: self.environment.clone(),
            alive: alive.clone(),
        };
        Task { handle: runtime.spawn(task.run()).abort_handle(), leader_epoch, progress, alive }
    }

    /// What this broker runs of each deployment (see [`LocalStatus`]).
    pub fn local_status(&self, node: &impl TransformHost) -> Vec<LocalStatus> {
        type Snapshot = (TransformEntry, String, Vec<(i32, Arc<Progress>)>);
        let snapshots: Vec<Snapshot> = lock(&self.running)
            .values()
            .map(|deployment| {
                let tasks = deployment.tasks.iter().map(|(&partition, task)| (partition, task.progress.clone()));
                (deployment.entry.clone(), lock(&deployment.state).clone(), tasks.collect())
            })
            .collect();
        // Lags from the logs, outside the lock.
        snapshots
            .into_iter()
            .map(|(entry, state, tasks)| {
                let partitions = tasks
                    .iter()
                    .map(|(partition, progress)| {
                        let next = progress.next_offset.load(Ordering::Relaxed);
                        let end = node.list_offset(&entry.input_topic, *partition, OffsetQuery::Latest);
                        let lag = match (end, next) {
                            (Ok((end, _)), next) if next >= 0 => (end - next).max(0),
                            _ => -1,
                        };
                        let count = |pick: fn(&Progress) -> &AtomicU64| pick(progress).load(Ordering::Relaxed);
                        PartitionProgress {
                            partition: *partition,
                            next_offset: next,
                            lag,
                            processed: count(|p| &p.processed),
                            emitted: count(|p| &p.emitted),
                            dead_lettered: count(|p| &p.dead_lettered),
                        }
                    })
                    .collect();
                LocalStatus { name: entry.name, producer_ids: entry.producer_ids, state, partitions }
            })
            .collect()
    }
}

/// Checks a deployment request before producer ids are allocated for it; the
/// controller checks the rest against the metadata.
pub fn check_spec(spec: &TransformSpec) -> Result<(), TransformsError> {
    let entry = TransformEntry {
        name: spec.name.clone(),
        plugin: spec.plugin.clone(),
        input_topic: spec.input_topic.clone(),
        output_topics: spec.output_topics.clone(),
        start: spec.start,
        config: Vec::new(),
        producer_ids: vec![0],
        start_paused: false,
        dead_letter_topic: spec.dead_letter_topic.clone(),
    };
    broker_core::cluster::check_transform_entry(&entry).map_err(invalid)
}

fn write_checkpoint(
    environment: &Environment,
    path: &Path,
    checkpoint: &LegacyCheckpoint,
) -> Result<(), TransformsError> {
    let bytes = serde_json::to_vec(checkpoint).map_err(|error| storage("encode a checkpoint", error))?;
    write_atomically(environment, path, &bytes).map_err(|error| storage("write a checkpoint", error))
}

/// The task of one input partition; see the module docs.
struct PartitionTask<H> {
    node: Arc<H>,
    entry: TransformEntry,
    partition: i32,
    producer_id: i64,
    /// Its instance, on a thread of its own (one lane: one input partition).
    plugin: PluginPool,
    /// Most input records one plugin call is given (see `run_plugin`).
    chunk_records_max: usize,
    progress: Arc<Progress>,
    control: watch::Receiver<Control>,
    state: Arc<Mutex<String>>,
    /// Where its checkpoints are committed ([`checkpoint_group`]).
    group_id: String,
    /// The input partition's leader epoch it runs under: fences its commits.
    leader_epoch: i32,
    /// Its checkpoint file from before replication, and whether it may still
    /// be there.
    legacy_path: PathBuf,
    legacy_left: bool,
    environment: Environment,
    /// See [`Task::stop`].
    alive: Arc<Mutex<bool>>,
}

impl<H: TransformHost> PartitionTask<H> {
    fn resolve(&self, offset: i64) -> Result<i64, TransformsError> {
        let query = match offset {
            EARLIEST => OffsetQuery::Earliest,
            LATEST => OffsetQuery::Latest,
            offset => return Ok(offset),
        };
        Ok(self.node.list_offset(&self.entry.input_topic, self.partition, query)?.0)
    }

    /// Commits `checkpoint` (see the module docs).
    async fn save(&self, checkpoint: &Checkpoint) -> Result<(), TransformsError> {
        if !*lock(&self.alive) {
            return Err(TransformsError::Stopped);
        }
        let call = CheckpointCall::Save {
            group_id: self.group_id.clone(),
            topic: self.entry.input_topic.clone(),
            partition: self.partition as u32,
            offset: checkpoint.next_offset,
            metadata: checkpoint.to_metadata(self.producer_id),
            leader_epoch: self.leader_epoch,
        };
        self.node.checkpoint(call).await?;
        Ok(())
    }

    /// The last checkpoint of this deployment's partition, claimed for this
    /// task's leader epoch (a task of an older one can commit no more): the
    /// committed one, else (once, after the upgrade) the file of a broker from
    /// before replication; `None` for a first start. Waits while the group's
    /// coordinator cannot answer (running without it could redo work), and
    /// for good on a checkpoint it cannot read (starting over would reuse
    /// sequence numbers). `Err` when the task must end (a newer task claimed
    /// the partition, or this one was stopped).
    async fn load(&mut self) -> Result<Loaded, TransformsError> {
        let call = CheckpointCall::Load {
            group_id: self.group_id.clone(),
            topic: self.entry.input_topic.clone(),
            partition: self.partition as u32,
            leader_epoch: self.leader_epoch,
        };
        loop {
            match self.node.checkpoint(call.clone()).await {
                Ok(Some((offset, metadata))) => match Checkpoint::from_stored(offset, &metadata, self.producer_id) {
                    Some(checkpoint) => return Ok(Loaded::Committed(checkpoint)),
                    None => self.fail(format!(
                        "its checkpoint in group {} is unreadable or another deployment's ({metadata:?}); delete and \
                         deploy the transform again",
                        self.group_id
                    )),
                },
                Ok(None) => break,
                Err(error) => {
                    let error = TransformsError::from(error);
                    if error.ends_task() {
                        return Err(error);
                    }
                    self.fail(format!("reading its checkpoint: {}", error.message()));
                }
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        let legacy = read_whole(&self.environment, &self.legacy_path)
            .ok()
            .flatten()
            .and_then(|bytes| serde_json::from_slice::<LegacyCheckpoint>(&bytes).ok());
        Ok(match legacy.and_then(|legacy| Checkpoint::from_legacy(legacy, self.producer_id)) {
            Some(checkpoint) => Loaded::Legacy(checkpoint),
            None => Loaded::Nothing,
        })
    }

    /// Commits `checkpoint`, retrying until it is committed: a task produces
    /// nothing past a checkpoint it could not commit. `Err` when the task must
    /// end.
    async fn save_until_done(&self, checkpoint: &Checkpoint) -> Result<(), TransformsError> {
        loop {
            match self.save(checkpoint).await {
                Ok(()) => return Ok(()),
                Err(error) if error.ends_task() => return Err(error),
                Err(error) => self.fail(format!("committing its checkpoint: {}", error.message())),
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// Ends the task: the next leader's task claimed its checkpoint (or the
    /// task was stopped); `follow` starts a new one if this broker leads again.
    fn fenced(&self) {
        tracing::info!(transform = %self.entry.name, partition = self.partition, "transform task ends: claimed elsewhere or stopped");
    }

    /// Deletes the file checkpoint of a broker from before replication, once a
    /// replicated one is committed.
    fn forget_legacy(&mut self) {
        if std::mem::take(&mut self.legacy_left) {
            let _ = self.environment.storage.remove_file(&self.legacy_path);
        }
    }

    fn fail(&self, message: String) {
        if !*lock(&self.alive) {
            return; // stopped: its successor (if any) reports
        }
        tracing::warn!(transform = %self.entry.name, partition = self.partition, %message, "transform stalled");
        *lock(&self.state) = format!("retrying: {message}");
        self.plugin.log().push("error", format!("host: partition {}: {message}", self.partition));
    }

    async fn run(mut self) {
        // This deployment's checkpoint, if there is one; one from a file is
        // committed before anything is produced from it.
        let stored = match self.load().await {
            Ok(Loaded::Committed(checkpoint)) => Some(checkpoint),
            Ok(Loaded::Legacy(checkpoint)) => match self.save_until_done(&checkpoint).await {
                Ok(()) => Some(checkpoint),
                Err(_) => return self.fenced(),
            },
            Ok(Loaded::Nothing) => None,
            Err(_) => return self.fenced(),
        };
        self.recovered();
        // A replay recorded while this partition was not running here still
        // happens, once (a first start resolves the deployment's start offset).
        let mut generation = stored.as_ref().map_or(0, |checkpoint| checkpoint.replay_generation);
        let checkpoint = stored.unwrap_or(Checkpoint { next_offset: -1, ..Checkpoint::default() });
        self.progress.processed.store(checkpoint.processed, Ordering::Relaxed);
        self.progress.emitted.store(checkpoint.emitted, Ordering::Relaxed);
        self.progress.dead_lettered.store(checkpoint.dead_lettered, Ordering::Relaxed);
        let mut checkpoint = checkpoint;
        let mut starting = checkpoint.next_offset < 0;
        let mut buffers = vec![Vec::new()];
        loop {
            let control = *self.control.borrow_and_update();
            if starting || control.generation > generation {
                match self.resolve(control.replay_from) {
                    Ok(offset) => {
                        // Where it starts (again) is committed before anything
                        // is produced from there; a replay is a new run.
                        let mut next = checkpoint.clone();
                        match starting {
                            true => next.next_offset = offset,
                            false => {
                                if let Err(error) = next.restart_at(offset) {
                                    self.fail(error.message());
                                    let _ = self.control.changed().await;
                                    continue;
                                }
                            }
                        }
                        next.replay_generation = control.generation;
                        if self.save_until_done(&next).await.is_err() {
                            return self.fenced();
                        }
                        checkpoint = next;
                        self.forget_legacy();
                        generation = control.generation;
                        starting = false;
                    }
                    Err(error) => {
                        self.fail(error.message());
                        tokio::select! {
                            _ = tokio::time::sleep(RETRY_PAUSE) => {}
                            _ = self.control.changed() => {}
                        }
                        continue;
                    }
                }
            }
            self.progress.next_offset.store(checkpoint.next_offset, Ordering::Relaxed);
            if control.paused {
                let _ = self.control.changed().await;
                continue;
            }
            let fetch = PartitionFetch {
                topic: self.entry.input_topic.clone(),
                partition: self.partition,
                offset: checkpoint.next_offset,
                max_bytes: FETCH_BYTES,
            };
            let answer = tokio::select! {
                mut answers = self.node.fetch_many(std::slice::from_ref(&fetch), 1, FETCH_WAIT_MS, FETCH_BYTES, &mut buffers) => answers.remove(0),
                _ = self.control.changed() => continue,
            };
            let fetched = match answer {
                Ok(fetched) => fetched,
                // Below the log start (deleted by retention): from the earliest
                // record kept. Past the log end (a start offset ahead of the
                // log, or input truncated by an unclean election): from the
                // end, never the whole log again.
                // A jump is a new run, committed before it produces.
                Err(error) if error.code == ErrorCode::OffsetOutOfRange => {
                    let jump = match self.resolve(EARLIEST) {
                        Ok(earliest) if checkpoint.next_offset < earliest => Ok(earliest),
                        Ok(_) => self.resolve(LATEST),
                        Err(error) => Err(error),
                    };
                    let mut next = checkpoint.clone();
                    let restarted = jump.and_then(|offset| next.restart_at(offset));
                    if let Err(error) = restarted {
                        self.fail(error.message());
                        tokio::time::sleep(RETRY_PAUSE).await;
                        continue;
                    }
                    if self.save_until_done(&next).await.is_err() {
                        return self.fenced();
                    }
                    checkpoint = next;
                    continue;
                }
                Err(error) => {
                    self.fail(error.message);
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            };
            let bytes = buffers[0][..fetched.size_bytes].to_vec();
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                let Ok((view, after)) = BatchView::split_first(rest) else { break };
                rest = after;
                loop {
                    match self.process_batch(&view, &mut checkpoint).await {
                        Ok(()) => break,
                        Err(error) if error.ends_task() => return self.fenced(),
                        Err(error) => {
                            self.fail(error.message());
                            // Committing the last checkpoint again tells a
                            // deposed task (whose outputs are refused) to stop.
                            if self.save(&checkpoint).await.is_err_and(|error| error.ends_task()) {
                                return self.fenced();
                            }
                            tokio::time::sleep(RETRY_PAUSE).await;
                            if self.control.has_changed().unwrap_or(true) {
                                break;
                            }
                        }
                    }
                }
                if self.control.has_changed().unwrap_or(true) {
                    break;
                }
            }
        }
    }

    /// Runs the plugin over `input`, in order. A call that runs out of its
    /// budget is split in halves (down to single records) that run in turn;
    /// the size that fit is where the next batches start
    /// (`chunk_records_max`, which doubles again after a batch that needed no
    /// split). A transform that needs longer than one call's budget for a
    /// whole batch so moves on instead of failing the batch for ever.
    ///
    /// With a dead-letter topic, a chunk the plugin fails on for good (see
    /// [`fails_for_good`]) is split in halves too, down to the record it fails
    /// on, which becomes an output to the dead-letter topic (index
    /// `output_topics.len()`, see [`dead_letter`]); the second return counts
    /// them.
    async fn run_plugin(&mut self, input: PackedBatch) -> Result<(Vec<TransformOutcome>, u64), TransformsError> {
        let plugin_name = self.entry.plugin.clone();
        let failed = |error: PluginError| TransformsError::PluginFailed(format!("plugin {plugin_name:?}: {error}"));
        let mut pending: VecDeque<PackedBatch> = split(input, self.chunk_records_max)?.into();
        let mut outcomes = Vec::new();
        let mut dead_lettered = 0;
        let mut was_split = false;
        while let Some(chunk) = pending.pop_front() {
            let (topic, partition, outputs) =
                (self.entry.input_topic.clone(), self.partition as u32, self.entry.output_topics.len());
            let (outcome, chunk) = self
                .plugin
                .call(0, chunk, move |plugin, input| plugin.process(&topic, partition, input, outputs))
                .await
                .map_err(failed)?;
            match outcome {
                Ok(outcome) => outcomes.push(outcome),
                Err(PluginError::Deadline { .. }) if chunk.len() > 1 => {
                    let half = chunk.len().div_ceil(2);
                    let message = format!(
                        "host: partition {}: {} records ran out of the call's budget; running them {half} at a time",
                        self.partition,
                        chunk.len()
                    );
                    self.plugin.log().push("warn", message);
                    self.chunk_records_max = half;
                    was_split = true;
                    for part in split(chunk, half)?.into_iter().rev() {
                        pending.push_front(part);
                    }
                }
                Err(error) if self.entry.dead_letter_topic.is_some() && fails_for_good(&error) => {
                    if chunk.len() > 1 {
                        let half = chunk.len().div_ceil(2);
                        for part in split(chunk, half)?.into_iter().rev() {
                            pending.push_front(part);
                        }
                        continue;
                    }
                    let index = self.entry.output_topics.len() as u8;
                    let letter = dead_letter(&chunk, &error, &self.entry.input_topic, self.partition, index)?;
                    let (offset, topic) = (chunk.base_offset, self.entry.dead_letter_topic.as_deref().unwrap_or(""));
                    let first =
                        chunk.records().ok().and_then(|records| records.first().map(|record| record.offset_delta));
                    let offset = offset + first.map_or(0, i64::from);
                    let message = format!(
                        "host: partition {} offset {offset}: sent to dead-letter topic {topic:?}: {error}",
                        self.partition
                    );
                    self.plugin.log().push("warn", message);
                    outcomes.push(letter);
                    dead_lettered += 1;
                }
                Err(error) => return Err(failed(error)),
            }
        }
        if !was_split {
            self.chunk_records_max = self.chunk_records_max.saturating_mul(2);
        }
        Ok((outcomes, dead_lettered))
    }

    /// Output topic `index`: one of the deployment's, or past them its
    /// dead-letter topic.
    fn output_topic(&self, index: usize) -> Result<&str, TransformsError> {
        self.entry
            .output_topics
            .get(index)
            .or(self.entry.dead_letter_topic.as_ref().filter(|_| index == self.entry.output_topics.len()))
            .map(String::as_str)
            .ok_or_else(|| TransformsError::PluginFailed(format!("no output topic {index}")))
    }

    /// Runs the plugin over one input batch, produces its outputs, checkpoints.
    async fn process_batch(
        &mut self,
        view: &BatchView<'_>,
        checkpoint: &mut Checkpoint,
    ) -> Result<(), TransformsError> {
        let next_after = view.last_offset() + 1;
        if next_after <= checkpoint.next_offset {
            return Ok(());
        }
        if view.attributes().is_control() {
            let next = Checkpoint { next_offset: next_after, ..checkpoint.clone() };
            self.save(&next).await?;
            *checkpoint = next;
            return Ok(());
        }
        let stored = pack_view(view, view.base_offset())?;
        // Only records at or past the checkpoint (a batch may straddle it).
        let mut input = plugin_host::PackedBatch::new(view.base_offset(), stored.base_timestamp_ms);
        let records = stored.records().map_err(|error| TransformsError::Corrupt(error.to_string()))?;
        let first_delta = (checkpoint.next_offset - view.base_offset()).max(0) as u32;
        for record in records.iter().filter(|record| record.offset_delta >= first_delta) {
            input.push(
                record.offset_delta,
                record.timestamp_ms,
                record.key,
                record.value,
                record.headers.iter().copied(),
            );
        }
        let count = input.len() as u64;
        let (outcomes, dead_lettered) = self.run_plugin(input).await?;
        let mut outputs = Vec::new();
        let mut topic_indexes: Vec<u8> = Vec::new();
        for outcome in &outcomes {
            outputs
                .extend(outcome.records.records().map_err(|error| TransformsError::PluginFailed(error.to_string()))?);
            topic_indexes.extend_from_slice(&outcome.topic_index);
        }
        // Each output topic's partitioner plugin, if it has one, places that
        // topic's records in one call.
        let mut chosen: Vec<Option<u32>> = vec![None; outputs.len()];
        for (topic_index, topic) in self.entry.output_topics.iter().enumerate() {
            let at: Vec<usize> =
                (0..outputs.len()).filter(|&at| usize::from(topic_indexes[at]) == topic_index).collect();
            if at.is_empty() {
                continue;
            }
            let records: Vec<_> = at.iter().map(|&at| &outputs[at]).collect();
            let partitions = self.node.partition_count(topic)?;
            if let Some(placed) = self.node.plugin_partitions(topic, partitions, &records).await? {
                at.iter().zip(placed).for_each(|(&at, partition)| chosen[at] = partition);
            }
        }
        // One batch per output partition, in output order.
        let mut batches: BTreeMap<(usize, i32), BatchBuilder> = BTreeMap::new();
        for ((record, topic_index), choice) in outputs.iter().zip(&topic_indexes).zip(chosen) {
            let topic = self.output_topic(usize::from(*topic_index))?;
            let partitions = self.node.partition_count(topic)?;
            let partition = match (choice, record.key) {
                (Some(partition), _) => partition as i32,
                (None, Some(key)) => abi::partitioner::partition_for_key(key, partitions) as i32,
                (None, None) => self.partition % partitions as i32,
            };
            let headers: Vec<(&str, Option<&[u8]>)> = record.headers.clone();
            batches
                .entry((usize::from(*topic_index), partition))
                .or_insert_with(|| BatchBuilder::new(view.base_timestamp()))
                .push(record.timestamp_ms, record.key, record.value, &headers);
        }
        let mut sequences = checkpoint.sequences.clone();
        let mut emitted = 0;
        for ((topic_index, partition), builder) in batches {
            let topic = self.output_topic(topic_index)?.to_owned();
            let key = (topic.clone(), partition);
            let sequence = sequences.get(&key).copied().unwrap_or(0);
            let builder = builder.producer(self.producer_id, checkpoint.producer_epoch, sequence);
            let request =
                ProduceRequest { topic, partition, acks: Acks::All, timeout_ms: 30_000, batches: builder.encode() };
            // A re-run batch (after a crash, or by the next leader's task)
            // is one of the leader's cached batches and is answered with its
            // offsets; anything else that is not new is an error, never
            // taken as written.
            self.node.produce(request).await?;
            let next = ((sequence as i64 + builder.record_count() as i64) % (i32::MAX as i64 + 1)) as i32;
            sequences.insert(key, next);
            if topic_index < self.entry.output_topics.len() {
                emitted += builder.record_count() as u64;
            }
        }
        // Taken as done only once committed: a failed commit re-runs the batch.
        let next = Checkpoint {
            next_offset: next_after,
            sequences,
            processed: checkpoint.processed + count,
            emitted: checkpoint.emitted + emitted,
            dead_lettered: checkpoint.dead_lettered + dead_lettered,
            ..checkpoint.clone()
        };
        self.save(&next).await?;
        *checkpoint = next;
        self.forget_legacy();
        self.progress.processed.store(checkpoint.processed, Ordering::Relaxed);
        self.progress.emitted.store(checkpoint.emitted, Ordering::Relaxed);
        self.progress.dead_lettered.store(checkpoint.dead_lettered, Ordering::Relaxed);
        self.progress.next_offset.store(next_after, Ordering::Relaxed);
        self.recovered();
        Ok(())
    }

    /// Clears a `retrying: …` state once the task made progress again.
    fn recovered(&self) {
        let mut state = lock(&self.state);
        if state.starts_with("retrying") {
            *state = "running".to_owned();
        }
    }
}

/// Whether a plugin that failed this way on one record would fail on it
/// again, the same way, on every run (exactly once needs a re-run after a crash
/// to dead-letter the same records): a trap (the host already retried it on a
/// fresh instance), bad output, or its own `invalid-input` or `internal` error.
/// A `retryable` error, a busy host, an instance that could not start, and
/// running out of time — which depends on the machine and on the instance's
/// history — are not: they hold the partition.
fn fails_for_good(error: &PluginError) -> bool {
    match error {
        PluginError::Trap(_) | PluginError::BadOutput(_) => true,
        PluginError::Failed { code, .. } => *code != "retryable",
        PluginError::Deadline { .. }
        | PluginError::Invalid(_)
        | PluginError::Config(_)
        | PluginError::Unavailable(_) => false,
    }
}

/// The one record of `chunk` as a dead letter: unchanged, with headers saying
/// where it came from and why (`weir.dlq.error`, `weir.dlq.topic`,
/// `weir.dlq.partition`, `weir.dlq.offset`), to output topic `index`.
fn dead_letter(
    chunk: &PackedBatch,
    error: &PluginError,
    input_topic: &str,
    partition: i32,
    index: u8,
) -> Result<TransformOutcome, TransformsError> {
    let records = chunk.records().map_err(|error| TransformsError::Corrupt(error.to_string()))?;
    let mut letter = PackedBatch::new(-1, chunk.base_timestamp_ms);
    // One record (the caller split down to it); all of them if ever more.
    for record in &records {
        let (error, partition) = (error.to_string(), partition.to_string());
        let offset = (chunk.base_offset + i64::from(record.offset_delta)).to_string();
        let mut headers = record.headers.clone();
        headers.extend([
            ("weir.dlq.error", Some(error.as_bytes())),
            ("weir.dlq.topic", Some(input_topic.as_bytes())),
            ("weir.dlq.partition", Some(partition.as_bytes())),
            ("weir.dlq.offset", Some(offset.as_bytes())),
        ]);
        letter.push(0, record.timestamp_ms, record.key, record.value, headers);
    }
    Ok(TransformOutcome { topic_index: vec![index; records.len()], records: letter })
}

/// `batch` in parts of at most `records_max` records (see
/// [`PackedBatch::parts`]); the batch itself when it fits.
fn split(batch: PackedBatch, records_max: usize) -> Result<Vec<PackedBatch>, TransformsError> {
    if batch.len() <= records_max {
        return Ok(vec![batch]);
    }
    batch.parts(records_max).map_err(TransformsError::Corrupt)
}

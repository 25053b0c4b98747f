//! Transforms: a transform plugin run by the broker over every committed record
//! of an input topic, one task per input partition, producing to up to 8 output
//! topics.
//!
//! Exactly once, across restarts: each (deployment, input partition) produces
//! with its own idempotent producer id (kept in the deployment record), one
//! batch per output partition per input batch, and checkpoints the next input
//! offset together with the next sequence number of every output partition
//! after the outputs are acknowledged. After a crash the task resumes from the
//! last checkpoint and re-runs at most the input batch in flight; plugins are
//! deterministic (no clock or randomness), so it produces the same batches with
//! the same sequence numbers, which the broker recognises as duplicates.
//!
//! Output partitions come from the output topic's partitioner: its partitioner
//! plugin if it has one, else Kafka murmur2 of the output key — so a transform
//! can re-key records; records without a key (and no plugin's choice) go to the
//! input partition's number modulo the output's partition count.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use abi::batch::{BatchBuilder, BatchView};
use abi::ErrorCode;
use plugin_host::Plugin;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::environment::Environment;
use crate::error::ApiError;
use crate::node::{Acks, Fetched, OffsetQuery, PartitionFetch, ProduceRequest, Produced};
use crate::partition::lock;
use crate::plugins::{pack_view, read_whole, write_atomically};

const RECORD_FILE: &str = "transforms.json";
const OUTPUTS_MAX: usize = 8;
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
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct DeploymentRecord {
    name: String,
    plugin: String,
    input_topic: String,
    output_topics: Vec<String>,
    start: i64,
    config: Vec<(String, String)>,
    paused: bool,
    /// Input partition → its producer id.
    producer_ids: BTreeMap<i32, i64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Checkpoint {
    next_offset: i64,
    /// "topic/partition" → the next sequence number.
    sequences: BTreeMap<String, i32>,
}

/// Progress of one input partition, shared with its task.
#[derive(Debug, Default)]
struct Progress {
    next_offset: AtomicI64,
    processed: AtomicU64,
    emitted: AtomicU64,
}

/// Pause, or a replay (a new generation with its offset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Control {
    paused: bool,
    generation: u64,
    replay_from: i64,
}

struct Deployment {
    record: DeploymentRecord,
    progress: BTreeMap<i32, Arc<Progress>>,
    control: watch::Sender<Control>,
    state: Arc<Mutex<String>>,
    tasks: Vec<tokio::task::AbortHandle>,
}

/// A deployment as `listTransforms` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransformStatus {
    pub name: String,
    pub plugin: String,
    pub input_topic: String,
    pub output_topics: Vec<String>,
    pub state: String,
    /// (partition, next offset, lag, processed, emitted).
    pub partitions: Vec<(i32, i64, i64, u64, u64)>,
}

/// See the module docs.
pub struct Transforms {
    dir: PathBuf,
    environment: Environment,
    deployments: Mutex<BTreeMap<String, Deployment>>,
    runtime: Mutex<Option<tokio::runtime::Handle>>,
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
    /// No transform of that name (`PluginNotFound`).
    #[error("{0}")]
    NotFound(String),
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
            TransformsError::NotFound(_) => ErrorCode::PluginNotFound,
            TransformsError::Corrupt(_) => ErrorCode::CorruptMessage,
            TransformsError::PluginFailed(_) => ErrorCode::PluginFailed,
            TransformsError::Storage { .. } => ErrorCode::StorageError,
            TransformsError::Broker(error) => return error.clone(),
        };
        ApiError::new(code, error.to_string())
    }
}

impl TransformsError {
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
    /// The partition `topic`'s partitioner plugin picks for `record`, if it has one.
    fn plugin_partition(
        &self,
        topic: &str,
        partition_count: u32,
        record: &plugin_host::PackedRecord<'_>,
    ) -> Result<Option<u32>, ApiError>;
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
}

impl Transforms {
    /// Loads the deployment records (tasks start with [`Transforms::start_all`]).
    pub fn open(dir: &Path, environment: Environment) -> Result<Transforms, TransformsError> {
        environment
            .storage
            .create_dir_all(dir)
            .map_err(|error| storage(&format!("create {}", dir.display()), error))?;
        let records: Vec<DeploymentRecord> = match read_whole(&environment, &dir.join(RECORD_FILE)) {
            Ok(Some(bytes)) => {
                serde_json::from_slice(&bytes).map_err(|error| storage("read transforms.json", error))?
            }
            Ok(None) => Vec::new(),
            Err(error) => return Err(storage("read transforms.json", error)),
        };
        let deployments = records
            .into_iter()
            .map(|record| {
                let control = Control { paused: record.paused, generation: 0, replay_from: 0 };
                let deployment = Deployment {
                    progress: BTreeMap::new(),
                    control: watch::channel(control).0,
                    state: Arc::new(Mutex::new(if record.paused { "paused" } else { "starting" }.to_owned())),
                    tasks: Vec::new(),
                    record,
                };
                (deployment.record.name.clone(), deployment)
            })
            .collect();
        Ok(Transforms {
            dir: dir.to_path_buf(),
            environment,
            deployments: Mutex::new(deployments),
            runtime: Mutex::new(None),
        })
    }

    fn save(&self, deployments: &BTreeMap<String, Deployment>) -> Result<(), TransformsError> {
        let records: Vec<&DeploymentRecord> = deployments.values().map(|deployment| &deployment.record).collect();
        let bytes = serde_json::to_vec_pretty(&records).map_err(|error| storage("encode transforms.json", error))?;
        write_atomically(&self.environment, &self.dir.join(RECORD_FILE), &bytes)
            .map_err(|error| storage("write transforms.json", error))
    }

    fn checkpoint_path(&self, name: &str, partition: i32) -> PathBuf {
        self.dir.join(format!("{name}-{partition}.checkpoint.json"))
    }

    /// Whether a deployment runs `plugin`.
    pub fn uses_plugin(&self, plugin: &str) -> Vec<String> {
        lock(&self.deployments).values().filter(|d| d.record.plugin == plugin).map(|d| d.record.name.clone()).collect()
    }

    /// Starts every deployment's tasks on `runtime` (the broker's, at serve).
    pub fn start_all<H: TransformHost>(&self, node: &Arc<H>, runtime: tokio::runtime::Handle) {
        *lock(&self.runtime) = Some(runtime);
        let mut deployments = lock(&self.deployments);
        for deployment in deployments.values_mut() {
            if let Err(error) = self.spawn(node, deployment) {
                *lock(&deployment.state) = format!("failed: {}", error.message());
            }
        }
    }

    /// Stops every task (broker shutdown).
    pub fn stop_all(&self) {
        for deployment in lock(&self.deployments).values_mut() {
            deployment.tasks.drain(..).for_each(|task| task.abort());
        }
    }

    fn spawn<H: TransformHost>(&self, node: &Arc<H>, deployment: &mut Deployment) -> Result<(), TransformsError> {
        let Some(runtime) = lock(&self.runtime).clone() else { return Ok(()) };
        let record = &deployment.record;
        for (&partition, &producer_id) in &record.producer_ids {
            let plugin = node.start_transform_plugin(&record.plugin, record.config.clone())?;
            let progress = deployment.progress.entry(partition).or_default().clone();
            let task = PartitionTask {
                node: node.clone(),
                record: record.clone(),
                partition,
                producer_id,
                plugin,
                progress,
                control: deployment.control.subscribe(),
                state: deployment.state.clone(),
                checkpoint_path: self.checkpoint_path(&record.name, partition),
                environment: self.environment.clone(),
            };
            deployment.tasks.push(runtime.spawn(task.run()).abort_handle());
        }
        if !record.paused {
            *lock(&deployment.state) = "running".to_owned();
        }
        Ok(())
    }

    /// Deploys a transform (the caller checked topics and plugin).
    pub fn deploy<H: TransformHost>(
        &self,
        node: &Arc<H>,
        spec: TransformSpec,
        producer_ids: BTreeMap<i32, i64>,
    ) -> Result<(), TransformsError> {
        let input_partitions = producer_ids.len() as i32;
        let name_ok = !spec.name.is_empty()
            && spec.name.len() <= 128
            && spec.name.bytes().all(|byte| byte.is_ascii_alphanumeric() || b"._-".contains(&byte));
        if !name_ok {
            return Err(invalid(format!("transform name {:?}: use 1 to 128 of a-z A-Z 0-9 . _ -", spec.name)));
        }
        if spec.output_topics.is_empty() || spec.output_topics.len() > OUTPUTS_MAX {
            return Err(invalid(format!("a transform has 1 to {OUTPUTS_MAX} output topics")));
        }
        if spec.output_topics.contains(&spec.input_topic) {
            return Err(invalid("a transform's output topic cannot be its input topic"));
        }
        if spec.start < EARLIEST {
            return Err(invalid(format!("start offset {} (use -2 earliest, -1 latest, or an offset)", spec.start)));
        }
        let mut deployments = lock(&self.deployments);
        if deployments.contains_key(&spec.name) {
            return Err(invalid(format!("a transform named {:?} exists; delete it first", spec.name)));
        }
        // `init` must accept the config before anything is recorded.
        drop(node.start_transform_plugin(&spec.plugin, spec.config.clone())?);
        let record = DeploymentRecord {
            name: spec.name.clone(),
            plugin: spec.plugin,
            input_topic: spec.input_topic,
            output_topics: spec.output_topics,
            start: spec.start,
            config: spec.config,
            paused: false,
            producer_ids,
        };
        let control = Control { paused: false, generation: 0, replay_from: 0 };
        let mut deployment = Deployment {
            record,
            progress: BTreeMap::new(),
            control: watch::channel(control).0,
            state: Arc::new(Mutex::new("starting".to_owned())),
            tasks: Vec::new(),
        };
        for partition in 0..input_partitions {
            let _ = self.environment.storage.remove_file(&self.checkpoint_path(&spec.name, partition));
        }
        self.spawn(node, &mut deployment)?;
        deployments.insert(spec.name, deployment);
        self.save(&deployments)
    }

    pub fn list(&self, node: &impl TransformHost) -> Vec<TransformStatus> {
        let deployments = lock(&self.deployments);
        deployments
            .values()
            .map(|deployment| {
                let record = &deployment.record;
                let partitions = record
                    .producer_ids
                    .keys()
                    .map(|&partition| {
                        let progress = deployment.progress.get(&partition);
                        let next = progress.map_or(-1, |progress| progress.next_offset.load(Ordering::Relaxed));
                        let end = node.list_offset(&record.input_topic, partition, OffsetQuery::Latest);
                        let lag = match (end, next) {
                            (Ok((end, _)), next) if next >= 0 => (end - next).max(0),
                            _ => -1,
                        };
                        let count = |pick: fn(&Progress) -> &AtomicU64| {
                            progress.map_or(0, |progress| pick(progress).load(Ordering::Relaxed))
                        };
                        (partition, next, lag, count(|p| &p.processed), count(|p| &p.emitted))
                    })
                    .collect();
                TransformStatus {
                    name: record.name.clone(),
                    plugin: record.plugin.clone(),
                    input_topic: record.input_topic.clone(),
                    output_topics: record.output_topics.clone(),
                    state: lock(&deployment.state).clone(),
                    partitions,
                }
            })
            .collect()
    }

    /// pause, resume, delete, replay (from `offset`).
    pub fn control(&self, name: &str, action: &str, offset: i64) -> Result<(), TransformsError> {
        let mut deployments = lock(&self.deployments);
        let Some(deployment) = deployments.get_mut(name) else {
            return Err(TransformsError::NotFound(format!("no transform named {name:?}")));
        };
        match action {
            "pause" | "resume" => {
                let paused = action == "pause";
                deployment.record.paused = paused;
                deployment.control.send_modify(|control| control.paused = paused);
                *lock(&deployment.state) = if paused { "paused" } else { "running" }.to_owned();
            }
            "replay" => {
                if offset < EARLIEST {
                    return Err(invalid(format!("replay offset {offset} (use -2 earliest, -1 latest, or an offset)")));
                }
                deployment.control.send_modify(|control| {
                    control.generation += 1;
                    control.replay_from = offset;
                });
            }
            "delete" => {
                let deployment = deployments.remove(name).expect("looked up above");
                deployment.tasks.iter().for_each(tokio::task::AbortHandle::abort);
                for partition in deployment.record.producer_ids.keys() {
                    let _ = self.environment.storage.remove_file(&self.checkpoint_path(name, *partition));
                }
                return self.save(&deployments);
            }
            other => return Err(invalid(format!("transform action {other:?}: use pause, resume, replay or delete"))),
        }
        self.save(&deployments)
    }
}

/// The task of one input partition; see the module docs.
struct PartitionTask<H> {
    node: Arc<H>,
    record: DeploymentRecord,
    partition: i32,
    producer_id: i64,
    plugin: plugin_host::Plugin,
    progress: Arc<Progress>,
    control: watch::Receiver<Control>,
    state: Arc<Mutex<String>>,
    checkpoint_path: PathBuf,
    environment: Environment,
}

impl<H: TransformHost> PartitionTask<H> {
    fn resolve(&self, offset: i64) -> Result<i64, TransformsError> {
        let query = match offset {
            EARLIEST => OffsetQuery::Earliest,
            LATEST => OffsetQuery::Latest,
            offset => return Ok(offset),
        };
        Ok(self.node.list_offset(&self.record.input_topic, self.partition, query)?.0)
    }

    fn save(&self, checkpoint: &Checkpoint) -> Result<(), TransformsError> {
        let bytes = serde_json::to_vec(checkpoint).map_err(|error| storage("encode a checkpoint", error))?;
        write_atomically(&self.environment, &self.checkpoint_path, &bytes)
            .map_err(|error| storage("write a checkpoint", error))
    }

    fn fail(&self, message: String) {
        tracing::warn!(transform = %self.record.name, partition = self.partition, %message, "transform stalled");
        *lock(&self.state) = format!("retrying: {message}");
        self.plugin.log().push("error", format!("host: partition {}: {message}", self.partition));
    }

    async fn run(mut self) {
        let mut checkpoint = match read_whole(&self.environment, &self.checkpoint_path)
            .ok()
            .flatten()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        {
            Some(checkpoint) => checkpoint,
            None => loop {
                match self.resolve(self.record.start) {
                    Ok(next_offset) => break Checkpoint { next_offset, sequences: BTreeMap::new() },
                    Err(error) => self.fail(error.message()),
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            },
        };
        let mut generation = self.control.borrow().generation;
        let mut buffers = vec![Vec::new()];
        loop {
            let control = *self.control.borrow_and_update();
            if control.generation != generation {
                generation = control.generation;
                match self.resolve(control.replay_from) {
                    Ok(offset) => checkpoint.next_offset = offset,
                    Err(error) => self.fail(error.message()),
                }
                let _ = self.save(&checkpoint);
            }
            self.progress.next_offset.store(checkpoint.next_offset, Ordering::Relaxed);
            if control.paused {
                let _ = self.control.changed().await;
                continue;
            }
            let fetch = PartitionFetch {
                topic: self.record.input_topic.clone(),
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
                Err(error) if error.code == ErrorCode::OffsetOutOfRange => {
                    checkpoint.next_offset = self.resolve(EARLIEST).unwrap_or(checkpoint.next_offset);
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
                        Err(error) => {
                            self.fail(error.message());
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
            checkpoint.next_offset = next_after;
            return self.save(checkpoint);
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
        let outcome = self
            .plugin
            .process(&self.record.input_topic, self.partition as u32, &mut input, self.record.output_topics.len())
            .map_err(|error| TransformsError::PluginFailed(format!("plugin {:?}: {error}", self.record.plugin)))?;
        let outputs = outcome.records.records().map_err(|error| TransformsError::PluginFailed(error.to_string()))?;
        // One batch per output partition, in output order.
        let mut batches: BTreeMap<(usize, i32), BatchBuilder> = BTreeMap::new();
        for (record, topic_index) in outputs.iter().zip(&outcome.topic_index) {
            let topic = &self.record.output_topics[usize::from(*topic_index)];
            let partitions = self.node.partition_count(topic)?;
            let partition = match (self.node.plugin_partition(topic, partitions, record)?, record.key) {
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
            let topic = self.record.output_topics[topic_index].clone();
            let key = format!("{topic}/{partition}");
            let sequence = sequences.get(&key).copied().unwrap_or(0);
            let builder = builder.producer(self.producer_id, 0, sequence);
            let request =
                ProduceRequest { topic, partition, acks: Acks::All, timeout_ms: 30_000, batches: builder.encode() };
            self.node.produce(request).await?;
            let next = ((sequence as i64 + builder.record_count() as i64) % (i32::MAX as i64 + 1)) as i32;
            sequences.insert(key, next);
            emitted += builder.record_count() as u64;
        }
        checkpoint.sequences = sequences;
        checkpoint.next_offset = next_after;
        self.save(checkpoint)?;
        self.progress.processed.fetch_add(count, Ordering::Relaxed);
        self.progress.emitted.fetch_add(emitted, Ordering::Relaxed);
        self.progress.next_offset.store(next_after, Ordering::Relaxed);
        if lock(&self.state).starts_with("retrying") {
            *lock(&self.state) = "running".to_owned();
        }
        Ok(())
    }
}

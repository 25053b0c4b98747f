//! [`MetadataRecord`]: one entry of the cluster metadata log, KRaft-shaped.
//!
//! The controller appends records; every broker applies them, in log order, to
//! its [`super::ClusterImage`]. A record says what changed, never how to compute
//! it: applying is deterministic and needs nothing but the image and the record's
//! offset. Two numbers come from offsets instead of fields, so they are unique
//! without coordination: a broker's *epoch* is the offset of its latest
//! `RegisterBroker`, a topic's *id* the offset of its `CreateTopic`.
//!
//! Records are serde types: the metadata log stores them as JSON (one record per
//! log entry), and snapshots store the image. Field names are the format: never
//! rename one; add fields with `#[serde(default)]`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A broker's node id (`--node-id`), as clients see it in metadata.
pub type BrokerId = i32;

/// No leader (`leader = -1` on the wire).
pub const NO_LEADER: BrokerId = -1;

/// Where and how a broker serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub broker_id: BrokerId,
    /// Unique per process start: a registration with the same incarnation is a
    /// retry, a new one is a restart.
    pub incarnation: String,
    /// The address clients and other brokers connect to.
    pub host: String,
    pub port: u16,
    /// `broker.rack`: replicas of a partition go to different racks first.
    #[serde(default)]
    pub rack: Option<String>,
}

/// One partition's replica set and leadership.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    /// Replicas in preference order; the first is the preferred leader.
    pub replicas: Vec<BrokerId>,
    /// In-sync replicas: the leader and the followers that are caught up.
    pub isr: Vec<BrokerId>,
    /// The leader, or [`NO_LEADER`].
    pub leader: BrokerId,
    /// Bumped whenever the leader changes; stamped into every batch the leader
    /// appends, and how followers and clients tell a stale leader from the current one.
    pub leader_epoch: i32,
    /// Bumped by every change of this partition (leader, ISR or replicas).
    pub partition_epoch: i32,
    /// While a reassignment (`weir topic reassign`) runs: the replicas it moves
    /// the partition to. `replicas` then lists them first, followed by the
    /// replicas being removed; once every target replica is in the ISR the
    /// controller makes `replicas` the target and clears this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_replicas: Option<Vec<BrokerId>>,
}

/// A plugin stored in the registry (its bytes are stored by digest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginEntry {
    pub name: String,
    /// `partitioner`, `produce-interceptor`, `consume-interceptor` or `transform`.
    pub hook: String,
    /// sha256 of the component, hex.
    pub digest: String,
    pub size_bytes: u64,
    pub uploaded_ms: i64,
    /// The broker the bytes were uploaded to: where other brokers fetch them
    /// first (by digest, verified).
    #[serde(default)]
    pub uploaded_by: Option<BrokerId>,
}

/// An interceptor or partitioner attached to a topic; every broker runs its own
/// instance of it, `init`ed with `config`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachmentEntry {
    pub topic: String,
    /// `partitioner`, `produce-interceptor` or `consume-interceptor`.
    pub hook: String,
    pub plugin: String,
    pub config: Vec<(String, String)>,
    /// `fail-closed` or `fail-open`.
    pub policy: String,
}

/// A transform deployment: plugin `plugin` run over every committed record of
/// `input_topic`, by the leader of each input partition, producing to
/// `output_topics` exactly once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransformEntry {
    pub name: String,
    /// A registered plugin of the `transform` hook.
    pub plugin: String,
    pub input_topic: String,
    /// 1 to [`TRANSFORM_OUTPUTS_MAX`] topics, never the input.
    pub output_topics: Vec<String>,
    /// Where an input partition starts without a checkpoint: -2 earliest, -1
    /// latest, or an offset.
    pub start: i64,
    pub config: Vec<(String, String)>,
    /// The idempotent producer id each input partition's outputs are written
    /// with (index = partition), so retries after a crash are deduplicated;
    /// never reused, they also tell this deployment from an older one of the
    /// same name.
    pub producer_ids: Vec<i64>,
    /// Deployed paused (a paused deployment moved in from a single-node broker).
    #[serde(default)]
    pub start_paused: bool,
    /// Where input records go that the plugin fails on for good (a bad
    /// record, not a passing failure): produced there exactly once with the
    /// error in headers, and the partition moves on. None: such a record holds
    /// its partition until the plugin or the input changes.
    #[serde(default)]
    pub dead_letter_topic: Option<String>,
}

/// Most output topics of one transform.
pub const TRANSFORM_OUTPUTS_MAX: usize = 8;

/// One entry of the metadata log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum MetadataRecord {
    /// The first record of a cluster's log: its id, written once. Brokers stamp it
    /// into what they store, so data of another cluster is never taken for ours.
    InitCluster {
        cluster_id: String,
    },
    /// A broker starts (or restarts, with a new incarnation). Its epoch is this
    /// record's offset; it starts fenced (serving nothing) until unfenced.
    RegisterBroker(BrokerRegistration),
    /// The broker stopped heartbeating (or is shutting down): it leads nothing
    /// from here on, and the records before this one moved its leaderships away.
    FenceBroker {
        broker_id: BrokerId,
        broker_epoch: u64,
    },
    /// The broker caught up with the metadata log and heartbeats: it may lead.
    UnfenceBroker {
        broker_id: BrokerId,
        broker_epoch: u64,
    },
    /// A topic and the initial state of each partition (index = partition).
    CreateTopic {
        name: String,
        partitions: Vec<PartitionState>,
        configs: BTreeMap<String, String>,
    },
    DeleteTopic {
        name: String,
    },
    /// A partition's new replica set and leadership (the whole new state).
    PartitionChange {
        topic: String,
        partition: u32,
        state: PartitionState,
    },
    /// Sets (`Some`) or removes (`None`) a topic config override.
    ConfigChange {
        topic: String,
        key: String,
        value: Option<String>,
    },
    /// Producer ids `[first, first + count)` go to `broker_id`; blocks are handed
    /// out in order, so `first` is where the previous block ended.
    ProducerIdBlock {
        broker_id: BrokerId,
        first: i64,
        count: i64,
    },
    /// A plugin is stored (replacing one of the same name).
    RegisterPlugin(PluginEntry),
    RemovePlugin {
        name: String,
    },
    /// An interceptor or partitioner is attached to a topic (after the topic's
    /// others of the same hook; a topic has at most one partitioner).
    AttachPlugin(AttachmentEntry),
    DetachPlugin {
        topic: String,
        hook: String,
        plugin: String,
    },
    /// A transform is deployed (running, unless `start_paused`).
    DeployTransform(TransformEntry),
    /// Pauses (`true`) or resumes a transform.
    PauseTransform {
        name: String,
        paused: bool,
    },
    /// Every input partition of the transform restarts from `from` (-2
    /// earliest, -1 latest, or an offset); the record's offset tells this replay
    /// from older ones, so a broker that was down still replays once.
    ReplayTransform {
        name: String,
        from: i64,
    },
    DeleteTransform {
        name: String,
    },
}

impl MetadataRecord {
    /// What kind of record this is, for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            MetadataRecord::InitCluster { .. } => "InitCluster",
            MetadataRecord::RegisterBroker(_) => "RegisterBroker",
            MetadataRecord::FenceBroker { .. } => "FenceBroker",
            MetadataRecord::UnfenceBroker { .. } => "UnfenceBroker",
            MetadataRecord::CreateTopic { .. } => "CreateTopic",
            MetadataRecord::DeleteTopic { .. } => "DeleteTopic",
            MetadataRecord::PartitionChange { .. } => "PartitionChange",
            MetadataRecord::ConfigChange { .. } => "ConfigChange",
            MetadataRecord::ProducerIdBlock { .. } => "ProducerIdBlock",
            MetadataRecord::RegisterPlugin(_) => "RegisterPlugin",
            MetadataRecord::RemovePlugin { .. } => "RemovePlugin",
            MetadataRecord::AttachPlugin(_) => "AttachPlugin",
            MetadataRecord::DetachPlugin { .. } => "DetachPlugin",
            MetadataRecord::DeployTransform(_) => "DeployTransform",
            MetadataRecord::PauseTransform { .. } => "PauseTransform",
            MetadataRecord::ReplayTransform { .. } => "ReplayTransform",
            MetadataRecord::DeleteTransform { .. } => "DeleteTransform",
        }
    }
}

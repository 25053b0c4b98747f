//! The plain values `Node` serves: requests and answers of the data path,
//! metadata and admin, as the RPC edge decodes and encodes them.

use crate::error::ApiError;

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
    /// While a reassignment runs, the replicas it moves the partition to.
    pub target_replicas: Option<Vec<i32>>,
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

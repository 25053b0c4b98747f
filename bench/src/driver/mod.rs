//! One driver per system: the same few operations (create/delete a topic, publish a
//! record and await its acknowledgement, read records) over each system's own
//! client library, so every workload runs unchanged against Weir, NATS JetStream
//! and Kafka.
//!
//! Mapping of the shared vocabulary:
//! - topic: a Weir or Kafka topic; a JetStream stream named after it, with
//!   subjects `<topic>.<partition>` (one stream per topic, as the
//!   OpenMessaging-Benchmark NATS driver does; a stream is one ordered log).
//! - durability: [`Durability::PageCache`] = Weir `flush.policy=interval`, Kafka's
//!   default, NATS's default `sync_interval`; [`Durability::Fsync`] = Weir
//!   `flush.policy=always`, Kafka topic `flush.messages=1`, a NATS server started
//!   with `sync_interval: always` (a server-wide setting: the harness runs one
//!   NATS server per durability).
//! - replication (the replicated workload, Weir and Kafka clusters only): the
//!   topic's replication factor and `min.insync.replicas`; the producer's
//!   `acks=all` with idempotence ([`ProducerSpec::acks_all`]).
//!
//! Futures are boxed: drivers are chosen at run time, and every system pays the
//! same two allocations per record.

use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

pub mod kafka;
pub mod nats;
pub mod weir;

/// When a system acknowledges a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Durability {
    /// In the OS page cache (Kafka's and NATS's default).
    PageCache,
    /// fdatasync'ed before the acknowledgement.
    Fsync,
}

impl Durability {
    pub fn label(self) -> &'static str {
        match self {
            Durability::PageCache => "page cache",
            Durability::Fsync => "fsync",
        }
    }
}

/// What a workload asks of a topic.
#[derive(Clone, Debug)]
pub struct TopicSpec {
    pub name: String,
    pub partitions: i32,
    pub durability: Durability,
    /// Copies of each partition (1 on a single server).
    pub replication_factor: i16,
    /// `min.insync.replicas` (`None`: the system's default, 1).
    pub min_insync_replicas: Option<i16>,
}

impl TopicSpec {
    /// One copy of each partition.
    pub fn new(name: impl Into<String>, partitions: i32, durability: Durability) -> TopicSpec {
        TopicSpec { name: name.into(), partitions, durability, replication_factor: 1, min_insync_replicas: None }
    }

    /// `replication_factor` copies, `min_insync_replicas` of them in sync for `acks=all`.
    pub fn replicated(mut self, replication_factor: i16, min_insync_replicas: i16) -> TopicSpec {
        self.replication_factor = replication_factor;
        self.min_insync_replicas = Some(min_insync_replicas);
        self
    }
}

/// How a producer batches and acknowledges, in Kafka's terms; each driver maps
/// them onto its client's settings.
#[derive(Clone, Copy, Debug)]
pub struct ProducerSpec {
    /// `acks=all` with idempotence (else `acks=1` without): every fsync run, and
    /// every run of the replicated workload (the topic carries the durability).
    pub acks_all: bool,
    /// `linger.ms`.
    pub linger: Duration,
    /// `batch.size`, bytes.
    pub batch_bytes_max: usize,
}

/// Where a subscriber starts reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// The first record of every partition (catch-up read).
    Beginning,
    /// Only records written after the subscriber exists (end-to-end latency).
    End,
}

/// The acknowledgement of one published record.
pub type Ack = BoxFuture<'static, anyhow::Result<()>>;

/// A connection to one running system.
pub trait Driver: Send + Sync {
    fn create_topic<'a>(&'a self, topic: &'a TopicSpec) -> BoxFuture<'a, anyhow::Result<()>>;
    fn delete_topic<'a>(&'a self, name: &'a str) -> BoxFuture<'a, anyhow::Result<()>>;
    /// A new producer client (its own connection).
    fn publisher<'a>(
        &'a self,
        topic: &'a TopicSpec,
        spec: ProducerSpec,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn Publisher>>>;
    /// A new consumer client reading every partition of `topic`, without a group.
    fn subscriber<'a>(
        &'a self,
        topic: &'a TopicSpec,
        start: Start,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn Subscriber>>>;
}

pub trait Publisher: Send + Sync {
    /// Queues one record for `partition`; resolves once queued (waiting only for
    /// the client's own buffer), giving the future of its acknowledgement.
    fn send<'a>(&'a self, partition: i32, payload: &'a [u8]) -> BoxFuture<'a, anyhow::Result<Ack>>;
    /// Sends what is queued and waits for every acknowledgement.
    fn flush(&self) -> BoxFuture<'_, anyhow::Result<()>>;
}

pub trait Subscriber: Send {
    /// Waits up to `timeout` for records, hands each value to `sink`, returns how
    /// many it handed over.
    fn poll<'a>(
        &'a mut self,
        timeout: Duration,
        sink: &'a mut (dyn FnMut(&[u8]) + Send),
    ) -> BoxFuture<'a, anyhow::Result<usize>>;
}

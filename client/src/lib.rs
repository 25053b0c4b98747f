//! `client`: the one implementation of Weir's client protocol.
//!
//! Every SDK (Rust, Python, Node, Go) is a thin layer over this crate, so
//! batching, partitioning (Kafka-compatible murmur2 for keys), retries,
//! idempotence, metadata routing and (soon) consumer-group membership behave the
//! same in every language. It speaks Cap'n Proto RPC (`abi/schema/weir.capnp`).
//!
//! - [`Producer`]: per-partition batching with linger, idempotent retries,
//!   lz4/zstd compression, backpressure; [`ProducerRecord`] in,
//!   [`RecordMetadata`] out.
//! - [`Consumer`]: assign partitions, seek (offset, timestamp, beginning, end),
//!   prefetching long-poll fetches; [`ConsumerRecord`]s share the fetched bytes.
//! - [`Admin`]: topics, cluster metadata and consumer groups (lag, resets).
//! - [`Consumer::subscribe`]: consumer-group membership (see [`group`]).
//! - [`cluster`]: the metadata cache and connection pool every client shares;
//!   requests go straight to each partition's leader.
//!
//! Every client must be created inside a tokio runtime (its background tasks run
//! there). Each broker connection runs on its own thread (capnp-rpc is `!Send`),
//! so every client type is `Send + Sync` and usable from any runtime.
//!
//! ```no_run
//! use client::{Admin, CommonConfig, Consumer, ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord};
//!
//! # async fn example() -> Result<(), client::ClientError> {
//! let admin = Admin::new(CommonConfig::default())?; // 127.0.0.1:9292
//! admin.create_topic(NewTopic::new("orders", 3)).await?;
//!
//! let producer = Producer::new(ProducerConfig::default())?;
//! let delivery = producer.send(ProducerRecord::new("orders", "hello").key("user-42")).await?;
//! let metadata = delivery.await?; // acknowledged: durable on the broker
//! println!("partition {} offset {}", metadata.partition, metadata.offset);
//!
//! let consumer = Consumer::new(ConsumerConfig::default())?;
//! consumer.assign(&[("orders".to_owned(), metadata.partition)]).await?;
//! consumer.seek("orders", metadata.partition, Offset::Beginning)?;
//! for record in consumer.poll(std::time::Duration::from_secs(1)).await? {
//!     println!("{} {:?}", record.offset, record.value);
//! }
//! # Ok(())
//! # }
//! ```

pub mod admin;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod consumer;
pub mod error;
pub mod group;
/// Kafka-compatible key partitioning (from `abi`, shared with the broker).
pub mod partitioner {
    pub use abi::partitioner::*;
}
pub mod plugins;
pub mod producer;
pub mod record;
mod wasm_partitioner;

pub use abi::batch::{BatchBuilder, Compression, RecordBatch};
pub use abi::ErrorCode;
pub use admin::{
    Admin, BrokerStatus, ClusterDescription, ClusterStatus, CommittedOffset, GroupDescription, GroupListing,
    GroupMember, NewTopic, PartitionLag, TopicDescription,
};
pub use cluster::{BrokerInfo, Cluster, PartitionInfo, PartitionerRef, TopicInfo};
pub use config::{Acks, CommonConfig, ConsumerConfig, OffsetReset, ProducerConfig, DEFAULT_BOOTSTRAP_SERVERS};
pub use consumer::{Consumer, Offset};
pub use error::ClientError;
pub use group::RebalanceListener;
pub use plugins::{
    Attach, PluginAttachment, PluginCallReport, PluginDescription, PluginLogLine, TransformPartition, TransformSpec,
    TransformStatus, TRANSFORM_EARLIEST, TRANSFORM_LATEST,
};
pub use producer::{DeliveryFuture, Producer};
pub use record::{ConsumerRecord, ProducerRecord, RecordMetadata, RecordRef};

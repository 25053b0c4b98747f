//! `client`: the one implementation of Weir's client protocol.
//!
//! Every SDK (Rust, Python, Node, Go) will be a thin layer over this crate, so
//! batching, partitioning (Kafka-compatible murmur2 for keys), retries,
//! idempotence, metadata routing and consumer-group membership behave the same in
//! every language. It speaks Cap'n Proto RPC to the broker.
//!
//! Status: the protocol (producer, consumer, admin over the RPC schema in `abi`)
//! arrives with the single-node broker. What exists: [`partitioner`], Kafka-compatible
//! key partitioning, and the record batch codec re-exported so client code builds on
//! the same bytes the log stores.

pub mod partitioner;

pub use abi::batch::{BatchBuilder, RecordBatch};

//! `client`: the one implementation of Weir's client protocol.
//!
//! Every SDK (Rust, Python, Node, Go) will be a thin layer over this crate, so
//! batching, partitioning (Kafka-compatible murmur2 for keys), retries,
//! idempotence, metadata routing and consumer-group membership behave the same in
//! every language. It speaks Cap'n Proto RPC to the broker.
//!
//! Status: empty. The protocol arrives with the single-node broker (the RPC
//! schema in `abi`); until then the only shared piece is the record batch codec,
//! re-exported here so client code builds on the same bytes the log stores.

pub use abi::batch::{BatchBuilder, RecordBatch};

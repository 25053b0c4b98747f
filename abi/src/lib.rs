//! `abi`: Weir's wire contract.
//!
//! Everything that crosses a process boundary or lands on disk has its byte
//! layout defined here, once, so the broker, the client and the tools agree by
//! construction:
//!
//! - [`batch`]: a byte-exact codec of Apache Kafka's RecordBatch v2 (magic 2),
//!   the unit Weir stores in its log and ships over the wire. The hot path
//!   ([`BatchView`]) reads header fields and checks the CRC without decoding
//!   or decompressing records; the full model ([`RecordBatch`]) encodes and
//!   decodes every byte, compressing and decompressing LZ4 and zstd records
//!   (bounded by [`DECOMPRESSED_BYTES_MAX`]).
//! - [`varint`]: the zigzag varints and varlongs used inside records.
//!
//! - [`error_code`]: the one table of wire error codes every SDK maps from.
//!
//! - [`weir_capnp`]: Rust generated from `abi/schema/weir.capnp`, the client RPC
//!   contract (checked in, so building needs no `capnp` binary; `tests/schema.rs`
//!   fails when it is stale).
//!
//! Invariants: decoding never panics on any input and reports typed errors;
//! re-encoding a decoded uncompressed batch reproduces its bytes exactly
//! whenever its varints were in their shortest form (as every Kafka client
//! writes them); a compressed one re-encodes to a batch that decodes the same.

pub mod batch;
pub mod error_code;
pub mod partitioner;
pub mod varint;

/// Generated from `schema/weir.capnp` by capnpc; do not edit (see `tests/schema.rs`).
#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, clippy::expect_used, missing_debug_implementations)]
#[rustfmt::skip]
pub mod weir_capnp;

pub use batch::{
    set_base_offset, set_partition_leader_epoch, Attributes, BatchBuilder, BatchError, BatchIter, BatchView,
    Compression, Header, Record, RecordBatch, TimestampType, BATCH_HEADER_BYTES, DECOMPRESSED_BYTES_MAX,
    LOG_OVERHEAD_BYTES, MAGIC_V2,
};
pub use error_code::ErrorCode;
pub use varint::VarintError;

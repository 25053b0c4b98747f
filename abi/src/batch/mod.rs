//! Kafka RecordBatch v2 (magic 2): the unit Weir stores and ships.
//!
//! One concept per file:
//! - [`view`](BatchView): zero-copy header access and CRC check over one
//!   encoded batch (the broker's hot path), plus in-place stamping of the
//!   fields the CRC does not cover;
//! - [`iter`](BatchIter): walking a buffer of concatenated batches;
//! - [`model`](RecordBatch): the fully decoded batch and its byte-exact
//!   encoder and decoder;
//! - [`record`](Record): one record and its headers inside a batch;
//! - [`attributes`](Attributes): the attribute bits of a batch;
//! - `compression`: the LZ4 and zstd codecs of the records section, with
//!   decompression bounded by [`DECOMPRESSED_BYTES_MAX`];
//! - [`builder`](BatchBuilder): the convenient way to assemble a batch;
//! - [`writer`](BatchWriter): the producer's allocation-free way to encode one;
//! - [`records`](RecordRefs): the consumer's zero-copy walk over a batch's
//!   records (byte ranges, not copies);
//! - [`error`](BatchError): everything that can be wrong with a batch.
//!
//! The header layout is documented on [`BatchView`], the record layout on
//! [`Record`]. All fixed-width integers are big-endian. The CRC is CRC-32C
//! (Castagnoli) over every byte from the attributes to the end of the batch,
//! so the base offset, batch length, partition leader epoch and magic can
//! change without invalidating it (see [`set_base_offset`]).
//!
//! Compression (attributes bits 0-2) applies to the records section only:
//! everything after the 61-byte header is one compressed stream, while the
//! header, records count included, stays plain and the CRC covers the
//! compressed bytes. So [`BatchView`] works the same on compressed batches
//! and never decompresses; [`RecordBatch`] compresses and decompresses LZ4
//! and zstd transparently, and rejects gzip and snappy
//! ([`BatchError::UnsupportedCompression`]).

mod attributes;
mod builder;
mod compression;
mod cursor;
mod error;
mod iter;
mod model;
mod record;
mod records;
mod view;
mod writer;

pub use attributes::{Attributes, Compression, TimestampType};
pub use builder::BatchBuilder;
pub use error::BatchError;
pub use iter::BatchIter;
pub use model::RecordBatch;
pub use record::{Header, Record};
pub use records::{records_section, records_section_unverified, validate_records, RecordRef, RecordRefs};
pub use view::{reseal, set_base_offset, set_base_sequence, set_partition_leader_epoch, BatchView};
pub use writer::{BatchWriter, ProducerFields};

/// Size of the batch header: everything before the first record.
pub const BATCH_HEADER_BYTES: usize = 61;
/// Size of the log overhead: base offset (8) + batch length (4). The batch
/// length counts every byte after it.
pub const LOG_OVERHEAD_BYTES: usize = 12;
/// The only magic (format version) Weir reads and writes.
pub const MAGIC_V2: i8 = 2;
/// Smallest legal batch length: a header with no records.
pub const MIN_BATCH_LENGTH: i32 = (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32;
/// Most bytes [`RecordBatch::decode`] lets a compressed records section
/// decompress to (64 MiB); one more is [`BatchError::DecompressedTooLarge`].
/// Guards against decompression bombs; [`RecordBatch::decode_with_limit`]
/// takes another limit.
pub const DECOMPRESSED_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Byte positions of the header fields inside an encoded batch (see the
/// table on [`BatchView`]).
pub mod field {
    /// Base offset, int64: offset of the first record.
    pub const BASE_OFFSET: usize = 0;
    /// Batch length, int32: bytes after this field.
    pub const BATCH_LENGTH: usize = 8;
    /// Partition leader epoch, int32: stamped by the leader on append.
    pub const PARTITION_LEADER_EPOCH: usize = 12;
    /// Magic, int8: format version, always 2 here.
    pub const MAGIC: usize = 16;
    /// CRC, uint32: CRC-32C of bytes `ATTRIBUTES..`.
    pub const CRC: usize = 17;
    /// Attributes, int16: first CRC-covered byte.
    pub const ATTRIBUTES: usize = 21;
    /// Last offset delta, int32.
    pub const LAST_OFFSET_DELTA: usize = 23;
    /// Base timestamp, int64.
    pub const BASE_TIMESTAMP: usize = 27;
    /// Max timestamp, int64.
    pub const MAX_TIMESTAMP: usize = 35;
    /// Producer id, int64.
    pub const PRODUCER_ID: usize = 43;
    /// Producer epoch, int16.
    pub const PRODUCER_EPOCH: usize = 51;
    /// Base sequence, int32.
    pub const BASE_SEQUENCE: usize = 53;
    /// Records count, int32.
    pub const RECORDS_COUNT: usize = 57;
}

//! [`BatchError`]: everything that can be wrong with an encoded batch.
//!
//! Role: the single error type of the batch codec, shared by the zero-copy
//! view, the full decoder and the encoder. Every variant carries the numbers
//! an operator needs to see what was wrong (stored vs computed CRC, declared
//! vs actual length, ...) and its message reads on its own in a log line.
//!
//! Invariant: errors are plain data (`Clone + PartialEq`), so callers and
//! tests can match on them exactly; a codec library's error is kept as its
//! message ([`BatchError::Decompression`]).

use super::attributes::Compression;

/// Why bytes are not a valid Kafka RecordBatch v2, or why a batch cannot be
/// encoded.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// The buffer ends before the batch does.
    #[error("record batch truncated: needed {needed} bytes, only {available} available")]
    Truncated {
        /// Bytes needed to go on (the whole batch, once its length is known).
        needed: usize,
        /// Bytes the buffer holds.
        available: usize,
    },
    /// The batch length field disagrees with the bytes given for one batch.
    #[error(
        "record batch length mismatch: batch length field declares {declared} bytes after the \
         12-byte log overhead, but {actual} are present"
    )]
    LengthMismatch {
        /// Value of the batch length field.
        declared: i64,
        /// Bytes actually present after the log overhead.
        actual: usize,
    },
    /// The magic byte is not 2.
    #[error("unsupported record batch magic {magic}: only magic 2 (RecordBatch v2) is supported")]
    UnsupportedMagic {
        /// The magic byte found.
        magic: i8,
    },
    /// The stored CRC does not match the bytes it covers.
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// CRC stored in the header.
        stored: u32,
        /// CRC-32C computed over the attributes and everything after.
        computed: u32,
    },
    /// The records count is impossible for the last offset delta.
    #[error(
        "invalid records count {records_count} for last offset delta {last_offset_delta}: a batch \
         must hold at least 1 and at most last offset delta + 1 records"
    )]
    InvalidRecordCount {
        /// Records count field.
        records_count: i32,
        /// Last offset delta field.
        last_offset_delta: i32,
    },
    /// The attributes name a compression codec Kafka does not define.
    #[error("unknown compression codec {codec} in record batch attributes (known: 0 to 4)")]
    UnknownCompression {
        /// The codec bits (0 to 7) of the attributes.
        codec: u8,
    },
    /// The batch is compressed with a codec this build cannot handle (gzip
    /// and snappy).
    #[error("record batch compression {compression} is not supported (supported: none, lz4, zstd)")]
    UnsupportedCompression {
        /// The codec named by the attributes.
        compression: Compression,
    },
    /// The compressed records section is not valid data for its codec
    /// (corrupt, truncated, or followed by garbage).
    #[error("record batch records section is not valid {compression} data: {reason}")]
    Decompression {
        /// The codec named by the attributes.
        compression: Compression,
        /// What the codec library reported.
        reason: String,
    },
    /// The records section decompresses to more bytes than the decoder
    /// accepts (see [`DECOMPRESSED_BYTES_MAX`](super::DECOMPRESSED_BYTES_MAX)).
    #[error("record batch records section ({compression}) decompresses to more than the {limit}-byte limit")]
    DecompressedTooLarge {
        /// The codec named by the attributes.
        compression: Compression,
        /// The limit in bytes that was exceeded.
        limit: usize,
    },
    /// A record's offset delta is not its position in the batch. A producer's
    /// batch numbers its records 0, 1, 2, …; anything else makes consumers
    /// compute wrong or duplicate offsets.
    #[error("record {index} of the batch has offset delta {offset_delta}, expected {index}")]
    OffsetDeltaMismatch {
        /// Position of the record in the batch (0-based).
        index: usize,
        /// The offset delta it carries.
        offset_delta: i32,
    },
    /// A record's timestamp delta takes its timestamp outside the 64-bit range.
    #[error("record {index} of the batch has timestamp delta {timestamp_delta}, which overflows the base timestamp")]
    TimestampOverflow {
        /// Position of the record in the batch (0-based).
        index: usize,
        /// The timestamp delta it carries.
        timestamp_delta: i64,
    },
    /// The bytes break the record layout (or a model cannot be encoded).
    #[error("malformed record batch: {reason}")]
    Malformed {
        /// What exactly is wrong.
        reason: &'static str,
    },
}

impl BatchError {
    /// Shorthand for [`BatchError::Malformed`].
    pub(crate) fn malformed(reason: &'static str) -> Self {
        Self::Malformed { reason }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_read_well_in_a_log_line() {
        let crc = BatchError::CrcMismatch { stored: 0xdead_beef, computed: 0x0000_0042 };
        assert_eq!(crc.to_string(), "record batch CRC mismatch: stored 0xdeadbeef, computed 0x00000042");
        let truncated = BatchError::Truncated { needed: 61, available: 12 };
        assert_eq!(truncated.to_string(), "record batch truncated: needed 61 bytes, only 12 available");
        let unsupported = BatchError::UnsupportedCompression { compression: Compression::Gzip };
        assert_eq!(
            unsupported.to_string(),
            "record batch compression gzip is not supported (supported: none, lz4, zstd)"
        );
        let too_large = BatchError::DecompressedTooLarge { compression: Compression::Lz4, limit: 1024 };
        assert_eq!(
            too_large.to_string(),
            "record batch records section (lz4) decompresses to more than the 1024-byte limit"
        );
        let corrupt =
            BatchError::Decompression { compression: Compression::Zstd, reason: "Unknown frame descriptor".into() };
        assert_eq!(
            corrupt.to_string(),
            "record batch records section is not valid zstd data: Unknown frame descriptor"
        );
    }
}

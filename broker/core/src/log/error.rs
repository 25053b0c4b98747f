//! [`LogError`]: every way a partition log operation fails, with the facts an
//! operator or a client needs to act on it.

use std::io;
use std::path::PathBuf;

use abi::batch::BatchError;

use super::ConfigError;

/// A failed log operation.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The storage failed. After a failed write or sync the log fences itself.
    #[error("{op} failed on {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Data that should be intact is not. The partition is fenced: nothing is
    /// truncated, an operator (or, later, re-replication) must repair it.
    #[error(
        "partition log {} is corrupt in segment {segment_base_offset} at byte {position}: {reason}; \
         the partition is fenced, nothing was truncated (with the broker stopped, `weir repair DIR` \
         shows the damage and `weir repair DIR --truncate` cuts the log at it)",
        dir.display()
    )]
    Corrupt { dir: PathBuf, segment_base_offset: u64, position: u64, reason: String },
    /// A read or seek outside `[log_start_offset, log_end_offset]`.
    #[error("offset {offset} is out of range: the log holds [{log_start_offset}, {log_end_offset})")]
    OffsetOutOfRange { offset: u64, log_start_offset: u64, log_end_offset: u64 },
    /// An appended batch failed validation; nothing of the request was written.
    #[error("batch {batch_index} of the append is invalid: {source}")]
    InvalidBatch {
        batch_index: usize,
        #[source]
        source: BatchError,
    },
    /// An appended batch is bigger than `batch_bytes_max`.
    #[error("batch {batch_index} is {size_bytes} bytes, more than max.message.bytes {batch_bytes_max}")]
    BatchTooLarge { batch_index: usize, size_bytes: usize, batch_bytes_max: u32 },
    /// An append whose batches together exceed a segment.
    #[error("append of {size_bytes} bytes does not fit a segment (segment.bytes {segment_bytes_max})")]
    AppendTooLarge { size_bytes: usize, segment_bytes_max: u64 },
    /// An append with no batches.
    #[error("append carries no batches")]
    EmptyAppend,
    /// An append in a leader epoch older than one the log already holds (a
    /// deposed leader's).
    #[error("leader epoch {epoch} is older than epoch {latest} already in the log")]
    LeaderEpochBackwards { epoch: i32, latest: i32 },
    /// Replicated batches that do not continue the log at its end.
    #[error("replicated batches start at offset {found}, not at the log end {expected}")]
    NotContiguous { expected: u64, found: u64 },
    /// The log's configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The log was closed (shutdown); its owner must not be used any more.
    #[error("partition log {} is closed", dir.display())]
    Closed { dir: PathBuf },
    /// An earlier IO failure left the log in an unknown state; it refuses writes.
    #[error("partition log {} is fenced after an earlier failure: {reason}", dir.display())]
    Fenced { dir: PathBuf, reason: String },
}

impl LogError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> LogError {
        let path = path.into();
        move |source| LogError::Io { op, path, source }
    }
}

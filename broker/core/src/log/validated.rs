//! [`ValidatedBatches`]: an append request that passed every check that does not
//! need the log's state — batch framing, magic, CRC-32C, codec, one offset per
//! record, every record's framing and offset delta (compressed batches are
//! decompressed to check them, as Kafka's broker does), and the size limits.
//!
//! Validation is the expensive part of an append (the CRC reads every byte), and it
//! needs nothing but the bytes and the limits. So the log's owner validates *before*
//! taking the partition lock ([`ValidatedBatches::new`]) and appends under it
//! ([`super::Log::append_validated`]), which only stamps offsets and writes. The
//! type is the proof that validation happened; the log re-checks only the cheap size
//! limits, in case its config changed in between.

use std::cell::RefCell;

use abi::batch::{validate_records, BatchError, BatchView, DECOMPRESSED_BYTES_MAX};

use super::{LogConfig, LogError};

thread_local! {
    /// Decompression buffer of the validating thread, reused across batches.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Largest decompression buffer a thread keeps between appends.
const SCRATCH_KEPT_BYTES: usize = 4 * 1024 * 1024;

/// Where one validated batch sits in the request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BatchSpan {
    pub position: usize,
    pub size_bytes: usize,
    pub last_offset_delta: u64,
    pub max_timestamp: i64,
}

/// Batches laid back to back, all valid; see the module docs.
#[derive(Debug)]
pub struct ValidatedBatches<'a> {
    pub(crate) bytes: &'a mut [u8],
    pub(crate) spans: Vec<BatchSpan>,
}

impl<'a> ValidatedBatches<'a> {
    /// Checks every batch of the request against `config`'s limits. All or nothing:
    /// the first failure names the batch.
    pub fn new(bytes: &'a mut [u8], config: &LogConfig) -> Result<ValidatedBatches<'a>, LogError> {
        if bytes.len() as u64 > config.segment_bytes_max {
            return Err(LogError::AppendTooLarge {
                size_bytes: bytes.len(),
                segment_bytes_max: config.segment_bytes_max,
            });
        }
        let mut spans = Vec::new();
        let mut rest: &[u8] = bytes;
        let mut position = 0usize;
        while !rest.is_empty() {
            let batch_index = spans.len();
            let invalid = |source| LogError::InvalidBatch { batch_index, source };
            let (view, tail) = BatchView::split_first(rest).map_err(invalid)?;
            check_size(batch_index, view.size_bytes(), config)?;
            view.validate().map_err(invalid)?;
            // A producer's batch has no gaps: one offset per record. (Gaps only come
            // from compaction, through replication, which will append differently.)
            if i64::from(view.last_offset_delta()) + 1 != i64::from(view.records_count()) {
                let source = BatchError::InvalidRecordCount {
                    records_count: view.records_count(),
                    last_offset_delta: view.last_offset_delta(),
                };
                return Err(invalid(source));
            }
            // Every record as a consumer will read it (framing, offset deltas, the
            // compressed stream): a batch stored here decodes in every client.
            SCRATCH
                .with_borrow_mut(|scratch| {
                    let checked = validate_records(&view, scratch, DECOMPRESSED_BYTES_MAX);
                    // Keep an outsized decompression buffer only until the next call.
                    if scratch.capacity() > SCRATCH_KEPT_BYTES {
                        *scratch = Vec::new();
                    }
                    checked
                })
                .map_err(invalid)?;
            let size_bytes = view.size_bytes();
            let last_offset_delta = view.last_offset_delta() as u64;
            spans.push(BatchSpan { position, size_bytes, last_offset_delta, max_timestamp: view.max_timestamp() });
            position += size_bytes;
            rest = tail;
        }
        if spans.is_empty() {
            return Err(LogError::EmptyAppend);
        }
        Ok(ValidatedBatches { bytes, spans })
    }

    /// Re-checks the size limits against `config` (cheap; no bytes are read).
    pub(crate) fn check_limits(&self, config: &LogConfig) -> Result<(), LogError> {
        if self.bytes.len() as u64 > config.segment_bytes_max {
            let segment_bytes_max = config.segment_bytes_max;
            return Err(LogError::AppendTooLarge { size_bytes: self.bytes.len(), segment_bytes_max });
        }
        for (batch_index, span) in self.spans.iter().enumerate() {
            check_size(batch_index, span.size_bytes, config)?;
        }
        Ok(())
    }

    /// Total bytes of the request.
    pub fn size_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Number of batches.
    pub fn batch_count(&self) -> usize {
        self.spans.len()
    }
}

fn check_size(batch_index: usize, size_bytes: usize, config: &LogConfig) -> Result<(), LogError> {
    if size_bytes > config.batch_bytes_max as usize {
        let batch_bytes_max = config.batch_bytes_max;
        return Err(LogError::BatchTooLarge { batch_index, size_bytes, batch_bytes_max });
    }
    Ok(())
}

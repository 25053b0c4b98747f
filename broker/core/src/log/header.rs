//! [`BatchHeader`]: the few header fields the log needs, read without touching
//! records or the CRC (index walks, recovery, reads).
//!
//! Layout is Kafka RecordBatch v2; field positions come from `abi::batch::field`.

use std::io;

use abi::batch::{field, BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES};

use crate::storage::File;

/// The smallest legal value of the batch length field (a header with no records).
pub(crate) const BATCH_LENGTH_MIN: i32 = abi::batch::MIN_BATCH_LENGTH;

/// Header fields of one stored batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BatchHeader {
    pub base_offset: u64,
    pub last_offset: u64,
    pub max_timestamp: i64,
    /// Whole batch, log overhead included.
    pub size_bytes: u64,
}

fn be_i64(bytes: &[u8], at: usize) -> i64 {
    let mut buffer = [0u8; 8];
    buffer.copy_from_slice(&bytes[at..at + 8]);
    i64::from_be_bytes(buffer)
}

fn be_i32(bytes: &[u8], at: usize) -> i32 {
    let mut buffer = [0u8; 4];
    buffer.copy_from_slice(&bytes[at..at + 4]);
    i32::from_be_bytes(buffer)
}

/// The batch length field of the batch starting at `bytes` (at least 12 bytes).
pub(crate) fn batch_length(bytes: &[u8]) -> i32 {
    be_i32(bytes, field::BATCH_LENGTH)
}

impl BatchHeader {
    /// Parses the first [`BATCH_HEADER_BYTES`] of `bytes`; `None` when too short or
    /// when the fields are impossible (negative offsets, length below the minimum).
    pub fn parse(bytes: &[u8]) -> Option<BatchHeader> {
        if bytes.len() < BATCH_HEADER_BYTES {
            return None;
        }
        let base_offset = u64::try_from(be_i64(bytes, field::BASE_OFFSET)).ok()?;
        let length = batch_length(bytes);
        let last_offset_delta = u64::try_from(be_i32(bytes, field::LAST_OFFSET_DELTA)).ok()?;
        if length < BATCH_LENGTH_MIN {
            return None;
        }
        Some(BatchHeader {
            base_offset,
            last_offset: base_offset.checked_add(last_offset_delta)?,
            max_timestamp: be_i64(bytes, field::MAX_TIMESTAMP),
            size_bytes: LOG_OVERHEAD_BYTES as u64 + length as u64,
        })
    }

    /// Reads the header of the batch at `position`; `Ok(None)` when the file ends
    /// before a whole header or the header is impossible.
    pub fn read(file: &dyn File, position: u64) -> io::Result<Option<BatchHeader>> {
        let mut buffer = [0u8; BATCH_HEADER_BYTES];
        let read_count = file.read_at(&mut buffer, position)?;
        Ok(BatchHeader::parse(&buffer[..read_count]))
    }

    pub fn next_offset(&self) -> u64 {
        self.last_offset + 1
    }
}

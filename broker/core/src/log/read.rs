//! [`ReadPlan`]: a fetch decided under the log's lock and carried out outside it.
//!
//! [`super::Log::read`] does the cheap part (range checks, segment choice, index
//! lookup) while its owner holds the lock; the plan then reads from the segment file
//! with no lock held, so slow reads never stall appends. The plan holds its own file
//! handle: a segment deleted by retention meanwhile still reads fine.
//!
//! The bytes returned are the stored batches, unchanged (never re-encoded): whole
//! batches only, starting with the batch that holds the requested offset, at most
//! `max_bytes` unless the first batch alone is bigger (then exactly that batch, so a
//! consumer always progresses — unless [`ReadPlan::within_max_bytes`] says the
//! answer must not exceed `max_bytes`: then nothing is read), and never a batch
//! reaching `offset_end` (the high watermark).

use std::path::PathBuf;
use std::sync::Arc;

use super::header::BatchHeader;
use super::segment::locate_batch;
use super::LogError;
use crate::storage::File;

/// A read to perform; see the module docs.
#[derive(Debug)]
pub struct ReadPlan {
    pub(crate) file: Option<Arc<dyn File>>,
    pub(crate) path: PathBuf,
    /// A batch start at or before the batch holding `offset` (from the sparse index).
    pub(crate) start_position: u64,
    /// End of the segment's whole batches when the plan was made.
    pub(crate) end_position: u64,
    pub(crate) offset: u64,
    pub(crate) offset_end: u64,
    pub(crate) max_bytes: usize,
    /// Whether a first batch bigger than `max_bytes` is returned whole.
    pub(crate) first_batch_may_exceed: bool,
    /// Log start offset when the plan was made.
    pub log_start_offset: u64,
    /// Log end offset when the plan was made.
    pub log_end_offset: u64,
}

/// What [`ReadPlan::read_into`] placed in the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadInfo {
    /// Base offset of the first batch returned (may be below the requested offset:
    /// batches are returned whole); equals `next_offset` when nothing was read.
    pub first_offset: u64,
    /// Offset after the last batch returned: where the next read continues.
    pub next_offset: u64,
    /// Number of whole batches returned.
    pub batch_count: usize,
}

impl ReadPlan {
    /// Never returns more than `max_bytes`, not even one batch: what a multi-partition
    /// fetch uses once another partition's bytes are in its answer. A first batch
    /// that does not fit is not read at all (only its header), so an answer that is
    /// full costs no reads, whatever the request asks for after it.
    pub fn within_max_bytes(mut self) -> ReadPlan {
        self.first_batch_may_exceed = false;
        self
    }

    /// Reads the planned batches into `buffer` (cleared first; reuse it across calls
    /// to avoid allocation). Returns what was read.
    pub fn read_into(&self, buffer: &mut Vec<u8>) -> Result<ReadInfo, LogError> {
        let (info, kept_bytes) = self.read_into_prefix(buffer)?;
        buffer.truncate(kept_bytes);
        Ok(info)
    }

    /// Like [`ReadPlan::read_into`], but leaves `buffer`'s length alone (it only
    /// grows) and returns how many leading bytes hold the batches. A buffer reused
    /// this way is never zeroed again, which matters for multi-MiB fetches.
    pub fn read_into_prefix(&self, buffer: &mut Vec<u8>) -> Result<(ReadInfo, usize), LogError> {
        let nothing = ReadInfo { first_offset: self.offset, next_offset: self.offset, batch_count: 0 };
        let Some(file) = self.file.as_deref() else { return Ok((nothing, 0)) };
        let located = locate_batch(file, &self.path, self.start_position, self.end_position, self.offset)?;
        let Some((position, first)) = located.filter(|(_, header)| header.last_offset < self.offset_end) else {
            return Ok((nothing, 0));
        };
        if !self.first_batch_may_exceed && first.size_bytes as usize > self.max_bytes {
            return Ok((nothing, 0));
        }
        let available = (self.end_position - position) as usize;
        let want = self.max_bytes.max(first.size_bytes as usize).min(available);
        if buffer.len() < want {
            buffer.resize(want, 0);
        }
        file.read_exact_at(&mut buffer[..want], position).map_err(LogError::io("read", &self.path))?;
        let (kept_bytes, next_offset, batch_count) = self.whole_batches(&buffer[..want]);
        Ok((ReadInfo { first_offset: first.base_offset, next_offset, batch_count }, kept_bytes))
    }

    /// Length of the prefix of `bytes` made of whole batches below `offset_end`.
    fn whole_batches(&self, bytes: &[u8]) -> (usize, u64, usize) {
        let (mut kept_bytes, mut next_offset, mut batch_count) = (0usize, self.offset, 0usize);
        while let Some(header) = BatchHeader::parse(&bytes[kept_bytes..]) {
            let end = kept_bytes + header.size_bytes as usize;
            if end > bytes.len() || header.last_offset >= self.offset_end {
                break;
            }
            kept_bytes = end;
            next_offset = header.next_offset();
            batch_count += 1;
        }
        (kept_bytes, next_offset, batch_count)
    }
}

//! Sequential validation of a segment's `.log` file: the heart of recovery.
//!
//! The scan walks batches from position 0, checking for each: a whole header, a
//! plausible length, the batch inside the file, magic 2, the CRC-32C, and that its
//! base offset continues the previous batch. At the first batch that fails it
//! decides what kind of damage it found:
//!
//! 1. **Torn tail** — the last write did not fully reach the disk: the batch ends past
//!    the end of the file, only zeros follow, or the bytes there are garbage (the
//!    file grew but its data blocks did not: random bytes, stale blocks, a batch
//!    header without its body), *and no valid batch continuing the log's offsets
//!    follows anywhere after it*. Nothing there was ever durable (a sync covers
//!    whole appends), so recovery may truncate at that position — the caller still
//!    checks it lies above the recovery point.
//! 2. **Corruption** — valid batches follow the damaged one, the "incomplete"
//!    batch is in fact whole and valid with only its length field damaged, or a
//!    whole CRC-valid batch continuing the log breaks a log invariant (no crash
//!    writes either). Durable, possibly acknowledged data is damaged: the partition
//!    is fenced and nothing is truncated.
//!
//! Stale blocks that happen to hold whole batches continuing the log's offsets
//! (data truncated away earlier, exposed again) look like damage followed by valid
//! data: fenced, never cut — safe, but the operator must run `weir repair`.
//!
//! What cannot be told apart: a last batch damaged in place (a bit flip, zeroed)
//! after its sync reads like a garbage tail, and is cut (its bytes copied aside)
//! unless the recovery point covers it. Crashes never damage synced bytes, so this
//! only matters for media corruption of the newest batches.
//!
//! The scan reads through a chunk buffer (`SCAN_CHUNK_BYTES`, grown to one batch
//! when a batch is bigger), never the whole segment at once; the damaged-length
//! check reads at most `DAMAGED_LENGTH_CHECK_BYTES_MAX`.
//!
//! Known limit: page writeback has no order within a file, so after a power cut an
//! unsynced tail can in principle hold a later page without an earlier one. That
//! looks like an invalid batch followed by data and is fenced (never cut): safe, but
//! it needs an operator. The in-memory storage models prefix tears and garbage after
//! them, not reordered pages.

use std::io;

use abi::batch::{field, BatchView, LOG_OVERHEAD_BYTES, MAGIC_V2};

use super::header::{batch_length, BatchHeader, BATCH_LENGTH_MIN};

use crate::storage::File;

/// Bytes read from the file per refill.
const SCAN_CHUNK_BYTES: usize = 1024 * 1024;
/// The largest tail checked for "a whole batch with a damaged length field": no
/// batch is bigger than this, so a longer tail cannot be one.
const DAMAGED_LENGTH_CHECK_BYTES_MAX: usize = 64 * 1024 * 1024;

/// How a scan ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ScanEnd {
    /// Every byte belongs to a valid batch.
    Clean,
    /// The file ends in an incomplete write starting at `position`.
    Torn { position: u64, reason: String },
    /// Damage at `position` that is not a torn write.
    Corrupt { position: u64, reason: String },
}

/// Reads a file through one reusable buffer.
struct ChunkReader<'a> {
    file: &'a dyn File,
    file_len: u64,
    buffer: Vec<u8>,
    buffer_start: u64,
}

impl<'a> ChunkReader<'a> {
    fn new(file: &'a dyn File, file_len: u64) -> ChunkReader<'a> {
        ChunkReader { file, file_len, buffer: Vec::new(), buffer_start: 0 }
    }

    /// `len` bytes at `position`; the caller keeps the range inside the file.
    fn bytes(&mut self, position: u64, len: usize) -> io::Result<&[u8]> {
        let buffer_end = self.buffer_start + self.buffer.len() as u64;
        if position < self.buffer_start || position + len as u64 > buffer_end {
            let want = len.max(SCAN_CHUNK_BYTES).min((self.file_len - position) as usize).max(len);
            self.buffer.resize(want, 0);
            self.file.read_exact_at(&mut self.buffer, position)?;
            self.buffer_start = position;
        }
        let start = (position - self.buffer_start) as usize;
        Ok(&self.buffer[start..start + len])
    }
}

/// Why the batch at `position` is not acceptable, and whether it is whole.
enum Defect {
    Incomplete(String),
    Invalid(String),
    /// A whole batch that passes its CRC and continues the log, yet breaks a log
    /// invariant: no crash writes that, so it is never a torn tail.
    Impossible(String),
}

/// Scans `file` (of `file_len` bytes) whose first batch must have `base_offset`;
/// `on_batch(position, header)` sees every valid batch in order.
pub(crate) fn scan_segment(
    file: &dyn File,
    file_len: u64,
    base_offset: u64,
    mut on_batch: impl FnMut(u64, &BatchHeader),
) -> io::Result<ScanEnd> {
    let mut reader = ChunkReader::new(file, file_len);
    let mut position = 0u64;
    let mut next_offset = base_offset;
    while position < file_len {
        match check_batch(base_offset, &mut reader, position, next_offset)? {
            Ok(header) => {
                on_batch(position, &header);
                next_offset = header.next_offset();
                position += header.size_bytes;
            }
            Err(defect) => {
                return classify(&mut reader, position, next_offset, defect);
            }
        }
    }
    Ok(ScanEnd::Clean)
}

fn check_batch(
    segment_base_offset: u64,
    reader: &mut ChunkReader<'_>,
    position: u64,
    expected_offset: u64,
) -> io::Result<Result<BatchHeader, Defect>> {
    let remaining = reader.file_len - position;
    if remaining < LOG_OVERHEAD_BYTES as u64 {
        return Ok(Err(Defect::Incomplete(format!("{remaining} bytes left, less than a batch header"))));
    }
    let length = batch_length(reader.bytes(position, LOG_OVERHEAD_BYTES)?);
    if length < BATCH_LENGTH_MIN {
        return Ok(Err(Defect::Invalid(format!("impossible batch length {length}"))));
    }
    let size_bytes = LOG_OVERHEAD_BYTES as u64 + length as u64;
    if size_bytes > remaining {
        return Ok(Err(Defect::Incomplete(format!("batch of {size_bytes} bytes, only {remaining} in the file"))));
    }
    let bytes = reader.bytes(position, size_bytes as usize)?;
    if let Err(error) = BatchView::new(bytes).and_then(|view| view.validate()) {
        return Ok(Err(Defect::Invalid(error.to_string())));
    }
    let Some(header) = BatchHeader::parse(bytes) else {
        return Ok(Err(Defect::Invalid("impossible header fields (negative offsets)".to_owned())));
    };
    if header.base_offset != expected_offset {
        let reason = format!("base offset {} where {expected_offset} was expected", header.base_offset);
        return Ok(Err(Defect::Invalid(reason)));
    }
    if header.last_offset - segment_base_offset > u32::MAX as u64 {
        let reason = format!("last offset {} does not fit the segment's u32 relative offsets", header.last_offset);
        return Ok(Err(Defect::Impossible(reason)));
    }
    Ok(Ok(header))
}

/// `expected_offset` is the base offset the batch at `position` should have had.
fn classify(reader: &mut ChunkReader<'_>, position: u64, expected_offset: u64, defect: Defect) -> io::Result<ScanEnd> {
    match defect {
        Defect::Impossible(reason) => Ok(ScanEnd::Corrupt { position, reason }),
        Defect::Incomplete(reason) if whole_but_length_damaged(reader, position)? => Ok(ScanEnd::Corrupt {
            position,
            reason: format!(
                "{reason}, yet the bytes to the end of the file form a whole valid batch: its length field is damaged"
            ),
        }),
        Defect::Incomplete(reason) => match valid_batch_after_torn(reader, position, expected_offset)? {
            Some(later) => Ok(ScanEnd::Corrupt {
                position,
                reason: format!("{reason}, yet a valid batch follows at byte {later}"),
            }),
            None => Ok(ScanEnd::Torn { position, reason }),
        },
        Defect::Invalid(reason) if zeros_from(reader, position)? => {
            Ok(ScanEnd::Torn { position, reason: format!("{reason} (only zeros to the end)") })
        }
        Defect::Invalid(reason) => {
            let continues =
                |base_offset: u64| (expected_offset..=expected_offset + u32::MAX as u64).contains(&base_offset);
            match valid_batch_after(reader, position, continues)? {
                Some(later) => Ok(ScanEnd::Corrupt {
                    position,
                    reason: format!("{reason}, yet a valid batch follows at byte {later}"),
                }),
                None => Ok(ScanEnd::Torn {
                    position,
                    reason: format!("{reason}, and no valid batch follows (a garbage tail)"),
                }),
            }
        }
    }
}

/// Whether the bytes from `position` to the end of the file are one whole, valid
/// batch once its length field (not covered by the CRC) is set to their length:
/// a damaged length, not a torn write.
fn whole_but_length_damaged(reader: &mut ChunkReader<'_>, position: u64) -> io::Result<bool> {
    let remaining = (reader.file_len - position) as usize;
    if !(abi::batch::BATCH_HEADER_BYTES..=DAMAGED_LENGTH_CHECK_BYTES_MAX).contains(&remaining) {
        return Ok(false);
    }
    let mut bytes = reader.bytes(position, remaining)?.to_vec();
    let length = (remaining - LOG_OVERHEAD_BYTES) as i32;
    bytes[field::BATCH_LENGTH..field::BATCH_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
    Ok(BatchView::new(&bytes).and_then(|view| view.validate()).is_ok())
}

/// Whether the batch ending at `end` (whose successor should start at
/// `next_offset`) is last in the file, or the next batch header (whole or not)
/// continues its offsets.
fn followed_by_continuation(reader: &mut ChunkReader<'_>, end: u64, next_offset: u64) -> io::Result<bool> {
    let header_bytes = abi::batch::BATCH_HEADER_BYTES;
    if end + header_bytes as u64 > reader.file_len {
        return Ok(true);
    }
    let header = reader.bytes(end, header_bytes)?;
    Ok(BatchHeader::parse(header).is_some_and(|parsed| parsed.base_offset == next_offset))
}

/// Whether every byte from `position` to the end is zero.
fn zeros_from(reader: &mut ChunkReader<'_>, mut position: u64) -> io::Result<bool> {
    while position < reader.file_len {
        let len = ((reader.file_len - position) as usize).min(SCAN_CHUNK_BYTES);
        if reader.bytes(position, len)?.iter().any(|&byte| byte != 0) {
            return Ok(false);
        }
        position += len as u64;
    }
    Ok(true)
}

/// The position of a valid batch after the incomplete one at `torn_position` that
/// continues the log: its base offset follows the torn batch's last offset (when
/// the torn header is readable) or at least `expected_offset`. Valid batches with
/// other offsets — a producer may store an encoded batch inside a record value —
/// do not count.
fn valid_batch_after_torn(
    reader: &mut ChunkReader<'_>,
    torn_position: u64,
    expected_offset: u64,
) -> io::Result<Option<u64>> {
    let header_bytes = abi::batch::BATCH_HEADER_BYTES as u64;
    let torn_next_offset = if torn_position + header_bytes <= reader.file_len {
        BatchHeader::parse(reader.bytes(torn_position, header_bytes as usize)?).map(|header| header.next_offset())
    } else {
        None
    };
    valid_batch_after(reader, torn_position, |base_offset| match torn_next_offset {
        Some(next_offset) => base_offset == next_offset,
        None => base_offset > expected_offset,
    })
}

/// The position of the first valid batch after `position` whose base offset
/// `continues` the log and that is followed by the end of the file or by a batch
/// header continuing it in turn. (The base offset is outside the CRC: a stale batch
/// whose first bytes were overwritten can pass its CRC with any base offset, but
/// the stale batch after it keeps its old one.)
fn valid_batch_after(
    reader: &mut ChunkReader<'_>,
    position: u64,
    continues: impl Fn(u64) -> bool,
) -> io::Result<Option<u64>> {
    let header_bytes = abi::batch::BATCH_HEADER_BYTES as u64;
    let file_len = reader.file_len;
    let mut candidate = position + 1;
    while candidate + header_bytes <= file_len {
        let header = reader.bytes(candidate, header_bytes as usize)?;
        let length = batch_length(header);
        let plausible = header[field::MAGIC] as i8 == MAGIC_V2
            && length >= BATCH_LENGTH_MIN
            && candidate + LOG_OVERHEAD_BYTES as u64 + length as u64 <= file_len
            && BatchHeader::parse(header).is_some_and(|parsed| continues(parsed.base_offset));
        if plausible {
            let size_bytes = LOG_OVERHEAD_BYTES + length as usize;
            let bytes = reader.bytes(candidate, size_bytes)?;
            let valid = BatchView::new(bytes).and_then(|view| view.validate()).is_ok();
            if let Some(parsed) = BatchHeader::parse(bytes).filter(|_| valid) {
                if followed_by_continuation(reader, candidate + size_bytes as u64, parsed.next_offset())? {
                    return Ok(Some(candidate));
                }
            }
        }
        candidate += 1;
    }
    Ok(None)
}

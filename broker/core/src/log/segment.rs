//! [`Segment`]: one `.log` file of a partition plus its two sparse indexes.
//!
//! Files are named by the segment's base offset, zero-padded to 20 digits
//! (`00000000000000368769.log`, `.index`, `.timeindex`), so a directory listing sorts
//! by offset. The `.log` holds Kafka v2 record batches back to back, exactly as
//! appended; the indexes are described in `index.rs`.
//!
//! Invariants:
//! - batches in a segment have dense, increasing offsets starting at `base_offset`;
//! - `size_bytes` is the end of the last whole batch; nothing is read past it;
//! - offsets relative to `base_offset` fit a `u32`, positions fit a `u32`
//!   (`segment_bytes_max <= u32::MAX`).
//!
//! Owned by its [`super::Log`]; the log's owner serialises access.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::config::LogConfig;
use super::header::BatchHeader;
use super::index::{Index, OffsetEntry, TimeEntry};
use super::scan::{scan_segment, ScanEnd};
use super::LogError;
use crate::storage::{File, Storage};

/// Timestamp of a segment with no records yet.
pub(crate) const NO_TIMESTAMP: i64 = -1;

pub(crate) fn file_name(base_offset: u64, extension: &str) -> String {
    format!("{base_offset:020}.{extension}")
}

/// Parses `00000000000000000042.log` into `(42, "log")`.
pub(crate) fn parse_file_name(name: &str) -> Option<(u64, &str)> {
    let (stem, extension) = name.split_once('.')?;
    if stem.len() != 20 || !stem.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    Some((stem.parse().ok()?, extension))
}

/// One segment: its `.log` handle, indexes and the metadata appends maintain.
#[derive(Debug)]
pub(crate) struct Segment {
    pub base_offset: u64,
    pub log_path: PathBuf,
    pub log: Arc<dyn File>,
    /// End of the last whole batch.
    pub size_bytes: u64,
    /// Offset the next appended batch gets (= base offset while empty).
    pub next_offset: u64,
    pub max_timestamp: i64,
    pub offset_of_max_timestamp: u64,
    /// Max timestamp of the first batch: `segment_ms` counts from here.
    pub first_batch_timestamp: Option<i64>,
    pub offset_index: Index<OffsetEntry>,
    pub time_index: Index<TimeEntry>,
    bytes_since_index_entry: u64,
    /// Rebuilt by recovery: its files must be synced before the log is trusted.
    pub rebuilt: bool,
}

/// A segment read back by recovery, with how its scan ended.
#[derive(Debug)]
pub(crate) struct Recovered {
    pub segment: Segment,
    pub scan_end: ScanEnd,
}

impl Segment {
    /// A new, empty segment (any stale files with its name are reset).
    pub fn create(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: u64,
        config: &LogConfig,
    ) -> Result<Segment, LogError> {
        let log_path = dir.join(file_name(base_offset, "log"));
        let log = storage.open(&log_path, true).map_err(LogError::io("create", &log_path))?;
        log.set_len(0).map_err(LogError::io("truncate", &log_path))?;
        let (offset_index, time_index) = create_indexes(storage, dir, base_offset, config)?;
        Ok(Segment::empty(base_offset, log_path, log, offset_index, time_index))
    }

    fn empty(
        base_offset: u64,
        log_path: PathBuf,
        log: Arc<dyn File>,
        offset_index: Index<OffsetEntry>,
        time_index: Index<TimeEntry>,
    ) -> Segment {
        Segment {
            base_offset,
            log_path,
            log,
            size_bytes: 0,
            next_offset: base_offset,
            max_timestamp: NO_TIMESTAMP,
            offset_of_max_timestamp: base_offset,
            first_batch_timestamp: None,
            offset_index,
            time_index,
            bytes_since_index_entry: 0,
            rebuilt: false,
        }
    }

    /// Opens a segment that was cleanly sealed (or lies before the recovery point):
    /// trusts its indexes after a sanity check and walks only the batches after the
    /// last index entry. `active` reopens the indexes with room to append.
    pub fn open_trusted(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: u64,
        config: &LogConfig,
        active: bool,
    ) -> Result<Segment, LogError> {
        let log_path = dir.join(file_name(base_offset, "log"));
        let log = storage.open(&log_path, false).map_err(LogError::io("open", &log_path))?;
        let size_bytes = log.len().map_err(LogError::io("stat", &log_path))?;
        let capacity = active.then_some(config.index_bytes_max);
        let offset_path = dir.join(file_name(base_offset, "index"));
        let time_path = dir.join(file_name(base_offset, "timeindex"));
        let offset_index =
            Index::load(storage, offset_path.clone(), capacity).map_err(LogError::io("load index", offset_path))?;
        let time_index =
            Index::load(storage, time_path.clone(), capacity).map_err(LogError::io("load index", time_path))?;
        let mut segment = Segment::empty(base_offset, log_path, log, offset_index, time_index);
        segment.size_bytes = size_bytes;
        segment.check_indexes()?;
        segment.walk_tail()?;
        let time_entry_past_end = segment
            .time_index
            .last()
            .is_some_and(|entry| base_offset + entry.relative_offset as u64 >= segment.next_offset);
        if time_entry_past_end {
            return Err(segment.corrupt(0, "time index points past the segment's last offset".to_owned()));
        }
        Ok(segment)
    }

    /// Rebuilds a segment from its `.log` alone: validates every batch and rebuilds
    /// both indexes. The caller decides what a torn or corrupt end means.
    pub fn recover(
        storage: &dyn Storage,
        dir: &Path,
        base_offset: u64,
        config: &LogConfig,
    ) -> Result<Recovered, LogError> {
        let log_path = dir.join(file_name(base_offset, "log"));
        let log = storage.open(&log_path, false).map_err(LogError::io("open", &log_path))?;
        let file_len = log.len().map_err(LogError::io("stat", &log_path))?;
        let (offset_index, time_index) = create_indexes(storage, dir, base_offset, config)?;
        let mut segment = Segment::empty(base_offset, log_path.clone(), log.clone(), offset_index, time_index);
        segment.rebuilt = true;
        let scan_end = scan_segment(log.as_ref(), file_len, base_offset, |position, header| {
            segment.index_batch(header, position, config);
            segment.size_bytes = position + header.size_bytes;
        })
        .map_err(LogError::io("scan", &log_path))?;
        Ok(Recovered { segment, scan_end })
    }

    pub fn is_empty(&self) -> bool {
        self.size_bytes == 0
    }

    fn relative(&self, offset: u64) -> u32 {
        u32::try_from(offset - self.base_offset).expect("relative offsets fit u32: the log rolls before they would not")
    }

    /// Writes already stamped, validated batches (`bytes`, described by `headers`) at the end.
    pub fn append(&mut self, bytes: &[u8], headers: &[BatchHeader], config: &LogConfig) -> Result<(), LogError> {
        let position = self.size_bytes;
        self.log.write_at(bytes, position).map_err(LogError::io("write", &self.log_path))?;
        let mut batch_position = position;
        for header in headers {
            self.index_batch(header, batch_position, config);
            batch_position += header.size_bytes;
        }
        self.size_bytes = batch_position;
        Ok(())
    }

    /// Updates metadata and indexes for the batch just placed at `position`.
    fn index_batch(&mut self, header: &BatchHeader, position: u64, config: &LogConfig) {
        self.first_batch_timestamp.get_or_insert(header.max_timestamp);
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.offset_of_max_timestamp = header.last_offset;
        }
        if self.bytes_since_index_entry >= config.index_interval_bytes && !self.offset_index.is_full() {
            let relative_offset = self.relative(header.base_offset);
            self.offset_index.append(OffsetEntry { relative_offset, position: position as u32 });
            self.append_time_entry();
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += header.size_bytes;
        self.next_offset = header.next_offset();
    }

    /// Adds `(max_timestamp, offset_of_max_timestamp)` when the max grew since the last entry.
    fn append_time_entry(&mut self) {
        let grew = self.time_index.last().is_none_or(|last| self.max_timestamp > last.timestamp);
        if grew && self.max_timestamp != NO_TIMESTAMP && !self.time_index.is_full() {
            let relative_offset = self.relative(self.offset_of_max_timestamp);
            self.time_index.append(TimeEntry { timestamp: self.max_timestamp, relative_offset });
        }
    }

    /// Whether appending `bytes` of batches whose last offset is `last_offset` would
    /// break a bound of this segment (an empty segment takes anything).
    pub fn is_full_for(&self, bytes: u64, last_offset: u64, config: &LogConfig) -> bool {
        if self.is_empty() {
            return false;
        }
        self.size_bytes + bytes > config.segment_bytes_max
            || last_offset - self.base_offset > u32::MAX as u64
            || self.offset_index.is_full()
            || self.time_index.is_full()
    }

    /// Closes the segment for appends: final time index entry, indexes trimmed.
    pub fn seal(&mut self, storage: &dyn Storage) -> Result<(), LogError> {
        if self.time_index.is_full() {
            // No room for the final entry: the index is still correct, only sparser.
        } else {
            self.append_time_entry();
        }
        self.offset_index.seal(storage).map_err(LogError::io("trim index", self.offset_index.path()))?;
        self.time_index.seal(storage).map_err(LogError::io("trim index", self.time_index.path()))
    }

    /// Reopens a sealed segment's indexes for appends.
    pub fn unseal(&mut self, storage: &dyn Storage, config: &LogConfig) -> Result<(), LogError> {
        let capacity = config.index_bytes_max;
        self.offset_index.unseal(storage, capacity).map_err(LogError::io("map index", self.offset_index.path()))?;
        self.time_index.unseal(storage, capacity).map_err(LogError::io("map index", self.time_index.path()))
    }

    /// Position from which a walk finds `offset`: the last indexed batch at or before it.
    pub fn index_position(&self, offset: u64) -> u64 {
        let entry = self.offset_index.last_where(|entry| self.base_offset + entry.relative_offset as u64 <= offset);
        entry.map_or(0, |entry| entry.position as u64)
    }

    /// The batch holding `offset`, or the first batch after it; `None` past the end.
    pub fn locate(&self, offset: u64) -> Result<Option<(u64, BatchHeader)>, LogError> {
        locate_batch(self.log.as_ref(), &self.log_path, self.index_position(offset), self.size_bytes, offset)
    }

    /// Removes every batch whose last offset is `>= offset`; returns the new next offset
    /// (a batch holding `offset` goes whole, so it may end up below `offset`).
    pub fn truncate_to(&mut self, offset: u64) -> Result<u64, LogError> {
        let Some((position, header)) = self.locate(offset)? else { return Ok(self.next_offset) };
        let new_next_offset = header.base_offset;
        self.log.set_len(position).map_err(LogError::io("truncate", &self.log_path))?;
        self.size_bytes = position;
        let kept_offsets = self.offset_index.len_where(|entry| (entry.position as u64) < position);
        self.offset_index.truncate_entries(kept_offsets);
        let base_offset = self.base_offset;
        let kept_times =
            self.time_index.len_where(|entry| base_offset + (entry.relative_offset as u64) < new_next_offset);
        self.time_index.truncate_entries(kept_times);
        self.walk_tail()?;
        Ok(self.next_offset)
    }

    /// Recomputes the tail metadata (next offset, max timestamp, bytes since the last
    /// index entry) by reading the headers after the last offset index entry.
    fn walk_tail(&mut self) -> Result<(), LogError> {
        let last_entry = self.offset_index.last();
        let start = last_entry.map_or(0, |entry| entry.position as u64);
        self.max_timestamp = NO_TIMESTAMP;
        self.offset_of_max_timestamp = self.base_offset;
        if let Some(entry) = self.time_index.last() {
            self.max_timestamp = entry.timestamp;
            self.offset_of_max_timestamp = self.base_offset + entry.relative_offset as u64;
        }
        self.first_batch_timestamp = None;
        if start > 0 {
            self.first_batch_timestamp = Some(self.header_at(0)?.max_timestamp);
        }
        // The base offset is outside the CRC: check continuity so a flipped bit cannot
        // move the log end.
        let mut expected_offset = self.base_offset + last_entry.map_or(0, |entry| entry.relative_offset as u64);
        let mut position = start;
        while position < self.size_bytes {
            let header = self.header_at(position)?;
            if header.base_offset != expected_offset || header.last_offset - self.base_offset > u32::MAX as u64 {
                let reason = format!("batch base offset {} where {expected_offset} was expected", header.base_offset);
                return Err(self.corrupt(position, reason));
            }
            self.first_batch_timestamp.get_or_insert(header.max_timestamp);
            if header.max_timestamp > self.max_timestamp {
                self.max_timestamp = header.max_timestamp;
                self.offset_of_max_timestamp = header.last_offset;
            }
            expected_offset = header.next_offset();
            position += header.size_bytes;
        }
        if position != self.size_bytes {
            return Err(self.corrupt(start, "last batch runs past the end of the file".to_owned()));
        }
        self.next_offset = expected_offset;
        self.bytes_since_index_entry = self.size_bytes - start;
        Ok(())
    }

    fn header_at(&self, position: u64) -> Result<BatchHeader, LogError> {
        BatchHeader::read(self.log.as_ref(), position)
            .map_err(LogError::io("read", &self.log_path))?
            .ok_or_else(|| self.corrupt(position, "unreadable batch header".to_owned()))
    }

    /// Cheap checks of a trusted segment's indexes.
    fn check_indexes(&self) -> Result<(), LogError> {
        let mut previous: Option<OffsetEntry> = None;
        for index in 0..self.offset_index.len() {
            let entry = self.offset_index.entry(index);
            let ordered =
                previous.is_none_or(|p| p.relative_offset < entry.relative_offset && p.position < entry.position);
            if !ordered || entry.position as u64 >= self.size_bytes {
                return Err(
                    self.corrupt(entry.position as u64, format!("offset index entry {index} out of order or range"))
                );
            }
            previous = Some(entry);
        }
        let mut previous: Option<TimeEntry> = None;
        for index in 0..self.time_index.len() {
            let entry = self.time_index.entry(index);
            let ordered =
                previous.is_none_or(|p| p.timestamp < entry.timestamp && p.relative_offset <= entry.relative_offset);
            if !ordered {
                return Err(self.corrupt(0, format!("time index entry {index} out of order")));
            }
            previous = Some(entry);
        }
        Ok(())
    }

    pub fn corrupt(&self, position: u64, reason: String) -> LogError {
        LogError::Corrupt {
            dir: self.log_path.parent().map(Path::to_path_buf).unwrap_or_default(),
            segment_base_offset: self.base_offset,
            position,
            reason,
        }
    }

    /// Paths of the segment's three files.
    pub fn paths(&self) -> [PathBuf; 3] {
        [self.log_path.clone(), self.offset_index.path().to_path_buf(), self.time_index.path().to_path_buf()]
    }
}

fn create_indexes(
    storage: &dyn Storage,
    dir: &Path,
    base_offset: u64,
    config: &LogConfig,
) -> Result<(Index<OffsetEntry>, Index<TimeEntry>), LogError> {
    let offset_path = dir.join(file_name(base_offset, "index"));
    let time_path = dir.join(file_name(base_offset, "timeindex"));
    let offset_index = Index::create(storage, offset_path.clone(), config.index_bytes_max)
        .map_err(LogError::io("create index", offset_path))?;
    let time_index = Index::create(storage, time_path.clone(), config.index_bytes_max)
        .map_err(LogError::io("create index", time_path))?;
    Ok((offset_index, time_index))
}

/// Walks batch headers from `position` (a batch start) until the batch holding
/// `offset` or the first one after it; `None` when `end` comes first.
pub(crate) fn locate_batch(
    file: &dyn File,
    path: &Path,
    mut position: u64,
    end: u64,
    offset: u64,
) -> Result<Option<(u64, BatchHeader)>, LogError> {
    while position < end {
        let header = BatchHeader::read(file, position).map_err(LogError::io("read", path))?.ok_or_else(|| {
            LogError::Corrupt {
                dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
                segment_base_offset: parse_file_name(&path.file_name().unwrap_or_default().to_string_lossy())
                    .map_or(0, |(base, _)| base),
                position,
                reason: "unreadable batch header".to_owned(),
            }
        })?;
        if header.last_offset >= offset {
            return Ok(Some((position, header)));
        }
        position += header.size_bytes;
    }
    Ok(None)
}

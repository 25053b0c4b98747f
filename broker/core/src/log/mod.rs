//! The partition log: an ordered, append-only sequence of Kafka v2 record batches,
//! split into [`segment`]s, with sparse offset and time indexes.
//!
//! [`Log`] is the one entry point. It is a plain value: its owner (the server's
//! partition) serialises calls with a lock, and performs the slow parts outside it
//! through [`ReadPlan`] (reads), [`FlushTicket`] (fdatasync rounds) and
//! [`RetiredSegments`] (file deletion).
//!
//! Offsets: the log start offset is the first offset still held; the log end offset
//! (LEO) is the offset the next record gets; the *durable offset* is the offset
//! below which every record is on disk (fdatasync'd). `durable <= LEO` always, and
//! `log start <= durable` except that retention may move the log start past the
//! durable offset under `flush.policy=interval`.
//!
//! Architecture invariants:
//! - offsets are dense and strictly increasing; a record's offset never changes;
//! - stored batches are never re-encoded: append stamps the base offset and the
//!   partition leader epoch (fields outside the CRC) and writes the bytes;
//! - the durable offset only moves forward, except by an explicit `truncate_to`;
//! - after any failed write or sync the log is *fenced*: it refuses writes until
//!   reopened, because its on-disk state is unknown;
//! - recovery never silently drops data that may have been durable: a torn or
//!   garbage tail above the recovery point, with no valid batch after it, is cut
//!   (and copied aside), any other damage fences the partition
//!   ([`LogError::Corrupt`]); the blind spot is a last batch damaged in place so
//!   that it no longer claims to be the next batch (zeroed, or its magic or base
//!   offset hit), which reads as a garbage tail (see `scan.rs`). [`repair`] is the
//!   operator's path for a fenced partition.

mod checkpoint;
pub mod config;
mod epochs;
mod error;
mod flush;
mod header;
mod index;
mod open;
mod read;
pub mod repair;
mod retention;
mod scan;
mod segment;
pub mod topic_config;
mod validated;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use abi::batch::{set_base_offset, set_partition_leader_epoch, RecordBatch};

pub use config::{ConfigError, FlushPolicy, LogConfig};
pub use error::LogError;
pub use flush::FlushTicket;
pub use open::{RecoveryReport, TruncatedTail};
pub use read::{ReadInfo, ReadPlan};
pub use topic_config::{apply_topic_configs, effective_topic_configs, TOPIC_CONFIG_KEYS};
pub use validated::ValidatedBatches;

use checkpoint::{write_recovery_point, CLEAN_SHUTDOWN_FILE};
use header::BatchHeader;
use retention::{deletable_prefix, SegmentSummary};
use segment::{locate_batch, Segment};
use validated::BatchSpan;

use crate::storage::Storage;

/// Where an append landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record of the first batch.
    pub base_offset: u64,
    /// Offset of the last record of the last batch.
    pub last_offset: u64,
    /// Number of batches appended.
    pub batch_count: usize,
}

/// A partition's log. See the module docs.
#[derive(Debug)]
pub struct Log {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    config: LogConfig,
    /// Never empty; the last one is the active segment.
    segments: VecDeque<Segment>,
    durable_offset: u64,
    /// The checkpointed offset below which everything is on disk (see `checkpoint`).
    recovery_point: u64,
    /// Base offsets of segments sealed since the last flush round.
    unsynced_sealed: Vec<u64>,
    /// Bumped whenever segment files are created; the directory is synced up to
    /// `dir_synced_version` (a round records the version it syncs).
    dir_version: u64,
    dir_synced_version: u64,
    /// Bumped by every truncation; flush rounds started before one are stale.
    generation: u64,
    fenced: Option<String>,
    recovery: RecoveryReport,
    /// The leader epoch of every batch (see `epochs.rs`).
    epochs: crate::replication::LeaderEpochCache,
}

/// Segments removed from the log by retention whose files still exist. Call
/// [`RetiredSegments::delete`] outside the log's lock.
#[derive(Debug)]
#[must_use = "retired segments keep their files until deleted"]
pub struct RetiredSegments {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    paths: Vec<PathBuf>,
    /// How many segments were retired.
    pub segment_count: usize,
    /// Their total `.log` bytes.
    pub size_bytes: u64,
}

/// Deletes `path`; a file that is already gone is fine (a crash may have left the
/// deletion half done).
pub(crate) fn remove_if_present(storage: &dyn Storage, path: &Path) -> Result<(), LogError> {
    match storage.remove_file(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(LogError::Io { op: "delete", path: path.to_path_buf(), source }),
    }
}

impl RetiredSegments {
    /// Deletes the files and makes the deletion durable.
    pub fn delete(self) -> Result<(), LogError> {
        for path in &self.paths {
            remove_if_present(self.storage.as_ref(), path)?;
        }
        self.storage.sync_dir(&self.dir).map_err(LogError::io("sync directory", &self.dir))
    }
}

impl Log {
    /// The directory holding this log's files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    /// Replaces the config (a topic's configs were altered). Segment and index sizes
    /// apply from the next roll; retention and flushing from their next run.
    pub fn set_config(&mut self, config: LogConfig) -> Result<(), LogError> {
        config.validate()?;
        self.config = config;
        Ok(())
    }

    /// The first offset still held.
    pub fn log_start_offset(&self) -> u64 {
        self.segments.front().expect("a log always has a segment").base_offset
    }

    /// The offset the next record gets.
    pub fn log_end_offset(&self) -> u64 {
        self.active().next_offset
    }

    /// Every offset below this one is on disk.
    pub fn durable_offset(&self) -> u64 {
        self.durable_offset
    }

    /// Total bytes of all segments' `.log` files.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|segment| segment.size_bytes).sum()
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Base offsets of all segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<u64> {
        self.segments.iter().map(|segment| segment.base_offset).collect()
    }

    /// Calls `visit` with the raw header (first [`abi::batch::BATCH_HEADER_BYTES`]
    /// bytes) of every batch in the newest segments holding at least the last
    /// `bytes_max` bytes of the log, oldest first. Reads headers only (one small
    /// read per batch) and keeps nothing: owners rebuild per-batch state from it at
    /// start-up, e.g. the idempotent-producer table.
    pub fn visit_tail_batch_headers(
        &self,
        bytes_max: u64,
        mut visit: impl FnMut(&[u8; abi::batch::BATCH_HEADER_BYTES]),
    ) -> Result<(), LogError> {
        let mut first = self.segments.len();
        let mut covered = 0;
        while first > 0 && covered < bytes_max {
            first -= 1;
            covered += self.segments[first].size_bytes;
        }
        for segment in self.segments.iter().skip(first) {
            let mut position = 0;
            while position < segment.size_bytes {
                let mut header = [0u8; abi::batch::BATCH_HEADER_BYTES];
                segment.log.read_exact_at(&mut header, position).map_err(LogError::io("read", &segment.log_path))?;
                let Some(parsed) = header::BatchHeader::parse(&header) else {
                    return Err(segment.corrupt(position, "unreadable batch header below the log end".to_owned()));
                };
                visit(&header);
                position += parsed.size_bytes;
            }
        }
        Ok(())
    }

    /// What opening the log found and repaired.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// Why the log refuses writes, if it does.
    pub fn fenced_reason(&self) -> Option<&str> {
        self.fenced.as_deref()
    }

    /// Whether a flush round has something to do.
    pub fn has_unflushed(&self) -> bool {
        self.durable_offset < self.log_end_offset()
            || !self.unsynced_sealed.is_empty()
            || self.dir_version > self.dir_synced_version
    }

    fn active(&self) -> &Segment {
        self.segments.back().expect("a log always has a segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments.back_mut().expect("a log always has a segment")
    }

    fn check_not_fenced(&self) -> Result<(), LogError> {
        match &self.fenced {
            Some(reason) => Err(LogError::Fenced { dir: self.dir.clone(), reason: reason.clone() }),
            None => Ok(()),
        }
    }

    /// Records a write/sync failure: the on-disk state is unknown from here on.
    fn fence<T>(&mut self, result: Result<T, LogError>) -> Result<T, LogError> {
        if let Err(error) = &result {
            self.fenced.get_or_insert_with(|| error.to_string());
        }
        result
    }

    /// Appends one or more batches laid back to back in `batches`: validates every
    /// batch (size, magic, CRC) before writing any, stamps base offsets and
    /// `leader_epoch` in place, and writes them with one write. All or nothing.
    /// (Owners that can validate outside their lock use [`ValidatedBatches::new`] and
    /// [`Log::append_validated`] instead.)
    pub fn append(&mut self, batches: &mut [u8], leader_epoch: i32) -> Result<AppendInfo, LogError> {
        let validated = ValidatedBatches::new(batches, &self.config)?;
        self.append_validated(validated, leader_epoch)
    }

    /// Appends batches validated beforehand: stamps offsets and the leader epoch,
    /// rolls if needed, and writes. Only the cheap size limits are checked again.
    pub fn append_validated(
        &mut self,
        batches: ValidatedBatches<'_>,
        leader_epoch: i32,
    ) -> Result<AppendInfo, LogError> {
        self.check_not_fenced()?;
        batches.check_limits(&self.config)?;
        if batches.spans.is_empty() {
            return Err(LogError::EmptyAppend);
        }
        self.begin_epoch(leader_epoch, self.log_end_offset())?;
        let headers = self.stamp(&mut *batches.bytes, &batches.spans, leader_epoch);
        self.write_batches(batches.bytes, &headers)
    }

    /// Appends batches copied from the partition's leader (a follower's append):
    /// validated like any append, but their offsets and leader epochs are the
    /// leader's and stay as they are, byte for byte. The first must start at
    /// this log's end and each follow the one before.
    pub fn append_replicated(&mut self, batches: ValidatedBatches<'_>) -> Result<AppendInfo, LogError> {
        self.check_not_fenced()?;
        batches.check_limits(&self.config)?;
        let mut expected = self.log_end_offset();
        let mut headers = Vec::with_capacity(batches.spans.len());
        for span in &batches.spans {
            let batch = &batches.bytes[span.position..span.position + span.size_bytes];
            let found = BatchHeader::parse(batch).map(|header| header.base_offset);
            if found != Some(expected) {
                return Err(LogError::NotContiguous { expected, found: found.unwrap_or(0) });
            }
            let last_offset = expected + span.last_offset_delta;
            headers.push(BatchHeader {
                base_offset: expected,
                last_offset,
                max_timestamp: span.max_timestamp,
                size_bytes: span.size_bytes as u64,
            });
            expected = last_offset + 1;
        }
        for (span, header) in batches.spans.iter().zip(&headers) {
            let at = span.position + abi::batch::field::PARTITION_LEADER_EPOCH;
            let epoch = i32::from_be_bytes(batches.bytes[at..at + 4].try_into().expect("a whole header"));
            if let Err(error) = self.begin_epoch(epoch, header.base_offset) {
                // Undo the epochs this append began, on disk too.
                self.epochs.truncate_from_end(self.log_end_offset());
                let persisted = self.persist_leader_epochs();
                self.fence(persisted)?;
                return Err(error);
            }
        }
        self.write_batches(batches.bytes, &headers)
    }

    /// Writes stamped batches at the log end, rolling first if needed.
    fn write_batches(&mut self, bytes: &[u8], headers: &[BatchHeader]) -> Result<AppendInfo, LogError> {
        let (first, last) = match (headers.first(), headers.last()) {
            (Some(first), Some(last)) => (*first, *last),
            _ => return Err(LogError::EmptyAppend),
        };
        let newest_timestamp = headers.iter().map(|header| header.max_timestamp).max().unwrap_or(-1);
        if self.should_roll(bytes.len() as u64, last.last_offset, newest_timestamp) {
            self.roll()?;
        }
        let config = &self.config;
        let active = self.segments.back_mut().expect("a log always has a segment");
        let result = active.append(bytes, headers, config);
        self.fence(result)?;
        Ok(AppendInfo { base_offset: first.base_offset, last_offset: last.last_offset, batch_count: headers.len() })
    }

    /// Stamps base offsets (from the log end) and the leader epoch into the batches.
    fn stamp(&self, bytes: &mut [u8], spans: &[BatchSpan], leader_epoch: i32) -> Vec<BatchHeader> {
        let mut next_offset = self.log_end_offset();
        let mut headers = Vec::with_capacity(spans.len());
        for span in spans {
            let batch = &mut bytes[span.position..span.position + span.size_bytes];
            set_base_offset(batch, next_offset as i64);
            set_partition_leader_epoch(batch, leader_epoch);
            let last_offset = next_offset + span.last_offset_delta;
            headers.push(BatchHeader {
                base_offset: next_offset,
                last_offset,
                max_timestamp: span.max_timestamp,
                size_bytes: span.size_bytes as u64,
            });
            next_offset = last_offset + 1;
        }
        headers
    }

    fn should_roll(&self, bytes: u64, last_offset: u64, newest_timestamp: i64) -> bool {
        let active = self.active();
        let too_old = active
            .first_batch_timestamp
            .is_some_and(|first| newest_timestamp.saturating_sub(first) > self.config.segment_ms);
        active.is_full_for(bytes, last_offset, &self.config) || (!active.is_empty() && too_old)
    }

    /// Seals the active segment and starts a new one at the log end offset. A no-op
    /// on an empty active segment.
    pub fn roll(&mut self) -> Result<(), LogError> {
        self.check_not_fenced()?;
        if self.active().is_empty() {
            return Ok(());
        }
        let result = self.roll_inner();
        self.fence(result)
    }

    fn roll_inner(&mut self) -> Result<(), LogError> {
        let storage = self.storage.clone();
        let base_offset = self.log_end_offset();
        self.active_mut().seal(storage.as_ref())?;
        let sealed_base = self.active().base_offset;
        self.unsynced_sealed.push(sealed_base);
        let segment = Segment::create(storage.as_ref(), &self.dir, base_offset, &self.config)?;
        self.segments.push_back(segment);
        self.dir_version += 1;
        Ok(())
    }

    /// Plans a read of up to `max_bytes` of whole batches from the batch holding
    /// `offset`, never reaching `offset_end` (default: the log end offset). Fails with
    /// [`LogError::OffsetOutOfRange`] outside `[log start, log end]`; at the log end
    /// the plan reads nothing.
    pub fn read(&self, offset: u64, max_bytes: usize, offset_end: Option<u64>) -> Result<ReadPlan, LogError> {
        let (log_start_offset, log_end_offset) = (self.log_start_offset(), self.log_end_offset());
        if offset < log_start_offset || offset > log_end_offset {
            return Err(LogError::OffsetOutOfRange { offset, log_start_offset, log_end_offset });
        }
        let segment = self.segment_for(offset);
        let offset_end = offset_end.unwrap_or(log_end_offset).min(log_end_offset);
        Ok(ReadPlan {
            file: (offset < offset_end).then(|| segment.log.clone()),
            path: segment.log_path.clone(),
            start_position: segment.index_position(offset),
            end_position: segment.size_bytes,
            offset,
            offset_end,
            max_bytes,
            first_batch_may_exceed: true,
            log_start_offset,
            log_end_offset,
        })
    }

    /// The segment that holds `offset` (the last one whose base is at or below it).
    fn segment_for(&self, offset: u64) -> &Segment {
        let index = self.segments.partition_point(|segment| segment.base_offset <= offset);
        &self.segments[index.saturating_sub(1)]
    }

    /// The offset of the first record whose timestamp is `>= timestamp`, or `None`
    /// when every record is older. For compressed batches the answer is the batch's
    /// base offset (records are not decompressed here yet).
    pub fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<u64>, LogError> {
        for segment in self.segments.iter().filter(|segment| segment.max_timestamp >= timestamp) {
            let base_offset = segment.base_offset;
            let start_offset = segment
                .time_index
                .last_where(|entry| entry.timestamp < timestamp)
                .map_or(base_offset, |entry| base_offset + entry.relative_offset as u64);
            let mut position = segment.index_position(start_offset);
            while let Some((found, header)) =
                locate_batch(segment.log.as_ref(), &segment.log_path, position, segment.size_bytes, start_offset)?
            {
                if header.max_timestamp >= timestamp {
                    return self.first_record_at_or_after(segment, found, &header, timestamp).map(Some);
                }
                position = found + header.size_bytes;
            }
        }
        Ok(None)
    }

    fn first_record_at_or_after(
        &self,
        segment: &Segment,
        position: u64,
        header: &BatchHeader,
        timestamp: i64,
    ) -> Result<u64, LogError> {
        let mut bytes = vec![0u8; header.size_bytes as usize];
        segment.log.read_exact_at(&mut bytes, position).map_err(LogError::io("read", &segment.log_path))?;
        let Ok(batch) = RecordBatch::decode(&bytes) else { return Ok(header.base_offset) };
        let record = batch
            .records
            .iter()
            .find(|record| batch.base_timestamp.saturating_add(record.timestamp_delta) >= timestamp);
        // Record offset deltas are not checked at append; never trust one past the batch.
        let offset = record
            .and_then(|record| u64::try_from(record.offset_delta).ok())
            .map(|delta| header.base_offset + delta)
            .filter(|offset| *offset <= header.last_offset);
        Ok(offset.unwrap_or(header.base_offset))
    }

    /// Removes every batch whose last offset is `>= offset` (for replication: a
    /// batch holding `offset` goes whole). Below the log start, empties the log and
    /// restarts it at `offset`. Durable when it returns. Returns the new log end offset.
    pub fn truncate_to(&mut self, offset: u64) -> Result<u64, LogError> {
        self.check_not_fenced()?;
        if offset >= self.log_end_offset() {
            return Ok(self.log_end_offset());
        }
        let restart = offset < self.log_start_offset();
        let result = self.truncate_inner(offset, restart);
        self.fence(result)
    }

    /// Empties the log and restarts it at `offset` (a follower that fell behind
    /// its leader's log start starts again there). Durable when it returns.
    pub fn restart_at(&mut self, offset: u64) -> Result<u64, LogError> {
        self.check_not_fenced()?;
        let result = self.truncate_inner(offset, true);
        self.fence(result)
    }

    fn truncate_inner(&mut self, offset: u64, restart: bool) -> Result<u64, LogError> {
        let storage = self.storage.clone();
        // Lower the recovery point first: a crash part-way through must never leave a
        // checkpoint above the log end (recovery would fence the partition).
        let safe_point = if restart { offset } else { self.segment_for(offset).base_offset };
        if self.recovery_point > safe_point {
            write_recovery_point(storage.as_ref(), &self.dir, safe_point)?;
            self.recovery_point = safe_point;
        }
        let mut removed = Vec::new();
        while self.segments.back().is_some_and(|segment| restart || segment.base_offset > offset) {
            removed.extend(self.segments.pop_back().expect("checked non-empty").paths());
        }
        for path in &removed {
            storage.remove_file(path).map_err(LogError::io("delete", path))?;
        }
        if restart {
            self.segments.push_back(Segment::create(storage.as_ref(), &self.dir, offset, &self.config)?);
        }
        storage.sync_dir(&self.dir).map_err(LogError::io("sync directory", &self.dir))?;
        let active_base = self.active().base_offset;
        self.unsynced_sealed.retain(|base| *base < active_base);
        if !removed.is_empty() && !restart {
            let config = self.config.clone();
            self.active_mut().unseal(storage.as_ref(), &config)?;
        }
        let log_end_offset = self.active_mut().truncate_to(offset)?;
        let active = self.active();
        active.log.sync_data().map_err(LogError::io("sync", &active.log_path))?;
        self.generation += 1;
        self.durable_offset = self.durable_offset.min(log_end_offset);
        if restart {
            self.epochs = crate::replication::LeaderEpochCache::default();
        } else {
            self.epochs.truncate_from_end(log_end_offset);
        }
        self.persist_leader_epochs()?;
        Ok(log_end_offset)
    }

    /// Starts a flush round, or `None` when everything is already durable. What the
    /// round covers stays pending until [`Log::complete_flush`], so any round begun
    /// meanwhile (a shutdown's, say) syncs it too rather than assuming it done.
    pub fn begin_flush(&mut self) -> Option<FlushTicket> {
        if self.fenced.is_some() || !self.has_unflushed() {
            return None;
        }
        let mut logs = Vec::new();
        let mut sealed_index_paths = Vec::new();
        let sealed = self.segments.iter().filter(|segment| self.unsynced_sealed.contains(&segment.base_offset));
        for segment in sealed {
            logs.push((segment.log_path.clone(), segment.log.clone()));
            sealed_index_paths.extend(segment.paths().into_iter().skip(1));
        }
        let active = self.active();
        logs.push((active.log_path.clone(), active.log.clone()));
        Some(FlushTicket {
            storage: self.storage.clone(),
            dir: self.dir.clone(),
            target_offset: self.log_end_offset(),
            logs,
            recovery_point: (!sealed_index_paths.is_empty()).then_some(active.base_offset),
            sealed_bases: self.unsynced_sealed.clone(),
            sealed_index_paths,
            dir_version: (self.dir_version > self.dir_synced_version).then_some(self.dir_version),
            generation: self.generation,
        })
    }

    /// Ends a flush round with the result of [`FlushTicket::execute`]; returns the
    /// durable offset. A failed sync fences the log (its data may be lost: fsync
    /// errors are not retryable).
    pub fn complete_flush(&mut self, ticket: FlushTicket, result: Result<(), LogError>) -> Result<u64, LogError> {
        self.fence(result)?;
        if ticket.generation != self.generation {
            return Ok(self.durable_offset);
        }
        self.durable_offset = self.durable_offset.max(ticket.target_offset.min(self.log_end_offset()));
        self.unsynced_sealed.retain(|base| !ticket.sealed_bases.contains(base));
        if let Some(version) = ticket.dir_version {
            self.dir_synced_version = self.dir_synced_version.max(version);
        }
        if let Some(recovery_point) = ticket.recovery_point.filter(|point| *point > self.recovery_point) {
            let written = write_recovery_point(self.storage.as_ref(), &self.dir, recovery_point);
            self.fence(written)?;
            self.recovery_point = recovery_point;
        }
        Ok(self.durable_offset)
    }

    /// Flushes everything now (begin, execute and complete in one call).
    pub fn flush(&mut self) -> Result<u64, LogError> {
        self.check_not_fenced()?;
        if let Some(ticket) = self.begin_flush() {
            let result = ticket.execute();
            self.complete_flush(ticket, result)?;
        }
        Ok(self.durable_offset)
    }

    /// Detaches the segments retention deletes at `now_ms` (rolling an expired
    /// active segment first). The log start offset moves at once; the files go when
    /// the caller runs [`RetiredSegments::delete`].
    pub fn apply_retention(&mut self, now_ms: i64) -> Result<Option<RetiredSegments>, LogError> {
        self.apply_retention_below(now_ms, u64::MAX)
    }

    /// [`Log::apply_retention`], retiring only segments whose records all lie
    /// below `offset_limit` (the high watermark: records not yet committed are
    /// never deleted, whatever timestamps their producers gave them).
    pub fn apply_retention_below(
        &mut self,
        now_ms: i64,
        offset_limit: u64,
    ) -> Result<Option<RetiredSegments>, LogError> {
        self.check_not_fenced()?;
        let summaries: Vec<SegmentSummary> = self
            .segments
            .iter()
            .map(|segment| SegmentSummary { size_bytes: segment.size_bytes, max_timestamp: segment.max_timestamp })
            .collect();
        let deletable = deletable_prefix(&summaries, &self.config, now_ms);
        let below_limit = self.segments.iter().take_while(|segment| segment.next_offset <= offset_limit).count();
        let count = deletable.min(below_limit);
        if count == self.segments.len() && count > 0 {
            self.roll()?;
        }
        Ok(self.retire_prefix(count))
    }

    /// Detaches every closed segment whose records all lie below `offset` (never
    /// the active segment): the log then starts at the first kept segment. For
    /// owners that rewrote the state those records held (a coordinator snapshot).
    pub fn retire_segments_below(&mut self, offset: u64) -> Result<Option<RetiredSegments>, LogError> {
        self.check_not_fenced()?;
        let closed = self.segments.len() - 1;
        let count = self.segments.iter().take(closed).take_while(|segment| segment.next_offset <= offset).count();
        Ok(self.retire_prefix(count))
    }

    fn retire_prefix(&mut self, count: usize) -> Option<RetiredSegments> {
        if count == 0 {
            return None;
        }
        let mut paths = Vec::new();
        let mut size_bytes = 0;
        for segment in self.segments.drain(..count) {
            self.unsynced_sealed.retain(|base| *base != segment.base_offset);
            size_bytes += segment.size_bytes;
            paths.extend(segment.paths());
        }
        self.epochs.truncate_from_start(self.log_start_offset());
        let dir = self.dir.clone();
        Some(RetiredSegments { storage: self.storage.clone(), dir, paths, segment_count: count, size_bytes })
    }

    /// Clean shutdown: flush everything, trim the active indexes, checkpoint, and
    /// write the clean-shutdown marker so the next open scans nothing.
    pub fn close(mut self) -> Result<(), LogError> {
        self.flush()?;
        let storage = self.storage.clone();
        let result = self.close_inner(storage.as_ref());
        self.fence(result)
    }

    fn close_inner(&mut self, storage: &dyn Storage) -> Result<(), LogError> {
        self.active_mut().seal(storage)?;
        for path in self.active().paths().iter().skip(1) {
            let file = storage.open(path, false).map_err(LogError::io("open", path))?;
            file.sync_data().map_err(LogError::io("sync", path))?;
        }
        write_recovery_point(storage, &self.dir, self.log_end_offset())?;
        self.recovery_point = self.log_end_offset();
        let marker = self.dir.join(CLEAN_SHUTDOWN_FILE);
        let file = storage.open(&marker, true).map_err(LogError::io("create", &marker))?;
        file.sync_data().map_err(LogError::io("sync", &marker))?;
        storage.sync_dir(&self.dir).map_err(LogError::io("sync directory", &self.dir))
    }
}

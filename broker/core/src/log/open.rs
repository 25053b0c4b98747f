//! Opening a partition log: loading segments and, after an unclean stop, recovery.
//!
//! 1. List the directory; drop leftovers (index files without a `.log`, a
//!    half-written checkpoint).
//! 2. If `clean-shutdown` exists, trust every segment (sanity-check indexes, walk
//!    only each segment's last few batches), remove the marker durably, done.
//! 3. Otherwise read the recovery point. Segments before the one holding it were
//!    synced whole: trust them (rebuilding an index that fails its sanity check; any
//!    damage found then fences the partition). Scan the segment holding the recovery
//!    point and every later one batch by batch (`scan.rs`), rebuilding their indexes.
//! 4. The first torn segment is truncated at the tear (a partial batch, zeros or
//!    garbage with no valid batch after it, see `scan.rs`), its cut bytes copied
//!    first to `<segment>.log.torn-at-<position>`, and every later segment is
//!    deleted (nothing after a tear was durable: syncs cover whole prefixes). A tear
//!    below the recovery point is corruption: the checkpoint vouched for it. A gap
//!    after a scanned segment, above the recovery point, is a tear at the end of that
//!    segment. Corruption fences, and so does synced data gone missing: a gap after
//!    a trusted segment or below the recovery point, or a log ending below it.
//! 5. Sync what recovery changed, checkpoint the new end, and open for appends.
//!
//! Trusted segments must follow each other without a gap or overlap; if they do not,
//! the recovery point vouched for data that is not there, and the partition is
//! fenced rather than served with a hole.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checkpoint::{read_recovery_point, write_recovery_point, CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_TMP_FILE};
use super::scan::ScanEnd;
use super::segment::{parse_file_name, Segment};
use super::{remove_if_present, Log, LogConfig, LogError};
use crate::storage::Storage;

/// What [`Log::open`] found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The previous stop was clean: nothing was scanned.
    pub clean_shutdown: bool,
    /// Segments validated batch by batch.
    pub segments_scanned: usize,
    /// Trusted segments whose indexes had to be rebuilt.
    pub indexes_rebuilt: usize,
    /// Bytes cut from a torn tail.
    pub truncated_bytes: u64,
    /// Segments deleted because they lay after a tear.
    pub segments_removed: usize,
    /// The torn or garbage tail cut from the log, if any.
    pub truncated_tail: Option<TruncatedTail>,
}

/// A tail recovery cut off: where, why, and where its bytes were moved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TruncatedTail {
    pub segment_base_offset: u64,
    /// Byte position of the cut in the segment's `.log`.
    pub position: u64,
    /// The log end offset after the cut (the offset the first cut byte would have had).
    pub offset: u64,
    pub bytes: u64,
    /// Why the bytes at `position` are not a valid batch.
    pub reason: String,
    /// The copy of the cut bytes (`<segment>.log.torn-at-<position>`), kept for forensics.
    pub moved_to: std::path::PathBuf,
}

impl Log {
    /// Opens (creating if needed) the log in `dir`, recovering it after an unclean
    /// stop. Fails with [`LogError::Corrupt`] when damage other than a torn tail is
    /// found: the partition must then stay offline.
    pub fn open(storage: Arc<dyn Storage>, dir: PathBuf, config: LogConfig) -> Result<Log, LogError> {
        config.validate()?;
        storage.create_dir_all(&dir).map_err(LogError::io("create directory", &dir))?;
        if let Some(parent) = dir.parent().filter(|parent| !parent.as_os_str().is_empty()) {
            // A new partition directory's own entry must be durable too.
            storage.sync_dir(parent).map_err(LogError::io("sync directory", parent))?;
        }
        let bases = tidy_directory(storage.as_ref(), &dir)?;
        let marker = dir.join(CLEAN_SHUTDOWN_FILE);
        let clean_shutdown = storage.exists(&marker);
        let mut report = RecoveryReport { clean_shutdown, ..RecoveryReport::default() };
        let mut segments = VecDeque::new();
        if bases.is_empty() {
            segments.push_back(Segment::create(storage.as_ref(), &dir, 0, &config)?);
        } else if clean_shutdown {
            for (index, &base) in bases.iter().enumerate() {
                let active = index + 1 == bases.len();
                let segment = open_trusted(storage.as_ref(), &dir, base, &config, active, &mut report)?;
                push_contiguous(&mut segments, segment)?;
            }
        } else {
            let recovery_point = read_recovery_point(storage.as_ref(), &dir);
            let scan_from = bases.partition_point(|&base| base <= recovery_point).saturating_sub(1);
            for &base in &bases[..scan_from] {
                let segment = open_trusted(storage.as_ref(), &dir, base, &config, false, &mut report)?;
                push_contiguous(&mut segments, segment)?;
            }
            let tail = Tail { bases: &bases[scan_from..], recovery_point };
            recover_tail(storage.as_ref(), &dir, tail, &config, &mut segments, &mut report)?;
            let log_end_offset = segments.back().map_or(0, |segment| segment.next_offset);
            if log_end_offset < recovery_point {
                let last = segments.back().expect("recovery leaves a segment");
                let reason = format!(
                    "the log ends at offset {log_end_offset}, below the recovery point {recovery_point}: synced data is missing"
                );
                return Err(last.corrupt(last.size_bytes, reason));
            }
        }
        let mut log = Log {
            storage: storage.clone(),
            dir: dir.clone(),
            config,
            segments,
            durable_offset: 0,
            recovery_point: 0,
            unsynced_sealed: Vec::new(),
            dir_version: 0,
            dir_synced_version: 0,
            generation: 0,
            fenced: None,
            recovery: report,
            epochs: Default::default(),
        };
        log.make_durable_after_open(clean_shutdown)?;
        log.load_leader_epochs()?;
        Ok(log)
    }

    /// Syncs what recovery rebuilt or truncated (trusted segments already are on
    /// disk), checkpoints, and removes the clean marker, so a crash from here on
    /// recovers from this state.
    fn make_durable_after_open(&mut self, clean_shutdown: bool) -> Result<(), LogError> {
        let storage = self.storage.clone();
        for segment in self.segments.iter_mut().filter(|segment| segment.rebuilt) {
            for path in segment.paths() {
                let file = storage.open(&path, false).map_err(LogError::io("open", &path))?;
                file.sync_data().map_err(LogError::io("sync", &path))?;
            }
            segment.rebuilt = false;
        }
        let marker = self.dir.join(CLEAN_SHUTDOWN_FILE);
        if clean_shutdown {
            storage.remove_file(&marker).map_err(LogError::io("delete", &marker))?;
        }
        storage.sync_dir(&self.dir).map_err(LogError::io("sync directory", &self.dir))?;
        write_recovery_point(storage.as_ref(), &self.dir, self.log_end_offset())?;
        self.recovery_point = self.log_end_offset();
        self.durable_offset = self.log_end_offset();
        Ok(())
    }
}

/// Appends a trusted segment, fencing on a gap or overlap with the previous one.
fn push_contiguous(segments: &mut VecDeque<Segment>, segment: Segment) -> Result<(), LogError> {
    if let Some(previous) = segments.back().filter(|previous| previous.next_offset != segment.base_offset) {
        let reason = format!(
            "the next segment starts at offset {} but this one ends at {} (data the recovery point vouched for is missing)",
            segment.base_offset, previous.next_offset
        );
        return Err(previous.corrupt(previous.size_bytes, reason));
    }
    segments.push_back(segment);
    Ok(())
}

/// Base offsets of the segments in `dir`, ascending, after deleting leftovers.
fn tidy_directory(storage: &dyn Storage, dir: &Path) -> Result<Vec<u64>, LogError> {
    let names = storage.list_dir(dir).map_err(LogError::io("list directory", dir))?;
    let mut files: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut leftovers = Vec::new();
    for name in names {
        match parse_file_name(&name) {
            Some((base, "log" | "index" | "timeindex")) => files.entry(base).or_default().push(name),
            _ if name == RECOVERY_POINT_TMP_FILE => leftovers.push(name),
            _ => {}
        }
    }
    let mut bases = Vec::new();
    for (base, names) in files {
        if names.iter().any(|name| name.ends_with(".log")) {
            bases.push(base);
        } else {
            leftovers.extend(names);
        }
    }
    for name in &leftovers {
        let path = dir.join(name);
        storage.remove_file(&path).map_err(LogError::io("delete", &path))?;
    }
    Ok(bases)
}

/// Opens a segment that need not be scanned; rebuilds its indexes if they fail their
/// sanity check, and fences on any damage found while doing so.
fn open_trusted(
    storage: &dyn Storage,
    dir: &Path,
    base: u64,
    config: &LogConfig,
    active: bool,
    report: &mut RecoveryReport,
) -> Result<Segment, LogError> {
    match Segment::open_trusted(storage, dir, base, config, active) {
        Ok(segment) => Ok(segment),
        Err(LogError::Io { source, .. }) if source.kind() != std::io::ErrorKind::NotFound && !is_bad_data(&source) => {
            Err(LogError::Io { op: "open segment", path: dir.join(super::segment::file_name(base, "log")), source })
        }
        Err(_) => {
            report.indexes_rebuilt += 1;
            let recovered = Segment::recover(storage, dir, base, config)?;
            match recovered.scan_end {
                ScanEnd::Clean => {
                    let mut segment = recovered.segment;
                    if !active {
                        segment.seal(storage)?;
                    }
                    Ok(segment)
                }
                ScanEnd::Torn { position, reason } | ScanEnd::Corrupt { position, reason } => {
                    Err(recovered.segment.corrupt(position, format!("{reason} (in data that was synced)")))
                }
            }
        }
    }
}

fn is_bad_data(error: &std::io::Error) -> bool {
    matches!(error.kind(), std::io::ErrorKind::InvalidData | std::io::ErrorKind::UnexpectedEof)
}

/// The segments recovery scans, and the checkpoint that bounds what may be lost.
struct Tail<'a> {
    bases: &'a [u64],
    recovery_point: u64,
}

/// Scans the tail's segments in order, truncating at the first tear; pushes the
/// kept segments.
fn recover_tail(
    storage: &dyn Storage,
    dir: &Path,
    tail: Tail<'_>,
    config: &LogConfig,
    segments: &mut VecDeque<Segment>,
    report: &mut RecoveryReport,
) -> Result<(), LogError> {
    let first_recovered = segments.len();
    let bases = tail.bases;
    for (index, &base) in bases.iter().enumerate() {
        let expected_base = segments.back().map(|segment: &Segment| segment.next_offset);
        if expected_base.is_some_and(|expected| expected > base) {
            let previous = segments.back().expect("checked above");
            let reason = format!("segment {base} overlaps the previous one, which ends at {}", previous.next_offset);
            return Err(previous.corrupt(previous.size_bytes, reason));
        }
        if expected_base.is_some_and(|expected| expected < base) {
            let previous = segments.back().expect("checked above");
            if segments.len() == first_recovered || base <= tail.recovery_point {
                // The data missing before `base` was synced (a trusted segment ends
                // there, or it lies below the recovery point): never cut past it.
                let reason = format!("segment {base} follows a gap after offset {}", previous.next_offset);
                return Err(previous.corrupt(previous.size_bytes, reason));
            }
            // A gap after a scanned segment: it lost its unsynced tail, so nothing
            // from here on was durable.
            remove_segments(storage, dir, &bases[index..], report)?;
            break;
        }
        report.segments_scanned += 1;
        let mut recovered = Segment::recover(storage, dir, base, config)?;
        match recovered.scan_end {
            ScanEnd::Clean => segments.push_back(recovered.segment),
            ScanEnd::Corrupt { position, reason } => return Err(recovered.segment.corrupt(position, reason)),
            ScanEnd::Torn { position, reason } => {
                let segment = &mut recovered.segment;
                if segment.next_offset < tail.recovery_point {
                    // The checkpoint vouched for offsets past the damage: it was synced.
                    let reason = format!(
                        "{reason}, at offset {} below the recovery point {} (in data that was synced)",
                        segment.next_offset, tail.recovery_point
                    );
                    return Err(segment.corrupt(position, reason));
                }
                let log = SegmentLog {
                    path: &segment.log_path,
                    file: segment.log.as_ref(),
                    base_offset: segment.base_offset,
                };
                let cut = cut_tail(storage, &log, position, segment.next_offset, reason)?;
                report.truncated_bytes += cut.bytes;
                report.truncated_tail = Some(cut);
                segments.push_back(recovered.segment);
                remove_segments(storage, dir, &bases[index + 1..], report)?;
                break;
            }
        }
    }
    // The first scanned segment is always kept (clean or cut) unless it is corrupt.
    let last = segments.len() - 1;
    if last < first_recovered {
        // Every scanned segment lay after a tear: a trusted, sealed segment is active again.
        segments[last].unseal(storage, config)?;
    }
    for segment in segments.range_mut(first_recovered.min(last)..last) {
        segment.seal(storage)?;
    }
    Ok(())
}

/// A segment's `.log` file, for [`cut_tail`].
pub(super) struct SegmentLog<'a> {
    pub path: &'a Path,
    pub file: &'a dyn crate::storage::File,
    pub base_offset: u64,
}

/// Copies the segment's bytes from `position` to its end into
/// `<segment>.log.torn-at-<position>` (synced), then truncates the segment there.
/// `offset` is the offset the first cut byte would have had.
pub(super) fn cut_tail(
    storage: &dyn Storage,
    log: &SegmentLog<'_>,
    position: u64,
    offset: u64,
    reason: String,
) -> Result<TruncatedTail, LogError> {
    let file_len = log.file.len().map_err(LogError::io("stat", log.path))?;
    let aside_path = aside_path_for(storage, log.path, &format!("torn-at-{position}"));
    let aside = storage.open(&aside_path, true).map_err(LogError::io("create", &aside_path))?;
    aside.set_len(0).map_err(LogError::io("truncate", &aside_path))?;
    let mut chunk = vec![0u8; TAIL_COPY_CHUNK_BYTES.min(file_len.saturating_sub(position) as usize)];
    let mut copied = 0u64;
    while position + copied < file_len {
        let len = chunk.len().min((file_len - position - copied) as usize);
        log.file.read_exact_at(&mut chunk[..len], position + copied).map_err(LogError::io("read", log.path))?;
        aside.write_at(&chunk[..len], copied).map_err(LogError::io("write", &aside_path))?;
        copied += len as u64;
    }
    aside.sync_data().map_err(LogError::io("sync", &aside_path))?;
    let dir = log.path.parent().unwrap_or(Path::new(""));
    storage.sync_dir(dir).map_err(LogError::io("sync directory", dir))?;
    log.file.set_len(position).map_err(LogError::io("truncate", log.path))?;
    Ok(TruncatedTail {
        segment_base_offset: log.base_offset,
        position,
        offset,
        bytes: file_len.saturating_sub(position),
        reason,
        moved_to: aside_path,
    })
}

/// `<file>.<label>`, or `<file>.<label>.<n>` with the first `n` not taken: an
/// earlier copy (a second crash at the same place) is never overwritten.
pub(super) fn aside_path_for(storage: &dyn Storage, path: &Path, label: &str) -> PathBuf {
    let named = |suffix: String| {
        let mut name = path.file_name().unwrap_or_default().to_owned();
        name.push(suffix);
        path.with_file_name(name)
    };
    let first = named(format!(".{label}"));
    if !storage.exists(&first) {
        return first;
    }
    (1u64..).map(|n| named(format!(".{label}.{n}"))).find(|candidate| !storage.exists(candidate)).unwrap_or(first)
}

/// Bytes copied per read when a cut tail is moved aside.
const TAIL_COPY_CHUNK_BYTES: usize = 1024 * 1024;

fn remove_segments(
    storage: &dyn Storage,
    dir: &Path,
    bases: &[u64],
    report: &mut RecoveryReport,
) -> Result<(), LogError> {
    for &base in bases {
        report.segments_removed += 1;
        for extension in ["log", "index", "timeindex"] {
            remove_if_present(storage, &dir.join(super::segment::file_name(base, extension)))?;
        }
    }
    Ok(())
}

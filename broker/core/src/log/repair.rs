//! Offline inspection and repair of one partition directory (`weir repair`): the
//! operator's path back for a partition that recovery fenced.
//!
//! [`inspect`] reads every segment batch by batch, as recovery's scan does, and
//! reports the first damage: where it is (segment, byte, offset), why, and how many
//! valid records precede it. It writes nothing.
//!
//! [`truncate_at_damage`] then cuts the log at the last valid batch before the
//! damage, losing nothing it does not keep a copy of:
//! 1. the damaged segment's bytes from the damage on are copied to
//!    `<segment>.log.torn-at-<position>` (synced) and the segment is truncated;
//! 2. every later segment's `.log` is renamed to `<segment>.log.removed-by-repair`
//!    (its indexes, derived data, are deleted);
//! 3. the recovery point is set to the damaged segment's base offset, so the next
//!    open rebuilds that segment's indexes from the cut `.log` and trusts the
//!    segments before it (the clean-shutdown marker was removed first).
//!
//! A log whose segments are whole but end below the recovery point (synced data
//! missing) counts as damaged at its end: the repair checkpoints what is there.
//!
//! The caller must own the data directory (the broker holds its lock while it
//! runs); nothing here may run beside an open [`super::Log`] of the same directory.

use std::path::{Path, PathBuf};

use super::checkpoint::{read_recovery_point, write_recovery_point, CLEAN_SHUTDOWN_FILE};
use super::open::{aside_path_for, cut_tail, SegmentLog, TruncatedTail};
use super::scan::{scan_segment, ScanEnd};
use super::segment::{file_name, parse_file_name};
use super::{remove_if_present, LogError};
use crate::storage::Storage;

/// One segment as [`inspect`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentSummary {
    pub base_offset: u64,
    /// Bytes of the `.log` file.
    pub size_bytes: u64,
    /// Bytes of whole, valid batches from the start.
    pub valid_bytes: u64,
    /// One past the last valid batch's last offset.
    pub next_offset: u64,
}

/// The first damage in a partition log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub segment_base_offset: u64,
    /// Byte position in the segment's `.log` where the valid batches end.
    pub position: u64,
    /// The offset the next valid batch would have had: every record below it is intact.
    pub offset: u64,
    pub reason: String,
}

/// What [`inspect`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inspection {
    /// Segments in order, up to and including the damaged one.
    pub segments: Vec<SegmentSummary>,
    /// Base offsets of the segments after the damaged one.
    pub segments_after_damage: Vec<u64>,
    pub damage: Option<Damage>,
}

/// What [`truncate_at_damage`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    pub damage: Damage,
    /// The cut bytes of the damaged segment (none when the damage is a gap between segments).
    pub truncated_tail: Option<TruncatedTail>,
    /// Later segments, renamed aside: (base offset, new path).
    pub segments_moved: Vec<(u64, PathBuf)>,
}

/// Scans every segment of the partition in `dir`; `on_segment` sees each one as it
/// is done (for progress). Stops at the first damage.
pub fn inspect(
    storage: &dyn Storage,
    dir: &Path,
    mut on_segment: impl FnMut(&SegmentSummary),
) -> Result<Inspection, LogError> {
    let bases = segment_bases(storage, dir)?;
    let mut inspection = Inspection::default();
    for (index, &base_offset) in bases.iter().enumerate() {
        if let Some(previous) = inspection.segments.last().filter(|previous| previous.next_offset != base_offset) {
            inspection.damage = Some(Damage {
                segment_base_offset: previous.base_offset,
                position: previous.size_bytes,
                offset: previous.next_offset,
                reason: format!(
                    "the next segment starts at offset {base_offset} but this one ends at {}",
                    previous.next_offset
                ),
            });
            inspection.segments_after_damage = bases[index..].to_vec();
            break;
        }
        let path = dir.join(file_name(base_offset, "log"));
        let file = storage.open(&path, false).map_err(LogError::io("open", &path))?;
        let size_bytes = file.len().map_err(LogError::io("stat", &path))?;
        let mut summary = SegmentSummary { base_offset, size_bytes, valid_bytes: 0, next_offset: base_offset };
        let scan_end = scan_segment(file.as_ref(), size_bytes, base_offset, |position, header| {
            summary.valid_bytes = position + header.size_bytes;
            summary.next_offset = header.next_offset();
        })
        .map_err(LogError::io("scan", &path))?;
        on_segment(&summary);
        inspection.segments.push(summary.clone());
        if let ScanEnd::Torn { position, reason } | ScanEnd::Corrupt { position, reason } = scan_end {
            let offset = summary.next_offset;
            inspection.damage = Some(Damage { segment_base_offset: base_offset, position, offset, reason });
            inspection.segments_after_damage = bases[index + 1..].to_vec();
            break;
        }
    }
    // A log that ends below its recovery point lost data the checkpoint vouched
    // for (recovery fences it); the repair is to checkpoint what is there.
    let recovery_point = read_recovery_point(storage, dir);
    if let Some(last) =
        inspection.segments.last().filter(|last| inspection.damage.is_none() && last.next_offset < recovery_point)
    {
        inspection.damage = Some(Damage {
            segment_base_offset: last.base_offset,
            position: last.size_bytes,
            offset: last.next_offset,
            reason: format!("the log ends at offset {} below its recovery point {recovery_point}", last.next_offset),
        });
    }
    Ok(inspection)
}

/// Cuts the partition in `dir` at its first damage (see the module docs). Returns
/// `None` when [`inspect`] finds none.
pub fn truncate_at_damage(storage: &dyn Storage, dir: &Path) -> Result<Option<Repair>, LogError> {
    let inspection = inspect(storage, dir, |_| {})?;
    let Some(damage) = inspection.damage else { return Ok(None) };
    // First, so a repair cut short never leaves a marker that vouches for the old indexes.
    remove_if_present(storage, &dir.join(CLEAN_SHUTDOWN_FILE))?;
    storage.sync_dir(dir).map_err(LogError::io("sync directory", dir))?;
    let path = dir.join(file_name(damage.segment_base_offset, "log"));
    let file = storage.open(&path, false).map_err(LogError::io("open", &path))?;
    let file_len = file.len().map_err(LogError::io("stat", &path))?;
    let truncated_tail = if file_len > damage.position {
        let log = SegmentLog { path: &path, file: file.as_ref(), base_offset: damage.segment_base_offset };
        Some(cut_tail(storage, &log, damage.position, damage.offset, damage.reason.clone())?)
    } else {
        None
    };
    file.sync_data().map_err(LogError::io("sync", &path))?;
    let mut segments_moved = Vec::new();
    for &base_offset in &inspection.segments_after_damage {
        let from = dir.join(file_name(base_offset, "log"));
        let to = aside_path_for(storage, &from, "removed-by-repair");
        storage.rename(&from, &to).map_err(LogError::io("rename", &from))?;
        for extension in ["index", "timeindex"] {
            remove_if_present(storage, &dir.join(file_name(base_offset, extension)))?;
        }
        segments_moved.push((base_offset, to));
    }
    storage.sync_dir(dir).map_err(LogError::io("sync directory", dir))?;
    write_recovery_point(storage, dir, damage.segment_base_offset)?;
    Ok(Some(Repair { damage, truncated_tail, segments_moved }))
}

/// Base offsets of the segments (`.log` files) in `dir`, ascending.
fn segment_bases(storage: &dyn Storage, dir: &Path) -> Result<Vec<u64>, LogError> {
    let names = storage.list_dir(dir).map_err(LogError::io("list directory", dir))?;
    let mut bases: Vec<u64> = names
        .iter()
        .filter_map(|name| parse_file_name(name))
        .filter(|(_, extension)| *extension == "log")
        .map(|(base, _)| base)
        .collect();
    bases.sort_unstable();
    Ok(bases)
}

//! The operator's path for a fenced partition (`log::repair`): inspection finds the
//! first damage and writes nothing; truncation cuts there, keeps every cut byte
//! aside, and the partition then opens with every record before the damage.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

mod support;

use std::path::Path;

use broker_core::log::repair::{inspect, truncate_at_damage};
use broker_core::log::LogError;
use broker_core::storage::mem::MemStorage;
use broker_core::storage::Storage;
use support::{batch, open, read_all, small_config};

const DIR: &str = "/data/topic-0";

/// `count` one-record batches, then an unclean stop. Returns the log end offset.
fn fill(storage: &MemStorage, count: i64) -> Vec<u64> {
    let mut log = open(storage, &small_config()).unwrap();
    for index in 0..count {
        log.append(&mut batch(&[(index, format!("value-{index:04}").into_bytes())]), 0).unwrap();
    }
    log.flush().unwrap();
    log.segment_base_offsets()
}

fn flip(storage: &MemStorage, path: &str, position: usize) {
    let mut bytes = storage.contents(Path::new(path)).unwrap();
    bytes[position] ^= 0x10;
    storage.overwrite(Path::new(path), bytes);
}

#[test]
fn a_healthy_log_has_no_damage_and_nothing_to_cut() {
    let storage = MemStorage::new();
    let bases = fill(&storage, 50);
    let mut seen = Vec::new();
    let inspection = inspect(&storage, Path::new(DIR), |segment| seen.push(segment.base_offset)).unwrap();
    assert_eq!(inspection.damage, None);
    assert_eq!(seen, bases);
    assert_eq!(inspection.segments.last().unwrap().next_offset, 50);
    assert!(truncate_at_damage(&storage, Path::new(DIR)).unwrap().is_none());
}

#[test]
fn damage_in_an_older_segment_is_cut_and_later_segments_moved_aside() {
    let storage = MemStorage::new();
    let bases = fill(&storage, 120);
    assert!(bases.len() >= 3, "{bases:?}");
    let first_log = format!("{DIR}/00000000000000000000.log");
    let before: Vec<u8> = storage.contents(Path::new(&first_log)).unwrap();
    // Damage the third batch of the first (synced, trusted) segment.
    let batch_bytes = support::records_of(&before).len();
    let batch_size = before.len() / batch_bytes;
    // (Recovery trusts a segment below the recovery point and walks only its last
    // batches; inspection reads every batch.)
    flip(&storage, &first_log, 2 * batch_size + 40);
    let files_before: Vec<_> = storage.file_paths().iter().map(|path| storage.contents(path)).collect();

    let inspection = inspect(&storage, Path::new(DIR), |_| {}).unwrap();
    let damage = inspection.damage.clone().expect("damage found");
    assert_eq!((damage.segment_base_offset, damage.position, damage.offset), (0, 2 * batch_size as u64, 2));
    assert_eq!(inspection.segments_after_damage, bases[1..]);
    let files_after: Vec<_> = storage.file_paths().iter().map(|path| storage.contents(path)).collect();
    assert!(files_before == files_after, "inspection wrote nothing");

    let repair = truncate_at_damage(&storage, Path::new(DIR)).unwrap().expect("a repair");
    let tail = repair.truncated_tail.expect("bytes cut");
    assert_eq!(storage.contents(&tail.moved_to).unwrap(), {
        let mut damaged = before.clone();
        damaged[2 * batch_size + 40] ^= 0x10;
        damaged[2 * batch_size..].to_vec()
    });
    assert_eq!(repair.segments_moved.len(), bases.len() - 1);
    for (base, path) in &repair.segments_moved {
        assert!(storage.contents(path).is_some(), "segment {base} kept at {}", path.display());
    }

    let mut log = open(&storage, &small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 2);
    let values: Vec<Vec<u8>> = read_all(&log, 4096).into_iter().map(|record| record.value).collect();
    assert_eq!(values, vec![b"value-0000".to_vec(), b"value-0001".to_vec()]);
    assert_eq!(log.append(&mut batch(&[(9, b"after".to_vec())]), 0).unwrap().base_offset, 2);
    log.close().unwrap();
    assert_eq!(open(&storage, &small_config()).unwrap().log_end_offset(), 3);
}

#[test]
fn damage_in_the_active_segment_is_cut_there() {
    let storage = MemStorage::new();
    let bases = fill(&storage, 120);
    let active = format!("{DIR}/{:020}.log", bases[bases.len() - 1]);
    let bytes = storage.contents(Path::new(&active)).unwrap();
    flip(&storage, &active, 40); // the active segment's first batch; valid batches follow
    assert!(matches!(open(&storage, &small_config()), Err(LogError::Corrupt { .. })));
    let repair = truncate_at_damage(&storage, Path::new(DIR)).unwrap().expect("a repair");
    assert_eq!(repair.damage.offset, bases[bases.len() - 1]);
    assert!(repair.segments_moved.is_empty());
    assert_eq!(repair.truncated_tail.unwrap().bytes, bytes.len() as u64);
    let log = open(&storage, &small_config()).unwrap();
    assert_eq!(log.log_end_offset(), bases[bases.len() - 1]);
}

#[test]
fn a_log_ending_below_its_recovery_point_is_checkpointed_at_its_end() {
    let storage = MemStorage::new();
    let bases = fill(&storage, 120);
    let log = open(&storage, &small_config()).unwrap();
    log.close().unwrap(); // the recovery point is now the log end, 120
                          // The newest segment vanishes (synced data lost), and so does the clean marker.
    let last = bases[bases.len() - 1];
    for extension in ["log", "index", "timeindex"] {
        storage.remove_file(Path::new(&format!("{DIR}/{last:020}.{extension}"))).unwrap();
    }
    storage.remove_file(Path::new(&format!("{DIR}/clean-shutdown"))).unwrap();
    assert!(matches!(open(&storage, &small_config()), Err(LogError::Corrupt { .. })), "recovery fences");
    let damage = inspect(&storage, Path::new(DIR), |_| {}).unwrap().damage.expect("damage found");
    assert!(damage.reason.contains("below its recovery point 120"), "{}", damage.reason);
    assert_eq!(damage.offset, last);
    let repair = truncate_at_damage(&storage, Path::new(DIR)).unwrap().expect("a repair");
    assert!(repair.truncated_tail.is_none() && repair.segments_moved.is_empty());
    assert_eq!(open(&storage, &small_config()).unwrap().log_end_offset(), last);
}

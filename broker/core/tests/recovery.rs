//! Recovery after an unclean stop, on purpose-damaged logs: a torn last batch or a
//! garbage tail above the recovery point is truncated (its bytes copied aside); a
//! bit flip followed by valid data, or any damage below the recovery point, fences
//! the partition and leaves the files untouched.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

mod support;

use std::path::{Path, PathBuf};

use broker_core::log::{Log, LogError};
use broker_core::storage::mem::MemStorage;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{batch, open, read_all, small_config};

const ACTIVE_LOG: &str = "/data/topic-0/00000000000000000000.log";

/// Ten batches of two records in one segment, synced, then an unclean stop (no
/// `close`). Returns the position of each batch.
fn ten_batches_then_unclean_stop(storage: &MemStorage) -> Vec<u64> {
    let mut log = open(storage, &small_config()).unwrap();
    let mut positions = Vec::new();
    let mut position = 0u64;
    for index in 0..10i64 {
        let mut bytes = batch(&[(index, format!("v{index}").into_bytes()), (index, b"w".to_vec())]);
        positions.push(position);
        position += bytes.len() as u64;
        log.append(&mut bytes, 0).unwrap();
    }
    assert_eq!(log.segment_count(), 1);
    log.flush().unwrap();
    drop(log);
    positions
}

fn damage(storage: &MemStorage, path: &str, change: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut bytes = storage.contents(Path::new(path)).unwrap();
    change(&mut bytes);
    storage.overwrite(Path::new(path), bytes.clone());
    bytes
}

#[test]
fn torn_last_batch_is_truncated_and_the_rest_kept() {
    let storage = MemStorage::new();
    let positions = ten_batches_then_unclean_stop(&storage);
    damage(&storage, ACTIVE_LOG, |bytes| bytes.truncate(bytes.len() - 7));
    let mut log = open(&storage, &small_config()).unwrap();
    let report = log.recovery_report().clone();
    assert!(!report.clean_shutdown);
    assert_eq!(report.segments_scanned, 1);
    let torn_batch_bytes = storage.contents(Path::new(ACTIVE_LOG)).unwrap().len() as u64;
    assert_eq!(torn_batch_bytes, positions[9], "cut exactly at the torn batch");
    assert_eq!(log.log_end_offset(), 18);
    let records = read_all(&log, 4096);
    assert_eq!(records.len(), 18);
    assert_eq!(records[16].value, b"v8");
    assert_eq!(log.append(&mut batch(&[(1, b"next".to_vec())]), 0).unwrap().base_offset, 18);
}

#[test]
fn zeros_after_the_last_batch_are_a_torn_tail() {
    let storage = MemStorage::new();
    let positions = ten_batches_then_unclean_stop(&storage);
    let damaged = damage(&storage, ACTIVE_LOG, |bytes| {
        let end = bytes.len();
        bytes[positions[9] as usize..end].fill(0);
        bytes.extend_from_slice(&[0u8; 300]);
    });
    let log = open(&storage, &small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 18);
    assert_eq!(storage.contents(Path::new(ACTIVE_LOG)).unwrap().len() as u64, positions[9]);
    assert_eq!(log.recovery_report().truncated_bytes, damaged.len() as u64 - positions[9]);
}

fn expect_fenced(result: Result<Log, LogError>, position: u64) {
    match result {
        Err(LogError::Corrupt { segment_base_offset: 0, position: found, reason, .. }) => {
            assert_eq!(found, position, "{reason}");
        }
        other => panic!("expected the partition to be fenced at {position}, got {other:?}"),
    }
}

#[test]
fn bit_flip_mid_segment_fences_and_truncates_nothing() {
    let storage = MemStorage::new();
    let positions = ten_batches_then_unclean_stop(&storage);
    let damaged = damage(&storage, ACTIVE_LOG, |bytes| bytes[positions[5] as usize + 40] ^= 0x10);
    expect_fenced(open(&storage, &small_config()), positions[5]);
    assert_eq!(storage.contents(Path::new(ACTIVE_LOG)).unwrap(), damaged, "nothing was cut");
    expect_fenced(open(&storage, &small_config()), positions[5]);
}

#[test]
fn bit_flip_in_the_last_whole_batch_above_the_recovery_point_is_cut_and_kept_aside() {
    // Above the recovery point, a last batch damaged in place cannot be told from a
    // batch whose header reached the disk and whose body did not (scan.rs).
    let storage = MemStorage::new();
    let positions = ten_batches_then_unclean_stop(&storage);
    let damaged = damage(&storage, ACTIVE_LOG, |bytes| bytes[positions[9] as usize + 30] ^= 0x01);
    let log = open(&storage, &small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 18);
    let tail = log.recovery_report().truncated_tail.clone().expect("a cut tail");
    assert_eq!((tail.position, tail.offset), (positions[9], 18));
    assert_eq!(storage.contents(&tail.moved_to).unwrap(), damaged[positions[9] as usize..]);
}

#[test]
fn random_garbage_after_the_last_batch_is_cut_and_moved_aside() {
    let storage = MemStorage::new();
    let positions = ten_batches_then_unclean_stop(&storage);
    let mut rng = StdRng::seed_from_u64(777);
    let garbage: Vec<u8> = (0..777).map(|_| rng.gen()).collect();
    let damaged = damage(&storage, ACTIVE_LOG, |bytes| bytes.extend_from_slice(&garbage));
    let end = damaged.len() as u64 - 777;
    let mut log = open(&storage, &small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 20, "every record kept");
    assert_eq!(read_all(&log, 4096).len(), 20);
    let report = log.recovery_report().clone();
    assert_eq!(report.truncated_bytes, 777);
    let tail = report.truncated_tail.expect("a cut tail");
    assert_eq!((tail.segment_base_offset, tail.position, tail.offset, tail.bytes), (0, end, 20, 777));
    assert_eq!(tail.moved_to, PathBuf::from(format!("{ACTIVE_LOG}.torn-at-{end}")));
    assert_eq!(storage.contents(&tail.moved_to).unwrap(), garbage, "the garbage is kept aside");
    assert_eq!(storage.contents(Path::new(ACTIVE_LOG)).unwrap(), damaged[..end as usize]);
    assert!(positions.len() == 10);
    assert_eq!(log.append(&mut batch(&[(1, b"next".to_vec())]), 0).unwrap().base_offset, 20);
}

#[test]
fn stale_bytes_of_an_older_segment_after_the_last_batch_are_cut() {
    let storage = MemStorage::new();
    let config = small_config();
    let mut log = open(&storage, &config).unwrap();
    for index in 0..120i64 {
        log.append(&mut batch(&[(index, format!("value-{index:04}").into_bytes())]), 0).unwrap();
    }
    log.flush().unwrap();
    let end = log.log_end_offset();
    let bases = log.segment_base_offsets();
    assert!(bases.len() >= 3);
    drop(log);
    // Whole valid batches of the first segment (old offsets) land after the tail.
    let first = storage.contents(Path::new("/data/topic-0/00000000000000000000.log")).unwrap();
    let active = format!("/data/topic-0/{:020}.log", bases[bases.len() - 1]);
    damage(&storage, &active, |bytes| bytes.extend_from_slice(&first[..first.len() / 2]));
    let log = open(&storage, &config).unwrap();
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.recovery_report().truncated_bytes, first.len() as u64 / 2);
}

#[test]
fn garbage_below_the_recovery_point_fences() {
    let storage = MemStorage::new();
    let positions = ten_batches_then_unclean_stop(&storage);
    // Opening checkpoints the log end (20) as the recovery point.
    drop(open(&storage, &small_config()).unwrap());
    let damaged = damage(&storage, ACTIVE_LOG, |bytes| {
        let end = bytes.len();
        bytes[positions[9] as usize + 20..end].fill(0xA5);
    });
    match open(&storage, &small_config()) {
        Err(LogError::Corrupt { position, reason, .. }) => {
            assert_eq!(position, positions[9]);
            assert!(reason.contains("below the recovery point 20"), "{reason}");
        }
        other => panic!("expected the partition to be fenced, got {other:?}"),
    }
    assert_eq!(storage.contents(Path::new(ACTIVE_LOG)).unwrap(), damaged, "nothing was cut");
}

#[test]
fn flipped_length_field_of_the_last_batch_fences() {
    let storage = MemStorage::new();
    let positions = ten_batches_then_unclean_stop(&storage);
    damage(&storage, ACTIVE_LOG, |bytes| bytes[positions[9] as usize + 10] ^= 0x01);
    expect_fenced(open(&storage, &small_config()), positions[9]);
}

#[test]
fn flipped_length_field_mid_segment_fences() {
    let storage = MemStorage::new();
    let positions = ten_batches_then_unclean_stop(&storage);
    damage(&storage, ACTIVE_LOG, |bytes| bytes[positions[3] as usize + 9] ^= 0x40);
    expect_fenced(open(&storage, &small_config()), positions[3]);
}

#[test]
fn flipped_base_offset_fences() {
    let storage = MemStorage::new();
    let positions = ten_batches_then_unclean_stop(&storage);
    damage(&storage, ACTIVE_LOG, |bytes| bytes[positions[4] as usize + 7] ^= 0x01);
    expect_fenced(open(&storage, &small_config()), positions[4]);
}

#[test]
fn damaged_index_of_a_trusted_segment_is_rebuilt() {
    let storage = MemStorage::new();
    let config = small_config();
    let mut log = open(&storage, &config).unwrap();
    for index in 0..200i64 {
        log.append(&mut batch(&[(index, format!("value-{index:04}").into_bytes())]), 0).unwrap();
    }
    assert!(log.segment_count() >= 3);
    let before = read_all(&log, 4096);
    log.close().unwrap();
    let index = PathBuf::from("/data/topic-0/00000000000000000000.index");
    damage(&storage, index.to_str().unwrap(), |bytes| bytes.truncate(bytes.len() - 3));
    let log = open(&storage, &config).unwrap();
    assert_eq!(log.recovery_report().indexes_rebuilt, 1);
    assert_eq!(read_all(&log, 100), before);
}

#[test]
fn missing_recovery_point_scans_everything_and_keeps_all() {
    let storage = MemStorage::new();
    let config = small_config();
    let mut log = open(&storage, &config).unwrap();
    for index in 0..200i64 {
        log.append(&mut batch(&[(index, vec![b'x'; 40])]), 0).unwrap();
    }
    log.flush().unwrap();
    let segments = log.segment_count();
    drop(log);
    damage(&storage, "/data/topic-0/recovery-point", |bytes| bytes[6] ^= 1);
    let log = open(&storage, &config).unwrap();
    assert_eq!(log.recovery_report().segments_scanned, segments);
    assert_eq!(log.log_end_offset(), 200);
}

#[test]
fn a_second_cut_at_the_same_place_keeps_the_first_copy() {
    let storage = MemStorage::new();
    ten_batches_then_unclean_stop(&storage);
    let end = storage.contents(Path::new(ACTIVE_LOG)).unwrap().len();
    for (round, garbage) in [[0xAB_u8; 100], [0xCD_u8; 100]].iter().enumerate() {
        damage(&storage, ACTIVE_LOG, |bytes| bytes.extend_from_slice(garbage));
        let log = open(&storage, &small_config()).unwrap(); // cuts, then stops uncleanly again
        let moved_to = log.recovery_report().truncated_tail.clone().expect("a cut tail").moved_to;
        let expected = match round {
            0 => format!("{ACTIVE_LOG}.torn-at-{end}"),
            _ => format!("{ACTIVE_LOG}.torn-at-{end}.1"),
        };
        assert_eq!(moved_to, PathBuf::from(expected));
    }
    let first = storage.contents(Path::new(&format!("{ACTIVE_LOG}.torn-at-{end}"))).unwrap();
    assert_eq!(first, [0xAB_u8; 100], "the first copy is not overwritten");
}

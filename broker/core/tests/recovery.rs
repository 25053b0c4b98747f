//! Recovery after an unclean stop, on purpose-damaged logs: a torn last batch is
//! truncated; a bit flip (or any damage followed by valid data) fences the partition
//! and leaves the files untouched.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

mod support;

use std::path::{Path, PathBuf};

use broker_core::log::{Log, LogError};
use broker_core::storage::mem::MemStorage;
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
fn bit_flip_in_the_last_whole_batch_fences() {
    let storage = MemStorage::new();
    let positions = ten_batches_then_unclean_stop(&storage);
    damage(&storage, ACTIVE_LOG, |bytes| bytes[positions[9] as usize + 30] ^= 0x01);
    expect_fenced(open(&storage, &small_config()), positions[9]);
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

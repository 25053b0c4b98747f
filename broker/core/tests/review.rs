//! Regression tests for faults found in review: hostile-but-valid batches, damage
//! at the boundary between trusted and scanned segments, bit flips outside the CRC
//! in trusted segments, torn writes that carry batches inside record values, and a
//! shutdown flush overtaking a flush round still in progress.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

mod support;

use std::path::Path;

use abi::batch::{field, BatchView};
use broker_core::log::LogError;
use broker_core::storage::mem::{CrashMode, MemStorage};
use broker_core::storage::Storage;
use support::{batch, open, read_all, small_config};

const SEGMENT_0: &str = "/data/topic-0/00000000000000000000.log";

/// A CRC-valid batch of one record claiming an offset span of 2^31 (`last_offset_delta = i32::MAX`).
fn sparse_batch() -> Vec<u8> {
    let mut bytes = batch(&[(1, vec![b'h'; 200])]);
    bytes[field::LAST_OFFSET_DELTA..field::LAST_OFFSET_DELTA + 4].copy_from_slice(&i32::MAX.to_be_bytes());
    let crc = BatchView::new(&bytes).unwrap().computed_crc();
    bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    bytes
}

fn flip(storage: &MemStorage, path: &str, position: usize, mask: u8) {
    let mut bytes = storage.contents(Path::new(path)).unwrap();
    bytes[position] ^= mask;
    storage.overwrite(Path::new(path), bytes);
}

/// Eight one-record batches in segment 0, returning their positions.
fn eight_batches(storage: &MemStorage) -> (broker_core::log::Log, Vec<u64>) {
    let mut log = open(storage, &small_config()).unwrap();
    let mut positions = Vec::new();
    for index in 0..8i64 {
        let mut bytes = batch(&[(index, vec![b'x'; 40])]);
        positions.push(log.size_bytes());
        log.append(&mut bytes, 0).unwrap();
    }
    (log, positions)
}

#[test]
fn batches_with_offset_gaps_are_refused_and_never_reach_the_disk() {
    let storage = MemStorage::new();
    let mut log = open(&storage, &small_config()).unwrap();
    let mut request = [sparse_batch(), sparse_batch(), sparse_batch()].concat();
    assert!(matches!(log.append(&mut request, 0), Err(LogError::InvalidBatch { batch_index: 0, .. })));
    drop(log);
    assert_eq!(open(&storage, &small_config()).unwrap().log_end_offset(), 0);
}

#[test]
fn a_stored_batch_past_the_u32_offset_range_fences_instead_of_panicking() {
    let storage = MemStorage::new();
    let (mut log, _) = eight_batches(&storage);
    log.flush().unwrap();
    drop(log);
    let mut bytes = storage.contents(Path::new(SEGMENT_0)).unwrap();
    // Two stored batches spanning 2^31 offsets each, continuing the log: the second
    // ends past what a segment's u32 relative offsets can hold.
    for base_offset in [8i64, 8 + (1 << 31)] {
        let mut hostile = sparse_batch();
        hostile[..8].copy_from_slice(&base_offset.to_be_bytes());
        bytes.extend_from_slice(&hostile);
    }
    storage.overwrite(Path::new(SEGMENT_0), bytes);
    assert!(matches!(open(&storage, &small_config()), Err(LogError::Corrupt { .. })));
}

#[test]
fn missing_segment_below_the_recovery_point_fences_instead_of_deleting_later_ones() {
    let storage = MemStorage::new();
    let mut log = open(&storage, &small_config()).unwrap();
    for index in 0..60i64 {
        log.append(&mut batch(&[(index, vec![b'x'; 150])]), 0).unwrap();
    }
    log.flush().unwrap();
    let bases = log.segment_base_offsets();
    drop(log);
    let victim = bases[bases.len() - 2];
    for extension in ["log", "index", "timeindex"] {
        storage.remove_file(&Path::new("/data/topic-0").join(format!("{victim:020}.{extension}"))).unwrap();
    }
    let last = Path::new("/data/topic-0").join(format!("{:020}.log", bases[bases.len() - 1]));
    assert!(matches!(open(&storage, &small_config()), Err(LogError::Corrupt { .. })));
    assert!(storage.exists(&last), "the later, durable segment was not deleted");
}

#[test]
fn flipped_base_offset_in_a_trusted_segment_never_moves_the_log_end() {
    for (byte, mask) in [(3usize, 0x01u8), (7, 0x04)] {
        let storage = MemStorage::new();
        let (log, positions) = eight_batches(&storage);
        log.close().unwrap();
        flip(&storage, SEGMENT_0, *positions.last().unwrap() as usize + byte, mask);
        match open(&storage, &small_config()) {
            Err(LogError::Corrupt { .. }) => {}
            Ok(log) => panic!("opened with log end {} after a flipped base offset", log.log_end_offset()),
            Err(other) => panic!("unexpected error {other}"),
        }
    }
}

#[test]
fn negative_base_offset_is_corruption_not_an_io_error() {
    let storage = MemStorage::new();
    let (mut log, positions) = eight_batches(&storage);
    log.flush().unwrap();
    drop(log);
    flip(&storage, SEGMENT_0, positions[4] as usize, 0x80);
    assert!(
        matches!(open(&storage, &small_config()), Err(LogError::Corrupt { position, .. }) if position == positions[4])
    );
}

#[test]
fn torn_write_of_a_record_holding_an_encoded_batch_is_still_a_torn_tail() {
    let storage = MemStorage::new();
    let (mut log, _) = eight_batches(&storage);
    log.flush().unwrap();
    let synced_bytes = log.size_bytes() as usize;
    let inner = batch(&[(1, b"payload".to_vec())]);
    let mut value = inner.clone();
    value.extend_from_slice(&[b'y'; 300]);
    log.append(&mut batch(&[(9, value)]), 0).unwrap();
    drop(log);
    let bytes = storage.contents(Path::new(SEGMENT_0)).unwrap();
    storage.overwrite(Path::new(SEGMENT_0), bytes[..synced_bytes + 61 + 10 + inner.len() + 20].to_vec());
    let log = open(&storage, &small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 8);
}

#[test]
fn a_shutdown_flush_overtaking_a_round_still_syncs_what_the_round_holds() {
    let storage = MemStorage::new();
    let mut log = open(&storage, &small_config()).unwrap();
    for index in 0..30i64 {
        log.append(&mut batch(&[(index, vec![b'x'; 150])]), 0).unwrap();
    }
    let in_flight = log.begin_flush().unwrap();
    let acknowledged = log.flush().unwrap();
    log.close().unwrap();
    drop(in_flight); // the round's own syncs never ran
    storage.crash(CrashMode::ForgetUnsynced);
    let log = open(&storage, &small_config()).unwrap();
    assert!(log.recovery_report().clean_shutdown);
    assert_eq!(log.log_end_offset(), acknowledged);
    assert_eq!(read_all(&log, 4096).len() as u64, acknowledged);
}

#[test]
fn a_record_with_a_wrong_offset_delta_is_refused_and_lookups_stay_right() {
    let storage = MemStorage::new();
    let mut log = open(&storage, &small_config()).unwrap();
    log.append(&mut batch(&[(100, b"a".to_vec())]), 0).unwrap();
    let mut builder = abi::batch::BatchBuilder::new(200);
    builder.push(200, None, Some(b"b"), &[]);
    let mut model = abi::batch::RecordBatch::decode(&builder.encode()).unwrap();
    model.records[0].offset_delta = -5;
    let refused = log.append(&mut model.encode().unwrap(), 0).unwrap_err();
    assert!(
        matches!(
            refused,
            LogError::InvalidBatch {
                source: abi::batch::BatchError::OffsetDeltaMismatch { index: 0, offset_delta: -5 },
                ..
            }
        ),
        "{refused:?}"
    );
    log.append(&mut batch(&[(200, b"b".to_vec())]), 0).unwrap();
    assert_eq!(log.offset_for_timestamp(150).unwrap(), Some(1));
}

#[test]
fn a_read_within_max_bytes_never_reads_a_first_batch_that_does_not_fit() {
    let storage = MemStorage::new();
    let mut log = open(&storage, &small_config()).unwrap();
    for index in 0..3i64 {
        log.append(&mut batch(&[(index, vec![b'x'; 300])]), 0).unwrap();
    }
    let mut buffer = Vec::new();
    let whole = log.read(0, 50, None).unwrap().read_into(&mut buffer).unwrap();
    assert_eq!((whole.batch_count, whole.next_offset), (1, 1), "a consumer always progresses");
    let mut buffer = Vec::new();
    let strict = log.read(0, 50, None).unwrap().within_max_bytes().read_into(&mut buffer).unwrap();
    assert_eq!((strict.batch_count, strict.next_offset, buffer.capacity()), (0, 0, 0), "nothing read");
    let fits = log.read(0, 1_000, None).unwrap().within_max_bytes().read_into(&mut buffer).unwrap();
    assert_eq!(fits.batch_count, 2, "whole batches up to max_bytes");
}

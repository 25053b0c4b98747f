//! Behaviour of the partition log through its public API, on the in-memory storage.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

mod support;

use broker_core::log::{LogConfig, LogError, ValidatedBatches};
use broker_core::storage::mem::{CrashMode, MemStorage};
use broker_core::storage::Storage;
use support::{batch, open, read_all, records_of, small_config};

/// CRC-32C (Castagnoli), bit by bit: independent of the crate the log uses.
fn crc32c_of(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    !crc
}

fn value(index: usize) -> Vec<u8> {
    format!("value-{index:05}-{}", "x".repeat(index % 50)).into_bytes()
}

#[test]
fn append_assigns_dense_offsets_and_reads_return_the_same_bytes() {
    let storage = MemStorage::new();
    let mut log = open(&storage, &small_config()).unwrap();
    let mut expected = Vec::new();
    for index in 0..100 {
        let records: Vec<(i64, Vec<u8>)> = (0..3).map(|i| (1000 + index as i64, value(index * 3 + i))).collect();
        let mut bytes = batch(&records);
        let info = log.append(&mut bytes, 7).unwrap();
        assert_eq!(info.base_offset, index as u64 * 3);
        assert_eq!(info.last_offset, index as u64 * 3 + 2);
        expected.extend(records.into_iter().map(|(_, value)| value));
    }
    assert!(log.segment_count() > 3, "small segments roll");
    let values: Vec<Vec<u8>> = read_all(&log, 700).into_iter().map(|record| record.value).collect();
    assert_eq!(values, expected);
    let mut buffer = Vec::new();
    log.read(151, 1, None).unwrap().read_into(&mut buffer).unwrap();
    let view = abi::batch::BatchView::new(&buffer).unwrap();
    assert_eq!((view.base_offset(), view.partition_leader_epoch()), (150, 7), "whole batch holding 151, stamped");
    view.validate().unwrap();
}

#[test]
fn append_rejects_bad_batches_and_writes_nothing() {
    let storage = MemStorage::new();
    let mut log = open(&storage, &small_config()).unwrap();
    let good = batch(&[(1, b"a".to_vec())]);
    let mut corrupt = good.clone();
    *corrupt.last_mut().unwrap() ^= 0xff;
    let mut request = [good.clone(), corrupt].concat();
    let error = log.append(&mut request, 0).unwrap_err();
    assert!(matches!(error, LogError::InvalidBatch { batch_index: 1, .. }), "{error}");
    let mut huge = batch(&[(1, vec![0u8; 5000])]);
    let untouched = huge.clone();
    assert!(matches!(log.append(&mut huge, 0), Err(LogError::AppendTooLarge { .. })));
    assert_eq!(huge, untouched, "a rejected request is not stamped");
    let mut strict = open(&MemStorage::new(), &LogConfig { batch_bytes_max: 1024, ..small_config() }).unwrap();
    let mut big = batch(&[(1, vec![0u8; 2000])]);
    assert!(matches!(strict.append(&mut big, 0), Err(LogError::BatchTooLarge { batch_index: 0, .. })));
    let mut gappy = batch(&[(1, b"a".to_vec()), (1, b"b".to_vec())]);
    gappy[abi::batch::field::LAST_OFFSET_DELTA + 3] = 9; // delta 9 for 2 records; the CRC is recomputed below
    let crc = crc32c_of(&gappy[abi::batch::field::ATTRIBUTES..]);
    gappy[abi::batch::field::CRC..abi::batch::field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    assert!(
        matches!(log.append(&mut gappy, 0), Err(LogError::InvalidBatch { batch_index: 0, .. })),
        "offset gaps are refused"
    );
    assert!(matches!(log.append(&mut [], 0), Err(LogError::EmptyAppend)));
    let mut truncated = good[..good.len() - 1].to_vec();
    assert!(matches!(log.append(&mut truncated, 0), Err(LogError::InvalidBatch { .. })));
    assert_eq!(log.log_end_offset(), 0);
    log.append(&mut good.clone(), 0).unwrap();
    assert_eq!(log.log_end_offset(), 1);
}

#[test]
fn reads_outside_the_log_are_out_of_range_and_at_the_end_are_empty() {
    let storage = MemStorage::new();
    let mut log = open(&storage, &small_config()).unwrap();
    log.append(&mut batch(&[(1, b"a".to_vec())]), 0).unwrap();
    assert!(matches!(log.read(2, 100, None), Err(LogError::OffsetOutOfRange { offset: 2, .. })));
    let mut buffer = vec![1, 2, 3];
    let info = log.read(1, 100, None).unwrap().read_into(&mut buffer).unwrap();
    assert_eq!((info.batch_count, buffer.len()), (0, 0));
    let info = log.read(0, 100, Some(0)).unwrap().read_into(&mut buffer).unwrap();
    assert_eq!(info.batch_count, 0, "nothing at or beyond offset_end (the high watermark)");
}

#[test]
fn offset_for_timestamp_finds_the_first_record_at_or_after() {
    let storage = MemStorage::new();
    let mut log = open(&storage, &small_config()).unwrap();
    for index in 0..200i64 {
        let timestamp = 10_000 + index * 10;
        log.append(&mut batch(&[(timestamp, value(index as usize)), (timestamp + 5, b"b".to_vec())]), 0).unwrap();
    }
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some(0));
    assert_eq!(log.offset_for_timestamp(10_000 + 50 * 10).unwrap(), Some(100));
    assert_eq!(log.offset_for_timestamp(10_000 + 50 * 10 + 3).unwrap(), Some(101), "inside a batch");
    assert_eq!(log.offset_for_timestamp(10_000 + 199 * 10 + 5).unwrap(), Some(399));
    assert_eq!(log.offset_for_timestamp(99_999).unwrap(), None);
}

#[test]
fn clean_close_reopens_without_scanning_and_keeps_everything() {
    let storage = MemStorage::new();
    let config = small_config();
    let mut log = open(&storage, &config).unwrap();
    for index in 0..60 {
        log.append(&mut batch(&[(index, value(index as usize))]), 0).unwrap();
    }
    let before = read_all(&log, 1000);
    let segments = log.segment_base_offsets();
    log.close().unwrap();
    storage.crash(broker_core::storage::mem::CrashMode::ForgetUnsynced);
    let mut log = open(&storage, &config).unwrap();
    let report = log.recovery_report().clone();
    assert!(report.clean_shutdown && report.segments_scanned == 0, "{report:?}");
    assert_eq!(read_all(&log, 1000), before);
    assert_eq!(log.segment_base_offsets(), segments);
    assert_eq!(log.durable_offset(), 60);
    log.append(&mut batch(&[(100, b"after".to_vec())]), 0).unwrap();
    assert_eq!(log.log_end_offset(), 61);
    assert_eq!(log.offset_for_timestamp(59).unwrap(), Some(59), "time index survives the reopen");
}

#[test]
fn retention_never_deletes_records_at_or_above_the_limit() {
    let storage = MemStorage::new();
    let config = LogConfig { retention_ms: Some(1000), ..small_config() };
    let mut log = open(&storage, &config).unwrap();
    for index in 0..100i64 {
        log.append(&mut batch(&[(index, value(index as usize))]), 0).unwrap();
    }
    let segments = log.segment_base_offsets();
    assert!(segments.len() >= 3, "{segments:?}");
    // Every record is long expired, but only those below offset `limit` are committed.
    let limit = segments[1] + 1;
    log.apply_retention_below(1_000_000, limit).unwrap().expect("committed old segments go").delete().unwrap();
    assert_eq!(log.log_start_offset(), segments[1], "only segments ending at or below the limit went");
    assert!(log.apply_retention_below(1_000_000, limit).unwrap().is_none());
    // Offset 99 is not committed: everything before the active segment goes, the
    // active segment (which holds 99) is not rolled away.
    log.apply_retention_below(1_000_000, 99).unwrap().expect("closed segments go").delete().unwrap();
    assert_eq!(log.log_start_offset(), *segments.last().unwrap());
    assert_eq!(log.log_end_offset(), 100);
    log.apply_retention_below(1_000_000, 100).unwrap().expect("now all is committed").delete().unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (100, 100));
}

#[test]
fn retention_deletes_whole_old_segments_and_moves_the_log_start() {
    let storage = MemStorage::new();
    let config = LogConfig { retention_ms: Some(1000), ..small_config() };
    let mut log = open(&storage, &config).unwrap();
    for index in 0..100i64 {
        log.append(&mut batch(&[(index * 100, value(index as usize))]), 0).unwrap();
    }
    let segments = log.segment_base_offsets();
    let retired = log.apply_retention(5_000).unwrap().expect("old segments expire");
    retired.delete().unwrap();
    let start = log.log_start_offset();
    assert!(segments.contains(&start) && start > 0 && start <= 40, "start {start}, segments {segments:?}");
    assert!(
        matches!(log.read(0, 100, None), Err(LogError::OffsetOutOfRange { log_start_offset, .. }) if log_start_offset == start)
    );
    assert_eq!(read_all(&log, 1000).first().map(|record| record.offset), Some(start));
    assert!(!storage.exists(&log.dir().join("00000000000000000000.log")), "files are gone");

    let retired = log.apply_retention(1_000_000).unwrap().expect("everything expired");
    retired.delete().unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset(), log.segment_count()), (100, 100, 1));
    log.append(&mut batch(&[(2_000_000, b"fresh".to_vec())]), 0).unwrap();
    assert_eq!(
        records_of(&{
            let mut buffer = Vec::new();
            log.read(100, 100, None).unwrap().read_into(&mut buffer).unwrap();
            buffer
        })[0]
            .value,
        b"fresh"
    );
}

#[test]
fn size_retention_keeps_at_least_the_limit() {
    let storage = MemStorage::new();
    let config = LogConfig { retention_bytes: Some(10_000), ..small_config() };
    let mut log = open(&storage, &config).unwrap();
    for index in 0..200 {
        log.append(&mut batch(&[(index, value(index as usize))]), 0).unwrap();
    }
    let before = log.size_bytes();
    log.apply_retention(0).unwrap().expect("over the limit").delete().unwrap();
    assert!(log.size_bytes() >= 10_000 && log.size_bytes() < 10_000 + 4096, "{before} -> {}", log.size_bytes());
}

#[test]
fn a_follower_appends_the_leaders_batches_byte_for_byte_and_only_at_its_end() {
    let storage = MemStorage::new();
    let mut leader = open(&storage, &small_config()).unwrap();
    leader.append(&mut batch(&[(1, value(1)), (2, value(2))]), 3).unwrap();
    leader.append(&mut batch(&[(3, value(3))]), 5).unwrap();
    let mut copied = Vec::new();
    leader.read(0, 1 << 20, None).unwrap().read_into(&mut copied).unwrap();

    let follower_storage = MemStorage::new();
    let mut follower = open(&follower_storage, &small_config()).unwrap();
    // Not at its end (it is empty): refused, nothing written.
    let (_, second) = abi::batch::BatchView::split_first(&copied).unwrap();
    let mut late = second.to_vec();
    let refused = follower.append_replicated(ValidatedBatches::new(&mut late, &small_config()).unwrap());
    assert!(matches!(refused, Err(LogError::NotContiguous { expected: 0, found: 2 })), "{refused:?}");
    assert_eq!(follower.log_end_offset(), 0);

    let mut bytes = copied.clone();
    let info = follower.append_replicated(ValidatedBatches::new(&mut bytes, &small_config()).unwrap()).unwrap();
    assert_eq!((info.base_offset, info.last_offset, info.batch_count), (0, 2, 2));
    let mut stored = Vec::new();
    follower.read(0, 1 << 20, None).unwrap().read_into(&mut stored).unwrap();
    assert_eq!(stored, copied, "offsets and leader epochs kept as the leader wrote them");
    let epochs: Vec<i32> = {
        let (first, rest) = abi::batch::BatchView::split_first(&stored).unwrap();
        let (second, _) = abi::batch::BatchView::split_first(rest).unwrap();
        vec![first.partition_leader_epoch(), second.partition_leader_epoch()]
    };
    assert_eq!(epochs, [3, 5]);

    // Behind the leader's log start, a follower starts again there.
    assert_eq!(follower.restart_at(40).unwrap(), 40);
    assert_eq!((follower.log_start_offset(), follower.log_end_offset()), (40, 40));
    assert!(follower.leader_epochs().entries().is_empty());
    let mut next = batch(&[(9, value(9))]);
    let info = follower.append(&mut next, 6).unwrap();
    assert_eq!(info.base_offset, 40);
}

#[test]
fn leader_epochs_are_checkpointed_ahead_cut_with_the_log_and_rebuilt_when_missing() {
    let storage = MemStorage::new();
    let mut log = open(&storage, &small_config()).unwrap();
    log.append(&mut batch(&[(1, value(1)), (2, value(2))]), 2).unwrap();
    log.append(&mut batch(&[(3, value(3))]), 2).unwrap();
    log.append(&mut batch(&[(4, value(4))]), 5).unwrap();
    assert_eq!(log.end_offset_for_epoch(4), Some((2, 3)));
    assert_eq!(log.end_offset_for_epoch(5), Some((5, 4)));
    let refused = log.append(&mut batch(&[(5, value(5))]), 3);
    assert!(matches!(refused, Err(LogError::LeaderEpochBackwards { epoch: 3, latest: 5 })), "{refused:?}");
    assert_eq!(log.log_end_offset(), 4, "nothing of a deposed leader's append is written");

    // A crash before the batch of a new epoch reaches the disk: the checkpoint
    // named it ahead, opening cuts it back to the log.
    log.flush().unwrap();
    log.append(&mut batch(&[(6, value(6))]), 7).unwrap();
    storage.crash(CrashMode::ForgetUnsynced);
    let mut log = open(&storage, &small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 4);
    let epochs: Vec<(i32, u64)> = log.leader_epochs().entries().iter().map(|e| (e.epoch, e.start_offset)).collect();
    assert_eq!(epochs, [(2, 0), (5, 3)]);

    // Truncation takes the epochs that began past the cut with it.
    log.truncate_to(3).unwrap();
    assert_eq!(log.end_offset_for_epoch(9), Some((2, 3)));
    log.append(&mut batch(&[(7, value(7))]), 8).unwrap();
    log.close().unwrap();

    // Without its checkpoint (a log from before them), the epochs come back from
    // the batch headers.
    storage.remove_file(std::path::Path::new("/data/topic-0/leader-epoch-checkpoint")).unwrap();
    let log = open(&storage, &small_config()).unwrap();
    let epochs: Vec<(i32, u64)> = log.leader_epochs().entries().iter().map(|e| (e.epoch, e.start_offset)).collect();
    assert_eq!(epochs, [(2, 0), (8, 3)]);
    assert!(storage.exists(std::path::Path::new("/data/topic-0/leader-epoch-checkpoint")), "written back");
}

#[test]
fn truncate_to_cuts_whole_batches_and_appends_continue() {
    let storage = MemStorage::new();
    let mut log = open(&storage, &small_config()).unwrap();
    for index in 0..100 {
        log.append(&mut batch(&[(index, value(index as usize)), (index, b"second".to_vec())]), 0).unwrap();
    }
    assert_eq!(log.truncate_to(151).unwrap(), 150, "the batch holding 151 goes whole");
    assert_eq!(log.log_end_offset(), 150);
    let info = log.append(&mut batch(&[(1, b"new".to_vec())]), 1).unwrap();
    assert_eq!(info.base_offset, 150);
    let records = read_all(&log, 512);
    assert_eq!(records.len(), 151);
    assert_eq!(records.last().unwrap().value, b"new");
    assert_eq!(log.truncate_to(3).unwrap(), 2);
    assert_eq!(read_all(&log, 512).len(), 2);
    assert_eq!(log.segment_count(), 1);
}

#[test]
fn time_based_roll_uses_record_timestamps() {
    let storage = MemStorage::new();
    let config = LogConfig { segment_ms: 1000, ..small_config() };
    let mut log = open(&storage, &config).unwrap();
    log.append(&mut batch(&[(10_000, b"a".to_vec())]), 0).unwrap();
    log.append(&mut batch(&[(10_900, b"b".to_vec())]), 0).unwrap();
    assert_eq!(log.segment_count(), 1);
    log.append(&mut batch(&[(11_001, b"c".to_vec())]), 0).unwrap();
    assert_eq!(log.segment_base_offsets(), vec![0, 2]);
}

#[test]
fn invalid_config_is_rejected_at_open() {
    let config = LogConfig { segment_bytes_max: 1, ..LogConfig::default() };
    assert!(matches!(open(&MemStorage::new(), &config), Err(LogError::Config(_))));
}

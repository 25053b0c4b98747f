//! The storage side of the broker on real files: group commit with concurrent
//! appenders, restart after clean and unclean stops, background retention, and a
//! corrupt partition kept offline while the others serve.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

use std::path::Path;
use std::time::{Duration, Instant};

use abi::batch::{BatchBuilder, RecordBatch};
use broker::{Durability, LogDir, LogDirConfig};
use broker_core::log::{FlushPolicy, LogConfig, LogError};

fn batch(timestamp: i64, values: &[Vec<u8>]) -> Vec<u8> {
    let mut builder = BatchBuilder::new(timestamp);
    for value in values {
        builder.push(timestamp, None, Some(value), &[]);
    }
    builder.encode()
}

fn config(dir: &Path) -> LogDirConfig {
    let mut config = LogDirConfig::new(dir.to_path_buf());
    config.log = LogConfig {
        segment_bytes_max: 64 * 1024,
        batch_bytes_max: 64 * 1024,
        index_interval_bytes: 1024,
        retention_ms: None,
        ..LogConfig::default()
    };
    config
}

fn values_in(dir: &LogDir, name: &str) -> Vec<Vec<u8>> {
    let partition = dir.partition(name).expect("partition is open");
    let (start, end) = partition.with_log(|log| Ok((log.log_start_offset(), log.log_end_offset()))).unwrap();
    let mut values = Vec::new();
    let mut buffer = Vec::new();
    let mut offset = start;
    while offset < end {
        let info = partition.read(offset, 16 * 1024, &mut buffer).unwrap();
        let mut rest = &buffer[..];
        while !rest.is_empty() {
            let (view, tail) = abi::batch::BatchView::split_first(rest).unwrap();
            let decoded = RecordBatch::decode(view.as_bytes()).unwrap();
            values.extend(decoded.records.into_iter().map(|record| record.value.unwrap_or_default()));
            rest = tail;
        }
        offset = info.next_offset;
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appenders_become_durable_and_survive_restarts() {
    let temp = tempfile::tempdir().unwrap();
    let dir = LogDir::open(config(temp.path())).unwrap();
    let partition = dir.create_partition("orders", 0).unwrap();
    let mut appenders = Vec::new();
    for appender in 0..8 {
        let partition = partition.clone();
        appenders.push(tokio::spawn(async move {
            for index in 0..40 {
                let value = format!("appender-{appender}-{index:03}-{}", "p".repeat(500)).into_bytes();
                let info = partition.append(&mut batch(1000, &[value]), 0).unwrap();
                let durable = partition.wait_durable(info.last_offset + 1).await.unwrap();
                assert!(durable > info.last_offset);
            }
        }));
    }
    for appender in appenders {
        appender.await.unwrap();
    }
    assert_eq!(partition.durability(), Durability::Durable(320));
    let before = values_in(&dir, "orders-0");
    assert_eq!(before.len(), 320);

    // Unclean stop: no shutdown, the process just lets go of the files.
    drop(partition);
    drop(dir);
    let dir = LogDir::open(config(temp.path())).unwrap();
    let report = dir.partition("orders-0").unwrap().with_log(|log| Ok(log.recovery_report().clone())).unwrap();
    assert!(!report.clean_shutdown && report.segments_scanned >= 1, "{report:?}");
    assert_eq!(values_in(&dir, "orders-0"), before);

    assert!(dir.shutdown().is_empty());
    let dir = LogDir::open(config(temp.path())).unwrap();
    let report = dir.partition("orders-0").unwrap().with_log(|log| Ok(log.recovery_report().clone())).unwrap();
    assert!(report.clean_shutdown && report.segments_scanned == 0, "{report:?}");
    assert_eq!(values_in(&dir, "orders-0"), before);
}

#[test]
fn background_retention_deletes_expired_segments() {
    let temp = tempfile::tempdir().unwrap();
    let mut config = config(temp.path());
    config.log.retention_ms = Some(60_000);
    config.log.flush_policy = FlushPolicy::Interval;
    config.log.flush_interval_ms = 20;
    config.retention_check_interval_ms = 20;
    let dir = LogDir::open(config).unwrap();
    let partition = dir.create_partition("clicks", 0).unwrap();
    let old = broker::log_dir::now_ms() - 3_600_000;
    for index in 0..200 {
        partition.append(&mut batch(old + index, &[vec![b'o'; 1000]]), 0).unwrap();
    }
    let leftover_logs = || {
        std::fs::read_dir(temp.path().join("clicks-0"))
            .unwrap()
            .filter(|entry| entry.as_ref().unwrap().file_name().to_string_lossy().ends_with(".log"))
            .count()
    };
    // The log start moves under the lock; the retired files go after it, outside.
    let deadline = Instant::now() + Duration::from_secs(20);
    while partition.with_log(|log| Ok(log.log_start_offset())).unwrap() < 200 || leftover_logs() > 1 {
        assert!(Instant::now() < deadline, "retention did not run");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (start, segments) = partition.with_log(|log| Ok((log.log_start_offset(), log.segment_count()))).unwrap();
    assert_eq!((start, segments), (200, 1));
    assert_eq!(leftover_logs(), 1, "only the new active segment's file is left");
    assert!(matches!(partition.read(0, 100, &mut Vec::new()), Err(LogError::OffsetOutOfRange { .. })));
    assert!(matches!(partition.durability(), Durability::Durable(_)));
}

#[test]
fn a_corrupt_partition_stays_offline_while_the_others_serve() {
    let temp = tempfile::tempdir().unwrap();
    let dir = LogDir::open(config(temp.path())).unwrap();
    for topic in ["good", "bad"] {
        let partition = dir.create_partition(topic, 0).unwrap();
        for index in 0..20 {
            partition.append(&mut batch(index, &[vec![b'v'; 200]]), 0).unwrap();
        }
    }
    assert!(dir.shutdown().is_empty());
    let bad_dir = temp.path().join("bad-0");
    std::fs::remove_file(bad_dir.join("clean-shutdown")).unwrap();
    let segment = bad_dir.join("00000000000000000000.log");
    let mut bytes = std::fs::read(&segment).unwrap();
    let batch_bytes = bytes.len() / 20;
    bytes[batch_bytes * 10 + 40] ^= 0x04; // inside the 11th batch's CRC-covered bytes
    std::fs::write(&segment, &bytes).unwrap();

    let dir = LogDir::open(config(temp.path())).unwrap();
    let offline = dir.offline();
    assert_eq!(offline.len(), 1);
    assert_eq!(offline[0].0, "bad-0");
    assert!(offline[0].1.contains("corrupt") && offline[0].1.contains("fenced"), "{}", offline[0].1);
    assert_eq!(std::fs::read(&segment).unwrap(), bytes, "the corrupt segment was not truncated");
    assert_eq!(values_in(&dir, "good-0").len(), 20);
    dir.partition("good-0").unwrap().append(&mut batch(1, &[b"more".to_vec()]), 0).unwrap();
}

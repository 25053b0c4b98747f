//! Shared helpers for the log's integration tests: batch building, reading a whole
//! log back as records, and small configs that make rolls and index entries common.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use abi::batch::{BatchBuilder, RecordBatch};
use broker_core::log::{Log, LogConfig, LogError};
use broker_core::storage::mem::MemStorage;

/// One record as the tests see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub offset: u64,
    pub timestamp: i64,
    pub value: Vec<u8>,
}

/// An encoded batch of `(timestamp, value)` records.
pub fn batch(records: &[(i64, Vec<u8>)]) -> Vec<u8> {
    let base_timestamp = records.first().map_or(0, |(timestamp, _)| *timestamp);
    let mut builder = BatchBuilder::new(base_timestamp);
    for (timestamp, value) in records {
        builder.push(*timestamp, None, Some(value), &[]);
    }
    builder.encode()
}

/// A config with tiny segments and dense indexes.
pub fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 4096,
        index_interval_bytes: 256,
        index_bytes_max: 1024,
        batch_bytes_max: 4096,
        retention_ms: None,
        ..LogConfig::default()
    }
}

pub fn open(storage: &MemStorage, config: &LogConfig) -> Result<Log, LogError> {
    Log::open(Arc::new(storage.clone()), PathBuf::from("/data/topic-0"), config.clone())
}

/// Decodes the records of concatenated batches.
pub fn records_of(bytes: &[u8]) -> Vec<Stored> {
    let mut records = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let (view, tail) = abi::batch::BatchView::split_first(rest).expect("whole batches");
        let batch = RecordBatch::decode(view.as_bytes()).expect("valid batch");
        for record in &batch.records {
            records.push(Stored {
                offset: batch.base_offset as u64 + record.offset_delta as u64,
                timestamp: batch.base_timestamp + record.timestamp_delta,
                value: record.value.clone().unwrap_or_default(),
            });
        }
        rest = tail;
    }
    records
}

/// Every record from the log start to the log end, read in chunks of `max_bytes`.
pub fn read_all(log: &Log, max_bytes: usize) -> Vec<Stored> {
    let mut records = Vec::new();
    let mut offset = log.log_start_offset();
    let mut buffer = Vec::new();
    while offset < log.log_end_offset() {
        let info = log.read(offset, max_bytes, None).expect("plan").read_into(&mut buffer).expect("read");
        assert!(info.batch_count > 0, "no progress at offset {offset}");
        records.extend(records_of(&buffer).into_iter().filter(|record| record.offset >= offset));
        offset = info.next_offset;
    }
    records
}

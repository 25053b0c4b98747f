//! Crash consistency of the partition log: a power cut at every storage operation
//! of a workload, then recovery.
//!
//! The workload appends, runs group-commit flush rounds with appends arriving in
//! the middle of a round, rolls segments, truncates and applies size retention.
//! For each seed it first counts the workload's mutating storage operations, then
//! reruns it with a power cut armed at each point (`MemStorage::fail_after`),
//! simulates the reboot (unsynced bytes and directory entries vanish; or a random
//! torn prefix of unsynced bytes survives; or such a prefix followed by garbage up
//! to the file's full length: random bytes, zeros, stale bytes of an older
//! segment), sometimes cuts power again
//! in the middle of recovery, and reopens. It checks:
//!
//! - recovery succeeds (a crash that leaves a prefix of the unsynced bytes, or
//!   garbage after it, only tears tails; it never looks like corruption);
//! - every record below the last durable offset acknowledged by a flush round is
//!   present, at its offset, with its bytes;
//! - whatever else survived is exactly what was appended (a prefix of the history),
//!   offsets are dense, and the log accepts appends again.
//!
//! A failure names its seed and crash point. `WEIR_CRASH_SEEDS=n` runs more seeds;
//! `WEIR_CRASH_FIRST_SEED=s WEIR_CRASH_SEEDS=1` replays one.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

mod support;

use std::collections::BTreeMap;

use broker_core::log::{Log, LogConfig};
use broker_core::storage::mem::{CrashMode, MemStorage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{batch, open, read_all};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 2048,
        batch_bytes_max: 2048,
        index_interval_bytes: 128,
        index_bytes_max: 1024,
        retention_ms: None,
        retention_bytes: Some(6000),
        ..LogConfig::default()
    }
}

/// What the workload learned before the power cut.
#[derive(Default)]
struct History {
    /// Every record ever appended, by offset (truncation removes entries).
    appended: BTreeMap<u64, Vec<u8>>,
    /// Base offset of the batch holding each offset.
    batch_base: BTreeMap<u64, u64>,
    /// The highest durable offset a completed flush round acknowledged.
    acknowledged_durable: u64,
}

/// Runs the workload until it ends or the storage dies. Returns the history.
fn workload(storage: &MemStorage, seed: u64) -> History {
    let mut history = History::default();
    let _ = run(storage, seed, &mut history);
    history
}

fn run(storage: &MemStorage, seed: u64, history: &mut History) -> Result<(), broker_core::log::LogError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut log = open(storage, &config())?;
    let trace = std::env::var("WEIR_CRASH_TRACE").is_ok();
    for step in 0..40u64 {
        if trace {
            eprintln!(
                "step {step}: ops {} end {} durable {} segments {:?}",
                storage.op_count(),
                log.log_end_offset(),
                log.durable_offset(),
                log.segment_base_offsets()
            );
        }
        match rng.gen_range(0..10) {
            0..=5 => append(&mut log, &mut rng, history, step)?,
            6 | 7 => group_commit_round(&mut log, &mut rng, history, step)?,
            8 => log.roll()?,
            _ if rng.gen_bool(0.3) => {
                let offset = rng.gen_range(log.log_start_offset()..=log.log_end_offset());
                // Asking for the truncation gives up the records from the batch holding
                // `offset` on, even if the truncation is cut short by the power cut.
                let batch_base = history.batch_base.get(&offset).copied().unwrap_or(offset);
                history.acknowledged_durable = history.acknowledged_durable.min(batch_base);
                let end = log.truncate_to(offset)?;
                assert_eq!(end, batch_base, "truncation ends at the batch boundary");
                history.appended.retain(|&o, _| o < end);
                history.batch_base.retain(|&o, _| o < end);
                history.acknowledged_durable = history.acknowledged_durable.min(end);
            }
            _ => {
                if let Some(retired) = log.apply_retention(0)? {
                    retired.delete()?;
                }
            }
        }
    }
    Ok(())
}

fn append(log: &mut Log, rng: &mut StdRng, history: &mut History, step: u64) -> Result<(), broker_core::log::LogError> {
    let count = rng.gen_range(1..4);
    let records: Vec<(i64, Vec<u8>)> = (0..count)
        .map(|i| (step as i64, format!("s{step}-r{i}-{}", "z".repeat(rng.gen_range(0..300))).into_bytes()))
        .collect();
    let info = log.append(&mut batch(&records), 0)?;
    for (offset, (_, value)) in (info.base_offset..).zip(records) {
        history.appended.insert(offset, value);
        history.batch_base.insert(offset, info.base_offset);
    }
    Ok(())
}

/// A flush round with appends arriving between its start and its completion.
fn group_commit_round(
    log: &mut Log,
    rng: &mut StdRng,
    history: &mut History,
    step: u64,
) -> Result<(), broker_core::log::LogError> {
    let Some(ticket) = log.begin_flush() else { return Ok(()) };
    for _ in 0..rng.gen_range(0..3) {
        append(log, rng, history, step)?;
    }
    let result = ticket.execute();
    history.acknowledged_durable = log.complete_flush(ticket, result)?;
    Ok(())
}

fn check_recovered(storage: &MemStorage, history: &History, context: &str) {
    let mut log = open(storage, &config()).unwrap_or_else(|error| panic!("{context}: recovery failed: {error}"));
    let end = log.log_end_offset();
    assert!(
        end >= history.acknowledged_durable,
        "{context}: end {end} below acknowledged {}",
        history.acknowledged_durable
    );
    let records = read_all(&log, 1500);
    let start = log.log_start_offset();
    let offsets: Vec<u64> = records.iter().map(|record| record.offset).collect();
    assert_eq!(offsets, (start..end).collect::<Vec<_>>(), "{context}: offsets not dense");
    for record in &records {
        let appended = history.appended.get(&record.offset);
        assert_eq!(appended, Some(&record.value), "{context}: offset {} differs from history", record.offset);
    }
    let info = log.append(&mut batch(&[(0, b"after".to_vec())]), 0).expect("append after recovery");
    assert_eq!(info.base_offset, end, "{context}");
}

fn seed_count() -> u64 {
    std::env::var("WEIR_CRASH_SEEDS").ok().and_then(|value| value.parse().ok()).unwrap_or(8)
}

#[test]
fn power_cut_at_every_storage_operation_loses_nothing_acknowledged() {
    let mut crash_points = 0;
    let first_seed = std::env::var("WEIR_CRASH_FIRST_SEED").ok().and_then(|value| value.parse().ok()).unwrap_or(0);
    for seed in first_seed..first_seed + seed_count() {
        let reference = MemStorage::new();
        workload(&reference, seed);
        let total_ops = reference.op_count();
        for crash_point in 0..total_ops {
            let storage = MemStorage::new();
            storage.fail_after(crash_point);
            let history = workload(&storage, seed);
            let mode_seed = seed * 1_000_003 + crash_point;
            let mode = match crash_point % 3 {
                0 => CrashMode::ForgetUnsynced,
                1 => CrashMode::TornTail { seed: mode_seed },
                _ => CrashMode::GarbageTail { seed: mode_seed },
            };
            storage.crash(mode);
            if crash_point % 7 == 3 {
                // A second power cut in the middle of recovery.
                storage.fail_after(crash_point % 13);
                let _ = open(&storage, &config());
                storage.crash(CrashMode::TornTail { seed: crash_point });
            }
            check_recovered(&storage, &history, &format!("seed {seed}, crash point {crash_point}/{total_ops}"));
            crash_points += 1;
        }
    }
    assert!(crash_points >= 500, "only {crash_points} crash points exercised");
    eprintln!("{crash_points} crash points exercised");
}

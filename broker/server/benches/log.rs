//! Throughput of the partition log next to the machine's own limits, measured in
//! the same run (`cargo bench -p broker --bench log`).
//!
//! Machine limits (raw std::fs on the same disk, same sizes):
//! - `machine/buffered_write/{16KiB,256KiB,1MiB}`: 64 MiB of writes that size, no sync;
//! - `machine/pwrite_batch/{..}`: the same with the exact batch bytes the log appends
//!   (a few hundred bytes over the round size, so page-unaligned), without the log;
//! - `machine/fdatasync_per_256KiB`: 256 KiB write + fdatasync, repeated;
//! - `machine/memcpy_64MiB_by_1MiB`: 64 MiB of memory copied 1 MiB at a time into
//!   one reused buffer (a cached read's access pattern).
//!
//! Weir (1 KiB records):
//! - `append/no_fsync/{16KiB,256KiB,1MiB}`: `Log::append` of batches that size,
//!   64 MiB per iteration, nothing synced (compare: buffered writes of the same
//!   size, and the best of them; target >= 70%);
//! - `group_commit/8_appenders/{16KiB,32KiB,128KiB}`: `flush.policy=always`, eight
//!   concurrent appenders each waiting for durability before the next append
//!   (compare: one fdatasync per 256 KiB, target >= 60%); one case repeats 32 KiB
//!   with the group-commit linger off, to show what it buys;
//! - `read/cached_1MiB`: sequential `read` of 64 MiB of cached log in 1 MiB fetches
//!   into a reused buffer (compare: memcpy, target >= 50%).
//!
//! After Criterion's own report, a summary table prints each median in MB/s and the
//! ratios. Data goes to Cargo's target tmp dir (the project's disk, not tmpfs).

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use abi::batch::BatchBuilder;
use broker::{FileStorage, LogDir, LogDirConfig};
use broker_core::log::{FlushPolicy, Log, LogConfig};
use criterion::{BenchmarkId, Criterion, Throughput};

const MIB: usize = 1024 * 1024;
const RECORD_BYTES: usize = 1024;
/// Batch (and raw write) sizes compared.
const SIZES: [(&str, usize); 3] = [("16KiB", 16 * 1024), ("256KiB", 256 * 1024), ("1MiB", MIB)];

/// Every timed call, by benchmark name: (bytes processed, time taken).
static SAMPLES: Mutex<Vec<(String, u64, Duration)>> = Mutex::new(Vec::new());
static DIR_COUNTER: AtomicU64 = AtomicU64::new(0);
/// Group commit: (benchmark, appends, fdatasync rounds).
static ROUNDS: Mutex<Vec<(String, u64, u64)>> = Mutex::new(Vec::new());

fn record(name: &str, bytes: u64, elapsed: Duration) -> Duration {
    SAMPLES.lock().expect("samples lock").push((name.to_owned(), bytes, elapsed));
    elapsed
}

fn fresh_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("weir-bench").join(format!(
        "{}-{}",
        std::process::id(),
        DIR_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    fs::create_dir_all(&dir).expect("bench dir");
    dir
}

/// One batch of `batch_bytes` worth of 1 KiB records.
fn batch(batch_bytes: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new(1_700_000_000_000);
    let value = vec![b'r'; RECORD_BYTES - 16];
    for _ in 0..batch_bytes / RECORD_BYTES {
        builder.push(1_700_000_000_000, None, Some(&value), &[]);
    }
    builder.encode()
}

fn machine(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("machine");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));
    let total = 64 * MIB;
    group.throughput(Throughput::Bytes(total as u64));
    for (label, chunk_bytes) in SIZES {
        let chunk = vec![7u8; chunk_bytes];
        let name = format!("machine/buffered_write/{label}");
        group.bench_function(BenchmarkId::new("buffered_write", label), |bencher| {
            bencher.iter_custom(|iterations| {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iterations {
                    let dir = fresh_dir();
                    let mut file = fs::File::create(dir.join("f")).expect("create");
                    let start = Instant::now();
                    for _ in 0..total / chunk.len() {
                        file.write_all(&chunk).expect("write");
                    }
                    elapsed += record(&name, total as u64, start.elapsed());
                    drop(file);
                    fs::remove_dir_all(&dir).expect("cleanup");
                }
                elapsed
            })
        });
    }
    for (label, batch_bytes) in SIZES {
        let bytes = batch(batch_bytes);
        let name = format!("machine/pwrite_batch/{label}");
        group.bench_function(BenchmarkId::new("pwrite_batch", label), |bencher| {
            bencher.iter_custom(|iterations| {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iterations {
                    let dir = fresh_dir();
                    let file = broker_core::storage::Storage::open(&FileStorage, &dir.join("f"), true).expect("open");
                    let start = Instant::now();
                    let mut position = 0;
                    while position < total {
                        file.write_at(&bytes, position as u64).expect("write");
                        position += bytes.len();
                    }
                    elapsed += record(&name, position as u64, start.elapsed());
                    drop(file);
                    fs::remove_dir_all(&dir).expect("cleanup");
                }
                elapsed
            })
        });
    }
    let chunk = vec![7u8; 256 * 1024];
    let synced_total = 4 * MIB;
    group.throughput(Throughput::Bytes(synced_total as u64));
    group.bench_function("fdatasync_per_256KiB", |bencher| {
        bencher.iter_custom(|iterations| {
            let dir = fresh_dir();
            let file = OpenOptions::new().create(true).truncate(true).write(true).open(dir.join("f")).expect("create");
            let mut position = 0u64;
            let start = Instant::now();
            for _ in 0..iterations {
                let started = Instant::now();
                for _ in 0..synced_total / chunk.len() {
                    file.write_all_at(&chunk, position).expect("write");
                    file.sync_data().expect("sync");
                    position += chunk.len() as u64;
                }
                record("machine/fdatasync_per_256KiB", synced_total as u64, started.elapsed());
            }
            let elapsed = start.elapsed();
            fs::remove_dir_all(&dir).expect("cleanup");
            elapsed
        })
    });
    // The same access pattern as a cached read: 64 MiB of memory (far beyond the CPU
    // caches) copied 1 MiB at a time into one reused buffer.
    let source = vec![3u8; total];
    let mut target = vec![0u8; MIB];
    group.throughput(Throughput::Bytes(total as u64));
    group.bench_function("memcpy_64MiB_by_1MiB", |bencher| {
        bencher.iter_custom(|iterations| {
            let start = Instant::now();
            for _ in 0..iterations {
                let started = Instant::now();
                for chunk in std::hint::black_box(&source).chunks(MIB) {
                    target.copy_from_slice(chunk);
                    std::hint::black_box(&mut target);
                }
                record("machine/memcpy_64MiB_by_1MiB", total as u64, started.elapsed());
            }
            start.elapsed()
        })
    });
    group.finish();
}

fn log_config(flush_policy: FlushPolicy) -> LogConfig {
    LogConfig { flush_policy, retention_ms: None, batch_bytes_max: 2 * MIB as u32, ..LogConfig::default() }
}

fn append(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("append");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(6));
    let total = 64 * MIB;
    for (label, batch_bytes) in SIZES {
        let mut bytes = batch(batch_bytes);
        let name = format!("append/no_fsync/{label}");
        group.throughput(Throughput::Bytes(total as u64));
        group.bench_function(BenchmarkId::new("no_fsync", label), |bencher| {
            bencher.iter_custom(|iterations| {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iterations {
                    let dir = fresh_dir();
                    let mut log = Log::open(Arc::new(FileStorage), dir.join("t-0"), log_config(FlushPolicy::Interval))
                        .expect("open");
                    let start = Instant::now();
                    let mut written = 0;
                    while written < total {
                        log.append(&mut bytes, 0).expect("append");
                        written += bytes.len();
                    }
                    elapsed += record(&name, written as u64, start.elapsed());
                    drop(log);
                    fs::remove_dir_all(&dir).expect("cleanup");
                }
                elapsed
            })
        });
    }
    group.finish();
}

fn group_commit(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("group_commit");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(8));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let appenders = 8;
    let total = 8 * MIB;
    let cases = [
        ("8_appenders", "16KiB", 16 * 1024, None),
        ("8_appenders", "32KiB", 32 * 1024, None),
        ("8_appenders", "128KiB", 128 * 1024, None),
        ("8_appenders_no_linger", "32KiB", 32 * 1024, Some(0)),
    ];
    for (variant, label, batch_bytes, linger_us) in cases {
        let template = batch(batch_bytes);
        let name = format!("group_commit/{variant}/{label}");
        group.throughput(Throughput::Bytes(total as u64));
        group.bench_function(BenchmarkId::new(variant, label), |bencher| {
            bencher.iter_custom(|iterations| {
                let dir = fresh_dir();
                let mut config = LogDirConfig::new(dir.clone());
                config.log = log_config(FlushPolicy::Always);
                if let Some(linger_us) = linger_us {
                    config.group_commit_linger_us = linger_us;
                }
                let log_dir = LogDir::open(config).expect("open");
                let partition = log_dir.create_partition("t", 0).expect("partition");
                let mut elapsed = Duration::ZERO;
                let rounds_before = partition.flush_round_count();
                let mut appends = 0;
                for _ in 0..iterations {
                    let per_appender = total / appenders / template.len();
                    appends += per_appender * appenders;
                    let start = Instant::now();
                    runtime.block_on(async {
                        let tasks: Vec<_> = (0..appenders)
                            .map(|_| {
                                let partition = partition.clone();
                                let mut bytes = template.clone();
                                tokio::spawn(async move {
                                    for _ in 0..per_appender {
                                        let info = partition.append(&mut bytes, 0).expect("append");
                                        partition.wait_durable(info.last_offset + 1).await.expect("durable");
                                    }
                                })
                            })
                            .collect();
                        for task in tasks {
                            task.await.expect("appender");
                        }
                    });
                    let bytes = (per_appender * appenders * template.len()) as u64;
                    elapsed += record(&name, bytes, start.elapsed());
                }
                let rounds = partition.flush_round_count() - rounds_before;
                ROUNDS.lock().expect("rounds lock").push((name.clone(), appends as u64, rounds));
                drop(partition);
                let _ = log_dir.shutdown();
                fs::remove_dir_all(&dir).expect("cleanup");
                elapsed
            })
        });
    }
    group.finish();
}

fn read(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("read");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(6));
    let total = 64 * MIB;
    let dir = fresh_dir();
    let mut log = Log::open(Arc::new(FileStorage), dir.join("t-0"), log_config(FlushPolicy::Interval)).expect("open");
    let mut bytes = batch(64 * 1024);
    while (log.size_bytes() as usize) < total {
        log.append(&mut bytes, 0).expect("append");
    }
    let mut buffer = Vec::new();
    group.throughput(Throughput::Bytes(log.size_bytes()));
    group.bench_function("cached_1MiB", |bencher| {
        bencher.iter_custom(|iterations| {
            let start = Instant::now();
            for _ in 0..iterations {
                let started = Instant::now();
                let mut offset = 0;
                let mut read_bytes = 0u64;
                while offset < log.log_end_offset() {
                    let info = log.read(offset, MIB, None).expect("plan").read_into(&mut buffer).expect("read");
                    read_bytes += buffer.len() as u64;
                    offset = info.next_offset;
                }
                record("read/cached_1MiB", read_bytes, started.elapsed());
            }
            start.elapsed()
        })
    });
    group.finish();
    drop(log);
    fs::remove_dir_all(&dir).expect("cleanup");
}

/// Median MB/s of every benchmark that ran, and the ratios the issue asks for.
fn print_summary() {
    let samples = SAMPLES.lock().expect("samples lock");
    let median_mb_per_s = |name: &str| -> Option<f64> {
        let mut rates: Vec<f64> = samples
            .iter()
            .filter(|(sample, _, elapsed)| sample == name && !elapsed.is_zero())
            .map(|(_, bytes, elapsed)| *bytes as f64 / elapsed.as_secs_f64() / 1e6)
            .collect();
        rates.sort_by(f64::total_cmp);
        rates.get(rates.len() / 2).copied()
    };
    println!("\nWeir log benchmark summary (median MB/s of this run)");
    println!("{:<38} {:>10}   ratio to the machine limit", "benchmark", "MB/s");
    let rows = [
        ("machine/buffered_write/16KiB", None),
        ("machine/buffered_write/256KiB", None),
        ("machine/buffered_write/1MiB", None),
        ("machine/pwrite_batch/16KiB", None),
        ("machine/pwrite_batch/256KiB", None),
        ("machine/pwrite_batch/1MiB", None),
        ("machine/fdatasync_per_256KiB", None),
        ("machine/memcpy_64MiB_by_1MiB", None),
        ("append/no_fsync/16KiB", Some("machine/buffered_write/16KiB")),
        ("append/no_fsync/256KiB", Some("machine/buffered_write/256KiB")),
        ("append/no_fsync/1MiB", Some("machine/buffered_write/1MiB")),
        ("group_commit/8_appenders/16KiB", Some("machine/fdatasync_per_256KiB")),
        ("group_commit/8_appenders/32KiB", Some("machine/fdatasync_per_256KiB")),
        ("group_commit/8_appenders/128KiB", Some("machine/fdatasync_per_256KiB")),
        ("group_commit/8_appenders_no_linger/32KiB", Some("machine/fdatasync_per_256KiB")),
        ("read/cached_1MiB", Some("machine/memcpy_64MiB_by_1MiB")),
    ];
    let best_write = ["16KiB", "256KiB", "1MiB"]
        .iter()
        .filter_map(|label| median_mb_per_s(&format!("machine/buffered_write/{label}")))
        .fold(0.0, f64::max);
    for (name, baseline) in rows {
        let Some(rate) = median_mb_per_s(name) else { continue };
        let ratio = baseline
            .and_then(|baseline| Some((baseline, median_mb_per_s(baseline)?)))
            .map(|(baseline, base)| {
                format!("{:.0}% of {}", 100.0 * rate / base, baseline.trim_start_matches("machine/"))
            })
            .unwrap_or_default();
        println!("{name:<38} {rate:>10.1}   {ratio}");
    }
    for label in ["16KiB", "256KiB", "1MiB"] {
        if let Some(rate) = median_mb_per_s(&format!("append/no_fsync/{label}")).filter(|_| best_write > 0.0) {
            println!(
                "append/no_fsync/{label}: {:.0}% of the best buffered write ({best_write:.1} MB/s)",
                100.0 * rate / best_write
            );
        }
    }
    let mut rounds_by_name: std::collections::BTreeMap<String, (u64, u64)> = std::collections::BTreeMap::new();
    for (name, appends, round_count) in ROUNDS.lock().expect("rounds lock").iter() {
        let entry = rounds_by_name.entry(name.clone()).or_default();
        entry.0 += appends;
        entry.1 += round_count;
    }
    for (name, (appends, round_count)) in rounds_by_name.into_iter().filter(|(_, (_, count))| *count > 0) {
        println!("{name}: {:.1} appends per fdatasync round", appends as f64 / round_count as f64);
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    machine(&mut criterion);
    append(&mut criterion);
    group_commit(&mut criterion);
    read(&mut criterion);
    criterion.final_summary();
    print_summary();
    let _ = fs::remove_dir_all(Path::new(env!("CARGO_TARGET_TMPDIR")).join("weir-bench"));
}

//! `weir bench produce|consume`: throughput and latency of a broker, printed next
//! to the single-stream loopback TCP bandwidth measured in the same run (the
//! machine's ceiling for one client connection), so results are ratios, not
//! numbers that drift with the machine.
//!
//! produce: creates the topic if needed (`flush.policy` follows the durability:
//! `always` = fsync before ack, `interval` = page cache), sends `--records`
//! records of `--record-bytes` through the real client producer, and records
//! each record's send→ack latency in an HDR histogram (µs).
//! consume: reads every partition from the beginning up to the high watermark
//! seen at the start (catch-up read) through the real client consumer.
//! A progress line on stderr updates twice a second.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use client::{
    Acks, Admin, ClientError, Consumer, ConsumerConfig, ErrorCode, NewTopic, Offset, Producer, ProducerConfig,
};
use hdrhistogram::Histogram;
use serde_json::json;

use crate::{ClientArgs, Format};

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Produce records as fast as the broker acknowledges them.
    Produce(ProduceBench),
    /// Read a topic's history from the beginning (catch-up read).
    Consume(ConsumeBench),
}

/// When the broker acknowledges (and so what the figures mean).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Durability {
    /// Acknowledged once in the page cache (`flush.policy=interval`, Kafka's default).
    PageCache,
    /// Acknowledged once fdatasync'ed (`flush.policy=always`, group commit).
    Fsync,
}

/// `--compression` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Codec {
    None,
    Lz4,
    Zstd,
}

#[derive(Debug, clap::Args)]
pub struct ProduceBench {
    /// Topic to write (created if missing).
    #[arg(long, default_value = "weir-bench")]
    topic: String,
    /// Partitions when the topic is created.
    #[arg(long, default_value_t = 1)]
    partitions: i32,
    /// Records to send.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Value size of each record.
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
    /// 0, 1 or all.
    #[arg(long, default_value = "1", value_parser = parse_acks)]
    acks: Acks,
    /// Durability to measure: the flush.policy of the topic it creates (an existing
    /// topic must already have it) [default: page-cache for acks 0/1, fsync for all].
    #[arg(long, value_enum)]
    durability: Option<Durability>,
    /// Producer batch size in bytes (`batch.size`).
    #[arg(long, default_value_t = 1024 * 1024)]
    batch_bytes: usize,
    /// Send at most this many records per second (0: as fast as acknowledged).
    /// Latency percentiles mean most at a fixed rate below the maximum.
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Producer linger in milliseconds (`linger.ms`).
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    /// Codec of the producer's batches (`compression.type`). With a codec, values
    /// are pseudo-random lowercase text (about 1.7:1 compressible) instead of one
    /// repeated byte, so the codec has real work to do.
    #[arg(long, value_enum, default_value_t = Codec::None)]
    compression: Codec,
    /// Bytes for the loopback TCP measurement (0 skips it).
    #[arg(long, default_value_t = 1 << 30)]
    loopback_bytes: u64,
    #[command(flatten)]
    client: ClientArgs,
}

#[derive(Debug, clap::Args)]
pub struct ConsumeBench {
    /// Topic to read from the beginning.
    #[arg(long, default_value = "weir-bench")]
    topic: String,
    /// Bytes for the loopback TCP measurement (0 skips it).
    #[arg(long, default_value_t = 1 << 30)]
    loopback_bytes: u64,
    #[command(flatten)]
    client: ClientArgs,
}

fn parse_acks(value: &str) -> Result<Acks, String> {
    Acks::parse(value).ok_or_else(|| format!("expected 0, 1 or all, got {value:?}"))
}

pub async fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Produce(bench) => produce(bench).await,
        BenchCommand::Consume(bench) => consume(bench).await,
    }
}

const MB: f64 = 1_000_000.0;

/// Single-stream loopback TCP bandwidth in bytes/s: one thread writes 1 MiB
/// chunks, another reads them, over 127.0.0.1.
fn loopback_bytes_per_second(total_bytes: u64) -> anyhow::Result<Option<f64>> {
    if total_bytes == 0 {
        return Ok(None);
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("loopback listener")?;
    let address = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut stream, _) = listener.accept()?;
        let mut buffer = vec![0u8; 1 << 20];
        let mut received = 0u64;
        loop {
            match stream.read(&mut buffer)? {
                0 => return Ok(received),
                read => received += read as u64,
            }
        }
    });
    let chunk = vec![0x5au8; 1 << 20];
    let started = Instant::now();
    let mut stream = std::net::TcpStream::connect(address).context("loopback connect")?;
    let mut sent = 0u64;
    while sent < total_bytes {
        stream.write_all(&chunk)?;
        sent += chunk.len() as u64;
    }
    drop(stream);
    let received = reader.join().map_err(|_| anyhow::anyhow!("loopback reader panicked"))??;
    Ok(Some(received as f64 / started.elapsed().as_secs_f64()))
}

/// Prints a progress line on stderr twice a second until dropped.
struct Progress {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn start(label: &'static str, records: Arc<AtomicU64>, bytes: Arc<AtomicU64>, total_records: u64) -> Progress {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread_stop = stop.clone();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            while !thread_stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(500));
                let (done, done_bytes) = (records.load(Ordering::Relaxed), bytes.load(Ordering::Relaxed));
                let seconds = started.elapsed().as_secs_f64();
                eprint!(
                    "\r{label}: {done}/{total_records} records ({:.0}%), {:.1} MB/s   ",
                    done as f64 * 100.0 / total_records.max(1) as f64,
                    done_bytes as f64 / MB / seconds
                );
            }
            eprintln!();
        });
        Progress { stop, thread: Some(thread) }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn ensure_topic(admin: &Admin, bench: &ProduceBench, durability: Durability) -> anyhow::Result<()> {
    let flush_policy = match durability {
        Durability::PageCache => "interval",
        Durability::Fsync => "always",
    };
    let topic = NewTopic::new(bench.topic.clone(), bench.partitions).config("flush.policy", flush_policy);
    match admin.create_topic(topic).await {
        Ok(()) => Ok(()),
        Err(ClientError::Broker { code: ErrorCode::TopicAlreadyExists, .. }) => {
            // Never change an existing topic behind its owner's back.
            let description = admin.describe_topic(&bench.topic).await?;
            let current =
                description.configs.iter().find(|(key, _)| key == "flush.policy").map(|(_, value)| value.as_str());
            anyhow::ensure!(
                current == Some(flush_policy),
                "topic {} exists with flush.policy={}, but this run measures flush.policy={flush_policy}; \
                 pass another --topic (or --durability to match)",
                bench.topic,
                current.unwrap_or("?")
            );
            Ok(())
        }
        Err(error) => Err(error.into()),
    }
}

async fn produce(bench: ProduceBench) -> anyhow::Result<()> {
    let durability = bench.durability.unwrap_or(match bench.acks {
        Acks::All => Durability::Fsync,
        _ => Durability::PageCache,
    });
    let loopback = loopback_bytes_per_second(bench.loopback_bytes)?;
    let admin = Admin::new(bench.client.common())?;
    ensure_topic(&admin, &bench, durability).await?;
    let config = ProducerConfig {
        common: bench.client.common(),
        acks: bench.acks,
        batch_bytes_max: bench.batch_bytes,
        linger: Duration::from_millis(bench.linger_ms),
        compression: match bench.compression {
            Codec::None => client::Compression::None,
            Codec::Lz4 => client::Compression::Lz4,
            Codec::Zstd => client::Compression::Zstd,
        },
        ..ProducerConfig::default()
    };
    let producer = Producer::new(config)?;
    let (acked_records, acked_bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let progress = Progress::start("produce", acked_records.clone(), acked_bytes.clone(), bench.records);
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<(Instant, client::DeliveryFuture)>(65_536);
    let record_bytes = bench.record_bytes as u64;
    let (collector_records, collector_bytes) = (acked_records.clone(), acked_bytes.clone());
    let collector = tokio::spawn(async move {
        let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds");
        while let Some((sent, delivery)) = receiver.recv().await {
            delivery.await?;
            latencies.saturating_record(sent.elapsed().as_micros() as u64);
            collector_records.fetch_add(1, Ordering::Relaxed);
            collector_bytes.fetch_add(record_bytes, Ordering::Relaxed);
        }
        Ok::<_, ClientError>(latencies)
    });
    let value = match bench.compression {
        Codec::None => vec![0x61u8; bench.record_bytes],
        _ => {
            // Lowercase letters from a small LCG: compressible, not trivially so.
            let mut state = 0x2545_f491_4f6c_dd1du64;
            (0..bench.record_bytes)
                .map(|_| {
                    state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    b'a' + ((state >> 33) % 26) as u8
                })
                .collect()
        }
    };
    let started = Instant::now();
    for sent in 0..bench.records {
        if bench.rate > 0 && sent % 100 == 0 {
            let due = Duration::from_secs_f64(sent as f64 / bench.rate as f64);
            if let Some(ahead) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(ahead).await;
            }
        }
        let record =
            client::ProducerRecord { topic: bench.topic.clone(), value: Some(value.clone()), ..Default::default() };
        let delivery = producer.send(record).await?;
        if sender.send((Instant::now(), delivery)).await.is_err() {
            break;
        }
    }
    drop(sender);
    producer.flush().await;
    let latencies = collector.await.context("collector task")??;
    let elapsed = started.elapsed().as_secs_f64();
    drop(progress);
    let bytes_per_second = (bench.records * record_bytes) as f64 / elapsed;
    let percentile = |quantile: f64| latencies.value_at_quantile(quantile) as f64 / 1000.0;
    let ratio = loopback.map(|loopback| bytes_per_second / loopback);
    let acks = match bench.acks {
        Acks::None => "0",
        Acks::Leader => "1",
        Acks::All => "all",
    };
    let durability_name = match durability {
        Durability::PageCache => "page-cache",
        Durability::Fsync => "fsync",
    };
    let codec_name = match bench.compression {
        Codec::None => "none",
        Codec::Lz4 => "lz4",
        Codec::Zstd => "zstd",
    };
    let report = json!({
        "workload": "produce",
        "topic": bench.topic,
        "records": bench.records,
        "record_bytes": bench.record_bytes,
        "acks": acks,
        "durability": durability_name,
        "compression": codec_name,
        "rate_limit": bench.rate,
        "seconds": elapsed,
        "records_per_second": bench.records as f64 / elapsed,
        "mb_per_second": bytes_per_second / MB,
        "latency_ms": {"p50": percentile(0.5), "p99": percentile(0.99), "p999": percentile(0.999), "max": latencies.max() as f64 / 1000.0},
        "loopback_mb_per_second": loopback.map(|value| value / MB),
        "ratio_to_loopback": ratio,
        "cpu_seconds": process_cpu_seconds(),
    });
    match bench.client.format {
        Format::Json => println!("{report}"),
        Format::Text => {
            let rate = match bench.rate {
                0 => "max rate".to_owned(),
                rate => format!("rate limit {rate}/s"),
            };
            println!(
                "produce {} x {} B, acks={acks}, durability={durability_name}, compression={codec_name}, {rate}: {:.1} MB/s, {:.0} records/s in {:.2} s",
                bench.records,
                bench.record_bytes,
                bytes_per_second / MB,
                bench.records as f64 / elapsed,
                elapsed
            );
            println!(
                "latency send->ack: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms",
                percentile(0.5),
                percentile(0.99),
                percentile(0.999),
                latencies.max() as f64 / 1000.0
            );
            if let (Some(loopback), Some(ratio)) = (loopback, ratio) {
                println!(
                    "loopback TCP, one stream: {:.1} MB/s; produce / loopback = {:.1}%",
                    loopback / MB,
                    ratio * 100.0
                );
            }
        }
    }
    Ok(())
}

async fn consume(bench: ConsumeBench) -> anyhow::Result<()> {
    let loopback = loopback_bytes_per_second(bench.loopback_bytes)?;
    let admin = Admin::new(bench.client.common())?;
    let description = admin.describe_topic(&bench.topic).await?;
    let mut partitions = Vec::new();
    let mut total_records = 0;
    for partition in &description.partitions {
        let (start, end) = admin.watermarks(&bench.topic, partition.partition).await?;
        total_records += (end - start).max(0) as u64;
        partitions.push(((bench.topic.clone(), partition.partition), end));
    }
    let consumer = Consumer::new(ConsumerConfig { common: bench.client.common(), ..ConsumerConfig::default() })?;
    consumer.assign(&partitions.iter().map(|(key, _)| key.clone()).collect::<Vec<_>>()).await?;
    consumer.seek_all(Offset::Beginning)?;
    let (records_read, bytes_read) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let progress = Progress::start("consume", records_read.clone(), bytes_read.clone(), total_records);
    let started = Instant::now();
    let mut remaining: Vec<((String, i32), i64)> = partitions.into_iter().filter(|(_, end)| *end > 0).collect();
    while !remaining.is_empty() {
        let records = consumer.poll(Duration::from_secs(10)).await?;
        anyhow::ensure!(!records.is_empty(), "no records for 10 s with {} partition(s) unfinished", remaining.len());
        let mut bytes = 0;
        for record in &records {
            bytes +=
                record.value.as_ref().map_or(0, |value| value.len()) + record.key.as_ref().map_or(0, |key| key.len());
        }
        records_read.fetch_add(records.len() as u64, Ordering::Relaxed);
        bytes_read.fetch_add(bytes as u64, Ordering::Relaxed);
        remaining.retain(|((topic, partition), end)| {
            consumer.position(topic, *partition).is_none_or(|position| position < *end)
        });
    }
    let elapsed = started.elapsed().as_secs_f64();
    drop(progress);
    let (records, bytes) = (records_read.load(Ordering::Relaxed), bytes_read.load(Ordering::Relaxed));
    let bytes_per_second = bytes as f64 / elapsed;
    let ratio = loopback.map(|loopback| bytes_per_second / loopback);
    let report = json!({
        "workload": "consume",
        "topic": bench.topic,
        "records": records,
        "bytes": bytes,
        "seconds": elapsed,
        "records_per_second": records as f64 / elapsed,
        "mb_per_second": bytes_per_second / MB,
        "loopback_mb_per_second": loopback.map(|value| value / MB),
        "ratio_to_loopback": ratio,
        "cpu_seconds": process_cpu_seconds(),
    });
    match bench.client.format {
        Format::Json => println!("{report}"),
        Format::Text => {
            println!(
                "consume (catch-up) {records} records, {:.1} MB of keys+values: {:.1} MB/s, {:.0} records/s in {:.2} s",
                bytes as f64 / MB,
                bytes_per_second / MB,
                records as f64 / elapsed,
                elapsed
            );
            if let (Some(loopback), Some(ratio)) = (loopback, ratio) {
                println!(
                    "loopback TCP, one stream: {:.1} MB/s; consume / loopback = {:.1}%",
                    loopback / MB,
                    ratio * 100.0
                );
            }
        }
    }
    Ok(())
}

/// User + system CPU seconds this process has used so far (what an SDK
/// benchmark compares its own client's CPU against).
fn process_cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is handed and keeps no pointer.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

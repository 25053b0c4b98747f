//! The workloads of `shared/BENCH.md` (OpenMessaging-Benchmark shapes plus ours)
//! and the load they put on any [`Driver`].
//!
//! Load shapes, the same for every system:
//! - max rate: each producer keeps at most `inflight_bytes_max` of record bytes
//!   unacknowledged (4 MiB: 4,096 records of 1 KiB, 41,943 of 100 B; a fixed
//!   count of records with `--inflight-max`) and sends the next as soon as its
//!   client accepts it; records go to the partitions in turn. Throughput
//!   counts acknowledgements that arrive inside the measurement window
//!   (after the warm-up); latency is send→ack of every
//!   record sent inside the window.
//! - fixed rate: the same, paced to a total rate; each payload carries its send
//!   time so a consumer running alongside measures end-to-end latency.
//! - round trip: one record in flight, linger 0.
//! - catch-up: fill a topic (not measured), `sync`, then read it all from offset 0;
//!   cold, the same with the server's files dropped from the page cache first.
//!
//! The server's CPU seconds are sampled at the window's edges, its peak RSS over
//! the whole workload.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::ValueEnum;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::driver::{Driver, Durability, ProducerSpec, Publisher, Start, TopicSpec};
use crate::server::Server;

const MB: f64 = 1_000_000.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadId {
    /// 1. Max ingest: 16 partitions, 1 KiB records, one producer.
    MaxIngest,
    /// 2. End-to-end latency at a fixed rate (default 50k msg/s of 1 KiB).
    FixedRate,
    /// 3. Small records: 100 B, max ingest.
    SmallRecords,
    /// 4. Durable ingest: fsync before ack, many producers (group commit).
    DurableIngest,
    /// 5. Catch-up read of the topic's history from offset 0 (page cache hot).
    CatchUp,
    /// 6. One-record round trip (produce -> ack), one in flight.
    RoundTrip,
    /// 7. Three brokers, RF=3, min.insync.replicas=2, acks=all: max ingest as 1.
    Replicated,
    /// 8. Plugin overhead: max ingest with a no-op interceptor / identity transform (Weir only).
    PluginOverhead,
    /// 9. Catch-up read as 5, with the server's files dropped from the page cache before reading.
    CatchUpCold,
    /// 10-12. Scale: max ingest as 1 with 1, 256 or 2,048 partitions (the
    /// partition curve, with 1's 16). Run only when named.
    #[value(name = "partitions-1")]
    ScalePartitions1,
    #[value(name = "partitions-256")]
    ScalePartitions256,
    #[value(name = "partitions-2048")]
    ScalePartitions2048,
    /// 13-14. Scale: max ingest as 1 from 8 or 64 producers sharing its
    /// records in flight (the producer curve, with 1's one). Run only when named.
    #[value(name = "producers-8")]
    ScaleProducers8,
    #[value(name = "producers-64")]
    ScaleProducers64,
}

/// What a scale workload varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleAxis {
    Partitions,
    Producers,
}

impl ScaleAxis {
    pub const BOTH: [ScaleAxis; 2] = [ScaleAxis::Partitions, ScaleAxis::Producers];

    pub fn slug(self) -> &'static str {
        match self {
            ScaleAxis::Partitions => "partitions",
            ScaleAxis::Producers => "producers",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            ScaleAxis::Partitions => "partitions (one producer)",
            ScaleAxis::Producers => "producers (16 partitions)",
        }
    }
}

impl WorkloadId {
    /// What `weir-bench run` runs unless told otherwise: all but the scale
    /// points.
    pub const DEFAULT: [WorkloadId; 9] = [
        WorkloadId::MaxIngest,
        WorkloadId::FixedRate,
        WorkloadId::SmallRecords,
        WorkloadId::DurableIngest,
        WorkloadId::CatchUp,
        WorkloadId::RoundTrip,
        WorkloadId::Replicated,
        WorkloadId::PluginOverhead,
        WorkloadId::CatchUpCold,
    ];

    /// The scale curves' points besides max ingest (`--workloads` names them).
    pub const SCALE: [WorkloadId; 5] = [
        WorkloadId::ScalePartitions1,
        WorkloadId::ScalePartitions256,
        WorkloadId::ScalePartitions2048,
        WorkloadId::ScaleProducers8,
        WorkloadId::ScaleProducers64,
    ];

    /// Every workload, numbered in this order: the default ones, then the
    /// scale points.
    pub const ALL: [WorkloadId; 14] = {
        let mut all = [WorkloadId::MaxIngest; 14];
        let mut at = 0;
        while at < all.len() {
            all[at] = if at < Self::DEFAULT.len() { Self::DEFAULT[at] } else { Self::SCALE[at - Self::DEFAULT.len()] };
            at += 1;
        }
        all
    };

    pub fn number(self) -> u8 {
        WorkloadId::ALL.iter().position(|id| *id == self).expect("every id is in ALL") as u8 + 1
    }

    pub fn slug(self) -> &'static str {
        match self {
            WorkloadId::MaxIngest => "max-ingest",
            WorkloadId::FixedRate => "fixed-rate",
            WorkloadId::SmallRecords => "small-records",
            WorkloadId::DurableIngest => "durable-ingest",
            WorkloadId::CatchUp => "catch-up",
            WorkloadId::RoundTrip => "round-trip",
            WorkloadId::Replicated => "replicated",
            WorkloadId::PluginOverhead => "plugin-overhead",
            WorkloadId::CatchUpCold => "catch-up-cold",
            WorkloadId::ScalePartitions1 => "partitions-1",
            WorkloadId::ScalePartitions256 => "partitions-256",
            WorkloadId::ScalePartitions2048 => "partitions-2048",
            WorkloadId::ScaleProducers8 => "producers-8",
            WorkloadId::ScaleProducers64 => "producers-64",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            WorkloadId::MaxIngest => "Max ingest, 16 partitions, 1 KiB, one producer",
            WorkloadId::FixedRate => "End-to-end latency at a fixed rate, 16 partitions, 1 KiB",
            WorkloadId::SmallRecords => "Small records, 100 B, max ingest, 16 partitions",
            WorkloadId::DurableIngest => "Durable ingest, fsync before ack, 8 producers, 16 partitions, 1 KiB",
            WorkloadId::CatchUp => "Catch-up read from offset 0, 16 partitions, 1 KiB (data in the page cache)",
            WorkloadId::RoundTrip => "One-record round trip (produce -> ack), 1 partition, 1 KiB",
            WorkloadId::Replicated => {
                "Three brokers, RF=3, min.insync.replicas=2, acks=all, 16 partitions, 1 KiB, one producer"
            }
            WorkloadId::PluginOverhead => "Plugin overhead: max ingest with a no-op interceptor / identity transform",
            WorkloadId::CatchUpCold => {
                "Catch-up read from offset 0, 16 partitions, 1 KiB, cold (the server's files dropped from the page cache)"
            }
            WorkloadId::ScalePartitions1 => "Scale: max ingest, 1 partition, 1 KiB, one producer",
            WorkloadId::ScalePartitions256 => "Scale: max ingest, 256 partitions, 1 KiB, one producer",
            WorkloadId::ScalePartitions2048 => "Scale: max ingest, 2,048 partitions, 1 KiB, one producer",
            WorkloadId::ScaleProducers8 => "Scale: max ingest, 16 partitions, 1 KiB, 8 producers",
            WorkloadId::ScaleProducers64 => "Scale: max ingest, 16 partitions, 1 KiB, 64 producers",
        }
    }

    /// The durabilities it runs at (catch-up reads a page-cache topic).
    pub fn durabilities(self) -> &'static [Durability] {
        match self {
            WorkloadId::DurableIngest => &[Durability::Fsync],
            WorkloadId::CatchUp | WorkloadId::CatchUpCold | WorkloadId::PluginOverhead => &[Durability::PageCache],
            _ if self.scale_point().is_some() => &[Durability::PageCache],
            _ => &[Durability::PageCache, Durability::Fsync],
        }
    }

    pub fn record_bytes(self) -> usize {
        match self {
            WorkloadId::SmallRecords => 100,
            _ => 1024,
        }
    }

    pub fn partitions(self) -> i32 {
        match self {
            WorkloadId::RoundTrip | WorkloadId::ScalePartitions1 => 1,
            WorkloadId::ScalePartitions256 => 256,
            WorkloadId::ScalePartitions2048 => 2048,
            _ => 16,
        }
    }

    /// Producers of a max-rate workload (they share its records in flight).
    pub fn producers(self, settings: &Settings) -> usize {
        match self {
            WorkloadId::DurableIngest => settings.durable_producers,
            WorkloadId::ScaleProducers8 => 8,
            WorkloadId::ScaleProducers64 => 64,
            _ => 1,
        }
    }

    /// Where it sits on a scale curve: max ingest is on both (16 partitions,
    /// one producer).
    pub fn scale_point(self) -> Option<Vec<(ScaleAxis, u32)>> {
        let point = match self {
            WorkloadId::MaxIngest => return Some(vec![(ScaleAxis::Partitions, 16), (ScaleAxis::Producers, 1)]),
            WorkloadId::ScalePartitions1 => (ScaleAxis::Partitions, 1),
            WorkloadId::ScalePartitions256 => (ScaleAxis::Partitions, 256),
            WorkloadId::ScalePartitions2048 => (ScaleAxis::Partitions, 2048),
            WorkloadId::ScaleProducers8 => (ScaleAxis::Producers, 8),
            WorkloadId::ScaleProducers64 => (ScaleAxis::Producers, 64),
            _ => return None,
        };
        Some(vec![point])
    }

    /// What its headline figure is.
    pub fn headline(self) -> Headline {
        match self {
            WorkloadId::FixedRate | WorkloadId::RoundTrip => Headline::LatencyP50,
            _ => Headline::Throughput,
        }
    }
}

/// The figure a workload's ratios are taken over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Headline {
    /// MB/s: higher is better.
    Throughput,
    /// p50 latency: lower is better.
    LatencyP50,
}

/// Sizes and times of one run (full or smoke).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct Settings {
    pub warmup: Duration,
    pub duration: Duration,
    /// Total records per second of the fixed-rate workload.
    pub fixed_rate: f64,
    /// Bytes written before the catch-up read.
    pub catch_up_bytes: u64,
    /// Producers of the durable-ingest workload.
    pub durable_producers: usize,
    /// Unacknowledged record bytes per max-rate workload at most (shared by
    /// its producers), as producer libraries bound themselves (Kafka's
    /// `buffer.memory`): the same bytes in flight for 1 KiB and 100 B records.
    #[serde(default = "default_inflight_bytes_max")]
    pub inflight_bytes_max: usize,
    /// A fixed count of unacknowledged records instead, whatever their size.
    #[serde(default)]
    pub inflight_max: Option<usize>,
}

/// 4 MiB: 4,096 records of 1 KiB in flight, as every run before the bound was in bytes.
pub const INFLIGHT_BYTES_MAX: usize = 4 << 20;

fn default_inflight_bytes_max() -> usize {
    INFLIGHT_BYTES_MAX
}

impl Settings {
    /// Records of `record_bytes` one workload keeps unacknowledged at most.
    pub fn records_in_flight(&self, record_bytes: usize) -> usize {
        self.inflight_max.unwrap_or(self.inflight_bytes_max / record_bytes.max(1)).max(1)
    }
}

/// What one workload run measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Measurement {
    pub records: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub records_per_second: f64,
    pub mb_per_second: f64,
    /// The fixed rate asked for, if any.
    pub target_rate: Option<f64>,
    /// `send->ack` or `end-to-end`, when latency was measured.
    pub latency_kind: Option<String>,
    pub latency_us: Option<Percentiles>,
    /// (quantile, µs) points of the latency distribution, for the CDF plots.
    pub latency_cdf: Vec<(f64, u64)>,
    pub server_cpu_seconds: f64,
    pub cpu_seconds_per_gb: f64,
    /// The load generator's own CPU (the system's client library and the
    /// harness, every thread) in the same window, per GB.
    #[serde(default)]
    pub generator_cpu_seconds_per_gb: f64,
    pub server_peak_rss_bytes: u64,
    /// Fixed rate only: the system did not keep up (sustained under 95% of the
    /// rate, or its consumer fell behind), so its latency is queueing, not
    /// latency at that rate; no ratio is drawn from it.
    #[serde(default)]
    pub overloaded: bool,
    /// Anything the reader must know about this figure.
    pub note: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// One system under test: how to talk to it and which process to sample.
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub driver: &'a dyn Driver,
    pub server: &'a Server,
}

/// Runs `workload` against a topic that already exists.
pub async fn run(
    workload: WorkloadId,
    topic: &TopicSpec,
    target: Target<'_>,
    settings: &Settings,
) -> anyhow::Result<Measurement> {
    target.server.reset_peak_rss();
    let mut measurement = match workload {
        WorkloadId::MaxIngest
        | WorkloadId::SmallRecords
        | WorkloadId::PluginOverhead
        | WorkloadId::Replicated
        | WorkloadId::DurableIngest
        | WorkloadId::ScalePartitions1
        | WorkloadId::ScalePartitions256
        | WorkloadId::ScalePartitions2048
        | WorkloadId::ScaleProducers8
        | WorkloadId::ScaleProducers64 => {
            // The same records in flight in all as one max-ingest producer.
            let producers = workload.producers(settings);
            let records = settings.records_in_flight(workload.record_bytes());
            let shared = Settings { inflight_max: Some((records / producers).max(1)), ..*settings };
            max_rate(workload, topic, target, &shared, producers).await?
        }
        WorkloadId::FixedRate => fixed_rate(topic, target, settings).await?,
        WorkloadId::RoundTrip => round_trip(topic, target, settings).await?,
        WorkloadId::CatchUp => catch_up(topic, target, settings, false).await?,
        WorkloadId::CatchUpCold => catch_up(topic, target, settings, true).await?,
    };
    measurement.server_peak_rss_bytes = target.server.peak_rss_bytes()?;
    Ok(measurement)
}

/// Nanoseconds since the harness's first call: the clock inside payloads.
fn now_nanos() -> u64 {
    nanos_at(Instant::now())
}

/// `instant` on the payload clock.
fn nanos_at(instant: Instant) -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    instant.saturating_duration_since(*EPOCH.get_or_init(Instant::now)).as_nanos() as u64
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// Longest wait for a system's first acknowledgement before a window opens:
/// generous, so a loaded machine delays a run instead of failing it (a smoke run's
/// one-second window then still sees records move).
const FIRST_ACK_WAIT_MAX: Duration = Duration::from_secs(120);

/// Sends one record to partition 0 and waits for its acknowledgement, so the
/// measured window opens on a system that is already acknowledging.
async fn first_ack(publisher: &dyn Publisher, record_bytes: usize) -> anyhow::Result<()> {
    let payload = vec![0u8; record_bytes];
    let acknowledged = async { publisher.send(0, &payload).await?.await };
    tokio::time::timeout(FIRST_ACK_WAIT_MAX, acknowledged)
        .await
        .with_context(|| format!("no acknowledgement within {} s", FIRST_ACK_WAIT_MAX.as_secs()))?
}

#[derive(Clone, Copy, Debug)]
struct Window {
    start: Instant,
    end: Instant,
}

impl Window {
    fn after_warmup(settings: &Settings) -> Window {
        let start = Instant::now() + settings.warmup;
        Window { start, end: start + settings.duration }
    }
}

#[derive(Clone, Copy, Debug)]
struct LoadShape {
    partitions: i32,
    record_bytes: usize,
    inflight_max: usize,
    /// Records per second of this producer (`None`: as fast as acknowledged).
    rate: Option<f64>,
    /// Write the send time into each payload's first 8 bytes.
    stamp: bool,
}

struct Tally {
    acked_in_window: u64,
    latencies: Histogram<u64>,
}

/// One producer's loop until the window closes, then until every record it sent
/// is acknowledged.
async fn produce(publisher: Box<dyn Publisher>, shape: LoadShape, window: Window) -> anyhow::Result<Tally> {
    let mut tally = Tally { acked_in_window: 0, latencies: histogram() };
    let observe = |tally: &mut Tally, sent: Instant| {
        let now = Instant::now();
        if now >= window.start && now < window.end {
            tally.acked_in_window += 1;
        }
        if sent >= window.start && sent < window.end {
            tally.latencies.saturating_record(now.duration_since(sent).as_micros() as u64);
        }
    };
    let mut payload = vec![0x61u8; shape.record_bytes];
    let mut pending = FuturesUnordered::new();
    let started = Instant::now();
    let mut sent_count = 0u64;
    loop {
        while let Some(Some(acked)) = pending.next().now_or_never() {
            observe(&mut tally, acked?);
        }
        if pending.len() >= shape.inflight_max {
            let acked = pending.next().await.expect("pending is not empty")?;
            observe(&mut tally, acked);
            continue;
        }
        let now = Instant::now();
        if now >= window.end {
            break;
        }
        if let Some(rate) = shape.rate {
            let due = started + Duration::from_secs_f64(sent_count as f64 / rate);
            if due > now {
                tokio::select! {
                    () = tokio::time::sleep_until(due.into()) => {}
                    Some(acked) = pending.next() => observe(&mut tally, acked?),
                }
                continue;
            }
        }
        // One instant for the window check, the stamp and the latency (the
        // same clock reading for every system).
        let sent = now;
        if shape.stamp {
            payload[..8].copy_from_slice(&nanos_at(sent).to_le_bytes());
        }
        let partition = (sent_count % shape.partitions as u64) as i32;
        let ack = publisher.send(partition, &payload).await?;
        pending.push(ack.map(move |result| result.map(|()| sent)));
        sent_count += 1;
    }
    while let Some(acked) = pending.next().await {
        observe(&mut tally, acked?);
    }
    publisher.flush().await?;
    Ok(tally)
}

/// CPU seconds of the server and of this process (the load generator).
#[derive(Clone, Copy, Debug, Default)]
struct CpuUse {
    server: f64,
    generator: f64,
}

impl CpuUse {
    fn now(server: &Server) -> anyhow::Result<CpuUse> {
        CpuUse::of(&server.pids())
    }

    /// The CPU so far of the server processes `pids` and of this process.
    fn of(pids: &[u32]) -> anyhow::Result<CpuUse> {
        Ok(CpuUse { server: crate::server::cpu_seconds_of(pids)?, generator: own_cpu_seconds() })
    }

    fn since(self, server: &Server) -> anyhow::Result<CpuUse> {
        Ok(self.until(CpuUse::now(server)?))
    }

    /// What was spent between `self` and `later`.
    fn until(self, later: CpuUse) -> CpuUse {
        CpuUse { server: later.server - self.server, generator: later.generator - self.generator }
    }
}

/// User + system CPU seconds of every thread of this process.
fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// CPU spent inside `window` (sampled at its edges), sampled on a thread of
/// its own: the load generator is pinned to one CPU, so its runtime has one
/// worker, and a producer task that seldom yields (Kafka's at 100 B) held a
/// sampling task past the window's end: both samples came after it and read 0.
async fn cpu_in_window(server: &Server, window: Window) -> anyhow::Result<CpuUse> {
    let pids = server.pids();
    tokio::task::spawn_blocking(move || {
        std::thread::sleep(window.start.saturating_duration_since(Instant::now()));
        let before = CpuUse::of(&pids)?;
        std::thread::sleep(window.end.saturating_duration_since(Instant::now()));
        Ok(before.until(CpuUse::of(&pids)?))
    })
    .await
    .context("the CPU sampling thread")?
}

/// A spawned task, aborted if dropped before it is joined (a run that timed out
/// or failed must not leave its producers running into the next one).
struct Task<T>(tokio::task::JoinHandle<T>);

impl<T: Send + 'static> Task<T> {
    fn spawn(future: impl std::future::Future<Output = T> + Send + 'static) -> Task<T> {
        Task(tokio::spawn(future))
    }

    async fn join(mut self) -> Result<T, tokio::task::JoinError> {
        (&mut self.0).await
    }
}

impl<T> Drop for Task<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `acks=all` with idempotence at fsync, and at both durabilities for the
/// replicated workload; `acks=1` otherwise.
fn producer_spec(workload: WorkloadId, durability: Durability, linger: Duration) -> ProducerSpec {
    let acks_all = durability == Durability::Fsync || workload == WorkloadId::Replicated;
    ProducerSpec { acks_all, linger, batch_bytes_max: 1024 * 1024 }
}

/// Producers as fast as acknowledged.
async fn max_rate(
    workload: WorkloadId,
    topic: &TopicSpec,
    target: Target<'_>,
    settings: &Settings,
    producers: usize,
) -> anyhow::Result<Measurement> {
    let spec = producer_spec(workload, topic.durability, Duration::from_millis(5));
    let shape = LoadShape {
        partitions: topic.partitions,
        record_bytes: workload.record_bytes(),
        inflight_max: settings.records_in_flight(workload.record_bytes()),
        rate: None,
        stamp: false,
    };
    let mut publishers = Vec::with_capacity(producers);
    for _ in 0..producers {
        let publisher = target.driver.publisher(topic, spec).await?;
        first_ack(publisher.as_ref(), shape.record_bytes).await?;
        publishers.push(publisher);
    }
    let window = Window::after_warmup(settings);
    let tasks: Vec<_> =
        publishers.into_iter().map(|publisher| Task::spawn(produce(publisher, shape, window))).collect();
    let cpu = cpu_in_window(target.server, window).await?;
    let mut acked = 0;
    let mut latencies = histogram();
    for task in tasks {
        let tally = task.join().await.context("producer task")??;
        acked += tally.acked_in_window;
        latencies.add(&tally.latencies)?;
    }
    let mut measurement = throughput(acked, shape.record_bytes, settings.duration, cpu);
    with_latency(&mut measurement, "send->ack", &latencies);
    Ok(measurement)
}

/// A paced producer and a consumer reading alongside: end-to-end latency.
async fn fixed_rate(topic: &TopicSpec, target: Target<'_>, settings: &Settings) -> anyhow::Result<Measurement> {
    // linger 0, as latency-minded users (and Kafka's own EndToEndLatency tool) set it.
    let spec = producer_spec(WorkloadId::FixedRate, topic.durability, Duration::ZERO);
    let shape = LoadShape {
        partitions: topic.partitions,
        record_bytes: WorkloadId::FixedRate.record_bytes(),
        inflight_max: settings.records_in_flight(WorkloadId::FixedRate.record_bytes()),
        rate: Some(settings.fixed_rate),
        stamp: true,
    };
    let mut subscriber = target.driver.subscriber(topic, Start::End).await?;
    // Let the consumer find the end of the log before anything is written
    // (librdkafka resolves the end offset lazily, on its first fetch).
    subscriber.poll(Duration::from_millis(500), &mut |_| {}).await?;
    let publisher = target.driver.publisher(topic, spec).await?;
    first_ack(publisher.as_ref(), shape.record_bytes).await?; // stamped 0: before the window
    let window = Window::after_warmup(settings);
    // The same instant as `window.start`: the producer counts what it sends from
    // then on, the consumer what is stamped from then on.
    let window_start_nanos = nanos_at(window.start);
    let producer = Task::spawn(produce(publisher, shape, window));
    let stop = Arc::new(AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let (consumer_stop, consumer_received) = (stop.clone(), received.clone());
    let consumer = Task::spawn(async move {
        let mut end_to_end = histogram();
        let mut sink = |value: &[u8]| {
            let Some(stamp) = value.get(..8) else { return };
            let sent = u64::from_le_bytes(stamp.try_into().expect("8 bytes"));
            if sent >= window_start_nanos {
                end_to_end.saturating_record(now_nanos().saturating_sub(sent) / 1000);
                consumer_received.fetch_add(1, Ordering::Relaxed);
            }
        };
        while !consumer_stop.load(Ordering::Relaxed) {
            subscriber.poll(Duration::from_millis(100), &mut sink).await?;
        }
        Ok::<_, anyhow::Error>(end_to_end)
    });
    let cpu = cpu_in_window(target.server, window).await?;
    let tally = producer.join().await.context("producer task")??;
    // Let the consumer read what was acknowledged last, then stop it.
    let sent_in_window = tally.latencies.len();
    let drain_deadline = Instant::now() + Duration::from_secs(5);
    while received.load(Ordering::Relaxed) < sent_in_window && Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let end_to_end = consumer.join().await.context("consumer task")??;
    let received = received.load(Ordering::Relaxed);
    let mut measurement = throughput(tally.acked_in_window, shape.record_bytes, settings.duration, cpu);
    measurement.target_rate = Some(settings.fixed_rate);
    with_latency(&mut measurement, "end-to-end", &end_to_end);
    let achieved = measurement.records_per_second / settings.fixed_rate;
    let mut notes = Vec::new();
    if achieved < 0.95 {
        notes.push(format!("sustained only {:.0}% of the target rate", achieved * 100.0));
    }
    if received < sent_in_window {
        notes.push(format!("consumer saw {received} of {sent_in_window} records sent in the window"));
    }
    if !notes.is_empty() {
        measurement.overloaded = true;
        measurement.note = Some(notes.join("; "));
    }
    Ok(measurement)
}

/// One record at a time: send, wait for the acknowledgement, repeat.
async fn round_trip(topic: &TopicSpec, target: Target<'_>, settings: &Settings) -> anyhow::Result<Measurement> {
    let spec = producer_spec(WorkloadId::RoundTrip, topic.durability, Duration::ZERO);
    let publisher = target.driver.publisher(topic, spec).await?;
    let payload = vec![0x62u8; WorkloadId::RoundTrip.record_bytes()];
    first_ack(publisher.as_ref(), payload.len()).await?;
    let window = Window::after_warmup(settings);
    let mut latencies = histogram();
    let mut before = None;
    let mut acked_in_window = 0;
    loop {
        let started = Instant::now();
        if started >= window.end {
            break;
        }
        if started >= window.start && before.is_none() {
            before = Some(CpuUse::now(target.server)?);
        }
        publisher.send(0, &payload).await?.await?;
        if started >= window.start {
            latencies.saturating_record(started.elapsed().as_micros() as u64);
            acked_in_window += 1;
        }
    }
    let cpu = before.context("the window never started")?.since(target.server)?;
    let mut measurement = throughput(acked_in_window, payload.len(), settings.duration, cpu);
    with_latency(&mut measurement, "send->ack", &latencies);
    Ok(measurement)
}

/// Fills the topic (page cache, max rate, not measured), syncs, then reads it all
/// from offset 0 with one consumer; `cold`, with the server's files dropped from
/// the page cache before the read.
async fn catch_up(
    topic: &TopicSpec,
    target: Target<'_>,
    settings: &Settings,
    cold: bool,
) -> anyhow::Result<Measurement> {
    let record_bytes = WorkloadId::CatchUp.record_bytes();
    let records = settings.catch_up_bytes.div_ceil(record_bytes as u64);
    let spec = producer_spec(WorkloadId::CatchUp, topic.durability, Duration::from_millis(5));
    let publisher = target.driver.publisher(topic, spec).await?;
    let payload = vec![0x63u8; record_bytes];
    let mut pending = FuturesUnordered::new();
    for sent in 0..records {
        if pending.len() >= settings.records_in_flight(record_bytes) {
            pending.next().await.expect("pending is not empty")?;
        }
        pending.push(publisher.send((sent % topic.partitions as u64) as i32, &payload).await?);
    }
    while let Some(acked) = pending.next().await {
        acked?;
    }
    publisher.flush().await?;
    drop(publisher);
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    if cold {
        target.server.evict_page_cache()?;
    }

    // Timed from creating the consumer (clients that prefetch start reading at
    // once) to the last record; over a 1 GiB read, connecting is noise.
    let before = CpuUse::now(target.server)?;
    let started = Instant::now();
    let mut subscriber = target.driver.subscriber(topic, Start::Beginning).await?;
    let (mut read, mut bytes) = (0u64, 0u64);
    let mut idle_polls = 0;
    while read < records {
        match subscriber.poll(Duration::from_millis(500), &mut |value: &[u8]| bytes += value.len() as u64).await? {
            0 => {
                idle_polls += 1;
                anyhow::ensure!(idle_polls < 20, "catch-up read stalled at {read} of {records} records");
            }
            count => read += count as u64,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = before.since(target.server)?;
    Ok(Measurement {
        records: read,
        bytes,
        seconds,
        records_per_second: read as f64 / seconds,
        mb_per_second: bytes as f64 / MB / seconds,
        server_cpu_seconds: cpu.server,
        cpu_seconds_per_gb: cpu.server / (bytes as f64 / 1e9),
        generator_cpu_seconds_per_gb: cpu.generator / (bytes as f64 / 1e9),
        ..Measurement::default()
    })
}

fn throughput(records: u64, record_bytes: usize, window: Duration, cpu: CpuUse) -> Measurement {
    let seconds = window.as_secs_f64();
    let bytes = records * record_bytes as u64;
    let per_gb = |cpu_seconds: f64| if bytes == 0 { 0.0 } else { cpu_seconds / (bytes as f64 / 1e9) };
    Measurement {
        records,
        bytes,
        seconds,
        records_per_second: records as f64 / seconds,
        mb_per_second: bytes as f64 / MB / seconds,
        server_cpu_seconds: cpu.server,
        cpu_seconds_per_gb: per_gb(cpu.server),
        generator_cpu_seconds_per_gb: per_gb(cpu.generator),
        ..Measurement::default()
    }
}

/// Quantiles kept for the CDF plots: dense in the tail.
const CDF_QUANTILES: &[f64] = &[
    0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.92, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99,
    0.993, 0.995, 0.997, 0.998, 0.999, 0.9995, 0.9999, 1.0,
];

fn with_latency(measurement: &mut Measurement, kind: &str, latencies: &Histogram<u64>) {
    if latencies.is_empty() {
        return;
    }
    let at = |quantile: f64| latencies.value_at_quantile(quantile) as f64;
    measurement.latency_kind = Some(kind.to_owned());
    measurement.latency_us =
        Some(Percentiles { p50: at(0.5), p99: at(0.99), p999: at(0.999), max: latencies.max() as f64 });
    measurement.latency_cdf =
        CDF_QUANTILES.iter().map(|quantile| (*quantile, latencies.value_at_quantile(*quantile))).collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_numbers_follow_the_bench_list() {
        let numbers: Vec<u8> = WorkloadId::ALL.iter().map(|id| id.number()).collect();
        assert_eq!(numbers, (1..=14).collect::<Vec<u8>>());
        assert_eq!(WorkloadId::DEFAULT, WorkloadId::ALL[..9]);
        assert_eq!(WorkloadId::SCALE, WorkloadId::ALL[9..]);
        for workload in WorkloadId::ALL {
            let named = workload.to_possible_value().map(|value| value.get_name().to_owned());
            assert_eq!(named.as_deref(), Some(workload.slug()), "--workloads takes the slug");
        }
        assert_eq!(WorkloadId::ScalePartitions2048.partitions(), 2048);
        assert_eq!(WorkloadId::ScalePartitions2048.durabilities(), &[Durability::PageCache]);
        assert_eq!(WorkloadId::CatchUpCold.durabilities(), &[Durability::PageCache]);
        assert_eq!(WorkloadId::DurableIngest.durabilities(), &[Durability::Fsync]);
        assert_eq!(WorkloadId::SmallRecords.record_bytes(), 100);
        assert_eq!(WorkloadId::Replicated.durabilities(), &[Durability::PageCache, Durability::Fsync]);
        assert_eq!((WorkloadId::Replicated.partitions(), WorkloadId::Replicated.record_bytes()), (16, 1024));
    }

    #[test]
    fn acks_all_at_fsync_and_for_every_replicated_run() {
        let acks_all = |workload, durability| producer_spec(workload, durability, Duration::ZERO).acks_all;
        assert!(!acks_all(WorkloadId::MaxIngest, Durability::PageCache));
        assert!(acks_all(WorkloadId::MaxIngest, Durability::Fsync));
        assert!(acks_all(WorkloadId::Replicated, Durability::PageCache));
        assert!(acks_all(WorkloadId::Replicated, Durability::Fsync));
    }

    #[test]
    fn throughput_divides_by_the_window() {
        let cpu = CpuUse { server: 0.5, generator: 1.0 };
        let measurement = throughput(2_000, 1000, Duration::from_secs(2), cpu);
        assert_eq!(measurement.bytes, 2_000_000);
        assert!((measurement.mb_per_second - 1.0).abs() < 1e-9);
        assert!((measurement.cpu_seconds_per_gb - 250.0).abs() < 1e-9);
        assert!((measurement.generator_cpu_seconds_per_gb - 500.0).abs() < 1e-9);
    }

    #[test]
    fn own_cpu_time_grows_with_work() {
        // Spin until the counter shows 20 ms of CPU; the generous wall-clock
        // bound only stops a broken counter (a loaded machine may give this
        // thread a small share of the wall clock).
        let before = own_cpu_seconds();
        let started = Instant::now();
        let mut spin = 0u64;
        while own_cpu_seconds() - before <= 0.02 && started.elapsed() < Duration::from_secs(120) {
            for _ in 0..10_000 {
                spin = std::hint::black_box(spin.wrapping_add(1));
            }
        }
        assert!(own_cpu_seconds() - before > 0.02, "spun {spin} times in {:?}", started.elapsed());
    }

    #[test]
    fn latency_quantiles_come_from_the_histogram() {
        let mut latencies = histogram();
        for value in 1..=1000 {
            latencies.record(value).expect("in bounds");
        }
        let mut measurement = Measurement::default();
        with_latency(&mut measurement, "send->ack", &latencies);
        let percentiles = measurement.latency_us.expect("latency recorded");
        assert!((percentiles.p50 - 500.0).abs() <= 1.0, "{percentiles:?}");
        assert!((percentiles.p99 - 990.0).abs() <= 1.0, "{percentiles:?}");
        assert_eq!(measurement.latency_cdf.last(), Some(&(1.0, 1000)));
    }
}

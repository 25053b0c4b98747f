//! `weir-bench isolation`: does a hostile plugin slow the traffic that does not
//! go through it? (issue: plugins, second cut.)
//!
//! One Weir broker with its default plugin limits, pinned to the servers' CPUs
//! as `run` pins them. Topic `probe` has no plugin; `hammered-spin` has the
//! hostile fixture's infinite-loop produce interceptor and `hammered-bomb` its
//! memory-bomb one. Each round measures the probe twice, with the hammer off
//! and on (the order alternating): one producer sends `--probe-records`
//! records to `probe` one at a time (acks=1, page cache, no linger) and records
//! each send's round trip. The hammer is `--hammer-producers` producers per
//! hammered topic sending one record at a time in a loop (every send fails:
//! the plugins never accept). Prints each measurement and the medians of the
//! ratios hammered / quiet for p50 and p99 (target: ≤ 1.5 each).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;

use crate::server::Launch;

#[derive(Debug, clap::Args)]
pub struct IsolationArgs {
    /// Rounds (each: the probe with the hammer off and on).
    #[arg(long, default_value_t = 9)]
    rounds: u32,
    /// Records the probe sends per measurement, one at a time (10,000: the
    /// p99 is then the 100th-slowest, not one of a handful of outliers).
    #[arg(long, default_value_t = 10_000)]
    probe_records: u32,
    /// Producers hammering each hostile topic.
    #[arg(long, default_value_t = 8)]
    hammer_producers: u32,
    /// The `weir` binary [default: target/release/weir].
    #[arg(long)]
    weir_bin: Option<std::path::PathBuf>,
    /// Where scripts/build-plugins.sh put the plugins [default: target/plugins/wasm32-wasip2/release].
    #[arg(long)]
    plugins_dir: Option<std::path::PathBuf>,
    /// Do not pin the broker and the load generator apart.
    #[arg(long)]
    no_pin: bool,
    /// The hostile fixture's modes to hammer, one topic each: `spin` (an
    /// infinite loop), `bomb` (grows memory until the cap).
    #[arg(long, value_delimiter = ',', default_value = "spin,bomb")]
    hostile: Vec<String>,
}

const PROBE: &str = "probe";

/// The topic hammered through the hostile fixture in `mode`.
fn hammered(mode: &str) -> String {
    format!("hammered-{mode}")
}

pub fn run(args: IsolationArgs) -> anyhow::Result<()> {
    let root = crate::repo_root();
    let weir_bin = args.weir_bin.clone().unwrap_or_else(|| root.join("target/release/weir"));
    let plugins_dir = args.plugins_dir.clone().unwrap_or_else(|| root.join("target/plugins/wasm32-wasip2/release"));
    let wasm_path = plugins_dir.join("hostile.wasm");
    let wasm = std::fs::read(&wasm_path)
        .with_context(|| format!("read {} (run scripts/build-plugins.sh)", wasm_path.display()))?;
    let work_root = root.join("target/bench-work");
    std::fs::create_dir_all(&work_root)?;
    let work_dir = crate::tempdir_in(&work_root)?;
    let (server_cpus, harness_cpus, pinning) = crate::cpu_split(args.no_pin);
    eprintln!("pinning: {pinning}");
    if !harness_cpus.is_empty() {
        crate::server::pin_current_thread(&harness_cpus);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let launch = Launch { work_dir: work_dir.clone(), cpus: server_cpus };
    let mut server = launch.weir(&weir_bin)?;
    let address = server.address.clone();
    let outcome = runtime.block_on(async {
        let admin = client::Admin::new(common(&address))?;
        server.wait_ready(|| async { Ok(admin.list_topics().await.map(drop)?) }).await?;
        prepare(&admin, wasm, &args.hostile).await?;
        rounds(&args, &address).await
    });
    server.stop();
    let _ = std::fs::remove_dir_all(&work_dir);
    outcome
}

fn common(address: &str) -> client::CommonConfig {
    client::CommonConfig { bootstrap_servers: address.to_owned(), ..client::CommonConfig::default() }
}

async fn prepare(admin: &client::Admin, wasm: Vec<u8>, modes: &[String]) -> anyhow::Result<()> {
    let page_cache = [("flush.policy".to_owned(), "interval".to_owned())];
    let mut probe = client::NewTopic::new(PROBE, 1);
    probe.configs = page_cache.to_vec();
    admin.create_topic(probe).await?;
    admin.upload_plugin("hostile", "produce-interceptor", wasm).await?;
    for mode in modes {
        let topic = hammered(mode);
        let mut hammered = client::NewTopic::new(&topic, 4);
        hammered.configs = page_cache.to_vec();
        admin.create_topic(hammered).await?;
        admin
            .attach_plugin(client::Attach {
                topic,
                hook: "produce-interceptor".to_owned(),
                plugin: "hostile".to_owned(),
                config: vec![("mode".to_owned(), mode.to_owned())],
                failure_policy: String::new(),
            })
            .await?;
    }
    Ok(())
}

fn producer(address: &str) -> anyhow::Result<client::Producer> {
    let config = client::ProducerConfig {
        common: common(address),
        acks: client::Acks::Leader,
        linger: Duration::ZERO,
        delivery_timeout: Duration::from_secs(30),
        ..client::ProducerConfig::default()
    };
    Ok(client::Producer::new(config)?)
}

/// The probe's round trips, one record at a time.
async fn probe(producer: &client::Producer, records: u32) -> anyhow::Result<Histogram<u64>> {
    let mut latencies = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let value = vec![b'p'; 1024];
    for _ in 0..records {
        let started = Instant::now();
        producer.send(client::ProducerRecord::new(PROBE, value.clone())).await?.await?;
        latencies.record(started.elapsed().as_micros().max(1) as u64)?;
    }
    Ok(latencies)
}

/// Hammer producers running until `stop`; the count of sends they made.
struct Hammer {
    stop: Arc<AtomicBool>,
    sends: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Hammer {
    fn start(address: &str, modes: &[String], producers: u32) -> anyhow::Result<Hammer> {
        let stop = Arc::new(AtomicBool::new(false));
        let sends = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for mode in modes {
            for index in 0..producers {
                let topic = hammered(mode);
                let producer = producer(address)?;
                let (stop, sends) = (stop.clone(), sends.clone());
                tasks.push(tokio::spawn(async move {
                    let mut record = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("{index}-{record}").into_bytes();
                        let sent = client::ProducerRecord::new(topic.as_str(), b"x".to_vec()).key(key);
                        if let Ok(delivery) = producer.send(sent).await {
                            let _ = delivery.await;
                        }
                        record += 1;
                        sends.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
        }
        Ok(Hammer { stop, sends, tasks })
    }

    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = task.await;
        }
        self.sends.load(Ordering::Relaxed)
    }
}

async fn rounds(args: &IsolationArgs, address: &str) -> anyhow::Result<()> {
    let probe_producer = producer(address)?;
    probe(&probe_producer, args.probe_records.min(200)).await?; // warm up: connections, metadata
    let (mut p50_ratios, mut p99_ratios) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds {
        let mut quiet = None;
        let mut hammered = None;
        for hammer_on in if round % 2 == 1 { [false, true] } else { [true, false] } {
            if !hammer_on {
                quiet = Some(probe(&probe_producer, args.probe_records).await?);
                continue;
            }
            let hammer = Hammer::start(address, &args.hostile, args.hammer_producers)?;
            let started = Instant::now();
            let latencies = probe(&probe_producer, args.probe_records).await?;
            let sends = hammer.stop().await;
            let rate = sends as f64 / started.elapsed().as_secs_f64();
            eprintln!("round {round}: hammer made {sends} failing sends ({rate:.0}/s) during the probe");
            hammered = Some(latencies);
        }
        let (quiet, hammered) = (quiet.expect("measured"), hammered.expect("measured"));
        let at = |histogram: &Histogram<u64>, quantile: f64| histogram.value_at_quantile(quantile) as f64;
        let (p50, p99) = (at(&hammered, 0.5) / at(&quiet, 0.5), at(&hammered, 0.99) / at(&quiet, 0.99));
        println!(
            "round {round}: probe p50 {:.0} µs quiet, {:.0} µs hammered ({p50:.2}×); p99 {:.0} µs quiet, {:.0} µs \
             hammered ({p99:.2}×)",
            at(&quiet, 0.5),
            at(&hammered, 0.5),
            at(&quiet, 0.99),
            at(&hammered, 0.99),
        );
        p50_ratios.push(p50);
        p99_ratios.push(p99);
    }
    println!(
        "median hammered / quiet: p50 {:.2}×, p99 {:.2}× (target ≤ 1.5 each; {} rounds, {} probe records each)",
        crate::report::median(&mut p50_ratios),
        crate::report::median(&mut p99_ratios),
        args.rounds,
        args.probe_records
    );
    Ok(())
}

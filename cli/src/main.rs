//! `weir`: the one command for running a Weir broker and talking to it.
//!
//! Subcommands live in their own modules: `serve` (run the broker), `cluster`
//! (brokers and the controller), `topic`,
//! `group`, `plugin` and `transform` (admin of topics, consumer groups, plugins
//! and transform deployments), `produce` and `consume`
//! (records over stdin/stdout), `bench`
//! (throughput and latency next to the machine's loopback bandwidth) and
//! `dump_log` (print the batches of a segment file), `repair` (find and cut the
//! damage in a fenced partition). Client commands share
//! [`ClientArgs`]: `--brokers` (env `WEIR_BROKERS`) and `--format text|json`.
//!
//! Exit codes: 0 success, 1 runtime failure (reported on stderr), 2 bad usage
//! (clap's own report).

mod bench;
mod cluster;
mod consume;
mod dump_log;
mod group;
mod output;
mod plugin;
mod plugin_new;
mod produce;
mod repair;
mod serve;
mod topic;
mod transform;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

/// Weir: a durable event-streaming broker with WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a broker: by default a single node (a controller quorum of one), data
    /// under a local directory, no external services; with --node-id and
    /// --controller-voters, one broker of a cluster.
    ///
    /// Settings come from (lowest to highest) built-in defaults, the TOML file
    /// given with --config (see broker/server/weir.example.toml), environment
    /// variables and flags. Shuts down cleanly on Ctrl-C / SIGTERM.
    Serve(serve::ServeArgs),
    /// Show the cluster: brokers with their epoch and state, the active controller.
    Cluster {
        #[command(subcommand)]
        command: cluster::ClusterCommand,
    },
    /// Create, list, describe, delete topics and change their configs.
    Topic {
        #[command(subcommand)]
        command: topic::TopicCommand,
    },
    /// Upload, list, describe and delete WebAssembly plugins; read their logs.
    Plugin {
        #[command(subcommand)]
        command: plugin::PluginCommand,
    },
    /// Deploy transform plugins over topics; list, describe, pause, resume, replay, delete them.
    Transform {
        #[command(subcommand)]
        command: transform::TransformCommand,
    },
    /// List, describe (members, committed offsets, lag), reset and delete consumer groups.
    Group {
        #[command(subcommand)]
        command: group::GroupCommand,
    },
    /// Produce one record per line of stdin; prints how many were acknowledged.
    Produce(produce::ProduceArgs),
    /// Print records of a topic (one per line; --format json for objects), alone
    /// or as a member of a consumer group (--group).
    Consume(consume::ConsumeArgs),
    /// Measure produce or consume throughput and latency against a broker.
    Bench {
        #[command(subcommand)]
        command: bench::BenchCommand,
    },
    /// Find the damage in a partition directory that the broker fenced, and with
    /// --truncate (broker stopped) cut the log at its last valid batch.
    ///
    /// Without --truncate it only reads, and exits 1 when it finds damage. With it,
    /// the cut bytes go to <segment>.log.torn-at-<position> and later segments to
    /// <segment>.log.removed-by-repair: nothing is deleted.
    Repair(repair::RepairArgs),
    /// Print the batches (and optionally records) of a segment `.log` file.
    DumpLog {
        /// A segment file, e.g. weir-data/orders-0/00000000000000000000.log
        file: PathBuf,
        /// Also decode and print every record.
        #[arg(long)]
        records: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

/// How commands print results.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

/// Options every client command takes.
#[derive(Clone, Debug, Args)]
struct ClientArgs {
    /// Brokers to bootstrap from: HOST:PORT[,HOST:PORT…].
    #[arg(long, env = "WEIR_BROKERS", default_value = client::DEFAULT_BOOTSTRAP_SERVERS)]
    brokers: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

impl ClientArgs {
    fn common(&self) -> client::CommonConfig {
        client::CommonConfig { bootstrap_servers: self.brokers.clone(), ..client::CommonConfig::default() }
    }
}

/// Runs a client command on a small multi-threaded runtime.
fn block_on<F: std::future::Future<Output = anyhow::Result<()>>>(future: F) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(future)
}

/// Keeps large buffers (multi-MiB requests and fetches) in the heap instead of
/// fresh `mmap`s: glibc maps each allocation above its threshold anew, and the
/// page faults and zeroing of those pages cost more CPU than the copies they hold
/// (measured: ~30% of a catch-up consumer's time). Memory is still bounded by the
/// broker's and clients' own `*_max` limits.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only sets allocator parameters; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 * 1024 * 1024);
    }
}

fn main() -> ExitCode {
    tune_allocator();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Cluster { command } => block_on(cluster::run(command)),
        Command::Topic { command } => block_on(topic::run(command)),
        Command::Group { command } => block_on(group::run(command)),
        Command::Plugin { command } => block_on(plugin::run(command)),
        Command::Transform { command } => block_on(transform::run(command)),
        Command::Produce(args) => block_on(produce::run(args)),
        Command::Consume(args) => {
            if let Err(problem) = args.check() {
                let mut command = Cli::command();
                command.build();
                let consume = command.find_subcommand_mut("consume").expect("`consume` is a subcommand of weir");
                consume.error(clap::error::ErrorKind::ArgumentConflict, problem).exit();
            }
            block_on(consume::run(args))
        }
        Command::Bench { command } => block_on(bench::run(command)),
        Command::Repair(args) => repair::run(&args),
        Command::DumpLog { file, records, format } => dump_log::run(&file, records, format),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", error_chain(&error));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes joined by `: `, skipping a cause whose text the
/// message before it already ends with (many errors print their source too).
fn error_chain(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.ends_with(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot listen on 127.0.0.1:9292: {source}")]
    struct Bind {
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn a_cause_the_message_already_ends_with_is_printed_once() {
        let source = std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address already in use (os error 98)");
        let error = anyhow::Error::from(Bind { source });
        assert_eq!(error_chain(&error), "cannot listen on 127.0.0.1:9292: Address already in use (os error 98)");
        let error = anyhow::anyhow!("disk full").context("writing the checkpoint");
        assert_eq!(error_chain(&error), "writing the checkpoint: disk full");
    }
}

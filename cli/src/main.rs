//! `weir`: the one command for running a Weir broker and inspecting its data.
//!
//! Subcommands live in their own modules: `serve` (run the broker on a data
//! directory) and `dump_log` (print the batches of a segment file). Client commands
//! (`topic`, `produce`, `consume`, `bench`) arrive with the RPC interface.
//!
//! Exit codes: 0 success, 1 runtime failure (reported on stderr), 2 bad usage
//! (clap's own report).

mod dump_log;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Weir: a durable event-streaming broker with WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a broker on a local data directory (single node, no external services).
    ///
    /// Opens every partition log under the data directory, recovering any that
    /// were not shut down cleanly, runs retention and background flushing, and
    /// shuts down cleanly on Ctrl-C / SIGTERM. The client interface (Cap'n Proto
    /// RPC) is not served yet.
    Serve {
        /// Where partition logs live.
        #[arg(long, env = "WEIR_DATA_DIR", default_value = "./weir-data")]
        data_dir: PathBuf,
        /// How often retention runs, in milliseconds.
        #[arg(long, default_value_t = 300_000)]
        retention_check_interval_ms: u64,
    },
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve { data_dir, retention_check_interval_ms } => serve::run(data_dir, retention_check_interval_ms),
        Command::DumpLog { file, records, format } => dump_log::run(&file, records, format),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

//! `weir serve`: opens the data directory, keeps partitions recovered, retained and
//! flushed, and shuts down cleanly on Ctrl-C or SIGTERM.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use broker::{LogDir, LogDirConfig};
use tracing_subscriber::EnvFilter;

pub fn run(data_dir: PathBuf, retention_check_interval_ms: u64) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let mut config = LogDirConfig::new(data_dir.clone());
    config.retention_check_interval_ms = retention_check_interval_ms;
    let log_dir = LogDir::open(config).with_context(|| format!("opening data directory {}", data_dir.display()))?;
    let partition_count = log_dir.partitions().len();
    let offline = log_dir.offline();
    tracing::info!(data_dir = %data_dir.display(), partition_count, offline_count = offline.len(), "data directory open");
    tracing::info!("serving partition logs (the client RPC interface is not available yet); Ctrl-C to stop");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("starting the runtime")?;
    runtime.block_on(shutdown_signal())?;
    tracing::info!("shutting down");
    let errors = log_dir.shutdown();
    for (partition, error) in &errors {
        tracing::error!(%partition, %error, "partition did not close cleanly");
    }
    anyhow::ensure!(errors.is_empty(), "{} partition(s) did not close cleanly", errors.len());
    tracing::info!("stopped cleanly");
    Ok(())
}

async fn shutdown_signal() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("waiting for Ctrl-C")?,
        _ = terminate.recv() => {}
    }
    Ok(())
}

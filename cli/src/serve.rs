//! `weir serve`: loads the broker config (defaults < file < env < flags), runs the
//! broker until Ctrl-C or SIGTERM, then shuts down cleanly.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Context;
use broker::{BrokerConfig, ConfigOverrides};
use tracing_subscriber::EnvFilter;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// A TOML config file (unknown keys are errors).
    #[arg(long, env = "WEIR_CONFIG")]
    config: Option<PathBuf>,
    /// Where partition logs and cluster metadata live [default: ./weir-data].
    #[arg(long, env = "WEIR_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Address to accept clients on [default: 127.0.0.1:9292].
    #[arg(long, env = "WEIR_LISTEN", value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Address clients are told to connect to, when it differs from --listen.
    #[arg(long, env = "WEIR_ADVERTISED_LISTENER", value_name = "HOST:PORT")]
    advertised_listener: Option<String>,
    /// This broker's id in the cluster [default: 0].
    #[arg(long, env = "WEIR_NODE_ID", value_name = "N")]
    node_id: Option<i32>,
    /// The controller quorum's voters, each broker's id and --listen address
    /// [default: this broker alone]. A broker whose --node-id is not among them
    /// joins the cluster as a broker only (it follows the metadata log).
    #[arg(long, env = "WEIR_CONTROLLER_VOTERS", value_name = "ID@HOST:PORT,...")]
    controller_voters: Option<String>,
}

pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let overrides = ConfigOverrides {
        listen: args.listen,
        data_dir: args.data_dir,
        advertised_listener: args.advertised_listener,
        broker_id: args.node_id,
        controller_voters: args.controller_voters,
    };
    let config = BrokerConfig::load(args.config.as_deref(), &overrides)?;
    tracing::info!(data_dir = %config.data_dir.display(), "starting broker");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let signal = shutdown_signal()?;
        broker::run(config, signal).await.map_err(anyhow::Error::from)
    })
}

/// Resolves on Ctrl-C or SIGTERM.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    Ok(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
    })
}

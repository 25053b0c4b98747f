//! Partitioner plugins in the producer: when a topic's metadata names one, the
//! producer fetches the module by digest (once per process and configuration),
//! compiles it with the same wasmtime host the broker uses, and asks it for the
//! partition of every record sent without an explicit partition. The plugin
//! answers a partition or "the built-in choice" (Kafka murmur2 of the key,
//! round-robin without one), so every SDK over this core places a record the
//! same way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use abi::ErrorCode;
use plugin_host::{HookKind, HostLimits, PackedBatch, Plugin, PluginEngine, PluginLog, PluginMetrics};

use crate::admin::Admin;
use crate::cluster::{Cluster, PartitionerRef};
use crate::error::ClientError;

static ENGINE: OnceLock<PluginEngine> = OnceLock::new();

fn engine() -> Result<&'static PluginEngine, ClientError> {
    if let Some(engine) = ENGINE.get() {
        return Ok(engine);
    }
    let limits = HostLimits { instances_max: 16, ..HostLimits::default() };
    let engine = PluginEngine::new(limits).map_err(|error| failed(&error.to_string()))?;
    Ok(ENGINE.get_or_init(|| engine))
}

fn failed(message: &str) -> ClientError {
    ClientError::broker(ErrorCode::PluginFailed, format!("partitioner plugin: {message}"))
}

/// The partitioners a producer has loaded.
#[derive(Default)]
pub(crate) struct Partitioners {
    loaded: Mutex<HashMap<PartitionerRef, Arc<Mutex<Plugin>>>>,
}

impl std::fmt::Debug for Partitioners {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Partitioners").finish_non_exhaustive()
    }
}

impl Partitioners {
    /// The running partitioner of `reference`, fetched and started on first use.
    pub(crate) async fn get(
        &self,
        cluster: &Arc<Cluster>,
        request_timeout: Duration,
        reference: &PartitionerRef,
    ) -> Result<Arc<Mutex<Plugin>>, ClientError> {
        if let Some(plugin) = self.loaded.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(reference) {
            return Ok(plugin.clone());
        }
        let wasm = Admin::with_cluster(cluster.clone(), request_timeout).fetch_plugin(&reference.digest).await?;
        if plugin_host::hex_sha256(&wasm) != reference.digest {
            return Err(failed("the fetched module does not match its digest"));
        }
        let engine = engine()?;
        let compiled = tokio::task::spawn_blocking(move || engine.compile(&wasm))
            .await
            .map_err(|error| failed(&error.to_string()))?
            .map_err(|error| failed(&error.to_string()))?;
        if compiled.kind() != HookKind::Partitioner {
            return Err(failed(&format!("{} is a {}", reference.plugin, compiled.kind().name())));
        }
        let log = Arc::new(PluginLog::new(64, 1024));
        let plugin =
            Plugin::start(Arc::new(compiled), reference.config.clone(), log, Arc::new(PluginMetrics::default()))
                .map_err(|error| failed(&error.to_string()))?;
        let plugin = Arc::new(Mutex::new(plugin));
        self.loaded.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(reference.clone(), plugin.clone());
        Ok(plugin)
    }
}

/// The plugin's partition for one record (`None`: the built-in choice).
pub(crate) fn choose(
    plugin: &Mutex<Plugin>,
    topic: &str,
    partition_count: u32,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: &[(&str, Option<&[u8]>)],
    timestamp_ms: i64,
) -> Result<Option<u32>, ClientError> {
    let mut batch = PackedBatch::new(-1, timestamp_ms);
    batch.push(0, timestamp_ms, key, value, headers.iter().copied());
    let mut plugin = plugin.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let partitions =
        plugin.partition(topic, partition_count, &mut batch).map_err(|error| failed(&error.to_string()))?;
    Ok(partitions.into_iter().next().flatten())
}

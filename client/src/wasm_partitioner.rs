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

/// How often a producer reports its partitioners' calls to a broker (and
/// once more when it closes).
pub(crate) const REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// A running partitioner and what of it was reported already.
struct Loaded {
    plugin: Arc<Mutex<Plugin>>,
    reference: PartitionerRef,
    log: Arc<PluginLog>,
    metrics: Arc<PluginMetrics>,
    reported: Mutex<Reported>,
}

#[derive(Default)]
struct Reported {
    calls: u64,
    errors: u64,
    busy_nanos: u64,
    /// Log entries ever pushed, as of the last report.
    log_entries: u64,
}

/// The partitioners a producer has loaded.
#[derive(Default)]
pub(crate) struct Partitioners {
    loaded: Mutex<HashMap<PartitionerRef, Arc<Loaded>>>,
    last_report: Mutex<Option<std::time::Instant>>,
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
        if let Some(loaded) = self.loaded.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(reference) {
            return Ok(loaded.plugin.clone());
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
        let metrics = Arc::new(PluginMetrics::default());
        let plugin = Plugin::start(Arc::new(compiled), reference.config.clone(), log.clone(), metrics.clone())
            .map_err(|error| failed(&error.to_string()))?;
        let plugin = Arc::new(Mutex::new(plugin));
        let loaded =
            Loaded { plugin: plugin.clone(), reference: reference.clone(), log, metrics, reported: Mutex::default() };
        self.loaded.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(reference.clone(), Arc::new(loaded));
        Ok(plugin)
    }

    /// Whether [`REPORT_INTERVAL`] has passed since the last report (and
    /// starts the next interval when it has).
    pub(crate) fn report_due(&self) -> bool {
        let mut last = self.last_report.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = std::time::Instant::now();
        match *last {
            Some(at) if now.duration_since(at) < REPORT_INTERVAL => false,
            _ => {
                *last = Some(now);
                true
            }
        }
    }

    /// What each partitioner did since the last report (none that did nothing).
    pub(crate) fn take_reports(&self) -> Vec<crate::plugins::PluginCallReport> {
        use std::sync::atomic::Ordering::Relaxed;
        let loaded: Vec<Arc<Loaded>> =
            self.loaded.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).values().cloned().collect();
        let mut reports = Vec::new();
        for loaded in loaded {
            let mut reported = loaded.reported.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let (calls, errors, busy_nanos) = (
                loaded.metrics.calls.load(Relaxed),
                loaded.metrics.errors.load(Relaxed),
                loaded.metrics.busy_nanos.load(Relaxed),
            );
            let entries = loaded.log.entries();
            let pushed = loaded.log.dropped() + entries.len() as u64;
            let fresh = (pushed - reported.log_entries).min(entries.len() as u64) as usize;
            if calls == reported.calls && fresh == 0 {
                continue;
            }
            reports.push(crate::plugins::PluginCallReport {
                plugin: loaded.reference.plugin.clone(),
                digest: loaded.reference.digest.clone(),
                calls: calls - reported.calls,
                errors: errors - reported.errors,
                busy_nanos: busy_nanos - reported.busy_nanos,
                log: entries[entries.len() - fresh..]
                    .iter()
                    .map(|entry| crate::plugins::PluginLogLine {
                        unix_ms: entry.unix_ms,
                        level: entry.level.to_owned(),
                        message: entry.message.clone(),
                    })
                    .collect(),
            });
            *reported = Reported { calls, errors, busy_nanos, log_entries: pushed };
        }
        reports
    }

    /// Sends what [`Partitioners::take_reports`] finds to a broker; a report
    /// that does not arrive is lost (they are counters for operators).
    pub(crate) async fn report(&self, cluster: &Arc<Cluster>, request_timeout: Duration) {
        let reports = self.take_reports();
        if reports.is_empty() {
            return;
        }
        let admin = Admin::with_cluster(cluster.clone(), request_timeout);
        if let Err(error) = admin.report_plugin_calls(reports).await {
            tracing::debug!(%error, "partitioner plugin calls not reported");
        }
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

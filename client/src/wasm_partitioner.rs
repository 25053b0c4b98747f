//! Partitioner plugins in the producer: when a topic's metadata names one, the
//! producer fetches the module by digest (once per process and configuration),
//! compiles it with the same wasmtime host the broker uses, and asks it for the
//! partition of every record sent without an explicit partition. The plugin
//! answers a partition or "the built-in choice" (Kafka murmur2 of the key,
//! round-robin without one), so every SDK over this core places a record the
//! same way.
//!
//! Compiling takes seconds for a Python or JavaScript component, so compiled
//! code is kept: once per process by digest while a producer uses it (a
//! long-lived process that meets many partitioners over time keeps only the
//! code of those in use), and between processes in a
//! per-user cache directory ([`cache_dir`]), where a later producer loads it
//! in milliseconds without fetching the module. What happened (compiled, or
//! loaded from the cache) is a line of the plugin's log, reported to the
//! broker with the calls.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use abi::ErrorCode;
use plugin_host::{CompiledPlugin, HookKind, HostLimits, PackedBatch, Plugin, PluginEngine, PluginLog, PluginMetrics};

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

/// Compiled partitioners that producers of this process use, by digest.
static COMPILED: OnceLock<Mutex<InUse<CompiledPlugin>>> = OnceLock::new();

/// Values by key, held weakly: a value is found while something else holds
/// it, and its entry goes at the next insert after the last holder drops it.
#[derive(Debug)]
struct InUse<T>(HashMap<String, Weak<T>>);

impl<T> Default for InUse<T> {
    fn default() -> InUse<T> {
        InUse(HashMap::new())
    }
}

impl<T> InUse<T> {
    fn get(&self, key: &str) -> Option<Arc<T>> {
        self.0.get(key).and_then(Weak::upgrade)
    }

    /// Keeps `value` findable under `key` (while it is held), dropping the
    /// entries of values no longer held.
    fn insert(&mut self, key: String, value: &Arc<T>) {
        self.0.retain(|_, held| held.strong_count() > 0);
        self.0.insert(key, Arc::downgrade(value));
    }
}

/// Artifacts the cache directory keeps (the least recently written go first).
const CACHED_MAX: usize = 16;

/// Where compiled partitioners are kept between processes:
/// `WEIR_PLUGIN_CACHE_DIR` (empty: nowhere), else `$XDG_CACHE_HOME/weir/plugins`,
/// else `$HOME/.cache/weir/plugins`.
fn cache_dir() -> Option<PathBuf> {
    let nonempty = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from);
    if let Some(dir) = std::env::var_os("WEIR_PLUGIN_CACHE_DIR") {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    nonempty("XDG_CACHE_HOME")
        .or_else(|| nonempty("HOME").map(|home| home.join(".cache")))
        .map(|cache| cache.join("weir").join("plugins"))
}

/// Whether `path` is this user's and nobody else may write to it: an artifact
/// is machine code, so only a file as trusted as the user's own is loaded.
fn trusted(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let user = unsafe { libc::geteuid() };
    std::fs::symlink_metadata(path).is_ok_and(|metadata| metadata.uid() == user && metadata.mode() & 0o022 == 0)
}

/// The cached artifact of `digest`, when there is one this engine can load.
fn load_cached(engine: &PluginEngine, dir: &Path, digest: &str) -> Option<CompiledPlugin> {
    let path = dir.join(format!("{digest}.cwasm"));
    if !trusted(dir) || !trusted(&path) {
        return None;
    }
    let bytes = std::fs::read(&path).ok()?;
    // SAFETY: the file was written by `store_cached` (of this or an earlier
    // process of this user; nobody else can write it, `trusted`), from
    // `CompiledPlugin::serialize`; wasmtime refuses an artifact of another
    // version or configuration, which is then compiled again.
    unsafe { engine.deserialize(&bytes, digest.to_owned()) }.ok()
}

/// Writes `compiled` to the cache (atomically; best effort) and keeps the
/// newest [`CACHED_MAX`] artifacts.
fn store_cached(dir: &Path, compiled: &CompiledPlugin) {
    use std::os::unix::fs::DirBuilderExt;
    let written = (|| -> std::io::Result<()> {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        let bytes = compiled.serialize().map_err(std::io::Error::other)?;
        let path = dir.join(format!("{}.cwasm", compiled.digest()));
        // Unique to this write: two producers of one process may compile the
        // same code at once.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let partial = dir.join(format!("{}.cwasm.{}-{write}.partial", compiled.digest(), std::process::id()));
        std::fs::write(&partial, bytes)?;
        std::fs::rename(&partial, &path)
    })();
    if let Err(error) = written {
        tracing::debug!(dir = %dir.display(), %error, "partitioner not cached");
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut artifacts: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "cwasm"))
        .filter_map(|path| Some((std::fs::metadata(&path).ok()?.modified().ok()?, path)))
        .collect();
    artifacts.sort();
    let excess = artifacts.len().saturating_sub(CACHED_MAX);
    for (_, path) in artifacts.into_iter().take(excess) {
        let _ = std::fs::remove_file(path);
    }
}

fn failed(message: &str) -> ClientError {
    ClientError::broker(ErrorCode::PluginFailed, format!("partitioner plugin: {message}"))
}

/// What report times count from (this process's first look).
fn report_epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
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
    /// Milliseconds after [`report_epoch`] of the last report, plus one (0: none yet).
    last_report: std::sync::atomic::AtomicU64,
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
        let log = Arc::new(PluginLog::new(64, 1024));
        let compiled = compiled(cluster, request_timeout, &reference.digest, &log).await?;
        if compiled.kind() != HookKind::Partitioner {
            return Err(failed(&format!("{} is a {}", reference.plugin, compiled.kind().name())));
        }
        let metrics = Arc::new(PluginMetrics::default());
        let plugin = Plugin::start(compiled, reference.config.clone(), log.clone(), metrics.clone())
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
        use std::sync::atomic::Ordering::Relaxed;
        let now = report_epoch().elapsed().as_millis() as u64 + 1;
        let last = self.last_report.load(Relaxed);
        if last != 0 && now - last < REPORT_INTERVAL.as_millis() as u64 {
            return false;
        }
        // One caller starts the next interval.
        self.last_report.compare_exchange(last, now, Relaxed, Relaxed).is_ok()
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
/// The compiled code of `digest`: this process's, the cache's, or fetched from
/// a broker and compiled (then cached). Notes in `log` which.
async fn compiled(
    cluster: &Arc<Cluster>,
    request_timeout: Duration,
    digest: &str,
    log: &Arc<PluginLog>,
) -> Result<Arc<CompiledPlugin>, ClientError> {
    let in_process = COMPILED.get_or_init(Mutex::default);
    if let Some(compiled) = in_process.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(digest) {
        return Ok(compiled);
    }
    let engine = engine()?;
    let dir = cache_dir();
    let owned = (digest.to_owned(), dir.clone());
    let cached = tokio::task::spawn_blocking(move || owned.1.and_then(|dir| load_cached(engine, &dir, &owned.0)))
        .await
        .map_err(|error| failed(&error.to_string()))?;
    let compiled = match cached {
        Some(compiled) => {
            let dir = dir.as_deref().map(Path::display);
            log.push("info", format!("host: loaded {digest} from the compile cache in {}", dir.expect("cached")));
            compiled
        }
        None => {
            let wasm = Admin::with_cluster(cluster.clone(), request_timeout).fetch_plugin(digest).await?;
            if plugin_host::hex_sha256(&wasm) != digest {
                return Err(failed("the fetched module does not match its digest"));
            }
            let size = wasm.len();
            let started = Instant::now();
            let compiled = tokio::task::spawn_blocking(move || {
                let compiled = engine.compile(&wasm)?;
                if let Some(dir) = dir {
                    store_cached(&dir, &compiled);
                }
                Ok::<_, plugin_host::PluginError>(compiled)
            })
            .await
            .map_err(|error| failed(&error.to_string()))?
            .map_err(|error| failed(&error.to_string()))?;
            let elapsed_ms = started.elapsed().as_millis();
            log.push("info", format!("host: compiled {digest} ({size} bytes) in {elapsed_ms} ms"));
            compiled
        }
    };
    let compiled = Arc::new(compiled);
    in_process.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(digest.to_owned(), &compiled);
    Ok(compiled)
}

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn code_is_found_while_held_and_forgotten_once_dropped() {
        let mut in_use = InUse::default();
        let first = Arc::new(String::from("code of a"));
        in_use.insert("a".to_owned(), &first);
        assert!(Arc::ptr_eq(&in_use.get("a").unwrap(), &first), "the same code while a producer holds it");
        assert!(in_use.get("b").is_none());
        drop(first);
        assert!(in_use.get("a").is_none(), "no producer holds it: loaded or compiled again");
        let second = Arc::new(String::from("code of b"));
        in_use.insert("b".to_owned(), &second);
        assert_eq!(in_use.0.len(), 1, "the dropped entry went with the next insert");
        assert_eq!(*in_use.get("b").unwrap(), "code of b");
    }
}

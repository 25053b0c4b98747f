//! [`LogDir`]: every partition log under one broker's data directory, plus the
//! background work they need.
//!
//! Layout: `<data_dir>/<topic>-<partition>/` per partition (topic names may contain
//! `-`; the partition number is after the last one). Opening the data directory
//! opens (and, after an unclean stop, recovers) every partition; a partition whose
//! recovery finds corruption stays *offline* with its error while the others serve.
//!
//! One background thread wakes every `tick_ms` and: queues a flush round for
//! partitions under `flush.policy=interval` whose `flush.ms` elapsed, and applies
//! retention every `retention_check_interval_ms` (file deletion happens without the
//! partition lock, so appends are never blocked by it).
//!
//! [`LogDir::shutdown`] stops the thread and closes every partition cleanly (flush,
//! checkpoint, clean-shutdown marker), so the next start scans nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use broker_core::clock::Clock;
use broker_core::log::{FlushPolicy, LogConfig, LogError};

use crate::environment::{Environment, SystemClock};
use crate::flusher::Flusher;
use crate::partition::{lock, Partition};

/// Settings of the data directory.
#[derive(Clone, Debug)]
pub struct LogDirConfig {
    pub data_dir: PathBuf,
    /// Config of partitions (per-topic overrides arrive with topic management).
    pub log: LogConfig,
    /// Threads running fdatasync rounds.
    pub flush_threads: usize,
    /// How often retention runs (`log.retention.check.interval.ms`).
    pub retention_check_interval_ms: u64,
    /// Longest wait, at the start of a group-commit round, for appenders released by
    /// the previous round to append again (0 disables). See `partition.rs`.
    pub group_commit_linger_us: u64,
    /// Storage and clock (real files and the system clock by default).
    pub environment: Environment,
}

impl LogDirConfig {
    /// Defaults for `data_dir`.
    pub fn new(data_dir: PathBuf) -> LogDirConfig {
        LogDirConfig {
            data_dir,
            log: LogConfig::default(),
            flush_threads: 2,
            retention_check_interval_ms: 300_000,
            group_commit_linger_us: 200,
            environment: Environment::real(),
        }
    }
}

/// A partition that could not be opened, and why.
#[derive(Debug)]
struct OfflinePartition {
    name: String,
    error: LogError,
}

/// Why a partition could not be created.
#[derive(Debug, thiserror::Error)]
pub enum CreatePartitionError {
    /// Topic names are 1–249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidTopicName { name: String, reason: &'static str },
    #[error(transparent)]
    Log(#[from] LogError),
}

/// Checks a topic name against Kafka's rules (it becomes a directory name).
pub fn validate_topic_name(name: &str) -> Result<(), CreatePartitionError> {
    let invalid = |reason| Err(CreatePartitionError::InvalidTopicName { name: name.to_owned(), reason });
    if name.is_empty() || name.len() > 249 {
        return invalid("must be 1 to 249 characters");
    }
    if name == "." || name == ".." {
        return invalid("must not be . or ..");
    }
    if !name.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-')) {
        return invalid("may only contain ASCII letters, digits, '.', '_' and '-'");
    }
    Ok(())
}

/// The open data directory.
#[derive(Debug)]
pub struct LogDir {
    shared: Arc<Shared>,
    background: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    config: LogDirConfig,
    flusher: Flusher,
    partitions: Mutex<BTreeMap<String, Partition>>,
    offline: Mutex<Vec<OfflinePartition>>,
    stop: Mutex<bool>,
    wake: Condvar,
    /// Makes deletion names unique.
    deleted_count: std::sync::atomic::AtomicU64,
}

/// Milliseconds since the Unix epoch, by the system clock.
pub fn now_ms() -> i64 {
    SystemClock.now_ms()
}

/// Splits `orders-3` into `("orders", 3)`.
pub fn parse_partition_dir(name: &str) -> Option<(&str, u32)> {
    let (topic, partition) = name.rsplit_once('-')?;
    if topic.is_empty() || partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((topic, partition.parse().ok()?))
}

impl LogDir {
    /// Opens every partition under `config.data_dir` (creating the directory), all
    /// with `config.log`.
    pub fn open(config: LogDirConfig) -> Result<LogDir, LogError> {
        let defaults = config.log.clone();
        LogDir::open_with(config, |_| PartitionDirFate::Open(defaults.clone()))
    }

    /// Opens the partition directories under `config.data_dir` as `fate_of` (given
    /// the directory name, e.g. `orders-3`) decides: open with a config, delete (a
    /// deletion the owner recorded but did not finish), or leave untouched (not
    /// ours to judge: never delete data nobody said was deleted). Leftovers of
    /// partitions renamed for deletion are removed.
    pub fn open_with(config: LogDirConfig, fate_of: impl Fn(&str) -> PartitionDirFate) -> Result<LogDir, LogError> {
        config.log.validate()?;
        let data_dir = config.data_dir.clone();
        config.environment.storage.create_dir_all(&data_dir).map_err(|source| LogError::Io {
            op: "create directory",
            path: data_dir.clone(),
            source,
        })?;
        let flusher = Flusher::start(config.flush_threads);
        let shared = Arc::new(Shared {
            config,
            flusher,
            partitions: Mutex::new(BTreeMap::new()),
            offline: Mutex::new(Vec::new()),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            deleted_count: std::sync::atomic::AtomicU64::new(0),
        });
        let mut names = shared.config.environment.storage.list_dir(&data_dir).map_err(|source| LogError::Io {
            op: "list directory",
            path: data_dir.clone(),
            source,
        })?;
        names.sort();
        for name in names {
            if is_deleted_leftover(&name) {
                shared.remove_dir(&data_dir.join(&name));
                continue;
            }
            if parse_partition_dir(&name).is_none() {
                continue;
            }
            let log_config = match fate_of(&name) {
                PartitionDirFate::Open(log_config) => log_config,
                PartitionDirFate::Delete => {
                    tracing::info!(partition = %name, "finishing the deletion of a partition");
                    if let Err(error) = shared.delete_dir(&name) {
                        tracing::warn!(partition = %name, %error, "could not delete a deleted partition");
                    }
                    continue;
                }
                PartitionDirFate::Leave => {
                    tracing::warn!(directory = %name, "not a partition of any topic; left untouched");
                    continue;
                }
            };
            match shared.open_partition(&name, log_config) {
                Ok(partition) => {
                    lock(&shared.partitions).insert(name, partition);
                }
                Err(error) => {
                    tracing::error!(partition = %name, %error, "partition offline");
                    lock(&shared.offline).push(OfflinePartition { name, error });
                }
            }
        }
        let background = {
            let shared = shared.clone();
            thread::Builder::new()
                .name("weir-log-dir".to_owned())
                .spawn(move || shared.run_background())
                .map_err(|source| LogError::Io { op: "spawn background thread", path: data_dir, source })?
        };
        Ok(LogDir { shared, background: Some(background) })
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.shared.config.data_dir
    }

    /// Whether the data directory holds an entry `name` (open, offline or not a
    /// partition of anything).
    pub fn holds(&self, name: &str) -> bool {
        self.shared.config.environment.storage.exists(&self.shared.config.data_dir.join(name))
    }

    /// Creates (or opens) the log of `topic`'s `partition`. The partition map stays
    /// locked while it opens, so one directory is never opened twice.
    pub fn create_partition(&self, topic: &str, partition: u32) -> Result<Partition, CreatePartitionError> {
        self.create_partition_with(topic, partition, self.shared.config.log.clone())
    }

    /// [`LogDir::create_partition`] with a config of its own (a topic's overrides).
    pub fn create_partition_with(
        &self,
        topic: &str,
        partition: u32,
        config: LogConfig,
    ) -> Result<Partition, CreatePartitionError> {
        validate_topic_name(topic)?;
        let name = format!("{topic}-{partition}");
        let mut partitions = lock(&self.shared.partitions);
        if let Some(existing) = partitions.get(&name) {
            return Ok(existing.clone());
        }
        let opened = self.shared.open_partition(&name, config)?;
        partitions.insert(name, opened.clone());
        Ok(opened)
    }

    /// Closes the partition `name` (if open, or forgets it if offline) and deletes
    /// its directory: first renamed aside (atomic, made durable), then removed, so a
    /// crash midway leaves either the whole partition or a leftover the next start
    /// deletes. Readers holding the partition get "closed" errors from then on.
    pub fn delete_partition(&self, name: &str) -> Result<(), LogError> {
        if let Some(partition) = lock(&self.shared.partitions).remove(name) {
            if let Err(error) = partition.close() {
                tracing::warn!(partition = %name, %error, "closing a deleted partition failed");
            }
        }
        lock(&self.shared.offline).retain(|offline| offline.name != name);
        self.shared.delete_dir(name)
    }

    /// The open partition named `topic-partition`.
    pub fn partition(&self, name: &str) -> Option<Partition> {
        lock(&self.shared.partitions).get(name).cloned()
    }

    /// Every open partition, by name.
    pub fn partitions(&self) -> Vec<Partition> {
        lock(&self.shared.partitions).values().cloned().collect()
    }

    /// Names and errors of partitions that failed to open.
    pub fn offline(&self) -> Vec<(String, String)> {
        lock(&self.shared.offline).iter().map(|offline| (offline.name.clone(), offline.error.to_string())).collect()
    }

    /// Stops background work and closes every partition cleanly. Returns the
    /// errors of partitions that could not be closed cleanly.
    pub fn shutdown(mut self) -> Vec<(String, LogError)> {
        self.stop_background();
        let partitions = std::mem::take(&mut *lock(&self.shared.partitions));
        let mut errors = Vec::new();
        for (name, partition) in partitions {
            if let Err(error) = partition.close() {
                errors.push((name, error));
            }
        }
        errors
    }

    fn stop_background(&mut self) {
        *lock(&self.shared.stop) = true;
        self.shared.wake.notify_all();
        if let Some(background) = self.background.take() {
            let _ = background.join();
        }
    }
}

impl Drop for LogDir {
    fn drop(&mut self) {
        self.stop_background();
    }
}

impl Shared {
    fn remove_dir(&self, path: &Path) {
        remove_dir(&*self.config.environment.storage, path);
    }

    fn open_partition(&self, name: &str, config: LogConfig) -> Result<Partition, LogError> {
        let dir = self.config.data_dir.join(name);
        let linger = Duration::from_micros(self.config.group_commit_linger_us);
        let partition = Partition::open(
            self.config.environment.clone(),
            name.to_owned(),
            dir,
            config,
            self.flusher.clone(),
            linger,
        )?;
        let report = partition.with_log(|log| Ok(log.recovery_report().clone()))?;
        let repaired = report.segments_scanned > 0 || report.truncated_bytes > 0 || report.segments_removed > 0;
        if let Some(tail) = &report.truncated_tail {
            tracing::warn!(
                partition = %name,
                segment = tail.segment_base_offset,
                position = tail.position,
                log_end_offset = tail.offset,
                truncated_bytes = tail.bytes,
                moved_to = %tail.moved_to.display(),
                reason = %tail.reason,
                "cut a torn or garbage tail after an unclean stop; the bytes are kept aside"
            );
        }
        if !report.clean_shutdown && repaired {
            tracing::warn!(
                partition = %name,
                segments_scanned = report.segments_scanned,
                truncated_bytes = report.truncated_bytes,
                segments_removed = report.segments_removed,
                "recovered after an unclean stop"
            );
        }
        Ok(partition)
    }

    /// Renames `<name>` to `<name>.<ms>-<n>.deleted` (unique), syncs the data
    /// directory, then removes the renamed tree on a thread of its own. A missing
    /// directory is fine; a failed rename is an error (the data is still there).
    /// A failed removal is logged: the leftover is removed at the next start.
    fn delete_dir(&self, name: &str) -> Result<(), LogError> {
        let data_dir = &self.config.data_dir;
        let unique = self.deleted_count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let now_ms = self.config.environment.clock.now_ms();
        let doomed = data_dir.join(format!("{name}.{now_ms}-{unique}{DELETED_SUFFIX}"));
        let source = data_dir.join(name);
        let storage = &self.config.environment.storage;
        match storage.rename(&source, &doomed) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(error) => return Err(LogError::Io { op: "rename for deletion", path: source, source: error }),
        }
        storage.sync_dir(data_dir).map_err(|source| LogError::Io {
            op: "sync directory",
            path: data_dir.clone(),
            source,
        })?;
        // Removing gigabytes of segments takes a while: not on the caller's
        // (RPC) thread. The rename above already made the deletion durable.
        let removal = std::thread::Builder::new().name("weir-delete".to_owned()).spawn({
            let doomed = doomed.clone();
            let storage = storage.clone();
            move || remove_dir(&*storage, &doomed)
        });
        if removal.is_err() {
            remove_dir(&**storage, &doomed);
        }
        Ok(())
    }

    fn run_background(&self) {
        let config = &self.config;
        // Topics may override `flush.ms`: tick often enough for small overrides.
        let tick_ms = config.log.flush_interval_ms.min(config.retention_check_interval_ms).clamp(10, 100);
        let clock = &config.environment.clock;
        let mut last_retention_ms = clock.now_ms();
        loop {
            let stop = lock(&self.stop);
            let (stop, _) = self
                .wake
                .wait_timeout_while(stop, Duration::from_millis(tick_ms), |stop| !*stop)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if *stop {
                return;
            }
            drop(stop);
            let now = clock.now_ms();
            let partitions: Vec<Partition> = lock(&self.partitions).values().cloned().collect();
            for partition in &partitions {
                let partition_config = partition.config();
                if partition_config.flush_policy == FlushPolicy::Interval
                    && now - partition.last_flush_ms() >= partition_config.flush_interval_ms as i64
                {
                    partition.schedule_round();
                }
            }
            if now - last_retention_ms >= config.retention_check_interval_ms as i64 {
                last_retention_ms = now;
                partitions.iter().for_each(|partition| apply_retention(partition, now));
            }
        }
    }
}

/// Marks a partition directory renamed for deletion.
const DELETED_SUFFIX: &str = ".deleted";

/// What [`LogDir::open_with`] does with one partition directory.
#[derive(Clone, Debug)]
pub enum PartitionDirFate {
    Open(LogConfig),
    Delete,
    Leave,
}

/// `orders-3.1795988674529-0.deleted`: a partition renamed by `delete_dir`.
fn is_deleted_leftover(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(DELETED_SUFFIX) else { return false };
    let Some((partition_dir, stamp)) = stem.rsplit_once('.') else { return false };
    parse_partition_dir(partition_dir).is_some()
        && !stamp.is_empty()
        && stamp.bytes().all(|byte| byte.is_ascii_digit() || byte == b'-')
}

fn remove_dir(storage: &dyn broker_core::storage::Storage, path: &Path) {
    if let Err(error) = storage.remove_dir_all(path) {
        tracing::warn!(path = %path.display(), %error, "could not remove a deleted partition's directory");
    }
}

fn apply_retention(partition: &Partition, now: i64) {
    match partition.apply_retention(now) {
        Ok((0, _)) => {}
        Ok((segment_count, size_bytes)) => {
            tracing::info!(partition = %partition.name(), segment_count, size_bytes, "retention deleted segments");
        }
        Err(error) => tracing::warn!(partition = %partition.name(), %error, "retention failed"),
    }
}

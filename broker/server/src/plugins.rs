//! The broker's plugins: uploads stored by content under `<data>/plugins/`, the
//! registry of names and attachments (`plugins/registry.json`, replaced
//! atomically), and the interceptor calls on the produce and fetch paths.
//!
//! - An upload is inspected before anything is stored (`plugin_host::inspect`:
//!   a component exporting one hook world, the hook it was uploaded as, only
//!   imports the host provides), which takes milliseconds. The bytes go to
//!   `<sha256>.wasm` and compile on a thread of their own (seconds for a
//!   Python or JavaScript component), one compile at a time in upload order
//!   (a compile already uses every core): the upload answers at once, and the
//!   plugin's state (`compiling`, `ready`, `failed` with the reason) is in its
//!   summary. Attaching a plugin or deploying a transform waits for its code.
//!   A failed compile stays failed until the same bytes are uploaded again,
//!   which compiles them again (a compile that ran out of memory, say).
//!   The compiled artifact is cached next to the bytes (`<sha256>.cwasm`, only
//!   ever written by this broker) so a restart does not recompile.
//! - An attachment runs `init(config)` when made (a refused configuration fails
//!   the attach) and again at start-up. Each attachment runs its calls on a
//!   [`PluginPool`]: instances on threads of their own, one lane per few
//!   partitions, so plugin code never runs on an RPC thread or an async worker
//!   and a slow plugin delays only the traffic that goes through it.
//! - Produce interceptors run on the leader before offsets are assigned and see
//!   the request's batches; a rejection refuses the request (`InvalidRecord`,
//!   with every reason), a rewrite re-encodes the batch with the same record
//!   count and producer fields (so idempotent sequences stay valid).
//! - Consume interceptors run on each fetched batch; kept records keep their
//!   offsets, dropped ones leave gaps, and a batch with nothing left becomes a
//!   control batch so consumers still move past it.
//! - A plugin that fails (error, trap, deadline, bad output) is handled by the
//!   attachment's policy: `fail-closed` refuses the request (`PluginFailed`),
//!   `fail-open` lets the records through unchanged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use abi::batch::{
    records_section_unverified, Attributes, BatchView, Header, Record, RecordBatch, RecordRefs, DECOMPRESSED_BYTES_MAX,
};
use abi::ErrorCode;
use plugin_host::{
    CompiledPlugin, ConsumeOutcome, HookKind, HostLimits, LogEntry, PackedBatch, Plugin, PluginEngine, PluginError,
    PluginLog, PluginMetrics, ProduceOutcome,
};
use serde::{Deserialize, Serialize};

use broker_core::cluster::{is_plugin_digest, AttachmentEntry, PluginEntry};

use crate::environment::Environment;
use crate::error::ApiError;
use crate::partition::lock;
use crate::plugin_pool::{Called, PluginPool, PoolLimits};

/// Why a plugin request or a plugin call failed. Typed here, converted to the
/// client's `ApiError` (and its `ErrorCode`) once, at the edge.
#[derive(Debug, thiserror::Error)]
pub enum PluginsError {
    /// A malformed request: a bad name or hook (`InvalidRequest`).
    #[error("{0}")]
    BadRequest(String),
    /// Not a component of the hook it claims, or bytes not matching their
    /// digest (`InvalidPlugin`).
    #[error("{0}")]
    InvalidPlugin(String),
    /// No plugin of that name or digest (`PluginNotFound`).
    #[error("{0}")]
    NotFound(String),
    /// `init` refused a configuration, or a bad failure policy (`InvalidConfig`).
    #[error("{0}")]
    InvalidConfig(String),
    /// A plugin call failed: error, trap, deadline, bad output (`PluginFailed`).
    #[error("plugin {plugin:?}: {error}")]
    Failed { plugin: String, error: PluginError },
    /// The plugin cannot run here now: not running, bytes not here yet, bad
    /// output (`PluginFailed`).
    #[error("{0}")]
    Unavailable(String),
    /// Records refused: by an interceptor, or not packable (`InvalidRecord`).
    #[error("{0}")]
    InvalidRecord(String),
    /// A batch that does not decode (`CorruptMessage`).
    #[error(transparent)]
    Corrupt(#[from] abi::batch::BatchError),
    /// The plugin directory could not be read or written (`StorageError`).
    #[error("{context}: {message}")]
    Storage { context: String, message: String },
}

impl From<PluginsError> for ApiError {
    fn from(error: PluginsError) -> ApiError {
        let code = match &error {
            PluginsError::BadRequest(_) => ErrorCode::InvalidRequest,
            PluginsError::InvalidPlugin(_) => ErrorCode::InvalidPlugin,
            PluginsError::NotFound(_) => ErrorCode::PluginNotFound,
            PluginsError::InvalidConfig(_) => ErrorCode::InvalidConfig,
            PluginsError::Failed { .. } | PluginsError::Unavailable(_) => ErrorCode::PluginFailed,
            PluginsError::InvalidRecord(_) => ErrorCode::InvalidRecord,
            PluginsError::Corrupt(_) => ErrorCode::CorruptMessage,
            PluginsError::Storage { .. } => ErrorCode::StorageError,
        };
        ApiError::new(code, error.to_string())
    }
}

const REGISTRY_FILE: &str = "registry.json";

/// What happens to records when an interceptor fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailurePolicy {
    /// Refuse the produce or fetch (`PluginFailed`).
    FailClosed,
    /// Let the records through unchanged.
    FailOpen,
}

impl FailurePolicy {
    pub fn parse(text: &str) -> Result<FailurePolicy, PluginsError> {
        match text {
            "" | "fail-closed" => Ok(FailurePolicy::FailClosed),
            "fail-open" => Ok(FailurePolicy::FailOpen),
            other => {
                Err(PluginsError::InvalidConfig(format!("failure policy {other:?} is not fail-closed or fail-open")))
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FailurePolicy::FailClosed => "fail-closed",
            FailurePolicy::FailOpen => "fail-open",
        }
    }
}

/// `plugins/registry.json`, where a broker kept its plugins and attachments
/// before they moved into the cluster metadata: read once, at the upgrade.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct LegacyRegistry {
    pub plugins: Vec<LegacyPlugin>,
    pub attachments: Vec<LegacyAttachment>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct LegacyPlugin {
    pub name: String,
    pub digest: String,
    pub hook: String,
    pub size_bytes: u64,
    pub uploaded_ms: i64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct LegacyAttachment {
    pub topic: String,
    pub hook: String,
    pub plugin: String,
    pub config: Vec<(String, String)>,
    pub policy: FailurePolicy,
}

/// A plugin of the cluster metadata, loaded on this broker.
struct Stored {
    entry: PluginEntry,
    compiled: Arc<CompiledPlugin>,
    log: Arc<PluginLog>,
    metrics: Arc<PluginMetrics>,
}

/// An attachment of the cluster metadata and this broker's instance of it
/// (`None` while its plugin's bytes are missing, or when `init` failed).
#[derive(Clone)]
struct Attachment {
    entry: AttachmentEntry,
    policy: FailurePolicy,
    /// The code its instance runs (a new upload of the plugin restarts it).
    digest: Option<String>,
    runner: Option<Arc<PluginPool>>,
    status: String,
    /// `init` refused this code and settings (tried again only when they change).
    init_failed: bool,
}

/// A partitioner plugin set on a topic, as metadata names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionerSetting {
    pub plugin: String,
    pub digest: String,
    pub config: Vec<(String, String)>,
}

/// Where a stored plugin's compiled code stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CodeState {
    /// Compiled: attachments and transforms can run it.
    Ready,
    /// Compiling on a thread of its own.
    Compiling,
    /// The compile failed, for this reason (the bytes are still stored).
    Failed(String),
    /// This broker does not hold the bytes.
    Missing,
}

/// A registered plugin whose code is not ready here: compiling, or failed
/// (with the reason).
#[derive(Clone)]
struct Unready {
    entry: PluginEntry,
    failed: Option<String>,
}

/// A running interceptor: plugin name, policy, instances.
type Interceptor = (String, FailurePolicy, Option<Arc<PluginPool>>);

/// A plugin as `listPlugins` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginSummary {
    pub name: String,
    pub hook: &'static str,
    pub digest: String,
    pub size_bytes: u64,
    pub uploaded_ms: i64,
    pub calls: u64,
    pub errors: u64,
    pub traps: u64,
    pub busy_nanos: u64,
    pub attached_to: Vec<String>,
    /// `ready`, `compiling`, `failed` (see `state_reason`) or `fetching` (the
    /// bytes are on their way to this broker).
    pub state: &'static str,
    /// Why the code failed to compile; empty otherwise.
    pub state_reason: String,
    /// Partitioner calls clients reported running this code (to this broker).
    pub client_calls: u64,
    pub client_errors: u64,
}

/// What a client reported of a partitioner plugin it runs (`reportPluginCalls`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientReport {
    pub plugin: String,
    pub digest: String,
    /// Who ran it, for the log lines.
    pub source: String,
    pub calls: u64,
    pub errors: u64,
    pub busy_nanos: u64,
    pub log: Vec<LogLine>,
}

/// A log line from elsewhere (a client).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    pub unix_ms: i64,
    pub level: String,
    pub message: String,
}

/// Log lines one report may add.
const CLIENT_LOG_LINES_MAX: usize = 16;

/// Client-reported counters of one plugin's code.
#[derive(Clone, Debug, Default)]
struct ClientUsage {
    digest: String,
    calls: u64,
    errors: u64,
    busy_nanos: u64,
}

/// An attachment as `listAttachments` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachmentSummary {
    pub topic: String,
    pub hook: &'static str,
    pub plugin: String,
    pub config: Vec<(String, String)>,
    pub policy: FailurePolicy,
    pub status: String,
}

/// What [`Plugins::follow`] follows: the registered plugins by name, and each
/// topic's attachments.
pub type FollowedImage = (BTreeMap<String, PluginEntry>, BTreeMap<String, Vec<AttachmentEntry>>);

/// An upload, validated and stored by digest (not registered yet).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredUpload {
    pub digest: String,
    pub hook: &'static str,
    pub size_bytes: u64,
    /// Why these bytes did not compile before this upload, which compiles
    /// them again.
    pub retried: Option<String>,
}

#[derive(Default)]
struct State {
    plugins: BTreeMap<String, Stored>,
    /// Topic → its interceptors, in attach order.
    attachments: BTreeMap<String, Vec<Attachment>>,
    /// Registered plugins whose bytes this broker does not hold yet.
    missing: BTreeMap<String, PluginEntry>,
    /// Registered plugins whose code is compiling, or failed to.
    unready: BTreeMap<String, Unready>,
    /// Logs and counters of plugins by name: they outlive new code and a
    /// fetch, as long as the name is registered.
    logs: BTreeMap<String, (Arc<PluginLog>, Arc<PluginMetrics>)>,
    /// What clients reported running, by plugin name (for its current code).
    clients: BTreeMap<String, ClientUsage>,
}

/// See the module docs.
pub struct Plugins {
    /// Started on first need: a broker without plugins runs no ticker thread
    /// and reserves no instance memory.
    engine: std::sync::OnceLock<PluginEngine>,
    limits: HostLimits,
    dir: PathBuf,
    environment: Environment,
    state: Mutex<State>,
    /// Compiled code by digest (uploads and fetches land here before the
    /// metadata names them).
    compiled: Mutex<BTreeMap<String, Arc<CompiledPlugin>>>,
    /// Digests compiling in the background (`None`) or whose compile failed
    /// (`Some(reason)`). Locked before `compiled` when both are.
    compiling: Mutex<BTreeMap<String, Option<String>>>,
    /// Bumped each time a background compile ends.
    compiles: tokio::sync::watch::Sender<u64>,
    /// Digests waiting for the compile thread, in the order they came.
    compile_queue: Mutex<CompileQueue>,
    /// One [`Plugins::follow`] at a time.
    following: Mutex<()>,
    /// Digests stored by uploads not registered yet: never deleted as unused.
    pinned: Mutex<BTreeMap<String, usize>>,
}

impl std::fmt::Debug for Plugins {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Plugins").field("dir", &self.dir).finish_non_exhaustive()
    }
}

fn storage(context: &str, error: impl std::fmt::Display) -> PluginsError {
    PluginsError::Storage { context: context.to_owned(), message: error.to_string() }
}

pub(crate) fn hook_name(text: &str) -> Result<HookKind, PluginsError> {
    HookKind::parse(text).ok_or_else(|| {
        PluginsError::BadRequest(format!(
            "hook {text:?} is not partitioner, produce-interceptor, consume-interceptor or transform"
        ))
    })
}

pub(crate) fn validate_name(name: &str) -> Result<(), PluginsError> {
    broker_core::cluster::check_plugin_name(name).map_err(PluginsError::BadRequest)
}

fn plugin_failed(plugin: &str, error: PluginError) -> PluginsError {
    PluginsError::Failed { plugin: plugin.to_owned(), error }
}

/// Replaces `path` with `bytes` atomically and durably in `environment`'s storage.
pub(crate) fn write_atomically(environment: &Environment, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    broker_core::storage::replace_file(&*environment.storage, path, bytes)
}

/// The whole file at `path`, or `None` when there is none.
pub(crate) fn read_whole(environment: &Environment, path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    broker_core::storage::read_file(&*environment.storage, path)
}

impl Plugins {
    /// Opens `dir` (created if missing). Nothing runs until [`Plugins::follow`]
    /// is given the cluster metadata.
    pub fn open(dir: &Path, limits: HostLimits, environment: Environment) -> Result<Plugins, PluginsError> {
        environment
            .storage
            .create_dir_all(dir)
            .map_err(|error| storage(&format!("create {}", dir.display()), error))?;
        Ok(Plugins {
            engine: std::sync::OnceLock::new(),
            limits,
            dir: dir.to_path_buf(),
            environment,
            state: Mutex::new(State::default()),
            compiled: Mutex::default(),
            compiling: Mutex::default(),
            compiles: tokio::sync::watch::Sender::new(0),
            compile_queue: Mutex::default(),
            following: Mutex::new(()),
            pinned: Mutex::default(),
        })
    }

    /// The registry a broker kept before plugins moved into the cluster
    /// metadata, when it is still there.
    pub(crate) fn legacy_registry(&self) -> Result<Option<LegacyRegistry>, PluginsError> {
        let path = self.dir.join(REGISTRY_FILE);
        match read_whole(&self.environment, &path) {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|error| storage(&format!("read {}", path.display()), error)),
            Ok(None) => Ok(None),
            Err(error) => Err(storage("read the plugin registry", error)),
        }
    }

    /// Sets the legacy registry aside once the metadata holds it.
    pub(crate) fn legacy_registry_upgraded(&self) -> Result<(), PluginsError> {
        let path = self.dir.join(REGISTRY_FILE);
        let aside = self.dir.join(format!("{REGISTRY_FILE}.upgraded"));
        let storage_error = |error| storage("set the plugin registry aside", error);
        self.environment.storage.rename(&path, &aside).map_err(storage_error)?;
        self.environment.storage.sync_dir(&self.dir).map_err(storage_error)
    }

    fn engine(&self) -> Result<&PluginEngine, PluginsError> {
        if let Some(engine) = self.engine.get() {
            return Ok(engine);
        }
        let engine =
            PluginEngine::new(self.limits.clone()).map_err(|error| storage("start the plugin engine", error))?;
        Ok(self.engine.get_or_init(|| engine))
    }

    fn new_log(&self) -> PluginLog {
        PluginLog::new(self.limits.log_entries_max, self.limits.log_message_bytes_max)
    }

    /// Where the code of `digest` stands: in memory, or loaded from the cached
    /// artifact, it is [`CodeState::Ready`]; otherwise stored bytes start
    /// compiling in the background ([`Plugins::compile_ends`] tells when
    /// that ends) and a failed compile stays failed.
    pub fn code_state(self: &Arc<Self>, digest: &str) -> CodeState {
        match self.load(digest) {
            Ok(Loaded::Ready(_)) => CodeState::Ready,
            Ok(Loaded::Compiling) => CodeState::Compiling,
            Ok(Loaded::Failed(reason)) => CodeState::Failed(reason),
            Ok(Loaded::Missing) => CodeState::Missing,
            Err(error) => CodeState::Failed(error.to_string()),
        }
    }

    /// Changes each time a background compile ends (subscribe before looking
    /// at [`Plugins::code_state`], then wait for a change).
    pub fn compile_ends(&self) -> tokio::sync::watch::Receiver<u64> {
        self.compiles.subscribe()
    }

    /// See [`Plugins::code_state`].
    fn load(self: &Arc<Self>, digest: &str) -> Result<Loaded, PluginsError> {
        let mut compiling = lock(&self.compiling);
        if let Some(compiled) = lock(&self.compiled).get(digest) {
            return Ok(Loaded::Ready(compiled.clone()));
        }
        match compiling.get(digest) {
            Some(None) => return Ok(Loaded::Compiling),
            Some(Some(reason)) => return Ok(Loaded::Failed(reason.clone())),
            None => {}
        }
        let wasm_path = self.dir.join(format!("{digest}.wasm"));
        if !self.environment.storage.exists(&wasm_path) {
            return Ok(Loaded::Missing);
        }
        let cache = self.dir.join(format!("{digest}.cwasm"));
        if let Ok(Some(bytes)) = read_whole(&self.environment, &cache) {
            // SAFETY: `.cwasm` files are written only by `cache` below, from
            // this engine's own serialization; a stale or foreign one fails to
            // load and is recompiled.
            match unsafe { self.engine()?.deserialize(&bytes, digest.to_owned()) } {
                Ok(compiled) => {
                    let compiled = Arc::new(compiled);
                    lock(&self.compiled).insert(digest.to_owned(), compiled.clone());
                    return Ok(Loaded::Ready(compiled));
                }
                Err(error) => tracing::info!(%digest, %error, "recompiling a plugin"),
            }
        }
        compiling.insert(digest.to_owned(), None);
        if let Err(error) = self.queue_compile(digest) {
            compiling.remove(digest);
            return Err(error);
        }
        Ok(Loaded::Compiling)
    }

    /// Queues `digest` for the compile thread, starting the thread if none
    /// runs. One compile at a time: wasmtime compiles a component's functions
    /// in parallel already, so compiles side by side would only share the
    /// cores (and hold their memory at once) and finish all of them later.
    fn queue_compile(self: &Arc<Self>, digest: &str) -> Result<(), PluginsError> {
        let mut queue = lock(&self.compile_queue);
        queue.waiting.push_back(digest.to_owned());
        if queue.running {
            return Ok(());
        }
        let plugins = self.clone();
        let thread =
            std::thread::Builder::new().name("weir-plugin-compile".to_owned()).spawn(move || plugins.compile_queued());
        match thread {
            Ok(_) => {
                queue.running = true;
                Ok(())
            }
            Err(error) => {
                queue.waiting.pop_back();
                Err(storage("start a compile thread", error))
            }
        }
    }

    /// The compile thread: compiles what is queued, in order, and ends when
    /// nothing is.
    fn compile_queued(&self) {
        loop {
            let next = {
                let mut queue = lock(&self.compile_queue);
                let next = queue.waiting.pop_front();
                queue.running = next.is_some();
                next
            };
            let Some(digest) = next else { return };
            let wasm_path = self.dir.join(format!("{digest}.wasm"));
            self.compile_stored(digest, wasm_path);
        }
    }

    /// Compiles the stored bytes of `digest` (on a compile thread) and caches
    /// the artifact; the outcome replaces the `compiling` mark.
    fn compile_stored(&self, digest: String, wasm_path: PathBuf) {
        let started = std::time::Instant::now();
        let compiled = self.read_wasm(&wasm_path).and_then(|wasm| {
            let compiled =
                self.engine()?.compile(&wasm).map_err(|error| PluginsError::InvalidPlugin(error.to_string()))?;
            match compiled.digest() == digest {
                true => Ok(compiled),
                false => Err(storage(&format!("{}", wasm_path.display()), "the bytes do not match their digest")),
            }
        });
        let mut compiling = lock(&self.compiling);
        // Deleted meanwhile (unregistered, or refused at registration): nothing
        // to keep.
        let deleted = !self.environment.storage.exists(&wasm_path);
        match compiled {
            Ok(_) if deleted => {
                compiling.remove(&digest);
            }
            Ok(compiled) => {
                self.cache(&compiled);
                tracing::info!(%digest, elapsed_ms = started.elapsed().as_millis() as u64, "plugin compiled");
                lock(&self.compiled).insert(digest.clone(), Arc::new(compiled));
                compiling.remove(&digest);
            }
            Err(error) => {
                tracing::warn!(%digest, %error, "plugin did not compile");
                compiling.insert(digest, Some(error.to_string()));
            }
        }
        drop(compiling);
        self.compiles.send_modify(|ends| *ends += 1);
    }

    fn cache(&self, compiled: &CompiledPlugin) {
        let path = self.dir.join(format!("{}.cwasm", compiled.digest()));
        if let Err(error) = compiled
            .serialize()
            .map_err(|error| error.to_string())
            .and_then(|bytes| write_atomically(&self.environment, &path, &bytes).map_err(|error| error.to_string()))
        {
            tracing::warn!(path = %path.display(), %error, "cannot cache a compiled plugin");
        }
    }

    /// Validates an upload (a component exporting one hook world; `hook`, when
    /// not empty, the one it exports) and stores its bytes by digest, pinned
    /// (kept even while no registered plugin names it) until
    /// [`Plugins::unpin`]. The name is registered through the controller
    /// afterwards.
    pub fn store(self: &Arc<Self>, hook: &str, wasm: &[u8]) -> Result<StoredUpload, PluginsError> {
        let inspected = plugin_host::inspect(wasm).map_err(|error| PluginsError::InvalidPlugin(error.to_string()))?;
        if !hook.is_empty() {
            let claimed = hook_name(hook)?;
            if claimed != inspected.kind {
                let message =
                    format!("uploaded as a {} but the component is a {}", claimed.name(), inspected.kind.name());
                return Err(PluginsError::InvalidPlugin(message));
            }
        }
        let digest = inspected.digest;
        *lock(&self.pinned).entry(digest.clone()).or_default() += 1;
        // Uploading bytes whose compile failed compiles them again.
        let retried = lock(&self.compiling).get(&digest).cloned().flatten();
        if retried.is_some() {
            forget_failure(&mut lock(&self.compiling), &digest);
        }
        let wasm_path = self.dir.join(format!("{digest}.wasm"));
        let written = match self.environment.storage.exists(&wasm_path) {
            true => Ok(()),
            false => write_atomically(&self.environment, &wasm_path, wasm),
        };
        if let Err(error) = written {
            self.unpin(&digest);
            return Err(storage("store the plugin", error));
        }
        // Compiling starts now, while the name is registered.
        self.load(&digest)?;
        Ok(StoredUpload { digest, hook: inspected.kind.name(), size_bytes: wasm.len() as u64, retried })
    }

    /// Ends the pin of one [`Plugins::store`].
    pub fn unpin(&self, digest: &str) {
        let mut pinned = lock(&self.pinned);
        if let Some(count) = pinned.get_mut(digest) {
            *count -= 1;
            if *count == 0 {
                pinned.remove(digest);
            }
        }
    }

    /// Stores bytes fetched from another broker for `digest`, once they compile
    /// to exactly that digest.
    pub fn store_fetched(&self, digest: &str, wasm: &[u8]) -> Result<StoredUpload, PluginsError> {
        let compiled = self
            .engine()?
            .compile(wasm)
            .map_err(|error| PluginsError::InvalidPlugin(format!("fetched plugin {digest}: {error}")))?;
        if compiled.digest() != digest {
            let message = format!("fetched bytes for plugin {digest} have digest {}", compiled.digest());
            return Err(PluginsError::InvalidPlugin(message));
        }
        self.keep(compiled, wasm)
    }

    fn keep(&self, compiled: CompiledPlugin, wasm: &[u8]) -> Result<StoredUpload, PluginsError> {
        let digest = compiled.digest().to_owned();
        let wasm_path = self.dir.join(format!("{digest}.wasm"));
        if !self.environment.storage.exists(&wasm_path) {
            write_atomically(&self.environment, &wasm_path, wasm)
                .map_err(|error| storage("store the plugin", error))?;
        }
        self.cache(&compiled);
        let stored = StoredUpload {
            digest: digest.clone(),
            hook: compiled.kind().name(),
            size_bytes: wasm.len() as u64,
            retried: None,
        };
        lock(&self.compiled).insert(digest, Arc::new(compiled));
        Ok(stored)
    }

    /// Starts an instance of the code of `digest` with each configuration, as
    /// attaching it would: the first refusal, with its topic.
    pub fn check_configs(
        self: &Arc<Self>,
        digest: &str,
        configs: &[(String, Vec<(String, String)>)],
    ) -> Result<(), PluginsError> {
        let compiled = match self.load(digest)? {
            Loaded::Ready(compiled) => compiled,
            Loaded::Missing => {
                let message = format!("plugin {digest} is not stored on this broker yet; retry shortly");
                return Err(PluginsError::Unavailable(message));
            }
            Loaded::Compiling => {
                let message = format!("plugin {digest} is still compiling; retry when it is ready");
                return Err(PluginsError::Unavailable(message));
            }
            Loaded::Failed(reason) => return Err(did_not_compile(digest, &reason)),
        };
        for (topic, config) in configs {
            Plugin::start(compiled.clone(), config.clone(), Arc::new(self.new_log()), Arc::default())
                .map_err(|error| PluginsError::InvalidConfig(format!("topic {topic:?}: {error}")))?;
        }
        Ok(())
    }

    /// Makes this broker's plugins and attachments match the cluster metadata:
    /// loads what is registered (its bytes held here), starts the attachments
    /// that are new or whose code or settings changed, stops what is gone.
    /// Returns the registered plugins whose bytes this broker does not hold.
    ///
    /// `image` reads the plugins and attachments of the applied metadata; it is
    /// called under the follow lock, so a follow never applies an older image
    /// after a newer one. Instances start outside the state lock (an `init` may
    /// take its deadline), so produces and fetches never wait on them. An
    /// attachment whose new code is still being fetched keeps running its old
    /// code meanwhile; one whose `init` failed is tried again only when its
    /// code or settings change.
    pub fn follow(self: &Arc<Self>, image: impl FnOnce() -> FollowedImage) -> Vec<PluginEntry> {
        let _one_at_a_time = lock(&self.following);
        let (plugins, attachments) = image();
        let mut loaded = BTreeMap::new();
        let mut missing = BTreeMap::new();
        let mut unready = BTreeMap::new();
        for (name, entry) in &plugins {
            let outcome = match is_plugin_digest(&entry.digest) {
                true => self.load(&entry.digest),
                false => Err(PluginsError::InvalidPlugin(format!("bad digest {:?}", entry.digest))),
            };
            match outcome {
                Ok(Loaded::Ready(compiled)) if compiled.kind().name() == entry.hook => {
                    loaded.insert(name.clone(), (entry.clone(), compiled));
                }
                Ok(Loaded::Ready(compiled)) => {
                    let hook = compiled.kind().name();
                    tracing::error!(plugin = %name, hook, registered = %entry.hook, "a registered plugin has another hook");
                }
                Ok(Loaded::Compiling) => {
                    unready.insert(name.clone(), Unready { entry: entry.clone(), failed: None });
                }
                Ok(Loaded::Failed(reason)) => {
                    unready.insert(name.clone(), Unready { entry: entry.clone(), failed: Some(reason) });
                }
                Ok(Loaded::Missing) => {
                    missing.insert(name.clone(), entry.clone());
                }
                Err(error) => {
                    tracing::error!(plugin = %name, %error, "a registered plugin does not load");
                    missing.insert(name.clone(), entry.clone());
                }
            }
        }
        // Plan under the state lock: what stays, what starts.
        let (mut next, mut to_start, gone) = {
            let mut state = lock(&self.state);
            state.logs.retain(|name, _| plugins.contains_key(name));
            // A plugin compiling has its log already (the upload notes itself);
            // a failed compile is noted there once.
            for (name, now) in &unready {
                let noted = state
                    .unready
                    .get(name)
                    .is_some_and(|before| before.entry.digest == now.entry.digest && before.failed.is_some());
                let (log, _) =
                    state.logs.entry(name.clone()).or_insert_with(|| (Arc::new(self.new_log()), Arc::default()));
                if let (Some(reason), false) = (&now.failed, noted) {
                    log.push("error", format!("host: {} did not compile: {reason}", now.entry.digest));
                }
            }
            let mut next = State { missing, unready, ..State::default() };
            for (name, (entry, compiled)) in loaded {
                let (log, metrics) = state
                    .logs
                    .entry(name.clone())
                    .or_insert_with(|| (Arc::new(self.new_log()), Arc::default()))
                    .clone();
                if state.plugins.get(&name).map(|old| &old.entry.digest) != Some(&entry.digest) {
                    log.push("info", format!("host: loaded {} ({} bytes)", entry.digest, entry.size_bytes));
                }
                next.plugins.insert(name, Stored { entry, compiled, log, metrics });
            }
            let mut to_start = Vec::new();
            for (topic, entries) in &attachments {
                // Copies (the instances are shared): the current state serves
                // produces and fetches unchanged until the new one replaces it.
                let mut running = state.attachments.get(topic).cloned().unwrap_or_default();
                let mut list = Vec::new();
                for entry in entries {
                    let digest = plugins.get(&entry.plugin).map(|registered| registered.digest.clone());
                    let same_code = running.iter().position(|old| old.entry == *entry && old.digest == digest);
                    let loaded = next.plugins.contains_key(&entry.plugin);
                    match same_code {
                        // Running, or refused its `init` on this very code.
                        Some(position) if running[position].runner.is_some() || running[position].init_failed => {
                            list.push(running.swap_remove(position));
                            continue;
                        }
                        _ => {}
                    }
                    let policy = FailurePolicy::parse(&entry.policy).unwrap_or(FailurePolicy::FailClosed);
                    if loaded {
                        to_start.push((topic.clone(), list.len()));
                        let status = "starting".to_owned();
                        list.push(Attachment {
                            entry: entry.clone(),
                            policy,
                            digest,
                            runner: None,
                            status,
                            init_failed: false,
                        });
                        continue;
                    }
                    // New code not here or not compiled yet: the old instance
                    // keeps running.
                    let (being, not_running) = match next.unready.get(&entry.plugin) {
                        Some(Unready { failed: Some(reason), .. }) => {
                            ("did not compile", format!("not running: the plugin's code did not compile: {reason}"))
                        }
                        Some(Unready { failed: None, .. }) => {
                            ("is being compiled", "not running: the plugin's code is compiling".to_owned())
                        }
                        None => (
                            "is being fetched",
                            "not running: the plugin's bytes are not on this broker yet".to_owned(),
                        ),
                    };
                    let previous = running
                        .iter()
                        .position(|old| old.entry == *entry && old.runner.is_some())
                        .map(|position| running.swap_remove(position));
                    let attachment = match previous {
                        Some(mut previous) => {
                            previous.status = format!(
                                "running its previous code; {} {being}",
                                digest.as_deref().unwrap_or("the new code")
                            );
                            previous
                        }
                        None => Attachment {
                            entry: entry.clone(),
                            policy,
                            digest,
                            runner: None,
                            status: not_running,
                            init_failed: false,
                        },
                    };
                    list.push(attachment);
                }
                next.attachments.insert(topic.clone(), list);
            }
            next.logs = state.logs.clone();

            let gone: Vec<String> = state
                .plugins
                .values()
                .map(|stored| &stored.entry)
                .chain(state.unready.values().map(|unready| &unready.entry))
                .map(|entry| entry.digest.clone())
                .filter(|digest| !plugins.values().any(|entry| entry.digest == *digest))
                .collect();
            (next, to_start, gone)
        };
        // Start outside the state lock.
        for (topic, position) in to_start.drain(..) {
            let Some(attachment) = next.attachments.get_mut(&topic).and_then(|list| list.get_mut(position)) else {
                continue;
            };
            let Some(stored) = next.plugins.get(&attachment.entry.plugin) else { continue };
            match start(stored, &attachment.entry.config) {
                Ok(runner) => (attachment.runner, attachment.status) = (Some(runner), "running".to_owned()),
                Err(error) => {
                    tracing::warn!(plugin = %attachment.entry.plugin, %topic, %error, "attachment not started");
                    attachment.status = format!("not running: {error}");
                    attachment.init_failed = true;
                }
            }
        }
        let missing: Vec<PluginEntry> = next.missing.values().cloned().collect();
        // Client reports may have arrived while instances started: taken now.
        let mut state = lock(&self.state);
        next.clients = std::mem::take(&mut state.clients);
        next.clients
            .retain(|name, usage| next.plugins.get(name).is_some_and(|stored| stored.entry.digest == usage.digest));
        *state = next;
        drop(state);
        // Code no plugin runs any more: its bytes and artifact go (unless an
        // upload of the same bytes is on its way to be registered; the pins
        // stay locked meanwhile, so no upload pins a file being deleted).
        let pinned = lock(&self.pinned);
        for digest in gone.into_iter().filter(|digest| !pinned.contains_key(digest) && is_plugin_digest(digest)) {
            forget_failure(&mut lock(&self.compiling), &digest);
            lock(&self.compiled).remove(&digest);
            for extension in ["wasm", "cwasm"] {
                let _ = self.environment.storage.remove_file(&self.dir.join(format!("{digest}.{extension}")));
            }
        }
        missing
    }

    /// Notes in plugin `name`'s log that this broker took an upload of it.
    pub fn note_upload(&self, name: &str, upload: &StoredUpload) {
        if let Some((log, _)) = lock(&self.state).logs.get(name) {
            log.push("info", format!("host: uploaded {} ({} bytes) to this broker", upload.digest, upload.size_bytes));
            if let Some(reason) = &upload.retried {
                log.push("info", format!("host: compiling {} again (it did not compile: {reason})", upload.digest));
            }
        }
    }

    /// Forgets an upload that was not registered (refused, or it timed out and
    /// no registered plugin names its code): its compiled code, and its bytes
    /// unless another upload of them is pinned.
    pub fn discard_unregistered(&self, digest: &str, registered: impl Fn(&str) -> bool) {
        let _one_at_a_time = lock(&self.following);
        let pinned = lock(&self.pinned);
        let running = lock(&self.state).plugins.values().any(|stored| stored.entry.digest == digest);
        if pinned.contains_key(digest) || running || registered(digest) || !is_plugin_digest(digest) {
            return;
        }
        forget_failure(&mut lock(&self.compiling), digest);
        lock(&self.compiled).remove(digest);
        for extension in ["wasm", "cwasm"] {
            let _ = self.environment.storage.remove_file(&self.dir.join(format!("{digest}.{extension}")));
        }
    }

    /// The registered plugins whose bytes this broker lacks.
    pub fn missing(&self) -> Vec<PluginEntry> {
        lock(&self.state).missing.values().cloned().collect()
    }

    /// Every registered plugin, those whose bytes are still being fetched
    /// included.
    pub fn list(&self) -> Vec<PluginSummary> {
        let state = lock(&self.state);
        let mut names: Vec<&String> =
            state.plugins.keys().chain(state.missing.keys()).chain(state.unready.keys()).collect();
        names.sort();
        names.into_iter().filter_map(|name| summary(&state, name)).collect()
    }

    /// Adds what a client reported of a partitioner it runs: counts to the
    /// plugin's client counters, log lines (at most 16) to its log. A report
    /// for code the plugin no longer runs (or never ran), or for a plugin that
    /// is not a partitioner, is dropped.
    pub fn note_client_report(&self, report: ClientReport) {
        let mut state = lock(&self.state);
        let Some(stored) = state.plugins.get(&report.plugin) else { return };
        // Clients run partitioners only.
        if stored.entry.digest != report.digest || stored.compiled.kind() != HookKind::Partitioner {
            return;
        }
        let log = stored.log.clone();
        let usage = state.clients.entry(report.plugin.clone()).or_default();
        if usage.digest != report.digest {
            *usage = ClientUsage { digest: report.digest.clone(), ..ClientUsage::default() };
        }
        usage.calls = usage.calls.saturating_add(report.calls);
        usage.errors = usage.errors.saturating_add(report.errors);
        usage.busy_nanos = usage.busy_nanos.saturating_add(report.busy_nanos);
        drop(state);
        for entry in report.log.into_iter().take(CLIENT_LOG_LINES_MAX) {
            let level = ["trace", "debug", "info", "warn", "error"]
                .into_iter()
                .find(|level| *level == entry.level)
                .unwrap_or("info");
            log.push(level, format!("client ({}): {}", report.source, entry.message));
        }
    }

    /// A registered plugin as `listPlugins` reports it.
    pub fn summary(&self, name: &str) -> Option<PluginSummary> {
        summary(&lock(&self.state), name)
    }

    /// A new instance of transform plugin `name`, `init`ed with `config`.
    pub fn start_transform(&self, name: &str, config: Vec<(String, String)>) -> Result<Plugin, PluginsError> {
        let state = lock(&self.state);
        let Some(stored) = state.plugins.get(name) else {
            return Err(match state.unready.get(name) {
                Some(Unready { entry, failed: Some(reason) }) => did_not_compile(&entry.digest, reason),
                Some(Unready { entry, failed: None }) => PluginsError::Unavailable(format!(
                    "plugin {name:?} ({}) is still compiling; retry when it is ready",
                    entry.digest
                )),
                None => not_found(name),
            });
        };
        if stored.compiled.kind() != HookKind::Transform {
            let message = format!("plugin {name:?} is a {}, not a transform", stored.entry.hook);
            return Err(PluginsError::InvalidPlugin(message));
        }
        Plugin::start(stored.compiled.clone(), config, stored.log.clone(), stored.metrics.clone())
            .map_err(|error| PluginsError::InvalidConfig(error.to_string()))
    }

    pub fn logs(&self, name: &str) -> Result<Vec<LogEntry>, PluginsError> {
        let state = lock(&self.state);
        state.logs.get(name).map(|(log, _)| log.entries()).ok_or_else(|| not_found(name))
    }

    /// Attachments of `topic`, or of every topic.
    pub fn attachments(&self, topic: Option<&str>) -> Vec<AttachmentSummary> {
        let state = lock(&self.state);
        state
            .attachments
            .iter()
            .filter(|(name, _)| topic.is_none_or(|topic| topic == name.as_str()))
            .flat_map(|(_, list)| list.iter())
            .map(|attachment| AttachmentSummary {
                topic: attachment.entry.topic.clone(),
                hook: HookKind::parse(&attachment.entry.hook).map_or("unknown", HookKind::name),
                plugin: attachment.entry.plugin.clone(),
                config: attachment.entry.config.clone(),
                policy: attachment.policy,
                status: attachment.status.clone(),
            })
            .collect()
    }

    /// The partitioner set on `topic`.
    pub fn partitioner_of(&self, topic: &str) -> Option<PartitionerSetting> {
        let state = lock(&self.state);
        let attachment = state
            .attachments
            .get(topic)?
            .iter()
            .find(|attachment| attachment.entry.hook == HookKind::Partitioner.name())?;
        Some(PartitionerSetting {
            plugin: attachment.entry.plugin.clone(),
            digest: attachment.digest.clone()?,
            config: attachment.entry.config.clone(),
        })
    }

    /// The partitions the topic's partitioner plugin picks for `records`, in
    /// one call (`None`: no plugin; an entry `None`: the plugin leaves that
    /// record to Kafka's key partitioning). Transforms place their outputs with
    /// it, as producers do.
    pub async fn partitions(
        &self,
        topic: &str,
        partition_count: u32,
        records: &[&plugin_host::PackedRecord<'_>],
    ) -> Result<Option<Vec<Option<u32>>>, PluginsError> {
        let runner = {
            let state = lock(&self.state);
            let Some(list) = state.attachments.get(topic) else { return Ok(None) };
            let partitioner = list.iter().find(|attachment| attachment.entry.hook == HookKind::Partitioner.name());
            match partitioner {
                None => return Ok(None),
                Some(attachment) => (attachment.entry.plugin.clone(), attachment.runner.clone()),
            }
        };
        let (plugin, Some(runner)) = runner else {
            return Err(PluginsError::Unavailable(format!("partitioner of {topic:?} is not running")));
        };
        let base_timestamp_ms = records.first().map_or(0, |record| record.timestamp_ms);
        let mut batch = PackedBatch::new(-1, base_timestamp_ms);
        for (delta, record) in records.iter().enumerate() {
            batch.push(delta as u32, record.timestamp_ms, record.key, record.value, record.headers.iter().copied());
        }
        let owned_topic = topic.to_owned();
        let called = runner
            .call(0, batch, move |instance, batch| instance.partition(&owned_topic, partition_count, batch))
            .await;
        outcome(called).map(Some).map_err(|error| plugin_failed(&plugin, error))
    }

    /// The uploaded bytes of a plugin by digest: for clients running a
    /// partitioner, and for brokers fetching a plugin they lack.
    pub fn wasm(&self, digest: &str) -> Result<Vec<u8>, PluginsError> {
        let path = self.dir.join(format!("{digest}.wasm"));
        if !is_plugin_digest(digest) || !self.environment.storage.exists(&path) {
            return Err(PluginsError::NotFound(format!("no plugin with digest {digest:?}")));
        }
        self.read_wasm(&path)
    }

    fn read_wasm(&self, path: &Path) -> Result<Vec<u8>, PluginsError> {
        match read_whole(&self.environment, path) {
            Ok(Some(bytes)) => Ok(bytes),
            Ok(None) => Err(storage(&format!("read {}", path.display()), "missing")),
            Err(error) => Err(storage(&format!("read {}", path.display()), error)),
        }
    }

    /// The running interceptors of `hook` on `topic`, in attach order.
    fn interceptors(&self, topic: &str, hook: HookKind) -> Vec<Interceptor> {
        let state = lock(&self.state);
        let Some(list) = state.attachments.get(topic) else { return Vec::new() };
        list.iter()
            .filter(|attachment| attachment.entry.hook == hook.name())
            .map(|attachment| (attachment.entry.plugin.clone(), attachment.policy, attachment.runner.clone()))
            .collect()
    }

    /// Runs the topic's produce interceptors over `batches` (a produce request's
    /// RecordBatches); rewrites them in place when a plugin replaced records.
    pub async fn intercept_produce(
        &self,
        topic: &str,
        partition: i32,
        batches: &mut Vec<u8>,
    ) -> Result<(), PluginsError> {
        let interceptors = self.interceptors(topic, HookKind::ProduceInterceptor);
        if interceptors.is_empty() {
            return Ok(());
        }
        let mut out = Vec::with_capacity(batches.len());
        let mut rest: &[u8] = batches;
        let mut changed = false;
        while !rest.is_empty() {
            let (view, after) = BatchView::split_first(rest).map_err(corrupt)?;
            rest = after;
            // Read in place (one copy, into the packed arena); decoded and
            // re-encoded only if a plugin rewrites records.
            let mut packed = pack_view(&view, -1)?;
            let mut rewritten: Option<RecordBatch> = None;
            for (plugin, policy, runner) in &interceptors {
                let owned_topic = topic.to_owned();
                let (outcome, input) = call_in_parts(runner, partition, packed, move |instance, packed| {
                    instance.on_produce(&owned_topic, partition as u32, packed)
                })
                .await
                .map_err(|error| plugin_failed(plugin, error))?;
                packed = input;
                match outcome {
                    Ok(ProduceOutcome::Accept) => {}
                    Ok(ProduceOutcome::Reject(reasons)) => {
                        let listed: Vec<String> =
                            reasons.iter().map(|(index, reason)| format!("record {index}: {reason}")).collect();
                        let message = format!("rejected by plugin {plugin:?}: {}", listed.join("; "));
                        return Err(PluginsError::InvalidRecord(message));
                    }
                    Ok(ProduceOutcome::Rewrite(records)) => {
                        let batch = match &mut rewritten {
                            Some(batch) => batch,
                            None => rewritten.insert(
                                RecordBatch::decode_with_limit(view.as_bytes(), DECOMPRESSED_BYTES_MAX)
                                    .map_err(corrupt)?,
                            ),
                        };
                        replace_records(batch, &records, false)?;
                        packed = records;
                    }
                    Err(error) if *policy == FailurePolicy::FailOpen => {
                        tracing::debug!(%plugin, %error, "produce interceptor failed open");
                    }
                    Err(error) => return Err(plugin_failed(plugin, error)),
                }
            }
            match rewritten {
                Some(batch) => {
                    batch.encode_into(&mut out).map_err(corrupt)?;
                    changed = true;
                }
                None => out.extend_from_slice(view.as_bytes()),
            }
        }
        if changed {
            *batches = out;
        }
        Ok(())
    }

    /// Whether `topic` has consume interceptors (the fetch fast path).
    pub fn intercepts_fetches(&self, topic: &str) -> bool {
        self.has_hook(topic, HookKind::ConsumeInterceptor)
    }

    fn has_hook(&self, topic: &str, hook: HookKind) -> bool {
        let state = lock(&self.state);
        state
            .attachments
            .get(topic)
            .is_some_and(|list| list.iter().any(|attachment| attachment.entry.hook == hook.name()))
    }

    /// Runs the topic's consume interceptors over fetched batches; returns the
    /// bytes to hand out instead, if any changed.
    pub async fn intercept_fetch(
        &self,
        topic: &str,
        partition: i32,
        group: Option<&str>,
        fetched: &[u8],
    ) -> Result<Option<Vec<u8>>, PluginsError> {
        let interceptors = self.interceptors(topic, HookKind::ConsumeInterceptor);
        if interceptors.is_empty() {
            return Ok(None);
        }
        let mut out = Vec::with_capacity(fetched.len());
        let mut rest = fetched;
        let mut changed = false;
        while !rest.is_empty() {
            let (view, after) = BatchView::split_first(rest).map_err(corrupt)?;
            rest = after;
            if view.attributes().is_control() {
                out.extend_from_slice(view.as_bytes());
                continue;
            }
            let mut packed = pack_view(&view, view.base_offset())?;
            let mut rewritten: Option<RecordBatch> = None;
            for (plugin, policy, runner) in &interceptors {
                if packed.is_empty() {
                    break;
                }
                let (owned_topic, owned_group) = (topic.to_owned(), group.map(str::to_owned));
                let (outcome, input) = call_in_parts(runner, partition, packed, move |instance, packed| {
                    instance.on_consume(&owned_topic, partition as u32, owned_group.as_deref(), packed)
                })
                .await
                .map_err(|error| plugin_failed(plugin, error))?;
                packed = input;
                match outcome {
                    Ok(ConsumeOutcome::Accept) => {}
                    Ok(ConsumeOutcome::Rewrite(records)) => {
                        let batch = match &mut rewritten {
                            Some(batch) => batch,
                            None => rewritten.insert(
                                RecordBatch::decode_with_limit(view.as_bytes(), DECOMPRESSED_BYTES_MAX)
                                    .map_err(corrupt)?,
                            ),
                        };
                        replace_records(batch, &records, true)?;
                        packed = records;
                        packed.base_offset = view.base_offset();
                    }
                    Err(error) if *policy == FailurePolicy::FailOpen => {
                        tracing::debug!(%plugin, %error, "consume interceptor failed open");
                    }
                    Err(error) => return Err(plugin_failed(plugin, error)),
                }
            }
            let Some(mut batch) = rewritten else {
                out.extend_from_slice(view.as_bytes());
                continue;
            };
            changed = true;
            if batch.records.is_empty() {
                // Everything dropped: a control batch over the same offsets, so
                // consumers move past them without records.
                batch.attributes = Attributes(batch.attributes.0).with_control(true);
                batch.records.push(Record { offset_delta: batch.last_offset_delta, ..Record::default() });
            }
            batch.encode_into(&mut out).map_err(corrupt)?;
        }
        Ok(changed.then_some(out))
    }
}

fn not_found(name: &str) -> PluginsError {
    PluginsError::NotFound(format!("no plugin named {name:?}"))
}

fn corrupt(error: abi::batch::BatchError) -> PluginsError {
    PluginsError::Corrupt(error)
}

fn start(stored: &Stored, config: &[(String, String)]) -> Result<Arc<PluginPool>, PluginError> {
    let plugin = Plugin::start(stored.compiled.clone(), config.to_vec(), stored.log.clone(), stored.metrics.clone())?;
    Ok(Arc::new(PluginPool::new(plugin, PoolLimits::default())))
}

/// One interceptor call on `runner`'s lane for `partition`: the outcome and
/// the batch given back (`Err` only if the batch was lost with its thread).
async fn call<T: Send + 'static>(
    runner: &Option<Arc<PluginPool>>,
    partition: i32,
    packed: PackedBatch,
    work: impl FnOnce(&mut Plugin, &mut PackedBatch) -> Result<T, PluginError> + Send + 'static,
) -> Called<T, PackedBatch> {
    match runner {
        Some(pool) => pool.call(partition as u32, packed, work).await,
        None => Ok((Err(PluginError::Unavailable("the attachment is not running".to_owned())), packed)),
    }
}

/// One interceptor call over `packed` on `runner`'s lane for `partition`. A
/// call that runs out of its budget is split in halves (down to single
/// records) that run in turn, and their verdicts are joined into one for the
/// batch; the part size that fit is where the next batches start (it doubles
/// again after a run of batches that needed no split, see
/// [`PluginPool::note_batch_fit`]). So an interceptor that needs
/// longer than one call's budget for a whole batch (an interpreted plugin over
/// thousands of records) still answers it, as transforms do; only a single
/// record that cannot fit the budget fails the call.
async fn call_in_parts<T: Joined>(
    runner: &Option<Arc<PluginPool>>,
    partition: i32,
    whole: PackedBatch,
    work: impl Fn(&mut Plugin, &mut PackedBatch) -> Result<T, PluginError> + Clone + Send + 'static,
) -> Called<T, PackedBatch> {
    let Some(pool) = runner else { return call(runner, partition, whole, work).await };
    let key = partition as u32;
    let mut size = pool.records_per_call();
    let mut whole = whole;
    let mut was_split = false;
    if whole.len() <= size {
        let (outcome, back) = pool.call(key, whole, work.clone()).await?;
        whole = back;
        match outcome {
            Err(PluginError::Deadline { .. }) if whole.len() > 1 => size = whole.len().div_ceil(2),
            outcome => return Ok((outcome, whole)),
        }
        note_split(pool, whole.len(), size);
        was_split = true;
    }
    let bad = |error: String| PluginError::BadOutput(format!("splitting a batch: {error}"));
    let mut pending: std::collections::VecDeque<PackedBatch> = match whole.parts(size) {
        Ok(parts) => parts.into(),
        Err(error) => return Ok((Err(bad(error)), whole)),
    };
    let mut answered = Vec::new();
    while let Some(part) = pending.pop_front() {
        let (outcome, part) = pool.call(key, part, work.clone()).await?;
        match outcome {
            Ok(verdict) => {
                let settled = verdict.settles_batch();
                answered.push((part, verdict));
                if settled {
                    break;
                }
            }
            Err(PluginError::Deadline { .. }) if part.len() > 1 => {
                let half = part.len().div_ceil(2);
                note_split(pool, part.len(), half);
                was_split = true;
                match part.parts(half) {
                    Ok(halves) => halves.into_iter().rev().for_each(|half| pending.push_front(half)),
                    Err(error) => return Ok((Err(bad(error)), whole)),
                }
            }
            Err(error) => return Ok((Err(error), whole)),
        }
    }
    if !was_split {
        pool.note_batch_fit(size);
    }
    let joined = T::join(&whole, answered).map_err(bad);
    Ok((joined, whole))
}

/// Remembers that `records` records ran out of a call's budget, so calls take
/// `fit` at most; the plugin's log says so when the size shrinks.
fn note_split(pool: &PluginPool, records: usize, fit: usize) {
    if fit < pool.records_per_call() {
        let message = format!("host: {records} records ran out of the call's budget; running them {fit} at a time");
        pool.log().push("warn", message);
    }
    pool.set_records_per_call(fit);
}

/// An interceptor's verdict on a batch that ran in parts, joined into its
/// verdict on the whole.
trait Joined: Sized + Send + 'static {
    /// `parts`: each part's input and its verdict, in order, from the first
    /// record of `whole` on (all of them, unless one settled the batch).
    fn join(whole: &PackedBatch, parts: Vec<(PackedBatch, Self)>) -> Result<Self, String>;

    /// Whether this verdict decides the whole batch (the other parts need
    /// not run).
    fn settles_batch(&self) -> bool {
        false
    }
}

impl Joined for ProduceOutcome {
    /// A rejection of any part refuses the batch (its record indices counted
    /// from the batch's first record); otherwise every part's records, as
    /// rewritten or as they came, make the batch.
    fn join(whole: &PackedBatch, parts: Vec<(PackedBatch, Self)>) -> Result<Self, String> {
        let mut first = 0;
        for (part, verdict) in &parts {
            if let ProduceOutcome::Reject(reasons) = verdict {
                let reasons = reasons.iter().map(|(index, reason)| (first + index, reason.clone())).collect();
                return Ok(ProduceOutcome::Reject(reasons));
            }
            first += part.len();
        }
        if parts.iter().all(|(_, verdict)| *verdict == ProduceOutcome::Accept) {
            return Ok(ProduceOutcome::Accept);
        }
        let mut joined = PackedBatch::new(whole.base_offset, whole.base_timestamp_ms);
        for (part, verdict) in &parts {
            joined.extend_from(match verdict {
                ProduceOutcome::Rewrite(records) => records,
                _ => part,
            })?;
        }
        Ok(ProduceOutcome::Rewrite(joined))
    }

    fn settles_batch(&self) -> bool {
        matches!(self, ProduceOutcome::Reject(_))
    }
}

impl Joined for ConsumeOutcome {
    /// Every part's records, as rewritten (dropped ones missing) or as they
    /// came.
    fn join(whole: &PackedBatch, parts: Vec<(PackedBatch, Self)>) -> Result<Self, String> {
        if parts.iter().all(|(_, verdict)| *verdict == ConsumeOutcome::Accept) {
            return Ok(ConsumeOutcome::Accept);
        }
        let mut joined = PackedBatch::new(whole.base_offset, whole.base_timestamp_ms);
        for (part, verdict) in &parts {
            joined.extend_from(match verdict {
                ConsumeOutcome::Rewrite(records) => records,
                ConsumeOutcome::Accept => part,
            })?;
        }
        Ok(ConsumeOutcome::Rewrite(joined))
    }
}

/// The outcome of a call whose input the caller no longer needs.
/// Digests waiting for the compile thread (see [`Plugins::queue_compile`]).
#[derive(Default)]
struct CompileQueue {
    waiting: std::collections::VecDeque<String>,
    /// Whether the compile thread runs (it ends when `waiting` is empty).
    running: bool,
}

/// What [`Plugins::load`] found.
enum Loaded {
    Ready(Arc<CompiledPlugin>),
    Compiling,
    Failed(String),
    Missing,
}

fn did_not_compile(digest: &str, reason: &str) -> PluginsError {
    PluginsError::InvalidPlugin(format!("plugin {digest} did not compile: {reason}"))
}

/// Drops the mark of a failed compile (never of one still running: its
/// thread's outcome replaces it).
fn forget_failure(compiling: &mut BTreeMap<String, Option<String>>, digest: &str) {
    if compiling.get(digest).is_some_and(Option::is_some) {
        compiling.remove(digest);
    }
}

fn outcome<T, I>(called: Called<T, I>) -> Result<T, PluginError> {
    called.and_then(|(outcome, _)| outcome)
}

fn summary(state: &State, name: &str) -> Option<PluginSummary> {
    use std::sync::atomic::Ordering::Relaxed;
    let registered = |entry: &PluginEntry| HookKind::parse(&entry.hook).map_or("unknown", HookKind::name);
    let (entry, hook, metrics, code_state, state_reason) =
        match (state.plugins.get(name), state.unready.get(name), state.missing.get(name)) {
            (Some(stored), _, _) => {
                (&stored.entry, stored.compiled.kind().name(), stored.metrics.clone(), "ready", String::new())
            }
            (None, Some(unready), _) => {
                let metrics = state.logs.get(name).map(|(_, metrics)| metrics.clone()).unwrap_or_default();
                let (code_state, reason) = match &unready.failed {
                    Some(reason) => ("failed", reason.clone()),
                    None => ("compiling", String::new()),
                };
                (&unready.entry, registered(&unready.entry), metrics, code_state, reason)
            }
            (None, None, Some(entry)) => (entry, registered(entry), Arc::default(), "fetching", String::new()),
            (None, None, None) => return None,
        };
    let mut attached_to: Vec<String> = state
        .attachments
        .values()
        .flatten()
        .filter(|attachment| attachment.entry.plugin == name)
        .map(|attachment| attachment.entry.topic.clone())
        .collect();
    attached_to.dedup();
    let client = state.clients.get(name).filter(|usage| usage.digest == entry.digest);
    Some(PluginSummary {
        name: name.to_owned(),
        hook,
        digest: entry.digest.clone(),
        size_bytes: entry.size_bytes,
        uploaded_ms: entry.uploaded_ms,
        calls: metrics.calls.load(Relaxed),
        errors: metrics.errors.load(Relaxed),
        traps: metrics.traps.load(Relaxed),
        busy_nanos: metrics.busy_nanos.load(Relaxed),
        attached_to,
        state: code_state,
        state_reason,
        client_calls: client.map_or(0, |usage| usage.calls),
        client_errors: client.map_or(0, |usage| usage.errors),
    })
}

/// A stored or produced batch as the contract's packed batch, read in place
/// (decompressed within bounds). The CRC is not checked here: a produced batch
/// is checked by the append, a stored one was checked when appended, and a
/// rewrite decodes the original with `RecordBatch::decode`, which checks it —
/// so a corrupt batch never gains a fresh CRC.
///
/// The contract's timestamp deltas are s32 milliseconds. When a record lies more
/// than that from the batch's base timestamp, the packed batch takes the earliest
/// record timestamp as its base instead; timestamps spanning more than an s32
/// are refused (`InvalidRecord`), never wrapped.
pub(crate) fn pack_view(view: &BatchView<'_>, base_offset: i64) -> Result<PackedBatch, PluginsError> {
    let section = records_section_unverified(view, DECOMPRESSED_BYTES_MAX).map_err(corrupt)?;
    let count = usize::try_from(view.records_count()).unwrap_or(0);
    let base_timestamp = view.base_timestamp();
    let packed_base = packed_base_timestamp(base_timestamp, &section, count)?;
    let mut packed = PackedBatch::new(base_offset, packed_base);
    packed.arena.reserve(section.len());
    packed.index.reserve(count * plugin_host::STRIDE);
    for record in RecordRefs::new(&section, count) {
        let record = record.map_err(corrupt)?;
        let bytes = |range: &Option<std::ops::Range<usize>>| range.clone().map(|range| &section[range]);
        let headers = record.headers.iter().map(|(key, value)| {
            // RecordRefs checked header keys are UTF-8.
            (std::str::from_utf8(&section[key.clone()]).unwrap_or_default(), value.clone().map(|value| &section[value]))
        });
        packed.push(
            record.offset_delta as u32,
            base_timestamp.wrapping_add(record.timestamp_delta),
            bytes(&record.key),
            bytes(&record.value),
            headers,
        );
    }
    Ok(packed)
}

/// The base timestamp a packed batch of these records can use: the batch's own
/// when every record's delta fits an s32, else the earliest record's.
fn packed_base_timestamp(base_timestamp: i64, section: &[u8], count: usize) -> Result<i64, PluginsError> {
    let (mut earliest, mut latest) = (i64::MAX, i64::MIN);
    for record in RecordRefs::new(section, count) {
        let timestamp = base_timestamp.wrapping_add(record.map_err(corrupt)?.timestamp_delta);
        (earliest, latest) = (earliest.min(timestamp), latest.max(timestamp));
    }
    let fits =
        |base: i64| [earliest, latest].iter().all(|timestamp| i32::try_from(timestamp.wrapping_sub(base)).is_ok());
    match () {
        _ if count == 0 || fits(base_timestamp) => Ok(base_timestamp),
        _ if fits(earliest) => Ok(earliest),
        _ => Err(PluginsError::InvalidRecord(format!(
            "the batch's record timestamps span {} ms; a plugin batch carries at most {} ms (s32 deltas)",
            latest.saturating_sub(earliest),
            i32::MAX
        ))),
    }
}

/// Puts a plugin's records into `batch`. For produce (`keep_offsets` false) the
/// count is the same and deltas are positions; for fetches the deltas are the
/// plugin's (a subset of the input's).
fn replace_records(batch: &mut RecordBatch, packed: &PackedBatch, keep_offsets: bool) -> Result<(), PluginsError> {
    let records = packed.records().map_err(|error| PluginsError::Unavailable(format!("plugin output: {error}")))?;
    batch.records = records
        .into_iter()
        .enumerate()
        .map(|(position, record)| Record {
            attributes: 0,
            timestamp_delta: record.timestamp_ms.wrapping_sub(batch.base_timestamp),
            offset_delta: if keep_offsets { record.offset_delta as i32 } else { position as i32 },
            key: record.key.map(<[u8]>::to_vec),
            value: record.value.map(<[u8]>::to_vec),
            headers: record.headers.iter().map(|(key, value)| Header::new(*key, value.map(<[u8]>::to_vec))).collect(),
        })
        .collect();
    if let Some(max) =
        batch.records.iter().map(|record| batch.base_timestamp.wrapping_add(record.timestamp_delta)).max()
    {
        batch.max_timestamp = max;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use abi::batch::BatchBuilder;

    use super::*;

    const DAY_MS: i64 = 24 * 60 * 60 * 1000;

    /// A packed batch on base offset 100 of `values` (offset deltas 0..).
    fn packed(values: &[&str]) -> PackedBatch {
        let mut batch = PackedBatch::new(100, 5_000);
        for (delta, value) in values.iter().enumerate() {
            batch.push(delta as u32, 5_000, None, Some(value.as_bytes()), []);
        }
        batch
    }

    fn values_of(batch: &PackedBatch) -> Vec<(u32, String)> {
        let records = batch.records().unwrap();
        records
            .iter()
            .map(|record| (record.offset_delta, String::from_utf8_lossy(record.value.unwrap()).into()))
            .collect()
    }

    #[test]
    fn verdicts_on_parts_join_into_the_verdict_on_the_batch() {
        let whole = packed(&["a", "b", "c", "d", "e"]);
        let parts = whole.parts(2).unwrap();
        let part = |index: usize| parts[index].clone();
        let accepted = vec![(part(0), ProduceOutcome::Accept), (part(1), ProduceOutcome::Accept)];
        assert_eq!(ProduceOutcome::join(&whole, accepted).unwrap(), ProduceOutcome::Accept);

        // A rejection's record index counts from the batch's first record.
        let rejected =
            vec![(part(0), ProduceOutcome::Accept), (part(1), ProduceOutcome::Reject(vec![(1, "no".into())]))];
        assert_eq!(ProduceOutcome::join(&whole, rejected).unwrap(), ProduceOutcome::Reject(vec![(3, "no".into())]));
        assert!(ProduceOutcome::Reject(Vec::new()).settles_batch());

        // A rewrite of one part keeps the other parts' records as they came.
        let mut upper = PackedBatch::new(100, 5_000);
        upper.push(2, 5_000, None, Some(b"C"), []);
        upper.push(3, 5_000, None, Some(b"D"), []);
        let rewritten = vec![
            (part(0), ProduceOutcome::Accept),
            (part(1), ProduceOutcome::Rewrite(upper)),
            (part(2), ProduceOutcome::Accept),
        ];
        let ProduceOutcome::Rewrite(joined) = ProduceOutcome::join(&whole, rewritten).unwrap() else { panic!() };
        let expected =
            [(0, "a"), (1, "b"), (2, "C"), (3, "D"), (4, "e")].map(|(delta, value)| (delta, value.to_owned()));
        assert_eq!(values_of(&joined), expected);

        // Dropped records of a consume rewrite stay out.
        let mut kept = PackedBatch::new(100, 5_000);
        kept.push(1, 5_000, None, Some(b"B"), []);
        let consumed = vec![
            (part(0), ConsumeOutcome::Rewrite(kept)),
            (part(1), ConsumeOutcome::Accept),
            (part(2), ConsumeOutcome::Accept),
        ];
        let ConsumeOutcome::Rewrite(joined) = ConsumeOutcome::join(&whole, consumed).unwrap() else { panic!() };
        let expected = [(1, "B"), (2, "c"), (3, "d"), (4, "e")].map(|(delta, value)| (delta, value.to_owned()));
        assert_eq!(values_of(&joined), expected);
    }

    fn encoded(base_timestamp: i64, timestamps: &[i64]) -> Vec<u8> {
        let mut builder = BatchBuilder::new(base_timestamp);
        for timestamp in timestamps {
            builder.push(*timestamp, None, Some(b"v"), &[]);
        }
        builder.encode()
    }

    #[test]
    fn a_batch_whose_records_lie_far_from_its_base_is_packed_on_the_earliest_timestamp() {
        let bytes = encoded(0, &[40 * DAY_MS, 41 * DAY_MS]);
        let packed = pack_view(&BatchView::new(&bytes).unwrap(), 0).unwrap();
        assert_eq!(packed.base_timestamp_ms, 40 * DAY_MS);
        let timestamps: Vec<i64> = packed.records().unwrap().iter().map(|record| record.timestamp_ms).collect();
        assert_eq!(timestamps, [40 * DAY_MS, 41 * DAY_MS], "exact, not wrapped");
    }

    #[test]
    fn a_batch_spanning_more_than_an_s32_of_milliseconds_is_refused_not_wrapped() {
        let bytes = encoded(0, &[0, 30 * DAY_MS]);
        let refused = pack_view(&BatchView::new(&bytes).unwrap(), 0).unwrap_err();
        assert!(matches!(refused, PluginsError::InvalidRecord(_)), "{refused:?}");
    }

    #[test]
    fn a_batch_within_range_keeps_its_own_base() {
        let bytes = encoded(1_000, &[1_000, 900, 5_000]);
        let packed = pack_view(&BatchView::new(&bytes).unwrap(), 7).unwrap();
        assert_eq!((packed.base_timestamp_ms, packed.base_offset), (1_000, 7));
    }
}

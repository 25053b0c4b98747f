//! Runs Weir plugins: WebAssembly components of the `weir:plugin` contract
//! (`wit/weir-plugin.wit`) under wasmtime, so that a plugin can never crash,
//! stall or exhaust its host.
//!
//! - [`PluginEngine`] compiles uploads ([`PluginEngine::compile`]: valid
//!   component, exports exactly one hook world) and owns the 1 ms epoch ticker.
//! - [`Plugin`] is one attached or deployed plugin with its configuration: it
//!   instantiates lazily from an `InstancePre`, calls `init`, and runs batches.
//!
//! Safety rules, all enforced here: every call has a budget of its thread's
//! CPU time and a wall-clock backstop (checked on every epoch tick, so the
//! call traps at most one tick after either; see [`budget`]); each instance's
//! memories are capped (`StoreLimits`; growing past the cap traps); a trap drops
//! the instance and the next call gets a fresh one (a batch that trapped for any
//! reason but its deadline is retried once on the fresh instance); everything a
//! plugin returns is checked (spans, counts, bytes) before the host uses it; the
//! only import is `log`, bounded per message and per instance. WASI imports a
//! Rust guest carries from its standard library are defined to trap — the guest
//! SDK routes panic messages to `log` instead of stderr.

mod bindings;
pub mod budget;
mod packed;
mod wasi;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, StoreLimits, StoreLimitsBuilder,
};

use bindings::consume_interceptor::{ConsumeInterceptorPlugin, ConsumeInterceptorPluginPre};
use bindings::partitioner::{PartitionerPlugin, PartitionerPluginPre};
use bindings::produce_interceptor::{ProduceInterceptorPlugin, ProduceInterceptorPluginPre};
use bindings::transform::{TransformPlugin, TransformPluginPre};
use bindings::{host, types};

use budget::Budget;
pub use budget::DeadlineClock;
pub use packed::{PackedBatch, PackedRecord, NULL, STRIDE};

/// The contract version this host speaks.
pub const CONTRACT: &str = "weir:plugin@0.1.0";

/// Which hook a plugin implements (the world it exports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookKind {
    Partitioner,
    ProduceInterceptor,
    ConsumeInterceptor,
    Transform,
}

impl HookKind {
    pub const ALL: [HookKind; 4] =
        [HookKind::Partitioner, HookKind::ProduceInterceptor, HookKind::ConsumeInterceptor, HookKind::Transform];

    /// The name used in the CLI, the schema and the WIT (`produce-interceptor`, …).
    pub fn name(self) -> &'static str {
        match self {
            HookKind::Partitioner => "partitioner",
            HookKind::ProduceInterceptor => "produce-interceptor",
            HookKind::ConsumeInterceptor => "consume-interceptor",
            HookKind::Transform => "transform",
        }
    }

    pub fn parse(name: &str) -> Option<HookKind> {
        HookKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    fn export(self) -> String {
        format!("weir:plugin/{}@0.1.0", self.name())
    }
}

/// Bounds every plugin runs under.
#[derive(Clone, Debug)]
pub struct HostLimits {
    /// CPU time one call (one batch) may use, counted on the thread that
    /// runs it: load elsewhere on the machine does not count against it.
    pub call_deadline: Duration,
    /// Longest one call may take in elapsed time (the backstop for a call
    /// the machine starves of CPU).
    pub call_wall_deadline: Duration,
    /// CPU time `init` may use (instantiation included): it may build tables
    /// from its configuration, and runs once per instance.
    pub init_deadline: Duration,
    /// Longest `init` may take in elapsed time.
    pub init_wall_deadline: Duration,
    /// Cap on an instance's linear memories, together.
    pub memory_bytes: usize,
    /// Output records per call (replacements, transform output).
    pub output_records_max: usize,
    /// Output arena bytes per call.
    pub output_bytes_max: usize,
    /// Log entries kept per plugin, and bytes per entry.
    pub log_entries_max: usize,
    pub log_message_bytes_max: usize,
    /// Instances alive at once in this engine (sizes the pooling allocator).
    pub instances_max: u32,
}

impl Default for HostLimits {
    fn default() -> HostLimits {
        HostLimits {
            call_deadline: Duration::from_millis(10),
            call_wall_deadline: Duration::from_secs(1),
            init_deadline: Duration::from_secs(1),
            init_wall_deadline: Duration::from_secs(10),
            memory_bytes: 64 << 20,
            output_records_max: 100_000,
            output_bytes_max: 32 << 20,
            log_entries_max: 256,
            log_message_bytes_max: 1024,
            instances_max: 64,
        }
    }
}

/// The configuration keys the host takes for itself: they set one plugin's
/// limits (overriding the host's defaults for it alone) and are removed
/// before the configuration reaches `init` or the plugin's environment.
pub const LIMIT_KEYS: [&str; 3] = ["weir.call_deadline_ms", "weir.init_deadline_ms", "weir.memory_bytes_max"];

/// Largest memory a plugin may ask for with `weir.memory_bytes_max`.
pub const MEMORY_BYTES_CEILING: usize = 4 << 30;

impl HostLimits {
    /// These limits with a plugin's own settings applied (the [`LIMIT_KEYS`]
    /// of its configuration), and the rest of the configuration. A setting out
    /// of bounds is refused like a configuration `init` refuses.
    pub fn for_plugin(&self, config: &[(String, String)]) -> Result<(HostLimits, Vec<(String, String)>), PluginError> {
        let mut limits = self.clone();
        let mut rest = Vec::with_capacity(config.len());
        for (key, value) in config {
            let bounded = |low: u64, high: u64| -> Result<u64, PluginError> {
                value.parse::<u64>().ok().filter(|number| (low..=high).contains(number)).ok_or_else(|| {
                    PluginError::Config(format!("{key} must be a whole number from {low} to {high}, not {value:?}"))
                })
            };
            match key.as_str() {
                "weir.call_deadline_ms" => {
                    limits.call_deadline = Duration::from_millis(bounded(1, 60_000)?);
                    limits.call_wall_deadline = limits.call_wall_deadline.max(limits.call_deadline);
                }
                "weir.init_deadline_ms" => {
                    limits.init_deadline = Duration::from_millis(bounded(1, 600_000)?);
                    limits.init_wall_deadline = limits.init_wall_deadline.max(limits.init_deadline * 10);
                }
                "weir.memory_bytes_max" => {
                    limits.memory_bytes = bounded(1 << 20, MEMORY_BYTES_CEILING as u64)? as usize;
                }
                _ if key.starts_with("weir.") => {
                    return Err(PluginError::Config(format!(
                        "{key} is not a setting the host knows (keys starting with weir. are the host's: {})",
                        LIMIT_KEYS.join(", ")
                    )))
                }
                _ => rest.push((key.clone(), value.clone())),
            }
        }
        Ok((limits, rest))
    }
}

/// Why a plugin could not be loaded or did not do its job.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// Not a valid component, or not one of the contract's worlds.
    #[error("not a valid weir plugin: {0}")]
    Invalid(String),
    /// `init` refused its configuration.
    #[error("the plugin refused its configuration: {0}")]
    Config(String),
    /// Used up its CPU-time budget, or ran past the wall-clock backstop.
    #[error("the plugin ran past its {deadline_ms} ms {clock} deadline")]
    Deadline { deadline_ms: u64, clock: DeadlineClock },
    /// Trapped (a panic, an out-of-bounds access, the memory cap, …).
    #[error("the plugin trapped: {0}")]
    Trap(String),
    /// The plugin answered with an error of its own.
    #[error("the plugin failed ({code}): {message}")]
    Failed { code: &'static str, message: String },
    /// Output that breaks the contract (bad spans, wrong counts, too much).
    #[error("the plugin returned bad output: {0}")]
    BadOutput(String),
    /// No instance slot free, or another host-side limit.
    #[error("cannot run the plugin: {0}")]
    Unavailable(String),
}

/// A plugin's log: the newest entries, each truncated.
#[derive(Debug, Default)]
pub struct PluginLog {
    entries: Mutex<VecDeque<LogEntry>>,
    capacity: usize,
    message_bytes_max: usize,
    dropped: AtomicU64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub unix_ms: i64,
    /// `trace` … `error`.
    pub level: &'static str,
    pub message: String,
}

impl PluginLog {
    pub fn new(capacity: usize, message_bytes_max: usize) -> PluginLog {
        PluginLog { entries: Mutex::default(), capacity, message_bytes_max, dropped: AtomicU64::new(0) }
    }

    /// Adds an entry (the host's own notes about the plugin, too).
    pub fn push(&self, level: &'static str, mut message: String) {
        if message.len() > self.message_bytes_max {
            let mut cut = self.message_bytes_max;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_millis() as i64);
        let mut entries = self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if entries.len() >= self.capacity.max(1) {
            entries.pop_front();
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        entries.push_back(LogEntry { unix_ms, level, message });
    }

    pub fn entries(&self) -> Vec<LogEntry> {
        self.entries.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).iter().cloned().collect()
    }

    /// Entries pushed out by newer ones.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// Counters of one plugin.
#[derive(Debug, Default)]
pub struct PluginMetrics {
    pub calls: AtomicU64,
    pub errors: AtomicU64,
    pub traps: AtomicU64,
    pub instantiations: AtomicU64,
    /// Elapsed time in calls.
    pub busy_nanos: AtomicU64,
    /// CPU time of the threads running the calls, in calls.
    pub cpu_nanos: AtomicU64,
}

/// A store's resource limits, and how far its memories have grown.
struct Limiter {
    limits: StoreLimits,
    /// Bytes of all the instance's linear memories together.
    memory_bytes: usize,
    /// The plugin's memory cap.
    memory_bytes_max: usize,
}

impl wasmtime::ResourceLimiter for Limiter {
    /// The cap holds for all of an instance's memories together.
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let total = (self.memory_bytes + desired).saturating_sub(current);
        if total > self.memory_bytes_max {
            // A trap, as `StoreLimits` with `trap_on_grow_failure` gives.
            return Err(wasmtime::Error::msg(format!(
                "forcing trap when growing memory: the instance's memories would take {total} bytes, more than \
                 its cap of {}",
                self.memory_bytes_max
            )));
        }
        let allowed = self.limits.memory_growing(current, desired, maximum)?;
        if allowed {
            self.memory_bytes = total;
        }
        Ok(allowed)
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// What a store holds for the host functions.
struct State {
    limits: Limiter,
    log: Arc<PluginLog>,
    /// The running call's budget, checked on every epoch tick.
    budget: Budget,
    /// Which limit the last interrupted call ran past.
    expired: Option<DeadlineClock>,
    /// The instance's WASI 0.2 world (see [`wasi`]) and its resources.
    wasi: wasmtime_wasi::WasiCtx,
    table: wasmtime::component::ResourceTable,
}

impl wasmtime_wasi::WasiView for State {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        wasmtime_wasi::WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl types::Host for State {}

impl host::Host for State {
    fn log(&mut self, level: host::Level, message: String) {
        let level = match level {
            host::Level::Trace => "trace",
            host::Level::Debug => "debug",
            host::Level::Info => "info",
            host::Level::Warn => "warn",
            host::Level::Error => "error",
        };
        self.log.push(level, message);
    }
}

/// Compiles plugins and runs the epoch ticker; share one per process.
pub struct PluginEngine {
    engine: Engine,
    linker: Linker<State>,
    limits: HostLimits,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for PluginEngine {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("PluginEngine").field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl Drop for PluginEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// How often the epoch advances: the granularity of call deadlines.
pub const TICK: Duration = Duration::from_millis(1);

fn internal(error: impl std::fmt::Display) -> PluginError {
    PluginError::Unavailable(error.to_string())
}

impl PluginEngine {
    pub fn new(limits: HostLimits) -> Result<PluginEngine, PluginError> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        let mut pooling = PoolingAllocationConfig::default();
        pooling.total_component_instances(limits.instances_max);
        // A Rust component is a few core instances, each with a memory and tables.
        pooling.total_core_instances(limits.instances_max * 8);
        pooling.total_memories(limits.instances_max * 2);
        pooling.total_tables(limits.instances_max * 8);
        // Slots are address space only: each store's own cap (`StoreLimits`)
        // is what holds a plugin to its limit.
        pooling.max_memory_size(MEMORY_BYTES_CEILING.max(limits.memory_bytes));
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
        let engine = Engine::new(&config).map_err(internal)?;
        let mut linker = Linker::new(&engine);
        PartitionerPlugin::add_to_linker::<State, HasSelf<State>>(&mut linker, |state| state).map_err(internal)?;
        wasi::add_to_linker(&mut linker).map_err(internal)?;

        let stop = Arc::new(AtomicBool::new(false));
        let ticker = (engine.clone(), stop.clone());
        std::thread::Builder::new()
            .name("weir-plugin-epoch".to_owned())
            .spawn(move || {
                let (engine, stop) = ticker;
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    engine.increment_epoch();
                }
            })
            .map_err(internal)?;
        Ok(PluginEngine { engine, linker, limits, stop })
    }

    pub fn limits(&self) -> &HostLimits {
        &self.limits
    }

    /// Validates and compiles an upload: a component exporting exactly one of
    /// the contract's hook worlds. Slow (tens to hundreds of ms): do it once, on
    /// upload, and keep the result (or its [`CompiledPlugin::serialize`]d form).
    pub fn compile(&self, wasm: &[u8]) -> Result<CompiledPlugin, PluginError> {
        check_header(wasm)?;
        let component = Component::new(&self.engine, wasm).map_err(|error| {
            PluginError::Invalid(format!("not a WebAssembly component the host can compile: {error:#}"))
        })?;
        self.prepare(component, hex_sha256(wasm))
    }

    /// Loads what [`CompiledPlugin::serialize`] wrote. Only ever pass bytes this
    /// host wrote itself (they are machine code): never user uploads.
    ///
    /// # Safety
    /// `bytes` must come from `serialize` of an engine with the same
    /// configuration, unmodified.
    pub unsafe fn deserialize(&self, bytes: &[u8], digest: String) -> Result<CompiledPlugin, PluginError> {
        // SAFETY: the caller guarantees the bytes are our own serialized output.
        let component = unsafe { Component::deserialize(&self.engine, bytes) }.map_err(internal)?;
        self.prepare(component, digest)
    }

    fn prepare(&self, component: Component, digest: String) -> Result<CompiledPlugin, PluginError> {
        let exported: Vec<String> =
            component.component_type().exports(&self.engine).map(|(name, _)| name.to_owned()).collect();
        let kind = hook_of(&exported)?;
        // Everything a plugin imports must be the contract's `host` or WASI 0.2:
        // anything else is refused here, naming the import, not at its first call.
        let pre = self.linker.instantiate_pre(&component).map_err(|error| {
            PluginError::Invalid(format!(
                "imports something this host does not provide (plugins get {CONTRACT}'s host \
                 interface and WASI 0.2): {error:#}"
            ))
        })?;
        let mismatch = |error: wasmtime::Error| {
            PluginError::Invalid(format!("does not match the {} world: {error:#}", kind.name()))
        };
        let pre = match kind {
            HookKind::Partitioner => Pre::Partitioner(PartitionerPluginPre::new(pre).map_err(mismatch)?),
            HookKind::ProduceInterceptor => {
                Pre::ProduceInterceptor(ProduceInterceptorPluginPre::new(pre).map_err(mismatch)?)
            }
            HookKind::ConsumeInterceptor => {
                Pre::ConsumeInterceptor(ConsumeInterceptorPluginPre::new(pre).map_err(mismatch)?)
            }
            HookKind::Transform => Pre::Transform(TransformPluginPre::new(pre).map_err(mismatch)?),
        };
        Ok(CompiledPlugin { kind, digest, component, pre, engine: self.engine.clone(), limits: self.limits.clone() })
    }
}

/// What [`inspect`] learnt of an upload without compiling it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspection {
    pub kind: HookKind,
    /// Lowercase hex SHA-256 of the bytes.
    pub digest: String,
}

fn check_header(wasm: &[u8]) -> Result<(), PluginError> {
    if !wasm.starts_with(b"\0asm") {
        return Err(PluginError::Invalid("not a WebAssembly binary (no \\0asm header)".to_owned()));
    }
    if wasm.get(4..8) == Some(&[1, 0, 0, 0]) {
        return Err(PluginError::Invalid(
            "a core WebAssembly module, not a component: build the plugin for wasm32-wasip2 \
             (see plugins/README.md)"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Whether a component may import `name`: the contract's `host` interface (and
/// its `types`), or an interface of WASI 0.2 (what this host provides, locked
/// down).
fn importable(name: &str) -> bool {
    let contract_version = &CONTRACT["weir:plugin@".len()..];
    ["host", "types"].iter().any(|interface| name == format!("weir:plugin/{interface}@{contract_version}"))
        || name.strip_prefix("wasi:").is_some_and(|rest| rest.contains("@0.2."))
}

/// Reads what an upload is without compiling it (milliseconds, where a compile
/// takes seconds for an interpreter's component): a component (not a core
/// module) that exports exactly one of the contract's hooks and imports only
/// the contract's `host` and WASI 0.2. [`PluginEngine::compile`] validates the
/// rest (every function body, the exact types of the imports); an upload
/// passing this can still fail there.
pub fn inspect(wasm: &[u8]) -> Result<Inspection, PluginError> {
    use wasmparser::{Parser, Payload};
    check_header(wasm)?;
    let malformed = |error: wasmparser::BinaryReaderError| {
        PluginError::Invalid(format!("not a WebAssembly component the host can read: {error}"))
    };
    let (mut exported, mut refused) = (Vec::new(), Vec::new());
    // Nested modules and components are parsed in line; only the outermost
    // component's imports and exports are the plugin's.
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.map_err(malformed)? {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(imports) if depth == 0 => {
                for import in imports {
                    let name = import.map_err(malformed)?.name.name;
                    if !importable(name) {
                        refused.push(name.to_owned());
                    }
                }
            }
            Payload::ComponentExportSection(exports) if depth == 0 => {
                for export in exports {
                    exported.push(export.map_err(malformed)?.name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    if !refused.is_empty() {
        return Err(PluginError::Invalid(format!(
            "imports {refused:?}, which this host does not provide (plugins get {CONTRACT}'s host \
             and types interfaces and WASI 0.2)"
        )));
    }
    let kind = hook_of(&exported)?;
    Ok(Inspection { kind, digest: hex_sha256(wasm) })
}

/// The one hook among a component's exports.
fn hook_of(exported: &[String]) -> Result<HookKind, PluginError> {
    let kinds: Vec<HookKind> =
        HookKind::ALL.into_iter().filter(|kind| exported.iter().any(|name| *name == kind.export())).collect();
    match kinds[..] {
        [kind] => Ok(kind),
        [] => Err(PluginError::Invalid(format!(
            "exports none of the {CONTRACT} hooks (partitioner, produce-interceptor, \
             consume-interceptor, transform); it exports {exported:?}"
        ))),
        _ => Err(PluginError::Invalid(format!("exports more than one hook: {kinds:?}"))),
    }
}

/// The lowercase hex SHA-256 of `bytes`: a plugin's content address.
pub fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|byte| format!("{byte:02x}")).collect()
}

enum Pre {
    Partitioner(PartitionerPluginPre<State>),
    ProduceInterceptor(ProduceInterceptorPluginPre<State>),
    ConsumeInterceptor(ConsumeInterceptorPluginPre<State>),
    Transform(TransformPluginPre<State>),
}

/// A validated, compiled plugin, ready to instantiate.
pub struct CompiledPlugin {
    kind: HookKind,
    digest: String,
    component: Component,
    pre: Pre,
    engine: Engine,
    limits: HostLimits,
}

impl std::fmt::Debug for CompiledPlugin {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("CompiledPlugin").field("kind", &self.kind).field("digest", &self.digest).finish()
    }
}

impl CompiledPlugin {
    pub fn kind(&self) -> HookKind {
        self.kind
    }

    /// SHA-256 of the uploaded bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The compiled artifact, for a cache only this host reads.
    pub fn serialize(&self) -> Result<Vec<u8>, PluginError> {
        self.component.serialize().map_err(internal)
    }
}

enum Exports {
    Partitioner(PartitionerPlugin),
    ProduceInterceptor(ProduceInterceptorPlugin),
    ConsumeInterceptor(ConsumeInterceptorPlugin),
    Transform(TransformPlugin),
}

/// What a plugin's `init` reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
}

/// A produce interceptor's answer for a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProduceOutcome {
    /// Store the batch as it is.
    Accept,
    /// Store these records instead (same count and order; replaced values in place).
    Rewrite(PackedBatch),
    /// Refuse the batch: `(record index, reason)` per rejected record.
    Reject(Vec<(usize, String)>),
}

/// A consume interceptor's answer for a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsumeOutcome {
    Accept,
    /// The records to hand out (offset deltas of the input; dropped ones missing).
    Rewrite(PackedBatch),
}

/// A transform's output for a batch: records and, per record, its output topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransformOutcome {
    pub records: PackedBatch,
    pub topic_index: Vec<u8>,
}

/// What a verdict does to an input record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Choice {
    Keep,
    Replace,
    Drop,
}

/// A failure inside a call, before it is reported.
enum CallError {
    Trap(String),
    Deadline(DeadlineClock),
    Other(PluginError),
}

/// What a failed call into `store` means: an interrupt is the budget the epoch
/// callback found spent; anything else is a trap.
fn classify(error: wasmtime::Error, store: &Store<State>) -> CallError {
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => CallError::Deadline(store.data().expired.unwrap_or(DeadlineClock::CpuTime)),
        _ => CallError::Trap(trap_summary(&error)),
    }
}

/// A trap in one line: what happened and the innermost function it happened
/// in (a whole wasm backtrace runs to kilobytes).
fn trap_summary(error: &wasmtime::Error) -> String {
    let cause = error.root_cause().to_string();
    let Some(frames) = error.downcast_ref::<wasmtime::WasmBacktrace>().map(wasmtime::WasmBacktrace::frames) else {
        return cause;
    };
    // The innermost frame with a name (a plugin built with its name section),
    // else the innermost frame's index.
    let named = frames.iter().find_map(|frame| frame.func_name().map(str::to_owned));
    match (named, frames.first()) {
        (Some(function), _) => format!("{cause} (in {function})"),
        (None, Some(frame)) => format!("{cause} (in wasm function {})", frame.func_index()),
        (None, None) => cause,
    }
}

fn plugin_error(error: types::PluginError) -> PluginError {
    match error.code {
        types::ErrorCode::InvalidConfig => PluginError::Config(error.message),
        types::ErrorCode::InvalidInput => PluginError::Failed { code: "invalid-input", message: error.message },
        types::ErrorCode::Retryable => PluginError::Failed { code: "retryable", message: error.message },
        types::ErrorCode::Internal => PluginError::Failed { code: "internal", message: error.message },
    }
}

struct Instance {
    store: Store<State>,
    exports: Exports,
}

impl Instance {
    fn new(
        plugin: &CompiledPlugin,
        limits: &HostLimits,
        config: &[(String, String)],
        log: &Arc<PluginLog>,
    ) -> Result<Instance, CallError> {
        let budget = Budget::start(limits.init_deadline, limits.init_wall_deadline);
        let memory_bytes_max = limits.memory_bytes;
        let limits = StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes)
            .trap_on_grow_failure(true)
            .instances(32)
            .tables(64)
            .memories(8)
            .build();
        let state = State {
            limits: Limiter { limits, memory_bytes: 0, memory_bytes_max },
            log: log.clone(),
            budget,
            expired: None,
            wasi: wasi::context(config, log),
            table: wasi::table(),
        };
        let mut store = Store::new(&plugin.engine, state);
        store.limiter(|state| &mut state.limits);
        // Every tick while wasm runs: go on while the call is within budget.
        store.epoch_deadline_callback(|mut context| {
            let state = context.data_mut();
            state.expired = state.budget.expired();
            Ok(match state.expired {
                None => wasmtime::UpdateDeadline::Continue(1),
                Some(_) => wasmtime::UpdateDeadline::Interrupt,
            })
        });
        store.set_epoch_deadline(1);
        let exports = match &plugin.pre {
            Pre::Partitioner(pre) => pre.instantiate(&mut store).map(Exports::Partitioner),
            Pre::ProduceInterceptor(pre) => pre.instantiate(&mut store).map(Exports::ProduceInterceptor),
            Pre::ConsumeInterceptor(pre) => pre.instantiate(&mut store).map(Exports::ConsumeInterceptor),
            Pre::Transform(pre) => pre.instantiate(&mut store).map(Exports::Transform),
        }
        .map_err(|error| match error.downcast_ref::<wasmtime::Trap>() {
            Some(_) => classify(error, &store),
            None => CallError::Other(PluginError::Unavailable(format!("cannot instantiate: {error:#}"))),
        })?;
        Ok(Instance { store, exports })
    }

    /// Starts a call's budget (on the thread that makes the call).
    fn begin(&mut self, cpu_max: Duration, wall_max: Duration) {
        let state = self.store.data_mut();
        state.budget = Budget::start(cpu_max, wall_max);
        state.expired = None;
        self.store.set_epoch_deadline(1);
    }

    #[allow(clippy::ptr_arg)] // the generated binding takes a &Vec
    fn init(&mut self, config: &Vec<(String, String)>, limits: &HostLimits) -> Result<PluginInfo, CallError> {
        self.begin(limits.init_deadline, limits.init_wall_deadline);
        let store = &mut self.store;
        let answer = match &self.exports {
            Exports::Partitioner(plugin) => plugin.weir_plugin_partitioner().call_init(store, config),
            Exports::ProduceInterceptor(plugin) => plugin.weir_plugin_produce_interceptor().call_init(store, config),
            Exports::ConsumeInterceptor(plugin) => plugin.weir_plugin_consume_interceptor().call_init(store, config),
            Exports::Transform(plugin) => plugin.weir_plugin_transform().call_init(store, config),
        };
        match answer.map_err(|error| classify(error, &self.store))? {
            Ok(info) => Ok(PluginInfo { name: info.name, version: info.version }),
            Err(error) => Err(CallError::Other(plugin_error(error))),
        }
    }
}

/// A batch lent to a call as the contract's type (its buffers moved, not
/// copied), put back when dropped.
struct Lent<'a> {
    batch: &'a mut PackedBatch,
    input: types::Batch,
}

impl<'a> Lent<'a> {
    fn new(batch: &'a mut PackedBatch) -> Lent<'a> {
        let input = types::Batch {
            base_offset: batch.base_offset,
            base_timestamp_ms: batch.base_timestamp_ms,
            arena: std::mem::take(&mut batch.arena),
            index: std::mem::take(&mut batch.index),
        };
        Lent { batch, input }
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        self.batch.arena = std::mem::take(&mut self.input.arena);
        self.batch.index = std::mem::take(&mut self.input.index);
    }
}

/// One attached or deployed plugin: its compiled code, configuration, current
/// instance, log and counters. Calls take `&mut self`: one batch at a time.
/// Each call borrows its input batch mutably only to hand its buffers to the
/// plugin without copying them; the batch is back, unchanged, when it returns.
pub struct Plugin {
    compiled: Arc<CompiledPlugin>,
    /// As given: the host's settings ([`LIMIT_KEYS`]) included.
    config: Vec<(String, String)>,
    /// What `init` and the environment get: the host's settings left out.
    plugin_config: Vec<(String, String)>,
    /// The engine's limits with this plugin's settings applied.
    limits: HostLimits,
    instance: Option<Instance>,
    info: PluginInfo,
    log: Arc<PluginLog>,
    metrics: Arc<PluginMetrics>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Plugin").field("compiled", &self.compiled).field("info", &self.info).finish()
    }
}

impl Plugin {
    /// Instantiates `compiled` and runs `init(config)`: a refused configuration
    /// is a [`PluginError::Config`] here, before anything is attached. The
    /// configuration's [`LIMIT_KEYS`] set this plugin's limits instead.
    pub fn start(
        compiled: Arc<CompiledPlugin>,
        config: Vec<(String, String)>,
        log: Arc<PluginLog>,
        metrics: Arc<PluginMetrics>,
    ) -> Result<Plugin, PluginError> {
        let (limits, plugin_config) = compiled.limits.for_plugin(&config)?;
        let mut plugin = Plugin {
            compiled,
            config,
            plugin_config,
            limits,
            instance: None,
            info: PluginInfo { name: String::new(), version: String::new() },
            log,
            metrics,
        };
        plugin.info = plugin.fresh_instance().map_err(|error| plugin.report(error))?;
        Ok(plugin)
    }

    pub fn kind(&self) -> HookKind {
        self.compiled.kind
    }

    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// The code this plugin runs.
    pub fn compiled(&self) -> &Arc<CompiledPlugin> {
        &self.compiled
    }

    /// The configuration it was started with (the host's settings included).
    pub fn config(&self) -> &[(String, String)] {
        &self.config
    }

    /// The limits it runs under: the engine's, with its own settings applied.
    pub fn limits(&self) -> &HostLimits {
        &self.limits
    }

    pub fn log(&self) -> &Arc<PluginLog> {
        &self.log
    }

    pub fn metrics(&self) -> &Arc<PluginMetrics> {
        &self.metrics
    }

    fn fresh_instance(&mut self) -> Result<PluginInfo, CallError> {
        self.instance = None;
        self.metrics.instantiations.fetch_add(1, Ordering::Relaxed);
        let mut instance = Instance::new(&self.compiled, &self.limits, &self.plugin_config, &self.log)?;
        let info = instance.init(&self.plugin_config, &self.limits)?;
        self.instance = Some(instance);
        Ok(info)
    }

    fn report(&self, error: CallError) -> PluginError {
        let error = match error {
            CallError::Deadline(clock) => {
                let limits = &self.limits;
                let deadline = match clock {
                    DeadlineClock::CpuTime => limits.call_deadline,
                    DeadlineClock::WallClock => limits.call_wall_deadline,
                };
                PluginError::Deadline { deadline_ms: deadline.as_millis() as u64, clock }
            }
            CallError::Trap(message) => {
                self.metrics.traps.fetch_add(1, Ordering::Relaxed);
                PluginError::Trap(message)
            }
            CallError::Other(error) => error,
        };
        self.log.push("error", format!("host: {error}"));
        error
    }

    /// Runs `call` on a live instance. A trap drops the instance; a trap other
    /// than the deadline is retried once on a fresh one (a deadline is not: the
    /// same batch would most likely run out of time again, doubling the stall).
    fn call<T>(&mut self, call: impl Fn(&mut Instance) -> Result<T, CallError>) -> Result<T, PluginError> {
        let started = Instant::now();
        let cpu_started = budget::thread_cpu_time();
        self.metrics.calls.fetch_add(1, Ordering::Relaxed);
        let (cpu_max, wall_max) = (self.limits.call_deadline, self.limits.call_wall_deadline);
        let mut outcome = Err(CallError::Other(PluginError::Unavailable("not run".to_owned())));
        for attempt in 0..2 {
            if self.instance.is_none() {
                if let Err(error) = self.fresh_instance() {
                    // Not this batch's doing: whoever called may try again.
                    let why = match error {
                        CallError::Trap(message) => format!("trapped: {message}"),
                        CallError::Deadline(clock) => format!("ran past its {clock} deadline"),
                        CallError::Other(error) => error.to_string(),
                    };
                    let message = format!("a fresh instance did not start ({why})");
                    outcome = Err(CallError::Other(PluginError::Unavailable(message)));
                    break;
                }
            }
            let Some(instance) = self.instance.as_mut() else { break };
            instance.begin(cpu_max, wall_max);
            outcome = call(instance);
            match &outcome {
                Err(CallError::Trap(message)) => {
                    self.instance = None;
                    if attempt == 0 {
                        self.metrics.traps.fetch_add(1, Ordering::Relaxed);
                        self.log.push("error", format!("host: trapped ({message}); retrying on a fresh instance"));
                    }
                }
                Err(CallError::Deadline(_)) => {
                    self.instance = None;
                    break;
                }
                _ => break,
            }
        }
        self.recycle_if_full();
        self.metrics.busy_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let cpu_used = budget::thread_cpu_time().saturating_sub(cpu_started);
        self.metrics.cpu_nanos.fetch_add(cpu_used.as_nanos() as u64, Ordering::Relaxed);
        outcome.map_err(|error| {
            self.metrics.errors.fetch_add(1, Ordering::Relaxed);
            self.report(error)
        })
    }

    /// Drops an instance whose memories have grown past 3/4 of its cap, so the
    /// next call starts on a fresh one instead of trapping at the cap midway.
    /// Interpreters that embed a garbage collector (componentize-py,
    /// componentize-js) keep some of every call's garbage for the life of the
    /// instance: without this, every few hundred calls would fail and retry.
    fn recycle_if_full(&mut self) {
        let cap = self.limits.memory_bytes;
        let Some(instance) = &self.instance else { return };
        let used = instance.store.data().limits.memory_bytes;
        if used > cap / 4 * 3 {
            self.instance = None;
            self.log.push(
                "debug",
                format!("host: a fresh instance for the next call: memory grew to {used} of {cap} bytes"),
            );
        }
    }

    fn unpack(&self, batch: types::Batch) -> Result<PackedBatch, PluginError> {
        let limits = &self.limits;
        let packed = PackedBatch {
            base_offset: -1,
            base_timestamp_ms: batch.base_timestamp_ms,
            arena: batch.arena,
            index: batch.index,
        };
        if packed.arena.len() > limits.output_bytes_max {
            return Err(PluginError::BadOutput(format!(
                "{} bytes of records, more than the {} allowed",
                packed.arena.len(),
                limits.output_bytes_max
            )));
        }
        if packed.len() > limits.output_records_max {
            return Err(PluginError::BadOutput(format!(
                "{} records, more than the {} allowed",
                packed.len(),
                limits.output_records_max
            )));
        }
        packed.records().map_err(PluginError::BadOutput)?;
        Ok(packed)
    }

    /// The input with replacements swapped in and dropped records left out;
    /// every record keeps its input offset delta. Checks the replacements:
    /// well-formed, within limits, one per `Replace`.
    fn merge(
        &self,
        batch: &PackedBatch,
        replacements: types::Batch,
        choices: Vec<Choice>,
    ) -> Result<PackedBatch, PluginError> {
        let replaced = choices.iter().filter(|choice| **choice == Choice::Replace).count();
        let replacements = self.unpack(replacements).map_err(|error| self.bad(error))?;
        let replacement_records = replacements.records().map_err(|error| self.bad(PluginError::BadOutput(error)))?;
        if replacement_records.len() != replaced {
            return Err(self.bad(PluginError::BadOutput(format!(
                "{} replacements for {replaced} replace verdicts",
                replacement_records.len()
            ))));
        }
        let originals = batch.records().map_err(|error| self.bad(PluginError::BadOutput(error)))?;
        let mut merged = PackedBatch::new(batch.base_offset, batch.base_timestamp_ms);
        let mut replacement_records = replacement_records.into_iter();
        for (original, choice) in originals.into_iter().zip(choices) {
            let delta = original.offset_delta;
            let record = match choice {
                Choice::Keep => original,
                Choice::Replace => replacement_records.next().unwrap_or(original),
                Choice::Drop => continue,
            };
            // The merged batch keeps the input's base: a replacement whose timestamp
            // is further from it than the contract's s32 delta is refused, not wrapped.
            if i32::try_from(record.timestamp_ms.wrapping_sub(batch.base_timestamp_ms)).is_err() {
                return Err(self.bad(PluginError::BadOutput(format!(
                    "a replacement has timestamp {} ms, more than an s32 of milliseconds from the batch's base \
                     timestamp {} ms",
                    record.timestamp_ms, batch.base_timestamp_ms
                ))));
            }
            merged.push(delta, record.timestamp_ms, record.key, record.value, record.headers.iter().copied());
        }
        Ok(merged)
    }

    fn bad(&self, error: PluginError) -> PluginError {
        self.metrics.errors.fetch_add(1, Ordering::Relaxed);
        self.log.push("error", format!("host: {error}"));
        error
    }

    fn wrong_kind(&self, wanted: HookKind) -> PluginError {
        PluginError::Unavailable(format!("a {} plugin cannot run as a {}", self.kind().name(), wanted.name()))
    }

    /// One partition per record (`None`: the built-in choice).
    pub fn partition(
        &mut self,
        topic: &str,
        partition_count: u32,
        batch: &mut PackedBatch,
    ) -> Result<Vec<Option<u32>>, PluginError> {
        if self.kind() != HookKind::Partitioner {
            return Err(self.wrong_kind(HookKind::Partitioner));
        }
        let lent = Lent::new(batch);
        let answer = self.call(|instance| {
            let Exports::Partitioner(plugin) = &instance.exports else { unreachable!("kind checked") };
            let answer = plugin.weir_plugin_partitioner().call_partition(
                &mut instance.store,
                topic,
                partition_count,
                &lent.input,
            );
            answer
                .map_err(|error| classify(error, &instance.store))?
                .map_err(|error| CallError::Other(plugin_error(error)))
        })?;
        drop(lent);
        if answer.len() != batch.len() {
            return Err(self.bad(PluginError::BadOutput(format!(
                "{} partitions for {} records",
                answer.len(),
                batch.len()
            ))));
        }
        answer
            .into_iter()
            .map(|partition| match partition {
                NULL => Ok(None),
                partition if partition < partition_count => Ok(Some(partition)),
                partition => Err(self
                    .bad(PluginError::BadOutput(format!("partition {partition} of a topic with {partition_count}")))),
            })
            .collect()
    }

    /// A produce interceptor's verdict on a batch (before offsets are assigned).
    pub fn on_produce(
        &mut self,
        topic: &str,
        partition: u32,
        batch: &mut PackedBatch,
    ) -> Result<ProduceOutcome, PluginError> {
        use bindings::produce_interceptor::exports::weir::plugin::produce_interceptor::Action;
        if self.kind() != HookKind::ProduceInterceptor {
            return Err(self.wrong_kind(HookKind::ProduceInterceptor));
        }
        let lent = Lent::new(batch);
        let target = types::TopicPartition { topic: topic.to_owned(), partition };
        let verdicts = self.call(|instance| {
            let Exports::ProduceInterceptor(plugin) = &instance.exports else { unreachable!("kind checked") };
            let answer =
                plugin.weir_plugin_produce_interceptor().call_on_produce(&mut instance.store, &target, &lent.input);
            answer
                .map_err(|error| classify(error, &instance.store))?
                .map_err(|error| CallError::Other(plugin_error(error)))
        })?;
        drop(lent);
        if verdicts.actions.len() != batch.len() {
            return Err(self.bad(PluginError::BadOutput(format!(
                "{} verdicts for {} records",
                verdicts.actions.len(),
                batch.len()
            ))));
        }
        let rejected: Vec<usize> = (0..batch.len()).filter(|&at| verdicts.actions[at] == Action::Reject).collect();
        if !rejected.is_empty() {
            if verdicts.reasons.len() != rejected.len() {
                return Err(self.bad(PluginError::BadOutput(format!(
                    "{} reasons for {} rejected records",
                    verdicts.reasons.len(),
                    rejected.len()
                ))));
            }
            return Ok(ProduceOutcome::Reject(rejected.into_iter().zip(verdicts.reasons).collect()));
        }
        let replaced = verdicts.actions.iter().filter(|action| **action == Action::Replace).count();
        if replaced == 0 {
            return Ok(ProduceOutcome::Accept);
        }
        let choices = verdicts.actions.iter().map(|action| match action {
            Action::Replace => Choice::Replace,
            _ => Choice::Keep,
        });
        let rewritten = self.merge(batch, verdicts.replacements, choices.collect())?;
        Ok(ProduceOutcome::Rewrite(rewritten))
    }

    /// A consume interceptor's verdict on a fetched batch.
    pub fn on_consume(
        &mut self,
        topic: &str,
        partition: u32,
        group: Option<&str>,
        batch: &mut PackedBatch,
    ) -> Result<ConsumeOutcome, PluginError> {
        use bindings::consume_interceptor::exports::weir::plugin::consume_interceptor::Action;
        if self.kind() != HookKind::ConsumeInterceptor {
            return Err(self.wrong_kind(HookKind::ConsumeInterceptor));
        }
        let lent = Lent::new(batch);
        let source = types::TopicPartition { topic: topic.to_owned(), partition };
        let group = group.map(str::to_owned);
        let verdicts = self.call(|instance| {
            let Exports::ConsumeInterceptor(plugin) = &instance.exports else { unreachable!("kind checked") };
            let answer = plugin.weir_plugin_consume_interceptor().call_on_consume(
                &mut instance.store,
                &source,
                group.as_deref(),
                &lent.input,
            );
            answer
                .map_err(|error| classify(error, &instance.store))?
                .map_err(|error| CallError::Other(plugin_error(error)))
        })?;
        drop(lent);
        if verdicts.actions.len() != batch.len() {
            return Err(self.bad(PluginError::BadOutput(format!(
                "{} verdicts for {} records",
                verdicts.actions.len(),
                batch.len()
            ))));
        }
        if verdicts.actions.iter().all(|action| *action == Action::Accept) {
            return Ok(ConsumeOutcome::Accept);
        }
        let choices = verdicts.actions.iter().map(|action| match action {
            Action::Accept => Choice::Keep,
            Action::Replace => Choice::Replace,
            Action::Drop => Choice::Drop,
        });
        let rewritten = self.merge(batch, verdicts.replacements, choices.collect())?;
        Ok(ConsumeOutcome::Rewrite(rewritten))
    }

    /// A transform's output for a batch of committed records; `outputs` is the
    /// number of output topics of the deployment.
    pub fn process(
        &mut self,
        topic: &str,
        partition: u32,
        batch: &mut PackedBatch,
        outputs: usize,
    ) -> Result<TransformOutcome, PluginError> {
        if self.kind() != HookKind::Transform {
            return Err(self.wrong_kind(HookKind::Transform));
        }
        let lent = Lent::new(batch);
        let source = types::TopicPartition { topic: topic.to_owned(), partition };
        let output = self.call(|instance| {
            let Exports::Transform(plugin) = &instance.exports else { unreachable!("kind checked") };
            let answer = plugin.weir_plugin_transform().call_process(&mut instance.store, &source, &lent.input);
            answer
                .map_err(|error| classify(error, &instance.store))?
                .map_err(|error| CallError::Other(plugin_error(error)))
        })?;
        drop(lent);
        let records = self.unpack(output.records).map_err(|error| self.bad(error))?;
        if output.topic_index.len() != records.len() {
            return Err(self.bad(PluginError::BadOutput(format!(
                "{} output topics for {} output records",
                output.topic_index.len(),
                records.len()
            ))));
        }
        if let Some(index) = output.topic_index.iter().find(|index| usize::from(**index) >= outputs) {
            return Err(
                self.bad(PluginError::BadOutput(format!("output topic {index}, but the deployment has {outputs}")))
            );
        }
        Ok(TransformOutcome { records, topic_index: output.topic_index })
    }
}

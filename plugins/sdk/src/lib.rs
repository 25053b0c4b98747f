//! Write Weir plugins in Rust.
//!
//! A plugin is a WebAssembly component (build with `--target wasm32-wasip2`)
//! implementing one hook of the `weir:plugin` contract (`wit/weir-plugin.wit`):
//! a [`Partitioner`], a [`ProduceInterceptor`], a [`ConsumeInterceptor`] or a
//! [`Transform`]. Implement the trait — one method per record, reading a
//! zero-copy [`Record`] — and export it with the hook's macro:
//!
//! ```ignore
//! use weir_plugin::{Config, Error, ProduceInterceptor, ProduceVerdict, Record, TopicPartition};
//!
//! struct OnlyJson;
//!
//! impl ProduceInterceptor for OnlyJson {
//!     fn init(_config: &Config) -> Result<Self, Error> {
//!         Ok(OnlyJson)
//!     }
//!     fn on_produce(&mut self, _target: &TopicPartition, record: &Record<'_>) -> Result<ProduceVerdict, Error> {
//!         Ok(match record.value_str().is_some_and(|text| text.trim_start().starts_with('{')) {
//!             true => ProduceVerdict::Accept,
//!             false => ProduceVerdict::Reject("not a JSON object".into()),
//!         })
//!     }
//! }
//!
//! weir_plugin::produce_interceptor!(OnlyJson);
//! ```
//!
//! The host calls a plugin once per batch; this crate loops over its records.
//! A plugin gets no files or network (clocks and randomness come from WASI, but
//! partitioners and transforms must not use them); [`log`] writes to its
//! log, and a `panic!` message lands there too before the call fails.

mod batch;
pub mod hooks;

pub use batch::{Batch, BatchBuilder, Record, NULL, STRIDE};
pub use hooks::*;

/// Why a plugin call failed; the host applies the hook's failure policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub code: ErrorCode,
    pub message: String,
}

/// The contract's error codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// `init` refused its configuration (the attach or deploy fails).
    InvalidConfig,
    /// This batch cannot be processed.
    InvalidInput,
    /// Transient; the host may try again.
    Retryable,
    /// A bug in the plugin.
    Internal,
}

impl Error {
    pub fn invalid_config(message: impl Into<String>) -> Error {
        Error { code: ErrorCode::InvalidConfig, message: message.into() }
    }

    pub fn invalid_input(message: impl Into<String>) -> Error {
        Error { code: ErrorCode::InvalidInput, message: message.into() }
    }

    pub fn retryable(message: impl Into<String>) -> Error {
        Error { code: ErrorCode::Retryable, message: message.into() }
    }

    pub fn internal(message: impl Into<String>) -> Error {
        Error { code: ErrorCode::Internal, message: message.into() }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{:?}: {}", self.code, self.message)
    }
}

/// The key/value settings a plugin was attached or deployed with.
#[derive(Clone, Debug, Default)]
pub struct Config {
    entries: Vec<(String, String)>,
}

impl Config {
    pub fn new(entries: Vec<(String, String)>) -> Config {
        Config { entries }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries.iter().find(|(found, _)| found == key).map(|(_, value)| value.as_str())
    }

    /// The setting, or an `InvalidConfig` error naming it.
    pub fn require(&self, key: &str) -> Result<&str, Error> {
        self.get(key).ok_or_else(|| Error::invalid_config(format!("missing setting {key:?}")))
    }

    pub fn entries(&self) -> &[(String, String)] {
        &self.entries
    }
}

/// The topic-partition a hook runs for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: u32,
}

/// Log levels of [`log`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// Writes to the plugin's log (the host truncates long messages and bounds
/// the volume per instance).
pub fn log(level: Level, message: &str) {
    hooks::host_log(level, message);
}

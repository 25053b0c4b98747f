//! The four hooks: a trait each, the glue between it and the generated
//! bindings of its world, and the macro that exports a type as that world.

use std::any::Any;
use std::cell::RefCell;

use crate::{Batch, BatchBuilder, Config, Error, Level, Record, TopicPartition};

/// Bindings generated from `wit/weir-plugin.wit`, one module per world.
pub mod bindings {
    pub mod partitioner {
        wit_bindgen::generate!({
            world: "partitioner-plugin",
            path: "../../wit",
            default_bindings_module: "weir_plugin::hooks::bindings::partitioner",
            pub_export_macro: true,
            export_macro_name: "export_partitioner",
        });
    }
    pub mod produce_interceptor {
        wit_bindgen::generate!({
            world: "produce-interceptor-plugin",
            path: "../../wit",
            default_bindings_module: "weir_plugin::hooks::bindings::produce_interceptor",
            pub_export_macro: true,
            export_macro_name: "export_produce_interceptor",
        });
    }
    pub mod consume_interceptor {
        wit_bindgen::generate!({
            world: "consume-interceptor-plugin",
            path: "../../wit",
            default_bindings_module: "weir_plugin::hooks::bindings::consume_interceptor",
            pub_export_macro: true,
            export_macro_name: "export_consume_interceptor",
        });
    }
    pub mod transform {
        wit_bindgen::generate!({
            world: "transform-plugin",
            path: "../../wit",
            default_bindings_module: "weir_plugin::hooks::bindings::transform",
            pub_export_macro: true,
            export_macro_name: "export_transform",
        });
    }
}

pub(crate) fn host_log(level: Level, message: &str) {
    use bindings::partitioner::weir::plugin::host;
    let level = match level {
        Level::Trace => host::Level::Trace,
        Level::Debug => host::Level::Debug,
        Level::Info => host::Level::Info,
        Level::Warn => host::Level::Warn,
        Level::Error => host::Level::Error,
    };
    host::log(level, message);
}

thread_local! {
    /// The plugin instance `init` made (a component instance is single-threaded).
    static INSTANCE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

/// Runs `init` once: a panic message goes to the plugin log from now on.
#[doc(hidden)]
pub fn init_instance<P: 'static>(
    config: Vec<(String, String)>,
    init: fn(&Config) -> Result<P, Error>,
) -> Result<(), Error> {
    std::panic::set_hook(Box::new(|info| host_log(Level::Error, &format!("plugin panicked: {info}"))));
    let plugin = init(&Config::new(config))?;
    INSTANCE.with(|instance| *instance.borrow_mut() = Some(Box::new(plugin)));
    Ok(())
}

fn with_instance<P: 'static, T>(call: impl FnOnce(&mut P) -> Result<T, Error>) -> Result<T, Error> {
    INSTANCE.with(|instance| {
        let mut instance = instance.borrow_mut();
        match instance.as_mut().and_then(|plugin| plugin.downcast_mut::<P>()) {
            Some(plugin) => call(plugin),
            None => Err(Error::internal("called before init")),
        }
    })
}

/// Per-world conversions between the crate's types and the generated ones.
macro_rules! world_glue {
    ($world:ident) => {
        pub mod $world {
            use crate::hooks::bindings::$world::weir::plugin::types;
            use crate::{Error, ErrorCode};

            pub fn error(error: Error) -> types::PluginError {
                let code = match error.code {
                    ErrorCode::InvalidConfig => types::ErrorCode::InvalidConfig,
                    ErrorCode::InvalidInput => types::ErrorCode::InvalidInput,
                    ErrorCode::Retryable => types::ErrorCode::Retryable,
                    ErrorCode::Internal => types::ErrorCode::Internal,
                };
                types::PluginError { code, message: error.message }
            }

            pub fn info(name: &str, version: &str) -> types::PluginInfo {
                types::PluginInfo { name: name.to_owned(), version: version.to_owned() }
            }

            pub fn batch(builder: crate::BatchBuilder) -> types::Batch {
                let (arena, index) = builder.into_parts();
                types::Batch { base_offset: -1, base_timestamp_ms: 0, arena, index }
            }
        }
    };
}

#[doc(hidden)]
pub mod glue {
    world_glue!(partitioner);
    world_glue!(produce_interceptor);
    world_glue!(consume_interceptor);
    world_glue!(transform);
}

fn topic_partition(topic: String, partition: u32) -> TopicPartition {
    TopicPartition { topic, partition }
}

// ---- partitioner -------------------------------------------------------------

/// Chooses partitions for records of topics it is attached to. Runs in every
/// client and at the broker, so it must depend on its inputs only.
pub trait Partitioner: Sized + 'static {
    fn init(config: &Config) -> Result<Self, Error>;
    /// A partition in `0..partition_count`, or `None` for the built-in choice.
    fn partition(&mut self, topic: &str, partition_count: u32, record: &Record<'_>) -> Result<Option<u32>, Error>;
}

#[doc(hidden)]
pub fn run_partitioner<P: Partitioner>(
    topic: &str,
    partition_count: u32,
    base_timestamp_ms: i64,
    arena: &[u8],
    index: &[u32],
) -> Result<Vec<u32>, Error> {
    let batch = Batch::new(-1, base_timestamp_ms, arena, index)?;
    with_instance(|plugin: &mut P| {
        batch
            .records()
            .map(|record| Ok(plugin.partition(topic, partition_count, &record)?.unwrap_or(crate::NULL)))
            .collect()
    })
}

/// Exports a [`Partitioner`].
#[macro_export]
macro_rules! partitioner {
    ($plugin:ty) => {
        struct __WeirPlugin;
        impl $crate::hooks::bindings::partitioner::exports::weir::plugin::partitioner::Guest for __WeirPlugin {
            fn init(
                config: ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
            ) -> ::std::result::Result<
                $crate::hooks::bindings::partitioner::weir::plugin::types::PluginInfo,
                $crate::hooks::bindings::partitioner::weir::plugin::types::PluginError,
            > {
                $crate::hooks::init_instance(config, <$plugin as $crate::Partitioner>::init)
                    .map(|()| $crate::hooks::glue::partitioner::info(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")))
                    .map_err($crate::hooks::glue::partitioner::error)
            }
            fn partition(
                topic: ::std::string::String,
                partition_count: u32,
                records: $crate::hooks::bindings::partitioner::weir::plugin::types::Batch,
            ) -> ::std::result::Result<
                ::std::vec::Vec<u32>,
                $crate::hooks::bindings::partitioner::weir::plugin::types::PluginError,
            > {
                $crate::hooks::run_partitioner::<$plugin>(
                    &topic,
                    partition_count,
                    records.base_timestamp_ms,
                    &records.arena,
                    &records.index,
                )
                .map_err($crate::hooks::glue::partitioner::error)
            }
        }
        $crate::hooks::bindings::partitioner::export_partitioner!(__WeirPlugin with_types_in $crate::hooks::bindings::partitioner);
    };
}

// ---- produce interceptor -----------------------------------------------------

/// What a produce interceptor decides for one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProduceVerdict {
    Accept,
    /// Store this value instead (key, headers and timestamp stay).
    ReplaceValue(Option<Vec<u8>>),
    /// Refuse the whole batch; the producer sees this reason.
    Reject(String),
}

/// Checks or rewrites records on the partition leader before they are stored.
pub trait ProduceInterceptor: Sized + 'static {
    fn init(config: &Config) -> Result<Self, Error>;
    fn on_produce(&mut self, target: &TopicPartition, record: &Record<'_>) -> Result<ProduceVerdict, Error>;
}

/// Verdicts in contract form: actions (0 accept, 1 replace, 2 reject),
/// replacements, reasons.
#[doc(hidden)]
pub struct Verdicts {
    pub actions: Vec<u8>,
    pub replacements: BatchBuilder,
    pub reasons: Vec<String>,
}

#[doc(hidden)]
pub fn run_produce_interceptor<P: ProduceInterceptor>(
    topic: String,
    partition: u32,
    base_timestamp_ms: i64,
    arena: &[u8],
    index: &[u32],
) -> Result<Verdicts, Error> {
    let batch = Batch::new(-1, base_timestamp_ms, arena, index)?;
    let target = topic_partition(topic, partition);
    with_instance(|plugin: &mut P| {
        let mut verdicts = Verdicts {
            actions: Vec::with_capacity(batch.len()),
            replacements: BatchBuilder::new(),
            reasons: Vec::new(),
        };
        for record in batch.records() {
            match plugin.on_produce(&target, &record)? {
                ProduceVerdict::Accept => verdicts.actions.push(0),
                ProduceVerdict::ReplaceValue(value) => {
                    verdicts.actions.push(1);
                    verdicts.replacements.push_with_value(base_timestamp_ms, &record, value.as_deref());
                }
                ProduceVerdict::Reject(reason) => {
                    verdicts.actions.push(2);
                    verdicts.reasons.push(reason);
                }
            }
        }
        Ok(verdicts)
    })
}

/// Exports a [`ProduceInterceptor`].
#[macro_export]
macro_rules! produce_interceptor {
    ($plugin:ty) => {
        struct __WeirPlugin;
        impl $crate::hooks::bindings::produce_interceptor::exports::weir::plugin::produce_interceptor::Guest for __WeirPlugin {
            fn init(
                config: ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
            ) -> ::std::result::Result<
                $crate::hooks::bindings::produce_interceptor::weir::plugin::types::PluginInfo,
                $crate::hooks::bindings::produce_interceptor::weir::plugin::types::PluginError,
            > {
                $crate::hooks::init_instance(config, <$plugin as $crate::ProduceInterceptor>::init)
                    .map(|()| $crate::hooks::glue::produce_interceptor::info(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")))
                    .map_err($crate::hooks::glue::produce_interceptor::error)
            }
            fn on_produce(
                target: $crate::hooks::bindings::produce_interceptor::weir::plugin::types::TopicPartition,
                records: $crate::hooks::bindings::produce_interceptor::weir::plugin::types::Batch,
            ) -> ::std::result::Result<
                $crate::hooks::bindings::produce_interceptor::exports::weir::plugin::produce_interceptor::Verdicts,
                $crate::hooks::bindings::produce_interceptor::weir::plugin::types::PluginError,
            > {
                use $crate::hooks::bindings::produce_interceptor::exports::weir::plugin::produce_interceptor as hook;
                let verdicts = $crate::hooks::run_produce_interceptor::<$plugin>(
                    target.topic,
                    target.partition,
                    records.base_timestamp_ms,
                    &records.arena,
                    &records.index,
                )
                .map_err($crate::hooks::glue::produce_interceptor::error)?;
                let mut replacements = $crate::hooks::glue::produce_interceptor::batch(verdicts.replacements);
                replacements.base_timestamp_ms = records.base_timestamp_ms;
                Ok(hook::Verdicts {
                    actions: verdicts
                        .actions
                        .into_iter()
                        .map(|action| match action {
                            0 => hook::Action::Accept,
                            1 => hook::Action::Replace,
                            _ => hook::Action::Reject,
                        })
                        .collect(),
                    replacements,
                    reasons: verdicts.reasons,
                })
            }
        }
        $crate::hooks::bindings::produce_interceptor::export_produce_interceptor!(__WeirPlugin with_types_in $crate::hooks::bindings::produce_interceptor);
    };
}

// ---- consume interceptor -----------------------------------------------------

/// What a consume interceptor decides for one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConsumeVerdict {
    Accept,
    /// Hand out this value instead (e.g. redacted); the offset stays.
    ReplaceValue(Option<Vec<u8>>),
    /// Leave the record out of this fetch (the consumer sees an offset gap).
    Drop,
}

/// Rewrites or hides records as consumers fetch them.
pub trait ConsumeInterceptor: Sized + 'static {
    fn init(config: &Config) -> Result<Self, Error>;
    fn on_consume(
        &mut self,
        source: &TopicPartition,
        group: Option<&str>,
        record: &Record<'_>,
    ) -> Result<ConsumeVerdict, Error>;
}

#[doc(hidden)]
pub fn run_consume_interceptor<P: ConsumeInterceptor>(
    topic: String,
    partition: u32,
    group: Option<&str>,
    base_offset: i64,
    base_timestamp_ms: i64,
    arena: &[u8],
    index: &[u32],
) -> Result<(Vec<u8>, BatchBuilder), Error> {
    let batch = Batch::new(base_offset, base_timestamp_ms, arena, index)?;
    let source = topic_partition(topic, partition);
    with_instance(|plugin: &mut P| {
        let (mut actions, mut replacements) = (Vec::with_capacity(batch.len()), BatchBuilder::new());
        for record in batch.records() {
            match plugin.on_consume(&source, group, &record)? {
                ConsumeVerdict::Accept => actions.push(0),
                ConsumeVerdict::ReplaceValue(value) => {
                    actions.push(1);
                    replacements.push_with_value(base_timestamp_ms, &record, value.as_deref());
                }
                ConsumeVerdict::Drop => actions.push(2),
            }
        }
        Ok((actions, replacements))
    })
}

/// Exports a [`ConsumeInterceptor`].
#[macro_export]
macro_rules! consume_interceptor {
    ($plugin:ty) => {
        struct __WeirPlugin;
        impl $crate::hooks::bindings::consume_interceptor::exports::weir::plugin::consume_interceptor::Guest for __WeirPlugin {
            fn init(
                config: ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
            ) -> ::std::result::Result<
                $crate::hooks::bindings::consume_interceptor::weir::plugin::types::PluginInfo,
                $crate::hooks::bindings::consume_interceptor::weir::plugin::types::PluginError,
            > {
                $crate::hooks::init_instance(config, <$plugin as $crate::ConsumeInterceptor>::init)
                    .map(|()| $crate::hooks::glue::consume_interceptor::info(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")))
                    .map_err($crate::hooks::glue::consume_interceptor::error)
            }
            fn on_consume(
                source: $crate::hooks::bindings::consume_interceptor::weir::plugin::types::TopicPartition,
                group: ::std::option::Option<::std::string::String>,
                records: $crate::hooks::bindings::consume_interceptor::weir::plugin::types::Batch,
            ) -> ::std::result::Result<
                $crate::hooks::bindings::consume_interceptor::exports::weir::plugin::consume_interceptor::Verdicts,
                $crate::hooks::bindings::consume_interceptor::weir::plugin::types::PluginError,
            > {
                use $crate::hooks::bindings::consume_interceptor::exports::weir::plugin::consume_interceptor as hook;
                let (actions, replacements) = $crate::hooks::run_consume_interceptor::<$plugin>(
                    source.topic,
                    source.partition,
                    group.as_deref(),
                    records.base_offset,
                    records.base_timestamp_ms,
                    &records.arena,
                    &records.index,
                )
                .map_err($crate::hooks::glue::consume_interceptor::error)?;
                let mut replacements = $crate::hooks::glue::consume_interceptor::batch(replacements);
                replacements.base_timestamp_ms = records.base_timestamp_ms;
                Ok(hook::Verdicts {
                    actions: actions
                        .into_iter()
                        .map(|action| match action {
                            0 => hook::Action::Accept,
                            1 => hook::Action::Replace,
                            _ => hook::Action::Drop,
                        })
                        .collect(),
                    replacements,
                })
            }
        }
        $crate::hooks::bindings::consume_interceptor::export_consume_interceptor!(__WeirPlugin with_types_in $crate::hooks::bindings::consume_interceptor);
    };
}

// ---- transform ---------------------------------------------------------------

/// Where a transform's output records go.
#[derive(Debug, Default)]
pub struct Output {
    records: BatchBuilder,
    topic_index: Vec<u8>,
    base_timestamp_ms: i64,
}

impl Output {
    /// Emits a record to output topic `topic_index` (the deployment's list,
    /// `0..8`), with the input record's timestamp.
    pub fn emit(
        &mut self,
        topic_index: u8,
        input: &Record<'_>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) {
        let delta = (input.timestamp_ms - self.base_timestamp_ms) as i32;
        self.records.push(key, value, headers, delta);
        self.topic_index.push(topic_index);
    }

    /// Emits a copy of `input` (key, value, headers) to `topic_index`.
    pub fn forward(&mut self, topic_index: u8, input: &Record<'_>) {
        let headers: Vec<(&str, Option<&[u8]>)> = input.headers().collect();
        self.emit(topic_index, input, input.key, input.value, &headers);
    }
}

/// Turns each committed input record into zero or more output records.
pub trait Transform: Sized + 'static {
    fn init(config: &Config) -> Result<Self, Error>;
    fn process(&mut self, input: &TopicPartition, record: &Record<'_>, output: &mut Output) -> Result<(), Error>;
}

#[doc(hidden)]
pub fn run_transform<P: Transform>(
    topic: String,
    partition: u32,
    base_offset: i64,
    base_timestamp_ms: i64,
    arena: &[u8],
    index: &[u32],
) -> Result<(BatchBuilder, Vec<u8>), Error> {
    let batch = Batch::new(base_offset, base_timestamp_ms, arena, index)?;
    let input = topic_partition(topic, partition);
    with_instance(|plugin: &mut P| {
        let mut output = Output { base_timestamp_ms, ..Output::default() };
        for record in batch.records() {
            plugin.process(&input, &record, &mut output)?;
        }
        Ok((output.records, output.topic_index))
    })
}

/// Exports a [`Transform`].
#[macro_export]
macro_rules! transform {
    ($plugin:ty) => {
        struct __WeirPlugin;
        impl $crate::hooks::bindings::transform::exports::weir::plugin::transform::Guest for __WeirPlugin {
            fn init(
                config: ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
            ) -> ::std::result::Result<
                $crate::hooks::bindings::transform::weir::plugin::types::PluginInfo,
                $crate::hooks::bindings::transform::weir::plugin::types::PluginError,
            > {
                $crate::hooks::init_instance(config, <$plugin as $crate::Transform>::init)
                    .map(|()| $crate::hooks::glue::transform::info(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")))
                    .map_err($crate::hooks::glue::transform::error)
            }
            fn process(
                input: $crate::hooks::bindings::transform::weir::plugin::types::TopicPartition,
                records: $crate::hooks::bindings::transform::weir::plugin::types::Batch,
            ) -> ::std::result::Result<
                $crate::hooks::bindings::transform::exports::weir::plugin::transform::Output,
                $crate::hooks::bindings::transform::weir::plugin::types::PluginError,
            > {
                use $crate::hooks::bindings::transform::exports::weir::plugin::transform as hook;
                let (records_out, topic_index) = $crate::hooks::run_transform::<$plugin>(
                    input.topic,
                    input.partition,
                    records.base_offset,
                    records.base_timestamp_ms,
                    &records.arena,
                    &records.index,
                )
                .map_err($crate::hooks::glue::transform::error)?;
                let mut out = $crate::hooks::glue::transform::batch(records_out);
                out.base_timestamp_ms = records.base_timestamp_ms;
                Ok(hook::Output { records: out, topic_index })
            }
        }
        $crate::hooks::bindings::transform::export_transform!(__WeirPlugin with_types_in $crate::hooks::bindings::transform);
    };
}

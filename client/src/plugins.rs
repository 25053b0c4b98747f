//! Plugin administration on [`Admin`]: upload WebAssembly components, list and
//! delete them, read their logs, attach interceptors to topics.

use abi::weir_capnp::plugin_summary;

use crate::admin::Admin;
use crate::error::{broker_error, refused_or_ok, ClientError};

/// A stored plugin, with its counters since the broker started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginDescription {
    pub name: String,
    /// `partitioner`, `produce-interceptor`, `consume-interceptor` or `transform`.
    pub hook: String,
    /// SHA-256 of the uploaded bytes (hex).
    pub digest: String,
    pub size_bytes: u64,
    pub uploaded_ms: i64,
    pub calls: u64,
    pub errors: u64,
    pub traps: u64,
    pub busy_nanos: u64,
    pub attached_to: Vec<String>,
    /// Partitioner calls clients reported running this code, and how many
    /// failed (as reported to the broker that answered).
    pub client_calls: u64,
    pub client_errors: u64,
    /// Where the code stands on the broker that answered: `ready`,
    /// `compiling`, `failed` (see `state_reason`), or `fetching` (its bytes are
    /// on their way to that broker).
    pub state: String,
    /// Why the code failed to compile; empty otherwise.
    pub state_reason: String,
}

/// What a partitioner plugin run by this process did since the last report
/// ([`Admin::report_plugin_calls`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginCallReport {
    pub plugin: String,
    pub digest: String,
    pub calls: u64,
    pub errors: u64,
    pub busy_nanos: u64,
    pub log: Vec<PluginLogLine>,
}

/// This machine's name, for reports ("?" when unknown).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map_or_else(|_| "?".to_owned(), |name| name.trim().to_owned())
}

/// One line of a plugin's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginLogLine {
    pub unix_ms: i64,
    pub level: String,
    pub message: String,
}

/// An interceptor attached to a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginAttachment {
    pub topic: String,
    pub hook: String,
    pub plugin: String,
    pub config: Vec<(String, String)>,
    /// `fail-closed` or `fail-open`.
    pub failure_policy: String,
    /// `running`, or why not.
    pub status: String,
}

/// What to attach, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attach {
    pub topic: String,
    /// `produce-interceptor` or `consume-interceptor`.
    pub hook: String,
    pub plugin: String,
    pub config: Vec<(String, String)>,
    /// `fail-closed` (default when empty) or `fail-open`.
    pub failure_policy: String,
}

fn text(reader: capnp::Result<capnp::text::Reader<'_>>) -> Result<String, ClientError> {
    Ok(reader?.to_str()?.to_owned())
}

/// An upload in one request (`uploadPlugin`), for brokers without chunked uploads.
async fn upload_whole(
    admin: &abi::weir_capnp::admin::Client,
    address: &str,
    name: &str,
    hook: &str,
    wasm: &[u8],
) -> Result<PluginDescription, ClientError> {
    let mut request = admin.upload_plugin_request();
    let mut params = request.get();
    params.set_name(name);
    params.set_hook(hook);
    params.set_wasm(wasm);
    let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(address, error))?;
    let response = response.get()?;
    if response.has_error() {
        return Err(broker_error(response.get_error()?));
    }
    read_summary(response.get_plugin()?)
}

fn read_summary(reader: plugin_summary::Reader<'_>) -> Result<PluginDescription, ClientError> {
    Ok(PluginDescription {
        name: text(reader.get_name())?,
        hook: text(reader.get_hook())?,
        digest: text(reader.get_digest())?,
        size_bytes: reader.get_size_bytes(),
        uploaded_ms: reader.get_uploaded_ms(),
        calls: reader.get_calls(),
        errors: reader.get_errors(),
        traps: reader.get_traps(),
        busy_nanos: reader.get_busy_nanos(),
        attached_to: reader.get_attached_to()?.iter().map(text).collect::<Result<_, _>>()?,
        client_calls: reader.get_client_calls(),
        client_errors: reader.get_client_errors(),
        // Brokers from before background compiles answered once compiled.
        state: Some(text(reader.get_state())?).filter(|state| !state.is_empty()).unwrap_or_else(|| "ready".to_owned()),
        state_reason: text(reader.get_state_reason())?,
    })
}

impl Admin {
    /// Uploads a plugin under `name` (replacing an older version of it). The
    /// broker checks that `wasm` is a component of the `weir:plugin` contract
    /// exporting `hook` (empty: any hook) and importing nothing it does not
    /// provide before storing anything, then compiles it in the background:
    /// the answer's `state` is `compiling` until the code is `ready` (or
    /// `failed`); [`Admin::wait_plugin_compiled`] waits for that. Attaching the
    /// plugin or deploying a transform of it waits for the compile on its own.
    /// Uploading the bytes a plugin already has changes nothing and sends
    /// nothing.
    pub async fn upload_plugin(&self, name: &str, hook: &str, wasm: Vec<u8>) -> Result<PluginDescription, ClientError> {
        self.upload_plugin_with_progress(name, hook, wasm, |_, _| {}).await
    }

    /// [`Admin::upload_plugin`], calling `progress(sent, total)` after each
    /// chunk. The bytes go in chunks of at most 4 MiB (so a component may be
    /// bigger than the broker's request limit, up to its `[plugins]
    /// upload_bytes_max`), all to one broker. New code under a name attached
    /// to topics is checked against each attachment's configuration, so that
    /// upload answers only once compiled (seconds per MB).
    pub async fn upload_plugin_with_progress(
        &self,
        name: &str,
        hook: &str,
        wasm: Vec<u8>,
        progress: impl Fn(u64, u64) + Send + 'static,
    ) -> Result<PluginDescription, ClientError> {
        let (name, hook) = (name.to_owned(), hook.to_owned());
        // Sending and compiling are both roughly linear in the size.
        let timeout = self.request_timeout + std::time::Duration::from_secs(2 * (wasm.len() as u64 >> 20));
        let connection = self.cluster.any_connection().await?;
        self.with_admin_of(connection, "upload plugin", timeout, move |admin, address| async move {
            let rpc = |error| ClientError::from_rpc(&address, error);
            let total = wasm.len() as u64;
            let mut begin = admin.begin_plugin_upload_request();
            let mut params = begin.get();
            params.set_name(&name[..]);
            params.set_hook(&hook[..]);
            params.set_size_bytes(total);
            params.set_digest(&plugin_host::hex_sha256(&wasm)[..]);
            let begun = match begin.send().promise.await {
                Ok(begun) => begun,
                // A broker from before chunked uploads: the whole component at once.
                Err(error) if error.kind == capnp::ErrorKind::Unimplemented => {
                    return upload_whole(&admin, &address, &name, &hook, &wasm).await;
                }
                Err(error) => return Err(rpc(error)),
            };
            let begun = begun.get()?;
            if begun.has_error() {
                return Err(broker_error(begun.get_error()?));
            }
            if begun.has_existing() {
                progress(total, total);
                return read_summary(begun.get_existing()?);
            }
            let id = begun.get_upload_id();
            let chunk_bytes = (begun.get_chunk_bytes_max() as usize).clamp(64 << 10, 4 << 20);
            let mut offset = 0u64;
            for chunk in wasm.chunks(chunk_bytes) {
                let mut request = admin.upload_plugin_chunk_request();
                let mut params = request.get();
                params.set_upload_id(id);
                params.set_offset(offset);
                params.set_data(chunk);
                let response = request.send().promise.await.map_err(rpc)?;
                refused_or_ok!(response.get()?)?;
                offset += chunk.len() as u64;
                progress(offset, total);
            }
            let mut finish = admin.finish_plugin_upload_request();
            finish.get().set_upload_id(id);
            let response = finish.send().promise.await.map_err(rpc)?;
            let response = response.get()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            read_summary(response.get_plugin()?)
        })
        .await
    }

    /// Reports what partitioner plugins run by this process did (the producer
    /// does this every 10 s and when it closes): the broker adds it to the
    /// plugins' client counters and logs.
    pub async fn report_plugin_calls(&self, reports: Vec<PluginCallReport>) -> Result<(), ClientError> {
        let source = format!("pid {} on {}", std::process::id(), hostname());
        self.with_admin("report plugin calls", move |admin, address| async move {
            let mut request = admin.report_plugin_calls_request();
            let mut list = request.get().init_reports(reports.len() as u32);
            for (index, report) in reports.iter().enumerate() {
                let mut builder = list.reborrow().get(index as u32);
                builder.set_plugin(&report.plugin[..]);
                builder.set_digest(&report.digest[..]);
                builder.set_source(&source[..]);
                builder.set_calls(report.calls);
                builder.set_errors(report.errors);
                builder.set_busy_nanos(report.busy_nanos);
                let mut log = builder.init_log(report.log.len() as u32);
                for (index, line) in report.log.iter().enumerate() {
                    let mut entry = log.reborrow().get(index as u32);
                    entry.set_unix_ms(line.unix_ms);
                    entry.set_level(&line.level[..]);
                    entry.set_message(&line.message[..]);
                }
            }
            request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            Ok(())
        })
        .await
    }

    /// Waits until the code of plugin `name` has compiled on the broker that
    /// answers (`state` no longer `compiling` or `fetching`), asking every
    /// 100 ms up to 1 s apart, for at most `timeout`: the plugin, or
    /// `InvalidPlugin` with the compiler's reason when it failed, or
    /// `RequestTimedOut`. `progress` is called with the state after each look.
    pub async fn wait_plugin_compiled(
        &self,
        name: &str,
        timeout: std::time::Duration,
        progress: impl Fn(&PluginDescription),
    ) -> Result<PluginDescription, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut pause = std::time::Duration::from_millis(100);
        loop {
            let plugin = self.describe_plugin(name).await?;
            progress(&plugin);
            match plugin.state.as_str() {
                "compiling" | "fetching" => {}
                "failed" => {
                    let message = format!("plugin {name:?} did not compile: {}", plugin.state_reason);
                    return Err(ClientError::broker(abi::ErrorCode::InvalidPlugin, message));
                }
                _ => return Ok(plugin),
            }
            if tokio::time::Instant::now() + pause > deadline {
                let message = format!("plugin {name:?} was still {} after {timeout:?}", plugin.state);
                return Err(ClientError::broker(abi::ErrorCode::RequestTimedOut, message));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_secs(1));
        }
    }

    pub async fn list_plugins(&self) -> Result<Vec<PluginDescription>, ClientError> {
        self.with_admin("list plugins", move |admin, address| async move {
            let response = admin
                .list_plugins_request()
                .send()
                .promise
                .await
                .map_err(|error| ClientError::from_rpc(&address, error))?;
            response.get()?.get_plugins()?.iter().map(read_summary).collect()
        })
        .await
    }

    /// One plugin (`PluginNotFound` if there is none of that name).
    pub async fn describe_plugin(&self, name: &str) -> Result<PluginDescription, ClientError> {
        self.list_plugins()
            .await?
            .into_iter()
            .find(|plugin| plugin.name == name)
            .ok_or_else(|| ClientError::broker(abi::ErrorCode::PluginNotFound, format!("no plugin named {name:?}")))
    }

    /// Deletes a plugin; refused with `PluginInUse` while it is attached.
    pub async fn delete_plugin(&self, name: &str) -> Result<(), ClientError> {
        let name = name.to_owned();
        self.with_admin("delete plugin", move |admin, address| async move {
            let mut request = admin.delete_plugin_request();
            request.get().set_name(&name[..]);
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            refused_or_ok!(response)
        })
        .await
    }

    /// The newest lines of a plugin's log (its own `log` calls, panic messages,
    /// and the host's notes about its failures).
    pub async fn plugin_logs(&self, name: &str) -> Result<Vec<PluginLogLine>, ClientError> {
        let name = name.to_owned();
        self.with_admin("plugin logs", move |admin, address| async move {
            let mut request = admin.plugin_logs_request();
            request.get().set_name(&name[..]);
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            response
                .get_entries()?
                .iter()
                .map(|entry| {
                    Ok(PluginLogLine {
                        unix_ms: entry.get_unix_ms(),
                        level: text(entry.get_level())?,
                        message: text(entry.get_message())?,
                    })
                })
                .collect()
        })
        .await
    }

    /// Attaches an interceptor; its `init(config)` runs first and may refuse
    /// (`InvalidConfig`).
    pub async fn attach_plugin(&self, attach: Attach) -> Result<(), ClientError> {
        self.with_admin("attach plugin", move |admin, address| async move {
            let mut request = admin.attach_plugin_request();
            let mut params = request.get();
            params.set_topic(&attach.topic[..]);
            params.set_hook(&attach.hook[..]);
            params.set_plugin(&attach.plugin[..]);
            params.set_failure_policy(&attach.failure_policy[..]);
            let mut entries = params.init_config(attach.config.len() as u32);
            for (index, (key, value)) in attach.config.iter().enumerate() {
                let mut entry = entries.reborrow().get(index as u32);
                entry.set_key(&key[..]);
                entry.set_value(&value[..]);
            }
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            refused_or_ok!(response)
        })
        .await
    }

    pub async fn detach_plugin(&self, topic: &str, hook: &str, plugin: &str) -> Result<(), ClientError> {
        let (topic, hook, plugin) = (topic.to_owned(), hook.to_owned(), plugin.to_owned());
        self.with_admin("detach plugin", move |admin, address| async move {
            let mut request = admin.detach_plugin_request();
            let mut params = request.get();
            params.set_topic(&topic[..]);
            params.set_hook(&hook[..]);
            params.set_plugin(&plugin[..]);
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            refused_or_ok!(response)
        })
        .await
    }

    /// Interceptors attached to `topic` (`None`: to every topic).
    pub async fn list_attachments(&self, topic: Option<&str>) -> Result<Vec<PluginAttachment>, ClientError> {
        let topic = topic.unwrap_or("").to_owned();
        self.with_admin("list attachments", move |admin, address| async move {
            let mut request = admin.list_attachments_request();
            request.get().set_topic(&topic[..]);
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            response
                .get_attachments()?
                .iter()
                .map(|attachment| {
                    Ok(PluginAttachment {
                        topic: text(attachment.get_topic())?,
                        hook: text(attachment.get_hook())?,
                        plugin: text(attachment.get_plugin())?,
                        config: attachment
                            .get_config()?
                            .iter()
                            .map(|entry| Ok((text(entry.get_key())?, text(entry.get_value())?)))
                            .collect::<Result<_, ClientError>>()?,
                        failure_policy: text(attachment.get_failure_policy())?,
                        status: text(attachment.get_status())?,
                    })
                })
                .collect()
        })
        .await
    }
}

/// A transform to deploy: a transform plugin run by the broker over every
/// committed record of `input_topic`, producing to `output_topics` exactly once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransformSpec {
    pub name: String,
    pub plugin: String,
    pub input_topic: String,
    /// 1 to 8; the plugin's output topic index picks one per record.
    pub output_topics: Vec<String>,
    /// Where to start: [`TRANSFORM_EARLIEST`], [`TRANSFORM_LATEST`] or an offset.
    pub start: i64,
    pub config: Vec<(String, String)>,
    /// Where input records go that the plugin fails on for good (a trap, bad
    /// output, its own non-retryable error; not running out of time, which
    /// depends on the machine):
    /// produced there exactly once, unchanged, with headers `weir.dlq.error`,
    /// `weir.dlq.topic`, `weir.dlq.partition` and `weir.dlq.offset`, and the
    /// partition moves on. None: such a record holds its partition
    /// (`retrying: …`).
    pub dead_letter_topic: Option<String>,
}

/// Start (or replay) from each input partition's first record.
pub const TRANSFORM_EARLIEST: i64 = -2;
/// Start (or replay) from each input partition's end: new records only.
pub const TRANSFORM_LATEST: i64 = -1;

/// A deployed transform and its progress per input partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransformStatus {
    pub name: String,
    pub plugin: String,
    pub input_topic: String,
    pub output_topics: Vec<String>,
    pub dead_letter_topic: Option<String>,
    /// `running`, `paused`, `starting`, or `retrying: <why>`.
    pub state: String,
    pub partitions: Vec<TransformPartition>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransformPartition {
    pub partition: i32,
    /// The next input offset to process.
    pub next_offset: i64,
    /// Input high watermark minus `next_offset` (-1 unknown).
    pub lag: i64,
    /// Input records processed since the deployment (replays count again;
    /// kept with the checkpoint, so restarts and failovers keep them).
    pub processed: u64,
    /// Output records produced since the deployment (likewise).
    pub emitted: u64,
    /// Input records sent to the dead-letter topic (likewise).
    pub dead_lettered: u64,
}

impl Admin {
    /// Deploys a transform; its plugin's `init(config)` runs first and may refuse.
    pub async fn deploy_transform(&self, spec: TransformSpec) -> Result<(), ClientError> {
        self.with_admin("deploy transform", move |admin, address| async move {
            let mut request = admin.deploy_transform_request();
            let mut builder = request.get().init_spec();
            builder.set_name(&spec.name[..]);
            builder.set_plugin(&spec.plugin[..]);
            builder.set_input_topic(&spec.input_topic[..]);
            builder.set_start(spec.start);
            builder.set_dead_letter_topic(spec.dead_letter_topic.as_deref().unwrap_or(""));
            let mut outputs = builder.reborrow().init_output_topics(spec.output_topics.len() as u32);
            for (index, topic) in spec.output_topics.iter().enumerate() {
                outputs.set(index as u32, &topic[..]);
            }
            let mut entries = builder.init_config(spec.config.len() as u32);
            for (index, (key, value)) in spec.config.iter().enumerate() {
                let mut entry = entries.reborrow().get(index as u32);
                entry.set_key(&key[..]);
                entry.set_value(&value[..]);
            }
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            refused_or_ok!(response)
        })
        .await
    }

    pub async fn list_transforms(&self) -> Result<Vec<TransformStatus>, ClientError> {
        self.with_admin("list transforms", move |admin, address| async move {
            let response = admin
                .list_transforms_request()
                .send()
                .promise
                .await
                .map_err(|error| ClientError::from_rpc(&address, error))?;
            response
                .get()?
                .get_transforms()?
                .iter()
                .map(|transform| {
                    Ok(TransformStatus {
                        name: text(transform.get_name())?,
                        plugin: text(transform.get_plugin())?,
                        input_topic: text(transform.get_input_topic())?,
                        output_topics: transform.get_output_topics()?.iter().map(text).collect::<Result<_, _>>()?,
                        dead_letter_topic: Some(text(transform.get_dead_letter_topic())?)
                            .filter(|topic| !topic.is_empty()),
                        state: text(transform.get_state())?,
                        partitions: transform
                            .get_partitions()?
                            .iter()
                            .map(|partition| TransformPartition {
                                partition: partition.get_partition(),
                                next_offset: partition.get_next_offset(),
                                lag: partition.get_lag(),
                                processed: partition.get_processed(),
                                emitted: partition.get_emitted(),
                                dead_lettered: partition.get_dead_lettered(),
                            })
                            .collect(),
                    })
                })
                .collect()
        })
        .await
    }

    /// `pause`, `resume`, `delete`, or `replay` from `offset` (an offset of every
    /// input partition, [`TRANSFORM_EARLIEST`] or [`TRANSFORM_LATEST`]).
    pub async fn control_transform(&self, name: &str, action: &str, offset: i64) -> Result<(), ClientError> {
        let (name, action) = (name.to_owned(), action.to_owned());
        self.with_admin("control transform", move |admin, address| async move {
            let mut request = admin.control_transform_request();
            let mut params = request.get();
            params.set_name(&name[..]);
            params.set_action(&action[..]);
            params.set_offset(offset);
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            refused_or_ok!(response)
        })
        .await
    }
}

impl Admin {
    /// The uploaded bytes of a plugin, by digest.
    pub async fn fetch_plugin(&self, digest: &str) -> Result<Vec<u8>, ClientError> {
        let digest = digest.to_owned();
        self.with_admin("fetch plugin", move |admin, address| async move {
            let mut request = admin.fetch_plugin_request();
            request.get().set_digest(&digest[..]);
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            Ok(response.get_wasm()?.to_vec())
        })
        .await
    }
}

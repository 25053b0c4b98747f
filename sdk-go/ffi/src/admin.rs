//! `WeirAdmin`: admin calls as one JSON request in, one JSON answer out
//! (`Json` completion). Admin calls are few and small; one entry point keeps
//! the C ABI from growing a function (and a struct layout) per call, and the
//! Go side decodes answers into typed structs with `encoding/json`. Plugin
//! uploads carry bytes and have their own function.

use std::collections::BTreeMap;

use client::{Admin, ClientError};
use client_ffi::Completion;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{bytes, guard, handle, invalid, put, settings, start, text, WeirError, WeirQueue};

/// An admin client.
#[derive(Debug)]
pub struct WeirAdmin {
    inner: Admin,
}

/// A request: `{"op": "<name>", …fields}`, field names in camelCase.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", rename_all_fields = "camelCase", deny_unknown_fields)]
enum Request {
    CreateTopic {
        name: String,
        partitions: i32,
        #[serde(default = "broker_default")]
        replication_factor: i16,
        #[serde(default)]
        configs: BTreeMap<String, String>,
    },
    DeleteTopic {
        name: String,
    },
    ListTopics,
    DescribeTopic {
        name: String,
    },
    AlterTopicConfig {
        name: String,
        configs: BTreeMap<String, String>,
    },
    Watermarks {
        topic: String,
        partition: i32,
    },
    ListGroups,
    DescribeGroup {
        group_id: String,
    },
    GroupLag {
        group_id: String,
    },
    ResetOffsets {
        group_id: String,
        offsets: Vec<(String, i32, i64)>,
    },
    DeleteGroup {
        group_id: String,
    },
    ListPlugins,
    DeletePlugin {
        name: String,
    },
    PluginLogs {
        name: String,
    },
    AttachPlugin {
        topic: String,
        hook: String,
        plugin: String,
        #[serde(default)]
        config: BTreeMap<String, String>,
        #[serde(default)]
        failure_policy: String,
    },
    DetachPlugin {
        topic: String,
        hook: String,
        plugin: String,
    },
    DeployTransform {
        name: String,
        plugin: String,
        input_topic: String,
        output_topics: Vec<String>,
        start: i64,
        #[serde(default)]
        config: BTreeMap<String, String>,
        #[serde(default)]
        dead_letter_topic: Option<String>,
    },
    ListTransforms,
    ControlTransform {
        name: String,
        action: String,
        #[serde(default = "transform_earliest")]
        offset: i64,
    },
}

fn broker_default() -> i16 {
    -1
}

fn transform_earliest() -> i64 {
    client::TRANSFORM_EARLIEST
}

fn plugin_json(plugin: client::PluginDescription) -> Value {
    json!({
        "name": plugin.name,
        "hook": plugin.hook,
        "digest": plugin.digest,
        "sizeBytes": plugin.size_bytes,
        "uploadedMs": plugin.uploaded_ms,
        "calls": plugin.calls,
        "errors": plugin.errors,
        "traps": plugin.traps,
        "attachedTo": plugin.attached_to,
        "state": plugin.state,
        "stateReason": plugin.state_reason,
    })
}

async fn run(admin: Admin, request: Request) -> Result<Value, ClientError> {
    Ok(match request {
        Request::CreateTopic { name, partitions, replication_factor, configs } => {
            let mut topic = client::NewTopic::new(name, partitions);
            topic.replication_factor = replication_factor;
            topic.configs = configs.into_iter().collect();
            admin.create_topic(topic).await?;
            Value::Null
        }
        Request::DeleteTopic { name } => {
            admin.delete_topic(&name).await?;
            Value::Null
        }
        Request::ListTopics => json!(admin.list_topics().await?),
        Request::DescribeTopic { name } => {
            let topic = admin.describe_topic(&name).await?;
            let partitions: Vec<Value> = topic
                .partitions
                .into_iter()
                .map(|partition| {
                    json!({
                        "partition": partition.partition,
                        "leader": partition.leader,
                        "leaderEpoch": partition.leader_epoch,
                        "replicas": partition.replicas,
                        "isr": partition.isr,
                        "targetReplicas": partition.target_replicas,
                    })
                })
                .collect();
            json!({"name": topic.name, "partitions": partitions, "configs": topic.configs.into_iter().collect::<BTreeMap<_, _>>()})
        }
        Request::AlterTopicConfig { name, configs } => {
            admin.alter_topic_config(&name, configs.into_iter().collect()).await?;
            Value::Null
        }
        Request::Watermarks { topic, partition } => {
            let (low, high) = admin.watermarks(&topic, partition).await?;
            json!({"low": low, "high": high})
        }
        Request::ListGroups => {
            let groups: Vec<Value> = admin
                .list_groups()
                .await?
                .into_iter()
                .map(|group| json!({"groupId": group.group_id, "state": group.state, "members": group.member_count}))
                .collect();
            Value::Array(groups)
        }
        Request::DescribeGroup { group_id } => {
            let group = admin.describe_group(&group_id).await?;
            let members: Vec<Value> = group
                .members
                .into_iter()
                .map(|member| {
                    json!({
                        "memberId": member.member_id,
                        "instanceId": member.instance_id,
                        "memberEpoch": member.member_epoch,
                        "subscribedTopics": member.subscribed_topics,
                        "assigned": member.assigned,
                    })
                })
                .collect();
            let offsets: Vec<Value> = group
                .offsets
                .into_iter()
                .map(|offset| {
                    json!({"topic": offset.topic, "partition": offset.partition, "offset": offset.offset, "metadata": offset.metadata})
                })
                .collect();
            json!({
                "groupId": group.group_id,
                "state": group.state,
                "groupEpoch": group.group_epoch,
                "assignor": group.assignor,
                "members": members,
                "offsets": offsets,
            })
        }
        Request::GroupLag { group_id } => {
            let lags: Vec<Value> = admin
                .group_lag(&group_id)
                .await?
                .into_iter()
                .map(|lag| {
                    json!({
                        "topic": lag.topic,
                        "partition": lag.partition,
                        "committed": lag.committed,
                        "logEndOffset": lag.log_end_offset,
                        "lag": lag.lag,
                        "owner": lag.owner,
                    })
                })
                .collect();
            Value::Array(lags)
        }
        Request::ResetOffsets { group_id, offsets } => {
            let offsets = offsets.into_iter().map(|(topic, partition, offset)| ((topic, partition), offset)).collect();
            admin.reset_offsets(&group_id, offsets).await?;
            Value::Null
        }
        Request::DeleteGroup { group_id } => {
            admin.delete_group(&group_id).await?;
            Value::Null
        }
        Request::ListPlugins => Value::Array(admin.list_plugins().await?.into_iter().map(plugin_json).collect()),
        Request::DeletePlugin { name } => {
            admin.delete_plugin(&name).await?;
            Value::Null
        }
        Request::PluginLogs { name } => {
            let lines: Vec<Value> = admin
                .plugin_logs(&name)
                .await?
                .into_iter()
                .map(|line| json!({"unixMs": line.unix_ms, "level": line.level, "message": line.message}))
                .collect();
            Value::Array(lines)
        }
        Request::AttachPlugin { topic, hook, plugin, config, failure_policy } => {
            let config = config.into_iter().collect();
            admin.attach_plugin(client::Attach { topic, hook, plugin, config, failure_policy }).await?;
            Value::Null
        }
        Request::DetachPlugin { topic, hook, plugin } => {
            admin.detach_plugin(&topic, &hook, &plugin).await?;
            Value::Null
        }
        Request::DeployTransform { name, plugin, input_topic, output_topics, start, config, dead_letter_topic } => {
            let config = config.into_iter().collect();
            admin
                .deploy_transform(client::TransformSpec {
                    name,
                    plugin,
                    input_topic,
                    output_topics,
                    start,
                    config,
                    dead_letter_topic,
                })
                .await?;
            Value::Null
        }
        Request::ListTransforms => {
            let transforms: Vec<Value> = admin
                .list_transforms()
                .await?
                .into_iter()
                .map(|transform| {
                    let partitions: Vec<Value> = transform
                        .partitions
                        .into_iter()
                        .map(|partition| {
                            json!({
                                "partition": partition.partition,
                                "nextOffset": partition.next_offset,
                                "lag": partition.lag,
                                "processed": partition.processed,
                                "emitted": partition.emitted,
                                "deadLettered": partition.dead_lettered,
                            })
                        })
                        .collect();
                    json!({
                        "name": transform.name,
                        "plugin": transform.plugin,
                        "inputTopic": transform.input_topic,
                        "outputTopics": transform.output_topics,
                        "deadLetterTopic": transform.dead_letter_topic,
                        "state": transform.state,
                        "partitions": partitions,
                    })
                })
                .collect();
            Value::Array(transforms)
        }
        Request::ControlTransform { name, action, offset } => {
            admin.control_transform(&name, &action, offset).await?;
            Value::Null
        }
    })
}

/// An admin client with `settings` (a JSON object of Kafka-named common
/// settings, `bootstrap.servers` included) in `*out`.
///
/// # Safety
/// `settings` points at `settings_len` readable bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn weir_admin_new(
    settings_json: *const u8,
    settings_len: usize,
    out: *mut *mut WeirAdmin,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let map = settings(unsafe { bytes(settings_json, settings_len) })?;
        let common = client::ProducerConfig::from_map(&map)?.common;
        let inner = client_ffi::runtime::within(|| Admin::new(common))??;
        // SAFETY: the caller's contract.
        unsafe { put(out, WeirAdmin { inner }) }
    })
}

/// Runs the admin request `request` (JSON, see [`Request`]); its answer comes
/// as a `Json` completion (`null` for calls that return nothing).
///
/// # Safety
/// Handles live; `request` points at `request_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn weir_admin_call(
    admin: *const WeirAdmin,
    queue: *const WeirQueue,
    token: u64,
    request: *const u8,
    request_len: usize,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let (admin, queue) = unsafe { (handle(admin, "admin")?, handle(queue, "queue")?) };
        // SAFETY: the caller's contract.
        let request: Request = serde_json::from_slice(unsafe { bytes(request, request_len) })
            .map_err(|error| invalid(format!("malformed admin request: {error}")))?;
        let inner = admin.inner.clone();
        start(
            queue,
            token,
            async move { Ok::<_, ClientError>(Completion::Json(run(inner, request).await?.to_string())) },
        )
    })
}

/// Uploads `wasm` as plugin `name` for `hook`; a `Json` completion describes
/// the stored plugin.
///
/// # Safety
/// Handles live; each pointer points at its length in readable bytes.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // three byte strings in, C style
pub unsafe extern "C" fn weir_admin_upload_plugin(
    admin: *const WeirAdmin,
    queue: *const WeirQueue,
    token: u64,
    name: *const u8,
    name_len: usize,
    hook: *const u8,
    hook_len: usize,
    wasm: *const u8,
    wasm_len: usize,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let (admin, queue) = unsafe { (handle(admin, "admin")?, handle(queue, "queue")?) };
        // SAFETY: the caller's contract.
        let (name, hook, wasm) = unsafe {
            (
                text(name, name_len, "the plugin name")?,
                text(hook, hook_len, "the hook")?,
                bytes(wasm, wasm_len).to_vec(),
            )
        };
        let inner = admin.inner.clone();
        start(queue, token, async move {
            let plugin = inner.upload_plugin(&name, &hook, wasm).await?;
            Ok::<_, ClientError>(Completion::Json(plugin_json(plugin).to_string()))
        })
    })
}

/// Releases an admin client.
///
/// # Safety
/// `admin` came from `weir_admin_new` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn weir_admin_free(admin: *mut WeirAdmin) {
    if !admin.is_null() {
        // SAFETY: made by Box::into_raw in weir_admin_new, freed once.
        crate::quietly((), || drop(unsafe { Box::from_raw(admin) }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_with_defaults_and_refuse_unknown_fields() {
        let request: Request =
            serde_json::from_str(r#"{"op":"createTopic","name":"t","partitions":3}"#).expect("parses");
        assert!(
            matches!(request, Request::CreateTopic { replication_factor: -1, ref configs, .. } if configs.is_empty())
        );
        let request: Request =
            serde_json::from_str(r#"{"op":"resetOffsets","groupId":"g","offsets":[["t",0,5]]}"#).expect("parses");
        assert!(matches!(request, Request::ResetOffsets { ref offsets, .. } if offsets == &[("t".to_owned(), 0, 5)]));
        assert!(serde_json::from_str::<Request>(r#"{"op":"deleteTopic","name":"t","extra":1}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"op":"noSuchCall"}"#).is_err());
    }
}

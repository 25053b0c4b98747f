//! `NativeAdmin`: topics, configs, groups (describe, lag, reset), plugins and
//! transforms, each call a promise.

use std::collections::HashMap;
use std::future::Future;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::{client_err, to_js};

/// A partition as the metadata describes it.
#[napi(object, object_from_js = false)]
pub struct PartitionDescription {
    pub partition: i32,
    /// -1 when it has none.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// While a reassignment runs, the replicas it moves to; else empty.
    pub target_replicas: Vec<i32>,
}

/// A topic's partitions and its configs (set ones and defaults).
#[napi(object, object_from_js = false)]
pub struct TopicDescription {
    pub name: String,
    pub partitions: Vec<PartitionDescription>,
    pub configs: HashMap<String, String>,
}

/// A consumer group, as listed.
#[napi(object, object_from_js = false)]
pub struct GroupListing {
    pub group_id: String,
    pub state: String,
    pub members: u32,
}

/// A group member and what it owns.
#[napi(object, object_from_js = false)]
pub struct GroupMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub member_epoch: i32,
    pub subscribed_topics: Vec<String>,
    pub assigned: Vec<crate::consumer::TopicPartition>,
}

/// A committed offset.
#[napi(object, object_from_js = false)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    #[napi(ts_type = "bigint")]
    pub offset: i64n,
    pub metadata: String,
}

/// A consumer group in full.
#[napi(object, object_from_js = false)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: String,
    pub group_epoch: i32,
    pub assignor: String,
    pub members: Vec<GroupMember>,
    pub offsets: Vec<CommittedOffset>,
}

/// How far a group is behind on one partition.
#[napi(object, object_from_js = false)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    #[napi(ts_type = "bigint | null")]
    pub committed: Option<i64n>,
    #[napi(ts_type = "bigint")]
    pub log_end_offset: i64n,
    #[napi(ts_type = "bigint | null")]
    pub lag: Option<i64n>,
    pub owner: Option<String>,
}

/// A stored plugin and its counters.
#[napi(object, object_from_js = false)]
pub struct PluginDescription {
    pub name: String,
    /// `partitioner`, `produce-interceptor`, `consume-interceptor` or `transform`.
    pub hook: String,
    pub digest: String,
    pub size_bytes: i64,
    pub uploaded_ms: i64,
    pub calls: i64,
    pub errors: i64,
    pub traps: i64,
    pub attached_to: Vec<String>,
    /// `ready`, `compiling` (uploads answer before the broker compiles),
    /// `failed` (see `stateReason`) or `fetching`.
    pub state: String,
    /// Why the code failed to compile; empty otherwise.
    pub state_reason: String,
}

fn plugin_out(plugin: client::PluginDescription) -> PluginDescription {
    PluginDescription {
        name: plugin.name,
        hook: plugin.hook,
        digest: plugin.digest,
        size_bytes: plugin.size_bytes as i64,
        uploaded_ms: plugin.uploaded_ms,
        calls: plugin.calls as i64,
        errors: plugin.errors as i64,
        traps: plugin.traps as i64,
        attached_to: plugin.attached_to,
        state: plugin.state,
        state_reason: plugin.state_reason,
    }
}

/// A line of a plugin's log.
#[napi(object, object_from_js = false)]
pub struct PluginLogLine {
    pub unix_ms: i64,
    pub level: String,
    pub message: String,
}

/// One input partition of a transform.
#[napi(object, object_from_js = false)]
pub struct TransformPartition {
    pub partition: i32,
    #[napi(ts_type = "bigint")]
    pub next_offset: i64n,
    /// -1 when unknown.
    #[napi(ts_type = "bigint")]
    pub lag: i64n,
    pub processed: i64,
    pub emitted: i64,
    /// Records sent to the dead-letter topic.
    pub dead_lettered: i64,
}

/// A deployed transform and its progress.
#[napi(object, object_from_js = false)]
pub struct TransformStatus {
    pub name: String,
    pub plugin: String,
    pub input_topic: String,
    pub output_topics: Vec<String>,
    /// Where records the plugin fails on for good go, if anywhere.
    pub dead_letter_topic: Option<String>,
    /// `running`, `paused`, `starting`, or `retrying: <why>`.
    pub state: String,
    pub partitions: Vec<TransformPartition>,
}

/// A transform's start or replay offset: -2 (earliest), -1 (latest) or an
/// offset, as a 64-bit bigint.
fn transform_offset(offset: &BigInt) -> Result<i64> {
    match offset.get_i64() {
        (value, true) if value >= client::TRANSFORM_EARLIEST => Ok(value),
        _ => Err(napi::Error::new(Status::InvalidArg, "a transform offset is -2 (earliest), -1 (latest) or an offset")),
    }
}

/// An admin client over the client core.
#[napi]
pub struct NativeAdmin {
    inner: client::Admin,
}

/// Runs an admin call on the client runtime, converting its answer on the way.
fn call<'env, T, R, F>(env: &'env Env, future: F, convert: fn(T) -> R) -> Result<PromiseRaw<'env, R>>
where
    T: Send + 'static,
    R: Send + ToNapiValue + 'static,
    F: Future<Output = std::result::Result<T, client::ClientError>> + Send + 'static,
{
    crate::promise(env, future, convert)
}

#[napi]
impl NativeAdmin {
    /// `config` holds common client settings by their Kafka names
    /// (`client.id`, `request.timeout.ms`, …).
    #[napi(constructor)]
    pub fn new(brokers: Vec<String>, config: Option<HashMap<String, String>>) -> Result<NativeAdmin> {
        let common = client::ProducerConfig::from_map(&crate::settings(brokers, config)).map_err(client_err)?.common;
        let inner = client_ffi::runtime::within(|| client::Admin::new(common)).map_err(to_js)?.map_err(client_err)?;
        Ok(NativeAdmin { inner })
    }

    /// Creates a topic (`replicationFactor` -1: the broker default).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn create_topic<'env>(
        &self,
        env: &'env Env,
        name: String,
        partitions: i32,
        replication_factor: i32,
        configs: Option<HashMap<String, String>>,
    ) -> Result<PromiseRaw<'env, ()>> {
        let admin = self.inner.clone();
        let replication_factor = i16::try_from(replication_factor)
            .map_err(|_| napi::Error::new(Status::InvalidArg, "replicationFactor is out of range"))?;
        let mut topic = client::NewTopic::new(name, partitions);
        topic.replication_factor = replication_factor;
        topic.configs = configs.unwrap_or_default().into_iter().collect();
        call(env, async move { admin.create_topic(topic).await }, |()| ())
    }

    #[napi(ts_return_type = "Promise<Array<string>>")]
    pub fn list_topics<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, Vec<String>>> {
        let admin = self.inner.clone();
        call(env, async move { admin.list_topics().await }, |topics| topics)
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn delete_topic<'env>(&self, env: &'env Env, name: String) -> Result<PromiseRaw<'env, ()>> {
        let admin = self.inner.clone();
        call(env, async move { admin.delete_topic(&name).await }, |()| ())
    }

    #[napi(ts_return_type = "Promise<TopicDescription>")]
    pub fn describe_topic<'env>(&self, env: &'env Env, name: String) -> Result<PromiseRaw<'env, TopicDescription>> {
        let admin = self.inner.clone();
        call(env, async move { admin.describe_topic(&name).await }, |description| TopicDescription {
            name: description.name,
            partitions: description
                .partitions
                .into_iter()
                .map(|partition| PartitionDescription {
                    partition: partition.partition,
                    leader: partition.leader,
                    leader_epoch: partition.leader_epoch,
                    replicas: partition.replicas,
                    isr: partition.isr,
                    target_replicas: partition.target_replicas,
                })
                .collect(),
            configs: description.configs.into_iter().collect(),
        })
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn alter_topic_config<'env>(
        &self,
        env: &'env Env,
        name: String,
        configs: HashMap<String, String>,
    ) -> Result<PromiseRaw<'env, ()>> {
        let admin = self.inner.clone();
        call(env, async move { admin.alter_topic_config(&name, configs.into_iter().collect()).await }, |()| ())
    }

    /// `[low, high]`: the log start offset and the high watermark.
    #[napi(ts_return_type = "Promise<[bigint, bigint]>")]
    pub fn watermarks<'env>(
        &self,
        env: &'env Env,
        topic: String,
        partition: i32,
    ) -> Result<PromiseRaw<'env, Vec<i64n>>> {
        let admin = self.inner.clone();
        call(env, async move { admin.watermarks(&topic, partition).await }, |(low, high)| vec![i64n(low), i64n(high)])
    }

    #[napi(ts_return_type = "Promise<Array<GroupListing>>")]
    pub fn list_groups<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, Vec<GroupListing>>> {
        let admin = self.inner.clone();
        call(env, async move { admin.list_groups().await }, |groups| {
            groups
                .into_iter()
                .map(|group| GroupListing { group_id: group.group_id, state: group.state, members: group.member_count })
                .collect()
        })
    }

    #[napi(ts_return_type = "Promise<GroupDescription>")]
    pub fn describe_group<'env>(&self, env: &'env Env, group_id: String) -> Result<PromiseRaw<'env, GroupDescription>> {
        let admin = self.inner.clone();
        call(env, async move { admin.describe_group(&group_id).await }, |group| GroupDescription {
            group_id: group.group_id,
            state: group.state,
            group_epoch: group.group_epoch,
            assignor: group.assignor,
            members: group
                .members
                .into_iter()
                .map(|member| GroupMember {
                    member_id: member.member_id,
                    instance_id: member.instance_id,
                    member_epoch: member.member_epoch,
                    subscribed_topics: member.subscribed_topics,
                    assigned: member
                        .assigned
                        .into_iter()
                        .map(|(topic, partition)| crate::consumer::TopicPartition { topic, partition })
                        .collect(),
                })
                .collect(),
            offsets: group
                .offsets
                .into_iter()
                .map(|offset| CommittedOffset {
                    topic: offset.topic,
                    partition: offset.partition,
                    offset: i64n(offset.offset),
                    metadata: offset.metadata,
                })
                .collect(),
        })
    }

    #[napi(ts_return_type = "Promise<Array<PartitionLag>>")]
    pub fn group_lag<'env>(&self, env: &'env Env, group_id: String) -> Result<PromiseRaw<'env, Vec<PartitionLag>>> {
        let admin = self.inner.clone();
        call(env, async move { admin.group_lag(&group_id).await }, |lags| {
            lags.into_iter()
                .map(|lag| PartitionLag {
                    topic: lag.topic,
                    partition: lag.partition,
                    committed: lag.committed.map(i64n),
                    log_end_offset: i64n(lag.log_end_offset),
                    lag: lag.lag.map(i64n),
                    owner: lag.owner,
                })
                .collect()
        })
    }

    /// Sets a group's committed offsets (the group must have no members).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn reset_offsets<'env>(
        &self,
        env: &'env Env,
        group_id: String,
        offsets: Vec<crate::consumer::TopicPartitionOffset>,
    ) -> Result<PromiseRaw<'env, ()>> {
        let admin = self.inner.clone();
        let offsets = offsets
            .into_iter()
            .map(|entry| Ok(((entry.topic, entry.partition), crate::consumer::offset_in(&entry.offset)?)))
            .collect::<Result<Vec<_>>>()?;
        call(env, async move { admin.reset_offsets(&group_id, offsets).await }, |()| ())
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn delete_group<'env>(&self, env: &'env Env, group_id: String) -> Result<PromiseRaw<'env, ()>> {
        let admin = self.inner.clone();
        call(env, async move { admin.delete_group(&group_id).await }, |()| ())
    }

    /// Uploads a WebAssembly component as plugin `name` for `hook`. The broker
    /// compiles it in the background: the answer's `state` may be `compiling`
    /// (`listPlugins` shows when it is `ready` or `failed`); attaching or
    /// deploying the plugin waits for the compile.
    #[napi(ts_return_type = "Promise<PluginDescription>")]
    pub fn upload_plugin<'env>(
        &self,
        env: &'env Env,
        name: String,
        hook: String,
        wasm: Buffer,
    ) -> Result<PromiseRaw<'env, PluginDescription>> {
        let admin = self.inner.clone();
        let wasm = wasm.to_vec();
        call(env, async move { admin.upload_plugin(&name, &hook, wasm).await }, plugin_out)
    }

    #[napi(ts_return_type = "Promise<Array<PluginDescription>>")]
    pub fn list_plugins<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, Vec<PluginDescription>>> {
        let admin = self.inner.clone();
        call(env, async move { admin.list_plugins().await }, |plugins| plugins.into_iter().map(plugin_out).collect())
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn delete_plugin<'env>(&self, env: &'env Env, name: String) -> Result<PromiseRaw<'env, ()>> {
        let admin = self.inner.clone();
        call(env, async move { admin.delete_plugin(&name).await }, |()| ())
    }

    #[napi(ts_return_type = "Promise<Array<PluginLogLine>>")]
    pub fn plugin_logs<'env>(&self, env: &'env Env, name: String) -> Result<PromiseRaw<'env, Vec<PluginLogLine>>> {
        let admin = self.inner.clone();
        call(env, async move { admin.plugin_logs(&name).await }, |lines| {
            lines
                .into_iter()
                .map(|line| PluginLogLine { unix_ms: line.unix_ms, level: line.level, message: line.message })
                .collect()
        })
    }

    /// Attaches a plugin to a topic: an interceptor (`produce-interceptor`,
    /// `consume-interceptor`) or the topic's `partitioner`.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn attach_plugin<'env>(
        &self,
        env: &'env Env,
        topic: String,
        hook: String,
        plugin: String,
        config: Option<HashMap<String, String>>,
        failure_policy: Option<String>,
    ) -> Result<PromiseRaw<'env, ()>> {
        let admin = self.inner.clone();
        let attach = client::Attach {
            topic,
            hook,
            plugin,
            config: config.unwrap_or_default().into_iter().collect(),
            failure_policy: failure_policy.unwrap_or_default(),
        };
        call(env, async move { admin.attach_plugin(attach).await }, |()| ())
    }

    #[napi(ts_return_type = "Promise<void>")]
    pub fn detach_plugin<'env>(
        &self,
        env: &'env Env,
        topic: String,
        hook: String,
        plugin: String,
    ) -> Result<PromiseRaw<'env, ()>> {
        let admin = self.inner.clone();
        call(env, async move { admin.detach_plugin(&topic, &hook, &plugin).await }, |()| ())
    }

    /// Deploys a transform: `start` is -2 (earliest), -1 (latest) or an offset;
    /// records the plugin fails on for good go to `deadLetterTopic` when set
    /// (otherwise they hold their partition).
    #[napi(ts_return_type = "Promise<void>")]
    #[allow(clippy::too_many_arguments)] // mirrors the deployment's fields
    pub fn deploy_transform<'env>(
        &self,
        env: &'env Env,
        name: String,
        plugin: String,
        input_topic: String,
        output_topics: Vec<String>,
        start: BigInt,
        config: Option<HashMap<String, String>>,
        dead_letter_topic: Option<String>,
    ) -> Result<PromiseRaw<'env, ()>> {
        let admin = self.inner.clone();
        let spec = client::TransformSpec {
            name,
            plugin,
            input_topic,
            output_topics,
            start: transform_offset(&start)?,
            config: config.unwrap_or_default().into_iter().collect(),
            dead_letter_topic,
        };
        call(env, async move { admin.deploy_transform(spec).await }, |()| ())
    }

    #[napi(ts_return_type = "Promise<Array<TransformStatus>>")]
    pub fn list_transforms<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, Vec<TransformStatus>>> {
        let admin = self.inner.clone();
        call(env, async move { admin.list_transforms().await }, |transforms| {
            transforms
                .into_iter()
                .map(|transform| TransformStatus {
                    name: transform.name,
                    plugin: transform.plugin,
                    input_topic: transform.input_topic,
                    output_topics: transform.output_topics,
                    dead_letter_topic: transform.dead_letter_topic,
                    state: transform.state,
                    partitions: transform
                        .partitions
                        .into_iter()
                        .map(|partition| TransformPartition {
                            partition: partition.partition,
                            next_offset: i64n(partition.next_offset),
                            lag: i64n(partition.lag),
                            processed: partition.processed as i64,
                            emitted: partition.emitted as i64,
                            dead_lettered: partition.dead_lettered as i64,
                        })
                        .collect(),
                })
                .collect()
        })
    }

    /// `pause`, `resume`, `delete`, or `replay` from `offset` (-2 earliest,
    /// -1 latest).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn control_transform<'env>(
        &self,
        env: &'env Env,
        name: String,
        action: String,
        offset: Option<BigInt>,
    ) -> Result<PromiseRaw<'env, ()>> {
        let admin = self.inner.clone();
        let offset = offset.as_ref().map(transform_offset).transpose()?.unwrap_or(client::TRANSFORM_EARLIEST);
        call(env, async move { admin.control_transform(&name, &action, offset).await }, |()| ())
    }
}

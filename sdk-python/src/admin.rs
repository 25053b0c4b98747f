//! `weir._native.Admin`: topics, consumer groups, plugins and transforms.
//! Results are plain tuples; the Python layer wraps them in dataclasses.

use std::collections::HashMap;

use client::Offset;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::{block, to_py_err};

type Partitions = Vec<(String, i32)>;
/// (partition, leader, leader epoch, replicas, in-sync replicas).
type PartitionRow = (i32, i32, i32, Vec<i32>, Vec<i32>);
/// (member id, instance id, member epoch, subscribed topics, assigned, target).
type MemberRow = (String, Option<String>, i32, Vec<String>, Partitions, Partitions);
/// (topic, partition, offset, metadata, commit timestamp ms).
type OffsetRow = (String, i32, i64, String, i64);
/// (group id, state, group epoch, assignor, members, offsets).
type GroupRow = (String, String, i32, String, Vec<MemberRow>, Vec<OffsetRow>);
/// (topic, partition, committed, log end offset, lag, owner).
type LagRow = (String, i32, Option<i64>, i64, Option<i64>, Option<String>);
/// (partition, next offset, lag (-1 unknown), processed, emitted, dead-lettered).
type TransformPartitionRow = (i32, i64, i64, u64, u64, u64);
/// (name, plugin, input topic, output topics, dead-letter topic, state, partitions).
type TransformRow = (String, String, String, Vec<String>, Option<String>, String, Vec<TransformPartitionRow>);

#[pyclass(module = "weir._native")]
pub(crate) struct Admin {
    inner: client::Admin,
}

#[pymethods]
impl Admin {
    #[new]
    fn new(py: Python<'_>, bootstrap_servers: &str) -> PyResult<Admin> {
        let common = client::CommonConfig { bootstrap_servers: bootstrap_servers.to_owned(), ..Default::default() };
        let inner = client::Admin::new(common).map_err(|error| to_py_err(py, error))?;
        Ok(Admin { inner })
    }

    #[pyo3(signature = (name, partitions=1, replication_factor=-1, config=None))]
    fn create_topic(
        &self,
        py: Python<'_>,
        name: String,
        partitions: i32,
        replication_factor: i16,
        config: Option<HashMap<String, String>>,
    ) -> PyResult<()> {
        let admin = self.inner.clone();
        let topic = client::NewTopic {
            name,
            partition_count: partitions,
            replication_factor,
            configs: config.unwrap_or_default().into_iter().collect(),
        };
        block(py, async move { admin.create_topic(topic).await })
    }

    fn list_topics(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let admin = self.inner.clone();
        block(py, async move { admin.list_topics().await })
    }

    fn delete_topic(&self, py: Python<'_>, name: String) -> PyResult<()> {
        let admin = self.inner.clone();
        block(py, async move { admin.delete_topic(&name).await })
    }

    /// (partitions, {config: value}).
    fn describe_topic(&self, py: Python<'_>, name: String) -> PyResult<(Vec<PartitionRow>, HashMap<String, String>)> {
        let admin = self.inner.clone();
        let description = block(py, async move { admin.describe_topic(&name).await })?;
        let partitions = description
            .partitions
            .into_iter()
            .map(|partition| {
                (partition.partition, partition.leader, partition.leader_epoch, partition.replicas, partition.isr)
            })
            .collect();
        Ok((partitions, description.configs.into_iter().collect()))
    }

    fn alter_topic_config(&self, py: Python<'_>, name: String, config: HashMap<String, String>) -> PyResult<()> {
        let admin = self.inner.clone();
        block(py, async move { admin.alter_topic_config(&name, config.into_iter().collect()).await })
    }

    /// `(earliest, high watermark)` of a partition.
    fn watermarks(&self, py: Python<'_>, topic: String, partition: i32) -> PyResult<(i64, i64)> {
        let admin = self.inner.clone();
        block(py, async move { admin.watermarks(&topic, partition).await })
    }

    /// The first offset whose timestamp is at or after `timestamp_ms` (the high
    /// watermark when there is none).
    fn offset_for_timestamp(&self, py: Python<'_>, topic: String, partition: i32, timestamp_ms: i64) -> PyResult<i64> {
        let admin = self.inner.clone();
        block(py, async move { admin.offset_for(&topic, partition, Offset::Timestamp(timestamp_ms)).await })
    }

    /// `[(group id, state, member count)]`.
    fn list_groups(&self, py: Python<'_>) -> PyResult<Vec<(String, String, u32)>> {
        let admin = self.inner.clone();
        let groups = block(py, async move { admin.list_groups().await })?;
        Ok(groups.into_iter().map(|group| (group.group_id, group.state, group.member_count)).collect())
    }

    fn describe_group(&self, py: Python<'_>, group_id: String) -> PyResult<GroupRow> {
        let admin = self.inner.clone();
        let group = block(py, async move { admin.describe_group(&group_id).await })?;
        let members = group
            .members
            .into_iter()
            .map(|member| {
                let client::GroupMember { member_id, instance_id, member_epoch, subscribed_topics, assigned, target } =
                    member;
                (member_id, instance_id, member_epoch, subscribed_topics, assigned, target)
            })
            .collect();
        let offsets = group
            .offsets
            .into_iter()
            .map(|offset| (offset.topic, offset.partition, offset.offset, offset.metadata, offset.commit_timestamp_ms))
            .collect();
        Ok((group.group_id, group.state, group.group_epoch, group.assignor, members, offsets))
    }

    /// Committed offset, log end and lag of every partition the group has an
    /// offset for or subscribes to.
    fn group_lag(&self, py: Python<'_>, group_id: String) -> PyResult<Vec<LagRow>> {
        let admin = self.inner.clone();
        let lag = block(py, async move { admin.group_lag(&group_id).await })?;
        Ok(lag
            .into_iter()
            .map(|row| (row.topic, row.partition, row.committed, row.log_end_offset, row.lag, row.owner))
            .collect())
    }

    /// Sets committed offsets of a group with no members.
    fn reset_offsets(&self, py: Python<'_>, group_id: String, offsets: Vec<(String, i32, i64)>) -> PyResult<()> {
        let admin = self.inner.clone();
        let offsets = offsets.into_iter().map(|(topic, partition, offset)| ((topic, partition), offset)).collect();
        block(py, async move { admin.reset_offsets(&group_id, offsets).await })
    }

    fn delete_group(&self, py: Python<'_>, group_id: String) -> PyResult<()> {
        let admin = self.inner.clone();
        block(py, async move { admin.delete_group(&group_id).await })
    }

    /// Uploads a plugin; returns its row (see `list_plugins`).
    #[pyo3(signature = (name, wasm, hook=String::new()))]
    fn upload_plugin(&self, py: Python<'_>, name: String, wasm: Vec<u8>, hook: String) -> PyResult<PluginRow> {
        let admin = self.inner.clone();
        let plugin = block(py, async move { admin.upload_plugin(&name, &hook, wasm).await })?;
        Ok(plugin_row(plugin))
    }

    /// `[(name, hook, digest, size, uploaded ms, calls, errors, traps, busy ns, attached to)]`.
    fn list_plugins(&self, py: Python<'_>) -> PyResult<Vec<PluginRow>> {
        let admin = self.inner.clone();
        Ok(block(py, async move { admin.list_plugins().await })?.into_iter().map(plugin_row).collect())
    }

    fn delete_plugin(&self, py: Python<'_>, name: String) -> PyResult<()> {
        let admin = self.inner.clone();
        block(py, async move { admin.delete_plugin(&name).await })
    }

    /// `[(unix ms, level, message)]`.
    fn plugin_logs(&self, py: Python<'_>, name: String) -> PyResult<Vec<(i64, String, String)>> {
        let admin = self.inner.clone();
        let lines = block(py, async move { admin.plugin_logs(&name).await })?;
        Ok(lines.into_iter().map(|line| (line.unix_ms, line.level, line.message)).collect())
    }

    /// Attaches a plugin to a topic (an interceptor, or the partitioner).
    #[pyo3(signature = (topic, hook, plugin, config=None, failure_policy=String::new()))]
    fn attach_plugin(
        &self,
        py: Python<'_>,
        topic: String,
        hook: String,
        plugin: String,
        config: Option<HashMap<String, String>>,
        failure_policy: String,
    ) -> PyResult<()> {
        let admin = self.inner.clone();
        let attach = client::Attach {
            topic,
            hook,
            plugin,
            config: config.unwrap_or_default().into_iter().collect(),
            failure_policy,
        };
        block(py, async move { admin.attach_plugin(attach).await })
    }

    fn detach_plugin(&self, py: Python<'_>, topic: String, hook: String, plugin: String) -> PyResult<()> {
        let admin = self.inner.clone();
        block(py, async move { admin.detach_plugin(&topic, &hook, &plugin).await })
    }

    /// Deploys a transform: `start` is -2 (earliest), -1 (latest) or an offset.
    #[pyo3(signature = (name, plugin, input_topic, output_topics, start, config=None, dead_letter_topic=None))]
    #[allow(clippy::too_many_arguments)] // mirrors the deployment's fields
    fn deploy_transform(
        &self,
        py: Python<'_>,
        name: String,
        plugin: String,
        input_topic: String,
        output_topics: Vec<String>,
        start: i64,
        config: Option<HashMap<String, String>>,
        dead_letter_topic: Option<String>,
    ) -> PyResult<()> {
        let admin = self.inner.clone();
        let spec = client::TransformSpec {
            name,
            plugin,
            input_topic,
            output_topics,
            start: transform_offset(start)?,
            config: config.unwrap_or_default().into_iter().collect(),
            dead_letter_topic,
        };
        block(py, async move { admin.deploy_transform(spec).await })
    }

    /// Every deployed transform with its progress per input partition (see `TransformRow`).
    fn list_transforms(&self, py: Python<'_>) -> PyResult<Vec<TransformRow>> {
        let admin = self.inner.clone();
        Ok(block(py, async move { admin.list_transforms().await })?.into_iter().map(transform_row).collect())
    }

    /// `pause`, `resume`, `delete`, or `replay` from `offset` (-2 earliest, -1 latest).
    #[pyo3(signature = (name, action, offset=client::TRANSFORM_EARLIEST))]
    fn control_transform(&self, py: Python<'_>, name: String, action: String, offset: i64) -> PyResult<()> {
        let admin = self.inner.clone();
        let offset = transform_offset(offset)?;
        block(py, async move { admin.control_transform(&name, &action, offset).await })
    }
}

/// A transform's start or replay offset: -2 (earliest), -1 (latest) or an offset.
fn transform_offset(offset: i64) -> PyResult<i64> {
    match offset >= client::TRANSFORM_EARLIEST {
        true => Ok(offset),
        false => Err(PyValueError::new_err(format!(
            "a transform offset is -2 (earliest), -1 (latest) or an offset >= 0, not {offset}"
        ))),
    }
}

fn transform_row(transform: client::TransformStatus) -> TransformRow {
    let partitions = transform
        .partitions
        .into_iter()
        .map(|partition| {
            let client::TransformPartition { partition, next_offset, lag, processed, emitted, dead_lettered } =
                partition;
            (partition, next_offset, lag, processed, emitted, dead_lettered)
        })
        .collect();
    (
        transform.name,
        transform.plugin,
        transform.input_topic,
        transform.output_topics,
        transform.dead_letter_topic,
        transform.state,
        partitions,
    )
}

/// (name, hook, digest, size bytes, uploaded ms, calls, errors, traps, busy ns,
/// attached to, state, state reason).
type PluginRow = (String, String, String, u64, i64, u64, u64, u64, u64, Vec<String>, String, String);

fn plugin_row(plugin: client::PluginDescription) -> PluginRow {
    (
        plugin.name,
        plugin.hook,
        plugin.digest,
        plugin.size_bytes,
        plugin.uploaded_ms,
        plugin.calls,
        plugin.errors,
        plugin.traps,
        plugin.busy_nanos,
        plugin.attached_to,
        plugin.state,
        plugin.state_reason,
    )
}

//! `NativeConsumer`: subscribe or assign, long polls that resolve promises from
//! the runtime, commits, seeks, pause/resume, and rebalance events drained by
//! the JavaScript layer after each poll.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use client_ffi::{Offset, RebalanceLog, Record};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::{client_err, headers_out, promise, settings, to_js, Header};

/// A record read by a consumer.
#[napi(object, object_from_js = false)]
pub struct Message {
    pub topic: String,
    pub partition: i32,
    #[napi(ts_type = "bigint")]
    pub offset: i64n,
    /// Milliseconds since the epoch.
    #[napi(ts_type = "bigint")]
    pub timestamp: i64n,
    pub key: Option<Buffer>,
    pub value: Option<Buffer>,
    pub headers: Vec<Header>,
}

fn message(record: Record) -> Message {
    Message {
        topic: record.topic.to_string(),
        partition: record.partition,
        offset: i64n(record.offset),
        timestamp: i64n(record.timestamp_ms),
        key: record.key.map(|key| Buffer::from(key.to_vec())),
        value: record.value.map(|value| Buffer::from(value.to_vec())),
        headers: headers_out(&record.headers),
    }
}

/// A topic partition.
#[napi(object)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

/// An offset to commit: the next one to read.
#[napi(object)]
pub struct TopicPartitionOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: BigInt,
}

/// An assignment change: `kind` is `assigned` or `revoked`.
#[napi(object, object_from_js = false)]
pub struct RebalanceEvent {
    pub kind: String,
    pub partitions: Vec<TopicPartition>,
}

fn partitions_out(partitions: Vec<(String, i32)>) -> Vec<TopicPartition> {
    partitions.into_iter().map(|(topic, partition)| TopicPartition { topic, partition }).collect()
}

/// A committed or sought offset from JavaScript: a non-negative 64-bit bigint.
pub(crate) fn offset_in(offset: &BigInt) -> Result<i64> {
    match offset.get_i64() {
        (value, true) if value >= 0 => Ok(value),
        _ => Err(napi::Error::new(Status::InvalidArg, "an offset must be a non-negative 64-bit integer")),
    }
}

/// A consumer over the client core.
#[napi]
pub struct NativeConsumer {
    inner: Arc<client_ffi::Consumer>,
    rebalances: Arc<RebalanceLog>,
}

#[napi]
impl NativeConsumer {
    /// `config` holds client settings by their Kafka names (`group.id`,
    /// `auto.offset.reset`, …); unknown keys are refused.
    #[napi(constructor)]
    pub fn new(brokers: Vec<String>, config: Option<HashMap<String, String>>) -> Result<NativeConsumer> {
        let config = client::ConsumerConfig::from_map(&settings(brokers, config)).map_err(client_err)?;
        let inner = client_ffi::runtime::within(|| client_ffi::Consumer::new(config)).map_err(to_js)?;
        Ok(NativeConsumer { inner: Arc::new(inner.map_err(client_err)?), rebalances: Arc::default() })
    }

    /// Joins the group (`group.id`) as a member consuming `topics`, or every
    /// topic whose whole name matches `pattern`.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn subscribe<'env>(
        &self,
        env: &'env Env,
        topics: Vec<String>,
        pattern: Option<String>,
    ) -> Result<PromiseRaw<'env, ()>> {
        let consumer = self.inner.clone();
        let listener: Arc<dyn client_ffi::RebalanceListener> = self.rebalances.clone();
        let subscribe = async move {
            match pattern {
                Some(pattern) => consumer.subscribe_pattern(&pattern, Some(listener)).await,
                None => consumer.subscribe(&topics, Some(listener)).await,
            }
        };
        promise(env, subscribe, |()| ())
    }

    /// Reads exactly these partitions, outside any group.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn assign<'env>(&self, env: &'env Env, partitions: Vec<TopicPartition>) -> Result<PromiseRaw<'env, ()>> {
        let consumer = self.inner.clone();
        let partitions: Vec<(String, i32)> = partitions.into_iter().map(|tp| (tp.topic, tp.partition)).collect();
        promise(env, async move { consumer.assign(&partitions).await }, |()| ())
    }

    /// Records that arrive within `maxWaitMs` (at most `maxRecords`).
    #[napi(ts_return_type = "Promise<Array<Message>>")]
    pub fn poll<'env>(
        &self,
        env: &'env Env,
        max_wait_ms: u32,
        max_records: u32,
    ) -> Result<PromiseRaw<'env, Vec<Message>>> {
        let consumer = self.inner.clone();
        let wait = Duration::from_millis(u64::from(max_wait_ms));
        let poll = async move { consumer.poll_at_most(wait, max_records.max(1) as usize).await };
        promise(env, poll, |records| records.into_iter().map(message).collect())
    }

    /// Commits every owned partition's position, or exactly `offsets`.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn commit<'env>(
        &self,
        env: &'env Env,
        offsets: Option<Vec<TopicPartitionOffset>>,
    ) -> Result<PromiseRaw<'env, ()>> {
        let consumer = self.inner.clone();
        let offsets = offsets
            .map(|offsets| {
                offsets
                    .iter()
                    .map(|entry| Ok(((entry.topic.clone(), entry.partition), offset_in(&entry.offset)?)))
                    .collect::<Result<Vec<_>>>()
            })
            .transpose()?;
        let commit = async move {
            match offsets {
                Some(offsets) => consumer.commit_offsets(&offsets).await,
                None => consumer.commit().await,
            }
        };
        promise(env, commit, |()| ())
    }

    /// The group's committed offset of a partition (null: none).
    #[napi(ts_return_type = "Promise<bigint | null>")]
    pub fn committed<'env>(
        &self,
        env: &'env Env,
        topic: String,
        partition: i32,
    ) -> Result<PromiseRaw<'env, Option<i64n>>> {
        let consumer = self.inner.clone();
        promise(env, async move { consumer.committed(&topic, partition).await }, |offset| offset.map(i64n))
    }

    /// Moves a partition's position: an offset, or `earliest` / `latest`.
    #[napi]
    pub fn seek(&self, topic: String, partition: i32, offset: Either<BigInt, String>) -> Result<()> {
        let offset = match offset {
            Either::A(offset) => Offset::At(offset_in(&offset)?),
            Either::B(name) => match name.as_str() {
                "earliest" | "beginning" => Offset::Beginning,
                "latest" | "end" => Offset::End,
                other => {
                    let message = format!("offset must be a bigint, 'earliest' or 'latest', not {other:?}");
                    return Err(napi::Error::new(Status::InvalidArg, message));
                }
            },
        };
        self.inner.seek(&topic, partition, offset).map_err(client_err)
    }

    /// Makes the waiting poll (or the next one) resolve at once, empty.
    #[napi]
    pub fn wakeup(&self) {
        self.inner.wakeup();
    }

    /// Stores the next offset to read as what commits take for a partition
    /// (with `enable.auto.offset.store=false`): once a record is handled.
    #[napi]
    pub fn store_offset(&self, topic: String, partition: i32, offset: BigInt) -> Result<()> {
        self.inner.store_offset(&topic, partition, offset_in(&offset)?).map_err(client_err)
    }

    /// The partitions this consumer owns now.
    #[napi]
    pub fn assignment(&self) -> Vec<TopicPartition> {
        partitions_out(self.inner.assignment())
    }

    /// The next offset to read from a partition (null: not owned).
    #[napi(ts_return_type = "bigint | null")]
    pub fn position(&self, topic: String, partition: i32) -> Option<i64n> {
        self.inner.position(&topic, partition).map(i64n)
    }

    #[napi]
    pub fn pause(&self, topic: String, partition: i32) {
        self.inner.pause(&topic, partition);
    }

    #[napi]
    pub fn resume(&self, topic: String, partition: i32) {
        self.inner.resume(&topic, partition);
    }

    /// Assignment changes since the last call, in order.
    #[napi]
    pub fn rebalance_events(&self) -> Vec<RebalanceEvent> {
        self.rebalances
            .drain()
            .into_iter()
            .map(|(kind, partitions)| RebalanceEvent { kind: kind.to_owned(), partitions: partitions_out(partitions) })
            .collect()
    }

    /// Leaves the group (committing first with auto-commit) and stops fetching.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, ()>> {
        let consumer = self.inner.clone();
        let close = async move {
            consumer.close().await;
            Ok::<(), client::ClientError>(())
        };
        promise(env, close, |()| ())
    }
}

//! `NativeConsumer`: subscribe or assign, long polls that resolve promises from
//! the runtime, commits, seeks, pause/resume, and rebalance events drained by
//! the JavaScript layer after each poll.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use client_ffi::{Offset, RebalanceLog, Record};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::{client_err, promise, promise_try, settings, to_js};

/// The records of one poll, packed: every key, value and header in one
/// buffer and the rest in typed arrays, so handing `n` records to JavaScript
/// costs a handful of objects rather than a dozen per record (the JavaScript
/// layer makes the messages, with views into `data`).
#[napi(object, object_from_js = false)]
pub struct Polled {
    /// The distinct topics of these records; `index` names them by position.
    pub topics: Vec<String>,
    /// Every key, value, header key and header value, back to back.
    pub data: Buffer,
    /// `POLLED_STRIDE` words per record: topic position, partition, key start,
    /// key length, value start, value length, first header, header count
    /// (a length of `NULL_LENGTH` is a null key or value).
    pub index: Uint32Array,
    /// 4 words per header: key start, key length, value start, value length.
    pub headers: Uint32Array,
    pub offsets: BigInt64Array,
    /// Milliseconds since the epoch.
    pub timestamps: BigInt64Array,
}

/// Words per record in [`Polled::index`].
pub const POLLED_STRIDE: usize = 8;
/// The length of a null key, value or header value.
pub const NULL_LENGTH: u32 = u32::MAX;

/// Where `bytes` lands in `data`: (start, length), copied in.
fn span(data: &mut Vec<u8>, bytes: Option<&[u8]>) -> [u32; 2] {
    match bytes {
        None => [0, NULL_LENGTH],
        Some(bytes) => {
            let start = data.len() as u32;
            data.extend_from_slice(bytes);
            [start, bytes.len() as u32]
        }
    }
}

fn polled(records: Vec<Record>) -> Result<Polled> {
    let data_bytes: usize = records
        .iter()
        .map(|record| {
            let headers: usize =
                record.headers.iter().map(|(key, value)| key.len() + value.as_ref().map_or(0, |v| v.len())).sum();
            record.key.as_ref().map_or(0, |key| key.len())
                + record.value.as_ref().map_or(0, |value| value.len())
                + headers
        })
        .sum();
    if data_bytes >= NULL_LENGTH as usize {
        return Err(napi::Error::new(Status::GenericFailure, "a poll answered more than 4 GiB of records"));
    }
    let mut topics: Vec<String> = Vec::new();
    let mut data = Vec::with_capacity(data_bytes);
    let mut index = Vec::with_capacity(records.len() * POLLED_STRIDE);
    let mut headers = Vec::new();
    let mut offsets = Vec::with_capacity(records.len());
    let mut timestamps = Vec::with_capacity(records.len());
    for record in &records {
        let topic = match topics.iter().position(|topic| **topic == *record.topic) {
            Some(position) => position,
            None => {
                topics.push(record.topic.to_string());
                topics.len() - 1
            }
        };
        let key = span(&mut data, record.key.as_deref());
        let value = span(&mut data, record.value.as_deref());
        let first_header = (headers.len() / 4) as u32;
        for (header_key, header_value) in &record.headers {
            headers.extend(span(&mut data, Some(header_key.as_bytes())));
            headers.extend(span(&mut data, header_value.as_deref()));
        }
        let header_count = record.headers.len() as u32;
        index.extend([
            topic as u32,
            record.partition as u32,
            key[0],
            key[1],
            value[0],
            value[1],
            first_header,
            header_count,
        ]);
        offsets.push(record.offset);
        timestamps.push(record.timestamp_ms);
    }
    Ok(Polled {
        topics,
        data: Buffer::from(data),
        index: Uint32Array::new(index),
        headers: Uint32Array::new(headers),
        offsets: BigInt64Array::new(offsets),
        timestamps: BigInt64Array::new(timestamps),
    })
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

    /// Records that arrive within `maxWaitMs` (at most `maxRecords`), packed.
    #[napi(ts_return_type = "Promise<Polled>")]
    pub fn poll<'env>(&self, env: &'env Env, max_wait_ms: u32, max_records: u32) -> Result<PromiseRaw<'env, Polled>> {
        let consumer = self.inner.clone();
        let wait = Duration::from_millis(u64::from(max_wait_ms));
        let poll = async move { consumer.poll_at_most(wait, max_records.max(1) as usize).await };
        promise_try(env, poll, polled)
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

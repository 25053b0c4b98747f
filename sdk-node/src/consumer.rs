//! `NativeConsumer`: subscribe or assign, long polls that resolve promises from
//! the runtime, commits, seeks, pause/resume, and rebalance events drained by
//! the JavaScript layer after each poll.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use client_ffi::{Offset, RebalanceLog, Record, RecordViews};
use napi::bindgen_prelude::*;
use napi::{check_status, sys};
use napi_derive::napi;

use crate::{client_err, promise, promise_try, settings, to_js};

/// The records of one poll, packed and not copied: the buffers the client core
/// fetched them into cross as external `Buffer`s (JavaScript holds them until
/// the last message made from them is collected), and the rest in typed
/// arrays, so handing `n` records to JavaScript costs a handful of objects and
/// no copy of their bytes (the JavaScript layer makes the messages, with views
/// into `buffers`).
#[napi(object, object_from_js = false)]
pub struct Polled {
    /// The distinct topics of these records; `index` names them by position.
    pub topics: Vec<String>,
    /// The fetched bytes the keys, values and header values lie in: for each
    /// buffer the core fetched into, the range these records use.
    #[napi(ts_type = "Buffer[]")]
    pub buffers: Shared,
    /// Every header key, back to back (header keys are decoded to strings by
    /// the core, so these are copies; most records have none).
    pub header_keys: Buffer,
    /// `VIEW_STRIDE` (9) words per record: topic position, partition, buffer
    /// position, key start, key length, value start, value length, first
    /// header, header count (a length of `NULL_LENGTH`, 2^32 - 1, is a null key or value).
    pub index: Uint32Array,
    /// 4 words per header: key start and length (in `headerKeys`), value start
    /// and length (in the record's buffer).
    pub headers: Uint32Array,
    pub offsets: BigInt64Array,
    /// Milliseconds since the epoch.
    pub timestamps: BigInt64Array,
}

/// Ranges of fetched buffers, each becoming one external `Buffer` that keeps
/// its `Bytes` (and so the whole fetched allocation) alive until collected.
pub struct Shared(Vec<Bytes>);

impl TypeName for Shared {
    fn type_name() -> &'static str {
        "Buffer[]"
    }

    fn value_type() -> ValueType {
        ValueType::Object
    }
}

impl ToNapiValue for Shared {
    unsafe fn to_napi_value(raw_env: sys::napi_env, shared: Shared) -> Result<sys::napi_value> {
        let env = Env::from_raw(raw_env);
        let mut array = std::ptr::null_mut();
        // SAFETY: a live env on the JavaScript thread (napi calls this there).
        check_status!(unsafe { sys::napi_create_array_with_length(raw_env, shared.0.len(), &mut array) })?;
        for (position, bytes) in shared.0.into_iter().enumerate() {
            let buffer = if bytes.is_empty() {
                BufferSlice::from_data(&env, Vec::new())?
            } else {
                let (data, length) = (bytes.as_ptr().cast_mut(), bytes.len());
                // SAFETY: `data` stays valid while `bytes` lives, and `bytes`
                // is the finalize hint: dropped when the Buffer is collected.
                // JavaScript may write into it, as into any message Buffer:
                // the range is this poll's records' alone (records are handed
                // out once), and the core no longer reads it once decoded.
                // Two polls never share a start address (each range starts at
                // its first record's bytes), which V8 requires of external
                // buffers.
                unsafe { BufferSlice::from_external(&env, data, length, bytes, |_, bytes| drop(bytes))? }
            };
            // SAFETY: `array` was made above with this env; the index is in range.
            check_status!(unsafe { sys::napi_set_element(raw_env, array, position as u32, buffer.raw()) })?;
        }
        Ok(array)
    }
}

fn polled(records: Vec<Record>) -> Result<Polled> {
    let views = RecordViews::new(&records).map_err(to_js)?;
    Ok(Polled {
        topics: views.topics,
        buffers: Shared(views.buffers),
        header_keys: Buffer::from(views.header_keys),
        index: Uint32Array::new(views.index),
        headers: Uint32Array::new(views.headers),
        offsets: BigInt64Array::new(views.offsets),
        timestamps: BigInt64Array::new(views.timestamps),
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

    /// What `poll` would resolve with at once, answered on this thread: the
    /// records already fetched (or an empty set after `wakeup`), and null
    /// when a poll would wait (then `poll` waits off this thread).
    #[napi]
    pub fn poll_ready(&self, max_records: u32) -> Result<Option<Polled>> {
        match self.inner.poll_ready(max_records.max(1) as usize) {
            Some(Ok(records)) => polled(records).map(Some),
            Some(Err(error)) => Err(client_err(error)),
            None => Ok(None),
        }
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

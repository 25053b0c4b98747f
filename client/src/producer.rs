//! [`Producer`]: batches records per partition and sends each batch to the
//! partition's leader, with retries and (by default) idempotence.
//!
//! The algorithm:
//! 1. `send` picks the partition (explicit; murmur2 of the key, as Kafka's Java
//!    client does; or round-robin per batch for records without a key), waits
//!    while more than `buffer_bytes_max` is unacknowledged, and appends the record
//!    to the partition's open batch — encoded at once ([`BatchWriter`]), so a
//!    record is copied once. It returns a [`DeliveryFuture`]: the records of a
//!    batch share one acknowledgement (one allocation per batch; per record a
//!    reference and, while it is awaited, a waker), and the whole append takes
//!    one uncontended lock.
//! 2. A batch closes when the next record would pass `batch_bytes_max`, or —
//!    once its partition has no request in flight — when it is `linger` old
//!    (seen by the next record's clock reading, or by the sender's timer when
//!    no record comes) or on `flush`/`close`. While a request is in flight the open batch keeps
//!    taking records, so with a linger shorter than the round trip each round
//!    trip carries one batch of everything sent meanwhile (as Kafka's
//!    accumulator does), not one batch per record.
//! 3. The sender task takes the oldest closed batch of each partition, one batch
//!    in flight per partition, so per-partition order holds even across retries.
//!    Only then is the batch's base sequence assigned (idempotence) and the
//!    batch sealed (compression, CRC), off the callers' threads. Small batches
//!    taken together share `produceMany` requests to their leader (one call for
//!    many partitions, as Kafka's produce request carries every partition's
//!    batch); a large or lone batch goes as a plain `produce` of its own.
//! 4. A retriable failure (lost connection, leader moved, timeout) refreshes the
//!    metadata and retries the *same bytes* with backoff until
//!    `delivery_timeout`; the broker's producer table turns a retry of a batch it
//!    already appended into its original offsets, so retries never duplicate.
//!    A final failure fails every record of the batch. If the broker refused the
//!    batch (nothing stored), its sequence numbers are given back so the next
//!    batch leaves no gap; if it may have been stored (timeout, lost connection),
//!    the producer takes a new producer id and restarts sequences at 0, since
//!    reusing the numbers could get a different batch taken for its duplicate.
//!    `acks=0` sends once and never retries.
//! 5. A batch refused as too large (`MessageTooLarge`: the topic's
//!    `max.message.bytes` is below `batch.size`) is split in two and the halves
//!    sent in order, down to single records, as Kafka's producer does; a record
//!    too large on its own fails alone (later parts are renumbered so its
//!    sequence numbers leave no gap). Each record learns its own offset.
//!
//! Bounds: `buffer_bytes_max` of unacknowledged records; one request in flight
//! per partition. The sender runs on the tokio runtime that created the producer.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use abi::batch::{BatchWriter, ProducerFields};
use abi::weir_capnp::{broker, Acks as WireAcks};
use abi::ErrorCode;
use rustc_hash::{FxHashMap, FxHashSet};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::cluster::{Cluster, TopicInfo};
use crate::config::{Acks, ProducerConfig};
use crate::connection::Connection;
use crate::error::{broker_error, ClientError};
use crate::partitioner::partition_for_key;
use crate::record::{ProducerRecord, RecordMetadata, RecordRef};

type TopicPartition = (Arc<str>, i32);

/// Where a batch's records landed: one base offset, or — after the broker refused
/// the batch as too large and it was split — one outcome per part, each part
/// starting at a record index (its first offset delta in the original batch).
#[derive(Clone, Debug)]
enum Placement {
    Whole(i64),
    Split(Arc<[(i32, Result<i64, ClientError>)]>),
}

impl Placement {
    /// The offset of the record at `offset_delta` in the original batch (-1 when
    /// unknown: acks=0).
    fn offset_of(&self, offset_delta: i64) -> Result<i64, ClientError> {
        let (first_delta, base_offset) = match self {
            Placement::Whole(base_offset) => (0, *base_offset),
            Placement::Split(parts) => {
                let part = parts.iter().rev().find(|(first_delta, _)| i64::from(*first_delta) <= offset_delta);
                let (first_delta, base_offset) = part.expect("the first part starts at delta 0");
                (*first_delta, base_offset.clone()?)
            }
        };
        Ok(if base_offset < 0 { -1 } else { base_offset + offset_delta - i64::from(first_delta) })
    }
}

/// Sends records; see the module docs. Cheap to clone (clones share one sender).
/// When the last clone is dropped, buffered records are still sent (as by
/// [`Producer::close`], without waiting) and the sender task then ends.
#[derive(Clone, Debug)]
pub struct Producer {
    inner: Arc<Inner>,
    _closer: Arc<CloseOnDrop>,
}

/// Closes the producer when the last [`Producer`] clone goes away.
#[derive(Debug)]
struct CloseOnDrop(Arc<Inner>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.wake.notify_one();
        self.0.space.notify_waiters();
    }
}

#[derive(Debug)]
struct Inner {
    config: ProducerConfig,
    cluster: Arc<Cluster>,
    state: Mutex<State>,
    /// Wakes the sender: a batch was opened or closed, or a request finished.
    wake: Notify,
    /// Wakes `send`s waiting for buffer space.
    space: Notify,
    /// Partitioner plugins of the topics sent to.
    partitioners: crate::wasm_partitioner::Partitioners,
    /// A broker answered `produceMany` as unimplemented (an older version):
    /// every batch goes as its own `produce` from then on.
    produce_many_unsupported: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    queues: FxHashMap<TopicPartition, PartitionQueue>,
    /// Round-robin position per topic for records without a key, and the batch
    /// that position was chosen for.
    sticky: FxHashMap<Arc<str>, (i32, u64)>,
    buffered_bytes: usize,
    next_batch_id: u64,
    /// Close every open batch now (flush or close).
    drain_all: bool,
    /// The idempotent producer id and epoch batches are stamped with; `None` until
    /// the broker handed one out, and again after a failure left a partition's
    /// sequence in doubt (a fresh id restarts every sequence at 0).
    producer: Option<(i64, i16)>,
    /// After a failed producer-id request: when to ask again, and the next pause.
    producer_id_retry_at: Option<Instant>,
    producer_id_backoff: Duration,
    closed: bool,
    /// Topic names handed to `DeliveryFuture`s, one allocation per topic.
    names: FxHashSet<Arc<str>>,
}

/// One record to queue, borrowed from the caller.
struct RecordParts<'a> {
    partition: Option<i32>,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: &'a [(&'a str, Option<&'a [u8]>)],
    timestamp_ms: Option<i64>,
}

#[derive(Debug, Default)]
struct PartitionQueue {
    open: Option<Batch>,
    ready: VecDeque<Batch>,
    in_flight: bool,
    next_sequence: i32,
}

impl PartitionQueue {
    /// Closes the open batch (moves it to `ready`) once it may go: the partition
    /// is free (`!blocked`), nothing older waits, and it is `linger` old (or
    /// everything is being drained). Until then it keeps taking records, up to
    /// `batch_bytes_max`: while a request is in flight everything sent meanwhile
    /// joins one batch, so a linger shorter than the round trip does not turn
    /// into one batch per record. `finish_batch` wakes the sender when the
    /// partition is free again. Returns when the open batch falls due, if that is
    /// still ahead.
    fn close_open_batch(&mut self, blocked: bool, linger: Duration, drain_all: bool, now: Instant) -> Option<Instant> {
        if blocked || !self.ready.is_empty() {
            return None;
        }
        let due = self.open.as_ref()?.created + linger;
        if drain_all || due <= now {
            self.ready.extend(self.open.take());
            return None;
        }
        Some(due)
    }
}

#[derive(Debug)]
struct Batch {
    id: u64,
    writer: BatchWriter,
    created: Instant,
    /// The wall clock at creation (ms since the epoch) when the record that
    /// opened it was stamped with it: lets a later record close the batch once
    /// it lingered, with the clock reading it takes anyway.
    created_ms: Option<i64>,
    buffered_bytes: usize,
    ack: AckSender,
}

/// A batch's outcome, shared by the [`DeliveryFuture`]s of its records: one
/// allocation per batch, and per record only a reference and, while it waits,
/// its waker.
#[derive(Debug)]
struct BatchAck {
    topic: Arc<str>,
    partition: i32,
    outcome: OnceLock<Result<Placement, ClientError>>,
    /// Wakers of the futures waiting; each future keeps its slot, so polling
    /// again replaces its waker instead of adding one.
    waiters: Mutex<Vec<Waker>>,
}

/// No slot taken in [`BatchAck::waiters`].
const NO_SLOT: u32 = u32::MAX;

impl BatchAck {
    fn new(topic: Arc<str>, partition: i32) -> Arc<BatchAck> {
        Arc::new(BatchAck { topic, partition, outcome: OnceLock::new(), waiters: Mutex::new(Vec::new()) })
    }

    /// Settles the batch (the first outcome stands) and wakes every waiter.
    fn settle(&self, outcome: Result<Placement, ClientError>) {
        let _ = self.outcome.set(outcome);
        // The outcome is set before the waiters are taken, and `poll` registers
        // under the same lock after looking: no waiter is missed.
        let waiters = std::mem::take(&mut *self.waiters.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        waiters.into_iter().for_each(Waker::wake);
    }

    /// The outcome once settled; until then registers `cx`'s waker in `slot`.
    fn poll_outcome(&self, cx: &mut Context<'_>, slot: &mut u32) -> Poll<&Result<Placement, ClientError>> {
        if let Some(outcome) = self.outcome.get() {
            return Poll::Ready(outcome);
        }
        let mut waiters = self.waiters.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(outcome) = self.outcome.get() {
            return Poll::Ready(outcome);
        }
        match waiters.get_mut(*slot as usize) {
            Some(waker) => waker.clone_from(cx.waker()),
            None => {
                *slot = waiters.len() as u32;
                waiters.push(cx.waker().clone());
            }
        }
        Poll::Pending
    }
}

/// Settles its batch with [`ClientError::Closed`] if it is dropped unsettled
/// (the producer's runtime went away), so no [`DeliveryFuture`] waits forever.
#[derive(Debug)]
struct AckSender(Arc<BatchAck>);

impl AckSender {
    fn settle(self, outcome: Result<Placement, ClientError>) {
        self.0.settle(outcome);
    }
}

impl Drop for AckSender {
    fn drop(&mut self) {
        if self.0.outcome.get().is_none() {
            self.0.settle(Err(ClientError::Closed));
        }
    }
}

/// Resolves once a batch is settled, whatever its outcome (for `flush`).
struct Settled {
    ack: Arc<BatchAck>,
    slot: u32,
}

impl Future for Settled {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        this.ack.poll_outcome(cx, &mut this.slot).map(drop)
    }
}

/// Resolves to the record's [`RecordMetadata`] once its batch is acknowledged
/// (`.await` it), or to the batch's error. Dropping it does not cancel the send.
#[derive(Debug)]
pub struct DeliveryFuture {
    ack: Arc<BatchAck>,
    offset_delta: u32,
    slot: u32,
    timestamp_ms: i64,
}

impl DeliveryFuture {
    /// Waits for the acknowledgement (the same as `.await`).
    pub async fn wait(self) -> Result<RecordMetadata, ClientError> {
        self.await
    }
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata, ClientError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let outcome = std::task::ready!(this.ack.poll_outcome(cx, &mut this.slot));
        let offset = outcome.as_ref().map_err(Clone::clone)?.offset_of(i64::from(this.offset_delta))?;
        let (topic, partition) = (this.ack.topic.clone(), this.ack.partition);
        Poll::Ready(Ok(RecordMetadata { topic, partition, offset, timestamp_ms: this.timestamp_ms }))
    }
}

/// Whether a batch opened at `created_ms` has lingered by `now_ms` (both wall
/// clock readings; `false` when either is unknown, for `linger` 0 — the sender
/// closes those at once — and when the clock went back).
fn lingered(created_ms: Option<i64>, now_ms: Option<i64>, linger: Duration) -> bool {
    match (created_ms, now_ms) {
        (Some(created_ms), Some(now_ms)) if !linger.is_zero() => now_ms - created_ms >= linger.as_millis() as i64,
        _ => false,
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as i64)
}

impl Producer {
    /// A producer for the cluster in `config`. Must be called inside a tokio
    /// runtime (the sender task runs there); connects on first use.
    pub fn new(config: ProducerConfig) -> Result<Producer, ClientError> {
        let cluster = Cluster::new(
            &config.common.bootstrap_servers,
            config.common.connect_timeout,
            config.common.request_timeout,
        )?;
        Producer::with_cluster(config, cluster)
    }

    /// A producer sharing `cluster` (its metadata and connections) with others.
    pub fn with_cluster(config: ProducerConfig, cluster: Arc<Cluster>) -> Result<Producer, ClientError> {
        let inner = Arc::new(Inner {
            config,
            cluster,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            space: Notify::new(),
            partitioners: Default::default(),
            produce_many_unsupported: AtomicBool::new(false),
        });
        tokio::spawn(run_sender(inner.clone()));
        Ok(Producer { _closer: Arc::new(CloseOnDrop(inner.clone())), inner })
    }

    /// Queues `record` and returns a future of its acknowledgement. Waits (only)
    /// while the buffer is full. Fails at once for an unknown topic or partition
    /// and for a record bigger than the whole buffer.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture, ClientError> {
        let headers: Vec<(&str, Option<&[u8]>)> =
            record.headers.iter().map(|(key, value)| (key.as_str(), value.as_deref())).collect();
        let borrowed = RecordRef {
            topic: &record.topic,
            partition: record.partition,
            key: record.key.as_deref(),
            value: record.value.as_deref(),
            headers: &headers,
            timestamp_ms: record.timestamp_ms,
        };
        self.send_ref(borrowed).await
    }

    /// [`Producer::send`] of a record whose bytes the caller keeps (they are
    /// copied into the batch before this returns).
    pub async fn send_ref(&self, record: RecordRef<'_>) -> Result<DeliveryFuture, ClientError> {
        let topic = self.topic_for_send(record.topic, record.partition).await?;
        let partition = match (record.partition, &topic.partitioner) {
            (None, Some(reference)) => {
                let plugin = self.partitioner(reference).await?;
                let timestamp_ms = record.timestamp_ms.unwrap_or_else(now_ms);
                let count = topic.partitions.len() as u32;
                let (key, value, headers) = (record.key, record.value, record.headers);
                crate::wasm_partitioner::choose(&plugin, &topic.name, count, key, value, headers, timestamp_ms)?
                    .map(|partition| partition as i32)
            }
            (partition, _) => partition,
        };
        let parts = RecordParts {
            partition,
            key: record.key,
            value: record.value,
            headers: record.headers,
            timestamp_ms: record.timestamp_ms,
        };
        self.enqueue(&topic, parts).await
    }

    /// Queues many records of one topic — `(key, value)` pairs, borrowed, no
    /// headers, timestamped now — for `partition` or by key. The same as
    /// `send` for each, with one metadata lookup for all: the path for SDKs
    /// that hand over records in bulk. Stops at the first refusal.
    pub async fn send_many<'a>(
        &self,
        topic: &str,
        partition: Option<i32>,
        records: impl IntoIterator<Item = (Option<&'a [u8]>, Option<&'a [u8]>)>,
    ) -> Result<Vec<DeliveryFuture>, ClientError> {
        let topic = self.topic_for_send(topic, partition).await?;
        let plugin = match (partition, &topic.partitioner) {
            (None, Some(reference)) => Some(self.partitioner(reference).await?),
            _ => None,
        };
        let records = records.into_iter();
        let mut futures = Vec::with_capacity(records.size_hint().0);
        let count = topic.partitions.len() as u32;
        for (key, value) in records {
            let chosen = match &plugin {
                Some(plugin) => crate::wasm_partitioner::choose(plugin, &topic.name, count, key, value, &[], now_ms())?
                    .map(|partition| partition as i32),
                None => partition,
            };
            let parts = RecordParts { partition: chosen, key, value, headers: &[], timestamp_ms: None };
            futures.push(self.enqueue(&topic, parts).await?);
        }
        Ok(futures)
    }

    /// The topic's partitioner plugin, loaded on first use.
    async fn partitioner(
        &self,
        reference: &crate::cluster::PartitionerRef,
    ) -> Result<Arc<Mutex<plugin_host::Plugin>>, ClientError> {
        let inner = &self.inner;
        let plugin = inner.partitioners.get(&inner.cluster, inner.config.common.request_timeout, reference).await?;
        if inner.partitioners.report_due() {
            let producer = self.clone();
            tokio::spawn(async move {
                let inner = &producer.inner;
                inner.partitioners.report(&inner.cluster, inner.config.common.request_timeout).await;
            });
        }
        Ok(plugin)
    }

    /// The topic's metadata, checking that it has `partition`.
    async fn topic_for_send(&self, topic: &str, partition: Option<i32>) -> Result<Arc<TopicInfo>, ClientError> {
        let info = self.inner.cluster.topic(topic).await?;
        let partition_count = info.partitions.len() as i32;
        if let Some(partition) = partition.filter(|partition| *partition < 0 || *partition >= partition_count) {
            let message = format!("topic {topic:?} has no partition {partition} (it has {partition_count})");
            return Err(ClientError::broker(ErrorCode::UnknownTopicOrPartition, message));
        }
        Ok(info)
    }

    async fn enqueue(&self, topic: &TopicInfo, record: RecordParts<'_>) -> Result<DeliveryFuture, ClientError> {
        let buffer_bytes_max = self.inner.config.buffer_bytes_max;
        let size_bytes = BatchWriter::record_size_bytes(record.key, record.value, record.headers);
        if size_bytes > buffer_bytes_max {
            let message = format!("record of {size_bytes} bytes exceeds buffer.memory {buffer_bytes_max}");
            return Err(ClientError::broker(ErrorCode::MessageTooLarge, message));
        }
        // A caller sending in a tight loop never waits while the buffer has
        // room: take part in Tokio's cooperative budget, so the sender task
        // sharing its worker closes and sends batches on time meanwhile.
        tokio::task::consume_budget().await;
        let clock_ms = record.timestamp_ms.is_none().then(now_ms);
        loop {
            if let Some(queued) = self.try_append(topic, &record, size_bytes, clock_ms) {
                return queued;
            }
            self.wait_for_space(size_bytes).await?;
        }
    }

    /// Appends the record to its partition's open batch under one lock, or
    /// returns `None` when the buffer has no room for it. `clock_ms` is the
    /// wall clock read for a record without a timestamp of its own.
    fn try_append(
        &self,
        topic: &TopicInfo,
        record: &RecordParts<'_>,
        size_bytes: usize,
        clock_ms: Option<i64>,
    ) -> Option<Result<DeliveryFuture, ClientError>> {
        let inner = &self.inner;
        let timestamp_ms = record.timestamp_ms.or(clock_ms).unwrap_or_else(now_ms);
        let mut state = inner.lock();
        if state.closed {
            return Some(Err(ClientError::Closed));
        }
        if state.buffered_bytes != 0 && state.buffered_bytes + size_bytes > inner.config.buffer_bytes_max {
            return None;
        }
        let partition_count = topic.partitions.len() as i32;
        let topic_name = state.topic_name(&topic.name);
        let partition = match (record.partition, record.key) {
            (Some(partition), _) => partition,
            (None, Some(key)) => partition_for_key(key, partition_count as u32) as i32,
            (None, None) => state.round_robin(&topic_name, partition_count),
        };
        let batch_bytes_max = inner.config.batch_bytes_max;
        let state = &mut *state;
        let next_batch_id = &mut state.next_batch_id;
        let queue = state.queues.entry((topic_name.clone(), partition)).or_default();
        let mut wake = false;
        if queue.open.as_ref().is_some_and(|open| open.writer.size_bytes() + size_bytes > batch_bytes_max) {
            queue.ready.extend(queue.open.take());
            wake = true;
        }
        let batch = queue.open.get_or_insert_with(|| {
            wake = true;
            *next_batch_id += 1;
            Batch {
                id: *next_batch_id,
                writer: BatchWriter::new(timestamp_ms, batch_bytes_max.min(256 * 1024)),
                created: Instant::now(),
                created_ms: clock_ms,
                buffered_bytes: 0,
                ack: AckSender(BatchAck::new(topic_name, partition)),
            }
        });
        let offset_delta = batch.writer.record_count() as u32;
        batch.writer.push(timestamp_ms, record.key, record.value, record.headers);
        batch.buffered_bytes += size_bytes;
        let ack = batch.ack.0.clone();
        let full = batch.writer.size_bytes() >= batch_bytes_max;
        // A batch that lingered closes with the record that finds it so, if its
        // partition is free: on time, not at the sender's next timer tick
        // (Tokio's are a millisecond apart).
        let lingered = lingered(batch.created_ms, clock_ms, inner.config.linger);
        if full || (lingered && !queue.in_flight && queue.ready.is_empty()) {
            queue.ready.extend(queue.open.take());
            wake = true;
        }
        state.buffered_bytes += size_bytes;
        if wake {
            inner.wake.notify_one();
        }
        Some(Ok(DeliveryFuture { ack, offset_delta, slot: NO_SLOT, timestamp_ms }))
    }

    async fn wait_for_space(&self, size_bytes: usize) -> Result<(), ClientError> {
        let inner = &self.inner;
        loop {
            let freed = inner.space.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let state = inner.lock();
                if state.closed {
                    return Err(ClientError::Closed);
                }
                if state.buffered_bytes == 0 || state.buffered_bytes + size_bytes <= inner.config.buffer_bytes_max {
                    return Ok(());
                }
            }
            freed.await;
        }
    }

    /// Sends every buffered record now and waits until each is acknowledged or
    /// failed (failures are reported through their [`DeliveryFuture`]s).
    pub async fn flush(&self) {
        let mut outcomes = Vec::new();
        {
            let mut state = self.inner.lock();
            state.drain_all = true;
            for queue in state.queues.values() {
                let batches = queue.open.iter().chain(queue.ready.iter());
                outcomes.extend(batches.map(|batch| Settled { ack: batch.ack.0.clone(), slot: NO_SLOT }));
            }
        }
        self.inner.wake.notify_one();
        for settled in outcomes {
            settled.await;
        }
        // In-flight batches were not in the queues; wait until none is left.
        loop {
            let freed = self.inner.space.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.inner.lock().buffered_bytes == 0 {
                break;
            }
            freed.await;
        }
        self.inner.lock().drain_all = false;
    }

    /// Flushes, then stops the sender; later `send`s fail with `Closed`. What
    /// its partitioner plugins did since the last report goes to a broker
    /// (waiting at most a second for it).
    pub async fn close(&self) {
        self.flush().await;
        let inner = &self.inner;
        let report = inner.partitioners.report(&inner.cluster, inner.config.common.request_timeout);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), report).await;
        self.inner.lock().closed = true;
        self.inner.wake.notify_one();
        self.inner.space.notify_waiters();
    }
}

impl State {
    fn topic_name(&mut self, name: &str) -> Arc<str> {
        if let Some(known) = self.names.get(name) {
            return known.clone();
        }
        let name: Arc<str> = name.into();
        self.names.insert(name.clone());
        name
    }

    /// The partition for a record without a key: the same one until its batch
    /// closes, then the next (Kafka's "sticky" spreading, in round-robin order).
    fn round_robin(&mut self, topic: &Arc<str>, partition_count: i32) -> i32 {
        let current = self.sticky.get(topic).copied();
        if let Some((partition, batch_id)) = current {
            let open_id =
                self.queues.get(&(topic.clone(), partition)).and_then(|queue| queue.open.as_ref()).map(|b| b.id);
            if open_id == Some(batch_id) {
                return partition;
            }
        }
        let partition = current.map_or(0, |(partition, _)| (partition + 1) % partition_count.max(1));
        // Stick to the partition's open batch, or to the one the caller opens next.
        let open_id = self.queues.get(&(topic.clone(), partition)).and_then(|queue| queue.open.as_ref()).map(|b| b.id);
        let batch_id = open_id.unwrap_or(self.next_batch_id + 1);
        self.sticky.insert(topic.clone(), (partition, batch_id));
        partition
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Closes due batches and takes the next batch of every idle partition.
    /// Returns them with the producer fields to stamp (producer id, epoch and base
    /// sequence, assigned together under the lock), and when to look again.
    fn take_sendable(&self, now: Instant) -> (Vec<(TopicPartition, Batch, ProducerFields)>, Option<Instant>) {
        let linger = self.config.linger;
        let idempotent = self.idempotent();
        let mut state = self.lock();
        let producer = state.producer;
        let drain_all = state.drain_all || state.closed;
        let mut sendable = Vec::new();
        let mut next_due: Option<Instant> = None;
        for (topic_partition, queue) in state.queues.iter_mut() {
            let blocked = queue.in_flight || (idempotent && producer.is_none());
            if let Some(due) = queue.close_open_batch(blocked, linger, drain_all, now) {
                next_due = Some(next_due.map_or(due, |next| next.min(due)));
            }
            if blocked {
                continue;
            }
            if let Some(batch) = queue.ready.pop_front() {
                queue.in_flight = true;
                let fields = match producer {
                    Some((producer_id, producer_epoch)) if idempotent => {
                        let base_sequence = queue.next_sequence;
                        queue.next_sequence = wrapping_sequence(base_sequence, batch.writer.record_count() as i32);
                        ProducerFields { producer_id, producer_epoch, base_sequence }
                    }
                    _ => ProducerFields::NONE,
                };
                sendable.push((topic_partition.clone(), batch, fields));
            }
        }
        (sendable, next_due)
    }

    fn idempotent(&self) -> bool {
        self.config.idempotence && self.config.acks != Acks::None
    }

    fn is_idle(&self) -> bool {
        let state = self.lock();
        state.queues.values().all(|queue| queue.open.is_none() && queue.ready.is_empty() && !queue.in_flight)
    }

    /// Ends a batch's request: frees its buffer space, marks the partition idle,
    /// and after a failure of an idempotent batch repairs the sequence numbers.
    fn finish_batch(&self, topic_partition: &TopicPartition, buffered_bytes: usize, failure: Option<SequenceRepair>) {
        self.finish_batches([(topic_partition, buffered_bytes, failure)]);
    }

    /// [`Inner::finish_batch`] of several batches under one lock, waking the
    /// sender once: it then sees every freed partition at once and sends their
    /// next batches together.
    fn finish_batches<'a>(
        &self,
        finished: impl IntoIterator<Item = (&'a TopicPartition, usize, Option<SequenceRepair>)>,
    ) {
        {
            let mut state = self.lock();
            for (topic_partition, buffered_bytes, failure) in finished {
                Self::finish_locked(&mut state, topic_partition, buffered_bytes, failure);
            }
        }
        self.wake.notify_one();
        self.space.notify_waiters();
    }

    fn finish_locked(
        state: &mut State,
        topic_partition: &TopicPartition,
        buffered_bytes: usize,
        failure: Option<SequenceRepair>,
    ) {
        state.buffered_bytes -= buffered_bytes;
        let same_producer = |fields: &ProducerFields, state: &State| {
            state.producer == Some((fields.producer_id, fields.producer_epoch))
        };
        match failure {
            Some(SequenceRepair::GiveBack(fields)) if same_producer(&fields, state) => {
                if let Some(queue) = state.queues.get_mut(topic_partition) {
                    queue.next_sequence = fields.base_sequence;
                }
            }
            Some(SequenceRepair::NewProducerId(fields)) if same_producer(&fields, state) => {
                tracing::warn!(producer_id = fields.producer_id, "a batch may or may not be stored; new producer id");
                state.producer = None;
                state.queues.values_mut().for_each(|queue| queue.next_sequence = 0);
            }
            _ => {}
        }
        if let Some(queue) = state.queues.get_mut(topic_partition) {
            queue.in_flight = false;
        }
    }

    /// Asks the broker for a producer id when the producer needs one (one
    /// attempt per broker, each bounded by `request_timeout`; after a failure,
    /// not again before the backoff passed). Returns when to try again, if it failed.
    async fn ensure_producer_id(&self) -> Option<Instant> {
        {
            let state = self.lock();
            if !self.idempotent() || state.producer.is_some() {
                return None;
            }
            if let Some(retry_at) = state.producer_id_retry_at.filter(|retry_at| *retry_at > Instant::now()) {
                return Some(retry_at);
            }
        }
        let outcome = self.init_producer_id().await;
        let mut state = self.lock();
        match outcome {
            Ok(producer) => {
                state.producer = Some(producer);
                state.producer_id_retry_at = None;
                state.producer_id_backoff = Duration::ZERO;
                None
            }
            Err(error) => {
                tracing::warn!(%error, "cannot get a producer id; retrying");
                let backoff = state.producer_id_backoff.max(self.config.common.retry_backoff);
                state.producer_id_backoff = (backoff * 2).min(self.config.common.retry_backoff_max);
                let retry_at = Instant::now() + backoff;
                state.producer_id_retry_at = Some(retry_at);
                Some(retry_at)
            }
        }
    }

    /// Fails queued batches older than `delivery_timeout` (they can wait that long
    /// only while no producer id can be had). Returns when the next one expires.
    fn expire_queued(&self, now: Instant) -> Option<Instant> {
        let timeout = self.config.delivery_timeout;
        let mut expired = Vec::new();
        let mut next_expiry: Option<Instant> = None;
        {
            let mut state = self.lock();
            for queue in state.queues.values_mut() {
                let (late, kept): (VecDeque<Batch>, VecDeque<Batch>) =
                    queue.ready.drain(..).partition(|batch| batch.created + timeout <= now);
                queue.ready = kept;
                if queue.open.as_ref().is_some_and(|open| open.created + timeout <= now) {
                    expired.extend(queue.open.take());
                }
                expired.extend(late);
                for batch in queue.open.iter().chain(queue.ready.iter()) {
                    let expiry = batch.created + timeout;
                    next_expiry = Some(next_expiry.map_or(expiry, |next| next.min(expiry)));
                }
            }
            state.buffered_bytes -= expired.iter().map(|batch| batch.buffered_bytes).sum::<usize>();
        }
        for batch in expired {
            let error = ClientError::Timeout { operation: "produce", timeout_ms: timeout.as_millis() as u64 };
            batch.ack.settle(Err(error));
        }
        self.space.notify_waiters();
        next_expiry
    }

    async fn init_producer_id(&self) -> Result<(i64, i16), ClientError> {
        self.cluster
            .call_any("init producer id", move |client: broker::Client, address| async move {
                let response = client
                    .init_producer_id_request()
                    .send()
                    .promise
                    .await
                    .map_err(|error| ClientError::from_rpc(&address, error))?;
                let response = response.get()?;
                if response.has_error() {
                    return Err(broker_error(response.get_error()?));
                }
                let id = response.get_id()?;
                Ok((id.get_producer_id(), id.get_producer_epoch()))
            })
            .await
    }

    /// One produce request for `bytes` to the leader; returns the base offset.
    async fn produce_once(&self, topic_partition: &TopicPartition, bytes: &Arc<Vec<u8>>) -> Result<i64, ClientError> {
        let (topic, partition) = topic_partition.clone();
        let connection = self.cluster.leader(&topic, partition).await?;
        let address = connection.address().to_owned();
        let acks = self.wire_acks();
        let timeout = self.config.common.request_timeout;
        let bytes = bytes.clone();
        let call = connection.call(move |client: broker::Client| async move {
            let mut request = client.produce_request();
            let mut builder = request.get().init_request();
            builder.set_topic(&topic[..]);
            builder.set_partition(partition);
            builder.set_acks(acks);
            builder.set_timeout_ms(timeout.as_millis().min(u32::MAX as u128) as u32);
            builder.set_batches(&bytes);
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?.get_response()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            Ok(response.get_base_offset())
        });
        self.bounded(call).await
    }

    /// One `produceMany` request for `batches`, all led by `connection`'s
    /// broker: each batch's base offset or error, in order. `Ok(None)`: the
    /// broker does not know `produceMany` (send each batch on its own).
    async fn produce_many_once(
        &self,
        connection: &Connection,
        batches: &[Sealed],
    ) -> Result<Option<Vec<Result<i64, ClientError>>>, ClientError> {
        let address = connection.address().to_owned();
        let acks = self.wire_acks();
        let timeout = self.config.common.request_timeout;
        let parts: Vec<(TopicPartition, Arc<Vec<u8>>)> =
            batches.iter().map(|batch| (batch.topic_partition.clone(), batch.bytes.clone())).collect();
        let call = connection.call(move |client: broker::Client| async move {
            let mut request = client.produce_many_request();
            let mut builder = request.get().init_request();
            builder.set_acks(acks);
            builder.set_timeout_ms(timeout.as_millis().min(u32::MAX as u128) as u32);
            let mut list = builder.init_partitions(parts.len() as u32);
            for (index, ((topic, partition), bytes)) in parts.iter().enumerate() {
                let mut entry = list.reborrow().get(index as u32);
                entry.set_topic(&topic[..]);
                entry.set_partition(*partition);
                entry.set_batches(bytes);
            }
            let response = match request.send().promise.await {
                Ok(response) => response,
                Err(error) if error.kind == capnp::ErrorKind::Unimplemented => return Ok(None),
                Err(error) => return Err(ClientError::from_rpc(&address, error)),
            };
            let responses = response.get()?.get_responses()?;
            if responses.len() as usize != parts.len() {
                let message = format!("{} answers to a produceMany of {} partitions", responses.len(), parts.len());
                return Err(ClientError::Protocol(message));
            }
            let outcomes = responses
                .iter()
                .map(|response| match response.has_error() {
                    true => Ok(Err(broker_error(response.get_error()?))),
                    false => Ok(Ok(response.get_base_offset())),
                })
                .collect::<Result<Vec<_>, capnp::Error>>()?;
            Ok(Some(outcomes))
        });
        self.bounded(call).await
    }

    fn wire_acks(&self) -> WireAcks {
        match self.config.acks {
            Acks::None => WireAcks::None,
            Acks::Leader => WireAcks::Leader,
            Acks::All => WireAcks::All,
        }
    }

    /// `call` bounded by the request timeout (plus a second for the broker's own
    /// timeout answer to arrive).
    async fn bounded<T>(&self, call: impl Future<Output = Result<T, ClientError>>) -> Result<T, ClientError> {
        let timeout = self.config.common.request_timeout;
        match tokio::time::timeout(timeout + Duration::from_secs(1), call).await {
            Ok(outcome) => outcome,
            Err(_) => Err(ClientError::Timeout { operation: "produce", timeout_ms: timeout.as_millis() as u64 }),
        }
    }
}

fn wrapping_sequence(sequence: i32, delta: i32) -> i32 {
    (sequence as i64 + delta as i64).rem_euclid(i32::MAX as i64 + 1) as i32
}

async fn run_sender(inner: Arc<Inner>) {
    loop {
        let woken = inner.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if inner.lock().closed && inner.is_idle() {
            return;
        }
        let mut next_due = None;
        if let Some(retry_at) = inner.ensure_producer_id().await {
            // No producer id: nothing can be sent; batches wait until they expire.
            let next_expiry = inner.expire_queued(Instant::now());
            next_due = Some(next_expiry.map_or(retry_at, |expiry| expiry.min(retry_at)));
        }
        let (sendable, next_linger) = inner.take_sendable(Instant::now());
        if !sendable.is_empty() {
            tokio::spawn(send_round(inner.clone(), sendable));
        }
        let next_due = match (next_due, next_linger) {
            (Some(due), Some(linger)) => Some(due.min(linger)),
            (due, linger) => due.or(linger),
        };
        match next_due {
            Some(due) => {
                tokio::select! {
                    () = &mut woken => {}
                    () = tokio::time::sleep_until(due) => {}
                }
            }
            None => woken.await,
        }
    }
}

/// How a failed idempotent batch leaves the sequence numbers.
#[derive(Clone, Copy, Debug)]
enum SequenceRepair {
    /// The broker refused the batch outright (nothing was stored): the next batch
    /// reuses its sequence numbers.
    GiveBack(ProducerFields),
    /// The batch may have been stored (timeout, lost connection): reusing its
    /// numbers could make the broker take a different batch for a duplicate of it
    /// and drop it. Start over with a new producer id instead (what Kafka's epoch
    /// bump achieves).
    NewProducerId(ProducerFields),
}

fn sequence_repair(error: &ClientError, fields: ProducerFields) -> SequenceRepair {
    let refused = matches!(
        error,
        ClientError::InvalidArgument(_)
            | ClientError::Broker {
                code: ErrorCode::MessageTooLarge
                    | ErrorCode::CorruptMessage
                    | ErrorCode::UnsupportedCompression
                    | ErrorCode::InvalidRequest,
                ..
            }
    );
    match refused {
        true => SequenceRepair::GiveBack(fields),
        false => SequenceRepair::NewProducerId(fields),
    }
}

/// A batch sealed for sending (sequence assigned, compressed, CRC'd).
struct Sealed {
    topic_partition: TopicPartition,
    bytes: Arc<Vec<u8>>,
    record_count: i32,
    created: Instant,
    buffered_bytes: usize,
    fields: ProducerFields,
    ack: AckSender,
}

/// Seals a batch taken by the sender; a batch that cannot be encoded fails its
/// records at once (nothing was sent: its sequence numbers are given back).
fn seal(inner: &Inner, topic_partition: TopicPartition, batch: Batch, fields: ProducerFields) -> Option<Sealed> {
    let Batch { writer, created, buffered_bytes, ack, .. } = batch;
    let record_count = writer.record_count() as i32;
    match writer.finish(fields, inner.config.compression) {
        Ok(bytes) => {
            Some(Sealed { topic_partition, bytes: Arc::new(bytes), record_count, created, buffered_bytes, fields, ack })
        }
        Err(error) => {
            ack.settle(Err(ClientError::InvalidArgument(error.to_string())));
            let repair = Some(SequenceRepair::GiveBack(fields)).filter(|_| fields.producer_id >= 0);
            inner.finish_batch(&topic_partition, buffered_bytes, repair);
            None
        }
    }
}

/// Largest sealed batch that shares a `produceMany` with others, and the most
/// bytes one `produceMany` carries. Only small batches are worth sharing a
/// request: a large batch amortises its call, and a request's answer waits for
/// its slowest partition, so partitions sent together move in lockstep — with
/// large batches that costs more than the calls it saves (measured: one request
/// per broker per round took max ingest from 589 to 368 MB/s at 1 KiB records,
/// as the client and the broker stopped overlapping their work), while small
/// batches sharing requests took the end-to-end p50 at 50k records/s over 16
/// partitions from ~760 µs to ~190 µs (`weir-bench run --workloads fixed-rate`).
const SHARED_BATCH_BYTES_MAX: usize = 16 * 1024;
const SHARED_REQUEST_BYTES_MAX: usize = 128 * 1024;

/// Sends the batches the sender took in one pass: sealed here (off the callers'
/// threads), then the small ones to each leader in shared `produceMany`
/// requests, each large one alone. Batches acknowledged at the first attempt
/// are settled together; the others continue alone ([`send_sealed`]: retries,
/// splits, sequence repair).
async fn send_round(inner: Arc<Inner>, sendable: Vec<(TopicPartition, Batch, ProducerFields)>) {
    let sealed: Vec<Sealed> = sendable
        .into_iter()
        .filter_map(|(topic_partition, batch, fields)| seal(&inner, topic_partition, batch, fields))
        .collect();
    let shared = |batch: &Sealed| batch.bytes.len() <= SHARED_BATCH_BYTES_MAX;
    if sealed.iter().filter(|batch| shared(batch)).count() < 2 || inner.produce_many_unsupported.load(Ordering::Relaxed)
    {
        for batch in sealed {
            tokio::spawn(send_sealed(inner.clone(), batch, None));
        }
        return;
    }
    // (leader, batches, their bytes)
    let mut groups: Vec<(Connection, Vec<Sealed>, usize)> = Vec::new();
    for batch in sealed {
        if !shared(&batch) {
            tokio::spawn(send_sealed(inner.clone(), batch, None));
            continue;
        }
        let (topic, partition) = &batch.topic_partition;
        match inner.cluster.leader(topic, *partition).await {
            Ok(connection) => {
                let size = batch.bytes.len();
                let room = |(led_by, _, bytes): &&mut (Connection, Vec<Sealed>, usize)| {
                    led_by.same_as(&connection) && *bytes + size <= SHARED_REQUEST_BYTES_MAX
                };
                match groups.iter_mut().find(room) {
                    Some((_, group, bytes)) => {
                        group.push(batch);
                        *bytes += size;
                    }
                    None => groups.push((connection, vec![batch], size)),
                }
            }
            // The first attempt failed before a request: retried as any failure.
            Err(error) => drop(tokio::spawn(send_sealed(inner.clone(), batch, Some(Err(error))))),
        }
    }
    let sends = groups.into_iter().map(|(connection, group, _)| send_group(&inner, connection, group));
    futures::future::join_all(sends).await;
}

/// One `produceMany` of batches led by the same broker (a lone batch: its own
/// `produce`).
async fn send_group(inner: &Arc<Inner>, connection: Connection, group: Vec<Sealed>) {
    if group.len() == 1 {
        group.into_iter().for_each(|batch| drop(tokio::spawn(send_sealed(inner.clone(), batch, None))));
        return;
    }
    let outcomes = match inner.produce_many_once(&connection, &group).await {
        Ok(Some(outcomes)) => outcomes,
        Ok(None) => {
            tracing::info!(broker = connection.address(), "the broker has no produceMany; producing per partition");
            inner.produce_many_unsupported.store(true, Ordering::Relaxed);
            group.into_iter().for_each(|batch| drop(tokio::spawn(send_sealed(inner.clone(), batch, None))));
            return;
        }
        Err(error) => group.iter().map(|_| Err(error.clone())).collect(),
    };
    let mut finished = Vec::with_capacity(group.len());
    for (batch, outcome) in group.into_iter().zip(outcomes) {
        match outcome {
            Ok(base_offset) => {
                batch.ack.settle(Ok(Placement::Whole(base_offset)));
                finished.push((batch.topic_partition, batch.buffered_bytes));
            }
            Err(error) => drop(tokio::spawn(send_sealed(inner.clone(), batch, Some(Err(error))))),
        }
    }
    inner.finish_batches(finished.iter().map(|(topic_partition, bytes)| (topic_partition, *bytes, None)));
}

/// Sends one sealed batch, retrying as the module docs describe; `first` is the
/// outcome of an attempt already made (in a `produceMany`), if any.
async fn send_sealed(inner: Arc<Inner>, batch: Sealed, first: Option<Result<i64, ClientError>>) {
    let Sealed { topic_partition, bytes, record_count, created, buffered_bytes, fields, ack } = batch;
    let Delivered { outcome, repair } =
        deliver(&inner, &topic_partition, bytes, record_count, created, fields, first).await;
    ack.settle(outcome);
    inner.finish_batch(&topic_partition, buffered_bytes, repair.filter(|_| fields.producer_id >= 0));
}

/// How a batch's delivery ended.
struct Delivered {
    outcome: Result<Placement, ClientError>,
    /// What the producer's sequence numbers need after a failure.
    repair: Option<SequenceRepair>,
}

/// Sends a batch until acknowledged, refused, or out of time. A batch the broker
/// refuses as too large (`MessageTooLarge`: the topic's `max.message.bytes` is
/// below `batch.size`) is split in two and the halves sent in order, again down
/// to single records, as Kafka's producer does. A part refused outright (nothing
/// stored: a record too large on its own) fails alone and the parts after it are
/// renumbered to close its sequence gap; a part that may have been stored (a
/// timeout) fails the parts after it unsent, and the producer takes a new id.
async fn deliver(
    inner: &Inner,
    topic_partition: &TopicPartition,
    sealed: Arc<Vec<u8>>,
    record_count: i32,
    created: Instant,
    fields: ProducerFields,
    mut first: Option<Result<i64, ClientError>>,
) -> Delivered {
    // (first offset delta, records, bytes, fields, refused records already
    // accounted for in the fields' sequence)
    let mut pending = VecDeque::from([(0i32, record_count, sealed, fields, 0i32)]);
    let mut parts: Vec<(i32, Result<i64, ClientError>)> = Vec::new();
    // Records of parts refused outright so far: later parts' sequences move down.
    let mut refused_records = 0i32;
    // A failure that may have stored its part: nothing after it is sent.
    let mut stopped: Option<(ClientError, ProducerFields)> = None;
    while let Some((first_delta, count, mut bytes, mut part_fields, accounted)) = pending.pop_front() {
        if let Some((error, _)) = &stopped {
            parts.push((first_delta, Err(error.clone())));
            continue;
        }
        if refused_records > accounted && part_fields.producer_id >= 0 {
            part_fields.base_sequence = wrapping_sequence(part_fields.base_sequence, accounted - refused_records);
            abi::batch::set_base_sequence(Arc::make_mut(&mut bytes).as_mut_slice(), part_fields.base_sequence);
        }
        let (outcome, stored) = deliver_part(inner, topic_partition, &bytes, created, part_fields, first.take()).await;
        match outcome {
            Err(ClientError::Broker { code: ErrorCode::MessageTooLarge, .. }) if count > 1 && !stored => {
                let halves = split_batch(&bytes, part_fields, inner.config.compression);
                let [(first_half, first_fields), (second, second_fields)] = match halves {
                    Ok(halves) => halves,
                    Err(error) => {
                        let error = ClientError::InvalidArgument(error.to_string());
                        parts.push((first_delta, Err(error.clone())));
                        stopped = Some((error, part_fields));
                        continue;
                    }
                };
                tracing::debug!(topic = %topic_partition.0, records = count, "batch too large for the topic; splitting");
                let half = count / 2;
                pending.push_front((
                    first_delta + half,
                    count - half,
                    Arc::new(second),
                    second_fields,
                    refused_records,
                ));
                pending.push_front((first_delta, half, Arc::new(first_half), first_fields, refused_records));
            }
            Ok(base_offset) => parts.push((first_delta, Ok(base_offset))),
            Err(error) if !stored && matches!(sequence_repair(&error, part_fields), SequenceRepair::GiveBack(_)) => {
                parts.push((first_delta, Err(error)));
                refused_records += count;
            }
            Err(error) => {
                parts.push((first_delta, Err(error.clone())));
                stopped = Some((error, part_fields));
            }
        }
    }
    let repair = match &stopped {
        Some((_, part_fields)) => Some(SequenceRepair::NewProducerId(*part_fields)),
        None if refused_records > 0 => {
            let next = wrapping_sequence(fields.base_sequence, record_count - refused_records);
            Some(SequenceRepair::GiveBack(ProducerFields { base_sequence: next, ..fields }))
        }
        None => None,
    };
    let outcome = match <[_; 1]>::try_from(parts) {
        Ok([(_, Ok(base_offset))]) => Ok(Placement::Whole(base_offset)),
        Ok([(_, Err(error))]) => Err(error),
        Err(parts) => Ok(Placement::Split(parts.into())),
    };
    Delivered { outcome, repair }
}

/// Splits an encoded batch into two halves (the first holding `count / 2`
/// records), with offset deltas renumbered from 0 and the second half's sequence
/// numbers following the first's.
fn split_batch(
    bytes: &[u8],
    fields: ProducerFields,
    compression: abi::batch::Compression,
) -> Result<[(Vec<u8>, ProducerFields); 2], abi::batch::BatchError> {
    let batch = abi::batch::RecordBatch::decode(bytes)?;
    let half = batch.records.len() / 2;
    let encode = |records: &[abi::batch::Record], fields: ProducerFields| -> Result<Vec<u8>, abi::batch::BatchError> {
        let mut writer = BatchWriter::new(batch.base_timestamp, 0);
        for record in records {
            let headers: Vec<(&str, Option<&[u8]>)> =
                record.headers.iter().map(|header| (header.key.as_str(), header.value.as_deref())).collect();
            let timestamp = batch.base_timestamp.saturating_add(record.timestamp_delta);
            writer.push(timestamp, record.key.as_deref(), record.value.as_deref(), &headers);
        }
        writer.finish(fields, compression)
    };
    let second_fields = ProducerFields {
        base_sequence: if fields.producer_id >= 0 { wrapping_sequence(fields.base_sequence, half as i32) } else { -1 },
        ..fields
    };
    Ok([
        (encode(&batch.records[..half], fields)?, fields),
        (encode(&batch.records[half..], second_fields)?, second_fields),
    ])
}

/// Sends one encoded batch until acknowledged, refused, or out of time (`first`:
/// the outcome of an attempt already made); also says whether an attempt may
/// have stored it.
async fn deliver_part(
    inner: &Inner,
    topic_partition: &TopicPartition,
    bytes: &Arc<Vec<u8>>,
    created: Instant,
    fields: ProducerFields,
    mut first: Option<Result<i64, ClientError>>,
) -> (Result<i64, ClientError>, bool) {
    let deadline = created + inner.config.delivery_timeout;
    let mut backoff = inner.config.common.retry_backoff;
    let mut maybe_stored = false;
    loop {
        let attempt = match first.take() {
            Some(attempt) => attempt,
            None => inner.produce_once(topic_partition, bytes).await,
        };
        if let Err(error) = &attempt {
            maybe_stored |= matches!(sequence_repair(error, fields), SequenceRepair::NewProducerId(_));
        }
        match attempt {
            Ok(base_offset) => return (Ok(base_offset), maybe_stored),
            // acks=0 is fire and forget: one attempt.
            Err(error)
                if error.is_retriable() && inner.config.acks != Acks::None && Instant::now() + backoff < deadline =>
            {
                tracing::debug!(topic = %topic_partition.0, partition = topic_partition.1, %error, "retrying produce");
                inner.cluster.invalidate(&topic_partition.0);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(inner.config.common.retry_backoff_max);
            }
            Err(error) => return (Err(error), maybe_stored),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIELDS: ProducerFields = ProducerFields { producer_id: 7, producer_epoch: 0, base_sequence: 40 };

    #[test]
    fn sequences_wrap_within_31_bits_both_ways() {
        assert_eq!(wrapping_sequence(i32::MAX, 1), 0);
        assert_eq!(wrapping_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(wrapping_sequence(0, -1), i32::MAX);
        assert_eq!(wrapping_sequence(1, -3), i32::MAX - 1);
    }

    #[test]
    fn only_outright_refusals_give_sequences_back() {
        for code in [ErrorCode::MessageTooLarge, ErrorCode::CorruptMessage, ErrorCode::InvalidRequest] {
            let refused = ClientError::broker(code, "refused");
            assert!(matches!(sequence_repair(&refused, FIELDS), SequenceRepair::GiveBack(_)), "{code}");
        }
        let in_doubt = [
            ClientError::Timeout { operation: "produce", timeout_ms: 1 },
            ClientError::Disconnected { address: "a:1".to_owned(), reason: "reset".to_owned() },
            ClientError::broker(ErrorCode::RequestTimedOut, "not durable in time"),
            ClientError::broker(ErrorCode::StorageError, "fenced"),
            ClientError::broker(ErrorCode::OutOfOrderSequence, "gap"),
        ];
        for error in in_doubt {
            assert!(matches!(sequence_repair(&error, FIELDS), SequenceRepair::NewProducerId(_)), "{error}");
        }
    }

    fn open_batch(created: Instant) -> Batch {
        let ack = AckSender(BatchAck::new("t".into(), 0));
        Batch { id: 1, writer: BatchWriter::new(0, 1024), created, created_ms: None, buffered_bytes: 0, ack }
    }

    #[test]
    fn an_open_batch_waits_for_its_partition_to_be_free() {
        let now = Instant::now();
        let mut queue = PartitionQueue { open: Some(open_batch(now)), ..PartitionQueue::default() };
        // linger 0 but a request in flight: the batch stays open for more records.
        assert_eq!(queue.close_open_batch(true, Duration::ZERO, false, now), None);
        assert!(queue.open.is_some() && queue.ready.is_empty());
        // Free again: it closes at once.
        assert_eq!(queue.close_open_batch(false, Duration::ZERO, false, now), None);
        assert!(queue.open.is_none() && queue.ready.len() == 1);
    }

    #[test]
    fn an_open_batch_closes_after_linger_behind_older_batches() {
        let now = Instant::now();
        let linger = Duration::from_millis(5);
        let mut queue = PartitionQueue { open: Some(open_batch(now)), ..PartitionQueue::default() };
        assert_eq!(queue.close_open_batch(false, linger, false, now), Some(now + linger));
        assert!(queue.open.is_some());
        // A full batch waiting in `ready` goes first; the open one keeps filling.
        queue.ready.push_back(open_batch(now));
        assert_eq!(queue.close_open_batch(false, linger, true, now + linger), None);
        assert_eq!(queue.ready.len(), 1);
        queue.ready.clear();
        // Draining (flush/close) closes it before its linger.
        assert_eq!(queue.close_open_batch(false, linger, true, now), None);
        assert!(queue.open.is_none() && queue.ready.len() == 1);
    }

    /// A waker that counts its wakes.
    struct CountingWaker(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn counting_waker() -> (Arc<CountingWaker>, Waker) {
        let counter = Arc::new(CountingWaker(0.into()));
        (counter.clone(), Waker::from(counter))
    }

    #[test]
    fn a_batch_ack_wakes_each_waiting_record_once_and_answers_its_offset() {
        let ack = BatchAck::new("t".into(), 3);
        let (counter, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut first = DeliveryFuture { ack: ack.clone(), offset_delta: 0, slot: NO_SLOT, timestamp_ms: 1 };
        let mut second = DeliveryFuture { ack: ack.clone(), offset_delta: 2, slot: NO_SLOT, timestamp_ms: 2 };
        // Polling again keeps one waker per future, not one per poll.
        for _ in 0..5 {
            assert!(Pin::new(&mut first).poll(&mut cx).is_pending());
            assert!(Pin::new(&mut second).poll(&mut cx).is_pending());
        }
        assert_eq!(ack.waiters.lock().unwrap().len(), 2);
        ack.settle(Ok(Placement::Whole(40)));
        assert_eq!(counter.0.load(std::sync::atomic::Ordering::SeqCst), 2);
        let Poll::Ready(Ok(metadata)) = Pin::new(&mut second).poll(&mut cx) else { panic!("not settled") };
        assert_eq!((&*metadata.topic, metadata.partition, metadata.offset, metadata.timestamp_ms), ("t", 3, 42, 2));
        // The first outcome stands.
        ack.settle(Err(ClientError::Closed));
        assert!(matches!(Pin::new(&mut first).poll(&mut cx), Poll::Ready(Ok(RecordMetadata { offset: 40, .. }))));
    }

    #[test]
    fn a_batch_dropped_unsettled_fails_its_records_as_closed() {
        let batch = open_batch(Instant::now());
        let (counter, waker) = counting_waker();
        let mut cx = Context::from_waker(&waker);
        let mut delivery = DeliveryFuture { ack: batch.ack.0.clone(), offset_delta: 0, slot: NO_SLOT, timestamp_ms: 0 };
        assert!(Pin::new(&mut delivery).poll(&mut cx).is_pending());
        drop(batch);
        assert_eq!(counter.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(matches!(Pin::new(&mut delivery).poll(&mut cx), Poll::Ready(Err(ClientError::Closed))));
    }

    #[test]
    fn a_batch_lingered_once_the_clock_passed_its_linger() {
        let linger = Duration::from_millis(5);
        assert!(!lingered(Some(100), Some(104), linger));
        assert!(lingered(Some(100), Some(105), linger));
        // Unknown clock readings (records with their own timestamps), linger 0
        // and a clock that went back leave it to the sender's timer.
        assert!(!lingered(None, Some(200), linger));
        assert!(!lingered(Some(100), None, linger));
        assert!(!lingered(Some(100), Some(200), Duration::ZERO));
        assert!(!lingered(Some(100), Some(50), linger));
    }

    #[test]
    fn sequences_wrap_like_kafkas() {
        assert_eq!(wrapping_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(wrapping_sequence(5, 10), 15);
    }
}

//! [`Consumer`]: reads assigned partitions from any offset, with a prefetching
//! long-poll fetch loop per partition.
//!
//! Each assigned partition has a fetch task that:
//! 1. resolves its start (`Beginning`, `End`, a timestamp) with `listOffset`;
//! 2. long-polls `fetch(offset, fetch_bytes_max, fetch_min_bytes, fetch_max_wait)`
//!    on the partition's leader;
//! 3. turns the batches into [`ConsumerRecord`]s whose keys and values are slices
//!    of the fetched buffer (no copies), skipping records before the position;
//! 4. buffers them until [`Consumer::poll`] takes them, pausing while more than
//!    `prefetch_bytes_max` bytes wait.
//!
//! At most `fetch_in_flight_max` fetches are in flight per consumer (each RPC
//! call is one partition); with more partitions than that, they take turns.
//!
//! `seek` bumps the partition's generation: a fetch answered for an older
//! generation is dropped, so no record from before a seek is ever returned after
//! it. A retriable error (leader moved, connection lost) refreshes metadata and
//! retries with backoff; `OffsetOutOfRange` resets to `auto_offset_reset`; any
//! other error is handed to the next `poll` once.
//!
//! Group membership (`subscribe`, commits) arrives with consumer groups.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use abi::batch::{records_section, BatchView, RecordRefs, DECOMPRESSED_BYTES_MAX};
use abi::weir_capnp::broker;
use abi::ErrorCode;
use bytes::Bytes;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::cluster::Cluster;
use crate::config::{ConsumerConfig, OffsetReset};
use crate::error::{broker_error, ClientError};
use crate::record::ConsumerRecord;

type TopicPartition = (Arc<str>, i32);

/// Where to read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offset {
    /// The log start offset (the oldest record retention kept).
    Beginning,
    /// The high watermark: only records produced from now on.
    End,
    /// This exact offset.
    At(i64),
    /// The first record with a timestamp at or after this (ms since the epoch).
    Timestamp(i64),
}

/// Reads assigned partitions; see the module docs.
#[derive(Debug)]
pub struct Consumer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: ConsumerConfig,
    cluster: Arc<Cluster>,
    state: Mutex<State>,
    /// Records arrived (or an error did).
    arrived: Notify,
    /// Bounds fetches in flight (`fetch_in_flight_max`).
    fetch_slots: Arc<tokio::sync::Semaphore>,
}

#[derive(Debug, Default)]
struct State {
    partitions: BTreeMap<TopicPartition, Assigned>,
    /// Where the next `poll` starts looking, for fairness between partitions.
    poll_cursor: usize,
}

#[derive(Debug)]
struct Assigned {
    /// Offset of the next record `poll` returns; `None` until resolved.
    position: Option<i64>,
    fetch_from: FetchFrom,
    generation: u64,
    records: VecDeque<ConsumerRecord>,
    buffered_bytes: usize,
    error: Option<ClientError>,
    paused: bool,
    /// Wakes the fetch task (space freed, seek, resume).
    wake: Arc<Notify>,
    task: JoinHandle<()>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FetchFrom {
    Resolve(Offset),
    At(i64),
}

impl Drop for Assigned {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Consumer {
    /// A consumer for the cluster in `config`. Must be called inside a tokio
    /// runtime (fetch tasks run there); connects on first use.
    pub fn new(config: ConsumerConfig) -> Result<Consumer, ClientError> {
        let cluster = Cluster::new(&config.common.bootstrap_servers, config.common.connect_timeout)?;
        Ok(Consumer::with_cluster(config, cluster))
    }

    /// A consumer sharing `cluster` (its metadata and connections) with others.
    pub fn with_cluster(config: ConsumerConfig, cluster: Arc<Cluster>) -> Consumer {
        let fetch_slots = Arc::new(tokio::sync::Semaphore::new(config.fetch_in_flight_max.max(1)));
        let inner = Inner { config, cluster, state: Mutex::new(State::default()), arrived: Notify::new(), fetch_slots };
        Consumer { inner: Arc::new(inner) }
    }

    /// Reads exactly these partitions from now on (replacing any earlier
    /// assignment), each from `auto_offset_reset` until `seek` says otherwise.
    /// Fails for unknown topics or partitions.
    pub async fn assign(&self, partitions: &[(String, i32)]) -> Result<(), ClientError> {
        for (topic, partition) in partitions {
            let info = self.inner.cluster.topic(topic).await?;
            if *partition < 0 || *partition as usize >= info.partitions.len() {
                let message =
                    format!("topic {topic:?} has no partition {partition} (it has {})", info.partitions.len());
                return Err(ClientError::broker(ErrorCode::UnknownTopicOrPartition, message));
            }
        }
        let start = match self.inner.config.auto_offset_reset {
            OffsetReset::Earliest => Offset::Beginning,
            OffsetReset::Latest | OffsetReset::None => Offset::End,
        };
        let mut state = self.inner.lock();
        let wanted: Vec<TopicPartition> =
            partitions.iter().map(|(topic, partition)| (Arc::from(topic.as_str()), *partition)).collect();
        state.partitions.retain(|key, _| wanted.contains(key));
        for key in wanted {
            if state.partitions.contains_key(&key) {
                continue;
            }
            let wake = Arc::new(Notify::new());
            let task = tokio::spawn(run_fetcher(self.inner.clone(), key.clone(), wake.clone()));
            let assigned = Assigned {
                position: None,
                fetch_from: FetchFrom::Resolve(start),
                generation: 0,
                records: VecDeque::new(),
                buffered_bytes: 0,
                error: None,
                paused: false,
                wake,
                task,
            };
            state.partitions.insert(key, assigned);
        }
        Ok(())
    }

    /// The assigned partitions.
    pub fn assignment(&self) -> Vec<(String, i32)> {
        self.inner.lock().partitions.keys().map(|(topic, partition)| (topic.to_string(), *partition)).collect()
    }

    /// Moves an assigned partition's position; records fetched before are dropped.
    pub fn seek(&self, topic: &str, partition: i32, offset: Offset) -> Result<(), ClientError> {
        let mut state = self.inner.lock();
        let Some(assigned) = state.partitions.get_mut(&(Arc::from(topic), partition)) else {
            return Err(ClientError::InvalidArgument(format!("{topic}-{partition} is not assigned")));
        };
        assigned.generation += 1;
        assigned.records.clear();
        assigned.buffered_bytes = 0;
        assigned.error = None;
        match offset {
            Offset::At(offset) => {
                assigned.position = Some(offset);
                assigned.fetch_from = FetchFrom::At(offset);
            }
            other => {
                assigned.position = None;
                assigned.fetch_from = FetchFrom::Resolve(other);
            }
        }
        assigned.wake.notify_one();
        Ok(())
    }

    /// Seeks every assigned partition to `offset`.
    pub fn seek_all(&self, offset: Offset) -> Result<(), ClientError> {
        for (topic, partition) in self.assignment() {
            self.seek(&topic, partition, offset)?;
        }
        Ok(())
    }

    /// The offset of the next record `poll` returns for the partition (`None`
    /// while its start is still being resolved).
    pub fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        self.inner.lock().partitions.get(&(Arc::from(topic), partition)).and_then(|assigned| assigned.position)
    }

    /// Stops returning (and fetching) records of the partition until `resume`.
    pub fn pause(&self, topic: &str, partition: i32) {
        if let Some(assigned) = self.inner.lock().partitions.get_mut(&(Arc::from(topic), partition)) {
            assigned.paused = true;
        }
    }

    pub fn resume(&self, topic: &str, partition: i32) {
        if let Some(assigned) = self.inner.lock().partitions.get_mut(&(Arc::from(topic), partition)) {
            assigned.paused = false;
            assigned.wake.notify_one();
        }
    }

    /// Waits up to `timeout` for records and returns at most `poll_records_max`
    /// of them (an empty list when none came). A partition's error is returned
    /// once, by the first poll that sees it.
    pub async fn poll(&self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let arrived = self.inner.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            if let Some(outcome) = self.take_records() {
                return outcome;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }

    fn take_records(&self) -> Option<Result<Vec<ConsumerRecord>, ClientError>> {
        let records_max = self.inner.config.poll_records_max;
        let mut state = self.inner.lock();
        let partition_count = state.partitions.len();
        if partition_count == 0 {
            return None;
        }
        let start = state.poll_cursor % partition_count;
        state.poll_cursor = state.poll_cursor.wrapping_add(1);
        let mut taken = Vec::new();
        let keys: Vec<TopicPartition> = state.partitions.keys().cloned().collect();
        for index in 0..partition_count {
            let key = &keys[(start + index) % partition_count];
            let Some(assigned) = state.partitions.get_mut(key) else { continue };
            if assigned.paused {
                continue;
            }
            if let Some(error) = assigned.error.take() {
                if taken.is_empty() {
                    return Some(Err(error));
                }
                assigned.error = Some(error);
                break;
            }
            let mut freed = false;
            while taken.len() < records_max {
                let Some(record) = assigned.records.pop_front() else { break };
                assigned.buffered_bytes -= record_bytes(&record);
                assigned.position = Some(record.offset + 1);
                taken.push(record);
                freed = true;
            }
            if freed {
                assigned.wake.notify_one();
            }
            if taken.len() == records_max {
                break;
            }
        }
        (!taken.is_empty()).then_some(Ok(taken))
    }

    /// The log start offset and high watermark of a partition.
    pub async fn watermarks(&self, topic: &str, partition: i32) -> Result<(i64, i64), ClientError> {
        let start = list_offset(&self.inner.cluster, topic, partition, Offset::Beginning).await?;
        let end = list_offset(&self.inner.cluster, topic, partition, Offset::End).await?;
        Ok((start, end))
    }

    /// Stops every fetch task.
    pub fn close(&self) {
        self.inner.lock().partitions.clear();
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.close();
    }
}

fn record_bytes(record: &ConsumerRecord) -> usize {
    record.key.as_ref().map_or(0, Bytes::len) + record.value.as_ref().map_or(0, Bytes::len) + 64
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What the fetch task should do next.
enum Step {
    Wait,
    Resolve(Offset, u64),
    Fetch(i64, u64),
    Gone,
}

/// A fetch already sent for (offset, generation) while the previous answer was
/// being decoded.
type Prefetch = (i64, u64, JoinHandle<Result<FetchedBytes, ClientError>>);

async fn run_fetcher(inner: Arc<Inner>, key: TopicPartition, wake: Arc<Notify>) {
    let config = &inner.config;
    let mut backoff = config.common.retry_backoff;
    let mut prefetch: Option<Prefetch> = None;
    loop {
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let step = {
            let state = inner.lock();
            match state.partitions.get(&key) {
                None => Step::Gone,
                Some(assigned) if assigned.paused || assigned.error.is_some() => Step::Wait,
                Some(assigned) if assigned.buffered_bytes >= config.prefetch_bytes_max => Step::Wait,
                Some(assigned) => match assigned.fetch_from {
                    FetchFrom::Resolve(offset) => Step::Resolve(offset, assigned.generation),
                    FetchFrom::At(offset) => Step::Fetch(offset, assigned.generation),
                },
            }
        };
        let outcome = match step {
            Step::Gone => return,
            Step::Wait => {
                woken.await;
                continue;
            }
            Step::Resolve(offset, generation) => list_offset(&inner.cluster, &key.0, key.1, offset)
                .await
                .map(|resolved| inner.resolved(&key, generation, resolved)),
            Step::Fetch(offset, generation) => {
                let pending = match prefetch.take() {
                    Some((at, of, handle)) if (at, of) == (offset, generation) => handle,
                    stale => {
                        if let Some((_, _, handle)) = stale {
                            handle.abort();
                        }
                        tokio::spawn(fetch_owned(inner.clone(), key.clone(), offset))
                    }
                };
                // A seek makes the pending long poll pointless: drop it at once.
                let Some(fetched) = inner.unless_seeked(&key, generation, &wake, pending).await else { continue };
                fetched.map(|fetched| {
                    // Send the next fetch before decoding this answer, so the broker
                    // reads while this side decodes.
                    let next_offset = next_fetch_offset(&fetched.batches, offset);
                    if next_offset > offset && inner.has_room(&key, fetched.batches.len()) {
                        let task = tokio::spawn(fetch_owned(inner.clone(), key.clone(), next_offset));
                        prefetch = Some((next_offset, generation, task));
                    }
                    if inner.deliver(&key, generation, offset, fetched) {
                        inner.arrived.notify_waiters();
                    }
                })
            }
        };
        match outcome {
            Ok(()) => backoff = config.common.retry_backoff,
            Err(error)
                if error.code() == ErrorCode::OffsetOutOfRange && config.auto_offset_reset != OffsetReset::None =>
            {
                let reset = match config.auto_offset_reset {
                    OffsetReset::Earliest => Offset::Beginning,
                    _ => Offset::End,
                };
                tracing::info!(topic = %key.0, partition = key.1, ?reset, %error, "offset out of range; resetting");
                inner.reset(&key, reset);
            }
            Err(error) if error.is_retriable() => {
                tracing::debug!(topic = %key.0, partition = key.1, %error, "fetch failed; retrying");
                inner.cluster.invalidate(&key.0);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(config.common.retry_backoff_max);
            }
            Err(error) => {
                if let Some(assigned) = inner.lock().partitions.get_mut(&key) {
                    assigned.error = Some(error);
                }
                inner.arrived.notify_waiters();
            }
        }
    }
}

/// What one fetch returned.
#[derive(Debug)]
struct FetchedBytes {
    batches: Bytes,
}

/// The offset after the last whole batch in `batches` (headers only, no CRC).
fn next_fetch_offset(batches: &[u8], offset: i64) -> i64 {
    let mut next_offset = offset;
    let mut rest = batches;
    while let Ok((view, tail)) = BatchView::split_first(rest) {
        next_offset = next_offset.max(view.last_offset() + 1);
        rest = tail;
    }
    next_offset
}

async fn fetch_owned(inner: Arc<Inner>, key: TopicPartition, offset: i64) -> Result<FetchedBytes, ClientError> {
    fetch(&inner, &key, offset).await
}

impl Inner {
    fn resolved(&self, key: &TopicPartition, generation: u64, offset: i64) {
        let mut state = self.lock();
        if let Some(assigned) = state.partitions.get_mut(key).filter(|assigned| assigned.generation == generation) {
            assigned.fetch_from = FetchFrom::At(offset);
            assigned.position = Some(offset);
        }
    }

    /// Awaits `pending` unless the partition is sought (or unassigned) meanwhile;
    /// then aborts it and returns `None`.
    async fn unless_seeked(
        &self,
        key: &TopicPartition,
        generation: u64,
        wake: &Notify,
        mut pending: JoinHandle<Result<FetchedBytes, ClientError>>,
    ) -> Option<Result<FetchedBytes, ClientError>> {
        loop {
            let woken = wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.lock().partitions.get(key).is_none_or(|assigned| assigned.generation != generation) {
                pending.abort();
                return None;
            }
            tokio::select! {
                joined = &mut pending => {
                    return Some(joined.unwrap_or_else(|error| Err(ClientError::Protocol(error.to_string()))));
                }
                () = &mut woken => {}
            }
        }
    }

    /// Whether the partition can buffer `incoming_bytes` more besides what it holds.
    fn has_room(&self, key: &TopicPartition, incoming_bytes: usize) -> bool {
        let state = self.lock();
        state.partitions.get(key).is_some_and(|assigned| {
            !assigned.paused && assigned.buffered_bytes + 2 * incoming_bytes <= self.config.prefetch_bytes_max
        })
    }

    fn reset(&self, key: &TopicPartition, offset: Offset) {
        let mut state = self.lock();
        if let Some(assigned) = state.partitions.get_mut(key) {
            assigned.generation += 1;
            assigned.fetch_from = FetchFrom::Resolve(offset);
        }
    }

    /// Decodes and buffers fetched records (unless a seek happened meanwhile).
    /// Returns whether any record was buffered.
    fn deliver(&self, key: &TopicPartition, generation: u64, offset: i64, fetched: FetchedBytes) -> bool {
        let decoded = decode_records(&key.0, key.1, offset, &fetched.batches);
        let mut state = self.lock();
        let Some(assigned) = state.partitions.get_mut(key).filter(|assigned| assigned.generation == generation) else {
            return false;
        };
        match decoded {
            Ok((records, next_offset)) => {
                assigned.fetch_from = FetchFrom::At(next_offset);
                let had_records = !records.is_empty();
                for record in records {
                    assigned.buffered_bytes += record_bytes(&record);
                    assigned.records.push_back(record);
                }
                had_records
            }
            Err(error) => {
                assigned.error = Some(error);
                true
            }
        }
    }
}

/// Records at or after `offset` in `batches`, and the offset to fetch next.
fn decode_records(
    topic: &Arc<str>,
    partition: i32,
    offset: i64,
    batches: &Bytes,
) -> Result<(Vec<ConsumerRecord>, i64), ClientError> {
    let corrupt = |error: abi::batch::BatchError| ClientError::Corrupt(format!("{topic}-{partition}: {error}"));
    let mut records = Vec::new();
    let mut next_offset = offset;
    let mut position = 0;
    while position < batches.len() {
        let (view, _) = BatchView::split_first(&batches[position..]).map_err(corrupt)?;
        let batch_start = position;
        position += view.size_bytes();
        next_offset = next_offset.max(view.last_offset() + 1);
        if view.last_offset() < offset || view.attributes().is_control() {
            continue;
        }
        let section = records_section(&view, DECOMPRESSED_BYTES_MAX).map_err(corrupt)?;
        let section_bytes = match section {
            std::borrow::Cow::Borrowed(slice) => {
                let start = batch_start + (slice.as_ptr() as usize - batches[batch_start..].as_ptr() as usize);
                batches.slice(start..start + slice.len())
            }
            std::borrow::Cow::Owned(decompressed) => Bytes::from(decompressed),
        };
        let records_count = usize::try_from(view.records_count()).unwrap_or(0);
        for record in RecordRefs::new(&section_bytes, records_count) {
            let record = record.map_err(corrupt)?;
            let record_offset = view.base_offset() + record.offset_delta as i64;
            if record_offset < offset {
                continue;
            }
            let slice = |range: std::ops::Range<usize>| section_bytes.slice(range);
            let headers = record
                .headers
                .into_iter()
                .map(|(key, value)| (String::from_utf8_lossy(&section_bytes[key]).into_owned(), value.map(slice)))
                .collect();
            records.push(ConsumerRecord {
                topic: topic.clone(),
                partition,
                offset: record_offset,
                timestamp_ms: view.base_timestamp().wrapping_add(record.timestamp_delta),
                key: record.key.map(slice),
                value: record.value.map(slice),
                headers,
            });
        }
    }
    Ok((records, next_offset))
}

/// One long-poll fetch from the leader.
async fn fetch(inner: &Inner, key: &TopicPartition, offset: i64) -> Result<FetchedBytes, ClientError> {
    let config = &inner.config;
    let _slot = inner.fetch_slots.acquire().await.map_err(|_| ClientError::Closed)?;
    let connection = inner.cluster.leader(&key.0, key.1).await?;
    let address = connection.address().to_owned();
    let (topic, partition) = key.clone();
    let (max_bytes, min_bytes) = (config.fetch_bytes_max, config.fetch_min_bytes);
    let max_wait_ms = config.fetch_max_wait.as_millis().min(u32::MAX as u128) as u32;
    let call = connection.call(move |client: broker::Client| async move {
        let mut request = client.fetch_request();
        let mut builder = request.get().init_request();
        builder.set_topic(&topic[..]);
        builder.set_partition(partition);
        builder.set_offset(offset);
        builder.set_max_bytes(max_bytes);
        builder.set_min_bytes(min_bytes);
        builder.set_max_wait_ms(max_wait_ms);
        let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
        let response = response.get()?.get_response()?;
        if response.has_error() {
            return Err(broker_error(response.get_error()?));
        }
        Ok(FetchedBytes { batches: Bytes::copy_from_slice(response.get_batches()?) })
    });
    let timeout = config.fetch_max_wait + config.common.request_timeout;
    match tokio::time::timeout(timeout, call).await {
        Ok(outcome) => outcome,
        Err(_) => Err(ClientError::Timeout { operation: "fetch", timeout_ms: timeout.as_millis() as u64 }),
    }
}

/// Resolves `offset` for a partition with `listOffset` (`At` is returned as is).
pub(crate) async fn list_offset(
    cluster: &Cluster,
    topic: &str,
    partition: i32,
    offset: Offset,
) -> Result<i64, ClientError> {
    if let Offset::At(offset) = offset {
        return Ok(offset);
    }
    let connection = cluster.leader(topic, partition).await?;
    let address = connection.address().to_owned();
    let topic = topic.to_owned();
    connection
        .call(move |client: broker::Client| async move {
            let mut request = client.list_offset_request();
            let mut params = request.get();
            params.set_topic(&topic[..]);
            params.set_partition(partition);
            let mut query = params.init_query();
            match offset {
                Offset::Beginning => query.set_earliest(()),
                Offset::End => query.set_latest(()),
                Offset::Timestamp(timestamp_ms) => query.set_timestamp_ms(timestamp_ms),
                Offset::At(_) => unreachable!("returned above"),
            }
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            Ok(response.get_offset())
        })
        .await
}

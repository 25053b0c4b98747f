//! [`Consumer`]: reads assigned partitions from any offset, with a prefetching
//! long-poll fetch session.
//!
//! One fetch task per consumer runs this loop:
//! 1. resolve the start of partitions that have none yet (`Beginning`, `End`, a
//!    timestamp) with `listOffset`;
//! 2. take every partition that is not paused, has no pending error and holds
//!    less than `prefetch_bytes_max` bytes, group them by leader, and send each
//!    leader one `fetchMany` long poll (`fetch_min_bytes`, `fetch_max_wait`, at
//!    most `fetch_bytes_max` per partition and `fetch_total_bytes_max` in all);
//! 3. for each answered partition, move its fetch position past the returned
//!    batches (headers only) and hand the bytes to the decode task, then loop at
//!    once: the broker reads the next answer while this side decodes.
//!
//! The decode task turns batches into [`ConsumerRecord`]s whose keys and values
//! are slices of the fetched buffer (no copies), skipping records before the
//! requested offset, and buffers them until [`Consumer::poll`] takes them. It
//! handles answers in the order they were fetched, so records stay in order.
//!
//! `seek` bumps the partition's generation and wakes the fetch task, which drops a
//! pending long poll that includes the partition; answers and decoded records of
//! an older generation are discarded, so nothing from before a seek is returned
//! after it. A retriable error (leader moved, connection lost) refreshes
//! metadata and backs the partition off; `OffsetOutOfRange` resets it to
//! `auto_offset_reset`; any other error — and `StorageError`, an offline
//! partition, which may need an operator — is handed to the next `poll` once, and
//! the partition is fetched again (from the same offset, after a backoff) only
//! after that.
//!
//! Group membership (`subscribe`, commits) arrives with consumer groups.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use abi::batch::{records_section, BatchView, RecordRefs, DECOMPRESSED_BYTES_MAX};
use abi::weir_capnp::broker;
use abi::ErrorCode;
use bytes::Bytes;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::cluster::Cluster;
use crate::config::{ConsumerConfig, OffsetReset};
use crate::connection::Connection;
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
    /// The group membership, once `subscribe` was called.
    membership: Mutex<Option<crate::group::Membership>>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: ConsumerConfig,
    pub(crate) cluster: Arc<Cluster>,
    state: Mutex<State>,
    tasks: Mutex<Option<(JoinHandle<()>, JoinHandle<()>)>>,
    /// Records arrived (or an error did): wakes `poll`.
    arrived: Notify,
    /// Something changed that the fetch task must look at (assign, seek, pause,
    /// resume, room freed by `poll`).
    wake: Notify,
    /// Closed: a waiting poll is woken and returns empty; later polls wait
    /// out their timeout and return empty; assign and subscribe refuse.
    closed: std::sync::atomic::AtomicBool,
    /// `Consumer::wakeup` was called: the next (or the waiting) poll returns
    /// at once, empty.
    woken: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    partitions: BTreeMap<TopicPartition, Assigned>,
    /// Where the next `poll` starts looking, for fairness between partitions.
    poll_cursor: usize,
    /// Rotates the partition order of fetches (bumped per fetch sent).
    fetch_rotation: usize,
    /// The last generation handed out: generations are unique per consumer, so a
    /// partition unassigned and assigned again never accepts an old answer.
    generation_clock: u64,
}

#[derive(Debug)]
struct Assigned {
    /// Offset of the next record `poll` returns; `None` until resolved.
    position: Option<i64>,
    /// What the application stored to commit (`Consumer::store_offset`).
    stored: Option<i64>,
    fetch_from: FetchFrom,
    generation: u64,
    records: VecDeque<ConsumerRecord>,
    /// Bytes of decoded records waiting for `poll`.
    buffered_bytes: usize,
    /// Fetched bytes handed to the decode task and not decoded yet.
    decoding_bytes: usize,
    error: Option<ClientError>,
    paused: bool,
    /// After a retriable error: not fetched again before this.
    backoff_until: Option<Instant>,
    backoff: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FetchFrom {
    Resolve(Offset),
    At(i64),
}

/// Fetched bytes on their way to the decode task.
#[derive(Debug)]
struct Fetched {
    key: TopicPartition,
    generation: u64,
    offset: i64,
    batches: Bytes,
}

/// One partition of a planned `fetchMany`.
#[derive(Clone, Debug)]
struct Planned {
    key: TopicPartition,
    generation: u64,
    offset: i64,
}

/// One partition's answer.
type Answer = Result<(Bytes, i64), ClientError>;

impl Consumer {
    /// A consumer for the cluster in `config`. Must be called inside a tokio
    /// runtime (its fetch and decode tasks run there); connects on first use.
    pub fn new(config: ConsumerConfig) -> Result<Consumer, ClientError> {
        let cluster = Cluster::new(
            &config.common.bootstrap_servers,
            config.common.connect_timeout,
            config.common.request_timeout,
        )?;
        Ok(Consumer::with_cluster(config, cluster))
    }

    /// A consumer sharing `cluster` (its metadata and connections) with others.
    pub fn with_cluster(config: ConsumerConfig, cluster: Arc<Cluster>) -> Consumer {
        let inner = Inner {
            config,
            cluster,
            state: Mutex::new(State::default()),
            tasks: Mutex::new(None),
            arrived: Notify::new(),
            wake: Notify::new(),
            closed: std::sync::atomic::AtomicBool::new(false),
            woken: std::sync::atomic::AtomicBool::new(false),
        };
        Consumer { inner: Arc::new(inner), membership: Mutex::new(None) }
    }

    /// Reads exactly these partitions from now on (replacing any earlier
    /// assignment), each from `auto_offset_reset` until `seek` says otherwise.
    /// Fails for unknown topics or partitions.
    pub async fn assign(&self, partitions: &[(String, i32)]) -> Result<(), ClientError> {
        self.inner.refuse_closed()?;
        for (topic, partition) in partitions {
            let info = self.inner.cluster.topic(topic).await?;
            if *partition < 0 || *partition as usize >= info.partitions.len() {
                let message =
                    format!("topic {topic:?} has no partition {partition} (it has {})", info.partitions.len());
                return Err(ClientError::broker(ErrorCode::UnknownTopicOrPartition, message));
            }
        }
        let start = self.inner.reset_offset();
        let wanted: Vec<(String, i32)> = partitions.to_vec();
        let removed: Vec<(String, i32)> = self.assignment().into_iter().filter(|key| !wanted.contains(key)).collect();
        let added: Vec<((String, i32), Offset)> = wanted.into_iter().map(|key| (key, start)).collect();
        self.inner.change_assignment(&added, &removed);
        Ok(())
    }

    /// The assigned partitions.
    pub fn assignment(&self) -> Vec<(String, i32)> {
        self.inner.lock().partitions.keys().map(|(topic, partition)| (topic.to_string(), *partition)).collect()
    }

    /// Moves an assigned partition's position; records fetched before are dropped.
    pub fn seek(&self, topic: &str, partition: i32, offset: Offset) -> Result<(), ClientError> {
        {
            let mut state = self.inner.lock();
            state.generation_clock += 1;
            let generation = state.generation_clock;
            let Some(assigned) = state.partitions.get_mut(&(Arc::from(topic), partition)) else {
                return Err(ClientError::InvalidArgument(format!("{topic}-{partition} is not assigned")));
            };
            assigned.generation = generation;
            assigned.records.clear();
            assigned.buffered_bytes = 0;
            assigned.error = None;
            assigned.backoff_until = None;
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
        }
        self.inner.wake.notify_one();
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
        }
        self.inner.wake.notify_one();
    }

    /// Waits up to `timeout` for records and returns at most `poll_records_max`
    /// of them (an empty list when none came). A partition's error is returned
    /// once, by the first poll that sees it.
    pub async fn poll(&self, timeout: Duration) -> Result<Vec<ConsumerRecord>, ClientError> {
        self.poll_at_most(timeout, self.inner.config.poll_records_max).await
    }

    /// [`Consumer::poll`] returning at most `records_max` records (and at most
    /// `poll_records_max`): what a binding that hands out one record at a time
    /// uses, so the position never runs ahead of what the application was given.
    pub async fn poll_at_most(
        &self,
        timeout: Duration,
        records_max: usize,
    ) -> Result<Vec<ConsumerRecord>, ClientError> {
        let records_max = records_max.clamp(1, self.inner.config.poll_records_max);
        let deadline = tokio::time::Instant::now() + timeout;
        if self.inner.closed.load(std::sync::atomic::Ordering::Acquire) {
            // Nothing will arrive: wait the timeout out (a loop polling a
            // closed consumer must not spin).
            tokio::time::sleep_until(deadline).await;
            return Ok(Vec::new());
        }
        loop {
            let arrived = self.inner.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            if self.inner.closed.load(std::sync::atomic::Ordering::Acquire) {
                return Ok(Vec::new());
            }
            if let Some(outcome) = self.ready(records_max) {
                return outcome;
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }

    /// What [`Consumer::poll_at_most`] would return without waiting: the
    /// records already fetched (or a partition's error, or an empty list after
    /// [`Consumer::wakeup`]), and `None` when it would wait. A binding answers
    /// a poll with it on its own thread, and goes through the runtime only to
    /// wait. `None` after [`Consumer::close`].
    pub fn poll_ready(&self, records_max: usize) -> Option<Result<Vec<ConsumerRecord>, ClientError>> {
        if self.inner.closed.load(std::sync::atomic::Ordering::Acquire) {
            return None;
        }
        self.ready(records_max.clamp(1, self.inner.config.poll_records_max))
    }

    /// An empty list if a wakeup is pending, else what is buffered.
    fn ready(&self, records_max: usize) -> Option<Result<Vec<ConsumerRecord>, ClientError>> {
        if self.inner.woken.swap(false, std::sync::atomic::Ordering::AcqRel) {
            return Some(Ok(Vec::new()));
        }
        self.take_records(records_max)
    }

    fn take_records(&self, records_max: usize) -> Option<Result<Vec<ConsumerRecord>, ClientError>> {
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
            // A partition's error comes after the records buffered before it.
            if assigned.records.is_empty() {
                if let Some(error) = assigned.error.take() {
                    if taken.is_empty() {
                        drop(state);
                        // The partition may be fetched again now that its error was
                        // seen: the fetch task may be asleep with nothing to fetch.
                        self.inner.wake.notify_one();
                        return Some(Err(error));
                    }
                    assigned.error = Some(error);
                    break;
                }
            }
            while taken.len() < records_max {
                let Some(record) = assigned.records.pop_front() else { break };
                assigned.buffered_bytes -= record_bytes(&record);
                assigned.position = Some(record.offset + 1);
                taken.push(record);
            }
            if taken.len() == records_max {
                break;
            }
        }
        drop(state);
        if !taken.is_empty() {
            self.inner.wake.notify_one(); // room to fetch more
        }
        (!taken.is_empty()).then_some(Ok(taken))
    }

    /// Makes the poll waiting now (or the next one) return at once, empty: how
    /// a binding stops its poll loop without waiting out the poll's timeout.
    pub fn wakeup(&self) {
        self.inner.woken.store(true, std::sync::atomic::Ordering::Release);
        self.inner.arrived.notify_waiters();
    }

    /// Stores `offset` (the next one to read) as what commits take for the
    /// partition, when `enable.auto.offset.store` is off: call it once a
    /// record is handled. Fails for a partition not assigned here.
    pub fn store_offset(&self, topic: &str, partition: i32, offset: i64) -> Result<(), ClientError> {
        let mut state = self.inner.lock();
        match state.partitions.get_mut(&(Arc::from(topic), partition)) {
            Some(assigned) => {
                assigned.stored = Some(offset);
                Ok(())
            }
            None => Err(ClientError::InvalidArgument(format!("{topic}-{partition} is not assigned to this consumer"))),
        }
    }

    /// The log start offset and high watermark of a partition.
    pub async fn watermarks(&self, topic: &str, partition: i32) -> Result<(i64, i64), ClientError> {
        let start = list_offset(&self.inner.cluster, topic, partition, Offset::Beginning).await?;
        let end = list_offset(&self.inner.cluster, topic, partition, Offset::End).await?;
        Ok((start, end))
    }

    /// Leaves the group (committing first when auto-commit is on), stops
    /// fetching and forgets the assignment. A poll waiting meanwhile returns
    /// at once, empty; later polls wait out their timeout and return empty;
    /// assign and subscribe fail with `Closed`.
    pub async fn close(&self) {
        // Closed from the start: an assign or subscribe racing the leave is
        // refused rather than leaving a member behind.
        self.inner.closed.store(true, std::sync::atomic::Ordering::Release);
        let membership = self.membership().take();
        if let Some(membership) = membership {
            membership.leave(&self.inner).await;
        }
        if let Some(late) = self.membership().take() {
            late.abort();
        }
        self.inner.stop();
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    pub(crate) fn membership(&self) -> std::sync::MutexGuard<'_, Option<crate::group::Membership>> {
        self.membership.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        // No leave without an async context: the group notices the session end.
        if let Some(membership) = self.membership().take() {
            membership.abort();
        }
        self.inner.stop();
    }
}

fn record_bytes(record: &ConsumerRecord) -> usize {
    record.key.as_ref().map_or(0, Bytes::len) + record.value.as_ref().map_or(0, Bytes::len) + 64
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Where partitions without a position start (`auto_offset_reset`).
    pub(crate) fn reset_offset(&self) -> Offset {
        match self.config.auto_offset_reset {
            OffsetReset::Earliest => Offset::Beginning,
            OffsetReset::Latest | OffsetReset::None => Offset::End,
        }
    }

    /// Adds partitions (each starting at its offset; already assigned ones keep
    /// their position) and removes others; starts the fetch tasks on first use.
    pub(crate) fn change_assignment(self: &Arc<Self>, added: &[((String, i32), Offset)], removed: &[(String, i32)]) {
        {
            let mut guard = self.lock();
            let state = &mut *guard;
            for (topic, partition) in removed {
                state.partitions.remove(&(Arc::from(topic.as_str()), *partition));
            }
            for ((topic, partition), start) in added {
                let key: TopicPartition = (Arc::from(topic.as_str()), *partition);
                if state.partitions.contains_key(&key) {
                    continue;
                }
                state.generation_clock += 1;
                let (position, fetch_from) = match start {
                    Offset::At(offset) => (Some(*offset), FetchFrom::At(*offset)),
                    other => (None, FetchFrom::Resolve(*other)),
                };
                let assigned = Assigned {
                    position,
                    stored: None,
                    fetch_from,
                    generation: state.generation_clock,
                    records: VecDeque::new(),
                    buffered_bytes: 0,
                    decoding_bytes: 0,
                    error: None,
                    paused: false,
                    backoff_until: None,
                    backoff: self.config.common.retry_backoff,
                };
                state.partitions.insert(key, assigned);
            }
        }
        self.start_tasks();
        self.wake.notify_one();
    }

    /// Stops delivering `removed` and returns the positions they had, in one step:
    /// no record of theirs is handed out after the positions are taken, so a
    /// commit of them covers exactly what the application was given.
    pub(crate) fn take_partitions(&self, removed: &[(String, i32)]) -> Vec<((String, i32), i64)> {
        let mut state = self.lock();
        let positions = removed
            .iter()
            .filter_map(|(topic, partition)| {
                let assigned = state.partitions.remove(&(Arc::from(topic.as_str()), *partition))?;
                Some(((topic.clone(), *partition), self.committable(&assigned)?))
            })
            .collect();
        drop(state);
        self.wake.notify_one(); // drop a long poll that includes them
        positions
    }

    /// What a commit takes for every assigned partition that has it: its
    /// position, or its stored offset (see `ConsumerConfig::auto_offset_store`).
    pub(crate) fn positions(&self) -> Vec<((String, i32), i64)> {
        let state = self.lock();
        state
            .partitions
            .iter()
            .filter_map(|((topic, partition), assigned)| {
                Some(((topic.to_string(), *partition), self.committable(assigned)?))
            })
            .collect()
    }

    fn committable(&self, assigned: &Assigned) -> Option<i64> {
        match self.config.auto_offset_store {
            true => assigned.position,
            false => assigned.stored,
        }
    }

    /// Starts the fetch and decode tasks once.
    fn start_tasks(self: &Arc<Self>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if tasks.is_none() {
            let (decode_sender, decode_receiver) = mpsc::unbounded_channel();
            let fetcher = tokio::spawn(run_fetch_loop(self.clone(), decode_sender));
            let decoder = tokio::spawn(run_decoder(self.clone(), decode_receiver));
            *tasks = Some((fetcher, decoder));
        }
    }

    /// `Closed` once the consumer was closed.
    pub(crate) fn refuse_closed(&self) -> Result<(), ClientError> {
        match self.closed.load(std::sync::atomic::Ordering::Acquire) {
            true => Err(ClientError::Closed),
            false => Ok(()),
        }
    }

    /// Stops the tasks and forgets the assignment; a waiting poll returns
    /// empty, and assign and subscribe refuse from now on.
    fn stop(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::Release);
        self.arrived.notify_waiters();
        self.lock().partitions.clear();
        if let Some((fetcher, decoder)) = self.tasks.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take() {
            fetcher.abort();
            decoder.abort();
        }
    }

    /// Partitions whose start must be resolved, with their generation.
    fn to_resolve(&self) -> Vec<(TopicPartition, u64, Offset)> {
        let now = Instant::now();
        let state = self.lock();
        state
            .partitions
            .iter()
            .filter(|(_, assigned)| assigned.error.is_none() && assigned.backoff_until.is_none_or(|until| until <= now))
            .filter_map(|(key, assigned)| match assigned.fetch_from {
                FetchFrom::Resolve(offset) => Some((key.clone(), assigned.generation, offset)),
                FetchFrom::At(_) => None,
            })
            .collect()
    }

    /// Partitions to fetch now, and the earliest end of a backoff (to wake then).
    fn fetchable(&self) -> (Vec<Planned>, Option<Instant>) {
        let now = Instant::now();
        let prefetch_max = self.config.prefetch_bytes_max;
        let state = self.lock();
        let mut planned = Vec::new();
        let mut next_wake: Option<Instant> = None;
        for (key, assigned) in &state.partitions {
            // Any backoff (of a fetch or of a start being resolved) wakes the loop.
            if let Some(until) = assigned.backoff_until.filter(|until| *until > now) {
                next_wake = Some(next_wake.map_or(until, |next| next.min(until)));
                continue;
            }
            let FetchFrom::At(offset) = assigned.fetch_from else { continue };
            let full = assigned.buffered_bytes + assigned.decoding_bytes >= prefetch_max;
            if assigned.paused || assigned.error.is_some() || full {
                continue;
            }
            planned.push(Planned { key: key.clone(), generation: assigned.generation, offset });
        }
        // Brokers spend a fetch's byte budget in request order: rotate the order so
        // busy partitions early in it cannot starve the rest.
        if !planned.is_empty() {
            let rotation = state.fetch_rotation % planned.len();
            planned.rotate_left(rotation);
        }
        (planned, next_wake)
    }

    fn resolved(&self, key: &TopicPartition, generation: u64, offset: i64) {
        if let Some(assigned) = self.lock().partitions.get_mut(key).filter(|assigned| assigned.generation == generation)
        {
            assigned.fetch_from = FetchFrom::At(offset);
            assigned.position = Some(offset);
            assigned.backoff = self.config.common.retry_backoff;
        }
    }

    /// Handles a partition's failed resolve or fetch (see the module docs).
    fn failed(&self, key: &TopicPartition, generation: u64, error: ClientError) {
        let reset = match self.config.auto_offset_reset {
            OffsetReset::Earliest => Some(Offset::Beginning),
            OffsetReset::Latest => Some(Offset::End),
            OffsetReset::None => None,
        };
        let retriable = error.is_retriable();
        if retriable {
            self.cluster.invalidate(&key.0);
        }
        let mut guard = self.lock();
        let state = &mut *guard;
        let Some(assigned) = state.partitions.get_mut(key).filter(|assigned| assigned.generation == generation) else {
            return;
        };
        match (error.code(), reset) {
            (ErrorCode::OffsetOutOfRange, Some(reset)) => {
                tracing::info!(topic = %key.0, partition = key.1, ?reset, %error, "offset out of range; resetting");
                state.generation_clock += 1;
                assigned.generation = state.generation_clock;
                assigned.fetch_from = FetchFrom::Resolve(reset);
            }
            (ErrorCode::StorageError, _) => {
                // An offline partition (fenced by recovery, a failed disk) may stay so
                // until an operator acts: tell the application, and try again later.
                tracing::warn!(topic = %key.0, partition = key.1, %error, "partition offline");
                assigned.backoff_until = Some(Instant::now() + assigned.backoff);
                assigned.backoff = (assigned.backoff * 2).min(self.config.common.retry_backoff_max);
                assigned.error = Some(error);
                drop(guard);
                self.arrived.notify_waiters();
            }
            _ if retriable => {
                tracing::debug!(topic = %key.0, partition = key.1, %error, "fetch failed; backing off");
                assigned.backoff_until = Some(Instant::now() + assigned.backoff);
                assigned.backoff = (assigned.backoff * 2).min(self.config.common.retry_backoff_max);
            }
            _ => {
                assigned.error = Some(error);
                drop(guard);
                self.arrived.notify_waiters();
            }
        }
    }

    /// Moves the partition past the fetched batches and queues them for decoding.
    /// Returns whether they were queued (the partition was not sought meanwhile).
    fn fetched(&self, plan: &Planned, batches: &Bytes) -> bool {
        let next_offset = next_fetch_offset(batches, plan.offset);
        let mut state = self.lock();
        let Some(assigned) =
            state.partitions.get_mut(&plan.key).filter(|assigned| assigned.generation == plan.generation)
        else {
            return false;
        };
        assigned.backoff = self.config.common.retry_backoff;
        if batches.is_empty() {
            return false;
        }
        assigned.fetch_from = FetchFrom::At(next_offset);
        assigned.decoding_bytes += batches.len();
        true
    }

    /// Buffers decoded records (unless a seek happened meanwhile); after them, a
    /// batch that could not be decoded stops the partition with `error`.
    fn deliver(&self, fetched: &Fetched, records: Vec<ConsumerRecord>, error: Option<ClientError>) {
        let mut guard = self.lock();
        let state = &mut *guard;
        let Some(assigned) = state.partitions.get_mut(&fetched.key) else { return };
        assigned.decoding_bytes = assigned.decoding_bytes.saturating_sub(fetched.batches.len());
        if assigned.generation != fetched.generation {
            return;
        }
        for record in records {
            assigned.buffered_bytes += record_bytes(&record);
            assigned.records.push_back(record);
        }
        if let Some(error) = error {
            // `poll` hands out the records before the bad batch, then the error; the
            // bad batch is fetched again only after that (and fails the same way,
            // unless the application seeks past it). Answers already in flight
            // belong to the old generation and are dropped.
            let resume_at = match &error {
                ClientError::CorruptBatch { offset, .. } => *offset,
                _ => fetched.offset,
            };
            state.generation_clock += 1;
            assigned.generation = state.generation_clock;
            assigned.fetch_from = FetchFrom::At(resume_at);
            assigned.error = Some(error);
        }
        drop(guard);
        self.arrived.notify_waiters();
    }
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

async fn run_fetch_loop(inner: Arc<Inner>, decode: mpsc::UnboundedSender<Fetched>) {
    loop {
        let woken = inner.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        for (key, generation, offset) in inner.to_resolve() {
            match list_offset(&inner.cluster, &key.0, key.1, offset).await {
                Ok(resolved) => inner.resolved(&key, generation, resolved),
                Err(error) => inner.failed(&key, generation, error),
            }
        }
        let (planned, next_wake) = inner.fetchable();
        if planned.is_empty() {
            let sleep =
                tokio::time::sleep_until(next_wake.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600)));
            tokio::select! {
                () = &mut woken => {}
                () = sleep => {}
            }
            continue;
        }
        inner.lock().fetch_rotation += 1;
        let planned_keys = plan_keys(&planned);
        let by_leader = group_by_leader(&inner, planned).await;
        let requests = by_leader.into_iter().map(|(connection, plans)| fetch_many(&inner, connection, plans));
        let mut answers = Box::pin(futures::future::join_all(requests));
        let answers = loop {
            tokio::select! {
                answers = &mut answers => break Some(answers),
                () = &mut woken => {
                    // A seek, a new assignment or room freed by `poll` changes what
                    // should be fetched: drop the pending long poll and plan again
                    // (offsets only move when answers are taken, so nothing is lost).
                    if plan_keys(&inner.fetchable().0) != planned_keys {
                        break None;
                    }
                    woken.set(inner.wake.notified());
                    woken.as_mut().enable();
                }
            }
        };
        let Some(answers) = answers else { continue };
        for (plan, answer) in answers.into_iter().flatten() {
            match answer {
                Ok((batches, _high_watermark)) => {
                    if inner.fetched(&plan, &batches) {
                        let fetched =
                            Fetched { key: plan.key, generation: plan.generation, offset: plan.offset, batches };
                        if decode.send(fetched).is_err() {
                            return;
                        }
                    }
                }
                Err(error) => inner.failed(&plan.key, plan.generation, error),
            }
        }
    }
}

/// What a plan fetches, in a canonical order (fetch order rotates).
fn plan_keys(planned: &[Planned]) -> Vec<(TopicPartition, u64)> {
    let mut keys: Vec<(TopicPartition, u64)> = planned.iter().map(|plan| (plan.key.clone(), plan.generation)).collect();
    keys.sort();
    keys
}

async fn run_decoder(inner: Arc<Inner>, mut fetched: mpsc::UnboundedReceiver<Fetched>) {
    while let Some(fetched) = fetched.recv().await {
        let (records, error) = decode_records(&fetched.key.0, fetched.key.1, fetched.offset, &fetched.batches);
        inner.deliver(&fetched, records, error);
    }
}

/// Groups planned partitions by their leader's connection; a partition whose
/// leader cannot be reached is failed (and backs off).
async fn group_by_leader(inner: &Inner, planned: Vec<Planned>) -> Vec<(Connection, Vec<Planned>)> {
    let mut groups: HashMap<String, (Connection, Vec<Planned>)> = HashMap::new();
    for plan in planned {
        match inner.cluster.leader(&plan.key.0, plan.key.1).await {
            Ok(connection) => {
                groups.entry(connection.address().to_owned()).or_insert_with(|| (connection, Vec::new())).1.push(plan);
            }
            Err(error) => inner.failed(&plan.key, plan.generation, error),
        }
    }
    groups.into_values().collect()
}

/// One `fetchMany` long poll; every plan gets its own answer (a failed call
/// fails each of its partitions).
async fn fetch_many(inner: &Inner, connection: Connection, plans: Vec<Planned>) -> Vec<(Planned, Answer)> {
    let config = &inner.config;
    let address = connection.address().to_owned();
    let wanted: Vec<(Arc<str>, i32, i64)> =
        plans.iter().map(|plan| (plan.key.0.clone(), plan.key.1, plan.offset)).collect();
    let (partition_max, total_max, min_bytes) =
        (config.fetch_bytes_max, config.fetch_total_bytes_max, config.fetch_min_bytes);
    let max_wait_ms = config.fetch_max_wait.as_millis().min(u32::MAX as u128) as u32;
    let group_id = config.group_id.clone().unwrap_or_default();
    let call = connection.call(move |client: broker::Client| async move {
        let mut request = client.fetch_many_request();
        let mut builder = request.get().init_request();
        builder.set_group_id(&group_id[..]);
        builder.set_min_bytes(min_bytes);
        builder.set_max_wait_ms(max_wait_ms);
        builder.set_max_bytes(total_max);
        let mut list = builder.init_partitions(wanted.len() as u32);
        for (index, (topic, partition, offset)) in wanted.iter().enumerate() {
            let mut entry = list.reborrow().get(index as u32);
            entry.set_topic(&topic[..]);
            entry.set_partition(*partition);
            entry.set_offset(*offset);
            entry.set_max_bytes(partition_max);
        }
        let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
        let answers = response.get()?.get_partitions()?;
        if answers.len() as usize != wanted.len() {
            return Err(ClientError::Protocol(format!("{} answers for {} partitions", answers.len(), wanted.len())));
        }
        let mut out: Vec<Answer> = Vec::with_capacity(wanted.len());
        for answer in answers.iter() {
            out.push(match answer.has_error() {
                true => Err(broker_error(answer.get_error()?)),
                false => Ok((fetched_bytes(answer.get_batches()?), answer.get_high_watermark())),
            });
        }
        Ok(out)
    });
    let timeout = config.fetch_max_wait + config.common.request_timeout;
    let outcome = match tokio::time::timeout(timeout, call).await {
        Ok(outcome) => outcome,
        Err(_) => Err(ClientError::Timeout { operation: "fetch", timeout_ms: timeout.as_millis() as u64 }),
    };
    match outcome {
        Ok(answers) => plans.into_iter().zip(answers).collect(),
        Err(error) => plans.into_iter().map(|plan| (plan, Err(error.clone()))).collect(),
    }
}

/// A fetched answer's batches as `Bytes` for its records to share: the
/// received message's own memory (no copy) when it is big enough that holding
/// on to the message for it costs little, else a copy its own size (a few
/// records an application keeps should not pin a 64 KiB read buffer).
fn fetched_bytes(batches: &[u8]) -> Bytes {
    const SHARED_BYTES_MIN: usize = 16 * 1024;
    match batches.len() >= SHARED_BYTES_MIN {
        true => rpc_net::shared(batches).unwrap_or_else(|| Bytes::copy_from_slice(batches)),
        false => Bytes::copy_from_slice(batches),
    }
}

/// Records at or after `offset` in `batches`, in order, up to the first batch
/// that cannot be decoded; then the error naming that batch (the records before
/// it are still returned, so one bad batch does not hide the good ones).
fn decode_records(
    topic: &Arc<str>,
    partition: i32,
    offset: i64,
    batches: &Bytes,
) -> (Vec<ConsumerRecord>, Option<ClientError>) {
    let mut records = Vec::new();
    let mut position = 0;
    // The first offset not yet covered by a whole batch: where a bad batch starts.
    let mut expected = offset;
    while position < batches.len() {
        let corrupt = |reason: String, skip_to: i64| ClientError::CorruptBatch {
            topic: topic.to_string(),
            partition,
            offset: expected,
            skip_to,
            reason,
        };
        let view = match BatchView::split_first(&batches[position..]) {
            Ok((view, _)) => view,
            // The framing is broken: skip to after the offsets its header names,
            // when it names any past this one.
            Err(error) => {
                let skip_to = header_last_offset(&batches[position..]).map_or(expected + 1, |last| last + 1);
                return (records, Some(corrupt(error.to_string(), skip_to.max(expected + 1))));
            }
        };
        let batch_start = position;
        position += view.size_bytes();
        if view.last_offset() < offset || view.attributes().is_control() {
            expected = expected.max(view.last_offset() + 1);
            continue;
        }
        let skip_to = view.last_offset().saturating_add(1).max(expected + 1);
        let decoded = decode_batch(topic, partition, offset, batches, batch_start, &view);
        match decoded {
            Ok(batch_records) => records.extend(batch_records),
            Err(error) => return (records, Some(corrupt(error.to_string(), skip_to))),
        }
        expected = expected.max(view.last_offset() + 1);
    }
    (records, None)
}

/// The last offset a batch header claims (base offset + last offset delta), read
/// without trusting the batch length; `None` when the header is cut short or the
/// delta is implausible.
fn header_last_offset(bytes: &[u8]) -> Option<i64> {
    use abi::batch::field;
    let base = i64::from_be_bytes(bytes.get(field::BASE_OFFSET..field::BASE_OFFSET + 8)?.try_into().ok()?);
    let delta = field::LAST_OFFSET_DELTA;
    let delta = i32::from_be_bytes(bytes.get(delta..delta + 4)?.try_into().ok()?);
    // A damaged header may claim anything: trust only a plausible batch span.
    (0..=1_000_000).contains(&delta).then(|| base.checked_add(i64::from(delta))).flatten()
}

/// The records at or after `offset` of one batch, all or nothing.
fn decode_batch(
    topic: &Arc<str>,
    partition: i32,
    offset: i64,
    batches: &Bytes,
    batch_start: usize,
    view: &BatchView<'_>,
) -> Result<Vec<ConsumerRecord>, abi::batch::BatchError> {
    let section = records_section(view, DECOMPRESSED_BYTES_MAX)?;
    // `buffer`: the one allocation the records point into, as wide as it is
    // (the whole fetched answer, unless the batch was decompressed).
    let (section_bytes, buffer) = match section {
        std::borrow::Cow::Borrowed(slice) => {
            let start = batch_start + (slice.as_ptr() as usize - batches[batch_start..].as_ptr() as usize);
            (batches.slice(start..start + slice.len()), batches.clone())
        }
        std::borrow::Cow::Owned(decompressed) => {
            let decompressed = Bytes::from(decompressed);
            (decompressed.clone(), decompressed)
        }
    };
    let records_count = usize::try_from(view.records_count()).unwrap_or(0);
    let mut records = Vec::with_capacity(records_count);
    let mut previous_delta = -1i64;
    for record in RecordRefs::new(&section_bytes, records_count) {
        let record = record?;
        // Offsets only grow inside a batch, and never past its last offset: a
        // record breaking that would be handed out at a wrong or repeated offset.
        let delta = i64::from(record.offset_delta);
        if delta <= previous_delta || delta > i64::from(view.last_offset_delta()) {
            return Err(abi::batch::BatchError::Malformed { reason: "record offset deltas are not increasing" });
        }
        previous_delta = delta;
        let record_offset = view.base_offset() + delta;
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
            buffer: buffer.clone(),
        });
    }
    Ok(records)
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
    cluster
        .bounded_call("list offset", &connection, move |client: broker::Client| async move {
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

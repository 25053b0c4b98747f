//! [`OrderedProducer`]: a producer whose sends never block the caller yet
//! keep call order (for event loops: asyncio, Node), and the settling of many
//! deliveries in one wait.
//!
//! Sends go through one task per producer, in call order. Their outcomes reach
//! the caller through a completion queue ([`OrderedProducer::send_nowait`]) or
//! as a future to await on any runtime ([`OrderedProducer::send_all`]). The
//! queue in front of the task holds the records the producer's buffer has not
//! taken yet; `send_nowait` bounds it by the producer's `buffer.memory` in
//! bytes (one record more when it is empty): past it, it refuses and
//! [`OrderedProducer::room_nowait`] tells the caller when to try again.

use std::future::Future;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use client::{ClientError, DeliveryFuture, Producer, ProducerConfig, ProducerRecord, RecordMetadata, RecordRef};
use tokio::sync::{mpsc, oneshot};

use crate::completion::{Completion, Sink};
use crate::error::Error;
use crate::runtime;

/// Records packed by a binding into one buffer: each key, value, header key
/// and header value is a range of `data`. Sent with
/// [`OrderedProducer::send_packed`], they cost no allocation or copy per record
/// before the producer's batch (where [`OrderedProducer::send_all`]'s owned
/// records cost one of each per key, value and topic name).
#[derive(Debug, Default)]
pub struct Packed {
    /// What the ranges point into: any owner's bytes (`Bytes::from_owner`),
    /// so a binding can hand over its own buffer uncopied.
    pub data: Bytes,
    pub topics: Vec<String>,
    pub records: Vec<PackedRecord>,
    pub headers: Vec<PackedHeader>,
}

/// One record of a [`Packed`] set.
#[derive(Clone, Debug)]
pub struct PackedRecord {
    /// A position in [`Packed::topics`].
    pub topic: usize,
    pub partition: Option<i32>,
    pub key: Option<Range<usize>>,
    pub value: Option<Range<usize>>,
    /// Positions in [`Packed::headers`].
    pub headers: Range<usize>,
    pub timestamp_ms: Option<i64>,
}

/// One header of a [`Packed`] set: its key is UTF-8.
#[derive(Clone, Debug)]
pub struct PackedHeader {
    pub key: Range<usize>,
    pub value: Option<Range<usize>>,
}

impl Packed {
    /// Checks every range, position and header key, so sending cannot fail on them.
    pub fn validate(&self) -> Result<(), String> {
        let fits = |range: &Option<Range<usize>>| {
            range.as_ref().is_none_or(|range| range.start <= range.end && range.end <= self.data.len())
        };
        for header in &self.headers {
            if !fits(&Some(header.key.clone())) || !fits(&header.value) {
                return Err("a header span past the data".to_owned());
            }
            if std::str::from_utf8(&self.data[header.key.clone()]).is_err() {
                return Err("a header key that is not UTF-8".to_owned());
            }
        }
        for record in &self.records {
            if record.topic >= self.topics.len() {
                return Err("an unknown topic position".to_owned());
            }
            if !fits(&record.key) || !fits(&record.value) {
                return Err("a span past the data".to_owned());
            }
            if record.headers.start > record.headers.end || record.headers.end > self.headers.len() {
                return Err("headers past the header index".to_owned());
            }
        }
        Ok(())
    }

    /// Record `index`, borrowed (its headers are put in `headers`).
    fn record<'a>(&'a self, index: usize, headers: &'a mut Vec<(&'a str, Option<&'a [u8]>)>) -> RecordRef<'a> {
        let record = &self.records[index];
        let bytes = |range: &Option<Range<usize>>| range.clone().map(|range| &self.data[range]);
        headers.extend(self.headers[record.headers.clone()].iter().map(|header| {
            // Checked by `validate`, which `send_packed` runs first.
            let key = std::str::from_utf8(&self.data[header.key.clone()]).unwrap_or_default();
            (key, bytes(&header.value))
        }));
        RecordRef {
            topic: &self.topics[record.topic],
            partition: record.partition,
            key: bytes(&record.key),
            value: bytes(&record.value),
            headers,
            timestamp_ms: record.timestamp_ms,
        }
    }
}

/// Work for the ordered task.
enum Job {
    Send(ProducerRecord, Arc<Sink>, u64),
    SendAll(Vec<ProducerRecord>, oneshot::Sender<Vec<Result<RecordMetadata, Error>>>),
    SendPacked(Packed, oneshot::Sender<Vec<Result<RecordMetadata, Error>>>),
    Flush(Done),
    Close(Done),
}

/// Where a flush or close reports that it is done.
enum Done {
    Queue(Arc<Sink>, u64),
    Channel(oneshot::Sender<()>),
}

impl Done {
    fn finish(self) {
        match self {
            Done::Queue(sink, token) => sink.push(token, Completion::Unit),
            Done::Channel(sender) => {
                let _ = sender.send(());
            }
        }
    }
}

/// See the module docs.
pub struct OrderedProducer {
    inner: Producer,
    jobs: Mutex<Option<mpsc::UnboundedSender<Job>>>,
    /// Bytes of records in the queue, not yet in the producer's buffer.
    queued: Arc<QueuedBytes>,
}

struct QueuedBytes {
    limit: usize,
    state: Mutex<Queued>,
}

#[derive(Default)]
struct Queued {
    bytes: usize,
    /// Completions to deliver when room frees up.
    waiters: Vec<(Arc<Sink>, u64)>,
}

impl QueuedBytes {
    /// Counts `bytes` in, unless that would pass the limit.
    fn try_add(&self, bytes: usize) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.bytes > 0 && state.bytes + bytes > self.limit {
            return false;
        }
        state.bytes += bytes;
        true
    }

    fn release(&self, bytes: usize) {
        let waiters = {
            let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            state.bytes -= bytes;
            std::mem::take(&mut state.waiters)
        };
        for (sink, token) in waiters {
            sink.push(token, Completion::Unit);
        }
    }

    fn wait_for_room(&self, sink: Arc<Sink>, token: u64) {
        let mut state = self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if state.bytes == 0 {
            drop(state);
            sink.push(token, Completion::Unit);
        } else {
            state.waiters.push((sink, token));
        }
    }
}

/// What a record holds in the queue.
fn record_bytes(record: &ProducerRecord) -> usize {
    let headers: usize =
        record.headers.iter().map(|(key, value)| key.len() + value.as_ref().map_or(0, |value| value.len())).sum();
    record.key.as_ref().map_or(0, |key| key.len()) + record.value.as_ref().map_or(0, |value| value.len()) + headers + 64
}

impl OrderedProducer {
    /// A producer with `config` (its tasks run on the process's runtime).
    pub fn new(config: ProducerConfig) -> Result<OrderedProducer, Error> {
        let limit = config.buffer_bytes_max;
        let inner = runtime::within(|| Producer::new(config))??;
        let queued = Arc::new(QueuedBytes { limit, state: Mutex::new(Queued::default()) });
        Ok(OrderedProducer { inner, jobs: Mutex::new(None), queued })
    }

    /// The client core's producer, for calls a binding waits for itself.
    pub fn producer(&self) -> &Producer {
        &self.inner
    }

    fn submit(&self, job: Job) -> Result<(), Error> {
        // A task of a parent process does not run after fork(): refuse.
        runtime::check()?;
        let mut jobs = self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let sender = match &*jobs {
            Some(sender) => sender.clone(),
            None => {
                let (sender, receiver) = mpsc::unbounded_channel();
                runtime::spawn(run(self.inner.clone(), receiver, self.queued.clone()))?;
                jobs.insert(sender).clone()
            }
        };
        sender.send(job).map_err(|_| Error::from(ClientError::Closed))
    }

    /// Queues `record` behind earlier sends; its acknowledgement (or refusal)
    /// arrives under `token`. `false`, queueing nothing, while the queue holds
    /// `buffer.memory` bytes: wait with [`OrderedProducer::room_nowait`].
    pub fn send_nowait(&self, record: ProducerRecord, sink: &Arc<Sink>, token: u64) -> Result<bool, Error> {
        let bytes = record_bytes(&record);
        if !self.queued.try_add(bytes) {
            return Ok(false);
        }
        if let Err(error) = self.submit(Job::Send(record, sink.clone(), token)) {
            self.queued.release(bytes);
            return Err(error);
        }
        Ok(true)
    }

    /// `Completion::Unit` under `token` once `send_nowait` may take a record
    /// again (at once when the queue is empty).
    pub fn room_nowait(&self, sink: &Arc<Sink>, token: u64) {
        self.queued.wait_for_room(sink.clone(), token);
    }

    /// Bytes queued and not yet taken by the producer (a diagnostic).
    pub fn queued_bytes(&self) -> usize {
        self.queued.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).bytes
    }

    /// Done under `token` after everything sent before it is acknowledged.
    pub fn flush_nowait(&self, sink: &Arc<Sink>, token: u64) -> Result<(), Error> {
        self.submit(Job::Flush(Done::Queue(sink.clone(), token)))
    }

    /// Flushes, then refuses further sends; done under `token`.
    pub fn close_nowait(&self, sink: &Arc<Sink>, token: u64) -> Result<(), Error> {
        self.submit(Job::Close(Done::Queue(sink.clone(), token)))
    }

    /// Queues `records` behind earlier sends, now (so calls keep their order
    /// whenever their futures are awaited), not bounded by `buffer.memory`;
    /// the future gives one outcome per record, in order, once all are
    /// acknowledged or refused. Records after one the producer refused are
    /// not sent (their outcome carries the refusal's code).
    pub fn send_all(
        &self,
        records: Vec<ProducerRecord>,
    ) -> Result<impl Future<Output = Vec<Result<RecordMetadata, Error>>> + Send + 'static, Error> {
        self.call(records.len(), |reply| Job::SendAll(records, reply))
    }

    /// [`OrderedProducer::send_all`] of records packed in one buffer (refused
    /// at once, sending nothing, when a range or position is out of bounds).
    pub fn send_packed(
        &self,
        packed: Packed,
    ) -> Result<impl Future<Output = Vec<Result<RecordMetadata, Error>>> + Send + 'static, Error> {
        packed.validate().map_err(|reason| {
            Error::new(client::ErrorCode::InvalidRequest, format!("malformed packed records: {reason}"))
        })?;
        self.call(packed.records.len(), |reply| Job::SendPacked(packed, reply))
    }

    /// Submits the job `job` makes of a reply channel for `count` outcomes;
    /// the future gives them (all `Closed` if the producer task is gone).
    fn call(
        &self,
        count: usize,
        job: impl FnOnce(oneshot::Sender<Vec<Result<RecordMetadata, Error>>>) -> Job,
    ) -> Result<impl Future<Output = Vec<Result<RecordMetadata, Error>>> + Send + 'static, Error> {
        let (sender, receiver) = oneshot::channel();
        self.submit(job(sender))?;
        Ok(async move {
            receiver.await.unwrap_or_else(|_| (0..count).map(|_| Err(Error::from(ClientError::Closed))).collect())
        })
    }

    /// A future done once everything queued before this call is acknowledged.
    pub fn flush(&self) -> Result<impl Future<Output = ()> + Send + 'static, Error> {
        let (sender, receiver) = oneshot::channel();
        self.submit(Job::Flush(Done::Channel(sender)))?;
        Ok(async move {
            let _ = receiver.await;
        })
    }

    /// Flushes, then refuses further sends; the future is done after both.
    pub fn close(&self) -> Result<impl Future<Output = ()> + Send + 'static, Error> {
        let (sender, receiver) = oneshot::channel();
        self.submit(Job::Close(Done::Channel(sender)))?;
        Ok(async move {
            let _ = receiver.await;
        })
    }
}

async fn run(producer: Producer, mut jobs: mpsc::UnboundedReceiver<Job>, queued: Arc<QueuedBytes>) {
    while let Some(job) = jobs.recv().await {
        match job {
            Job::Send(record, sink, token) => {
                let bytes = record_bytes(&record);
                let sent = producer.send(record).await;
                queued.release(bytes);
                match sent {
                    Ok(delivery) => {
                        tokio::spawn(async move { sink.push(token, delivered(delivery.wait().await)) });
                    }
                    Err(error) => sink.push(token, Completion::Error(error.into())),
                }
            }
            Job::SendAll(records, done) => {
                let mut deliveries = Deliveries::with_capacity(records.len());
                for record in records {
                    deliveries.offer(|| producer.send(record)).await;
                }
                deliveries.settle(done);
            }
            Job::SendPacked(packed, done) => {
                let mut deliveries = Deliveries::with_capacity(packed.records.len());
                for index in 0..packed.records.len() {
                    // Allocates only for a record with headers.
                    let mut headers = Vec::new();
                    deliveries.offer(|| producer.send_ref(packed.record(index, &mut headers))).await;
                }
                // Every record is in a batch: the binding's buffer is let go
                // before the call settles, so it may reuse it once it has.
                drop(packed);
                deliveries.settle(done);
            }
            Job::Flush(done) => {
                producer.flush().await;
                done.finish();
            }
            Job::Close(done) => {
                producer.close().await;
                done.finish();
            }
        }
    }
}

/// The deliveries of one call, in order. After a refusal the rest are not
/// sent (their outcome says so): the caller knows exactly which records were
/// written.
struct Deliveries {
    deliveries: Vec<Result<DeliveryFuture, Error>>,
    refused: Option<Error>,
}

impl Deliveries {
    fn with_capacity(count: usize) -> Deliveries {
        Deliveries { deliveries: Vec::with_capacity(count), refused: None }
    }

    /// Sends the next record of the call with `send`, unless an earlier one
    /// was refused: then it is not sent, and its outcome says why.
    async fn offer<F>(&mut self, send: impl FnOnce() -> F)
    where
        F: Future<Output = Result<DeliveryFuture, ClientError>>,
    {
        let outcome = match &self.refused {
            Some(first) => Err(Error {
                message: format!("not sent: an earlier record of the call was refused ({})", first.message),
                ..first.clone()
            }),
            None => send().await.map_err(Error::from),
        };
        if let (None, Err(error)) = (&self.refused, &outcome) {
            self.refused = Some(error.clone());
        }
        self.deliveries.push(outcome);
    }

    /// Sends every outcome to `done` once all are acknowledged or refused.
    fn settle(self, done: oneshot::Sender<Vec<Result<RecordMetadata, Error>>>) {
        tokio::spawn(async move {
            let mut outcomes = Vec::with_capacity(self.deliveries.len());
            for delivery in self.deliveries {
                outcomes.push(match delivery {
                    Ok(delivery) => delivery.wait().await.map_err(Error::from),
                    Err(error) => Err(error),
                });
            }
            let _ = done.send(outcomes);
        });
    }
}

/// A producer acknowledgement as a completion.
pub fn delivered(outcome: Result<RecordMetadata, ClientError>) -> Completion {
    match outcome {
        Ok(metadata) => Completion::Metadata(metadata),
        Err(error) => Completion::Error(error.into()),
    }
}

/// Waits for every delivery, in order: one outcome per record.
pub async fn settle(deliveries: Vec<DeliveryFuture>) -> Vec<Result<RecordMetadata, Error>> {
    let mut outcomes = Vec::with_capacity(deliveries.len());
    for delivery in deliveries {
        outcomes.push(delivery.wait().await.map_err(Error::from));
    }
    outcomes
}

impl std::fmt::Debug for OrderedProducer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("OrderedProducer").field("queued_bytes", &self.queued_bytes()).finish_non_exhaustive()
    }
}

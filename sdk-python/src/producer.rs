//! `weir._native.Producer` and the ways to wait for its acknowledgements: a
//! completion-queue entry per record (`produce` futures and `weir.aio`), or one
//! `DeliveryBatch` per `send_many` call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::IntoPyObjectExt;
use tokio::sync::mpsc;

use crate::completion::{self, Completion, CompletionQueue, Sink};
use crate::{block, metadata_tuple, raise, runtime, settings, to_py_err, Metadata};

type Headers = Option<Vec<(String, Option<Vec<u8>>)>>;

/// Work for the ordered task of `weir.aio`: sends stay in call order without
/// blocking the event loop.
enum Job {
    Send(client::ProducerRecord, Arc<Sink>, u64),
    Flush(Arc<Sink>, u64),
    Close(Arc<Sink>, u64),
}

#[pyclass(module = "weir._native")]
pub(crate) struct Producer {
    inner: client::Producer,
    ordered: Mutex<Option<mpsc::UnboundedSender<Job>>>,
    /// Bytes of records in the ordered queue, not yet in the producer's buffer.
    queued: Arc<QueuedBytes>,
}

/// The ordered queue's bound: records wait in it only until the producer's own
/// buffer takes them, and it holds at most `buffer.memory` bytes of them (one
/// record more when it is empty), so `weir.aio` sends past that wait for room
/// instead of piling up.
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

    /// Completes `token` when the next queued record leaves the queue (at once if
    /// it is empty), so a refused send tries again only after room was freed.
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

/// What a record holds in the ordered queue.
fn record_bytes(record: &client::ProducerRecord) -> usize {
    let headers: usize =
        record.headers.iter().map(|(key, value)| key.len() + value.as_ref().map_or(0, |value| value.len())).sum();
    record.key.as_ref().map_or(0, |key| key.len()) + record.value.as_ref().map_or(0, |value| value.len()) + headers + 64
}

impl Producer {
    fn ordered(&self, job: Job) -> PyResult<()> {
        let mut ordered = self.ordered.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let sender = match &*ordered {
            Some(sender) => sender.clone(),
            None => {
                let (sender, jobs) = mpsc::unbounded_channel();
                runtime()?.spawn(run_ordered(self.inner.clone(), jobs, self.queued.clone()));
                ordered.insert(sender).clone()
            }
        };
        sender.send(job).map_err(|_| PyRuntimeError::new_err("the producer's send task stopped"))
    }
}

async fn run_ordered(producer: client::Producer, mut jobs: mpsc::UnboundedReceiver<Job>, queued: Arc<QueuedBytes>) {
    while let Some(job) = jobs.recv().await {
        match job {
            Job::Send(record, sink, token) => {
                let bytes = record_bytes(&record);
                let sent = producer.send(record).await;
                queued.release(bytes);
                match sent {
                    Ok(delivery) => {
                        tokio::spawn(
                            async move { sink.push(token, completion::delivered(delivery.wait().await).into()) },
                        );
                    }
                    Err(error) => sink.push(token, Err(error).into()),
                }
            }
            Job::Flush(sink, token) => {
                producer.flush().await;
                sink.push(token, Completion::Unit);
            }
            Job::Close(sink, token) => {
                producer.close().await;
                sink.push(token, Completion::Unit);
            }
        }
    }
}

fn record(
    topic: String,
    value: Option<&[u8]>,
    key: Option<&[u8]>,
    headers: Headers,
    partition: Option<i32>,
    timestamp_ms: Option<i64>,
) -> client::ProducerRecord {
    client::ProducerRecord {
        topic,
        partition,
        key: key.map(<[u8]>::to_vec),
        value: value.map(<[u8]>::to_vec),
        headers: headers.unwrap_or_default(),
        timestamp_ms,
    }
}

#[pymethods]
impl Producer {
    #[new]
    #[pyo3(signature = (bootstrap_servers, config=None))]
    fn new(py: Python<'_>, bootstrap_servers: &str, config: Option<HashMap<String, String>>) -> PyResult<Producer> {
        let config = client::ProducerConfig::from_map(&settings(bootstrap_servers, config))
            .map_err(|error| to_py_err(py, error))?;
        let _context = runtime()?.enter();
        let limit = config.buffer_bytes_max;
        let inner = client::Producer::new(config).map_err(|error| to_py_err(py, error))?;
        let queued = Arc::new(QueuedBytes { limit, state: Mutex::new(Queued::default()) });
        Ok(Producer { inner, ordered: Mutex::new(None), queued })
    }

    /// Queues a record (waiting while the buffer is full); its acknowledgement
    /// arrives in `queue` under `token`.
    #[allow(clippy::too_many_arguments)] // mirrors the Python keyword arguments
    #[pyo3(signature = (queue, token, topic, value, key=None, headers=None, partition=None, timestamp_ms=None))]
    fn send(
        &self,
        py: Python<'_>,
        queue: PyRef<'_, CompletionQueue>,
        token: u64,
        topic: String,
        value: Option<&[u8]>,
        key: Option<&[u8]>,
        headers: Headers,
        partition: Option<i32>,
        timestamp_ms: Option<i64>,
    ) -> PyResult<()> {
        let record = record(topic, value, key, headers, partition, timestamp_ms);
        let producer = self.inner.clone();
        let delivery = block(py, async move { producer.send(record).await })?;
        completion::spawn(&queue.sink, token, async move { completion::delivered(delivery.wait().await) })
    }

    /// Like `send` without ever blocking (for asyncio): the record is queued
    /// behind earlier `send_nowait` calls, and a refusal (unknown topic, …)
    /// also arrives in `queue`. Returns false, queueing nothing, when the queue
    /// holds `buffer.memory` bytes already: wait with `room_nowait`, then retry.
    #[allow(clippy::too_many_arguments)] // mirrors the Python keyword arguments
    #[pyo3(signature = (queue, token, topic, value, key=None, headers=None, partition=None, timestamp_ms=None))]
    fn send_nowait(
        &self,
        queue: PyRef<'_, CompletionQueue>,
        token: u64,
        topic: String,
        value: Option<&[u8]>,
        key: Option<&[u8]>,
        headers: Headers,
        partition: Option<i32>,
        timestamp_ms: Option<i64>,
    ) -> PyResult<bool> {
        let record = record(topic, value, key, headers, partition, timestamp_ms);
        if !self.queued.try_add(record_bytes(&record)) {
            return Ok(false);
        }
        self.ordered(Job::Send(record, queue.sink.clone(), token))?;
        Ok(true)
    }

    /// Bytes of records `send_nowait` queued that the producer has not taken yet
    /// (a diagnostic: at most `buffer.memory`, or one record).
    fn queued_bytes(&self) -> usize {
        self.queued.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).bytes
    }

    /// Done (in `queue`) once `send_nowait` may take a record again.
    fn room_nowait(&self, queue: PyRef<'_, CompletionQueue>, token: u64) {
        self.queued.wait_for_room(queue.sink.clone(), token);
    }

    /// Queues many records of one topic in one call; `keys`, when given, pairs
    /// with `values`. The bytes are read in place (no copy before the batch),
    /// and one `DeliveryBatch` stands for all the acknowledgements.
    #[pyo3(signature = (topic, values, keys=None, partition=None))]
    fn send_many(
        &self,
        py: Python<'_>,
        topic: String,
        values: Vec<Option<Bound<'_, PyBytes>>>,
        keys: Option<Vec<Option<Bound<'_, PyBytes>>>>,
        partition: Option<i32>,
    ) -> PyResult<DeliveryBatch> {
        if keys.as_ref().is_some_and(|keys| keys.len() != values.len()) {
            return Err(PyValueError::new_err("keys and values must have the same length"));
        }
        // Borrowed: `values` and `keys` keep the (immutable) bytes objects alive
        // for the whole call, GIL or not.
        let values: Vec<Option<&[u8]>> =
            values.iter().map(|bytes| bytes.as_ref().map(|bytes| bytes.as_bytes())).collect();
        let keys: Vec<Option<&[u8]>> = match &keys {
            Some(keys) => keys.iter().map(|bytes| bytes.as_ref().map(|bytes| bytes.as_bytes())).collect(),
            None => vec![None; values.len()],
        };
        let producer = self.inner.clone();
        let records = keys.into_iter().zip(values);
        let futures = block(py, async move { producer.send_many(&topic, partition, records).await })?;
        Ok(DeliveryBatch { futures: Mutex::new(Some(futures)), outcomes: Mutex::new(None) })
    }

    /// Sends everything buffered and waits for every acknowledgement.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let producer = self.inner.clone();
        block(py, async move {
            producer.flush().await;
            Ok(())
        })
    }

    /// `flush` for asyncio: done (in `queue`) after everything sent before it.
    fn flush_nowait(&self, queue: PyRef<'_, CompletionQueue>, token: u64) -> PyResult<()> {
        self.ordered(Job::Flush(queue.sink.clone(), token))
    }

    /// Flushes, then refuses further sends.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let producer = self.inner.clone();
        block(py, async move {
            producer.close().await;
            Ok(())
        })
    }

    /// `close` for asyncio.
    fn close_nowait(&self, queue: PyRef<'_, CompletionQueue>, token: u64) -> PyResult<()> {
        self.ordered(Job::Close(queue.sink.clone(), token))
    }
}

type Outcome = Result<Metadata, (u16, String)>;

/// The acknowledgements of one `send_many` call: one Python object for all of
/// them (thousands of per-record objects would keep the cyclic GC busy).
#[pyclass(module = "weir._native")]
pub(crate) struct DeliveryBatch {
    futures: Mutex<Option<Vec<client::DeliveryFuture>>>,
    outcomes: Mutex<Option<std::sync::Arc<Vec<Outcome>>>>,
}

impl DeliveryBatch {
    /// Waits for every acknowledgement once; later calls reuse the outcomes.
    fn settle(&self, py: Python<'_>) -> PyResult<std::sync::Arc<Vec<Outcome>>> {
        if let Some(outcomes) = &*self.outcomes.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) {
            return Ok(outcomes.clone());
        }
        let Some(futures) = self.futures.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take() else {
            return Err(PyRuntimeError::new_err("another thread is waiting for these deliveries"));
        };
        let outcomes = block(py, async move {
            let mut outcomes = Vec::with_capacity(futures.len());
            for future in futures {
                outcomes.push(match future.wait().await {
                    Ok(metadata) => Ok(metadata_tuple(&metadata)),
                    Err(error) => Err((error.code().as_u16(), error.to_string())),
                });
            }
            Ok(std::sync::Arc::new(outcomes))
        })?;
        *self.outcomes.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(outcomes.clone());
        Ok(outcomes)
    }
}

#[pymethods]
impl DeliveryBatch {
    fn __len__(&self) -> usize {
        let outcomes = self.outcomes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        match &*outcomes {
            Some(outcomes) => outcomes.len(),
            None => self.futures.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).as_ref().map_or(0, Vec::len),
        }
    }

    /// Waits for all; raises the first failure. Makes no per-record objects.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        match self.settle(py)?.iter().find_map(|outcome| outcome.as_ref().err()) {
            Some((code, message)) => Err(raise(py, *code, message.clone())),
            None => Ok(()),
        }
    }

    /// Waits for all; one `(topic, partition, offset, timestamp)` tuple or
    /// exception object per record, in order.
    fn outcomes(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let outcomes = self.settle(py)?;
        outcomes
            .iter()
            .map(|outcome| match outcome {
                Ok(metadata) => metadata.clone().into_py_any(py),
                Err((code, message)) => Ok(raise(py, *code, message.clone()).into_value(py).into_any()),
            })
            .collect()
    }
}

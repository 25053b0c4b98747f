//! `weir._native.Producer` and the ways to wait for its acknowledgements: a
//! `Delivery` per record (`produce_many`), a completion-queue entry (`produce`
//! futures and `weir.aio`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::ClientError;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tokio::sync::mpsc;

use crate::completion::{self, Completion, CompletionQueue, Sink};
use crate::{block, metadata_tuple, raise, runtime, settings, to_py_err, Metadata};

type Headers = Option<Vec<(String, Option<Vec<u8>>)>>;

/// A record's pending acknowledgement.
#[pyclass(module = "weir._native")]
pub(crate) struct Delivery {
    future: Mutex<Option<client::DeliveryFuture>>,
    outcome: Mutex<Option<Result<Metadata, (u16, String)>>>,
}

impl Delivery {
    fn new(future: client::DeliveryFuture) -> Delivery {
        Delivery { future: Mutex::new(Some(future)), outcome: Mutex::new(None) }
    }
}

#[pymethods]
impl Delivery {
    /// Waits for the acknowledgement (at most `timeout` seconds; `None` waits as
    /// long as the producer's delivery timeout allows).
    #[pyo3(signature = (timeout=None))]
    fn result(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Metadata> {
        if let Some(outcome) = self.outcome.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone() {
            return outcome.map_err(|(code, message)| raise(py, code, message));
        }
        let Some(future) = self.future.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take() else {
            return Err(PyRuntimeError::new_err("another thread is waiting for this delivery"));
        };
        let wait = async move {
            match timeout {
                Some(seconds) => {
                    tokio::time::timeout(Duration::from_secs_f64(seconds.max(0.0)), future.wait()).await.unwrap_or(Err(
                        ClientError::Timeout { operation: "delivery", timeout_ms: (seconds * 1000.0) as u64 },
                    ))
                }
                None => future.wait().await,
            }
        };
        let outcome = block(py, wait).map(|metadata| metadata_tuple(&metadata));
        let stored = match &outcome {
            Ok(metadata) => Ok(metadata.clone()),
            Err(error) => Err(error_parts(py, error)),
        };
        *self.outcome.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(stored);
        outcome
    }
}

fn error_parts(py: Python<'_>, error: &PyErr) -> (u16, String) {
    let code = error.value(py).getattr("code").and_then(|code| code.extract::<u16>()).unwrap_or(1);
    (code, error.value(py).to_string())
}

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
}

impl Producer {
    fn ordered(&self, job: Job) -> PyResult<()> {
        let mut ordered = self.ordered.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let sender = match &*ordered {
            Some(sender) => sender.clone(),
            None => {
                let (sender, jobs) = mpsc::unbounded_channel();
                runtime()?.spawn(run_ordered(self.inner.clone(), jobs));
                ordered.insert(sender).clone()
            }
        };
        sender.send(job).map_err(|_| PyRuntimeError::new_err("the producer's send task stopped"))
    }
}

async fn run_ordered(producer: client::Producer, mut jobs: mpsc::UnboundedReceiver<Job>) {
    while let Some(job) = jobs.recv().await {
        match job {
            Job::Send(record, sink, token) => match producer.send(record).await {
                Ok(delivery) => {
                    tokio::spawn(async move { sink.push(token, completion::delivered(delivery.wait().await).into()) });
                }
                Err(error) => sink.push(token, Err(error).into()),
            },
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
        let inner = client::Producer::new(config).map_err(|error| to_py_err(py, error))?;
        Ok(Producer { inner, ordered: Mutex::new(None) })
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
    /// also arrives in `queue`.
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
    ) -> PyResult<()> {
        let record = record(topic, value, key, headers, partition, timestamp_ms);
        self.ordered(Job::Send(record, queue.sink.clone(), token))
    }

    /// Queues many records of one topic in one call (one GIL release for all);
    /// returns one `Delivery` each. `keys`, when given, pairs with `values`.
    #[pyo3(signature = (topic, values, keys=None, partition=None))]
    fn send_many(
        &self,
        py: Python<'_>,
        topic: String,
        values: Vec<Option<Bound<'_, PyBytes>>>,
        keys: Option<Vec<Option<Bound<'_, PyBytes>>>>,
        partition: Option<i32>,
    ) -> PyResult<Vec<Delivery>> {
        if keys.as_ref().is_some_and(|keys| keys.len() != values.len()) {
            return Err(PyValueError::new_err("keys and values must have the same length"));
        }
        // bytes → Vec<u8> by memcpy (extracting Vec<u8> directly goes element by element).
        let owned = |bytes: Option<Bound<'_, PyBytes>>| bytes.map(|bytes| bytes.as_bytes().to_vec());
        let values: Vec<Option<Vec<u8>>> = values.into_iter().map(owned).collect();
        let keys: Option<Vec<Option<Vec<u8>>>> = keys.map(|keys| keys.into_iter().map(owned).collect());
        let producer = self.inner.clone();
        let futures = block(py, async move {
            let mut keys = keys.map(Vec::into_iter);
            let mut futures = Vec::with_capacity(values.len());
            for value in values {
                let key = keys.as_mut().and_then(Iterator::next).flatten();
                let record =
                    client::ProducerRecord { topic: topic.clone(), partition, key, value, ..Default::default() };
                futures.push(producer.send(record).await?);
            }
            Ok(futures)
        })?;
        Ok(futures.into_iter().map(Delivery::new).collect())
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

/// Waits for many deliveries in one call (one GIL release); returns their
/// metadata in order, or raises the first failure.
#[pyfunction]
pub(crate) fn wait_all(py: Python<'_>, deliveries: Vec<PyRef<'_, Delivery>>) -> PyResult<Vec<Metadata>> {
    let mut futures = Vec::with_capacity(deliveries.len());
    for delivery in &deliveries {
        match delivery.future.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take() {
            Some(future) => futures.push(future),
            None => return Err(PyRuntimeError::new_err("a delivery was already waited for")),
        }
    }
    block(py, async move {
        let mut results = Vec::with_capacity(futures.len());
        for future in futures {
            results.push(metadata_tuple(&future.wait().await?));
        }
        Ok(results)
    })
}

//! `weir._native.Producer` and the ways to wait for its acknowledgements: a
//! completion-queue entry per record (`produce` futures and `weir.aio`), or one
//! `DeliveryBatch` per `send_many` call.

use std::collections::HashMap;
use std::sync::Mutex;

use client_ffi::OrderedProducer;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::IntoPyObjectExt;

use crate::completion::CompletionQueue;
use crate::{block, ffi_err, metadata_tuple, raise, settings, to_py_err, Metadata};

type Headers = Option<Vec<(String, Option<Vec<u8>>)>>;

/// A producer; `weir.aio`'s sends go through `client_ffi`'s ordered queue.
#[pyclass(module = "weir._native")]
pub(crate) struct Producer {
    inner: OrderedProducer,
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
        Ok(Producer { inner: OrderedProducer::new(config).map_err(|error| ffi_err(py, error))? })
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
        let producer = self.inner.producer().clone();
        let delivery = block(py, async move { producer.send(record).await })?;
        let delivered =
            async move { Ok::<_, client_ffi::Error>(client_ffi::ordered::delivered(delivery.wait().await)) };
        queue.queue.sink().spawn(token, delivered).map_err(|error| ffi_err(py, error))
    }

    /// Like `send` without ever blocking (for asyncio): the record is queued
    /// behind earlier `send_nowait` calls, and a refusal (unknown topic, …)
    /// also arrives in `queue`. Returns false, queueing nothing, when the queue
    /// holds `buffer.memory` bytes already: wait with `room_nowait`, then retry.
    #[allow(clippy::too_many_arguments)] // mirrors the Python keyword arguments
    #[pyo3(signature = (queue, token, topic, value, key=None, headers=None, partition=None, timestamp_ms=None))]
    fn send_nowait(
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
    ) -> PyResult<bool> {
        let record = record(topic, value, key, headers, partition, timestamp_ms);
        self.inner.send_nowait(record, queue.queue.sink(), token).map_err(|error| ffi_err(py, error))
    }

    /// Bytes of records `send_nowait` queued that the producer has not taken yet
    /// (a diagnostic: at most `buffer.memory`, or one record).
    fn queued_bytes(&self) -> usize {
        self.inner.queued_bytes()
    }

    /// Done (in `queue`) once `send_nowait` may take a record again.
    fn room_nowait(&self, queue: PyRef<'_, CompletionQueue>, token: u64) {
        self.inner.room_nowait(queue.queue.sink(), token);
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
        let producer = self.inner.producer().clone();
        let records = keys.into_iter().zip(values);
        let futures = block(py, async move { producer.send_many(&topic, partition, records).await })?;
        Ok(DeliveryBatch { futures: Mutex::new(Some(futures)), outcomes: Mutex::new(None) })
    }

    /// Sends everything buffered and waits for every acknowledgement.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let producer = self.inner.producer().clone();
        block(py, async move {
            producer.flush().await;
            Ok(())
        })
    }

    /// `flush` for asyncio: done (in `queue`) after everything sent before it.
    fn flush_nowait(&self, py: Python<'_>, queue: PyRef<'_, CompletionQueue>, token: u64) -> PyResult<()> {
        self.inner.flush_nowait(queue.queue.sink(), token).map_err(|error| ffi_err(py, error))
    }

    /// Flushes, then refuses further sends.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let producer = self.inner.producer().clone();
        block(py, async move {
            producer.close().await;
            Ok(())
        })
    }

    /// `close` for asyncio.
    fn close_nowait(&self, py: Python<'_>, queue: PyRef<'_, CompletionQueue>, token: u64) -> PyResult<()> {
        self.inner.close_nowait(queue.queue.sink(), token).map_err(|error| ffi_err(py, error))
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
            let settled = client_ffi::ordered::settle(futures).await.into_iter();
            let outcomes = settled.map(|outcome| match outcome {
                Ok(metadata) => Ok(metadata_tuple(&metadata)),
                Err(error) => Err((error.code, error.message)),
            });
            Ok(std::sync::Arc::new(outcomes.collect::<Vec<Outcome>>()))
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

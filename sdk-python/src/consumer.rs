//! `weir._native.Consumer` and `Message`. Every call that talks to the broker
//! takes optional `queue, token` arguments: without them it blocks (GIL
//! released), with them it returns at once and its result arrives in the
//! completion queue (`weir.aio`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use client::Offset;
use client_ffi::Completion;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use crate::completion::{call, CompletionQueue};
use crate::{ffi_err, settings, to_py_err, within};

/// A record read by a consumer.
#[pyclass(module = "weir._native", get_all, frozen)]
pub(crate) struct Message {
    topic: Py<PyString>,
    partition: i32,
    offset: i64,
    timestamp: i64,
    key: Option<Py<PyBytes>>,
    value: Option<Py<PyBytes>>,
    headers: Vec<(String, Option<Py<PyBytes>>)>,
}

#[pymethods]
impl Message {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "Message(topic={:?}, partition={}, offset={})",
            self.topic.bind(py).to_string(),
            self.partition,
            self.offset
        )
    }
}

/// A list of `Message`s; records of one topic share one `str` for its name.
pub(crate) fn messages(py: Python<'_>, records: Vec<client::ConsumerRecord>) -> PyResult<Bound<'_, PyList>> {
    let list = PyList::empty(py);
    let mut topic: Option<(std::sync::Arc<str>, Py<PyString>)> = None;
    for record in records {
        let name = match &topic {
            Some((name, string)) if std::sync::Arc::ptr_eq(name, &record.topic) => string.clone_ref(py),
            _ => {
                let string = PyString::new(py, &record.topic).unbind();
                topic = Some((record.topic.clone(), string.clone_ref(py)));
                string
            }
        };
        let bytes = |bytes: &[u8]| PyBytes::new(py, bytes).unbind();
        let message = Message {
            topic: name,
            partition: record.partition,
            offset: record.offset,
            timestamp: record.timestamp_ms,
            key: record.key.as_deref().map(bytes),
            value: record.value.as_deref().map(bytes),
            headers: record.headers.iter().map(|(key, value)| (key.clone(), value.as_deref().map(bytes))).collect(),
        };
        list.append(Bound::new(py, message)?)?;
    }
    Ok(list)
}

type Partitions = Vec<(String, i32)>;

#[pyclass(module = "weir._native")]
pub(crate) struct Consumer {
    inner: Arc<client::Consumer>,
    rebalances: Arc<client_ffi::RebalanceLog>,
}

fn parse_offset(offset: &Bound<'_, PyAny>) -> PyResult<Offset> {
    if let Ok(number) = offset.extract::<i64>() {
        return Ok(Offset::At(number));
    }
    match offset.extract::<String>()?.as_str() {
        "beginning" | "earliest" => Ok(Offset::Beginning),
        "end" | "latest" => Ok(Offset::End),
        other => Err(PyValueError::new_err(format!("offset must be an int, 'beginning' or 'end', not {other:?}"))),
    }
}

type Target<'py> = Option<PyRef<'py, CompletionQueue>>;

fn target(queue: Target<'_>, token: u64) -> Option<(PyRef<'_, CompletionQueue>, u64)> {
    queue.map(|queue| (queue, token))
}

#[pymethods]
impl Consumer {
    #[new]
    #[pyo3(signature = (bootstrap_servers, config=None))]
    fn new(py: Python<'_>, bootstrap_servers: &str, config: Option<HashMap<String, String>>) -> PyResult<Consumer> {
        let config = client::ConsumerConfig::from_map(&settings(bootstrap_servers, config))
            .map_err(|error| to_py_err(py, error))?;
        let inner = within(py, || client::Consumer::new(config))?;
        Ok(Consumer { inner: Arc::new(inner), rebalances: Arc::default() })
    }

    #[pyo3(signature = (partitions, queue=None, token=0))]
    fn assign(&self, py: Python<'_>, partitions: Partitions, queue: Target<'_>, token: u64) -> PyResult<Py<PyAny>> {
        let consumer = self.inner.clone();
        call(py, target(queue, token), async move {
            consumer.assign(&partitions).await?;
            Ok(Completion::Unit)
        })
    }

    /// Joins the group (`group.id`) for `topics`, or for every topic matching
    /// the regular expression `pattern`.
    #[pyo3(signature = (topics, pattern=None, queue=None, token=0))]
    fn subscribe(
        &self,
        py: Python<'_>,
        topics: Vec<String>,
        pattern: Option<String>,
        queue: Target<'_>,
        token: u64,
    ) -> PyResult<Py<PyAny>> {
        let consumer = self.inner.clone();
        let listener: Arc<dyn client::RebalanceListener> = self.rebalances.clone();
        let subscribe = async move {
            match pattern {
                Some(pattern) => consumer.subscribe_pattern(&pattern, Some(listener)).await?,
                None => consumer.subscribe(&topics, Some(listener)).await?,
            }
            Ok(Completion::Unit)
        };
        // In the runtime's context: subscribing starts the membership task.
        client_ffi::runtime::within(|| call(py, target(queue, token), subscribe)).map_err(|error| ffi_err(py, error))?
    }

    /// `[("assigned" | "revoked", [(topic, partition)])]` since the last call.
    fn rebalance_events(&self) -> Vec<(&'static str, Partitions)> {
        self.rebalances.drain()
    }

    fn seek(&self, py: Python<'_>, topic: &str, partition: i32, offset: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.seek(topic, partition, parse_offset(offset)?).map_err(|error| to_py_err(py, error))
    }

    /// Seeks every assigned partition.
    fn seek_all(&self, py: Python<'_>, offset: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.seek_all(parse_offset(offset)?).map_err(|error| to_py_err(py, error))
    }

    fn assignment(&self) -> Partitions {
        self.inner.assignment()
    }

    fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        self.inner.position(topic, partition)
    }

    fn pause(&self, topic: &str, partition: i32) {
        self.inner.pause(topic, partition);
    }

    fn resume(&self, topic: &str, partition: i32) {
        self.inner.resume(topic, partition);
    }

    /// Records that arrived within `timeout` seconds (at most `max.poll.records`,
    /// and at most `max_records`).
    #[pyo3(signature = (timeout=1.0, queue=None, token=0, max_records=None))]
    fn poll_batch(
        &self,
        py: Python<'_>,
        timeout: f64,
        queue: Target<'_>,
        token: u64,
        max_records: Option<usize>,
    ) -> PyResult<Py<PyAny>> {
        let consumer = self.inner.clone();
        let wait = Duration::from_secs_f64(timeout.max(0.0));
        call(py, target(queue, token), async move {
            let records = consumer.poll_at_most(wait, max_records.unwrap_or(usize::MAX)).await?;
            Ok(Completion::Records(records))
        })
    }

    /// Commits every owned partition's position, or exactly `offsets`
    /// (`[(topic, partition, next offset to read)]`).
    #[pyo3(signature = (offsets=None, queue=None, token=0))]
    fn commit(
        &self,
        py: Python<'_>,
        offsets: Option<Vec<(String, i32, i64)>>,
        queue: Target<'_>,
        token: u64,
    ) -> PyResult<Py<PyAny>> {
        let consumer = self.inner.clone();
        call(py, target(queue, token), async move {
            match offsets {
                Some(offsets) => {
                    let offsets: Vec<((String, i32), i64)> =
                        offsets.into_iter().map(|(topic, partition, offset)| ((topic, partition), offset)).collect();
                    consumer.commit_offsets(&offsets).await?;
                }
                None => consumer.commit().await?,
            }
            Ok(Completion::Unit)
        })
    }

    #[pyo3(signature = (topic, partition, queue=None, token=0))]
    fn committed(
        &self,
        py: Python<'_>,
        topic: String,
        partition: i32,
        queue: Target<'_>,
        token: u64,
    ) -> PyResult<Py<PyAny>> {
        let consumer = self.inner.clone();
        call(
            py,
            target(queue, token),
            async move { Ok(Completion::Offset(consumer.committed(&topic, partition).await?)) },
        )
    }

    /// Leaves the group (committing first with auto-commit) and stops fetching.
    #[pyo3(signature = (queue=None, token=0))]
    fn close(&self, py: Python<'_>, queue: Target<'_>, token: u64) -> PyResult<Py<PyAny>> {
        let consumer = self.inner.clone();
        call(py, target(queue, token), async move {
            consumer.close().await;
            Ok(Completion::Unit)
        })
    }
}

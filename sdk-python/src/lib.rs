//! `weir._native`: the Python extension over Weir's Rust client core. It only
//! converts types and delegates; batching, partitioning, retries and groups live in
//! the `client` crate.
//!
//! Threading rules (see `shared/SDK.md`): one tokio runtime per process, built
//! lazily; a client used after `fork()` raises instead of hanging; every blocking
//! call releases the GIL and waits in slices of at most 200 ms, checking for
//! Ctrl-C between them; no Rust thread ever touches the interpreter.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use client::{ClientError, ErrorCode};
use pyo3::exceptions::{PyException, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyType};

/// Longest a blocking call waits before checking for signals.
const WAIT_SLICE: Duration = Duration::from_millis(200);

static RUNTIME: OnceLock<(tokio::runtime::Runtime, u32)> = OnceLock::new();
static ERROR_TYPES: OnceLock<HashMap<u16, Py<PyType>>> = OnceLock::new();
static BASE_ERROR: OnceLock<Py<PyType>> = OnceLock::new();

fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    let (runtime, pid) = match RUNTIME.get() {
        Some(entry) => entry,
        None => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("weir-client")
                .enable_all()
                .build()
                .map_err(|error| PyRuntimeError::new_err(format!("cannot start the client runtime: {error}")))?;
            RUNTIME.get_or_init(|| (runtime, std::process::id()))
        }
    };
    if *pid != std::process::id() {
        return Err(PyRuntimeError::new_err(
            "weir clients cannot be used after fork(); create new clients in the child process",
        ));
    }
    Ok(runtime)
}

/// The Python exception for a client error: one class per `ErrorCode`, all
/// subclasses of `weir.WeirError`, carrying `code` and the message.
fn to_py_err(py: Python<'_>, error: ClientError) -> PyErr {
    raise(py, error.code().as_u16(), error.to_string())
}

/// Runs `future` on the client runtime without the GIL, in ≤ 200 ms slices,
/// raising `KeyboardInterrupt` (or any signal handler's error) between slices.
fn block<T, F>(py: Python<'_>, future: F) -> PyResult<T>
where
    T: Send,
    F: Future<Output = Result<T, ClientError>> + Send,
{
    let runtime = runtime()?;
    let mut future = Box::pin(future);
    loop {
        let step = py.detach(|| runtime.block_on(async { tokio::time::timeout(WAIT_SLICE, &mut future).await }));
        match step {
            Ok(outcome) => return outcome.map_err(|error| to_py_err(py, error)),
            Err(_) => py.check_signals()?,
        }
    }
}

fn settings(bootstrap_servers: &str, config: Option<HashMap<String, String>>) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = config.unwrap_or_default().into_iter().collect();
    map.insert("bootstrap.servers".to_owned(), bootstrap_servers.to_owned());
    map
}

/// Where a produced record landed: (topic, partition, offset, timestamp ms).
type Metadata = (String, i32, i64, i64);

/// A record's pending acknowledgement.
#[pyclass(module = "weir._native")]
struct Delivery {
    future: Mutex<Option<client::DeliveryFuture>>,
    outcome: Mutex<Option<Result<Metadata, (u16, String)>>>,
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
        let outcome = block(py, wait)
            .map(|metadata| (metadata.topic.to_string(), metadata.partition, metadata.offset, metadata.timestamp_ms));
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

/// The exception of class `code` (see [`to_py_err`]).
fn raise(py: Python<'_>, code: u16, message: String) -> PyErr {
    let class = ERROR_TYPES.get().and_then(|types| types.get(&code)).or_else(|| BASE_ERROR.get());
    match class {
        Some(class) => PyErr::from_type(class.bind(py).clone(), (code, message)),
        None => PyException::new_err(message),
    }
}

#[pyclass(module = "weir._native")]
struct Producer {
    inner: client::Producer,
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
        Ok(Producer { inner })
    }

    /// Queues a record; returns its `Delivery`.
    #[allow(clippy::too_many_arguments)] // mirrors the Python keyword arguments
    #[pyo3(signature = (topic, value, key=None, headers=None, partition=None, timestamp_ms=None))]
    fn send(
        &self,
        py: Python<'_>,
        topic: String,
        value: Option<&[u8]>,
        key: Option<&[u8]>,
        headers: Option<Vec<(String, Option<Vec<u8>>)>>,
        partition: Option<i32>,
        timestamp_ms: Option<i64>,
    ) -> PyResult<Delivery> {
        let (key, value) = (key.map(<[u8]>::to_vec), value.map(<[u8]>::to_vec));
        let record =
            client::ProducerRecord { topic, partition, key, value, headers: headers.unwrap_or_default(), timestamp_ms };
        let producer = self.inner.clone();
        let future = block(py, async move { producer.send(record).await })?;
        Ok(Delivery { future: Mutex::new(Some(future)), outcome: Mutex::new(None) })
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
        Ok(futures
            .into_iter()
            .map(|future| Delivery { future: Mutex::new(Some(future)), outcome: Mutex::new(None) })
            .collect())
    }

    /// Sends everything buffered and waits for every acknowledgement.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let producer = self.inner.clone();
        block(py, async move {
            producer.flush().await;
            Ok(())
        })
    }

    /// Flushes, then refuses further sends.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let producer = self.inner.clone();
        block(py, async move {
            producer.close().await;
            Ok(())
        })
    }
}

/// A record read by a consumer.
#[pyclass(module = "weir._native", get_all)]
struct Message {
    topic: String,
    partition: i32,
    offset: i64,
    timestamp: i64,
    key: Option<Py<PyBytes>>,
    value: Option<Py<PyBytes>>,
    headers: Vec<(String, Option<Py<PyBytes>>)>,
}

#[pymethods]
impl Message {
    fn __repr__(&self) -> String {
        format!("Message(topic={:?}, partition={}, offset={})", self.topic, self.partition, self.offset)
    }
}

fn message(py: Python<'_>, record: client::ConsumerRecord) -> Message {
    let bytes = |bytes: &[u8]| PyBytes::new(py, bytes).unbind();
    Message {
        topic: record.topic.to_string(),
        partition: record.partition,
        offset: record.offset,
        timestamp: record.timestamp_ms,
        key: record.key.as_deref().map(bytes),
        value: record.value.as_deref().map(bytes),
        headers: record.headers.iter().map(|(key, value)| (key.clone(), value.as_deref().map(bytes))).collect(),
    }
}

#[pyclass(module = "weir._native")]
struct Consumer {
    inner: std::sync::Arc<client::Consumer>,
}

fn parse_offset(offset: &Bound<'_, PyAny>) -> PyResult<client::Offset> {
    if let Ok(number) = offset.extract::<i64>() {
        return Ok(client::Offset::At(number));
    }
    match offset.extract::<String>()?.as_str() {
        "beginning" | "earliest" => Ok(client::Offset::Beginning),
        "end" | "latest" => Ok(client::Offset::End),
        other => Err(PyValueError::new_err(format!("offset must be an int, 'beginning' or 'end', not {other:?}"))),
    }
}

#[pymethods]
impl Consumer {
    #[new]
    #[pyo3(signature = (bootstrap_servers, config=None))]
    fn new(py: Python<'_>, bootstrap_servers: &str, config: Option<HashMap<String, String>>) -> PyResult<Consumer> {
        let config = client::ConsumerConfig::from_map(&settings(bootstrap_servers, config))
            .map_err(|error| to_py_err(py, error))?;
        let _context = runtime()?.enter();
        let inner = client::Consumer::new(config).map_err(|error| to_py_err(py, error))?;
        Ok(Consumer { inner: std::sync::Arc::new(inner) })
    }

    fn assign(&self, py: Python<'_>, partitions: Vec<(String, i32)>) -> PyResult<()> {
        let consumer = self.inner.clone();
        block(py, async move { consumer.assign(&partitions).await })
    }

    fn subscribe(&self, py: Python<'_>, topics: Vec<String>) -> PyResult<()> {
        let consumer = self.inner.clone();
        let _context = runtime()?.enter();
        block(py, async move { consumer.subscribe(&topics, None).await })
    }

    fn seek(&self, py: Python<'_>, topic: &str, partition: i32, offset: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.seek(topic, partition, parse_offset(offset)?).map_err(|error| to_py_err(py, error))
    }

    fn assignment(&self) -> Vec<(String, i32)> {
        self.inner.assignment()
    }

    fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        self.inner.position(topic, partition)
    }

    /// Records that arrived within `timeout` seconds (at most `max.poll.records`).
    #[pyo3(signature = (timeout=1.0))]
    fn poll_batch(&self, py: Python<'_>, timeout: f64) -> PyResult<Vec<Message>> {
        let consumer = self.inner.clone();
        let wait = Duration::from_secs_f64(timeout.max(0.0));
        let records = block(py, async move { consumer.poll(wait).await })?;
        Ok(records.into_iter().map(|record| message(py, record)).collect())
    }

    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let consumer = self.inner.clone();
        block(py, async move { consumer.commit().await })
    }

    fn committed(&self, py: Python<'_>, topic: String, partition: i32) -> PyResult<Option<i64>> {
        let consumer = self.inner.clone();
        block(py, async move { consumer.committed(&topic, partition).await })
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let consumer = self.inner.clone();
        block(py, async move {
            consumer.close().await;
            Ok(())
        })
    }
}

#[pyclass(module = "weir._native")]
struct Admin {
    inner: client::Admin,
}

#[pymethods]
impl Admin {
    #[new]
    fn new(py: Python<'_>, bootstrap_servers: &str) -> PyResult<Admin> {
        let common = client::CommonConfig { bootstrap_servers: bootstrap_servers.to_owned(), ..Default::default() };
        let inner = client::Admin::new(common).map_err(|error| to_py_err(py, error))?;
        Ok(Admin { inner })
    }

    #[pyo3(signature = (name, partitions=1, replication_factor=-1, config=None))]
    fn create_topic(
        &self,
        py: Python<'_>,
        name: String,
        partitions: i32,
        replication_factor: i16,
        config: Option<HashMap<String, String>>,
    ) -> PyResult<()> {
        let admin = self.inner.clone();
        let topic = client::NewTopic {
            name,
            partition_count: partitions,
            replication_factor,
            configs: config.unwrap_or_default().into_iter().collect(),
        };
        block(py, async move { admin.create_topic(topic).await })
    }

    fn list_topics(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let admin = self.inner.clone();
        block(py, async move { admin.list_topics().await })
    }

    fn delete_topic(&self, py: Python<'_>, name: String) -> PyResult<()> {
        let admin = self.inner.clone();
        block(py, async move { admin.delete_topic(&name).await })
    }

    /// (partition count, {config: value}).
    fn describe_topic(&self, py: Python<'_>, name: String) -> PyResult<(usize, HashMap<String, String>)> {
        let admin = self.inner.clone();
        let description = block(py, async move { admin.describe_topic(&name).await })?;
        Ok((description.partitions.len(), description.configs.into_iter().collect()))
    }
}

/// Waits for many deliveries in one call (one GIL release); returns their
/// metadata in order, or raises the first failure.
#[pyfunction]
fn wait_all(py: Python<'_>, deliveries: Vec<PyRef<'_, Delivery>>) -> PyResult<Vec<Metadata>> {
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
            let metadata = future.wait().await?;
            results.push((metadata.topic.to_string(), metadata.partition, metadata.offset, metadata.timestamp_ms));
        }
        Ok(results)
    })
}

/// Kafka's murmur2 key partitioning, exactly as the Rust client does it.
#[pyfunction]
fn partition_for_key(key: &[u8], partition_count: u32) -> PyResult<u32> {
    if partition_count == 0 {
        return Err(PyValueError::new_err("partition_count must be positive"));
    }
    Ok(client::partitioner::partition_for_key(key, partition_count))
}

#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    let base = PyErr::new_type(
        py,
        c"weir.WeirError",
        Some(c"A Weir client error: .code is the ErrorCode number."),
        Some(&py.get_type::<PyException>()),
        None,
    )?;
    module.add("WeirError", base.clone_ref(py))?;
    let mut types = HashMap::new();
    for code in ErrorCode::ALL {
        let name = format!("{}Error", code.name());
        let qualified =
            std::ffi::CString::new(format!("weir.{name}")).map_err(|error| PyValueError::new_err(error.to_string()))?;
        let class = PyErr::new_type(py, &qualified, None, Some(base.bind(py)), None)?;
        module.add(name.as_str(), class.clone_ref(py))?;
        types.insert(code.as_u16(), class);
    }
    let _ = BASE_ERROR.set(base);
    let _ = ERROR_TYPES.set(types);
    module.add_class::<Producer>()?;
    module.add_class::<Delivery>()?;
    module.add_class::<Consumer>()?;
    module.add_class::<Message>()?;
    module.add_class::<Admin>()?;
    module.add_function(wrap_pyfunction!(partition_for_key, module)?)?;
    module.add_function(wrap_pyfunction!(wait_all, module)?)?;
    Ok(())
}

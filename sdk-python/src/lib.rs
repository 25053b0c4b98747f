//! `weir._native`: the Python extension over Weir's Rust client core. It only
//! converts types and delegates; batching, partitioning, retries and groups live in
//! the `client` crate.
//!
//! The glue every SDK needs comes from `client-ffi` (one runtime per process,
//! built lazily, refusing use after `fork()`; blocking waits in slices; the
//! completion queue; ordered sends). Here: every blocking call releases the GIL
//! and waits in slices of at most 200 ms, checking for Ctrl-C between them, and
//! no Rust thread ever touches the interpreter.

mod admin;
mod completion;
mod consumer;
mod producer;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use client::ClientError;
use client_ffi::Blocking;
use pyo3::exceptions::{PyException, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyType;

pub(crate) use consumer::messages;

/// Longest a blocking call waits before checking for signals.
const WAIT_SLICE: Duration = Duration::from_millis(200);

static ERROR_TYPES: OnceLock<HashMap<u16, Py<PyType>>> = OnceLock::new();
static BASE_ERROR: OnceLock<Py<PyType>> = OnceLock::new();

/// The Python exception for a client error: one class per `ErrorCode`, all
/// subclasses of `weir.WeirError`, carrying `code` and the message.
pub(crate) fn to_py_err(py: Python<'_>, error: ClientError) -> PyErr {
    raise(py, error.code().as_u16(), error.to_string())
}

/// The Python exception for a binding-layer error (`RuntimeError` when the
/// layer itself cannot run, as after `fork()`).
pub(crate) fn ffi_err(py: Python<'_>, error: client_ffi::Error) -> PyErr {
    raise(py, error.code, error.message)
}

/// Runs `work` (which creates a client) inside the client runtime's context.
pub(crate) fn within<T>(py: Python<'_>, work: impl FnOnce() -> Result<T, ClientError>) -> PyResult<T> {
    client_ffi::runtime::within(work).map_err(|error| ffi_err(py, error))?.map_err(|error| to_py_err(py, error))
}

/// Runs `future` on the client runtime without the GIL, in ≤ 200 ms slices,
/// raising `KeyboardInterrupt` (or any signal handler's error) between slices.
///
/// It is polled once first, with the GIL held: most sends finish in that poll
/// (the record only joins a batch), which saves a GIL release and a hop through
/// the runtime — the bulk of a small call's cost.
pub(crate) fn block<T, F>(py: Python<'_>, future: F) -> PyResult<T>
where
    T: Send,
    F: Future<Output = Result<T, ClientError>> + Send,
{
    let mut blocking = Blocking::new(future).map_err(|error| ffi_err(py, error))?;
    if let Some(outcome) = blocking.poll_now() {
        return outcome.map_err(|error| ffi_err(py, error));
    }
    loop {
        match py.detach(|| blocking.wait(WAIT_SLICE)) {
            Some(outcome) => return outcome.map_err(|error| ffi_err(py, error)),
            None => py.check_signals()?,
        }
    }
}

pub(crate) fn settings(bootstrap_servers: &str, config: Option<HashMap<String, String>>) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = config.unwrap_or_default().into_iter().collect();
    map.insert("bootstrap.servers".to_owned(), bootstrap_servers.to_owned());
    map
}

/// Where a produced record landed: (topic, partition, offset, timestamp ms).
pub(crate) type Metadata = (String, i32, i64, i64);

pub(crate) fn metadata_tuple(metadata: &client::RecordMetadata) -> Metadata {
    (metadata.topic.to_string(), metadata.partition, metadata.offset, metadata.timestamp_ms)
}

/// The exception of class `code` (see [`to_py_err`]).
pub(crate) fn raise(py: Python<'_>, code: u16, message: String) -> PyErr {
    if code == client_ffi::UNUSABLE {
        return PyRuntimeError::new_err(message);
    }
    let class = ERROR_TYPES.get().and_then(|types| types.get(&code)).or_else(|| BASE_ERROR.get());
    match class {
        Some(class) => PyErr::from_type(class.bind(py).clone(), (code, message)),
        None => PyException::new_err(message),
    }
}

/// Kafka's murmur2 key partitioning, exactly as the Rust client does it.
#[pyfunction]
fn partition_for_key(key: &[u8], partition_count: u32) -> PyResult<u32> {
    if partition_count == 0 {
        return Err(PyValueError::new_err("partition_count must be positive"));
    }
    Ok(client::partitioner::partition_for_key(key, partition_count))
}

/// `StorageError` stays `StorageError`; `UnknownTopicOrPartition` becomes
/// `UnknownTopicOrPartitionError`.
fn exception_name(code_name: &str) -> String {
    match code_name.ends_with("Error") {
        true => code_name.to_owned(),
        false => format!("{code_name}Error"),
    }
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
    base.bind(py).setattr("retriable", false)?;
    module.add("WeirError", base.clone_ref(py))?;
    let mut types = HashMap::new();
    for code in client_ffi::error_codes() {
        let name = exception_name(code.name);
        let qualified =
            std::ffi::CString::new(format!("weir.{name}")).map_err(|error| PyValueError::new_err(error.to_string()))?;
        let class = PyErr::new_type(py, &qualified, None, Some(base.bind(py)), None)?;
        class.bind(py).setattr("retriable", code.retriable)?;
        module.add(name.as_str(), class.clone_ref(py))?;
        types.insert(code.code, class);
    }
    let _ = BASE_ERROR.set(base);
    let _ = ERROR_TYPES.set(types);
    module.add_class::<producer::Producer>()?;
    module.add_class::<producer::DeliveryBatch>()?;
    module.add_class::<consumer::Consumer>()?;
    module.add_class::<consumer::Message>()?;
    module.add_class::<admin::Admin>()?;
    module.add_class::<completion::CompletionQueue>()?;
    module.add_function(wrap_pyfunction!(partition_for_key, module)?)?;
    Ok(())
}

//! The completion queue behind `weir.aio` and the futures of `Producer.produce`.
//!
//! A Rust task that finishes an operation pushes `(token, outcome)` here and, if
//! the queue was empty, writes one byte to a socketpair. Python watches the other
//! end (`loop.add_reader` in asyncio, `select` on a helper thread for
//! `concurrent.futures`) and calls [`CompletionQueue::drain`], which turns the
//! outcomes into Python objects while holding the GIL. So no Rust thread ever
//! touches the interpreter and no Rust future holds a `Py<…>` — the pattern that
//! survives interpreter exit (`shared/SDK.md`).

use std::future::Future;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use client::{ClientError, ConsumerRecord};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::{block, messages, metadata_tuple, raise, runtime, Metadata};

/// The result of one finished operation, still free of Python objects.
pub(crate) enum Completion {
    Unit,
    Metadata(Metadata),
    Records(Vec<ConsumerRecord>),
    Offset(Option<i64>),
    Error(u16, String),
}

impl From<Result<Completion, ClientError>> for Completion {
    fn from(outcome: Result<Completion, ClientError>) -> Completion {
        outcome.unwrap_or_else(|error| Completion::Error(error.code().as_u16(), error.to_string()))
    }
}

/// The half of the queue Rust tasks hold.
pub(crate) struct Sink {
    done: Mutex<Vec<(u64, Completion)>>,
    /// A wake-up byte is in the socket and not yet drained.
    signalled: AtomicBool,
    writer: UnixStream,
}

impl Sink {
    pub(crate) fn push(&self, token: u64, completion: Completion) {
        self.done.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push((token, completion));
        if !self.signalled.swap(true, Ordering::AcqRel) {
            // A full socket buffer already holds a wake-up byte; any other error
            // means Python closed the queue and nobody is listening.
            let _ = (&self.writer).write(&[1]);
        }
    }
}

/// Runs `future` on the client runtime and pushes its outcome under `token`.
pub(crate) fn spawn<F>(sink: &Arc<Sink>, token: u64, future: F) -> PyResult<()>
where
    F: Future<Output = Result<Completion, ClientError>> + Send + 'static,
{
    let sink = sink.clone();
    runtime()?.spawn(async move { sink.push(token, future.await.into()) });
    Ok(())
}

/// Outcomes of finished operations, keyed by the caller's tokens (see the module
/// docs). `fileno()` becomes readable when `drain()` has something to return.
#[pyclass(module = "weir._native")]
pub(crate) struct CompletionQueue {
    pub(crate) sink: Arc<Sink>,
    reader: UnixStream,
}

#[pymethods]
impl CompletionQueue {
    #[new]
    fn new() -> PyResult<CompletionQueue> {
        let cannot = |error: std::io::Error| PyRuntimeError::new_err(format!("cannot create a socketpair: {error}"));
        let (reader, writer) = UnixStream::pair().map_err(cannot)?;
        reader.set_nonblocking(true).map_err(cannot)?;
        writer.set_nonblocking(true).map_err(cannot)?;
        let sink = Sink { done: Mutex::new(Vec::new()), signalled: AtomicBool::new(false), writer };
        Ok(CompletionQueue { sink: Arc::new(sink), reader })
    }

    fn fileno(&self) -> i32 {
        self.reader.as_raw_fd()
    }

    /// `[(token, ok, value)]` of every operation finished since the last call:
    /// `value` is the result when `ok`, else the exception to raise.
    fn drain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut scratch = [0u8; 64];
        loop {
            match (&self.reader).read(&mut scratch) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break, // WouldBlock: the socket is empty
            }
        }
        // Clear the flag before taking: a push after this point writes a new byte.
        self.sink.signalled.store(false, Ordering::Release);
        let done = std::mem::take(&mut *self.sink.done.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        let items = PyList::empty(py);
        for (token, completion) in done {
            let (ok, value) = to_python(py, completion)?;
            items.append((token, ok, value))?;
        }
        Ok(items)
    }
}

/// `(ok, value)`: the result, or the exception to raise.
fn to_python(py: Python<'_>, completion: Completion) -> PyResult<(bool, Py<PyAny>)> {
    Ok(match completion {
        Completion::Unit => (true, py.None()),
        Completion::Metadata(metadata) => (true, metadata.into_pyobject(py)?.into_any().unbind()),
        Completion::Records(records) => (true, messages(py, records)?.into_any().unbind()),
        Completion::Offset(offset) => (true, offset.into_pyobject(py)?.into_any().unbind()),
        Completion::Error(code, text) => (false, raise(py, code, text).into_value(py).into_any()),
    })
}

/// Either runs `future` now (blocking, see [`crate::block`]) and returns its
/// result, or — given a queue and token, for asyncio — starts it and returns
/// `None` at once; the result then arrives in the queue.
pub(crate) fn call<F>(
    py: Python<'_>,
    target: Option<(PyRef<'_, CompletionQueue>, u64)>,
    future: F,
) -> PyResult<Py<PyAny>>
where
    F: Future<Output = Result<Completion, ClientError>> + Send + 'static,
{
    match target {
        Some((queue, token)) => {
            spawn(&queue.sink, token, future)?;
            Ok(py.None())
        }
        None => {
            let completion = block(py, future)?;
            match to_python(py, completion)? {
                (true, value) => Ok(value),
                (false, error) => Err(PyErr::from_value(error.into_bound(py))),
            }
        }
    }
}

/// A producer acknowledgement as a completion.
pub(crate) fn delivered(outcome: Result<client::RecordMetadata, ClientError>) -> Result<Completion, ClientError> {
    outcome.map(|metadata| Completion::Metadata(metadata_tuple(&metadata)))
}

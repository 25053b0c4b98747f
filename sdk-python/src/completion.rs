//! The completion queue behind `weir.aio` and the futures of `Producer.produce`:
//! `client_ffi`'s queue, with its outcomes turned into Python objects.
//!
//! Python watches `fileno()` (`loop.add_reader` in asyncio, `select` on a
//! helper thread for `concurrent.futures`) and calls `drain()`, which converts
//! the outcomes while holding the GIL. So no Rust thread ever touches the
//! interpreter and no Rust future holds a `Py<…>` — the pattern that survives
//! interpreter exit (`shared/SDK.md`).

use std::future::Future;

use client::ClientError;
use client_ffi::Completion;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::{block, ffi_err, messages, metadata_tuple, raise};

/// Outcomes of finished operations, keyed by the caller's tokens (see the module
/// docs). `fileno()` becomes readable when `drain()` has something to return.
#[pyclass(module = "weir._native")]
pub(crate) struct CompletionQueue {
    pub(crate) queue: client_ffi::CompletionQueue,
}

#[pymethods]
impl CompletionQueue {
    #[new]
    fn new(py: Python<'_>) -> PyResult<CompletionQueue> {
        Ok(CompletionQueue { queue: client_ffi::CompletionQueue::new().map_err(|error| ffi_err(py, error))? })
    }

    fn fileno(&self) -> i32 {
        self.queue.fd()
    }

    /// `[(token, ok, value)]` of every operation finished since the last call:
    /// `value` is the result when `ok`, else the exception to raise.
    fn drain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let items = PyList::empty(py);
        for (token, completion) in self.queue.drain() {
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
        Completion::Metadata(metadata) => (true, metadata_tuple(&metadata).into_pyobject(py)?.into_any().unbind()),
        Completion::Records(records) => (true, messages(py, records)?.into_any().unbind()),
        Completion::Offset(offset) => (true, offset.into_pyobject(py)?.into_any().unbind()),
        Completion::Deliveries(deliveries) => match deliveries.into_iter().collect::<Result<Vec<_>, _>>() {
            Ok(landed) => {
                let tuples: Vec<_> = landed.iter().map(metadata_tuple).collect();
                (true, tuples.into_pyobject(py)?.into_any().unbind())
            }
            Err(error) => (false, raise(py, error.code, error.message).into_value(py).into_any()),
        },
        Completion::Json(json) => (true, json.into_pyobject(py)?.into_any().unbind()),
        Completion::Error(error) => (false, raise(py, error.code, error.message).into_value(py).into_any()),
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
            queue.queue.sink().spawn(token, future).map_err(|error| ffi_err(py, error))?;
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

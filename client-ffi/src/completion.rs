//! The completion queue: how a binding learns that calls it started finished,
//! without any thread of the core calling into the host language.
//!
//! A call started under a caller's `token` ([`Sink::spawn`]) pushes
//! `(token, Completion)` when it finishes and, if the queue was empty, writes
//! one byte to a socket pair. The binding watches the other end
//! ([`CompletionQueue::fd`]: asyncio's `add_reader`, a helper thread's
//! `select`, a Go poller) and calls [`CompletionQueue::drain`], turning the
//! outcomes into its own objects on its own thread. This is the pattern that
//! survives interpreter exit where runtime-to-interpreter callbacks crashed
//! (`shared/SDK.md`).

use std::future::Future;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use client::{ConsumerRecord, ErrorCode, RecordMetadata};

use crate::error::Error;
use crate::runtime;

/// The outcome of one finished call, as plain data.
#[derive(Debug)]
pub enum Completion {
    Unit,
    Metadata(RecordMetadata),
    Records(Vec<ConsumerRecord>),
    Offset(Option<i64>),
    /// Where each of several sent records landed, or why it did not.
    Deliveries(Vec<Result<RecordMetadata, Error>>),
    /// An answer the binding parses itself (admin answers for Go).
    Json(String),
    Error(Error),
}

impl<E: Into<Error>> From<Result<Completion, E>> for Completion {
    fn from(outcome: Result<Completion, E>) -> Completion {
        outcome.unwrap_or_else(|error| Completion::Error(error.into()))
    }
}

/// The half of a queue that finished calls push into.
pub struct Sink {
    done: Mutex<Vec<(u64, Completion)>>,
    /// A wake-up byte is in the socket and not yet drained.
    signalled: AtomicBool,
    writer: UnixStream,
}

impl Sink {
    /// Records `completion` under `token` and wakes the binding.
    pub fn push(&self, token: u64, completion: Completion) {
        self.done.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push((token, completion));
        if !self.signalled.swap(true, Ordering::AcqRel) {
            // A full socket buffer already holds a wake-up byte; any other
            // error means the binding closed the queue and nobody listens.
            let _ = (&self.writer).write(&[1]);
        }
    }

    /// Runs `future` on the runtime and pushes its outcome under `token`.
    /// A future that panics still pushes: an `UnknownServerError` naming the
    /// panic, so no caller waits forever for a token.
    pub fn spawn<F, E>(self: &Arc<Self>, token: u64, future: F) -> Result<(), Error>
    where
        F: Future<Output = Result<Completion, E>> + Send + 'static,
        E: Into<Error>,
    {
        let sink = self.clone();
        runtime::spawn(async move {
            let outcome = match tokio::spawn(async move { Completion::from(future.await) }).await {
                Ok(outcome) => outcome,
                Err(failed) => Completion::Error(Error::new(
                    ErrorCode::UnknownServerError,
                    format!("internal error in the Weir client core: {failed}"),
                )),
            };
            sink.push(token, outcome)
        })
    }
}

/// See the module docs. Dropping it closes the socket pair; later pushes are
/// kept nowhere a reader could see them.
pub struct CompletionQueue {
    sink: Arc<Sink>,
    reader: UnixStream,
}

impl CompletionQueue {
    pub fn new() -> Result<CompletionQueue, Error> {
        let cannot = |error: std::io::Error| {
            Error::new(ErrorCode::UnknownServerError, format!("cannot create a socketpair: {error}"))
        };
        let (reader, writer) = UnixStream::pair().map_err(cannot)?;
        reader.set_nonblocking(true).map_err(cannot)?;
        writer.set_nonblocking(true).map_err(cannot)?;
        let sink = Sink { done: Mutex::new(Vec::new()), signalled: AtomicBool::new(false), writer };
        Ok(CompletionQueue { sink: Arc::new(sink), reader })
    }

    /// What calls push into.
    pub fn sink(&self) -> &Arc<Sink> {
        &self.sink
    }

    /// Readable while [`CompletionQueue::drain`] has something to return.
    pub fn fd(&self) -> RawFd {
        self.reader.as_raw_fd()
    }

    /// Every `(token, outcome)` pushed since the last call, in push order.
    pub fn drain(&self) -> Vec<(u64, Completion)> {
        let mut scratch = [0u8; 64];
        loop {
            match (&self.reader).read(&mut scratch) {
                Ok(0) => break,
                Ok(_) => continue,
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break, // WouldBlock: the socket is empty
            }
        }
        // Cleared before taking: a push after this point writes a new byte.
        self.sink.signalled.store(false, Ordering::Release);
        std::mem::take(&mut *self.sink.done.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Sink").field("signalled", &self.signalled).finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("CompletionQueue").field("fd", &self.fd()).finish_non_exhaustive()
    }
}

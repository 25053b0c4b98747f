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
//!
//! A call may finish after the binding freed its queue (a client closed with
//! calls in flight). Both ends of the socket pair live as long as the last
//! [`Sink`] a call holds, so a late wake-up byte never meets a closed peer
//! (`EPIPE`, and `SIGPIPE` on a thread of the core, which a Go program
//! re-raises and dies of); and a freed queue marks its sink closed, so late
//! outcomes are dropped instead of piling up where no one drains them.

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

/// The half of a queue that finished calls push into. It owns both ends of
/// the socket pair (see the module docs).
pub struct Sink {
    done: Mutex<Vec<(u64, Completion)>>,
    /// A wake-up byte is in the socket and not yet drained.
    signalled: AtomicBool,
    /// The queue was freed: pushes are dropped.
    closed: AtomicBool,
    writer: UnixStream,
    /// The end the binding watches ([`CompletionQueue::fd`]); kept here so the
    /// peer of `writer` stays open while any call can still push.
    reader: UnixStream,
}

impl Sink {
    /// Records `completion` under `token` and wakes the binding; does nothing
    /// once the queue was freed.
    pub fn push(&self, token: u64, completion: Completion) {
        {
            // Checked under the lock the queue's drop takes: nothing is kept
            // after the drop cleared the list.
            let mut done = self.done.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            done.push((token, completion));
        }
        if !self.signalled.swap(true, Ordering::AcqRel) {
            // A full socket buffer already holds a wake-up byte. The reader
            // end is open (this sink owns it), so no EPIPE can come; std
            // sends with MSG_NOSIGNAL besides.
            let _ = (&self.writer).write(&[1]);
        }
    }

    /// Whether the queue was freed (pushes are dropped).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
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

/// See the module docs. Dropping it closes its sink: later pushes are dropped,
/// and the socket pair closes once no call in flight holds the sink.
pub struct CompletionQueue {
    sink: Arc<Sink>,
}

impl CompletionQueue {
    pub fn new() -> Result<CompletionQueue, Error> {
        let cannot = |error: std::io::Error| {
            Error::new(ErrorCode::UnknownServerError, format!("cannot create a socketpair: {error}"))
        };
        let (reader, writer) = UnixStream::pair().map_err(cannot)?;
        reader.set_nonblocking(true).map_err(cannot)?;
        writer.set_nonblocking(true).map_err(cannot)?;
        let sink = Sink {
            done: Mutex::new(Vec::new()),
            signalled: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            writer,
            reader,
        };
        Ok(CompletionQueue { sink: Arc::new(sink) })
    }

    /// What calls push into.
    pub fn sink(&self) -> &Arc<Sink> {
        &self.sink
    }

    /// Readable while [`CompletionQueue::drain`] has something to return.
    pub fn fd(&self) -> RawFd {
        self.sink.reader.as_raw_fd()
    }

    /// Every `(token, outcome)` pushed since the last call, in push order.
    pub fn drain(&self) -> Vec<(u64, Completion)> {
        let mut scratch = [0u8; 64];
        loop {
            match (&self.sink.reader).read(&mut scratch) {
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

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        let mut done = self.sink.done.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        self.sink.closed.store(true, Ordering::Release);
        // Outcomes no one will drain (records, answers) are freed now.
        let late = std::mem::take(&mut *done);
        drop(done);
        drop(late);
    }
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Sink")
            .field("signalled", &self.signalled)
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CompletionQueue {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("CompletionQueue").field("fd", &self.fd()).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd_is_open(fd: RawFd) -> bool {
        std::path::Path::new(&format!("/proc/self/fd/{fd}")).exists()
    }

    #[test]
    fn a_push_after_the_queue_is_freed_is_dropped_and_the_socket_stays_open() {
        let queue = CompletionQueue::new().unwrap();
        let sink = queue.sink().clone();
        let fd = queue.fd();
        sink.push(1, Completion::Unit);
        drop(queue);
        assert!(sink.is_closed());
        // The reader end lives as long as a call can push: a late wake-up
        // byte never meets a closed peer (EPIPE, SIGPIPE).
        assert!(fd_is_open(fd), "the reader end closed while a sink was alive");
        sink.push(2, Completion::Json("late".to_owned()));
        assert!(sink.done.lock().unwrap().is_empty(), "a late outcome was kept");
    }

    #[test]
    fn pushes_wake_the_reader_and_drain_in_order() {
        let queue = CompletionQueue::new().unwrap();
        queue.sink().push(7, Completion::Unit);
        queue.sink().push(8, Completion::Offset(Some(3)));
        let mut byte = [0u8; 1];
        assert_eq!((&queue.sink.reader).read(&mut byte).unwrap(), 1, "no wake-up byte");
        let done = queue.drain();
        assert_eq!(done.iter().map(|(token, _)| *token).collect::<Vec<_>>(), vec![7, 8]);
        assert!(queue.drain().is_empty());
    }
}

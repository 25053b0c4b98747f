//! One tokio runtime per process for every client a binding creates, built on
//! first use, and [`Blocking`]: a call waited for in slices.
//!
//! A runtime does not survive `fork()` (the child has none of its threads), so
//! every entry point checks that it runs in the process that built the runtime
//! and otherwise fails with a clear error instead of hanging.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::error::Error;

/// Worker threads of the runtime: the client core's background tasks (senders,
/// fetchers, group membership) are IO-bound.
const WORKER_THREADS: usize = 2;

static RUNTIME: OnceLock<(tokio::runtime::Runtime, u32)> = OnceLock::new();

/// The process's runtime (built now if this is the first call).
fn runtime() -> Result<&'static tokio::runtime::Runtime, Error> {
    let (runtime, pid) = match RUNTIME.get() {
        Some(entry) => entry,
        None => {
            crate::allocator::tune();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(WORKER_THREADS)
                .thread_name("weir-client")
                .enable_all()
                .build()
                .map_err(|error| Error::unusable(format!("cannot start the client runtime: {error}")))?;
            RUNTIME.get_or_init(|| (runtime, std::process::id()))
        }
    };
    if *pid != std::process::id() {
        return Err(Error::unusable(
            "weir clients cannot be used after fork(); create new clients in the child process",
        ));
    }
    Ok(runtime)
}

/// Fails when clients cannot run here (after `fork()`, or no runtime could be
/// built).
pub fn check() -> Result<(), Error> {
    runtime().map(|_| ())
}

/// Runs `work` inside the runtime's context: what creates a client (its
/// background tasks start on this runtime) runs through here.
pub fn within<T>(work: impl FnOnce() -> T) -> Result<T, Error> {
    let _context = runtime()?.enter();
    Ok(work())
}

/// Runs `future` on the runtime, detached.
pub fn spawn(future: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
    runtime()?.spawn(future);
    Ok(())
}

/// Runs `future` on the process's runtime (so what it spawns, a consumer's
/// fetch and membership tasks for one, runs there too, whatever runtime the
/// binding awaits on) and gives its output to whoever awaits the returned
/// future.
pub fn run<T: Send + 'static>(
    future: impl Future<Output = Result<T, Error>> + Send + 'static,
) -> Result<impl Future<Output = Result<T, Error>> + Send + 'static, Error> {
    let handle = runtime()?.spawn(future);
    Ok(async move {
        match handle.await {
            Ok(outcome) => outcome,
            Err(error) => Err(Error::unusable(format!("a client task ended early: {error}"))),
        }
    })
}

/// A call a binding waits for: [`Blocking::poll_now`] once (most sends finish
/// in that poll, when the record only joins a batch), then
/// [`Blocking::wait`] in slices, checking for signals or cancellation between
/// them with the host's lock released.
pub struct Blocking<'a, T> {
    future: Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>,
}

impl<'a, T: Send + 'a> Blocking<'a, T> {
    pub fn new<F, E>(future: F) -> Result<Blocking<'a, T>, Error>
    where
        F: Future<Output = Result<T, E>> + Send + 'a,
        E: Into<Error>,
    {
        check()?;
        Ok(Blocking { future: Box::pin(async move { future.await.map_err(Into::into) }) })
    }

    /// Polls once on the caller's thread (inside the runtime's context): the
    /// outcome if the call is already done.
    pub fn poll_now(&mut self) -> Option<Result<T, Error>> {
        let runtime = match runtime() {
            Ok(runtime) => runtime,
            Err(error) => return Some(Err(error)),
        };
        let _context = runtime.enter();
        let mut context = Context::from_waker(Waker::noop());
        match self.future.as_mut().poll(&mut context) {
            Poll::Ready(outcome) => Some(outcome),
            Poll::Pending => None,
        }
    }

    /// Blocks for at most `slice`: the outcome, or `None` if the call is still
    /// running (call again).
    pub fn wait(&mut self, slice: Duration) -> Option<Result<T, Error>> {
        let runtime = match runtime() {
            Ok(runtime) => runtime,
            Err(error) => return Some(Err(error)),
        };
        runtime.block_on(async { tokio::time::timeout(slice, &mut self.future).await }).ok()
    }

    /// Waits to the end, calling `between` after every unfinished slice; an
    /// error from it (a signal, a cancelled context) abandons the call.
    pub fn wait_all<E>(
        mut self,
        slice: Duration,
        mut between: impl FnMut() -> Result<(), E>,
    ) -> Result<Result<T, Error>, E> {
        if let Some(outcome) = self.poll_now() {
            return Ok(outcome);
        }
        loop {
            if let Some(outcome) = self.wait(slice) {
                return Ok(outcome);
            }
            between()?;
        }
    }
}

impl<T> std::fmt::Debug for Blocking<'_, T> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Blocking").finish_non_exhaustive()
    }
}

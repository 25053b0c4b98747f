//! [`ControllerRuntime`]: openraft's async runtime — tokio, except that the
//! randomness openraft draws (its election timeouts) comes from a generator per
//! thread that a simulation can seed.
//!
//! In the broker every thread's generator starts from the operating system's
//! entropy, as openraft's own tokio runtime does. The cluster simulator runs
//! every voter on one thread of a paused-clock runtime and seeds that thread's
//! generator with its run's seed ([`seed_thread_rng`]): together with the
//! simulator's own seeded faults, a run is replayed from its seed.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use openraft::async_runtime::TokioOneShotSender;
use openraft::{AsyncRuntime, OptionalSend, TokioInstant};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

thread_local! {
    static THREAD_RNG: Rc<RefCell<StdRng>> = Rc::new(RefCell::new(StdRng::from_entropy()));
}

/// Seeds the calling thread's generator: every later election timeout drawn on
/// this thread follows from `seed`.
pub fn seed_thread_rng(seed: u64) {
    THREAD_RNG.with(|rng| *rng.borrow_mut() = StdRng::seed_from_u64(seed));
}

/// A handle on the calling thread's generator (not `Send`, like `ThreadRng`).
#[derive(Clone, Debug)]
pub struct ThreadRng(Rc<RefCell<StdRng>>);

impl RngCore for ThreadRng {
    fn next_u32(&mut self) -> u32 {
        self.0.borrow_mut().next_u32()
    }

    fn next_u64(&mut self) -> u64 {
        self.0.borrow_mut().next_u64()
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.0.borrow_mut().fill_bytes(dest)
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        self.0.borrow_mut().try_fill_bytes(dest)
    }
}

/// See the module docs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ControllerRuntime;

impl AsyncRuntime for ControllerRuntime {
    type JoinError = tokio::task::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = tokio::task::JoinHandle<T>;
    type Sleep = tokio::time::Sleep;
    type Instant = TokioInstant;
    type TimeoutError = tokio::time::error::Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = tokio::time::Timeout<T>;
    type ThreadLocalRng = ThreadRng;
    type OneshotSender<T: OptionalSend> = TokioOneShotSender<T>;
    type OneshotReceiverError = tokio::sync::oneshot::error::RecvError;
    type OneshotReceiver<T: OptionalSend> = tokio::sync::oneshot::Receiver<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        tokio::task::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        tokio::time::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        tokio::time::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(duration: Duration, future: F) -> Self::Timeout<R, F> {
        tokio::time::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(deadline: Self::Instant, future: F) -> Self::Timeout<R, F> {
        tokio::time::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        join_error.is_panic()
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        ThreadRng(THREAD_RNG.with(Rc::clone))
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        (TokioOneShotSender(sender), receiver)
    }
}

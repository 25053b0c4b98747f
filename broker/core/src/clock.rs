//! The clock seam: wall-clock time in milliseconds since the Unix epoch.
//!
//! Core logic takes `now_ms` as an argument; the server's long-lived parts
//! (partitions, the data directory, group coordinators, plugins) hold an
//! `Arc<dyn Clock>` instead of reading the system clock, so a test or the simulator
//! can run a whole broker on [`ManualClock`] time. Timeouts measured with tokio's
//! monotonic timers are not wall-clock readings and stay with tokio.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};

/// A source of wall-clock time. The server's is `broker::clock::SystemClock`.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// A clock that moves only when told to. Never goes backwards.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_ms: AtomicI64,
}

impl ManualClock {
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock { now_ms: AtomicI64::new(start_ms) }
    }

    /// Moves the clock `ms` (≥ 0) forward; returns the new time.
    pub fn advance(&self, ms: i64) -> i64 {
        assert!(ms >= 0, "a ManualClock never goes backwards (asked to move {ms} ms)");
        self.now_ms.fetch_add(ms, Ordering::SeqCst) + ms
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

//! [`Environment`]: what a broker runs on — its durable storage and its clock.
//!
//! `weir serve` runs on [`Environment::real`]: files under the data directory
//! (`FileStorage`, with the data directory locked against a second process) and the
//! system clock. Tests and the simulator open the same `Node` on
//! [`Environment::simulated`]: a `MemStorage` that forgets unsynced bytes at a
//! simulated crash, and a `ManualClock`.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use broker_core::clock::Clock;
use broker_core::storage::mem::MemStorage;
use broker_core::storage::Storage;

use crate::storage::FileStorage;

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis() as i64)
    }
}

/// Storage and clock of one broker.
#[derive(Clone, Debug)]
pub struct Environment {
    pub storage: Arc<dyn Storage>,
    pub clock: Arc<dyn Clock>,
    /// Whether `storage` is the real file system, whose data directory another
    /// process could open too: only then is it locked.
    pub(crate) real_files: bool,
}

impl Environment {
    /// Real files and the system clock.
    pub fn real() -> Environment {
        Environment { storage: Arc::new(FileStorage), clock: Arc::new(SystemClock), real_files: true }
    }

    /// Storage and a clock of the caller's (a `MemStorage`, a fault-injecting
    /// wrapper, a `ManualClock`). The data directory is not locked.
    pub fn simulated(storage: Arc<dyn Storage>, clock: Arc<dyn Clock>) -> Environment {
        Environment { storage, clock, real_files: false }
    }

    /// A fresh `MemStorage` and the system clock: a quick in-memory broker.
    pub fn in_memory() -> (Environment, MemStorage) {
        let storage = MemStorage::new();
        (Environment::simulated(Arc::new(storage.clone()), Arc::new(SystemClock)), storage)
    }

    /// Whether the storage is the real file system.
    pub fn is_real(&self) -> bool {
        self.real_files
    }
}

impl Default for Environment {
    fn default() -> Environment {
        Environment::real()
    }
}

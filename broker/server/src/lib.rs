//! `broker`: the Weir broker server — the only broker crate that touches files,
//! threads and (soon) sockets.
//!
//! Today it holds the storage side of a broker:
//! - [`storage`]: `broker_core`'s storage seam on real files and `memmap2`;
//! - [`partition`]: one partition log shared by appenders, readers, the flusher and
//!   retention, with group commit and a durable-offset watch;
//! - [`flusher`]: the threads that run fdatasync rounds;
//! - [`log_dir`]: all partitions of a data directory, their recovery at start-up,
//!   background retention and interval flushing, clean shutdown.
//!
//! The Cap'n Proto RPC edge, config files and `run(config, shutdown)` arrive with
//! the single-node broker.

pub mod flusher;
pub mod log_dir;
pub mod partition;
pub mod storage;

pub use log_dir::{LogDir, LogDirConfig};
pub use partition::{Durability, Partition};
pub use storage::FileStorage;

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
//! Append, wait for durability, read back:
//!
//! ```
//! use abi::batch::BatchBuilder;
//! use broker::{LogDir, LogDirConfig};
//!
//! # async fn example(data_dir: std::path::PathBuf) -> Result<(), Box<dyn std::error::Error>> {
//! let log_dir = LogDir::open(LogDirConfig::new(data_dir))?;
//! let orders = log_dir.create_partition("orders", 0)?;
//! let now_ms = broker::log_dir::now_ms();
//! let mut builder = BatchBuilder::new(now_ms);
//! builder.push(now_ms, Some(b"user-42"), Some(b"{\"total\": 12}"), &[("source", Some(&b"web"[..]))]);
//! let appended = orders.append(&mut builder.encode(), 0)?; // offsets are assigned here
//! orders.wait_durable(appended.last_offset + 1).await?;   // group commit: on disk now
//! let mut buffer = Vec::new();
//! orders.read(0, 1 << 20, &mut buffer)?;                  // whole batches, exactly as stored
//! assert_eq!(abi::batch::BatchView::new(&buffer)?.base_offset(), 0);
//! assert!(log_dir.shutdown().is_empty());
//! # Ok(())
//! # }
//! # let temp = tempfile::tempdir().unwrap();
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(example(temp.path().into())).unwrap();
//! ```
//!
//! The Cap'n Proto RPC edge, config files and `run(config, shutdown)` arrive with
//! the single-node broker.

pub mod config;
pub mod error;
pub mod flusher;
pub mod log_dir;
pub mod metadata_store;
pub mod node;
pub mod partition;
pub mod rpc;
pub mod server;
pub mod storage;

pub use config::{BrokerConfig, BrokerConfigError, ConfigOverrides, Limits};
pub use error::ApiError;
pub use log_dir::{CreatePartitionError, LogDir, LogDirConfig};
pub use node::Node;
pub use partition::{Durability, Partition};
pub use server::{run, Server, ServerError};
pub use storage::FileStorage;

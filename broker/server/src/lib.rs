//! `broker`: the Weir broker server — the only broker crate that touches files,
//! threads and sockets.
//!
//! [`run`]`(config, shutdown)` is the whole broker: [`Server::bind`] binds the
//! listener and opens the [`Node`]; [`Server::serve`] serves clients until
//! `shutdown` resolves, then closes every partition cleanly. `weir serve` calls it.
//!
//! From the socket down:
//! - [`server`]: the accept loop and the connection threads (each a `LocalSet`,
//!   capnp-rpc being `!Send`), bounded by `connections_max` and capnp's message
//!   limits;
//! - [`rpc`]: the Cap'n Proto `Broker` and `Admin` capabilities
//!   (`abi/schema/weir.capnp`), translating calls to and from [`node`] values, with
//!   a per-connection cap on calls in flight;
//! - [`node`]: one broker's state and every request it serves, as plain Rust values
//!   (nothing below it knows Cap'n Proto): topics, produce with acks and
//!   idempotent-producer dedup, long-polling fetch below the high watermark, list
//!   offsets, producer ids, admin;
//! - [`error`]: [`ApiError`], the `ErrorCode` and message a client is told;
//! - [`controller`]: the cluster metadata quorum (openraft behind our own API),
//!   broker liveness, and the calls between brokers;
//! - [`metadata_store`]: the metadata file of a single-node broker from before
//!   the controller, read once by the upgrade;
//! - [`config`]: [`BrokerConfig`] from defaults, a TOML file and overrides, and the
//!   [`Limits`] of the RPC edge;
//! - [`data_dir_lock`]: the exclusive lock that makes one process the owner of a
//!   data directory;
//! - [`log_dir`]: all partitions of a data directory, their recovery at start-up,
//!   background retention and interval flushing, clean shutdown;
//! - [`partition`]: one partition log shared by appenders, readers, the flusher and
//!   retention, with group commit, a durable-offset watch and a high-watermark
//!   watch;
//! - [`flusher`]: the threads that run fdatasync rounds;
//! - [`storage`]: `broker_core`'s storage seam on real files and `memmap2`;
//! - [`environment`]: what a broker runs on (storage and clock), real or simulated.
//!
//! The storage side can be used without the server. Append, wait for durability,
//! read back:
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

pub mod config;
pub mod controller;
pub mod data_dir_lock;
pub mod environment;
pub mod error;
pub mod flusher;
pub mod groups;
pub mod log_dir;
pub mod metadata_store;
pub mod node;
pub mod partition;
pub mod plugin_pool;
pub mod plugins;
pub mod rpc;
pub mod server;
pub mod storage;
pub mod transforms;
pub mod transport;

pub use config::{BrokerConfig, BrokerConfigError, ConfigOverrides, Limits};
pub use environment::{Environment, SystemClock};
pub use error::ApiError;
pub use log_dir::{CreatePartitionError, LogDir, LogDirConfig, PartitionDirFate};
pub use node::Node;
pub use partition::{Durability, Partition};
pub use server::{run, Server, ServerError};
pub use storage::FileStorage;

//! `broker-core`: Weir's deterministic broker logic.
//!
//! Everything here is plain Rust over values: no tokio, no sockets, no clocks and
//! no direct file access. Time arrives as `now_ms` arguments and durable media
//! through the [`storage`] traits, so the same code runs under the real server
//! (`broker`) and under crash/simulation tests.
//!
//! - [`cluster`]: the cluster metadata state machine — metadata records, the
//!   image they build, the controller's handlers (registration, fencing,
//!   placement, leader election).
//! - [`clock`]: the clock seam (wall-clock milliseconds), plus a manual clock.
//! - [`group`]: the consumer-group coordinator (assignors, records, state machine).
//! - [`log`]: the partition log — segments, sparse indexes, recovery, retention,
//!   durability bookkeeping (the durable offset that replication builds on).
//! - [`producer_state`]: one partition's idempotent-producer table (which retried
//!   batch is a duplicate, with the offsets to answer).
//! - [`replication`]: the high-watermark rule (and, later, followers and ISR).
//! - [`storage`]: the storage seam, plus an in-memory implementation with crash
//!   semantics.
//!
//! Architecture invariant: this crate never depends on an IO runtime; Cargo
//! enforces it (see `Cargo.toml`).

pub mod clock;
pub mod cluster;
pub mod group;
pub mod log;
pub mod producer_state;
pub mod replication;
pub mod storage;

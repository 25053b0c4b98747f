//! Replication logic (DESIGN §3): what a partition leader decides from its
//! replicas' offsets. IO-free; the server feeds it offsets and publishes results.
//!
//! - [`high_watermark`]: the committed offset, from the ISR's offsets and the
//!   topic's flush policy.

pub mod high_watermark;

pub use high_watermark::{HighWatermark, ReplicaOffsets};

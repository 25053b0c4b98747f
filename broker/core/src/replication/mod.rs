//! Replication logic (DESIGN §3): what a partition leader decides from its
//! replicas' offsets. IO-free; the server feeds it offsets and publishes results.
//!
//! - [`high_watermark`]: the committed offset, from the ISR's offsets and the
//!   topic's flush policy;
//! - [`leader_epochs`]: which leader epoch wrote which offsets, and how a
//!   follower finds where its log diverges from its leader's (KIP-101/279);
//! - [`isr`]: a leader's view of its followers — their offsets, when each was
//!   last caught up, the ISR changes to ask the controller for, and the high
//!   watermark over the ISR.

pub mod high_watermark;
pub mod isr;
pub mod leader_epochs;

pub use high_watermark::{HighWatermark, ReplicaOffsets};
pub use isr::{FollowerProgress, LeaderReplicas};
pub use leader_epochs::{Divergence, EpochEntry, EpochOrderError, LeaderEpochCache, UNDEFINED_EPOCH};

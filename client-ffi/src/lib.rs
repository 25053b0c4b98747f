//! `client-ffi`: the glue every language SDK needs over Weir's client core, kept
//! in one place so Python, Node and Go do not each write it (see `shared/SDK.md`).
//!
//! - [`runtime`]: one tokio runtime per process, built on first use, that
//!   refuses to run in a child after `fork()` (a forked runtime has no threads
//!   and would hang); [`runtime::Blocking`] waits for a call in slices so a
//!   binding can release its interpreter lock and check for signals between
//!   them.
//! - [`completion`]: a completion queue. Calls started under a caller's token
//!   push `(token, Completion)` when they finish and wake the binding through a
//!   socket pair it watches (an event loop's reader, a helper thread, a Go
//!   poller); no thread of the core ever calls into the host language.
//! - [`ordered`]: sends that never block the caller yet keep call order, bounded
//!   by `buffer.memory`, and a batch of deliveries settled in one wait.
//! - [`rebalance`]: assignment changes kept for the binding's own thread.
//! - [`views`]: a poll's records as ranges of the buffers they were fetched
//!   into plus flat index arrays, so a binding crosses each buffer once.
//! - `allocator`: glibc's malloc thresholds fixed when the runtime starts, so
//!   fetched answers do not land in freshly faulted pages (`WEIR_MALLOC_TUNING=off`
//!   opts out).
//! - [`error`]: errors as plain `(code, message)` from the one `ErrorCode` table.
//!
//! The API is plain data: tokens, codes, strings, byte vectors, records as
//! [`Record`]s. No capnp or tokio type appears in it; the client core's own
//! handles (`Producer`, `Consumer`, `Admin`) are re-exported for the calls a
//! binding makes through [`runtime::Blocking`] or [`completion::Sink::spawn`].

mod allocator;
pub mod completion;
pub mod error;
pub mod ordered;
pub mod rebalance;
pub mod runtime;
pub mod views;

pub use client::{
    partitioner, Acks, Admin, Consumer, ConsumerConfig, ConsumerRecord as Record, Offset, Producer, ProducerConfig,
    ProducerRecord, RebalanceListener, RecordMetadata,
};
pub use completion::{Completion, CompletionQueue, Sink};
pub use error::{error_codes, Error, ErrorInfo, UNUSABLE};
pub use ordered::{OrderedProducer, Packed, PackedHeader, PackedRecord};
pub use rebalance::RebalanceLog;
pub use runtime::Blocking;
pub use views::{RecordViews, NULL_LENGTH, VIEW_STRIDE};

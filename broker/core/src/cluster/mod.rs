//! The cluster metadata state machine (DESIGN §3, controller): what the
//! controller quorum agrees on, as plain values.
//!
//! - [`record`]: [`MetadataRecord`], one entry of the metadata log (KRaft-shaped:
//!   brokers, fencing, topics, partition leadership with leader and partition
//!   epochs, configs, producer-id blocks, plugins);
//! - [`image`]: [`ClusterImage`], the metadata as of an offset, changed only by
//!   `apply(offset, record)` — replayable, so every broker that applied the same log
//!   prefix holds the same image;
//! - [`controller`]: the controller's handlers — registration, fencing, placement,
//!   leader election — each returning the records that carry a request out;
//! - [`request`]: [`ControllerRequest`], those requests as serialisable values
//!   (forwarded from any broker to the active controller).
//!
//! Who owns it: the controller module of the server appends records through the
//! Raft log and every broker applies the committed ones to its own image.

pub mod controller;
pub mod image;
pub mod record;
pub mod request;

pub use controller::{ControllerError, InitialIsr};
pub use image::{
    check_attachment_entry, check_plugin_entry, check_plugin_name, is_plugin_digest, ApplyError, BrokerState,
    ClusterImage, TopicImage, PARTITIONER_HOOK,
};
pub use record::{
    AttachmentEntry, BrokerId, BrokerRegistration, MetadataRecord, PartitionState, PluginEntry, NO_LEADER,
};
pub use request::{ControllerRequest, ControllerResponse, IsrChoice};

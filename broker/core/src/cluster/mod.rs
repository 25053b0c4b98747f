//! The cluster metadata state machine (DESIGN §3, controller): what the
//! controller quorum agrees on, as plain values.
//!
//! - [`record`]: [`MetadataRecord`], one entry of the metadata log (KRaft-shaped:
//!   brokers, fencing, topics, partition leadership with leader and partition
//!   epochs, configs, producer-id blocks, plugins, transform deployments);
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

pub use controller::{ControllerError, InitialIsr, UNCLEAN_LEADER_ELECTION};
pub use image::{
    check_attachment_entry, check_plugin_entry, check_plugin_name, check_transform_entry, is_plugin_digest, ApplyError,
    BrokerState, ClusterImage, TopicImage, TransformImage, PARTITIONER_HOOK, TRANSFORM_HOOK,
};
pub use record::{
    AttachmentEntry, BrokerId, BrokerRegistration, MetadataRecord, PartitionState, PluginEntry, TransformEntry,
    NO_LEADER, TRANSFORM_OUTPUTS_MAX,
};
pub use request::{ControllerRequest, ControllerResponse, IsrChoice};

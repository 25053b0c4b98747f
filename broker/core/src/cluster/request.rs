//! [`ControllerRequest`]: what brokers ask the active controller, as plain
//! serialisable values — so a request made on any broker can be forwarded to the
//! active controller and carried out there against its image.
//!
//! [`ControllerRequest::plan`] turns a request into the records that carry it out
//! and the answer, by the handlers of `controller.rs`; it changes nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::controller::{ControllerError, InitialIsr};
use super::image::ClusterImage;
use super::record::{AttachmentEntry, BrokerId, BrokerRegistration, MetadataRecord, PluginEntry, TransformEntry};

/// One request to the active controller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request")]
pub enum ControllerRequest {
    /// Gives a new cluster its id (nothing once it has one).
    InitCluster {
        cluster_id: String,
    },
    /// A broker starts; answered with its broker epoch.
    RegisterBroker(BrokerRegistration),
    /// The broker is caught up and may lead.
    UnfenceBroker {
        broker_id: BrokerId,
        broker_epoch: u64,
    },
    /// The broker stops (controlled shutdown) or missed its heartbeats.
    FenceBroker {
        broker_id: BrokerId,
        broker_epoch: u64,
    },
    CreateTopic {
        name: String,
        partition_count: u32,
        replication_factor: u16,
        configs: BTreeMap<String, String>,
        initial_isr: IsrChoice,
    },
    /// A topic whose partitions already exist on `broker_id` (a single-node data
    /// directory being upgraded): every partition's one replica is there.
    AdoptTopic {
        name: String,
        partition_count: u32,
        configs: BTreeMap<String, String>,
        broker_id: BrokerId,
    },
    DeleteTopic {
        name: String,
    },
    /// Sets (`Some`) or removes (`None`) config overrides.
    AlterConfigs {
        topic: String,
        changes: Vec<(String, Option<String>)>,
    },
    /// Answered with the first id of the block.
    AllocateProducerIds {
        broker_id: BrokerId,
        count: i64,
    },
    /// Answered with the number of partitions whose leadership moved.
    ElectPreferredLeaders,
    /// A plugin whose bytes are stored on the uploading broker.
    RegisterPlugin(PluginEntry),
    RemovePlugin {
        name: String,
    },
    AttachPlugin(AttachmentEntry),
    DetachPlugin {
        topic: String,
        hook: String,
        plugin: String,
    },
    /// The leader of a partition changes its ISR (KIP-497's AlterPartition).
    AlterPartition {
        topic: String,
        partition: u32,
        leader: BrokerId,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: Vec<BrokerId>,
    },
    DeployTransform(TransformEntry),
    /// Moves partitions of `topic` to new replicas: (partition, target).
    ReassignPartitions {
        topic: String,
        assignments: Vec<(u32, Vec<BrokerId>)>,
    },
    /// `pause`, `resume`, `replay` (from `offset`) or `delete`.
    ControlTransform {
        name: String,
        action: String,
        offset: i64,
    },
}

/// [`InitialIsr`] on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IsrChoice {
    AllReplicas,
    LeaderOnly,
}

/// The active controller's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerResponse {
    /// `RegisterBroker`: the broker's epoch. `AllocateProducerIds`: the block's
    /// first id.
    pub value: Option<i64>,
    /// Metadata offset of the last record written (none when nothing was): a
    /// broker waits until its own image has applied it before answering.
    #[serde(default)]
    pub last_offset: Option<u64>,
}

impl ControllerRequest {
    /// The records that carry the request out against `image`, and the answer.
    /// `first_offset` is where the records will land (the offset after the last
    /// applied one), which some answers are (a broker's epoch).
    pub fn plan(&self, image: &ClusterImage) -> Result<(Vec<MetadataRecord>, ControllerResponse), ControllerError> {
        let first_offset = image.applied_offset.map_or(0, |offset| offset + 1);
        let none = ControllerResponse::default();
        let planned = match self {
            ControllerRequest::InitCluster { cluster_id } => (image.init_cluster(cluster_id), none),
            ControllerRequest::RegisterBroker(registration) => {
                let records = image.register_broker(registration);
                let epoch = match records.iter().position(|record| matches!(record, MetadataRecord::RegisterBroker(_)))
                {
                    Some(position) => first_offset + position as u64,
                    // A retry: the registration stands.
                    None => image.brokers.get(&registration.broker_id).map_or(0, |broker| broker.epoch),
                };
                (records, ControllerResponse { value: Some(epoch as i64), last_offset: None })
            }
            ControllerRequest::UnfenceBroker { broker_id, broker_epoch } => {
                (image.unfence_broker(*broker_id, *broker_epoch)?, none)
            }
            ControllerRequest::FenceBroker { broker_id, broker_epoch } => {
                (image.fence_broker(*broker_id, *broker_epoch)?, none)
            }
            ControllerRequest::CreateTopic { name, partition_count, replication_factor, configs, initial_isr } => {
                let initial_isr = match initial_isr {
                    IsrChoice::AllReplicas => InitialIsr::AllReplicas,
                    IsrChoice::LeaderOnly => InitialIsr::LeaderOnly,
                };
                let records =
                    image.create_topic(name, *partition_count, *replication_factor, configs.clone(), initial_isr)?;
                (records, none)
            }
            ControllerRequest::AdoptTopic { name, partition_count, configs, broker_id } => {
                (image.adopt_topic(name, *partition_count, configs.clone(), *broker_id)?, none)
            }
            ControllerRequest::DeleteTopic { name } => (image.delete_topic(name)?, none),
            ControllerRequest::AlterConfigs { topic, changes } => (image.alter_configs(topic, changes)?, none),
            ControllerRequest::ReassignPartitions { topic, assignments } => {
                (image.reassign_partitions(topic, assignments)?, none)
            }
            ControllerRequest::AllocateProducerIds { broker_id, count } => {
                let first = image.next_producer_id;
                (
                    image.allocate_producer_ids(*broker_id, *count)?,
                    ControllerResponse { value: Some(first), last_offset: None },
                )
            }
            ControllerRequest::ElectPreferredLeaders => {
                let records = image.elect_preferred_leaders();
                let moved = records.len() as i64;
                (records, ControllerResponse { value: Some(moved), last_offset: None })
            }
            ControllerRequest::RegisterPlugin(entry) => (image.register_plugin(entry)?, none),
            ControllerRequest::RemovePlugin { name } => (image.remove_plugin(name)?, none),
            ControllerRequest::AttachPlugin(entry) => (image.attach_plugin(entry)?, none),
            ControllerRequest::DetachPlugin { topic, hook, plugin } => {
                (image.detach_plugin(topic, hook, plugin)?, none)
            }
            ControllerRequest::AlterPartition { topic, partition, leader, leader_epoch, partition_epoch, isr } => {
                (image.alter_partition(topic, *partition, *leader, (*leader_epoch, *partition_epoch), isr)?, none)
            }
            ControllerRequest::DeployTransform(entry) => (image.deploy_transform(entry)?, none),
            ControllerRequest::ControlTransform { name, action, offset } => {
                (image.control_transform(name, action, *offset)?, none)
            }
        };
        Ok(planned)
    }
}

//! [`Admin`]: topic management (create, list, describe, delete, alter configs),
//! cluster metadata, offsets of partitions, and consumer groups (list, describe,
//! lag, delete, reset committed offsets). Each call goes to any reachable broker
//! (offset look-ups to the partition's leader); answers are plain Rust values,
//! failures typed [`ClientError`]s.
//!
//! A group's lag ([`Admin::group_lag`]) is computed here, not by the broker:
//! 1. describe the group (members, their assignments, committed offsets);
//! 2. take every topic that has a committed offset or that a member subscribes
//!    to, and every partition of those topics in the metadata;
//! 3. ask each partition's leader for its high watermark (the log end offset a
//!    consumer can reach);
//! 4. lag = log end offset − committed offset, where a committed offset exists.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use abi::weir_capnp::{admin, broker, group_description, topic_partition};
use abi::ErrorCode;

use crate::cluster::{read_partition_metadata, BrokerInfo, Cluster, PartitionInfo, TopicInfo};
use crate::config::CommonConfig;
use crate::connection::Connection;
use crate::consumer::{list_offset, Offset};
use crate::error::refused_or_ok;
use crate::error::{broker_error, ClientError};

/// A topic to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    pub partition_count: i32,
    /// -1 = the broker's default.
    pub replication_factor: i16,
    /// Kafka-style topic configs (`retention.ms`, `segment.bytes`, …).
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    pub fn new(name: impl Into<String>, partition_count: i32) -> NewTopic {
        NewTopic { name: name.into(), partition_count, replication_factor: -1, configs: Vec::new() }
    }

    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> NewTopic {
        self.configs.push((key.into(), value.into()));
        self
    }
}

/// The cluster as one broker sees it (`cluster_status`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterStatus {
    pub cluster_id: String,
    /// The active controller's broker id; -1 when the answering broker knows none.
    pub active_controller: i32,
    /// The controller quorum's voters.
    pub voters: Vec<i32>,
    pub brokers: Vec<BrokerStatus>,
    /// The broker that answered.
    pub answered_by: i32,
    /// The last metadata offset the answering broker applied (-1: none).
    pub metadata_offset: i64,
    /// Partitions of every topic, internal ones included.
    pub partition_count: u32,
    /// `topic-partition` of each partition with fewer in-sync replicas than replicas.
    pub under_replicated: Vec<String>,
    /// ...with fewer in-sync replicas than its `min.insync.replicas` (`acks=all` refused).
    pub under_min_isr: Vec<String>,
    /// ...with no leader.
    pub offline: Vec<String>,
}

/// One registered broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerStatus {
    pub id: i32,
    pub host: String,
    pub port: u16,
    /// The offset of its registration: a restart registers anew.
    pub epoch: i64,
    /// `active` (may lead) or `fenced` (stopped, or not heard from).
    pub state: String,
    pub rack: Option<String>,
    /// The last metadata offset it reported to the active controller (-1: not
    /// known to the answering broker).
    pub metadata_offset: i64,
}

/// A topic's partitions and effective configs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicDescription {
    pub name: String,
    pub partitions: Vec<PartitionInfo>,
    pub configs: Vec<(String, String)>,
}

/// Brokers and topics as the cluster reports them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterDescription {
    pub brokers: Vec<BrokerInfo>,
    pub topics: Vec<Arc<TopicInfo>>,
}

/// A consumer group as `list_groups` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    /// `Empty`, `Reconciling` or `Stable`.
    pub state: String,
    pub member_count: u32,
}

/// A consumer group: its members and committed offsets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    /// `Empty`, `Reconciling` or `Stable`.
    pub state: String,
    /// Bumped whenever the group's members or subscriptions change.
    pub group_epoch: i32,
    /// The server-side assignor (`range`, `roundrobin`, `cooperative-sticky`).
    pub assignor: String,
    pub members: Vec<GroupMember>,
    pub offsets: Vec<CommittedOffset>,
}

/// One member of a consumer group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMember {
    pub member_id: String,
    /// Static membership (`group.instance.id`).
    pub instance_id: Option<String>,
    pub member_epoch: i32,
    pub subscribed_topics: Vec<String>,
    /// The partitions the member owns now.
    pub assigned: Vec<(String, i32)>,
    /// The partitions the coordinator wants it to own (equal once reconciled).
    pub target: Vec<(String, i32)>,
}

/// A group's committed offset of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    /// The next offset the group reads.
    pub offset: i64,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

/// How far a group is behind on one partition (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    /// `None`: the group never committed an offset for this partition.
    pub committed: Option<i64>,
    /// The high watermark; -1 when the partition cannot be asked (offline, or its
    /// topic is gone while the group still has an offset for it).
    pub log_end_offset: i64,
    /// `log_end_offset - committed`; `None` without either.
    pub lag: Option<i64>,
    /// The member that owns the partition now, if any.
    pub owner: Option<String>,
}

/// Administers a cluster; see the module docs.
#[derive(Clone, Debug)]
pub struct Admin {
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) request_timeout: Duration,
}

impl Admin {
    pub fn new(config: CommonConfig) -> Result<Admin, ClientError> {
        let cluster = Cluster::new(&config.bootstrap_servers, config.connect_timeout, config.request_timeout)?;
        Ok(Admin { cluster, request_timeout: config.request_timeout })
    }

    /// An admin sharing `cluster` with other clients.
    pub fn with_cluster(cluster: Arc<Cluster>, request_timeout: Duration) -> Admin {
        Admin { cluster, request_timeout }
    }

    /// Runs `call` with the `Admin` capability of any broker.
    pub(crate) async fn with_admin<T, F, Fut>(&self, operation: &'static str, call: F) -> Result<T, ClientError>
    where
        T: Send + 'static,
        F: FnOnce(admin::Client, String) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, ClientError>> + 'static,
    {
        let connection: Connection = self.cluster.any_connection().await?;
        self.with_admin_of(connection, operation, self.request_timeout, call).await
    }

    /// Runs `call` with the `Admin` capability of the broker coordinating
    /// `group_id`; a `NotCoordinator` answer (the group moved) is retried once
    /// against the coordinator found again.
    async fn with_group_admin<T, F, Fut>(
        &self,
        group_id: &str,
        operation: &'static str,
        call: F,
    ) -> Result<T, ClientError>
    where
        T: Send + 'static,
        F: Fn(admin::Client, String) -> Fut + Send + Sync + Clone + 'static,
        Fut: std::future::Future<Output = Result<T, ClientError>> + 'static,
    {
        let mut attempt = 0;
        loop {
            let outcome = match self.cluster.coordinator(group_id).await {
                Ok(connection) => self.with_admin_of(connection, operation, self.request_timeout, call.clone()).await,
                Err(error) => Err(error),
            };
            match outcome {
                Err(error) if attempt == 0 && error.code() == ErrorCode::NotCoordinator => {
                    let _ = self.cluster.forget_coordinator_on(group_id, error);
                    attempt += 1;
                }
                Err(error) => return Err(self.cluster.forget_coordinator_on(group_id, error)),
                Ok(value) => return Ok(value),
            }
        }
    }

    pub(crate) async fn with_admin_of<T, F, Fut>(
        &self,
        connection: Connection,
        operation: &'static str,
        timeout: std::time::Duration,
        call: F,
    ) -> Result<T, ClientError>
    where
        T: Send + 'static,
        F: FnOnce(admin::Client, String) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, ClientError>> + 'static,
    {
        let address = connection.address().to_owned();
        let work = connection.call(move |client: broker::Client| async move {
            let admin = client.admin_request().send().pipeline.get_admin();
            call(admin, address).await
        });
        match tokio::time::timeout(timeout, work).await {
            Ok(outcome) => outcome,
            Err(_) => {
                // The next admin call goes elsewhere first, on a fresh connection.
                self.cluster.forget_unanswered(&connection).await;
                Err(ClientError::Timeout { operation, timeout_ms: timeout.as_millis() as u64 })
            }
        }
    }

    pub async fn create_topic(&self, topic: NewTopic) -> Result<(), ClientError> {
        let name = topic.name.clone();
        self.with_admin("create topic", move |admin, address| async move {
            let mut request = admin.create_topic_request();
            let mut spec = request.get().init_spec();
            spec.set_name(&topic.name[..]);
            spec.set_partition_count(topic.partition_count);
            spec.set_replication_factor(topic.replication_factor);
            let mut configs = spec.init_configs(topic.configs.len() as u32);
            for (index, (key, value)) in topic.configs.iter().enumerate() {
                let mut entry = configs.reborrow().get(index as u32);
                entry.set_key(&key[..]);
                entry.set_value(&value[..]);
            }
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            refused_or_ok!(response)
        })
        .await?;
        self.cluster.invalidate(&name);
        Ok(())
    }

    pub async fn delete_topic(&self, name: &str) -> Result<(), ClientError> {
        let topic = name.to_owned();
        self.with_admin("delete topic", move |admin, address| async move {
            let mut request = admin.delete_topic_request();
            request.get().set_name(&topic[..]);
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            refused_or_ok!(response)
        })
        .await?;
        self.cluster.invalidate(name);
        Ok(())
    }

    /// Topic names, sorted.
    pub async fn list_topics(&self) -> Result<Vec<String>, ClientError> {
        self.with_admin("list topics", move |admin, address| async move {
            let response = admin
                .list_topics_request()
                .send()
                .promise
                .await
                .map_err(|error| ClientError::from_rpc(&address, error))?;
            let names = response.get()?.get_names()?;
            names.iter().map(|name| Ok(name?.to_str()?.to_owned())).collect()
        })
        .await
    }

    pub async fn describe_topic(&self, name: &str) -> Result<TopicDescription, ClientError> {
        let topic = name.to_owned();
        self.with_admin("describe topic", move |admin, address| async move {
            let mut request = admin.describe_topic_request();
            request.get().set_name(&topic[..]);
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            let description = response.get_description()?;
            let partitions =
                description.get_partitions()?.iter().map(read_partition_metadata).collect::<Result<_, _>>()?;
            let configs = description
                .get_configs()?
                .iter()
                .map(|entry| Ok((entry.get_key()?.to_str()?.to_owned(), entry.get_value()?.to_str()?.to_owned())))
                .collect::<Result<_, ClientError>>()?;
            Ok(TopicDescription { name: description.get_name()?.to_str()?.to_owned(), partitions, configs })
        })
        .await
    }

    /// Brokers with their epoch and state, the active controller, the voters.
    pub async fn cluster_status(&self) -> Result<ClusterStatus, ClientError> {
        self.with_admin("describe cluster", move |admin, address| async move {
            let response = admin
                .describe_cluster_request()
                .send()
                .promise
                .await
                .map_err(|error| ClientError::from_rpc(&address, error))?;
            let cluster = response.get()?.get_cluster()?;
            let brokers = cluster
                .get_brokers()?
                .iter()
                .map(|broker| {
                    let rack = broker.get_rack()?.to_str()?.to_owned();
                    Ok(BrokerStatus {
                        id: broker.get_id(),
                        host: broker.get_host()?.to_str()?.to_owned(),
                        port: broker.get_port(),
                        epoch: broker.get_epoch(),
                        state: broker.get_state()?.to_str()?.to_owned(),
                        rack: (!rack.is_empty()).then_some(rack),
                        metadata_offset: broker.get_metadata_offset(),
                    })
                })
                .collect::<Result<_, ClientError>>()?;
            Ok(ClusterStatus {
                cluster_id: cluster.get_cluster_id()?.to_str()?.to_owned(),
                active_controller: cluster.get_active_controller(),
                voters: cluster.get_voters()?.iter().collect(),
                brokers,
                answered_by: cluster.get_answered_by(),
                metadata_offset: cluster.get_metadata_offset(),
                partition_count: cluster.get_partition_count(),
                under_replicated: texts(cluster.get_under_replicated()?)?,
                under_min_isr: texts(cluster.get_under_min_isr()?)?,
                offline: texts(cluster.get_offline()?)?,
            })
        })
        .await
    }

    /// Moves the leadership of every partition back to its preferred replica
    /// (the first) where that broker is active and in sync; returns how many
    /// partitions moved.
    pub async fn elect_preferred_leaders(&self) -> Result<u32, ClientError> {
        self.with_admin("elect preferred leaders", move |admin, address| async move {
            let response = admin
                .elect_preferred_leaders_request()
                .send()
                .promise
                .await
                .map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            Ok(response.get_moved())
        })
        .await
    }

    /// Starts moving partitions of `topic` to new replicas — (partition, target
    /// replicas, the first the preferred leader) — as Kafka's partition
    /// reassignment does: the new replicas copy the leader's log and join the
    /// ISR, then the others are dropped. Returns once the cluster metadata holds
    /// the change; [`Admin::describe_topic`] shows the progress
    /// (`target_replicas` empties when a partition is done).
    pub async fn reassign_partitions(&self, topic: &str, assignments: Vec<(u32, Vec<i32>)>) -> Result<(), ClientError> {
        let topic = topic.to_owned();
        self.with_admin("reassign partitions", move |admin, address| async move {
            let mut request = admin.reassign_partitions_request();
            let mut params = request.get();
            params.set_topic(&topic[..]);
            let mut list = params.init_assignments(assignments.len() as u32);
            for (index, (partition, replicas)) in assignments.iter().enumerate() {
                let mut entry = list.reborrow().get(index as u32);
                entry.set_partition(*partition);
                let mut targets = entry.init_replicas(replicas.len() as u32);
                for (slot, replica) in replicas.iter().enumerate() {
                    targets.set(slot as u32, *replica);
                }
            }
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            refused_or_ok!(response)
        })
        .await
    }

    /// Sets config overrides; an empty value resets the key to the broker default.
    pub async fn alter_topic_config(&self, name: &str, configs: Vec<(String, String)>) -> Result<(), ClientError> {
        let topic = name.to_owned();
        self.with_admin("alter topic config", move |admin, address| async move {
            let mut request = admin.alter_topic_config_request();
            let mut params = request.get();
            params.set_name(&topic[..]);
            let mut entries = params.init_configs(configs.len() as u32);
            for (index, (key, value)) in configs.iter().enumerate() {
                let mut entry = entries.reborrow().get(index as u32);
                entry.set_key(&key[..]);
                entry.set_value(&value[..]);
            }
            let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
            let response = response.get()?;
            refused_or_ok!(response)
        })
        .await
    }

    /// Brokers and every topic with its partitions and leaders.
    pub async fn describe_cluster(&self) -> Result<ClusterDescription, ClientError> {
        let topics = self.cluster.refresh(&[]).await?;
        Ok(ClusterDescription { brokers: self.cluster.brokers(), topics })
    }

    /// The log start offset and high watermark of a partition.
    pub async fn watermarks(&self, topic: &str, partition: i32) -> Result<(i64, i64), ClientError> {
        let start = list_offset(&self.cluster, topic, partition, Offset::Beginning).await?;
        let end = list_offset(&self.cluster, topic, partition, Offset::End).await?;
        Ok((start, end))
    }

    /// Resolves `offset` of a partition to a number with `listOffset`:
    /// `Beginning` is the log start offset, `End` the high watermark,
    /// `Timestamp` the first record at or after it (the high watermark when every
    /// record is older); `At` is returned as is.
    pub async fn offset_for(&self, topic: &str, partition: i32, offset: Offset) -> Result<i64, ClientError> {
        list_offset(&self.cluster, topic, partition, offset).await
    }

    /// Every consumer group, by group id: each broker lists the groups it
    /// coordinates, so every broker is asked.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>, ClientError> {
        self.cluster.refresh(&[]).await?;
        let mut groups = Vec::new();
        let mut answered = false;
        let mut first_error = None;
        for address in self.cluster.broker_addresses() {
            let listed = match self.cluster.connection(&address).await {
                Ok(connection) => {
                    self.with_admin_of(connection, "list groups", self.request_timeout, list_groups_call).await
                }
                Err(error) => Err(error),
            };
            // A broker that is down coordinates nothing right now: the others answer.
            match listed {
                Ok(listed) => {
                    answered = true;
                    groups.extend(listed);
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        if let (false, Some(error)) = (answered, first_error) {
            return Err(error);
        }
        groups.sort_by(|left: &GroupListing, right| left.group_id.cmp(&right.group_id));
        groups.dedup_by(|left, right| left.group_id == right.group_id);
        Ok(groups)
    }
}

async fn list_groups_call(admin: admin::Client, address: String) -> Result<Vec<GroupListing>, ClientError> {
    let response =
        admin.list_groups_request().send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
    let groups = response.get()?.get_groups()?;
    groups
        .iter()
        .map(|group| {
            Ok(GroupListing {
                group_id: group.get_group_id()?.to_str()?.to_owned(),
                state: group.get_state()?.to_str()?.to_owned(),
                member_count: group.get_member_count(),
            })
        })
        .collect()
}

impl Admin {
    /// A group's members and committed offsets; `GroupIdNotFound` for an unknown
    /// group.
    pub async fn describe_group(&self, group_id: &str) -> Result<GroupDescription, ClientError> {
        let group = group_id.to_owned();
        let group_id = group_id.to_owned();
        self.with_group_admin(&group, "describe group", move |admin, address| {
            let group_id = group_id.clone();
            async move {
                let mut request = admin.describe_group_request();
                request.get().set_group_id(&group_id[..]);
                let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
                let response = response.get()?;
                if response.has_error() {
                    return Err(broker_error(response.get_error()?));
                }
                read_group_description(response.get_description()?)
            }
        })
        .await
    }

    /// The lag of every partition a group consumes or has an offset for (see the
    /// module docs), by topic and partition.
    pub async fn group_lag(&self, group_id: &str) -> Result<Vec<PartitionLag>, ClientError> {
        let description = self.describe_group(group_id).await?;
        self.lag_of(&description).await
    }

    /// [`Admin::group_lag`] of a description already fetched (so members,
    /// offsets and lag come from one snapshot of the group).
    pub async fn lag_of(&self, description: &GroupDescription) -> Result<Vec<PartitionLag>, ClientError> {
        let committed: BTreeMap<(String, i32), i64> = description
            .offsets
            .iter()
            .map(|offset| ((offset.topic.clone(), offset.partition), offset.offset))
            .collect();
        let owners: BTreeMap<(String, i32), String> = description
            .members
            .iter()
            .flat_map(|member| member.assigned.iter().map(|key| (key.clone(), member.member_id.clone())))
            .collect();
        let topics: BTreeSet<String> = committed
            .keys()
            .map(|(topic, _)| topic.clone())
            .chain(description.members.iter().flat_map(|member| member.subscribed_topics.iter().cloned()))
            .collect();
        // Partition → whether it can be asked for its log end offset.
        let mut partitions: BTreeMap<(String, i32), bool> = committed.keys().map(|key| (key.clone(), false)).collect();
        for topic in topics {
            match self.cluster.topic(&topic).await {
                Ok(info) => {
                    for partition in &info.partitions {
                        partitions.insert((topic.clone(), partition.partition), partition.error.is_none());
                    }
                }
                Err(ClientError::Broker { code: ErrorCode::UnknownTopicOrPartition, .. }) => {}
                Err(error) => return Err(error),
            }
        }
        let ends = futures::future::try_join_all(partitions.iter().map(|((topic, partition), online)| async move {
            match online {
                true => self.watermarks(topic, *partition).await.map(|(_, high_watermark)| high_watermark),
                false => Ok(-1),
            }
        }))
        .await?;
        Ok(partitions
            .into_keys()
            .zip(ends)
            .map(|(key, log_end_offset)| {
                let committed = committed.get(&key).copied();
                let lag = committed.filter(|_| log_end_offset >= 0).map(|committed| log_end_offset - committed);
                let owner = owners.get(&key).cloned();
                PartitionLag { topic: key.0, partition: key.1, committed, log_end_offset, lag, owner }
            })
            .collect())
    }

    /// Deletes a group and its committed offsets; refused with `NonEmptyGroup`
    /// while it has members, `GroupIdNotFound` for an unknown group.
    pub async fn delete_group(&self, group_id: &str) -> Result<(), ClientError> {
        let group = group_id.to_owned();
        let group_id = group_id.to_owned();
        self.with_group_admin(&group, "delete group", move |admin, address| {
            let group_id = group_id.clone();
            async move {
                let mut request = admin.delete_group_request();
                request.get().set_group_id(&group_id[..]);
                let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
                let response = response.get()?;
                refused_or_ok!(response)
            }
        })
        .await
    }

    /// Sets a group's committed offsets (each the next offset to read); refused
    /// with `NonEmptyGroup` while it has members. Creates the group if needed.
    pub async fn reset_offsets(&self, group_id: &str, offsets: Vec<((String, i32), i64)>) -> Result<(), ClientError> {
        let group = group_id.to_owned();
        let group_id = group_id.to_owned();
        self.with_group_admin(&group, "reset offsets", move |admin, address| {
            let (group_id, offsets) = (group_id.clone(), offsets.clone());
            async move {
                let mut request = admin.reset_offsets_request();
                let mut params = request.get();
                params.set_group_id(&group_id[..]);
                let mut entries = params.init_offsets(offsets.len() as u32);
                for (index, ((topic, partition), offset)) in offsets.iter().enumerate() {
                    let mut entry = entries.reborrow().get(index as u32);
                    entry.set_topic(&topic[..]);
                    entry.set_partition(*partition);
                    entry.set_offset(*offset);
                }
                let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
                let response = response.get()?;
                refused_or_ok!(response)
            }
        })
        .await
    }
}

fn read_group_description(description: group_description::Reader<'_>) -> Result<GroupDescription, ClientError> {
    let text = |reader: capnp::Result<capnp::text::Reader<'_>>| -> Result<String, ClientError> {
        Ok(reader?.to_str()?.to_owned())
    };
    let members = description
        .get_members()?
        .iter()
        .map(|member| {
            let instance_id = text(member.get_instance_id())?;
            Ok(GroupMember {
                member_id: text(member.get_member_id())?,
                instance_id: (!instance_id.is_empty()).then_some(instance_id),
                member_epoch: member.get_member_epoch(),
                subscribed_topics: member.get_subscribed_topics()?.iter().map(text).collect::<Result<_, _>>()?,
                assigned: read_topic_partitions(member.get_assigned()?)?,
                target: read_topic_partitions(member.get_target()?)?,
            })
        })
        .collect::<Result<_, ClientError>>()?;
    let offsets = description
        .get_offsets()?
        .iter()
        .map(|offset| {
            Ok(CommittedOffset {
                topic: text(offset.get_topic())?,
                partition: offset.get_partition(),
                offset: offset.get_offset(),
                metadata: text(offset.get_metadata())?,
                commit_timestamp_ms: offset.get_commit_timestamp_ms(),
            })
        })
        .collect::<Result<_, ClientError>>()?;
    Ok(GroupDescription {
        group_id: text(description.get_group_id())?,
        state: text(description.get_state())?,
        group_epoch: description.get_group_epoch(),
        assignor: text(description.get_assignor())?,
        members,
        offsets,
    })
}

fn read_topic_partitions(
    list: capnp::struct_list::Reader<'_, topic_partition::Owned>,
) -> Result<Vec<(String, i32)>, ClientError> {
    list.iter().map(|entry| Ok((entry.get_topic()?.to_str()?.to_owned(), entry.get_partition()))).collect()
}

fn texts(list: capnp::text_list::Reader<'_>) -> Result<Vec<String>, ClientError> {
    list.iter().map(|text| Ok(text?.to_str()?.to_owned())).collect()
}

//! [`Coordinator`]: the consumer-group coordinator of one `__consumer_offsets`
//! partition, as a replicated state machine.
//!
//! Every request handler returns the records to append together with the
//! response, and changes no group state (handlers that take `&mut self` touch only
//! volatile bookkeeping: member-id counter, session timers); the owner appends the
//! records and then calls [`Coordinator::replay`] for each. State changes only by
//! replay, so a restarted
//! (or, later, a new) coordinator rebuilds every group by replaying the partition
//! from the start. Handlers compute their response by replaying their own records
//! onto a copy of the group, so response and state can never disagree.
//!
//! The protocol (Kafka's KIP-848, server-side assignment):
//! 1. A member heartbeats with its member epoch (0 to join, -1 to leave), its
//!    subscription when it changed, and the partitions it owns.
//! 2. Joining, leaving, a changed subscription or a fenced member bumps the group
//!    epoch; the coordinator then computes a new target assignment with the
//!    group's assignor (range, round-robin or cooperative-sticky).
//! 3. Each member is reconciled towards its target on its own heartbeats: first it
//!    is told to give up the partitions it owns that are no longer its (they are
//!    *revoking* until a heartbeat shows they are gone); only then does it get the
//!    new ones, and only those no other member still owns or is revoking. So a
//!    partition never has two owners, and partitions that do not move are never
//!    interrupted.
//! 4. A member whose last heartbeat is older than its session timeout is fenced
//!    (as if it left) by [`Coordinator::expire`]; a leave is immediate.
//! 5. Static members (`group.instance.id`) that rejoin under a new member id take
//!    over their old assignment without a rebalance.
//! 6. Offset commits carry the member epoch: a member fenced or moved on (a
//!    zombie) cannot overwrite newer commits. Groups without members accept
//!    commits without a member (tools, `assign`-mode consumers).
//!
//! Session timers are volatile (restarted when the coordinator loads), as in Kafka.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::assignor::{assign, AssignorKind, MemberSpec, TopicPartition};
use super::record::{CurrentAssignmentValue, GroupRecord, MemberValue, OffsetValue};

/// The member epoch a member sends to join.
pub const JOIN_EPOCH: i32 = 0;
/// The member epoch a member sends to leave.
pub const LEAVE_EPOCH: i32 = -1;
/// Longest group id.
pub const GROUP_ID_BYTES_MAX: usize = 249;
/// Longest metadata string committed with an offset (Kafka's
/// `offset.metadata.max.bytes` is 4 KiB; transform checkpoints need more).
pub const OFFSET_METADATA_BYTES_MAX: usize = 32 * 1024;

/// Coordinator settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordinatorConfig {
    pub session_timeout_ms_default: u32,
    pub session_timeout_ms_min: u32,
    pub session_timeout_ms_max: u32,
    /// How often members are told to heartbeat.
    pub heartbeat_interval_ms: u32,
    pub assignor_default: AssignorKind,
    /// Committed offsets of a group without members expire after this (those
    /// committed with a leader epoch, transform checkpoints, do not).
    pub offsets_retention_ms: i64,
    /// Most members of one group (`group.max.size`).
    pub group_members_max: usize,
    /// Most groups the coordinator keeps: any client can create a group by
    /// heartbeating or committing under a new id, so their number is bounded too.
    pub groups_max: usize,
}

impl Default for CoordinatorConfig {
    fn default() -> CoordinatorConfig {
        CoordinatorConfig {
            session_timeout_ms_default: 45_000,
            session_timeout_ms_min: 500,
            session_timeout_ms_max: 300_000,
            heartbeat_interval_ms: 3_000,
            assignor_default: AssignorKind::CooperativeSticky,
            offsets_retention_ms: 7 * 24 * 60 * 60 * 1000,
            group_members_max: 1000,
            groups_max: 10_000,
        }
    }
}

/// Why a group request failed (the broker maps these to `ErrorCode`s).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("group id must be 1 to {GROUP_ID_BYTES_MAX} bytes")]
    InvalidGroupId,
    #[error("group {group_id:?} has no member {member_id:?}")]
    UnknownMemberId { group_id: String, member_id: String },
    #[error("member {member_id:?} is at epoch {current}, not {sent}: it was fenced; rejoin")]
    FencedMemberEpoch { member_id: String, sent: i32, current: i32 },
    #[error("member {member_id:?} committed with epoch {sent}; its epoch is {current}")]
    StaleMemberEpoch { member_id: String, sent: i32, current: i32 },
    #[error("no consumer group {0:?}")]
    GroupIdNotFound(String),
    #[error("group {0:?} has members")]
    NonEmptyGroup(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("{topic}-{partition} was committed under leader epoch {stored}; this commit carries {sent}: its sender was deposed")]
    FencedLeaderEpoch { topic: String, partition: u32, sent: i32, stored: i32 },
    #[error(
        "the coordinator already holds {0} groups, the most allowed; delete unused groups or wait for them to expire"
    )]
    TooManyGroups(usize),
}

/// One heartbeat.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeartbeatRequest {
    pub group_id: String,
    /// Empty to join with a coordinator-chosen id.
    pub member_id: String,
    pub instance_id: Option<String>,
    pub member_epoch: i32,
    /// `None`: unchanged since the last heartbeat (required to join).
    pub subscribed_topics: Option<Vec<String>>,
    /// Assignor name for a new group (`None`: the default).
    pub assignor: Option<String>,
    /// The partitions the member owns now (`None`: unchanged).
    pub owned: Option<Vec<TopicPartition>>,
    pub session_timeout_ms: Option<u32>,
}

/// The answer to a heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatResponse {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: u32,
    /// Every partition the member should own now (revoke the rest).
    pub assignment: Vec<TopicPartition>,
}

/// An offset commit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommitRequest {
    pub group_id: String,
    /// Empty with epoch -1: a commit from outside the group (only while it is empty).
    pub member_id: String,
    pub member_epoch: i32,
    pub offsets: Vec<(TopicPartition, i64, String)>,
    /// The committed partitions' leader epoch as the committer read them, if
    /// it is one that must be fenced by it (a transform task's checkpoint):
    /// the commit is refused with [`GroupError::FencedLeaderEpoch`] when an
    /// offset stored for one of them carries a newer epoch.
    pub leader_epoch: Option<i32>,
}

/// A group's state as `describe` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    Reconciling,
    Stable,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::Reconciling => "Reconciling",
            GroupState::Stable => "Stable",
        }
    }
}

/// One member as `describe` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub member_epoch: i32,
    pub subscribed_topics: Vec<String>,
    pub assigned: Vec<TopicPartition>,
    pub target: Vec<TopicPartition>,
}

/// A group as `describe` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: GroupState,
    pub group_epoch: i32,
    pub assignor: String,
    pub members: Vec<MemberDescription>,
    pub offsets: Vec<(TopicPartition, OffsetValue)>,
}

#[derive(Clone, Debug)]
struct Group {
    epoch: i32,
    assignor: AssignorKind,
    members: BTreeMap<String, MemberValue>,
    target: BTreeMap<String, BTreeSet<TopicPartition>>,
    target_epoch: i32,
    current: BTreeMap<String, CurrentAssignmentValue>,
    offsets: BTreeMap<TopicPartition, OffsetValue>,
}

impl Group {
    fn new(assignor: AssignorKind) -> Group {
        Group {
            epoch: 0,
            assignor,
            members: BTreeMap::new(),
            target: BTreeMap::new(),
            target_epoch: 0,
            current: BTreeMap::new(),
            offsets: BTreeMap::new(),
        }
    }

    /// Applies one record of this group.
    fn apply(&mut self, record: &GroupRecord) {
        match record {
            GroupRecord::Group { value: Some((epoch, assignor)), .. } => {
                self.epoch = *epoch;
                self.assignor = AssignorKind::parse(assignor).unwrap_or(self.assignor);
            }
            GroupRecord::Group { value: None, .. } | GroupRecord::Snapshot { .. } => {}
            GroupRecord::Member { member_id, value, .. } => set(&mut self.members, member_id, value.clone()),
            GroupRecord::TargetAssignment { member_id, value, .. } => {
                set(&mut self.target, member_id, value.as_ref().map(|partitions| partitions.iter().cloned().collect()))
            }
            GroupRecord::TargetEpoch { value, .. } => self.target_epoch = value.unwrap_or(0),
            GroupRecord::CurrentAssignment { member_id, value, .. } => set(&mut self.current, member_id, value.clone()),
            GroupRecord::Offset { topic, partition, value, .. } => {
                let key = TopicPartition { topic: topic.clone(), partition: *partition };
                set(&mut self.offsets, &key, value.clone());
            }
        }
    }

    fn state(&self) -> GroupState {
        if self.members.is_empty() {
            return GroupState::Empty;
        }
        let settled = self.target_epoch == self.epoch
            && self.current.values().all(|current| current.revoking.is_empty() && current.member_epoch == self.epoch)
            && self.members.keys().all(|member_id| {
                let assigned: BTreeSet<&TopicPartition> =
                    self.current.get(member_id).map(|current| current.assigned.iter().collect()).unwrap_or_default();
                let target: BTreeSet<&TopicPartition> =
                    self.target.get(member_id).map(|target| target.iter().collect()).unwrap_or_default();
                assigned == target
            });
        if settled {
            GroupState::Stable
        } else {
            GroupState::Reconciling
        }
    }

    fn member_by_instance(&self, instance_id: &str) -> Option<&String> {
        self.members.iter().find(|(_, member)| member.instance_id.as_deref() == Some(instance_id)).map(|(id, _)| id)
    }
}

fn set<K: Ord + Clone, V>(map: &mut BTreeMap<K, V>, key: &K, value: Option<V>) {
    match value {
        Some(value) => {
            map.insert(key.clone(), value);
        }
        None => {
            map.remove(key);
        }
    }
}

/// Records built against a working copy of one group: each is applied to the copy
/// as it is added, so later steps see earlier ones.
struct Changes {
    group_id: String,
    group: Group,
    records: Vec<GroupRecord>,
}

impl Changes {
    fn push(&mut self, record: GroupRecord) {
        self.group.apply(&record);
        self.records.push(record);
    }

    fn bump_epoch(&mut self) {
        let value = Some((self.group.epoch + 1, self.group.assignor.name().to_owned()));
        self.push(GroupRecord::Group { group_id: self.group_id.clone(), value });
    }

    fn remove_member(&mut self, member_id: &str) {
        let (group_id, member_id) = (self.group_id.clone(), member_id.to_owned());
        self.push(GroupRecord::Member { group_id: group_id.clone(), member_id: member_id.clone(), value: None });
        if self.group.target.contains_key(&member_id) {
            let record =
                GroupRecord::TargetAssignment { group_id: group_id.clone(), member_id: member_id.clone(), value: None };
            self.push(record);
        }
        if self.group.current.contains_key(&member_id) {
            self.push(GroupRecord::CurrentAssignment { group_id, member_id, value: None });
        }
    }

    /// Recomputes the target assignment if the group epoch moved past it.
    fn refresh_target(&mut self, partition_counts: &BTreeMap<String, u32>) {
        if self.group.target_epoch >= self.group.epoch {
            return;
        }
        let specs: Vec<MemberSpec> = self
            .group
            .members
            .iter()
            .map(|(member_id, member)| MemberSpec {
                member_id: member_id.clone(),
                instance_id: member.instance_id.clone(),
                subscribed_topics: member.subscribed_topics.clone(),
                current: self.group.target.get(member_id).cloned().unwrap_or_default(),
            })
            .collect();
        let target = assign(self.group.assignor, &specs, partition_counts);
        for (member_id, partitions) in target {
            if self.group.target.get(&member_id) != Some(&partitions) {
                let value = Some(partitions.into_iter().collect());
                self.push(GroupRecord::TargetAssignment { group_id: self.group_id.clone(), member_id, value });
            }
        }
        let epoch = self.group.epoch;
        self.push(GroupRecord::TargetEpoch { group_id: self.group_id.clone(), value: Some(epoch) });
    }

    /// One reconciliation step of `member_id` (see the module docs, step 3).
    fn reconcile(&mut self, member_id: &str, owned: Option<&[TopicPartition]>) {
        let current = self.group.current.get(member_id).cloned().unwrap_or_default();
        let target = self.group.target.get(member_id).cloned().unwrap_or_default();
        let mut next = current.clone();
        if !current.revoking.is_empty() {
            let released =
                owned.is_some_and(|owned| owned.iter().all(|partition| !current.revoking.contains(partition)));
            if released {
                next.revoking.clear();
            }
        }
        if next.revoking.is_empty() {
            let (keep, revoke): (Vec<TopicPartition>, Vec<TopicPartition>) =
                current.assigned.iter().cloned().partition(|partition| target.contains(partition));
            if revoke.is_empty() {
                let owned_elsewhere: BTreeSet<&TopicPartition> = self
                    .group
                    .current
                    .iter()
                    .filter(|(other, _)| other.as_str() != member_id)
                    .flat_map(|(_, other)| other.assigned.iter().chain(other.revoking.iter()))
                    .collect();
                let mut assigned: BTreeSet<TopicPartition> = keep.into_iter().collect();
                assigned.extend(target.iter().filter(|partition| !owned_elsewhere.contains(partition)).cloned());
                next.assigned = assigned.into_iter().collect();
                if next.member_epoch != self.group.target_epoch {
                    next.previous_member_epoch = next.member_epoch;
                    next.member_epoch = self.group.target_epoch;
                }
            } else {
                next.assigned = keep;
                next.revoking = revoke;
            }
        }
        if self.group.current.get(member_id) != Some(&next) {
            let record = GroupRecord::CurrentAssignment {
                group_id: self.group_id.clone(),
                member_id: member_id.to_owned(),
                value: Some(next),
            };
            self.push(record);
        }
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Coordinator {
    config: CoordinatorConfig,
    groups: BTreeMap<String, Group>,
    /// Volatile: the last heartbeat of each (group, member).
    last_seen_ms: HashMap<(String, String), i64>,
    /// Volatile: makes coordinator-chosen member ids unique.
    member_id_counter: u64,
    /// A snapshot being replayed: it replaces `groups` when its end marker comes.
    snapshot: Option<BTreeMap<String, Group>>,
}

impl Coordinator {
    pub fn new(config: CoordinatorConfig) -> Coordinator {
        Coordinator { config, ..Coordinator::default() }
    }

    pub fn config(&self) -> &CoordinatorConfig {
        &self.config
    }

    /// Applies an appended (or replayed) record.
    pub fn replay(&mut self, record: &GroupRecord) {
        match record {
            GroupRecord::Snapshot { start: true } => {
                self.snapshot = Some(BTreeMap::new());
                return;
            }
            GroupRecord::Snapshot { start: false } => {
                if let Some(groups) = self.snapshot.take() {
                    self.groups = groups;
                    let groups = &self.groups;
                    self.last_seen_ms.retain(|(group, member), _| {
                        groups.get(group).is_some_and(|group| group.members.contains_key(member))
                    });
                }
                return;
            }
            _ => {}
        }
        let group_id = record.group_id().to_owned();
        let assignor = self.config.assignor_default;
        let groups = self.snapshot.as_mut().unwrap_or(&mut self.groups);
        if let GroupRecord::Group { value: None, .. } = record {
            groups.remove(&group_id);
            self.last_seen_ms.retain(|(group, _), _| *group != group_id);
            return;
        }
        groups.entry(group_id.clone()).or_insert_with(|| Group::new(assignor)).apply(record);
        if let GroupRecord::Member { member_id, value: None, .. } = record {
            self.last_seen_ms.remove(&(group_id, member_id.clone()));
        }
    }

    /// Ends a replay: a snapshot without its end marker (torn by a crash) is
    /// dropped, and the state before it stands. Returns whether one was: the
    /// new owner must then write a whole snapshot before anything else, or a
    /// later replay would take every record after the torn start as part of it.
    pub fn finish_replay(&mut self) -> bool {
        self.snapshot.take().is_some()
    }

    /// The whole state as records, between snapshot markers: appended, they let
    /// the owner drop every record before them (see the record module docs).
    pub fn snapshot_records(&self) -> Vec<GroupRecord> {
        let mut records = vec![GroupRecord::Snapshot { start: true }];
        for (group_id, group) in &self.groups {
            let value = Some((group.epoch, group.assignor.name().to_owned()));
            records.push(GroupRecord::Group { group_id: group_id.clone(), value });
            records.push(GroupRecord::TargetEpoch { group_id: group_id.clone(), value: Some(group.target_epoch) });
            for (member_id, member) in &group.members {
                let (group_id, member_id) = (group_id.clone(), member_id.clone());
                records.push(GroupRecord::Member { group_id, member_id, value: Some(member.clone()) });
            }
            for (member_id, target) in &group.target {
                let (group_id, member_id) = (group_id.clone(), member_id.clone());
                let value = Some(target.iter().cloned().collect());
                records.push(GroupRecord::TargetAssignment { group_id, member_id, value });
            }
            for (member_id, current) in &group.current {
                let (group_id, member_id) = (group_id.clone(), member_id.clone());
                records.push(GroupRecord::CurrentAssignment { group_id, member_id, value: Some(current.clone()) });
            }
            for (partition, offset) in &group.offsets {
                records.push(GroupRecord::Offset {
                    group_id: group_id.clone(),
                    topic: partition.topic.clone(),
                    partition: partition.partition,
                    value: Some(offset.clone()),
                });
            }
        }
        records.push(GroupRecord::Snapshot { start: false });
        records
    }

    fn changes(&self, group_id: &str) -> Changes {
        let group = self.groups.get(group_id).cloned().unwrap_or_else(|| Group::new(self.config.assignor_default));
        Changes { group_id: group_id.to_owned(), group, records: Vec::new() }
    }

    /// Handles one heartbeat (join, leave, or a regular beat). The caller appends
    /// the records, replays them, then calls [`Coordinator::seen`].
    pub fn heartbeat(
        &mut self,
        request: &HeartbeatRequest,
        partition_counts: &BTreeMap<String, u32>,
    ) -> Result<(Vec<GroupRecord>, HeartbeatResponse), GroupError> {
        validate_group_id(&request.group_id)?;
        let mut changes = self.changes(&request.group_id);
        if !self.groups.contains_key(&request.group_id) {
            self.room_for_a_group()?;
            let assignor = match &request.assignor {
                Some(name) => AssignorKind::parse(name)
                    .ok_or_else(|| GroupError::InvalidRequest(format!("unknown assignor {name:?}")))?,
                None => self.config.assignor_default,
            };
            changes.group.assignor = assignor;
            let value = Some((0, assignor.name().to_owned()));
            changes.push(GroupRecord::Group { group_id: request.group_id.clone(), value });
        }
        let member_id = match request.member_epoch {
            LEAVE_EPOCH => {
                self.known_member(&changes.group, request)?;
                changes.remove_member(&request.member_id);
                changes.bump_epoch();
                changes.refresh_target(partition_counts);
                let response = HeartbeatResponse {
                    member_id: request.member_id.clone(),
                    member_epoch: LEAVE_EPOCH,
                    heartbeat_interval_ms: 0,
                    assignment: Vec::new(),
                };
                return Ok((changes.records, response));
            }
            JOIN_EPOCH => self.join(&mut changes, request)?,
            sent => {
                self.known_member(&changes.group, request)?;
                let current = changes.group.current.get(&request.member_id).cloned().unwrap_or_default();
                if sent != current.member_epoch && sent != current.previous_member_epoch {
                    let member_id = request.member_id.clone();
                    return Err(GroupError::FencedMemberEpoch { member_id, sent, current: current.member_epoch });
                }
                self.update_subscription(&mut changes, request)?;
                request.member_id.clone()
            }
        };
        changes.refresh_target(partition_counts);
        changes.reconcile(&member_id, request.owned.as_deref());
        let current = changes.group.current.get(&member_id).cloned().unwrap_or_default();
        // At least three beats per session, however short the member made it.
        let session_timeout_ms =
            changes.group.members.get(&member_id).map_or(u32::MAX, |member| member.session_timeout_ms);
        let response = HeartbeatResponse {
            member_id,
            member_epoch: current.member_epoch,
            heartbeat_interval_ms: self.config.heartbeat_interval_ms.min(session_timeout_ms / 3),
            assignment: current.assigned,
        };
        Ok((changes.records, response))
    }

    fn known_member(&self, group: &Group, request: &HeartbeatRequest) -> Result<(), GroupError> {
        match group.members.contains_key(&request.member_id) {
            true => Ok(()),
            false => Err(GroupError::UnknownMemberId {
                group_id: request.group_id.clone(),
                member_id: request.member_id.clone(),
            }),
        }
    }

    fn member_value(
        &self,
        request: &HeartbeatRequest,
        previous: Option<&MemberValue>,
    ) -> Result<MemberValue, GroupError> {
        let config = &self.config;
        let session_timeout_ms = request
            .session_timeout_ms
            .or(previous.map(|member| member.session_timeout_ms))
            .unwrap_or(config.session_timeout_ms_default);
        if !(config.session_timeout_ms_min..=config.session_timeout_ms_max).contains(&session_timeout_ms) {
            return Err(GroupError::InvalidRequest(format!(
                "session timeout {session_timeout_ms} ms is outside [{}, {}]",
                config.session_timeout_ms_min, config.session_timeout_ms_max
            )));
        }
        let mut subscribed_topics = match (&request.subscribed_topics, previous) {
            (Some(topics), _) => topics.clone(),
            (None, Some(member)) => member.subscribed_topics.clone(),
            (None, None) => {
                return Err(GroupError::InvalidRequest("a joining member must send its subscription".into()))
            }
        };
        subscribed_topics.sort();
        subscribed_topics.dedup();
        let instance_id =
            request.instance_id.clone().or_else(|| previous.and_then(|member| member.instance_id.clone()));
        Ok(MemberValue { instance_id, subscribed_topics, session_timeout_ms })
    }

    fn join(&mut self, changes: &mut Changes, request: &HeartbeatRequest) -> Result<String, GroupError> {
        let group_id = request.group_id.clone();
        // A static member coming back under a new id takes over its old place.
        let previous_static =
            request.instance_id.as_deref().and_then(|instance| changes.group.member_by_instance(instance)).cloned();
        if let Some(old_id) = previous_static {
            let old_member = changes.group.members.get(&old_id).cloned();
            let member = self.member_value(request, old_member.as_ref())?;
            let subscription_changed =
                old_member.as_ref().map(|old| &old.subscribed_topics) != Some(&member.subscribed_topics);
            let target = changes.group.target.get(&old_id).cloned();
            let current = changes.group.current.get(&old_id).cloned();
            let member_id = self.new_member_id(request);
            changes.remove_member(&old_id);
            changes.push(GroupRecord::Member {
                group_id: group_id.clone(),
                member_id: member_id.clone(),
                value: Some(member),
            });
            if let Some(target) = target {
                let value = Some(target.into_iter().collect());
                changes.push(GroupRecord::TargetAssignment {
                    group_id: group_id.clone(),
                    member_id: member_id.clone(),
                    value,
                });
            }
            if let Some(current) = current {
                changes.push(GroupRecord::CurrentAssignment {
                    group_id,
                    member_id: member_id.clone(),
                    value: Some(current),
                });
            }
            if subscription_changed {
                changes.bump_epoch();
            }
            return Ok(member_id);
        }
        if changes.group.members.len() >= self.config.group_members_max {
            return Err(GroupError::InvalidRequest(format!(
                "group {group_id:?} has {} members, the most allowed",
                self.config.group_members_max
            )));
        }
        let member = self.member_value(request, None)?;
        let member_id = match request.member_id.is_empty() {
            true => self.new_member_id(request),
            false => request.member_id.clone(),
        };
        if changes.group.members.contains_key(&member_id) {
            return Err(GroupError::InvalidRequest(format!("member id {member_id:?} is taken")));
        }
        changes.push(GroupRecord::Member { group_id, member_id: member_id.clone(), value: Some(member) });
        changes.bump_epoch();
        Ok(member_id)
    }

    fn update_subscription(&self, changes: &mut Changes, request: &HeartbeatRequest) -> Result<(), GroupError> {
        let previous = changes.group.members.get(&request.member_id).cloned();
        let member = self.member_value(request, previous.as_ref())?;
        if previous.as_ref() != Some(&member) {
            let subscription_changed =
                previous.map(|old| old.subscribed_topics) != Some(member.subscribed_topics.clone());
            let record = GroupRecord::Member {
                group_id: request.group_id.clone(),
                member_id: request.member_id.clone(),
                value: Some(member),
            };
            changes.push(record);
            if subscription_changed {
                changes.bump_epoch();
            }
        }
        Ok(())
    }

    /// A member id no member of the group has. The counter is not persisted, so
    /// after a restart (replay) it starts again and would repeat ids of members
    /// that were replayed: skip those. Ends within `members + 1` tries, since
    /// every try yields a new id.
    fn new_member_id(&mut self, request: &HeartbeatRequest) -> String {
        let prefix = request.instance_id.as_deref().unwrap_or("member");
        let members = self.groups.get(&request.group_id).map(|group| &group.members);
        loop {
            self.member_id_counter += 1;
            let counter = self.member_id_counter;
            let id = format!("{prefix}-{:x}-{counter}", self.groups.len() as u64 ^ (counter << 16));
            if !members.is_some_and(|members| members.contains_key(&id)) {
                return id;
            }
        }
    }

    /// Records a heartbeat's arrival (session timer).
    pub fn seen(&mut self, group_id: &str, member_id: &str, now_ms: i64) {
        self.last_seen_ms.insert((group_id.to_owned(), member_id.to_owned()), now_ms);
    }

    /// Fences members whose session timed out, and expires the offsets of groups
    /// without members. Members never seen since this coordinator loaded start
    /// their session now.
    pub fn expire(&mut self, now_ms: i64, partition_counts: &BTreeMap<String, u32>) -> Vec<GroupRecord> {
        let mut records = Vec::new();
        for (group_id, group) in &self.groups {
            let mut changes: Option<Changes> = None;
            for (member_id, member) in &group.members {
                let key = (group_id.clone(), member_id.clone());
                let last_seen_ms = *self.last_seen_ms.entry(key).or_insert(now_ms);
                if now_ms - last_seen_ms > member.session_timeout_ms as i64 {
                    let changes = changes.get_or_insert_with(|| Changes {
                        group_id: group_id.clone(),
                        group: group.clone(),
                        records: Vec::new(),
                    });
                    changes.remove_member(member_id);
                    changes.bump_epoch();
                }
            }
            if let Some(mut changes) = changes {
                changes.refresh_target(partition_counts);
                records.extend(changes.records);
            }
            if group.members.is_empty() {
                // Offsets fenced by a leader epoch are transform checkpoints:
                // they live as long as their deployment, which deletes them.
                for (partition, offset) in &group.offsets {
                    let expired = now_ms - offset.commit_timestamp_ms > self.config.offsets_retention_ms;
                    if expired && offset.leader_epoch.is_none() {
                        records.push(GroupRecord::Offset {
                            group_id: group_id.clone(),
                            topic: partition.topic.clone(),
                            partition: partition.partition,
                            value: None,
                        });
                    }
                }
            }
        }
        records
    }

    /// Validates a commit (see the module docs, step 6) and returns its records.
    /// [`GroupError::TooManyGroups`] when a new group would pass `groups_max`.
    fn room_for_a_group(&self) -> Result<(), GroupError> {
        match self.groups.len() >= self.config.groups_max {
            true => Err(GroupError::TooManyGroups(self.config.groups_max)),
            false => Ok(()),
        }
    }

    pub fn commit_offsets(&self, request: &CommitRequest, now_ms: i64) -> Result<Vec<GroupRecord>, GroupError> {
        validate_group_id(&request.group_id)?;
        let group = self.groups.get(&request.group_id);
        let mut records = Vec::new();
        match group {
            Some(group) if !request.member_id.is_empty() => {
                let Some(current) = group
                    .members
                    .contains_key(&request.member_id)
                    .then(|| group.current.get(&request.member_id).map_or(0, |current| current.member_epoch))
                else {
                    return Err(GroupError::UnknownMemberId {
                        group_id: request.group_id.clone(),
                        member_id: request.member_id.clone(),
                    });
                };
                if request.member_epoch != current {
                    let member_id = request.member_id.clone();
                    return Err(match request.member_epoch < current {
                        true => GroupError::StaleMemberEpoch { member_id, sent: request.member_epoch, current },
                        false => GroupError::FencedMemberEpoch { member_id, sent: request.member_epoch, current },
                    });
                }
            }
            Some(group) if !group.members.is_empty() => {
                return Err(GroupError::UnknownMemberId {
                    group_id: request.group_id.clone(),
                    member_id: String::new(),
                });
            }
            Some(_) => {}
            None if request.member_id.is_empty() => {
                self.room_for_a_group()?;
                let value = Some((0, self.config.assignor_default.name().to_owned()));
                records.push(GroupRecord::Group { group_id: request.group_id.clone(), value });
            }
            None => {
                return Err(GroupError::UnknownMemberId {
                    group_id: request.group_id.clone(),
                    member_id: request.member_id.clone(),
                })
            }
        }
        for (partition, offset, metadata) in &request.offsets {
            if *offset < 0 {
                return Err(GroupError::InvalidRequest(format!("offset {offset} for {partition:?} is negative")));
            }
            if metadata.len() > OFFSET_METADATA_BYTES_MAX {
                let length = metadata.len();
                return Err(GroupError::InvalidRequest(format!(
                    "the metadata committed for {partition:?} is {length} bytes; at most {OFFSET_METADATA_BYTES_MAX}"
                )));
            }
            let stored = group.and_then(|group| group.offsets.get(partition)).and_then(|stored| stored.leader_epoch);
            if let (Some(sent), Some(stored)) = (request.leader_epoch, stored) {
                if sent < stored {
                    let (topic, partition) = (partition.topic.clone(), partition.partition);
                    return Err(GroupError::FencedLeaderEpoch { topic, partition, sent, stored });
                }
            }
            records.push(GroupRecord::Offset {
                group_id: request.group_id.clone(),
                topic: partition.topic.clone(),
                partition: partition.partition,
                value: Some(OffsetValue {
                    offset: *offset,
                    metadata: metadata.clone(),
                    commit_timestamp_ms: now_ms,
                    leader_epoch: request.leader_epoch,
                }),
            });
        }
        Ok(records)
    }

    /// Committed offsets of a group (all, or those of `partitions`).
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Result<Vec<(TopicPartition, OffsetValue)>, GroupError> {
        let Some(group) = self.groups.get(group_id) else { return Ok(Vec::new()) };
        Ok(match partitions {
            None => group.offsets.iter().map(|(partition, offset)| (partition.clone(), offset.clone())).collect(),
            Some(partitions) => partitions
                .iter()
                .filter_map(|partition| group.offsets.get(partition).map(|offset| (partition.clone(), offset.clone())))
                .collect(),
        })
    }

    /// Every group: id, state, member count.
    pub fn list_groups(&self) -> Vec<(String, GroupState, usize)> {
        self.groups.iter().map(|(group_id, group)| (group_id.clone(), group.state(), group.members.len())).collect()
    }

    pub fn describe_group(&self, group_id: &str) -> Result<GroupDescription, GroupError> {
        let group = self.groups.get(group_id).ok_or_else(|| GroupError::GroupIdNotFound(group_id.to_owned()))?;
        let members = group
            .members
            .iter()
            .map(|(member_id, member)| {
                let current = group.current.get(member_id).cloned().unwrap_or_default();
                MemberDescription {
                    member_id: member_id.clone(),
                    instance_id: member.instance_id.clone(),
                    member_epoch: current.member_epoch,
                    subscribed_topics: member.subscribed_topics.clone(),
                    assigned: current.assigned,
                    target: group
                        .target
                        .get(member_id)
                        .map(|target| target.iter().cloned().collect())
                        .unwrap_or_default(),
                }
            })
            .collect();
        Ok(GroupDescription {
            group_id: group_id.to_owned(),
            state: group.state(),
            group_epoch: group.epoch,
            assignor: group.assignor.name().to_owned(),
            members,
            offsets: group.offsets.iter().map(|(partition, offset)| (partition.clone(), offset.clone())).collect(),
        })
    }

    /// Deletes a group without members (its offsets too).
    pub fn delete_group(&self, group_id: &str) -> Result<Vec<GroupRecord>, GroupError> {
        let group = self.groups.get(group_id).ok_or_else(|| GroupError::GroupIdNotFound(group_id.to_owned()))?;
        if !group.members.is_empty() {
            return Err(GroupError::NonEmptyGroup(group_id.to_owned()));
        }
        let mut records: Vec<GroupRecord> = group
            .offsets
            .keys()
            .map(|partition| GroupRecord::Offset {
                group_id: group_id.to_owned(),
                topic: partition.topic.clone(),
                partition: partition.partition,
                value: None,
            })
            .collect();
        records.push(GroupRecord::TargetEpoch { group_id: group_id.to_owned(), value: None });
        records.push(GroupRecord::Group { group_id: group_id.to_owned(), value: None });
        Ok(records)
    }

    /// Sets committed offsets of a group without members (an operator's reset).
    pub fn reset_offsets(
        &self,
        group_id: &str,
        offsets: &[(TopicPartition, i64)],
        now_ms: i64,
    ) -> Result<Vec<GroupRecord>, GroupError> {
        let request = CommitRequest {
            group_id: group_id.to_owned(),
            member_id: String::new(),
            member_epoch: -1,
            offsets: offsets.iter().map(|(partition, offset)| (partition.clone(), *offset, String::new())).collect(),
            leader_epoch: None,
        };
        match self.groups.get(group_id) {
            Some(group) if !group.members.is_empty() => Err(GroupError::NonEmptyGroup(group_id.to_owned())),
            _ => self.commit_offsets(&request, now_ms),
        }
    }
}

fn validate_group_id(group_id: &str) -> Result<(), GroupError> {
    match group_id.is_empty() || group_id.len() > GROUP_ID_BYTES_MAX {
        true => Err(GroupError::InvalidGroupId),
        false => Ok(()),
    }
}

//! The group coordinator driven like the broker drives it: every handler's records
//! are encoded, decoded and replayed (state changes only that way), members
//! heartbeat with what they own, and after every step the invariant holds that no
//! partition has two owners. A second coordinator that replays the same records
//! must end in the same state.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use broker_core::group::assignor::TopicPartition;
use broker_core::group::coordinator::{
    CommitRequest, Coordinator, CoordinatorConfig, GroupError, GroupState, HeartbeatRequest, JOIN_EPOCH, LEAVE_EPOCH,
    OFFSET_METADATA_BYTES_MAX,
};
use broker_core::group::record::GroupRecord;

const GROUP: &str = "billing";

struct Harness {
    coordinator: Coordinator,
    log: Vec<GroupRecord>,
    partition_counts: BTreeMap<String, u32>,
    now_ms: i64,
    /// member id → (member epoch, owned partitions) as the member sees them.
    members: BTreeMap<String, (i32, Vec<TopicPartition>)>,
}

impl Harness {
    fn new(partitions: u32) -> Harness {
        let config = CoordinatorConfig { session_timeout_ms_default: 10_000, ..CoordinatorConfig::default() };
        Harness {
            coordinator: Coordinator::new(config),
            log: Vec::new(),
            partition_counts: BTreeMap::from([("orders".to_owned(), partitions)]),
            now_ms: 1_000_000,
            members: BTreeMap::new(),
        }
    }

    fn apply(&mut self, records: Vec<GroupRecord>) {
        for record in records {
            let (key, value) = record.encode();
            let decoded = GroupRecord::decode(&key, value.as_deref()).unwrap();
            assert_eq!(decoded, record);
            self.coordinator.replay(&decoded);
            self.log.push(decoded);
        }
        self.check_single_owner();
    }

    fn check_single_owner(&self) {
        let Ok(description) = self.coordinator.describe_group(GROUP) else { return };
        let mut owners: BTreeMap<TopicPartition, String> = BTreeMap::new();
        for member in &description.members {
            for partition in &member.assigned {
                if let Some(other) = owners.insert(partition.clone(), member.member_id.clone()) {
                    panic!("{partition:?} owned by {other} and {}", member.member_id);
                }
            }
        }
    }

    fn join(&mut self, instance_id: Option<&str>) -> String {
        let request = HeartbeatRequest {
            group_id: GROUP.to_owned(),
            instance_id: instance_id.map(str::to_owned),
            member_epoch: JOIN_EPOCH,
            subscribed_topics: Some(vec!["orders".to_owned()]),
            ..HeartbeatRequest::default()
        };
        let (records, response) = self.coordinator.heartbeat(&request, &self.partition_counts).unwrap();
        self.apply(records);
        self.coordinator.seen(GROUP, &response.member_id, self.now_ms);
        self.members.insert(response.member_id.clone(), (response.member_epoch, response.assignment));
        response.member_id
    }

    /// One heartbeat of `member_id` reporting what it owns; the member then owns
    /// exactly what the response says. Returns the partitions it gave up.
    fn beat(&mut self, member_id: &str) -> Vec<TopicPartition> {
        let (epoch, owned) = self.members[member_id].clone();
        let request = HeartbeatRequest {
            group_id: GROUP.to_owned(),
            member_id: member_id.to_owned(),
            member_epoch: epoch,
            owned: Some(owned.clone()),
            ..HeartbeatRequest::default()
        };
        let (records, response) = self.coordinator.heartbeat(&request, &self.partition_counts).unwrap();
        self.apply(records);
        self.coordinator.seen(GROUP, member_id, self.now_ms);
        let revoked = owned.iter().filter(|partition| !response.assignment.contains(partition)).cloned().collect();
        self.members.insert(member_id.to_owned(), (response.member_epoch, response.assignment));
        revoked
    }

    /// Heartbeats every member until the group is stable; returns every partition
    /// revoked on the way.
    fn settle(&mut self) -> Vec<TopicPartition> {
        let mut revoked = Vec::new();
        for _ in 0..20 {
            if self.coordinator.describe_group(GROUP).unwrap().state == GroupState::Stable {
                return revoked;
            }
            for member_id in self.members.keys().cloned().collect::<Vec<_>>() {
                revoked.extend(self.beat(&member_id));
            }
        }
        panic!("the group did not settle: {:?}", self.coordinator.describe_group(GROUP));
    }

    fn owned(&self) -> BTreeMap<String, BTreeSet<TopicPartition>> {
        self.members.iter().map(|(id, (_, owned))| (id.clone(), owned.iter().cloned().collect())).collect()
    }
}

#[test]
fn three_members_split_six_partitions_two_each_and_a_fourth_moves_only_what_it_takes() {
    let mut harness = Harness::new(6);
    let first = harness.join(None);
    harness.settle();
    assert_eq!(harness.owned()[&first].len(), 6, "a lone member owns everything");
    harness.join(None);
    harness.join(None);
    harness.settle();
    let before = harness.owned();
    assert!(before.values().all(|owned| owned.len() == 2), "{before:?}");

    harness.join(None);
    let revoked = harness.settle();
    let after = harness.owned();
    let sizes: Vec<usize> = after.values().map(BTreeSet::len).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 6);
    assert!(sizes.iter().all(|size| (1..=2).contains(size)), "{after:?}");
    // Sticky: a member that keeps a partition is never told to give it up.
    for partition in &revoked {
        let old_owner = before.iter().find(|(_, owned)| owned.contains(partition)).unwrap().0;
        assert!(!after[old_owner].contains(partition), "{partition:?} was revoked but came back");
    }
    let newcomer = after.keys().find(|member_id| !before.contains_key(*member_id)).unwrap();
    assert_eq!(revoked.len(), after[newcomer].len(), "exactly the partitions the new member takes move: {revoked:?}");
}

#[test]
fn a_member_that_stops_heartbeating_is_fenced_and_its_partitions_move() {
    let mut harness = Harness::new(6);
    let members: Vec<String> = (0..3).map(|_| harness.join(None)).collect();
    harness.settle();
    harness.now_ms += 5_000;
    harness.beat(&members[0]);
    harness.beat(&members[1]);
    harness.now_ms += 6_000; // members[2] last beat 11 s ago: past its 10 s session
    let records = harness.coordinator.expire(harness.now_ms, &harness.partition_counts.clone());
    harness.apply(records);
    harness.members.remove(&members[2]);
    harness.settle();
    let owned = harness.owned();
    assert_eq!(owned.len(), 2);
    assert!(owned.values().all(|owned| owned.len() == 3), "{owned:?}");
    // The fenced member is told so when it comes back.
    let stale = HeartbeatRequest {
        group_id: GROUP.to_owned(),
        member_id: members[2].clone(),
        member_epoch: 3,
        ..HeartbeatRequest::default()
    };
    let error = harness.coordinator.heartbeat(&stale, &harness.partition_counts).unwrap_err();
    assert!(matches!(error, GroupError::UnknownMemberId { .. }), "{error}");
}

#[test]
fn leaving_is_immediate_and_a_static_member_gets_its_partitions_back() {
    let mut harness = Harness::new(6);
    let pod_a = harness.join(Some("pod-a"));
    let pod_b = harness.join(Some("pod-b"));
    harness.settle();
    let owned_by_a = harness.owned()[&pod_a].clone();
    let epoch_before = harness.coordinator.describe_group(GROUP).unwrap().group_epoch;

    // pod-a restarts: joins again under a new member id with its instance id.
    harness.members.remove(&pod_a);
    let pod_a_again = harness.join(Some("pod-a"));
    assert_ne!(pod_a_again, pod_a);
    harness.settle();
    assert_eq!(harness.owned()[&pod_a_again], owned_by_a, "same partitions, no rebalance");
    assert_eq!(harness.coordinator.describe_group(GROUP).unwrap().group_epoch, epoch_before);

    // pod-b leaves: at once, its partitions go to pod-a.
    let (epoch, _) = harness.members[&pod_b].clone();
    let leave = HeartbeatRequest {
        group_id: GROUP.to_owned(),
        member_id: pod_b.clone(),
        member_epoch: LEAVE_EPOCH,
        ..HeartbeatRequest::default()
    };
    assert!(epoch > 0);
    let (records, response) = harness.coordinator.heartbeat(&leave, &harness.partition_counts).unwrap();
    assert_eq!(response.member_epoch, LEAVE_EPOCH);
    harness.apply(records);
    harness.members.remove(&pod_b);
    harness.settle();
    assert_eq!(harness.owned()[&pod_a_again].len(), 6);
}

#[test]
fn commits_are_fenced_by_member_epoch_and_replay_rebuilds_the_same_state() {
    let mut harness = Harness::new(4);
    let member = harness.join(None);
    harness.settle();
    let (epoch, owned) = harness.members[&member].clone();
    let commit = |member_epoch: i32| CommitRequest {
        group_id: GROUP.to_owned(),
        member_id: member.clone(),
        member_epoch,
        offsets: vec![(owned[0].clone(), 42, "after batch 7".to_owned())],
        leader_epoch: None,
    };
    let records = harness.coordinator.commit_offsets(&commit(epoch), harness.now_ms).unwrap();
    harness.apply(records);
    let stale = harness.coordinator.commit_offsets(&commit(epoch - 1), harness.now_ms).unwrap_err();
    assert!(matches!(stale, GroupError::StaleMemberEpoch { .. }), "{stale}");
    let outsider = CommitRequest { member_id: String::new(), member_epoch: -1, ..commit(epoch) };
    assert!(matches!(
        harness.coordinator.commit_offsets(&outsider, harness.now_ms),
        Err(GroupError::UnknownMemberId { .. })
    ));
    let committed = harness.coordinator.fetch_offsets(GROUP, None).unwrap();
    assert_eq!(committed.len(), 1);
    assert_eq!((committed[0].1.offset, committed[0].1.metadata.as_str()), (42, "after batch 7"));
    assert!(matches!(harness.coordinator.delete_group(GROUP), Err(GroupError::NonEmptyGroup(_))));

    let mut rebuilt = Coordinator::new(harness.coordinator.config().clone());
    for record in &harness.log {
        rebuilt.replay(record);
    }
    assert_eq!(rebuilt.describe_group(GROUP).unwrap(), harness.coordinator.describe_group(GROUP).unwrap());
}

#[test]
fn an_empty_group_takes_commits_from_outside_and_can_be_deleted() {
    let mut harness = Harness::new(2);
    let partition = TopicPartition { topic: "orders".to_owned(), partition: 1 };
    let records = harness.coordinator.reset_offsets("tools", &[(partition.clone(), 7)], 5).unwrap();
    for record in &records {
        harness.coordinator.replay(record);
    }
    assert_eq!(harness.coordinator.fetch_offsets("tools", Some(&[partition])).unwrap()[0].1.offset, 7);
    let records = harness.coordinator.delete_group("tools").unwrap();
    for record in &records {
        harness.coordinator.replay(record);
    }
    assert!(matches!(harness.coordinator.describe_group("tools"), Err(GroupError::GroupIdNotFound(_))));
    assert!(matches!(
        harness.coordinator.heartbeat(&HeartbeatRequest::default(), &harness.partition_counts),
        Err(GroupError::InvalidGroupId)
    ));
}

#[test]
fn a_snapshot_replaces_what_came_before_and_a_torn_one_changes_nothing() {
    let mut harness = Harness::new(4);
    harness.join(None);
    harness.join(Some("pod-x"));
    harness.settle();
    let snapshot = harness.coordinator.snapshot_records();
    let expected = harness.coordinator.describe_group(GROUP).unwrap();

    // Only the snapshot, after a different history, gives the same state.
    let mut from_snapshot = Coordinator::new(harness.coordinator.config().clone());
    let stale = GroupRecord::Group { group_id: "gone".to_owned(), value: Some((9, "range".to_owned())) };
    from_snapshot.replay(&stale);
    for record in &snapshot {
        let (key, value) = record.encode();
        from_snapshot.replay(&GroupRecord::decode(&key, value.as_deref()).unwrap());
    }
    assert!(!from_snapshot.finish_replay(), "a whole snapshot is not torn");
    assert_eq!(from_snapshot.describe_group(GROUP).unwrap(), expected);
    assert!(matches!(from_snapshot.describe_group("gone"), Err(GroupError::GroupIdNotFound(_))), "replaced");

    // Torn: the end marker never made it; the (older) state before it stands.
    let mut torn = Coordinator::new(harness.coordinator.config().clone());
    for record in &harness.log[..harness.log.len() / 2] {
        torn.replay(record);
    }
    let before = torn.describe_group(GROUP).unwrap();
    assert_ne!(before, expected, "the prefix is an older state");
    for record in &snapshot[..snapshot.len() - 1] {
        torn.replay(record);
    }
    assert!(torn.finish_replay(), "the replay says the snapshot was torn");
    assert_eq!(torn.describe_group(GROUP).unwrap(), before);
    // A whole snapshot written after the torn one (what a new owner does)
    // closes it: records after that are the group's again.
    for record in &snapshot {
        torn.replay(record);
    }
    assert!(!torn.finish_replay());
    assert_eq!(torn.describe_group(GROUP).unwrap(), expected);
}

#[test]
fn a_restarted_coordinator_never_hands_out_the_id_of_a_replayed_member() {
    let mut harness = Harness::new(4);
    let before: Vec<String> = vec![harness.join(None), harness.join(None), harness.join(Some("worker-a"))];
    harness.settle();
    // A restart: the state comes back by replay, the id counter starts over.
    let mut rebuilt = Coordinator::new(harness.coordinator.config().clone());
    for record in &harness.log {
        rebuilt.replay(record);
    }
    harness.coordinator = rebuilt;
    let after = [harness.join(None), harness.join(None)];
    for newcomer in &after {
        assert!(!before.contains(newcomer), "a new member got the id of a stored one: {newcomer}");
    }
    let members = harness.coordinator.describe_group(GROUP).unwrap().members.len();
    assert_eq!(members, 5, "five distinct members");
}

/// Any client can create a group by heartbeating or committing under a new id:
/// past `groups_max`, new ids are refused (existing groups keep working).
#[test]
fn new_groups_past_groups_max_are_refused_and_existing_ones_keep_working() {
    let config = CoordinatorConfig { groups_max: 3, ..CoordinatorConfig::default() };
    let mut coordinator = Coordinator::new(config);
    let counts = BTreeMap::from([("orders".to_owned(), 1u32)]);
    let join = |group: &str| HeartbeatRequest {
        group_id: group.to_owned(),
        member_epoch: JOIN_EPOCH,
        subscribed_topics: Some(vec!["orders".to_owned()]),
        ..HeartbeatRequest::default()
    };
    for group in ["a", "b", "c"] {
        let (records, _) = coordinator.heartbeat(&join(group), &counts).unwrap();
        records.iter().for_each(|record| coordinator.replay(record));
    }
    assert_eq!(coordinator.heartbeat(&join("d"), &counts).unwrap_err(), GroupError::TooManyGroups(3));
    let commit = CommitRequest { group_id: "e".to_owned(), ..CommitRequest::default() };
    assert_eq!(coordinator.commit_offsets(&commit, 0).unwrap_err(), GroupError::TooManyGroups(3));
    assert!(coordinator.heartbeat(&join("a"), &counts).is_ok(), "an existing group takes members");
}

/// Transform checkpoints are commits fenced by the input partition's leader
/// epoch: a task on a deposed leader cannot overwrite its successor's, the
/// epoch survives replay, and such offsets never expire with the group empty.
#[test]
fn commits_carrying_a_leader_epoch_are_fenced_by_it_and_do_not_expire() {
    let mut harness = Harness::new(2);
    let partition = TopicPartition { topic: "orders".to_owned(), partition: 0 };
    let checkpoint = |offset: i64, leader_epoch: Option<i32>| CommitRequest {
        group_id: "__transform.route.1000".to_owned(),
        member_id: String::new(),
        member_epoch: -1,
        offsets: vec![(partition.clone(), offset, format!("{{\"at\":{offset}}}"))],
        leader_epoch,
    };
    let records = harness.coordinator.commit_offsets(&checkpoint(10, Some(4)), harness.now_ms).unwrap();
    harness.apply(records);
    let records = harness.coordinator.commit_offsets(&checkpoint(20, Some(5)), harness.now_ms).unwrap();
    harness.apply(records);
    // The task of epoch 4, late: refused, and nothing changed.
    let late = harness.coordinator.commit_offsets(&checkpoint(15, Some(4)), harness.now_ms).unwrap_err();
    assert_eq!(late, GroupError::FencedLeaderEpoch { topic: "orders".to_owned(), partition: 0, sent: 4, stored: 5 });
    // The same epoch (a restarted task on the same leader) goes on.
    let records = harness.coordinator.commit_offsets(&checkpoint(25, Some(5)), harness.now_ms).unwrap();
    harness.apply(records);

    // A coordinator rebuilt from the log fences the same way.
    let mut replayed = Coordinator::new(CoordinatorConfig::default());
    harness.log.iter().for_each(|record| replayed.replay(record));
    let stored = replayed.fetch_offsets("__transform.route.1000", Some(std::slice::from_ref(&partition))).unwrap();
    assert_eq!((stored[0].1.offset, stored[0].1.leader_epoch, &stored[0].1.metadata[..]), (25, Some(5), "{\"at\":25}"));
    assert!(matches!(
        replayed.commit_offsets(&checkpoint(30, Some(3)), harness.now_ms),
        Err(GroupError::FencedLeaderEpoch { sent: 3, stored: 5, .. })
    ));

    // Long past the retention, an empty group's plain offsets expire; the
    // fenced ones stay (their deployment deletes them).
    let plain = CommitRequest { group_id: "tools".to_owned(), leader_epoch: None, ..checkpoint(3, None) };
    let records = harness.coordinator.commit_offsets(&plain, harness.now_ms).unwrap();
    harness.apply(records);
    let retention = CoordinatorConfig::default().offsets_retention_ms;
    let records = harness.coordinator.expire(harness.now_ms + retention + 1, &harness.partition_counts);
    harness.apply(records);
    assert!(harness.coordinator.fetch_offsets("tools", None).unwrap().is_empty());
    assert_eq!(harness.coordinator.fetch_offsets("__transform.route.1000", None).unwrap().len(), 1);

    // Metadata is bounded (it is stored with a u16 length).
    let mut oversized = checkpoint(40, Some(6));
    oversized.offsets[0].2 = "x".repeat(OFFSET_METADATA_BYTES_MAX + 1);
    assert!(matches!(
        harness.coordinator.commit_offsets(&oversized, harness.now_ms),
        Err(GroupError::InvalidRequest(message)) if message.contains("at most")
    ));
}

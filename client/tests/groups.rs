//! Consumer groups with real consumers against the real broker: a group splits
//! the partitions (each record to one member), another group gets everything, a
//! member that dies without leaving loses its partitions within the session
//! timeout without losing records (commits after processing), a joining
//! member takes partitions without the others losing theirs, and members joining
//! while one reads hand partitions over without delivering a record twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::{Admin, Consumer, ConsumerConfig, NewTopic, OffsetReset, Producer, ProducerRecord, RebalanceListener};
use support::{wait_until, TestBroker};

type Received = Arc<Mutex<Vec<(String, i32, i64, String)>>>;

/// Records every revocation, to check only moved partitions are revoked.
#[derive(Default)]
struct Revocations(Mutex<Vec<(String, i32)>>);

impl RebalanceListener for Revocations {
    fn on_revoked(&self, partitions: &[(String, i32)]) {
        self.0.lock().unwrap().extend(partitions.iter().cloned());
    }
}

/// Sessions in these tests: short where a member is killed (its partitions must
/// move quickly), long elsewhere so a CPU-starved test machine never fences a
/// healthy member by accident.
const SHORT_SESSION: Duration = Duration::from_secs(3);
const LONG_SESSION: Duration = Duration::from_secs(6);

fn group_config(broker: &TestBroker, group_id: &str) -> ConsumerConfig {
    group_config_with(broker, group_id, LONG_SESSION)
}

fn group_config_with(broker: &TestBroker, group_id: &str, session_timeout: Duration) -> ConsumerConfig {
    ConsumerConfig {
        group_id: Some(group_id.to_owned()),
        auto_offset_reset: OffsetReset::Earliest,
        session_timeout,
        auto_commit: false,
        fetch_max_wait: Duration::from_millis(100),
        ..broker.consumer_config()
    }
}

/// A member that polls, records what it got, and commits after each poll.
struct Member {
    consumer: Arc<Consumer>,
    task: tokio::task::JoinHandle<()>,
    revocations: Arc<Revocations>,
}

async fn member(broker: &TestBroker, group_id: &str, received: &Received, session: Duration) -> Member {
    let consumer = Arc::new(Consumer::new(group_config_with(broker, group_id, session)).unwrap());
    let revocations = Arc::new(Revocations::default());
    consumer.subscribe(&["events".to_owned()], Some(revocations.clone())).await.unwrap();
    let task = tokio::spawn({
        let (consumer, received) = (consumer.clone(), received.clone());
        async move {
            loop {
                let records = consumer.poll(Duration::from_millis(50)).await.unwrap_or_default();
                for record in &records {
                    let value = String::from_utf8(record.value.as_deref().unwrap().to_vec()).unwrap();
                    received.lock().unwrap().push((record.topic.to_string(), record.partition, record.offset, value));
                }
                if !records.is_empty() {
                    let _ = consumer.commit().await; // after processing: at-least-once
                }
            }
        }
    });
    Member { consumer, task, revocations }
}

fn owners(members: &[&Member]) -> Vec<BTreeSet<(String, i32)>> {
    members.iter().map(|member| member.consumer.assignment().into_iter().collect()).collect()
}

async fn produce(broker: &TestBroker, from: usize, count: usize) {
    let producer = Producer::new(broker.producer_config()).unwrap();
    for index in from..from + count {
        producer
            .send(ProducerRecord::new("events", format!("record-{index}")).key(format!("key-{index}")))
            .await
            .unwrap();
    }
    producer.flush().await;
}

fn values(received: &Received) -> Vec<String> {
    received.lock().unwrap().iter().map(|(_, _, _, value)| value.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_splits_partitions_another_gets_everything_and_dead_members_lose_nothing() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("events", 6)).await.unwrap();
    let split: Received = Arc::default();
    let all: Received = Arc::default();
    let members = [
        member(&broker, "billing", &split, SHORT_SESSION).await,
        member(&broker, "billing", &split, SHORT_SESSION).await,
        member(&broker, "billing", &split, SHORT_SESSION).await,
    ];
    let audit = member(&broker, "audit", &all, LONG_SESSION).await;
    wait_until("each of three members owns two partitions", || async {
        owners(&members.iter().collect::<Vec<_>>()).iter().all(|owned| owned.len() == 2)
    })
    .await;
    let owned = owners(&members.iter().collect::<Vec<_>>());
    let union: BTreeSet<_> = owned.iter().flatten().cloned().collect();
    assert_eq!(union.len(), 6, "no partition has two owners: {owned:?}");

    produce(&broker, 0, 600).await;
    wait_until("both groups got 600 records", || async { values(&split).len() >= 600 && values(&all).len() >= 600 })
        .await;
    let mut split_values = values(&split);
    split_values.sort();
    split_values.dedup();
    assert_eq!(split_values.len(), 600);
    assert_eq!(values(&split).len(), 600, "queue semantics: each record to exactly one member");
    assert_eq!(values(&all).len(), 600, "publish-subscribe: the other group gets every record");

    // Kill one member (no leave): within the session timeout its partitions move.
    let [first, second, third] = members;
    third.task.abort();
    drop(third); // aborts its heartbeats; no leave is sent
    wait_until("the survivors own all six partitions", || async {
        let owned = owners(&[&first, &second]);
        owned.iter().map(BTreeSet::len).sum::<usize>() == 6 && owned.iter().all(|owned| owned.len() == 3)
    })
    .await;
    produce(&broker, 600, 300).await;
    wait_until("every record reached the group", || async {
        let mut seen = values(&split);
        seen.sort();
        seen.dedup();
        seen.len() >= 900
    })
    .await;
    let received: BTreeSet<String> = values(&split).into_iter().collect();
    assert!((0..900).all(|index| received.contains(&format!("record-{index}"))), "at-least-once: nothing lost");
    audit.task.abort();
    first.task.abort();
    second.task.abort();
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_member_takes_partitions_without_the_others_losing_theirs() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("events", 6)).await.unwrap();
    let received: Received = Arc::default();
    let first = member(&broker, "sticky", &received, LONG_SESSION).await;
    let second = member(&broker, "sticky", &received, LONG_SESSION).await;
    wait_until("two members own three each", || async {
        owners(&[&first, &second]).iter().all(|owned| owned.len() == 3)
    })
    .await;
    let before = owners(&[&first, &second]);
    first.revocations.0.lock().unwrap().clear(); // the first member gave up three when the second joined
    second.revocations.0.lock().unwrap().clear();
    let third = member(&broker, "sticky", &received, LONG_SESSION).await;
    wait_until("three members own two each", || async {
        owners(&[&first, &second, &third]).iter().all(|owned| owned.len() == 2)
    })
    .await;
    let after = owners(&[&first, &second]);
    for (index, member) in [&first, &second].iter().enumerate() {
        let revoked: BTreeSet<(String, i32)> = member.revocations.0.lock().unwrap().iter().cloned().collect();
        let moved: BTreeSet<(String, i32)> = before[index].difference(&after[index]).cloned().collect();
        assert_eq!(revoked, moved, "only partitions that moved were revoked");
        assert_eq!(moved.len(), 1, "each old member gave up exactly one partition");
    }
    for member in [first, second, third] {
        member.task.abort();
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pattern_subscription_follows_topics_as_they_are_created() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    for (topic, partitions) in [("orders-eu", 2), ("orders-us", 2), ("other", 1)] {
        admin.create_topic(NewTopic::new(topic, partitions)).await.unwrap();
    }
    let consumer = Consumer::new(group_config(&broker, "by-pattern")).unwrap();
    consumer.subscribe_pattern("orders-.*", None).await.unwrap();
    let topics_owned = |consumer: &Consumer| -> BTreeSet<String> {
        consumer.assignment().into_iter().map(|(topic, _)| topic).collect()
    };
    wait_until("the member owns both orders topics", || async { consumer.assignment().len() == 4 }).await;
    assert_eq!(topics_owned(&consumer), BTreeSet::from(["orders-eu".to_owned(), "orders-us".to_owned()]));
    admin.create_topic(NewTopic::new("orders-asia", 2)).await.unwrap();
    wait_until("a new matching topic is picked up", || async { consumer.assignment().len() == 6 }).await;
    assert!(!topics_owned(&consumer).contains("other"));
    assert!(consumer.subscribe_pattern("orders-(", None).await.is_err(), "a bad pattern is a clear error");
    consumer.close().await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_keep_their_metadata_and_stale_members_cannot_commit() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("events", 1)).await.unwrap();
    // Not subscribed: commits from outside an empty group.
    let tool = Consumer::new(group_config(&broker, "tools")).unwrap();
    tool.commit_offsets_with_metadata(&[(("events".to_owned(), 0), 7, "checkpoint 3".to_owned())]).await.unwrap();
    assert_eq!(tool.committed("events", 0).await.unwrap(), Some(7));
    let description = admin.describe_group("tools").await.unwrap();
    assert_eq!(description.offsets[0].metadata, "checkpoint 3");

    // A member joins; an outside commit is now refused (only members commit).
    let member = Consumer::new(group_config(&broker, "tools")).unwrap();
    member.subscribe(&["events".to_owned()], None).await.unwrap();
    wait_until("the member owns the partition", || async { member.assignment().len() == 1 }).await;
    let refused = tool.commit_offsets(&[(("events".to_owned(), 0), 9)]).await;
    assert!(
        matches!(refused, Err(client::ClientError::Broker { code: client::ErrorCode::UnknownMemberId, .. })),
        "{refused:?}"
    );
    member.commit_offsets(&[(("events".to_owned(), 0), 8)]).await.unwrap();
    assert_eq!(member.committed("events", 0).await.unwrap(), Some(8));
    member.close().await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_during_a_rebalance_wait_for_the_new_member_epoch() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("events", 4)).await.unwrap();
    let topics = ["events".to_owned()];
    let first = Consumer::new(group_config(&broker, "busy")).unwrap();
    first.subscribe(&topics, None).await.unwrap();
    wait_until("the first member owns everything", || async { first.assignment().len() == 4 }).await;
    let second = Consumer::new(group_config(&broker, "busy")).unwrap();
    second.subscribe(&topics, None).await.unwrap();
    // The coordinator bumps the first member's epoch when it reassigns; commits
    // made before the member hears of it must not fail.
    let mut commits = 0;
    while second.assignment().len() < 2 {
        first.commit_offsets(&[(("events".to_owned(), 0), 0)]).await.unwrap();
        commits += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(commits > 10, "commits overlapped the rebalance ({commits})");
    first.close().await;
    second.close().await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_state_survives_a_snapshot_and_a_restart() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("events", 3)).await.unwrap();
    let member = Consumer::new(group_config(&broker, "durable")).unwrap();
    member.subscribe(&["events".to_owned()], None).await.unwrap();
    wait_until("the member owns every partition", || async { member.assignment().len() == 3 }).await;
    for round in 1..=20 {
        let offsets: Vec<_> =
            (0..3).map(|partition| (("events".to_owned(), partition), round * 10 + partition as i64)).collect();
        member.commit_offsets(&offsets).await.unwrap();
    }
    let tools = Consumer::new(group_config(&broker, "tools")).unwrap();
    tools.commit_offsets(&[(("events".to_owned(), 1), 5)]).await.unwrap();
    admin.reset_offsets("gone", vec![(("events".to_owned(), 0), 1)]).await.unwrap();
    admin.delete_group("gone").await.unwrap();
    member.close().await;
    let before = (admin.describe_group("durable").await.unwrap(), admin.describe_group("tools").await.unwrap());

    // Rewrite every shard as a snapshot: the older segments go.
    let retired = broker.node.compact_groups(0).await.unwrap();
    assert!(retired > 0, "segments before the snapshots were dropped");
    broker.stop().await;

    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    let after = (admin.describe_group("durable").await.unwrap(), admin.describe_group("tools").await.unwrap());
    assert_eq!(after, before, "the snapshot holds the whole state");
    assert!(admin.describe_group("gone").await.is_err(), "a deleted group stays deleted");
    let offsets: Vec<i64> = after.0.offsets.iter().map(|offset| offset.offset).collect();
    assert_eq!(offsets, [200, 201, 202]);
    broker.stop().await;
}

/// Members that join together while the first to arrive is reading: it owns
/// everything, prefetches, and gives partitions up as the others arrive. Whatever it was handed before a
/// partition moved is committed before the move, and nothing after, so the group
/// delivers every record exactly once (issue 20: a poll that ran while the
/// revocation commit was in flight handed out records the next owner read again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_joining_together_deliver_each_record_once() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("events", 6)).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    let records = (0..6000).map(|index| ProducerRecord::new("events", format!("{index}")).key(format!("k{index}")));
    for delivery in records.map(|record| producer.send(record)).collect::<Vec<_>>() {
        delivery.await.unwrap();
    }
    for run in 0..12 {
        let group = format!("together-{run}");
        let delivered: Arc<Mutex<Vec<(i32, i64)>>> = Arc::default();
        let mut members = Vec::new();
        for index in 0..3 {
            if index == 1 {
                // The others join once the first is reading: it must give up
                // partitions whose records it holds.
                wait_until("the first member is reading", || async { !delivered.lock().unwrap().is_empty() }).await;
            }
            let config = ConsumerConfig {
                auto_commit: true,
                poll_records_max: 5,
                ..group_config_with(&broker, &group, SHORT_SESSION)
            };
            let consumer = Arc::new(Consumer::new(config).unwrap());
            let task = tokio::spawn({
                let (consumer, delivered) = (consumer.clone(), delivered.clone());
                async move {
                    consumer.subscribe(&["events".to_owned()], None).await.unwrap();
                    loop {
                        let records = consumer.poll(Duration::from_millis(20)).await.unwrap_or_default();
                        delivered
                            .lock()
                            .unwrap()
                            .extend(records.iter().map(|record| (record.partition, record.offset)));
                        // Processing takes a while: the first member still holds
                        // prefetched records when the others' joins reach it.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            });
            members.push((consumer, task));
        }
        wait_until("the group settled and delivered every record", || async {
            let settled = members.iter().all(|(consumer, _)| consumer.assignment().len() == 2);
            let distinct: BTreeSet<(i32, i64)> = delivered.lock().unwrap().iter().copied().collect();
            settled && distinct.len() == 6000
        })
        .await;
        for (consumer, task) in members {
            task.abort();
            let _ = task.await;
            consumer.close().await;
        }
        let delivered = delivered.lock().unwrap().clone();
        let distinct: BTreeSet<(i32, i64)> = delivered.iter().copied().collect();
        assert_eq!(
            delivered.len(),
            distinct.len(),
            "run {run}: {} record(s) delivered twice",
            delivered.len() - distinct.len()
        );
    }
    broker.stop().await;
}

/// With `enable.auto.offset.store` off, auto-commit (on close here, and on
/// revocation and the timer alike) commits what the application stored, not
/// everything `poll` returned: a binding that hands records out one at a time
/// commits only those handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_offset_store_off_commits_take_only_stored_offsets() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("events", 1)).await.unwrap();
    produce(&broker, 0, 10).await;
    let config = ConsumerConfig { auto_commit: true, auto_offset_store: false, ..group_config(&broker, "stored") };
    let consumer = Consumer::new(config).unwrap();
    consumer.subscribe(&["events".to_owned()], None).await.unwrap();
    let records = support::consume(&consumer, 10).await;
    assert_eq!(records.len(), 10, "every record polled");
    consumer.store_offset("events", 0, records[2].offset + 1).unwrap();
    assert!(consumer.store_offset("events", 7, 1).is_err(), "not assigned here");
    consumer.close().await;
    let description = admin.describe_group("stored").await.unwrap();
    assert_eq!(description.offsets[0].offset, 3, "only what was stored");
    broker.stop().await;
}

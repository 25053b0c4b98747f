//! Randomized membership churn against the real broker: while a producer writes
//! keyed records, members join, leave gracefully and are killed (no leave, no
//! final commit), chosen by a seeded generator. Checker: every acknowledged record
//! is delivered; a record is delivered twice only if a killed member had been
//! handed it (its successor re-reads from the last commit); never otherwise.
//!
//! A failure prints its seed; `WEIR_CHURN_SEED=<seed>` replays that schedule
//! (the broker's timing still varies), `WEIR_CHURN_SEEDS=n` runs more seeds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::{Admin, Consumer, ConsumerConfig, NewTopic, OffsetReset, Producer, ProducerRecord};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{wait_until, TestBroker};

const TOPIC: &str = "churn";
const PARTITIONS: i32 = 6;
const MEMBERS_MAX: usize = 4;
const STEPS: usize = 10;
const RECORDS_PER_STEP: usize = 150;
/// Long enough that a loaded machine never fences a live member by accident; a
/// killed member's partitions move once it passes.
const SESSION: Duration = Duration::from_secs(6);
/// The end-of-run wait for every record (a kill costs a session timeout).
const DRAIN_WAIT_MAX: Duration = Duration::from_secs(120);

/// Every delivery: (member number, partition, offset).
type Deliveries = Arc<Mutex<Vec<(usize, i32, i64)>>>;

struct Member {
    number: usize,
    consumer: Arc<Consumer>,
    task: tokio::task::JoinHandle<()>,
}

async fn join(broker: &TestBroker, number: usize, deliveries: &Deliveries) -> Member {
    let config = ConsumerConfig {
        group_id: Some("churn".to_owned()),
        auto_offset_reset: OffsetReset::Earliest,
        auto_commit: true,
        auto_commit_interval: Duration::from_millis(200),
        session_timeout: SESSION,
        poll_records_max: 20,
        fetch_max_wait: Duration::from_millis(100),
        ..broker.consumer_config()
    };
    let consumer = Arc::new(Consumer::new(config).unwrap());
    consumer.subscribe(&[TOPIC.to_owned()], None).await.unwrap();
    let task = tokio::spawn({
        let (consumer, deliveries) = (consumer.clone(), deliveries.clone());
        async move {
            loop {
                let records = consumer.poll(Duration::from_millis(50)).await.unwrap_or_default();
                deliveries
                    .lock()
                    .unwrap()
                    .extend(records.iter().map(|record| (number, record.partition, record.offset)));
                // Some processing time, so members hold prefetched records when partitions move.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    });
    Member { number, consumer, task }
}

/// Stops polling first, so nothing is handed out that close does not commit.
async fn leave(member: Member) {
    member.task.abort();
    let _ = member.task.await;
    member.consumer.close().await;
}

/// No leave and no final commit: the group notices when the session times out.
async fn kill(member: Member) {
    member.task.abort();
    let _ = member.task.await;
    drop(member.consumer);
}

fn distinct(deliveries: &Deliveries) -> BTreeSet<(i32, i64)> {
    deliveries.lock().unwrap().iter().map(|&(_, partition, offset)| (partition, offset)).collect()
}

async fn run(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new(TOPIC, PARTITIONS)).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    let deliveries: Deliveries = Arc::default();
    let mut produced: BTreeSet<(i32, i64)> = BTreeSet::new();
    let mut members: Vec<Member> = Vec::new();
    let mut killed: BTreeSet<usize> = BTreeSet::new();
    let mut next_number = 0;
    let mut schedule = Vec::new();
    for step in 0..STEPS {
        let mut deliveries_of_step = Vec::with_capacity(RECORDS_PER_STEP);
        for index in 0..RECORDS_PER_STEP {
            let key = format!("key-{}", rng.gen_range(0..1000));
            deliveries_of_step
                .push(producer.send(ProducerRecord::new(TOPIC, format!("{step}-{index}")).key(key)).await.unwrap());
        }
        for delivery in deliveries_of_step {
            let metadata = delivery.await.unwrap();
            produced.insert((metadata.partition, metadata.offset));
        }
        let action = match (members.len(), rng.gen_range(0..10)) {
            (0, _) => 0,
            (count, _) if count >= MEMBERS_MAX => 5,
            (_, roll) => roll,
        };
        let seen_before = distinct(&deliveries).len();
        match action {
            0..=4 => {
                members.push(join(&broker, next_number, &deliveries).await);
                schedule.push(format!("join {next_number}"));
                next_number += 1;
            }
            5..=7 => {
                let member = members.remove(rng.gen_range(0..members.len()));
                schedule.push(format!("leave {}", member.number));
                leave(member).await;
            }
            _ => {
                let member = members.remove(rng.gen_range(0..members.len()));
                schedule.push(format!("kill {}", member.number));
                killed.insert(member.number);
                kill(member).await;
            }
        }
        if members.is_empty() {
            members.push(join(&broker, next_number, &deliveries).await);
            schedule.push(format!("join {next_number}"));
            next_number += 1;
        }
        let context = format!("seed {seed}, step {step}: {}", schedule.join(", "));
        wait_until(&format!("the group makes progress ({context})"), || async {
            distinct(&deliveries).len() > seen_before || distinct(&deliveries).len() == produced.len()
        })
        .await;
    }
    let context = format!("seed {seed}: {}", schedule.join(", "));
    let deadline = tokio::time::Instant::now() + DRAIN_WAIT_MAX;
    while distinct(&deliveries).len() < produced.len() {
        assert!(tokio::time::Instant::now() < deadline, "{context}: records never delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for member in members {
        leave(member).await;
    }
    let deliveries = deliveries.lock().unwrap().clone();
    let mut by_record: BTreeMap<(i32, i64), Vec<usize>> = BTreeMap::new();
    for (number, partition, offset) in deliveries {
        by_record.entry((partition, offset)).or_default().push(number);
    }
    let lost: Vec<_> = produced.iter().filter(|record| !by_record.contains_key(record)).collect();
    assert!(lost.is_empty(), "{context}: acknowledged records never delivered: {lost:?}");
    for (record, members) in &by_record {
        if members.len() > 1 {
            assert!(
                members.iter().any(|number| killed.contains(number)),
                "{context}: {record:?} delivered to members {members:?}, none of them killed"
            );
        }
    }
    let duplicates = by_record.values().filter(|members| members.len() > 1).count();
    eprintln!("{context}: {} records delivered, {duplicates} twice (after kills)", produced.len());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churning_members_lose_nothing_and_duplicate_only_what_a_killed_member_held() {
    let seeds: Vec<u64> = match std::env::var("WEIR_CHURN_SEED") {
        Ok(seed) => vec![seed.parse().expect("WEIR_CHURN_SEED is a number")],
        Err(_) => {
            let count = std::env::var("WEIR_CHURN_SEEDS").ok().and_then(|value| value.parse().ok()).unwrap_or(2);
            (0..count).collect()
        }
    };
    for seed in seeds {
        eprintln!("churn seed {seed}");
        run(seed).await;
    }
}

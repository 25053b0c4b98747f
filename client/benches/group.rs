//! Consumer-group benchmark (a separate command, never a test):
//!
//! ```sh
//! cargo bench -p client --bench group
//! ```
//!
//! 1. Rebalance latency with real consumers against an in-process broker: 10
//!    members of one group on a 100-partition topic; the time from a member
//!    joining, leaving (with a leave) and dying (no leave) until every partition
//!    has exactly one owner and loads differ by at most one. Members use a 3 s
//!    session timeout, so they heartbeat every second: reconciliation takes a few
//!    heartbeat rounds by design (revoke first, then assign).
//! 2. Heartbeat cost at the coordinator: the CPU time of one steady-state
//!    heartbeat (no change) of a 10-member, 100-partition group, measured on the
//!    state machine alone, and what that means per member per second.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use broker::{BrokerConfig, Server};
use broker_core::group::assignor::TopicPartition;
use broker_core::group::coordinator::{Coordinator, CoordinatorConfig, HeartbeatRequest};
use client::{Admin, CommonConfig, Consumer, ConsumerConfig, NewTopic, OffsetReset};

const MEMBERS: usize = 10;
const PARTITIONS: u32 = 100;
const TOPIC: &str = "group-bench";

fn member_config(address: &str) -> ConsumerConfig {
    ConsumerConfig {
        common: CommonConfig { bootstrap_servers: address.to_owned(), ..CommonConfig::default() },
        group_id: Some("bench".to_owned()),
        auto_offset_reset: OffsetReset::Earliest,
        session_timeout: Duration::from_secs(3),
        ..ConsumerConfig::default()
    }
}

async fn join(address: &str) -> Consumer {
    let consumer = Consumer::new(member_config(address)).unwrap();
    consumer.subscribe(&[TOPIC.to_owned()], None).await.unwrap();
    consumer
}

/// Waits until the members own every partition once, balanced; returns how long.
async fn until_stable(members: &[Consumer], started: Instant) -> Duration {
    loop {
        let loads: Vec<usize> = members.iter().map(|member| member.assignment().len()).collect();
        let total: usize = loads.iter().sum();
        let (least, most) = (loads.iter().min().copied().unwrap_or(0), loads.iter().max().copied().unwrap_or(0));
        if total == PARTITIONS as usize && most - least <= 1 {
            return started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no stable assignment after 60 s: {loads:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn steady_heartbeat_cost() -> Duration {
    let mut coordinator = Coordinator::new(CoordinatorConfig::default());
    let counts = BTreeMap::from([(TOPIC.to_owned(), PARTITIONS)]);
    let mut members: Vec<(String, i32, Vec<TopicPartition>)> = Vec::new();
    for _ in 0..MEMBERS {
        let request = HeartbeatRequest {
            group_id: "bench".to_owned(),
            subscribed_topics: Some(vec![TOPIC.to_owned()]),
            ..HeartbeatRequest::default()
        };
        let (records, response) = coordinator.heartbeat(&request, &counts).unwrap();
        records.iter().for_each(|record| coordinator.replay(record));
        members.push((response.member_id, response.member_epoch, response.assignment));
    }
    let mut beat = |coordinator: &mut Coordinator, index: usize| {
        let (member_id, epoch, owned) = members[index].clone();
        let request = HeartbeatRequest {
            group_id: "bench".to_owned(),
            member_id: member_id.clone(),
            member_epoch: epoch,
            owned: Some(owned),
            ..HeartbeatRequest::default()
        };
        let (records, response) = coordinator.heartbeat(&request, &counts).unwrap();
        records.iter().for_each(|record| coordinator.replay(record));
        members[index] = (member_id, response.member_epoch, response.assignment);
        records.len()
    };
    for _ in 0..20 {
        for index in 0..MEMBERS {
            beat(&mut coordinator, index);
        }
    }
    let rounds = 2_000;
    let started = Instant::now();
    let mut written = 0;
    for _ in 0..rounds {
        for index in 0..MEMBERS {
            written += beat(&mut coordinator, index);
        }
    }
    assert_eq!(written, 0, "a steady group writes nothing");
    started.elapsed() / (rounds * MEMBERS) as u32
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let temp = tempfile::tempdir().unwrap();
        let config = BrokerConfig {
            data_dir: temp.path().to_path_buf(),
            listen: "127.0.0.1:0".to_owned(),
            ..BrokerConfig::default()
        };
        let server = Server::bind(config).await.unwrap();
        let address = server.local_addr().to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(server.serve(async {
            let _ = stopped.await;
        }));
        let admin = Admin::new(CommonConfig { bootstrap_servers: address.clone(), ..CommonConfig::default() }).unwrap();
        admin.create_topic(NewTopic::new(TOPIC, PARTITIONS as i32)).await.unwrap();

        let started = Instant::now();
        let mut members = Vec::new();
        for _ in 0..MEMBERS {
            members.push(join(&address).await);
        }
        let formed = until_stable(&members, started).await;

        let started = Instant::now();
        members.push(join(&address).await);
        let joined = until_stable(&members, started).await;

        let leaving = members.pop().unwrap();
        let started = Instant::now();
        leaving.close().await;
        let left = until_stable(&members, started).await;

        let dead = members.pop().unwrap();
        let started = Instant::now();
        drop(dead); // no leave: fenced when its 3 s session times out
        let died = until_stable(&members, started).await;

        let cost = steady_heartbeat_cost();
        let heartbeats_per_second = 1.0; // 3 s session timeout → one beat per second
        println!(
            "consumer groups: {MEMBERS} members, {PARTITIONS} partitions, cooperative-sticky, heartbeat every 1 s"
        );
        println!("  group formed (10 members joining at once) → stable: {:.0} ms", formed.as_secs_f64() * 1000.0);
        println!("  11th member joins → stable:                     {:.0} ms", joined.as_secs_f64() * 1000.0);
        println!("  a member leaves (leave sent) → stable:         {:.0} ms", left.as_secs_f64() * 1000.0);
        println!("  a member dies (no leave, 3 s session) → stable: {:.0} ms", died.as_secs_f64() * 1000.0);
        println!(
            "  steady heartbeat at the coordinator: {:.1} µs each → {:.1} µs of CPU per member per second",
            cost.as_secs_f64() * 1e6,
            cost.as_secs_f64() * 1e6 * heartbeats_per_second
        );
        drop(members);
        let _ = stop.send(());
        serving.await.unwrap().unwrap();
    });
}

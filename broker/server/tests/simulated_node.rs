//! A whole `Node` on simulated storage and time: `MemStorage` (forgets unsynced
//! bytes at a simulated crash) and a `ManualClock`. Nothing touches the real file
//! system, and a crash at any storage operation loses no acknowledged write.
//!
//! `WEIR_SIM_SEEDS` widens the crash sweep (default 200 points).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use abi::batch::{BatchBuilder, BatchIter};
use broker::controller::network::Unconnected;
use broker::node::{Acks, FetchRequest, ProduceRequest};
use broker::{BrokerConfig, Environment, Node};
use broker_core::clock::{Clock, ManualClock};
use broker_core::group::assignor::TopicPartition;
use broker_core::group::coordinator::CommitRequest;
use broker_core::storage::mem::{CrashMode, MemStorage};

const DATA_DIR: &str = "/simulated/weir-data";
const START_MS: i64 = 1_800_000_000_000;

fn config() -> BrokerConfig {
    let mut config = BrokerConfig { data_dir: PathBuf::from(DATA_DIR), ..BrokerConfig::default() };
    // Small preallocated indexes: MemStorage copies whole maps on every sync.
    config.log.index_bytes_max = 64 << 10;
    config
}

async fn open(storage: &MemStorage, clock: &Arc<ManualClock>) -> Result<Arc<Node>, broker::node::NodeError> {
    let environment = Environment::simulated(Arc::new(storage.clone()), clock.clone());
    Ok(Arc::new(Node::open_in(&config(), environment, Arc::new(Unconnected)).await?))
}

/// Stops a node as a crash would: nothing is flushed or closed, but its
/// controller stops writing (a dead process writes nothing).
async fn crash(node: Arc<Node>) {
    node.stop_controller().await;
    drop(node);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn batch(now_ms: i64, value: &str) -> Vec<u8> {
    let mut builder = BatchBuilder::new(now_ms);
    builder.push(now_ms, Some(b"key"), Some(value.as_bytes()), &[]);
    builder.encode()
}

async fn produce(node: &Node, clock: &ManualClock, value: &str) -> Result<i64, broker::ApiError> {
    let request = ProduceRequest {
        topic: "orders".to_owned(),
        partition: 0,
        acks: Acks::All,
        timeout_ms: 60_000,
        batches: batch(clock.now_ms(), value),
    };
    Ok(node.produce(request).await?.base_offset)
}

/// Every record value of partition 0 of `orders`, in offset order.
async fn values(node: &Node) -> Vec<String> {
    let mut values = Vec::new();
    let mut offset = 0;
    loop {
        let mut buffer = Vec::new();
        let request =
            FetchRequest { topic: "orders", partition: 0, offset, max_bytes: 1 << 20, min_bytes: 0, max_wait_ms: 0 };
        let fetched = node.fetch(request, &mut buffer).await.unwrap();
        if fetched.size_bytes == 0 {
            return values;
        }
        for view in BatchIter::new(&buffer[..fetched.size_bytes]) {
            let view = view.unwrap();
            for record in view.decode().unwrap().records {
                values.push(String::from_utf8(record.value.unwrap()).unwrap());
            }
            offset = view.last_offset() + 1;
        }
    }
}

#[test]
fn a_node_runs_on_memory_storage_and_manual_time_and_keeps_what_it_acknowledged() {
    let storage = MemStorage::new();
    let clock = Arc::new(ManualClock::new(START_MS));
    let runtime = runtime();
    runtime.block_on(async {
        let node = open(&storage, &clock).await.unwrap();
        node.create_topic("orders", 2, 1, &[]).await.unwrap();
        let (first_producer, _) = node.init_producer_id().await.unwrap();
        for index in 0..5 {
            clock.advance(10);
            assert_eq!(produce(&node, &clock, &format!("r{index}")).await.unwrap(), index);
        }
        clock.advance(1_000);
        let commit = CommitRequest {
            group_id: "g".to_owned(),
            member_id: String::new(),
            member_epoch: -1,
            offsets: vec![(TopicPartition { topic: "orders".to_owned(), partition: 0 }, 5, String::new())],
            leader_epoch: None,
        };
        node.commit_offsets(&commit).await.unwrap();
        // Crash: no shutdown, and whatever was not synced is gone.
        crash(node).await;
        storage.crash(CrashMode::TornTail { seed: 1 });
        assert!(!Path::new(DATA_DIR).exists(), "nothing may reach the real file system");
        assert!(storage.file_paths().iter().any(|path| path.ends_with("raft.log")));

        let node = open(&storage, &clock).await.unwrap();
        assert_eq!(values(&node).await, ["r0", "r1", "r2", "r3", "r4"]);
        let committed = node.fetch_offsets("g", None).await.unwrap();
        assert_eq!(committed.len(), 1);
        assert_eq!(committed[0].1.offset, 5);
        assert_eq!(committed[0].1.commit_timestamp_ms, START_MS + 1_050, "the commit is stamped by the clock given");
        let (next_producer, _) = node.init_producer_id().await.unwrap();
        assert!(next_producer > first_producer, "producer ids are never handed out twice");
        node.shutdown();
        node.stop_controller().await;
    });
}

/// Arms a power cut after `n` storage operations for a sweep of `n`, produces until
/// a write fails, crashes, reopens: every acknowledged record is there, in order,
/// and at most the one unacknowledged record in flight besides.
#[test]
fn a_crash_at_any_storage_operation_loses_no_acknowledged_record() {
    let points: u64 = std::env::var("WEIR_SIM_SEEDS").ok().and_then(|text| text.parse().ok()).unwrap_or(200);
    let runtime = runtime();
    let clock = Arc::new(ManualClock::new(START_MS));
    runtime.block_on(async {
        // Size the sweep: storage operations 20 produces take.
        let probe = MemStorage::new();
        let node = open(&probe, &clock).await.unwrap();
        node.create_topic("orders", 1, 1, &[]).await.unwrap();
        let before = probe.op_count();
        for index in 0..20 {
            produce(&node, &clock, &format!("r{index}")).await.unwrap();
        }
        let per_produce = (probe.op_count() - before) / 20 + 1;
        crash(node).await;
        let mut cut_short = 0;
        let mut acknowledged_total = 0;
        for point in 0..points {
            let seed = point.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5EED;
            let storage = MemStorage::new();
            let node = open(&storage, &clock).await.unwrap();
            node.create_topic("orders", 1, 1, &[]).await.unwrap();
            storage.fail_after(1 + seed % (per_produce * 20));
            let mut acknowledged = Vec::new();
            for index in 0..40 {
                let value = format!("r{index}");
                match produce(&node, &clock, &value).await {
                    Ok(_) => acknowledged.push(value),
                    Err(_) => break,
                }
            }
            crash(node).await;
            cut_short += usize::from(acknowledged.len() < 40);
            acknowledged_total += acknowledged.len();
            storage.crash(CrashMode::GarbageTail { seed });
            let node =
                open(&storage, &clock).await.unwrap_or_else(|error| panic!("seed {seed}: reopen failed: {error}"));
            let found = values(&node).await;
            assert!(
                found.starts_with(&acknowledged) && found.len() <= acknowledged.len() + 1,
                "seed {seed} (point {point}): acknowledged {acknowledged:?}, found {found:?}"
            );
            node.shutdown();
            node.stop_controller().await;
        }
        // The sweep must cut produces short, and not always before the first one.
        assert!(
            cut_short as u64 == points && acknowledged_total > 0,
            "{cut_short} cut short, {acknowledged_total} acked"
        );
    });
}

/// Transform checkpoints through the node: loading claims the checkpoint for
/// the loader's leader epoch, so a task of an older epoch can commit no more;
/// epochs the node has not seen, groups that are not checkpoint groups, and
/// clients writing a checkpoint group are all refused.
#[test]
fn transform_checkpoints_are_claimed_by_leader_epoch_and_closed_to_clients() {
    use broker::transforms::{CheckpointCall, TransformHost};
    use broker_core::group::coordinator::HeartbeatRequest;

    let storage = MemStorage::new();
    let clock = Arc::new(ManualClock::new(START_MS));
    runtime().block_on(async {
        let node = open(&storage, &clock).await.unwrap();
        node.create_topic("events", 1, 1, &[]).await.unwrap();
        let epoch = node.metadata(&["events".to_owned()]).topics[0].partitions[0].leader_epoch;
        let group = "__transform.route.1000".to_owned();
        let load = |leader_epoch: i32| CheckpointCall::Load {
            group_id: group.clone(),
            topic: "events".to_owned(),
            partition: 0,
            leader_epoch,
        };
        let save = |offset: i64, leader_epoch: i32| CheckpointCall::Save {
            group_id: group.clone(),
            topic: "events".to_owned(),
            partition: 0,
            offset,
            metadata: format!("{{\"at\":{offset}}}"),
            leader_epoch,
        };
        let code = |outcome: Result<Option<(i64, String)>, broker::ApiError>| outcome.unwrap_err().code;

        // An older epoch's task commits; the current epoch's task claims it
        // (nothing yet: a claim of an empty slot reads as no checkpoint)...
        assert_eq!(node.checkpoint(load(epoch)).await.unwrap(), None);
        // ...and from then on the older one is fenced, the claimer is not.
        assert_eq!(code(node.checkpoint(save(7, epoch - 1)).await), abi::ErrorCode::FencedLeaderEpoch);
        node.checkpoint(save(7, epoch)).await.unwrap();
        assert_eq!(node.checkpoint(load(epoch)).await.unwrap(), Some((7, "{\"at\":7}".to_owned())));
        // An epoch from the future (a caller that is not a broker, or a
        // coordinator behind the metadata) is refused, retriably.
        assert_eq!(code(node.checkpoint(load(epoch + 1)).await), abi::ErrorCode::NotLeaderOrFollower);
        // Only checkpoint groups.
        let plain = CheckpointCall::Delete { group_id: "billing".to_owned() };
        assert_eq!(code(node.checkpoint(plain).await), abi::ErrorCode::InvalidGroupId);

        // Clients read the group but cannot write it.
        assert_eq!(node.fetch_offsets(&group, None).await.unwrap()[0].1.offset, 7);
        let commit = CommitRequest {
            group_id: group.clone(),
            member_id: String::new(),
            member_epoch: -1,
            offsets: vec![(TopicPartition { topic: "events".to_owned(), partition: 0 }, 0, String::new())],
            leader_epoch: None,
        };
        assert_eq!(node.commit_offsets(&commit).await.unwrap_err().code, abi::ErrorCode::InvalidGroupId);
        let join = HeartbeatRequest { group_id: group.clone(), ..HeartbeatRequest::default() };
        assert_eq!(node.group_heartbeat(&join).await.unwrap_err().code, abi::ErrorCode::InvalidGroupId);
        assert_eq!(node.delete_group(&group).await.unwrap_err().code, abi::ErrorCode::InvalidGroupId);

        // Deleting goes through the checkpoint call.
        node.checkpoint(CheckpointCall::Delete { group_id: group.clone() }).await.unwrap();
        assert!(node.fetch_offsets(&group, None).await.unwrap().is_empty());
        node.checkpoint(CheckpointCall::Delete { group_id: group.clone() }).await.unwrap();
        node.shutdown();
        node.stop_controller().await;
    });
}

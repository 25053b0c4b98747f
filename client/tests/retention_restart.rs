//! What a broker keeps on disk: time retention deletes whole old segments (the
//! files go, the log start offset moves, consumers from the beginning start
//! there); a clean restart on the same data directory keeps every record, topic
//! and config and never hands out a producer id twice; deleting a topic removes
//! its directories and the name can be created again, empty.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::path::Path;

use client::{Admin, Consumer, ErrorCode, NewTopic, Offset, Producer, ProducerRecord};
use support::{code_of, consume, fetch_raw, init_producer_id, wait_until, Fetch, TestBroker};

/// Base offsets of the segment files (`<base>.log`) in a partition directory.
fn segment_base_offsets(partition_dir: &Path) -> Vec<u64> {
    let mut offsets: Vec<u64> = std::fs::read_dir(partition_dir)
        .unwrap()
        .filter_map(|entry| entry.unwrap().file_name().into_string().ok())
        .filter_map(|name| name.strip_suffix(".log").and_then(|base| base.parse().ok()))
        .collect();
    offsets.sort_unstable();
    offsets
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_old_segments_and_moves_the_log_start() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(temp.path(), |config| config.retention_check_interval_ms = 20).await;
    let admin = Admin::new(broker.common()).unwrap();
    let topic = NewTopic::new("retained", 1)
        .config("segment.bytes", "1024")
        .config("max.message.bytes", "1024")
        .config("retention.ms", "600000");
    admin.create_topic(topic).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    // Twenty records from an hour ago (past retention), one batch each so the
    // small segments roll, then three fresh ones that retention must keep.
    let hour_ago_ms = now_ms() - 3_600_000;
    let value = |index: usize| format!("record-{index:02}-{}", "v".repeat(200));
    for index in 0..23 {
        let timestamp_ms = if index < 20 { hour_ago_ms + index as i64 } else { now_ms() };
        let record = ProducerRecord::new("retained", value(index)).timestamp_ms(timestamp_ms);
        let delivered = producer.send(record).await.unwrap().await.unwrap();
        assert_eq!(delivered.offset, index as i64);
    }
    let partition_dir = temp.path().join("retained-0");

    wait_until("retention moves the log start and deletes the old segment files", || {
        let (admin, partition_dir) = (admin.clone(), partition_dir.clone());
        async move {
            let (start, end) = admin.watermarks("retained", 0).await.unwrap();
            assert_eq!(end, 23);
            start > 0 && segment_base_offsets(&partition_dir).first() == Some(&(start as u64))
        }
    })
    .await;
    // Only expired segments go, so the log start stays put from here on.
    let (log_start_offset, _) = admin.watermarks("retained", 0).await.unwrap();
    assert!(log_start_offset <= 20, "a fresh record was deleted: log start {log_start_offset}");
    let segments = segment_base_offsets(&partition_dir);
    assert!(segments.iter().all(|base| *base >= log_start_offset as u64), "{segments:?}");

    let fetcher = broker.connect().await;
    let below = fetch_raw(&fetcher, Fetch::at("retained", 0, 0)).await;
    assert_eq!(code_of(below), ErrorCode::OffsetOutOfRange);

    let consumer = Consumer::new(broker.consumer_config()).unwrap();
    consumer.assign(&[("retained".to_owned(), 0)]).await.unwrap();
    consumer.seek("retained", 0, Offset::Beginning).unwrap();
    let records = consume(&consumer, (23 - log_start_offset) as usize).await;
    let offsets: Vec<i64> = records.iter().map(|record| record.offset).collect();
    assert_eq!(offsets, (log_start_offset..23).collect::<Vec<_>>());
    for record in &records {
        assert_eq!(record.value.as_deref(), Some(value(record.offset as usize).as_bytes()));
    }
    broker.stop().await;
}

/// Lowering `retention.ms` on a live topic takes effect without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn altered_retention_applies_to_a_live_partition() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(temp.path(), |config| config.retention_check_interval_ms = 20).await;
    let admin = Admin::new(broker.common()).unwrap();
    let topic = NewTopic::new("altered", 1)
        .config("segment.bytes", "1024")
        .config("max.message.bytes", "1024")
        .config("retention.ms", "-1");
    admin.create_topic(topic).await.unwrap();
    let connection = broker.connect().await;
    let day_ago_ms = now_ms() - 86_400_000;
    for index in 0..6 {
        let batch = support::batch_of(day_ago_ms, &[format!("{index}-{}", "o".repeat(400)).as_bytes()]);
        assert_eq!(support::produce_raw(&connection, "altered", 0, batch).await.unwrap().base_offset, index);
    }
    let fresh = support::batch_of(now_ms(), &[b"fresh"]);
    assert_eq!(support::produce_raw(&connection, "altered", 0, fresh).await.unwrap().base_offset, 6);
    let segments = segment_base_offsets(&temp.path().join("altered-0"));
    assert!(segments.len() >= 3, "segments rolled: {segments:?}");
    assert_eq!(admin.watermarks("altered", 0).await.unwrap(), (0, 7), "unlimited retention keeps everything");

    admin.alter_topic_config("altered", vec![("retention.ms".to_owned(), "3600000".to_owned())]).await.unwrap();
    wait_until("the altered retention deletes the day-old segments", || {
        let admin = admin.clone();
        async move { admin.watermarks("altered", 0).await.unwrap().0 > 0 }
    })
    .await;
    let (log_start_offset, _) = admin.watermarks("altered", 0).await.unwrap();
    assert!(log_start_offset <= 6, "the fresh record was deleted: log start {log_start_offset}");
    let fetched = fetch_raw(&connection, Fetch::at("altered", 0, log_start_offset)).await.unwrap();
    assert_eq!(fetched.values().last().unwrap(), &(6, b"fresh".to_vec()));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_broker_keeps_records_topics_configs_and_producer_ids_unique() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("kept", 2).config("retention.ms", "3600000")).await.unwrap();
    admin.create_topic(NewTopic::new("also-kept", 1).config("flush.policy", "interval")).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    let mut deliveries = Vec::new();
    for index in 0..50 {
        let record = ProducerRecord::new("kept", format!("value-{index}"))
            .key(format!("key-{}", index % 5))
            .header("index", Some(index.to_string().into_bytes()))
            .timestamp_ms(1_600_000_000_000 + index);
        deliveries.push(producer.send(record).await.unwrap());
    }
    for delivery in deliveries {
        delivery.await.unwrap();
    }
    producer.send(ProducerRecord::new("also-kept", "interval")).await.unwrap().await.unwrap();
    let read_all = |address: client::CommonConfig| async move {
        let consumer = Consumer::new(client::ConsumerConfig { common: address, ..Default::default() }).unwrap();
        consumer.assign(&[("kept".to_owned(), 0), ("kept".to_owned(), 1), ("also-kept".to_owned(), 0)]).await.unwrap();
        consumer.seek_all(Offset::Beginning).unwrap();
        let mut records = consume(&consumer, 51).await;
        records.sort_by_key(|record| (record.topic.clone(), record.partition, record.offset));
        records
    };
    let before = read_all(broker.common()).await;
    let topics_before = admin.list_topics().await.unwrap();
    let kept_before = admin.describe_topic("kept").await.unwrap();
    let also_kept_before = admin.describe_topic("also-kept").await.unwrap();
    let connection = broker.connect().await;
    let mut producer_ids = BTreeSet::new();
    for _ in 0..3 {
        assert!(producer_ids.insert(init_producer_id(&connection).await.unwrap().0));
    }
    drop((producer, connection));
    broker.stop().await;

    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    assert_eq!(admin.list_topics().await.unwrap(), topics_before);
    assert_eq!(topics_before, ["also-kept", "kept"]);
    // Leadership came back to the restarted broker under a new leader epoch (a
    // restart fences the old incarnation first); everything else is as it was.
    let same_but_epochs = |before: &client::TopicDescription, after: &client::TopicDescription| {
        let mut expected = before.clone();
        for (partition, after) in expected.partitions.iter_mut().zip(&after.partitions) {
            assert!(after.leader_epoch > partition.leader_epoch, "{after:?} after {partition:?}");
            partition.leader_epoch = after.leader_epoch;
        }
        assert_eq!(after, &expected);
    };
    let kept_after = admin.describe_topic("kept").await.unwrap();
    same_but_epochs(&kept_before, &kept_after);
    assert!(kept_after.configs.contains(&("retention.ms".to_owned(), "3600000".to_owned())));
    same_but_epochs(&also_kept_before, &admin.describe_topic("also-kept").await.unwrap());
    let after = read_all(broker.common()).await;
    assert_eq!(after, before);
    assert_eq!(after.len(), 51);
    let connection = broker.connect().await;
    for _ in 0..3 {
        let producer_id = init_producer_id(&connection).await.unwrap().0;
        assert!(producer_ids.insert(producer_id), "producer id {producer_id} handed out again after a restart");
    }
    // New records continue the offsets.
    let producer = Producer::new(broker.producer_config()).unwrap();
    let next = producer.send(ProducerRecord::new("also-kept", "after")).await.unwrap().await.unwrap();
    assert_eq!(next.offset, 1);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topic_loses_its_directories_and_can_be_created_again_empty() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("doomed", 2)).await.unwrap();
    admin.create_topic(NewTopic::new("doomed-not", 1)).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    for partition in 0..2 {
        producer.send(ProducerRecord::new("doomed", "old").partition(partition)).await.unwrap().await.unwrap();
    }
    producer.send(ProducerRecord::new("doomed-not", "stays")).await.unwrap().await.unwrap();
    assert!(temp.path().join("doomed-0").is_dir() && temp.path().join("doomed-1").is_dir());

    admin.delete_topic("doomed").await.unwrap();
    let left = || {
        let mut left: Vec<String> = std::fs::read_dir(temp.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        left
    };
    // The partitions are renamed away at once and removed in the background.
    assert!(!left().iter().any(|name| name == "doomed-0" || name == "doomed-1"), "{:?}", left());
    wait_until("the deleted partitions' files are gone", || async {
        !left().iter().any(|name| name.starts_with("doomed-0") || name.starts_with("doomed-1"))
    })
    .await;
    let left = left();
    assert!(left.contains(&"doomed-not-0".to_owned()), "{left:?}");
    assert_eq!(admin.list_topics().await.unwrap(), ["doomed-not"]);
    assert_eq!(code_of(admin.describe_topic("doomed").await), ErrorCode::UnknownTopicOrPartition);
    assert_eq!(code_of(admin.delete_topic("doomed").await), ErrorCode::UnknownTopicOrPartition);
    let connection = broker.connect().await;
    assert_eq!(code_of(fetch_raw(&connection, Fetch::at("doomed", 0, 0)).await), ErrorCode::UnknownTopicOrPartition);

    admin.create_topic(NewTopic::new("doomed", 3)).await.unwrap();
    for partition in 0..3 {
        assert_eq!(admin.watermarks("doomed", partition).await.unwrap(), (0, 0), "partition {partition}");
    }
    let fresh = Producer::new(broker.producer_config()).unwrap();
    let delivered = fresh.send(ProducerRecord::new("doomed", "new").partition(1)).await.unwrap().await.unwrap();
    assert_eq!((delivered.partition, delivered.offset), (1, 0));
    let fetched = fetch_raw(&connection, Fetch::at("doomed", 1, 0)).await.unwrap();
    assert_eq!(fetched.values(), [(0, b"new".to_vec())]);
    assert!(matches!(admin.watermarks("doomed-not", 0).await, Ok((0, 1))));
    broker.stop().await;
}

/// A producer and a consumer made before a restart carry on against the broker
/// restarted on the same address: they reconnect, and offsets continue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_carry_on_across_a_restart_on_the_same_address() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let address = broker.address.clone();
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("steady", 1)).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    let consumer = Consumer::new(broker.consumer_config()).unwrap();
    consumer.assign(&[("steady".to_owned(), 0)]).await.unwrap();
    consumer.seek("steady", 0, Offset::Beginning).unwrap();
    producer.send(ProducerRecord::new("steady", "before")).await.unwrap().await.unwrap();
    assert_eq!(consume(&consumer, 1).await[0].value.as_deref(), Some(&b"before"[..]));
    broker.stop().await;

    let broker = TestBroker::start_with(temp.path(), |config| config.listen = address.clone()).await;
    let delivered = producer.send(ProducerRecord::new("steady", "after")).await.unwrap().await.unwrap();
    assert_eq!(delivered.offset, 1);
    let records = consume(&consumer, 1).await;
    assert_eq!((records[0].offset, records[0].value.as_deref()), (1, Some(&b"after"[..])));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_deletes_only_what_the_metadata_says_was_deleted() {
    let temp = tempfile::tempdir().unwrap();
    // A directory no topic owns (an older data directory, a backup someone put
    // there) and the leftover of a deletion the metadata recorded.
    for directory in ["stray-0", "backup-2", "gone-0"] {
        std::fs::create_dir(temp.path().join(directory)).unwrap();
        std::fs::write(temp.path().join(directory).join("00000000000000000000.log"), b"precious").unwrap();
    }
    let metadata = r#"{"version": 1, "producer_id_block_end": 0, "topics": {}, "pending_deletions": ["gone-0"]}"#;
    std::fs::write(temp.path().join("cluster-metadata.json"), metadata).unwrap();

    let broker = TestBroker::start(temp.path()).await;
    assert!(!temp.path().join("gone-0").exists(), "a recorded deletion is finished");
    for directory in ["stray-0", "backup-2"] {
        let kept = std::fs::read(temp.path().join(directory).join("00000000000000000000.log")).unwrap();
        assert_eq!(kept, b"precious", "{directory} is left untouched");
    }
    let admin = Admin::new(broker.common()).unwrap();
    assert!(admin.list_topics().await.unwrap().is_empty(), "nothing is adopted as a topic");
    let refused = admin.create_topic(NewTopic::new("stray", 1)).await;
    assert_eq!(code_of(refused), ErrorCode::TopicAlreadyExists, "a topic never takes over a stray directory");
    admin.create_topic(NewTopic::new("gone", 1)).await.unwrap();
    assert_eq!(admin.watermarks("gone", 0).await.unwrap(), (0, 0));
    broker.stop().await;
}

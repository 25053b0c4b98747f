//! The broker's idempotent-producer check over the raw RPC contract: a retried
//! batch (same producer id, epoch and sequence) is answered with its original
//! offsets and stored once, even after newer batches; a sequence gap is
//! `OutOfOrderSequence`; a batch from an older (fenced) epoch is
//! `InvalidProducerEpoch`; refused batches leave the log unchanged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use client::connection::Connection;
use client::{Admin, BatchBuilder, ClientError, ErrorCode, NewTopic};
use support::{code_of, fetch_raw, init_producer_id, produce_raw, Fetch, TestBroker};

/// An idempotent batch of `count` records `"{tag}-{index}"`.
fn idempotent_batch(producer_id: i64, epoch: i16, base_sequence: i32, tag: &str, count: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new(1_000).producer(producer_id, epoch, base_sequence);
    for index in 0..count {
        builder.push(1_000, None, Some(format!("{tag}-{index}").as_bytes()), &[]);
    }
    builder.encode()
}

/// Every value in the partition, in offset order, checking offsets are dense.
async fn log_values(connection: &Connection, topic: &str) -> Vec<String> {
    let fetched = fetch_raw(connection, Fetch::at(topic, 0, 0)).await.unwrap();
    let values = fetched.values();
    for (index, (offset, _)) in values.iter().enumerate() {
        assert_eq!(*offset, index as i64);
    }
    assert_eq!(fetched.high_watermark, values.len() as i64);
    values.into_iter().map(|(_, value)| String::from_utf8(value).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_batch_gets_its_original_offsets_and_is_stored_once() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("dedup", 1)).await.unwrap();
    let connection = broker.connect().await;
    let (producer_id, epoch) = init_producer_id(&connection).await.unwrap();
    assert!(producer_id >= 0);
    assert_eq!(epoch, 0);

    let first = idempotent_batch(producer_id, epoch, 0, "first", 3);
    let appended = produce_raw(&connection, "dedup", 0, first.clone()).await.unwrap();
    let retried = produce_raw(&connection, "dedup", 0, first.clone()).await.unwrap();
    assert_eq!((appended.base_offset, retried.base_offset), (0, 0));
    assert_eq!(log_values(&connection, "dedup").await, ["first-0", "first-1", "first-2"]);

    // A retry that arrives after a newer batch still maps to its own offsets.
    let second = idempotent_batch(producer_id, epoch, 3, "second", 2);
    assert_eq!(produce_raw(&connection, "dedup", 0, second.clone()).await.unwrap().base_offset, 3);
    assert_eq!(produce_raw(&connection, "dedup", 0, first).await.unwrap().base_offset, 0);
    assert_eq!(produce_raw(&connection, "dedup", 0, second).await.unwrap().base_offset, 3);
    assert_eq!(log_values(&connection, "dedup").await, ["first-0", "first-1", "first-2", "second-0", "second-1"]);

    // Another producer's identical sequence numbers are its own.
    let (other_id, _) = init_producer_id(&connection).await.unwrap();
    assert_ne!(other_id, producer_id);
    let other = idempotent_batch(other_id, 0, 0, "other", 1);
    assert_eq!(produce_raw(&connection, "dedup", 0, other).await.unwrap().base_offset, 5);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_gaps_and_fenced_epochs_are_refused_without_appending() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("strict", 1)).await.unwrap();
    let connection = broker.connect().await;
    let (producer_id, _) = init_producer_id(&connection).await.unwrap();
    produce_raw(&connection, "strict", 0, idempotent_batch(producer_id, 0, 0, "a", 3)).await.unwrap();

    // Next expected sequence is 3; 5 skips two records.
    let gap = produce_raw(&connection, "strict", 0, idempotent_batch(producer_id, 0, 5, "gap", 1)).await;
    assert_eq!(code_of(gap), ErrorCode::OutOfOrderSequence);
    let next = produce_raw(&connection, "strict", 0, idempotent_batch(producer_id, 0, 3, "b", 1)).await.unwrap();
    assert_eq!(next.base_offset, 3, "the refused batch took no offsets");

    // A new epoch starts at sequence 0 and fences the old one.
    let bumped = produce_raw(&connection, "strict", 0, idempotent_batch(producer_id, 1, 0, "c", 1)).await.unwrap();
    assert_eq!(bumped.base_offset, 4);
    let zombie = produce_raw(&connection, "strict", 0, idempotent_batch(producer_id, 0, 4, "zombie", 1)).await;
    assert_eq!(code_of(zombie), ErrorCode::InvalidProducerEpoch);
    let bad_start = produce_raw(&connection, "strict", 0, idempotent_batch(producer_id, 2, 7, "late", 1)).await;
    assert_eq!(code_of(bad_start), ErrorCode::OutOfOrderSequence, "a new epoch must start at sequence 0");

    // An idempotent request carries exactly one batch.
    let mut two = idempotent_batch(producer_id, 1, 1, "d", 1);
    two.extend(idempotent_batch(producer_id, 1, 2, "e", 1));
    assert_eq!(code_of(produce_raw(&connection, "strict", 0, two).await), ErrorCode::InvalidRequest);

    assert_eq!(log_values(&connection, "strict").await, ["a-0", "a-1", "a-2", "b-0", "c-0"]);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_survives_a_broker_restart() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("durable-dedup", 1)).await.unwrap();
    let connection = broker.connect().await;
    let (producer_id, epoch) = init_producer_id(&connection).await.unwrap();
    let first = idempotent_batch(producer_id, epoch, 0, "first", 2);
    let second = idempotent_batch(producer_id, epoch, 2, "second", 2);
    produce_raw(&connection, "durable-dedup", 0, first.clone()).await.unwrap();
    produce_raw(&connection, "durable-dedup", 0, second.clone()).await.unwrap();
    drop(connection);
    broker.stop().await;

    // The producer table is rebuilt from the log: retries still map to their offsets,
    // and the next sequence is still the only one accepted.
    let broker = TestBroker::start(temp.path()).await;
    let connection = broker.connect().await;
    assert_eq!(produce_raw(&connection, "durable-dedup", 0, second).await.unwrap().base_offset, 2);
    assert_eq!(produce_raw(&connection, "durable-dedup", 0, first).await.unwrap().base_offset, 0);
    let gap = produce_raw(&connection, "durable-dedup", 0, idempotent_batch(producer_id, epoch, 9, "gap", 1)).await;
    assert!(matches!(gap, Err(ClientError::Broker { code: ErrorCode::OutOfOrderSequence, .. })), "{gap:?}");
    let next = idempotent_batch(producer_id, epoch, 4, "third", 1);
    assert_eq!(produce_raw(&connection, "durable-dedup", 0, next).await.unwrap().base_offset, 4);
    assert_eq!(
        log_values(&connection, "durable-dedup").await,
        ["first-0", "first-1", "second-0", "second-1", "third-0"]
    );
    broker.stop().await;
}

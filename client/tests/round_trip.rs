//! The real server and the real client over TCP: records round-trip in order;
//! keys pick Kafka's partition; records without a key spread; explicit
//! partitions, seeks (timestamp, end) and lz4/zstd compression behave as
//! documented; unknown topics fail `send`; one `produceMany` call appends to
//! several partitions and answers each on its own; `poll_ready` answers from
//! what is fetched without waiting.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use abi::BatchIter;
use client::partitioner::partition_for_key;
use client::{Admin, Compression, Consumer, ErrorCode, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord};
use support::{
    batch_of, code_of, consume, fetch_raw, produce_many_raw, produce_raw, wait_until, Fetch, TestBroker, WAIT_MAX,
};

/// A long poll that outlasts every wait of these tests ([`WAIT_MAX`]), and the
/// broker limit that lets it.
const LONG_POLL: Duration = Duration::from_secs(WAIT_MAX.as_secs() * 5);
const LONG_POLL_MS: u32 = LONG_POLL.as_millis() as u32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_round_trip_in_order_with_keys_headers_and_offsets() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("orders", 3)).await.unwrap();

    let producer = Producer::new(broker.producer_config()).unwrap();
    let mut deliveries = Vec::new();
    for index in 0..100 {
        let record = ProducerRecord::new("orders", format!("value-{index}"))
            .key(format!("key-{}", index % 7))
            .header("index", Some(index.to_string().into_bytes()));
        deliveries.push(producer.send(record).await.unwrap());
    }
    let mut acknowledged = Vec::new();
    for delivery in deliveries {
        acknowledged.push(delivery.await.unwrap());
    }

    let consumer = Consumer::new(broker.consumer_config()).unwrap();
    consumer.assign(&(0..3).map(|partition| ("orders".to_owned(), partition)).collect::<Vec<_>>()).await.unwrap();
    consumer.seek_all(Offset::Beginning).unwrap();
    let mut received = Vec::new();
    while received.len() < 100 {
        let records = consumer.poll(Duration::from_secs(10)).await.unwrap();
        assert!(!records.is_empty(), "timed out with {} records", received.len());
        received.extend(records);
    }
    for record in &received {
        let index: usize = std::str::from_utf8(record.headers[0].1.as_ref().unwrap()).unwrap().parse().unwrap();
        assert_eq!(record.value.as_deref(), Some(format!("value-{index}").as_bytes()));
        assert_eq!((record.partition, record.offset), (acknowledged[index].partition, acknowledged[index].offset));
        assert_fields_lie_in_the_buffer(record);
    }
    broker.stop().await;
}

/// What bindings rely on to hand records out uncopied: the key, the value and
/// every header value are ranges of the record's `buffer()`.
fn assert_fields_lie_in_the_buffer(record: &client::ConsumerRecord) {
    let header_values = record.headers.iter().filter_map(|(_, value)| value.as_ref());
    for field in record.key.iter().chain(record.value.iter()).chain(header_values) {
        let (start, length) = record.span(field).expect("the field lies in the buffer");
        assert_eq!(&record.buffer()[start..start + length], &field[..]);
    }
    assert_eq!(record.span(&bytes::Bytes::from_static(b"elsewhere")), None);
}

/// `send_many` (the SDKs' bulk path) is `send` for each record: key
/// partitioning, order, offsets; a bad partition is refused before anything is
/// queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_many_queues_borrowed_records_like_send() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("bulk", 4)).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    let keys: Vec<Vec<u8>> = (0..200).map(|index| format!("key-{}", index % 9).into_bytes()).collect();
    let values: Vec<Vec<u8>> = (0..200).map(|index| format!("value-{index}").into_bytes()).collect();
    let records = keys.iter().zip(&values).map(|(key, value)| (Some(&key[..]), Some(&value[..])));
    let futures = producer.send_many("bulk", None, records).await.unwrap();
    let mut last_offset = BTreeMap::new();
    for (index, future) in futures.into_iter().enumerate() {
        let metadata = future.await.unwrap();
        assert_eq!(metadata.partition as u32, partition_for_key(&keys[index], 4));
        let previous = last_offset.insert(metadata.partition, metadata.offset);
        assert!(previous.is_none_or(|previous| previous < metadata.offset), "send order kept");
    }
    let refused = producer.send_many("bulk", Some(4), [(None, Some(&b"x"[..]))]).await;
    assert_eq!(code_of(refused), ErrorCode::UnknownTopicOrPartition);
    let refused = producer.send_many("missing", None, [(None, Some(&b"x"[..]))]).await;
    assert_eq!(code_of(refused), ErrorCode::UnknownTopicOrPartition);
    broker.stop().await;
}

/// Many records per key over six partitions: every record of a key lands in
/// one partition, Kafka's murmur2 choice (`partition_for_key`), in send order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_with_the_same_key_share_the_partition_kafka_would_choose() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("keyed", 6)).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    let keys: Vec<String> = (0..12).map(|index| format!("user-{index}")).collect();
    let mut deliveries = Vec::new();
    for round in 0..10 {
        for key in &keys {
            let record = ProducerRecord::new("keyed", format!("{key}/{round}")).key(key.as_str());
            deliveries.push(producer.send(record).await.unwrap());
        }
    }
    for delivery in deliveries {
        delivery.await.unwrap();
    }

    let consumer = Consumer::new(broker.consumer_config()).unwrap();
    consumer.assign(&(0..6).map(|partition| ("keyed".to_owned(), partition)).collect::<Vec<_>>()).await.unwrap();
    consumer.seek_all(Offset::Beginning).unwrap();
    let received = consume(&consumer, 120).await;
    let mut rounds_by_key: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for record in &received {
        let key = std::str::from_utf8(record.key.as_ref().unwrap()).unwrap().to_owned();
        let expected = partition_for_key(key.as_bytes(), 6) as i32;
        assert_eq!(record.partition, expected, "key {key} at offset {}", record.offset);
        let value = std::str::from_utf8(record.value.as_ref().unwrap()).unwrap();
        let (value_key, round) = value.split_once('/').unwrap();
        assert_eq!(value_key, key);
        rounds_by_key.entry(key).or_default().push(round.parse().unwrap());
    }
    assert_eq!(rounds_by_key.len(), 12);
    for (key, rounds) in rounds_by_key {
        assert_eq!(rounds, (0..10).collect::<Vec<_>>(), "records of {key} in send order");
    }
    let partitions_used: BTreeSet<i32> = received.iter().map(|record| record.partition).collect();
    assert!(partitions_used.len() > 1, "twelve keys all hashed to one partition: {partitions_used:?}");
    broker.stop().await;
}

/// Records without a key go round-robin, one batch per partition at a time,
/// so small batches reach every partition; an explicit partition wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_without_a_key_spread_and_explicit_partitions_are_honoured() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("spread", 6)).await.unwrap();
    // A batch closes after every record, so each record opens the next partition's batch.
    let config = ProducerConfig { batch_bytes_max: 1, ..broker.producer_config() };
    let producer = Producer::new(config).unwrap();
    let mut deliveries = Vec::new();
    for index in 0..24 {
        deliveries.push(producer.send(ProducerRecord::new("spread", format!("free-{index}"))).await.unwrap());
    }
    let mut per_partition = [0; 6];
    for delivery in deliveries {
        per_partition[delivery.await.unwrap().partition as usize] += 1;
    }
    assert_eq!(per_partition, [4; 6], "round-robin over every partition");

    let pinned = producer.send(ProducerRecord::new("spread", "pinned").key("user-1").partition(4)).await.unwrap();
    let pinned = pinned.await.unwrap();
    assert_eq!((pinned.partition, pinned.offset), (4, 4));
    let consumer = Consumer::new(broker.consumer_config()).unwrap();
    consumer.assign(&[("spread".to_owned(), 4)]).await.unwrap();
    consumer.seek("spread", 4, Offset::At(4)).unwrap();
    let records = consume(&consumer, 1).await;
    assert_eq!(records[0].value.as_deref(), Some(&b"pinned"[..]));
    assert_eq!(records[0].key.as_deref(), Some(&b"user-1"[..]));
    broker.stop().await;
}

/// `send` refuses a topic or partition the broker does not have, at once, with
/// the broker's error code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_topic_or_partition_fails_send() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("known", 2)).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    let unknown_topic = producer.send(ProducerRecord::new("unknown", "lost")).await;
    assert_eq!(code_of(unknown_topic), ErrorCode::UnknownTopicOrPartition);
    for partition in [-1, 2, 99] {
        let unknown_partition = producer.send(ProducerRecord::new("known", "lost").partition(partition)).await;
        assert_eq!(code_of(unknown_partition), ErrorCode::UnknownTopicOrPartition, "partition {partition}");
    }
    let delivered = producer.send(ProducerRecord::new("known", "kept").partition(1)).await.unwrap().await.unwrap();
    assert_eq!((delivered.partition, delivered.offset), (1, 0));
    broker.stop().await;
}

/// Seeking to a timestamp starts at the first record stamped at or after it,
/// even in the middle of a batch; past every record it starts at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_by_timestamp_starts_at_the_first_record_at_or_after_it() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("timed", 1)).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    let base_ms = 1_700_000_000_000;
    // Two batches of ten: one request each, so the search crosses a batch boundary.
    for half in 0..2 {
        let mut deliveries = Vec::new();
        for index in half * 10..half * 10 + 10 {
            let record = ProducerRecord::new("timed", format!("at-{index}")).timestamp_ms(base_ms + index * 1000);
            deliveries.push(producer.send(record).await.unwrap());
        }
        for delivery in deliveries {
            delivery.await.unwrap();
        }
    }
    let consumer = Consumer::new(broker.consumer_config()).unwrap();
    consumer.assign(&[("timed".to_owned(), 0)]).await.unwrap();
    let cases = [(base_ms + 4_500, 5), (base_ms + 7_000, 7), (base_ms + 12_001, 13), (base_ms - 1, 0)];
    for (timestamp_ms, expected_offset) in cases {
        consumer.seek("timed", 0, Offset::Timestamp(timestamp_ms)).unwrap();
        let first = &consume(&consumer, 1).await[0];
        assert_eq!(first.offset, expected_offset, "seek to {timestamp_ms}");
        assert_eq!(first.timestamp_ms, base_ms + expected_offset * 1000);
        assert_eq!(first.value.as_deref(), Some(format!("at-{expected_offset}").as_bytes()));
    }
    consumer.seek("timed", 0, Offset::Timestamp(base_ms + 60_000)).unwrap();
    wait_until("a timestamp after every record resolves", || async { consumer.position("timed", 0).is_some() }).await;
    assert_eq!(consumer.position("timed", 0), Some(20), "past every record: the high watermark");
    broker.stop().await;
}

/// Seeking to the end skips what is there and returns only what is produced
/// after the position is resolved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seek_to_end_returns_only_new_records() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("tail", 1)).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    for index in 0..5 {
        producer.send(ProducerRecord::new("tail", format!("old-{index}"))).await.unwrap().await.unwrap();
    }
    let consumer = Consumer::new(broker.consumer_config()).unwrap();
    consumer.assign(&[("tail".to_owned(), 0)]).await.unwrap();
    consumer.seek("tail", 0, Offset::End).unwrap();
    wait_until("the end offset resolves", || async { consumer.position("tail", 0).is_some() }).await;
    assert_eq!(consumer.position("tail", 0), Some(5));
    for index in 0..3 {
        producer.send(ProducerRecord::new("tail", format!("new-{index}"))).await.unwrap().await.unwrap();
    }
    let records = consume(&consumer, 3).await;
    let got: Vec<(i64, &[u8])> =
        records.iter().map(|record| (record.offset, &record.value.as_ref().unwrap()[..])).collect();
    assert_eq!(got, [(5, &b"new-0"[..]), (6, b"new-1"), (7, b"new-2")]);
    assert!(consumer.poll(Duration::from_millis(50)).await.unwrap().is_empty(), "nothing else");
    broker.stop().await;
}

/// lz4 and zstd batches go through the broker compressed (stored as sent) and
/// come back to the consumer byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_batches_round_trip_through_the_broker() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    let connection = broker.connect().await;
    let base_ms = 1_700_000_000_000;
    for (topic, compression) in [("lz4", Compression::Lz4), ("zstd", Compression::Zstd)] {
        admin.create_topic(NewTopic::new(topic, 1)).await.unwrap();
        let producer = Producer::new(ProducerConfig { compression, ..broker.producer_config() }).unwrap();
        let values: Vec<String> = (0..200).map(|index| format!("{topic} record {index} {}", "x".repeat(100))).collect();
        let mut deliveries = Vec::new();
        for (index, value) in values.iter().enumerate() {
            let record = ProducerRecord::new(topic, value.as_str())
                .key(format!("k{index}"))
                .timestamp_ms(base_ms + index as i64);
            deliveries.push(producer.send(record.header("h", Some(vec![index as u8]))).await.unwrap());
        }
        for delivery in deliveries {
            delivery.await.unwrap();
        }

        let stored = fetch_raw(&connection, Fetch::at(topic, 0, 0)).await.unwrap();
        let batches: Vec<_> = BatchIter::new(&stored.batches).map(Result::unwrap).collect();
        assert!(!batches.is_empty());
        for batch in &batches {
            assert_eq!(batch.attributes().compression(), Ok(compression), "{topic} stored compressed");
        }
        let stored_bytes: usize = batches.iter().map(|batch| batch.size_bytes()).sum();
        assert!(stored_bytes < 200 * 100 / 2, "{topic}: {stored_bytes} bytes stored for 20 KB of values");

        let consumer = Consumer::new(broker.consumer_config()).unwrap();
        consumer.assign(&[(topic.to_owned(), 0)]).await.unwrap();
        consumer.seek(topic, 0, Offset::Beginning).unwrap();
        let records = consume(&consumer, 200).await;
        for (index, record) in records.iter().enumerate() {
            assert_eq!(record.offset, index as i64);
            assert_eq!(record.value.as_deref(), Some(values[index].as_bytes()));
            assert_eq!(record.key.as_deref(), Some(format!("k{index}").as_bytes()));
            assert_eq!(record.headers[0].1.as_deref(), Some(&[index as u8][..]));
            assert_fields_lie_in_the_buffer(record);
        }
        // Positions inside a compressed batch: by offset and by timestamp.
        consumer.seek(topic, 0, Offset::At(137)).unwrap();
        assert_eq!(consume(&consumer, 1).await[0].offset, 137);
        consumer.seek(topic, 0, Offset::Timestamp(base_ms + 150)).unwrap();
        let first = &consume(&consumer, 1).await[0];
        assert_eq!((first.offset, first.timestamp_ms), (150, base_ms + 150));
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_producer_still_delivers_what_it_buffered() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("dropped", 1)).await.unwrap();
    let config = ProducerConfig { linger: Duration::from_millis(200), ..broker.producer_config() };
    let producer = Producer::new(config).unwrap();
    for index in 0..10 {
        drop(producer.send(ProducerRecord::new("dropped", format!("buffered-{index}"))).await.unwrap());
    }
    drop(producer); // no flush, no close
    let consumer = Consumer::new(broker.consumer_config()).unwrap();
    consumer.assign(&[("dropped".to_owned(), 0)]).await.unwrap();
    consumer.seek("dropped", 0, Offset::Beginning).unwrap();
    let records = support::consume(&consumer, 10).await;
    let values: Vec<_> = records.iter().map(|record| record.value.clone().unwrap()).collect();
    assert_eq!(values, (0..10).map(|index| format!("buffered-{index}").into_bytes()).collect::<Vec<_>>());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_of_more_partitions_than_calls_in_flight_reads_them_all() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(temp.path(), |config| config.limits.in_flight_calls_max = 16).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("wide", 40)).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    for partition in 0..40 {
        producer.send(ProducerRecord::new("wide", format!("p{partition}")).partition(partition)).await.unwrap();
    }
    producer.flush().await;
    // Long polls that would each hold a call slot for 5 s: one fetch per broker
    // carries every partition, so the broker's 16-call limit never bites.
    let config = client::ConsumerConfig { fetch_max_wait: Duration::from_secs(5), ..broker.consumer_config() };
    let consumer = Consumer::new(config).unwrap();
    consumer.assign(&(0..40).map(|partition| ("wide".to_owned(), partition)).collect::<Vec<_>>()).await.unwrap();
    consumer.seek_all(Offset::Beginning).unwrap();
    let records = consume(&consumer, 40).await;
    let partitions: BTreeSet<i32> = records.iter().map(|record| record.partition).collect();
    assert_eq!(partitions.len(), 40, "every partition was read");
    for record in &records {
        assert_eq!(record.value.as_deref(), Some(format!("p{}", record.partition).as_bytes()));
    }
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seek_does_not_wait_for_the_pending_long_poll() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(temp.path(), |config| config.limits.fetch_wait_ms_max = LONG_POLL_MS).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("seeky", 1)).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    for index in 0..3 {
        producer.send(ProducerRecord::new("seeky", format!("old-{index}"))).await.unwrap().await.unwrap();
    }
    // Long polls longer than `consume` waits: only a seek that drops the pending
    // poll can deliver in time.
    let config = client::ConsumerConfig { fetch_max_wait: LONG_POLL, ..broker.consumer_config() };
    let consumer = Consumer::new(config).unwrap();
    consumer.assign(&[("seeky".to_owned(), 0)]).await.unwrap();
    consumer.seek("seeky", 0, Offset::End).unwrap();
    wait_until("the end is resolved", || async { consumer.position("seeky", 0) == Some(3) }).await;
    assert!(consumer.poll(Duration::from_millis(100)).await.unwrap().is_empty(), "a long poll is waiting at the end");
    consumer.seek("seeky", 0, Offset::Beginning).unwrap();
    let records = consume(&consumer, 3).await;
    let offsets: Vec<i64> = records.iter().map(|record| record.offset).collect();
    assert_eq!(offsets, [0, 1, 2]);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_fail_after_the_delivery_timeout_while_the_broker_is_down() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("outage", 1)).await.unwrap();
    let config = ProducerConfig {
        delivery_timeout: Duration::from_millis(500),
        linger: Duration::ZERO,
        batch_bytes_max: 1, // one record per batch
        ..broker.producer_config()
    };
    let producer = Producer::new(config).unwrap();
    producer.send(ProducerRecord::new("outage", "before")).await.unwrap().await.unwrap();
    broker.stop().await;

    // The first failure leaves the batch's fate in doubt, so the producer drops its
    // id; the next record then waits for an id nobody can give, and must still
    // fail when its delivery timeout passes instead of hanging flush and close.
    // Both are queued by one call, with one metadata lookup: a second `send`
    // could find the topic's metadata already dropped by the first record's
    // failed attempt, and fail at once with no broker to ask (seen in CI).
    // The second is queued behind the first (one request in flight per partition).
    let records = [(None, Some(&b"lost-1"[..])), (None, Some(&b"lost-2"[..]))];
    let mut deliveries = producer.send_many("outage", Some(0), records).await.unwrap().into_iter();
    let (first, second) = (deliveries.next().unwrap(), deliveries.next().unwrap());
    assert!(first.await.is_err());
    let flushed = tokio::time::timeout(Duration::from_secs(20), producer.flush()).await;
    assert!(flushed.is_ok(), "flush returned");
    let second = second.await;
    assert!(matches!(second, Err(client::ClientError::Timeout { .. })), "{second:?}");
    let closed = tokio::time::timeout(Duration::from_secs(20), producer.close()).await;
    assert!(closed.is_ok(), "close returned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_many_answers_each_partition_in_request_order() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("many", 3)).await.unwrap();
    let connection = broker.connect().await;

    let answers = produce_many_raw(
        &connection,
        vec![
            ("many", 0, batch_of(1_000, &[b"a", b"b"])),
            ("many", 1, batch_of(1_000, &[b"c"])),
            ("missing", 0, batch_of(1_000, &[b"x"])),
            ("many", 7, batch_of(1_000, &[b"y"])),
            ("many", 0, batch_of(1_000, &[b"d"])),
        ],
    )
    .await
    .unwrap();
    assert_eq!(answers.len(), 5);
    let offsets: Vec<Option<i64>> =
        answers.iter().map(|answer| answer.as_ref().ok().map(|produced| produced.base_offset)).collect();
    assert_eq!(offsets, [Some(0), Some(0), None, None, Some(2)], "answers: {answers:?}");
    for refused in &answers[2..4] {
        assert_eq!(code_of(refused.clone()), ErrorCode::UnknownTopicOrPartition);
    }
    // Entries for one partition were appended in request order; the refused
    // entries appended nothing anywhere.
    let values = fetch_raw(&connection, Fetch::at("many", 0, 0)).await.unwrap().values();
    assert_eq!(values, [(0, b"a".to_vec()), (1, b"b".to_vec()), (2, b"d".to_vec())]);
    let values = fetch_raw(&connection, Fetch::at("many", 1, 0)).await.unwrap().values();
    assert_eq!(values, [(0, b"c".to_vec())]);
    let fetched = fetch_raw(&connection, Fetch::at("many", 2, 0)).await.unwrap();
    assert_eq!(fetched.high_watermark, 0);

    // An empty call is answered with no entries.
    assert!(produce_many_raw(&connection, Vec::new()).await.unwrap().is_empty());
    broker.stop().await;
}

/// With a linger, the batches of many partitions fall due together and travel in
/// `produceMany` calls; every record still learns its own partition and offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_of_many_partitions_sent_together_acknowledge_each_record() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("wide", 16)).await.unwrap();
    let producer =
        Producer::new(ProducerConfig { linger: Duration::from_millis(20), ..broker.producer_config() }).unwrap();
    let mut deliveries = Vec::new();
    for round in 0..20 {
        for partition in 0..16 {
            let record = ProducerRecord::new("wide", format!("{partition}-{round}")).partition(partition);
            deliveries.push(producer.send(record).await.unwrap());
        }
    }
    let mut next_offset = BTreeMap::new();
    for delivery in deliveries {
        let metadata = delivery.await.unwrap();
        let expected = next_offset.entry(metadata.partition).or_insert(0);
        assert_eq!(metadata.offset, *expected, "partition {}", metadata.partition);
        *expected += 1;
    }
    assert_eq!(next_offset.len(), 16);
    for partition in 0..16 {
        let values = fetch_raw(&broker.connect().await, Fetch::at("wide", partition, 0)).await.unwrap().values();
        let expected: Vec<(i64, Vec<u8>)> =
            (0..20).map(|round| (round, format!("{partition}-{round}").into_bytes())).collect();
        assert_eq!(values, expected);
    }
    broker.stop().await;
}

/// `poll_ready` (what bindings answer a poll with on their own thread) gives
/// what is already fetched without waiting, `None` when a poll would wait, an
/// empty list after a wakeup, and `None` once closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_ready_answers_from_what_is_fetched_and_never_waits() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("ready", 1)).await.unwrap();
    let connection = broker.connect().await;
    let values: Vec<Vec<u8>> = (0..10).map(|index| format!("v{index}").into_bytes()).collect();
    let borrowed: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    // One batch: the consumer fetches all ten in one answer.
    produce_raw(&connection, "ready", 0, batch_of(1_000, &borrowed)).await.unwrap();

    let consumer = Consumer::new(broker.consumer_config()).unwrap();
    consumer.assign(&[("ready".to_owned(), 0)]).await.unwrap();
    consumer.seek_all(Offset::Beginning).unwrap();
    consumer.wakeup();
    assert!(consumer.poll_ready(100).unwrap().unwrap().is_empty(), "a pending wakeup answers empty");

    let first = consumer.poll_at_most(Duration::from_secs(30), 3).await.unwrap();
    assert_eq!(first.iter().map(|record| record.offset).collect::<Vec<_>>(), [0, 1, 2]);
    // The other seven came in the same answer: taken at once, in order.
    let rest = consumer.poll_ready(100).expect("buffered records are ready").unwrap();
    assert_eq!(rest.iter().map(|record| record.offset).collect::<Vec<_>>(), (3..10).collect::<Vec<_>>());
    assert_eq!(rest[6].value.as_deref(), Some(&b"v9"[..]));
    assert!(consumer.poll_ready(100).is_none(), "nothing fetched: a poll would wait");
    assert_eq!(consumer.position("ready", 0), Some(10));

    consumer.close().await;
    assert!(consumer.poll_ready(100).is_none(), "a closed consumer has nothing ready");
    broker.stop().await;
}

//! The real server and the real client over TCP: produce, consume, keys,
//! long polls, retention, restarts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use client::{Admin, Consumer, NewTopic, Offset, Producer, ProducerRecord};
use support::TestBroker;

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
    }
    broker.stop().await;
}

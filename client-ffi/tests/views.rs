//! `RecordViews` over records a real consumer read from a real broker (plain
//! and lz4 batches, several partitions): every record reads back from its
//! views exactly, and none of them is copied; the views only name ranges of
//! the buffers the records were fetched into.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use broker::{BrokerConfig, Server};
use bytes::Bytes;
use client::{Admin, CommonConfig, Compression, Consumer, ConsumerConfig, NewTopic, Offset, Producer, ProducerConfig};
use client::{ConsumerRecord, ProducerRecord};
use client_ffi::{RecordViews, NULL_LENGTH, VIEW_STRIDE};

/// The field at `(start, length)` of `buffer`, as the record had it.
fn field(buffer: &Bytes, start: u32, length: u32) -> Option<Bytes> {
    (length != NULL_LENGTH).then(|| buffer.slice(start as usize..(start + length) as usize))
}

/// The records `views` describes, made back from its arrays and buffers.
fn read_back(views: &RecordViews) -> Vec<ConsumerRecord> {
    (0..views.len())
        .map(|index| {
            let words = &views.index[index * VIEW_STRIDE..(index + 1) * VIEW_STRIDE];
            let buffer = &views.buffers[words[2] as usize];
            let mut record = ConsumerRecord::new(
                views.topics[words[0] as usize].as_str(),
                words[1] as i32,
                views.offsets[index],
                views.timestamps[index],
            );
            record.key = field(buffer, words[3], words[4]);
            record.value = field(buffer, words[5], words[6]);
            record.headers = (words[7]..words[7] + words[8])
                .map(|header| {
                    let at = header as usize * 4;
                    let key = &views.header_keys[views.headers[at] as usize..][..views.headers[at + 1] as usize];
                    let key = String::from_utf8(key.to_vec()).unwrap();
                    (key, field(buffer, views.headers[at + 2], views.headers[at + 3]))
                })
                .collect();
            record
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetched_records_read_back_from_their_views_without_a_copy() {
    let temp = tempfile::tempdir().unwrap();
    let config = BrokerConfig {
        data_dir: temp.path().to_path_buf(),
        listen: "127.0.0.1:0".to_owned(),
        ..BrokerConfig::default()
    };
    let server = Server::bind(config).await.unwrap();
    let common = CommonConfig { bootstrap_servers: server.local_addr().to_string(), ..CommonConfig::default() };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(async move {
        server
            .serve(async {
                stopped.await.ok();
            })
            .await
            .unwrap()
    });

    let admin = Admin::new(common.clone()).unwrap();
    let mut produced = 0;
    for (topic, partitions, compression) in [("plain", 2, Compression::None), ("packed", 1, Compression::Lz4)] {
        admin.create_topic(NewTopic::new(topic, partitions)).await.unwrap();
        let producer =
            Producer::new(ProducerConfig { common: common.clone(), compression, ..ProducerConfig::default() }).unwrap();
        let mut deliveries = Vec::new();
        for index in 0..300 {
            let mut record = ProducerRecord::new(topic, format!("{topic} value {index} {}", "v".repeat(index % 50)))
                .partition(index as i32 % partitions)
                .header("index", Some(index.to_string().into_bytes()))
                .header("none", None);
            record = match index % 4 {
                0 => record,                 // null key
                1 => record.key(Vec::new()), // empty key
                _ => record.key(format!("key {index}")),
            };
            if index % 10 == 9 {
                record.value = None; // a tombstone
            }
            deliveries.push(producer.send(record).await.unwrap());
        }
        for delivery in deliveries {
            delivery.await.unwrap();
        }
        produced += 300;
    }

    let consumer = Consumer::new(ConsumerConfig { common, ..ConsumerConfig::default() }).unwrap();
    let assignment = [("plain".to_owned(), 0), ("plain".to_owned(), 1), ("packed".to_owned(), 0)];
    consumer.assign(&assignment).await.unwrap();
    consumer.seek_all(Offset::Beginning).unwrap();
    let mut polls = 0;
    let mut seen = 0;
    while seen < produced {
        let records = consumer.poll(Duration::from_secs(10)).await.unwrap();
        assert!(!records.is_empty(), "timed out with {seen} of {produced} records");
        seen += records.len();
        polls += 1;
        let views = RecordViews::new(&records).unwrap();
        assert_eq!(read_back(&views), records, "poll {polls} reads back from its views");
        assert!(views.buffers.last().unwrap().is_empty(), "poll {polls} copied records");
        let fetched: std::collections::HashSet<_> = records.iter().map(|record| record.buffer().as_ptr()).collect();
        assert!(views.buffers.len() <= fetched.len() + 1, "one range per fetched buffer");
        // Each range lies in its fetched buffer: handing it out copies nothing.
        for range in &views.buffers[..views.buffers.len() - 1] {
            let inside = records.iter().any(|record| {
                let buffer = record.buffer().as_ptr_range();
                buffer.start <= range.as_ptr() && range.as_ptr_range().end <= buffer.end
            });
            assert!(range.is_empty() || inside, "a range outside every fetched buffer");
        }
    }
    assert_eq!(seen, produced);
    let _ = stop.send(());
    serving.await.unwrap();
}

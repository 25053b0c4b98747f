//! Long-poll fetches over the raw RPC contract: a fetch waiting at the log end
//! returns as soon as a record is produced (not at `maxWaitMs`), and a fetch
//! with nothing to return waits `maxWaitMs`, then answers empty with the high
//! watermark and log start offset set.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use client::{Admin, ClientError, NewTopic};
use support::{batch_of, fetch_raw, metadata_raw, produce_raw, Fetch, TestBroker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_fetch_returns_as_soon_as_a_record_is_produced() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("events", 1)).await.unwrap();
    let fetcher = broker.connect().await;
    let producer = broker.connect().await;

    let started = Instant::now();
    let waiting = tokio::spawn({
        let fetcher = fetcher.clone();
        async move { fetch_raw(&fetcher, Fetch::at("events", 0, 0).waiting(20_000)).await }
    });
    // Calls on one connection are read in order: once this answer is back the
    // broker holds the fetch, and it must still be waiting (the log is empty).
    metadata_raw(&fetcher).await.unwrap();
    assert!(!waiting.is_finished(), "a fetch at the log end answered before any record existed");

    let produced = produce_raw(&producer, "events", 0, batch_of(1_000, &[b"wake up"])).await.unwrap();
    assert_eq!(produced.base_offset, 0);
    let fetched = tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("fetch woke").unwrap().unwrap();
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(5), "fetch took {elapsed:?} with max wait 20 s");
    assert_eq!(fetched.values(), [(0, b"wake up".to_vec())]);
    assert_eq!((fetched.high_watermark, fetched.log_start_offset), (1, 0));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_without_data_waits_max_wait_then_answers_empty_with_watermarks() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("quiet", 1)).await.unwrap();
    let connection = broker.connect().await;
    produce_raw(&connection, "quiet", 0, batch_of(1_000, &[b"a", b"b", b"c"])).await.unwrap();

    let started = Instant::now();
    let fetched = fetch_raw(&connection, Fetch::at("quiet", 0, 3).waiting(300)).await.unwrap();
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(300), "answered after {elapsed:?}, before max wait");
    assert!(elapsed < Duration::from_secs(3), "answered after {elapsed:?}, far past max wait");
    assert!(fetched.batches.is_empty());
    assert_eq!((fetched.high_watermark, fetched.log_start_offset), (3, 0));

    // min_bytes 0 never waits, even with a long max wait.
    let started = Instant::now();
    let fetched = fetch_raw(&connection, Fetch { max_wait_ms: 20_000, ..Fetch::at("quiet", 0, 3) }).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!((fetched.batches.len(), fetched.high_watermark), (0, 3));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_fetch_does_not_hold_up_shutdown() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("idle", 1)).await.unwrap();
    let connection = broker.connect().await;
    let waiting = tokio::spawn({
        let connection = connection.clone();
        async move { fetch_raw(&connection, Fetch::at("idle", 0, 0).waiting(20_000)).await }
    });
    metadata_raw(&connection).await.unwrap();
    assert!(!waiting.is_finished());

    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), broker.stop()).await.expect("shutdown does not wait for long polls");
    let outcome = tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("the fetch ends").unwrap();
    assert!(matches!(outcome, Err(ClientError::Disconnected { .. })), "{outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

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
    // The connection closes under it; or, if the controlled shutdown fenced the
    // broker first (its partitions then have no leader), the poll is answered
    // with a retriable refusal (NotLeaderOrFollower). Never with records.
    match &outcome {
        Err(ClientError::Disconnected { .. }) => {}
        Err(error @ ClientError::Broker { .. }) if error.is_retriable() => {}
        _ => panic!("the waiting fetch ended with {outcome:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// `fetchMany` as raw (topic, partition, offset) triples → per partition
/// `Ok((batch bytes, high watermark))` or the broker's error code.
async fn fetch_many_raw(
    connection: &client::connection::Connection,
    partitions: Vec<(&'static str, i32, i64)>,
    min_bytes: u32,
    max_wait_ms: u32,
) -> Vec<Result<(usize, i64), client::ErrorCode>> {
    connection
        .call(move |broker: abi::weir_capnp::broker::Client| async move {
            let mut request = broker.fetch_many_request();
            let mut builder = request.get().init_request();
            builder.set_min_bytes(min_bytes);
            builder.set_max_wait_ms(max_wait_ms);
            builder.set_max_bytes(1 << 20);
            let mut list = builder.init_partitions(partitions.len() as u32);
            for (index, (topic, partition, offset)) in partitions.iter().enumerate() {
                let mut entry = list.reborrow().get(index as u32);
                entry.set_topic(*topic);
                entry.set_partition(*partition);
                entry.set_offset(*offset);
                entry.set_max_bytes(1 << 20);
            }
            let response = request.send().promise.await.unwrap();
            let answers = response.get().unwrap().get_partitions().unwrap();
            Ok::<_, ClientError>(
                answers
                    .iter()
                    .map(|answer| match answer.has_error() {
                        true => Err(client::ErrorCode::from_u16(answer.get_error().unwrap().get_code()).unwrap()),
                        false => Ok((answer.get_batches().unwrap().len(), answer.get_high_watermark())),
                    })
                    .collect(),
            )
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fetch_many_waits_on_every_partition_and_answers_each() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("many", 3)).await.unwrap();
    let connection = broker.connect().await;

    // Nothing anywhere: the long poll waits for data on any of the partitions.
    let waiting = tokio::spawn({
        let connection = connection.clone();
        async move { fetch_many_raw(&connection, vec![("many", 0, 0), ("many", 1, 0), ("many", 2, 0)], 1, 20_000).await }
    });
    assert!(metadata_raw(&connection).await.is_ok(), "the connection serves other calls meanwhile");
    let started = Instant::now();
    produce_raw(&connection, "many", 2, batch_of(1, &[b"on two"])).await.unwrap();
    let answers = waiting.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "answered when partition 2 got data");
    assert_eq!(answers[0], Ok((0, 0)));
    assert_eq!(answers[1], Ok((0, 0)));
    assert!(matches!(answers[2], Ok((bytes, 1)) if bytes > 0), "{:?}", answers[2]);

    // A bad partition is answered with its own error, at once, and the others still are.
    let started = Instant::now();
    let answers = fetch_many_raw(
        &connection,
        vec![("many", 2, 0), ("many", 7, 0), ("nope", 0, 0), ("many", 2, 99)],
        1 << 20,
        20_000,
    )
    .await;
    assert!(started.elapsed() < Duration::from_secs(5), "an error ends the wait");
    assert!(matches!(answers[0], Ok((bytes, 1)) if bytes > 0));
    assert_eq!(answers[1], Err(client::ErrorCode::UnknownTopicOrPartition));
    assert_eq!(answers[2], Err(client::ErrorCode::UnknownTopicOrPartition));
    assert_eq!(answers[3], Err(client::ErrorCode::OffsetOutOfRange));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_topic_answers_its_waiting_fetches() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("short-lived", 1)).await.unwrap();
    let connection = broker.connect().await;
    let waiting = tokio::spawn({
        let connection = connection.clone();
        async move { fetch_raw(&connection, Fetch::at("short-lived", 0, 0).waiting(30_000)).await }
    });
    assert!(metadata_raw(&connection).await.is_ok(), "the fetch is waiting");
    let started = Instant::now();
    admin.delete_topic("short-lived").await.unwrap();
    let answer = waiting.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "answered at the deletion, not after max_wait");
    assert!(
        matches!(answer, Err(ClientError::Broker { code: client::ErrorCode::UnknownTopicOrPartition, .. })),
        "{answer:?}"
    );
    broker.stop().await;
}

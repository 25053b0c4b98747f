//! A broker under bad input: garbage bytes, messages past the size limit,
//! corrupt and oversize batches, unknown topics, partitions and offsets, too
//! many calls or connections, and invalid admin requests. Each is refused with
//! its exact error code (or, below the RPC layer, by closing only the offending
//! connection), changes nothing, and a healthy client connected before it still
//! produces and consumes afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::IntoFuture;
use std::time::Duration;

use client::{Admin, ClientError, Consumer, ErrorCode, NewTopic, Offset, Producer, ProducerRecord};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{
    batch_of, code_of, consume, fetch_raw, list_offset_raw, metadata_raw, produce_raw, wait_until, Fetch, Query,
    TestBroker,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MIB: usize = 1024 * 1024;

/// A producer and a consumer connected before the attacks, checked after each.
struct Healthy {
    producer: Producer,
    consumer: Consumer,
    sent: usize,
}

impl Healthy {
    async fn connect(broker: &TestBroker) -> Healthy {
        Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("healthy", 1)).await.unwrap();
        let consumer = Consumer::new(broker.consumer_config()).unwrap();
        consumer.assign(&[("healthy".to_owned(), 0)]).await.unwrap();
        consumer.seek("healthy", 0, Offset::Beginning).unwrap();
        let mut healthy = Healthy { producer: Producer::new(broker.producer_config()).unwrap(), consumer, sent: 0 };
        healthy.check("connected").await;
        healthy
    }

    /// Produces one record and consumes it back, on the connections made before.
    async fn check(&mut self, after: &str) {
        let value = format!("healthy after {after}");
        let record = ProducerRecord::new("healthy", value.as_str());
        let delivered = self.producer.send(record).await.unwrap().await.unwrap();
        assert_eq!(delivered.offset, self.sent as i64, "after {after}");
        let received = consume(&self.consumer, 1).await;
        assert_eq!(received.len(), 1, "after {after}");
        assert_eq!((received[0].offset, received[0].value.as_deref()), (self.sent as i64, Some(value.as_bytes())));
        self.sent += 1;
    }
}

/// Reads until the broker closes `stream` (EOF or reset); fails after 5 s.
async fn assert_closed_by_broker(mut stream: TcpStream, what: &str) {
    let mut buffer = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Err(_) => panic!("the broker kept the connection open after {what}"),
            Ok(Ok(0) | Err(_)) => return,
            Ok(Ok(_)) => continue,
        }
    }
}

/// Opens a raw TCP connection, writes `bytes` and expects the broker to close it.
async fn attack(broker: &TestBroker, bytes: &[u8], what: &str) {
    let mut stream = TcpStream::connect(&broker.address).await.unwrap();
    // The broker may close before everything is written: a failed write is fine.
    let _ = stream.write_all(bytes).await;
    assert_closed_by_broker(stream, what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_bytes_close_only_their_own_connection() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let mut healthy = Healthy::connect(&broker).await;

    let seed = 42;
    let mut random = StdRng::seed_from_u64(seed);
    for round in 0..3 {
        let mut garbage = vec![0u8; 4096];
        random.fill(&mut garbage[..]);
        attack(&broker, &garbage, &format!("random bytes (seed {seed}, round {round})")).await;
        healthy.check(&format!("random bytes round {round}")).await;
    }
    // One segment claiming 2^28 words (2 GiB), far past request_bytes_max.
    let mut huge = vec![0, 0, 0, 0];
    huge.extend((1u32 << 28).to_le_bytes());
    attack(&broker, &huge, "a segment table claiming 2 GiB").await;
    healthy.check("a huge segment table").await;
    // 600 segments: more than Cap'n Proto's reader accepts.
    let mut many = 599u32.to_le_bytes().to_vec();
    many.extend(std::iter::repeat_n(1u8, 600 * 4));
    attack(&broker, &many, "a segment table with 600 segments").await;
    healthy.check("too many segments").await;
    // A well-framed message whose content is not an RPC message.
    let mut framed = vec![0, 0, 0, 0, 8, 0, 0, 0];
    framed.extend([0xff; 64]);
    attack(&broker, &framed, "a framed message of 0xff words").await;
    healthy.check("a framed garbage message").await;
    // A message cut short by a hang-up.
    let mut torn = TcpStream::connect(&broker.address).await.unwrap();
    let mut half = vec![0, 0, 0, 0, 100, 0, 0, 0];
    half.extend([0u8; 80]);
    torn.write_all(&half).await.unwrap();
    drop(torn);
    healthy.check("a message cut short").await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_past_request_bytes_max_closes_only_its_own_connection() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(temp.path(), |config| {
        config.log.batch_bytes_max = MIB as u32;
        config.limits.request_bytes_max = MIB + 64 * 1024;
    })
    .await;
    let mut healthy = Healthy::connect(&broker).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("big", 1)).await.unwrap();

    // A batch just under max.message.bytes fits in a request.
    let attacker = broker.connect().await;
    let fits = batch_of(1_000, &[&vec![7u8; MIB - 1024]]);
    assert_eq!(produce_raw(&attacker, "big", 0, fits).await.unwrap().base_offset, 0);

    let too_big = batch_of(1_000, &[&vec![7u8; MIB + 128 * 1024]]);
    // The broker aborts the connection, naming the limit (or the socket closes first).
    match produce_raw(&attacker, "big", 0, too_big).await {
        Err(ClientError::Protocol(message)) if message.contains("more than request_bytes_max (1114112)") => {}
        Err(ClientError::Disconnected { .. }) => {}
        other => panic!("expected the connection to be aborted, got {other:?}"),
    }
    wait_until("the client sees its connection broken", || async { attacker.is_broken() }).await;
    healthy.check("a message past request_bytes_max").await;
    let other = broker.connect().await;
    let fetched = fetch_raw(&other, Fetch::at("big", 0, 0)).await.unwrap();
    assert_eq!(fetched.high_watermark, 1, "the oversize request appended nothing");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_batches_are_refused_and_append_nothing() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let mut healthy = Healthy::connect(&broker).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("strict", 1)).await.unwrap();
    let connection = broker.connect().await;
    let good = batch_of(1_000, &[b"one", b"two"]);

    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 0x01;
    let truncated = good[..good.len() - 3].to_vec();
    let mut trailing = good.clone();
    trailing.extend(&good[..20]);
    let mut bad_magic = good.clone();
    bad_magic[16] = 1;
    let mut gzip = good.clone();
    gzip[22] |= 1; // attributes codec bits: gzip
                   // CRC-valid batches whose records a consumer could not read (found by an
                   // attacker's client): plain records labelled lz4, offset deltas out of order.
    let mut plain_as_lz4 = good.clone();
    plain_as_lz4[22] |= 3;
    abi::batch::reseal(&mut plain_as_lz4);
    let shuffled_deltas = with_offset_deltas(&batch_of(1_000, &[b"a", b"b", b"c"]), &[0, -5, 2]);
    let cases = [
        ("a flipped byte (CRC mismatch)", flipped, ErrorCode::CorruptMessage),
        ("a truncated batch", truncated, ErrorCode::CorruptMessage),
        ("a good batch followed by a torn one", trailing, ErrorCode::CorruptMessage),
        ("magic 1", bad_magic, ErrorCode::CorruptMessage),
        ("no batch at all", Vec::new(), ErrorCode::CorruptMessage),
        ("gzip records", gzip, ErrorCode::UnsupportedCompression),
        ("plain records labelled lz4", plain_as_lz4, ErrorCode::CorruptMessage),
        ("offset deltas 0, -5, 2", shuffled_deltas, ErrorCode::CorruptMessage),
    ];
    for (what, batches, expected) in cases {
        assert_eq!(code_of(produce_raw(&connection, "strict", 0, batches).await), expected, "{what}");
    }
    assert_eq!(list_offset_raw(&connection, "strict", 0, Query::Latest).await.unwrap(), 0, "nothing appended");
    assert_eq!(produce_raw(&connection, "strict", 0, good).await.unwrap().base_offset, 0);
    healthy.check("corrupt batches").await;
    broker.stop().await;
}

/// `batch` with its records' offset deltas replaced (CRC valid).
fn with_offset_deltas(batch: &[u8], deltas: &[i32]) -> Vec<u8> {
    let mut model = abi::batch::RecordBatch::decode(batch).unwrap();
    for (record, delta) in model.records.iter_mut().zip(deltas) {
        record.offset_delta = *delta;
    }
    model.encode().unwrap()
}

/// The next error `consumer` polls (no record may come first); fails after a minute.
async fn next_error(consumer: &Consumer) -> ClientError {
    let polled = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match consumer.poll(Duration::from_secs(10)).await {
                Ok(records) => assert!(records.is_empty(), "records after the bad batch: {records:?}"),
                Err(error) => break error,
            }
        }
    });
    polled.await.expect("the error of the bad batch comes (again once seen, since it was not skipped)")
}

/// A batch that passes every check recovery makes but that no consumer can
/// decode, as a producer could store before the broker validated records (or a
/// disk could hand back): consumers get every record before it, then a typed error
/// naming it, and go on after a seek past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_bad_batch_stops_consumers_at_it_and_a_seek_skips_it() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("poisoned", 1)).await.unwrap();
    let connection = broker.connect().await;
    produce_raw(&connection, "poisoned", 0, batch_of(1_000, &[b"r0", b"r1"])).await.unwrap();
    broker.stop().await;

    // Offsets 2..=4: plain records labelled lz4, appended behind the broker's back.
    let partition_dir = temp.path().join("poisoned-0");
    let segment = std::fs::read_dir(&partition_dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|extension| extension == "log"))
        .unwrap();
    let mut bad = batch_of(1_000, &[b"x2", b"x3", b"x4"]);
    abi::batch::set_base_offset(&mut bad, 2);
    bad[abi::batch::field::ATTRIBUTES + 1] |= 3;
    abi::batch::reseal(&mut bad);
    let mut file = std::fs::OpenOptions::new().append(true).open(&segment).unwrap();
    std::io::Write::write_all(&mut file, &bad).unwrap();
    file.sync_all().unwrap();
    std::fs::remove_file(partition_dir.join("clean-shutdown")).unwrap();

    let broker = TestBroker::start(temp.path()).await;
    let connection = broker.connect().await;
    let after = produce_raw(&connection, "poisoned", 0, batch_of(1_000, &[b"r5"])).await.unwrap();
    assert_eq!(after.base_offset, 5, "recovery kept the bad batch (its header and CRC are valid)");

    // Short long polls: the fetch task is asleep (nothing to fetch while the error
    // waits) by the time the application takes the error, which must wake it.
    let config = client::ConsumerConfig { fetch_max_wait: Duration::from_millis(1), ..broker.consumer_config() };
    let consumer = Consumer::new(config).unwrap();
    consumer.assign(&[("poisoned".to_owned(), 0)]).await.unwrap();
    consumer.seek("poisoned", 0, Offset::Beginning).unwrap();
    let before = consume(&consumer, 2).await;
    let values: Vec<&[u8]> = before.iter().map(|record| record.value.as_deref().unwrap()).collect();
    assert_eq!(values, [b"r0", b"r1"]);
    let error = next_error(&consumer).await;
    let ClientError::CorruptBatch { ref topic, partition, offset, skip_to, .. } = error else {
        panic!("expected CorruptBatch, got {error:?}");
    };
    assert_eq!((topic.as_str(), partition, offset, skip_to), ("poisoned", 0, 2, 5), "{error}");
    assert_eq!(error.code(), ErrorCode::CorruptMessage);
    assert_eq!(consumer.position("poisoned", 0), Some(2), "the position stays at the bad batch");
    // Not skipped silently: the next poll fails the same way.
    let again = next_error(&consumer).await;
    assert_eq!(again, error);
    consumer.seek("poisoned", 0, Offset::At(skip_to)).unwrap();
    let rest = consume(&consumer, 1).await;
    assert_eq!((rest[0].offset, rest[0].value.as_deref()), (5, Some(&b"r5"[..])));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_over_max_message_bytes_is_refused_as_too_large() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let mut healthy = Healthy::connect(&broker).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("small", 1).config("max.message.bytes", "2048")).await.unwrap();
    let connection = broker.connect().await;

    let oversize = batch_of(1_000, &[&[1u8; 4096]]);
    assert_eq!(code_of(produce_raw(&connection, "small", 0, oversize).await), ErrorCode::MessageTooLarge);
    let fits = batch_of(1_000, &[&[1u8; 1024]]);
    assert_eq!(produce_raw(&connection, "small", 0, fits).await.unwrap().base_offset, 0);

    // Through the producer: the delivery fails, and the next record (its
    // sequence rolled back) is accepted.
    let producer = Producer::new(broker.producer_config()).unwrap();
    let refused = producer.send(ProducerRecord::new("small", vec![2u8; 4096])).await.unwrap().await;
    assert_eq!(code_of(refused), ErrorCode::MessageTooLarge);
    let accepted = producer.send(ProducerRecord::new("small", "small")).await.unwrap().await.unwrap();
    assert_eq!(accepted.offset, 1);
    healthy.check("an oversize batch").await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_topics_partitions_and_offsets_are_refused() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let mut healthy = Healthy::connect(&broker).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("two", 2)).await.unwrap();
    let connection = broker.connect().await;
    produce_raw(&connection, "two", 1, batch_of(1_000, &[b"a", b"b"])).await.unwrap();

    for (topic, partition) in [("missing", 0), ("two", 2), ("two", -2), ("two", i32::MAX)] {
        let what = format!("{topic}-{partition}");
        let produced = produce_raw(&connection, topic, partition, batch_of(1_000, &[b"x"])).await;
        assert_eq!(code_of(produced), ErrorCode::UnknownTopicOrPartition, "produce to {what}");
        let fetched = fetch_raw(&connection, Fetch::at(topic, partition, 0)).await;
        assert_eq!(code_of(fetched), ErrorCode::UnknownTopicOrPartition, "fetch from {what}");
        let listed = list_offset_raw(&connection, topic, partition, Query::Earliest).await;
        assert_eq!(code_of(listed), ErrorCode::UnknownTopicOrPartition, "list offset of {what}");
    }
    for offset in [-1, i64::MIN, 3, i64::MAX] {
        let fetched = fetch_raw(&connection, Fetch::at("two", 1, offset)).await;
        assert_eq!(code_of(fetched), ErrorCode::OffsetOutOfRange, "fetch at {offset}");
    }
    let at_end = fetch_raw(&connection, Fetch::at("two", 1, 2)).await.unwrap();
    assert_eq!((at_end.batches.len(), at_end.high_watermark), (0, 2), "the log end itself is in range");
    healthy.check("unknown topics and offsets").await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_in_flight_calls_max_are_refused_as_overloaded() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(temp.path(), |config| config.limits.in_flight_calls_max = 4).await;
    let mut healthy = Healthy::connect(&broker).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("busy", 1)).await.unwrap();
    let connection = broker.connect().await;

    let (outcomes, mut answered) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..6 {
        let (connection, outcomes) = (connection.clone(), outcomes.clone());
        tokio::spawn(async move {
            let _ = outcomes.send(fetch_raw(&connection, Fetch::at("busy", 0, 0).waiting(20_000)).await);
        });
    }
    // The two over the limit are refused at once; the four others wait for data.
    for _ in 0..2 {
        let refused = tokio::time::timeout(Duration::from_secs(5), answered.recv()).await.expect("refused at once");
        assert_eq!(code_of(refused.unwrap()), ErrorCode::ResourceExhausted);
    }
    let other = broker.connect().await;
    produce_raw(&other, "busy", 0, batch_of(1_000, &[b"for everyone"])).await.unwrap();
    for _ in 0..4 {
        let served = tokio::time::timeout(Duration::from_secs(10), answered.recv()).await.expect("woken").unwrap();
        assert_eq!(served.unwrap().values(), [(0, b"for everyone".to_vec())]);
    }
    // The slots are free again.
    assert_eq!(fetch_raw(&connection, Fetch::at("busy", 0, 0)).await.unwrap().high_watermark, 1);
    healthy.check("too many calls in flight").await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_connections_max_are_closed() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(temp.path(), |config| config.limits.connections_max = 2).await;
    let first = broker.connect().await;
    let second = broker.connect().await;
    assert_eq!(metadata_raw(&first).await.unwrap(), Vec::<String>::new());
    assert_eq!(metadata_raw(&second).await.unwrap(), Vec::<String>::new());

    let extra = TcpStream::connect(&broker.address).await.unwrap();
    assert_closed_by_broker(extra, "a connection past connections_max").await;
    let extra = broker.connect().await;
    assert!(matches!(metadata_raw(&extra).await, Err(ClientError::Disconnected { .. })));

    let unknown = produce_raw(&first, "none", 0, batch_of(1_000, &[b"x"])).await;
    assert_eq!(code_of(unknown), ErrorCode::UnknownTopicOrPartition, "the first connection still answers");
    assert!(metadata_raw(&second).await.is_ok(), "the second connection still answers");

    // A closed connection gives its slot back.
    drop(second);
    wait_until("a new connection is served after one closed", || async {
        metadata_raw(&broker.connect().await).await.is_ok()
    })
    .await;
    assert!(metadata_raw(&first).await.is_ok());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_admin_requests_are_refused_with_exact_codes_and_change_nothing() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let mut healthy = Healthy::connect(&broker).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("orders", 2).config("retention.ms", "3600000")).await.unwrap();

    let cases = [
        (NewTopic::new("", 1), ErrorCode::InvalidTopic),
        (NewTopic::new("bad/name", 1), ErrorCode::InvalidTopic),
        (NewTopic::new("..", 1), ErrorCode::InvalidTopic),
        (NewTopic::new("x".repeat(250), 1), ErrorCode::InvalidTopic),
        (NewTopic::new("__reserved", 1), ErrorCode::InvalidTopic),
        (NewTopic::new("fresh", 0), ErrorCode::InvalidPartitions),
        (NewTopic::new("fresh", -3), ErrorCode::InvalidPartitions),
        (NewTopic::new("fresh", 1001), ErrorCode::InvalidPartitions),
        (NewTopic { replication_factor: 3, ..NewTopic::new("fresh", 1) }, ErrorCode::InvalidReplicationFactor),
        (NewTopic::new("orders", 2), ErrorCode::TopicAlreadyExists),
        (NewTopic::new("orders", 5).config("retention.ms", "1"), ErrorCode::TopicAlreadyExists),
    ];
    for (topic, expected) in cases {
        let what = format!("{topic:?}");
        assert_eq!(code_of(admin.create_topic(topic).await), expected, "{what}");
    }

    let bad_configs = NewTopic::new("fresh", 1)
        .config("retention.ms", "soon")
        .config("no.such.config", "1")
        .config("segment.bytes", "10")
        .config("cleanup.policy", "compact");
    match admin.create_topic(bad_configs).await {
        Err(ClientError::Broker { code: ErrorCode::InvalidConfig, message }) => {
            for problem in ["retention.ms", "no.such.config", "segment.bytes", "cleanup.policy=compact"] {
                assert!(message.contains(problem), "{problem} missing from {message:?}");
            }
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert_eq!(admin.list_topics().await.unwrap(), ["healthy", "orders"]);
    let mut directories: Vec<String> = std::fs::read_dir(temp.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    directories.retain(|name| !name.starts_with("healthy-") && !name.starts_with("orders-"));
    assert!(directories.iter().all(|name| !name.contains("fresh") && !name.contains("reserved")), "{directories:?}");

    let before = admin.describe_topic("orders").await.unwrap();
    assert_eq!(before.partitions.len(), 2);
    let changes = vec![("retention.ms".to_owned(), "1000".to_owned()), ("segment.bytes".to_owned(), "x".to_owned())];
    match admin.alter_topic_config("orders", changes).await {
        Err(ClientError::Broker { code: ErrorCode::InvalidConfig, message }) => {
            assert!(message.contains("segment.bytes"), "{message}")
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert_eq!(admin.describe_topic("orders").await.unwrap(), before, "a refused change changes nothing");
    let unknown = admin.alter_topic_config("missing", vec![("retention.ms".to_owned(), "1000".to_owned())]).await;
    assert_eq!(code_of(unknown), ErrorCode::UnknownTopicOrPartition);
    assert_eq!(code_of(admin.delete_topic("missing").await), ErrorCode::UnknownTopicOrPartition);
    healthy.check("invalid admin requests").await;
    broker.stop().await;
}

/// A topic whose `max.message.bytes` is below the producer's `batch.size`: the
/// broker refuses the producer's batches as too large, and the producer splits
/// them (down to single records) and sends the halves in order, as Kafka's does.
/// Only a record too large on its own fails, and only that record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_refused_as_too_large_are_split_and_only_an_oversize_record_fails() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("narrow", 1).config("max.message.bytes", "1500")).await.unwrap();
    for (idempotence, compression) in [(true, client::Compression::None), (false, client::Compression::Lz4)] {
        let mut config = broker.producer_config();
        config.idempotence = idempotence;
        config.compression = compression;
        config.linger = Duration::from_secs(3600); // everything in one batch until flush
        let producer = Producer::new(config).unwrap();
        let start = list_offset_raw(&broker.connect().await, "narrow", 0, Query::Latest).await.unwrap();
        let mut deliveries = Vec::new();
        // Random bytes: compression cannot bring a batch under the limit.
        let mut rng = StdRng::seed_from_u64(7);
        for index in 0..60 {
            let value: Vec<u8> = (0..100).map(|_| rng.gen()).collect();
            deliveries.push(producer.send(ProducerRecord::new("narrow", value.as_slice())).await.unwrap());
            if index == 30 {
                let oversize: Vec<u8> = (0..4000).map(|_| rng.gen()).collect();
                deliveries.push(producer.send(ProducerRecord::new("narrow", oversize.as_slice())).await.unwrap());
            }
        }
        tokio::time::timeout(Duration::from_secs(120), producer.flush()).await.expect("flush ends");
        let mut offsets = Vec::new();
        for (position, delivery) in deliveries.into_iter().enumerate() {
            let delivered = tokio::time::timeout(Duration::from_secs(120), delivery.into_future()).await;
            match (position, delivered.expect("every delivery ends")) {
                (31, Err(error)) => assert_eq!(error.code(), ErrorCode::MessageTooLarge, "{error}"),
                (31, Ok(metadata)) => panic!("the oversize record was stored at {}", metadata.offset),
                (_, Ok(metadata)) => offsets.push(metadata.offset),
                (_, Err(error)) => panic!("record {position} failed: {error}"),
            }
        }
        let expected: Vec<i64> = (start..start + 60).collect();
        assert_eq!(offsets, expected, "in call order, one offset each (idempotence {idempotence})");
        let consumer = Consumer::new(broker.consumer_config()).unwrap();
        consumer.assign(&[("narrow".to_owned(), 0)]).await.unwrap();
        consumer.seek("narrow", 0, Offset::At(start)).unwrap();
        let read = consume(&consumer, 60).await;
        assert_eq!(read.iter().map(|record| record.offset).collect::<Vec<_>>(), expected);
        // The producer goes on normally afterwards.
        let next = producer.send(ProducerRecord::new("narrow", "after")).await.unwrap();
        producer.flush().await; // linger is an hour
        assert_eq!(next.await.unwrap().offset, start + 60);
    }
    broker.stop().await;
}

/// The broker counts answers until they are written (so a peer that never reads
/// cannot pile them up); the count must never drift on a busy connection, or
/// reading would stop for good. 100,000 small calls on one connection, 50 at a
/// time, all answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_answers_100k_small_calls_without_stalling() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("busy", 1)).await.unwrap();
    let connection = broker.connect().await;
    for _ in 0..2_000 {
        let calls = (0..50).map(|_| list_offset_raw(&connection, "busy", 0, Query::Latest));
        let answered = tokio::time::timeout(Duration::from_secs(60), futures::future::join_all(calls)).await;
        assert!(answered.expect("answered").into_iter().all(|offset| offset.unwrap() == 0));
    }
    broker.stop().await;
}

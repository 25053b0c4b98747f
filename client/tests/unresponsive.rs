//! Brokers that accept connections and never answer (a wedged process, a
//! half-open link) hold no client call past `request.timeout.ms`: metadata,
//! coordinator and producer-id calls pass over such a broker to one that
//! answers, and with no other broker they fail with a typed timeout instead of
//! hanging.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::TcpListener;
use std::time::Duration;

use client::{
    Admin, ClientError, Cluster, CommonConfig, Consumer, ConsumerConfig, ErrorCode, NewTopic, OffsetReset, Producer,
    ProducerConfig, ProducerRecord,
};
use support::{consume, TestBroker};

/// A listener that accepts connections, reads whatever arrives and never
/// answers. Returns its address.
fn silent_broker() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut stream, &mut std::io::sink());
            });
        }
    });
    address
}

/// Bounds a call that must end by itself: only a hang reaches this.
async fn ends<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(300), call).await.unwrap_or_else(|_| panic!("{what} hung"))
}

/// A short request timeout (the silent broker costs each first call that
/// long), long enough for a real broker on a busy machine.
fn quick(bootstrap_servers: String) -> CommonConfig {
    CommonConfig { bootstrap_servers, request_timeout: Duration::from_secs(3), ..CommonConfig::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_never_answers_is_passed_over_for_one_that_does() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    Admin::new(broker.common()).unwrap().create_topic(NewTopic::new("steady", 2)).await.unwrap();
    // The silent broker comes first in the bootstrap list: a client's first
    // call that any broker can answer goes to it (later ones try the brokers
    // the metadata names first).
    let silent = silent_broker();
    let common = quick(format!("{silent},{}", broker.address));

    // Each kind of such call, first thing on a fresh cluster view.
    let fresh = || Cluster::new(&common.bootstrap_servers, common.connect_timeout, common.request_timeout).unwrap();
    let topics = ends("metadata", fresh().refresh(&[])).await.expect("metadata past the silent broker");
    assert!(topics.iter().any(|topic| topic.name == "steady"));
    let coordinator = ends("find coordinator", fresh().coordinator("steady-readers")).await.unwrap();
    assert_eq!(coordinator.address(), broker.address);

    let producer = Producer::new(ProducerConfig { common: common.clone(), ..ProducerConfig::default() }).unwrap();
    let mut deliveries = Vec::new();
    for index in 0..20 {
        let record = ProducerRecord::new("steady", format!("record {index}")).key(format!("key {index}"));
        deliveries.push(ends("send", producer.send(record)).await.expect("send passes over the silent broker"));
    }
    for delivery in deliveries {
        ends("delivery", delivery.wait()).await.expect("delivered");
    }
    ends("close", producer.close()).await;

    let consumer = Consumer::new(ConsumerConfig {
        common,
        group_id: Some("steady-readers".to_owned()),
        auto_offset_reset: OffsetReset::Earliest,
        ..ConsumerConfig::default()
    })
    .unwrap();
    ends("subscribe", consumer.subscribe(&["steady".to_owned()], None)).await.unwrap();
    let records = consume(&consumer, 20).await;
    assert_eq!(records.len(), 20);
    ends("commit", consumer.commit()).await.expect("the coordinator is found past the silent broker");
    consumer.close().await;
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_only_a_silent_broker_calls_fail_with_a_timeout_instead_of_hanging() {
    let common = quick(silent_broker());
    let is_timeout = |error: &ClientError| error.code() == ErrorCode::RequestTimedOut && error.is_retriable();

    let admin = Admin::new(common.clone()).unwrap();
    let error = ends("list topics", admin.list_topics()).await.unwrap_err();
    assert!(is_timeout(&error), "{error}");

    let producer = Producer::new(ProducerConfig {
        common: common.clone(),
        delivery_timeout: Duration::from_secs(2),
        ..ProducerConfig::default()
    })
    .unwrap();
    let error = ends("send", producer.send(ProducerRecord::new("anything", "value"))).await.unwrap_err();
    assert!(is_timeout(&error), "{error}");
    ends("close", producer.close()).await;

    let consumer =
        Consumer::new(ConsumerConfig { common, group_id: Some("nobody".to_owned()), ..ConsumerConfig::default() })
            .unwrap();
    let error = ends("subscribe", consumer.subscribe(&["anything".to_owned()], None)).await.unwrap_err();
    assert!(is_timeout(&error), "{error}");
    consumer.close().await;
}

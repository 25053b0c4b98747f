//! The conformance suite every SDK runs (`conformance/`): its data vectors
//! are written from the Rust client core here (`WEIR_BLESS=1` rewrites
//! `conformance/vectors.json`; otherwise the file must be what this writes),
//! and the Rust client runs its scenarios against a real broker, as the
//! Python (`sdk-python/tests/test_conformance.py`) and Node
//! (`sdk-node/test/conformance.test.js`) suites do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use client::{Admin, Attach, ErrorCode, NewTopic, Offset, Producer, ProducerRecord};
use serde_json::{json, Value};
use support::TestBroker;

fn vectors_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance/vectors.json")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|at| u8::from_str_radix(&text[at..at + 2], 16).unwrap()).collect()
}

/// Keys of every kind: ASCII, UTF-8, binary, empty, long.
fn keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> =
        ["a", "b", "orders-42", "user-1", "user-2", "käse", "日本", "", "0", "key with spaces"]
            .iter()
            .map(|key| key.as_bytes().to_vec())
            .collect();
    keys.push(vec![0, 1, 2, 255]);
    keys.push(vec![0xff; 17]);
    keys.push((0..=255u8).collect());
    keys.push(b"a-much-longer-key-that-crosses-several-four-byte-blocks-of-murmur2".to_vec());
    keys
}

const ROUND_TRIP_PARTITIONS: u32 = 4;

/// murmur2 hashes Kafka's Java client computes (published in Kafka's and
/// other clients' compatibility tests), as literals: the partitions they give
/// are computed from these, not from the client core, so a wrong hash in any
/// client is caught.
const KAFKA_HASHES: [(&str, i32); 6] = [
    ("1", -1993445489),
    ("12", 126087238),
    ("123", -267702483),
    ("1234", -1614185708),
    ("12345", -1188365604),
    ("21", -973932308),
];
const REGIONS: [(&str, &str); 2] = [("region.eu", "3"), ("region.us", "1")];

/// The vectors, computed from the client core.
fn vectors() -> Value {
    let murmur2: Vec<Value> = keys()
        .iter()
        .flat_map(|key| {
            [1u32, 3, 16, 100].map(|partitions| {
                let partition = client::partitioner::partition_for_key(key, partitions);
                json!({"key": hex(key), "partitions": partitions, "partition": partition})
            })
        })
        .collect();
    let errors: Vec<Value> = ErrorCode::ALL
        .iter()
        .map(|code| json!({"code": code.as_u16(), "name": code.name(), "retriable": code.is_retriable()}))
        .collect();
    let keyed = |key: &[u8]| client::partitioner::partition_for_key(key, ROUND_TRIP_PARTITIONS);
    let records = vec![
        json!({"key": hex(b"k1"), "value": hex(b"hello"), "headers": [["source", hex(b"test")]], "partition": null,
               "expected_partition": keyed(b"k1")}),
        json!({"key": null, "value": hex(&[0, 1, 2, 255]), "headers": [], "partition": 2, "expected_partition": 2}),
        json!({"key": hex(b"k3"), "value": null, "headers": [["empty", null], ["blank", ""]], "partition": null,
               "expected_partition": keyed(b"k3")}),
        json!({"key": hex("käse".as_bytes()), "value": "", "headers": [["dup", hex(b"1")], ["dup", hex(b"2")]],
               "partition": null, "expected_partition": keyed("käse".as_bytes())}),
        json!({"key": hex(&[0, 255]), "value": hex(&[7; 300]), "headers": [], "partition": 1, "expected_partition": 1}),
    ];
    let placements: Vec<Value> = ["eu:1", "us:7", "eu:2", "sa:9", "ap:3"]
        .iter()
        .map(|key| {
            let region = key.split(':').next().unwrap();
            let chosen = REGIONS.iter().find(|(name, _)| *name == format!("region.{region}"));
            let partition = match chosen {
                Some((_, partition)) => partition.parse::<u32>().unwrap(),
                None => client::partitioner::partition_for_key(key.as_bytes(), ROUND_TRIP_PARTITIONS),
            };
            json!({"key": key, "partition": partition})
        })
        .collect();
    let kafka: Vec<Value> = KAFKA_HASHES
        .iter()
        .flat_map(|(key, hash)| {
            [1u32, 3, 16, 100].map(|partitions| {
                let partition = (*hash as u32 & 0x7fff_ffff) % partitions;
                json!({"key": hex(key.as_bytes()), "partitions": partitions, "partition": partition})
            })
        })
        .collect();
    json!({
        "about": "Written by client/tests/conformance.rs from the Rust client core (WEIR_BLESS=1 rewrites it). \
                  Keys, values and header values are hex (null: none). Every SDK's conformance test reads it.",
        "murmur2": murmur2,
        "kafka_murmur2": kafka,
        "errors": errors,
        "round_trip": {"topic": "conformance", "partitions": ROUND_TRIP_PARTITIONS, "records": records},
        "partitioner": {
            "plugin": "region_partitioner",
            "topic": "regional",
            "partitions": ROUND_TRIP_PARTITIONS,
            "config": REGIONS.iter().map(|(key, value)| (key.to_string(), json!(value))).collect::<BTreeMap<_, _>>(),
            "placements": placements,
        },
    })
}

#[test]
fn the_vectors_file_is_what_the_client_core_computes() {
    let text = serde_json::to_string_pretty(&vectors()).unwrap() + "\n";
    if std::env::var_os("WEIR_BLESS").is_some() {
        std::fs::write(vectors_path(), &text).unwrap();
    }
    let committed = std::fs::read_to_string(vectors_path()).unwrap_or_default();
    assert!(
        committed == text,
        "conformance/vectors.json is stale: run WEIR_BLESS=1 cargo test -p client --test conformance"
    );
}

/// The partitions Kafka's own hashes give, from the literals: the one check
/// of the core's murmur2 that does not lean on the core.
#[test]
fn the_client_core_places_keys_where_kafkas_hashes_say() {
    for (key, hash) in KAFKA_HASHES {
        for partitions in [1u32, 3, 16, 100] {
            let expected = (hash as u32 & 0x7fff_ffff) % partitions;
            assert_eq!(client::partitioner::partition_for_key(key.as_bytes(), partitions), expected, "{key}");
        }
    }
}

fn optional_hex(value: &Value) -> Option<Vec<u8>> {
    value.as_str().map(unhex)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_client_passes_the_scenarios() {
    let vectors: Value = serde_json::from_str(&std::fs::read_to_string(vectors_path()).unwrap()).unwrap();
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(temp.path(), |config| config.plugins.call_deadline_ms = 2000).await;
    let admin = Admin::new(broker.common()).unwrap();

    // Round trip: every record back with its key, value, headers and partition.
    let trip = &vectors["round_trip"];
    let topic = trip["topic"].as_str().unwrap();
    admin.create_topic(NewTopic::new(topic, trip["partitions"].as_i64().unwrap() as i32)).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    let records = trip["records"].as_array().unwrap();
    for (index, record) in records.iter().enumerate() {
        let mut outgoing = ProducerRecord::new(topic, Vec::new());
        outgoing.value = optional_hex(&record["value"]);
        outgoing.key = optional_hex(&record["key"]);
        outgoing.partition = record["partition"].as_i64().map(|partition| partition as i32);
        for header in record["headers"].as_array().unwrap() {
            outgoing = outgoing.header(header[0].as_str().unwrap(), optional_hex(&header[1]));
        }
        let landed = producer.send(outgoing).await.unwrap().await.unwrap();
        assert_eq!(landed.partition as i64, record["expected_partition"].as_i64().unwrap(), "record {index}");
    }
    let consumer = client::Consumer::new(broker.consumer_config()).unwrap();
    let partitions: Vec<(String, i32)> =
        (0..trip["partitions"].as_i64().unwrap() as i32).map(|partition| (topic.to_owned(), partition)).collect();
    consumer.assign(&partitions).await.unwrap();
    consumer.seek_all(Offset::Beginning).unwrap();
    let mut read = support::consume(&consumer, records.len()).await;
    read.sort_by_key(|record| (record.partition, record.offset));
    let mut expected: Vec<&Value> = records.iter().collect();
    expected.sort_by_key(|record| record["expected_partition"].as_i64().unwrap());
    for (got, want) in read.iter().zip(&expected) {
        assert_eq!(got.partition as i64, want["expected_partition"].as_i64().unwrap());
        assert_eq!(got.key.as_deref().map(<[u8]>::to_vec), optional_hex(&want["key"]));
        assert_eq!(got.value.as_deref().map(<[u8]>::to_vec), optional_hex(&want["value"]));
        let headers: Vec<(String, Option<Vec<u8>>)> = want["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|header| (header[0].as_str().unwrap().to_owned(), optional_hex(&header[1])))
            .collect();
        let got_headers: Vec<(String, Option<Vec<u8>>)> =
            got.headers.iter().map(|(key, value)| (key.clone(), value.as_deref().map(<[u8]>::to_vec))).collect();
        assert_eq!(got_headers, headers);
    }
    assert_eq!(read.len(), records.len());

    // A partitioner plugin places records as it says, from this client too.
    let placed = &vectors["partitioner"];
    let plugin = placed["plugin"].as_str().unwrap();
    let regional = placed["topic"].as_str().unwrap();
    let wasm_dir = std::env::var_os("WEIR_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugins/wasm32-wasip2/release"));
    let wasm = std::fs::read(wasm_dir.join(format!("{plugin}.wasm"))).expect("build the plugins first");
    admin.upload_plugin(plugin, "partitioner", wasm).await.unwrap();
    admin.create_topic(NewTopic::new(regional, placed["partitions"].as_i64().unwrap() as i32)).await.unwrap();
    let config: Vec<(String, String)> = placed["config"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(key, value)| (key.clone(), value.as_str().unwrap().to_owned()))
        .collect();
    let attach = Attach {
        topic: regional.to_owned(),
        hook: "partitioner".to_owned(),
        plugin: plugin.to_owned(),
        config,
        failure_policy: String::new(),
    };
    admin.attach_plugin(attach).await.unwrap();
    let producer = Producer::new(broker.producer_config()).unwrap();
    for placement in placed["placements"].as_array().unwrap() {
        let key = placement["key"].as_str().unwrap();
        let record = ProducerRecord::new(regional, b"v".to_vec()).key(key.as_bytes().to_vec());
        let landed = producer.send(record).await.unwrap().await.unwrap();
        assert_eq!(landed.partition as i64, placement["partition"].as_i64().unwrap(), "{key}");
    }
    broker.stop().await;
}

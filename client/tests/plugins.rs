//! Plugins through the real broker and client: upload (and what is refused),
//! a produce interceptor rejecting bad records, a consume interceptor redacting
//! a field per group, hostile plugins under both failure policies while other
//! topics keep working, and everything surviving a restart. The plugins are
//! the real ones from `plugins/` (built by `./scripts/build-plugins.sh`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use client::{Admin, Attach, ConsumerConfig, ErrorCode, NewTopic, Offset, Producer, ProducerConfig, ProducerRecord};
use support::{code_of, TestBroker};

fn wasm(name: &str) -> Vec<u8> {
    let dir = match std::env::var_os("WEIR_PLUGIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/plugins/wasm32-wasip2/release"),
    };
    let path = dir.join(format!("{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|error| {
        panic!("{}: {error}; build the plugins first: ./scripts/build-plugins.sh", path.display())
    })
}

/// `name`'s component with the last byte of its first function body (an
/// `end`) made `unreachable`: it reads like a plugin, but does not compile.
fn uncompilable(name: &str) -> Vec<u8> {
    let mut bytes = wasm(name);
    let body_end = wasmparser::Parser::new(0)
        .parse_all(&bytes)
        .find_map(|payload| match payload.unwrap() {
            wasmparser::Payload::CodeSectionEntry(body) => Some(body.range().end),
            _ => None,
        })
        .unwrap();
    assert_eq!(bytes[body_end - 1], 0x0b, "a body ends with `end`");
    bytes[body_end - 1] = 0x00;
    bytes
}

/// A broker whose plugin calls may run long: a loaded test machine must not
/// turn a slow call into a failure (deadlines have their own test).
async fn relaxed_broker(data_dir: &std::path::Path) -> TestBroker {
    TestBroker::start_with(data_dir, |config| config.plugins.call_deadline_ms = 2000).await
}

fn attach(topic: &str, hook: &str, plugin: &str, config: &[(&str, &str)], policy: &str) -> Attach {
    Attach {
        topic: topic.to_owned(),
        hook: hook.to_owned(),
        plugin: plugin.to_owned(),
        config: config.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect(),
        failure_policy: policy.to_owned(),
    }
}

/// A producer that fails fast (no retries past a second).
fn fast_producer(broker: &TestBroker) -> Producer {
    let config = ProducerConfig { delivery_timeout: Duration::from_secs(2), ..broker.producer_config() };
    Producer::new(config).unwrap()
}

async fn send(producer: &Producer, topic: &str, value: &[u8]) -> Result<i64, client::ClientError> {
    let delivery = producer.send(ProducerRecord::new(topic, value.to_vec())).await?;
    Ok(delivery.await?.offset)
}

async fn values(broker: &TestBroker, topic: &str, group: Option<&str>, count: usize) -> Vec<String> {
    let config = ConsumerConfig { group_id: group.map(str::to_owned), ..broker.consumer_config() };
    let consumer = client::Consumer::new(config).unwrap();
    consumer.assign(&[(topic.to_owned(), 0)]).await.unwrap();
    consumer.seek(topic, 0, Offset::Beginning).unwrap();
    let records = support::consume(&consumer, count).await;
    records
        .iter()
        .map(|record| String::from_utf8_lossy(record.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_are_validated_and_listed() {
    let temp = tempfile::tempdir().unwrap();
    let broker = relaxed_broker(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    let uploaded = admin.upload_plugin("json", "produce-interceptor", wasm("json_validator")).await.unwrap();
    assert_eq!((uploaded.hook.as_str(), uploaded.digest.len()), ("produce-interceptor", 64));
    for (name, hook, bytes, code, says) in [
        ("bad", "", b"definitely not wasm".to_vec(), ErrorCode::InvalidPlugin, "not a WebAssembly binary"),
        ("bad", "", b"\0asm\x01\0\0\0".to_vec(), ErrorCode::InvalidPlugin, "not a component"),
        ("bad", "partitioner", wasm("json_validator"), ErrorCode::InvalidPlugin, "is a produce-interceptor"),
        ("bad", "sorter", wasm("json_validator"), ErrorCode::InvalidRequest, "is not partitioner"),
        ("no/slash", "", wasm("json_validator"), ErrorCode::InvalidRequest, "plugin name"),
    ] {
        match admin.upload_plugin(name, hook, bytes).await {
            Err(client::ClientError::Broker { code: got, message }) => {
                assert_eq!(got, code, "{message}");
                assert!(message.contains(says), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
    let listed = admin.list_plugins().await.unwrap();
    assert_eq!(listed.iter().map(|plugin| plugin.name.as_str()).collect::<Vec<_>>(), vec!["json"]);

    // Read as a plugin, stored and registered at once; the compile fails
    // afterwards, and says so wherever the plugin is used.
    let broken = admin.upload_plugin("broken", "", uncompilable("json_validator")).await.unwrap();
    assert!(["compiling", "failed"].contains(&broken.state.as_str()), "{broken:?}");
    let failed = admin.wait_plugin_compiled("broken", Duration::from_secs(600), |_| {}).await;
    assert!(
        matches!(&failed, Err(client::ClientError::Broker { code: ErrorCode::InvalidPlugin, message })
        if message.contains("did not compile")),
        "{failed:?}"
    );
    let described = admin.describe_plugin("broken").await.unwrap();
    assert_eq!(described.state, "failed");
    assert!(!described.state_reason.is_empty(), "{described:?}");
    let logs = admin.plugin_logs("broken").await.unwrap();
    assert!(logs.iter().any(|line| line.level == "error" && line.message.contains("did not compile")), "{logs:?}");
    // Uploading the same bytes again compiles them again (a compile may fail
    // for want of memory); these fail again, and say so again.
    let again = admin.upload_plugin("broken", "", uncompilable("json_validator")).await.unwrap();
    assert_eq!(again.digest, broken.digest);
    let failed = admin.wait_plugin_compiled("broken", Duration::from_secs(600), |_| {}).await;
    assert_eq!(code_of(failed), ErrorCode::InvalidPlugin);
    let logs = admin.plugin_logs("broken").await.unwrap();
    assert!(logs.iter().any(|line| line.message.contains("again (it did not compile")), "{logs:?}");
    admin.create_topic(NewTopic::new("events", 1)).await.unwrap();
    let attached = admin.attach_plugin(attach("events", "produce-interceptor", "broken", &[], "")).await;
    assert_eq!(code_of(attached), ErrorCode::InvalidPlugin);
    admin.delete_plugin("broken").await.unwrap();

    assert_eq!(code_of(admin.delete_plugin("missing").await), ErrorCode::PluginNotFound);
    admin.delete_plugin("json").await.unwrap();
    assert!(admin.list_plugins().await.unwrap().is_empty());
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_produce_interceptor_rejects_bad_records_and_survives_a_restart() {
    let temp = tempfile::tempdir().unwrap();
    let broker = relaxed_broker(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("orders", 1)).await.unwrap();
    admin.upload_plugin("json", "", wasm("json_validator")).await.unwrap();
    let refused =
        admin.attach_plugin(attach("orders", "produce-interceptor", "json", &[("require-object", "maybe")], "")).await;
    assert_eq!(code_of(refused), ErrorCode::InvalidConfig, "init refused the config");
    let wrong_hook = admin.attach_plugin(attach("orders", "consume-interceptor", "json", &[], "")).await;
    assert_eq!(code_of(wrong_hook), ErrorCode::InvalidPlugin);
    admin
        .attach_plugin(attach("orders", "produce-interceptor", "json", &[("require-object", "true")], ""))
        .await
        .unwrap();
    assert_eq!(code_of(admin.delete_plugin("json").await), ErrorCode::PluginInUse);

    let producer = fast_producer(&broker);
    assert_eq!(send(&producer, "orders", br#"{"id":1}"#).await.unwrap(), 0);
    match send(&producer, "orders", b"[not, an, object]").await {
        Err(client::ClientError::Broker { code: ErrorCode::InvalidRecord, message }) => {
            assert!(message.contains("record 0: not a JSON object") || message.contains("invalid JSON"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(send(&producer, "orders", br#"{"id":2}"#).await.unwrap(), 1, "nothing was appended for the rejection");
    let attachments = admin.list_attachments(Some("orders")).await.unwrap();
    assert_eq!((attachments.len(), attachments[0].status.as_str()), (1, "running"));
    // A batch the plugin accepts but whose CRC is wrong is still refused.
    let mut corrupt = support::batch_of(1_000, &[br#"{"id":9}"#]);
    corrupt[abi::batch::field::CRC] ^= 0xff;
    let connection = broker.connect().await;
    let refused = support::produce_raw(&connection, "orders", 0, corrupt).await;
    assert_eq!(code_of(refused), ErrorCode::CorruptMessage);
    drop(producer);
    broker.stop().await;

    // Plugins and attachments come back with the broker (from the compiled cache).
    let broker = relaxed_broker(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    assert_eq!(admin.list_plugins().await.unwrap()[0].attached_to, vec!["orders".to_owned()]);
    let producer = fast_producer(&broker);
    assert_eq!(code_of(send(&producer, "orders", b"oops").await), ErrorCode::InvalidRecord);
    assert_eq!(send(&producer, "orders", br#"{"id":3}"#).await.unwrap(), 2);
    drop(producer);
    broker.stop().await;

    // Without the compiled cache, the broker compiles in the background and
    // the attachment starts when that is done.
    let plugin_dir = temp.path().join("plugins");
    let mut removed = 0;
    for file in std::fs::read_dir(&plugin_dir).unwrap() {
        let path = file.unwrap().path();
        if path.extension().is_some_and(|extension| extension == "cwasm") {
            std::fs::remove_file(path).unwrap();
            removed += 1;
        }
    }
    assert_eq!(removed, 1, "one compiled artifact in {}", plugin_dir.display());
    let broker = relaxed_broker(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    support::wait_until("the attachment runs its recompiled code", || async {
        let attachments = admin.list_attachments(Some("orders")).await.unwrap();
        attachments.first().is_some_and(|attachment| attachment.status == "running")
    })
    .await;
    assert_eq!(admin.describe_plugin("json").await.unwrap().state, "ready");
    let producer = fast_producer(&broker);
    assert_eq!(code_of(send(&producer, "orders", b"oops").await), ErrorCode::InvalidRecord);
    admin.detach_plugin("orders", "produce-interceptor", "json").await.unwrap();
    assert_eq!(send(&producer, "orders", b"anything goes now").await.unwrap(), 3);
    admin.delete_plugin("json").await.unwrap();
    drop(producer);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consume_interceptor_redacts_per_group_without_changing_the_log() {
    let temp = tempfile::tempdir().unwrap();
    let broker = relaxed_broker(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("payments", 1)).await.unwrap();
    let producer = fast_producer(&broker);
    for value in [r#"{"card":"4111","total":3}"#, "plain text", r#"{"total":4}"#] {
        send(&producer, "payments", value.as_bytes()).await.unwrap();
    }
    admin.upload_plugin("redact", "consume-interceptor", wasm("redact_field")).await.unwrap();
    let config = [("field", "card"), ("exempt-groups", "audit")];
    admin.attach_plugin(attach("payments", "consume-interceptor", "redact", &config, "")).await.unwrap();
    let seen = values(&broker, "payments", Some("billing"), 3).await;
    assert_eq!(seen, vec![r#"{"card":"***","total":3}"#, "plain text", r#"{"total":4}"#]);
    let audit = values(&broker, "payments", Some("audit"), 3).await;
    assert_eq!(audit[0], r#"{"card":"4111","total":3}"#, "the stored record is unchanged");

    // Hidden records leave offset gaps; a batch with nothing left still moves
    // consumers past it (the last two batches hold no card).
    admin.detach_plugin("payments", "consume-interceptor", "redact").await.unwrap();
    let config = [("field", "card"), ("hide-others", "true")];
    admin.attach_plugin(attach("payments", "consume-interceptor", "redact", &config, "")).await.unwrap();
    send(&producer, "payments", br#"{"card":"5500"}"#).await.unwrap();
    let consumer = client::Consumer::new(broker.consumer_config()).unwrap();
    consumer.assign(&[("payments".to_owned(), 0)]).await.unwrap();
    consumer.seek("payments", 0, Offset::Beginning).unwrap();
    let records = support::consume(&consumer, 2).await;
    let seen: Vec<(i64, &[u8])> =
        records.iter().map(|record| (record.offset, record.value.as_deref().unwrap_or_default())).collect();
    assert_eq!(seen, vec![(0, &br#"{"card":"***","total":3}"#[..]), (3, &br#"{"card":"***"}"#[..])]);
    assert_eq!(consumer.position("payments", 0), Some(4));
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_plugins_fail_by_their_policy_and_other_topics_keep_working() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(temp.path(), |config| config.plugins.call_deadline_ms = 50).await;
    let admin = Admin::new(broker.common()).unwrap();
    for topic in ["spin-closed", "spin-open", "panics", "plain"] {
        admin.create_topic(NewTopic::new(topic, 1)).await.unwrap();
    }
    admin.upload_plugin("hostile", "produce-interceptor", wasm("hostile")).await.unwrap();
    admin
        .attach_plugin(attach("spin-closed", "produce-interceptor", "hostile", &[("mode", "spin")], ""))
        .await
        .unwrap();
    let spin_open = attach("spin-open", "produce-interceptor", "hostile", &[("mode", "spin")], "fail-open");
    admin.attach_plugin(spin_open).await.unwrap();
    admin.attach_plugin(attach("panics", "produce-interceptor", "hostile", &[("mode", "panic")], "")).await.unwrap();
    let init_spin = attach("plain", "produce-interceptor", "hostile", &[("mode", "init-spin")], "");
    assert_eq!(code_of(admin.attach_plugin(init_spin).await), ErrorCode::InvalidConfig, "init ran out of time");

    let producer = fast_producer(&broker);
    let started = Instant::now();
    match send(&producer, "spin-closed", b"x").await {
        Err(client::ClientError::Broker { code: ErrorCode::PluginFailed, message }) => {
            assert!(message.contains("deadline"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2), "answered after {:?}", started.elapsed());
    assert_eq!(send(&producer, "spin-open", b"let through").await.unwrap(), 0, "fail-open appends unchanged");
    assert_eq!(code_of(send(&producer, "panics", b"x").await), ErrorCode::PluginFailed);
    assert_eq!(send(&producer, "plain", b"still served").await.unwrap(), 0);
    let logs = admin.plugin_logs("hostile").await.unwrap();
    assert!(logs.iter().any(|line| line.message.contains("hostile plugin panics")), "{logs:?}");
    let plugin = admin.describe_plugin("hostile").await.unwrap();
    assert!(plugin.errors >= 2 && plugin.traps >= 1, "{plugin:?}");
    drop(producer);
    broker.stop().await;
}

/// Every record of every partition of `topics`, read until `count` or 20 s pass.
async fn read_all(broker: &TestBroker, topics: &[(&str, i32)], count: usize) -> Vec<client::ConsumerRecord> {
    let consumer = client::Consumer::new(broker.consumer_config()).unwrap();
    let partitions: Vec<(String, i32)> = topics
        .iter()
        .flat_map(|(topic, partitions)| (0..*partitions).map(move |partition| (topic.to_string(), partition)))
        .collect();
    consumer.assign(&partitions).await.unwrap();
    consumer.seek_all(Offset::Beginning).unwrap();
    let mut records = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while records.len() < count && Instant::now() < deadline {
        records.extend(consumer.poll(Duration::from_millis(200)).await.unwrap());
    }
    // Anything more than expected would show up here too.
    records.extend(consumer.poll(Duration::from_millis(300)).await.unwrap());
    records
}

fn event(index: usize) -> Vec<u8> {
    let region = ["eu", "us", "ap"][index % 3];
    match index % 5 {
        4 => format!(r#"{{"n":{index}}}"#).into_bytes(), // no region: filtered out
        _ => format!(r#"{{"n":{index},"region":"{region}"}}"#).into_bytes(),
    }
}

fn expected_outputs(count: usize) -> usize {
    (0..count).filter(|index| index % 5 != 4).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_routes_and_rekeys_exactly_once_across_a_restart() {
    let temp = tempfile::tempdir().unwrap();
    let broker = relaxed_broker(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("events", 2)).await.unwrap();
    admin.create_topic(NewTopic::new("eu", 1)).await.unwrap();
    admin.create_topic(NewTopic::new("elsewhere", 3)).await.unwrap();
    admin.upload_plugin("route", "transform", wasm("route_transform")).await.unwrap();
    let producer = fast_producer(&broker);
    let mut sent = 0;
    for _ in 0..300 {
        let record = ProducerRecord::new("events", event(sent)).partition((sent % 2) as i32);
        producer.send(record).await.unwrap();
        sent += 1;
    }
    producer.flush().await;
    let spec = |name: &str, config: &[(&str, &str)]| client::TransformSpec {
        name: name.to_owned(),
        plugin: "route".to_owned(),
        input_topic: "events".to_owned(),
        output_topics: vec!["eu".to_owned(), "elsewhere".to_owned()],
        start: client::TRANSFORM_EARLIEST,
        config: config.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect(),
        dead_letter_topic: None,
    };
    assert_eq!(code_of(admin.deploy_transform(spec("route", &[("field", "region")])).await), ErrorCode::InvalidConfig);
    admin.deploy_transform(spec("route", &[("field", "region"), ("match", "eu")])).await.unwrap();
    assert_eq!(code_of(admin.delete_plugin("route").await), ErrorCode::PluginInUse);

    // More input while it runs, then a restart in the middle of it.
    for _ in 0..6000 {
        let record = ProducerRecord::new("events", event(sent)).partition((sent % 2) as i32);
        producer.send(record).await.unwrap();
        sent += 1;
    }
    producer.flush().await;
    drop(producer);
    // The restart must land while the transform runs: wait for its first batch.
    support::wait_until("the transform processes records", || async {
        let transforms = admin.list_transforms().await.unwrap();
        transforms[0].partitions.iter().map(|partition| partition.processed).sum::<u64>() > 0
    })
    .await;
    let before = admin.list_transforms().await.unwrap();
    broker.stop().await;
    let broker = relaxed_broker(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();

    let outputs = read_all(&broker, &[("eu", 1), ("elsewhere", 3)], expected_outputs(sent)).await;
    let mut seen: Vec<usize> = outputs
        .iter()
        .map(|record| {
            let value: serde_json::Value = serde_json::from_slice(record.value.as_deref().unwrap()).unwrap();
            let region = value["region"].as_str().unwrap().to_owned();
            assert_eq!(record.key.as_deref(), Some(region.as_bytes()), "re-keyed by the field");
            assert_eq!(record.topic.as_ref() == "eu", region == "eu", "routed by the field");
            let partitions = if region == "eu" { 1 } else { 3 };
            assert_eq!(record.partition as u32, client::partitioner::partition_for_key(region.as_bytes(), partitions));
            value["n"].as_u64().unwrap() as usize
        })
        .collect();
    seen.sort_unstable();
    let expected: Vec<usize> = (0..sent).filter(|index| index % 5 != 4).collect();
    let processed_before: u64 = before[0].partitions.iter().map(|partition| partition.processed).sum();
    eprintln!("processed {processed_before} of {sent} input records before the restart");
    assert!(processed_before > 0, "the transform was running before the restart: {before:?}");
    assert_eq!(
        seen.len(),
        expected.len(),
        "no duplicates, nothing lost (processed {processed_before} before the restart)"
    );
    assert_eq!(seen, expected);
    let status = &admin.list_transforms().await.unwrap()[0];
    assert_eq!(status.state, "running");
    assert!(status.partitions.iter().all(|partition| partition.lag == 0), "{status:?}");
    // The counters are kept with the checkpoints: the restart lost none.
    let processed: u64 = status.partitions.iter().map(|partition| partition.processed).sum();
    let emitted: u64 = status.partitions.iter().map(|partition| partition.emitted).sum();
    assert_eq!((processed, emitted), (sent as u64, expected.len() as u64), "{status:?}");

    // Pause holds new input back; resume catches up; replay re-emits on purpose.
    admin.control_transform("route", "pause", 0).await.unwrap();
    let producer = fast_producer(&broker);
    producer.send(ProducerRecord::new("events", event(0)).partition(0)).await.unwrap().await.unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let paused = &admin.list_transforms().await.unwrap()[0];
    assert_eq!((paused.state.as_str(), paused.partitions[0].lag), ("paused", 1));
    admin.control_transform("route", "resume", 0).await.unwrap();
    let again = read_all(&broker, &[("eu", 1), ("elsewhere", 3)], expected.len() + 1).await;
    assert_eq!(again.len(), expected.len() + 1);
    // A replay from the start is a new run (a new producer epoch, sequences
    // from 0): every input is emitted once more, none taken for a duplicate.
    admin.control_transform("route", "replay", -2).await.unwrap();
    let twice = read_all(&broker, &[("eu", 1), ("elsewhere", 3)], 2 * (expected.len() + 1)).await;
    assert_eq!(twice.len(), 2 * (expected.len() + 1));
    let replayed = &admin.list_transforms().await.unwrap()[0];
    assert_eq!(replayed.state, "running", "{replayed:?}");
    admin.control_transform("route", "delete", 0).await.unwrap();
    assert!(admin.list_transforms().await.unwrap().is_empty());
    admin.delete_plugin("route").await.unwrap();
    drop(producer);
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioner_plugin_places_records_in_every_producer() {
    let temp = tempfile::tempdir().unwrap();
    let broker = relaxed_broker(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("orders", 4)).await.unwrap();
    admin.upload_plugin("regions", "partitioner", wasm("region_partitioner")).await.unwrap();
    let refused = admin.attach_plugin(attach("orders", "partitioner", "regions", &[], "")).await;
    assert_eq!(code_of(refused), ErrorCode::InvalidConfig, "no region settings");
    let config = [("region.eu", "3"), ("region.us", "1")];
    admin.attach_plugin(attach("orders", "partitioner", "regions", &config, "")).await.unwrap();
    let producer = fast_producer(&broker);
    let place = |key: &str| ProducerRecord::new("orders", b"v".to_vec()).key(key.as_bytes().to_vec());
    for (key, expected) in [("eu:1", 3), ("us:7", 1), ("eu:2", 3)] {
        let metadata = producer.send(place(key)).await.unwrap().await.unwrap();
        assert_eq!(metadata.partition, expected, "{key}");
    }
    let other = producer.send(place("sa:9")).await.unwrap().await.unwrap();
    assert_eq!(other.partition as u32, client::partitioner::partition_for_key(b"sa:9", 4), "the built-in choice");
    let explicit = producer.send(place("eu:3").partition(0)).await.unwrap().await.unwrap();
    assert_eq!(explicit.partition, 0, "an explicit partition wins");
    // The bulk path (what the SDKs use) asks the plugin too.
    let keys: Vec<&[u8]> = vec![b"us:1", b"eu:4"];
    let futures =
        producer.send_many("orders", None, keys.iter().map(|key| (Some(*key), Some(&b"v"[..])))).await.unwrap();
    let mut placed = Vec::new();
    for future in futures {
        placed.push(future.await.unwrap().partition);
    }
    assert_eq!(placed, vec![1, 3]);
    // What the producer's plugin did reaches the broker when it closes.
    producer.close().await;
    let described = admin.describe_plugin("regions").await.unwrap();
    assert_eq!((described.client_calls, described.client_errors), (6, 0), "six records placed by the plugin");
    let logs = admin.plugin_logs("regions").await.unwrap();
    let from_clients: Vec<&str> = logs
        .iter()
        .filter_map(|line| line.message.strip_prefix("client ("))
        .filter_map(|line| line.split_once("): ").map(|(_, message)| message))
        .collect();
    assert_eq!(from_clients.len(), 1, "the plugin logged nothing; the host how it got the code: {logs:?}");
    assert!(
        from_clients[0].starts_with("host: compiled ") || from_clients[0].contains("from the compile cache"),
        "{from_clients:?}"
    );
    // A report for other code (or another plugin) changes nothing.
    let stale = client::PluginCallReport {
        plugin: "regions".to_owned(),
        digest: "0".repeat(64),
        calls: 100,
        errors: 100,
        busy_nanos: 0,
        log: Vec::new(),
    };
    admin.report_plugin_calls(vec![stale.clone()]).await.unwrap();
    let failing = client::PluginCallReport {
        digest: described.digest.clone(),
        calls: 1,
        errors: 1,
        log: vec![client::PluginLogLine {
            unix_ms: 0,
            level: "error".to_owned(),
            message: "host: the plugin trapped".to_owned(),
        }],
        ..stale
    };
    admin.report_plugin_calls(vec![failing]).await.unwrap();
    let described = admin.describe_plugin("regions").await.unwrap();
    assert_eq!((described.client_calls, described.client_errors), (7, 1));
    let logs = admin.plugin_logs("regions").await.unwrap();
    let reported = logs.iter().rev().find(|line| line.message.starts_with("client (pid ")).expect("the client's line");
    assert!(reported.message.ends_with("): host: the plugin trapped"), "{reported:?}");
    broker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transform_outputs_follow_the_output_topics_partitioner_plugin() {
    let temp = tempfile::tempdir().unwrap();
    let broker = relaxed_broker(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("in", 1)).await.unwrap();
    admin.create_topic(NewTopic::new("out", 4)).await.unwrap();
    admin.upload_plugin("identity", "transform", wasm("identity_transform")).await.unwrap();
    admin.upload_plugin("regions", "partitioner", wasm("region_partitioner")).await.unwrap();
    admin.attach_plugin(attach("out", "partitioner", "regions", &[("region.eu", "3")], "")).await.unwrap();
    let keys = ["eu:1", "eu:2", "eu:3", "us:1"];
    assert!(
        keys[..3].iter().any(|key| client::partitioner::partition_for_key(key.as_bytes(), 4) != 3),
        "murmur2 alone would put some eu keys elsewhere"
    );
    let producer = fast_producer(&broker);
    for key in keys {
        producer
            .send(ProducerRecord::new("in", b"v".to_vec()).key(key.as_bytes().to_vec()).partition(0))
            .await
            .unwrap();
    }
    producer.flush().await;
    let spec = client::TransformSpec {
        name: "copy".to_owned(),
        plugin: "identity".to_owned(),
        input_topic: "in".to_owned(),
        output_topics: vec!["out".to_owned()],
        start: client::TRANSFORM_EARLIEST,
        config: Vec::new(),
        dead_letter_topic: None,
    };
    admin.deploy_transform(spec).await.unwrap();
    let outputs = read_all(&broker, &[("out", 4)], keys.len()).await;
    assert_eq!(outputs.len(), keys.len());
    for record in outputs {
        let key = record.key.as_deref().unwrap();
        let expected = match key.starts_with(b"eu:") {
            true => 3,
            false => client::partitioner::partition_for_key(key, 4) as i32,
        };
        assert_eq!(record.partition, expected, "{}", String::from_utf8_lossy(key));
    }
    drop(producer);
    broker.stop().await;
}

/// A raw produce with `partition = -1`: where the broker placed each record.
async fn produce_anywhere(
    broker: &TestBroker,
    topic: &str,
    batch: Vec<u8>,
) -> Result<Vec<(i32, i64)>, client::ClientError> {
    let connection = broker.connect().await;
    let address = connection.address().to_owned();
    let topic = topic.to_owned();
    connection
        .call(move |client: abi::weir_capnp::broker::Client| async move {
            let mut request = client.produce_request();
            let mut builder = request.get().init_request();
            builder.set_topic(&topic[..]);
            builder.set_partition(-1);
            builder.set_acks(abi::weir_capnp::Acks::All);
            builder.set_batches(&batch);
            let response = request.send().promise.await.map_err(|error| support::rpc_error(&address, error))?;
            let response = response.get()?.get_response()?;
            if response.has_error() {
                let error = response.get_error()?;
                let code = ErrorCode::from_u16(error.get_code()).unwrap();
                let message = error.get_message()?.to_str()?.to_owned();
                return Err(client::ClientError::Broker { code, message });
            }
            Ok(response.get_placed()?.iter().map(|placed| (placed.get_partition(), placed.get_offset())).collect())
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_places_records_like_producers_when_asked() {
    let temp = tempfile::tempdir().unwrap();
    let broker = relaxed_broker(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("orders", 4)).await.unwrap();
    let keys: [&[u8]; 4] = [b"eu:1", b"us:2", b"eu:3", b"sa:4"];
    let batch = |keys: &[&[u8]]| {
        let mut builder = client::BatchBuilder::new(1_000);
        for key in keys {
            builder.push(1_000, Some(key), Some(b"v"), &[]);
        }
        builder.encode()
    };
    // Without a plugin: Kafka's key partitioning, as producers do it.
    let placed = produce_anywhere(&broker, "orders", batch(&keys)).await.unwrap();
    let expected: Vec<i32> = keys.iter().map(|key| client::partitioner::partition_for_key(key, 4) as i32).collect();
    assert_eq!(placed.iter().map(|(partition, _)| *partition).collect::<Vec<_>>(), expected);
    // With the topic's partitioner plugin: the same choices a producer makes.
    admin.upload_plugin("regions", "partitioner", wasm("region_partitioner")).await.unwrap();
    admin
        .attach_plugin(attach("orders", "partitioner", "regions", &[("region.eu", "2"), ("region.us", "0")], ""))
        .await
        .unwrap();
    let placed = produce_anywhere(&broker, "orders", batch(&keys)).await.unwrap();
    let producer = fast_producer(&broker);
    for ((key, (partition, offset)), position) in keys.iter().zip(&placed).zip(0..) {
        let sent = producer.send(ProducerRecord::new("orders", b"v".to_vec()).key(key.to_vec())).await.unwrap();
        assert_eq!(sent.await.unwrap().partition, *partition, "record {position}: broker and producer agree");
        assert!(*offset >= 0);
    }
    assert_eq!(placed[0].0, 2);
    assert_eq!(placed[0].1 + 1, placed[2].1, "records of a partition keep their order");
    // Idempotent batches keep their partition.
    let idempotent = client::BatchBuilder::new(1_000).producer(7, 0, 0);
    let mut idempotent = idempotent;
    idempotent.push(1_000, None, Some(b"v"), &[]);
    assert_eq!(code_of(produce_anywhere(&broker, "orders", idempotent.encode()).await), ErrorCode::InvalidRequest);
    drop(producer);
    broker.stop().await;
}

/// Plugin calls run on threads of their own: with a single RPC thread serving
/// every connection, a produce interceptor spinning on one topic does not hold
/// up a produce to another. (Before, the spin ran on the RPC thread and the
/// second produce waited for its deadline.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_interceptor_holds_up_only_the_topic_it_intercepts() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start_with(temp.path(), |config| {
        config.rpc_threads = 1;
        // Long enough that the other produce, not the spin, ends first.
        config.plugins.call_deadline_ms = 5_000;
        config.plugins.call_wall_deadline_ms = 120_000;
    })
    .await;
    let admin = Admin::new(broker.common()).unwrap();
    for topic in ["spinning", "plain"] {
        admin.create_topic(NewTopic::new(topic, 1)).await.unwrap();
    }
    admin.upload_plugin("hostile", "produce-interceptor", wasm("hostile")).await.unwrap();
    admin.attach_plugin(attach("spinning", "produce-interceptor", "hostile", &[("mode", "spin")], "")).await.unwrap();

    let patient = ProducerConfig { delivery_timeout: Duration::from_secs(120), ..broker.producer_config() };
    let spinning_producer = Producer::new(patient).unwrap();
    let stuck = tokio::spawn(async move { send(&spinning_producer, "spinning", b"x").await });
    support::wait_until("the interceptor runs", || async {
        admin.describe_plugin("hostile").await.is_ok_and(|plugin| plugin.calls >= 1)
    })
    .await;
    let producer = fast_producer(&broker);
    assert_eq!(send(&producer, "plain", b"served meanwhile").await.unwrap(), 0);
    assert!(!stuck.is_finished(), "the spinning call should still run when the other produce is answered");
    // Not waited for: the spin ends on its own when its budget is spent.
    stuck.abort();
    drop(producer);
    broker.stop().await;
}

/// Requests pipelined on one connection to an intercepted partition append in
/// the order they were sent, although their plugin calls run off the RPC
/// thread: idempotent batches 0..N are all accepted, none out of sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_produces_through_an_interceptor_append_in_order() {
    let temp = tempfile::tempdir().unwrap();
    let broker = relaxed_broker(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("ordered", 1)).await.unwrap();
    admin.upload_plugin("noop", "produce-interceptor", wasm("noop_interceptor")).await.unwrap();
    admin.attach_plugin(attach("ordered", "produce-interceptor", "noop", &[], "")).await.unwrap();

    let connection = broker.connect().await;
    let (producer_id, epoch) = support::init_producer_id(&connection).await.unwrap();
    const BATCHES: i32 = 40;
    let sends = (0..BATCHES).map(|sequence| {
        let mut builder = abi::BatchBuilder::new(1_000).producer(producer_id, epoch, sequence);
        builder.push(1_000, None, Some(format!("{sequence}").as_bytes()), &[]);
        support::produce_raw(&connection, "ordered", 0, builder.encode())
    });
    let produced = futures::future::join_all(sends).await;
    let offsets: Vec<i64> = produced.into_iter().map(|produced| produced.unwrap().base_offset).collect();
    assert_eq!(offsets, (0..i64::from(BATCHES)).collect::<Vec<_>>());
    let stored = values(&broker, "ordered", None, BATCHES as usize).await;
    assert_eq!(stored, (0..BATCHES).map(|sequence| sequence.to_string()).collect::<Vec<_>>());
    broker.stop().await;
}

/// A produce interceptor whose whole batch needs longer than one call's CPU
/// budget — 5,000 records at about 12 µs each, some 60 ms, against the
/// default 10 ms — is run over it in parts: the produce is accepted whole, the
/// plugin log says the batch was split, and the next batch starts at the size
/// that fit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interceptor_batch_longer_than_its_budget_runs_in_parts() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("heavy", 1)).await.unwrap();
    admin.upload_plugin("heavy", "produce-interceptor", wasm("noop_interceptor")).await.unwrap();
    let config = [("iterations_per_record", "24000")];
    admin.attach_plugin(attach("heavy", "produce-interceptor", "heavy", &config, "")).await.unwrap();
    const RECORDS: usize = 5_000;
    let values: Vec<Vec<u8>> = (0..RECORDS).map(|index| index.to_string().into_bytes()).collect();
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    let connection = broker.connect().await;
    for round in 0..2 {
        let produced = support::produce_raw(&connection, "heavy", 0, support::batch_of(1_000, &refs)).await.unwrap();
        assert_eq!(produced.base_offset, (round * RECORDS) as i64);
    }
    let stored = read_all(&broker, &[("heavy", 1)], 2 * RECORDS).await;
    let stored: Vec<&[u8]> = stored.iter().map(|record| record.value.as_deref().unwrap_or_default()).collect();
    assert_eq!(stored, [refs.clone(), refs].concat(), "every record once, in order");
    let logs = admin.plugin_logs("heavy").await.unwrap();
    let splits: Vec<_> = logs.iter().filter(|line| line.message.contains("at a time")).collect();
    assert!(!splits.is_empty(), "the batch was split: {logs:?}");
    broker.stop().await;
}

/// A transform whose whole batch needs longer than one call's CPU budget —
/// 5,000 records at about 12 µs each, some 60 ms, against the default 10 ms —
/// runs it in smaller parts and moves on: every record is emitted once, in
/// order, and the plugin log says the batch was split.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_batch_longer_than_its_budget_is_split_and_completes() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("slow-input", 1)).await.unwrap();
    admin.create_topic(NewTopic::new("slow-output", 1)).await.unwrap();
    admin.upload_plugin("slow", "transform", wasm("identity_transform")).await.unwrap();
    const RECORDS: usize = 5_000;
    let values: Vec<Vec<u8>> = (0..RECORDS).map(|index| index.to_string().into_bytes()).collect();
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    let connection = broker.connect().await;
    support::produce_raw(&connection, "slow-input", 0, support::batch_of(1_000, &refs)).await.unwrap();
    let spec = client::TransformSpec {
        name: "slow".to_owned(),
        plugin: "slow".to_owned(),
        input_topic: "slow-input".to_owned(),
        output_topics: vec!["slow-output".to_owned()],
        start: client::TRANSFORM_EARLIEST,
        config: vec![("iterations_per_record".to_owned(), "24000".to_owned())],
        dead_letter_topic: None,
    };
    admin.deploy_transform(spec).await.unwrap();
    let outputs = read_all(&broker, &[("slow-output", 1)], RECORDS).await;
    let emitted: Vec<&[u8]> = outputs.iter().map(|record| record.value.as_deref().unwrap_or_default()).collect();
    assert_eq!(emitted, refs, "every record once, in order");
    let logs = admin.plugin_logs("slow").await.unwrap();
    assert!(logs.iter().any(|line| line.message.contains("at a time")), "the batch was split: {logs:?}");
    broker.stop().await;
}

/// Plugins written in Python and JavaScript (`plugins/python`, `plugins/js`),
/// uploaded and run on a broker with default settings: the 18 MB Python
/// component goes up in chunks past the default request limit, uploading the
/// same bytes again changes nothing, and a 5,000-record batch through the
/// JavaScript transform (~100 ms of work, ten times the default budget) is
/// split and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_plugins_run_end_to_end_on_default_settings() {
    let temp = tempfile::tempdir().unwrap();
    let broker = TestBroker::start(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    admin.create_topic(NewTopic::new("names", 1)).await.unwrap();
    admin.create_topic(NewTopic::new("reversed", 1)).await.unwrap();

    let python = wasm("py_upper");
    assert!(python.len() > 16 << 20, "bigger than one default request: {} bytes", python.len());
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let progress = {
        let sent = sent.clone();
        move |done: u64, total: u64| sent.lock().unwrap().push((done, total))
    };
    let uploaded = admin.upload_plugin_with_progress("upper", "", python.clone(), progress).await.unwrap();
    assert_eq!((uploaded.hook.as_str(), uploaded.size_bytes), ("consume-interceptor", python.len() as u64));
    // Inspected and registered in milliseconds; compiled for seconds after.
    assert_eq!(uploaded.state, "compiling", "the answer does not wait for the compile");
    let states = std::sync::Mutex::new(Vec::new());
    let ready = admin
        .wait_plugin_compiled("upper", Duration::from_secs(600), |now| states.lock().unwrap().push(now.state.clone()))
        .await
        .unwrap();
    assert_eq!((ready.state.as_str(), ready.digest.as_str()), ("ready", uploaded.digest.as_str()));
    assert_eq!(states.lock().unwrap().last().map(String::as_str), Some("ready"));
    let sent = sent.lock().unwrap().clone();
    assert!(sent.len() >= 5, "4 MiB chunks: {sent:?}");
    assert_eq!(sent.last(), Some(&(python.len() as u64, python.len() as u64)));
    let again = admin.upload_plugin("upper", "consume-interceptor", python).await.unwrap();
    assert_eq!((again.digest, again.uploaded_ms), (uploaded.digest, uploaded.uploaded_ms), "nothing changed");

    let producer = fast_producer(&broker);
    for value in ["ada", "drop-me", "Grace", "LINUS"] {
        send(&producer, "names", value.as_bytes()).await.unwrap();
    }
    admin.attach_plugin(attach("names", "consume-interceptor", "upper", &[], "")).await.unwrap();
    let consumer = client::Consumer::new(broker.consumer_config()).unwrap();
    consumer.assign(&[("names".to_owned(), 0)]).await.unwrap();
    consumer.seek("names", 0, Offset::Beginning).unwrap();
    let seen: Vec<(i64, Vec<u8>)> = support::consume(&consumer, 3)
        .await
        .into_iter()
        .map(|record| (record.offset, record.value.unwrap_or_default().to_vec()))
        .collect();
    assert_eq!(seen, vec![(0, b"ADA".to_vec()), (2, b"GRACE".to_vec()), (3, b"LINUS".to_vec())]);
    let logs = admin.plugin_logs("upper").await.unwrap();
    assert!(logs.iter().any(|line| line.message.contains("hiding values equal to")), "{logs:?}");

    admin.upload_plugin("reverse", "transform", wasm("js_reverse")).await.unwrap();
    const RECORDS: usize = 5_000;
    let values: Vec<Vec<u8>> = (0..RECORDS).map(|index| format!("record-{index}").into_bytes()).collect();
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    let connection = broker.connect().await;
    support::produce_raw(&connection, "names", 0, support::batch_of(1_000, &refs)).await.unwrap();
    let spec = client::TransformSpec {
        name: "reverse".to_owned(),
        plugin: "reverse".to_owned(),
        input_topic: "names".to_owned(),
        output_topics: vec!["reversed".to_owned()],
        start: client::TRANSFORM_EARLIEST,
        config: Vec::new(),
        dead_letter_topic: None,
    };
    admin.deploy_transform(spec).await.unwrap();
    let outputs = read_all(&broker, &[("reversed", 1)], 4 + RECORDS).await;
    let mut expected: Vec<Vec<u8>> = ["ada", "drop-me", "Grace", "LINUS"].map(|value| value.as_bytes().to_vec()).into();
    expected.extend(values);
    for value in &mut expected {
        value.reverse();
    }
    let emitted: Vec<Vec<u8>> =
        outputs.iter().map(|record| record.value.clone().unwrap_or_default().to_vec()).collect();
    assert_eq!(emitted, expected, "the stored input, reversed, once each and in order");

    // The Python interceptor over that 5,000-record batch: several times its
    // default budget for one call, so the host runs it in parts and joins
    // their verdicts (a drop and replacements in every part).
    let upper = crate::values(&broker, "names", None, 3 + RECORDS).await;
    let mut expected: Vec<String> = ["ADA", "GRACE", "LINUS"].map(str::to_owned).into();
    expected.extend((0..RECORDS).map(|index| format!("RECORD-{index}")));
    assert_eq!(upper, expected, "every record through the interceptor, in order");
    let logs = admin.plugin_logs("upper").await.unwrap();
    assert!(logs.iter().any(|line| line.message.contains("at a time")), "the batch was split: {logs:?}");
    broker.stop().await;
}

/// A record the transform fails on for good goes to the dead-letter topic,
/// unchanged, with why and where from in its headers, and the partition moves
/// on — for a plugin error and for a panic alike; counts survive in the
/// status. Without a dead-letter topic the same record holds its partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_a_transform_fails_on_go_to_its_dead_letter_topic() {
    let temp = tempfile::tempdir().unwrap();
    let broker = relaxed_broker(temp.path()).await;
    let admin = Admin::new(broker.common()).unwrap();
    for topic in ["raw", "clean", "clean-2", "dlq", "held-output"] {
        admin.create_topic(NewTopic::new(topic, 1)).await.unwrap();
    }
    admin.upload_plugin("picky", "transform", wasm("identity_transform")).await.unwrap();
    let values: Vec<Vec<u8>> = (0..100)
        .map(|index| if index == 10 || index == 57 { b"bad".to_vec() } else { format!("ok-{index}").into_bytes() })
        .collect();
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    let connection = broker.connect().await;
    support::produce_raw(&connection, "raw", 0, support::batch_of(1_000, &refs)).await.unwrap();
    let spec = |name: &str, output: &str, fail_by: &str, dead_letters: Option<&str>| client::TransformSpec {
        name: name.to_owned(),
        plugin: "picky".to_owned(),
        input_topic: "raw".to_owned(),
        output_topics: vec![output.to_owned()],
        start: client::TRANSFORM_EARLIEST,
        config: vec![("fail_on".to_owned(), "bad".to_owned()), ("fail_by".to_owned(), fail_by.to_owned())],
        dead_letter_topic: dead_letters.map(str::to_owned),
    };
    assert!(admin.deploy_transform(spec("loop", "clean", "error", Some("raw"))).await.is_err(), "not the input");
    assert!(admin.deploy_transform(spec("loop", "clean", "error", Some("clean"))).await.is_err(), "not an output");
    admin.deploy_transform(spec("errors", "clean", "error", Some("dlq"))).await.unwrap();
    admin.deploy_transform(spec("panics", "clean-2", "panic", Some("dlq"))).await.unwrap();
    admin.deploy_transform(spec("held", "held-output", "error", None)).await.unwrap();
    assert_eq!(code_of(admin.delete_topic("dlq").await), ErrorCode::InvalidRequest, "in use by a transform");

    support::wait_until("both transforms with dead letters are past every input record", || async {
        let statuses = admin.list_transforms().await.unwrap();
        ["errors", "panics"].iter().all(|name| {
            let status = statuses.iter().find(|status| status.name == *name).unwrap();
            status.partitions[0].next_offset == 100
        })
    })
    .await;
    let good: Vec<&[u8]> = refs.iter().copied().filter(|value| *value != b"bad").collect();
    for output in ["clean", "clean-2"] {
        let records = read_all(&broker, &[(output, 1)], good.len()).await;
        let emitted: Vec<&[u8]> = records.iter().map(|record| record.value.as_deref().unwrap_or_default()).collect();
        assert_eq!(emitted, good, "{output}: the rest, in order, once");
    }
    let letters = read_all(&broker, &[("dlq", 1)], 4).await;
    assert_eq!(letters.len(), 4, "two bad records from each of two transforms");
    let header = |record: &client::ConsumerRecord, name: &str| {
        let value = record.headers.iter().find(|(key, _)| key == name).and_then(|(_, value)| value.clone());
        String::from_utf8(value.unwrap_or_default().to_vec()).unwrap()
    };
    let mut offsets: Vec<String> = letters.iter().map(|record| header(record, "weir.dlq.offset")).collect();
    offsets.sort();
    assert_eq!(offsets, ["10", "10", "57", "57"]);
    for letter in &letters {
        assert_eq!(letter.value.as_deref(), Some(&b"bad"[..]), "unchanged");
        assert_eq!(
            (header(letter, "weir.dlq.topic"), header(letter, "weir.dlq.partition")),
            ("raw".into(), "0".into())
        );
        let error = header(letter, "weir.dlq.error");
        assert!(error.contains("cannot take") || error.contains("the plugin trapped"), "{error}");
    }
    let statuses = admin.list_transforms().await.unwrap();
    for name in ["errors", "panics"] {
        let status = statuses.iter().find(|status| status.name == name).unwrap();
        assert_eq!(status.dead_letter_topic.as_deref(), Some("dlq"));
        let partition = &status.partitions[0];
        assert_eq!((partition.processed, partition.emitted, partition.dead_lettered), (100, 98, 2), "{status:?}");
    }
    // Without a dead-letter topic the bad record holds the partition (at the
    // start of its batch: a batch is checkpointed whole).
    support::wait_until("the transform without dead letters holds at the bad record", || async {
        let statuses = admin.list_transforms().await.unwrap();
        let held = statuses.iter().find(|status| status.name == "held").unwrap();
        held.state.starts_with("retrying") && held.partitions[0].next_offset == 0
    })
    .await;
    let logs = admin.plugin_logs("picky").await.unwrap();
    assert!(logs.iter().any(|line| line.message.contains("sent to dead-letter topic \"dlq\"")), "{logs:?}");
    broker.stop().await;
}

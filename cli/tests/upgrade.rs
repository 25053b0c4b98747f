//! A data directory written by the single-node broker from before the controller
//! (commit 0ab93de, metadata in `cluster-metadata.json`) opens under today's
//! broker with every topic, config, record, group offset, producer id, plugin,
//! attachment, partitioner and transform intact.
//!
//! The fixture `fixtures/single-node-data-0ab93de.tar.gz` was made with that
//! commit's `weir` (plugins from `plugins/`, compiled caches removed):
//! - topics `orders` (3 partitions, retention.ms=86400000; 30 keyed records
//!   `key-N,order-N`), `events` (2, flush.policy=interval; 10 JSON records, then
//!   the `json_validator` plugin attached as `validator`), `regions` (4, the
//!   `region_partitioner` as `regional` with region.eu=1 region.us=2; records
//!   eu-1, us-2, eu-3), `orders-copy` (1, filled by transform `copy-orders`, the
//!   `identity_transform` as `copier`, from earliest);
//! - group `legacy-group`, which read all of `orders` and committed;
//! - producer ids handed out up to 1,000 (one block).
#![allow(clippy::unwrap_used)]

mod support;

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

fn weir(address: &str, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .args(["--brokers", address])
        .env_remove("WEIR_BROKERS")
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    (output.status.success(), String::from_utf8(output.stdout).unwrap(), String::from_utf8(output.stderr).unwrap())
}

fn json(address: &str, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["--format", "json"]);
    let (ok, stdout, stderr) = weir(address, &args, None);
    assert!(ok, "{args:?}: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|error| panic!("{args:?}: {error}: {stdout}"))
}

fn consume(address: &str, topic: &str) -> Vec<String> {
    let (ok, stdout, stderr) =
        weir(address, &["consume", topic, "--offset", "beginning", "--timeout-ms", "3000"], None);
    assert!(ok, "{stderr}");
    let mut values: Vec<String> = stdout.lines().map(str::to_owned).collect();
    values.sort();
    values
}

fn extract_fixture(into: &Path) {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/single-node-data-0ab93de.tar.gz");
    let status = Command::new("tar").arg("-xzf").arg(&fixture).arg("-C").arg(into).status().unwrap();
    assert!(status.success(), "tar -xzf {}", fixture.display());
}

fn init_producer_id(address: &str) -> i64 {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let connection = client::connection::Connection::connect(address, Duration::from_secs(30)).await.unwrap();
        connection
            .call(move |broker: abi::weir_capnp::broker::Client| async move {
                let response =
                    broker.init_producer_id_request().send().promise.await.map_err(client::ClientError::from)?;
                let response = response.get()?;
                assert!(!response.has_error());
                Ok(response.get_id()?.get_producer_id())
            })
            .await
            .unwrap()
    })
}

#[test]
fn a_single_node_data_directory_from_before_the_controller_keeps_everything() {
    let temp = tempfile::tempdir().unwrap();
    extract_fixture(temp.path());
    let data = temp.path().join("data");
    let (mut broker, address, mut log) = support::serve(&[OsStr::new("--data-dir"), data.as_os_str()], None);
    std::thread::spawn(move || for _ in log.by_ref() {});

    let topics = json(&address, &["topic", "list"]);
    assert_eq!(topics, serde_json::json!(["events", "orders", "orders-copy", "regions"]));
    let orders = json(&address, &["topic", "describe", "orders"]);
    assert_eq!(orders["configs"]["retention.ms"], "86400000");
    assert_eq!(orders["partitions"].as_array().unwrap().len(), 3);
    assert_eq!(json(&address, &["topic", "describe", "events"])["configs"]["flush.policy"], "interval");

    let mut expected: Vec<String> = (0..30).map(|index| format!("order-{index}")).collect();
    expected.sort();
    assert_eq!(consume(&address, "orders"), expected);
    assert_eq!(consume(&address, "events").len(), 10);
    assert_eq!(consume(&address, "regions"), ["a", "b", "c"]);

    // The group's committed offsets: everything of `orders` was read.
    let group = json(&address, &["group", "describe", "legacy-group"]);
    let partitions = group["partitions"].as_array().unwrap();
    let committed: i64 = partitions.iter().map(|partition| partition["committed"].as_i64().unwrap()).sum();
    assert_eq!(committed, 30, "{group}");
    assert_eq!(group["total_lag"], 0, "{group}");

    // Plugins, the attachment and the partitioner are still in force.
    let plugins = json(&address, &["plugin", "list"]);
    let names: Vec<&str> = plugins.as_array().unwrap().iter().map(|plugin| plugin["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["copier", "regional", "validator"]);
    let (refused, _, stderr) = weir(&address, &["produce", "events"], Some("not json\n"));
    assert!(!refused || stderr.contains("InvalidRecord"), "the validator still rejects: {stderr}");
    // The partitioner places a key where it placed it before the upgrade.
    let (ok, _, stderr) = weir(&address, &["produce", "regions", "--key-separator", ","], Some("us-2,d\n"));
    assert!(ok, "{stderr}");
    let (ok, stdout, stderr) = weir(
        &address,
        &["consume", "regions", "--offset", "beginning", "--timeout-ms", "3000", "--format", "json"],
        None,
    );
    assert!(ok, "{stderr}");
    let partition_of = |wanted: &str| {
        stdout
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .find(|record| record["value"] == wanted)
            .map(|record| record["partition"].clone())
            .unwrap_or_else(|| panic!("no record {wanted:?} in {stdout}"))
    };
    assert_eq!(partition_of("d"), partition_of("b"), "us-2 before and after the upgrade");

    // The transform carries on from its checkpoint: new orders are copied once.
    let (ok, _, stderr) = weir(&address, &["produce", "orders", "--key-separator", ","], Some("key-30,order-30\n"));
    assert!(ok, "{stderr}");
    let started = Instant::now();
    loop {
        let copied = json(&address, &["topic", "describe", "orders-copy"])["partitions"][0]["high_watermark"].clone();
        if copied == 31 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "orders-copy has {copied} records, not 31");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Producer ids never repeat one handed out before the upgrade.
    assert!(init_producer_id(&address) >= 1000);
    assert!(data.join("cluster-metadata.json.upgraded").exists() && !data.join("cluster-metadata.json").exists());

    // A second start is an ordinary restart: nothing is upgraded twice.
    let _ = Command::new("kill").arg(broker.id().to_string()).status();
    broker.wait().unwrap();
    let (mut broker, address, mut log) = support::serve(&[OsStr::new("--data-dir"), data.as_os_str()], None);
    std::thread::spawn(move || for _ in log.by_ref() {});
    assert_eq!(json(&address, &["topic", "list"]), topics);
    expected.push("order-30".to_owned());
    expected.sort();
    assert_eq!(consume(&address, "orders"), expected);
    let _ = broker.kill();
    broker.wait().unwrap();
}

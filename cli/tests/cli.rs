//! The `weir` binary as a user runs it: `serve` plus the client commands of the
//! README tour, consumer groups (`consume --group` commits its progress, `group
//! describe` reports committed offsets and lag, `reset-offsets` and `delete` are
//! refused while members exist), restarts (clean and `kill -9`), `dump-log`, a
//! second broker refused on a live data directory, a fenced partition reported to
//! consumers and brought back by `repair`, and bad usage or bad input giving clear
//! errors and the documented exit codes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use abi::batch::BatchBuilder;
use broker::{LogDir, LogDirConfig};

fn weir() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weir"))
}

/// Kills the child when dropped, so a failed assertion never leaves a `weir serve`
/// holding the test harness's output pipe open.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Writes `batch_count` batches to `orders-0` and stops without a clean shutdown.
fn partition_left_uncleanly(data_dir: &Path, batch_count: usize) {
    let log_dir = LogDir::open(LogDirConfig::new(data_dir.to_path_buf())).unwrap();
    let partition = log_dir.create_partition("orders", 0).unwrap();
    for index in 0..batch_count {
        let mut builder = BatchBuilder::new(1_700_000_000_000 + index as i64);
        builder.push(1_700_000_000_000 + index as i64, Some(b"key"), Some(format!("value {index}").as_bytes()), &[]);
        partition.append(&mut builder.encode(), 0).unwrap();
        partition.flush().unwrap();
    }
}

/// A `weir serve` child on a free port of 127.0.0.1, with its log lines.
struct Broker {
    child: KillOnDrop,
    address: String,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Broker {
    fn start(data_dir: &Path) -> Broker {
        Broker::start_with(data_dir, &[])
    }

    /// A broker whose plugin calls may run long: a loaded test machine must not
    /// turn a slow call into a failure (deadlines have their own tests).
    fn start_relaxed(data_dir: &Path) -> Broker {
        let config = data_dir.with_extension("toml");
        std::fs::write(&config, "[plugins]\ncall_deadline_ms = 2000\n").unwrap();
        Broker::start_with(data_dir, &[std::ffi::OsStr::new("--config"), config.as_os_str()])
    }

    fn start_with(data_dir: &Path, extra: &[&std::ffi::OsStr]) -> Broker {
        let mut args = vec!["--data-dir".as_ref(), data_dir.as_os_str()];
        args.extend_from_slice(extra);
        let (child, address, lines) = support::serve(&args, None);
        Broker { child: KillOnDrop(child), address, lines }
    }

    /// Runs a client command against this broker.
    fn run(&self, args: &[&str], stdin: &str) -> std::process::Output {
        self.run_with_env(args, stdin, &[])
    }

    /// [`Broker::run`] with more environment variables.
    fn run_with_env(&self, args: &[&str], stdin: &str, env: &[(&str, &Path)]) -> std::process::Output {
        let mut child = weir()
            .args(args)
            .env("WEIR_BROKERS", &self.address)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    }

    fn ok(&self, args: &[&str], stdin: &str) -> String {
        let output = self.run(args, stdin);
        assert!(output.status.success(), "weir {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    }

    /// Runs a command with `--format json` and parses its one line of output.
    fn json(&self, args: &[&str]) -> serde_json::Value {
        let args: Vec<&str> = args.iter().copied().chain(["--format", "json"]).collect();
        let stdout = self.ok(&args, "");
        serde_json::from_str(stdout.trim()).unwrap_or_else(|error| panic!("weir {args:?}: {error}: {stdout}"))
    }

    /// `weir group describe GROUP --format json`.
    fn describe_group(&self, group: &str) -> serde_json::Value {
        self.json(&["group", "describe", group])
    }

    /// SIGTERM, then the rest of the log; asserts a clean stop.
    fn stop(mut self) -> String {
        let killed = Command::new("kill").args(["-TERM", &self.child.0.id().to_string()]).status().unwrap();
        assert!(killed.success());
        let rest: Vec<String> = self.lines.by_ref().map(Result::unwrap).collect();
        let status = self.child.0.wait().unwrap();
        assert!(status.success(), "{status}: {}", rest.join("\n"));
        rest.join("\n")
    }
}

#[test]
fn the_tour_works_and_data_survives_a_clean_restart_and_a_kill() {
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start(temp.path());
    let created =
        broker.ok(&["topic", "create", "orders", "--partitions", "3", "--config", "retention.ms=86400000"], "");
    assert_eq!(created.trim(), "created topic orders with 3 partition(s)");
    assert_eq!(broker.ok(&["topic", "list"], "").trim(), "orders");
    let produced = broker.ok(&["produce", "orders", "--key-separator", ":"], "alice:one\nbob:two\nalice:three\n");
    assert_eq!(produced.trim(), "3 record(s) acknowledged");
    let consume = ["consume", "orders", "--offset", "beginning", "--max-messages", "3", "--format", "json"];
    let records = broker.ok(&consume, "");
    let values: Vec<serde_json::Value> = records.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(values.len(), 3, "{records}");
    let alice: Vec<_> = values.iter().filter(|record| record["key"] == "alice").collect();
    assert_eq!(alice.len(), 2);
    assert_eq!(alice[0]["partition"], alice[1]["partition"], "one key, one partition");
    assert!(alice[0]["offset"].as_i64() < alice[1]["offset"].as_i64());
    for field in ["topic", "partition", "offset", "timestamp", "key", "value", "headers"] {
        assert!(values[0].get(field).is_some(), "{field} missing: {}", values[0]);
    }
    let description = broker.ok(&["topic", "describe", "orders", "--format", "json"], "");
    let description: serde_json::Value = serde_json::from_str(description.trim()).unwrap();
    assert_eq!(description["configs"]["retention.ms"], "86400000");
    assert!(broker.stop().contains("stopped cleanly"));
    assert!(temp.path().join("orders-0/clean-shutdown").exists(), "clean-shutdown marker written");

    // A clean restart keeps topics and records; a restart after SIGKILL recovers
    // (the page cache survives SIGKILL, so this is a recovery smoke check; losing
    // unsynced data is covered by broker-core's crash tests).
    let broker = Broker::start(temp.path());
    assert_eq!(broker.ok(&consume, ""), records);
    broker.ok(&["produce", "orders", "--partition", "1", "--acks", "all"], "after-restart\n");
    drop(broker); // SIGKILL
    let broker = Broker::start(temp.path());
    let partition_one =
        broker.ok(&["consume", "orders", "--partition", "1", "--offset", "beginning", "--timeout-ms", "500"], "");
    assert!(partition_one.lines().any(|line| line == "after-restart"), "{partition_one}");
    broker.stop();
}

/// Committed offsets by (topic, partition), from `group describe` JSON.
fn committed(description: &serde_json::Value) -> Vec<(String, i64, Option<i64>)> {
    let partitions = description["partitions"].as_array().unwrap();
    partitions
        .iter()
        .map(|partition| {
            (
                partition["topic"].as_str().unwrap().to_owned(),
                partition["partition"].as_i64().unwrap(),
                partition["committed"].as_i64(),
            )
        })
        .collect()
}

fn committed_sum(description: &serde_json::Value) -> i64 {
    committed(description).iter().map(|(_, _, offset)| offset.unwrap()).sum()
}

/// JSON records printed by `consume --format json`, as sorted (partition, offset).
fn consumed(stdout: &str) -> Vec<(i64, i64)> {
    let mut records: Vec<(i64, i64)> = stdout
        .lines()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            (record["partition"].as_i64().unwrap(), record["offset"].as_i64().unwrap())
        })
        .collect();
    records.sort_unstable();
    records
}

#[test]
fn a_consumer_group_commits_its_progress_and_reports_lag_resets_and_deletes() {
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start(temp.path());
    broker.ok(&["topic", "create", "events", "--partitions", "2"], "");
    let first: String = (0..10).map(|index| format!("k{index}:v{index}\n")).collect();
    broker.ok(&["produce", "events", "--key-separator", ":"], &first);
    let topic = broker.json(&["topic", "describe", "events"]);
    let ends: Vec<i64> =
        topic["partitions"].as_array().unwrap().iter().map(|p| p["high_watermark"].as_i64().unwrap()).collect();
    assert!(ends.iter().all(|end| *end > 0) && ends.iter().sum::<i64>() == 10, "both partitions used: {ends:?}");

    // A new group starts at --offset beginning and commits what it printed.
    let consume = ["consume", "events", "--group", "g", "--offset", "beginning", "--max-messages", "10"];
    let records = broker.ok(&[&consume[..], &["--timeout-ms", "10000", "--format", "json"]].concat(), "");
    let every_record: Vec<(i64, i64)> =
        (0..2).flat_map(|partition| (0..ends[partition as usize]).map(move |offset| (partition, offset))).collect();
    assert_eq!(consumed(&records), every_record, "{records}");
    let description = broker.describe_group("g");
    assert_eq!(description["group_id"], "g");
    assert_eq!(description["state"], "Empty", "the member left on exit: {description}");
    assert_eq!(description["members"], serde_json::json!([]));
    assert_eq!(
        committed(&description),
        vec![("events".to_owned(), 0, Some(ends[0])), ("events".to_owned(), 1, Some(ends[1]))]
    );
    assert_eq!(committed_sum(&description), 10);
    assert_eq!(description["total_lag"], 0);

    // New records show up as lag; a reset to the earliest offsets makes all of them lag.
    let second: String = (10..15).map(|index| format!("k{index}:v{index}\n")).collect();
    broker.ok(&["produce", "events", "--key-separator", ":"], &second);
    assert_eq!(broker.describe_group("g")["total_lag"], 5);
    let reset = broker.json(&["group", "reset-offsets", "g", "--topic", "events", "--to-earliest"]);
    assert_eq!(
        reset["offsets"],
        serde_json::json!([
            {"topic": "events", "partition": 0, "offset": 0},
            {"topic": "events", "partition": 1, "offset": 0},
        ])
    );
    let description = broker.describe_group("g");
    assert_eq!(description["total_lag"], 15);
    assert_eq!(committed_sum(&description), 0);
    let lags: Vec<i64> =
        description["partitions"].as_array().unwrap().iter().map(|p| p["lag"].as_i64().unwrap()).collect();
    let ends: Vec<i64> = description["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|partition| partition["log_end_offset"].as_i64().unwrap())
        .collect();
    assert_eq!(lags, ends);

    // The next member of the group continues from the committed (reset) offsets:
    // exactly the 15 records, each once, then nothing more.
    let again = broker.ok(&["consume", "events", "--group", "g", "--timeout-ms", "3000", "--format", "json"], "");
    let every_record: Vec<(i64, i64)> =
        (0..2).flat_map(|partition| (0..ends[partition as usize]).map(move |offset| (partition, offset))).collect();
    assert_eq!(every_record.len(), 15);
    assert_eq!(consumed(&again), every_record, "{again}");
    let description = broker.describe_group("g");
    assert_eq!(committed_sum(&description), 15);
    assert_eq!(description["total_lag"], 0);

    assert_eq!(broker.json(&["group", "list"]), serde_json::json!([{"group_id": "g", "state": "Empty", "members": 0}]));
    assert_eq!(broker.ok(&["group", "list"], ""), "GROUP  STATE  MEMBERS\ng      Empty  0\n");
    assert_eq!(broker.ok(&["group", "delete", "g"], "").trim(), "deleted group g");
    let gone = broker.run(&["group", "describe", "g"], "");
    assert_eq!(gone.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&gone.stderr).contains("GroupIdNotFound"), "{gone:?}");
    assert_eq!(broker.json(&["group", "list"]), serde_json::json!([]));
    broker.stop();
}

#[test]
fn a_group_with_a_member_refuses_resets_and_deletes_until_the_member_leaves() {
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start(temp.path());
    broker.ok(&["topic", "create", "jobs"], "");
    broker.ok(&["produce", "jobs"], "a\nb\nc\n");
    let mut member = KillOnDrop(
        weir()
            .args(["consume", "jobs", "--group", "workers", "--offset", "beginning", "--timeout-ms", "60000"])
            .env("WEIR_BROKERS", &broker.address)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut printed = BufReader::new(member.0.stdout.take().unwrap()).lines();
    let values: Vec<String> = printed.by_ref().take(3).map(Result::unwrap).collect();
    assert_eq!(values, ["a", "b", "c"]);

    // The member owns the partition it printed records of.
    let description = broker.describe_group("workers");
    assert_eq!(description["state"], "Stable", "{description}");
    let members = description["members"].as_array().unwrap();
    assert_eq!(members.len(), 1, "{description}");
    assert_eq!(members[0]["assigned"], serde_json::json!([{"topic": "jobs", "partition": 0}]));
    assert_eq!(members[0]["subscribed_topics"], serde_json::json!(["jobs"]));
    assert_eq!(description["partitions"][0]["owner"], members[0]["member_id"]);
    assert_eq!(broker.json(&["group", "list"])[0]["members"], 1);
    for refused in [
        &["group", "reset-offsets", "workers", "--topic", "jobs", "--to-earliest"][..],
        &["group", "delete", "workers"][..],
    ] {
        let output = broker.run(refused, "");
        assert_eq!(output.status.code(), Some(1), "weir {refused:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("NonEmptyGroup"), "{output:?}");
    }

    // Ctrl-C: the member commits what it printed and leaves.
    let interrupted = Command::new("kill").args(["-INT", &member.0.id().to_string()]).status().unwrap();
    assert!(interrupted.success());
    let status = member.0.wait().unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(printed.count(), 0, "nothing printed after the first three");
    let description = broker.describe_group("workers");
    assert_eq!(description["state"], "Empty");
    assert_eq!(committed(&description), vec![("jobs".to_owned(), 0, Some(3))]);
    assert_eq!(description["total_lag"], 0);
    let reset = broker.json(&["group", "reset-offsets", "workers", "--topic", "jobs", "--to-offset", "1"]);
    assert_eq!(reset["offsets"], serde_json::json!([{"topic": "jobs", "partition": 0, "offset": 1}]));
    assert_eq!(broker.describe_group("workers")["total_lag"], 2);
    broker.stop();
}

#[test]
fn client_commands_report_broker_errors_clearly() {
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start(temp.path());
    let unknown = broker.run(&["produce", "missing"], "x\n");
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("UnknownTopicOrPartition"));
    let bad_config =
        broker.run(&["topic", "create", "t", "--config", "retention.ms=soon", "--config", "colour=red"], "");
    assert_eq!(bad_config.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&bad_config.stderr);
    assert!(
        stderr.contains("InvalidConfig") && stderr.contains("retention.ms") && stderr.contains("colour"),
        "{stderr}"
    );
    let bad_name = broker.run(&["topic", "create", "no/slashes"], "");
    assert!(String::from_utf8_lossy(&bad_name.stderr).contains("InvalidTopic"));
    broker.stop();

    let nowhere = weir().args(["topic", "list", "--brokers", "127.0.0.1:1"]).output().unwrap();
    assert_eq!(nowhere.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&nowhere.stderr).contains("cannot connect to 127.0.0.1:1"));
}

#[test]
fn serve_rejects_bad_config_files_with_every_problem() {
    let temp = tempfile::tempdir().unwrap();
    let config = temp.path().join("weir.toml");
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\nrpc_threads = 0\n[limits]\nnesting_limit = 2\n").unwrap();
    let output = weir().args(["serve", "--config"]).arg(&config).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("rpc_threads") && stderr.contains("nesting_limit"), "{stderr}");
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\ncolour = \"red\"\n").unwrap();
    let unknown = weir().args(["serve", "--config"]).arg(&config).output().unwrap();
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("colour"));
}

#[test]
fn dump_log_prints_every_batch_and_record() {
    let temp = tempfile::tempdir().unwrap();
    partition_left_uncleanly(temp.path(), 3);
    let segment = temp.path().join("orders-0/00000000000000000000.log");
    let output = weir().args(["dump-log", "--records", "--format", "json"]).arg(&segment).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8(output.stdout).unwrap();
    let batches: Vec<&str> = stdout.lines().filter(|line| line.contains("\"valid\":true")).collect();
    assert_eq!(batches.len(), 3, "{stdout}");
    assert!(
        stdout.contains("{\"offset\":2,\"timestamp\":1700000000002,\"key\":\"key\",\"value\":\"value 2\"}"),
        "{stdout}"
    );
}

#[test]
fn bad_usage_and_bad_input_are_reported() {
    let usage = weir().args(["serve", "--no-such-flag"]).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("--no-such-flag"));
    let bad_acks = weir().args(["produce", "orders", "--acks", "2"]).output().unwrap();
    assert_eq!(bad_acks.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad_acks.stderr).contains("expected 0, 1 or all"));
    let bad_offset = weir().args(["consume", "orders", "--offset", "-5"]).output().unwrap();
    assert_eq!(bad_offset.status.code(), Some(2));
    let exact_offset_in_group = weir().args(["consume", "orders", "--group", "g", "--offset", "5"]).output().unwrap();
    assert_eq!(exact_offset_in_group.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&exact_offset_in_group.stderr).contains("cannot be used with --group"));
    let partition_in_group = weir().args(["consume", "orders", "--group", "g", "--partition", "1"]).output().unwrap();
    assert_eq!(partition_in_group.status.code(), Some(2));
    let no_target = weir().args(["group", "reset-offsets", "g", "--topic", "orders"]).output().unwrap();
    assert_eq!(no_target.status.code(), Some(2));
    let two_targets =
        weir().args(["group", "reset-offsets", "g", "--topic", "orders", "--to-earliest", "--to-latest"]).output();
    assert_eq!(two_targets.unwrap().status.code(), Some(2));

    let temp = tempfile::tempdir().unwrap();
    let missing = weir().arg("dump-log").arg(temp.path().join("nope.log")).output().unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope.log"));

    let garbage = temp.path().join("garbage.log");
    std::fs::write(&garbage, [0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 1, 2]).unwrap();
    let damaged = weir().arg("dump-log").arg(&garbage).output().unwrap();
    assert_eq!(damaged.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&damaged.stderr).contains("at byte 0"),
        "{}",
        String::from_utf8_lossy(&damaged.stderr)
    );
}

fn plugin_file(name: &str) -> String {
    let dir = match std::env::var_os("WEIR_PLUGIN_DIR") {
        Some(dir) => std::path::PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins/wasm32-wasip2/release"),
    };
    let path = dir.join(format!("{name}.wasm"));
    assert!(path.exists(), "{}: build the plugins first: ./scripts/build-plugins.sh", path.display());
    path.to_string_lossy().into_owned()
}

#[test]
fn plugins_upload_attach_intercept_and_report_through_the_cli() {
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start_relaxed(&temp.path().join("data"));
    broker.ok(&["topic", "create", "events"], "");
    let uploaded = broker.ok(&["plugin", "upload", &plugin_file("json_validator"), "--name", "json"], "");
    assert!(uploaded.starts_with("uploaded plugin json (produce-interceptor, "), "{uploaded}");
    assert!(uploaded.trim_end().ends_with(": ready"), "waits for the compile: {uploaded}");
    let mismatch =
        broker.run(&["plugin", "upload", &plugin_file("redact_field"), "--name", "x", "--hook", "transform"], "");
    assert!(!mismatch.status.success());
    let stderr = String::from_utf8_lossy(&mismatch.stderr);
    assert!(stderr.contains("InvalidPlugin") && stderr.contains("is a consume-interceptor"), "{stderr}");

    let attached = broker.ok(&["topic", "add-interceptor", "events", "--plugin", "json"], "");
    assert_eq!(attached.trim(), "attached json to events as a produce-interceptor (fail-closed)");
    assert_eq!(broker.ok(&["produce", "events"], "{\"ok\":1}\n").trim(), "1 record(s) acknowledged");
    let refused = broker.run(&["produce", "events"], "not json\n");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("InvalidRecord") && stderr.contains("record 0: invalid JSON"), "{stderr}");

    broker.ok(&["plugin", "upload", &plugin_file("redact_field"), "--name", "redact"], "");
    broker.ok(&["topic", "add-interceptor", "events", "--plugin", "redact", "--config", "field=ok"], "");
    let consumed = broker.ok(&["consume", "events", "--offset", "beginning", "--max-messages", "1"], "");
    assert_eq!(consumed.trim(), "{\"ok\":\"***\"}");
    let interceptors = broker.ok(&["topic", "interceptors", "events"], "");
    assert_eq!(interceptors.lines().count(), 2, "{interceptors}");
    let json = broker.json(&["plugin", "describe", "json"]);
    assert_eq!((json["hook"].as_str(), json["attached_to"][0].as_str()), (Some("produce-interceptor"), Some("events")));
    assert!(json["calls"].as_u64().unwrap() >= 2, "{json}");
    let in_use = broker.run(&["plugin", "delete", "json"], "");
    assert!(String::from_utf8_lossy(&in_use.stderr).contains("PluginInUse"));
    broker.ok(&["topic", "remove-interceptor", "events", "--plugin", "json"], "");
    broker.ok(&["plugin", "delete", "json"], "");
    assert_eq!(broker.ok(&["plugin", "list", "--format", "json"], "").matches("\"name\"").count(), 1);
    assert!(broker.ok(&["plugin", "logs", "redact"], "").contains("uploaded"));

    broker.ok(&["topic", "create", "orders", "--partitions", "3"], "");
    broker.ok(&["plugin", "upload", &plugin_file("region_partitioner"), "--name", "regions"], "");
    let set = ["topic", "set-partitioner", "orders", "--plugin", "regions", "--config", "region.eu=2"];
    assert_eq!(broker.ok(&set, "").trim(), "partitioner of orders is now regions");
    // Two producer processes: the first compiles the partitioner and keeps the
    // artifact in the cache directory, the second loads it from there.
    let cache = temp.path().join("compile-cache");
    for line in ["eu:1 first\n", "eu:2 second\n"] {
        let produce = ["produce", "orders", "--key-separator", " "];
        let output = broker.run_with_env(&produce, line, &[("WEIR_PLUGIN_CACHE_DIR", &cache)]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
    let cached: Vec<_> = std::fs::read_dir(&cache).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert_eq!(cached.len(), 1, "one artifact: {cached:?}");
    let logs = broker.ok(&["plugin", "logs", "regions"], "");
    assert_eq!(logs.matches("host: compiled").count(), 1, "{logs}");
    assert_eq!(logs.matches("from the compile cache").count(), 1, "{logs}");
    let two = broker.ok(&["consume", "orders", "--partition", "2", "--offset", "beginning", "--timeout-ms", "500"], "");
    assert_eq!(two.lines().collect::<Vec<_>>(), vec!["first", "second"], "both eu keys in partition 2");
    broker.ok(&["topic", "clear-partitioner", "orders"], "");
    assert!(broker.ok(&["topic", "interceptors", "orders"], "").trim().is_empty());
    broker.stop();
}

#[test]
fn a_transform_killed_mid_stream_produces_every_output_exactly_once() {
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start_relaxed(&temp.path().join("data"));
    broker.ok(&["topic", "create", "events", "--partitions", "2"], "");
    broker.ok(&["topic", "create", "eu"], "");
    broker.ok(&["topic", "create", "elsewhere", "--partitions", "2"], "");
    broker.ok(&["plugin", "upload", &plugin_file("route_transform"), "--name", "route"], "");
    let regions = ["eu", "us", "ap"];
    let input: String = (0..4000).map(|n| format!("{{\"n\":{n},\"region\":\"{}\"}}\n", regions[n % 3])).collect();
    assert_eq!(broker.ok(&["produce", "events"], &input).trim(), "4000 record(s) acknowledged");
    let deploy = [
        "transform",
        "deploy",
        "route",
        "--plugin",
        "route",
        "--input",
        "events",
        "--output",
        "eu",
        "--output",
        "elsewhere",
        "--from",
        "earliest",
        "--config",
        "field=region",
        "--config",
        "match=eu",
    ];
    broker.ok(&deploy, "");
    std::thread::sleep(std::time::Duration::from_millis(150));
    drop(broker); // SIGKILL, most likely mid-stream

    let broker = Broker::start_relaxed(&temp.path().join("data"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let status = broker.json(&["transform", "describe", "route"]);
        if status["lag"] == 0 && status["state"] == "running" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the transform did not catch up: {status}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let mut seen = Vec::new();
    for (topic, partitions) in [("eu", 1), ("elsewhere", 2)] {
        for partition in 0..partitions {
            let out = broker.ok(
                &[
                    "consume",
                    topic,
                    "--partition",
                    &partition.to_string(),
                    "--offset",
                    "beginning",
                    "--timeout-ms",
                    "1000",
                ],
                "",
            );
            for line in out.lines() {
                let value: serde_json::Value = serde_json::from_str(line).unwrap();
                assert_eq!(value["region"] == "eu", topic == "eu", "{topic}: {line}");
                seen.push(value["n"].as_u64().unwrap());
            }
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..4000).collect::<Vec<u64>>(), "every input once, none twice");
    assert_eq!(broker.ok(&["transform", "delete", "route"], "").trim(), "deleted transform route");
    broker.stop();
}

#[test]
fn a_second_broker_on_a_live_data_directory_is_refused_and_the_first_keeps_its_records() {
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start(temp.path());
    broker.ok(&["topic", "create", "orders", "--partitions", "1"], "");
    broker.ok(&["produce", "orders"], "one\ntwo\nthree\n");
    let second = weir()
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(temp.path())
        .env_remove("WEIR_CONFIG")
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&second.stderr);
    let holder = format!("is in use by another process (pid {})", broker.child.0.id());
    assert!(stderr.contains(&holder), "{stderr}");
    broker.ok(&["produce", "orders"], "four\n");
    let read = ["consume", "orders", "--offset", "beginning", "--max-messages", "4"];
    assert_eq!(broker.ok(&read, ""), "one\ntwo\nthree\nfour\n");
    broker.stop();
    let broker = Broker::start(temp.path());
    assert_eq!(broker.ok(&read, ""), "one\ntwo\nthree\nfour\n");
    broker.stop();
}

#[test]
fn consuming_a_fenced_partition_fails_with_the_reason_and_repair_brings_it_back() {
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start(temp.path());
    broker.ok(&["topic", "create", "orders", "--partitions", "1"], "");
    for value in ["first\n", "second\n", "third\n"] {
        broker.ok(&["produce", "orders"], value); // one batch each
    }
    drop(broker); // SIGKILL: the next start scans the segment
    let segment = temp.path().join("orders-0/00000000000000000000.log");
    let mut bytes = std::fs::read(&segment).unwrap();
    let (first_size, second_size) = {
        let (first, rest) = abi::batch::BatchView::split_first(&bytes).unwrap();
        (first.size_bytes(), abi::batch::BatchView::split_first(rest).unwrap().0.size_bytes())
    };
    let damaged = first_size + second_size - 2; // inside the second batch's last record
    bytes[damaged] ^= 0x20;
    std::fs::write(&segment, &bytes).unwrap();

    let broker = Broker::start(temp.path());
    let consume = ["consume", "orders", "--offset", "beginning", "--timeout-ms", "600000"];
    let output = broker.run(&consume, "");
    assert_eq!(output.status.code(), Some(1), "a fenced partition is an error, not silence");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("partition orders-0 is offline") && stderr.contains("CRC"), "{stderr}");
    broker.stop();

    let partition_dir = temp.path().join("orders-0");
    let inspected = weir().arg("repair").arg(&partition_dir).output().unwrap();
    assert_eq!(inspected.status.code(), Some(1), "damage found");
    let report = String::from_utf8_lossy(&inspected.stdout);
    let expected = format!("damage in segment 0 at byte {}", first_size);
    assert!(report.contains(&expected) && report.contains("below offset 1 is intact"), "{report}");
    assert_eq!(std::fs::read(&segment).unwrap(), bytes, "inspection writes nothing");

    let broker = Broker::start(temp.path());
    let refused = weir().args(["repair", "--truncate"]).arg(&partition_dir).output().unwrap();
    assert!(String::from_utf8_lossy(&refused.stderr).contains("in use by another process"), "broker running");
    broker.stop();
    let repaired = weir().args(["repair", "--truncate"]).arg(&partition_dir).output().unwrap();
    assert!(repaired.status.success(), "{}", String::from_utf8_lossy(&repaired.stderr));
    let aside = partition_dir.join(format!("00000000000000000000.log.torn-at-{}", first_size));
    assert_eq!(std::fs::read(aside).unwrap(), bytes[first_size..], "the cut bytes are kept");

    let broker = Broker::start(temp.path());
    broker.ok(&["produce", "orders"], "fourth\n");
    let read = ["consume", "orders", "--offset", "beginning", "--max-messages", "2", "--format", "json"];
    let records: Vec<serde_json::Value> =
        broker.ok(&read, "").lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let read_back: Vec<(i64, &str)> =
        records.iter().map(|record| (record["offset"].as_i64().unwrap(), record["value"].as_str().unwrap())).collect();
    assert_eq!(read_back, [(0, "first"), (1, "fourth")]);
    broker.stop();
}

#[test]
fn consume_prints_the_records_before_an_undecodable_batch_then_says_how_to_skip_it() {
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start(temp.path());
    broker.ok(&["topic", "create", "orders", "--partitions", "1"], "");
    broker.ok(&["produce", "orders"], "first\nsecond\n");
    drop(broker); // SIGKILL: the next start scans the segment
                  // Offset 2: a batch whose CRC and header are valid but whose records are plain
                  // bytes labelled lz4 (what a broken producer stored before records were checked).
    let mut bad = BatchBuilder::new(1_700_000_000_000);
    bad.push(1_700_000_000_000, None, Some(b"poison"), &[]);
    let mut bad = bad.encode();
    abi::batch::set_base_offset(&mut bad, 2);
    bad[abi::batch::field::ATTRIBUTES + 1] |= 3;
    abi::batch::reseal(&mut bad);
    let segment = temp.path().join("orders-0/00000000000000000000.log");
    let mut file = std::fs::OpenOptions::new().append(true).open(&segment).unwrap();
    file.write_all(&bad).unwrap();
    drop(file);

    let broker = Broker::start(temp.path());
    broker.ok(&["produce", "orders"], "third\n");
    let output = broker.run(&["consume", "orders", "--offset", "beginning", "--timeout-ms", "600000"], "");
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "first\nsecond\n", "the records before the bad batch");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("orders-0: the batch at offset 2 is corrupt")
            && stderr.contains("to skip it: weir consume orders --partition 0 --offset 3"),
        "{stderr}"
    );
    let skipped = broker.ok(&["consume", "orders", "--partition", "0", "--offset", "3", "--max-messages", "1"], "");
    assert_eq!(skipped, "third\n");
    broker.stop();
}

#[test]
fn produce_counts_what_was_acknowledged_before_the_broker_went_away() {
    let temp = tempfile::tempdir().unwrap();
    let broker = Broker::start(temp.path());
    broker.ok(&["topic", "create", "events"], "");
    // Ends by itself once its stdin closes (within the delivery timeout).
    let mut producer = weir()
        .args(["produce", "events", "--delivery-timeout-ms", "2000"])
        .env("WEIR_BROKERS", &broker.address)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = producer.stdin.take().unwrap();
    stdin.write_all(b"one\ntwo\nthree\n").unwrap();
    stdin.flush().unwrap();
    let read = ["consume", "events", "--offset", "beginning", "--max-messages", "3", "--timeout-ms", "600000"];
    assert_eq!(broker.ok(&read, ""), "one\ntwo\nthree\n", "the first three are acknowledged and readable");
    drop(broker); // SIGKILL
    stdin.write_all(b"four\nfive\n").unwrap();
    drop(stdin);
    let output = producer.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "3 record(s) acknowledged\n");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("2 record(s) failed") || stderr.contains("after 3 acknowledged and"), "{stderr}");
}

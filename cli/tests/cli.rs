//! The `weir` binary as a user runs it: `serve` recovers a partition left by an
//! unclean stop and shuts down cleanly on SIGTERM; `dump-log` prints every batch;
//! bad usage and bad input give clear errors and the documented exit codes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers fail loudly by design

use std::io::{BufRead, BufReader};
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

#[test]
fn serve_recovers_and_stops_cleanly_on_sigterm() {
    let temp = tempfile::tempdir().unwrap();
    partition_left_uncleanly(temp.path(), 5);
    let mut child = KillOnDrop(
        weir()
            .args(["serve", "--data-dir"])
            .arg(temp.path())
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if line.contains("Ctrl-C to stop") {
            break;
        }
    }
    let log = seen.join("\n");
    assert!(log.contains("recovered after an unclean stop") && log.contains("partition_count=1"), "{log}");
    let killed = Command::new("kill").args(["-TERM", &child.0.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status}: {}", rest.join("\n"));
    assert!(rest.join("\n").contains("stopped cleanly"));
    assert!(temp.path().join("orders-0/clean-shutdown").exists(), "clean-shutdown marker written");
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

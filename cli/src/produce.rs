//! `weir produce TOPIC`: one record per stdin line, sent with the client's
//! idempotent producer; prints how many records were acknowledged.

use std::io::BufRead;
use std::time::Duration;

use anyhow::Context;
use client::{Acks, Producer, ProducerConfig, ProducerRecord};
use serde_json::json;

use crate::output::{key_value, print};
use crate::ClientArgs;

#[derive(Debug, clap::Args)]
pub struct ProduceArgs {
    topic: String,
    /// The key of every record.
    #[arg(long, conflicts_with = "key_separator")]
    key: Option<String>,
    /// Split each line at the first SEP into key and value (lines without SEP have no key).
    #[arg(long, value_name = "SEP")]
    key_separator: Option<String>,
    /// Send every record to this partition (default: the topic's partitioner plugin if it has one, else by key hash, or spread).
    #[arg(long)]
    partition: Option<i32>,
    /// When a record counts as acknowledged: 0, 1 or all.
    #[arg(long, default_value = "all", value_parser = parse_acks)]
    acks: Acks,
    /// A header of every record (repeatable).
    #[arg(long = "header", value_name = "KEY=VALUE", value_parser = key_value)]
    headers: Vec<(String, String)>,
    /// How long a record may take to be acknowledged, retries included, before it
    /// counts as failed (Kafka's delivery.timeout.ms).
    #[arg(long, value_name = "MS", default_value_t = 120_000)]
    delivery_timeout_ms: u64,
    #[command(flatten)]
    client: ClientArgs,
}

/// Records sent but not yet counted.
const DELIVERIES_IN_FLIGHT_MAX: usize = 100_000;

fn count(
    outcome: Result<client::RecordMetadata, client::ClientError>,
    acknowledged: &mut usize,
    failures: &mut Vec<String>,
) {
    match outcome {
        Ok(_) => *acknowledged += 1,
        Err(error) => failures.push(error.to_string()),
    }
}

fn parse_acks(value: &str) -> Result<Acks, String> {
    Acks::parse(value).ok_or_else(|| format!("expected 0, 1 or all, got {value:?}"))
}

pub async fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let config = ProducerConfig {
        common: args.client.common(),
        acks: args.acks,
        delivery_timeout: Duration::from_millis(args.delivery_timeout_ms),
        ..ProducerConfig::default()
    };
    let producer = Producer::new(config)?;
    let (mut acknowledged, mut failures) = (0usize, Vec::new());
    let mut deliveries = std::collections::VecDeque::new();
    // A failure that stops reading stdin; what was sent before it is still counted.
    let mut stopped: Option<anyhow::Error> = None;
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = match line.context("reading stdin") {
            Ok(line) => line,
            Err(error) => {
                stopped = Some(error);
                break;
            }
        };
        match producer.send(record_of(&args, line)).await {
            Ok(delivery) => deliveries.push_back(delivery),
            Err(error) => {
                stopped = Some(error.into());
                break;
            }
        }
        // Count acknowledgements as they come: a bounded window, not one future
        // per line of a long input.
        while deliveries.len() > DELIVERIES_IN_FLIGHT_MAX {
            if let Some(delivery) = deliveries.pop_front() {
                count(delivery.await, &mut acknowledged, &mut failures);
            }
        }
    }
    producer.flush().await;
    for delivery in deliveries {
        count(delivery.await, &mut acknowledged, &mut failures);
    }
    print(args.client.format, json!({"acknowledged": acknowledged, "failed": failures.len()}), || {
        format!("{acknowledged} record(s) acknowledged")
    });
    match (stopped, failures.first()) {
        (Some(error), _) => Err(error.context(format!(
            "stopped reading stdin after {acknowledged} acknowledged and {} failed record(s)",
            failures.len()
        ))),
        (None, Some(first)) => anyhow::bail!("{} record(s) failed; first error: {first}", failures.len()),
        (None, None) => Ok(()),
    }
}

/// The record for one line of stdin.
fn record_of(args: &ProduceArgs, line: String) -> ProducerRecord {
    let (key, value) = match (&args.key, &args.key_separator) {
        (Some(key), _) => (Some(key.clone()), line),
        (None, Some(separator)) => match line.split_once(separator.as_str()) {
            Some((key, value)) => (Some(key.to_owned()), value.to_owned()),
            None => (None, line),
        },
        (None, None) => (None, line),
    };
    let mut record = ProducerRecord::new(args.topic.clone(), value);
    record.key = key.map(String::into_bytes);
    record.partition = args.partition;
    record.headers = args.headers.iter().map(|(key, value)| (key.clone(), Some(value.clone().into_bytes()))).collect();
    record
}

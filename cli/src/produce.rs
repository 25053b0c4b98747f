//! `weir produce TOPIC`: one record per stdin line, sent with the client's
//! idempotent producer; prints how many records were acknowledged.

use std::io::BufRead;

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
    let config = ProducerConfig { common: args.client.common(), acks: args.acks, ..ProducerConfig::default() };
    let producer = Producer::new(config)?;
    let (mut acknowledged, mut failures) = (0usize, Vec::new());
    let mut deliveries = std::collections::VecDeque::new();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.context("reading stdin")?;
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
        record.headers =
            args.headers.iter().map(|(key, value)| (key.clone(), Some(value.clone().into_bytes()))).collect();
        deliveries.push_back(producer.send(record).await?);
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
    if let Some(first) = failures.first() {
        anyhow::bail!("{} record(s) failed; first error: {first}", failures.len());
    }
    Ok(())
}

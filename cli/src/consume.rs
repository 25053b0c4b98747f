//! `weir consume TOPIC`: prints records from one or every partition, from an
//! offset, until `--max-messages` or `--timeout-ms` without a record.

use std::time::Duration;

use client::{Consumer, ConsumerConfig, Offset};
use serde_json::json;

use crate::output::bytes_text;
use crate::{ClientArgs, Format};

#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    topic: String,
    /// Read only this partition (default: all).
    #[arg(long)]
    partition: Option<i32>,
    /// Where to start: an offset, `beginning` or `end`.
    #[arg(long, default_value = "end", value_parser = parse_offset)]
    offset: Offset,
    /// Stop after this many records.
    #[arg(long)]
    max_messages: Option<usize>,
    /// Stop when no record arrived for this long (default: wait forever).
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Consume as a member of this consumer group (not available yet: consumer
    /// groups come next; the command says so and exits).
    #[arg(long)]
    group: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

fn parse_offset(value: &str) -> Result<Offset, String> {
    match value {
        "beginning" | "earliest" => Ok(Offset::Beginning),
        "end" | "latest" => Ok(Offset::End),
        number => number
            .parse::<i64>()
            .ok()
            .filter(|offset| *offset >= 0)
            .map(Offset::At)
            .ok_or_else(|| format!("expected an offset, `beginning` or `end`, got {value:?}")),
    }
}

pub async fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    if let Some(group) = &args.group {
        anyhow::bail!("consumer groups are not available yet (--group {group}); use --partition and --offset");
    }
    let config = ConsumerConfig { common: args.client.common(), ..ConsumerConfig::default() };
    let consumer = Consumer::new(config)?;
    let partitions: Vec<(String, i32)> = match args.partition {
        Some(partition) => vec![(args.topic.clone(), partition)],
        None => {
            let admin = client::Admin::new(args.client.common())?;
            let description = admin.describe_topic(&args.topic).await?;
            description.partitions.iter().map(|partition| (args.topic.clone(), partition.partition)).collect()
        }
    };
    consumer.assign(&partitions).await?;
    consumer.seek_all(args.offset)?;
    let max_messages = args.max_messages.unwrap_or(usize::MAX);
    let idle = args.timeout_ms.map(Duration::from_millis);
    let mut printed = 0;
    while printed < max_messages {
        let records = consumer.poll(idle.unwrap_or(Duration::from_secs(3600))).await?;
        if records.is_empty() && idle.is_some() {
            break;
        }
        for record in records.into_iter().take(max_messages - printed) {
            print_record(args.client.format, &record);
            printed += 1;
        }
    }
    Ok(())
}

fn print_record(format: Format, record: &client::ConsumerRecord) {
    let value = record.value.as_deref().map(bytes_text);
    match format {
        Format::Text => println!("{}", value.unwrap_or_default()),
        Format::Json => {
            let headers: serde_json::Map<String, serde_json::Value> = record
                .headers
                .iter()
                .map(|(key, value)| (key.clone(), json!(value.as_deref().map(bytes_text))))
                .collect();
            let object = json!({
                "topic": &*record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp": record.timestamp_ms,
                "key": record.key.as_deref().map(bytes_text),
                "value": value,
                "headers": headers,
            });
            println!("{object}");
        }
    }
}

//! `weir consume TOPIC`: prints records until `--max-messages` or `--timeout-ms`
//! without a record, in one of two ways:
//!
//! - alone: from one or every partition, starting at `--offset` (an offset,
//!   `beginning` or `end`);
//! - with `--group G`, as a member of consumer group G: the group shares the
//!   topic's partitions between its members, each partition starts at the
//!   group's committed offset (or, without one, at `--offset beginning|end`,
//!   the group's `auto.offset.reset`), and progress is committed in the
//!   background, then once more on exit (after `--max-messages`, `--timeout-ms`
//!   or Ctrl-C) before the member leaves the group. Records a poll returned past
//!   `--max-messages` are not printed and not committed.

use std::collections::BTreeMap;
use std::time::Duration;

use client::{ClientError, Consumer, ConsumerConfig, Offset, OffsetReset};
use serde_json::json;

use crate::output::bytes_text;
use crate::{ClientArgs, Format};

/// How long the final commit and the leave may take together on exit.
const CLOSE_WAIT_MAX: Duration = Duration::from_secs(15);

#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    topic: String,
    /// Read only this partition (default: all; not with --group).
    #[arg(long, conflicts_with = "group")]
    partition: Option<i32>,
    /// Where to start: an offset, `beginning` or `end` (the default). With
    /// --group: where partitions without a committed offset start (`beginning`
    /// or `end`).
    #[arg(long, value_parser = parse_offset)]
    offset: Option<Offset>,
    /// Stop after this many records.
    #[arg(long)]
    max_messages: Option<usize>,
    /// Stop when no record arrived for this long (default: wait forever; with
    /// --group, joining the group counts too).
    #[arg(long)]
    timeout_ms: Option<u64>,
    /// Consume as a member of this consumer group, from its committed offsets,
    /// committing progress.
    #[arg(long)]
    group: Option<String>,
    #[command(flatten)]
    client: ClientArgs,
}

impl ConsumeArgs {
    /// What clap cannot check: a group starts at its committed offsets, so
    /// `--group` takes no exact `--offset`.
    pub fn check(&self) -> Result<(), String> {
        match (&self.group, self.offset) {
            (Some(group), Some(Offset::At(offset))) => Err(format!(
                "--offset {offset} cannot be used with --group {group}: a group starts at its committed offsets \
                 (--offset beginning|end chooses where partitions without one start; \
                 `weir group reset-offsets` moves them)"
            )),
            _ => Ok(()),
        }
    }
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
    match args.group.clone() {
        Some(group) => consume_in_group(&args, group).await,
        None => consume_alone(&args).await,
    }
}

async fn consume_alone(args: &ConsumeArgs) -> anyhow::Result<()> {
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
    consumer.seek_all(args.offset.unwrap_or(Offset::End))?;
    let printed = print_records(args, &consumer, false).await;
    consumer.close().await;
    printed
}

async fn consume_in_group(args: &ConsumeArgs, group: String) -> anyhow::Result<()> {
    let auto_offset_reset = match args.offset {
        Some(Offset::Beginning) => OffsetReset::Earliest,
        Some(Offset::End) => OffsetReset::Latest,
        _ => ConsumerConfig::default().auto_offset_reset,
    };
    let config = ConsumerConfig {
        common: args.client.common(),
        group_id: Some(group),
        auto_offset_reset,
        auto_commit: true,
        ..ConsumerConfig::default()
    };
    let consumer = Consumer::new(config)?;
    consumer.subscribe(std::slice::from_ref(&args.topic), None).await?;
    let printed = print_records(args, &consumer, true).await;
    let closed = tokio::time::timeout(CLOSE_WAIT_MAX, async {
        let committed = consumer.commit().await;
        consumer.close().await;
        committed
    })
    .await;
    printed?;
    match closed {
        Ok(committed) => Ok(committed?),
        Err(_) => anyhow::bail!("the final commit and leave took over {} s", CLOSE_WAIT_MAX.as_secs()),
    }
}

/// Polls and prints until `--max-messages`, `--timeout-ms` without a record, or
/// (with `stop_on_interrupt`) Ctrl-C. Records polled but not printed are given
/// back (their partitions seek to the first of them), so they are not committed.
async fn print_records(args: &ConsumeArgs, consumer: &Consumer, stop_on_interrupt: bool) -> anyhow::Result<()> {
    let max_messages = args.max_messages.unwrap_or(usize::MAX);
    let idle = args.timeout_ms.map(Duration::from_millis);
    let interrupted = async {
        // Without a signal handler (or without `stop_on_interrupt`), Ctrl-C keeps
        // its default: the process ends.
        if !stop_on_interrupt || tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::pin!(interrupted);
    let mut printed = 0;
    while printed < max_messages {
        let records = tokio::select! {
            records = consumer.poll(idle.unwrap_or(Duration::from_secs(3600))) => records.map_err(with_skip_hint)?,
            _ = &mut interrupted => break,
        };
        if records.is_empty() && idle.is_some() {
            break;
        }
        let mut unprinted: BTreeMap<(String, i32), i64> = BTreeMap::new();
        for record in records {
            if printed < max_messages {
                print_record(args.client.format, &record);
                printed += 1;
            } else {
                unprinted.entry((record.topic.to_string(), record.partition)).or_insert(record.offset);
            }
        }
        for ((topic, partition), offset) in unprinted {
            // Fails only if the group revoked the partition since this poll; its
            // position was committed then and cannot be taken back.
            let _ = consumer.seek(&topic, partition, Offset::At(offset));
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

/// A poll's error; for a batch no client can decode, with the command that skips it.
fn with_skip_hint(error: ClientError) -> anyhow::Error {
    match &error {
        ClientError::CorruptBatch { topic, partition, skip_to, .. } => {
            anyhow::anyhow!("{error}\n  to skip it: weir consume {topic} --partition {partition} --offset {skip_to}")
        }
        _ => error.into(),
    }
}

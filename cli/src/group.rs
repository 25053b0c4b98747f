//! `weir group …`: list, describe (members, committed offsets and lag), reset the
//! committed offsets of, and delete consumer groups. Everything goes through
//! `client::Admin`; the broker refuses resets and deletes while a group has
//! members (`NonEmptyGroup`).
//!
//! `reset-offsets` works in two steps: resolve the wanted offset of every chosen
//! partition with `listOffset` (`--to-offset` is kept within the partition's log
//! start offset and high watermark, as Kafka does), then set them all in one
//! `resetOffsets` call.

use clap::{Args, Subcommand};
use client::{Admin, GroupDescription, Offset, PartitionLag};
use serde_json::json;

use crate::output::{print, table};
use crate::{ClientArgs, Format};

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// List consumer groups with their state and member count.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Show a group's state, members, committed offsets and lag per partition.
    Describe {
        group: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Set a group's committed offsets for a topic (the group must have no members).
    ResetOffsets(ResetArgs),
    /// Delete a group and its committed offsets (the group must have no members).
    Delete {
        group: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(Debug, Args)]
pub struct ResetArgs {
    group: String,
    /// The topic whose offsets to set.
    #[arg(long)]
    topic: String,
    /// Only this partition (repeatable; default: every partition of the topic).
    #[arg(long = "partition")]
    partitions: Vec<i32>,
    #[command(flatten)]
    target: ResetTarget,
    #[command(flatten)]
    client: ClientArgs,
}

/// Where to move the offsets: exactly one of these.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct ResetTarget {
    /// The log start offset (everything still kept is read again).
    #[arg(long)]
    to_earliest: bool,
    /// The high watermark (skip everything produced so far).
    #[arg(long)]
    to_latest: bool,
    /// The first record at or after this time (ms since the epoch).
    #[arg(long, value_name = "MS")]
    to_timestamp: Option<i64>,
    /// This offset (kept between the log start offset and the high watermark).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i64).range(0..))]
    to_offset: Option<i64>,
}

impl ResetTarget {
    fn offset(&self) -> Offset {
        match (self.to_earliest, self.to_latest, self.to_timestamp, self.to_offset) {
            (true, ..) => Offset::Beginning,
            (_, true, ..) => Offset::End,
            (_, _, Some(timestamp_ms), _) => Offset::Timestamp(timestamp_ms),
            (_, _, _, Some(offset)) => Offset::At(offset),
            // clap requires exactly one of the four.
            (false, false, None, None) => Offset::End,
        }
    }
}

pub async fn run(command: GroupCommand) -> anyhow::Result<()> {
    match command {
        GroupCommand::List { client } => list(&client).await,
        GroupCommand::Describe { group, client } => describe(&group, &client).await,
        GroupCommand::ResetOffsets(args) => reset_offsets(&args).await,
        GroupCommand::Delete { group, client } => {
            Admin::new(client.common())?.delete_group(&group).await?;
            print(client.format, json!({"deleted": group}), || format!("deleted group {group}"));
            Ok(())
        }
    }
}

async fn list(client: &ClientArgs) -> anyhow::Result<()> {
    let groups = Admin::new(client.common())?.list_groups().await?;
    match client.format {
        Format::Json => {
            let groups: Vec<_> = groups
                .iter()
                .map(|group| json!({"group_id": group.group_id, "state": group.state, "members": group.member_count}))
                .collect();
            println!("{}", json!(groups));
        }
        Format::Text => {
            let mut rows = vec![vec!["GROUP".to_owned(), "STATE".to_owned(), "MEMBERS".to_owned()]];
            rows.extend(
                groups
                    .iter()
                    .map(|group| vec![group.group_id.clone(), group.state.clone(), group.member_count.to_string()]),
            );
            print!("{}", table(&rows));
        }
    }
    Ok(())
}

async fn describe(group_id: &str, client: &ClientArgs) -> anyhow::Result<()> {
    let admin = Admin::new(client.common())?;
    let description = admin.describe_group(group_id).await?;
    let lags = admin.lag_of(&description).await?;
    let total_lag: i64 = lags.iter().filter_map(|lag| lag.lag).sum();
    print(client.format, describe_json(&description, &lags, total_lag), || {
        describe_text(&description, &lags, total_lag)
    });
    Ok(())
}

fn describe_json(description: &GroupDescription, lags: &[PartitionLag], total_lag: i64) -> serde_json::Value {
    let partitions_json = |partitions: &[(String, i32)]| -> Vec<serde_json::Value> {
        partitions.iter().map(|(topic, partition)| json!({"topic": topic, "partition": partition})).collect()
    };
    let members: Vec<_> = description
        .members
        .iter()
        .map(|member| {
            json!({
                "member_id": member.member_id,
                "instance_id": member.instance_id,
                "member_epoch": member.member_epoch,
                "subscribed_topics": member.subscribed_topics,
                "assigned": partitions_json(&member.assigned),
                "target": partitions_json(&member.target),
            })
        })
        .collect();
    let partitions: Vec<_> = lags
        .iter()
        .map(|lag| {
            json!({
                "topic": lag.topic,
                "partition": lag.partition,
                "committed": lag.committed,
                "log_end_offset": lag.log_end_offset,
                "lag": lag.lag,
                "owner": lag.owner,
            })
        })
        .collect();
    json!({
        "group_id": description.group_id,
        "state": description.state,
        "group_epoch": description.group_epoch,
        "assignor": description.assignor,
        "members": members,
        "partitions": partitions,
        "total_lag": total_lag,
        "partitions_without_commit": lags.iter().filter(|lag| lag.lag.is_none()).count(),
    })
}

fn describe_text(description: &GroupDescription, lags: &[PartitionLag], total_lag: i64) -> String {
    let mut text = format!(
        "group {}: {}, epoch {}, assignor {}, {} member(s)\n",
        description.group_id,
        description.state,
        description.group_epoch,
        description.assignor,
        description.members.len()
    );
    if !description.members.is_empty() {
        let mut rows = vec![["MEMBER", "INSTANCE", "EPOCH", "ASSIGNED"].map(str::to_owned).to_vec()];
        rows.extend(description.members.iter().map(|member| {
            let assigned: Vec<String> =
                member.assigned.iter().map(|(topic, partition)| format!("{topic}-{partition}")).collect();
            vec![
                member.member_id.clone(),
                member.instance_id.clone().unwrap_or_else(|| "-".to_owned()),
                member.member_epoch.to_string(),
                assigned.join(","),
            ]
        }));
        text.push_str(&table(&rows));
    }
    let dash = |value: Option<i64>| value.map_or_else(|| "-".to_owned(), |value| value.to_string());
    let mut rows = vec![["TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG", "OWNER"].map(str::to_owned).to_vec()];
    rows.extend(lags.iter().map(|lag| {
        vec![
            lag.topic.clone(),
            lag.partition.to_string(),
            dash(lag.committed),
            dash((lag.log_end_offset >= 0).then_some(lag.log_end_offset)),
            dash(lag.lag),
            lag.owner.clone().unwrap_or_else(|| "-".to_owned()),
        ]
    }));
    text.push_str(&table(&rows));
    text.push_str(&format!("total lag: {total_lag}"));
    let unknown = lags.iter().filter(|lag| lag.lag.is_none()).count();
    if unknown > 0 {
        text.push_str(&format!(
            " (not counting {unknown} partition(s) without a committed offset: their lag is unknown)"
        ));
    }
    text
}

async fn reset_offsets(args: &ResetArgs) -> anyhow::Result<()> {
    let admin = Admin::new(args.client.common())?;
    let description = admin.describe_topic(&args.topic).await?;
    let existing: Vec<i32> = description.partitions.iter().map(|partition| partition.partition).collect();
    let partitions = match args.partitions.is_empty() {
        true => existing,
        false => {
            if let Some(missing) = args.partitions.iter().find(|partition| !existing.contains(partition)) {
                anyhow::bail!("topic {:?} has no partition {missing} (it has {})", args.topic, existing.len());
            }
            args.partitions.clone()
        }
    };
    let wanted = args.target.offset();
    let mut offsets = Vec::with_capacity(partitions.len());
    for partition in partitions {
        let offset = match wanted {
            Offset::At(offset) => {
                let (log_start_offset, high_watermark) = admin.watermarks(&args.topic, partition).await?;
                offset.clamp(log_start_offset, high_watermark)
            }
            other => admin.offset_for(&args.topic, partition, other).await?,
        };
        offsets.push(((args.topic.clone(), partition), offset));
    }
    admin.reset_offsets(&args.group, offsets.clone()).await?;
    let offsets_json: Vec<_> = offsets
        .iter()
        .map(|((topic, partition), offset)| json!({"topic": topic, "partition": partition, "offset": offset}))
        .collect();
    print(args.client.format, json!({"group_id": args.group, "offsets": offsets_json}), || {
        let mut rows = vec![["TOPIC", "PARTITION", "NEW-OFFSET"].map(str::to_owned).to_vec()];
        rows.extend(
            offsets
                .iter()
                .map(|((topic, partition), offset)| vec![topic.clone(), partition.to_string(), offset.to_string()]),
        );
        format!("reset offsets of group {}:\n{}", args.group, table(&rows).trim_end())
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::describe_text;
    use client::{GroupDescription, PartitionLag};

    #[test]
    fn the_lag_total_says_which_partitions_it_cannot_count() {
        let description = GroupDescription {
            group_id: "billing".to_owned(),
            state: "Stable".to_owned(),
            group_epoch: 1,
            assignor: "range".to_owned(),
            members: Vec::new(),
            offsets: Vec::new(),
        };
        let lag = |partition, committed: Option<i64>| PartitionLag {
            topic: "orders".to_owned(),
            partition,
            committed,
            log_end_offset: 7,
            lag: committed.map(|committed| 7 - committed),
            owner: None,
        };
        let text = describe_text(&description, &[lag(0, Some(5)), lag(1, None), lag(2, None)], 2);
        let last = text.lines().last().unwrap_or_default();
        assert_eq!(last, "total lag: 2 (not counting 2 partition(s) without a committed offset: their lag is unknown)");
        let text = describe_text(&description, &[lag(0, Some(5))], 2);
        assert_eq!(text.lines().last(), Some("total lag: 2"));
    }
}

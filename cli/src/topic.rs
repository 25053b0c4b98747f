//! `weir topic …`: create, list, describe, delete topics, alter their configs,
//! and attach interceptor plugins.

use std::time::Duration;

use clap::Subcommand;
use client::{Admin, NewTopic};
use serde_json::json;

use crate::output::{key_value, print};
use crate::ClientArgs;

#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        name: String,
        /// Number of partitions.
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        /// Copies of each partition (-1: the broker's default).
        #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
        replication_factor: i16,
        /// A topic config, e.g. retention.ms=86400000 (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
        configs: Vec<(String, String)>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List topic names.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Show a topic's partitions, leaders and effective configs.
    Describe {
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete a topic and all its records.
    Delete {
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Attach an interceptor plugin to the topic (runs after those attached before).
    ///
    /// A produce interceptor checks or rewrites records before they are stored
    /// (a rejection refuses the producer's batch); a consume interceptor rewrites
    /// or hides records as consumers read them (the log is unchanged).
    AddInterceptor {
        topic: String,
        /// The plugin's name (see `weir plugin upload`).
        #[arg(long)]
        plugin: String,
        /// Which interceptor: produce or consume (default: the plugin's own hook).
        #[arg(long, value_parser = ["produce", "consume"])]
        kind: Option<String>,
        /// A setting for the plugin's init (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
        configs: Vec<(String, String)>,
        /// When the plugin fails: refuse the records (fail-closed) or let them through (fail-open).
        #[arg(long, default_value = "fail-closed", value_parser = ["fail-closed", "fail-open"])]
        failure_policy: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Detach an interceptor plugin from the topic.
    RemoveInterceptor {
        topic: String,
        #[arg(long)]
        plugin: String,
        /// Which interceptor: produce or consume (default: the plugin's own hook).
        #[arg(long, value_parser = ["produce", "consume"])]
        kind: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Make a partitioner plugin choose the partitions of records sent to the
    /// topic without an explicit partition (in every producer, every SDK).
    SetPartitioner {
        topic: String,
        #[arg(long)]
        plugin: String,
        /// A setting for the plugin's init (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
        configs: Vec<(String, String)>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Go back to Kafka's key partitioning for the topic.
    ClearPartitioner {
        topic: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List the plugins attached to the topic (interceptors and partitioner).
    Interceptors {
        topic: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Move partitions to other brokers (Kafka's partition reassignment).
    ///
    /// The new replicas copy the leader's log and join the in-sync replicas;
    /// then the replicas not named are dropped (their data deleted), and
    /// leadership moves to the first named replica if the leader was dropped.
    /// Nothing acknowledged is lost: the move completes only once every new
    /// replica is in sync. Waits, showing progress, until every partition has
    /// moved; naming the original replicas again cancels a move once they are
    /// in sync.
    Reassign {
        name: String,
        /// A partition to move (repeatable: each gets the same replicas).
        #[arg(long = "partition", required = true)]
        partitions: Vec<u32>,
        /// The new replicas: broker ids, comma-separated, the first the
        /// preferred leader (their count may differ from the current one).
        #[arg(long, value_delimiter = ',', required = true)]
        replicas: Vec<i32>,
        /// Return once the move has started instead of waiting for it.
        #[arg(long)]
        no_wait: bool,
        /// Stop waiting after this many seconds (the move goes on).
        #[arg(long, default_value_t = 600)]
        timeout_secs: u64,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Set topic configs (an empty value, KEY=, restores the broker default).
    AlterConfig {
        name: String,
        /// A topic config to set (repeatable, at least one).
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value, required = true)]
        configs: Vec<(String, String)>,
        #[command(flatten)]
        client: ClientArgs,
    },
}

pub async fn run(command: TopicCommand) -> anyhow::Result<()> {
    match command {
        TopicCommand::Create { name, partitions, replication_factor, configs, client } => {
            let admin = Admin::new(client.common())?;
            let topic = NewTopic { name: name.clone(), partition_count: partitions, replication_factor, configs };
            admin.create_topic(topic).await?;
            print(client.format, json!({"created": name, "partitions": partitions}), || {
                format!("created topic {name} with {partitions} partition(s)")
            });
        }
        TopicCommand::List { client } => {
            let names = Admin::new(client.common())?.list_topics().await?;
            match client.format {
                crate::Format::Json => println!("{}", json!(names)),
                crate::Format::Text => names.iter().for_each(|name| println!("{name}")),
            }
        }
        TopicCommand::Describe { name, client } => describe(&name, &client).await?,
        TopicCommand::Reassign { name, partitions, replicas, no_wait, timeout_secs, client } => {
            reassign(&name, &partitions, &replicas, no_wait, Duration::from_secs(timeout_secs), &client).await?
        }
        TopicCommand::Delete { name, client } => {
            Admin::new(client.common())?.delete_topic(&name).await?;
            print(client.format, json!({"deleted": name}), || format!("deleted topic {name}"));
        }
        TopicCommand::AddInterceptor { topic, plugin, kind, configs, failure_policy, client } => {
            let admin = Admin::new(client.common())?;
            let hook = interceptor_hook(&admin, &plugin, kind.as_deref()).await?;
            let attach = client::Attach {
                topic: topic.clone(),
                hook: hook.clone(),
                plugin: plugin.clone(),
                config: configs,
                failure_policy: failure_policy.clone(),
            };
            admin.attach_plugin(attach).await?;
            print(
                client.format,
                json!({"topic": topic, "attached": plugin, "hook": hook, "failure_policy": failure_policy}),
                || format!("attached {plugin} to {topic} as a {hook} ({failure_policy})"),
            );
        }
        TopicCommand::RemoveInterceptor { topic, plugin, kind, client } => {
            let admin = Admin::new(client.common())?;
            let hook = interceptor_hook(&admin, &plugin, kind.as_deref()).await?;
            admin.detach_plugin(&topic, &hook, &plugin).await?;
            print(client.format, json!({"topic": topic, "detached": plugin, "hook": hook}), || {
                format!("detached {plugin} from {topic}")
            });
        }
        TopicCommand::SetPartitioner { topic, plugin, configs, client } => {
            let attach = client::Attach {
                topic: topic.clone(),
                hook: "partitioner".to_owned(),
                plugin: plugin.clone(),
                config: configs,
                failure_policy: String::new(),
            };
            Admin::new(client.common())?.attach_plugin(attach).await?;
            print(client.format, json!({"topic": topic, "partitioner": plugin}), || {
                format!("partitioner of {topic} is now {plugin}")
            });
        }
        TopicCommand::ClearPartitioner { topic, client } => {
            let admin = Admin::new(client.common())?;
            let current = admin.list_attachments(Some(&topic)).await?;
            let Some(partitioner) = current.iter().find(|attachment| attachment.hook == "partitioner") else {
                anyhow::bail!("topic {topic:?} has no partitioner plugin");
            };
            admin.detach_plugin(&topic, "partitioner", &partitioner.plugin).await?;
            print(client.format, json!({"topic": topic, "partitioner": null}), || {
                format!("{topic} uses Kafka's key partitioning again")
            });
        }
        TopicCommand::Interceptors { topic, client } => {
            let attachments = Admin::new(client.common())?.list_attachments(Some(&topic)).await?;
            for attachment in attachments {
                let config: Vec<String> =
                    attachment.config.iter().map(|(key, value)| format!("{key}={value}")).collect();
                let json = json!({
                    "plugin": attachment.plugin,
                    "hook": attachment.hook,
                    "config": config,
                    "failure_policy": attachment.failure_policy,
                    "status": attachment.status,
                });
                print(client.format, json, || {
                    format!(
                        "{}  {}  {}  {}  [{}]",
                        attachment.plugin,
                        attachment.hook,
                        attachment.failure_policy,
                        attachment.status,
                        config.join(" ")
                    )
                });
            }
        }
        TopicCommand::AlterConfig { name, configs, client } => {
            Admin::new(client.common())?.alter_topic_config(&name, configs.clone()).await?;
            let changed: serde_json::Map<String, serde_json::Value> =
                configs.iter().map(|(key, value)| (key.clone(), json!(value))).collect();
            print(client.format, json!({"altered": name, "configs": changed}), || {
                format!("altered {} config(s) of topic {name}", configs.len())
            });
        }
    }
    Ok(())
}

async fn describe(name: &str, client: &ClientArgs) -> anyhow::Result<()> {
    let admin = Admin::new(client.common())?;
    let description = admin.describe_topic(name).await?;
    let mut partitions = Vec::new();
    for partition in &description.partitions {
        // A partition without a leader (its broker is down) has no watermarks to ask for.
        let (log_start_offset, high_watermark) = match (&partition.error, partition.leader) {
            (None, leader) if leader >= 0 => admin.watermarks(name, partition.partition).await?,
            _ => (-1, -1),
        };
        partitions.push((partition, log_start_offset, high_watermark));
    }
    let json_partitions: Vec<_> = partitions
        .iter()
        .map(|(partition, log_start_offset, high_watermark)| {
            json!({
                "partition": partition.partition,
                "leader": partition.leader,
                "leader_epoch": partition.leader_epoch,
                "replicas": partition.replicas,
                "isr": partition.isr,
                "target_replicas": partition.target_replicas,
                "log_start_offset": log_start_offset,
                "high_watermark": high_watermark,
                "error": partition.error.as_ref().map(ToString::to_string),
            })
        })
        .collect();
    let configs: serde_json::Map<String, serde_json::Value> =
        description.configs.iter().map(|(key, value)| (key.clone(), json!(value))).collect();
    print(client.format, json!({"name": name, "partitions": json_partitions, "configs": configs}), || {
        let mut text = format!("topic {name}: {} partition(s)\n", partitions.len());
        text.push_str("PARTITION  LEADER  EPOCH  REPLICAS  ISR  LOG-START  HIGH-WATERMARK\n");
        for (partition, start, end) in &partitions {
            text.push_str(&format!(
                "{:<9}  {:<6}  {:<5}  {:<8}  {:<3}  {:<9}  {}{}\n",
                partition.partition,
                partition.leader,
                partition.leader_epoch,
                format!("{:?}", partition.replicas),
                format!("{:?}", partition.isr),
                start,
                end,
                match partition.target_replicas.is_empty() {
                    true => partition.error.as_ref().map(|error| format!("  ({error})")).unwrap_or_default(),
                    false => format!("  (moving to {:?})", partition.target_replicas),
                },
            ));
        }
        text.push_str("configs:\n");
        for (key, value) in &description.configs {
            text.push_str(&format!("  {key}={value}\n"));
        }
        text.trim_end().to_owned()
    });
    Ok(())
}

/// `weir topic reassign`: starts the move, then (unless `no_wait`) polls the
/// topic until no named partition has a reassignment running, printing each
/// partition's progress to stderr as it changes.
async fn reassign(
    name: &str,
    partitions: &[u32],
    replicas: &[i32],
    no_wait: bool,
    timeout: Duration,
    client: &ClientArgs,
) -> anyhow::Result<()> {
    let admin = Admin::new(client.common())?;
    let assignments = partitions.iter().map(|partition| (*partition, replicas.to_vec())).collect();
    admin.reassign_partitions(name, assignments).await?;
    let deadline = std::time::Instant::now() + timeout;
    let mut shown = std::collections::BTreeMap::new();
    let moved = loop {
        // The broker answering may not have applied the move yet: a partition
        // has moved once its replicas are the ones asked for.
        let described = match admin.describe_topic(name).await {
            Ok(description) => Some(description),
            Err(error) if error.is_retriable() && std::time::Instant::now() < deadline => {
                eprintln!("describe {name}: {error}; asking again");
                None
            }
            Err(error) => return Err(error.into()),
        };
        let Some(description) = described else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        let named: Vec<_> = description
            .partitions
            .into_iter()
            .filter(|partition| partitions.contains(&(partition.partition as u32)))
            .collect();
        let running: Vec<_> = named
            .iter()
            .filter(|partition| !partition.target_replicas.is_empty() || partition.replicas != replicas)
            .collect();
        for partition in running.iter().filter(|partition| !partition.target_replicas.is_empty()) {
            let waiting: Vec<i32> =
                partition.target_replicas.iter().copied().filter(|id| !partition.isr.contains(id)).collect();
            let line = format!(
                "partition {}: copying to {:?}, in sync {:?}, waiting for {waiting:?}",
                partition.partition, partition.target_replicas, partition.isr
            );
            if shown.insert(partition.partition, line.clone()).as_ref() != Some(&line) {
                eprintln!("{line}");
            }
        }
        if no_wait || running.is_empty() {
            break named;
        }
        if std::time::Instant::now() >= deadline {
            anyhow::bail!(
                "{} partition(s) still moving after {} s (the move goes on; see weir topic describe {name})",
                running.len(),
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let json_partitions: Vec<_> = moved
        .iter()
        .map(|partition| {
            json!({
                "partition": partition.partition,
                "replicas": partition.replicas,
                "isr": partition.isr,
                "leader": partition.leader,
                "target_replicas": partition.target_replicas,
            })
        })
        .collect();
    let done = moved.iter().all(|partition| partition.target_replicas.is_empty() && partition.replicas == replicas);
    print(client.format, json!({"reassigned": name, "done": done, "partitions": json_partitions}), || {
        let verb = if done { "moved" } else { "moving" };
        let list: Vec<String> = moved.iter().map(|partition| partition.partition.to_string()).collect();
        format!("{verb} partition(s) {} of topic {name} to replicas {replicas:?}", list.join(", "))
    });
    Ok(())
}

/// The hook to attach as: `--kind`, else the plugin's own.
async fn interceptor_hook(admin: &Admin, plugin: &str, kind: Option<&str>) -> anyhow::Result<String> {
    Ok(match kind {
        Some(kind) => format!("{kind}-interceptor"),
        None => admin.describe_plugin(plugin).await?.hook,
    })
}

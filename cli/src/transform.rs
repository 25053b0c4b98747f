//! `weir transform …`: deploy a transform plugin over an input topic, watch its
//! progress, pause, resume, replay and delete it, and read its plugin's log.

use clap::Subcommand;
use client::{Admin, TransformSpec, TransformStatus, TRANSFORM_EARLIEST, TRANSFORM_LATEST};
use serde_json::json;

use crate::output::{key_value, print};
use crate::ClientArgs;

#[derive(Debug, Subcommand)]
pub enum TransformCommand {
    /// Run a transform plugin over every committed record of an input topic,
    /// producing to output topics exactly once (also across restarts).
    Deploy {
        /// The deployment's name.
        name: String,
        /// An uploaded transform plugin (see `weir plugin upload`).
        #[arg(long)]
        plugin: String,
        /// The topic to read.
        #[arg(long)]
        input: String,
        /// An output topic (repeat for up to 8; the plugin picks by index, in this order).
        #[arg(long = "output", required = true)]
        outputs: Vec<String>,
        /// Where to start in each input partition: earliest, latest or an offset.
        #[arg(long, default_value = "latest", value_parser = parse_start)]
        from: i64,
        /// A setting for the plugin's init (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = key_value)]
        configs: Vec<(String, String)>,
        /// Where input records go that the plugin fails on for good (a trap,
        /// bad output, its own non-retryable error): produced there unchanged
        /// with weir.dlq.* headers saying why, and the partition moves on.
        /// Without it such a record holds its partition (state `retrying: …`).
        /// Running out of time is not for good: it holds the partition.
        #[arg(long)]
        dead_letter_topic: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// List transforms with their state and lag.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Show one transform's progress per input partition.
    Describe {
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Stop processing until `resume`.
    Pause {
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Continue a paused transform where it stopped.
    Resume {
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Process again from an offset of every input partition (outputs are produced again).
    Replay {
        name: String,
        /// earliest, latest or an offset.
        #[arg(long, value_parser = parse_start)]
        from: i64,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print the transform plugin's log.
    Logs {
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Stop and remove the transform (its outputs stay).
    Delete {
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

fn parse_start(text: &str) -> Result<i64, String> {
    match text {
        "earliest" | "beginning" => Ok(TRANSFORM_EARLIEST),
        "latest" | "end" => Ok(TRANSFORM_LATEST),
        offset => match offset.parse::<i64>() {
            Ok(offset) if offset >= 0 => Ok(offset),
            _ => Err(format!("expected earliest, latest or an offset, got {offset:?}")),
        },
    }
}

fn status_json(status: &TransformStatus) -> serde_json::Value {
    json!({
        "name": status.name,
        "plugin": status.plugin,
        "input": status.input_topic,
        "outputs": status.output_topics,
        "dead_letter_topic": status.dead_letter_topic,
        "state": status.state,
        "lag": status.partitions.iter().map(|partition| partition.lag.max(0)).sum::<i64>(),
        "partitions": status.partitions.iter().map(|partition| json!({
            "partition": partition.partition,
            "next_offset": partition.next_offset,
            "lag": partition.lag,
            "processed": partition.processed,
            "emitted": partition.emitted,
            "dead_lettered": partition.dead_lettered,
        })).collect::<Vec<_>>(),
    })
}

async fn find(admin: &Admin, name: &str) -> anyhow::Result<TransformStatus> {
    admin
        .list_transforms()
        .await?
        .into_iter()
        .find(|status| status.name == name)
        .ok_or_else(|| anyhow::anyhow!("no transform named {name:?}"))
}

pub async fn run(command: TransformCommand) -> anyhow::Result<()> {
    match command {
        TransformCommand::Deploy { name, plugin, input, outputs, from, configs, dead_letter_topic, client } => {
            let spec = TransformSpec {
                name: name.clone(),
                plugin,
                input_topic: input.clone(),
                output_topics: outputs.clone(),
                start: from,
                config: configs,
                dead_letter_topic,
            };
            Admin::new(client.common())?.deploy_transform(spec).await?;
            print(client.format, json!({"deployed": name, "input": input, "outputs": outputs}), || {
                format!("deployed transform {name}: {input} -> {}", outputs.join(", "))
            });
        }
        TransformCommand::List { client } => {
            let transforms = Admin::new(client.common())?.list_transforms().await?;
            match client.format {
                crate::Format::Json => println!("{}", json!(transforms.iter().map(status_json).collect::<Vec<_>>())),
                crate::Format::Text => {
                    let mut rows =
                        vec![["NAME", "PLUGIN", "INPUT", "OUTPUTS", "STATE", "LAG"].map(str::to_owned).to_vec()];
                    rows.extend(transforms.iter().map(|status| {
                        let lag: i64 = status.partitions.iter().map(|partition| partition.lag.max(0)).sum();
                        vec![
                            status.name.clone(),
                            status.plugin.clone(),
                            status.input_topic.clone(),
                            status.output_topics.join(","),
                            status.state.to_string(),
                            lag.to_string(),
                        ]
                    }));
                    print!("{}", crate::output::table(&rows));
                }
            }
        }
        TransformCommand::Describe { name, client } => {
            let status = find(&Admin::new(client.common())?, &name).await?;
            print(client.format, status_json(&status), || {
                let dead_letters = status.dead_letter_topic.is_some();
                let mut header = vec!["PARTITION", "NEXT-OFFSET", "LAG", "PROCESSED", "EMITTED"];
                header.extend(dead_letters.then_some("DEAD-LETTERED"));
                let mut rows = vec![header.into_iter().map(str::to_owned).collect::<Vec<_>>()];
                rows.extend(status.partitions.iter().map(|partition| {
                    let mut row = vec![
                        partition.partition.to_string(),
                        partition.next_offset.to_string(),
                        partition.lag.to_string(),
                        partition.processed.to_string(),
                        partition.emitted.to_string(),
                    ];
                    row.extend(dead_letters.then(|| partition.dead_lettered.to_string()));
                    row
                }));
                let dead_letter_topic = status
                    .dead_letter_topic
                    .as_ref()
                    .map(|topic| format!(" (dead letters to {topic})"))
                    .unwrap_or_default();
                format!(
                    "transform {} (plugin {}): {} -> {}{dead_letter_topic}, {}\n{}",
                    status.name,
                    status.plugin,
                    status.input_topic,
                    status.output_topics.join(", "),
                    status.state,
                    crate::output::table(&rows).trim_end()
                )
            });
        }
        TransformCommand::Pause { name, client } => control(&name, "pause", 0, &client, "paused").await?,
        TransformCommand::Resume { name, client } => control(&name, "resume", 0, &client, "resumed").await?,
        TransformCommand::Replay { name, from, client } => control(&name, "replay", from, &client, "replaying").await?,
        TransformCommand::Delete { name, client } => control(&name, "delete", 0, &client, "deleted").await?,
        TransformCommand::Logs { name, client } => {
            let admin = Admin::new(client.common())?;
            let status = find(&admin, &name).await?;
            for line in admin.plugin_logs(&status.plugin).await? {
                print(
                    client.format,
                    json!({"unix_ms": line.unix_ms, "level": line.level, "message": line.message}),
                    || format!("{} {:5} {}", line.unix_ms, line.level, line.message),
                );
            }
        }
    }
    Ok(())
}

async fn control(name: &str, action: &str, offset: i64, client: &ClientArgs, done: &str) -> anyhow::Result<()> {
    Admin::new(client.common())?.control_transform(name, action, offset).await?;
    print(client.format, json!({"transform": name, "action": action}), || format!("{done} transform {name}"));
    Ok(())
}

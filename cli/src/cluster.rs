//! `weir cluster status`: the brokers of the cluster with their epoch and state,
//! the active controller and the voters, as the broker asked sees them.

use clap::Subcommand;
use client::Admin;
use serde_json::json;

use crate::output::print;
use crate::ClientArgs;

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Show the brokers (id, address, epoch, state, metadata offset), the active
    /// controller and the controller quorum's voters.
    Status {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Move the leadership of every partition back to its preferred replica (the
    /// first of its replicas) where that broker is active and in sync, so
    /// leaders are spread as placement made them after brokers came back.
    ElectLeaders {
        #[command(flatten)]
        client: ClientArgs,
    },
}

pub async fn run(command: ClusterCommand) -> anyhow::Result<()> {
    match command {
        ClusterCommand::Status { client } => status(&client).await,
        ClusterCommand::ElectLeaders { client } => elect_leaders(&client).await,
    }
}

async fn elect_leaders(client: &ClientArgs) -> anyhow::Result<()> {
    let moved = Admin::new(client.common())?.elect_preferred_leaders().await?;
    print(client.format, json!({ "moved": moved }), || format!("{moved} partition(s) moved to their preferred leader"));
    Ok(())
}

async fn status(client: &ClientArgs) -> anyhow::Result<()> {
    let status = Admin::new(client.common())?.cluster_status().await?;
    let brokers: Vec<_> = status
        .brokers
        .iter()
        .map(|broker| {
            json!({
                "id": broker.id,
                "host": broker.host,
                "port": broker.port,
                "epoch": broker.epoch,
                "state": broker.state,
                "rack": broker.rack,
                "metadata_offset": broker.metadata_offset,
            })
        })
        .collect();
    let value = json!({
        "cluster_id": status.cluster_id,
        "active_controller": status.active_controller,
        "voters": status.voters,
        "brokers": brokers,
        "answered_by": status.answered_by,
        "metadata_offset": status.metadata_offset,
        "partitions": {
            "count": status.partition_count,
            "under_replicated": status.under_replicated,
            "under_min_isr": status.under_min_isr,
            "offline": status.offline,
        },
    });
    print(client.format, value, || {
        let controller = match status.active_controller {
            -1 => "none".to_owned(),
            id => id.to_string(),
        };
        let voters: Vec<String> = status.voters.iter().map(ToString::to_string).collect();
        let mut text = format!(
            "cluster {}: active controller {controller}, voters [{}] (answered by broker {}, at metadata offset {})\n",
            status.cluster_id,
            voters.join(", "),
            status.answered_by,
            status.metadata_offset
        );
        text.push_str("BROKER  ADDRESS               EPOCH  STATE   METADATA-OFFSET\n");
        for broker in &status.brokers {
            let offset = match broker.metadata_offset {
                -1 => "-".to_owned(),
                offset => offset.to_string(),
            };
            text.push_str(&format!(
                "{:<6}  {:<20}  {:<5}  {:<6}  {offset}\n",
                broker.id,
                format!("{}:{}", broker.host, broker.port),
                broker.epoch,
                broker.state
            ));
        }
        text.push_str(&format!(
            "partitions: {}, under-replicated: {}, under min ISR: {}, offline: {}\n",
            status.partition_count,
            status.under_replicated.len(),
            status.under_min_isr.len(),
            status.offline.len()
        ));
        let named = [
            ("under-replicated", &status.under_replicated),
            ("under min ISR (acks=all refused)", &status.under_min_isr),
            ("offline (no leader)", &status.offline),
        ];
        for (what, partitions) in named {
            if !partitions.is_empty() {
                text.push_str(&format!("{what}: {}\n", partitions.join(", ")));
            }
        }
        text.trim_end().to_owned()
    });
    Ok(())
}

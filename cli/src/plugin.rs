//! `weir plugin …`: upload WebAssembly plugins, list, describe and delete them,
//! and read their logs. Interceptors are attached with `weir topic
//! add-interceptor`.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Subcommand;
use client::{Admin, PluginDescription};
use serde_json::json;

use crate::output::print;
use crate::ClientArgs;

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Upload a plugin (a wasm32-wasip2 component built against wit/weir-plugin.wit).
    ///
    /// The broker checks it is a component exporting the hook before storing
    /// it, then compiles it in the background; this command waits for the
    /// compile (state `ready`, or `failed` with the reason and a non-zero exit)
    /// unless given --no-wait. Uploading an existing name replaces its code
    /// (attachments restart on it), and uploading the bytes it already has
    /// changes nothing. Components go in 4 MiB chunks (progress on a
    /// terminal), up to the broker's `[plugins] upload_bytes_max` (256 MiB by
    /// default).
    Upload {
        /// The .wasm component, e.g. target/plugins/wasm32-wasip2/release/json_validator.wasm
        file: PathBuf,
        /// The plugin's name (a-z A-Z 0-9 . _ -).
        #[arg(long)]
        name: String,
        /// The hook it must implement: partitioner, produce-interceptor,
        /// consume-interceptor or transform (default: whichever it exports).
        #[arg(long, default_value = "")]
        hook: String,
        /// Answer once uploaded, while the broker may still be compiling
        /// (`weir plugin describe` shows the state).
        #[arg(long)]
        no_wait: bool,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Write a starter project for a new plugin: Rust (the guest SDK),
    /// Python (componentize-py) or JavaScript (componentize-js).
    ///
    /// The project builds as written (it accepts or passes on every record),
    /// carries the contract's WIT and its language's guest helper, and its
    /// README says how to build and upload it.
    New {
        /// The plugin's name (letters, digits, - and _).
        name: String,
        #[arg(long, value_enum, default_value = "rust")]
        lang: crate::plugin_new::Lang,
        /// Which hook it implements.
        #[arg(long, value_enum, default_value = "produce-interceptor")]
        hook: crate::plugin_new::Hook,
        /// Where to write it (must not exist; default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// List plugins with their hook, size and counters.
    List {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Show one plugin: digest, counters, attachments.
    Describe {
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Print a plugin's log: its own messages, panics, and the broker's notes on its failures.
    Logs {
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Delete a plugin (refused while it is attached).
    Delete {
        name: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

/// How long `weir plugin upload` waits for the compile.
const COMPILE_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// On a terminal, a line on stderr saying how much of an upload was sent.
fn upload_progress(name: String) -> impl Fn(u64, u64) + Send + 'static {
    let terminal = std::io::stderr().is_terminal();
    move |sent, total| {
        if !terminal {
            return;
        }
        let megabytes = |bytes: u64| bytes as f64 / 1e6;
        let percent = (sent * 100).checked_div(total).unwrap_or(100);
        eprint!("\r\x1b[Kuploading {name}: {:.1} of {:.1} MB ({percent}%)", megabytes(sent), megabytes(total));
    }
}

fn plugin_json(plugin: &PluginDescription) -> serde_json::Value {
    json!({
        "name": plugin.name,
        "hook": plugin.hook,
        "digest": plugin.digest,
        "size_bytes": plugin.size_bytes,
        "uploaded_ms": plugin.uploaded_ms,
        "calls": plugin.calls,
        "errors": plugin.errors,
        "traps": plugin.traps,
        "busy_ms": plugin.busy_nanos as f64 / 1e6,
        "attached_to": plugin.attached_to,
        "client_calls": plugin.client_calls,
        "client_errors": plugin.client_errors,
        "state": plugin.state,
        "state_reason": plugin.state_reason,
    })
}

pub async fn run(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::Upload { file, name, hook, no_wait, client } => {
            let wasm = std::fs::read(&file).map_err(|error| anyhow::anyhow!("{}: {error}", file.display()))?;
            let terminal = std::io::stderr().is_terminal();
            let admin = Admin::new(client.common())?;
            let progress = upload_progress(name.clone());
            let mut plugin = admin.upload_plugin_with_progress(&name, &hook, wasm, progress).await;
            let compiling = plugin.as_ref().ok().filter(|uploaded| !no_wait && uploaded.state != "ready");
            if let Some(uploaded) = compiling {
                let started = std::time::Instant::now();
                let progress = |now: &PluginDescription| {
                    if terminal {
                        let seconds = started.elapsed().as_secs();
                        eprint!("\r\x1b[Kuploaded {name}; {} for {seconds} s", now.state);
                    }
                };
                let name = uploaded.name.clone();
                plugin = admin.wait_plugin_compiled(&name, COMPILE_WAIT, progress).await;
            }
            if terminal {
                eprint!("\r\x1b[K");
            }
            let plugin = plugin?;
            print(client.format, plugin_json(&plugin), || {
                format!(
                    "uploaded plugin {} ({}, {} bytes, sha256 {}): {}",
                    plugin.name, plugin.hook, plugin.size_bytes, plugin.digest, plugin.state
                )
            });
        }
        PluginCommand::New { name, lang, hook, dir } => {
            let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
            let files = crate::plugin_new::write_starter(&name, lang, hook, &dir)?;
            println!("wrote a {lang:?} {} plugin in {}:", hook.name(), dir.display());
            for file in files {
                println!("  {}", file.display());
            }
            println!("build it as {}/README.md says", dir.display());
        }
        PluginCommand::List { client } => {
            let plugins = Admin::new(client.common())?.list_plugins().await?;
            match client.format {
                crate::Format::Json => println!("{}", json!(plugins.iter().map(plugin_json).collect::<Vec<_>>())),
                crate::Format::Text => {
                    let mut rows = vec![["NAME", "HOOK", "STATE", "SIZE", "CALLS", "ERRORS", "TRAPS", "ATTACHED-TO"]
                        .map(str::to_owned)
                        .to_vec()];
                    rows.extend(plugins.iter().map(|plugin| {
                        vec![
                            plugin.name.clone(),
                            plugin.hook.to_string(),
                            plugin.state.clone(),
                            plugin.size_bytes.to_string(),
                            plugin.calls.to_string(),
                            plugin.errors.to_string(),
                            plugin.traps.to_string(),
                            plugin.attached_to.join(","),
                        ]
                    }));
                    print!("{}", crate::output::table(&rows));
                }
            }
        }
        PluginCommand::Describe { name, client } => {
            let admin = Admin::new(client.common())?;
            let plugin = admin.describe_plugin(&name).await?;
            let attachments: Vec<_> = admin
                .list_attachments(None)
                .await?
                .into_iter()
                .filter(|attachment| attachment.plugin == name)
                .collect();
            let mut json = plugin_json(&plugin);
            json["attachments"] = json!(attachments
                .iter()
                .map(|attachment| json!({
                    "topic": attachment.topic,
                    "hook": attachment.hook,
                    "config": attachment.config.iter().map(|(key, value)| format!("{key}={value}")).collect::<Vec<_>>(),
                    "failure_policy": attachment.failure_policy,
                    "status": attachment.status,
                }))
                .collect::<Vec<_>>());
            print(client.format, json, || {
                let mut text = format!(
                    "plugin {} ({}, {})\nsha256 {}\n{} bytes, uploaded at {} ms\ncalls {}, errors {}, traps {}, busy {:.1} ms",
                    plugin.name,
                    plugin.hook,
                    plugin.state,
                    plugin.digest,
                    plugin.size_bytes,
                    plugin.uploaded_ms,
                    plugin.calls,
                    plugin.errors,
                    plugin.traps,
                    plugin.busy_nanos as f64 / 1e6
                );
                if !plugin.state_reason.is_empty() {
                    text.push_str(&format!("\nthe code did not compile: {}", plugin.state_reason));
                }
                if plugin.client_calls > 0 {
                    text.push_str(&format!(
                        "\nin clients (as reported to this broker): calls {}, errors {}",
                        plugin.client_calls, plugin.client_errors
                    ));
                }
                for attachment in &attachments {
                    text.push_str(&format!(
                        "\nattached to {} as {} ({}; {}), config {:?}",
                        attachment.topic,
                        attachment.hook,
                        attachment.failure_policy,
                        attachment.status,
                        attachment.config
                    ));
                }
                text
            });
        }
        PluginCommand::Logs { name, client } => {
            let lines = Admin::new(client.common())?.plugin_logs(&name).await?;
            for line in lines {
                print(
                    client.format,
                    json!({"unix_ms": line.unix_ms, "level": line.level, "message": line.message}),
                    || format!("{} {:5} {}", line.unix_ms, line.level, line.message),
                );
            }
        }
        PluginCommand::Delete { name, client } => {
            Admin::new(client.common())?.delete_plugin(&name).await?;
            print(client.format, json!({"deleted": name}), || format!("deleted plugin {name}"));
        }
    }
    Ok(())
}

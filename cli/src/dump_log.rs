//! `weir dump-log`: prints a segment file batch by batch (like Kafka's
//! `kafka-dump-log`), validating each batch (CRC, codec, record count: `valid`), and
//! optionally its records.
//!
//! Stops at the first batch that cannot be read whole and says where and why, so
//! an operator can see exactly where a fenced partition is damaged.

use std::fmt::Write as _;
use std::path::Path;

use abi::batch::{BatchView, RecordBatch};
use anyhow::Context;

use crate::Format;

pub fn run(file: &Path, with_records: bool, format: Format) -> anyhow::Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let mut position = 0usize;
    let mut batch_count = 0usize;
    while position < bytes.len() {
        let (view, _) = match BatchView::split_first(&bytes[position..]) {
            Ok(split) => split,
            Err(error) => anyhow::bail!("at byte {position}: {error} (after {batch_count} whole batches)"),
        };
        print_batch(position, &view, format);
        if with_records {
            print_records(&view, format);
        }
        position += view.size_bytes();
        batch_count += 1;
    }
    if format == Format::Text {
        println!("{batch_count} batches, {position} bytes");
    }
    Ok(())
}

fn print_batch(position: usize, view: &BatchView<'_>, format: Format) {
    let compression = view.attributes().compression().map_or_else(|error| error.to_string(), |codec| codec.to_string());
    // Values are JSON literals already (numbers, booleans, quoted strings).
    let fields = [
        ("position", position.to_string()),
        ("base_offset", view.base_offset().to_string()),
        ("last_offset", view.last_offset().to_string()),
        ("count", view.records_count().to_string()),
        ("size", view.size_bytes().to_string()),
        ("leader_epoch", view.partition_leader_epoch().to_string()),
        ("max_timestamp", view.max_timestamp().to_string()),
        ("producer_id", view.producer_id().to_string()),
        ("compression", json(Some(compression.into()))),
        ("valid", view.validate().is_ok().to_string()),
    ];
    let line: Vec<String> = match format {
        Format::Text => fields.iter().map(|(name, value)| format!("{name}: {}", value.trim_matches('"'))).collect(),
        Format::Json => fields.iter().map(|(name, value)| format!("\"{name}\":{value}")).collect(),
    };
    match format {
        Format::Text => println!("{}", line.join(" ")),
        Format::Json => println!("{{{}}}", line.join(",")),
    }
}

fn print_records(view: &BatchView<'_>, format: Format) {
    let batch = match RecordBatch::decode(view.as_bytes()) {
        Ok(batch) => batch,
        Err(error) => {
            println!("  (records not decoded: {error})");
            return;
        }
    };
    for record in &batch.records {
        let offset = batch.base_offset.saturating_add(record.offset_delta as i64);
        let timestamp = batch.base_timestamp.saturating_add(record.timestamp_delta);
        let key = record.key.as_deref().map(String::from_utf8_lossy);
        let value = record.value.as_deref().map(String::from_utf8_lossy);
        match format {
            // Quoted and escaped like JSON strings (`null` when absent), so a value with
            // spaces or newlines stays one unambiguous field.
            Format::Text => {
                println!("  offset: {offset} timestamp: {timestamp} key: {} value: {}", json(key), json(value))
            }
            Format::Json => {
                println!(
                    "{{\"offset\":{offset},\"timestamp\":{timestamp},\"key\":{},\"value\":{}}}",
                    json(key),
                    json(value)
                )
            }
        }
    }
}

/// A JSON string literal (or `null`).
fn json(text: Option<std::borrow::Cow<'_, str>>) -> String {
    let Some(text) = text else { return "null".to_owned() };
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for character in text.chars() {
        match character {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            control if (control as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", control as u32);
            }
            other => out.push(other),
        }
    }
    out.push('"');
    out
}

//! Printing results as text or JSON (one object per line), the same way in every
//! command.

use serde_json::Value;

use crate::Format;

/// Prints `json` in JSON mode, or `text()` in text mode.
pub fn print(format: Format, json: Value, text: impl FnOnce() -> String) {
    match format {
        Format::Json => println!("{json}"),
        Format::Text => println!("{}", text()),
    }
}

/// Bytes as a string: UTF-8 when they are, otherwise lossily converted.
pub fn bytes_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Parses `key=value`.
pub fn key_value(entry: &str) -> Result<(String, String), String> {
    match entry.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {entry:?}")),
    }
}

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

/// Rows as left-aligned columns two spaces apart, one line each (the last column
/// is not padded).
pub fn table(rows: &[Vec<String>]) -> String {
    let column_count = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..column_count)
        .map(|column| rows.iter().filter_map(|row| row.get(column)).map(|cell| cell.chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in rows {
        let mut line = String::new();
        for (column, cell) in row.iter().enumerate() {
            match column + 1 == row.len() {
                true => line.push_str(cell),
                false => line.push_str(&format!("{cell:<width$}  ", width = widths[column])),
            }
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn table_aligns_columns_and_leaves_the_last_unpadded() {
        let rows = vec![
            vec!["TOPIC".to_owned(), "LAG".to_owned(), "OWNER".to_owned()],
            vec!["orders".to_owned(), "12".to_owned(), "-".to_owned()],
        ];
        assert_eq!(table(&rows), "TOPIC   LAG  OWNER\norders  12   -\n");
    }
}

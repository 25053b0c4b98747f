//! The packed batch of the contract, read through typed views and written with
//! a builder. Layout (see `wit/weir-plugin.wit`): one byte arena, and an index
//! of [`STRIDE`] `u32` words per record.

use crate::Error;

/// `u32` words per record in a batch index.
pub const STRIDE: usize = 8;
/// The length word of a null key or value.
pub const NULL: u32 = u32::MAX;

/// A batch handed to a plugin, checked once: every span lies in the arena.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    base_offset: i64,
    base_timestamp_ms: i64,
    arena: &'a [u8],
    index: &'a [u32],
}

/// One record of a [`Batch`]; keys, values and headers borrow the arena.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// Its offset (`-1 + delta` before offsets are assigned, in produce interceptors).
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    headers: &'a [u8],
}

fn span(arena: &[u8], offset: u32, length: u32) -> Option<Option<&[u8]>> {
    if length == NULL {
        return Some(None);
    }
    let start = offset as usize;
    arena.get(start..start.checked_add(length as usize)?).map(Some)
}

impl<'a> Batch<'a> {
    /// Checks the layout: whole records, spans inside the arena, well-formed headers.
    pub fn new(base_offset: i64, base_timestamp_ms: i64, arena: &'a [u8], index: &'a [u32]) -> Result<Self, Error> {
        if !index.len().is_multiple_of(STRIDE) {
            return Err(Error::invalid_input(format!("batch index of {} words is not whole records", index.len())));
        }
        let batch = Batch { base_offset, base_timestamp_ms, arena, index };
        for position in 0..batch.len() {
            let words = batch.words(position);
            let spans = [(words[0], words[1]), (words[2], words[3]), (words[4], words[5])];
            for (field, (offset, length)) in ["key", "value", "headers"].into_iter().zip(spans) {
                if span(arena, offset, length).is_none() || (field == "headers" && length == NULL) {
                    return Err(Error::invalid_input(format!("record {position}: {field} span outside the arena")));
                }
            }
            let headers = span(arena, words[4], words[5]).flatten().unwrap_or_default();
            if (Headers { rest: headers }).any(|header| header.is_none()) {
                return Err(Error::invalid_input(format!("record {position}: malformed headers")));
            }
        }
        Ok(batch)
    }

    fn words(&self, position: usize) -> &'a [u32] {
        &self.index[position * STRIDE..(position + 1) * STRIDE]
    }

    pub fn len(&self) -> usize {
        self.index.len() / STRIDE
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn base_timestamp_ms(&self) -> i64 {
        self.base_timestamp_ms
    }

    /// The record at `position` (in `0..len()`).
    pub fn get(&self, position: usize) -> Option<Record<'a>> {
        if position >= self.len() {
            return None;
        }
        let words = self.words(position);
        // `new` checked every span, so these never fall back.
        let key = span(self.arena, words[0], words[1]).flatten();
        let value = span(self.arena, words[2], words[3]).flatten();
        let headers = span(self.arena, words[4], words[5]).flatten().unwrap_or_default();
        Some(Record {
            offset: self.base_offset + words[6] as i64,
            timestamp_ms: self.base_timestamp_ms + words[7] as i32 as i64,
            key,
            value,
            headers,
        })
    }

    pub fn records(&self) -> impl Iterator<Item = Record<'a>> + '_ {
        (0..self.len()).filter_map(|position| self.get(position))
    }
}

impl<'a> Record<'a> {
    /// `(name, value)` pairs, in order.
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, Option<&'a [u8]>)> {
        Headers { rest: self.headers }.map_while(|header| header)
    }

    /// The first header called `name`.
    pub fn header(&self, name: &str) -> Option<Option<&'a [u8]>> {
        self.headers().find(|(found, _)| *found == name).map(|(_, value)| value)
    }

    /// The value as UTF-8 text, if it is.
    pub fn value_str(&self) -> Option<&'a str> {
        self.value.and_then(|value| std::str::from_utf8(value).ok())
    }

    /// The key as UTF-8 text, if it is.
    pub fn key_str(&self) -> Option<&'a str> {
        self.key.and_then(|key| std::str::from_utf8(key).ok())
    }
}

/// Walks a headers span; yields `None` once at malformed input.
struct Headers<'a> {
    rest: &'a [u8],
}

impl<'a> Headers<'a> {
    fn take(&mut self, length: usize) -> Option<&'a [u8]> {
        let (taken, rest) = (self.rest.get(..length)?, self.rest.get(length..)?);
        self.rest = rest;
        Some(taken)
    }

    fn length(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn next_header(&mut self) -> Option<(&'a str, Option<&'a [u8]>)> {
        let name_length = self.length()?;
        let name = std::str::from_utf8(self.take(name_length as usize)?).ok()?;
        let value = match self.length()? {
            NULL => None,
            length => Some(self.take(length as usize)?),
        };
        Some((name, value))
    }
}

impl<'a> Iterator for Headers<'a> {
    type Item = Option<(&'a str, Option<&'a [u8]>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let header = self.next_header();
        if header.is_none() {
            self.rest = &[];
        }
        Some(header)
    }
}

/// Builds an output batch (replacements, transform output).
#[derive(Clone, Debug, Default)]
pub struct BatchBuilder {
    pub(crate) arena: Vec<u8>,
    pub(crate) index: Vec<u32>,
}

impl BatchBuilder {
    pub fn new() -> BatchBuilder {
        BatchBuilder::default()
    }

    pub fn len(&self) -> usize {
        self.index.len() / STRIDE
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn bytes(&mut self, bytes: Option<&[u8]>) -> (u32, u32) {
        let offset = self.arena.len() as u32;
        match bytes {
            Some(bytes) => {
                self.arena.extend_from_slice(bytes);
                (offset, bytes.len() as u32)
            }
            None => (offset, NULL),
        }
    }

    /// Appends a record. `timestamp_delta_ms` is relative to the batch's base
    /// timestamp (the input's, for replacements and transform output).
    pub fn push(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
        timestamp_delta_ms: i32,
    ) {
        let (key_offset, key_length) = self.bytes(key);
        let (value_offset, value_length) = self.bytes(value);
        let headers_offset = self.arena.len() as u32;
        for (name, value) in headers {
            self.arena.extend_from_slice(&(name.len() as u32).to_le_bytes());
            self.arena.extend_from_slice(name.as_bytes());
            match value {
                Some(value) => {
                    self.arena.extend_from_slice(&(value.len() as u32).to_le_bytes());
                    self.arena.extend_from_slice(value);
                }
                None => self.arena.extend_from_slice(&NULL.to_le_bytes()),
            }
        }
        let headers_length = self.arena.len() as u32 - headers_offset;
        let offset_delta = self.len() as u32;
        self.index.extend_from_slice(&[
            key_offset,
            key_length,
            value_offset,
            value_length,
            headers_offset,
            headers_length,
            offset_delta,
            timestamp_delta_ms as u32,
        ]);
    }

    /// Appends a copy of `record` with a new value (keeping key, headers and timestamp).
    pub fn push_with_value(&mut self, base_timestamp_ms: i64, record: &Record<'_>, value: Option<&[u8]>) {
        let headers: Vec<(&str, Option<&[u8]>)> = record.headers().collect();
        let delta = (record.timestamp_ms - base_timestamp_ms) as i32;
        self.push(record.key, value, &headers, delta);
    }

    /// The arena and index.
    pub fn into_parts(self) -> (Vec<u8>, Vec<u32>) {
        (self.arena, self.index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_batches_read_back() {
        let mut builder = BatchBuilder::new();
        builder.push(Some(b"k"), Some(b"v1"), &[("h", Some(b"x")), ("n", None)], 5);
        builder.push(None, None, &[], -2);
        let (arena, index) = builder.into_parts();
        let batch = Batch::new(100, 1000, &arena, &index).unwrap();
        let records: Vec<Record<'_>> = batch.records().collect();
        assert_eq!(records.len(), 2);
        assert_eq!((records[0].offset, records[0].timestamp_ms), (100, 1005));
        assert_eq!((records[0].key, records[0].value), (Some(&b"k"[..]), Some(&b"v1"[..])));
        assert_eq!(records[0].headers().collect::<Vec<_>>(), vec![("h", Some(&b"x"[..])), ("n", None)]);
        assert_eq!((records[1].key, records[1].value, records[1].timestamp_ms), (None, None, 998));
    }

    #[test]
    fn bad_spans_are_refused() {
        let arena = [0u8; 4];
        assert!(Batch::new(0, 0, &arena, &[0, 5, 0, 0, 0, 0, 0, 0]).is_err(), "key past the end");
        assert!(Batch::new(0, 0, &arena, &[0, 1, 0]).is_err(), "partial record");
        assert!(Batch::new(0, 0, &arena, &[0, 1, 0, 1, 0, 4, 0, 0]).is_err(), "headers of garbage");
        assert!(Batch::new(0, 0, &arena, &[u32::MAX, 1, 0, 1, 0, 0, 0, 0]).is_err(), "offset overflow");
    }
}

//! The contract's packed batch on the host side: built from records, checked
//! when a plugin hands one back (a plugin's spans are never trusted).

/// `u32` words per record in a batch index.
pub const STRIDE: usize = 8;
/// The length word of a null key or value.
pub const NULL: u32 = u32::MAX;

/// Records of one partition: a byte arena and a fixed-stride index (see
/// `wit/weir-plugin.wit`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackedBatch {
    pub base_offset: i64,
    pub base_timestamp_ms: i64,
    pub arena: Vec<u8>,
    pub index: Vec<u32>,
}

/// One record read back from a checked batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedRecord<'a> {
    pub offset_delta: u32,
    pub timestamp_ms: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<Header<'a>>,
}

fn span(arena: &[u8], offset: u32, length: u32) -> Result<Option<&[u8]>, String> {
    if length == NULL {
        return Ok(None);
    }
    let start = offset as usize;
    start
        .checked_add(length as usize)
        .and_then(|end| arena.get(start..end))
        .map(Some)
        .ok_or_else(|| format!("span {offset}+{length} outside an arena of {} bytes", arena.len()))
}

fn take<'a>(length: usize, rest: &mut &'a [u8]) -> Result<&'a [u8], String> {
    if rest.len() < length {
        return Err("truncated headers".to_owned());
    }
    let (taken, after) = rest.split_at(length);
    *rest = after;
    Ok(taken)
}

/// A header: its name and value.
pub type Header<'a> = (&'a str, Option<&'a [u8]>);

fn headers(mut rest: &[u8]) -> Result<Vec<Header<'_>>, String> {
    let mut headers = Vec::new();
    while !rest.is_empty() {
        let length = |bytes: &[u8]| u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let name_length = length(take(4, &mut rest)?);
        let name = std::str::from_utf8(take(name_length as usize, &mut rest)?)
            .map_err(|_| "a header name is not UTF-8".to_owned())?;
        let value = match length(take(4, &mut rest)?) {
            NULL => None,
            value_length => Some(take(value_length as usize, &mut rest)?),
        };
        headers.push((name, value));
    }
    Ok(headers)
}

impl PackedBatch {
    pub fn new(base_offset: i64, base_timestamp_ms: i64) -> PackedBatch {
        PackedBatch { base_offset, base_timestamp_ms, arena: Vec::new(), index: Vec::new() }
    }

    pub fn len(&self) -> usize {
        self.index.len() / STRIDE
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Empties the batch, keeping its buffers.
    pub fn clear(&mut self, base_offset: i64, base_timestamp_ms: i64) {
        self.base_offset = base_offset;
        self.base_timestamp_ms = base_timestamp_ms;
        self.arena.clear();
        self.index.clear();
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

    /// Appends a record.
    ///
    /// # Panics
    ///
    /// If `timestamp_ms` is further from the base timestamp than an `i32` of
    /// milliseconds (the contract's delta; callers choose the base).
    pub fn push<'h>(
        &mut self,
        offset_delta: u32,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: impl IntoIterator<Item = (&'h str, Option<&'h [u8]>)>,
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
        let delta = timestamp_ms.wrapping_sub(self.base_timestamp_ms);
        assert!(
            i32::try_from(delta).is_ok(),
            "a record {delta} ms from its batch's base timestamp: the caller must choose a base the deltas fit"
        );
        let timestamp_delta = delta as i32 as u32;
        self.index.extend_from_slice(&[
            key_offset,
            key_length,
            value_offset,
            value_length,
            headers_offset,
            headers_length,
            offset_delta,
            timestamp_delta,
        ]);
    }

    /// The batch in parts of at most `records_max` records, in order, each on
    /// this batch's base offset and timestamp (so every delta still fits).
    pub fn parts(&self, records_max: usize) -> Result<Vec<PackedBatch>, String> {
        let records = self.records()?;
        let parts = records
            .chunks(records_max.max(1))
            .map(|part| {
                let mut packed = PackedBatch::new(self.base_offset, self.base_timestamp_ms);
                for record in part {
                    packed.push(
                        record.offset_delta,
                        record.timestamp_ms,
                        record.key,
                        record.value,
                        record.headers.iter().copied(),
                    );
                }
                packed
            })
            .collect();
        Ok(parts)
    }

    /// Appends every record of `other`, a batch on the same base offset and
    /// timestamp (a part of the same batch, or a rewrite of one).
    pub fn extend_from(&mut self, other: &PackedBatch) -> Result<(), String> {
        if (other.base_offset, other.base_timestamp_ms) != (self.base_offset, self.base_timestamp_ms) {
            return Err("joining batches on different bases".to_owned());
        }
        for record in other.records()? {
            self.push(
                record.offset_delta,
                record.timestamp_ms,
                record.key,
                record.value,
                record.headers.iter().copied(),
            );
        }
        Ok(())
    }

    /// Every record, checked: whole index entries, spans inside the arena,
    /// well-formed headers. The way to read a batch a plugin returned.
    pub fn records(&self) -> Result<Vec<PackedRecord<'_>>, String> {
        if !self.index.len().is_multiple_of(STRIDE) {
            return Err(format!("an index of {} words is not whole records", self.index.len()));
        }
        self.index
            .chunks_exact(STRIDE)
            .enumerate()
            .map(|(position, words)| {
                let problem = |problem: String| format!("record {position}: {problem}");
                let headers_span = match words[5] {
                    NULL => Err("null headers span".to_owned()),
                    length => span(&self.arena, words[4], length),
                }
                .map_err(problem)?
                .unwrap_or_default();
                Ok(PackedRecord {
                    offset_delta: words[6],
                    timestamp_ms: self.base_timestamp_ms + words[7] as i32 as i64,
                    key: span(&self.arena, words[0], words[1]).map_err(problem)?,
                    value: span(&self.arena, words[2], words[3]).map_err(problem)?,
                    headers: headers(headers_span).map_err(problem)?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_and_bad_spans_are_refused() {
        let mut batch = PackedBatch::new(10, 1_000);
        batch.push(0, 1_005, Some(b"k"), Some(b"v"), [("h", Some(&b"x"[..])), ("n", None)]);
        batch.push(1, 990, None, None, []);
        let records = batch.records().unwrap();
        assert_eq!(records[0].headers, vec![("h", Some(&b"x"[..])), ("n", None)]);
        assert_eq!((records[0].timestamp_ms, records[1].timestamp_ms), (1_005, 990));
        assert_eq!((records[1].key, records[1].value), (None, None));

        let mut bad = batch.clone();
        bad.index[3] = 1_000;
        assert!(bad.records().unwrap_err().contains("outside"));
        let mut bad = batch.clone();
        bad.index.pop();
        assert!(bad.records().is_err());
        let mut bad = batch;
        bad.index[5] += 1;
        assert!(bad.records().is_err(), "headers running into the next record's bytes");
    }

    #[test]
    fn parts_join_back_into_the_batch() {
        let mut batch = PackedBatch::new(7, 1_000);
        for delta in 0..5u32 {
            batch.push(delta, 1_000 + i64::from(delta), Some(b"k"), None, [("h", Some(&b"v"[..]))]);
        }
        let parts = batch.parts(2).unwrap();
        assert_eq!(parts.iter().map(PackedBatch::len).collect::<Vec<_>>(), vec![2, 2, 1]);
        let mut joined = PackedBatch::new(7, 1_000);
        for part in &parts {
            joined.extend_from(part).unwrap();
        }
        assert_eq!(joined, batch);
        assert_eq!(batch.parts(10).unwrap(), vec![batch.clone()]);
        assert!(joined.extend_from(&PackedBatch::new(8, 1_000)).is_err());
    }
}

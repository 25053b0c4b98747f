//! [`RecordRefs`]: the consumer's fast path through a batch — walks the records
//! section and yields each record's fields as byte *ranges* into that section, so
//! callers can hand out keys and values as slices of one shared buffer without
//! copying them.
//!
//! Use [`records_section`] to get the (decompressed, if needed) section of a
//! validated batch. Every length is checked against the section: malformed input
//! is a [`BatchError`], never a panic or an out-of-range slice.

use std::borrow::Cow;
use std::ops::Range;

use super::compression;
use super::error::BatchError;
use super::view::BatchView;
use super::BATCH_HEADER_BYTES;
use crate::varint::{decode_varint, decode_varlong};

/// One record, located inside a records section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordRef {
    pub offset_delta: i32,
    pub timestamp_delta: i64,
    pub key: Option<Range<usize>>,
    pub value: Option<Range<usize>>,
    /// (key, value) ranges; keys are checked to be UTF-8.
    pub headers: Vec<(Range<usize>, Option<Range<usize>>)>,
}

/// The records section of `batch`, decompressed to at most
/// `decompressed_bytes_max` bytes when the batch is compressed. Checks the CRC.
pub fn records_section<'a>(batch: &BatchView<'a>, decompressed_bytes_max: usize) -> Result<Cow<'a, [u8]>, BatchError> {
    batch.validate()?;
    let compression = batch.attributes().compression()?;
    compression::decompress(compression, &batch.as_bytes()[BATCH_HEADER_BYTES..], decompressed_bytes_max)
}

/// [`records_section`] without the CRC check, for a caller that checks the
/// batch's CRC on another step of the same path (the broker's append does; a
/// rewrite decodes with [`RecordBatch::decode`](super::RecordBatch::decode),
/// which checks it) and must not pay for it twice.
pub fn records_section_unverified<'a>(
    batch: &BatchView<'a>,
    decompressed_bytes_max: usize,
) -> Result<Cow<'a, [u8]>, BatchError> {
    let compression = batch.attributes().compression()?;
    compression::decompress(compression, &batch.as_bytes()[BATCH_HEADER_BYTES..], decompressed_bytes_max)
}

/// Checks every record of `batch` the way a consumer will read it, so a batch that
/// passes decodes in every client: the records section decompresses (within
/// `decompressed_bytes_max`, into `scratch`, which is reused across calls),
/// holds exactly `records count` well-framed records and nothing after them,
/// every header key is UTF-8, record `i` has offset delta `i`, and no timestamp
/// delta overflows the base timestamp. Allocates nothing for uncompressed batches.
///
/// Does *not* check the CRC (the caller does, with [`BatchView::validate`]): this
/// is the broker's append-time check of a producer's batch (Kafka's broker checks
/// the same). Consecutive offset deltas are a producer's rule; a compacted batch
/// has gaps and must not be checked with this.
pub fn validate_records(
    batch: &BatchView<'_>,
    scratch: &mut Vec<u8>,
    decompressed_bytes_max: usize,
) -> Result<(), BatchError> {
    let compression = batch.attributes().compression()?;
    let compressed = &batch.as_bytes()[BATCH_HEADER_BYTES..];
    let section: &[u8] = if compression == super::Compression::None {
        compressed
    } else {
        compression::decompress_into(compression, compressed, scratch, decompressed_bytes_max)?;
        scratch
    };
    let records_count = usize::try_from(batch.records_count()).map_err(|_| truncated("records count"))?;
    let base_timestamp = batch.base_timestamp();
    let mut walk = RecordRefs::new(section, records_count);
    for index in 0..records_count {
        let (offset_delta, timestamp_delta, _, _) = walk.record_into(None)?;
        if usize::try_from(offset_delta).ok() != Some(index) {
            return Err(BatchError::OffsetDeltaMismatch { index, offset_delta });
        }
        if base_timestamp.checked_add(timestamp_delta).is_none() {
            return Err(BatchError::TimestampOverflow { index, timestamp_delta });
        }
    }
    if walk.position != section.len() {
        return Err(truncated("bytes after the last record"));
    }
    Ok(())
}

/// Iterates the records of a records section; see the module docs.
#[derive(Clone, Debug)]
pub struct RecordRefs<'a> {
    section: &'a [u8],
    position: usize,
    remaining: usize,
}

impl<'a> RecordRefs<'a> {
    /// Expects exactly `records_count` records filling `section`.
    pub fn new(section: &'a [u8], records_count: usize) -> RecordRefs<'a> {
        RecordRefs { section, position: 0, remaining: records_count }
    }

    fn varint(&mut self, end: usize) -> Result<i32, BatchError> {
        let (value, used) = decode_varint(&self.section[self.position..end]).map_err(|_| truncated("varint"))?;
        self.position += used;
        Ok(value)
    }

    fn varlong(&mut self, end: usize) -> Result<i64, BatchError> {
        let (value, used) = decode_varlong(&self.section[self.position..end]).map_err(|_| truncated("varlong"))?;
        self.position += used;
        Ok(value)
    }

    fn bytes(&mut self, end: usize, what: &'static str) -> Result<Option<Range<usize>>, BatchError> {
        let length = self.varint(end)?;
        if length == -1 {
            return Ok(None);
        }
        let length = usize::try_from(length).map_err(|_| truncated(what))?;
        if length > end - self.position {
            return Err(truncated(what));
        }
        let range = self.position..self.position + length;
        self.position += length;
        Ok(Some(range))
    }

    fn record(&mut self) -> Result<RecordRef, BatchError> {
        let mut headers = Vec::new();
        let (offset_delta, timestamp_delta, key, value) = self.record_into(Some(&mut headers))?;
        Ok(RecordRef { offset_delta, timestamp_delta, key, value, headers })
    }

    /// Reads one record, collecting its headers into `headers` when given (a
    /// validating walk passes `None` and allocates nothing).
    #[allow(clippy::type_complexity)]
    fn record_into(
        &mut self,
        mut headers: Option<&mut Vec<(Range<usize>, Option<Range<usize>>)>>,
    ) -> Result<(i32, i64, Option<Range<usize>>, Option<Range<usize>>), BatchError> {
        let length = usize::try_from(self.varint(self.section.len())?).map_err(|_| truncated("record length"))?;
        if length > self.section.len() - self.position || length == 0 {
            return Err(truncated("record"));
        }
        let end = self.position + length;
        self.position += 1; // attributes
        let timestamp_delta = self.varlong(end)?;
        let offset_delta = self.varint(end)?;
        let key = self.bytes(end, "key")?;
        let value = self.bytes(end, "value")?;
        let header_count = usize::try_from(self.varint(end)?).map_err(|_| truncated("header count"))?;
        if let Some(headers) = headers.as_deref_mut() {
            headers.reserve(header_count.min(64));
        }
        for _ in 0..header_count {
            let header_key = self.bytes(end, "header key")?.ok_or_else(|| truncated("header key"))?;
            if std::str::from_utf8(&self.section[header_key.clone()]).is_err() {
                return Err(truncated("header key (not UTF-8)"));
            }
            let header_value = self.bytes(end, "header value")?;
            if let Some(headers) = headers.as_deref_mut() {
                headers.push((header_key, header_value));
            }
        }
        if self.position != end {
            return Err(truncated("record length"));
        }
        Ok((offset_delta, timestamp_delta, key, value))
    }
}

fn truncated(what: &'static str) -> BatchError {
    BatchError::malformed(what)
}

impl Iterator for RecordRefs<'_> {
    type Item = Result<RecordRef, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return (self.position != self.section.len()).then(|| Err(truncated("bytes after the last record")));
        }
        self.remaining -= 1;
        let record = self.record();
        if record.is_err() {
            self.remaining = 0;
            self.position = self.section.len();
        }
        Some(record)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::batch::{BatchBuilder, Compression};

    #[test]
    fn ranges_point_at_the_fields() {
        for compression in [Compression::None, Compression::Lz4] {
            let mut builder = BatchBuilder::new(100).compression(compression).unwrap();
            builder.push(105, Some(b"k1"), Some(b"value-1"), &[("h", Some(b"x"))]);
            builder.push(99, None, None, &[]);
            let bytes = builder.encode();
            let view = BatchView::new(&bytes).unwrap();
            let section = records_section(&view, 1 << 20).unwrap();
            let records: Vec<RecordRef> = RecordRefs::new(&section, 2).collect::<Result<_, _>>().unwrap();
            assert_eq!(&section[records[0].key.clone().unwrap()], b"k1");
            assert_eq!(&section[records[0].value.clone().unwrap()], b"value-1");
            assert_eq!(&section[records[0].headers[0].0.clone()], b"h");
            assert_eq!((records[0].timestamp_delta, records[1].timestamp_delta), (5, -1));
            assert_eq!((records[1].offset_delta, records[1].key.clone(), records[1].value.clone()), (1, None, None));
        }
    }

    fn batch_of(offset_deltas: &[i32], compression: Compression) -> Vec<u8> {
        let mut builder = BatchBuilder::new(1_000).compression(compression).unwrap();
        for _ in offset_deltas {
            builder.push(1_000, Some(b"k"), Some(b"v"), &[("h", Some(b"x"))]);
        }
        let mut model = crate::batch::RecordBatch::decode(&builder.encode()).unwrap();
        for (record, delta) in model.records.iter_mut().zip(offset_deltas) {
            record.offset_delta = *delta;
        }
        model.last_offset_delta = offset_deltas.iter().copied().max().unwrap_or(0).max(offset_deltas.len() as i32 - 1);
        model.encode().unwrap()
    }

    #[test]
    fn validate_records_accepts_what_a_producer_writes() {
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let bytes = batch_of(&[0, 1, 2], compression);
            let view = BatchView::new(&bytes).unwrap();
            validate_records(&view, &mut Vec::new(), 1 << 20).unwrap();
        }
    }

    #[test]
    fn validate_records_refuses_offset_deltas_out_of_order() {
        for compression in [Compression::None, Compression::Zstd] {
            let bytes = batch_of(&[0, -5, 2], compression);
            let view = BatchView::new(&bytes).unwrap();
            assert_eq!(
                validate_records(&view, &mut Vec::new(), 1 << 20),
                Err(BatchError::OffsetDeltaMismatch { index: 1, offset_delta: -5 })
            );
        }
    }

    #[test]
    fn validate_records_refuses_plain_records_labelled_compressed() {
        let mut bytes = batch_of(&[0, 1], Compression::None);
        let attributes = crate::batch::field::ATTRIBUTES;
        bytes[attributes + 1] |= 3; // lz4
        crate::batch::reseal(&mut bytes);
        let view = BatchView::new(&bytes).unwrap();
        view.validate().unwrap();
        let result = validate_records(&view, &mut Vec::new(), 1 << 20);
        assert!(matches!(result, Err(BatchError::Decompression { .. })), "{result:?}");
    }

    #[test]
    fn validate_records_refuses_every_truncated_section() {
        let bytes = batch_of(&[0, 1], Compression::None);
        let records_end = bytes.len();
        for cut in BATCH_HEADER_BYTES..records_end {
            let mut model_bytes = bytes[..cut].to_vec();
            let length = (model_bytes.len() - crate::batch::LOG_OVERHEAD_BYTES) as i32;
            model_bytes[8..12].copy_from_slice(&length.to_be_bytes());
            let view = BatchView::new(&model_bytes).unwrap();
            assert!(validate_records(&view, &mut Vec::new(), 1 << 20).is_err(), "cut at {cut} went unnoticed");
        }
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let mut builder = BatchBuilder::new(0);
        builder.push(0, Some(b"key"), Some(b"some value"), &[("header", Some(b"v"))]);
        let bytes = builder.encode();
        let section = &bytes[BATCH_HEADER_BYTES..];
        for cut in 0..section.len() {
            let results: Vec<_> = RecordRefs::new(&section[..cut], 1).collect();
            assert!(results.iter().any(Result::is_err), "cut at {cut} went unnoticed");
        }
        assert!(RecordRefs::new(section, 1).all(|record| record.is_ok()));
    }
}

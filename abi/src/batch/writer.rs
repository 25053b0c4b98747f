//! [`BatchWriter`]: the producer's fast path to an encoded batch — each record is
//! encoded straight into one growing buffer behind a reserved header, so a batch
//! costs no per-record allocation and no second pass over the records.
//!
//! [`BatchWriter::finish`] fills the header (producer id, epoch and base sequence
//! are only known when the batch is sent), compresses the records section if
//! asked, and computes the CRC. The bytes equal what [`super::BatchBuilder`]
//! encodes for the same records (a test checks it).

use super::attributes::{Attributes, Compression};
use super::compression;
use super::error::BatchError;
use super::{BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES, MAGIC_V2};
use crate::varint::{encode_varint, encode_varlong, varint_size, varlong_size};

/// Builds one batch record by record; see the module docs.
#[derive(Clone, Debug)]
pub struct BatchWriter {
    /// `BATCH_HEADER_BYTES` placeholder bytes, then the encoded records.
    buffer: Vec<u8>,
    base_timestamp: i64,
    max_timestamp: i64,
    record_count: i32,
}

/// The producer fields of a batch header (`-1`s for a non-idempotent producer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerFields {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
}

impl ProducerFields {
    /// Kafka's "no producer" values.
    pub const NONE: ProducerFields = ProducerFields { producer_id: -1, producer_epoch: -1, base_sequence: -1 };
}

fn nullable_size(bytes: Option<&[u8]>) -> usize {
    bytes.map_or(varint_size(-1), |bytes| varint_size(bytes.len() as i32) + bytes.len())
}

fn put_nullable(bytes: Option<&[u8]>, out: &mut Vec<u8>) {
    match bytes {
        Some(bytes) => {
            encode_varint(bytes.len() as i32, out);
            out.extend_from_slice(bytes);
        }
        None => encode_varint(-1, out),
    }
}

impl BatchWriter {
    /// An empty batch whose record timestamps are relative to `base_timestamp`;
    /// `capacity_bytes` preallocates the buffer.
    pub fn new(base_timestamp: i64, capacity_bytes: usize) -> BatchWriter {
        let mut buffer = Vec::with_capacity(capacity_bytes.max(BATCH_HEADER_BYTES));
        buffer.resize(BATCH_HEADER_BYTES, 0);
        BatchWriter { buffer, base_timestamp, max_timestamp: base_timestamp, record_count: 0 }
    }

    /// Bytes the batch has so far (header included, before compression).
    pub fn size_bytes(&self) -> usize {
        self.buffer.len()
    }

    pub fn record_count(&self) -> usize {
        self.record_count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.record_count == 0
    }

    /// Bytes `push` would add for this record.
    pub fn record_size_bytes(key: Option<&[u8]>, value: Option<&[u8]>, headers: &[(&str, Option<&[u8]>)]) -> usize {
        // Deltas are at most 5 / 10 bytes; estimate with the largest.
        let body = 1 + 10 + 5 + nullable_size(key) + nullable_size(value) + headers_size(headers);
        body + varint_size(body as i32)
    }

    /// Appends a record with the next offset delta. Lengths past `i32::MAX` are
    /// the caller's bug (batches are bounded far below that).
    pub fn push(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) {
        let timestamp_delta = timestamp.wrapping_sub(self.base_timestamp);
        let offset_delta = self.record_count;
        let body_bytes = 1
            + varlong_size(timestamp_delta)
            + varint_size(offset_delta)
            + nullable_size(key)
            + nullable_size(value)
            + headers_size(headers);
        let out = &mut self.buffer;
        out.reserve(body_bytes + 5);
        encode_varint(body_bytes as i32, out);
        out.push(0); // record attributes: unused
        encode_varlong(timestamp_delta, out);
        encode_varint(offset_delta, out);
        put_nullable(key, out);
        put_nullable(value, out);
        encode_varint(headers.len() as i32, out);
        for (header_key, header_value) in headers {
            encode_varint(header_key.len() as i32, out);
            out.extend_from_slice(header_key.as_bytes());
            put_nullable(*header_value, out);
        }
        self.record_count += 1;
        self.max_timestamp = self.max_timestamp.max(timestamp);
    }

    /// The encoded batch: header filled in, records compressed with
    /// `compression`, CRC computed. Fails only for codecs this crate cannot write.
    pub fn finish(self, producer: ProducerFields, compression: Compression) -> Result<Vec<u8>, BatchError> {
        compression::require_supported(compression)?;
        let BatchWriter { mut buffer, base_timestamp, max_timestamp, record_count } = self;
        if compression != Compression::None {
            let mut compressed = Vec::with_capacity(buffer.len() / 2 + BATCH_HEADER_BYTES);
            compressed.resize(BATCH_HEADER_BYTES, 0);
            compression::compress(compression, &buffer[BATCH_HEADER_BYTES..], &mut compressed)?;
            buffer = compressed;
        }
        let batch_length = (buffer.len() - LOG_OVERHEAD_BYTES) as i32;
        let attributes = Attributes::default().with_compression(compression);
        let header = &mut buffer[..BATCH_HEADER_BYTES];
        header[0..8].copy_from_slice(&0i64.to_be_bytes());
        header[8..12].copy_from_slice(&batch_length.to_be_bytes());
        header[12..16].copy_from_slice(&(-1i32).to_be_bytes());
        header[16] = MAGIC_V2 as u8;
        header[21..23].copy_from_slice(&attributes.0.to_be_bytes());
        header[23..27].copy_from_slice(&(record_count - 1).max(0).to_be_bytes());
        header[27..35].copy_from_slice(&base_timestamp.to_be_bytes());
        header[35..43].copy_from_slice(&max_timestamp.to_be_bytes());
        header[43..51].copy_from_slice(&producer.producer_id.to_be_bytes());
        header[51..53].copy_from_slice(&producer.producer_epoch.to_be_bytes());
        header[53..57].copy_from_slice(&producer.base_sequence.to_be_bytes());
        header[57..61].copy_from_slice(&record_count.to_be_bytes());
        let crc = crc32c::crc32c(&buffer[21..]);
        buffer[17..21].copy_from_slice(&crc.to_be_bytes());
        Ok(buffer)
    }
}

fn headers_size(headers: &[(&str, Option<&[u8]>)]) -> usize {
    varint_size(headers.len() as i32)
        + headers
            .iter()
            .map(|(key, value)| varint_size(key.len() as i32) + key.len() + nullable_size(*value))
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::batch::{BatchBuilder, BatchView, RecordBatch};

    fn fill(timestamps: &[i64]) -> (BatchWriter, BatchBuilder) {
        let mut writer = BatchWriter::new(1_000, 0);
        let mut builder = BatchBuilder::new(1_000).producer(5, 1, 77);
        for (index, timestamp) in timestamps.iter().enumerate() {
            let key = format!("key-{index}");
            let value = vec![index as u8; index * 37];
            let headers: &[(&str, Option<&[u8]>)] = &[("trace", Some(b"abc")), ("empty", None)];
            let key = (index % 3 != 0).then_some(key.as_bytes());
            let value = (index % 4 != 1).then_some(&value[..]);
            writer.push(*timestamp, key, value, headers);
            builder.push(*timestamp, key, value, headers);
        }
        (writer, builder)
    }

    #[test]
    fn bytes_equal_the_builders() {
        let (writer, builder) = fill(&[1_000, 1_500, 900, 70_000, 1_001]);
        let producer = ProducerFields { producer_id: 5, producer_epoch: 1, base_sequence: 77 };
        assert_eq!(writer.finish(producer, Compression::None).unwrap(), builder.encode());
    }

    #[test]
    fn compressed_batches_decode_to_the_same_records() {
        for compression in [Compression::Lz4, Compression::Zstd] {
            let (writer, builder) = fill(&[5, 6, 7, 8, 9, 10, 11]);
            let bytes = writer.finish(ProducerFields::NONE, compression).unwrap();
            BatchView::new(&bytes).unwrap().validate().unwrap();
            let decoded = RecordBatch::decode(&bytes).unwrap();
            assert_eq!(decoded.records, builder.build().records, "{compression:?}");
            assert_eq!(decoded.attributes.compression(), Ok(compression));
        }
    }

    #[test]
    fn the_size_estimate_never_undercounts() {
        let mut writer = BatchWriter::new(0, 0);
        for length in [0usize, 1, 127, 128, 16_384, 100_000] {
            let value = vec![7u8; length];
            let before = writer.size_bytes();
            let estimate = BatchWriter::record_size_bytes(Some(b"k"), Some(&value), &[("h", None)]);
            writer.push(i64::MAX / 2, Some(b"k"), Some(&value), &[("h", None)]);
            assert!(writer.size_bytes() - before <= estimate);
        }
    }
}

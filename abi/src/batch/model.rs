//! [`RecordBatch`]: the fully decoded batch, and its byte-exact encoder and
//! decoder.
//!
//! Role: the complete model of a RecordBatch v2 for plugins, tools, the
//! producer and tests. The broker's hot path uses
//! [`BatchView`](super::BatchView) instead and never decodes records. The
//! header layout is documented on [`BatchView`](super::BatchView), the record
//! layout on [`Record`].
//!
//! Invariants:
//! - [`RecordBatch::encode`] computes the batch length and the CRC itself;
//!   the model holds neither, nor the records count (it is `records.len()`);
//! - [`RecordBatch::decode`] accepts exactly one batch, checks its CRC
//!   before reading records, and accounts for every byte: a records count
//!   that disagrees with the records present, or bytes left after the last
//!   record (after decompression), are [`BatchError::Malformed`];
//! - the attributes' codec decides the records section: uncompressed, or
//!   compressed whole with LZ4 or zstd (see
//!   [`compression`](super::compression)); the encoder compresses and the
//!   decoder decompresses transparently, never more than
//!   [`DECOMPRESSED_BYTES_MAX`] bytes (or the limit given to
//!   [`RecordBatch::decode_with_limit`]). Gzip and snappy are
//!   [`BatchError::UnsupportedCompression`] both ways;
//! - encode(decode(b)) == b for uncompressed batches written with shortest
//!   varints; for compressed ones only the decoded model round-trips (another
//!   compressor may pick other bytes).

use super::attributes::{Attributes, Compression};
use super::compression;
use super::cursor::Cursor;
use super::error::BatchError;
use super::record::{length_i32, Record, MIN_RECORD_BYTES};
use super::view::BatchView;
use super::{field, BATCH_HEADER_BYTES, DECOMPRESSED_BYTES_MAX, LOG_OVERHEAD_BYTES, MAGIC_V2};

/// A fully decoded RecordBatch v2 (byte layout on
/// [`BatchView`](super::BatchView)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordBatch {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Epoch of the partition leader that appended the batch (-1 if none).
    pub partition_leader_epoch: i32,
    /// Attributes (compression, timestamp type, transactional, control).
    pub attributes: Attributes,
    /// Offset of the last record minus the base offset.
    pub last_offset_delta: i32,
    /// Timestamp the record timestamp deltas are relative to.
    pub base_timestamp: i64,
    /// Largest record timestamp (or the log append time).
    pub max_timestamp: i64,
    /// Idempotent producer id (-1 if none).
    pub producer_id: i64,
    /// Idempotent producer epoch (-1 if none).
    pub producer_epoch: i16,
    /// Sequence number of the first record (-1 if none).
    pub base_sequence: i32,
    /// The records, in offset order.
    pub records: Vec<Record>,
}

impl RecordBatch {
    /// Encodes the batch, byte for byte, into a new buffer, compressing the
    /// records section with the codec its attributes name.
    ///
    /// Fails with [`BatchError::UnsupportedCompression`] for gzip and snappy,
    /// [`BatchError::UnknownCompression`] for codecs 5 to 7, and
    /// [`BatchError::Malformed`] if the batch would exceed 2^31-1 bytes.
    pub fn encode(&self) -> Result<Vec<u8>, BatchError> {
        let mut out = Vec::new();
        self.encode_into(&mut out)?;
        Ok(out)
    }

    /// Appends the encoded batch to `out` (see [`RecordBatch::encode`]).
    ///
    /// On error, `out` is left as it was.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), BatchError> {
        let compression = self.attributes.compression()?;
        compression::require_supported(compression)?;
        let start = out.len();
        let written = self.write(compression, out);
        let sealed = written.and_then(|()| seal(&mut out[start..]));
        if sealed.is_err() {
            out.truncate(start);
        }
        sealed
    }

    /// Decodes exactly one batch, decompressing its records section to at
    /// most [`DECOMPRESSED_BYTES_MAX`] bytes; see
    /// [`RecordBatch::decode_with_limit`].
    pub fn decode(bytes: &[u8]) -> Result<RecordBatch, BatchError> {
        Self::decode_with_limit(bytes, DECOMPRESSED_BYTES_MAX)
    }

    /// Decodes exactly one batch whose records section, if compressed,
    /// decompresses to at most `decompressed_bytes_max` bytes (uncompressed
    /// records are bounded by `bytes` already).
    ///
    /// Checks, in order: length and magic (as [`BatchView::new`]), the CRC,
    /// the compression codec ([`BatchError::UnknownCompression`],
    /// [`BatchError::UnsupportedCompression`]), a non-negative records count,
    /// the decompression ([`BatchError::Decompression`],
    /// [`BatchError::DecompressedTooLarge`]), then every record.
    pub fn decode_with_limit(bytes: &[u8], decompressed_bytes_max: usize) -> Result<RecordBatch, BatchError> {
        let view = BatchView::new(bytes)?;
        view.check_crc()?;
        let compression = view.attributes().compression()?;
        compression::require_supported(compression)?;
        let records_count = checked_records_count(view)?;
        let section = compression::decompress(compression, &bytes[BATCH_HEADER_BYTES..], decompressed_bytes_max)?;
        let records = decode_records(&section, records_count)?;
        Ok(Self {
            base_offset: view.base_offset(),
            partition_leader_epoch: view.partition_leader_epoch(),
            attributes: view.attributes(),
            last_offset_delta: view.last_offset_delta(),
            base_timestamp: view.base_timestamp(),
            max_timestamp: view.max_timestamp(),
            producer_id: view.producer_id(),
            producer_epoch: view.producer_epoch(),
            base_sequence: view.base_sequence(),
            records,
        })
    }

    /// Writes the header (batch length and CRC zeroed) and the records
    /// section, compressed with `compression`.
    fn write(&self, compression: Compression, out: &mut Vec<u8>) -> Result<(), BatchError> {
        let records_count = length_i32(self.records.len(), "more than 2^31-1 records")?;
        out.reserve(BATCH_HEADER_BYTES);
        out.extend_from_slice(&self.base_offset.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes()); // batch length, sealed later
        out.extend_from_slice(&self.partition_leader_epoch.to_be_bytes());
        out.extend_from_slice(&MAGIC_V2.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes()); // CRC, sealed later
        out.extend_from_slice(&self.attributes.0.to_be_bytes());
        out.extend_from_slice(&self.last_offset_delta.to_be_bytes());
        out.extend_from_slice(&self.base_timestamp.to_be_bytes());
        out.extend_from_slice(&self.max_timestamp.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&self.base_sequence.to_be_bytes());
        out.extend_from_slice(&records_count.to_be_bytes());
        if compression == Compression::None {
            return self.records.iter().try_for_each(|record| record.encode_into(out));
        }
        let mut records = Vec::new();
        self.records.iter().try_for_each(|record| record.encode_into(&mut records))?;
        compression::compress(compression, &records, out)
    }
}

/// Fills in the batch length and CRC of a fully written batch.
fn seal(batch: &mut [u8]) -> Result<(), BatchError> {
    let batch_length = length_i32(batch.len() - LOG_OVERHEAD_BYTES, "batch longer than 2^31-1 bytes")?;
    batch[field::BATCH_LENGTH..field::BATCH_LENGTH + 4].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c::crc32c(&batch[field::ATTRIBUTES..]);
    batch[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// The records count, or [`BatchError::InvalidRecordCount`] if negative.
fn checked_records_count(view: BatchView<'_>) -> Result<usize, BatchError> {
    usize::try_from(view.records_count()).map_err(|_| BatchError::InvalidRecordCount {
        records_count: view.records_count(),
        last_offset_delta: view.last_offset_delta(),
    })
}

/// Decodes exactly `records_count` records filling the whole (decompressed)
/// records section.
fn decode_records(section: &[u8], records_count: usize) -> Result<Vec<Record>, BatchError> {
    let mut cursor = Cursor::new(section);
    let mut records = Vec::with_capacity(records_count.min(cursor.remaining() / MIN_RECORD_BYTES));
    for _ in 0..records_count {
        if cursor.is_empty() {
            return Err(BatchError::malformed("records count is larger than the records in the batch"));
        }
        records.push(Record::decode(&mut cursor)?);
    }
    if !cursor.is_empty() {
        return Err(BatchError::malformed(
            "bytes left after the last record (records count is smaller than the records in the batch)",
        ));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty_batch() -> RecordBatch {
        RecordBatch {
            base_offset: 7,
            partition_leader_epoch: 3,
            attributes: Attributes::default(),
            last_offset_delta: 0,
            base_timestamp: 10,
            max_timestamp: 10,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records: Vec::new(),
        }
    }

    #[test]
    fn empty_batch_is_exactly_the_header() {
        let bytes = empty_batch().encode().expect("uncompressed batch encodes");
        assert_eq!(bytes.len(), BATCH_HEADER_BYTES);
        assert_eq!(RecordBatch::decode(&bytes), Ok(empty_batch()));
    }

    #[test]
    fn encode_into_appends_and_leaves_out_untouched_on_error() {
        let mut out = vec![0xaa];
        empty_batch().encode_into(&mut out).expect("uncompressed batch encodes");
        assert_eq!(out.len(), 1 + BATCH_HEADER_BYTES);
        assert_eq!(out[0], 0xaa);

        let mut gzip = empty_batch();
        gzip.attributes = gzip.attributes.with_compression(Compression::Gzip);
        assert_eq!(
            gzip.encode_into(&mut out),
            Err(BatchError::UnsupportedCompression { compression: Compression::Gzip })
        );
        assert_eq!(out.len(), 1 + BATCH_HEADER_BYTES);
    }

    #[test]
    fn unknown_codec_is_rejected_on_encode() {
        let mut batch = empty_batch();
        batch.attributes = Attributes(6);
        assert_eq!(batch.encode(), Err(BatchError::UnknownCompression { codec: 6 }));
    }

    #[test]
    fn gzip_and_snappy_are_unsupported_on_decode() {
        for compression in [Compression::Gzip, Compression::Snappy] {
            let mut bytes = empty_batch().encode().expect("uncompressed batch encodes");
            bytes[field::ATTRIBUTES + 1] = compression.codec();
            seal(&mut bytes).expect("small batch seals");
            assert_eq!(RecordBatch::decode(&bytes), Err(BatchError::UnsupportedCompression { compression }));
        }
    }

    #[test]
    fn compressed_records_section_holds_the_records_and_the_header_stays_plain() {
        let mut batch = empty_batch();
        batch.records = (0..50).map(|i| Record { offset_delta: i, ..Record::default() }).collect();
        batch.last_offset_delta = 49;
        let plain = batch.encode().expect("uncompressed batch encodes");
        for compression in [Compression::Lz4, Compression::Zstd] {
            batch.attributes = Attributes::default().with_compression(compression);
            let bytes = batch.encode().expect("lz4 and zstd encode");
            // Only the batch length, CRC and codec bits differ in the header.
            assert_eq!(bytes[..field::BATCH_LENGTH], plain[..field::BATCH_LENGTH], "{compression}");
            assert_eq!(
                bytes[field::PARTITION_LEADER_EPOCH..field::CRC],
                plain[field::PARTITION_LEADER_EPOCH..field::CRC]
            );
            assert_eq!(bytes[field::ATTRIBUTES + 1], compression.codec());
            assert_eq!(
                bytes[field::LAST_OFFSET_DELTA..BATCH_HEADER_BYTES],
                plain[field::LAST_OFFSET_DELTA..BATCH_HEADER_BYTES]
            );
            let section = compression::decompress(compression, &bytes[BATCH_HEADER_BYTES..], usize::MAX)
                .expect("section decompresses");
            assert_eq!(section.as_ref(), &plain[BATCH_HEADER_BYTES..], "{compression}");
            assert_eq!(RecordBatch::decode(&bytes), Ok(batch.clone()));
        }
    }

    #[test]
    fn records_count_must_match_the_records() {
        let mut batch = empty_batch();
        batch.records.push(Record::default());
        let good = batch.encode().expect("uncompressed batch encodes");

        let mut too_many = good.clone();
        too_many[field::RECORDS_COUNT + 3] = 2;
        seal(&mut too_many).expect("small batch seals");
        assert_eq!(
            RecordBatch::decode(&too_many),
            Err(BatchError::malformed("records count is larger than the records in the batch"))
        );

        let mut too_few = good.clone();
        too_few[field::RECORDS_COUNT + 3] = 0;
        seal(&mut too_few).expect("small batch seals");
        assert!(matches!(RecordBatch::decode(&too_few), Err(BatchError::Malformed { .. })));

        let mut negative = good;
        negative[field::RECORDS_COUNT..field::RECORDS_COUNT + 4].copy_from_slice(&(-1i32).to_be_bytes());
        seal(&mut negative).expect("small batch seals");
        assert_eq!(
            RecordBatch::decode(&negative),
            Err(BatchError::InvalidRecordCount { records_count: -1, last_offset_delta: 0 })
        );
    }

    #[test]
    fn crc_is_checked_before_records() {
        let mut bytes = empty_batch().encode().expect("uncompressed batch encodes");
        bytes[field::RECORDS_COUNT] = 0x7f;
        assert!(matches!(RecordBatch::decode(&bytes), Err(BatchError::CrcMismatch { .. })));
    }
}

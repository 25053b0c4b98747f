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
//!   record, are [`BatchError::Malformed`];
//! - only uncompressed batches are encoded or decoded for now; compressed
//!   ones are [`BatchError::UnsupportedCompression`].

use super::attributes::{Attributes, Compression};
use super::cursor::Cursor;
use super::error::BatchError;
use super::record::{length_i32, Record, MIN_RECORD_BYTES};
use super::view::BatchView;
use super::{field, BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES, MAGIC_V2};

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
    /// Encodes the batch, byte for byte, into a new buffer.
    ///
    /// Fails with [`BatchError::UnsupportedCompression`] for a compressed
    /// batch, [`BatchError::UnknownCompression`] for codecs 5 to 7, and
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
        require_uncompressed(self.attributes)?;
        let start = out.len();
        let written = self.write(out);
        let sealed = written.and_then(|()| seal(&mut out[start..]));
        if sealed.is_err() {
            out.truncate(start);
        }
        sealed
    }

    /// Decodes exactly one uncompressed batch.
    ///
    /// Checks, in order: length and magic (as [`BatchView::new`]), the CRC,
    /// the compression codec, a non-negative records count, then every
    /// record.
    pub fn decode(bytes: &[u8]) -> Result<RecordBatch, BatchError> {
        let view = BatchView::new(bytes)?;
        view.check_crc()?;
        require_uncompressed(view.attributes())?;
        let records = decode_records(view)?;
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

    /// Writes the header (batch length and CRC zeroed) and the records.
    fn write(&self, out: &mut Vec<u8>) -> Result<(), BatchError> {
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
        self.records.iter().try_for_each(|record| record.encode_into(out))
    }
}

fn require_uncompressed(attributes: Attributes) -> Result<(), BatchError> {
    match attributes.compression()? {
        Compression::None => Ok(()),
        compression => Err(BatchError::UnsupportedCompression { compression }),
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

/// Decodes exactly `records_count` records filling the rest of the batch.
fn decode_records(view: BatchView<'_>) -> Result<Vec<Record>, BatchError> {
    let records_count = usize::try_from(view.records_count()).map_err(|_| BatchError::InvalidRecordCount {
        records_count: view.records_count(),
        last_offset_delta: view.last_offset_delta(),
    })?;
    let mut cursor = Cursor::new(&view.as_bytes()[BATCH_HEADER_BYTES..]);
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
    fn compressed_batches_are_unsupported_on_decode() {
        let mut bytes = empty_batch().encode().expect("uncompressed batch encodes");
        bytes[field::ATTRIBUTES + 1] = Compression::Zstd.codec();
        seal(&mut bytes).expect("small batch seals");
        assert_eq!(
            RecordBatch::decode(&bytes),
            Err(BatchError::UnsupportedCompression { compression: Compression::Zstd })
        );
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

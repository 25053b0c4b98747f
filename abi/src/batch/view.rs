//! [`BatchView`]: zero-copy access to one encoded batch, and in-place
//! stamping of the header fields the CRC does not cover.
//!
//! Role: the broker's hot path. Appending, indexing and fetching need the
//! header fields and a CRC check, never the records; a view reads them
//! straight from the bytes, without allocating or copying.
//!
//! Invariants: a `BatchView` always wraps exactly one batch of at least
//! [`BATCH_HEADER_BYTES`] whose batch length field matches its size and whose
//! magic is 2, so every header accessor is infallible. It does *not* imply
//! the CRC or the records are valid: call [`BatchView::validate`] (header
//! integrity) or [`BatchView::decode`] (everything).

use super::attributes::Attributes;
use super::error::BatchError;
use super::model::RecordBatch;
use super::{field, BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES, MAGIC_V2, MIN_BATCH_LENGTH};

/// Zero-copy view over exactly one encoded RecordBatch v2.
///
/// Header layout (all integers big-endian; offsets are the [`field`]
/// constants):
///
/// | offset | size | field                  | type   | CRC-covered |
/// |-------:|-----:|------------------------|--------|-------------|
/// |      0 |    8 | base offset            | int64  | no          |
/// |      8 |    4 | batch length           | int32  | no          |
/// |     12 |    4 | partition leader epoch | int32  | no          |
/// |     16 |    1 | magic (= 2)            | int8   | no          |
/// |     17 |    4 | CRC                    | uint32 | no          |
/// |     21 |    2 | attributes             | int16  | yes         |
/// |     23 |    4 | last offset delta      | int32  | yes         |
/// |     27 |    8 | base timestamp         | int64  | yes         |
/// |     35 |    8 | max timestamp          | int64  | yes         |
/// |     43 |    8 | producer id            | int64  | yes         |
/// |     51 |    2 | producer epoch         | int16  | yes         |
/// |     53 |    4 | base sequence          | int32  | yes         |
/// |     57 |    4 | records count          | int32  | yes         |
/// |     61 |    … | records                | see [`Record`](super::Record) | yes |
///
/// - The first [`LOG_OVERHEAD_BYTES`] (base offset, batch length) are the log
///   overhead; the batch length counts every byte after them, so a batch
///   occupies `12 + batch length` bytes and the batch length is at least 49.
/// - The CRC is CRC-32C (Castagnoli) of bytes 21 to the end.
/// - The last offset of the batch is base offset + last offset delta.
#[derive(Clone, Copy, Debug)]
pub struct BatchView<'a> {
    bytes: &'a [u8],
}

impl<'a> BatchView<'a> {
    /// Wraps `bytes`, which must be exactly one batch.
    ///
    /// Checks that there are at least [`BATCH_HEADER_BYTES`], that the batch
    /// length field equals `bytes.len() - 12`, and that the magic is 2. Does
    /// *not* check the CRC.
    pub fn new(bytes: &'a [u8]) -> Result<Self, BatchError> {
        if bytes.len() < BATCH_HEADER_BYTES {
            return Err(BatchError::Truncated { needed: BATCH_HEADER_BYTES, available: bytes.len() });
        }
        let declared = read_i32(bytes, field::BATCH_LENGTH);
        let actual = bytes.len() - LOG_OVERHEAD_BYTES;
        if usize::try_from(declared).ok() != Some(actual) {
            return Err(BatchError::LengthMismatch { declared: i64::from(declared), actual });
        }
        let magic = read_i8(bytes, field::MAGIC);
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic { magic });
        }
        Ok(Self { bytes })
    }

    /// Peels the first batch off a buffer of concatenated batches, returning
    /// its view and the bytes after it.
    ///
    /// [`BatchError::Truncated`] if the buffer ends inside the batch
    /// (including inside the log overhead or the header);
    /// [`BatchError::Malformed`] if the batch length is negative or below 49.
    pub fn split_first(bytes: &'a [u8]) -> Result<(BatchView<'a>, &'a [u8]), BatchError> {
        if bytes.len() < LOG_OVERHEAD_BYTES {
            return Err(BatchError::Truncated { needed: LOG_OVERHEAD_BYTES, available: bytes.len() });
        }
        let batch_length = read_i32(bytes, field::BATCH_LENGTH);
        if batch_length < MIN_BATCH_LENGTH {
            return Err(BatchError::malformed("batch length is negative or below the 49-byte header minimum"));
        }
        let size = usize::try_from(batch_length)
            .ok()
            .and_then(|length| length.checked_add(LOG_OVERHEAD_BYTES))
            .ok_or(BatchError::malformed("batch length does not fit this platform's address space"))?;
        if bytes.len() < size {
            return Err(BatchError::Truncated { needed: size, available: bytes.len() });
        }
        let (batch, rest) = bytes.split_at(size);
        Ok((Self::new(batch)?, rest))
    }

    /// Checks the batch's integrity without decoding records, returning the
    /// first failing check:
    ///
    /// 1. the stored CRC equals the CRC-32C of bytes 21.. ([`BatchError::CrcMismatch`]);
    /// 2. the compression codec is one Kafka defines ([`BatchError::UnknownCompression`]);
    /// 3. `last offset delta >= 0` and `1 <= records count <= last offset delta + 1`
    ///    (compaction may remove records but never all of them)
    ///    ([`BatchError::InvalidRecordCount`]).
    ///
    /// The max timestamp is deliberately not compared with the base timestamp.
    pub fn validate(&self) -> Result<(), BatchError> {
        self.check_crc()?;
        self.attributes().compression()?;
        self.check_records_count()
    }

    /// CRC-32C of bytes 21 to the end (what the CRC field should hold).
    pub fn computed_crc(&self) -> u32 {
        crc32c::crc32c(&self.bytes[field::ATTRIBUTES..])
    }

    /// The whole batch.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Size of the whole batch in bytes (12 + batch length).
    pub fn size_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Offset of the first record.
    pub fn base_offset(&self) -> i64 {
        read_i64(self.bytes, field::BASE_OFFSET)
    }

    /// Bytes after the log overhead.
    pub fn batch_length(&self) -> i32 {
        read_i32(self.bytes, field::BATCH_LENGTH)
    }

    /// Epoch of the leader that appended the batch.
    pub fn partition_leader_epoch(&self) -> i32 {
        read_i32(self.bytes, field::PARTITION_LEADER_EPOCH)
    }

    /// Format version (always 2 for a view).
    pub fn magic(&self) -> i8 {
        read_i8(self.bytes, field::MAGIC)
    }

    /// The stored CRC.
    pub fn crc(&self) -> u32 {
        read_u32(self.bytes, field::CRC)
    }

    /// The attributes field.
    pub fn attributes(&self) -> Attributes {
        Attributes(u16::from_be_bytes(read_array(self.bytes, field::ATTRIBUTES)))
    }

    /// Offset of the last record minus the base offset.
    pub fn last_offset_delta(&self) -> i32 {
        read_i32(self.bytes, field::LAST_OFFSET_DELTA)
    }

    /// Timestamp the record timestamp deltas are relative to.
    pub fn base_timestamp(&self) -> i64 {
        read_i64(self.bytes, field::BASE_TIMESTAMP)
    }

    /// Largest record timestamp (or the log append time).
    pub fn max_timestamp(&self) -> i64 {
        read_i64(self.bytes, field::MAX_TIMESTAMP)
    }

    /// Idempotent producer id (-1 if none).
    pub fn producer_id(&self) -> i64 {
        read_i64(self.bytes, field::PRODUCER_ID)
    }

    /// Idempotent producer epoch (-1 if none).
    pub fn producer_epoch(&self) -> i16 {
        i16::from_be_bytes(read_array(self.bytes, field::PRODUCER_EPOCH))
    }

    /// Sequence number of the first record (-1 if none).
    pub fn base_sequence(&self) -> i32 {
        read_i32(self.bytes, field::BASE_SEQUENCE)
    }

    /// Records count field.
    pub fn records_count(&self) -> i32 {
        read_i32(self.bytes, field::RECORDS_COUNT)
    }

    /// Offset of the last record: base offset + last offset delta
    /// (wrapping, so a corrupt header cannot panic).
    pub fn last_offset(&self) -> i64 {
        self.base_offset().wrapping_add(i64::from(self.last_offset_delta()))
    }

    /// Fully decodes the batch (CRC checked first); see
    /// [`RecordBatch::decode`].
    pub fn decode(&self) -> Result<RecordBatch, BatchError> {
        RecordBatch::decode(self.bytes)
    }

    /// [`BatchError::CrcMismatch`] unless the stored CRC is right.
    pub(crate) fn check_crc(&self) -> Result<(), BatchError> {
        let (stored, computed) = (self.crc(), self.computed_crc());
        if stored == computed {
            Ok(())
        } else {
            Err(BatchError::CrcMismatch { stored, computed })
        }
    }

    fn check_records_count(&self) -> Result<(), BatchError> {
        let records_count = self.records_count();
        let last_offset_delta = self.last_offset_delta();
        let plausible = last_offset_delta >= 0
            && records_count >= 1
            && i64::from(records_count) <= i64::from(last_offset_delta) + 1;
        if plausible {
            Ok(())
        } else {
            Err(BatchError::InvalidRecordCount { records_count, last_offset_delta })
        }
    }
}

/// Overwrites the base sequence of an encoded batch in place and recomputes its
/// CRC (the field is covered): how a producer renumbers a batch whose earlier
/// sequence numbers went unused.
///
/// # Panics
///
/// If `batch` is shorter than a batch header.
pub fn set_base_sequence(batch: &mut [u8], base_sequence: i32) {
    write_at(batch, field::BASE_SEQUENCE, &base_sequence.to_be_bytes());
    reseal(batch);
}

/// Recomputes the CRC of an encoded batch after bytes it covers were edited.
///
/// # Panics
///
/// If `batch` is shorter than a batch header.
pub fn reseal(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[field::ATTRIBUTES..]);
    write_at(batch, field::CRC, &crc.to_be_bytes());
}

/// Overwrites the base offset of an encoded batch in place. The CRC does not
/// cover it, so a valid batch stays valid (this is how the leader assigns
/// offsets on append).
///
/// # Panics
///
/// If `batch` is shorter than 8 bytes.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    write_at(batch, field::BASE_OFFSET, &base_offset.to_be_bytes());
}

/// Overwrites the partition leader epoch of an encoded batch in place. The
/// CRC does not cover it, so a valid batch stays valid.
///
/// # Panics
///
/// If `batch` is shorter than 16 bytes.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    write_at(batch, field::PARTITION_LEADER_EPOCH, &epoch.to_be_bytes());
}

fn write_at(batch: &mut [u8], at: usize, value: &[u8]) {
    batch[at..at + value.len()].copy_from_slice(value);
}

/// The `N` bytes at `at`. Callers guarantee `at + N <= bytes.len()` (a view
/// holds at least the whole header).
fn read_array<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[at..at + N]);
    out
}

fn read_i8(bytes: &[u8], at: usize) -> i8 {
    i8::from_be_bytes(read_array(bytes, at))
}

fn read_i32(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(read_array(bytes, at))
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(read_array(bytes, at))
}

fn read_i64(bytes: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(read_array(bytes, at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchBuilder;

    fn one_record_batch() -> Vec<u8> {
        let mut builder = BatchBuilder::new(1_000);
        builder.push(1_000, Some(b"k"), Some(b"v"), &[]);
        builder.encode()
    }

    #[test]
    fn new_rejects_short_mismatched_and_wrong_magic() {
        let bytes = one_record_batch();
        assert_eq!(BatchView::new(&bytes[..60]).map(|_| ()), Err(BatchError::Truncated { needed: 61, available: 60 }));
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            BatchView::new(&longer).map(|_| ()),
            Err(BatchError::LengthMismatch {
                declared: i64::try_from(bytes.len() - 12).expect("small"),
                actual: bytes.len() - 11,
            })
        );
        let mut magic1 = bytes;
        magic1[field::MAGIC] = 1;
        assert_eq!(BatchView::new(&magic1).map(|_| ()), Err(BatchError::UnsupportedMagic { magic: 1 }));
    }

    #[test]
    fn split_first_rejects_impossible_lengths() {
        let mut bytes = one_record_batch();
        for length in [-1i32, 0, 48, i32::MIN] {
            bytes[field::BATCH_LENGTH..field::BATCH_LENGTH + 4].copy_from_slice(&length.to_be_bytes());
            assert!(matches!(BatchView::split_first(&bytes), Err(BatchError::Malformed { .. })));
        }
        bytes[field::BATCH_LENGTH..field::BATCH_LENGTH + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(
            BatchView::split_first(&bytes).map(|_| ()),
            Err(BatchError::Truncated { needed: 12 + i32::MAX as usize, available: bytes.len() })
        );
    }

    #[test]
    fn validate_checks_records_count_against_last_offset_delta() {
        let cases = [
            (0, 0, false),
            (-1, 0, false),
            (1, -1, false),
            (1, 0, true),
            (2, 0, false),
            (1, 5, true),
            (6, 5, true),
            (7, 5, false),
            (i32::MAX, i32::MAX, true),
        ];
        for (records_count, last_offset_delta, ok) in cases {
            let mut bytes = one_record_batch();
            write_at(&mut bytes, field::RECORDS_COUNT, &i32::to_be_bytes(records_count));
            write_at(&mut bytes, field::LAST_OFFSET_DELTA, &i32::to_be_bytes(last_offset_delta));
            let crc = crc32c::crc32c(&bytes[field::ATTRIBUTES..]);
            write_at(&mut bytes, field::CRC, &crc.to_be_bytes());
            let result = BatchView::new(&bytes).and_then(|view| view.validate());
            if ok {
                assert_eq!(result, Ok(()), "{records_count} / {last_offset_delta}");
            } else {
                assert_eq!(result, Err(BatchError::InvalidRecordCount { records_count, last_offset_delta }));
            }
        }
    }

    #[test]
    fn validate_rejects_unknown_codecs() {
        let mut bytes = one_record_batch();
        bytes[field::ATTRIBUTES + 1] = 7;
        let crc = crc32c::crc32c(&bytes[field::ATTRIBUTES..]);
        write_at(&mut bytes, field::CRC, &crc.to_be_bytes());
        let view = BatchView::new(&bytes).expect("header is intact");
        assert_eq!(view.validate(), Err(BatchError::UnknownCompression { codec: 7 }));
    }

    #[test]
    fn stamping_keeps_the_crc_valid() {
        let mut bytes = one_record_batch();
        set_base_offset(&mut bytes, 1_234_567);
        set_partition_leader_epoch(&mut bytes, 42);
        let view = BatchView::new(&bytes).expect("header is intact");
        assert_eq!(view.validate(), Ok(()));
        assert_eq!(view.base_offset(), 1_234_567);
        assert_eq!(view.partition_leader_epoch(), 42);
        assert_eq!(view.last_offset(), 1_234_567);
    }
}

//! Property tests of the RecordBatch v2 codec over arbitrary batches and
//! arbitrary bytes.
//!
//! Role: checks the codec's invariants far beyond the hand-written vectors:
//! encode/decode round trips, the view agrees with the model, the CRC covers
//! exactly bytes 21.. (every single-bit flip there is caught, flips in the
//! base offset and partition leader epoch are not), truncation is always
//! reported as `Truncated`, and no input, however corrupt, makes decoding
//! panic. The same round trips and no-panic checks run over LZ4 and zstd
//! records sections.

use std::ops::Range;

use abi::batch::field;
use abi::{
    set_base_offset, set_partition_leader_epoch, Attributes, BatchError, BatchIter, BatchView, Compression, Header,
    Record, RecordBatch, BATCH_HEADER_BYTES, LOG_OVERHEAD_BYTES,
};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

fn arb_bytes() -> impl Strategy<Value = Option<Vec<u8>>> {
    option::of(vec(any::<u8>(), 0..=300))
}

fn arb_header() -> impl Strategy<Value = Header> {
    ("[ -~]{0,16}", arb_bytes()).prop_map(|(key, value)| Header { key, value })
}

fn arb_record() -> impl Strategy<Value = Record> {
    (any::<i8>(), any::<i64>(), any::<i32>(), arb_bytes(), arb_bytes(), vec(arb_header(), 0..3)).prop_map(
        |(attributes, timestamp_delta, offset_delta, key, value, headers)| Record {
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers,
        },
    )
}

/// An uncompressed batch with a record count in `records` and a last offset
/// delta of at least `count - 1` (the gap is what compaction removed).
/// Tests that want a codec set it with [`with_compression`].
fn arb_batch(records: Range<usize>) -> impl Strategy<Value = RecordBatch> {
    (
        (any::<i64>(), any::<i32>(), any::<u16>(), 0..1_000i32),
        (any::<i64>(), any::<i64>()),
        (any::<i64>(), any::<i16>(), any::<i32>()),
        vec(arb_record(), records),
    )
        .prop_map(
            |(
                (base_offset, partition_leader_epoch, attribute_bits, gap),
                (base_timestamp, max_timestamp),
                (producer_id, producer_epoch, base_sequence),
                records,
            )| {
                let count = i32::try_from(records.len()).expect("at most 20 records");
                RecordBatch {
                    base_offset,
                    partition_leader_epoch,
                    // Any bits but the codec (gzip and snappy do not encode).
                    attributes: Attributes(attribute_bits & !0b111),
                    last_offset_delta: (count - 1).max(0) + gap,
                    base_timestamp,
                    max_timestamp,
                    producer_id,
                    producer_epoch,
                    base_sequence,
                    records,
                }
            },
        )
}

/// Every codec this crate writes.
fn arb_compression() -> impl Strategy<Value = Compression> {
    prop_oneof![Just(Compression::None), Just(Compression::Lz4), Just(Compression::Zstd)]
}

fn with_compression(batch: RecordBatch, compression: Compression) -> RecordBatch {
    RecordBatch { attributes: batch.attributes.with_compression(compression), ..batch }
}

fn encode(batch: &RecordBatch) -> Vec<u8> {
    batch.encode().expect("none, lz4 and zstd batches encode")
}

/// Rewrites the batch length and CRC so a hand-made batch passes both.
fn reseal(bytes: &mut [u8]) {
    let batch_length = i32::try_from(bytes.len() - LOG_OVERHEAD_BYTES).expect("small batch");
    bytes[field::BATCH_LENGTH..field::BATCH_LENGTH + 4].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[field::ATTRIBUTES..]);
    bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Decodes every way the crate offers; only checks that nothing panics and
/// that whatever decodes re-encodes to a batch decoding the same.
fn decode_all_ways(bytes: &[u8]) {
    if let Ok(batch) = RecordBatch::decode(bytes) {
        let again = encode(&batch);
        assert_eq!(RecordBatch::decode(&again), Ok(batch));
    }
    if let Ok((view, _rest)) = BatchView::split_first(bytes) {
        let _ = view.validate();
        let _ = view.decode();
        let _ = view.last_offset();
    }
    for view in BatchIter::new(bytes).flatten() {
        let _ = view.validate();
    }
}

proptest! {
    #[test]
    fn encode_decode_round_trips(batch in arb_batch(0..20)) {
        let bytes = encode(&batch);
        let decoded = RecordBatch::decode(&bytes);
        prop_assert_eq!(decoded.as_ref(), Ok(&batch));
        prop_assert_eq!(encode(&batch), bytes);
    }

    #[test]
    fn every_codec_round_trips(batch in arb_batch(0..20), compression in arb_compression()) {
        let batch = with_compression(batch, compression);
        let bytes = encode(&batch);
        let view = BatchView::new(&bytes).expect("encoded header is intact");
        prop_assert_eq!(view.attributes().compression(), Ok(compression));
        prop_assert_eq!(usize::try_from(view.records_count()).ok(), Some(batch.records.len()));
        prop_assert_eq!(view.crc(), view.computed_crc());
        let decoded = RecordBatch::decode(&bytes);
        prop_assert_eq!(decoded.as_ref(), Ok(&batch));
        // The encoder is deterministic for every codec.
        prop_assert_eq!(encode(&batch), bytes);
    }

    #[test]
    fn view_agrees_with_the_model(batch in arb_batch(0..20)) {
        let bytes = encode(&batch);
        let view = BatchView::new(&bytes).expect("encoded header is intact");
        prop_assert_eq!(view.size_bytes(), bytes.len());
        prop_assert_eq!(usize::try_from(view.batch_length()).ok(), Some(bytes.len() - 12));
        prop_assert_eq!(view.base_offset(), batch.base_offset);
        prop_assert_eq!(view.partition_leader_epoch(), batch.partition_leader_epoch);
        prop_assert_eq!(view.magic(), 2);
        prop_assert_eq!(view.crc(), view.computed_crc());
        prop_assert_eq!(view.attributes(), batch.attributes);
        prop_assert_eq!(view.last_offset_delta(), batch.last_offset_delta);
        prop_assert_eq!(view.base_timestamp(), batch.base_timestamp);
        prop_assert_eq!(view.max_timestamp(), batch.max_timestamp);
        prop_assert_eq!(view.producer_id(), batch.producer_id);
        prop_assert_eq!(view.producer_epoch(), batch.producer_epoch);
        prop_assert_eq!(view.base_sequence(), batch.base_sequence);
        prop_assert_eq!(usize::try_from(view.records_count()).ok(), Some(batch.records.len()));
        prop_assert_eq!(
            view.last_offset(),
            batch.base_offset.wrapping_add(i64::from(batch.last_offset_delta))
        );
    }

    #[test]
    fn encoded_batches_validate(batch in arb_batch(1..20)) {
        let bytes = encode(&batch);
        let view = BatchView::new(&bytes).expect("encoded header is intact");
        prop_assert_eq!(view.validate(), Ok(()));
    }

    #[test]
    fn any_bit_flip_in_the_crc_or_what_it_covers_is_caught(
        batch in arb_batch(1..20),
        position in any::<prop::sample::Index>(),
        bit in 0..8u8,
    ) {
        let mut bytes = encode(&batch);
        let index = field::CRC + position.index(bytes.len() - field::CRC);
        bytes[index] ^= 1 << bit;
        let view = BatchView::new(&bytes).expect("header length and magic untouched");
        let is_crc_mismatch = matches!(view.validate(), Err(BatchError::CrcMismatch { .. }));
        prop_assert!(is_crc_mismatch, "flip of bit {} at byte {} went unnoticed", bit, index);
        prop_assert!(RecordBatch::decode(&bytes).is_err());
    }

    #[test]
    fn bit_flips_outside_the_crc_range_keep_it_valid(
        batch in arb_batch(1..20),
        position in prop_oneof![
            field::BASE_OFFSET..field::BASE_OFFSET + 8,
            field::PARTITION_LEADER_EPOCH..field::PARTITION_LEADER_EPOCH + 4,
        ],
        bit in 0..8u8,
    ) {
        let mut bytes = encode(&batch);
        bytes[position] ^= 1 << bit;
        let view = BatchView::new(&bytes).expect("header length and magic untouched");
        prop_assert_eq!(view.validate(), Ok(()));
    }

    #[test]
    fn stamping_keeps_the_batch_valid(
        batch in arb_batch(1..20),
        base_offset in any::<i64>(),
        epoch in any::<i32>(),
    ) {
        let mut bytes = encode(&batch);
        set_base_offset(&mut bytes, base_offset);
        set_partition_leader_epoch(&mut bytes, epoch);
        let view = BatchView::new(&bytes).expect("header length and magic untouched");
        prop_assert_eq!(view.validate(), Ok(()));
        let expected = RecordBatch { base_offset, partition_leader_epoch: epoch, ..batch };
        prop_assert_eq!(view.decode(), Ok(expected));
    }

    #[test]
    fn every_truncation_is_truncated(batch in arb_batch(0..20)) {
        let bytes = encode(&batch);
        for cut in 0..bytes.len() {
            let needed = if cut < LOG_OVERHEAD_BYTES { LOG_OVERHEAD_BYTES } else { bytes.len() };
            prop_assert_eq!(
                BatchView::split_first(&bytes[..cut]).map(|_| ()),
                Err(BatchError::Truncated { needed, available: cut })
            );
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..400)) {
        decode_all_ways(&bytes);
    }

    #[test]
    fn arbitrary_records_behind_a_valid_header_never_panic(
        records_count in prop_oneof![0..4i32, any::<i32>()],
        body in vec(any::<u8>(), 0..200),
    ) {
        let mut bytes = encode(&abi::BatchBuilder::new(0).build());
        bytes[field::RECORDS_COUNT..field::RECORDS_COUNT + 4]
            .copy_from_slice(&records_count.to_be_bytes());
        bytes.extend_from_slice(&body);
        reseal(&mut bytes);
        decode_all_ways(&bytes);
    }

    #[test]
    fn arbitrary_compressed_sections_never_panic(
        compression in prop_oneof![Just(Compression::Lz4), Just(Compression::Zstd)],
        with_magic in any::<bool>(),
        records_count in prop_oneof![0..4i32, any::<i32>()],
        body in vec(any::<u8>(), 0..200),
    ) {
        let mut bytes = encode(&with_compression(abi::BatchBuilder::new(0).build(), compression));
        bytes.truncate(BATCH_HEADER_BYTES);
        bytes[field::RECORDS_COUNT..field::RECORDS_COUNT + 4]
            .copy_from_slice(&records_count.to_be_bytes());
        if with_magic {
            let magic: u32 = if compression == Compression::Lz4 { 0x184d_2204 } else { 0xfd2f_b528 };
            bytes.extend_from_slice(&magic.to_le_bytes());
        }
        bytes.extend_from_slice(&body);
        reseal(&mut bytes);
        decode_all_ways(&bytes);
    }

    #[test]
    fn corrupted_resealed_compressed_batches_never_panic(
        batch in arb_batch(1..6),
        compression in arb_compression(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode(&with_compression(batch, compression));
        for (position, value) in edits {
            let index = BATCH_HEADER_BYTES + position.index(bytes.len() - BATCH_HEADER_BYTES);
            if let Some(byte) = bytes.get_mut(index) {
                *byte = value;
            }
        }
        reseal(&mut bytes);
        decode_all_ways(&bytes);
    }

    #[test]
    fn corrupted_resealed_batches_never_panic(
        batch in arb_batch(1..6),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = encode(&batch);
        for (position, value) in edits {
            let index = BATCH_HEADER_BYTES + position.index(bytes.len() - BATCH_HEADER_BYTES);
            if let Some(byte) = bytes.get_mut(index) {
                *byte = value;
            }
        }
        reseal(&mut bytes);
        decode_all_ways(&bytes);
    }
}

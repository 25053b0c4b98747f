//! Compressed RecordBatch v2: LZ4 and zstd records sections through the
//! public API.
//!
//! Pins down: batches of many records (keys, null values, headers) round
//! trip through `BatchBuilder::compression`, `encode` and `RecordBatch::decode`;
//! the header stays readable by `BatchView` without decompressing; the
//! records section is a real LZ4 frame (Kafka's frame descriptor) or zstd
//! frame, and output of the reference `lz4` and `zstd` command-line tools
//! decodes; corrupt compressed data behind a valid CRC is
//! `BatchError::Decompression`, a decompression bomb is
//! `BatchError::DecompressedTooLarge`, and gzip and snappy are
//! `BatchError::UnsupportedCompression`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use abi::batch::field;
use abi::{
    set_base_offset, BatchBuilder, BatchError, BatchView, Compression, RecordBatch, BATCH_HEADER_BYTES,
    DECOMPRESSED_BYTES_MAX, LOG_OVERHEAD_BYTES,
};

const CODECS: [Compression; 2] = [Compression::Lz4, Compression::Zstd];

/// 1 000 records: every third key null, every fifth value null (a
/// tombstone), every seventh record with two headers, one of them null.
fn many_records(compression: Compression) -> BatchBuilder {
    let mut builder = BatchBuilder::new(1_700_000_000_000).producer(42, 3, 100).compression(compression).unwrap();
    for i in 0..1_000i64 {
        let key = format!("key-{}", i % 37);
        let value = format!("value {i} of a fairly repetitive payload, payload, payload");
        let key = (i % 3 != 0).then_some(key.as_bytes());
        let value = (i % 5 != 0).then_some(value.as_bytes());
        let headers: &[(&str, Option<&[u8]>)] =
            if i % 7 == 0 { &[("trace", Some(b"abc")), ("empty", None)] } else { &[] };
        builder.push(1_700_000_000_000 + i % 50, key, value, headers);
    }
    builder
}

/// Rewrites the batch length and CRC so a hand-edited batch passes both.
fn reseal(bytes: &mut [u8]) {
    let batch_length = i32::try_from(bytes.len() - LOG_OVERHEAD_BYTES).unwrap();
    bytes[field::BATCH_LENGTH..field::BATCH_LENGTH + 4].copy_from_slice(&batch_length.to_be_bytes());
    let crc = crc32c::crc32c(&bytes[field::ATTRIBUTES..]);
    bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// `bytes` with its records section replaced by `section`, resealed.
fn with_section(bytes: &[u8], section: &[u8]) -> Vec<u8> {
    let mut out = bytes[..BATCH_HEADER_BYTES].to_vec();
    out.extend_from_slice(section);
    reseal(&mut out);
    out
}

fn is_decompression_error(result: &Result<RecordBatch, BatchError>, compression: Compression) -> bool {
    matches!(result, Err(BatchError::Decompression { compression: c, .. }) if *c == compression)
}

#[test]
fn many_records_round_trip() {
    for compression in CODECS {
        let builder = many_records(compression);
        let bytes = builder.encode();
        let decoded = RecordBatch::decode(&bytes).unwrap();
        assert_eq!(decoded, builder.build(), "{compression}");
        assert_eq!(decoded.records.len(), 1_000);
        assert_eq!(decoded.records[0].key, None);
        assert_eq!(decoded.records[0].value, None);
        assert_eq!(decoded.records[7].headers.len(), 2);
        assert_eq!(decoded.records[7].headers[1].value, None);
        // Our compressors are deterministic: the decoded model re-encodes
        // to the same bytes.
        assert_eq!(decoded.encode(), Ok(bytes), "{compression}");
    }
}

#[test]
fn view_reads_a_compressed_header_without_decompressing() {
    for compression in CODECS {
        let mut bytes = many_records(compression).encode();
        let view = BatchView::new(&bytes).unwrap();
        assert_eq!(view.validate(), Ok(()));
        assert_eq!(view.attributes().compression(), Ok(compression));
        assert_eq!(view.records_count(), 1_000);
        assert_eq!(view.last_offset_delta(), 999);
        assert_eq!(view.max_timestamp(), 1_700_000_000_049);
        assert_eq!((view.producer_id(), view.producer_epoch(), view.base_sequence()), (42, 3, 100));

        // A corrupt section behind a valid CRC still validates: the view
        // checks integrity, not the records.
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        reseal(&mut bytes);
        set_base_offset(&mut bytes, 5_000);
        let view = BatchView::new(&bytes).unwrap();
        assert_eq!(view.validate(), Ok(()));
        assert_eq!(view.last_offset(), 5_999);
    }
}

#[test]
fn compressed_is_smaller_for_repetitive_data() {
    let plain = many_records(Compression::None).encode();
    for compression in CODECS {
        let compressed = many_records(compression).encode();
        assert!(
            compressed.len() * 4 < plain.len(),
            "{compression}: {} bytes compressed vs {} plain",
            compressed.len(),
            plain.len()
        );
    }
}

#[test]
fn records_section_starts_with_the_frame_magic() {
    let lz4 = many_records(Compression::Lz4).encode();
    // LZ4 frame magic 0x184D2204 (little-endian), then Kafka's frame
    // descriptor: FLG 0x60, BD 0x40, header checksum 0x82.
    assert_eq!(lz4[BATCH_HEADER_BYTES..BATCH_HEADER_BYTES + 7], [0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82]);
    let zstd = many_records(Compression::Zstd).encode();
    // Zstandard frame magic 0xFD2FB528 (little-endian).
    assert_eq!(zstd[BATCH_HEADER_BYTES..BATCH_HEADER_BYTES + 4], [0x28, 0xb5, 0x2f, 0xfd]);
}

/// Three records, each: null key, value 40 x `a`, timestamp delta 0, offset
/// delta `i`, no headers (141 bytes uncompressed).
fn three_a_records(compression: Compression) -> BatchBuilder {
    let mut builder = BatchBuilder::new(0).compression(compression).unwrap();
    for _ in 0..3 {
        builder.push(0, None, Some(&[b'a'; 40]), &[]);
    }
    builder
}

/// The records of [`three_a_records`], written by hand from the record layout.
fn three_a_records_section() -> Vec<u8> {
    let mut section = Vec::new();
    for offset_delta in 0..3u8 {
        // length 46, attributes, timestamp delta 0, offset delta (zigzag),
        // null key, value length 40 (zigzag 80)
        section.extend_from_slice(&[0x5c, 0x00, 0x00, offset_delta * 2, 0x01, 0x50]);
        section.extend_from_slice(&[b'a'; 40]);
        section.push(0x00); // header count 0
    }
    section
}

/// [`three_a_records_section`] compressed by the reference LZ4 CLI v1.9.4
/// (`lz4 -BI -B4 --no-frame-crc`, the frame Kafka writes).
const REFERENCE_LZ4: [u8; 46] = [
    0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82, 0x1f, 0x00, 0x00, 0x00, 0x7f, 0x5c, 0x00, 0x00, 0x00, 0x01, 0x50, 0x61,
    0x01, 0x00, 0x14, 0x5f, 0x00, 0x5c, 0x00, 0x00, 0x02, 0x2f, 0x00, 0x1b, 0x1f, 0x04, 0x2f, 0x00, 0x13, 0x50, 0x61,
    0x61, 0x61, 0x61, 0x00, 0x00, 0x00, 0x00, 0x00,
];

/// [`three_a_records_section`] compressed by the reference zstd CLI v1.5.4
/// (`zstd -3`, with content checksum).
const REFERENCE_ZSTD: [u8; 37] = [
    0x28, 0xb5, 0x2f, 0xfd, 0x24, 0x8d, 0xc5, 0x00, 0x00, 0x68, 0x5c, 0x00, 0x00, 0x00, 0x01, 0x50, 0x61, 0x00, 0x5c,
    0x00, 0x00, 0x02, 0x04, 0x03, 0x00, 0x00, 0x53, 0x2c, 0x95, 0xa9, 0x95, 0xc0, 0x08, 0x77, 0x81, 0x70, 0x6f,
];

#[test]
fn reference_tool_output_decodes() {
    let plain = three_a_records(Compression::None).encode();
    assert_eq!(plain[BATCH_HEADER_BYTES..], three_a_records_section()[..]);
    for (compression, reference) in [(Compression::Lz4, &REFERENCE_LZ4[..]), (Compression::Zstd, &REFERENCE_ZSTD[..])] {
        let builder = three_a_records(compression);
        let bytes = with_section(&builder.encode(), reference);
        assert_eq!(RecordBatch::decode(&bytes), Ok(builder.build()), "{compression}");
    }
}

#[test]
fn corrupt_compressed_data_behind_a_valid_crc_is_a_decompression_error() {
    for compression in CODECS {
        let bytes = many_records(compression).encode();
        let section = &bytes[BATCH_HEADER_BYTES..];
        // Cut inside a block (LZ4 tolerates a frame missing only its end
        // mark, since every byte of data is still there).
        let truncated = with_section(&bytes, &section[..section.len() / 2]);
        let trailing_garbage = with_section(&bytes, &[section, b"garbage!"].concat());
        let mut bad_magic = bytes.clone();
        bad_magic[BATCH_HEADER_BYTES] ^= 0xff;
        reseal(&mut bad_magic);
        let empty_frame_header = with_section(&bytes, &section[..5]);
        for (case, corrupt) in [
            ("truncated", truncated),
            ("trailing", trailing_garbage),
            ("magic", bad_magic),
            ("header", empty_frame_header),
        ] {
            assert_eq!(BatchView::new(&corrupt).unwrap().validate(), Ok(()), "{compression} {case}");
            let result = RecordBatch::decode(&corrupt);
            let summary = result.as_ref().map(|batch| batch.records.len());
            assert!(is_decompression_error(&result, compression), "{compression} {case}: {summary:?}");
        }
    }
}

/// The records section compressed directly with the codec crate, so a test
/// can compress bytes that are not records.
fn compress_with(compression: Compression, data: &[u8]) -> Vec<u8> {
    match compression {
        Compression::Lz4 => {
            use std::io::Write;
            let mut encoder = lz4_flex::frame::FrameEncoder::new(Vec::new());
            encoder.write_all(data).unwrap();
            encoder.finish().unwrap()
        }
        Compression::Zstd => zstd::bulk::compress(data, 3).unwrap(),
        other => panic!("no test compressor for {other}"),
    }
}

#[test]
fn a_decompression_bomb_is_too_large() {
    let zeros = vec![0u8; DECOMPRESSED_BYTES_MAX + 1];
    for compression in CODECS {
        let mut one_record = BatchBuilder::new(0).compression(compression).unwrap();
        one_record.push(0, None, None, &[]);
        let compressed = compress_with(compression, &zeros);
        assert!(compressed.len() * 100 < zeros.len(), "{compression}: {} bytes is no bomb", compressed.len());
        let bomb = with_section(&one_record.encode(), &compressed);
        assert_eq!(BatchView::new(&bomb).unwrap().validate(), Ok(()));
        assert_eq!(
            RecordBatch::decode(&bomb),
            Err(BatchError::DecompressedTooLarge { compression, limit: DECOMPRESSED_BYTES_MAX })
        );
    }
}

#[test]
fn decode_with_limit_bounds_the_decompressed_records() {
    let plain_section_bytes = many_records(Compression::None).encode().len() - BATCH_HEADER_BYTES;
    for compression in CODECS {
        let builder = many_records(compression);
        let bytes = builder.encode();
        assert_eq!(RecordBatch::decode_with_limit(&bytes, plain_section_bytes), Ok(builder.build()));
        assert_eq!(
            RecordBatch::decode_with_limit(&bytes, plain_section_bytes - 1),
            Err(BatchError::DecompressedTooLarge { compression, limit: plain_section_bytes - 1 })
        );
    }
    // The limit is about decompression: uncompressed records are not held to it.
    let plain = many_records(Compression::None);
    assert_eq!(RecordBatch::decode_with_limit(&plain.encode(), 0), Ok(plain.build()));
}

#[test]
fn records_count_must_match_the_decompressed_records() {
    for compression in CODECS {
        let bytes = three_a_records(compression).encode();
        for (records_count, reason) in [
            (4u8, "records count is larger than the records in the batch"),
            (2, "bytes left after the last record (records count is smaller than the records in the batch)"),
        ] {
            let mut wrong = bytes.clone();
            wrong[field::RECORDS_COUNT + 3] = records_count;
            reseal(&mut wrong);
            assert_eq!(RecordBatch::decode(&wrong), Err(BatchError::Malformed { reason }), "{compression}");
        }
    }
}

#[test]
fn gzip_and_snappy_are_unsupported_but_still_validate() {
    for compression in [Compression::Gzip, Compression::Snappy] {
        let unsupported = BatchError::UnsupportedCompression { compression };
        assert_eq!(BatchBuilder::new(0).compression(compression).map(|_| ()), Err(unsupported.clone()));

        let mut batch = three_a_records(Compression::None).build();
        batch.attributes = batch.attributes.with_compression(compression);
        assert_eq!(batch.encode(), Err(unsupported.clone()));

        let mut bytes = three_a_records(Compression::None).encode();
        bytes[field::ATTRIBUTES + 1] = compression.codec();
        reseal(&mut bytes);
        let view = BatchView::new(&bytes).unwrap();
        assert_eq!(view.validate(), Ok(()), "the broker stores {compression} batches as they are");
        assert_eq!(view.decode(), Err(unsupported));
    }
}

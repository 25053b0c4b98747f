//! Hand-derived test vector for Kafka RecordBatch v2, written byte by byte
//! from the format spec (not produced by this crate).
//!
//! Role: pins the exact wire bytes, so any drift in field order, width,
//! endianness, varint encoding, batch length or CRC range fails here.
//!
//! The batch: base offset 0, partition leader epoch 0, attributes 0, last
//! offset delta 1, base timestamp 1_700_000_000_000, max timestamp base + 5,
//! no producer (id -1, epoch -1, base sequence -1), two records:
//! - record 0 at the base timestamp: key "k", value "v1", no headers;
//! - record 1 at base + 5: null key, value "v2", one header ("h", "x").

use abi::batch::field;
use abi::{Attributes, BatchBuilder, BatchView, Header, Record, RecordBatch};

/// CRC-32C of bytes 21..84 of [`SPEC_BATCH`], computed once with an
/// independent bitwise CRC-32C and hard-coded to catch a wrong CRC range.
const EXPECTED_CRC: u32 = 0xfde8_6579;
const BASE_TIMESTAMP: i64 = 1_700_000_000_000;

/// The batch with its CRC field zeroed; the test fills it in.
#[rustfmt::skip]
const SPEC_BATCH: [u8; 84] = [
    // --- log overhead ---
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // base offset: int64 0
    0x00, 0x00, 0x00, 0x48,                         // batch length: int32 72 (= 84 - 12)
    // --- header ---
    0x00, 0x00, 0x00, 0x00,                         // partition leader epoch: int32 0
    0x02,                                           // magic: int8 2
    0x00, 0x00, 0x00, 0x00,                         // CRC: uint32, CRC-32C of bytes 21..84 (filled in)
    0x00, 0x00,                                     // attributes: int16 0 (no compression, create time)
    0x00, 0x00, 0x00, 0x01,                         // last offset delta: int32 1
    0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x00, // base timestamp: int64 1_700_000_000_000
    0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x68, 0x05, // max timestamp: int64 1_700_000_000_005
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // producer id: int64 -1
    0xff, 0xff,                                     // producer epoch: int16 -1
    0xff, 0xff, 0xff, 0xff,                         // base sequence: int32 -1
    0x00, 0x00, 0x00, 0x02,                         // records count: int32 2
    // --- record 0 (10 bytes) ---
    0x12,                                           // length: varint 9 (zigzag 18)
    0x00,                                           // attributes: int8 0
    0x00,                                           // timestamp delta: varlong 0
    0x00,                                           // offset delta: varint 0
    0x02, b'k',                                     // key length: varint 1, key "k"
    0x04, b'v', b'1',                               // value length: varint 2, value "v1"
    0x00,                                           // header count: varint 0
    // --- record 1 (13 bytes) ---
    0x18,                                           // length: varint 12 (zigzag 24)
    0x00,                                           // attributes: int8 0
    0x0a,                                           // timestamp delta: varlong 5 (zigzag 10)
    0x02,                                           // offset delta: varint 1 (zigzag 2)
    0x01,                                           // key length: varint -1 (null key)
    0x04, b'v', b'2',                               // value length: varint 2, value "v2"
    0x02,                                           // header count: varint 1
    0x02, b'h',                                     //   header key length: varint 1, key "h"
    0x02, b'x',                                     //   header value length: varint 1, value "x"
];

/// The spec batch with its CRC computed the way the spec defines it.
fn spec_bytes() -> Vec<u8> {
    let mut bytes = SPEC_BATCH.to_vec();
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    bytes
}

fn spec_model() -> RecordBatch {
    RecordBatch {
        base_offset: 0,
        partition_leader_epoch: 0,
        attributes: Attributes(0),
        last_offset_delta: 1,
        base_timestamp: BASE_TIMESTAMP,
        max_timestamp: BASE_TIMESTAMP + 5,
        producer_id: -1,
        producer_epoch: -1,
        base_sequence: -1,
        records: vec![
            Record {
                attributes: 0,
                timestamp_delta: 0,
                offset_delta: 0,
                key: Some(b"k".to_vec()),
                value: Some(b"v1".to_vec()),
                headers: vec![],
            },
            Record {
                attributes: 0,
                timestamp_delta: 5,
                offset_delta: 1,
                key: None,
                value: Some(b"v2".to_vec()),
                headers: vec![Header { key: "h".to_owned(), value: Some(b"x".to_vec()) }],
            },
        ],
    }
}

fn spec_builder() -> BatchBuilder {
    let mut builder = BatchBuilder::new(BASE_TIMESTAMP);
    builder.push(BASE_TIMESTAMP, Some(b"k"), Some(b"v1"), &[]);
    builder.push(BASE_TIMESTAMP + 5, None, Some(b"v2"), &[("h", Some(b"x"))]);
    builder
}

#[test]
fn crc32c_check_value() {
    assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
}

#[test]
fn spec_crc_is_the_hard_coded_value() {
    let bytes = spec_bytes();
    assert_eq!(u32::from_be_bytes([bytes[17], bytes[18], bytes[19], bytes[20]]), EXPECTED_CRC);
}

#[test]
fn field_positions_match_the_vector() {
    let bytes = spec_bytes();
    assert_eq!(bytes.len(), 84);
    assert_eq!(bytes[field::MAGIC], 2);
    assert_eq!(&bytes[field::RECORDS_COUNT..field::RECORDS_COUNT + 4], [0, 0, 0, 2]);
    assert_eq!(bytes[abi::BATCH_HEADER_BYTES], 0x12); // first record's length
}

#[test]
fn model_encodes_to_the_vector() {
    assert_eq!(spec_model().encode(), Ok(spec_bytes()));
}

#[test]
fn builder_encodes_to_the_vector() {
    let builder = spec_builder().partition_leader_epoch(0);
    assert_eq!(builder.build(), spec_model());
    assert_eq!(builder.encode(), spec_bytes());
}

#[test]
fn default_builder_differs_only_in_the_uncovered_leader_epoch() {
    let mut bytes = spec_builder().encode();
    assert_eq!(&bytes[field::PARTITION_LEADER_EPOCH..field::MAGIC], [0xff; 4]);
    abi::set_partition_leader_epoch(&mut bytes, 0);
    assert_eq!(bytes, spec_bytes());
}

#[test]
fn vector_decodes_to_the_model() {
    let bytes = spec_bytes();
    assert_eq!(RecordBatch::decode(&bytes), Ok(spec_model()));
    let view = BatchView::new(&bytes).expect("spec batch has a valid header");
    assert_eq!(view.decode(), Ok(spec_model()));
}

#[test]
fn view_reads_every_header_field() {
    let bytes = spec_bytes();
    let view = BatchView::new(&bytes).expect("spec batch has a valid header");
    assert_eq!(view.validate(), Ok(()));
    assert_eq!(view.base_offset(), 0);
    assert_eq!(view.batch_length(), 72);
    assert_eq!(view.partition_leader_epoch(), 0);
    assert_eq!(view.magic(), abi::MAGIC_V2);
    assert_eq!(view.crc(), EXPECTED_CRC);
    assert_eq!(view.computed_crc(), EXPECTED_CRC);
    assert_eq!(view.attributes(), Attributes(0));
    assert_eq!(view.last_offset_delta(), 1);
    assert_eq!(view.base_timestamp(), BASE_TIMESTAMP);
    assert_eq!(view.max_timestamp(), BASE_TIMESTAMP + 5);
    assert_eq!(view.producer_id(), -1);
    assert_eq!(view.producer_epoch(), -1);
    assert_eq!(view.base_sequence(), -1);
    assert_eq!(view.records_count(), 2);
    assert_eq!(view.last_offset(), 1);
    assert_eq!(view.size_bytes(), 84);
    assert_eq!(view.as_bytes(), &bytes[..]);
}

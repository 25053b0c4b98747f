//! [`Record`] and [`Header`]: one record of a batch, and its byte-exact
//! codec.
//!
//! Role: the record layer of RecordBatch v2, used by the full encoder and
//! decoder ([`RecordBatch`](super::RecordBatch)); the hot path never comes
//! here. The layout is documented on [`Record`].
//!
//! Invariants: encoding writes the shortest varints, so encode(decode(b)) ==
//! b for every batch a Kafka client writes; decoding reads exactly the
//! record length it declares (no more, no less) and never panics.

use super::cursor::Cursor;
use super::error::BatchError;
use crate::varint::{encode_varint, encode_varlong, varint_size, varlong_size};

/// Length prefix meaning "null" for keys and values.
const NULL_LENGTH: i32 = -1;

/// One record inside a batch. Offsets and timestamps are deltas from the
/// batch's base offset and base timestamp.
///
/// Wire layout, varints being zigzag (see [`crate::varint`]):
///
/// | field               | type                 | notes                                   |
/// |---------------------|----------------------|-----------------------------------------|
/// | length              | varint               | bytes of the record after this field    |
/// | attributes          | int8                 | unused by Kafka, kept as is             |
/// | timestamp delta     | varlong              | timestamp - base timestamp              |
/// | offset delta        | varint               | offset - base offset                    |
/// | key length          | varint               | -1 = null key                           |
/// | key                 | bytes                | key length bytes                        |
/// | value length        | varint               | -1 = null value                         |
/// | value               | bytes                | value length bytes                      |
/// | header count        | varint               | >= 0                                    |
/// | headers             | [`Header`] x count   | see [`Header`]                          |
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Record {
    /// Record attributes (unused by Kafka, written as 0 by clients).
    pub attributes: i8,
    /// Timestamp minus the batch's base timestamp.
    pub timestamp_delta: i64,
    /// Offset minus the batch's base offset.
    pub offset_delta: i32,
    /// Key, `None` for a null key.
    pub key: Option<Vec<u8>>,
    /// Value, `None` for a null value (a tombstone under compaction).
    pub value: Option<Vec<u8>>,
    /// Headers, in wire order.
    pub headers: Vec<Header>,
}

/// One record header.
///
/// Wire layout:
///
/// | field               | type    | notes                                |
/// |---------------------|---------|--------------------------------------|
/// | header key length   | varint  | >= 0 (a header key is never null)    |
/// | header key          | bytes   | UTF-8                                |
/// | header value length | varint  | -1 = null value                      |
/// | header value        | bytes   | header value length bytes            |
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Header key.
    pub key: String,
    /// Header value, `None` for null.
    pub value: Option<Vec<u8>>,
}

/// Reasons reported for a length-prefixed field that cannot be read.
struct FieldReasons {
    bad_length: &'static str,
    overrun: &'static str,
}

const KEY: FieldReasons = FieldReasons {
    bad_length: "record key length is not a valid varint or is below -1",
    overrun: "record key runs past the end of its record",
};
const VALUE: FieldReasons = FieldReasons {
    bad_length: "record value length is not a valid varint or is below -1",
    overrun: "record value runs past the end of its record",
};
const HEADER_KEY: FieldReasons = FieldReasons {
    bad_length: "header key length is not a valid varint or is negative",
    overrun: "header key runs past the end of its record",
};
const HEADER_VALUE: FieldReasons = FieldReasons {
    bad_length: "header value length is not a valid varint or is below -1",
    overrun: "header value runs past the end of its record",
};

/// Smallest possible encoded record: six one-byte fields after a one-byte
/// length. Used to bound allocations driven by an untrusted count.
pub(crate) const MIN_RECORD_BYTES: usize = 7;
/// Smallest possible encoded header: two one-byte lengths.
const MIN_HEADER_BYTES: usize = 2;

impl Record {
    /// Appends the record (length prefix included) to `out`.
    ///
    /// Fails only if a length does not fit Kafka's int32 fields.
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), BatchError> {
        let body_len = length_i32(self.body_len()?, "record longer than 2^31-1 bytes")?;
        encode_varint(body_len, out);
        out.push(self.attributes.to_be_bytes()[0]);
        encode_varlong(self.timestamp_delta, out);
        encode_varint(self.offset_delta, out);
        encode_nullable(self.key.as_deref(), out)?;
        encode_nullable(self.value.as_deref(), out)?;
        let header_count = length_i32(self.headers.len(), "more than 2^31-1 headers")?;
        encode_varint(header_count, out);
        self.headers.iter().try_for_each(|header| header.encode_into(out))
    }

    /// Reads one record (length prefix included) from `cursor`.
    pub(crate) fn decode(cursor: &mut Cursor<'_>) -> Result<Self, BatchError> {
        let length = cursor.read_varint("record length is not a valid varint")?;
        let length = usize::try_from(length).map_err(|_| BatchError::malformed("record length is negative"))?;
        let body = cursor.read_bytes(length, "record runs past the end of the batch")?;
        let mut body = Cursor::new(body);
        let record = Self::decode_body(&mut body)?;
        if !body.is_empty() {
            return Err(BatchError::malformed("record length is larger than the record's fields"));
        }
        Ok(record)
    }

    fn decode_body(body: &mut Cursor<'_>) -> Result<Self, BatchError> {
        let attributes = body.read_i8("record attributes missing")?;
        let timestamp_delta = body.read_varlong("record timestamp delta is not a valid varlong")?;
        let offset_delta = body.read_varint("record offset delta is not a valid varint")?;
        let key = decode_nullable(body, &KEY)?;
        let value = decode_nullable(body, &VALUE)?;
        let headers = decode_headers(body)?;
        Ok(Self { attributes, timestamp_delta, offset_delta, key, value, headers })
    }

    /// Bytes of the record after its length prefix.
    fn body_len(&self) -> Result<usize, BatchError> {
        let fixed = 1 + varlong_size(self.timestamp_delta) + varint_size(self.offset_delta);
        let key = nullable_len(self.key.as_deref())?;
        let value = nullable_len(self.value.as_deref())?;
        let count = varint_size(length_i32(self.headers.len(), "more than 2^31-1 headers")?);
        self.headers.iter().try_fold(fixed + key + value + count, |total, header| Ok(total + header.encoded_len()?))
    }
}

impl Header {
    /// A header with the given key and value.
    pub fn new(key: impl Into<String>, value: Option<Vec<u8>>) -> Self {
        Self { key: key.into(), value }
    }

    fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), BatchError> {
        encode_nullable(Some(self.key.as_bytes()), out)?;
        encode_nullable(self.value.as_deref(), out)
    }

    fn decode(body: &mut Cursor<'_>) -> Result<Self, BatchError> {
        let key = decode_nullable(body, &HEADER_KEY)?.ok_or(BatchError::malformed(HEADER_KEY.bad_length))?;
        let key = String::from_utf8(key).map_err(|_| BatchError::malformed("header key is not valid UTF-8"))?;
        let value = decode_nullable(body, &HEADER_VALUE)?;
        Ok(Self { key, value })
    }

    fn encoded_len(&self) -> Result<usize, BatchError> {
        Ok(nullable_len(Some(self.key.as_bytes()))? + nullable_len(self.value.as_deref())?)
    }
}

fn decode_headers(body: &mut Cursor<'_>) -> Result<Vec<Header>, BatchError> {
    let count = body.read_varint("header count is not a valid varint")?;
    let count = usize::try_from(count).map_err(|_| BatchError::malformed("header count is negative"))?;
    let mut headers = Vec::with_capacity(count.min(body.remaining() / MIN_HEADER_BYTES));
    for _ in 0..count {
        headers.push(Header::decode(body)?);
    }
    Ok(headers)
}

/// Reads a length-prefixed byte string whose length -1 means null.
fn decode_nullable(body: &mut Cursor<'_>, reasons: &FieldReasons) -> Result<Option<Vec<u8>>, BatchError> {
    let length = body.read_varint(reasons.bad_length)?;
    if length == NULL_LENGTH {
        return Ok(None);
    }
    let length = usize::try_from(length).map_err(|_| BatchError::malformed(reasons.bad_length))?;
    let bytes = body.read_bytes(length, reasons.overrun)?;
    Ok(Some(bytes.to_vec()))
}

fn encode_nullable(bytes: Option<&[u8]>, out: &mut Vec<u8>) -> Result<(), BatchError> {
    match bytes {
        None => encode_varint(NULL_LENGTH, out),
        Some(bytes) => {
            encode_varint(length_i32(bytes.len(), "field longer than 2^31-1 bytes")?, out);
            out.extend_from_slice(bytes);
        }
    }
    Ok(())
}

fn nullable_len(bytes: Option<&[u8]>) -> Result<usize, BatchError> {
    match bytes {
        None => Ok(varint_size(NULL_LENGTH)),
        Some(bytes) => {
            let length = length_i32(bytes.len(), "field longer than 2^31-1 bytes")?;
            Ok(varint_size(length) + bytes.len())
        }
    }
}

/// `len` as a Kafka int32 length, or `Malformed { reason }`.
pub(crate) fn length_i32(len: usize, reason: &'static str) -> Result<i32, BatchError> {
    i32::try_from(len).map_err(|_| BatchError::malformed(reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(record: &Record) -> Vec<u8> {
        let mut out = Vec::new();
        record.encode_into(&mut out).expect("small record encodes");
        out
    }

    fn decode(bytes: &[u8]) -> Result<Record, BatchError> {
        Record::decode(&mut Cursor::new(bytes))
    }

    #[test]
    fn default_record_is_seven_bytes() {
        // length 6, attributes 0, timestamp delta 0, offset delta 0,
        // key null, value null, no headers.
        let bytes = encode(&Record::default());
        assert_eq!(bytes, [0x0c, 0x00, 0x00, 0x00, 0x01, 0x01, 0x00]);
        assert_eq!(bytes.len(), MIN_RECORD_BYTES);
        assert_eq!(decode(&bytes), Ok(Record::default()));
    }

    #[test]
    fn record_round_trips_with_headers() {
        let record = Record {
            attributes: -3,
            timestamp_delta: -70,
            offset_delta: 300,
            key: Some(b"key".to_vec()),
            value: Some(Vec::new()),
            headers: vec![Header::new("a", None), Header::new("", Some(b"v".to_vec()))],
        };
        let bytes = encode(&record);
        let mut cursor = Cursor::new(&bytes);
        assert_eq!(Record::decode(&mut cursor), Ok(record));
        assert!(cursor.is_empty());
    }

    #[test]
    fn record_length_must_match_its_fields() {
        let mut longer = encode(&Record::default());
        longer[0] = 0x0e; // length 7, one byte more than the fields
        longer.push(0x00);
        assert_eq!(decode(&longer), Err(BatchError::malformed("record length is larger than the record's fields")));
        let mut shorter = encode(&Record::default());
        shorter[0] = 0x0a; // length 5: the header count falls outside
        assert_eq!(decode(&shorter[..6]), Err(BatchError::malformed("header count is not a valid varint")));
    }

    #[test]
    fn null_header_key_and_bad_utf8_are_rejected() {
        // length 8, attrs, ts, offset, key null, value null, 1 header,
        // header key length -1.
        let null_key = [0x10, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x01, 0x01];
        assert_eq!(decode(&null_key), Err(BatchError::malformed(HEADER_KEY.bad_length)));
        // Same, header key of one byte 0xff (not UTF-8) and null value.
        let bad_utf8 = [0x12, 0x00, 0x00, 0x00, 0x01, 0x01, 0x02, 0x02, 0xff, 0x01];
        assert_eq!(decode(&bad_utf8), Err(BatchError::malformed("header key is not valid UTF-8")));
    }

    #[test]
    fn lengths_below_minus_one_are_rejected() {
        // key length -2
        let bytes = [0x0c, 0x00, 0x00, 0x00, 0x03, 0x01, 0x00];
        assert_eq!(decode(&bytes), Err(BatchError::malformed(KEY.bad_length)));
    }
}

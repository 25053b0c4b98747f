//! The byte layouts records and deliveries cross the boundary in.
//!
//! cgo may hand C a pointer to Go memory only when that memory holds no Go
//! pointers, so a batch of records cannot cross as an array of structs
//! pointing at Go byte slices. Both directions use flat little-endian buffers
//! instead, which Go writes and parses with `encoding/binary` (one cgo call
//! per batch, no per-record call). `sdk-go/codec.go` is the other half.
//!
//! Going in (produce), one buffer holds the records and their bytes:
//!
//! ```text
//! records    := count:u32 record*
//! record     := topic:str16 partition:i32 offset:i64 timestamp:i64
//!               key:bytes32 value:bytes32 header_count:u32 header*
//! header     := key:str16 value:bytes32
//! str16      := len:u16 utf8[len]
//! bytes32    := len:i32 byte[len]          (len -1: null)
//! ```
//!
//! `partition` -1 means the topic's partitioner, `offset` is ignored,
//! `timestamp` `i64::MIN` means now.
//!
//! Coming out (consume), records are not copied into a buffer of their own:
//! the completion's `ranges` are the ranges of the buffers the core fetched
//! them into (alive until the completions are freed; Go copies each range
//! once into its heap), and its data describes each record as positions in
//! them, as [`client_ffi::RecordViews`] lays them out:
//!
//! ```text
//! views      := topic_count:u32 str16*
//!               header_keys_length:u32 byte*
//!               record_count:u32 (word:u32[9] offset:i64 timestamp:i64)*
//!               header_count:u32 (word:u32[4])*
//! ```
//!
//! A record's words are `RecordViews::index`'s (topic position, partition,
//! range position, key start and length, value start and length, first
//! header, header count); a header's are `RecordViews::headers`' (key start
//! and length in `header_keys`, value start and length in its record's
//! range). A length of 2^32 - 1 is null.
//!
//! ```text
//! deliveries := count:u32 delivery*
//! delivery   := 1:u8 topic:str16 partition:i32 offset:i64 timestamp:i64
//!             | 0:u8 code:u16 message:bytes32
//! ```

use client_ffi::{Error, ProducerRecord, RecordMetadata, RecordViews, VIEW_STRIDE};

use client::ErrorCode;

/// `timestamp` of a produced record that takes the producer's clock.
pub const WEIR_TIMESTAMP_NOW: i64 = i64::MIN;

fn malformed(what: &str) -> Error {
    Error::new(ErrorCode::InvalidRequest, format!("malformed record buffer from the binding: {what}"))
}

/// Reads the produce layout.
pub fn decode_records(buffer: &[u8]) -> Result<Vec<ProducerRecord>, Error> {
    let mut reader = Reader { buffer, at: 0 };
    let count = reader.u32()? as usize;
    // Every record takes at least 34 bytes: a count past that is a lie.
    if count > buffer.len() / 34 + 1 {
        return Err(malformed("record count larger than the buffer"));
    }
    let mut records = Vec::with_capacity(count);
    for _ in 0..count {
        let topic = reader.str16()?;
        let partition = reader.i32()?;
        let _offset = reader.i64()?;
        let timestamp = reader.i64()?;
        let key = reader.bytes32()?;
        let value = reader.bytes32()?;
        let header_count = reader.u32()? as usize;
        if header_count > buffer.len() {
            return Err(malformed("header count larger than the buffer"));
        }
        let mut headers = Vec::with_capacity(header_count);
        for _ in 0..header_count {
            headers.push((reader.str16()?, reader.bytes32()?));
        }
        if partition < -1 {
            return Err(Error::new(ErrorCode::InvalidRequest, format!("partition {partition} is negative")));
        }
        records.push(ProducerRecord {
            topic,
            partition: (partition >= 0).then_some(partition),
            key,
            value,
            headers,
            timestamp_ms: (timestamp != WEIR_TIMESTAMP_NOW).then_some(timestamp),
        });
    }
    if reader.at != buffer.len() {
        return Err(malformed("bytes after the last record"));
    }
    Ok(records)
}

/// Writes consumed records' views (their ranges, `views.buffers`, cross
/// beside them).
pub fn encode_views(views: &RecordViews) -> Vec<u8> {
    let topics: usize = views.topics.iter().map(|topic| 2 + topic.len()).sum();
    let mut out = Vec::with_capacity(
        16 + topics + views.header_keys.len() + views.len() * (VIEW_STRIDE * 4 + 16) + views.headers.len() * 4,
    );
    put_u32(&mut out, views.topics.len());
    for topic in &views.topics {
        put_str16(&mut out, topic);
    }
    put_u32(&mut out, views.header_keys.len());
    out.extend_from_slice(&views.header_keys);
    put_u32(&mut out, views.len());
    for ((words, offset), timestamp) in views.index.chunks_exact(VIEW_STRIDE).zip(&views.offsets).zip(&views.timestamps)
    {
        for word in words {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&timestamp.to_le_bytes());
    }
    put_u32(&mut out, views.headers.len() / 4);
    for word in &views.headers {
        out.extend_from_slice(&word.to_le_bytes());
    }
    out
}

/// Writes where each record landed, or why it did not.
pub fn encode_deliveries(deliveries: &[Result<RecordMetadata, Error>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + deliveries.len() * 40);
    put_u32(&mut out, deliveries.len());
    for delivery in deliveries {
        match delivery {
            Ok(metadata) => {
                out.push(1);
                put_str16(&mut out, &metadata.topic);
                out.extend_from_slice(&metadata.partition.to_le_bytes());
                out.extend_from_slice(&metadata.offset.to_le_bytes());
                out.extend_from_slice(&metadata.timestamp_ms.to_le_bytes());
            }
            Err(error) => {
                out.push(0);
                out.extend_from_slice(&error.code.to_le_bytes());
                put_bytes32(&mut out, Some(error.message.as_bytes()));
            }
        }
    }
    out
}

fn put_u32(out: &mut Vec<u8>, value: usize) {
    let value = u32::try_from(value).expect("fewer than 2^32 entries in one buffer");
    out.extend_from_slice(&value.to_le_bytes());
}

/// Topic and header names are at most 249 and a few hundred bytes: a longer
/// one is cut at a character boundary below 64 KiB rather than mis-framed.
fn put_str16(out: &mut Vec<u8>, text: &str) {
    let mut end = text.len().min(usize::from(u16::MAX));
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&(end as u16).to_le_bytes());
    out.extend_from_slice(&text.as_bytes()[..end]);
}

fn put_bytes32(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => out.extend_from_slice(&(-1i32).to_le_bytes()),
        Some(bytes) => {
            let len = i32::try_from(bytes.len()).expect("a record field is under 2 GiB");
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(bytes);
        }
    }
}

struct Reader<'a> {
    buffer: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], Error> {
        let end =
            self.at.checked_add(len).filter(|end| *end <= self.buffer.len()).ok_or_else(|| malformed("truncated"))?;
        let bytes = &self.buffer[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let mut array = [0; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    fn u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<i32, Error> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64, Error> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    fn str16(&mut self) -> Result<String, Error> {
        let len = u16::from_le_bytes(self.array()?);
        let bytes = self.take(usize::from(len))?;
        String::from_utf8(bytes.to_vec()).map_err(|_| malformed("a topic or header name is not UTF-8"))
    }

    fn bytes32(&mut self) -> Result<Option<Vec<u8>>, Error> {
        match self.i32()? {
            -1 => Ok(None),
            len if len < 0 => Err(malformed("negative length")),
            len => Ok(Some(self.take(len as usize)?.to_vec())),
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use client_ffi::Record;

    use super::*;

    /// The produce layout of one record, written as the Go side does.
    fn produced(
        topic: &str,
        partition: i32,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> Vec<u8> {
        let mut out = Vec::new();
        put_u32(&mut out, 1);
        put_str16(&mut out, topic);
        out.extend_from_slice(&partition.to_le_bytes());
        out.extend_from_slice(&0i64.to_le_bytes());
        out.extend_from_slice(&timestamp.to_le_bytes());
        put_bytes32(&mut out, key);
        put_bytes32(&mut out, value);
        put_u32(&mut out, headers.len());
        for (key, value) in headers {
            put_str16(&mut out, key);
            put_bytes32(&mut out, *value);
        }
        out
    }

    #[test]
    fn produced_records_read_back() {
        let headers: [(&str, Option<&[u8]>); 2] = [("h", None), ("é", Some(b"x"))];
        let back = decode_records(&produced("t", 3, 1_700_000_000_000, None, Some(b"v"), &headers)).expect("decodes");
        assert_eq!(back.len(), 1);
        assert_eq!(back[0].topic, "t");
        assert_eq!(back[0].partition, Some(3));
        assert_eq!(back[0].key, None);
        assert_eq!(back[0].value.as_deref(), Some(&b"v"[..]));
        assert_eq!(back[0].headers, vec![("h".to_owned(), None), ("é".to_owned(), Some(b"x".to_vec()))]);
        assert_eq!(back[0].timestamp_ms, Some(1_700_000_000_000));
        let back = decode_records(&produced("o", -1, WEIR_TIMESTAMP_NOW, Some(b""), None, &[])).expect("decodes");
        assert_eq!(back[0].partition, None);
        assert_eq!(back[0].key.as_deref(), Some(&b""[..]));
        assert_eq!(back[0].value, None);
        assert_eq!(back[0].timestamp_ms, None);
    }

    #[test]
    fn malformed_buffers_are_refused_not_trusted() {
        let good = produced("t", 0, 0, Some(b"k"), Some(b"v"), &[]);
        for cut in 0..good.len() {
            let error = decode_records(&good[..cut]).expect_err("a truncated buffer is refused");
            assert_eq!(error.code, ErrorCode::InvalidRequest.as_u16());
        }
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(decode_records(&trailing).is_err());
        let mut huge_count = good.clone();
        huge_count[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_records(&huge_count).is_err());
        let mut bad_partition = good;
        bad_partition[7..11].copy_from_slice(&(-7i32).to_le_bytes());
        assert!(decode_records(&bad_partition).is_err());
    }

    #[test]
    fn views_carry_every_word() {
        let mut first = Record::new("t", 3, 1 << 60, 1_700_000_000_000);
        first.value = Some(Bytes::from_static(b"value"));
        first.headers = vec![("hk".into(), Some(Bytes::from_static(b"x")))];
        let second = Record::new("other", 1, 2, -5);
        let views = RecordViews::new(&[first, second]).expect("lays out");
        let encoded = encode_views(&views);
        let mut reader = Reader { buffer: &encoded, at: 0 };
        assert_eq!(&views.buffers.last().unwrap()[..], b"valuex", "the copies");
        assert_eq!(reader.u32().unwrap(), 2);
        assert_eq!(reader.str16().unwrap(), "t");
        assert_eq!(reader.str16().unwrap(), "other");
        let keys = reader.u32().unwrap() as usize;
        assert_eq!(reader.take(keys).unwrap(), b"hk");
        assert_eq!(reader.u32().unwrap(), 2);
        for record in 0..2 {
            for word in 0..VIEW_STRIDE {
                assert_eq!(reader.u32().unwrap(), views.index[record * VIEW_STRIDE + word]);
            }
            assert_eq!(reader.i64().unwrap(), views.offsets[record]);
            assert_eq!(reader.i64().unwrap(), views.timestamps[record]);
        }
        assert_eq!(reader.u32().unwrap(), 1);
        for word in 0..4 {
            assert_eq!(reader.u32().unwrap(), views.headers[word]);
        }
        assert_eq!(reader.at, encoded.len());
    }

    #[test]
    fn deliveries_carry_metadata_or_the_error() {
        let encoded = encode_deliveries(&[
            Ok(RecordMetadata { topic: "t".into(), partition: 1, offset: 9, timestamp_ms: 7 }),
            Err(Error::new(ErrorCode::MessageTooLarge, "too big")),
        ]);
        let mut expected = vec![2, 0, 0, 0, 1, 1, 0, b't'];
        expected.extend_from_slice(&1i32.to_le_bytes());
        expected.extend_from_slice(&9i64.to_le_bytes());
        expected.extend_from_slice(&7i64.to_le_bytes());
        expected.push(0);
        expected.extend_from_slice(&ErrorCode::MessageTooLarge.as_u16().to_le_bytes());
        expected.extend_from_slice(&7i32.to_le_bytes());
        expected.extend_from_slice(b"too big");
        assert_eq!(encoded, expected);
    }
}

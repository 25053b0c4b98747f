//! The records users hand to a producer and get from a consumer.
//!
//! [`ConsumerRecord`] keys and values are [`Bytes`] slices of the fetched buffer:
//! handing them out copies nothing, in Rust or (through
//! [`ConsumerRecord::buffer`]) in a binding.

use std::sync::Arc;

use bytes::Bytes;

/// A record to send.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProducerRecord {
    pub topic: String,
    /// `None`: chosen by the key's hash, or spread round-robin when there is no key.
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    /// Creation time in ms since the epoch; `None` = now.
    pub timestamp_ms: Option<i64>,
}

impl ProducerRecord {
    pub fn new(topic: impl Into<String>, value: impl Into<Vec<u8>>) -> ProducerRecord {
        ProducerRecord { topic: topic.into(), value: Some(value.into()), ..ProducerRecord::default() }
    }

    pub fn key(mut self, key: impl Into<Vec<u8>>) -> ProducerRecord {
        self.key = Some(key.into());
        self
    }

    pub fn partition(mut self, partition: i32) -> ProducerRecord {
        self.partition = Some(partition);
        self
    }

    pub fn header(mut self, key: impl Into<String>, value: Option<Vec<u8>>) -> ProducerRecord {
        self.headers.push((key.into(), value));
        self
    }

    pub fn timestamp_ms(mut self, timestamp_ms: i64) -> ProducerRecord {
        self.timestamp_ms = Some(timestamp_ms);
        self
    }
}

/// A record to send whose bytes the caller keeps: what
/// [`crate::Producer::send_ref`] takes, so a binding holding many records in
/// one buffer sends them without a copy (or an allocation) per record. The
/// producer copies the bytes into its batch before `send_ref` returns.
#[derive(Clone, Copy, Debug)]
pub struct RecordRef<'a> {
    pub topic: &'a str,
    /// `None`: chosen by the topic's partitioner (its plugin, else the key's hash).
    pub partition: Option<i32>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
    /// Creation time in ms since the epoch; `None` = now.
    pub timestamp_ms: Option<i64>,
}

/// Where an acknowledged record landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordMetadata {
    pub topic: Arc<str>,
    pub partition: i32,
    /// -1 with `acks=0` (the broker does not answer with one).
    pub offset: i64,
    pub timestamp_ms: i64,
}

/// A record read from a partition.
///
/// Two records are equal when their fields are: the buffer they slice does not count.
#[derive(Clone)]
pub struct ConsumerRecord {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// What `key`, `value` and the header values are slices of: the fetched
    /// answer, or the batch's decompressed records.
    pub(crate) buffer: Bytes,
}

impl ConsumerRecord {
    /// A record made outside a consumer (a test's, a binding's own), with no
    /// key, value or headers yet: its fields slice no shared buffer, so
    /// [`ConsumerRecord::span`] finds none of them.
    pub fn new(topic: impl Into<Arc<str>>, partition: i32, offset: i64, timestamp_ms: i64) -> ConsumerRecord {
        ConsumerRecord {
            topic: topic.into(),
            partition,
            offset,
            timestamp_ms,
            key: None,
            value: None,
            headers: Vec::new(),
            buffer: Bytes::new(),
        }
    }

    /// The one allocation `key`, `value` and every header value point into
    /// (header keys are owned `String`s). A binding hands records out without
    /// copying by exposing this buffer once and each field as a range of it
    /// ([`ConsumerRecord::span`]); the buffer stays alive while any record or
    /// handle to it does.
    pub fn buffer(&self) -> &Bytes {
        &self.buffer
    }

    /// Where `slice` (the key, the value or a header value of this record) lies
    /// in [`ConsumerRecord::buffer`]: its start and length; `None` when it lies
    /// elsewhere (a record not made by a consumer, or a field replaced since).
    pub fn span(&self, slice: &Bytes) -> Option<(usize, usize)> {
        let start = (slice.as_ptr() as usize).checked_sub(self.buffer.as_ptr() as usize)?;
        (start + slice.len() <= self.buffer.len()).then_some((start, slice.len()))
    }
}

impl PartialEq for ConsumerRecord {
    fn eq(&self, other: &ConsumerRecord) -> bool {
        (&self.topic, self.partition, self.offset, self.timestamp_ms, &self.key, &self.value, &self.headers)
            == (
                &other.topic,
                other.partition,
                other.offset,
                other.timestamp_ms,
                &other.key,
                &other.value,
                &other.headers,
            )
    }
}

impl Eq for ConsumerRecord {}

impl std::fmt::Debug for ConsumerRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerRecord")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("timestamp_ms", &self.timestamp_ms)
            .field("key", &self.key)
            .field("value", &self.value)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

//! The records users hand to a producer and get from a consumer.
//!
//! [`ConsumerRecord`] keys and values are [`Bytes`] slices of the fetched buffer:
//! handing them out copies nothing.

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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

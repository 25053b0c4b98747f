//! [`BatchBuilder`]: assembles a [`RecordBatch`] record by record, plain or
//! compressed.
//!
//! Role: the convenient way for tests, tools and (later) the producer to
//! make a batch without computing deltas by hand.
//!
//! Invariants: record `i` gets offset delta `i`; its timestamp delta is its
//! timestamp minus the base timestamp; the max timestamp is the largest
//! record timestamp (the base timestamp while empty); the last offset delta
//! is `count - 1` (0 while empty). Defaults are Kafka's "none" values: base
//! offset 0, partition leader epoch -1, producer id -1, producer epoch -1,
//! base sequence -1, attributes 0 (no compression, create time).
//!
//! Compression: [`BatchBuilder::compression`] accepts only codecs this crate
//! can write (none, lz4, zstd) and sets the attributes' codec bits, so
//! [`BatchBuilder::encode`] stays infallible: it compresses the records
//! section and computes the CRC over the compressed bytes, as Kafka does.

use super::attributes::{Attributes, Compression};
use super::compression;
use super::error::BatchError;
use super::model::RecordBatch;
use super::record::{Header, Record};

/// Builds a batch; see the module docs for the rules.
#[derive(Clone, Debug)]
pub struct BatchBuilder {
    compression: Compression,
    base_offset: i64,
    partition_leader_epoch: i32,
    base_timestamp: i64,
    max_timestamp: Option<i64>,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    records: Vec<Record>,
}

impl BatchBuilder {
    /// An empty builder whose record timestamps are relative to
    /// `base_timestamp`.
    pub fn new(base_timestamp: i64) -> Self {
        Self {
            compression: Compression::None,
            base_offset: 0,
            partition_leader_epoch: -1,
            base_timestamp,
            max_timestamp: None,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            records: Vec::new(),
        }
    }

    /// Sets the idempotent producer id, epoch and base sequence.
    pub fn producer(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    /// Sets the base offset (default 0; the leader normally stamps it on
    /// append with [`set_base_offset`](super::set_base_offset)).
    pub fn base_offset(mut self, base_offset: i64) -> Self {
        self.base_offset = base_offset;
        self
    }

    /// Sets the codec of the records section (default
    /// [`Compression::None`]).
    ///
    /// [`BatchError::UnsupportedCompression`] for gzip and snappy, which this
    /// crate cannot write.
    pub fn compression(mut self, compression: Compression) -> Result<Self, BatchError> {
        compression::require_supported(compression)?;
        self.compression = compression;
        Ok(self)
    }

    /// Sets the partition leader epoch (default -1, as producers write it).
    pub fn partition_leader_epoch(mut self, partition_leader_epoch: i32) -> Self {
        self.partition_leader_epoch = partition_leader_epoch;
        self
    }

    /// Appends a record with the next offset delta.
    ///
    /// The timestamp delta wraps on overflow, as Kafka's arithmetic does.
    pub fn push(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) {
        let offset_delta = i32::try_from(self.records.len()).unwrap_or(i32::MAX);
        self.max_timestamp = Some(self.max_timestamp.map_or(timestamp, |max| max.max(timestamp)));
        self.records.push(Record {
            attributes: 0,
            timestamp_delta: timestamp.wrapping_sub(self.base_timestamp),
            offset_delta,
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers: headers.iter().map(|&(key, value)| Header::new(key, value.map(<[u8]>::to_vec))).collect(),
        });
    }

    /// Records pushed so far.
    pub fn record_count(&self) -> usize {
        self.records.len()
    }

    /// Whether no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The batch so far. An empty builder gives a batch with no records and
    /// last offset delta 0: it encodes, but [`BatchView::validate`]
    /// rejects it, since only compaction may empty a batch.
    ///
    /// [`BatchView::validate`]: super::BatchView::validate
    pub fn build(&self) -> RecordBatch {
        let last_offset_delta = i32::try_from(self.records.len().saturating_sub(1)).unwrap_or(i32::MAX);
        RecordBatch {
            base_offset: self.base_offset,
            partition_leader_epoch: self.partition_leader_epoch,
            attributes: Attributes::default().with_compression(self.compression),
            last_offset_delta,
            base_timestamp: self.base_timestamp,
            max_timestamp: self.max_timestamp.unwrap_or(self.base_timestamp),
            producer_id: self.producer_id,
            producer_epoch: self.producer_epoch,
            base_sequence: self.base_sequence,
            records: self.records.clone(),
        }
    }

    /// The encoded batch so far, its records section compressed with the
    /// chosen codec.
    ///
    /// # Panics
    ///
    /// If the batch exceeds 2^31-1 bytes (Kafka's batch length limit).
    pub fn encode(&self) -> Vec<u8> {
        self.build().encode().expect("a builder only holds codecs it can write; encoding only fails past 2^31-1 bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchView;

    #[test]
    fn empty_builder_has_kafka_defaults() {
        let builder = BatchBuilder::new(500);
        assert!(builder.is_empty());
        let batch = builder.build();
        assert_eq!((batch.base_offset, batch.partition_leader_epoch, batch.last_offset_delta), (0, -1, 0));
        assert_eq!((batch.producer_id, batch.producer_epoch, batch.base_sequence), (-1, -1, -1));
        assert_eq!((batch.base_timestamp, batch.max_timestamp), (500, 500));
        let bytes = builder.encode();
        let view = BatchView::new(&bytes).expect("header is intact");
        assert!(view.validate().is_err());
    }

    #[test]
    fn push_tracks_deltas_and_max_timestamp() {
        let mut builder = BatchBuilder::new(1_000).producer(9, 2, 40);
        builder.push(1_010, None, Some(b"a"), &[]);
        builder.push(990, Some(b"k"), None, &[("h", None)]);
        builder.push(1_005, None, None, &[]);
        assert_eq!(builder.record_count(), 3);
        let batch = builder.build();
        assert_eq!(batch.last_offset_delta, 2);
        assert_eq!(batch.max_timestamp, 1_010);
        let deltas: Vec<_> = batch.records.iter().map(|r| (r.offset_delta, r.timestamp_delta)).collect();
        assert_eq!(deltas, [(0, 10), (1, -10), (2, 5)]);
        assert_eq!(batch.records[1].headers, [Header::new("h", None)]);
        assert_eq!((batch.producer_id, batch.producer_epoch, batch.base_sequence), (9, 2, 40));
        let bytes = builder.encode();
        let view = BatchView::new(&bytes).expect("header is intact");
        assert_eq!(view.validate(), Ok(()));
        assert_eq!(view.decode(), Ok(batch));
    }

    #[test]
    fn compression_sets_the_codec_bits_and_rejects_what_it_cannot_write() {
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let mut builder = BatchBuilder::new(0).compression(compression).expect("supported codec");
            builder.push(0, Some(b"k"), Some(b"v"), &[]);
            let batch = builder.build();
            assert_eq!(batch.attributes.compression(), Ok(compression));
            let bytes = builder.encode();
            let view = BatchView::new(&bytes).expect("header is intact");
            assert_eq!(view.attributes().compression(), Ok(compression));
            assert_eq!(view.validate(), Ok(()));
            assert_eq!(view.decode(), Ok(batch));
        }
        for compression in [Compression::Gzip, Compression::Snappy] {
            let result = BatchBuilder::new(0).compression(compression).map(|_| ());
            assert_eq!(result, Err(BatchError::UnsupportedCompression { compression }));
        }
    }
}

//! `NativeProducer`: sends queued in call order (`client_ffi::OrderedProducer`),
//! each call's promise settled once all its records are acknowledged.

use std::collections::HashMap;
use std::ops::Range;

use bytes::Bytes;

use client_ffi::{OrderedProducer, Packed, PackedHeader, PackedRecord, RecordMetadata, NULL_LENGTH};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::{client_err, promise, settings, to_js};

/// Words per record in [`Outgoing::index`].
pub const OUTGOING_STRIDE: usize = 8;

/// Records to send, packed by the JavaScript layer: one buffer of keys,
/// values and headers, and typed arrays.
#[napi(object)]
pub struct Outgoing {
    /// The topics of these records; `index` names them by position.
    pub topics: Vec<String>,
    pub data: Buffer,
    /// 8 words per record: topic position, partition (`NULL_LENGTH`: the
    /// topic's partitioner chooses), key start, key length, value start, value
    /// length, first header, header count (a length of `NULL_LENGTH` is null).
    pub index: Uint32Array,
    /// 4 words per header: key start, key length, value start, value length.
    pub headers: Uint32Array,
    /// Milliseconds since the epoch per record (negative: now).
    pub timestamps: Float64Array,
}

/// Where the records of one send landed, in send order.
#[napi(object, object_from_js = false)]
pub struct Sent {
    pub partitions: Int32Array,
    /// -1 with `acks=0`.
    pub offsets: BigInt64Array,
    pub timestamps: BigInt64Array,
}

fn invalid(message: &str) -> napi::Error {
    napi::Error::new(Status::InvalidArg, format!("a malformed packed send: {message}"))
}

/// The range `[start, start + length)` (`None` for a null length); checked
/// against the data by `OrderedProducer::send_packed`.
fn range(start: u32, length: u32) -> Result<Option<Range<usize>>> {
    if length == NULL_LENGTH {
        return Ok(None);
    }
    let end = start.checked_add(length).ok_or_else(|| invalid("a span overflows"))?;
    Ok(Some(start as usize..end as usize))
}

/// The records of `outgoing` as one `Packed` set: its data not copied (the
/// producer reads the JavaScript buffer in place until every record is in a
/// batch, holding a reference to it), the rest as ranges (no allocation or
/// copy per record). The buffer is the JavaScript layer's own, made for this
/// call and never handed to the application, so nothing writes to it meanwhile.
fn unpack(outgoing: Outgoing) -> Result<Packed> {
    let (index, header_words) = (&outgoing.index[..], &outgoing.headers[..]);
    if index.len() % OUTGOING_STRIDE != 0 || header_words.len() % 4 != 0 {
        return Err(invalid("an index of the wrong length"));
    }
    let count = index.len() / OUTGOING_STRIDE;
    if outgoing.timestamps.len() != count {
        return Err(invalid("not one timestamp per record"));
    }
    let headers = header_words
        .chunks_exact(4)
        .map(|span| {
            let key = range(span[0], span[1])?.ok_or_else(|| invalid("a null header key"))?;
            Ok(PackedHeader { key, value: range(span[2], span[3])? })
        })
        .collect::<Result<Vec<_>>>()?;
    let records = index
        .chunks_exact(OUTGOING_STRIDE)
        .zip(outgoing.timestamps.iter())
        .map(|(words, &timestamp)| {
            let (first, header_count) = (words[6] as usize, words[7] as usize);
            let last = first.checked_add(header_count).ok_or_else(|| invalid("headers past the header index"))?;
            Ok(PackedRecord {
                topic: words[0] as usize,
                partition: (words[1] != NULL_LENGTH).then_some(words[1] as i32),
                key: range(words[2], words[3])?,
                value: range(words[4], words[5])?,
                headers: first..last,
                timestamp_ms: (timestamp >= 0.0).then_some(timestamp as i64),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // `send_packed` validates the ranges and positions (once, refusing the call).
    Ok(Packed { data: Bytes::from_owner(outgoing.data), topics: outgoing.topics, records, headers })
}

fn sent(landed: Vec<RecordMetadata>) -> Sent {
    Sent {
        partitions: Int32Array::new(landed.iter().map(|metadata| metadata.partition).collect()),
        offsets: BigInt64Array::new(landed.iter().map(|metadata| metadata.offset).collect()),
        timestamps: BigInt64Array::new(landed.iter().map(|metadata| metadata.timestamp_ms).collect()),
    }
}

/// A producer over the client core.
#[napi]
pub struct NativeProducer {
    inner: OrderedProducer,
    buffer_memory: usize,
}

#[napi]
impl NativeProducer {
    /// `config` holds client settings by their Kafka names (`acks`,
    /// `linger.ms`, `enable.idempotence`, …); unknown keys are refused.
    #[napi(constructor)]
    pub fn new(brokers: Vec<String>, config: Option<HashMap<String, String>>) -> Result<NativeProducer> {
        let config = client::ProducerConfig::from_map(&settings(brokers, config)).map_err(client_err)?;
        let buffer_memory = config.buffer_bytes_max;
        Ok(NativeProducer { inner: OrderedProducer::new(config).map_err(to_js)?, buffer_memory })
    }

    /// `buffer.memory`: the bytes of records the producer holds unacknowledged
    /// (the JavaScript layer keeps as many packed, at most, before sends wait).
    #[napi(getter)]
    pub fn buffer_memory(&self) -> f64 {
        self.buffer_memory as f64
    }

    /// Queues the packed records behind earlier sends (now, in call order);
    /// resolves with where each landed once all are acknowledged, or rejects
    /// with the first refusal (records after a record the producer refused
    /// are not sent).
    #[napi(ts_return_type = "Promise<Sent>")]
    pub fn send<'env>(&self, env: &'env Env, records: Outgoing) -> Result<PromiseRaw<'env, Sent>> {
        let outcomes = self.inner.send_packed(unpack(records)?).map_err(to_js)?;
        // Rejects with the first refusal; records after it were not sent.
        let settled = async move { outcomes.await.into_iter().collect::<std::result::Result<Vec<_>, _>>() };
        promise(env, settled, sent)
    }

    /// Resolves once everything sent before it is acknowledged.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn flush<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, ()>> {
        let flushed = self.inner.flush().map_err(to_js)?;
        let flush = async move {
            flushed.await;
            Ok::<(), client_ffi::Error>(())
        };
        promise(env, flush, |()| ())
    }

    /// Flushes, then refuses further sends.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn close<'env>(&self, env: &'env Env) -> Result<PromiseRaw<'env, ()>> {
        let closed = self.inner.close().map_err(to_js)?;
        let close = async move {
            closed.await;
            Ok::<(), client_ffi::Error>(())
        };
        promise(env, close, |()| ())
    }
}

//! `NativeProducer`: sends queued in call order (`client_ffi::OrderedProducer`),
//! each call's promise settled once all its records are acknowledged.

use std::collections::HashMap;

use client_ffi::{OrderedProducer, ProducerRecord, RecordMetadata};
use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::{client_err, promise, settings, to_js, Header};

/// A record to send.
#[napi(object)]
pub struct OutgoingRecord {
    pub topic: String,
    pub key: Option<Buffer>,
    pub value: Option<Buffer>,
    pub headers: Option<Vec<Header>>,
    /// The partition, or none for the topic's partitioner.
    pub partition: Option<i32>,
    /// Milliseconds since the epoch (none: now).
    pub timestamp: Option<i64>,
}

/// Where a record landed.
#[napi(object, object_from_js = false)]
pub struct Delivered {
    pub topic: String,
    pub partition: i32,
    /// -1 with `acks=0`.
    #[napi(ts_type = "bigint")]
    pub offset: i64n,
    #[napi(ts_type = "bigint")]
    pub timestamp: i64n,
}

fn delivered(metadata: RecordMetadata) -> Delivered {
    Delivered {
        topic: metadata.topic.to_string(),
        partition: metadata.partition,
        offset: i64n(metadata.offset),
        timestamp: i64n(metadata.timestamp_ms),
    }
}

/// A producer over the client core.
#[napi]
pub struct NativeProducer {
    inner: OrderedProducer,
}

#[napi]
impl NativeProducer {
    /// `config` holds client settings by their Kafka names (`acks`,
    /// `linger.ms`, `enable.idempotence`, …); unknown keys are refused.
    #[napi(constructor)]
    pub fn new(brokers: Vec<String>, config: Option<HashMap<String, String>>) -> Result<NativeProducer> {
        let config = client::ProducerConfig::from_map(&settings(brokers, config)).map_err(client_err)?;
        Ok(NativeProducer { inner: OrderedProducer::new(config).map_err(to_js)? })
    }

    /// Queues `records` behind earlier sends (now, in call order); resolves
    /// with where each landed once all are acknowledged, or rejects with the
    /// first refusal (records after a record the producer refused are not
    /// sent).
    #[napi(ts_return_type = "Promise<Array<Delivered>>")]
    pub fn send<'env>(&self, env: &'env Env, records: Vec<OutgoingRecord>) -> Result<PromiseRaw<'env, Vec<Delivered>>> {
        let records = records
            .into_iter()
            .map(|record| ProducerRecord {
                topic: record.topic,
                partition: record.partition,
                key: record.key.map(|key| key.to_vec()),
                value: record.value.map(|value| value.to_vec()),
                headers: record
                    .headers
                    .unwrap_or_default()
                    .into_iter()
                    .map(|header| (header.key, header.value.map(|value| value.to_vec())))
                    .collect(),
                timestamp_ms: record.timestamp,
            })
            .collect();
        let outcomes = self.inner.send_all(records).map_err(to_js)?;
        // Rejects with the first refusal; records after it were not sent.
        let settled = async move { outcomes.await.into_iter().collect::<std::result::Result<Vec<_>, _>>() };
        promise(env, settled, |landed| landed.into_iter().map(delivered).collect())
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

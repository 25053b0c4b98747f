//! The native addon of the `weir` npm package: a thin napi-rs layer over
//! Weir's client core. It converts types and delegates; batching, partitioning,
//! retries and groups live in the `client` crate, and the glue every SDK needs
//! (the runtime the clients run on, ordered sends) in `client-ffi`.
//!
//! Promises settle from napi's tokio runtime (never the libuv threadpool, so a
//! long poll occupies no thread JavaScript needs). Errors reach JavaScript as
//! `Error`s whose message starts with `[weir:<code>]`; the package's
//! TypeScript layer turns them into `WeirError` subclasses from the one
//! `ErrorCode` table.

mod admin;
mod consumer;
mod producer;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;

use client::ClientError;
use napi::bindgen_prelude::*;
use napi_derive::napi;

/// A binding-layer error as a JavaScript error carrying its code.
pub(crate) fn to_js(error: client_ffi::Error) -> napi::Error {
    napi::Error::new(Status::GenericFailure, format!("[weir:{}] {}", error.code, error.message))
}

/// A promise of `future`'s outcome, converted on the JavaScript thread. The
/// future runs on the client runtime (with all it spawns: a consumer's fetch
/// and membership tasks); napi's runtime only waits for it.
pub(crate) fn promise<'env, T, E, R>(
    env: &'env Env,
    future: impl Future<Output = std::result::Result<T, E>> + Send + 'static,
    convert: impl FnOnce(T) -> R + Send + 'static,
) -> Result<PromiseRaw<'env, R>>
where
    T: Send + 'static,
    E: Into<client_ffi::Error> + 'static,
    R: ToNapiValue + Send + 'static,
{
    promise_try(env, future, move |value| Ok(convert(value)))
}

/// [`promise`] with a conversion that may fail (the promise rejects).
pub(crate) fn promise_try<'env, T, E, R>(
    env: &'env Env,
    future: impl Future<Output = std::result::Result<T, E>> + Send + 'static,
    convert: impl FnOnce(T) -> Result<R> + Send + 'static,
) -> Result<PromiseRaw<'env, R>>
where
    T: Send + 'static,
    E: Into<client_ffi::Error> + 'static,
    R: ToNapiValue + Send + 'static,
{
    let running = client_ffi::runtime::run(async move { future.await.map_err(Into::into) }).map_err(to_js)?;
    env.spawn_future(async move { running.await.map_err(to_js).and_then(convert) })
}

/// A client error as a JavaScript error carrying its code.
pub(crate) fn client_err(error: ClientError) -> napi::Error {
    to_js(error.into())
}

/// The client config map with `bootstrap.servers` set.
pub(crate) fn settings(brokers: Vec<String>, config: Option<HashMap<String, String>>) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = config.unwrap_or_default().into_iter().collect();
    map.insert("bootstrap.servers".to_owned(), brokers.join(","));
    map
}

/// One row of the `ErrorCode` table.
#[napi(object)]
pub struct ErrorCodeInfo {
    pub code: u32,
    pub name: String,
    pub retriable: bool,
}

/// Every error code the broker and client use, in number order.
#[napi]
pub fn error_codes() -> Vec<ErrorCodeInfo> {
    client_ffi::error_codes()
        .into_iter()
        .map(|info| ErrorCodeInfo { code: u32::from(info.code), name: info.name.to_owned(), retriable: info.retriable })
        .collect()
}

/// Kafka's murmur2 key partitioning, exactly as the Rust client does it.
#[napi]
pub fn partition_for_key(key: Buffer, partition_count: u32) -> Result<u32> {
    if partition_count == 0 {
        return Err(napi::Error::new(Status::InvalidArg, "partitionCount must be positive"));
    }
    Ok(client_ffi::partitioner::partition_for_key(&key, partition_count))
}

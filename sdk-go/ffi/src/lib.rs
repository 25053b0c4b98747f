//! `weir-ffi`: the C ABI the Go SDK (`sdk-go`) links, over the shared binding
//! layer `client-ffi`. `weir.h` beside this crate is generated from it by
//! cbindgen (checked fresh by this crate's tests).
//!
//! The rules every function keeps:
//! - **Handles** (`WeirQueue`, `WeirProducer`, `WeirConsumer`, `WeirAdmin`)
//!   are opaque, made by a `*_new` and released by its `*_free`, exactly once.
//!   Freeing a handle while calls started on it are in flight is allowed: those
//!   calls finish on their own and report to their queue.
//! - **Errors** come back as a `WeirError*` (null: success), released with
//!   `weir_error_free`; its code is from the one `ErrorCode` table (0: the
//!   binding layer cannot run here, e.g. after `fork()`). No panic crosses the
//!   boundary: one is caught and returned as an `UnknownServerError`.
//! - **Calls that wait** (sends, polls, commits, admin calls) return at once:
//!   they run on the client runtime and push `(token, outcome)` to a
//!   `WeirQueue` whose file descriptor becomes readable. The Go side watches it
//!   with its own poller and drains it; no thread of the core calls into Go.
//! - **Bytes in** are `(pointer, length)` pairs read only during the call;
//!   records to send cross as one flat buffer (`codec`). **Bytes out** live
//!   in the drained `WeirCompletions` (or a returned string) until their
//!   free; consumed records are not copied into them but named as ranges of
//!   the buffers the core fetched them into, which the completions keep alive.

use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use client::ErrorCode;
use client_ffi::{Completion, CompletionQueue, Error, Offset, OrderedProducer, RebalanceLog, RecordViews};

mod admin;
pub mod codec;

pub use admin::{weir_admin_call, weir_admin_free, weir_admin_new, weir_admin_upload_plugin, WeirAdmin};

/// A failed call: `code` from the `ErrorCode` table and a message.
#[derive(Debug)]
pub struct WeirError {
    code: u16,
    message: CString,
}

/// The completion queue calls report to.
#[derive(Debug)]
pub struct WeirQueue {
    queue: CompletionQueue,
}

/// A producer (sends kept in call order).
#[derive(Debug)]
pub struct WeirProducer {
    inner: OrderedProducer,
}

/// A consumer: a group member or a reader of assigned partitions.
pub struct WeirConsumer {
    inner: Arc<client_ffi::Consumer>,
    rebalances: Arc<RebalanceLog>,
}

impl std::fmt::Debug for WeirConsumer {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("WeirConsumer").finish_non_exhaustive()
    }
}

/// What a finished call's `data` holds.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeirKind {
    /// The call failed: `code` is set and `data` is the UTF-8 message.
    Error = 0,
    /// Done, nothing to return.
    Unit = 1,
    /// Where sent records landed (or why not): the `deliveries` layout.
    Deliveries = 2,
    /// Consumed records: the `views` layout, whose ranges stay valid until
    /// the completions are freed.
    Records = 3,
    /// An offset: 8 bytes, little-endian `i64`; 0 bytes for none.
    Offset = 4,
    /// A UTF-8 JSON document (admin answers).
    Json = 5,
}

/// One finished call.
#[repr(C)]
#[derive(Debug)]
pub struct WeirCompletion {
    /// The token the call was started with.
    pub token: u64,
    pub kind: WeirKind,
    /// The `ErrorCode` of a `WeirKind::Error`; 0 otherwise.
    pub code: u32,
    /// Valid until the `WeirCompletions` they came in is freed.
    pub data: *const u8,
    pub len: usize,
    /// Of a `WeirKind::Records`: the ranges of the fetched buffers the
    /// records lie in, which `data` names by position. Valid as `data` is.
    pub ranges: *const WeirRange,
    pub range_count: usize,
}

/// Bytes the client core owns.
#[repr(C)]
#[derive(Debug)]
pub struct WeirRange {
    pub data: *const u8,
    pub len: usize,
}

/// A drained set of completions and the bytes they point into.
#[derive(Debug)]
pub struct WeirCompletions {
    items: Vec<WeirCompletion>,
    _buffers: Vec<Vec<u8>>,
    /// The ranges `Records` completions name and the fetched buffers they
    /// lie in.
    _ranges: Vec<(Vec<WeirRange>, Vec<Bytes>)>,
}

/// A completion as the bytes Go reads.
#[derive(Debug)]
struct Flat {
    kind: WeirKind,
    code: u32,
    data: Vec<u8>,
    /// What `data` points into (the ranges of a `Records` completion).
    keep: Vec<Bytes>,
}

impl Flat {
    fn new(kind: WeirKind, data: Vec<u8>) -> Flat {
        Flat { kind, code: 0, data, keep: Vec::new() }
    }

    fn error(error: Error) -> Flat {
        Flat { kind: WeirKind::Error, code: u32::from(error.code), data: error.message.into_bytes(), keep: Vec::new() }
    }
}

fn error_ptr(error: Error) -> *mut WeirError {
    let message = CString::new(error.message.replace('\0', "\\0")).unwrap_or_default();
    Box::into_raw(Box::new(WeirError { code: error.code, message }))
}

fn panicked(payload: &(dyn std::any::Any + Send)) -> Error {
    let what = payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned());
    Error::new(ErrorCode::UnknownServerError, format!("internal error in the Weir client core: {what}"))
}

/// Runs `body`, turning its error or panic into a `WeirError*`.
fn guard(body: impl FnOnce() -> Result<(), Error>) -> *mut WeirError {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => std::ptr::null_mut(),
        Ok(Err(error)) => error_ptr(error),
        Err(payload) => error_ptr(panicked(payload.as_ref())),
    }
}

/// Runs `body` where no error can be returned: a panic is swallowed (and
/// `fallback` returned) rather than unwinding into C.
fn quietly<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::InvalidRequest, message)
}

/// # Safety
/// `data` points at `len` readable bytes (or `len` is 0).
unsafe fn bytes<'a>(data: *const u8, len: usize) -> &'a [u8] {
    if len == 0 || data.is_null() {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(data, len) }
    }
}

/// # Safety
/// As [`bytes`].
unsafe fn text(data: *const u8, len: usize, what: &str) -> Result<String, Error> {
    // SAFETY: the caller's contract.
    let raw = unsafe { bytes(data, len) };
    String::from_utf8(raw.to_vec()).map_err(|_| invalid(format!("{what} is not UTF-8")))
}

/// # Safety
/// `handle` is null or was made by this library and not freed.
unsafe fn handle<'a, T>(handle: *const T, what: &str) -> Result<&'a T, Error> {
    // SAFETY: the caller's contract.
    unsafe { handle.as_ref() }.ok_or_else(|| invalid(format!("a null {what} handle")))
}

/// # Safety
/// `out` is null or writable.
unsafe fn put<T>(out: *mut *mut T, value: T) -> Result<(), Error> {
    if out.is_null() {
        return Err(invalid("a null out pointer"));
    }
    // SAFETY: non-null and writable by the caller's contract.
    unsafe { *out = Box::into_raw(Box::new(value)) };
    Ok(())
}

/// The client settings (`{"bootstrap.servers": …, "acks": …}`: names as
/// Kafka's) from a JSON object of strings.
fn settings(json: &[u8]) -> Result<std::collections::BTreeMap<String, String>, Error> {
    serde_json::from_slice(json)
        .map_err(|error| invalid(format!("client settings must be a JSON object of strings: {error}")))
}

// ---------------------------------------------------------------- errors

/// The `ErrorCode` of `error` (0: the binding layer cannot run here).
///
/// # Safety
/// `error` was returned by this library and not freed.
#[no_mangle]
pub unsafe extern "C" fn weir_error_code(error: *const WeirError) -> u16 {
    // SAFETY: the caller's contract.
    unsafe { error.as_ref() }.map_or(ErrorCode::UnknownServerError.as_u16(), |error| error.code)
}

/// The message of `error`, NUL-terminated, valid until `weir_error_free`.
///
/// # Safety
/// `error` was returned by this library and not freed.
#[no_mangle]
pub unsafe extern "C" fn weir_error_message(error: *const WeirError) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { error.as_ref() }.map_or(c"a null error".as_ptr(), |error| error.message.as_ptr())
}

/// Releases `error` (null: nothing).
///
/// # Safety
/// `error` was returned by this library and is not used again.
#[no_mangle]
pub unsafe extern "C" fn weir_error_free(error: *mut WeirError) {
    if !error.is_null() {
        // SAFETY: made by Box::into_raw in this library, freed once.
        drop(unsafe { Box::from_raw(error) });
    }
}

/// Releases a string this library returned (null: nothing).
///
/// # Safety
/// `text` was returned by this library and is not used again.
#[no_mangle]
pub unsafe extern "C" fn weir_string_free(text: *mut c_char) {
    if !text.is_null() {
        // SAFETY: made by CString::into_raw in this library, freed once.
        drop(unsafe { CString::from_raw(text) });
    }
}

fn json_string(value: serde_json::Value) -> *mut c_char {
    CString::new(value.to_string()).map_or(std::ptr::null_mut(), CString::into_raw)
}

/// Every error code as a JSON array of `{"code", "name", "retriable"}`, in
/// number order (what `go generate` writes `errors_gen.go` from). Free with
/// `weir_string_free`.
#[no_mangle]
pub extern "C" fn weir_error_codes() -> *mut c_char {
    quietly(std::ptr::null_mut(), || {
        let codes: Vec<serde_json::Value> = client_ffi::error_codes()
            .into_iter()
            .map(|info| serde_json::json!({"code": info.code, "name": info.name, "retriable": info.retriable}))
            .collect();
        json_string(serde_json::Value::Array(codes))
    })
}

/// Kafka's murmur2 partition of `key` among `partition_count` partitions
/// (0 when `partition_count` is 0).
///
/// # Safety
/// `key` points at `key_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn weir_partition_for_key(key: *const u8, key_len: usize, partition_count: u32) -> u32 {
    if partition_count == 0 {
        return 0;
    }
    // SAFETY: the caller's contract.
    let key = unsafe { bytes(key, key_len) };
    quietly(0, || client_ffi::partitioner::partition_for_key(key, partition_count))
}

// ---------------------------------------------------------------- queue

/// A new completion queue in `*out`.
///
/// # Safety
/// `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn weir_queue_new(out: *mut *mut WeirQueue) -> *mut WeirError {
    guard(|| {
        let queue = WeirQueue { queue: CompletionQueue::new()? };
        // SAFETY: the caller's contract.
        unsafe { put(out, queue) }
    })
}

/// A descriptor that is readable while the queue holds completions. It stays
/// owned by the queue: watch it (or a `dup` of it), never close it.
///
/// # Safety
/// `queue` is live.
#[no_mangle]
pub unsafe extern "C" fn weir_queue_fd(queue: *const WeirQueue) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { queue.as_ref() }.map_or(-1, |queue| queue.queue.fd())
}

/// Takes every completion pushed since the last drain: `*items` and `*len`
/// describe them; the returned handle owns them (null, with `*len` 0, when
/// there were none). Free it with `weir_completions_free`.
///
/// # Safety
/// `queue` is live; `items` and `len` are writable.
#[no_mangle]
pub unsafe extern "C" fn weir_queue_drain(
    queue: *const WeirQueue,
    items: *mut *const WeirCompletion,
    len: *mut usize,
) -> *mut WeirCompletions {
    // SAFETY: the caller's contract.
    let Some(queue) = (unsafe { queue.as_ref() }) else { return std::ptr::null_mut() };
    if items.is_null() || len.is_null() {
        return std::ptr::null_mut();
    }
    let drained = quietly(None, || {
        let done = queue.queue.drain();
        if done.is_empty() {
            return None;
        }
        Some(Box::new(completions(done, flatten)))
    });
    // SAFETY: both writable by the caller's contract.
    unsafe {
        match drained {
            Some(drained) => {
                *items = drained.items.as_ptr();
                *len = drained.items.len();
                Box::into_raw(drained)
            }
            None => {
                *items = std::ptr::null();
                *len = 0;
                std::ptr::null_mut()
            }
        }
    }
}

/// `done` flattened item by item: an item whose `flatten` panics becomes an
/// `UnknownServerError` completion for its token (its caller still hears back),
/// and the others are kept.
fn completions(done: Vec<(u64, Completion)>, flatten: impl Fn(Completion) -> Flat) -> WeirCompletions {
    let mut items = Vec::with_capacity(done.len());
    let mut buffers = Vec::with_capacity(done.len());
    let mut ranges = Vec::new();
    for (token, completion) in done {
        let flat = catch_unwind(AssertUnwindSafe(|| flatten(completion)))
            .unwrap_or_else(|payload| Flat::error(panicked(payload.as_ref())));
        let table: Vec<WeirRange> =
            flat.keep.iter().map(|bytes| WeirRange { data: bytes.as_ptr(), len: bytes.len() }).collect();
        // Moving a Vec does not move its heap buffer: these pointers stay valid.
        items.push(WeirCompletion {
            token,
            kind: flat.kind,
            code: flat.code,
            data: flat.data.as_ptr(),
            len: flat.data.len(),
            ranges: if table.is_empty() { std::ptr::null() } else { table.as_ptr() },
            range_count: table.len(),
        });
        buffers.push(flat.data);
        if !table.is_empty() {
            ranges.push((table, flat.keep));
        }
    }
    WeirCompletions { items, _buffers: buffers, _ranges: ranges }
}

fn flatten(completion: Completion) -> Flat {
    match completion {
        Completion::Unit => Flat::new(WeirKind::Unit, Vec::new()),
        Completion::Metadata(metadata) => Flat::new(WeirKind::Deliveries, codec::encode_deliveries(&[Ok(metadata)])),
        Completion::Records(records) => match RecordViews::new(&records) {
            Ok(views) => {
                let data = codec::encode_views(&views);
                Flat { keep: views.buffers, ..Flat::new(WeirKind::Records, data) }
            }
            Err(error) => Flat::error(error),
        },
        Completion::Offset(offset) => {
            Flat::new(WeirKind::Offset, offset.map(|offset| offset.to_le_bytes().to_vec()).unwrap_or_default())
        }
        Completion::Deliveries(deliveries) => Flat::new(WeirKind::Deliveries, codec::encode_deliveries(&deliveries)),
        Completion::Json(json) => Flat::new(WeirKind::Json, json.into_bytes()),
        Completion::Error(error) => Flat::error(error),
    }
}

/// Releases drained completions and their bytes (null: nothing).
///
/// # Safety
/// `completions` came from `weir_queue_drain` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn weir_completions_free(completions: *mut WeirCompletions) {
    if !completions.is_null() {
        // SAFETY: made by Box::into_raw in weir_queue_drain, freed once.
        drop(unsafe { Box::from_raw(completions) });
    }
}

/// Releases a queue. Calls still in flight finish on their own; their
/// outcomes are dropped, and the queue's descriptor stays open (never
/// readable again) until the last of them is done.
///
/// # Safety
/// `queue` came from `weir_queue_new` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn weir_queue_free(queue: *mut WeirQueue) {
    if !queue.is_null() {
        // SAFETY: made by Box::into_raw in weir_queue_new, freed once.
        drop(unsafe { Box::from_raw(queue) });
    }
}

/// Starts `future` on the runtime; its outcome goes to `queue` under `token`.
fn start<F, E>(queue: &WeirQueue, token: u64, future: F) -> Result<(), Error>
where
    F: std::future::Future<Output = Result<Completion, E>> + Send + 'static,
    E: Into<Error>,
{
    queue.queue.sink().spawn(token, future)
}

// ---------------------------------------------------------------- producer

/// A producer with `settings` (a JSON object of Kafka-named settings,
/// `bootstrap.servers` included) in `*out`.
///
/// # Safety
/// `settings` points at `settings_len` readable bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn weir_producer_new(
    settings_json: *const u8,
    settings_len: usize,
    out: *mut *mut WeirProducer,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let map = settings(unsafe { bytes(settings_json, settings_len) })?;
        let config = client::ProducerConfig::from_map(&map)?;
        let producer = WeirProducer { inner: OrderedProducer::new(config)? };
        // SAFETY: the caller's contract.
        unsafe { put(out, producer) }
    })
}

/// Queues the records in `records` (the `records` layout) behind earlier
/// sends; a `Deliveries` completion says where each landed or why not
/// (records after the first the producer refused are not sent).
///
/// # Safety
/// Handles live; `records` points at `records_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn weir_producer_send(
    producer: *const WeirProducer,
    queue: *const WeirQueue,
    token: u64,
    records: *const u8,
    records_len: usize,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let (producer, queue) = unsafe { (handle(producer, "producer")?, handle(queue, "queue")?) };
        // SAFETY: the caller's contract.
        let records = codec::decode_records(unsafe { bytes(records, records_len) })?;
        let outcomes = producer.inner.send_all(records)?;
        start(queue, token, async move { Ok::<_, Error>(Completion::Deliveries(outcomes.await)) })
    })
}

/// Queues one record (a one-record `records` buffer) without waiting for
/// room: `*queued` false means the producer's buffer is full and nothing was
/// queued (ask `weir_producer_wait_room`). A queued record's outcome arrives
/// as a one-entry `Deliveries` or an `Error` completion.
///
/// # Safety
/// Handles live; `record` points at `record_len` readable bytes; `queued` is
/// writable.
#[no_mangle]
pub unsafe extern "C" fn weir_producer_send_nowait(
    producer: *const WeirProducer,
    queue: *const WeirQueue,
    token: u64,
    record: *const u8,
    record_len: usize,
    queued: *mut bool,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let (producer, queue) = unsafe { (handle(producer, "producer")?, handle(queue, "queue")?) };
        if queued.is_null() {
            return Err(invalid("a null out pointer"));
        }
        // SAFETY: the caller's contract.
        let mut records = codec::decode_records(unsafe { bytes(record, record_len) })?;
        let (Some(record), true) = (records.pop(), records.is_empty()) else {
            return Err(invalid("send_nowait takes exactly one record"));
        };
        let accepted = producer.inner.send_nowait(record, queue.queue.sink(), token)?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { *queued = accepted };
        Ok(())
    })
}

/// A `Unit` completion once the producer's queue has room for a record.
///
/// # Safety
/// Handles live.
#[no_mangle]
pub unsafe extern "C" fn weir_producer_wait_room(
    producer: *const WeirProducer,
    queue: *const WeirQueue,
    token: u64,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let (producer, queue) = unsafe { (handle(producer, "producer")?, handle(queue, "queue")?) };
        producer.inner.room_nowait(queue.queue.sink(), token);
        Ok(())
    })
}

/// A `Unit` completion once everything sent before it is acknowledged.
///
/// # Safety
/// Handles live.
#[no_mangle]
pub unsafe extern "C" fn weir_producer_flush(
    producer: *const WeirProducer,
    queue: *const WeirQueue,
    token: u64,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let (producer, queue) = unsafe { (handle(producer, "producer")?, handle(queue, "queue")?) };
        producer.inner.flush_nowait(queue.queue.sink(), token)
    })
}

/// Flushes, then refuses further sends; `Unit` when done.
///
/// # Safety
/// Handles live.
#[no_mangle]
pub unsafe extern "C" fn weir_producer_close(
    producer: *const WeirProducer,
    queue: *const WeirQueue,
    token: u64,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let (producer, queue) = unsafe { (handle(producer, "producer")?, handle(queue, "queue")?) };
        producer.inner.close_nowait(queue.queue.sink(), token)
    })
}

/// Releases a producer (records already queued are still sent).
///
/// # Safety
/// `producer` came from `weir_producer_new` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn weir_producer_free(producer: *mut WeirProducer) {
    if !producer.is_null() {
        // SAFETY: made by Box::into_raw in weir_producer_new, freed once.
        quietly((), || drop(unsafe { Box::from_raw(producer) }));
    }
}

// ---------------------------------------------------------------- consumer

/// A consumer with `settings` (a JSON object of Kafka-named settings,
/// `bootstrap.servers` included) in `*out`.
///
/// # Safety
/// `settings` points at `settings_len` readable bytes; `out` is writable.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_new(
    settings_json: *const u8,
    settings_len: usize,
    out: *mut *mut WeirConsumer,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let map = settings(unsafe { bytes(settings_json, settings_len) })?;
        let config = client::ConsumerConfig::from_map(&map)?;
        let inner = client_ffi::runtime::within(|| client_ffi::Consumer::new(config))??;
        let consumer = WeirConsumer { inner: Arc::new(inner), rebalances: Arc::default() };
        // SAFETY: the caller's contract.
        unsafe { put(out, consumer) }
    })
}

/// Joins the group (`group.id`) as a member consuming `topics` (a JSON array
/// of names), or, when `pattern_len` > 0, every topic whose whole name matches
/// `pattern`. `Unit` once joined.
///
/// # Safety
/// Handles live; each pointer points at its length in readable bytes.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_subscribe(
    consumer: *const WeirConsumer,
    queue: *const WeirQueue,
    token: u64,
    topics_json: *const u8,
    topics_len: usize,
    pattern: *const u8,
    pattern_len: usize,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let (consumer, queue) = unsafe { (handle(consumer, "consumer")?, handle(queue, "queue")?) };
        // SAFETY: the caller's contract.
        let pattern = unsafe { text(pattern, pattern_len, "the pattern")? };
        let topics: Vec<String> = if pattern.is_empty() {
            // SAFETY: the caller's contract.
            serde_json::from_slice(unsafe { bytes(topics_json, topics_len) })
                .map_err(|error| invalid(format!("topics must be a JSON array of names: {error}")))?
        } else {
            Vec::new()
        };
        let inner = consumer.inner.clone();
        let listener: Arc<dyn client_ffi::RebalanceListener> = consumer.rebalances.clone();
        start(queue, token, async move {
            if pattern.is_empty() {
                inner.subscribe(&topics, Some(listener)).await?;
            } else {
                inner.subscribe_pattern(&pattern, Some(listener)).await?;
            }
            Ok::<_, client::ClientError>(Completion::Unit)
        })
    })
}

fn partitions_in(json: &[u8]) -> Result<Vec<(String, i32)>, Error> {
    serde_json::from_slice(json)
        .map_err(|error| invalid(format!("partitions must be a JSON array of [topic, partition]: {error}")))
}

/// Reads exactly `partitions` (a JSON array of `[topic, partition]`),
/// outside any group. `Unit` once assigned.
///
/// # Safety
/// Handles live; `partitions` points at `partitions_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_assign(
    consumer: *const WeirConsumer,
    queue: *const WeirQueue,
    token: u64,
    partitions: *const u8,
    partitions_len: usize,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let (consumer, queue) = unsafe { (handle(consumer, "consumer")?, handle(queue, "queue")?) };
        // SAFETY: the caller's contract.
        let partitions = partitions_in(unsafe { bytes(partitions, partitions_len) })?;
        let inner = consumer.inner.clone();
        start(queue, token, async move {
            inner.assign(&partitions).await?;
            Ok::<_, client::ClientError>(Completion::Unit)
        })
    })
}

/// Records that arrive within `wait_ms` (at most `max_records`): a `Records`
/// completion, empty when none came or `weir_consumer_wakeup` cut the wait.
///
/// # Safety
/// Handles live.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_poll(
    consumer: *const WeirConsumer,
    queue: *const WeirQueue,
    token: u64,
    wait_ms: u64,
    max_records: u32,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let (consumer, queue) = unsafe { (handle(consumer, "consumer")?, handle(queue, "queue")?) };
        let inner = consumer.inner.clone();
        let wait = Duration::from_millis(wait_ms);
        let max = max_records.max(1) as usize;
        start(queue, token, async move {
            Ok::<_, client::ClientError>(Completion::Records(inner.poll_at_most(wait, max).await?))
        })
    })
}

/// Makes the waiting poll (or the next one) finish at once, empty.
///
/// # Safety
/// `consumer` is live.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_wakeup(consumer: *const WeirConsumer) {
    // SAFETY: the caller's contract.
    if let Some(consumer) = unsafe { consumer.as_ref() } {
        quietly((), || consumer.inner.wakeup());
    }
}

/// Commits every owned partition's position (`offsets_len` 0), or exactly
/// `offsets` (a JSON array of `[topic, partition, next_offset]`). `Unit`.
///
/// # Safety
/// Handles live; `offsets` points at `offsets_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_commit(
    consumer: *const WeirConsumer,
    queue: *const WeirQueue,
    token: u64,
    offsets: *const u8,
    offsets_len: usize,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let (consumer, queue) = unsafe { (handle(consumer, "consumer")?, handle(queue, "queue")?) };
        let offsets = if offsets_len == 0 {
            None
        } else {
            // SAFETY: the caller's contract.
            let entries: Vec<(String, i32, i64)> = serde_json::from_slice(unsafe { bytes(offsets, offsets_len) })
                .map_err(|error| {
                    invalid(format!("offsets must be a JSON array of [topic, partition, offset]: {error}"))
                })?;
            if let Some((topic, partition, offset)) = entries.iter().find(|(_, _, offset)| *offset < 0) {
                return Err(invalid(format!("offset {offset} for {topic}/{partition} is negative")));
            }
            Some(entries.into_iter().map(|(topic, partition, offset)| ((topic, partition), offset)).collect::<Vec<_>>())
        };
        let inner = consumer.inner.clone();
        start(queue, token, async move {
            match offsets {
                Some(offsets) => inner.commit_offsets(&offsets).await?,
                None => inner.commit().await?,
            }
            Ok::<_, client::ClientError>(Completion::Unit)
        })
    })
}

/// Stores the next offsets to read (a JSON array of `[topic, partition,
/// next_offset]`) as what commits take, with `enable.auto.offset.store=false`:
/// the binding stores a record's offset once it has handed the record over.
/// A partition not assigned here, or revoked since the last
/// `weir_consumer_rebalance_events`, is not stored but named in `*rejected`
/// (a JSON array of `[topic, partition]`; null when every entry was stored;
/// free with `weir_string_free`): its records must not be handed out, its
/// new owner reads them from the commit made on revoke. `rejected` may be
/// null.
///
/// # Safety
/// `consumer` is live; `offsets` points at `offsets_len` readable bytes;
/// `rejected` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_store_offsets(
    consumer: *const WeirConsumer,
    offsets: *const u8,
    offsets_len: usize,
    rejected: *mut *mut c_char,
) -> *mut WeirError {
    if !rejected.is_null() {
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { *rejected = std::ptr::null_mut() };
    }
    guard(|| {
        // SAFETY: the caller's contract.
        let consumer = unsafe { handle(consumer, "consumer")? };
        // SAFETY: the caller's contract.
        let entries: Vec<(String, i32, i64)> = serde_json::from_slice(unsafe { bytes(offsets, offsets_len) })
            .map_err(|error| invalid(format!("offsets must be a JSON array of [topic, partition, offset]: {error}")))?;
        let mut refused = Vec::new();
        for (topic, partition, offset) in entries {
            let stored = consumer
                .rebalances
                .unless_revoked(&topic, partition, || consumer.inner.store_offset(&topic, partition, offset).is_ok());
            if !stored {
                refused.push((topic, partition));
            }
        }
        if !refused.is_empty() && !rejected.is_null() {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { *rejected = json_string(serde_json::json!(refused)) };
        }
        Ok(())
    })
}

/// The group's committed offset of a partition: an `Offset` completion.
///
/// # Safety
/// Handles live; `topic` points at `topic_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_committed(
    consumer: *const WeirConsumer,
    queue: *const WeirQueue,
    token: u64,
    topic: *const u8,
    topic_len: usize,
    partition: i32,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let (consumer, queue) = unsafe { (handle(consumer, "consumer")?, handle(queue, "queue")?) };
        // SAFETY: the caller's contract.
        let topic = unsafe { text(topic, topic_len, "the topic")? };
        let inner = consumer.inner.clone();
        start(queue, token, async move {
            Ok::<_, client::ClientError>(Completion::Offset(inner.committed(&topic, partition).await?))
        })
    })
}

/// Where `weir_consumer_seek` moves a partition.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeirSeek {
    /// To `offset`.
    Offset = 0,
    /// To the log start.
    Earliest = 1,
    /// To the log end.
    Latest = 2,
}

/// Moves an owned partition's position.
///
/// # Safety
/// `consumer` is live; `topic` points at `topic_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_seek(
    consumer: *const WeirConsumer,
    topic: *const u8,
    topic_len: usize,
    partition: i32,
    whence: WeirSeek,
    offset: i64,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let consumer = unsafe { handle(consumer, "consumer")? };
        // SAFETY: the caller's contract.
        let topic = unsafe { text(topic, topic_len, "the topic")? };
        let target = match whence {
            WeirSeek::Offset if offset < 0 => return Err(invalid(format!("offset {offset} is negative"))),
            WeirSeek::Offset => Offset::At(offset),
            WeirSeek::Earliest => Offset::Beginning,
            WeirSeek::Latest => Offset::End,
        };
        Ok(consumer.inner.seek(&topic, partition, target)?)
    })
}

/// Pauses (`paused` true) or resumes fetching a partition.
///
/// # Safety
/// `consumer` is live; `topic` points at `topic_len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_pause(
    consumer: *const WeirConsumer,
    topic: *const u8,
    topic_len: usize,
    partition: i32,
    paused: bool,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let consumer = unsafe { handle(consumer, "consumer")? };
        // SAFETY: the caller's contract.
        let topic = unsafe { text(topic, topic_len, "the topic")? };
        if paused {
            consumer.inner.pause(&topic, partition);
        } else {
            consumer.inner.resume(&topic, partition);
        }
        Ok(())
    })
}

/// The next offset to read from a partition in `*offset`; false when the
/// partition is not owned.
///
/// # Safety
/// `consumer` is live; `topic` points at `topic_len` readable bytes; `offset`
/// is writable.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_position(
    consumer: *const WeirConsumer,
    topic: *const u8,
    topic_len: usize,
    partition: i32,
    offset: *mut i64,
) -> bool {
    // SAFETY: the caller's contract.
    let (Some(consumer), false) = (unsafe { consumer.as_ref() }, offset.is_null()) else { return false };
    // SAFETY: the caller's contract.
    let Ok(topic) = (unsafe { text(topic, topic_len, "the topic") }) else { return false };
    match quietly(None, || consumer.inner.position(&topic, partition)) {
        Some(position) => {
            // SAFETY: non-null and writable by the caller's contract.
            unsafe { *offset = position };
            true
        }
        None => false,
    }
}

/// The owned partitions as a JSON array of `[topic, partition]`. Free with
/// `weir_string_free`.
///
/// # Safety
/// `consumer` is live.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_assignment(consumer: *const WeirConsumer) -> *mut c_char {
    // SAFETY: the caller's contract.
    let Some(consumer) = (unsafe { consumer.as_ref() }) else { return std::ptr::null_mut() };
    quietly(std::ptr::null_mut(), || json_string(serde_json::json!(consumer.inner.assignment())))
}

/// Assignment changes since the last call, in order, as a JSON array of
/// `{"kind": "assigned"|"revoked"|"lost", "partitions": [[topic, partition]…]}`.
/// Free with `weir_string_free`.
///
/// # Safety
/// `consumer` is live.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_rebalance_events(consumer: *const WeirConsumer) -> *mut c_char {
    // SAFETY: the caller's contract.
    let Some(consumer) = (unsafe { consumer.as_ref() }) else { return std::ptr::null_mut() };
    quietly(std::ptr::null_mut(), || {
        let events: Vec<serde_json::Value> = consumer
            .rebalances
            .drain()
            .into_iter()
            .map(|(kind, partitions)| serde_json::json!({"kind": kind, "partitions": partitions}))
            .collect();
        json_string(serde_json::Value::Array(events))
    })
}

/// Leaves the group (committing first with auto-commit) and stops fetching;
/// `Unit` when done.
///
/// # Safety
/// Handles live.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_close(
    consumer: *const WeirConsumer,
    queue: *const WeirQueue,
    token: u64,
) -> *mut WeirError {
    guard(|| {
        // SAFETY: the caller's contract.
        let (consumer, queue) = unsafe { (handle(consumer, "consumer")?, handle(queue, "queue")?) };
        let inner = consumer.inner.clone();
        start(queue, token, async move {
            inner.close().await;
            Ok::<_, Error>(Completion::Unit)
        })
    })
}

/// Releases a consumer handle (close it first to leave its group at once).
///
/// # Safety
/// `consumer` came from `weir_consumer_new` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn weir_consumer_free(consumer: *mut WeirConsumer) {
    if !consumer.is_null() {
        // SAFETY: made by Box::into_raw in weir_consumer_new, freed once.
        quietly((), || drop(unsafe { Box::from_raw(consumer) }));
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use super::*;

    #[test]
    fn a_completion_that_cannot_be_flattened_fails_alone() {
        let done =
            vec![(1, Completion::Unit), (2, Completion::Json("boom".to_owned())), (3, Completion::Offset(Some(9)))];
        let drained = completions(done, |completion| match completion {
            Completion::Json(_) => panic!("cannot flatten"),
            other => flatten(other),
        });
        let items: Vec<(u64, WeirKind)> = drained.items.iter().map(|item| (item.token, item.kind)).collect();
        assert_eq!(items, vec![(1, WeirKind::Unit), (2, WeirKind::Error), (3, WeirKind::Offset)]);
        let failed = &drained.items[1];
        assert_eq!(failed.code, u32::from(ErrorCode::UnknownServerError.as_u16()));
        // SAFETY: data/len describe a buffer drained owns.
        let message = unsafe { std::slice::from_raw_parts(failed.data, failed.len) };
        assert!(String::from_utf8_lossy(message).contains("cannot flatten"));
        // SAFETY: as above.
        let offset = unsafe { std::slice::from_raw_parts(drained.items[2].data, drained.items[2].len) };
        assert_eq!(offset, 9i64.to_le_bytes());
    }

    #[test]
    fn consumed_records_cross_as_ranges_the_completions_keep() {
        let mut record = client_ffi::Record::new("t", 0, 5, 1);
        record.value = Some(Bytes::from_static(b"value"));
        let drained = completions(vec![(7, Completion::Records(vec![record])), (8, Completion::Unit)], flatten);
        let item = &drained.items[0];
        assert_eq!((item.token, item.kind), (7, WeirKind::Records));
        assert_eq!(item.range_count, 1, "the poll's copies");
        // SAFETY: ranges/range_count and each range describe memory drained owns.
        let range = unsafe { &*item.ranges };
        // SAFETY: as above.
        assert_eq!(unsafe { std::slice::from_raw_parts(range.data, range.len) }, b"value");
        assert!(drained.items[1].ranges.is_null());
        assert_eq!(drained.items[1].range_count, 0);
    }

    #[test]
    fn storing_offsets_of_a_partition_not_assigned_names_it() {
        let settings = br#"{"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "enable.auto.offset.store": "false"}"#;
        let mut consumer = std::ptr::null_mut();
        // SAFETY: valid buffers and out pointers.
        let error = unsafe { weir_consumer_new(settings.as_ptr(), settings.len(), &mut consumer) };
        assert!(error.is_null());
        let offsets = br#"[["t", 0, 5], ["t", 1, 7]]"#;
        let mut rejected = std::ptr::null_mut();
        // SAFETY: a live consumer, valid buffers and out pointer.
        let error = unsafe { weir_consumer_store_offsets(consumer, offsets.as_ptr(), offsets.len(), &mut rejected) };
        assert!(error.is_null());
        assert!(!rejected.is_null());
        // SAFETY: a NUL-terminated string from this library.
        let named: serde_json::Value = serde_json::from_slice(unsafe { CStr::from_ptr(rejected) }.to_bytes()).unwrap();
        assert_eq!(named, serde_json::json!([["t", 0], ["t", 1]]));
        // SAFETY: each freed once.
        unsafe {
            weir_string_free(rejected);
            weir_consumer_free(consumer);
        }
    }
}

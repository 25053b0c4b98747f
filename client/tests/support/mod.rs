//! Starts a real broker server in-process on `127.0.0.1:0` for client tests, and
//! speaks the raw RPC contract (`abi/schema/weir.capnp`) through
//! [`client::connection::Connection`] for tests that must send what the client
//! never would (hand-made batches, duplicate retries, bad offsets).

#![allow(dead_code)]

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ::broker::{BrokerConfig, Server};
use abi::weir_capnp::broker as wire;
use abi::{BatchIter, RecordBatch};
use client::connection::Connection;
use client::{ClientError, CommonConfig, Consumer, ConsumerConfig, ConsumerRecord, ErrorCode, ProducerConfig};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Longest any test waits for a condition before failing.
pub const WAIT_MAX: Duration = Duration::from_secs(60);

/// A running broker; `stop` shuts it down cleanly.
pub struct TestBroker {
    pub address: String,
    pub data_dir: PathBuf,
    /// The broker's state, for tests that drive it directly.
    pub node: std::sync::Arc<broker::Node>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl TestBroker {
    pub async fn start(data_dir: &Path) -> TestBroker {
        TestBroker::start_with(data_dir, |_| {}).await
    }

    pub async fn start_with(data_dir: &Path, tweak: impl FnOnce(&mut BrokerConfig)) -> TestBroker {
        let mut config = BrokerConfig {
            data_dir: data_dir.to_path_buf(),
            listen: "127.0.0.1:0".to_owned(),
            ..BrokerConfig::default()
        };
        tweak(&mut config);
        let server = Server::bind(config).await.expect("broker starts");
        let address = server.local_addr().to_string();
        let node = server.node().clone();
        let (shutdown, stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            server
                .serve(async {
                    let _ = stopped.await;
                })
                .await
                .expect("broker serves");
        });
        TestBroker { address, data_dir: data_dir.to_path_buf(), node, shutdown: Some(shutdown), task: Some(task) }
    }

    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("broker task ends");
        }
    }

    pub fn common(&self) -> CommonConfig {
        CommonConfig { bootstrap_servers: self.address.clone(), ..CommonConfig::default() }
    }

    pub fn producer_config(&self) -> ProducerConfig {
        ProducerConfig { common: self.common(), ..ProducerConfig::default() }
    }

    pub fn consumer_config(&self) -> ConsumerConfig {
        ConsumerConfig { common: self.common(), ..ConsumerConfig::default() }
    }

    /// A raw RPC connection of its own.
    pub async fn connect(&self) -> Connection {
        Connection::connect(&self.address, Duration::from_secs(5)).await.expect("broker accepts a connection")
    }
}

/// Waits until `condition` holds, checking every 10 ms, and fails the test after
/// [`WAIT_MAX`] naming `what` it waited for.
pub async fn wait_until<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    while !condition().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out after {WAIT_MAX:?} waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `consumer` until `count` records arrived (fails after [`WAIT_MAX`]).
pub async fn consume(consumer: &Consumer, count: usize) -> Vec<ConsumerRecord> {
    let deadline = tokio::time::Instant::now() + WAIT_MAX;
    let mut received = Vec::new();
    while received.len() < count {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let records = consumer.poll(left).await.expect("poll succeeds");
        assert!(!records.is_empty(), "timed out with {} of {count} records", received.len());
        received.extend(records);
    }
    received
}

/// An RPC-level error as the client core maps it (`ClientError::from_rpc`):
/// a lost connection, an overload (`ResourceExhausted`) or a protocol error.
pub fn rpc_error(address: &str, error: capnp::Error) -> ClientError {
    match error.kind {
        capnp::ErrorKind::Disconnected => {
            ClientError::Disconnected { address: address.to_owned(), reason: error.extra }
        }
        capnp::ErrorKind::Overloaded => {
            ClientError::Broker { code: ErrorCode::ResourceExhausted, message: error.extra }
        }
        _ => ClientError::Protocol(error.to_string()),
    }
}

/// The `ClientError` of a response's `Error` struct.
fn broker_error(error: abi::weir_capnp::error::Reader<'_>) -> ClientError {
    let message = error.get_message().ok().and_then(|text| text.to_str().ok()).unwrap_or("").to_owned();
    let code = ErrorCode::from_u16(error.get_code()).unwrap_or(ErrorCode::UnknownServerError);
    ClientError::Broker { code, message }
}

/// The broker error code of `outcome`, or a panic naming what came instead.
pub fn code_of<T: std::fmt::Debug>(outcome: Result<T, ClientError>) -> ErrorCode {
    match outcome {
        Err(ClientError::Broker { code, .. }) => code,
        other => panic!("expected a broker error, got {other:?}"),
    }
}

/// A produce answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Produced {
    pub base_offset: i64,
    pub log_start_offset: i64,
}

/// One `produce` call with `acks=all` carrying `batches` as they are.
pub async fn produce_raw(
    connection: &Connection,
    topic: &str,
    partition: i32,
    batches: Vec<u8>,
) -> Result<Produced, ClientError> {
    let topic = topic.to_owned();
    let address = connection.address().to_owned();
    connection
        .call(move |client: wire::Client| async move {
            let mut request = client.produce_request();
            let mut builder = request.get().init_request();
            builder.set_topic(&topic[..]);
            builder.set_partition(partition);
            builder.set_acks(abi::weir_capnp::Acks::All);
            builder.set_timeout_ms(10_000);
            builder.set_batches(&batches);
            let response = request.send().promise.await.map_err(|error| rpc_error(&address, error))?;
            let response = response.get()?.get_response()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            Ok(Produced { base_offset: response.get_base_offset(), log_start_offset: response.get_log_start_offset() })
        })
        .await
}

/// One `produceMany` call with `acks=all`: per entry `(topic, partition,
/// batches)`, its answer in request order.
pub async fn produce_many_raw(
    connection: &Connection,
    entries: Vec<(&str, i32, Vec<u8>)>,
) -> Result<Vec<Result<Produced, ClientError>>, ClientError> {
    let entries: Vec<(String, i32, Vec<u8>)> =
        entries.into_iter().map(|(topic, partition, batches)| (topic.to_owned(), partition, batches)).collect();
    let address = connection.address().to_owned();
    connection
        .call(move |client: wire::Client| async move {
            let mut request = client.produce_many_request();
            let mut builder = request.get().init_request();
            builder.set_acks(abi::weir_capnp::Acks::All);
            builder.set_timeout_ms(10_000);
            let mut list = builder.init_partitions(entries.len() as u32);
            for (index, (topic, partition, batches)) in entries.iter().enumerate() {
                let mut entry = list.reborrow().get(index as u32);
                entry.set_topic(&topic[..]);
                entry.set_partition(*partition);
                entry.set_batches(batches);
            }
            let response = request.send().promise.await.map_err(|error| rpc_error(&address, error))?;
            let responses = response.get()?.get_responses()?;
            let mut answers = Vec::new();
            for response in responses.iter() {
                answers.push(match response.has_error() {
                    true => Err(broker_error(response.get_error()?)),
                    false => Ok(Produced {
                        base_offset: response.get_base_offset(),
                        log_start_offset: response.get_log_start_offset(),
                    }),
                });
            }
            Ok(answers)
        })
        .await
}

/// The fields of a fetch request.
#[derive(Clone, Debug)]
pub struct Fetch {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: u32,
    pub min_bytes: u32,
    pub max_wait_ms: u32,
}

impl Fetch {
    /// A fetch that returns at once (`min_bytes` 0) with up to 1 MiB.
    pub fn at(topic: &str, partition: i32, offset: i64) -> Fetch {
        Fetch { topic: topic.to_owned(), partition, offset, max_bytes: 1 << 20, min_bytes: 0, max_wait_ms: 0 }
    }

    /// Long-polls: waits for at least one byte, up to `max_wait_ms`.
    pub fn waiting(mut self, max_wait_ms: u32) -> Fetch {
        self.min_bytes = 1;
        self.max_wait_ms = max_wait_ms;
        self
    }
}

/// A fetch answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetched {
    pub batches: Vec<u8>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

impl Fetched {
    /// Every batch, decoded.
    pub fn decoded(&self) -> Vec<RecordBatch> {
        BatchIter::new(&self.batches).map(|view| view.expect("whole batches").decode().expect("valid batch")).collect()
    }

    /// (offset, value) of every record.
    pub fn values(&self) -> Vec<(i64, Vec<u8>)> {
        let mut values = Vec::new();
        for batch in self.decoded() {
            for record in batch.records {
                values.push((batch.base_offset + record.offset_delta as i64, record.value.unwrap_or_default()));
            }
        }
        values
    }
}

/// One `fetch` call.
pub async fn fetch_raw(connection: &Connection, fetch: Fetch) -> Result<Fetched, ClientError> {
    let address = connection.address().to_owned();
    connection
        .call(move |client: wire::Client| async move {
            let mut request = client.fetch_request();
            let mut builder = request.get().init_request();
            builder.set_topic(&fetch.topic[..]);
            builder.set_partition(fetch.partition);
            builder.set_offset(fetch.offset);
            builder.set_max_bytes(fetch.max_bytes);
            builder.set_min_bytes(fetch.min_bytes);
            builder.set_max_wait_ms(fetch.max_wait_ms);
            let response = request.send().promise.await.map_err(|error| rpc_error(&address, error))?;
            let response = response.get()?.get_response()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            Ok(Fetched {
                batches: response.get_batches()?.to_vec(),
                high_watermark: response.get_high_watermark(),
                log_start_offset: response.get_log_start_offset(),
            })
        })
        .await
}

/// Which offset a `listOffset` call asks for.
#[derive(Clone, Copy, Debug)]
pub enum Query {
    Earliest,
    Latest,
    Timestamp(i64),
}

/// One `listOffset` call.
pub async fn list_offset_raw(
    connection: &Connection,
    topic: &str,
    partition: i32,
    query: Query,
) -> Result<i64, ClientError> {
    let topic = topic.to_owned();
    let address = connection.address().to_owned();
    connection
        .call(move |client: wire::Client| async move {
            let mut request = client.list_offset_request();
            let mut params = request.get();
            params.set_topic(&topic[..]);
            params.set_partition(partition);
            let mut builder = params.init_query();
            match query {
                Query::Earliest => builder.set_earliest(()),
                Query::Latest => builder.set_latest(()),
                Query::Timestamp(timestamp_ms) => builder.set_timestamp_ms(timestamp_ms),
            }
            let response = request.send().promise.await.map_err(|error| rpc_error(&address, error))?;
            let response = response.get()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            Ok(response.get_offset())
        })
        .await
}

/// One `initProducerId` call: (producer id, epoch).
pub async fn init_producer_id(connection: &Connection) -> Result<(i64, i16), ClientError> {
    let address = connection.address().to_owned();
    connection
        .call(move |client: wire::Client| async move {
            let response =
                client.init_producer_id_request().send().promise.await.map_err(|error| rpc_error(&address, error))?;
            let response = response.get()?;
            if response.has_error() {
                return Err(broker_error(response.get_error()?));
            }
            let id = response.get_id()?;
            Ok((id.get_producer_id(), id.get_producer_epoch()))
        })
        .await
}

/// One `metadata` call for every topic: the topic names it lists.
pub async fn metadata_raw(connection: &Connection) -> Result<Vec<String>, ClientError> {
    let address = connection.address().to_owned();
    connection
        .call(move |client: wire::Client| async move {
            let response =
                client.metadata_request().send().promise.await.map_err(|error| rpc_error(&address, error))?;
            let topics = response.get()?.get_metadata()?.get_topics()?;
            topics.iter().map(|topic| Ok(topic.get_name()?.to_str()?.to_owned())).collect()
        })
        .await
}

/// A plain (non-idempotent) batch of `values` stamped at `timestamp_ms`.
pub fn batch_of(timestamp_ms: i64, values: &[&[u8]]) -> Vec<u8> {
    let mut builder = abi::BatchBuilder::new(timestamp_ms);
    for value in values {
        builder.push(timestamp_ms, None, Some(value), &[]);
    }
    builder.encode()
}

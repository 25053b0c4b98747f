//! [`Cluster`]: the client's view of the brokers — a metadata cache (which broker
//! leads which partition) and one [`Connection`] per broker address.
//!
//! Producers and consumers ask `Cluster` for a partition's leader connection; after
//! a retriable error they call [`Cluster::refresh`] and ask again, so requests
//! always go straight to the leader (no routing tier). Metadata is fetched from
//! any reachable broker, trying the bootstrap list in order, and fetched again
//! when older than [`METADATA_MAX_AGE`]. Broken connections are replaced on next
//! use. Consumer groups: [`Cluster::coordinator`] finds and caches the broker
//! coordinating a group (`findCoordinator`), forgotten after `NotCoordinator`.
//!
//! Shared by every producer, consumer and admin built from one set of settings;
//! `Send + Sync`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use abi::weir_capnp::{broker, partition_metadata};
use abi::ErrorCode;
use rustc_hash::FxHashMap;

use crate::connection::Connection;
use crate::error::{broker_error, ClientError};

/// How long cached topic metadata is used before it is fetched again
/// (`metadata.max.age.ms`, Kafka's default).
pub const METADATA_MAX_AGE: Duration = Duration::from_secs(300);

/// How long a broker that left a call unanswered is tried last.
const UNANSWERED_BACKOFF: Duration = Duration::from_secs(60);

/// One partition as the metadata describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionInfo {
    pub partition: i32,
    /// Broker id of the leader; -1 when there is none.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// While a reassignment runs, the replicas it moves the partition to
    /// (`replicas` lists them first, then those being removed); else empty.
    pub target_replicas: Vec<i32>,
    /// Set when the partition cannot serve (e.g. an offline log).
    pub error: Option<ClientError>,
}

/// A broker as the metadata describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerInfo {
    pub id: i32,
    pub host: String,
    pub port: u16,
}

impl BrokerInfo {
    pub fn address(&self) -> String {
        match self.host.contains(':') {
            true => format!("[{}]:{}", self.host, self.port),
            false => format!("{}:{}", self.host, self.port),
        }
    }
}

/// A topic's partitions, by partition number, and its partitioner plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub partitions: Vec<PartitionInfo>,
    pub partitioner: Option<PartitionerRef>,
}

/// A partitioner plugin set on a topic (the producer fetches it by digest).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PartitionerRef {
    pub plugin: String,
    pub digest: String,
    pub config: Vec<(String, String)>,
}

#[derive(Debug, Default)]
struct Cache {
    brokers: HashMap<i32, BrokerInfo>,
    /// Each topic with when it was fetched.
    topics: FxHashMap<String, (Arc<TopicInfo>, Duration)>,
    /// Group id → address of the broker that coordinates it.
    coordinators: HashMap<String, String>,
    /// Brokers that left a call unanswered or could not be reached, until
    /// when: tried last for calls any broker can answer.
    unanswered: HashMap<String, Instant>,
}

/// See the module docs.
#[derive(Debug)]
pub struct Cluster {
    bootstrap: Vec<String>,
    connect_timeout: Duration,
    /// Bound on each metadata and coordinator call (`request.timeout.ms`).
    request_timeout: Duration,
    cache: Mutex<Cache>,
    /// One slot per address, each locked on its own while it connects, so a
    /// broker slow to accept holds up only the calls that go to it.
    connections: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Connection>>>>>,
}

impl Cluster {
    /// A cluster reached through `bootstrap_servers` (`host:port[,host:port…]`):
    /// connections are set up within `connect_timeout`, and metadata and
    /// coordinator calls answered within `request_timeout`.
    pub fn new(
        bootstrap_servers: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Arc<Cluster>, ClientError> {
        let bootstrap: Vec<String> =
            bootstrap_servers.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect();
        let mut problems = Vec::new();
        if bootstrap.is_empty() {
            problems.push("bootstrap.servers is empty".to_owned());
        }
        for address in &bootstrap {
            let port_ok =
                address.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !port_ok {
                problems.push(format!("bootstrap server {address:?} is not host:port"));
            }
        }
        if !problems.is_empty() {
            return Err(ClientError::InvalidConfig { problems });
        }
        Ok(Arc::new(Cluster {
            bootstrap,
            connect_timeout,
            request_timeout,
            cache: Mutex::new(Cache::default()),
            connections: Mutex::new(HashMap::new()),
        }))
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A live connection to `address`, made on first use and after a break.
    pub async fn connection(&self, address: &str) -> Result<Connection, ClientError> {
        let slot = self.connection_slot(address);
        let mut slot = slot.lock().await;
        if let Some(connection) = slot.as_ref().filter(|connection| !connection.is_broken()) {
            return Ok(connection.clone());
        }
        let connection = Connection::connect(address, self.connect_timeout).await?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    fn connection_slot(&self, address: &str) -> Arc<tokio::sync::Mutex<Option<Connection>>> {
        let mut connections = self.connections.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        connections.entry(address.to_owned()).or_default().clone()
    }

    /// Brokers to try for a call any of them can answer: known brokers first,
    /// then the bootstrap list, each once — and those that recently left a
    /// call unanswered or could not be reached after all the others.
    fn candidates(&self) -> Vec<String> {
        let mut cache = self.cache();
        let now = Instant::now();
        cache.unanswered.retain(|_, until| *until > now);
        let mut candidates: Vec<String> = cache.brokers.values().map(BrokerInfo::address).collect();
        candidates.sort();
        for address in &self.bootstrap {
            if !candidates.contains(address) {
                candidates.push(address.clone());
            }
        }
        // Stable: the order within each group is kept.
        candidates.sort_by_key(|address| cache.unanswered.contains_key(address));
        candidates
    }

    /// Notes that `address` left a call unanswered or could not be reached:
    /// calls any broker can answer try it last for a while.
    pub fn note_unanswered(&self, address: &str) {
        self.cache().unanswered.insert(address.to_owned(), Instant::now() + UNANSWERED_BACKOFF);
    }

    /// Forgets `connection` (if it is still the cached one for its address) after
    /// it left a call unanswered: the next call connects afresh, as Kafka's
    /// client closes a connection on a request timeout.
    pub async fn forget_unanswered(&self, connection: &Connection) {
        self.note_unanswered(connection.address());
        let slot = self.connection_slot(connection.address());
        let mut slot = slot.lock().await;
        if slot.as_ref().is_some_and(|cached| cached.same_as(connection)) {
            *slot = None;
        }
    }

    /// A connection to any broker: known brokers first, then the bootstrap list.
    pub async fn any_connection(&self) -> Result<Connection, ClientError> {
        let mut last_error = None;
        for address in self.candidates() {
            match self.connection(&address).await {
                Ok(connection) => return Ok(connection),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or(ClientError::InvalidConfig { problems: vec!["no brokers".to_owned()] }))
    }

    /// Runs `call` on `connection`, failing with `Timeout` when no answer comes
    /// within `request.timeout.ms`. A connection that timed out is forgotten, so
    /// the next call connects afresh (as Kafka's client closes it): a broker
    /// that stopped answering on a socket that stays open never holds a caller
    /// for longer than the timeout.
    pub async fn bounded_call<T, F, Fut>(
        &self,
        operation: &'static str,
        connection: &Connection,
        call: F,
    ) -> Result<T, ClientError>
    where
        T: Send + 'static,
        F: FnOnce(broker::Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ClientError>> + 'static,
    {
        self.bounded_call_within(operation, connection, self.request_timeout, call).await
    }

    async fn bounded_call_within<T, F, Fut>(
        &self,
        operation: &'static str,
        connection: &Connection,
        timeout: Duration,
        call: F,
    ) -> Result<T, ClientError>
    where
        T: Send + 'static,
        F: FnOnce(broker::Client) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ClientError>> + 'static,
    {
        match tokio::time::timeout(timeout, connection.call(call)).await {
            Ok(outcome) => outcome,
            Err(_) => {
                tracing::debug!(address = connection.address(), operation, "no answer in time; reconnecting next time");
                self.forget_unanswered(connection).await;
                Err(ClientError::Timeout { operation, timeout_ms: timeout.as_millis() as u64 })
            }
        }
    }

    /// Runs `call` (given the address it goes to) on the first broker that
    /// answers it, in [`Cluster::candidates`] order: a broker that cannot be
    /// reached, drops the connection, is overloaded, or does not answer in time
    /// is passed over for the next (and tried last for a while). The whole walk
    /// takes at most twice `request.timeout.ms` (each broker at most once that),
    /// so one silent broker never costs a caller its answer. A broker's
    /// refusal is returned as is.
    pub(crate) async fn call_any<T, F, Fut>(&self, operation: &'static str, call: F) -> Result<T, ClientError>
    where
        T: Send + 'static,
        F: FnOnce(broker::Client, String) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = Result<T, ClientError>> + 'static,
    {
        let deadline = Instant::now() + 2 * self.request_timeout;
        let timed_out = || ClientError::Timeout { operation, timeout_ms: 2 * self.request_timeout.as_millis() as u64 };
        let mut last_error = None;
        for address in self.candidates() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(last_error.unwrap_or_else(timed_out));
            }
            let connection = match tokio::time::timeout(left, self.connection(&address)).await {
                Ok(Ok(connection)) => connection,
                Ok(Err(error)) => {
                    self.note_unanswered(&address);
                    last_error = Some(error);
                    continue;
                }
                Err(_) => {
                    self.note_unanswered(&address);
                    return Err(last_error.unwrap_or_else(timed_out));
                }
            };
            let call = call.clone();
            let left = deadline.saturating_duration_since(Instant::now()).min(self.request_timeout);
            match self.bounded_call_within(operation, &connection, left, move |client| call(client, address)).await {
                Err(
                    error @ (ClientError::Connect { .. }
                    | ClientError::Disconnected { .. }
                    | ClientError::Timeout { .. }
                    | ClientError::Broker { code: ErrorCode::ResourceExhausted, .. }),
                ) => {
                    if !matches!(error, ClientError::Timeout { .. }) {
                        self.note_unanswered(connection.address());
                    }
                    last_error = Some(error);
                }
                outcome => return outcome,
            }
        }
        Err(last_error.unwrap_or(ClientError::InvalidConfig { problems: vec!["no brokers".to_owned()] }))
    }

    /// Addresses of the brokers the last metadata named.
    pub fn broker_addresses(&self) -> Vec<String> {
        let mut addresses: Vec<String> = self.cache().brokers.values().map(BrokerInfo::address).collect();
        addresses.sort();
        addresses
    }

    /// A connection to the broker that coordinates `group_id` (found with
    /// `findCoordinator` on any broker, then cached until
    /// [`Cluster::forget_coordinator`]).
    pub async fn coordinator(&self, group_id: &str) -> Result<Connection, ClientError> {
        let known = self.cache().coordinators.get(group_id).cloned();
        if let Some(address) = known {
            return self.connection(&address).await;
        }
        let group = group_id.to_owned();
        let coordinator = self
            .call_any("find coordinator", move |client: broker::Client, address| async move {
                let mut request = client.find_coordinator_request();
                request.get().set_group_id(&group[..]);
                let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
                let response = response.get()?;
                if response.has_error() {
                    return Err(crate::error::broker_error(response.get_error()?));
                }
                let broker = response.get_coordinator()?;
                Ok(format!("{}:{}", broker.get_host()?.to_str()?, broker.get_port()))
            })
            .await?;
        self.cache().coordinators.insert(group_id.to_owned(), coordinator.clone());
        self.connection(&coordinator).await
    }

    /// Forgets where `group_id` is coordinated, after an error that says it moved
    /// (`NotCoordinator`) or its broker is unreachable; returns `error`.
    pub fn forget_coordinator_on(&self, group_id: &str, error: ClientError) -> ClientError {
        if matches!(error.code(), abi::ErrorCode::NotCoordinator | abi::ErrorCode::NetworkError)
            || matches!(error, ClientError::Timeout { .. })
        {
            self.cache().coordinators.remove(group_id);
        }
        error
    }

    /// Fetches metadata for `topics` (every topic when empty) and updates the cache.
    /// Returns the topics found; unknown ones are left out of the cache.
    pub async fn refresh(&self, topics: &[String]) -> Result<Vec<Arc<TopicInfo>>, ClientError> {
        let names = topics.to_vec();
        let (brokers, found, missing) = self
            .call_any("metadata", move |client: broker::Client, address| async move {
                let mut request = client.metadata_request();
                let mut list = request.get().init_topics(names.len() as u32);
                for (index, name) in names.iter().enumerate() {
                    list.set(index as u32, &name[..]);
                }
                let response = request.send().promise.await.map_err(|error| ClientError::from_rpc(&address, error))?;
                let metadata = response.get()?.get_metadata()?;
                let brokers = metadata
                    .get_brokers()?
                    .iter()
                    .map(|broker| {
                        Ok(BrokerInfo {
                            id: broker.get_id(),
                            host: broker.get_host()?.to_str()?.to_owned(),
                            port: broker.get_port(),
                        })
                    })
                    .collect::<Result<Vec<_>, ClientError>>()?;
                let mut found = Vec::new();
                let mut missing = Vec::new();
                for topic in metadata.get_topics()? {
                    let name = topic.get_name()?.to_str()?.to_owned();
                    if topic.has_error() {
                        missing.push((name, broker_error(topic.get_error()?)));
                        continue;
                    }
                    let partitions =
                        topic.get_partitions()?.iter().map(read_partition_metadata).collect::<Result<_, _>>()?;
                    let partitioner = match topic.has_partitioner() {
                        true => {
                            let reader = topic.get_partitioner()?;
                            Some(PartitionerRef {
                                plugin: reader.get_plugin()?.to_str()?.to_owned(),
                                digest: reader.get_digest()?.to_str()?.to_owned(),
                                config: reader
                                    .get_config()?
                                    .iter()
                                    .map(|entry| {
                                        Ok((
                                            entry.get_key()?.to_str()?.to_owned(),
                                            entry.get_value()?.to_str()?.to_owned(),
                                        ))
                                    })
                                    .collect::<Result<_, ClientError>>()?,
                            })
                        }
                        false => None,
                    };
                    found.push(TopicInfo { name, partitions, partitioner });
                }
                Ok((brokers, found, missing))
            })
            .await?;
        let found: Vec<Arc<TopicInfo>> = found.into_iter().map(Arc::new).collect();
        let mut cache = self.cache();
        cache.brokers = brokers.into_iter().map(|broker| (broker.id, broker)).collect();
        if topics.is_empty() {
            cache.topics.clear();
        }
        for (name, _) in &missing {
            cache.topics.remove(name);
        }
        let now = coarse_now();
        for topic in &found {
            cache.topics.insert(topic.name.clone(), (topic.clone(), now));
        }
        Ok(found)
    }

    /// The cached metadata of `topic`, fetched when not cached. Fails with
    /// `UnknownTopicOrPartition` when the broker does not know it.
    pub async fn topic(&self, topic: &str) -> Result<Arc<TopicInfo>, ClientError> {
        // Older metadata is fetched again (Kafka's `metadata.max.age.ms`): leaders
        // that moved without this client seeing an error are found that way too.
        // Every send asks: one uncontended lock, a cheap hash and a coarse
        // clock (ms-grained, a fifth of the precise clock's cost) on that path.
        let cached = {
            let cache = self.cache();
            match cache.topics.get(topic) {
                Some((info, fetched)) if coarse_now().saturating_sub(*fetched) < METADATA_MAX_AGE => {
                    return Ok(info.clone());
                }
                cached => cached.cloned(),
            }
        };
        let found = match self.refresh(&[topic.to_owned()]).await {
            Ok(found) => found,
            // Stale metadata beats none while no broker answers.
            Err(error) => return cached.map(|(info, _)| info).ok_or(error),
        };
        found.into_iter().find(|info| info.name == topic).ok_or_else(|| {
            ClientError::broker(ErrorCode::UnknownTopicOrPartition, format!("topic {topic:?} does not exist"))
        })
    }

    /// The brokers in the last metadata answer, by id.
    pub fn brokers(&self) -> Vec<BrokerInfo> {
        let mut brokers: Vec<BrokerInfo> = self.cache().brokers.values().cloned().collect();
        brokers.sort_by_key(|broker| broker.id);
        brokers
    }

    /// Forgets `topic`'s cached metadata (after a leader or existence error).
    pub fn invalidate(&self, topic: &str) {
        self.cache().topics.remove(topic);
    }

    /// A connection to the leader of `topic`/`partition`.
    pub async fn leader(&self, topic: &str, partition: i32) -> Result<Connection, ClientError> {
        let info = self.topic(topic).await?;
        let Some(partition_info) = usize::try_from(partition).ok().and_then(|index| info.partitions.get(index)) else {
            let message = format!("topic {topic:?} has no partition {partition} (it has {})", info.partitions.len());
            return Err(ClientError::broker(ErrorCode::UnknownTopicOrPartition, message));
        };
        if let Some(error) = &partition_info.error {
            return Err(error.clone());
        }
        let address = self.cache().brokers.get(&partition_info.leader).map(BrokerInfo::address);
        match address {
            Some(address) => self.connection(&address).await,
            None => {
                let message = format!("{topic}-{partition} has no live leader (leader id {})", partition_info.leader);
                Err(ClientError::broker(ErrorCode::NotLeaderOrFollower, message))
            }
        }
    }
}

pub(crate) fn read_partition_metadata(reader: partition_metadata::Reader<'_>) -> Result<PartitionInfo, ClientError> {
    Ok(PartitionInfo {
        partition: reader.get_partition(),
        leader: reader.get_leader(),
        leader_epoch: reader.get_leader_epoch(),
        replicas: reader.get_replicas()?.iter().collect(),
        isr: reader.get_isr()?.iter().collect(),
        target_replicas: reader.get_target_replicas()?.iter().collect(),
        error: if reader.has_error() { Some(broker_error(reader.get_error()?)) } else { None },
    })
}

/// Monotonic time from the kernel's coarse clock (as old as the last tick, a
/// few ms at most): enough for ages counted in minutes, at a fraction of the
/// cost of `Instant::now` on the per-record path.
#[cfg(target_os = "linux")]
pub(crate) fn coarse_now() -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec it is given; the coarse
    // monotonic clock exists on every Linux since 2.6.32.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Elsewhere: time since the first call.
#[cfg(not(target_os = "linux"))]
pub(crate) fn coarse_now() -> Duration {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brokers_that_left_a_call_unanswered_are_tried_last() {
        let second = Duration::from_secs(1);
        let cluster = Cluster::new("a:1,b:2,c:3", second, second).unwrap();
        assert_eq!(cluster.candidates(), ["a:1", "b:2", "c:3"]);
        cluster.note_unanswered("a:1");
        assert_eq!(cluster.candidates(), ["b:2", "c:3", "a:1"]);
        cluster.note_unanswered("c:3");
        assert_eq!(cluster.candidates(), ["b:2", "a:1", "c:3"]);
        // Known brokers come before the bootstrap list, the unanswered still last.
        cluster.cache().brokers.insert(7, BrokerInfo { id: 7, host: "z".to_owned(), port: 9 });
        assert_eq!(cluster.candidates(), ["z:9", "b:2", "a:1", "c:3"]);
        // The note lapses.
        cluster.cache().unanswered.insert("a:1".to_owned(), Instant::now());
        assert_eq!(cluster.candidates(), ["z:9", "a:1", "b:2", "c:3"]);
    }
}

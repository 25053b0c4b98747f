//! Client settings: typed structs for Rust callers, and a Kafka-style string map
//! (`bootstrap.servers`, `linger.ms`, …) that SDKs pass through unchanged.
//! [`ProducerConfig::from_map`] and [`ConsumerConfig::from_map`] reject unknown
//! keys and bad values, reporting every problem at once.

use std::collections::BTreeMap;
use std::time::Duration;

use abi::batch::Compression;

use crate::error::ClientError;

/// The broker the CLI and SDKs use when none is given.
pub const DEFAULT_BOOTSTRAP_SERVERS: &str = "127.0.0.1:9292";

/// When a produce is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acks {
    /// Fire and forget: no offset comes back, nothing is retried.
    None,
    /// After the leader's append is durable as the topic's `flush.policy` says
    /// (`always`: fdatasync'ed; `interval`: in the page cache).
    Leader,
    /// After every in-sync replica's durable append (the default).
    All,
}

impl Acks {
    /// `0`, `1`, `all` (or `-1`).
    pub fn parse(value: &str) -> Option<Acks> {
        match value {
            "0" => Some(Acks::None),
            "1" => Some(Acks::Leader),
            "all" | "-1" => Some(Acks::All),
            _ => None,
        }
    }
}

/// Where a consumer starts when it has no position, or its position is gone
/// (retention deleted it): `auto.offset.reset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetReset {
    /// The oldest record still kept.
    Earliest,
    /// Only records produced from now on (the default, as in Kafka).
    Latest,
    /// No automatic reset: the error reaches `poll`.
    None,
}

/// Settings shared by every client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommonConfig {
    /// `host:port[,host:port…]` (`bootstrap.servers`).
    pub bootstrap_servers: String,
    /// Wait for a TCP connection at most this long (`socket.connection.setup.timeout.ms`).
    pub connect_timeout: Duration,
    /// Wait for one request's answer at most this long (`request.timeout.ms`).
    pub request_timeout: Duration,
    /// First pause before a retry, doubled each time (`retry.backoff.ms`).
    pub retry_backoff: Duration,
    /// Longest pause between retries (`retry.backoff.max.ms`).
    pub retry_backoff_max: Duration,
}

impl Default for CommonConfig {
    fn default() -> CommonConfig {
        CommonConfig {
            bootstrap_servers: DEFAULT_BOOTSTRAP_SERVERS.to_owned(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            retry_backoff: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(1),
        }
    }
}

/// Producer settings (Kafka's names in parentheses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerConfig {
    pub common: CommonConfig,
    /// (`acks`) default `all`.
    pub acks: Acks,
    /// Wait this long for more records before sending a partial batch (`linger.ms`).
    pub linger: Duration,
    /// Largest batch, in bytes before compression (`batch.size`).
    pub batch_bytes_max: usize,
    /// Records buffered but not yet acknowledged, in bytes; `send` waits when
    /// full (`buffer.memory`).
    pub buffer_bytes_max: usize,
    /// Give up on a record this long after `send` (`delivery.timeout.ms`).
    pub delivery_timeout: Duration,
    /// Deduplicate retries at the broker (`enable.idempotence`), default on.
    pub idempotence: bool,
    /// Codec of each batch's records (`compression.type`: none, lz4, zstd).
    pub compression: Compression,
}

impl Default for ProducerConfig {
    fn default() -> ProducerConfig {
        ProducerConfig {
            common: CommonConfig::default(),
            acks: Acks::All,
            linger: Duration::from_millis(5),
            batch_bytes_max: 1024 * 1024,
            buffer_bytes_max: 64 * 1024 * 1024,
            delivery_timeout: Duration::from_secs(120),
            idempotence: true,
            compression: Compression::None,
        }
    }
}

/// Consumer settings (Kafka's names in parentheses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumerConfig {
    pub common: CommonConfig,
    /// A fetch waits until this many bytes are there (`fetch.min.bytes`)...
    pub fetch_min_bytes: u32,
    /// ...or this long (`fetch.max.wait.ms`).
    pub fetch_max_wait: Duration,
    /// Most bytes one partition fetch returns (`max.partition.fetch.bytes`).
    pub fetch_bytes_max: u32,
    /// Fetched but not yet polled bytes per partition before the prefetcher
    /// pauses (`fetch.buffer.bytes`; Weir's own bound).
    pub prefetch_bytes_max: usize,
    /// Records one `poll` returns at most (`max.poll.records`).
    pub poll_records_max: usize,
    /// Most bytes one fetch returns over all its partitions (`fetch.max.bytes`;
    /// the broker caps it with its own `fetch_bytes_max`).
    pub fetch_total_bytes_max: u32,
    /// (`auto.offset.reset`) default `latest`.
    pub auto_offset_reset: OffsetReset,
    /// The consumer group `subscribe` joins (`group.id`).
    pub group_id: Option<String>,
    /// Static membership: a restarted member with the same id gets its partitions
    /// back without a rebalance (`group.instance.id`).
    pub group_instance_id: Option<String>,
    /// The broker fences a member silent this long (`session.timeout.ms`).
    pub session_timeout: Duration,
    /// Commit positions in the background, on revocation and on close
    /// (`enable.auto.commit`), default on.
    pub auto_commit: bool,
    /// (`auto.commit.interval.ms`) default 5 s.
    pub auto_commit_interval: Duration,
    /// What commits take for a partition: its position, the offset after the
    /// last record `poll` returned (`enable.auto.offset.store`, default on);
    /// or, off, only what the application stored with
    /// [`crate::Consumer::store_offset`] once it handled a record (librdkafka's
    /// setting of the same name: at least once for records handed on).
    pub auto_offset_store: bool,
    /// Server-side assignor for a new group: range, roundrobin, cooperative-sticky
    /// (`group.remote.assignor`); `None`: the broker's default.
    pub group_assignor: Option<String>,
}

impl Default for ConsumerConfig {
    fn default() -> ConsumerConfig {
        ConsumerConfig {
            common: CommonConfig::default(),
            fetch_min_bytes: 1,
            fetch_max_wait: Duration::from_millis(500),
            fetch_bytes_max: 4 * 1024 * 1024,
            prefetch_bytes_max: 16 * 1024 * 1024,
            poll_records_max: 500,
            fetch_total_bytes_max: 8 * 1024 * 1024,
            group_id: None,
            group_instance_id: None,
            session_timeout: Duration::from_secs(45),
            auto_commit: true,
            auto_commit_interval: Duration::from_secs(5),
            auto_offset_store: true,
            group_assignor: None,
            auto_offset_reset: OffsetReset::Latest,
        }
    }
}

/// Collects every problem of a string map.
struct MapReader {
    entries: BTreeMap<String, String>,
    problems: Vec<String>,
}

impl MapReader {
    fn new(entries: &BTreeMap<String, String>) -> MapReader {
        MapReader { entries: entries.clone(), problems: Vec::new() }
    }

    fn take<T>(&mut self, key: &str, parse: impl FnOnce(&str) -> Option<T>, expected: &str) -> Option<T> {
        let value = self.entries.remove(key)?;
        let parsed = parse(value.trim());
        if parsed.is_none() {
            self.problems.push(format!("{key}={value:?} is not {expected}"));
        }
        parsed
    }

    fn millis(&mut self, key: &str, target: &mut Duration) {
        if let Some(ms) = self.take(key, |value| value.parse::<u64>().ok(), "a number of milliseconds") {
            *target = Duration::from_millis(ms);
        }
    }

    fn common(&mut self, common: &mut CommonConfig) {
        if let Some(servers) = self.take("bootstrap.servers", |value| Some(value.to_owned()), "host:port list") {
            common.bootstrap_servers = servers;
        }
        self.entries.remove("client.id");
        self.millis("socket.connection.setup.timeout.ms", &mut common.connect_timeout);
        self.millis("request.timeout.ms", &mut common.request_timeout);
        self.millis("retry.backoff.ms", &mut common.retry_backoff);
        self.millis("retry.backoff.max.ms", &mut common.retry_backoff_max);
    }

    fn finish(mut self, known: &[&str]) -> Result<(), ClientError> {
        for key in self.entries.keys() {
            self.problems.push(format!("unknown setting {key:?} (known: {})", known.join(", ")));
        }
        match self.problems.is_empty() {
            true => Ok(()),
            false => Err(ClientError::InvalidConfig { problems: self.problems }),
        }
    }
}

const COMMON_KEYS: &[&str] = &[
    "bootstrap.servers",
    "client.id",
    "socket.connection.setup.timeout.ms",
    "request.timeout.ms",
    "retry.backoff.ms",
    "retry.backoff.max.ms",
];

fn positive(value: &str) -> Option<usize> {
    value.parse::<usize>().ok().filter(|value| *value > 0)
}

impl ProducerConfig {
    /// Defaults overridden by Kafka-style `entries`; see the module docs.
    pub fn from_map(entries: &BTreeMap<String, String>) -> Result<ProducerConfig, ClientError> {
        let mut config = ProducerConfig::default();
        let mut reader = MapReader::new(entries);
        reader.common(&mut config.common);
        if let Some(acks) = reader.take("acks", Acks::parse, "0, 1 or all") {
            config.acks = acks;
        }
        reader.millis("linger.ms", &mut config.linger);
        reader.millis("delivery.timeout.ms", &mut config.delivery_timeout);
        if let Some(bytes) = reader.take("batch.size", positive, "a positive number of bytes") {
            config.batch_bytes_max = bytes;
        }
        if let Some(bytes) = reader.take("buffer.memory", positive, "a positive number of bytes") {
            config.buffer_bytes_max = bytes;
        }
        if let Some(on) = reader.take("enable.idempotence", |value| value.parse::<bool>().ok(), "true or false") {
            config.idempotence = on;
        }
        let codec = |value: &str| match value {
            "none" => Some(Compression::None),
            "lz4" => Some(Compression::Lz4),
            "zstd" => Some(Compression::Zstd),
            _ => None,
        };
        if let Some(compression) = reader.take("compression.type", codec, "none, lz4 or zstd") {
            config.compression = compression;
        }
        let producer_keys = [
            "acks",
            "linger.ms",
            "delivery.timeout.ms",
            "batch.size",
            "buffer.memory",
            "enable.idempotence",
            "compression.type",
        ];
        reader.finish(&[COMMON_KEYS, &producer_keys].concat())?;
        Ok(config)
    }
}

impl ConsumerConfig {
    /// Defaults overridden by Kafka-style `entries`; see the module docs.
    pub fn from_map(entries: &BTreeMap<String, String>) -> Result<ConsumerConfig, ClientError> {
        let mut config = ConsumerConfig::default();
        let mut reader = MapReader::new(entries);
        reader.common(&mut config.common);
        if let Some(bytes) = reader.take("fetch.min.bytes", |value| value.parse().ok(), "a number of bytes") {
            config.fetch_min_bytes = bytes;
        }
        reader.millis("fetch.max.wait.ms", &mut config.fetch_max_wait);
        let fetch_bytes = |value: &str| value.parse::<u32>().ok().filter(|value| *value > 0);
        if let Some(bytes) = reader.take("max.partition.fetch.bytes", fetch_bytes, "a positive number of bytes") {
            config.fetch_bytes_max = bytes;
        }
        if let Some(bytes) = reader.take("fetch.buffer.bytes", positive, "a positive number of bytes") {
            config.prefetch_bytes_max = bytes;
        }
        if let Some(count) = reader.take("max.poll.records", positive, "a positive count") {
            config.poll_records_max = count;
        }
        if let Some(bytes) = reader.take("fetch.max.bytes", fetch_bytes, "a positive number of bytes") {
            config.fetch_total_bytes_max = bytes;
        }
        let reset = |value: &str| match value {
            "earliest" => Some(OffsetReset::Earliest),
            "latest" => Some(OffsetReset::Latest),
            "none" => Some(OffsetReset::None),
            _ => None,
        };
        if let Some(reset) = reader.take("auto.offset.reset", reset, "earliest, latest or none") {
            config.auto_offset_reset = reset;
        }
        let text = |value: &str| (!value.is_empty()).then(|| value.to_owned());
        if let Some(group_id) = reader.take("group.id", text, "a group id") {
            config.group_id = Some(group_id);
        }
        if let Some(instance_id) = reader.take("group.instance.id", text, "an instance id") {
            config.group_instance_id = Some(instance_id);
        }
        reader.millis("session.timeout.ms", &mut config.session_timeout);
        if let Some(on) = reader.take("enable.auto.commit", |value| value.parse::<bool>().ok(), "true or false") {
            config.auto_commit = on;
        }
        reader.millis("auto.commit.interval.ms", &mut config.auto_commit_interval);
        if let Some(on) = reader.take("enable.auto.offset.store", |value| value.parse::<bool>().ok(), "true or false") {
            config.auto_offset_store = on;
        }
        let assignor =
            |value: &str| matches!(value, "range" | "roundrobin" | "cooperative-sticky").then(|| value.to_owned());
        if let Some(assignor) =
            reader.take("group.remote.assignor", assignor, "range, roundrobin or cooperative-sticky")
        {
            config.group_assignor = Some(assignor);
        }
        let consumer_keys = [
            "group.id",
            "group.instance.id",
            "session.timeout.ms",
            "enable.auto.commit",
            "auto.commit.interval.ms",
            "enable.auto.offset.store",
            "group.remote.assignor",
            "fetch.min.bytes",
            "fetch.max.wait.ms",
            "max.partition.fetch.bytes",
            "fetch.buffer.bytes",
            "max.poll.records",
            "fetch.max.bytes",
            "auto.offset.reset",
        ];
        reader.finish(&[COMMON_KEYS, &consumer_keys].concat())?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect()
    }

    #[test]
    fn kafka_names_set_the_fields() {
        let config = ProducerConfig::from_map(&map(&[
            ("bootstrap.servers", "a:1,b:2"),
            ("acks", "1"),
            ("linger.ms", "20"),
            ("compression.type", "zstd"),
            ("enable.idempotence", "false"),
        ]))
        .unwrap();
        assert_eq!(config.common.bootstrap_servers, "a:1,b:2");
        assert_eq!((config.acks, config.linger, config.idempotence), (Acks::Leader, Duration::from_millis(20), false));
        assert_eq!(config.compression, Compression::Zstd);
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let error = ConsumerConfig::from_map(&map(&[
            ("fetch.max.wait.ms", "soon"),
            ("max.poll.records", "0"),
            ("group.protocol", "classic"),
        ]))
        .unwrap_err();
        let ClientError::InvalidConfig { problems } = error else { panic!("{error:?}") };
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[2].contains("unknown setting \"group.protocol\""), "{problems:?}");
    }
}

//! [`BrokerConfig`]: the broker's server settings, loaded from defaults, a TOML file
//! and command-line overrides.
//!
//! Loading ([`BrokerConfig::load`]) layers four sources, each beating the one before:
//! 1. the defaults ([`BrokerConfig::default`]);
//! 2. the config file, if given: every table denies unknown keys, so a typo is a
//!    [`BrokerConfigError::Parse`] with its line and column, not a silently ignored
//!    setting;
//! 3. environment variables, then command-line flags: the CLI (clap) resolves both
//!    into one [`ConfigOverrides`]; this module reads no environment itself;
//! 4. validation: every problem at once ([`BrokerConfigError::Invalid`]), including
//!    those of the `[log]` table, so an operator fixes a config in one go.
//!
//! The `[log]` table holds the topic defaults under Kafka's topic config names
//! (`"retention.ms" = 86400000`, integers or strings), applied by
//! [`broker_core::log::apply_topic_configs`]. `broker/server/weir.example.toml`
//! documents every key with its default; a test parses it so it never goes stale.
//!
//! The [`Limits`] bound the RPC edge; they are read and validated here, and enforced
//! by the RPC server. `weir serve` owns the loaded config and hands
//! [`BrokerConfig::log_dir_config`] to [`crate::LogDir::open`].

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use broker_core::cluster::UNCLEAN_LEADER_ELECTION;
use broker_core::log::{apply_topic_configs, LogConfig, TOPIC_CONFIG_KEYS};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

use crate::LogDirConfig;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;
const GIB: usize = 1024 * MIB;

/// Room for a request's own fields around its largest batch: `request_bytes_max`
/// must be at least `max.message.bytes` plus this.
pub const REQUEST_OVERHEAD_BYTES: usize = 64 * KIB;

/// Most threads of one kind (`rpc_threads`, `flush_threads`).
const THREADS_MAX: usize = 64;

/// The broker's settings. See the module docs for how they are loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerConfig {
    /// Address the RPC server binds, `host:port` (`listen`).
    pub listen: String,
    /// `host:port` clients should connect to, when it differs from `listen`
    /// (`advertised_listener`); `None` advertises `listen`.
    pub advertised_listener: Option<String>,
    /// Directory holding every partition log (`data_dir`); relative paths are
    /// relative to the working directory.
    pub data_dir: PathBuf,
    /// This broker's id in the cluster (`broker_id`).
    pub broker_id: i32,
    /// Topic defaults (the `[log]` table, Kafka's topic config names).
    pub log: LogConfig,
    /// Threads running fdatasync rounds (`flush_threads`).
    pub flush_threads: usize,
    /// How often retention runs (`retention_check_interval_ms`).
    pub retention_check_interval_ms: u64,
    /// Longest wait for appenders at the start of a group-commit round; 0 disables
    /// (`group_commit_linger_us`).
    pub group_commit_linger_us: u64,
    /// Threads (each a `LocalSet`) serving RPC connections (`rpc_threads`).
    pub rpc_threads: usize,
    /// Bounds of the RPC edge (the `[limits]` table).
    pub limits: Limits,
    /// Bounds every plugin runs under (the `[plugins]` table).
    pub plugins: PluginSettings,
    /// The controller quorum and broker membership (the `[controller]` table).
    pub controller: ControllerSettings,
    /// `[replication]`: how partition leaders judge their followers.
    pub replication: ReplicationSettings,
}

/// One voter of the controller quorum: a broker id and its `listen` address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub address: String,
}

/// The controller quorum and broker membership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerSettings {
    /// The voters, `id@host:port` each (`voters`, `--controller-voters`); empty:
    /// this broker alone, a quorum of one. A broker not among them joins as a
    /// learner of the metadata log.
    pub voters: Vec<Voter>,
    /// How often the active controller heartbeats the other voters
    /// (`raft_heartbeat_ms`).
    pub raft_heartbeat_ms: u64,
    /// A voter that hears no heartbeat for between this and twice this stands for
    /// election (`raft_election_timeout_ms`).
    pub raft_election_timeout_ms: u64,
    /// How often a broker heartbeats the active controller (`broker_heartbeat_ms`).
    pub broker_heartbeat_ms: u64,
    /// A broker not heard from for this long is fenced: its partitions get new
    /// leaders (`broker_session_timeout_ms`, Kafka's `broker.session.timeout.ms`).
    pub broker_session_timeout_ms: u64,
    /// This broker's rack (`rack`, Kafka's `broker.rack`): replicas of a partition
    /// go to different racks first. `None`: no rack.
    pub rack: Option<String>,
}

/// How partition leaders judge their followers (`[replication]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationSettings {
    /// A follower not caught up with its leader's log for this long leaves the
    /// ISR (`replica_lag_time_max_ms`, Kafka's `replica.lag.time.max.ms`).
    pub replica_lag_time_max_ms: u64,
}

impl Default for ReplicationSettings {
    fn default() -> ReplicationSettings {
        ReplicationSettings { replica_lag_time_max_ms: 30_000 }
    }
}

impl Default for ControllerSettings {
    fn default() -> ControllerSettings {
        ControllerSettings {
            voters: Vec::new(),
            raft_heartbeat_ms: 250,
            raft_election_timeout_ms: 1_000,
            broker_heartbeat_ms: 1_000,
            broker_session_timeout_ms: 9_000,
            rack: None,
        }
    }
}

/// Parses `1@host:port,2@host:port` (empty: no voters).
pub fn parse_voters(text: &str) -> Result<Vec<Voter>, String> {
    let mut voters: Vec<Voter> = Vec::new();
    for part in text.split(',').map(str::trim).filter(|part| !part.is_empty()) {
        let (id, address) = part.split_once('@').ok_or_else(|| format!("voter {part:?} must be id@host:port"))?;
        let id: i32 = id.trim().parse().map_err(|_| format!("voter {part:?}: the id must be a number"))?;
        if id < 0 {
            return Err(format!("voter {part:?}: the id must not be negative"));
        }
        if voters.iter().any(|voter| voter.id == id) {
            return Err(format!("voter id {id} is listed twice"));
        }
        voters.push(Voter { id, address: address.trim().to_owned() });
    }
    Ok(voters)
}

/// Bounds every plugin runs under: per call, per instance, per broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginSettings {
    /// CPU time one plugin call (one batch) may use, counted on the thread
    /// that runs it (`call_deadline_ms`).
    pub call_deadline_ms: u64,
    /// Longest one plugin call may take in elapsed time, however busy the
    /// machine (`call_wall_deadline_ms`; never less than `call_deadline_ms`:
    /// a smaller value counts as `call_deadline_ms`).
    pub call_wall_deadline_ms: u64,
    /// Cap on one plugin instance's memory (`memory_bytes_max`).
    pub memory_bytes_max: usize,
    /// Output bytes one call may return (`output_bytes_max`).
    pub output_bytes_max: usize,
    /// Plugin instances alive at once (`instances_max`).
    pub instances_max: u32,
    /// Largest plugin component an upload may carry (`upload_bytes_max`).
    pub upload_bytes_max: usize,
}

impl Default for PluginSettings {
    fn default() -> PluginSettings {
        PluginSettings {
            call_deadline_ms: 10,
            call_wall_deadline_ms: 1000,
            memory_bytes_max: 64 * MIB,
            output_bytes_max: 32 * MIB,
            instances_max: 64,
            upload_bytes_max: 256 * MIB,
        }
    }
}

/// Bounds of the RPC edge: connections, calls, message sizes and waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Open client connections; more are refused (`connections_max`).
    pub connections_max: usize,
    /// Open connections from one IP address (`connections_per_ip_max`), so one host
    /// cannot take every slot (Kafka's `max.connections.per.ip`).
    pub connections_per_ip_max: usize,
    /// A request whose first bytes arrived must arrive whole within this
    /// (`request_timeout_ms`); else its connection is closed.
    pub request_timeout_ms: u32,
    /// A connection with no bytes moving and nothing in flight for this long is
    /// closed (`idle_timeout_ms`, Kafka's `connections.max.idle.ms`).
    pub idle_timeout_ms: u32,
    /// Answer bytes one connection may hold unsent (`unsent_response_bytes_max`):
    /// past it, the connection's requests are not read and its fetches wait until
    /// the peer reads.
    pub unsent_response_bytes_max: usize,
    /// Bytes of large requests (64 KiB and up) one connection may have being
    /// served (`in_flight_request_bytes_max`): past it, its requests are not read
    /// until calls finish.
    pub in_flight_request_bytes_max: usize,
    /// Calls in flight on one connection (`in_flight_calls_max`).
    pub in_flight_calls_max: usize,
    /// Largest Cap'n Proto request message (`request_bytes_max`); see
    /// [`Limits::traversal_limit_words`].
    pub request_bytes_max: usize,
    /// Deepest pointer nesting of a Cap'n Proto message (`nesting_limit`).
    pub nesting_limit: i32,
    /// Most bytes of batches in one fetch response (`fetch_bytes_max`).
    pub fetch_bytes_max: u32,
    /// Longest a fetch may wait for data (`fetch_wait_ms_max`).
    pub fetch_wait_ms_max: u32,
    /// Longest a produce may wait for durability (`produce_timeout_ms_max`).
    pub produce_timeout_ms_max: u32,
    /// Most partitions of one topic (`topic_partitions_max`).
    pub topic_partitions_max: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections_max: 1024,
            connections_per_ip_max: 256,
            request_timeout_ms: 30_000,
            idle_timeout_ms: 600_000,
            unsent_response_bytes_max: 64 * MIB,
            in_flight_request_bytes_max: 64 * MIB,
            in_flight_calls_max: 64,
            request_bytes_max: 16 * MIB + REQUEST_OVERHEAD_BYTES,
            nesting_limit: 16,
            fetch_bytes_max: 8 * MIB as u32,
            fetch_wait_ms_max: 30_000,
            produce_timeout_ms_max: 60_000,
            topic_partitions_max: 1000,
        }
    }
}

impl Limits {
    /// What one connection's byte edge enforces (see `transport.rs`).
    pub fn connection(&self) -> crate::transport::ConnectionLimits {
        crate::transport::ConnectionLimits {
            request_bytes_max: self.request_bytes_max,
            request_timeout: std::time::Duration::from_millis(u64::from(self.request_timeout_ms)),
            idle_timeout: std::time::Duration::from_millis(u64::from(self.idle_timeout_ms)),
            unsent_response_bytes_max: self.unsent_response_bytes_max,
            in_flight_request_bytes_max: self.in_flight_request_bytes_max,
        }
    }

    /// `request_bytes_max` as Cap'n Proto's traversal limit, in 8-byte words.
    pub fn traversal_limit_words(&self) -> usize {
        self.request_bytes_max / 8
    }
}

impl Default for BrokerConfig {
    fn default() -> BrokerConfig {
        BrokerConfig {
            listen: "127.0.0.1:9292".to_owned(),
            advertised_listener: None,
            data_dir: PathBuf::from("./weir-data"),
            broker_id: 0,
            log: LogConfig::default(),
            flush_threads: 2,
            retention_check_interval_ms: 300_000,
            group_commit_linger_us: 200,
            rpc_threads: 2,
            limits: Limits::default(),
            plugins: PluginSettings::default(),
            controller: ControllerSettings::default(),
            replication: ReplicationSettings::default(),
        }
    }
}

/// Settings given on the command line or in the environment; each beats the file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigOverrides {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub advertised_listener: Option<String>,
    pub broker_id: Option<i32>,
    /// `--controller-voters`, as written (`id@host:port,...`).
    pub controller_voters: Option<String>,
}

/// Why the broker config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum BrokerConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The config file is not valid TOML or has an unknown key or a value of the
    /// wrong type; `message` says where (line and column).
    #[error("cannot parse config file {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    /// Values are out of bounds or inconsistent; one line per problem.
    #[error("invalid broker config:{}", ProblemLines(problems))]
    Invalid { problems: Vec<String> },
}

/// Writes each problem on its own indented line.
struct ProblemLines<'a>(&'a [String]);

impl fmt::Display for ProblemLines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|problem| write!(f, "\n  {problem}"))
    }
}

impl BrokerConfig {
    /// Loads the config: defaults, then `file` (if any), then `overrides`, then
    /// validates the result, reporting every problem at once.
    pub fn load(file: Option<&Path>, overrides: &ConfigOverrides) -> Result<BrokerConfig, BrokerConfigError> {
        let mut config = BrokerConfig::default();
        let mut problems = Vec::new();
        if let Some(path) = file {
            let raw = read_file(path)?;
            problems = config.apply_file(raw);
        }
        problems.extend(config.apply_overrides(overrides));
        problems.extend(config.problems());
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(BrokerConfigError::Invalid { problems })
        }
    }

    /// Checks every bound; reports all problems at once.
    pub fn validate(&self) -> Result<(), BrokerConfigError> {
        let problems = self.problems();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(BrokerConfigError::Invalid { problems })
        }
    }

    /// The `host:port` clients should connect to: `advertised_listener`, else `listen`.
    pub fn advertised_address(&self) -> &str {
        self.advertised_listener.as_deref().unwrap_or(&self.listen)
    }

    /// The plugin host's bounds.
    pub fn plugin_limits(&self) -> plugin_host::HostLimits {
        let init_deadline_ms = self.plugins.call_deadline_ms.max(1000);
        plugin_host::HostLimits {
            call_deadline: std::time::Duration::from_millis(self.plugins.call_deadline_ms),
            call_wall_deadline: std::time::Duration::from_millis(
                self.plugins.call_wall_deadline_ms.max(self.plugins.call_deadline_ms),
            ),
            init_deadline: std::time::Duration::from_millis(init_deadline_ms),
            init_wall_deadline: std::time::Duration::from_millis(init_deadline_ms * 10),
            memory_bytes: self.plugins.memory_bytes_max,
            output_bytes_max: self.plugins.output_bytes_max,
            instances_max: self.plugins.instances_max,
            ..plugin_host::HostLimits::default()
        }
    }

    /// The data directory's settings.
    pub fn log_dir_config(&self) -> LogDirConfig {
        LogDirConfig {
            data_dir: self.data_dir.clone(),
            log: self.log.clone(),
            flush_threads: self.flush_threads,
            retention_check_interval_ms: self.retention_check_interval_ms,
            group_commit_linger_us: self.group_commit_linger_us,
            environment: crate::environment::Environment::real(),
        }
    }

    /// Applies the file's settings; returns the problems of its `[log]` table
    /// (the log config stays as it was when the table has any).
    fn apply_file(&mut self, raw: RawConfig) -> Vec<String> {
        self.listen = raw.listen.unwrap_or(std::mem::take(&mut self.listen));
        self.advertised_listener = raw.advertised_listener.or(self.advertised_listener.take());
        self.data_dir = raw.data_dir.unwrap_or(std::mem::take(&mut self.data_dir));
        self.broker_id = raw.broker_id.unwrap_or(self.broker_id);
        self.flush_threads = raw.flush_threads.unwrap_or(self.flush_threads);
        self.retention_check_interval_ms = raw.retention_check_interval_ms.unwrap_or(self.retention_check_interval_ms);
        self.group_commit_linger_us = raw.group_commit_linger_us.unwrap_or(self.group_commit_linger_us);
        self.rpc_threads = raw.rpc_threads.unwrap_or(self.rpc_threads);
        self.limits.apply_file(raw.limits.unwrap_or_default());
        let plugins = raw.plugins.unwrap_or_default();
        self.plugins.call_deadline_ms = plugins.call_deadline_ms.unwrap_or(self.plugins.call_deadline_ms);
        self.plugins.call_wall_deadline_ms =
            plugins.call_wall_deadline_ms.unwrap_or(self.plugins.call_wall_deadline_ms);
        self.plugins.memory_bytes_max = plugins.memory_bytes_max.unwrap_or(self.plugins.memory_bytes_max);
        self.plugins.output_bytes_max = plugins.output_bytes_max.unwrap_or(self.plugins.output_bytes_max);
        self.plugins.instances_max = plugins.instances_max.unwrap_or(self.plugins.instances_max);
        self.plugins.upload_bytes_max = plugins.upload_bytes_max.unwrap_or(self.plugins.upload_bytes_max);
        let replication = raw.replication.unwrap_or_default();
        self.replication.replica_lag_time_max_ms =
            replication.replica_lag_time_max_ms.unwrap_or(self.replication.replica_lag_time_max_ms);
        let controller = raw.controller.unwrap_or_default();
        let mut problems = Vec::new();
        if let Some(voters) = controller.voters {
            match parse_voters(&voters) {
                Ok(voters) => self.controller.voters = voters,
                Err(problem) => problems.push(format!("controller.voters: {problem}")),
            }
        }
        let settings = &mut self.controller;
        settings.raft_heartbeat_ms = controller.raft_heartbeat_ms.unwrap_or(settings.raft_heartbeat_ms);
        settings.raft_election_timeout_ms =
            controller.raft_election_timeout_ms.unwrap_or(settings.raft_election_timeout_ms);
        settings.broker_heartbeat_ms = controller.broker_heartbeat_ms.unwrap_or(settings.broker_heartbeat_ms);
        settings.broker_session_timeout_ms =
            controller.broker_session_timeout_ms.unwrap_or(settings.broker_session_timeout_ms);
        if let Some(rack) = controller.rack {
            settings.rack = (!rack.trim().is_empty()).then(|| rack.trim().to_owned());
        }
        let Some(LogTable(mut entries)) = raw.log else { return problems };
        // The controller reads this one from each topic's own configs; a broker
        // default would show in `describe` and change nothing.
        if entries.iter().any(|(key, _)| key == UNCLEAN_LEADER_ELECTION) {
            problems.push(format!(
                "[log] {UNCLEAN_LEADER_ELECTION} is set per topic only (weir topic create/alter-config --config \
                 {UNCLEAN_LEADER_ELECTION}=true): the controller reads it from the topic"
            ));
            entries.retain(|(key, _)| key != UNCLEAN_LEADER_ELECTION);
        }
        match apply_topic_configs(&self.log, &entries) {
            Ok(log) => self.log = log,
            Err(error) => problems.extend(error.problems.into_iter().map(|problem| format!("[log] {problem}"))),
        }
        problems
    }

    /// Applies the overrides; returns the problems of those that could not be.
    fn apply_overrides(&mut self, overrides: &ConfigOverrides) -> Vec<String> {
        if let Some(listen) = &overrides.listen {
            self.listen = listen.clone();
        }
        if let Some(data_dir) = &overrides.data_dir {
            self.data_dir = data_dir.clone();
        }
        if let Some(advertised_listener) = &overrides.advertised_listener {
            self.advertised_listener = Some(advertised_listener.clone());
        }
        if let Some(broker_id) = overrides.broker_id {
            self.broker_id = broker_id;
        }
        if let Some(voters) = &overrides.controller_voters {
            match parse_voters(voters) {
                Ok(voters) => self.controller.voters = voters,
                Err(problem) => return vec![format!("--controller-voters: {problem}")],
            }
        }
        Vec::new()
    }

    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        check_host_port(&mut problems, "listen", &self.listen);
        if let Some(advertised_listener) = &self.advertised_listener {
            check_host_port(&mut problems, "advertised_listener", advertised_listener);
        }
        check_range(&mut problems, "rpc_threads", self.rpc_threads, 1, THREADS_MAX);
        check_range(&mut problems, "flush_threads", self.flush_threads, 1, THREADS_MAX);
        check_at_least(&mut problems, "retention_check_interval_ms", self.retention_check_interval_ms, 10);
        self.limits.check(&mut problems, &self.log);
        check_range(&mut problems, "plugins.call_deadline_ms", self.plugins.call_deadline_ms, 1, 60_000);
        check_range(&mut problems, "plugins.call_wall_deadline_ms", self.plugins.call_wall_deadline_ms, 1, 600_000);
        check_range(&mut problems, "plugins.memory_bytes_max", self.plugins.memory_bytes_max, MIB, 4 * GIB);
        check_at_least(&mut problems, "plugins.output_bytes_max", self.plugins.output_bytes_max, KIB);
        check_range(&mut problems, "plugins.instances_max", self.plugins.instances_max, 1, 10_000);
        check_range(&mut problems, "plugins.upload_bytes_max", self.plugins.upload_bytes_max, MIB, 4 * GIB);
        self.controller.check(&mut problems);
        check_range(
            &mut problems,
            "replication.replica_lag_time_max_ms",
            self.replication.replica_lag_time_max_ms,
            100,
            3_600_000,
        );
        check_at_least(&mut problems, "broker_id", self.broker_id, 0);
        if let Err(error) = self.log.validate() {
            problems.extend(error.problems.into_iter().map(|problem| format!("[log] {problem}")));
        }
        problems
    }
}

impl ControllerSettings {
    /// Whether broker `broker_id` is one of several (it reaches other brokers):
    /// false for the single-node default, a quorum of itself alone.
    pub fn in_a_cluster(&self, broker_id: i32) -> bool {
        !(self.voters.is_empty() || (self.voters.len() == 1 && self.voters[0].id == broker_id))
    }

    fn check(&self, problems: &mut Vec<String>) {
        for voter in &self.voters {
            check_host_port(problems, &format!("controller.voters ({})", voter.id), &voter.address);
        }
        check_range(problems, "controller.raft_heartbeat_ms", self.raft_heartbeat_ms, 10, 60_000);
        if self.raft_election_timeout_ms < 3 * self.raft_heartbeat_ms {
            problems.push(format!(
                "controller.raft_election_timeout_ms ({}) must be at least 3 x controller.raft_heartbeat_ms ({})",
                self.raft_election_timeout_ms, self.raft_heartbeat_ms
            ));
        }
        check_range(problems, "controller.broker_heartbeat_ms", self.broker_heartbeat_ms, 10, 60_000);
        if self.broker_session_timeout_ms < 2 * self.broker_heartbeat_ms {
            problems.push(format!(
                "controller.broker_session_timeout_ms ({}) must be at least 2 x controller.broker_heartbeat_ms ({})",
                self.broker_session_timeout_ms, self.broker_heartbeat_ms
            ));
        }
    }
}

impl Limits {
    fn apply_file(&mut self, raw: RawLimits) {
        self.connections_max = raw.connections_max.unwrap_or(self.connections_max);
        self.connections_per_ip_max = raw.connections_per_ip_max.unwrap_or(self.connections_per_ip_max);
        self.request_timeout_ms = raw.request_timeout_ms.unwrap_or(self.request_timeout_ms);
        self.idle_timeout_ms = raw.idle_timeout_ms.unwrap_or(self.idle_timeout_ms);
        self.unsent_response_bytes_max = raw.unsent_response_bytes_max.unwrap_or(self.unsent_response_bytes_max);
        self.in_flight_request_bytes_max = raw.in_flight_request_bytes_max.unwrap_or(self.in_flight_request_bytes_max);
        self.in_flight_calls_max = raw.in_flight_calls_max.unwrap_or(self.in_flight_calls_max);
        self.request_bytes_max = raw.request_bytes_max.unwrap_or(self.request_bytes_max);
        self.nesting_limit = raw.nesting_limit.unwrap_or(self.nesting_limit);
        self.fetch_bytes_max = raw.fetch_bytes_max.unwrap_or(self.fetch_bytes_max);
        self.fetch_wait_ms_max = raw.fetch_wait_ms_max.unwrap_or(self.fetch_wait_ms_max);
        self.produce_timeout_ms_max = raw.produce_timeout_ms_max.unwrap_or(self.produce_timeout_ms_max);
        self.topic_partitions_max = raw.topic_partitions_max.unwrap_or(self.topic_partitions_max);
    }

    fn check(&self, problems: &mut Vec<String>, log: &LogConfig) {
        check_at_least(problems, "limits.connections_max", self.connections_max, 1);
        check_at_least(problems, "limits.connections_per_ip_max", self.connections_per_ip_max, 1);
        check_range(problems, "limits.request_timeout_ms", self.request_timeout_ms, 100, 3_600_000);
        check_range(problems, "limits.idle_timeout_ms", self.idle_timeout_ms, 100, u32::MAX);
        check_at_least(problems, "limits.unsent_response_bytes_max", self.unsent_response_bytes_max, 64 * KIB);
        check_at_least(problems, "limits.in_flight_request_bytes_max", self.in_flight_request_bytes_max, 64 * KIB);
        check_at_least(problems, "limits.in_flight_calls_max", self.in_flight_calls_max, 1);
        check_range(problems, "limits.request_bytes_max", self.request_bytes_max, 64 * KIB, GIB);
        let batch_request_bytes = log.batch_bytes_max as usize + REQUEST_OVERHEAD_BYTES;
        if self.request_bytes_max < batch_request_bytes {
            problems.push(format!(
                "limits.request_bytes_max ({}) must be at least max.message.bytes ({}) + {REQUEST_OVERHEAD_BYTES} \
                 so that a largest batch fits in a request",
                self.request_bytes_max, log.batch_bytes_max
            ));
        }
        check_range(problems, "limits.nesting_limit", self.nesting_limit, 8, 128);
        check_at_least(problems, "limits.fetch_bytes_max", self.fetch_bytes_max, 1);
        if (self.fetch_bytes_max as usize).saturating_mul(2) > self.unsent_response_bytes_max {
            problems.push(format!(
                "limits.unsent_response_bytes_max ({}) must be at least twice limits.fetch_bytes_max ({}) so that \
                 fetches on one connection do not wait for each other's answers",
                self.unsent_response_bytes_max, self.fetch_bytes_max
            ));
        }
    }
}

/// `value` must be `host:port`: a non-empty host, then a port that fits in u16.
fn check_host_port(problems: &mut Vec<String>, name: &str, value: &str) {
    let valid = value.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !valid {
        problems.push(format!("{name} must be host:port (port 0 to 65535), got {value:?}"));
    }
}

fn check_range<T: PartialOrd + fmt::Display>(problems: &mut Vec<String>, name: &str, value: T, min: T, max: T) {
    if value < min || value > max {
        problems.push(format!("{name} must be in [{min}, {max}], got {value}"));
    }
}

fn check_at_least<T: PartialOrd + fmt::Display>(problems: &mut Vec<String>, name: &str, value: T, min: T) {
    if value < min {
        problems.push(format!("{name} must be at least {min}, got {value}"));
    }
}

fn read_file(path: &Path) -> Result<RawConfig, BrokerConfigError> {
    let text =
        fs::read_to_string(path).map_err(|source| BrokerConfigError::Read { path: path.to_path_buf(), source })?;
    parse_file(&text, path)
}

fn parse_file(text: &str, path: &Path) -> Result<RawConfig, BrokerConfigError> {
    toml::from_str(text)
        .map_err(|error| BrokerConfigError::Parse { path: path.to_path_buf(), message: error.to_string() })
}

/// The config file as written: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    listen: Option<String>,
    advertised_listener: Option<String>,
    data_dir: Option<PathBuf>,
    broker_id: Option<i32>,
    flush_threads: Option<usize>,
    retention_check_interval_ms: Option<u64>,
    group_commit_linger_us: Option<u64>,
    rpc_threads: Option<usize>,
    limits: Option<RawLimits>,
    plugins: Option<RawPlugins>,
    controller: Option<RawController>,
    replication: Option<RawReplication>,
    log: Option<LogTable>,
}

/// The `[replication]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplication {
    replica_lag_time_max_ms: Option<u64>,
}

/// The `[controller]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawController {
    voters: Option<String>,
    raft_heartbeat_ms: Option<u64>,
    raft_election_timeout_ms: Option<u64>,
    broker_heartbeat_ms: Option<u64>,
    broker_session_timeout_ms: Option<u64>,
    rack: Option<String>,
}

/// The `[plugins]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlugins {
    call_deadline_ms: Option<u64>,
    call_wall_deadline_ms: Option<u64>,
    memory_bytes_max: Option<usize>,
    output_bytes_max: Option<usize>,
    instances_max: Option<u32>,
    upload_bytes_max: Option<usize>,
}

/// The `[limits]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    connections_max: Option<usize>,
    connections_per_ip_max: Option<usize>,
    request_timeout_ms: Option<u32>,
    idle_timeout_ms: Option<u32>,
    unsent_response_bytes_max: Option<usize>,
    in_flight_request_bytes_max: Option<usize>,
    in_flight_calls_max: Option<usize>,
    request_bytes_max: Option<usize>,
    nesting_limit: Option<i32>,
    fetch_bytes_max: Option<u32>,
    fetch_wait_ms_max: Option<u32>,
    produce_timeout_ms_max: Option<u32>,
    topic_partitions_max: Option<u32>,
}

/// The `[log]` table: (topic config key, value as text) in file order. Keys outside
/// [`TOPIC_CONFIG_KEYS`] are refused while parsing, like `deny_unknown_fields`.
#[derive(Debug, Default)]
struct LogTable(Vec<(String, String)>);

impl<'de> Deserialize<'de> for LogTable {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<LogTable, D::Error> {
        let mut entries = Vec::new();
        LogTableLevel { prefix: String::new(), entries: &mut entries }.deserialize(deserializer)?;
        Ok(LogTable(entries))
    }
}

/// One level of the `[log]` table. Quoted keys (`"retention.ms" = 1`) arrive whole;
/// unquoted ones (`retention.ms = 1`) are nested tables in TOML, read here as the
/// dotted path `prefix.key`; a value where a table of keys was expected is an
/// unknown key.
struct LogTableLevel<'a> {
    prefix: String,
    entries: &'a mut Vec<(String, String)>,
}

impl<'de> DeserializeSeed<'de> for LogTableLevel<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        if self.prefix.is_empty() {
            deserializer.deserialize_map(self)
        } else {
            deserializer.deserialize_any(self) // `segment = 5` is an unknown key, not a type error
        }
    }
}

impl<'de> Visitor<'de> for LogTableLevel<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of topic configs")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<String>()? {
            let key = if self.prefix.is_empty() { key } else { format!("{}.{key}", self.prefix) };
            let is_prefix = |known: &&str| known.strip_prefix(key.as_str()).is_some_and(|rest| rest.starts_with('.'));
            if TOPIC_CONFIG_KEYS.contains(&key.as_str()) {
                let TopicValue(value) = map.next_value()?;
                self.entries.push((key, value));
            } else if TOPIC_CONFIG_KEYS.iter().any(is_prefix) {
                map.next_value_seed(LogTableLevel { prefix: key, entries: &mut *self.entries })?;
            } else {
                return Err(de::Error::unknown_field(&key, TOPIC_CONFIG_KEYS));
            }
        }
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::unknown_field(&self.prefix, TOPIC_CONFIG_KEYS))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(E::unknown_field(&self.prefix, TOPIC_CONFIG_KEYS))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(E::unknown_field(&self.prefix, TOPIC_CONFIG_KEYS))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(E::unknown_field(&self.prefix, TOPIC_CONFIG_KEYS))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::unknown_field(&self.prefix, TOPIC_CONFIG_KEYS))
    }
}

/// A topic config value: a TOML integer or string, kept as text.
struct TopicValue(String);

impl<'de> Deserialize<'de> for TopicValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<TopicValue, D::Error> {
        deserializer.deserialize_any(TopicValueVisitor)
    }
}

struct TopicValueVisitor;

impl Visitor<'_> for TopicValueVisitor {
    type Value = TopicValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an integer or a string")
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<TopicValue, E> {
        Ok(TopicValue(value.to_string()))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<TopicValue, E> {
        Ok(TopicValue(value.to_string()))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<TopicValue, E> {
        Ok(TopicValue(value.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use broker_core::log::FlushPolicy;

    use super::*;

    const EXAMPLE: &str = include_str!("../weir.example.toml");

    /// Parses `text` as a config file on top of the defaults, then validates.
    fn from_text(text: &str, overrides: &ConfigOverrides) -> Result<BrokerConfig, BrokerConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("weir.toml");
        fs::write(&path, text).unwrap();
        BrokerConfig::load(Some(&path), overrides)
    }

    fn parse_message(text: &str) -> String {
        match from_text(text, &ConfigOverrides::default()) {
            Err(BrokerConfigError::Parse { message, .. }) => message,
            other => panic!("expected a parse error, got {other:?}"),
        }
    }

    fn problems(text: &str) -> Vec<String> {
        match from_text(text, &ConfigOverrides::default()) {
            Err(BrokerConfigError::Invalid { problems }) => problems,
            other => panic!("expected invalid config, got {other:?}"),
        }
    }

    #[test]
    fn default_config_validates() {
        BrokerConfig::default().validate().unwrap();
        assert_eq!(BrokerConfig::load(None, &ConfigOverrides::default()).unwrap(), BrokerConfig::default());
    }

    #[test]
    fn every_field_parses() {
        let text = r#"
            listen = "0.0.0.0:9000"
            advertised_listener = "broker-1.example.com:9000"
            data_dir = "/var/lib/weir"
            broker_id = 7
            flush_threads = 4
            retention_check_interval_ms = 60000
            group_commit_linger_us = 0
            rpc_threads = 8

            [plugins]
            call_deadline_ms = 25
            memory_bytes_max = 33554432

            [limits]
            connections_max = 10
            connections_per_ip_max = 5
            request_timeout_ms = 2000
            idle_timeout_ms = 60000
            unsent_response_bytes_max = 2097152
            in_flight_request_bytes_max = 2097152
            in_flight_calls_max = 3
            request_bytes_max = 2097152
            nesting_limit = 32
            fetch_bytes_max = 1048576
            fetch_wait_ms_max = 500
            produce_timeout_ms_max = 9000
            topic_partitions_max = 12

            [log]
            "retention.ms" = 86400000
            "retention.bytes" = "-1"
            segment.bytes = "16777216"
            "segment.ms" = 3600000
            "segment.index.bytes" = 65536
            "index.interval.bytes" = 1024
            "flush.policy" = "interval"
            "flush.ms" = 50
            "max.message.bytes" = 1000000
            "cleanup.policy" = "delete"
            "message.timestamp.type" = "CreateTime"
            "min.insync.replicas" = 2

            [replication]
            replica_lag_time_max_ms = 5000
        "#;
        let expected = BrokerConfig {
            controller: ControllerSettings::default(),
            replication: ReplicationSettings { replica_lag_time_max_ms: 5000 },
            listen: "0.0.0.0:9000".to_owned(),
            advertised_listener: Some("broker-1.example.com:9000".to_owned()),
            data_dir: PathBuf::from("/var/lib/weir"),
            broker_id: 7,
            log: LogConfig {
                segment_bytes_max: 16 * MIB as u64,
                segment_ms: 3_600_000,
                index_interval_bytes: 1024,
                index_bytes_max: 64 * KIB,
                retention_ms: Some(86_400_000),
                retention_bytes: None,
                flush_policy: FlushPolicy::Interval,
                flush_interval_ms: 50,
                batch_bytes_max: 1_000_000,
                min_insync_replicas: 2,
                unclean_leader_election: false,
            },
            flush_threads: 4,
            retention_check_interval_ms: 60_000,
            group_commit_linger_us: 0,
            rpc_threads: 8,
            limits: Limits {
                connections_max: 10,
                connections_per_ip_max: 5,
                request_timeout_ms: 2000,
                idle_timeout_ms: 60_000,
                unsent_response_bytes_max: 2 * MIB,
                in_flight_request_bytes_max: 2 * MIB,
                in_flight_calls_max: 3,
                request_bytes_max: 2 * MIB,
                nesting_limit: 32,
                fetch_bytes_max: MIB as u32,
                fetch_wait_ms_max: 500,
                produce_timeout_ms_max: 9000,
                topic_partitions_max: 12,
            },
            plugins: PluginSettings { call_deadline_ms: 25, memory_bytes_max: 32 * MIB, ..PluginSettings::default() },
        };
        let config = from_text(text, &ConfigOverrides::default()).unwrap();
        assert_eq!(config, expected);
        assert_eq!(config.advertised_address(), "broker-1.example.com:9000");
        assert_eq!(config.limits.traversal_limit_words(), 262_144);
    }

    #[test]
    fn unknown_fields_are_named() {
        let cases = [
            ("lissten = \"127.0.0.1:1\"\n", "lissten"),
            ("[limits]\nconnections = 5\n", "connections"),
            ("[log]\n\"retention.hours\" = 5\n", "retention.hours"),
            ("[log]\nretention.hours = 5\n", "retention.hours"),
            ("[log]\nsegment = 5\n", "segment"),
        ];
        for (text, field) in cases {
            let message = parse_message(text);
            assert!(message.contains(&format!("unknown field `{field}`")), "{text:?}: {message}");
            assert!(message.contains("line"), "no position in {message}");
        }
    }

    #[test]
    fn wrong_types_are_parse_errors() {
        for (text, expected) in
            [("rpc_threads = -1\n", "rpc_threads"), ("[log]\n\"flush.ms\" = true\n", "an integer or a string")]
        {
            let message = parse_message(text);
            assert!(message.contains(expected), "{text:?}: {message}");
        }
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let text = r#"
            listen = "9292"
            advertised_listener = ":9292"
            rpc_threads = 0
            flush_threads = 65
            retention_check_interval_ms = 1
            [limits]
            connections_max = 0
            in_flight_calls_max = 0
            request_bytes_max = 100000
            nesting_limit = 4
            fetch_bytes_max = 0
            [log]
            "segment.ms" = 0
            "cleanup.policy" = "compact"
        "#;
        let expected = [
            "[log] cleanup.policy=compact is not supported yet (only delete)",
            "[log] segment.ms must be positive, got 0",
            "listen must be host:port (port 0 to 65535), got \"9292\"",
            "advertised_listener must be host:port (port 0 to 65535), got \":9292\"",
            "rpc_threads must be in [1, 64], got 0",
            "flush_threads must be in [1, 64], got 65",
            "retention_check_interval_ms must be at least 10, got 1",
            "limits.connections_max must be at least 1, got 0",
            "limits.in_flight_calls_max must be at least 1, got 0",
            "limits.request_bytes_max (100000) must be at least max.message.bytes (1048588) + 65536 \
             so that a largest batch fits in a request",
            "limits.nesting_limit must be in [8, 128], got 4",
            "limits.fetch_bytes_max must be at least 1, got 0",
        ];
        assert_eq!(problems(text), expected);
    }

    #[test]
    fn invalid_display_puts_each_problem_on_its_own_line() {
        let error = BrokerConfigError::Invalid { problems: vec!["a is wrong".to_owned(), "b is wrong".to_owned()] };
        assert_eq!(error.to_string(), "invalid broker config:\n  a is wrong\n  b is wrong");
    }

    #[test]
    fn request_bytes_max_bounds() {
        let cases = [
            (
                64 * KIB - 1,
                vec![
                    "limits.request_bytes_max must be in [65536, 1073741824], got 65535",
                    "limits.request_bytes_max (65535) must be at least max.message.bytes (1024) + 65536 \
                     so that a largest batch fits in a request",
                ],
            ),
            (GIB + 1, vec!["limits.request_bytes_max must be in [65536, 1073741824], got 1073741825"]),
            (
                MIB + 64 * KIB - 1,
                vec![
                    "limits.request_bytes_max (1114111) must be at least max.message.bytes (1048576) + 65536 \
                     so that a largest batch fits in a request",
                ],
            ),
        ];
        for (request_bytes_max, expected) in cases {
            let batch_bytes_max = if request_bytes_max > MIB { MIB } else { KIB };
            let text = format!(
                "[limits]\nrequest_bytes_max = {request_bytes_max}\n[log]\n\"max.message.bytes\" = {batch_bytes_max}\n"
            );
            assert_eq!(problems(&text), expected, "request_bytes_max = {request_bytes_max}");
        }
        let text = "[limits]\nrequest_bytes_max = 1114112\n[log]\n\"max.message.bytes\" = 1048576\n";
        assert_eq!(from_text(text, &ConfigOverrides::default()).unwrap().limits.request_bytes_max, MIB + 64 * KIB);
    }

    #[test]
    fn overrides_beat_the_file() {
        let text = "listen = \"10.0.0.1:1\"\ndata_dir = \"/from/file\"\nbroker_id = 3\nadvertised_listener = \"a:1\"\n";
        let overrides = ConfigOverrides {
            listen: Some("10.0.0.2:2".to_owned()),
            data_dir: Some(PathBuf::from("/from/flag")),
            advertised_listener: Some("b:2".to_owned()),
            broker_id: Some(9),
            controller_voters: Some("9@10.0.0.2:2, 8@10.0.0.3:2".to_owned()),
        };
        let config = from_text(text, &overrides).unwrap();
        assert_eq!(
            (config.listen.as_str(), config.data_dir.as_path(), config.advertised_address(), config.broker_id),
            ("10.0.0.2:2", Path::new("/from/flag"), "b:2", 9)
        );
        let voters: Vec<(i32, &str)> =
            config.controller.voters.iter().map(|voter| (voter.id, voter.address.as_str())).collect();
        assert_eq!(voters, [(9, "10.0.0.2:2"), (8, "10.0.0.3:2")]);
        for (bad, problem) in
            [("9@10.0.0.2:2,9@x:1", "listed twice"), ("nine@x:1", "must be a number"), ("9", "id@host:port")]
        {
            let overrides = ConfigOverrides { controller_voters: Some(bad.to_owned()), ..overrides.clone() };
            let error = from_text(text, &overrides).unwrap_err().to_string();
            assert!(error.contains(problem), "{bad}: {error}");
        }
        let file_only = from_text(text, &ConfigOverrides { broker_id: Some(4), ..ConfigOverrides::default() }).unwrap();
        assert_eq!((file_only.listen.as_str(), file_only.broker_id), ("10.0.0.1:1", 4));
        let invalid = ConfigOverrides { listen: Some("nowhere".to_owned()), ..ConfigOverrides::default() };
        assert!(
            matches!(BrokerConfig::load(None, &invalid), Err(BrokerConfigError::Invalid { problems }) if problems.len() == 1)
        );
    }

    #[test]
    fn missing_file_is_a_read_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.toml");
        match BrokerConfig::load(Some(&path), &ConfigOverrides::default()) {
            Err(BrokerConfigError::Read { path: reported, source }) => {
                assert_eq!((reported, source.kind()), (path, io::ErrorKind::NotFound));
            }
            other => panic!("expected a read error, got {other:?}"),
        }
    }

    #[test]
    fn log_dir_config_carries_the_storage_fields() {
        let config = BrokerConfig {
            data_dir: PathBuf::from("/data"),
            flush_threads: 3,
            retention_check_interval_ms: 1234,
            group_commit_linger_us: 5,
            log: LogConfig { flush_interval_ms: 77, ..LogConfig::default() },
            ..BrokerConfig::default()
        };
        let LogDirConfig { data_dir, log, flush_threads, retention_check_interval_ms, group_commit_linger_us, .. } =
            config.log_dir_config();
        assert_eq!(
            (data_dir, log, flush_threads, retention_check_interval_ms, group_commit_linger_us),
            (config.data_dir, config.log, 3, 1234, 5)
        );
    }

    #[test]
    fn unclean_leader_election_is_refused_as_a_broker_default() {
        let raw = parse_file("[log]\n\"unclean.leader.election.enable\" = \"true\"\n", Path::new("w.toml")).unwrap();
        let problems = BrokerConfig::default().apply_file(raw);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("set per topic only"), "{problems:?}");
    }

    /// The example file sets every key to its default (only `advertised_listener`,
    /// whose default is "unset", is commented out), so it parses to the defaults and
    /// a renamed, removed or added key, or a changed default, fails here.
    #[test]
    fn example_file_sets_every_key_to_its_default() {
        let raw = parse_file(EXAMPLE, Path::new("weir.example.toml")).unwrap();
        let RawConfig {
            listen,
            advertised_listener,
            data_dir,
            broker_id,
            flush_threads,
            retention_check_interval_ms,
            group_commit_linger_us,
            rpc_threads,
            limits,
            plugins,
            controller,
            replication,
            log,
        } = &raw;
        let RawReplication { replica_lag_time_max_ms } = replication.as_ref().expect("the example has [replication]");
        assert!(replica_lag_time_max_ms.is_some());
        let top_level = [
            listen.is_some(),
            data_dir.is_some(),
            broker_id.is_some(),
            flush_threads.is_some(),
            retention_check_interval_ms.is_some(),
            group_commit_linger_us.is_some(),
            rpc_threads.is_some(),
        ];
        assert_eq!(top_level, [true; 7]);
        assert!(advertised_listener.is_none() && EXAMPLE.contains("# advertised_listener = "));
        let RawLimits {
            connections_max,
            connections_per_ip_max,
            request_timeout_ms,
            idle_timeout_ms,
            unsent_response_bytes_max,
            in_flight_request_bytes_max,
            in_flight_calls_max,
            request_bytes_max,
            nesting_limit,
            fetch_bytes_max,
            fetch_wait_ms_max,
            produce_timeout_ms_max,
            topic_partitions_max,
        } = limits.as_ref().expect("the example has [limits]");
        let limits = [
            connections_max.is_some(),
            connections_per_ip_max.is_some(),
            request_timeout_ms.is_some(),
            idle_timeout_ms.is_some(),
            unsent_response_bytes_max.is_some(),
            in_flight_request_bytes_max.is_some(),
            in_flight_calls_max.is_some(),
            request_bytes_max.is_some(),
            nesting_limit.is_some(),
            fetch_bytes_max.is_some(),
            fetch_wait_ms_max.is_some(),
            produce_timeout_ms_max.is_some(),
            topic_partitions_max.is_some(),
        ];
        assert_eq!(limits, [true; 13]);
        let RawPlugins {
            call_deadline_ms,
            call_wall_deadline_ms,
            memory_bytes_max,
            output_bytes_max,
            instances_max,
            upload_bytes_max,
        } = plugins.as_ref().expect("the example has [plugins]");
        let plugins = [
            call_deadline_ms.is_some(),
            call_wall_deadline_ms.is_some(),
            memory_bytes_max.is_some(),
            output_bytes_max.is_some(),
            instances_max.is_some(),
            upload_bytes_max.is_some(),
        ];
        assert_eq!(plugins, [true; 6]);
        let RawController {
            voters,
            raft_heartbeat_ms,
            raft_election_timeout_ms,
            broker_heartbeat_ms,
            broker_session_timeout_ms,
            rack,
        } = controller.as_ref().expect("the example has [controller]");
        let controller = [
            voters.is_some(),
            raft_heartbeat_ms.is_some(),
            raft_election_timeout_ms.is_some(),
            broker_heartbeat_ms.is_some(),
            broker_session_timeout_ms.is_some(),
            rack.is_some(),
        ];
        assert_eq!(controller, [true; 6]);
        let mut log_keys: Vec<&str> =
            log.as_ref().expect("the example has [log]").0.iter().map(|(key, _)| key.as_str()).collect();
        log_keys.sort_unstable();
        let defaults: Vec<&str> =
            TOPIC_CONFIG_KEYS.iter().copied().filter(|key| *key != UNCLEAN_LEADER_ELECTION).collect();
        assert_eq!(log_keys, defaults, "every topic config with a broker default");
        let mut config = BrokerConfig::default();
        assert_eq!(config.apply_file(raw), Vec::<String>::new());
        assert_eq!(config, BrokerConfig::default());
    }
}

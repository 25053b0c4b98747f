//! [`LogConfig`]: the per-partition settings the log obeys.
//!
//! Names follow Kafka's topic configs (`segment.bytes` → `segment_bytes_max`, …) with
//! units last. Every bound is explicit; [`LogConfig::validate`] reports every problem
//! at once, so an operator fixes a config in one go.

use std::fmt;

/// When appended data is made durable (fdatasync).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FlushPolicy {
    /// Group commit: appenders wait until an fdatasync covers their offsets; one sync
    /// covers every append that arrived while the previous sync ran.
    #[default]
    Always,
    /// Sync in the background every `flush_interval_ms`; appends are acknowledged from
    /// the page cache (Kafka's default trade).
    Interval,
}

impl FlushPolicy {
    /// Parses the config value (`always` or `interval`).
    pub fn parse(value: &str) -> Option<FlushPolicy> {
        match value {
            "always" => Some(FlushPolicy::Always),
            "interval" => Some(FlushPolicy::Interval),
            _ => None,
        }
    }
}

impl fmt::Display for FlushPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FlushPolicy::Always => "always",
            FlushPolicy::Interval => "interval",
        })
    }
}

/// Per-partition log settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll the active segment before it would exceed this many bytes (`segment.bytes`).
    pub segment_bytes_max: u64,
    /// Roll when the active segment's records span more than this (`segment.ms`).
    pub segment_ms: i64,
    /// Bytes of batches between two sparse index entries (`index.interval.bytes`).
    pub index_interval_bytes: u64,
    /// Preallocated size of each index file of the active segment (`segment.index.bytes`).
    pub index_bytes_max: usize,
    /// Delete closed segments whose newest record is older than this (`retention.ms`);
    /// `None` keeps them forever.
    pub retention_ms: Option<i64>,
    /// Delete the oldest closed segments while the log is bigger than this
    /// (`retention.bytes`); `None` = no size limit.
    pub retention_bytes: Option<u64>,
    /// When appends become durable (`flush.policy`).
    pub flush_policy: FlushPolicy,
    /// Background sync period under [`FlushPolicy::Interval`] (`flush.ms`).
    pub flush_interval_ms: u64,
    /// Largest batch accepted (`max.message.bytes`).
    pub batch_bytes_max: u32,
    /// The fewest in-sync replicas (the leader counted) with which the high
    /// watermark advances and `acks=all` produces are taken
    /// (`min.insync.replicas`). Not a log setting: the partition's leader reads it.
    pub min_insync_replicas: u16,
    /// Whether a replica outside the ISR may lead when no in-sync replica can
    /// (`unclean.leader.election.enable`). Not a log setting: the controller
    /// reads it from the topic's own configs.
    pub unclean_leader_election: bool,
}

const MIB: u64 = 1024 * 1024;
const DAY_MS: i64 = 24 * 60 * 60 * 1000;

impl Default for LogConfig {
    fn default() -> LogConfig {
        LogConfig {
            segment_bytes_max: 1024 * MIB,
            segment_ms: 7 * DAY_MS,
            index_interval_bytes: 4096,
            index_bytes_max: 10 * MIB as usize,
            retention_ms: Some(7 * DAY_MS),
            retention_bytes: None,
            flush_policy: FlushPolicy::Always,
            flush_interval_ms: 1000,
            batch_bytes_max: MIB as u32 + 12,
            min_insync_replicas: 1,
            unclean_leader_election: false,
        }
    }
}

/// Every problem found in a [`LogConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid log config: {}", problems.join("; "))]
pub struct ConfigError {
    /// One human-readable line per problem.
    pub problems: Vec<String>,
}

impl LogConfig {
    /// Checks every bound; reports all problems at once.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        if self.segment_bytes_max < 1024 || self.segment_bytes_max > u32::MAX as u64 {
            problems.push(format!(
                "segment.bytes must be in [1024, {}] (positions are u32), got {}",
                u32::MAX,
                self.segment_bytes_max
            ));
        }
        if self.segment_ms < 1 {
            problems.push(format!("segment.ms must be positive, got {}", self.segment_ms));
        }
        if self.index_interval_bytes == 0 {
            problems.push("index.interval.bytes must be positive".to_owned());
        }
        if self.index_bytes_max < 1024 {
            problems.push(format!("segment.index.bytes must be at least 1024, got {}", self.index_bytes_max));
        }
        if matches!(self.retention_ms, Some(ms) if ms < 1) {
            problems.push("retention.ms must be positive (or unset for no limit)".to_owned());
        }
        if self.flush_interval_ms == 0 {
            problems.push("flush.ms must be positive".to_owned());
        }
        if (self.batch_bytes_max as usize) < abi::batch::BATCH_HEADER_BYTES {
            problems.push(format!("max.message.bytes must fit a batch header, got {}", self.batch_bytes_max));
        }
        if self.min_insync_replicas == 0 {
            problems.push("min.insync.replicas must be at least 1".to_owned());
        }
        if self.batch_bytes_max as u64 > self.segment_bytes_max {
            problems.push(format!(
                "max.message.bytes ({}) must not exceed segment.bytes ({})",
                self.batch_bytes_max, self.segment_bytes_max
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        LogConfig::default().validate().unwrap();
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let config = LogConfig { segment_bytes_max: 10, segment_ms: 0, flush_interval_ms: 0, ..LogConfig::default() };
        let error = config.validate().unwrap_err();
        assert_eq!(error.problems.len(), 4, "{error}");
    }
}

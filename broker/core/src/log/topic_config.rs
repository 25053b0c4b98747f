//! Kafka-style topic configs (`retention.ms=86400000`, …) to and from [`LogConfig`].
//!
//! One table, [`SETTINGS`], holds every supported key with how to apply a value
//! and how to print the effective one; [`TOPIC_CONFIG_KEYS`] is derived from it, so
//! the key list, the parser and the printer cannot drift apart.
//!
//! Values use Kafka's spelling: `-1` means "unlimited" for `retention.ms` and
//! `retention.bytes`. Settings Kafka has and Weir does not implement yet
//! (`cleanup.policy=compact`, `message.timestamp.type=LogAppendTime`) are refused
//! with a problem saying so, never silently ignored.
//!
//! [`apply_topic_configs`] reports every problem of a request at once (unknown keys,
//! duplicate keys, unparsable values, then [`LogConfig::validate`]), like
//! [`LogConfig::validate`] itself. Called by the server when it reads the `[log]`
//! table of its config file, and later by topic creation and config changes.

use std::collections::BTreeSet;
use std::str::FromStr;

use super::{ConfigError, FlushPolicy, LogConfig};

/// One supported topic config key.
struct Setting {
    /// Kafka's name of the setting.
    key: &'static str,
    /// Applies a value to a config, or says why the value is refused.
    apply: fn(&mut LogConfig, &str) -> Result<(), Rejection>,
    /// The config's effective value, in Kafka's spelling.
    effective: fn(&LogConfig) -> String,
}

/// Why a value was refused.
enum Rejection {
    /// The value does not parse; the text says what was expected.
    Unparsable(&'static str),
    /// Kafka accepts the value but Weir does not implement it yet; the full problem.
    Unsupported(&'static str),
}

const INTEGER: &str = "a non-negative integer";
const UNLIMITED: &str = "a non-negative integer, or -1 for unlimited";

/// Every supported key, sorted by key.
const SETTINGS: [Setting; 13] = [
    Setting {
        key: "cleanup.policy",
        apply: |_, value| match value {
            "delete" => Ok(()),
            "compact" | "compact,delete" | "delete,compact" => {
                Err(Rejection::Unsupported("cleanup.policy=compact is not supported yet (only delete)"))
            }
            _ => Err(Rejection::Unparsable("delete")),
        },
        effective: |_| "delete".to_owned(),
    },
    Setting {
        key: "flush.ms",
        apply: |config, value| {
            config.flush_interval_ms = parse(value, INTEGER)?;
            Ok(())
        },
        effective: |config| config.flush_interval_ms.to_string(),
    },
    Setting {
        key: "flush.policy",
        apply: |config, value| {
            config.flush_policy = FlushPolicy::parse(value).ok_or(Rejection::Unparsable("always or interval"))?;
            Ok(())
        },
        effective: |config| config.flush_policy.to_string(),
    },
    Setting {
        key: "index.interval.bytes",
        apply: |config, value| {
            config.index_interval_bytes = parse(value, INTEGER)?;
            Ok(())
        },
        effective: |config| config.index_interval_bytes.to_string(),
    },
    Setting {
        key: "max.message.bytes",
        apply: |config, value| {
            config.batch_bytes_max = parse(value, INTEGER)?;
            Ok(())
        },
        effective: |config| config.batch_bytes_max.to_string(),
    },
    Setting {
        key: "message.timestamp.type",
        apply: |_, value| match value {
            "CreateTime" => Ok(()),
            "LogAppendTime" => Err(Rejection::Unsupported(
                "message.timestamp.type=LogAppendTime is not supported yet (only CreateTime)",
            )),
            _ => Err(Rejection::Unparsable("CreateTime")),
        },
        effective: |_| "CreateTime".to_owned(),
    },
    Setting {
        key: "min.insync.replicas",
        apply: |config, value| {
            config.min_insync_replicas = parse(value, "a positive integer")?;
            Ok(())
        },
        effective: |config| config.min_insync_replicas.to_string(),
    },
    Setting {
        key: "retention.bytes",
        apply: |config, value| {
            let limit = parse_unlimited(value)?;
            config.retention_bytes = limit.map(u64::try_from).transpose().map_err(|_| unparsable_unlimited())?;
            Ok(())
        },
        effective: |config| config.retention_bytes.map_or_else(|| "-1".to_owned(), |bytes| bytes.to_string()),
    },
    Setting {
        key: "retention.ms",
        apply: |config, value| {
            config.retention_ms = parse_unlimited(value)?;
            Ok(())
        },
        effective: |config| config.retention_ms.map_or_else(|| "-1".to_owned(), |ms| ms.to_string()),
    },
    Setting {
        key: "segment.bytes",
        apply: |config, value| {
            config.segment_bytes_max = parse(value, INTEGER)?;
            Ok(())
        },
        effective: |config| config.segment_bytes_max.to_string(),
    },
    Setting {
        key: "segment.index.bytes",
        apply: |config, value| {
            config.index_bytes_max = parse(value, INTEGER)?;
            Ok(())
        },
        effective: |config| config.index_bytes_max.to_string(),
    },
    Setting {
        key: "segment.ms",
        apply: |config, value| {
            config.segment_ms = parse(value, "an integer")?;
            Ok(())
        },
        effective: |config| config.segment_ms.to_string(),
    },
    Setting {
        key: "unclean.leader.election.enable",
        apply: |config, value| {
            config.unclean_leader_election = match value.to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => return Err(Rejection::Unparsable("true or false")),
            };
            Ok(())
        },
        effective: |config| config.unclean_leader_election.to_string(),
    },
];

/// Every supported topic config key, sorted (Kafka's names).
pub const TOPIC_CONFIG_KEYS: &[&str] = &{
    let mut keys = [""; SETTINGS.len()];
    let mut index = 0;
    while index < SETTINGS.len() {
        keys[index] = SETTINGS[index].key;
        index += 1;
    }
    keys
};

fn parse<T: FromStr>(value: &str, expected: &'static str) -> Result<T, Rejection> {
    value.parse().map_err(|_| Rejection::Unparsable(expected))
}

/// `-1` is unlimited (`None`); other negative numbers are refused.
fn parse_unlimited(value: &str) -> Result<Option<i64>, Rejection> {
    match parse::<i64>(value, UNLIMITED)? {
        -1 => Ok(None),
        limit if limit < 0 => Err(unparsable_unlimited()),
        limit => Ok(Some(limit)),
    }
}

fn unparsable_unlimited() -> Rejection {
    Rejection::Unparsable(UNLIMITED)
}

/// Applies `entries` (key, value) on top of `defaults`. Reports every problem at
/// once: unknown or repeated keys, unparsable or unsupported values, and whatever
/// [`LogConfig::validate`] finds in the result.
pub fn apply_topic_configs(defaults: &LogConfig, entries: &[(String, String)]) -> Result<LogConfig, ConfigError> {
    let mut config = defaults.clone();
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (key, value) in entries {
        if !seen.insert(key.as_str()) {
            problems.push(format!("topic config {key} is given more than once"));
            continue;
        }
        if let Err(problem) = apply_one(&mut config, key, value) {
            problems.push(problem);
        }
    }
    if let Err(error) = config.validate() {
        problems.extend(error.problems);
    }
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError { problems })
    }
}

fn apply_one(config: &mut LogConfig, key: &str, value: &str) -> Result<(), String> {
    let Some(setting) = SETTINGS.iter().find(|setting| setting.key == key) else {
        return Err(format!("unknown topic config {key:?} (supported: {})", TOPIC_CONFIG_KEYS.join(", ")));
    };
    (setting.apply)(config, value.trim()).map_err(|rejection| match rejection {
        Rejection::Unparsable(expected) => format!("invalid value {value:?} for {key}: expected {expected}"),
        Rejection::Unsupported(problem) => problem.to_owned(),
    })
}

/// Every supported key with its effective value in `config`, in Kafka's spelling
/// (`-1` for unlimited), sorted by key.
pub fn effective_topic_configs(config: &LogConfig) -> Vec<(String, String)> {
    SETTINGS.iter().map(|setting| (setting.key.to_owned(), (setting.effective)(config))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect()
    }

    fn problems(pairs: &[(&str, &str)]) -> Vec<String> {
        apply_topic_configs(&LogConfig::default(), &entries(pairs)).unwrap_err().problems
    }

    #[test]
    fn keys_are_sorted_and_unique() {
        assert!(TOPIC_CONFIG_KEYS.windows(2).all(|pair| pair[0] < pair[1]), "{TOPIC_CONFIG_KEYS:?}");
        assert_eq!(TOPIC_CONFIG_KEYS.len(), 13);
    }

    #[test]
    fn effective_then_apply_round_trips() {
        let configs = [
            LogConfig::default(),
            LogConfig {
                segment_bytes_max: 4096,
                segment_ms: 60_000,
                index_interval_bytes: 128,
                index_bytes_max: 2048,
                retention_ms: None,
                retention_bytes: Some(1 << 30),
                flush_policy: FlushPolicy::Interval,
                flush_interval_ms: 250,
                batch_bytes_max: 1024,
                min_insync_replicas: 2,
                unclean_leader_election: true,
            },
            LogConfig { retention_ms: Some(1), retention_bytes: Some(0), ..LogConfig::default() },
        ];
        for config in configs {
            let effective = effective_topic_configs(&config);
            let keys: Vec<&str> = effective.iter().map(|(key, _)| key.as_str()).collect();
            assert_eq!(keys, TOPIC_CONFIG_KEYS);
            assert_eq!(apply_topic_configs(&LogConfig::default(), &effective), Ok(config.clone()), "{effective:?}");
        }
    }

    #[test]
    fn effective_values_use_kafka_spelling() {
        let config = LogConfig { retention_ms: None, retention_bytes: None, ..LogConfig::default() };
        let effective = effective_topic_configs(&config);
        let value = |key: &str| effective.iter().find(|(found, _)| found == key).map(|(_, value)| value.as_str());
        assert_eq!(value("retention.ms"), Some("-1"));
        assert_eq!(value("retention.bytes"), Some("-1"));
        assert_eq!(value("cleanup.policy"), Some("delete"));
        assert_eq!(value("message.timestamp.type"), Some("CreateTime"));
        assert_eq!(value("flush.policy"), Some("always"));
        assert_eq!(value("segment.bytes"), Some("1073741824"));
    }

    #[test]
    fn minus_one_means_unlimited() {
        // (key, value, retention_ms, retention_bytes) applied on top of `defaults`.
        let cases = [
            ("retention.ms", "-1", None, Some(5)),
            ("retention.bytes", "-1", Some(LogConfig::default().retention_ms.unwrap()), None),
            ("retention.ms", "3600000", Some(3_600_000), Some(5)),
            ("retention.bytes", "0", LogConfig::default().retention_ms, Some(0)),
        ];
        let defaults = LogConfig { retention_bytes: Some(5), ..LogConfig::default() };
        for (key, value, retention_ms, retention_bytes) in cases {
            let config = apply_topic_configs(&defaults, &entries(&[(key, value)])).unwrap();
            assert_eq!((config.retention_ms, config.retention_bytes), (retention_ms, retention_bytes), "{key}={value}");
        }
        for (key, value) in [("retention.ms", "-2"), ("retention.bytes", "-7")] {
            let expected = format!("invalid value {value:?} for {key}: expected {UNLIMITED}");
            assert_eq!(problems(&[(key, value)]), vec![expected]);
        }
    }

    #[test]
    fn unknown_key_names_it_and_lists_the_supported_keys() {
        let problems = problems(&[("retention.hours", "5")]);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("unknown topic config \"retention.hours\" (supported: "), "{problems:?}");
        assert!(TOPIC_CONFIG_KEYS.iter().all(|key| problems[0].contains(key)), "{problems:?}");
    }

    #[test]
    fn unsupported_values_are_refused() {
        let cases = [
            ("cleanup.policy", "compact", "cleanup.policy=compact is not supported yet (only delete)"),
            ("cleanup.policy", "compact,delete", "cleanup.policy=compact is not supported yet (only delete)"),
            (
                "message.timestamp.type",
                "LogAppendTime",
                "message.timestamp.type=LogAppendTime is not supported yet (only CreateTime)",
            ),
            ("cleanup.policy", "shred", "invalid value \"shred\" for cleanup.policy: expected delete"),
        ];
        for (key, value, expected) in cases {
            assert_eq!(problems(&[(key, value)]), vec![expected.to_owned()], "{key}={value}");
        }
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let problems = problems(&[
            ("segment.bytes", "big"),
            ("flush.policy", "sometimes"),
            ("retention.ms", "1000"),
            ("retention.ms", "2000"),
            ("cleanup.policy", "compact"),
            ("colour", "blue"),
            ("segment.ms", "0"),
            ("max.message.bytes", "4294967296"),
        ]);
        assert_eq!(
            problems[..6],
            [
                "invalid value \"big\" for segment.bytes: expected a non-negative integer".to_owned(),
                "invalid value \"sometimes\" for flush.policy: expected always or interval".to_owned(),
                "topic config retention.ms is given more than once".to_owned(),
                "cleanup.policy=compact is not supported yet (only delete)".to_owned(),
                format!("unknown topic config \"colour\" (supported: {})", TOPIC_CONFIG_KEYS.join(", ")),
                "invalid value \"4294967296\" for max.message.bytes: expected a non-negative integer".to_owned(),
            ]
        );
        assert_eq!(problems[6..], ["segment.ms must be positive, got 0".to_owned()]);
    }

    #[test]
    fn valid_entries_apply_on_top_of_defaults() {
        let defaults = LogConfig { flush_interval_ms: 42, ..LogConfig::default() };
        let config = apply_topic_configs(
            &defaults,
            &entries(&[("segment.bytes", "4194304"), ("flush.policy", "interval"), ("cleanup.policy", "delete")]),
        )
        .unwrap();
        let expected =
            LogConfig { segment_bytes_max: 4 << 20, flush_policy: FlushPolicy::Interval, ..defaults.clone() };
        assert_eq!(config, expected);
        assert_eq!(apply_topic_configs(&defaults, &[]), Ok(defaults));
    }
}

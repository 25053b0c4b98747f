//! Which segments retention deletes: a pure decision over segment sizes and times.
//!
//! Rules (Kafka's, whole segments only, always a prefix of the log):
//! - **time** (`retention_ms`): a segment whose newest record is more than
//!   `retention_ms` older than now is deletable, oldest first, stopping at the first
//!   one that is not. A non-empty active segment past retention counts too: the log
//!   rolls it first, so an idle topic still empties.
//! - **size** (`retention_bytes`): delete the oldest *closed* segments while the log
//!   stays at least `retention_bytes` big without them.
//!
//! The larger of the two prefixes is deleted. Segments without timestamps
//! (`max_timestamp < 0`) never expire by time.
//!
//! Applying the decision (detaching segments, deleting files) lives in the log; the
//! files are deleted outside the log's lock so appends never wait for it.

use super::config::LogConfig;

/// What retention needs to know about one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentSummary {
    pub size_bytes: u64,
    pub max_timestamp: i64,
}

/// Number of leading segments to delete. `segments` ends with the active segment;
/// a result equal to `segments.len()` means "roll the active segment, then delete
/// them all".
pub(crate) fn deletable_prefix(segments: &[SegmentSummary], config: &LogConfig, now_ms: i64) -> usize {
    by_time(segments, config, now_ms).max(by_size(segments, config))
}

fn by_time(segments: &[SegmentSummary], config: &LogConfig, now_ms: i64) -> usize {
    let Some(retention_ms) = config.retention_ms else { return 0 };
    segments
        .iter()
        .take_while(|segment| segment.size_bytes > 0 && segment.max_timestamp >= 0)
        .take_while(|segment| now_ms.saturating_sub(segment.max_timestamp) > retention_ms)
        .count()
}

fn by_size(segments: &[SegmentSummary], config: &LogConfig) -> usize {
    let Some(retention_bytes) = config.retention_bytes else { return 0 };
    let closed = &segments[..segments.len().saturating_sub(1)];
    let mut excess = segments.iter().map(|segment| segment.size_bytes).sum::<u64>().saturating_sub(retention_bytes);
    let mut count = 0;
    for segment in closed {
        if segment.size_bytes > excess {
            break;
        }
        excess -= segment.size_bytes;
        count += 1;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn summary(size_bytes: u64, max_timestamp: i64) -> SegmentSummary {
        SegmentSummary { size_bytes, max_timestamp }
    }

    #[test]
    fn time_retention_stops_at_the_first_young_segment() {
        let config = LogConfig { retention_ms: Some(100), retention_bytes: None, ..LogConfig::default() };
        let segments = [summary(10, 0), summary(10, 950), summary(10, 0), summary(10, 990)];
        assert_eq!(deletable_prefix(&segments, &config, 1000), 1);
        assert_eq!(deletable_prefix(&segments, &config, 2000), 4, "an expired active segment is rolled and deleted");
    }

    #[test]
    fn empty_active_segment_is_never_deleted() {
        let config = LogConfig { retention_ms: Some(100), ..LogConfig::default() };
        assert_eq!(deletable_prefix(&[summary(10, 0), summary(0, -1)], &config, 1000), 1);
    }

    /// Property: size retention deletes a prefix of closed segments, keeps at least
    /// `retention_bytes`, and could not have deleted one more.
    #[test]
    fn size_retention_keeps_at_least_the_limit_and_deletes_maximally() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        for _ in 0..2000 {
            let segments: Vec<SegmentSummary> =
                (0..rng.gen_range(1..12)).map(|_| summary(rng.gen_range(0..1000), 0)).collect();
            let retention_bytes = rng.gen_range(0..6000);
            let config =
                LogConfig { retention_ms: None, retention_bytes: Some(retention_bytes), ..LogConfig::default() };
            let count = deletable_prefix(&segments, &config, 0);
            let total: u64 = segments.iter().map(|s| s.size_bytes).sum();
            let deleted: u64 = segments[..count].iter().map(|s| s.size_bytes).sum();
            assert!(count < segments.len(), "the active segment stays");
            assert!(total - deleted >= retention_bytes.min(total), "{segments:?} {retention_bytes} {count}");
            if count + 1 < segments.len() {
                assert!(total - deleted - segments[count].size_bytes < retention_bytes, "one more was deletable");
            }
        }
    }
}
